//! Host processes: one per running skill, a fork of this process (or
//! `sandbox __skill-host` where forking is unsafe), fed one call at a
//! time; a host's end is a crash or not, and crashes back off and, past
//! the limit, disable the skill.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use serde_json::{json, Value};

use super::super::host::{error_object, ACTIVATION_TIMEOUT, EXIT_GRACE};
use super::super::manifest::{Activation, Skill};
use super::{Call, ServeError, ServeOptions, Server, Slot, State};
use crate::broker::protocol::code;
use crate::jsonl::{Fill, Frame, Framer};
use crate::sys::fork::ForkError;

/// Longest line a skill host sends on its control socket: an answer with
/// the skill's result in it. The host is this program, forked; the limit
/// only bounds what a broken or compromised one makes serve hold.
pub const HOST_LINE_LIMIT: usize = 64 << 20;
/// Waits before restarting a skill after its 1st, 2nd, ... crash.
pub const BACKOFF: [Duration; 5] = [
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::from_secs(2),
    Duration::from_secs(10),
    Duration::from_secs(30),
];
/// Crashes within [`CRASH_WINDOW`] that disable a skill.
pub const CRASH_LIMIT: usize = 5;
/// The window in which crashes are counted.
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
/// Extra time the serve loop gives a host beyond the skill's own timeouts
/// before it kills the host itself (a host that stopped answering).
pub(super) const WATCHDOG_SLACK: Duration = Duration::from_secs(5);
/// What the watchdog adds for a review run's capture: the layer is at most
/// its size limit (512 MiB unless the profile says), copied from memory.
pub(super) const REVIEW_CAPTURE_SLACK: Duration = Duration::from_secs(60);
/// A running host process.
pub(super) struct HostProc {
    pub(super) pid: Pid,
    /// Unique within this server's life: a pid can be reused, this not.
    pub(super) serial: u64,
    pub(super) control: UnixStream,
    pub(super) framer: Framer,
    /// Killed by the loop on purpose (reload, removal): not a crash.
    pub(super) stopping: bool,
    /// An on-demand skill answered: its process is ending, so the host
    /// takes no more calls (they wait for its end, then a fresh host).
    pub(super) spent: bool,
    /// It said an invocation timed out: replaced, not counted as a crash.
    pub(super) timed_out: bool,
    /// It answered an invocation with "ended before answering", or failed to start.
    pub(super) failed: Option<String>,
    /// It reported how its skill ended.
    pub(super) exited: Option<Value>,
    /// When the loop gives up on it.
    pub(super) watchdog: Option<Instant>,
}

impl HostProc {
    /// A host just started as `pid`, speaking on `control`; its serial is
    /// the loop's to give.
    pub(super) fn new(pid: Pid, control: UnixStream) -> HostProc {
        HostProc {
            pid,
            serial: 0,
            control,
            framer: Framer::new(HOST_LINE_LIMIT),
            stopping: false,
            spent: false,
            timed_out: false,
            failed: None,
            exited: None,
            watchdog: None,
        }
    }

    /// Whether the host's end was a crash (counted towards the back-off),
    /// and why it ended. `status`: its exit status, None when killed.
    /// Killed on purpose or timed out is no crash; a persistent skill's
    /// end always is, an on-demand one's only when it failed or reported
    /// no end.
    pub(super) fn ending(&self, status: Option<i32>, persistent: bool) -> (bool, String) {
        let exit_error = match &self.exited {
            Some(exited) if exited["signal"].is_number() => {
                Some(format!("killed by signal {}", exited["signal"]))
            }
            Some(exited) if exited["code"] != 0 => Some(format!("exit status {}", exited["code"])),
            Some(_) => None,
            None => Some(match status {
                Some(code) => format!("its host exited with status {code}"),
                None => "its host was killed".into(),
            }),
        };
        let crash = !self.stopping
            && !self.timed_out
            && (self.failed.is_some() || self.exited.is_none() || persistent);
        let reason = self
            .failed
            .clone()
            .or(exit_error)
            .unwrap_or_else(|| "the skill's process ended".into());
        (crash, reason)
    }
}

