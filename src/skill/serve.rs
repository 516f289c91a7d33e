//! `sandbox serve --stdio`: skills for an agent host, JSON-RPC 2.0 over
//! stdin and stdout, one message per line.
//!
//! Requests: `skill.list`, `skill.invoke {name, params}`, `skill.enable
//! {name}`, `skill.reload`, `skill.cancel {id}`. Notifications:
//! `skill.stateChanged {name, state, error}` with the states inactive,
//! activating, active, failed, disabled (and removed, when a skill's
//! directory goes away), then, after every reload that changed anything,
//! `skill.listChanged {added, removed, changed}` (names).
//!
//! `skill.list` gives each skill's `inputSchema`, and its `outputSchema`
//! when the manifest declares one.
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

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use serde_json::{json, Value};

use super::host::{error_object, ACTIVATION_TIMEOUT};
use super::manifest::{self, Activation, ExecutionMode, Skill};
use crate::broker::protocol::{self, code, Id, Limits, Message};
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
/// Quiet time after a file change before skills are reloaded, so that an
/// editor's burst of writes is one reload.
const RELOAD_SETTLE: Duration = Duration::from_millis(50);
/// Extra time the serve loop gives a host beyond the skill's own timeouts
/// before it kills the host itself (a host that stopped answering).
const WATCHDOG_SLACK: Duration = Duration::from_secs(5);

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

/// A question of a host, put to the client as `skill.ask`.
#[derive(Debug)]
struct PendingAsk {
    skill: String,
    /// [`HostProc::serial`] of the host that asked.
    host: u64,
    /// The host's number for it.
    ask: u64,
    /// The invocation running when it asked.
    call: Id,
    /// After this, the host has denied by itself.
    deadline: Instant,
}

/// A running host process.
struct HostProc {
    pid: Pid,
    /// Unique within this server's life: a pid can be reused, this not.
    serial: u64,
    control: UnixStream,
    framer: Framer,
    /// Killed by the loop on purpose (reload, removal): not a crash.
    stopping: bool,
    /// An on-demand skill answered: its process is ending, so the host
    /// takes no more calls (they wait for its end, then a fresh host).
    spent: bool,
    /// It said an invocation timed out: replaced, not counted as a crash.
    timed_out: bool,
    /// It answered an invocation with "ended before answering", or failed to start.
    failed: Option<String>,
    /// It reported how its skill ended.
    exited: Option<Value>,
    /// When the loop gives up on it.
    watchdog: Option<Instant>,
}

struct Slot {
    skill: Skill,
    fingerprint: u64,
    state: State,
    error: Option<String>,
    host: Option<HostProc>,
    queue: VecDeque<Call>,
    inflight: Option<Call>,
    crashes: VecDeque<Instant>,
    consecutive: usize,
    not_before: Option<Instant>,
    stale: bool,
    /// The last [`Server::refusal`] and what it was decided on.
    refusal: Option<(ProfileSource, Option<String>)>,
}

/// What a skill's refusal depends on besides its manifest and the person's
/// profile (both fixed for a slot: a changed skill gets a fresh cache): the
/// installed profile file it names, if any, as last seen. Comparing this is
/// one `stat`; deciding again parses and compares two whole policies, which
/// was most of a persistent call's round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ProfileSource {
    /// Its own profile is the person's or a built-in one.
    Fixed,
    /// An installed profile: the file's identity and times, None when absent.
    Installed(Option<(u64, u64, u64, i64, i64, i64, i64)>),
}

