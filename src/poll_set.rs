//! One turn of a blocking loop's waiting: the descriptors it watches this
//! turn, each with the events it asks for, and the earliest deadline, in
//! one `poll(2)`, for every loop that blocks on descriptors by itself.
//! Rebuilt every turn, because what is watched changes with the run (a
//! closed report pipe, a broker with nothing to send, a job's pipes). The
//! epoll set in `sys::epoll` is for a Tokio runtime that watches a fixed
//! set.

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
        let slot = Slot(self.fds.len());
        self.fds.push(PollFd::new(fd, events));
        slot
    }

    /// Wait until a descriptor is ready or the earliest of `deadlines`
    /// passes (none: without a limit). A signal that interrupts the wait
    /// is a turn with nothing ready.
    pub(crate) fn wait(
        &mut self,
        deadlines: impl IntoIterator<Item = Option<Instant>>,
    ) -> nix::Result<()> {
        let wait = timeout_until(deadlines.into_iter().flatten().min(), Instant::now());
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

/// The wait from `now` until `deadline`, rounded up to poll's
/// millisecond: a turn that ends by its deadline finds it passed, where
/// rounding down woke up to a millisecond early and spun through
/// zero-length waits until it had. Past `i32::MAX` ms (24 days) it waits
/// that long and the loop's next turn waits the rest.
fn timeout_until(deadline: Option<Instant>, now: Instant) -> PollTimeout {
    let Some(at) = deadline else {
        return PollTimeout::NONE;
    };
    let micros = at.saturating_duration_since(now).as_micros();
    let millis = micros.div_ceil(1000).min(i32::MAX as u128) as i32;
    PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_readable_descriptor_is_ready_without_a_deadline() {
        let (read, write) = nix::unistd::pipe().unwrap();
        let (idle, _idle_write) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&write, b"x").unwrap();
        let mut set = PollSet::default();
        let quiet = set.add(idle.as_fd(), PollFlags::POLLIN);
        let loud = set.add(read.as_fd(), PollFlags::POLLIN);
        // No deadline: only the ready descriptor can end this wait.
        set.wait([None]).unwrap();
        assert!(set.events(Some(loud)).contains(PollFlags::POLLIN));
        assert!(!set.ready(Some(quiet)));
        assert!(!set.ready(None));
    }

    #[test]
    fn an_already_ready_descriptor_ends_the_wait_before_a_far_deadline() {
        let (read, write) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&write, b"x").unwrap();
        let far = Instant::now().checked_add(Duration::from_secs(3600));
        let mut set = PollSet::default();
        let slot = set.add(read.as_fd(), PollFlags::POLLIN);
        // Several turns in a row: a ready descriptor is reported every
        // time, never an empty turn.
        for _ in 0..3 {
            set.wait([far]).unwrap();
            assert!(set.ready(Some(slot)));
        }
    }

    #[test]
    fn with_nothing_ready_the_wait_ends_once_the_earliest_deadline_has_passed() {
        let (read, _write) = nix::unistd::pipe().unwrap();
        let near = Instant::now() + Duration::from_millis(20);
        let far = near.checked_add(Duration::from_secs(3600));
        let mut set = PollSet::default();
        let slot = set.add(read.as_fd(), PollFlags::POLLIN);
        set.wait([None, far, Some(near), None]).unwrap();
        assert!(!set.ready(Some(slot)));
        assert!(Instant::now() >= near, "the wait ended before its deadline");
    }

    #[test]
    fn the_wait_is_rounded_up_to_the_millisecond_and_saturates() {
        let now = Instant::now();
        let ms = |t: PollTimeout| i32::from(t);
        assert_eq!(timeout_until(None, now), PollTimeout::NONE);
        assert_eq!(ms(timeout_until(Some(now), now)), 0);
        let past = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
        assert_eq!(ms(timeout_until(Some(past), now)), 0);
        let soon = now + Duration::from_micros(1_500);
        assert_eq!(ms(timeout_until(Some(soon), now)), 2);
        let exact = now + Duration::from_millis(50);
        assert_eq!(ms(timeout_until(Some(exact), now)), 50);
        let year = now + Duration::from_secs(365 * 24 * 3600);
        assert_eq!(timeout_until(Some(year), now), PollTimeout::MAX);
    }

    #[test]
    fn a_deadline_already_passed_is_a_turn_that_does_not_wait() {
        let (read, _write) = nix::unistd::pipe().unwrap();
        let mut set = PollSet::default();
        let slot = set.add(read.as_fd(), PollFlags::POLLIN);
        set.wait([Some(Instant::now())]).unwrap();
        assert!(!set.ready(Some(slot)));
    }

    #[test]
    fn a_closed_peer_reports_hangup() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(theirs);
        let mut set = PollSet::default();
        let slot = set.add(ours.as_fd(), PollFlags::POLLIN);
        set.wait([None]).unwrap();
        assert!(set.events(Some(slot)).contains(PollFlags::POLLHUP));

        let (read, write) = nix::unistd::pipe().unwrap();
        drop(write);
        let mut set = PollSet::default();
        let slot = set.add(read.as_fd(), PollFlags::POLLIN);
        set.wait([None]).unwrap();
        assert!(set.events(Some(slot)).contains(PollFlags::POLLHUP));
    }
}