impl Slot {
    /// Counts a crash at `now`. None when it is the [`CRASH_LIMIT`]th within
    /// [`CRASH_WINDOW`] (the skill is to be disabled); else the back-off
    /// before its host may start again, which it now waits for.
    pub(super) fn count_crash(&mut self, now: Instant) -> Option<Duration> {
        self.crashes.push_back(now);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW)
        {
            self.crashes.pop_front();
        }
        self.consecutive += 1;
        if self.crashes.len() >= CRASH_LIMIT {
            return None;
        }
        let wait = BACKOFF[(self.consecutive - 1).min(BACKOFF.len() - 1)];
        self.not_before = Some(now + wait);
        Some(wait)
    }
}

impl Server {
    /// Move a skill along: start its host when a call waits and the
    /// back-off allows, hand it the next call, retire a stale host.
    pub(super) fn pump(&mut self, name: &str) -> Result<(), ServeError> {
        self.pump_with(name, true)
    }

    /// [`Server::pump`]; `may_reload`: whether a host kept ahead for a
    /// skill whose files changed since makes it read them now (once per
    /// call: files that keep changing then get a host started for them).
    fn pump_with(&mut self, name: &str, may_reload: bool) -> Result<(), ServeError> {
        let now = Instant::now();
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        if slot.inflight.is_some() {
            return Ok(());
        }
        if slot.stale {
            if let Some(host) = &mut slot.host {
                host.stopping = true;
                kill_host(host);
            }
            return Ok(());
        }
        // A host that is stopping, failed or whose skill ended takes no
        // more calls: they wait for its end-of-file, then a restart.
        let finished =
            |h: &HostProc| h.stopping || h.spent || h.failed.is_some() || h.exited.is_some();
        if slot.queue.is_empty() || slot.host.as_ref().is_some_and(finished) {
            return Ok(());
        }
        if slot.host.is_none() {
            if slot.not_before.is_some_and(|t| now < t) {
                return Ok(());
            }
            let had_spare = slot.spare.is_some();
            let spare = self.take_spare(name);
            // The skill's files changed since its host was kept ahead, or
            // since they were read when no host was kept (the call came
            // before the next one was ready): read them now, so that this
            // call runs what they say, not what the hot reload, still
            // settling, would have said later.
            let changed = || {
                self.slots.get(name).is_some_and(|slot| {
                    crate::skill::files::fingerprint(&slot.skill.dir) != slot.fingerprint
                })
            };
            if spare.is_none() && may_reload && (had_spare || changed()) {
                self.reload()?;
                return self.pump_with(name, false);
            }
            let Some(slot) = self.slots.get_mut(name) else {
                return Ok(());
            };
            let started = match spare {
                Some(host) => Ok(host),
                None => start_host(&self.options, &slot.skill, false).map(|mut host| {
                    self.next_host += 1;
                    host.serial = self.next_host;
                    host
                }),
            };
            match started {
                Ok(host) => {
                    slot.host = Some(host);
                }
                Err(err) => {
                    let message = format!("skill {name}: cannot start its host: {err}");
                    let calls: Vec<Call> = slot.queue.drain(..).collect();
                    for call in calls {
                        let error = error_object(code::SKILL_UNAVAILABLE, message.clone());
                        self.respond(&call.id, Err(error))?;
                    }
                    return self.set_state(name, State::Failed, Some(message));
                }
            }
            self.set_state(name, State::Activating, None)?;
        }
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        let (Some(host), Some(call)) = (&mut slot.host, slot.queue.pop_front()) else {
            return Ok(());
        };
        let line = json!({ "id": 1, "params": call.params });
        // Checked: a timeout past the clock's range means no watchdog
        // rather than a panic of the whole server.
        // A review run answers after its process has ended and its layer
        // is copied into the store.
        let capture = if slot.review {
            EXIT_GRACE + REVIEW_CAPTURE_SLACK
        } else {
            Duration::ZERO
        };
        host.watchdog = super::super::invocation_timeout(&slot.skill)
            .checked_add(ACTIVATION_TIMEOUT + WATCHDOG_SLACK + capture)
            .and_then(|wait| now.checked_add(wait));
        if host
            .control
            .write_all(format!("{line}\n").as_bytes())
            .is_err()
        {
            // The host is dying; its end-of-file is handled as a crash,
            // which answers this call.
            host.failed = Some("its host stopped".into());
        }
        slot.inflight = Some(call);
        Ok(())
    }

