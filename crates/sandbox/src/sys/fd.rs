//! File-descriptor hygiene for the child, and the few places where a
//! descriptor number becomes an owned or borrowed descriptor.
//!
//! Rust's I/O safety rule: a descriptor number is used only through its one
//! owner (an `OwnedFd`, a `File`) or a borrow of it. The functions here that
//! could break that rule when called with an arbitrary number are `unsafe fn`
//! with their contract; the safe ones either create the descriptor they
//! return, check what they adopt, or act only on the standard streams.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag};

/// Mark every descriptor from `first` upwards close-on-exec (`close_range`
/// with CLOSE_RANGE_CLOEXEC, Linux 5.11). Descriptors the supervisor's own
/// parent leaked to it (without CLOEXEC) must not reach the sandboxed program.
///
/// Safe with any `first`: it closes nothing, so every owner in this process
/// keeps a valid descriptor; only what a later `execve` inherits changes.
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
///
/// # Safety
///
/// `fd` was installed in this process by the `recvmsg` whose control message
/// named it, and it is adopted once: no other owner of the number exists,
/// and none is made later from the same message.
pub unsafe fn adopt_received(fd: RawFd) -> OwnedFd {
    // SAFETY: by this function's contract `fd` is open and has no owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Hand each descriptor a received message carried (SCM_RIGHTS) to `each`,
/// owned. The message is consumed, so the same descriptors cannot be
/// adopted twice.
pub fn for_each_received_fd<S>(
    message: nix::sys::socket::RecvMsg<'_, '_, S>,
    mut each: impl FnMut(OwnedFd),
) {
    use nix::sys::socket::ControlMessageOwned;
    let Ok(cmsgs) = message.cmsgs() else { return };
    for cmsg in cmsgs {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            for fd in received {
                // SAFETY: the kernel installed this number in this process
                // during the recvmsg that produced `message`, which is taken
                // by value: this loop is the only place it is adopted.
                each(unsafe { adopt_received(fd) });
            }
        }
    }
}

/// A new close-on-exec copy of `fd` numbered `lowest` or above
/// (F_DUPFD_CLOEXEC): to keep a descriptor clear of numbers that mean
/// something in a run (0-2 stdio, 3 the broker).
pub fn dup_at_or_above(fd: BorrowedFd<'_>, lowest: RawFd) -> nix::Result<OwnedFd> {
    let copy = nix::fcntl::fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(lowest))?;
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) just created this descriptor; nothing
    // else has seen its number.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
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

/// Standard input, output or error (0, 1 or 2) as a borrowed descriptor;
/// None for any other number.
///
/// The standard streams belong to the whole process: std's `Stdin`,
/// `Stdout` and `Stderr` borrow them the same way, for as long as the
/// program runs, and the supervisor keeps them open (see
/// [`ensure_stdio_open`]).
pub fn standard_stream(fd: RawFd) -> Option<BorrowedFd<'static>> {
    match fd {
        // SAFETY: 0, 1 and 2 are never owned by an OwnedFd of this crate and
        // are borrowed process-wide exactly as std's stdio handles do.
        0..=2 => Some(unsafe { BorrowedFd::borrow_raw(fd) }),
        _ => None,
    }
}

/// `dup2(fd, target)`: the copy at `target` is not close-on-exec.
///
/// # Safety
///
/// Whatever was open at `target` is closed by this call: no owner of that
/// number (an `OwnedFd`, a `File`, a borrow of one) may be used or dropped
/// afterwards, since it would then act on the copy, or close it.
pub unsafe fn dup_onto(fd: BorrowedFd<'_>, target: RawFd) -> nix::Result<()> {
    if fd.as_raw_fd() == target {
        // dup2 onto itself would keep CLOEXEC set; clear it instead.
        return nix::fcntl::fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map(drop);
    }
    // SAFETY: dup2 takes two integers; replacing `target` is the intent and
    // the caller vouches that nothing else uses that number.
    let ret = unsafe { libc::dup2(fd.as_raw_fd(), target) };
    Errno::result(ret).map(drop)
}

