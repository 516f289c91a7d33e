//! The supervisor's end of the channel: reads requests, decides, performs
//! the allowed ones on safely resolved objects, answers, and audits every
//! request. Runs inside the supervisor's poll loop; never blocks on the peer
//! (answers queue up to a bound, past which no new request is read).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use serde_json::{json, Value};

use super::permission::{self, Verdict};
use super::protocol::{self, code, Fill, Frame, Framer, Id, Limits, Message};
use crate::profile::policy::{BrokerPolicy, Decision};

/// Most bytes of answers queued for a peer that does not read them.
const OUTBOX_LIMIT: usize = 8 << 20;
/// Largest file content `fs.read` returns in one answer.
const READ_LIMIT: usize = 512 << 10;

/// Counts of decisions, for the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BrokerCounts {
    /// Requests answered.
    pub requests: u64,
    /// Allowed and performed.
    pub allowed: u64,
    /// Denied (including ask without anyone to ask).
    pub denied: u64,
    /// Malformed or unknown requests.
    pub errors: u64,
}

/// One run's broker.
pub struct Broker {
    policy: BrokerPolicy,
    project: OwnedFd,
    project_path: PathBuf,
    hidden: Vec<PathBuf>,
    audit: Option<std::fs::File>,
    run_id: String,
    limits: Limits,
    framer: Framer,
    outbox: Vec<u8>,
    /// Decision counts.
    pub counts: BrokerCounts,
    caller: String,
    /// Where the caller's program may be, to hash it when a grant is needed.
    caller_paths: Vec<PathBuf>,
    caller_hash: std::cell::OnceCell<String>,
    grants: Option<super::grants::GrantStore>,
    run_allowed: std::collections::BTreeSet<String>,
    prompter: Option<super::prompt::Prompter>,
    secrets: BTreeMap<String, (String, String)>,
    nested: Option<crate::profile::policy::Policy>,
    rate: Option<RateLimit>,
    /// Per-action counts.
    pub by_action: BTreeMap<String, u64>,
    /// A skill's declared permissions (`action` or `action:pattern`): the
    /// most it can ever get, whatever the profile, grants or a person say.
    declared: Option<Vec<String>>,
    /// The request being performed, so that the object a path actually
    /// resolved to is checked against its patterns, not only the string asked.
    performing: Option<String>,
    /// Requests this side sent (`skill.invoke`), oldest first.
    invocations: std::collections::VecDeque<String>,
    next_invocation: u64,
    answers: Vec<InvocationAnswer>,
    /// Shut the channel for writing once the outbox is empty.
    closing: bool,
    /// Prefix for the peer's `log` notifications on stderr; None: not shown.
    log_label: Option<String>,
}

/// The answer to a request this side sent.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationAnswer {
    /// The id the request was sent with.
    pub id: String,
    /// Its result, or the error object the peer sent.
    pub outcome: Result<Value, Value>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("project", &self.project_path)
            .field("counts", &self.counts)
            .finish()
    }
}

/// A token bucket.
#[derive(Debug)]
struct RateLimit {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl RateLimit {
    fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.per_second)
            .min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Failure {
    code: i64,
    message: String,
    rule: Option<String>,
}

fn fail(code: i64, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
        rule: None,
    }
}

impl Broker {
    /// A broker for a run rooted at `project`. `hidden` are the profile's
    /// hidden paths; `audit` receives one JSON line per request.
    pub fn new(
        policy: BrokerPolicy,
        project_path: &Path,
        hidden: &[PathBuf],
        audit: Option<std::fs::File>,
        run_id: String,
    ) -> std::io::Result<Broker> {
        let project = nix::fcntl::open(
            project_path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(std::io::Error::from)?;
        let hidden = hidden
            .iter()
            .map(|h| {
                if h.is_absolute() {
                    h.clone()
                } else {
                    project_path.join(h)
                }
            })
            .collect();
        let limits = Limits::default();
        Ok(Broker {
            policy,
            project,
            project_path: project_path.to_path_buf(),
            hidden,
            audit,
            run_id,
            limits,
            framer: Framer::new(limits.max_message),
            outbox: Vec::new(),
            counts: BrokerCounts::default(),
            by_action: BTreeMap::new(),
            caller: "command".into(),
            caller_paths: Vec::new(),
            caller_hash: std::cell::OnceCell::new(),
            grants: None,
            run_allowed: Default::default(),
            prompter: None,
            secrets: BTreeMap::new(),
            nested: None,
            rate: None,
            declared: None,
            performing: None,
            invocations: Default::default(),
            next_invocation: 0,
            answers: Vec::new(),
            closing: false,
            log_label: None,
        })
    }

    /// Answer at most `per_second` requests a second on average, with bursts
    /// of up to `burst`; the rest get -32006 instead of work.
    pub fn set_rate_limit(&mut self, per_second: f64, burst: f64) {
        self.rate = Some(RateLimit {
            per_second,
            burst,
            tokens: burst,
            last: Instant::now(),
        });
    }

    /// Run terminal.run commands in sandboxes of this policy (the caller's).
    pub fn use_nested_policy(&mut self, policy: crate::profile::policy::Policy) {
        self.nested = Some(policy);
    }

    /// Secrets this run may hand out, by name: the values come from the
    /// user (environment or file), never from the sandbox. Each gets an
    /// opaque handle that identifies it without revealing it.
    pub fn use_secrets(&mut self, secrets: Vec<(String, String)>) {
        for (name, value) in secrets {
            let mut random = [0u8; 16];
            let filled = std::fs::File::open("/dev/urandom")
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
                .is_ok();
            let tag: String = if filled {
                random.iter().map(|b| format!("{b:02x}")).collect()
            } else {
                format!(
                    "{:x}",
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_nanos())
                        .unwrap_or(0)
                )
            };
            let handle = format!("secret:{name}:{tag}");
            self.secrets.insert(name, (handle, value));
        }
    }