    /// A line from a host.
    pub(super) fn on_host_line(&mut self, name: &str, line: &[u8]) -> Result<(), ServeError> {
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return Ok(());
        };
        match message.get("event").and_then(Value::as_str) {
            Some("active") => {
                if let Some(slot) = self.slots.get_mut(name) {
                    slot.prepared = message["prepared"] == true;
                }
                return self.set_state(name, State::Active, None);
            }
            Some("ask") => return self.on_ask(name, &message),
            Some("failed") => {
                if let Some(host) = self.slots.get_mut(name).and_then(|s| s.host.as_mut()) {
                    host.failed = Some(message["error"].as_str().unwrap_or("failed").into());
                }
                return Ok(());
            }
            Some("exited") => {
                if let Some(host) = self.slots.get_mut(name).and_then(|s| s.host.as_mut()) {
                    host.timed_out |= message["timed_out"] == true;
                    host.exited = Some(message);
                }
                return Ok(());
            }
            _ => {}
        }
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        let Some(call) = slot.inflight.take() else {
            return Ok(());
        };
        let answer = match (message.get("result"), message.get("error")) {
            (Some(result), _) => {
                slot.consecutive = 0;
                Ok(result.clone())
            }
            (None, Some(error)) => {
                if let Some(host) = &mut slot.host {
                    host.watchdog = None;
                    if error["code"] == code::SKILL_EXITED {
                        host.failed = Some(error["message"].as_str().unwrap_or("").into());
                    }
                    if error["code"] == code::TIMEOUT {
                        host.timed_out = true;
                    }
                }
                Err(error.clone())
            }
            (None, None) => Err(error_object(
                code::INTERNAL_ERROR,
                "the skill host sent an answer without result or error",
            )),
        };
        let on_demand = slot.skill.activation != Activation::Persistent;
        if let Some(host) = &mut slot.host {
            host.watchdog = None;
            host.spent |= on_demand;
        }
        // The host's own word, beside the skill's result (see the module
        // docs of serve): what this invocation's review run kept.
        let review = message
            .get("review")
            .and_then(|r| serde_json::from_value::<crate::review::Kept>(r.clone()).ok());
        if let Some(review) = review {
            self.send(
                &json!({"jsonrpc": "2.0", "method": "skill.reviewed", "params": {
                    "call": call.id.to_value(), "skill": name, "review": review,
                }}),
            )?;
        }
        self.respond(&call.id, answer)?;
        // After the answer, not before: preparing the next sandbox while
        // this one's runtime starts would slow the call it answers.
        self.prepare_ahead(name);
        self.pump(name)
    }

    /// A host's control socket is readable.
    pub(super) fn on_host_readable(&mut self, name: &str) -> Result<(), ServeError> {
        let Some(host) = self.slots.get_mut(name).and_then(|s| s.host.as_mut()) else {
            return Ok(());
        };
        let mut frames = Vec::new();
        if host.framer.fill(host.control.as_fd(), &mut frames) == Fill::Closed {
            return self.on_host_gone(name);
        }
        for frame in frames {
            if let Frame::Line(line) = frame {
                self.on_host_line(name, &line)?;
            }
        }
        Ok(())
    }

    /// A host ended: reap it, decide whether that was a crash, and go on.
    pub(super) fn on_host_gone(&mut self, name: &str) -> Result<(), ServeError> {
        let now = Instant::now();
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        let Some(host) = slot.host.take() else {
            return Ok(());
        };
        // Its questions died with it: an answer now reaches nobody.
        self.asks.retain(|_, ask| ask.host != host.serial);
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        let status = match waitpid(host.pid, None) {
            Ok(WaitStatus::Exited(_, code)) => Some(code),
            _ => None,
        };
        let persistent = slot.skill.activation == Activation::Persistent;
        let (crash, reason) = host.ending(status, persistent);
        if let Some(call) = slot.inflight.take() {
            let message = format!("skill {name} ended before answering: {reason}");
            self.respond(&call.id, Err(error_object(code::SKILL_EXITED, message)))?;
        }
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        slot.stale = false;
        slot.prepared = false;
        if !crash {
            self.set_state(name, State::Inactive, None)?;
            self.prepare_ahead(name);
            return self.pump(name);
        }
        let Some(wait) = slot.count_crash(now) else {
            let message = format!(
                "disabled after {CRASH_LIMIT} crashes within a minute (last: {reason}); \
                 skill.enable it or change its files"
            );
            let calls: Vec<Call> = slot.queue.drain(..).collect();
            self.set_state(name, State::Disabled, Some(message.clone()))?;
            for call in calls {
                let error = error_object(code::SKILL_DISABLED, message.clone());
                self.respond(&call.id, Err(error))?;
            }
            return Ok(());
        };
        self.set_state(
            name,
            State::Failed,
            Some(format!(
                "{reason}; restarting on the next call, not before {} ms",
                wait.as_millis()
            )),
        )?;
        self.pump(name)
    }
}

