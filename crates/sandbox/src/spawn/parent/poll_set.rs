//! One turn of a supervision loop's waiting: the descriptors it watches
//! this turn, each with the events it asks for, and the earliest deadline,
//! in one `poll(2)`. Rebuilt every turn, because what is watched changes
//! with the run (a closed report pipe, a broker with nothing to send, a
//! job's pipes). The epoll set in `sys::epoll` is for a Tokio runtime
//! that watches a fixed set; this loop blocks on its own.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// Where a descriptor sits in a [`PollSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(usize);

/// Descriptors to wait on this turn.
#[derive(Default)]
pub(crate) struct PollSet<'fd> {
    fds: Vec<PollFd<'fd>>,
}

impl<'fd> PollSet<'fd> {
    /// Watch `fd` for `events`.
    pub(crate) fn add(&mut self, fd: BorrowedFd<'fd>, events: PollFlags) -> Slot {
        self.fds.push(PollFd::new(fd, events));
        Slot(self.fds.len() - 1)
    }

    /// Wait until a descriptor is ready or the earliest of `deadlines`
    /// passes (none: without a limit). A signal that interrupts the wait
    /// is a turn with nothing ready.
    pub(crate) fn wait(
        &mut self,
        deadlines: impl IntoIterator<Item = Option<Instant>>,
    ) -> nix::Result<()> {
        let wait = match deadlines.into_iter().flatten().min() {
            None => PollTimeout::NONE,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now()).as_millis();
                PollTimeout::try_from(left.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
            }
        };
        match poll(&mut self.fds, wait) {
            Ok(_) | Err(Errno::EINTR) => Ok(()),
            Err(errno) => Err(errno),
        }
    }

    /// What happened on `slot` (nothing for a slot not added this turn).
    pub(crate) fn events(&self, slot: Option<Slot>) -> PollFlags {
        slot.and_then(|Slot(i)| self.fds.get(i))
            .and_then(PollFd::revents)
            .unwrap_or(PollFlags::empty())
    }

    /// Whether anything happened on `slot`.
    pub(crate) fn ready(&self, slot: Option<Slot>) -> bool {
        !self.events(slot).is_empty()
    }
}
