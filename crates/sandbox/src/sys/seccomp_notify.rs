//! Seccomp user notification, as `sandbox learn` uses it: the payload
//! installs its learning filter and hands the listener to the supervisor,
//! which receives each notified call, reads the path it names from the
//! caller's memory, and answers as the profile's own filter would:
//! "continue" where that allows (Landlock and the view still decide), its
//! errno where it refuses.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

/// One observed system call.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    /// The kernel's id for this call, for the answer.
    pub id: u64,
    /// The caller's pid, in the supervisor's pid namespace.
    pub pid: u32,
    /// The system call number.
    pub nr: i32,
    /// The caller's audit architecture (seccomp_data.arch).
    pub arch: u32,
    /// Its six arguments.
    pub args: [u64; 6],
}

/// Set no_new_privs and install `program` with a listener: calls its
/// verdict sends to USER_NOTIF wait for an answer on the returned
/// descriptor (close-on-exec, as the kernel creates it).
pub fn install_with_listener(program: &[libc::sock_filter]) -> nix::Result<OwnedFd> {
    nix::sys::prctl::set_no_new_privs()?;
    let fd = super::seccomp::set_mode_filter(
        program,
        libc::c_ulong::from(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER),
    )?;
    let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Take the next pending notification (blocks when there is none: poll
/// the listener first). ENOENT: the caller went away before it was read.
pub fn receive(listener: BorrowedFd<'_>) -> nix::Result<Notification> {
    // The kernel refuses a buffer that is not zeroed.
    // SAFETY: seccomp_notif is plain data, for which all-zero is valid.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV writes one seccomp_notif into the buffer we own.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut notif as *mut libc::seccomp_notif,
        )
    };
    Errno::result(ret)?;
    Ok(Notification {
        id: notif.id,
        pid: notif.pid,
        nr: notif.data.nr,
        arch: notif.data.arch,
        args: notif.data.args,
    })
}

/// Whether the call `id` still waits: checked after reading the caller's
/// memory, so what was read belongs to that call (the pid was not reused).
pub fn still_waiting(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: ID_VALID reads one u64 from the pointer, which we own.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &id as *const u64,
        )
    };
    ret == 0
}

/// Let the call go on as if no filter had stopped it. ENOENT: the caller
/// went away (a signal) meanwhile, which is no error of the observer.
pub fn continue_call(listener: BorrowedFd<'_>, id: u64) -> nix::Result<()> {
    respond(
        listener,
        libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        },
    )
}

/// Fail the call `id` with `errno` (positive), as a filter's
/// SECCOMP_RET_ERRNO would. ENOENT: the caller went away meanwhile.
pub fn fail_call(listener: BorrowedFd<'_>, id: u64, errno: i32) -> nix::Result<()> {
    respond(
        listener,
        libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno,
            flags: 0,
        },
    )
}

fn respond(listener: BorrowedFd<'_>, mut resp: libc::seccomp_notif_resp) -> nix::Result<()> {
    // SAFETY: SEND reads one seccomp_notif_resp from the buffer we own.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp as *mut libc::seccomp_notif_resp,
        )
    };
    match Errno::result(ret) {
        Ok(_) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(errno),
    }
}

/// The NUL-terminated string at `address` in process `pid`, at most
/// `max` bytes; None when it cannot be read (the process went away, the
/// address is not mapped) or has no NUL within `max`. Read page by page,
/// so a string ending just before an unmapped page is still read.
pub fn read_string(pid: u32, address: u64, max: usize) -> Option<Vec<u8>> {
    use nix::sys::uio::{process_vm_readv, RemoteIoVec};
    const PAGE: u64 = 4096;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).ok()?);
    let mut out = Vec::new();
    let mut at = address;
    while out.len() < max {
        let chunk = usize::try_from(PAGE - at % PAGE).ok()?.min(max - out.len());
        let mut buf = vec![0u8; chunk];
        let remote = [RemoteIoVec {
            base: usize::try_from(at).ok()?,
            len: chunk,
        }];
        let n = process_vm_readv(pid, &mut [std::io::IoSliceMut::new(&mut buf)], &remote).ok()?;
        if n == 0 {
            return None;
        }
        if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at = at.checked_add(n as u64)?;
    }
    None
}
