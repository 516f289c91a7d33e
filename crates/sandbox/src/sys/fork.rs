//! `fork(2)` for a process that is single-threaded by construction (the
//! daemon's launcher), checked at the call.
//!
//! Beside the raw clone of [`super::clone`] on purpose: glibc's fork runs
//! its atfork handlers and renews the thread id it caches, so the child may
//! live a full life (start threads, take pthread locks, raise signals), as
//! a launched supervisor, a net process or a skill host does. The raw clone
//! gives what fork cannot (new namespaces, a pidfd, CLONE_INTO_CGROUP) to
//! children that only set themselves up and exec or exit. Both make the
//! one single-thread check, [`super::thread::require_single_thread`].

use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag};
use nix::unistd::{ForkResult, Pid};

/// Why no child was forked.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// Forking a multi-threaded process leaves the child with locks other
    /// threads held (the allocator's), so it is refused.
    #[error("this process has {0} threads; a child is forked only from a single-threaded process")]
    Threaded(u64),
    /// The thread count could not be read.
    #[error("reading the thread count (/proc/self/task): {0}")]
    Status(std::io::Error),
    /// fork failed.
    #[error("fork: {0}")]
    Fork(Errno),
}

/// [`fork_single_threaded`] for a child that holds nothing of this process's
/// descriptors but standard input, output and error and `keep`: a forked
/// server's child (a skill host, a run's supervisor) must not keep the
/// other children's sockets, whose peers then never see them close and
/// which would let it speak for them. `child` gets `keep` back, in order,
/// close-on-exec, at new numbers.
pub fn fork_keeping_only(
    keep: Vec<OwnedFd>,
    child: impl FnOnce(Vec<OwnedFd>) -> i32,
) -> Result<Pid, ForkError> {
    fork_single_threaded(move || {
        let cloned = super::clone::ClonedChild::new();
        let count = keep.len() as RawFd;
        let first: RawFd = 3;
        // Copies above the numbers they will take, so that placing one
        // never replaces another that is still to be placed.
        let mut lifted = Vec::with_capacity(keep.len());
        for fd in &keep {
            match super::fd::dup_at_or_above(fd.as_fd(), first + count) {
                Ok(copy) => lifted.push(copy),
                Err(_) => return super::clone::CHILD_PANICKED,
            }
        }
        for (target, fd) in (first..).zip(&lifted) {
            if cloned.place(fd.as_fd(), target).is_err() {
                return super::clone::CHILD_PANICKED;
            }
        }
        // Their numbers are replaced or closed below: no owner may close
        // them again.
        std::mem::forget(keep);
        std::mem::forget(lifted);
        if cloned.close_from((first + count) as u32).is_err() {
            return super::clone::CHILD_PANICKED;
        }
        let mut kept = Vec::with_capacity(count as usize);
        for target in first..first + count {
            // SAFETY: `place` put a descriptor at `target` above and
            // `close_from` left it open; the owners of what stood there
            // before were forgotten, so this is its only owner.
            let fd = unsafe { OwnedFd::from_raw_fd(target) };
            if nix::fcntl::fcntl(&fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).is_err() {
                return super::clone::CHILD_PANICKED;
            }
            kept.push(fd);
        }
        child(kept)
    })
}

/// Fork a child that runs `child` and exits with its return value (or
/// [`super::clone::CHILD_PANICKED`] if it panicked), without unwinding into
/// the parent's frames. Refused unless this process has exactly one thread.
pub fn fork_single_threaded(child: impl FnOnce() -> i32) -> Result<Pid, ForkError> {
    super::thread::require_single_thread().map_err(|refusal| match refusal {
        super::thread::NotSingleThreaded::Threads(threads) => ForkError::Threaded(threads),
        super::thread::NotSingleThreaded::Unreadable(errno) => ForkError::Status(errno.into()),
    })?;
    // SAFETY: the process has one thread (checked just above, and no thread
    // can be started between the check and the fork by this thread), so the
    // child's copy holds no lock another thread took; glibc's fork runs its
    // atfork handlers and resets its thread cache for the child.
    match unsafe { nix::unistd::fork() }.map_err(ForkError::Fork)? {
        ForkResult::Child => super::run_child_then_exit(child),
        ForkResult::Parent { child } => Ok(child),
    }
}

/// Have the program `command` starts killed (SIGKILL) when the thread
/// that spawns it ends, and not started at all if this process is gone by
/// then. For a spawn from the main thread, that is the end of this
/// process however it ends: a SIGTERM or SIGKILL runs no destructor, so a
/// kill-on-drop alone would leave the program running.
pub fn die_with_spawner(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let spawner = nix::unistd::getpid();
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are sound: prctl and getppid are bare
    // system calls, and the errors are built from an errno without
    // allocating.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // The spawner died before the line above: nothing would kill
            // this child any more.
            if nix::unistd::getppid() != spawner {
                return Err(std::io::Error::from(Errno::ESRCH));
            }
            Ok(())
        });
    }
}