impl ProfileSource {
    fn of(skill: &Skill) -> ProfileSource {
        use std::os::unix::fs::MetadataExt;
        let Some(profile) = &skill.profile else {
            return ProfileSource::Fixed;
        };
        if crate::profile::builtin_names().contains(&profile.as_str()) {
            return ProfileSource::Fixed;
        }
        let file = manifest::installed_profiles().map(|dir| dir.join(format!("{profile}.toml")));
        ProfileSource::Installed(file.and_then(|f| std::fs::metadata(f).ok()).map(|m| {
            (
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
        }))
    }
}

impl Slot {
    fn new(skill: Skill) -> Slot {
        let fingerprint = fingerprint(&skill.dir);
        Slot {
            skill,
            fingerprint,
            state: State::Inactive,
            error: None,
            host: None,
            queue: VecDeque::new(),
            inflight: None,
            crashes: VecDeque::new(),
            consecutive: 0,
            not_before: None,
            stale: false,
            refusal: None,
        }
    }
}

/// Identity of a skill's files: paths, sizes, times and inodes, so that an
/// edit, a replacement or a new file changes it. Bounded in depth and count.
pub fn fingerprint(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut pending = vec![(dir.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((path, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            seen += 1;
            if seen > 4096 {
                return hasher.finish();
            }
            let Ok(meta) = entry.metadata() else { continue };
            entry.path().hash(&mut hasher);
            (
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime_nsec(),
                meta.ino(),
                meta.mode(),
            )
                .hash(&mut hasher);
            if meta.is_dir() && depth < 4 {
                pending.push((entry.path(), depth + 1));
            }
        }
    }
    hasher.finish()
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

    /// Discover the skills again and apply the differences; returns the
    /// names added, removed and changed.
    fn rescan(&mut self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let found = manifest::discover_roots(&self.options.roots);
        for err in &found.invalid {
            if !self.invalid.contains(err) {
                eprintln!("sandbox serve: skipping an invalid skill: {err}");
            }
        }
        for (name, used, ignored) in &found.duplicates {
            eprintln!(
                "sandbox serve: skill {name} is defined twice; using {} and ignoring {}",
                used.display(),
                ignored.display()
            );
        }
        for error in found.shadowing_errors() {
            if !self.shadowed.contains(&error) {
                eprintln!("sandbox serve: error: {error}");
            }
        }
        self.shadowed = found.shadowing_errors();
        self.invalid = found.invalid;
        let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        let names: Vec<String> = self.slots.keys().cloned().collect();
        for name in names {
            if !found.skills.contains_key(&name) {
                removed.push(name);
            }
        }
        for (name, skill) in found.skills {
            match self.slots.get_mut(&name) {
                None => {
                    self.slots.insert(name.clone(), Slot::new(skill));
                    added.push(name);
                }
                Some(slot) => {
                    let print = fingerprint(&skill.dir);
                    if print != slot.fingerprint || skill != slot.skill {
                        slot.skill = skill;
                        slot.fingerprint = print;
                        slot.refusal = None;
                        slot.crashes.clear();
                        slot.consecutive = 0;
                        slot.not_before = None;
                        slot.stale = slot.host.is_some();
                        changed.push(name);
                    }
                }
            }
        }
        self.watch_all();
        (added, removed, changed)
    }

    fn watch_all(&mut self) {
        use inotify::WatchMask;
        let Some(watcher) = &mut self.watcher else {
            return;
        };
        let mask = WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::ATTRIB
            | WatchMask::DELETE_SELF
            | WatchMask::ONLYDIR;
        let mut dirs: Vec<PathBuf> = Vec::new();
        for root in self.options.roots.all() {
            if root.is_dir() {
                dirs.push(root.clone());
                if let Ok(entries) = std::fs::read_dir(root) {
                    for entry in entries.flatten() {
                        if entry.file_type().is_ok_and(|t| t.is_dir()) {
                            dirs.push(entry.path());
                        }
                    }
                }
            } else if let Some(parent) = root.parent().filter(|p| p.is_dir()) {
                // A root that does not exist yet appears in its parent.
                dirs.push(parent.to_path_buf());
            }
        }
        for slot in self.slots.values() {
            let mut pending = vec![(slot.skill.dir.clone(), 0)];
            while let Some((dir, depth)) = pending.pop() {
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    for entry in entries.flatten() {
                        if depth < 4 && entry.file_type().is_ok_and(|t| t.is_dir()) {
                            pending.push((entry.path(), depth + 1));
                        }
                    }
                }
                dirs.push(dir);
            }
        }
        dirs.sort();
        dirs.dedup();
        for dir in dirs {
            // Adding a watch twice returns the same one; failures (a
            // directory removed meanwhile) are caught by the next rescan.
            let _ = watcher.watches().add(&dir, mask);
        }
    }

    /// Apply a rescan: announce additions, stop removed skills, restart
    /// changed ones before their next invocation.
    fn reload(&mut self) -> Result<Value, ServeError> {
        let (added, removed, changed) = self.rescan();
        for name in &added {
            self.announce(name)?;
        }
        for name in &removed {
            self.asks.retain(|_, ask| ask.skill != *name);
            if let Some(mut slot) = self.slots.remove(name) {
                if let Some(host) = &mut slot.host {
                    kill_host(host);
                }
                let message = format!("skill {name} was removed");
                for call in slot.inflight.into_iter().chain(slot.queue) {
                    self.respond(
                        &call.id,
                        Err(error_object(code::NO_SUCH_SKILL, message.clone())),
                    )?;
                }
                let error = self
                    .invalid
                    .iter()
                    .find(|e| e.file.starts_with(&slot.skill.dir))
                    .map(|e| e.to_string());
                let mut params = json!({ "name": name, "state": "removed" });
                if let Some(error) = error {
                    params["error"] = json!(error);
                }
                self.send(
                    &json!({"jsonrpc": "2.0", "method": "skill.stateChanged", "params": params}),
                )?;
            }
        }
        for name in &changed {
            if let Some(slot) = self.slots.get_mut(name) {
                if slot.inflight.is_none() {
                    if let Some(host) = &mut slot.host {
                        host.stopping = true;
                        kill_host(host);
                    }
                }
            }
            self.set_state(name, State::Inactive, None)?;
        }
        let differences = json!({ "added": added, "removed": removed, "changed": changed });
        if !(added.is_empty() && removed.is_empty() && changed.is_empty()) {
            // Also for a changed skill that was inactive and stays so, of
            // which no stateChanged tells.
            self.send(
                &json!({"jsonrpc": "2.0", "method": "skill.listChanged", "params": differences}),
            )?;
        }
        Ok(differences)
    }

    fn list(&self) -> Value {
        let skills: Vec<Value> = self
            .slots
            .values()
            .map(|slot| {
                let s = &slot.skill;
                let mut entry = json!({
                    "name": s.name,
                    "description": s.description,
                    "runtime": s.runtime,
                    "executionMode": s.execution_mode,
                    "activation": s.activation,
                    "permissions": s.permissions,
                    "profile": s.profile,
                    "timeoutMs": u64::try_from(super::invocation_timeout(s).as_millis()).unwrap_or(u64::MAX),
                    "inputSchema": s.input_schema.clone().unwrap_or_else(|| json!({"type": "object"})),
                    "state": slot.state.name(),
                });
                if let Some(schema) = &s.output_schema {
                    entry["outputSchema"] = schema.clone();
                }
                if let Some(error) = &slot.error {
                    entry["error"] = json!(error);
                }
                if let Some(refusal) = self.refusal(s) {
                    entry["state"] = json!(State::Failed.name());
                    entry["error"] = json!(refusal);
                }
                entry
            })
            .collect();
        let invalid: Vec<Value> = self
            .invalid
            .iter()
            .map(|e| {
                // A project's directory names and values reach the host too.
                json!({
                    "file": e.file,
                    "line": e.line,
                    "message": crate::broker::prompt::escape(&e.message),
                })
            })
            .collect();
        json!({ "skills": skills, "invalid": invalid, "shadowed": self.shadowed })
    }

    /// Why `skill` may not run under the person's profile, if it may not.
    fn refusal(&self, skill: &Skill) -> Option<String> {
        if skill.execution_mode == ExecutionMode::Template {
            return None;
        }
        super::launch::policy_for(skill, &self.options.profile)
            .err()
            .map(|e| e.to_string())
    }

    /// [`Server::refusal`] of skill `name`, decided again only when the
    /// installed profile it names changed since the last call.
    fn cached_refusal(&mut self, name: &str) -> Option<String> {
        let slot = self.slots.get(name)?;
        let source = ProfileSource::of(&slot.skill);
        if let Some((seen, refusal)) = &slot.refusal {
            if *seen == source {
                return refusal.clone();
            }
        }
        let refusal = self.refusal(&slot.skill);
        if let Some(slot) = self.slots.get_mut(name) {
            slot.refusal = Some((source, refusal.clone()));
        }
        refusal
    }

    fn on_request(&mut self, line: &[u8]) -> Result<(), ServeError> {
        let (id, method, params) = match protocol::parse(line, &self.limits) {
            Ok(Message::Request { id, method, params }) => (id, method, params),
            Ok(Message::Response { id, outcome }) => return self.on_client_answer(&id, outcome),
            Ok(Message::Notification { .. }) => return Ok(()),
            Err(err) => {
                let line = protocol::error_response(&err.id, err.code, &err.message, None);
                return self.output.write_all(&line).map_err(ServeError::Output);
            }
        };
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let answer = match (method.as_str(), name) {
            ("skill.list", _) => Ok(self.list()),
            ("skill.reload", _) => Ok(self.reload()?),
            ("skill.cancel", _) => match params.get("id").and_then(protocol::parse_id) {
                Some(call) => Ok(json!({ "cancelled": self.cancel(&call)? })),
                None => Err(error_object(
                    code::INVALID_PARAMS,
                    "skill.cancel needs {\"id\": ID}, the id of an earlier skill.invoke",
                )),
            },
            ("skill.invoke", Some(name)) => {
                let call_params = params.get("params").cloned().unwrap_or(json!({}));
                return self.invoke(id, &name, call_params);
            }
            ("skill.enable", Some(name)) => match self.slots.get_mut(&name) {
                Some(slot) => {
                    slot.crashes.clear();
                    slot.consecutive = 0;
                    slot.not_before = None;
                    let state = if slot.state == State::Disabled || slot.state == State::Failed {
                        State::Inactive
                    } else {
                        slot.state
                    };
                    self.set_state(&name, state, None)?;
                    Ok(json!({ "name": name, "state": state.name() }))
                }
                None => Err(no_such_skill(&name)),
            },
            ("skill.invoke" | "skill.enable", None) => Err(error_object(
                code::INVALID_PARAMS,
                format!("{method} needs {{\"name\": SKILL}}"),
            )),
            _ => Err(error_object(
                code::METHOD_NOT_FOUND,
                format!(
                    "no method {method:?} (skill.list, skill.invoke, skill.enable, skill.reload, \
                     skill.cancel)"
                ),
            )),
        };
        self.respond(&id, answer)
    }

    fn invoke(&mut self, id: Id, name: &str, params: Value) -> Result<(), ServeError> {
        // Checked at every call, not once: the person's profile directory
        // can change between calls, and a refused skill never starts.
        if let Some(refusal) = self.cached_refusal(name) {
            self.respond(
                &id,
                Err(error_object(code::SKILL_UNAVAILABLE, refusal.clone())),
            )?;
            return self.set_state(name, State::Failed, Some(refusal));
        }
        let Some(slot) = self.slots.get_mut(name) else {
            return self.respond(&id, Err(no_such_skill(name)));
        };
        if slot.skill.execution_mode == ExecutionMode::Template {
            let message = format!(
                "skill {name} is a template: it is never run (its instructions are text for a model)"
            );
            return self.respond(&id, Err(error_object(code::SKILL_UNAVAILABLE, message)));
        }
        if slot.state == State::Disabled {
            let message = format!(
                "skill {name} is disabled after {CRASH_LIMIT} crashes within a minute; \
                 skill.enable it or change its files"
            );
            return self.respond(&id, Err(error_object(code::SKILL_DISABLED, message)));
        }
        if !params.is_object() {
            let message = "params must be a JSON object".to_string();
            return self.respond(&id, Err(error_object(code::INVALID_PARAMS, message)));
        }
        if let Err(super::SkillError::Params { field, message, .. }) =
            super::launch::check_params(&slot.skill, &params)
        {
            let mut error = error_object(
                code::INVALID_PARAMS,
                format!("invalid params at {field}: {message}"),
            );
            error["data"] = json!({ "field": field });
            return self.respond(&id, Err(error));
        }
        slot.queue.push_back(Call { id, params });
        self.pump(name)
    }

    /// Move a skill along: start its host when a call waits and the
    /// back-off allows, hand it the next call, retire a stale host.
    fn pump(&mut self, name: &str) -> Result<(), ServeError> {
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
            match start_host(&self.options, &slot.skill) {
                Ok(mut host) => {
                    self.next_host += 1;
                    host.serial = self.next_host;
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
        host.watchdog = super::invocation_timeout(&slot.skill)
            .checked_add(ACTIVATION_TIMEOUT + WATCHDOG_SLACK)
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
    fn on_host_line(&mut self, name: &str, line: &[u8]) -> Result<(), ServeError> {
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return Ok(());
        };
        match message.get("event").and_then(Value::as_str) {
            Some("active") => return self.set_state(name, State::Active, None),
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
        self.respond(&call.id, answer)?;
        self.pump(name)
    }

    /// A host's control socket is readable.
    fn on_host_readable(&mut self, name: &str) -> Result<(), ServeError> {
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
    fn on_host_gone(&mut self, name: &str) -> Result<(), ServeError> {
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
        let exit_error = match &host.exited {
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
        let crash = !host.stopping
            && !host.timed_out
            && (host.failed.is_some() || host.exited.is_none() || persistent);
        let reason = host
            .failed
            .clone()
            .or(exit_error)
            .unwrap_or_else(|| "the skill's process ended".into());
        if let Some(call) = slot.inflight.take() {
            let message = format!("skill {name} ended before answering: {reason}");
            self.respond(&call.id, Err(error_object(code::SKILL_EXITED, message)))?;
        }
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        slot.stale = false;
        if !crash {
            self.set_state(name, State::Inactive, None)?;
            return self.pump(name);
        }
        slot.crashes.push_back(now);
        while slot
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW)
        {
            slot.crashes.pop_front();
        }
        slot.consecutive += 1;
        if slot.crashes.len() >= CRASH_LIMIT {
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
        }
        let wait = BACKOFF[(slot.consecutive - 1).min(BACKOFF.len() - 1)];
        slot.not_before = Some(now + wait);
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

    /// `skill.cancel`: drop the queued call `id`, or kill the host running
    /// it; either way answer it as cancelled. Whether there was one.
    fn cancel(&mut self, id: &Id) -> Result<bool, ServeError> {
        let mut cancelled = None;
        for (name, slot) in &mut self.slots {
            if let Some(at) = slot.queue.iter().position(|call| call.id == *id) {
                cancelled = slot.queue.remove(at);
                break;
            }
            if slot.inflight.as_ref().is_some_and(|call| call.id == *id) {
                cancelled = slot.inflight.take();
                if let Some(host) = &mut slot.host {
                    // On purpose: its end is no crash (no back-off), and
                    // the next call starts a fresh host. Its answer, if it
                    // is already on the way, finds no call in flight.
                    host.stopping = true;
                    host.watchdog = None;
                    kill_host(host);
                }
                let name = name.clone();
                self.asks.retain(|_, ask| ask.skill != name);
                break;
            }
        }
        let Some(call) = cancelled else {
            return Ok(false);
        };
        let error = error_object(code::CANCELLED, "cancelled by the client");
        self.respond(&call.id, Err(error))?;
        Ok(true)
    }

    /// A host asks: put the question to the client, or deny it at once
    /// when nobody is to be asked.
    fn on_ask(&mut self, name: &str, event: &Value) -> Result<(), ServeError> {
        let Some(ask) = event["ask"].as_u64() else {
            return Ok(());
        };
        let now = Instant::now();
        let ask_client = self.options.ask_client;
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        let Some(host) = &mut slot.host else {
            return Ok(());
        };
        // A host only asks when told to; and a persistent skill's work
        // between calls has no call to show the question with. Denied at
        // once rather than left waiting (its broker, and so its next
        // call, waits with it).
        let Some(call) = slot.inflight.as_ref().filter(|_| ask_client) else {
            write_answer(host, ask, "unanswered");
            return Ok(());
        };
        // The host's own deadline, never more than the terminal's.
        let until_ms = event["deadline_ms"].as_u64().unwrap_or(0);
        let left = Duration::from_millis(until_ms.saturating_sub(crate::clock::unix_ms()))
            .min(self.options.question_timeout);
        let deadline = now + left;
        // Waiting for a person is no hang: the host gets its invocation's
        // time again after the answer.
        let watchdog = super::invocation_timeout(&slot.skill)
            .checked_add(left + WATCHDOG_SLACK)
            .and_then(|wait| now.checked_add(wait));
        host.watchdog = host.watchdog.max(watchdog);
        self.next_ask += 1;
        let request = format!("ask-{}", self.next_ask);
        let params = json!({
            "skill": name,
            "call": call.id.to_value(),
            "caller": event["caller"],
            "action": event["action"],
            "target": event["target"],
            "question": event["question"],
            "deadline_ms": until_ms,
        });
        self.asks.insert(
            request.clone(),
            PendingAsk {
                skill: name.to_string(),
                host: host.serial,
                ask,
                call: call.id.clone(),
                deadline,
            },
        );
        self.send(&json!({
            "jsonrpc": "2.0",
            "id": request,
            "method": "skill.ask",
            "params": params,
        }))
    }

    /// The client's response to a request of ours: a `skill.ask`'s answer
    /// goes to the host that asked, if it still runs the call that asked.
    fn on_client_answer(
        &mut self,
        id: &Id,
        outcome: Result<Value, Value>,
    ) -> Result<(), ServeError> {
        let Id::String(request) = id else {
            return Ok(());
        };
        let Some(pending) = self.asks.remove(request) else {
            return Ok(());
        };
        if Instant::now() >= pending.deadline {
            return Ok(());
        }
        // An error, a malformed or unknown answer: nobody said no.
        let choice = outcome
            .as_ref()
            .ok()
            .and_then(|result| result.get("answer"))
            .and_then(Value::as_str)
            .and_then(crate::broker::prompt::Answer::from_word)
            .unwrap_or(crate::broker::prompt::Answer::Unanswered)
            .word();
        let Some(slot) = self.slots.get_mut(&pending.skill) else {
            return Ok(());
        };
        let running = slot.inflight.as_ref().is_some_and(|c| c.id == pending.call);
        if let Some(host) = slot.host.as_mut().filter(|h| h.serial == pending.host) {
            if running && !host.stopping {
                write_answer(host, pending.ask, choice);
            }
        }
        Ok(())
    }

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

    fn on_timers(&mut self) -> Result<(), ServeError> {
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

    fn on_watch_events(&mut self) {
        let Some(watcher) = &mut self.watcher else {
            return;
        };
        let mut buf = [0u8; 16 * 1024];
        let mut any = false;
        while let Ok(events) = watcher.read_events(&mut buf) {
            let mut count = 0;
            for _ in events {
                count += 1;
            }
            if count == 0 {
                break;
            }
            any = true;
        }
        if any {
            self.reload_at = Some(Instant::now() + RELOAD_SETTLE);
        }
    }

    /// Kill every skill's host and reap it.
    pub fn shutdown(&mut self) {
        for slot in self.slots.values_mut() {
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

    /// One message (a line without its newline) from the client.
    pub fn on_input_line(&mut self, line: &[u8]) -> Result<(), ServeError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        self.on_request(line)
    }

    /// A message from the client over the size limit (it was dropped).
    pub fn on_input_too_large(&mut self, bytes: usize) -> Result<(), ServeError> {
        let message = format!(
            "message of {bytes} bytes is over the {} byte limit",
            self.limits.max_message
        );
        let line = protocol::error_response(&Id::Null, code::TOO_LARGE, &message, None);
        self.output.write_all(&line).map_err(ServeError::Output)
    }

    /// The descriptors whose readiness gives the server work: the skill
    /// roots' watch and every host's control socket.
    pub fn watched(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds: Vec<BorrowedFd<'_>> = self.watcher.iter().map(|w| w.as_fd()).collect();
        for slot in self.slots.values() {
            if let Some(host) = &slot.host {
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
                looked = self.readable(&[], PollTimeout::ZERO)?.1;
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
        let watch_ready = self.watcher.as_ref().is_some_and(|w| is_ready(w.as_fd()));
        for name in hosts {
            self.on_host_readable(&name)?;
        }
        if watch_ready {
            self.on_watch_events();
        }
        self.on_timers()
    }

    /// Wait up to `timeout` for `extra` or [`Server::watched`] to be
    /// readable: which of `extra` are, and which watched descriptors.
    fn readable(
        &self,
        extra: &[BorrowedFd<'_>],
        timeout: PollTimeout,
    ) -> Result<(Vec<bool>, Vec<std::os::fd::RawFd>), ServeError> {
        let watched = self.watched();
        let mut fds: Vec<PollFd<'_>> = extra
            .iter()
            .chain(&watched)
            .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
            .collect();
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(source) => return Err(ServeError::Sys { op: "poll", source }),
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|p| p.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        let watched_ready = watched
            .iter()
            .zip(&ready[extra.len()..])
            .filter(|(_, ready)| **ready)
            .map(|(fd, _)| fd.as_raw_fd())
            .collect();
        Ok((ready[..extra.len()].to_vec(), watched_ready))
    }

    fn serve_loop(
        &mut self,
        input: &OwnedFd,
        signalfd: &SignalFd,
        framer: &mut Framer,
    ) -> Result<(), ServeError> {
        loop {
            let timeout = match self.next_wakeup() {
                None => PollTimeout::NONE,
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    // Round up: waking a millisecond early spins.
                    let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
                }
            };
            let (extra, watched) = self.readable(&[input.as_fd(), signalfd.as_fd()], timeout)?;
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

fn no_such_skill(name: &str) -> Value {
    error_object(
        code::NO_SUCH_SKILL,
        format!("no skill named {name:?} (skill.list shows the loaded ones)"),
    )
}

/// Answer a host's question `ask`.
fn write_answer(host: &mut HostProc, ask: u64, choice: &str) {
    let line = json!({ "answer": ask, "choice": choice });
    // A host that is gone shows as its end-of-file.
    let _ = host.control.write_all(format!("{line}\n").as_bytes());
}

fn kill_host(host: &mut HostProc) {
    // The host's death takes its sandbox with it (parent-death signal of
    // the sandbox's init), and its janitor removes the cgroup.
    let _ = kill(host.pid, Signal::SIGKILL);
}

fn start_host(options: &ServeOptions, skill: &Skill) -> std::io::Result<HostProc> {
    let (ours, theirs) = UnixStream::pair()?;
    let (ours, pid) = match fork_host(options, skill, theirs) {
        Ok(pid) => (ours, pid),
        // A thread was started in this process (an embedder's): forking
        // is unsafe there, so a fresh host is executed instead.
        Err(ForkError::Threaded(_)) => {
            let (ours, theirs) = UnixStream::pair()?;
            (ours, exec_host(options, skill, theirs)?)
        }
        Err(ForkError::Fork(errno)) => return Err(errno.into()),
        Err(ForkError::Status(err)) => return Err(err),
    };
    Ok(HostProc {
        pid,
        serial: 0,
        control: ours,
        framer: Framer::new(HOST_LINE_LIMIT),
        stopping: false,
        spent: false,
        timed_out: false,
        failed: None,
        exited: None,
        watchdog: None,
    })
}

/// The host as a fork of this process, running [`super::host_process`] on
/// the skill and profile this loop already holds: no exec of this binary,
/// no second parse of the manifest, its parameter schema and the profile
/// (about 2 ms of each activation), and the host runs exactly the manifest
/// and profile this loop checked. Of this process's descriptors it keeps
/// only its own control socket; it dies with this process.
fn fork_host(options: &ServeOptions, skill: &Skill, control: UnixStream) -> Result<Pid, ForkError> {
    let parent = nix::unistd::getpid();
    let launch = super::Launch {
        profile: options.profile.clone(),
        project: options.project.clone(),
        grants: options.grants.clone(),
        audit: options.audit.clone(),
        interactive: false,
        ask_client: options.ask_client,
        question_timeout: options.question_timeout,
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
        super::host_process(skill, &launch, UnixStream::from(control))
    })
}

fn exec_host(options: &ServeOptions, skill: &Skill, theirs: UnixStream) -> std::io::Result<Pid> {
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

use std::os::unix::process::CommandExt;
