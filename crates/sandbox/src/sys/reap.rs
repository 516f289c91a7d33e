//! Children reaped later, without waiting for them: a dismissed janitor, a
//! killed namespace holder ([`super::clone::clone_idle`]). Waiting for
//! their exit put a hand-over to another process on the run's path (it must
//! be scheduled, read or die, and exit: 0.2 to 0.5 ms on an idle 2-core
//! machine, milliseconds on a loaded one) for nothing the run needs.
//!
//! Kept by pidfd, so a child whose pid was reused after someone else reaped
//! it (a launcher's `waitpid(-1)`) is never waited for in its place, and
//! reaped without waiting whenever a child is added or [`finished`] is
//! called: a long-lived process (`sandbox serve`, a library caller) that
//! runs many sandboxes would otherwise keep each one as a zombie for its
//! whole life. A short-lived one waits for those that end promptly just
//! before it exits ([`wait_for_prompt`]), when they are already gone: an
//! orphan is reaped only by an init that reaps (a container's first
//! process often does not), so leaving one behind per run would pile up
//! zombies there.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, PoisonError};

use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};

use super::stack::ChildStack;

/// A child not reaped yet, and the stack it ran on when it shares this
/// process's memory: unmapped only once the child is gone, since until the
/// kernel has ended it the child may still be running on it.
struct Unreaped {
    pidfd: OwnedFd,
    /// Ends at once (dismissed, killed), so [`wait_for_prompt`] waits for it.
    prompt: bool,
    _stack: Option<ChildStack>,
}

static UNREAPED: Mutex<Vec<Unreaped>> = Mutex::new(Vec::new());

/// Reap `pidfd`'s child, which is ending now, once it has exited, without
/// waiting for it now.
pub fn later(pidfd: OwnedFd) {
    keep(Unreaped {
        pidfd,
        prompt: true,
        _stack: None,
    });
}

/// [`later`], for a child that may go on for a while (a janitor left to
/// remove a busy cgroup): [`wait_for_prompt`] does not wait for it.
pub fn when_done(pidfd: OwnedFd) {
    keep(Unreaped {
        pidfd,
        prompt: false,
        _stack: None,
    });
}

/// [`later`] (`prompt`: it is ending now) or [`when_done`], for a child
/// running on `stack` in this process's memory.
pub(super) fn keep_with_stack(pidfd: OwnedFd, stack: ChildStack, prompt: bool) {
    keep(Unreaped {
        pidfd,
        prompt,
        _stack: Some(stack),
    });
}

fn keep(child: Unreaped) {
    UNREAPED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(child);
    finished();
}

/// Reap every child handed to [`later`] that has exited (or that someone
/// else reaped), without waiting for the others.
pub fn finished() {
    UNREAPED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|child| {
            matches!(
                waitid(
                    Id::PIDFd(child.pidfd.as_fd()),
                    WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG
                ),
                Ok(WaitStatus::StillAlive)
            )
        });
}

/// Wait for every child handed to [`later`] (those that end promptly),
/// and reap the others that have ended: for a process about to exit, or
/// about to wait long for something else (a warm sandbox's supervisor,
/// whose killed namespace holder would stay a zombie all that time).
pub fn wait_for_prompt() {
    let unreaped = UNREAPED.lock().unwrap_or_else(PoisonError::into_inner);
    for child in unreaped.iter().filter(|child| child.prompt) {
        let _ = waitid(Id::PIDFd(child.pidfd.as_fd()), WaitPidFlag::WEXITED);
    }
    drop(unreaped);
    finished();
}