pub(super) fn kill_host(host: &mut HostProc) {
    // The host's death takes its sandbox with it (parent-death signal of
    // the sandbox's init), and its janitor removes the cgroup.
    let _ = kill(host.pid, Signal::SIGKILL);
}

/// A host for `skill`; `prepare_ahead`: one kept ahead of the call, which
/// prepares its sandbox at once.
pub(super) fn start_host(
    options: &ServeOptions,
    skill: &Skill,
    prepare_ahead: bool,
) -> std::io::Result<HostProc> {
    let (ours, theirs) = UnixStream::pair()?;
    let (ours, pid) = match fork_host(options, skill, theirs, prepare_ahead) {
        Ok(pid) => (ours, pid),
        // A thread was started in this process (an embedder's): forking
        // is unsafe there, so a fresh host is executed instead.
        Err(ForkError::Threaded(_)) => {
            let (ours, theirs) = UnixStream::pair()?;
            (ours, exec_host(options, skill, theirs, prepare_ahead)?)
        }
        Err(ForkError::Fork(errno)) => return Err(errno.into()),
        Err(ForkError::Status(err)) => return Err(err),
    };
    Ok(HostProc::new(pid, ours))
}

/// The host as a fork of this process, running [`super::super::host_process`] on
/// the skill and profile this loop already holds: no exec of this binary,
/// no second parse of the manifest, its parameter schema and the profile
/// (about 2 ms of each activation), and the host runs exactly the manifest
/// and profile this loop checked. Of this process's descriptors it keeps
/// only its own control socket; it dies with this process.
fn fork_host(
    options: &ServeOptions,
    skill: &Skill,
    control: UnixStream,
    prepare_ahead: bool,
) -> Result<Pid, ForkError> {
    let parent = nix::unistd::getpid();
    let launch = super::super::Launch {
        profile: options.profile.clone(),
        project: options.project.clone(),
        grants: options.grants.clone(),
        audit: options.audit.clone(),
        interactive: false,
        ask_client: options.ask_client,
        question_timeout: options.question_timeout,
        prepare_ahead,
    };
    // Of this loop's descriptors the host keeps only its own control
    // socket: not the other hosts' (a host holding one could read another
    // skill's results or speak for it), nor the agent's input, nor the
    // loop's signalfd and watches.
    crate::sys::fork::fork_keeping_only(vec![OwnedFd::from(control)], move |kept| {
        if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
            || nix::unistd::getppid() != parent
        {
            return 125;
        }
        // The loop's own signals (its signalfd's) are blocked here, and
        // `serve --mcp`'s runtime has handlers that write to its own
        // descriptors: both undone; the host's supervisor sets up its own.
        if SigSet::empty().thread_set_mask().is_err()
            || crate::sys::signal::reset_all_dispositions().is_err()
        {
            return 125;
        }
        // The agent's streams are the loop's alone: a host holding its
        // stdout would keep the agent from reading end-of-file after serve.
        let Ok(null) = std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
        else {
            return 125;
        };
        if nix::unistd::dup2_stdin(&null).is_err() || nix::unistd::dup2_stdout(&null).is_err() {
            return 125;
        }
        drop(null);
        let Some(control) = kept.into_iter().next() else {
            return 125;
        };
        super::super::host_process(skill, &launch, UnixStream::from(control))
    })
}