    /// Who is asking (`command:<program>`) and where its program may be on
    /// the host, for grants keyed by its content.
    pub fn set_caller(&mut self, caller: String, paths: Vec<PathBuf>) {
        self.caller = caller;
        self.caller_paths = paths;
    }

    /// Never allow more than `permissions` (a skill's manifest): anything
    /// else is denied without asking, and a pattern is checked against the
    /// path the request actually resolved to.
    pub fn restrict_to_declared(&mut self, permissions: Vec<String>) {
        self.declared = Some(permissions);
    }

    /// Print the peer's `log` notifications on stderr, prefixed with `label`.
    pub fn show_logs(&mut self, label: String) {
        self.log_label = Some(label);
    }

    /// Send `skill.invoke` with `params`; its answer comes back from
    /// [`Broker::take_answers`]. A JSON-RPC response with this id answers
    /// it, and so does a plain (non-JSON-RPC) message while it is the
    /// oldest one pending: that is what `process.send(result)` in a Node
    /// skill produces.
    pub fn invoke(&mut self, params: Value) -> String {
        self.next_invocation += 1;
        let id = format!("invoke-{}", self.next_invocation);
        let request =
            json!({"jsonrpc": "2.0", "id": id, "method": "skill.invoke", "params": params});
        self.outbox.extend(request.to_string().as_bytes());
        self.outbox.push(b'\n');
        self.invocations.push_back(id.clone());
        id
    }

    /// Stop waiting for the answer to `id` (it timed out).
    pub fn forget(&mut self, id: &str) {
        self.invocations.retain(|pending| pending != id);
    }

    /// Answers that arrived since the last call.
    pub fn take_answers(&mut self) -> Vec<InvocationAnswer> {
        std::mem::take(&mut self.answers)
    }

    /// Close the channel for writing once everything queued is sent: the
    /// peer reads end-of-file (Node's 'disconnect'), its cue to exit.
    pub fn close_when_sent(&mut self) {
        self.closing = true;
    }

    /// Whether the channel should be shut now (see [`Broker::close_when_sent`]).
    pub fn ready_to_close(&self) -> bool {
        self.closing && self.outbox.is_empty()
    }

    /// Why the declared permissions refuse `method` on `target`, if they do.
    fn undeclared(&self, method: &str, target: Option<&str>) -> Option<Verdict> {
        let declared = self.declared.as_ref()?;
        if matches!(method, "log" | "permission.query") {
            return None;
        }
        let covered = declared.iter().any(|entry| match entry.split_once(':') {
            None => entry == method,
            Some((action, pattern)) => {
                action == method && target.is_some_and(|t| permission::glob_matches(pattern, t))
            }
        });
        if covered {
            return None;
        }
        let listed = if declared.is_empty() {
            "none".to_string()
        } else {
            declared.join(", ")
        };
        Some(Verdict {
            decision: Decision::Deny,
            rule: format!("the skill's declared permissions ({listed})"),
        })
    }

    /// Use stored grants (and store "always" answers) in `store`.
    pub fn use_grants(&mut self, store: super::grants::GrantStore) {
        self.grants = Some(store);
    }

    /// Ask a person on this terminal when a decision is "ask".
    pub fn use_prompter(&mut self, prompter: super::prompt::Prompter) {
        self.prompter = Some(prompter);
    }

    fn caller_hash(&self) -> &str {
        self.caller_hash.get_or_init(|| {
            use sha2::{Digest, Sha256};
            for path in &self.caller_paths {
                if let Ok(mut file) = std::fs::File::open(path) {
                    let mut hasher = Sha256::new();
                    if std::io::copy(&mut file, &mut hasher).is_ok() {
                        return hasher
                            .finalize()
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect();
                    }
                }
            }
            "unknown".into()
        })
    }

