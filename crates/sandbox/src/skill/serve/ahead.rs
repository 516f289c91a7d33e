//! Hosts kept ahead: for each on-demand skill, one host whose sandbox is
//! prepared before the call (see `skill::prepared`), taken by the next
//! call and replaced once that call is answered. Bounded by
//! [`PREPARED_LIMIT`]; not kept for a skill that is refused, disabled or
//! backing off after a crash; discarded, and the skill re-read, when the
//! skill's files changed since the host was started.

use nix::sys::wait::waitpid;

use super::hosts::{kill_host, start_host};
use super::{ServeError, Server, State};
use crate::jsonl::{Fill, Frame};
use crate::skill::files::fingerprint;
use std::os::fd::AsFd;

/// At most this many hosts wait with a prepared sandbox at once (each is a
/// host, a sandbox's init and its payload).
pub const PREPARED_LIMIT: usize = 8;

impl Server {
    /// Prepare ahead for every skill that may get one, in name order.
    pub(super) fn prepare_all(&mut self) {
        let names: Vec<String> = self.slots.keys().cloned().collect();
        for name in names {
            self.prepare_ahead(&name);
        }
    }

    /// Start a host kept ahead for `name` if it should have one and has
    /// none. A failure to start one is no error: the call starts a host.
    pub(super) fn prepare_ahead(&mut self, name: &str) {
        if !self.options.prepare_ahead {
            return;
        }
        let kept: usize = self.slots.values().filter(|s| s.spare.is_some()).count();
        if kept >= PREPARED_LIMIT || self.cached_refusal(name).is_some() {
            return;
        }
        let now = std::time::Instant::now();
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        let running = slot.host.as_ref().is_some_and(|h| !h.spent);
        if slot.spare.is_some()
            || running
            || slot.skill.activation != super::manifest::Activation::OnDemand
            || slot.skill.execution_mode != super::manifest::ExecutionMode::Direct
            || slot.state == State::Disabled
            || slot.not_before.is_some_and(|t| now < t)
        {
            return;
        }
        let print = fingerprint(&slot.skill.dir);
        if print != slot.fingerprint {
            // Changed since the last reload, which is on its way.
            return;
        }
        if let Ok(mut host) = start_host(&self.options, &slot.skill, true) {
            self.next_host += 1;
            host.serial = self.next_host;
            slot.spare = Some((host, print));
        }
    }

    /// The host kept ahead for `name`, if its skill's files are still the
    /// ones it was started with; a stale one is ended.
    pub(super) fn take_spare(&mut self, name: &str) -> Option<super::hosts::HostProc> {
        let slot = self.slots.get_mut(name)?;
        let (host, print) = slot.spare.take()?;
        if fingerprint(&slot.skill.dir) == print {
            return Some(host);
        }
        end_spare(host);
        None
    }

    /// End `name`'s host kept ahead, if any (its skill changed or went).
    pub(super) fn discard_spare(&mut self, name: &str) {
        if let Some((host, _)) = self.slots.get_mut(name).and_then(|s| s.spare.take()) {
            end_spare(host);
        }
    }

    /// A host kept ahead is readable: it ended (its sandbox could not be
    /// kept); it sends nothing before its call. Not replaced until the
    /// skill's next call, so that a host that cannot prepare does not
    /// restart in a loop.
    pub(super) fn on_spare_readable(&mut self, name: &str) -> Result<(), ServeError> {
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        let Some((host, _)) = &mut slot.spare else {
            return Ok(());
        };
        let mut frames: Vec<Frame> = Vec::new();
        if host.framer.fill(host.control.as_fd(), &mut frames) == Fill::Closed {
            if let Some((host, _)) = slot.spare.take() {
                let _ = waitpid(host.pid, None);
            }
        }
        Ok(())
    }
}

/// Kill a host kept ahead and reap it: its sandbox, never committed, dies
/// with it.
pub(super) fn end_spare(mut host: super::hosts::HostProc) {
    kill_host(&mut host);
    let _ = waitpid(host.pid, None);
}