fn exec_host(
    options: &ServeOptions,
    skill: &Skill,
    theirs: UnixStream,
    prepare_ahead: bool,
) -> std::io::Result<Pid> {
    let mut command = std::process::Command::new(&options.host_program);
    command
        .arg0("sandbox")
        .arg("__skill-host")
        .arg("--dir")
        .arg(&skill.dir)
        .arg("--project")
        .arg(&options.project)
        .arg("--profile")
        .arg(&options.profile_spec)
        .arg("--parent")
        .arg(std::process::id().to_string())
        .stdin(std::process::Stdio::from(OwnedFd::from(theirs)))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    for grant in &options.grants {
        command.arg("--grant").arg(grant);
    }
    if let Some(audit) = &options.audit {
        command.arg("--audit").arg(audit);
    }
    if prepare_ahead {
        command.arg("--prepare-ahead");
    }
    if options.ask_client {
        command.arg("--ask-client").arg(format!(
            "--question-timeout={}ms",
            options.question_timeout.as_millis()
        ));
    }
    // Reaped by pid in on_host_gone (dropping a std Child neither kills
    // nor waits for it).
    let child = command.spawn()?;
    Ok(Pid::from_raw(child.id() as i32))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{fake_host, running, server, write_skill};
    use super::*;

    fn slot(root: &std::path::Path, extra: &str) -> Slot {
        write_skill(root, "s", extra);
        let dir = root.join("s");
        let print = crate::skill::files::fingerprint(&dir);
        Slot::new(super::super::manifest::load(&dir).unwrap(), print)
    }

    #[test]
    fn crashes_back_off_longer_each_time_and_disable_at_the_limit() {
        let root = tempfile::tempdir().unwrap();
        let mut slot = slot(root.path(), "");
        let start = Instant::now();
        for (n, wait) in BACKOFF[..CRASH_LIMIT - 1].iter().enumerate() {
            let now = start + Duration::from_millis(n as u64);
            assert_eq!(slot.count_crash(now), Some(*wait), "crash {}", n + 1);
            assert_eq!(slot.not_before, Some(now + *wait));
        }
        let last = start + Duration::from_secs(1);
        assert_eq!(slot.count_crash(last), None, "the limit disables");
        // Disabled, not backed off: the last wait is left as it was.
        assert_ne!(slot.not_before, Some(last + BACKOFF[CRASH_LIMIT - 1]));
    }

    #[test]
    fn crashes_outside_the_window_are_forgotten_but_the_wait_stays_long() {
        let root = tempfile::tempdir().unwrap();
        let mut slot = slot(root.path(), "");
        let start = Instant::now();
        let apart = CRASH_WINDOW + Duration::from_secs(1);
        let mut waits = Vec::new();
        for n in 0..CRASH_LIMIT + 2 {
            let wait = slot.count_crash(start + apart * n as u32);
            waits.push(wait.expect("crashes a window apart never disable"));
            assert_eq!(slot.crashes.len(), 1, "older crashes left the window");
        }
        let last = *BACKOFF.last().unwrap();
        assert_eq!(&waits[..BACKOFF.len()], &BACKOFF[..]);
        assert_eq!(&waits[BACKOFF.len()..], &[last, last]);
    }

    #[test]
    fn a_host_end_is_a_crash_unless_it_was_stopped_or_timed_out() {
        let (mut host, _peer) = fake_host(1);
        assert_eq!(
            host.ending(Some(3), false),
            (true, "its host exited with status 3".to_string())
        );
        assert_eq!(
            host.ending(None, false),
            (true, "its host was killed".to_string())
        );
        host.stopping = true;
        assert!(!host.ending(None, true).0, "killed on purpose");
        host.stopping = false;
        host.timed_out = true;
        assert!(!host.ending(None, true).0, "a timeout is replaced");
        host.timed_out = false;

        // An on-demand skill whose process ended well: its host's end is
        // how on-demand works; a persistent skill should not have ended.
        host.exited = Some(json!({"code": 0}));
        assert_eq!(
            host.ending(Some(0), false),
            (false, "the skill's process ended".to_string())
        );
        assert!(host.ending(Some(0), true).0);
        host.exited = Some(json!({"code": 2}));
        assert_eq!(host.ending(Some(0), false).1, "exit status 2");
        host.exited = Some(json!({"signal": 9, "code": null}));
        assert_eq!(host.ending(Some(0), false).1, "killed by signal 9");
        host.failed = Some("main.sh not found".into());
        assert_eq!(
            host.ending(Some(0), false),
            (true, "main.sh not found".to_string()),
            "a failure is a crash and its own reason"
        );
    }

    #[test]
    fn a_host_answer_goes_to_the_call_in_flight_and_spends_an_on_demand_host() {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "s", "");
        let (mut server, output) = server(root.path(), false);
        let _peer = running(&mut server, "s", 7);
        server.slots.get_mut("s").unwrap().consecutive = 3;
        output.take();

        // Events are no answer.
        server.on_host_line("s", br#"{"event": "active"}"#).unwrap();
        assert_eq!(server.slots["s"].state, State::Active);
        server.on_host_line("s", b"not json").unwrap();
        assert!(server.slots["s"].inflight.is_some());

        server
            .on_host_line("s", br#"{"id": 1, "result": {"ok": 1}}"#)
            .unwrap();
        let sent = output.take();
        let answer = sent.iter().find(|m| m["id"] == 7).unwrap();
        assert_eq!(answer["result"], json!({"ok": 1}));
        let slot = &server.slots["s"];
        assert!(slot.inflight.is_none());
        assert_eq!(slot.consecutive, 0, "an answer ends a run of crashes");
        assert!(
            slot.host.as_ref().unwrap().spent,
            "on-demand: one call a host"
        );

        // A second answer finds no call and is dropped.
        server
            .on_host_line("s", br#"{"id": 1, "result": 2}"#)
            .unwrap();
        assert!(output.take().iter().all(|m| m.get("result").is_none()));
    }

    #[test]
    fn a_review_is_the_hosts_word_sent_just_before_the_answer() {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "s", "");
        let (mut server, output) = server(root.path(), false);
        let _peer = running(&mut server, "s", 9);
        output.take();
        // A review inside the skill's result is the skill's own claim:
        // nothing is said for it.
        server
            .on_host_line("s", br#"{"id": 1, "result": {"review": {"id": "x", "changes": 1, "limit_reached": false, "error": null}}}"#)
            .unwrap();
        let sent = output.take();
        assert!(
            sent.iter().all(|m| m["method"] != "skill.reviewed"),
            "{sent:?}"
        );

        let _peer = running(&mut server, "s", 10);
        output.take();
        let line = json!({"id": 1, "error": {"code": code::SKILL_EXITED, "message": "ended"},
                          "review": {"id": "20261128-120000-abcd", "changes": 2,
                                     "limit_reached": false, "error": null}});
        server
            .on_host_line("s", line.to_string().as_bytes())
            .unwrap();
        let sent = output.take();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[0]["method"], "skill.reviewed");
        assert_eq!(sent[0]["params"]["call"], 10);
        assert_eq!(sent[0]["params"]["review"]["changes"], 2);
        assert_eq!(sent[1]["id"], 10, "the answer comes after it");
    }

    #[test]
    fn a_host_error_names_a_timeout_or_an_ended_skill() {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "s", "activation: persistent\n");
        let (mut server, output) = server(root.path(), false);
        let _peer = running(&mut server, "s", 8);
        let line = json!({"id": 1, "error": {"code": code::TIMEOUT, "message": "too slow"}});
        server
            .on_host_line("s", line.to_string().as_bytes())
            .unwrap();
        let host = server.slots["s"].host.as_ref().unwrap();
        assert!(host.timed_out);
        assert!(!host.spent, "a persistent host takes the next call");
        let sent = output.take();
        let answer = sent.iter().find(|m| m["id"] == 8).unwrap();
        assert_eq!(answer["error"]["code"], code::TIMEOUT);
    }
}
