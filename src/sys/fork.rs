//! `fork(2)` for a process that is single-threaded by construction (the
//! daemon's launcher), checked at the call.

use nix::errno::Errno;
use nix::unistd::{ForkResult, Pid};

/// Why no child was forked.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// Forking a multi-threaded process leaves the child with locks other
    /// threads held (the allocator's), so it is refused.
    #[error("this process has {0} threads; a child is forked only from a single-threaded process")]
    Threaded(u64),
    /// The thread count could not be read.
    #[error("reading /proc/self/status: {0}")]
    Status(std::io::Error),
    /// fork failed.
    #[error("fork: {0}")]
    Fork(Errno),
}

fn thread_count() -> Result<u64, ForkError> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(ForkError::Status)?;
    Ok(status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|value| value.trim().parse::<u64>().ok())
        .unwrap_or(0))
}

/// [`fork_single_threaded`], with the child given the handle through which
/// it may rearrange and close the descriptors it copied (see
/// [`super::clone::ClonedChild`]: the same contract holds, the child never
/// returns into the parent's frames).
pub fn fork_single_threaded_with(
    child: impl FnOnce(&super::clone::ClonedChild) -> i32,
) -> Result<Pid, ForkError> {
    fork_single_threaded(|| child(&super::clone::ClonedChild::new()))
}

/// Fork a child that runs `child` and exits with its return value (or
/// [`super::clone::CHILD_PANICKED`] if it panicked), without unwinding into
/// the parent's frames. Refused unless this process has exactly one thread.
pub fn fork_single_threaded(child: impl FnOnce() -> i32) -> Result<Pid, ForkError> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(ForkError::Threaded(threads));
    }
    // SAFETY: the process has one thread (checked just above, and no thread
    // can be started between the check and the fork by this thread), so the
    // child's copy holds no lock another thread took; glibc's fork runs its
    // atfork handlers and resets its thread cache for the child.
    match unsafe { nix::unistd::fork() }.map_err(ForkError::Fork)? {
        ForkResult::Child => super::run_child_then_exit(child),
        ForkResult::Parent { child } => Ok(child),
    }
}
