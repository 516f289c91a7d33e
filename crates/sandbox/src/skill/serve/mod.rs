//! `sandbox serve --stdio`: skills for an agent host, JSON-RPC 2.0 over
//! stdin and stdout, one message per line.
//!
//! Requests: `skill.list`, `skill.invoke {name, params}`, `skill.enable
//! {name}`, `skill.reload`, `skill.cancel {id}`. Notifications:
//! `skill.stateChanged {name, state, error}` with the states inactive,
//! activating, active, failed, disabled (and removed, when a skill's
//! directory goes away), then, after every reload that changed anything,
//! `skill.listChanged {added, removed, changed}` (names). The `active`
//! notification carries `prepared`: whether the call took a sandbox kept
//! prepared ahead ([`ahead`]).
//!
//! `skill.list` gives each skill's `inputSchema`, and its `outputSchema`
//! when the manifest declares one, and `review`: whether its profile runs
//! it in review mode.
//!
//! Review mode: each invocation of an on-demand skill whose profile asks
//! for review gets a layer of its own (its process serves that one call),
//! and its answer comes once the process has ended and the layer is
//! captured, preceded by the notification `skill.reviewed {"call" (the
//! invoke's id), "skill", "review": {"id", "changes", "limit_reached",
//! "error"}}`: what the run kept for `sandbox changes/apply/discard ID`.
//! The skill's own result cannot say that: it is the host's word. A
//! persistent skill under such a profile is refused (listed as failed):
//! one process would mix every invocation's changes.
//!
//! `skill.cancel {"id": ID}` names an earlier `skill.invoke` by its id. A
//! queued call is dropped; a running one's host is killed (on purpose: no
//! crash, no back-off; the next call starts a fresh host). Either way that
//! `skill.invoke` is answered with error -32800 "cancelled by the client",
//! and the cancel with `{"cancelled": true}`; `false` when no call of that
//! id waits or runs (unknown, or already answered).
//!
//! Questions ([`ServeOptions::ask_client`], `serve --stdio --ask-client`):
//! when a skill's broker decides "ask", serve sends the client a request
//! `{"id": "ask-N", "method": "skill.ask", "params": {"skill", "call" (the
//! invoke's id), "caller", "action", "target" (or null), "question" (the
//! terminal's question without its code line), "deadline_ms" (Unix time)}}`
//! and the client answers `{"answer": "once" | "run" | "always" |
//! "deny"}`, or `"unasked"` when it has nobody to put the question to (the
//! broker then refuses with its message naming the grant to add, as without
//! `ask_client`). An error response, any other answer, one after the deadline,
//! or none is refused as unanswered (asked again next time), while "deny"
//! holds for that action and target for the rest of the skill's run;
//! "always" stores a grant as the terminal's question does. The answer goes to the host that asked, for the call that is
//! running, and nowhere else. Without `ask_client` nobody is asked: "ask"
//! is denied with the broker's message naming the grant to add.
//!
//! One loop, one thread: it only reads, writes and waits. Each skill
//! process lives in its own host process (a fork of this one, or
//! `sandbox __skill-host` where forking is unsafe), which supervises the
//! sandbox and runs its broker; so a skill's slow broker work, crash or
//! hang never holds up another skill, and invocations of different skills
//! run at the same time. A host dies with this process (parent-death
//! signal), and its sandbox with the host.
//!
//! Every skill runs within the person's profile ([`ServeOptions::profile`]):
//! one that asks for more is listed as failed with the reason and every
//! invocation is refused before a host starts. A project skill named like
//! one of the person's is never served; `skill.list` names both under
//! `shadowed`.
//!
//! One file per job: [`requests`] (the client's requests), [`discovery`]
//! (skills found, watched and reloaded), [`hosts`] (host processes, crashes
//! and back-off), [`ahead`] (hosts kept with a sandbox prepared ahead for
//! on-demand skills), [`asks`] (questions to the client), [`event_loop`]
//! (the loop and its timers).

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use serde_json::{json, Value};

use super::manifest::{self, Skill};
use crate::broker::protocol::{self, code, Id, Limits};

mod ahead;
mod asks;
mod discovery;
mod event_loop;
mod hosts;
mod requests;
#[cfg(test)]
mod testing;

pub use super::files::fingerprint;
pub use ahead::PREPARED_LIMIT;
pub use hosts::{BACKOFF, CRASH_LIMIT, CRASH_WINDOW, HOST_LINE_LIMIT};

use asks::PendingAsk;
use hosts::HostProc;
use requests::ProfileSource;

/// What `serve` needs besides its streams.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Skill roots: the person's, then the project's (which never replaces
    /// one of the person's skills).
    pub roots: manifest::Roots,
    /// The person's profile: the most any skill gets.
    pub profile: crate::Policy,
    /// How the host processes load that profile again: a built-in name or
    /// an absolute path.
    pub profile_spec: String,
    /// The project root.
    pub project: PathBuf,
    /// Pre-approved broker actions (still capped by each skill's declarations).
    pub grants: Vec<String>,
    /// Audit log shared by every skill.
    pub audit: Option<PathBuf>,
    /// The program started as each skill's host (this binary).
    pub host_program: PathBuf,
    /// Put the broker's "ask" decisions to the client as `skill.ask`
    /// requests (off: they are denied).
    pub ask_client: bool,
    /// How long such a question waits for the client's answer.
    pub question_timeout: Duration,
    /// Keep a host with its sandbox prepared ahead for each on-demand
    /// skill (at most [`PREPARED_LIMIT`]), so that a call only starts the
    /// skill's runtime.
    pub prepare_ahead: bool,
}

