//! One turn of a blocking loop's waiting: the descriptors it watches this
//! turn, each with the events it asks for, and the earliest deadline, in
//! one `poll(2)`, for every loop that blocks on descriptors by itself.
//! Rebuilt every turn, because what is watched changes with the run (a
//! closed report pipe, a broker with nothing to send, a job's pipes). The
//! epoll set in `sys::epoll` is for a Tokio runtime that watches a fixed
//! set.
//!
//! The sandbox's init waits here between clone and exec, so nothing here
//! (outside the tests) unwraps, indexes or overflows, and a wait without
//! a deadline does not even read the clock. Its one allocation, the list
//! of descriptors, is the one init's own loop made before; the clone is
//! only made from a single-threaded process, so no allocator lock is held.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// Where a descriptor sits in a [`PollSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(usize);

/// Descriptors to wait on this turn.
#[derive(Default)]
pub struct PollSet<'fd> {
    fds: Vec<PollFd<'fd>>,
}

impl<'fd> PollSet<'fd> {
    /// Watch `fd` for `events`.
    pub fn add(&mut self, fd: BorrowedFd<'fd>, events: PollFlags) -> Slot {
        let slot = Slot(self.fds.len());
        self.fds.push(PollFd::new(fd, events));
        slot
    }

    /// Wait until a descriptor is ready or the earliest of `deadlines`
    /// passes (none: without a limit). A signal that interrupts the wait
    /// is a turn with nothing ready.
    pub fn wait(
        &mut self,
        deadlines: impl IntoIterator<Item = Option<Instant>>,
    ) -> nix::Result<()> {
        let earliest = deadlines.into_iter().flatten().min();
        self.wait_for(earliest.map(|at| at.saturating_duration_since(Instant::now())))
    }

    /// Wait until a descriptor is ready or `timeout` has passed (none:
    /// without a limit), for a loop that counts no deadline of its own. A
    /// signal that interrupts the wait is a turn with nothing ready.
    pub fn wait_for(&mut self, timeout: Option<Duration>) -> nix::Result<()> {
        match poll(&mut self.fds, poll_timeout(timeout)) {
            Ok(_) | Err(Errno::EINTR) => Ok(()),
            Err(errno) => Err(errno),
        }
    }

    /// What happened on `slot` (nothing for a slot not added this turn).
    pub fn events(&self, slot: Option<Slot>) -> PollFlags {
        slot.and_then(|Slot(i)| self.fds.get(i))
            .and_then(PollFd::revents)
            .unwrap_or(PollFlags::empty())
    }

    /// Whether anything happened on `slot`.
    pub fn ready(&self, slot: Option<Slot>) -> bool {
        !self.events(slot).is_empty()
    }
}

/// `timeout` rounded up to poll's millisecond: a turn that ends by its
/// deadline finds it passed, where rounding down woke up to a millisecond
/// early and spun through zero-length waits until it had. Past `i32::MAX`
/// ms (24 days) it waits that long and the loop's next turn waits the
/// rest.
fn poll_timeout(timeout: Option<Duration>) -> PollTimeout {
    let Some(left) = timeout else {
        return PollTimeout::NONE;
    };
    let millis = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
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
        let ms = |left: Duration| i32::from(poll_timeout(Some(left)));
        assert_eq!(poll_timeout(None), PollTimeout::NONE);
        assert_eq!(ms(Duration::ZERO), 0);
        assert_eq!(ms(Duration::from_nanos(1)), 1);
        assert_eq!(ms(Duration::from_micros(1_500)), 2);
        assert_eq!(ms(Duration::from_millis(50)), 50);
        assert_eq!(poll_timeout(Some(Duration::MAX)), PollTimeout::MAX);
    }

    #[test]
    fn wait_for_ends_once_its_timeout_has_passed() {
        let (read, _write) = nix::unistd::pipe().unwrap();
        let mut set = PollSet::default();
        let slot = set.add(read.as_fd(), PollFlags::POLLIN);
        let started = Instant::now();
        set.wait_for(Some(Duration::from_millis(20))).unwrap();
        assert!(!set.ready(Some(slot)));
        assert!(started.elapsed() >= Duration::from_millis(20));
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
