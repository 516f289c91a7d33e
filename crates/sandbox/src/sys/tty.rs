//! Terminal ioctls nix has no safe wrapper for.

use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;

/// Whether the terminal is in exclusive mode (TIOCGEXCL, Linux 3.8): then
/// any later open of it fails with EBUSY, the person's shell included.
pub fn is_exclusive(tty: BorrowedFd<'_>) -> nix::Result<bool> {
    let mut exclusive: libc::c_int = 0;
    // SAFETY: TIOCGEXCL writes one int through the pointer, which points at
    // a live local.
    let ret = unsafe { libc::ioctl(tty.as_raw_fd(), libc::TIOCGEXCL, &mut exclusive) };
    Errno::result(ret).map(|_| exclusive != 0)
}

/// Leave exclusive mode (TIOCNXCL).
pub fn clear_exclusive(tty: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: TIOCNXCL takes no argument and only clears a flag of the tty.
    let ret = unsafe { libc::ioctl(tty.as_raw_fd(), libc::TIOCNXCL) };
    Errno::result(ret).map(drop)
}
