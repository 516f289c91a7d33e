//! The only module with `unsafe`: thin, documented wrappers over system calls
//! that no safe crate covers the way the spawn path needs. Everything here
//! returns `nix::Result` (an errno) and leaves policy to the callers.

pub mod clone;
pub mod creds;
#[cfg(feature = "tokio")]
pub mod epoll;
pub mod fd;
pub mod fork;
pub mod fs_identity;
pub mod mount_api;
pub mod net;
pub mod probe;
pub mod proctitle;
pub mod reap;
pub mod seccomp;
pub mod seccomp_notify;
pub mod signal;
pub mod stack;
pub mod thread;
pub mod tty;
pub mod xattr;

/// End the current process at once, without running atexit handlers or
/// flushing stdio buffers that were copied from the parent at clone time.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer, cannot fail and never returns.
    unsafe { libc::_exit(code) }
}

/// Run `child` in a process just copied by fork or clone, then `_exit` with
/// its status: [`clone::CHILD_PANICKED`] if it panicked. The copy runs on the
/// parent's stack, so a panic that unwound out of `child` would run the
/// destructors of the parent's frames (a run's Drop kills and sweeps) in the
/// child; it stops here instead, as a failed setup step does. `_exit`, not
/// `exit`: stdio buffers and atexit handlers belong to the parent.
fn run_child_then_exit(child: impl FnOnce() -> i32) -> ! {
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child))
        .unwrap_or(clone::CHILD_PANICKED);
    exit_now(code)
}