    /// The decision for `method`, in DESIGN.md's order: a profile deny,
    /// then what was granted for this run, then stored grants, then the
    /// profile's rules and the risk default; "ask" goes to a person when
    /// there is one.
    fn verdict_for(&mut self, method: &str, target: Option<&str>) -> Verdict {
        let from_profile = permission::decide_for(&self.policy, method, target);
        if from_profile.decision == Decision::Deny && from_profile.rule.starts_with("broker.rules")
        {
            return from_profile;
        }
        if let Some(refusal) = self.undeclared(method, target) {
            return refusal;
        }
        if self.run_allowed.contains(method) {
            return Verdict {
                decision: Decision::Allow,
                rule: "approved for this run".into(),
            };
        }
        if let Some(store) = self
            .grants
            .as_ref()
            .filter(|g| g.may_apply(&self.project_path, &self.caller, method))
        {
            let hash = self.caller_hash().to_string();
            if let Some((n, grant)) = store.find(&self.project_path, &self.caller, &hash, method) {
                return Verdict {
                    decision: grant.decision,
                    rule: format!("grant #{n}"),
                };
            }
        }
        let verdict = from_profile;
        if verdict.decision != Decision::Ask || permission::risk(method).is_none() {
            return verdict;
        }
        let Some(prompter) = &mut self.prompter else {
            return verdict;
        };
        match prompter.ask(&self.caller, method, target) {
            super::prompt::Answer::Once => Verdict {
                decision: Decision::Allow,
                rule: "approved once".into(),
            },
            super::prompt::Answer::Run => {
                self.run_allowed.insert(method.to_string());
                Verdict {
                    decision: Decision::Allow,
                    rule: "approved for this run".into(),
                }
            }
            super::prompt::Answer::Always => {
                let hash = self.caller_hash().to_string();
                let grant = super::grants::Grant {
                    project: self.project_path.clone(),
                    caller: self.caller.clone(),
                    hash,
                    action: method.to_string(),
                    pattern: "*".into(),
                    decision: Decision::Allow,
                    time: SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0),
                    by_person: true,
                };
                let mut rule = "approved always".to_string();
                if let Some(store) = &mut self.grants {
                    store.add(grant);
                    if let Err(err) = store.save() {
                        rule =
                            format!("approved for this run (the grant could not be stored: {err})");
                        self.run_allowed.insert(method.to_string());
                    }
                }
                Verdict {
                    decision: Decision::Allow,
                    rule,
                }
            }
            super::prompt::Answer::Deny => Verdict {
                decision: Decision::Deny,
                rule: "a person's answer".into(),
            },
        }
    }

    /// Whether the broker wants to read more (false while answers pile up).
    pub fn wants_input(&self) -> bool {
        self.outbox.len() < OUTBOX_LIMIT
    }

    /// Whether answers wait to be written.
    pub fn wants_output(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Read what the peer sent and answer it. False when the peer closed.
    pub fn on_readable(&mut self, sock: BorrowedFd<'_>) -> bool {
        self.read_once(sock) != Fill::Closed
    }

    /// Read everything the peer left in the channel (it has exited).
    pub fn drain(&mut self, sock: BorrowedFd<'_>) {
        while self.read_once(sock) == Fill::Data {}
    }

    fn read_once(&mut self, sock: BorrowedFd<'_>) -> Fill {
        let mut frames = Vec::new();
        let filled = self.framer.fill(sock, &mut frames);
        for frame in frames {
            match frame {
                Frame::Line(line) if line.iter().all(u8::is_ascii_whitespace) => {}
                Frame::Line(line) => self.handle(&line),
                Frame::TooLarge { bytes } => {
                    self.counts.errors += 1;
                    let message = format!(
                        "message of {bytes} bytes is over the {} byte limit",
                        self.limits.max_message
                    );
                    self.outbox.extend(protocol::error_response(
                        &Id::Null,
                        code::TOO_LARGE,
                        &message,
                        None,
                    ));
                }
            }
        }
        filled
    }

    /// Write queued answers. False when the peer is gone.
    pub fn on_writable(&mut self, sock: BorrowedFd<'_>) -> bool {
        while !self.outbox.is_empty() {
            match nix::sys::socket::send(
                sock.as_raw_fd(),
                &self.outbox,
                nix::sys::socket::MsgFlags::MSG_DONTWAIT | nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(n) => {
                    self.outbox.drain(..n);
                }
                Err(Errno::EAGAIN) => return true,
                Err(Errno::EINTR) => {}
                Err(_) => return false,
            }
        }
        true
    }

    fn handle(&mut self, line: &[u8]) {
        let started = Instant::now();
        if let Some(rate) = &mut self.rate {
            if !rate.take() {
                self.counts.errors += 1;
                let id = protocol::parse(line, &self.limits)
                    .ok()
                    .and_then(|m| match m {
                        Message::Request { id, .. } => Some(id),
                        _ => None,
                    });
                if let Some(id) = id {
                    let message =
                        format!("more than {} requests a second; slow down", rate.per_second);
                    self.outbox.extend(protocol::error_response(
                        &id,
                        code::RATE_LIMITED,
                        &message,
                        None,
                    ));
                }
                return;
            }
        }
        let message = match protocol::parse(line, &self.limits) {
            Ok(message) => message,
            Err(_) if self.next_invocation > 0 && self.take_plain_answer(line) => return,
            Err(err) => {
                self.counts.errors += 1;
                self.outbox.extend(protocol::error_response(
                    &err.id,
                    err.code,
                    &err.message,
                    None,
                ));
                return;
            }
        };
        let (id, method, params) = match message {
            Message::Request { id, method, params } => (Some(id), method, params),
            Message::Notification { method, params } => (None, method, params),
            Message::Response { id, outcome } => {
                if let Id::String(id) = id {
                    if let Some(at) = self.invocations.iter().position(|p| *p == id) {
                        self.invocations.remove(at);
                        self.answers.push(InvocationAnswer { id, outcome });
                    }
                }
                return;
            }
        };
        *self.by_action.entry(method.clone()).or_default() += 1;
        // What rules and the audit log match against: a path relative to the
        // project root, a command's program, or a secret's name.
        let target = match method.as_str() {
            "terminal.run" => params
                .get("argv")
                .and_then(|a| a.get(0))
                .and_then(Value::as_str)
                .map(str::to_owned),
            "secrets.get" => params
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => params.get("path").and_then(Value::as_str).map(|p| {
                Path::new(p)
                    .strip_prefix(&self.project_path)
                    .map(|r| r.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| p.to_owned())
            }),
        };
        // A query never asks anyone; everything else may.
        let verdict = if method == "permission.query" {
            permission::decide(&self.policy, &method)
        } else {
            self.verdict_for(&method, target.as_deref())
        };
        self.performing = Some(method.clone());
        let result = self.perform(&method, &params, &verdict);
        self.performing = None;
        self.counts.requests += 1;
        let decision = match (&result, verdict.decision) {
            (Err(f), _) if f.code == code::PERMISSION_DENIED || f.code == code::NEEDS_APPROVAL => {
                self.counts.denied += 1;
                "deny"
            }
            (Err(f), _) if f.code == code::METHOD_NOT_FOUND || f.code == code::INVALID_PARAMS => {
                self.counts.errors += 1;
                "error"
            }
            (_, _) => {
                self.counts.allowed += 1;
                "allow"
            }
        };
        let rule = match &result {
            Err(Failure {
                rule: Some(rule), ..
            }) => rule.clone(),
            _ => verdict.rule.clone(),
        };
        self.audit(&method, target.as_deref(), decision, &rule, started);
        if let Some(id) = id {
            let line = match result {
                Ok(value) => protocol::response(&id, &value),
                Err(f) => protocol::error_response(
                    &id,
                    f.code,
                    &f.message,
                    Some(&json!({ "rule": rule })),
                ),
            };
            self.outbox.extend(line);
        }
    }

    /// A line that is JSON but no JSON-RPC message: the result of the
    /// oldest pending invocation (Node's `process.send(value)`). Node's own
    /// internal messages are skipped. False when it is not such a line.
    fn take_plain_answer(&mut self, line: &[u8]) -> bool {
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return false;
        };
        if value.get("jsonrpc").is_some() {
            return false;
        }
        if value
            .get("cmd")
            .and_then(Value::as_str)
            .is_some_and(|cmd| cmd.starts_with("NODE_"))
        {
            return true;
        }
        match self.invocations.pop_front() {
            Some(id) => self.answers.push(InvocationAnswer {
                id,
                outcome: Ok(value),
            }),
            None => {
                self.counts.errors += 1;
                if let Some(label) = &self.log_label {
                    eprintln!("{label}: ignored a message that answers no pending invocation");
                }
            }
        }
        true
    }

    fn audit(
        &mut self,
        method: &str,
        target: Option<&str>,
        decision: &str,
        rule: &str,
        started: Instant,
    ) {
        let Some(file) = &mut self.audit else { return };
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let entry = json!({
            "time": time,
            "run": self.run_id,
            "caller": self.caller,
            "method": method,
            "target": target,
            "decision": decision,
            "rule": rule,
            "duration_us": started.elapsed().as_micros() as u64,
        });
        // An audit line that cannot be written is reported once on stderr by
        // the caller of the run; the broker keeps answering.
        let _ = writeln!(file, "{entry}");
    }

    fn perform(&self, method: &str, params: &Value, verdict: &Verdict) -> Result<Value, Failure> {
        if permission::risk(method).is_none() {
            return Err(fail(
                code::METHOD_NOT_FOUND,
                format!("no method {method:?}"),
            ));
        }
        if method == "permission.query" {
            let action = params
                .get("action")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    fail(
                        code::INVALID_PARAMS,
                        "permission.query needs {\"action\": NAME}",
                    )
                })?;
            let target = params.get("target").and_then(Value::as_str);
            let v = self
                .undeclared(action, target)
                .unwrap_or_else(|| permission::decide_for(&self.policy, action, target));
            let effective = if v.decision == Decision::Ask {
                "deny"
            } else {
                decision_name(v.decision)
            };
            return Ok(
                json!({ "action": action, "decision": decision_name(v.decision), "effective": effective, "rule": v.rule }),
            );
        }
        match verdict.decision {
            Decision::Allow => {}
            Decision::Deny => {
                return Err(Failure {
                    code: code::PERMISSION_DENIED,
                    message: format!("{method} is denied by {}", verdict.rule),
                    rule: None,
                })
            }
            Decision::Ask => {
                return Err(Failure {
                    code: code::NEEDS_APPROVAL,
                    message: format!(
                        "{method} needs approval ({}) and nobody can be asked in this run; \
                         pre-approve it with `sandbox run --grant {method}`, or allow it in the profile: \
                         [broker] rules = {{ \"{method}\" = \"allow\" }}",
                        verdict.rule
                    ),
                    rule: None,
                })
            }
        }
        match method {
            "log" => {
                if let Some(label) = &self.log_label {
                    let text = params
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    // Escaped: a skill's log must not drive the terminal.
                    eprintln!("{label}: {}", text.escape_debug());
                }
                Ok(Value::Null)
            }
            "fs.stat" => self.stat(params),
            "fs.read" => self.read(params),
            "fs.list" => self.list(params),
            "fs.write" => self.write(params),
            "fs.mkdir" => self.mkdir(params),
            "fs.delete" => self.delete(params),
            "secrets.get" => self.secret(params),
            "terminal.run" => self.terminal(params),
            _ => Err(fail(
                code::METHOD_NOT_FOUND,
                format!("{method} is not provided by this version of the broker"),
            )),
        }
    }

    /// Resolve `path` once, beneath the project root, refusing `..` escapes,
    /// absolute symlinks and magic links; then check the object actually
    /// opened against the hidden paths.
    fn open(&self, params: &Value, flags: OFlag) -> Result<(OwnedFd, PathBuf), Failure> {
        let (fd, real) = self.open_any(params, flags)?;
        self.check_resolved(&real, path_param(params)?)?;
        Ok((fd, real))
    }

    /// Patterns decide on the path as asked; the object it resolved to
    /// (through symlinks or `..` inside the project) must pass them too, or
    /// `dist/../.env` would slip past a `fs.write:dist/**` declaration and a
    /// symlink past a deny pattern.
    fn check_resolved(&self, real: &Path, path: &str) -> Result<(), Failure> {
        let Some(method) = &self.performing else {
            return Ok(());
        };
        let relative = relative_display(real, &self.project_path);
        let refusal = self.undeclared(method, Some(&relative)).or_else(|| {
            let verdict = permission::decide_for(&self.policy, method, Some(&relative));
            let pattern_rule = format!("broker.rules.\"{method}:");
            (verdict.decision == Decision::Deny && verdict.rule.starts_with(&pattern_rule))
                .then_some(verdict)
        });
        match refusal {
            Some(verdict) if relative != path.trim_start_matches("./") => Err(Failure {
                code: code::PERMISSION_DENIED,
                message: format!(
                    "{path} resolves to {relative}, where {method} is denied by {}",
                    verdict.rule
                ),
                rule: Some(verdict.rule),
            }),
            Some(verdict) => Err(Failure {
                code: code::PERMISSION_DENIED,
                message: format!("{method} is denied by {}", verdict.rule),
                rule: Some(verdict.rule),
            }),
            None => Ok(()),
        }
    }

    fn open_any(&self, params: &Value, flags: OFlag) -> Result<(OwnedFd, PathBuf), Failure> {
        let path = path_param(params)?;
        let requested = Path::new(path);
        let relative: PathBuf = if requested.is_absolute() {
            requested
                .strip_prefix(&self.project_path)
                .map(Path::to_path_buf)
                .map_err(|_| denied_outside(path))?
        } else {
            requested.to_path_buf()
        };
        let relative = if relative.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            relative
        };
        // openat2 rejects flags O_PATH does not take (O_NOCTTY among them).
        let extra = if flags.contains(OFlag::O_PATH) {
            OFlag::empty()
        } else {
            OFlag::O_NOCTTY
        };
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC | extra)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        // With RESOLVE_BENEATH the kernel answers EAGAIN when a rename
        // anywhere in the system raced a `..` in the path, because it can no
        // longer prove the walk stayed beneath; retrying is the documented
        // answer, bounded so a rename storm cannot stall the broker.
        let mut attempt = 0;
        let opened = loop {
            match nix::fcntl::openat2(self.project.as_fd(), &relative, how) {
                Err(Errno::EAGAIN) if attempt < 64 => attempt += 1,
                other => break other,
            }
        };
        let fd = opened.map_err(|errno| match errno {
            Errno::EXDEV | Errno::ELOOP => denied_outside(path),
            Errno::ENOENT | Errno::ENOTDIR => fail(
                code::NOT_FOUND,
                format!("{path}: no such file or directory"),
            ),
            Errno::EAGAIN => fail(
                code::RATE_LIMITED,
                format!("{path}: renames keep racing the lookup; try again"),
            ),
            other => fail(code::INTERNAL_ERROR, format!("{path}: {}", other.desc())),
        })?;
        // What was opened, not what was asked for: a symlink to a hidden file
        // must not reveal it.
        let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| fail(code::INTERNAL_ERROR, format!("{path}: {e}")))?;
        self.refuse_hidden(&real, path)?;
        Ok((fd, real))
    }

    /// Resolve the parent directory of `path` beneath the project root and
    /// return it with the final component, which must be a plain name: the
    /// action then works relative to that directory fd, so nothing can swap
    /// a symlink into the path between the check and the use.
    fn open_parent(
        &self,
        params: &Value,
    ) -> Result<(OwnedFd, std::ffi::OsString, PathBuf), Failure> {
        let path = path_param(params)?;
        let requested = Path::new(path);
        let name = match requested.components().next_back() {
            Some(Component::Normal(name)) => name.to_os_string(),
            _ => {
                return Err(fail(
                    code::INVALID_PARAMS,
                    format!("{path}: the last component must be a name"),
                ))
            }
        };
        let parent = requested
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let parent = if parent.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            parent
        };
        let parent_str = parent
            .to_str()
            .ok_or_else(|| fail(code::INVALID_PARAMS, "path is not UTF-8"))?;
        let (dir, real_dir) = self.open_any(
            &json!({ "path": parent_str }),
            OFlag::O_PATH | OFlag::O_DIRECTORY,
        )?;
        let real = real_dir.join(&name);
        self.refuse_hidden(&real, path)?;
        self.check_resolved(&real, path)?;
        Ok((dir, name, real))
    }

    fn write(&self, params: &Value) -> Result<Value, Failure> {
        use base64::Engine;
        let content = params
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                fail(
                    code::INVALID_PARAMS,
                    "fs.write needs {\"path\", \"content\"}",
                )
            })?;
        let bytes = match params
            .get("encoding")
            .and_then(Value::as_str)
            .unwrap_or("utf-8")
        {
            "utf-8" => content.as_bytes().to_vec(),
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(content)
                .map_err(|e| fail(code::INVALID_PARAMS, format!("content is not base64: {e}")))?,
            other => {
                return Err(fail(
                    code::INVALID_PARAMS,
                    format!("unknown encoding {other:?} (utf-8, base64)"),
                ))
            }
        };
        let append = params
            .get("append")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let (dir, name, real) = self.open_parent(params)?;
        // No O_TRUNC here: the link count is checked on the opened file first.
        let mut flags = OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC
            | OFlag::O_NOCTTY;
        if append {
            flags |= OFlag::O_APPEND;
        }
        let fd = nix::fcntl::openat(
            &dir,
            name.as_os_str(),
            flags,
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .map_err(|e| match e {
            Errno::ELOOP => fail(
                code::PERMISSION_DENIED,
                "the target is a symlink; fs.write does not follow links",
            ),
            other => fail(code::INTERNAL_ERROR, other.desc()),
        })?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(fail(
                code::INVALID_PARAMS,
                "fs.write writes regular files only",
            ));
        }
        if st.st_nlink > 1 {
            // A hard link may lead to a file outside the project.
            return Err(Failure {
                code: code::PERMISSION_DENIED,
                message: "the target has more than one hard link; writing it could change a file outside the project".into(),
                rule: Some("hard links".into()),
            });
        }
        if !append {
            nix::unistd::ftruncate(&fd, 0).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
        }
        let mut written = 0;
        while written < bytes.len() {
            match nix::unistd::write(&fd, &bytes[written..]) {
                Ok(n) => written += n,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(fail(code::INTERNAL_ERROR, e.desc())),
            }
        }
        Ok(json!({ "path": relative_display(&real, &self.project_path), "written": written }))
    }

    fn mkdir(&self, params: &Value) -> Result<Value, Failure> {
        let (dir, name, real) = self.open_parent(params)?;
        nix::sys::stat::mkdirat(
            &dir,
            name.as_os_str(),
            nix::sys::stat::Mode::from_bits_truncate(0o755),
        )
        .map_err(|e| match e {
            Errno::EEXIST => fail(code::INVALID_PARAMS, "it already exists"),
            other => fail(code::INTERNAL_ERROR, other.desc()),
        })?;
        Ok(json!({ "path": relative_display(&real, &self.project_path) }))
    }

    fn delete(&self, params: &Value) -> Result<Value, Failure> {
        let (dir, name, real) = self.open_parent(params)?;
        let flag = match nix::sys::stat::fstatat(
            &dir,
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                nix::unistd::UnlinkatFlags::RemoveDir
            }
            Ok(_) => nix::unistd::UnlinkatFlags::NoRemoveDir,
            Err(_) => return Err(fail(code::NOT_FOUND, "no such file or directory")),
        };
        nix::unistd::unlinkat(&dir, name.as_os_str(), flag).map_err(|e| match e {
            Errno::ENOTEMPTY => fail(
                code::INVALID_PARAMS,
                "the directory is not empty (fs.delete is not recursive)",
            ),
            other => fail(code::INTERNAL_ERROR, other.desc()),
        })?;
        Ok(json!({ "path": relative_display(&real, &self.project_path) }))
    }

    fn list(&self, params: &Value) -> Result<Value, Failure> {
        let (fd, real) = self.open(params, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
        let mut dir =
            nix::dir::Dir::from_fd(fd).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
        let mut entries = Vec::new();
        for entry in dir.iter().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            let full = real.join(&name);
            if self.hidden.iter().any(|h| full.starts_with(h)) {
                continue;
            }
            let kind = match entry.file_type() {
                Some(nix::dir::Type::Directory) => "directory",
                Some(nix::dir::Type::File) => "file",
                Some(nix::dir::Type::Symlink) => "symlink",
                _ => "other",
            };
            entries.push(json!({ "name": name, "type": kind }));
            if entries.len() >= 10_000 {
                break;
            }
        }
        Ok(json!({ "path": relative_display(&real, &self.project_path), "entries": entries }))
    }

    /// Run a command in a nested sandbox with the caller's policy, capture
    /// its output (capped), and return its status.
    fn terminal(&self, params: &Value) -> Result<Value, Failure> {
        const OUTPUT_CAP: usize = 256 << 10;
        let policy = self
            .nested
            .clone()
            .ok_or_else(|| fail(code::INTERNAL_ERROR, "terminal.run is not set up"))?;
        let argv: Vec<String> = params
            .get("argv")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .filter(|a| !a.is_empty())
            .ok_or_else(|| {
                fail(
                    code::INVALID_PARAMS,
                    "terminal.run needs {\"argv\": [PROGRAM, ARGS...]}",
                )
            })?;
        let timeout = params
            .get("timeout")
            .and_then(Value::as_f64)
            .unwrap_or(30.0)
            .clamp(0.1, 3600.0);
        let mut command = crate::Command::new(&argv[0], policy);
        command.args(&argv[1..]).project(&self.project_path);
        if let Some(cwd) = params.get("cwd").and_then(Value::as_str) {
            let (_, real) =
                self.open(&json!({ "path": cwd }), OFlag::O_PATH | OFlag::O_DIRECTORY)?;
            command.current_dir(real);
        }
        if let Some(env) = params.get("env").and_then(Value::as_object) {
            for (name, value) in env {
                // Variables that make the dynamic loader or libc load code.
                let upper = name.to_ascii_uppercase();
                if upper.starts_with("LD_")
                    || matches!(
                        upper.as_str(),
                        "GCONV_PATH" | "HOSTALIASES" | "LOCALDOMAIN" | "RESOLV_HOST_CONF"
                    )
                {
                    return Err(Failure {
                        code: code::PERMISSION_DENIED,
                        message: format!("the environment variable {name} is refused: it can load code into the command"),
                        rule: Some("terminal.run environment".into()),
                    });
                }
                let value = value
                    .as_str()
                    .ok_or_else(|| fail(code::INVALID_PARAMS, "env values must be strings"))?;
                command.env(name, value);
            }
        }
        let pipe = || {
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))
        };
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let (in_r, in_w) = pipe()?;
        command
            .stdin(crate::Stdio::Fd(in_r))
            .stdout(crate::Stdio::Fd(out_w))
            .stderr(crate::Stdio::Fd(err_w));
        let mut child = command
            .spawn()
            .map_err(|e| fail(code::INTERNAL_ERROR, format!("starting {}: {e}", argv[0])))?;
        let stdin = params
            .get("stdin")
            .and_then(Value::as_str)
            .unwrap_or("")
            .as_bytes()
            .to_vec();
        let mut stdin_fd = Some(in_w);
        let mut written = 0;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut out_open, mut err_open) = (true, true);
        let (mut out_cut, mut err_cut) = (false, false);
        let deadline = Instant::now() + std::time::Duration::from_secs_f64(timeout);
        let mut timed_out = false;
        while out_open || err_open {
            if stdin_fd.is_some() && written >= stdin.len() {
                stdin_fd = None; // end-of-file for the command
            }
            let mut fds = Vec::new();
            if out_open {
                fds.push(nix::poll::PollFd::new(
                    out_r.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                ));
            }
            if err_open {
                fds.push(nix::poll::PollFd::new(
                    err_r.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                ));
            }
            if let Some(fd) = &stdin_fd {
                fds.push(nix::poll::PollFd::new(
                    fd.as_fd(),
                    nix::poll::PollFlags::POLLOUT,
                ));
            }
            let left = deadline
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as i32;
            if left == 0 {
                timed_out = true;
                let _ = child.kill();
                break;
            }
            let _ = nix::poll::poll(
                &mut fds,
                nix::poll::PollTimeout::try_from(left).unwrap_or(nix::poll::PollTimeout::MAX),
            );
            drop(fds);
            let mut buf = [0u8; 16 * 1024];
            for (open, fd, sink, cut) in [
                (&mut out_open, &out_r, &mut out, &mut out_cut),
                (&mut err_open, &err_r, &mut err, &mut err_cut),
            ] {
                if !*open {
                    continue;
                }
                match nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
                    .and_then(|_| nix::unistd::read(fd, &mut buf))
                {
                    Ok(0) => *open = false,
                    Ok(n) => {
                        let room = OUTPUT_CAP.saturating_sub(sink.len()).min(n);
                        sink.extend_from_slice(&buf[..room]);
                        *cut |= room < n;
                    }
                    Err(Errno::EAGAIN | Errno::EINTR) => {}
                    Err(_) => *open = false,
                }
            }
            if let Some(fd) = &stdin_fd {
                let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
                match nix::unistd::write(fd, &stdin[written..]) {
                    Ok(n) => written += n,
                    Err(Errno::EAGAIN | Errno::EINTR) => {}
                    Err(_) => stdin_fd = None,
                }
            }
        }
        let finished = child.wait();
        let status = finished.result.map_err(|e| match &e {
            crate::SpawnError::Exec { .. } => fail(code::NOT_FOUND, e.to_string()),
            _ => fail(code::INTERNAL_ERROR, e.to_string()),
        })?;
        Ok(json!({
            "exit_code": status.code(),
            "signal": status.signal(),
            "timed_out": timed_out,
            "stdout": String::from_utf8_lossy(&out),
            "stderr": String::from_utf8_lossy(&err),
            "stdout_truncated": out_cut,
            "stderr_truncated": err_cut,
        }))
    }

    fn secret(&self, params: &Value) -> Result<Value, Failure> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| fail(code::INVALID_PARAMS, "secrets.get needs {\"name\": STRING}"))?;
        let (handle, value) = self.secrets.get(name).ok_or_else(|| {
            fail(
                code::NOT_FOUND,
                format!("no secret {name:?} in this run (pass it with --secret {name}=env:VAR)"),
            )
        })?;
        // The plaintext only where the profile allows reading secrets
        // outright; otherwise the handle is all the sandbox gets.
        if permission::decide(&self.policy, "secrets.read").decision == Decision::Allow {
            Ok(json!({ "name": name, "handle": handle, "value": value }))
        } else {
            Ok(json!({ "name": name, "handle": handle }))
        }
    }

    /// Refuse `real` (a resolved path) when the profile hides it.
    fn refuse_hidden(&self, real: &Path, path: &str) -> Result<(), Failure> {
        match self.hidden.iter().find(|h| real.starts_with(h)) {
            Some(hidden) => {
                let shown = hidden.strip_prefix(&self.project_path).unwrap_or(hidden);
                Err(Failure {
                    code: code::PERMISSION_DENIED,
                    message: format!("{path} is hidden by the profile ({})", shown.display()),
                    rule: Some("filesystem.hide".into()),
                })
            }
            None => Ok(()),
        }
    }

    fn stat(&self, params: &Value) -> Result<Value, Failure> {
        let (fd, real) = self.open(params, OFlag::O_PATH)?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => "file",
            libc::S_IFDIR => "directory",
            libc::S_IFLNK => "symlink",
            _ => "other",
        };
        Ok(json!({
            "path": relative_display(&real, &self.project_path),
            "type": kind,
            "size": st.st_size,
            "mode": st.st_mode & 0o7777,
            "modified": st.st_mtime,
        }))
    }

    fn read(&self, params: &Value) -> Result<Value, Failure> {
        use base64::Engine;
        let (fd, real) = self.open(params, OFlag::O_RDONLY)?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(fail(
                code::INVALID_PARAMS,
                "fs.read reads regular files only",
            ));
        }
        let offset = params.get("offset").and_then(Value::as_u64).unwrap_or(0);
        let length = params
            .get("length")
            .and_then(Value::as_u64)
            .map_or(READ_LIMIT, |l| (l as usize).min(READ_LIMIT));
        let mut content = vec![0u8; length];
        let mut filled = 0;
        while filled < length {
            match nix::sys::uio::pread(&fd, &mut content[filled..], (offset + filled as u64) as i64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(fail(code::INTERNAL_ERROR, e.desc())),
            }
        }
        content.truncate(filled);
        let truncated = (offset + filled as u64) < st.st_size as u64;
        let (text, encoding) = match String::from_utf8(content) {
            Ok(text) => (text, "utf-8"),
            Err(e) => (
                base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                "base64",
            ),
        };
        Ok(json!({
            "path": relative_display(&real, &self.project_path),
            "content": text,
            "encoding": encoding,
            "size": st.st_size,
            "truncated": truncated,
        }))
    }
}

