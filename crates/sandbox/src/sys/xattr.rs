//! Reading one extended attribute of an open file: how a review run's
//! layer marks a directory that replaced the project's (overlayfs writes
//! `user.overlay.opaque` in a user namespace). nix has no xattr calls.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;

/// The value of attribute `name` of the file open as `fd`, or None when it
/// has none (ENODATA) or the filesystem keeps none (ENOTSUP). At most 256
/// bytes: the attributes read here are short markers.
pub fn get(fd: BorrowedFd<'_>, name: &CStr) -> Result<Option<Vec<u8>>, Errno> {
    let mut buf = [0u8; 256];
    // SAFETY: fgetxattr writes at most `buf.len()` bytes into the live,
    // writable buffer, reads the NUL-terminated `name`, and touches no
    // other memory; `fd` is a valid descriptor for the call's duration.
    let len = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if len < 0 {
        return match Errno::last() {
            Errno::ENODATA | Errno::ENOTSUP => Ok(None),
            errno => Err(errno),
        };
    }
    let len = usize::try_from(len).map_err(|_| Errno::EOVERFLOW)?;
    Ok(Some(buf[..len.min(buf.len())].to_vec()))
}

/// Set attribute `name` of the file open as `fd` to `value`: how a
/// recipe's kept layer keeps the overlay's mark of a directory that
/// replaced the project's (see `crate::review::stack`).
pub fn set(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> Result<(), Errno> {
    // SAFETY: fsetxattr reads `value.len()` bytes from the live slice and
    // the NUL-terminated `name`, and writes no memory of ours; `fd` is a
    // valid descriptor for the call's duration.
    let rc = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc < 0 {
        return Err(Errno::last());
    }
    Ok(())
}
