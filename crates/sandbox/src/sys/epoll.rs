//! An epoll set the async runtime waits on: the `serve --mcp` engine's
//! skill hosts and file watch, whose descriptors come and go under the
//! engine's own code, gathered behind one descriptor Tokio can watch.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use tokio::io::unix::AsyncFd;

/// An epoll set owned by its [`AsyncFd`] registration.
pub struct WaitSet(Epoll);

impl WaitSet {
    /// A set waiting for `fds` to become readable, registered with the
    /// current Tokio runtime (which must have I/O enabled).
    pub fn of<'a>(
        fds: impl IntoIterator<Item = BorrowedFd<'a>>,
    ) -> std::io::Result<AsyncFd<WaitSet>> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        for fd in fds {
            epoll.add(
                fd,
                EpollEvent::new(EpollFlags::EPOLLIN, fd.as_raw_fd() as u64),
            )?;
        }
        // SAFETY: `WaitSet` owns the epoll descriptor and nothing replaces
        // or closes it while the `AsyncFd` holds it: it is closed only when
        // the `AsyncFd` (and with it the `WaitSet`) is dropped, after the
        // registration is removed.
        let registered = unsafe {
            AsyncFd::register_with_interest(WaitSet(epoll), tokio::io::Interest::READABLE)
        };
        Ok(registered?)
    }

    /// The members readable now (level-triggered: nothing is consumed).
    pub fn ready(&self) -> Vec<RawFd> {
        let mut events = [EpollEvent::empty(); 32];
        let count = self.0.wait(&mut events, EpollTimeout::ZERO).unwrap_or(0);
        events[..count].iter().map(|e| e.data() as RawFd).collect()
    }
}

impl AsRawFd for WaitSet {
    fn as_raw_fd(&self) -> RawFd {
        self.0 .0.as_fd().as_raw_fd()
    }
}
