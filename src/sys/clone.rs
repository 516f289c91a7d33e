//! `clone(2)` used like `fork(2)`: a new process with a copy of the address
//! space, entering new namespaces and returning a pidfd.

use std::os::fd::{FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::unistd::Pid;

/// Exit status of a cloned child whose code panicked: the status the CLI
/// gives a sandbox that failed to set up.
pub const CHILD_PANICKED: i32 = 125;

/// Clone a child that runs `child` in new namespaces and exits with its return
/// value (or [`CHILD_PANICKED`]). Returns the child's pid and a pidfd for it.
///
/// The raw system call (no stack argument) behaves like `fork`: the child
/// continues on a copy of the caller's stack. That is only sound when the
/// caller is single-threaded (another thread may hold the allocator's lock or
/// be half-way through a write), which the spawn path checks before calling.
/// glibc's fork handlers do not run and its cached thread id is stale in the
/// child, so `child` must not call `raise`, `abort` or pthread functions.
pub fn clone_into_namespaces(
    flags: CloneFlags,
    child: impl FnOnce() -> i32,
) -> nix::Result<(Pid, OwnedFd)> {
    let mut pidfd: libc::c_int = -1;
    let raw_flags = flags.bits() as libc::c_ulong
        | libc::CLONE_PIDFD as libc::c_ulong
        | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: with a null stack the kernel gives the child a copy-on-write copy
    // of this process, as fork does; CLONE_PIDFD writes one int to `pidfd`,
    // which outlives the call; the child and parent tid pointers and tls are
    // unused (0) because CLONE_*TID and CLONE_SETTLS are not set.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            raw_flags,
            0usize,
            &mut pidfd as *mut libc::c_int,
            0usize,
            0usize,
        )
    };
    match ret {
        -1 => Err(Errno::last()),
        0 => {
            // The child runs on a copy of the caller's stack: a panic that
            // unwound out of `child` would run the destructors of the
            // parent's frames (a run's Drop kills and sweeps) in the child.
            // It ends here instead, as a failed setup step does.
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child))
                .unwrap_or(CHILD_PANICKED);
            super::exit_now(code)
        }
        pid => {
            // SAFETY: the kernel just created this descriptor for us (CLONE_PIDFD);
            // nothing else owns it.
            let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            Ok((Pid::from_raw(pid as libc::pid_t), pidfd))
        }
    }
}
