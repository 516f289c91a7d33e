//! The loop: one thread that only reads, writes and waits, on the
//! client's input, a signalfd, the skill roots' watch and every host's
//! control socket; and the timers (reload, ask deadlines, back-off ends,
//! watchdogs) it wakes for.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use nix::poll::PollFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::waitpid;

use super::hosts::kill_host;
use super::{ServeError, Server};
use crate::jsonl::{Fill, Frame, Framer};
use crate::poll_set::PollSet;

impl Server {
    /// When the server next has something to do on its own (a reload,
    /// a deadline, a back-off ending), if ever.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let mut next = self.reload_at;
        if let Some(at) = self.asks.values().map(|a| a.deadline).min() {
            next = Some(next.map_or(at, |n: Instant| n.min(at)));
        }
        for slot in self.slots.values() {
            let candidates = [
                slot.not_before.filter(|_| !slot.queue.is_empty()),
                slot.host.as_ref().and_then(|h| h.watchdog),
            ];
            for at in candidates.into_iter().flatten() {
                next = Some(next.map_or(at, |n: Instant| n.min(at)));
            }
        }
        next
    }

    pub(super) fn on_timers(&mut self) -> Result<(), ServeError> {
        let now = Instant::now();
        // Its host denied by itself at this deadline; a later answer is
        // nobody's.
        self.asks.retain(|_, ask| now < ask.deadline);
        if self.reload_at.is_some_and(|t| now >= t) {
            self.reload_at = None;
            self.reload()?;
        }
        let names: Vec<String> = self.slots.keys().cloned().collect();
        for name in names {
            if let Some(host) = self.slots.get_mut(&name).and_then(|s| s.host.as_mut()) {
                if host.watchdog.is_some_and(|t| now >= t) {
                    host.watchdog = None;
                    host.failed = Some("its host stopped answering and was killed".into());
                    kill_host(host);
                }
            }
            self.pump(&name)?;
        }
        Ok(())
    }

    /// Kill every skill's host and reap it.
    pub fn shutdown(&mut self) {
        for slot in self.slots.values_mut() {
            if let Some((host, _)) = slot.spare.take() {
                super::ahead::end_spare(host);
            }
            if let Some(host) = &mut slot.host {
                kill_host(host);
                let _ = waitpid(host.pid, None);
            }
        }
    }

    /// Serve requests from `input` until it ends or a signal asks to stop.
    pub fn run(mut self, input: OwnedFd) -> Result<(), ServeError> {
        let mut signals = SigSet::empty();
        for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
            signals.add(signal);
        }
        signals.thread_block().map_err(|source| ServeError::Sys {
            op: "sigprocmask",
            source,
        })?;
        let signalfd = SignalFd::new(&signals).map_err(|source| ServeError::Sys {
            op: "signalfd",
            source,
        })?;
        let mut framer = Framer::new(self.limits.max_message);
        let result = self.serve_loop(&input, &signalfd, &mut framer);
        self.shutdown();
        result
    }

    /// The descriptors whose readiness gives the server work: the skill
    /// roots' watch and every host's control socket.
    pub fn watched(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds: Vec<BorrowedFd<'_>> = self.watcher.iter().map(|w| w.as_fd()).collect();
        for slot in self.slots.values() {
            if let Some(host) = &slot.host {
                fds.push(host.control.as_fd());
            }
            if let Some((host, _)) = &slot.spare {
                fds.push(host.control.as_fd());
            }
        }
        fds
    }

    /// Whether [`Server::watched`] includes the skill roots' file watch
    /// (its first descriptor).
    pub fn watched_file_changes(&self) -> bool {
        self.watcher.is_some()
    }

    /// How many hosts were ever started: with [`Server::watched`], what
    /// tells a caller's own poll set is stale (a new host may reuse a
    /// closed one's descriptor number).
    pub fn hosts_started(&self) -> u64 {
        self.next_host
    }

    /// Do what is ready now without waiting: hosts' messages and ends,
    /// file changes, then whatever is due. `ready`: the descriptors of
    /// [`Server::watched`] the caller just saw readable (None: look).
    pub fn step(&mut self, ready: Option<&[std::os::fd::RawFd]>) -> Result<(), ServeError> {
        let looked;
        let ready = match ready {
            Some(ready) => ready,
            None => {
                looked = self.readable(&[], Some(Instant::now()))?.1;
                &looked
            }
        };
        let is_ready = |fd: BorrowedFd<'_>| ready.contains(&fd.as_raw_fd());
        let hosts: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| s.host.as_ref().is_some_and(|h| is_ready(h.control.as_fd())))
            .map(|(n, _)| n.clone())
            .collect();
        let spares: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                s.spare
                    .as_ref()
                    .is_some_and(|(h, _)| is_ready(h.control.as_fd()))
            })
            .map(|(n, _)| n.clone())
            .collect();
        let watch_ready = self.watcher.as_ref().is_some_and(|w| is_ready(w.as_fd()));
        for name in hosts {
            self.on_host_readable(&name)?;
        }
        for name in spares {
            self.on_spare_readable(&name)?;
        }
        if watch_ready {
            self.on_watch_events();
        }
        self.on_timers()
    }

    /// Wait until `deadline` (none: without a limit) for `extra` or
    /// [`Server::watched`] to be readable: which of `extra` are, and which
    /// watched descriptors.
    pub(super) fn readable(
        &self,
        extra: &[BorrowedFd<'_>],
        deadline: Option<Instant>,
    ) -> Result<(Vec<bool>, Vec<std::os::fd::RawFd>), ServeError> {
        let watched = self.watched();
        let mut set = PollSet::default();
        let extra_slots: Vec<_> = extra
            .iter()
            .map(|fd| set.add(*fd, PollFlags::POLLIN))
            .collect();
        let watched_slots: Vec<_> = watched
            .iter()
            .map(|fd| (fd.as_raw_fd(), set.add(*fd, PollFlags::POLLIN)))
            .collect();
        set.wait([deadline])
            .map_err(|source| ServeError::Sys { op: "poll", source })?;
        let watched_ready = watched_slots
            .into_iter()
            .filter(|(_, slot)| set.ready(Some(*slot)))
            .map(|(fd, _)| fd)
            .collect();
        let extra_ready = extra_slots
            .into_iter()
            .map(|slot| set.ready(Some(slot)))
            .collect();
        Ok((extra_ready, watched_ready))
    }

    pub(super) fn serve_loop(
        &mut self,
        input: &OwnedFd,
        signalfd: &SignalFd,
        framer: &mut Framer,
    ) -> Result<(), ServeError> {
        loop {
            let wakeup = self.next_wakeup();
            let (extra, watched) = self.readable(&[input.as_fd(), signalfd.as_fd()], wakeup)?;
            let (input_ready, signal_ready) = (extra[0], extra[1]);
            if signal_ready {
                return Ok(());
            }
            self.step(Some(&watched))?;
            if input_ready {
                let mut frames = Vec::new();
                if framer.fill(input.as_fd(), &mut frames) == Fill::Closed {
                    return Ok(());
                }
                for frame in frames {
                    match frame {
                        Frame::Line(line) => self.on_input_line(&line)?,
                        Frame::TooLarge { bytes } => self.on_input_too_large(bytes)?,
                    }
                }
                self.on_timers()?;
            }
        }
    }
}