/// The `path` parameter, which may not hold a NUL byte.
fn path_param(params: &Value) -> Result<&str, Failure> {
    let path = params
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| fail(code::INVALID_PARAMS, "needs {\"path\": STRING}"))?;
    if path.contains('\0') {
        return Err(fail(code::INVALID_PARAMS, "the path contains a NUL byte"));
    }
    Ok(path)
}

fn denied_outside(path: &str) -> Failure {
    Failure {
        code: code::PERMISSION_DENIED,
        message: format!("{path} is outside the project root"),
        rule: Some("project root".into()),
    }
}

fn decision_name(decision: Decision) -> &'static str {
    match decision {
        Decision::Allow => "allow",
        Decision::Ask => "ask",
        Decision::Deny => "deny",
    }
}

fn relative_display(real: &Path, project: &Path) -> String {
    let relative = real.strip_prefix(project).unwrap_or(real);
    let shown: PathBuf = relative
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if shown.as_os_str().is_empty() {
        ".".into()
    } else {
        OsStr::from_bytes(shown.as_os_str().as_bytes())
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_limit_answers_excess_requests_with_an_error() {
        let project = tempfile::tempdir().unwrap();
        let policy = crate::profile::load("strict").unwrap();
        let mut broker = Broker::new(policy.broker, project.path(), &[], None, "t".into()).unwrap();
        broker.set_rate_limit(1.0, 3.0);
        for _ in 0..5 {
            broker.handle(br#"{"jsonrpc":"2.0","id":1,"method":"permission.query","params":{"action":"fs.read"}}"#);
        }
        let answers: Vec<Value> = broker
            .outbox
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(answers.len(), 5);
        assert!(
            answers[..3].iter().all(|a| a.get("result").is_some()),
            "the burst is served"
        );
        assert!(
            answers[3..]
                .iter()
                .all(|a| a["error"]["code"] == code::RATE_LIMITED),
            "{answers:?}"
        );
        assert_eq!(broker.counts.errors, 2);
    }
}
