//! Filesystem access with another user's rights, on one thread.
//!
//! The kernel keeps credentials per thread; only the C library makes
//! `setuid`, `setgid` and `setgroups` apply to every thread of a process
//! (it signals them all). The raw system calls below change the calling
//! thread alone, which is what a multi-threaded daemon needs to look at a
//! caller's path as the caller would. A change of the filesystem uid from
//! 0 also drops the thread's filesystem capabilities (CAP_DAC_OVERRIDE,
//! CAP_DAC_READ_SEARCH, CAP_FOWNER and the like): the thread is the
//! caller for path lookups and permission checks.

use nix::errno::Errno;

/// Run `f` on a new thread whose filesystem uid, gid and supplementary
/// groups are `uid`, `gid` and `groups`; the thread ends with `f`, so its
/// credentials never reach another task. Fails closed: when any of the
/// three cannot be set (a daemon without CAP_SETUID/CAP_SETGID), `f` is not
/// run.
pub fn with_fs_identity<T: Send>(
    uid: u32,
    gid: u32,
    groups: &[u32],
    f: impl FnOnce() -> T + Send,
) -> Result<T, Errno> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                become_on_this_thread(uid, gid, groups)?;
                Ok(f())
            })
            .join()
            .unwrap_or(Err(Errno::EIO))
    })
}

fn become_on_this_thread(uid: u32, gid: u32, groups: &[u32]) -> Result<(), Errno> {
    let groups: Vec<libc::gid_t> = groups.to_vec();
    // SAFETY: setgroups reads `groups.len()` gid_t values from a live
    // buffer of exactly that many; the raw call changes this thread only.
    let set = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if set != 0 {
        return Err(Errno::last());
    }
    // setfsgid and setfsuid return the previous id and never fail by
    // their return value: success is checked by reading the id back
    // (-1 is never a valid id, so that call changes nothing).
    // SAFETY: plain integer arguments; this thread's credentials only.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) };
    // SAFETY: as above.
    let now_gid = unsafe { libc::syscall(libc::SYS_setfsgid, u32::MAX) };
    if now_gid != i64::from(gid) {
        return Err(Errno::EPERM);
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) };
    // SAFETY: as above.
    let now_uid = unsafe { libc::syscall(libc::SYS_setfsuid, u32::MAX) };
    if now_uid != i64::from(uid) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_path_only_root_may_read_is_hidden_from_the_thread() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::create_dir(dir.path().join("there")).unwrap();
        let look = |name: &str| {
            let path = dir.path().join(name);
            with_fs_identity(65534, 65534, &[65534], || {
                std::fs::canonicalize(&path).map_err(|e| e.kind())
            })
            .unwrap()
        };
        assert_eq!(look("there"), Err(std::io::ErrorKind::PermissionDenied));
        assert_eq!(look("missing"), Err(std::io::ErrorKind::PermissionDenied));
        // The calling thread kept its own rights.
        assert!(std::fs::canonicalize(dir.path().join("there")).is_ok());
    }
}