/// Why serving stopped early.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A system call of the loop failed.
    #[error("{op}: {source}")]
    Sys {
        /// What was attempted.
        op: &'static str,
        /// The errno.
        source: Errno,
    },
    /// Writing to the agent failed (it closed its end).
    #[error("writing to the agent host: {0}")]
    Output(std::io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Inactive,
    Activating,
    Active,
    Failed,
    Disabled,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Inactive => "inactive",
            State::Activating => "activating",
            State::Active => "active",
            State::Failed => "failed",
            State::Disabled => "disabled",
        }
    }
}

/// An invocation from the agent, waiting or running.
#[derive(Debug)]
struct Call {
    id: Id,
    params: Value,
}

struct Slot {
    skill: Skill,
    fingerprint: u64,
    state: State,
    error: Option<String>,
    host: Option<HostProc>,
    /// A host waiting with its sandbox prepared for the next call, and the
    /// fingerprint of the skill's files it was started with.
    spare: Option<(HostProc, u64)>,
    /// Whether the running activation used a prepared sandbox.
    prepared: bool,
    queue: VecDeque<Call>,
    inflight: Option<Call>,
    crashes: VecDeque<Instant>,
    consecutive: usize,
    not_before: Option<Instant>,
    stale: bool,
    /// The last [`Server::decide`]'s refusal and what it was decided on.
    refusal: Option<(ProfileSource, Option<String>)>,
    /// With that decision: the skill runs in review mode, so its host
    /// answers only once the invocation's changes are captured.
    review: bool,
}

impl Slot {
    /// `fingerprint`: of the skill's files, taken before `skill` was read.
    fn new(skill: Skill, fingerprint: u64) -> Slot {
        Slot {
            skill,
            fingerprint,
            state: State::Inactive,
            error: None,
            host: None,
            spare: None,
            prepared: false,
            queue: VecDeque::new(),
            inflight: None,
            crashes: VecDeque::new(),
            consecutive: 0,
            not_before: None,
            stale: false,
            refusal: None,
            review: false,
        }
    }
}

/// The server.
pub struct Server {
    options: ServeOptions,
    slots: BTreeMap<String, Slot>,
    invalid: Vec<manifest::ManifestError>,
    shadowed: Vec<String>,
    output: Box<dyn Write + Send>,
    watcher: Option<inotify::Inotify>,
    reload_at: Option<Instant>,
    limits: Limits,
    /// Questions put to the client, by request id (`ask-N`).
    asks: BTreeMap<String, PendingAsk>,
    next_ask: u64,
    next_host: u64,
}

impl Server {
    /// A server writing to `output`; skills are discovered at once.
    pub fn new(options: ServeOptions, output: OwnedFd) -> Server {
        Server::writing_to(options, Box::new(std::fs::File::from(output)))
    }

    /// A server whose messages to the client go to `output`, one line per
    /// write (`serve --mcp` keeps them in memory and drives the server with
    /// [`Server::on_input_line`] and [`Server::step`] instead of [`Server::run`]).
    pub fn writing_to(options: ServeOptions, output: Box<dyn Write + Send>) -> Server {
        let watcher = match inotify::Inotify::init() {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                eprintln!(
                    "sandbox serve: warning: no hot reload (inotify: {err}); use skill.reload"
                );
                None
            }
        };
        let mut server = Server {
            options,
            slots: BTreeMap::new(),
            invalid: Vec::new(),
            shadowed: Vec::new(),
            output,
            watcher,
            reload_at: None,
            limits: Limits::default(),
            asks: BTreeMap::new(),
            next_ask: 0,
            next_host: 0,
        };
        server.rescan();
        server.prepare_all();
        server
    }

    fn send(&mut self, message: &Value) -> Result<(), ServeError> {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.output.write_all(&line).map_err(ServeError::Output)
    }

    fn respond(&mut self, id: &Id, answer: Result<Value, Value>) -> Result<(), ServeError> {
        let line = match answer {
            Ok(result) => protocol::response(id, &result),
            Err(error) => {
                let code = error["code"].as_i64().unwrap_or(code::INTERNAL_ERROR);
                let message = error["message"].as_str().unwrap_or("error").to_string();
                protocol::error_response(id, code, &message, error.get("data"))
            }
        };
        self.output.write_all(&line).map_err(ServeError::Output)
    }

    fn announce(&mut self, name: &str) -> Result<(), ServeError> {
        let Some(slot) = self.slots.get(name) else {
            return Ok(());
        };
        let mut params = json!({ "name": name, "state": slot.state.name() });
        if slot.state == State::Active {
            params["prepared"] = json!(slot.prepared);
        }
        if let Some(error) = &slot.error {
            params["error"] = json!(error);
        }
        self.send(&json!({"jsonrpc": "2.0", "method": "skill.stateChanged", "params": params}))
    }

    fn set_state(
        &mut self,
        name: &str,
        state: State,
        error: Option<String>,
    ) -> Result<(), ServeError> {
        if let Some(slot) = self.slots.get_mut(name) {
            if slot.state == state && slot.error == error {
                return Ok(());
            }
            slot.state = state;
            slot.error = error;
        }
        self.announce(name)
    }
}
