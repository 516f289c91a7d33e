//! The new mount API (Linux 5.12+): detached mount trees that can be given
//! attributes recursively (read-only, nosuid, nodev, an id mapping) before
//! they are attached, and passed between processes as file descriptors.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

/// Mount attributes set on a whole detached tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct MountAttrs {
    /// MOUNT_ATTR_RDONLY.
    pub read_only: bool,
    /// MOUNT_ATTR_NOSUID.
    pub nosuid: bool,
    /// MOUNT_ATTR_NODEV.
    pub nodev: bool,
    /// MOUNT_ATTR_NOEXEC.
    pub noexec: bool,
}

/// `open_tree(path, OPEN_TREE_CLONE | AT_RECURSIVE)`: a detached copy of the
/// mount tree at `path`, submounts included.
pub fn clone_tree(path: &CStr) -> nix::Result<OwnedFd> {
    let flags =
        libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    let fd = Errno::result(fd)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

fn set_attr(tree: BorrowedFd<'_>, attr: &libc::mount_attr) -> nix::Result<()> {
    // SAFETY: `attr` is a valid mount_attr whose size we pass; the empty path
    // with AT_EMPTY_PATH makes the call act on `tree` itself.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Set `attrs` on every mount of the detached tree. Attributes can only be
/// added here: a flag the kernel locked on the source (for example nosuid on
/// a mount inherited from a less privileged namespace) stays set.
pub fn set_tree_attrs(tree: BorrowedFd<'_>, attrs: MountAttrs) -> nix::Result<()> {
    let mut set = 0u64;
    if attrs.read_only {
        set |= libc::MOUNT_ATTR_RDONLY;
    }
    if attrs.nosuid {
        set |= libc::MOUNT_ATTR_NOSUID;
    }
    if attrs.nodev {
        set |= libc::MOUNT_ATTR_NODEV;
    }
    if attrs.noexec {
        set |= libc::MOUNT_ATTR_NOEXEC;
    }
    let attr = libc::mount_attr {
        attr_set: set,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
    };
    set_attr(tree, &attr)
}

/// Give the detached tree the id mapping of the user namespace `userns`, so
/// that ids on disk are seen through that namespace's maps (an idmapped mount).
pub fn set_tree_idmap(tree: BorrowedFd<'_>, userns: BorrowedFd<'_>) -> nix::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    set_attr(tree, &attr)
}

/// Attach the detached tree `tree` at `target`.
pub fn attach_tree(tree: BorrowedFd<'_>, target: &CStr) -> nix::Result<()> {
    // SAFETY: both paths are valid NUL-terminated strings; with
    // MOVE_MOUNT_F_EMPTY_PATH the source is the descriptor itself.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    Errno::result(ret).map(drop)
}
