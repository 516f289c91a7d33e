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
//! whole life. A short-lived one exits first and its children are reaped
//! by whoever adopts them.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, PoisonError};

use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};

use super::clone::ChildStack;

/// A child not reaped yet, and the stack it ran on when it shares this
/// process's memory: unmapped only once the child is gone, since until the
/// kernel has ended it the child may still be running on it.
struct Unreaped {
    pidfd: OwnedFd,
    _stack: Option<ChildStack>,
}

static UNREAPED: Mutex<Vec<Unreaped>> = Mutex::new(Vec::new());

/// Reap `pidfd`'s child once it has exited, without waiting now.
pub fn later(pidfd: OwnedFd) {
    keep(Unreaped {
        pidfd,
        _stack: None,
    });
}

/// [`later`], for a child running on `stack` in this process's memory.
pub(super) fn later_with_stack(pidfd: OwnedFd, stack: ChildStack) {
    keep(Unreaped {
        pidfd,
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

/// How many children [`later`] holds now.
pub fn pending() -> usize {
    UNREAPED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len()
}
