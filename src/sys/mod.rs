//! The only module with `unsafe`: thin, documented wrappers over system calls
//! that no safe crate covers the way the spawn path needs. Everything here
//! returns `nix::Result` (an errno) and leaves policy to the callers.

pub mod clone;
pub mod fd;
pub mod fork;
pub mod mount_api;
pub mod net;
pub mod probe;
pub mod proctitle;
pub mod seccomp;
pub mod signal;
pub mod tty;

/// End the current process at once, without running atexit handlers or
/// flushing stdio buffers that were copied from the parent at clone time.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer, cannot fail and never returns.
    unsafe { libc::_exit(code) }
}
