//! The calling thread's own credentials. The libc wrappers of setgroups
//! (like setuid and setgid) change every thread of the process; the system
//! call changes only the caller's, which is what a change for the length
//! of one call on one thread needs.

use nix::errno::Errno;
use nix::unistd::Gid;

/// Set the supplementary groups of the calling thread only (needs
/// CAP_SETGID in its user namespace).
pub fn set_thread_groups(groups: &[Gid]) -> nix::Result<()> {
    let raw: Vec<libc::gid_t> = groups.iter().map(|g| g.as_raw()).collect();
    // SAFETY: the raw setgroups system call reads `raw.len()` gids from
    // `raw`'s buffer, which lives until the call returns; a null pointer
    // with a zero length clears the list without reading anything.
    let result = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            raw.len() as libc::size_t,
            if raw.is_empty() {
                std::ptr::null()
            } else {
                raw.as_ptr()
            },
        )
    };
    Errno::result(result).map(drop)
}