/// Point standard input, output or error (`stream`, 0 to 2) at `fd`, not
/// close-on-exec. EBADF for any other number.
pub fn redirect_standard_stream(fd: BorrowedFd<'_>, stream: RawFd) -> nix::Result<()> {
    if !(0..=2).contains(&stream) {
        return Err(Errno::EBADF);
    }
    // SAFETY: 0 to 2 have no owner in this process (see `standard_stream`):
    // every user of them borrows them process-wide, and replacing the file
    // behind a standard stream is what the streams allow.
    unsafe { dup_onto(fd, stream) }
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

/// Numbers already taken by [`adopt_inherited`].
static ADOPTED_INHERITED: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

/// Take ownership of a descriptor this process inherited through `execve`
/// (a `--report-fd`, the broker channel inside a sandbox, the daemon's
/// activation socket, a launcher's control socket), named by a number from
/// the environment or the command line; the standard streams are refused
/// (EBADF), they are borrowed through [`standard_stream`] instead.
///
/// It is checked to be one that no owner in this process can have: open
/// and not close-on-exec (every descriptor this crate and std create is, so
/// an inherited one is the only kind without the flag), and not adopted
/// before. It is made close-on-exec on the way, so a second call for the
/// same number fails too.
pub fn adopt_inherited(fd: RawFd) -> nix::Result<OwnedFd> {
    if fd <= 2 {
        return Err(Errno::EBADF);
    }
    let mut adopted = ADOPTED_INHERITED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if adopted.contains(&fd) {
        return Err(Errno::EBADF);
    }
    // SAFETY: F_GETFD only reads the descriptor's flags; an unopened number
    // fails with EBADF.
    let flags = Errno::result(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    if flags & libc::FD_CLOEXEC != 0 {
        return Err(Errno::EBADF);
    }
    // SAFETY: F_SETFD sets a flag on the descriptor and touches no memory.
    Errno::result(unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    adopted.push(fd);
    // SAFETY: open, inherited through execve (no descriptor this process made
    // lacks close-on-exec) and claimed once (the list above): no other owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// [`adopt_inherited`] for a socket, and standard input when it is one (a
/// skill's control socket): ENOTSOCK for anything else. Standard input is
/// taken from the process: nothing reads it as a stream afterwards.
pub fn adopt_inherited_socket(fd: RawFd) -> nix::Result<OwnedFd> {
    let is_socket = |fd: BorrowedFd<'_>| -> nix::Result<bool> {
        let st = nix::sys::stat::fstat(fd)?;
        Ok(st.st_mode & libc::S_IFMT == libc::S_IFSOCK)
    };
    if fd == 0 {
        let stdin = standard_stream(0).ok_or(Errno::EBADF)?;
        if !is_socket(stdin)? {
            return Err(Errno::ENOTSOCK);
        }
        // Moved off 0, which then reads /dev/null: the standard streams
        // stay open for whatever assumes they are, and the socket's only
        // copy is the owned one, so dropping it ends the connection.
        let socket = dup_at_or_above(stdin, 3)?;
        let null = nix::fcntl::open(
            c"/dev/null",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        redirect_standard_stream(null.as_fd(), 0)?;
        return Ok(socket);
    }
    let owned = adopt_inherited(fd)?;
    if !is_socket(owned.as_fd())? {
        return Err(Errno::ENOTSOCK);
    }
    Ok(owned)
}

/// Close every descriptor from `first` upwards (`close_range`, Linux 5.9).
/// For a helper process that must hold nothing of its parent's: a copy of a
/// pipe's write end would keep its reader from ever seeing end-of-file.
///
/// # Safety
///
/// Every descriptor from `first` up is closed under its owners: none of them
/// (an `OwnedFd`, a `File`, a borrow) may be used or dropped afterwards. That
/// holds in a process copied by clone or fork whose copies of the parent's
/// objects are left behind by `_exit`, once nothing it still uses is at or
/// above `first`.
pub unsafe fn close_from(first: u32) -> nix::Result<()> {
    // SAFETY: close_range takes plain integers; the caller vouches that no
    // owner of a descriptor from `first` up is used afterwards.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) };
    Errno::result(ret).map(drop)
}

/// Execute `program` with `argv` and this process's environment, with each
/// `(fd, number)` of `placed` open at `number` (not close-on-exec) in the
/// new program: how `sandbox oci` hands runc the container's broker channel
/// at the number `--preserve-fds` names. Never returns: if execve fails,
/// the message is printed and the process exits with 125, because a
/// number placed here may have replaced one an owner in this process still
/// thinks it holds, and no such owner may run again.
pub fn exec_with_placed(
    program: &std::ffi::CStr,
    argv: &[std::ffi::CString],
    placed: &[(BorrowedFd<'_>, RawFd)],
) -> ! {
    // Copies above every target first: placing one descriptor must not
    // replace another that is still to be placed (the memory file at 3
    // that the broker channel is about to take).
    let above = placed.iter().map(|(_, n)| *n).max().unwrap_or(2) + 1;
    let mut lifted = Vec::with_capacity(placed.len());
    for (fd, number) in placed {
        match dup_at_or_above(*fd, above) {
            Ok(copy) => lifted.push((copy, *number)),
            Err(errno) => {
                eprintln!("sandbox: placing a descriptor at {number} for {program:?}: {errno}");
                std::process::exit(125);
            }
        }
    }
    for (fd, number) in &lifted {
        // SAFETY: this process executes a new image (or exits) right after
        // the loop; nothing of it uses a replaced number again.
        if let Err(errno) = unsafe { dup_onto(fd.as_fd(), *number) } {
            eprintln!("sandbox: placing a descriptor at {number} for {program:?}: {errno}");
            std::process::exit(125);
        }
    }
    let errno = match nix::unistd::execv(program, argv) {
        Err(errno) => errno,
        Ok(never) => match never {},
    };
    eprintln!("sandbox: cannot execute {program:?}: {errno}");
    std::process::exit(125)
}
