//! File-descriptor hygiene for the child.

use nix::errno::Errno;

/// Mark every descriptor from `first` upwards close-on-exec (`close_range`
/// with CLOSE_RANGE_CLOEXEC, Linux 5.11). Descriptors the supervisor's own
/// parent leaked to it (without CLOEXEC) must not reach the sandboxed program.
pub fn cloexec_from(first: u32) -> nix::Result<()> {
    // SAFETY: close_range takes plain integers; with CLOSE_RANGE_CLOEXEC it only
    // sets a flag on descriptors and closes nothing this process still uses.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    Errno::result(ret).map(drop)
}

/// Take ownership of a descriptor that SCM_RIGHTS just installed in this
/// process (nix hands them over as raw integers).
pub fn adopt_received(fd: std::os::fd::RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: the kernel installed `fd` in this process while receiving the
    // message; nothing else has seen it, so this is its only owner.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// Apply Linux securebits (PR_SET_SECUREBITS) so that uid 0 inside the
/// sandbox never regains capabilities through execve or setuid.
pub fn lock_securebits() -> nix::Result<()> {
    // SECBIT_NOROOT | _LOCKED, SECBIT_NO_SETUID_FIXUP | _LOCKED,
    // SECBIT_KEEP_CAPS_LOCKED, SECBIT_NO_CAP_AMBIENT_RAISE | _LOCKED.
    const BITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    // SAFETY: prctl with PR_SET_SECUREBITS takes one integer argument.
    let ret = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, BITS, 0, 0, 0) };
    Errno::result(ret).map(drop)
}

/// Borrow a raw descriptor for the duration of one call.
pub fn borrow<'a>(fd: std::os::fd::RawFd) -> std::os::fd::BorrowedFd<'a> {
    // SAFETY: callers pass a descriptor they own (an OwnedFd's raw value or a
    // standard stream) and use the borrow only within that ownership.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}

/// `dup2(fd, target)`: the copy at `target` is not close-on-exec.
pub fn dup_onto(fd: std::os::fd::RawFd, target: std::os::fd::RawFd) -> nix::Result<()> {
    // SAFETY: dup2 takes two integers; replacing `target` is the intent.
    let ret = unsafe { libc::dup2(fd, target) };
    Errno::result(ret).map(drop)
}

/// Make sure descriptors 0, 1 and 2 are open (on /dev/null if they were
/// closed), so that no descriptor the supervisor creates later lands on a
/// standard stream number and leaks into the payload as its stdin or stdout.
pub fn ensure_stdio_open() -> nix::Result<()> {
    for fd in 0..3 {
        // SAFETY: F_GETFD only queries the descriptor's flags.
        let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1;
        if !open {
            // The lowest free number is `fd`, since 0..fd are open.
            let null = nix::fcntl::open(
                c"/dev/null",
                nix::fcntl::OFlag::O_RDWR,
                nix::sys::stat::Mode::empty(),
            )?;
            std::mem::forget(null);
        }
    }
    Ok(())
}

/// Take ownership of an inherited descriptor named by the environment (the
/// broker channel inside a sandbox), after checking it is an open socket.
pub fn adopt_inherited_socket(fd: std::os::fd::RawFd) -> nix::Result<std::os::fd::OwnedFd> {
    if fd < 0 {
        return Err(Errno::EBADF);
    }
    let st = nix::sys::stat::fstat(borrow(fd))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(Errno::ENOTSOCK);
    }
    Ok(adopt_received(fd))
}

/// Close every descriptor from `first` upwards (`close_range`, Linux 5.9).
/// For a helper process that must hold nothing of its parent's: a copy of a
/// pipe's write end would keep its reader from ever seeing end-of-file.
pub fn close_from(first: u32) -> nix::Result<()> {
    // SAFETY: close_range takes plain integers; the caller owns every
    // descriptor from `first` up and uses none of them afterwards.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) };
    Errno::result(ret).map(drop)
}
