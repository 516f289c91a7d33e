//! One run's broker: reads requests off the channel, decides on the object
//! each one actually resolved to, performs the allowed ones, answers, and
//! audits every request. It runs inside the supervisor's poll loop and
//! never blocks it: the channel is read and written without waiting, work
//! is admitted only while few answers are queued, no object is opened in a
//! way that can wait, and `terminal.run` is a job of the same loop
//! ([`Broker::poll_fds`], [`Broker::deadline`], [`Broker::step`]).
//!
//! The jobs are split by concern: [`super::transport`] (framing, queued
//! answers, their bounds), [`super::decision`] (rules, declared
//! permissions, grants, asking), [`super::fs`], [`super::terminal`] and
//! [`super::secrets`] (the action families), [`super::invoke`] (skill
//! invocations), [`super::identity`] (what the caller runs) and
//! [`super::audit`].

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::{Component, Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nix::fcntl::OFlag;
use nix::poll::PollFlags;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::audit::{Audit, Entry};
use super::decision::Decider;
use super::fs::{self as fs_actions, Resolver};
use super::identity::{self, Program};
use super::invoke::{Invocations, Plain};
use super::permission::{self, Verdict};
use super::protocol::{self, code, Id, Message};
use super::protocol::{fail, Failure};
use super::secrets::{SecretParams, SecretSpec, Secrets};
use super::terminal::{Job, RunParams};
use super::transport::Transport;
use crate::action::{Action, Permission};
use crate::jsonl::{Fill, Frame};
use crate::profile::policy::{BrokerPolicy, Decision};

pub use super::invoke::InvocationAnswer;

/// Counts of decisions, for the report.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct BrokerCounts {
    /// Requests answered.
    pub requests: u64,
    /// Allowed and performed.
    pub allowed: u64,
    /// Denied (including ask without anyone to ask).
    pub denied: u64,
    /// Malformed or unknown requests, and those the rate limit refused.
    pub errors: u64,
    /// Refused by the rate limit (counted in `errors` too).
    pub rate_limited: u64,
}

/// The rate limit of a run's broker (requests a second, and the burst
/// answered before it applies): far above any real client, low enough that
/// a flooding sandbox cannot keep the supervisor's core busy for free.
/// `scripts/bench-broker` measures throughput under it.
pub const RATE_LIMIT: (f64, f64) = (100_000.0, 200_000.0);

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

/// What a request acted on, for the audit line.
#[derive(Debug, Default)]
struct Record {
    target: Option<String>,
    requested: Option<String>,
    rule: String,
}

/// What a request's answer waits for.
#[derive(Debug)]
enum Work {
    /// A `terminal.run` job. Boxed: it holds a nested run, which holds a
    /// broker.
    Terminal(Box<Job>),
    /// A `net.http` request in the net process.
    Http {
        /// Its id on the link.
        fetch: u64,
        /// A secret is bound to its host: an encoded body is withheld.
        bound_host: bool,
        /// When it is answered with a timeout if the net process has not
        /// answered (it keeps the request's own timeout; this is a bound).
        deadline: Instant,
    },
}

/// A request whose answer waits for a job.
#[derive(Debug)]
struct Waiting {
    job: Work,
    id: Option<Id>,
    method: Action,
    record: Record,
    started: Instant,
}

enum Served {
    Done(Value),
    Started(Work),
}

/// `permission.query` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryParams {
    action: Action,
    target: Option<String>,
}

/// `log` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogParams {
    #[serde(default)]
    message: String,
    #[allow(dead_code)]
    level: Option<String>,
}

/// One run's broker.
pub struct Broker {
    transport: Transport,
    resolver: Resolver,
    decider: Decider,
    audit: Option<Audit>,
    run_id: String,
    /// Decision counts.
    pub counts: BrokerCounts,
    /// Per-action counts.
    pub by_action: BTreeMap<String, u64>,
    program: Option<Program>,
    secrets: Secrets,
    nested: Option<std::sync::Arc<dyn super::terminal::NestedRunner>>,
    rate: Option<RateLimit>,
    /// Requests the rate limit refused since the last audit line about it.
    rate_refused: u64,
    invocations: Invocations,
    /// Prefix for the peer's `log` notifications on stderr; None: not shown.
    log_label: Option<String>,
    /// The run's own deadline: no job outlives it.
    run_deadline: Option<Instant>,
    waiting: Option<Waiting>,
    network: Option<super::network::Network>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("project", &self.resolver.project_path())
            .field("counts", &self.counts)
            .finish()
    }
}

/// Parameters as the typed struct of their method; absent ones are `{}`.
/// An unknown or mistyped field is -32602 naming it.
fn typed<T: DeserializeOwned>(action: Action, params: Value) -> Result<T, Failure> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params)
        .map_err(|e| fail(code::INVALID_PARAMS, format!("{action} params: {e}")))
}

/// The parameters of an fs action: the whole `P` for `full` (fs.read,
/// fs.write), only a path for the others of its family.
fn path_params<P: DeserializeOwned>(
    action: Action,
    full: Action,
    params: Value,
    path_of: fn(&P) -> &String,
) -> Result<(String, Option<P>), Failure> {
    if action == full {
        let whole: P = typed(action, params)?;
        Ok((path_of(&whole).clone(), Some(whole)))
    } else {
        let only: fs_actions::PathParams = typed(action, params)?;
        Ok((only.path, None))
    }
}

/// `path` without `.` and with `..` folded lexically: only to refuse early
/// what a deny rule names, before anything is opened.
fn lexical(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(name) => parts.push(name.to_str().unwrap_or("")),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

fn decision_name(decision: Decision) -> &'static str {
    match decision {
        Decision::Allow => "allow",
        Decision::Ask => "ask",
        Decision::Deny => "deny",
    }
}

impl Broker {
    /// A broker for a run rooted at `project`. `hidden` are the profile's
    /// hidden paths, `rules` its secrets and protected entries; `audit`
    /// receives one JSON line per request.
    pub fn new(
        policy: BrokerPolicy,
        project_path: &Path,
        hidden: &[PathBuf],
        rules: crate::project::Rules,
        audit: Option<std::fs::File>,
        run_id: String,
    ) -> std::io::Result<Broker> {
        let resolver = Resolver::new(project_path, hidden, rules)?;
        let decider = Decider::new(policy, project_path.to_path_buf());
        Ok(Broker {
            transport: Transport::new(),
            resolver,
            decider,
            audit: audit.map(Audit::new),
            run_id,
            counts: BrokerCounts::default(),
            by_action: BTreeMap::new(),
            program: None,
            secrets: Secrets::default(),
            nested: None,
            rate: None,
            rate_refused: 0,
            invocations: Invocations::default(),
            log_label: None,
            run_deadline: None,
            waiting: None,
            network: None,
        })
    }

    /// Create, write and remove the project's files as its owner (root's
    /// supervisor on a project it may not own), as the sandbox itself does.
    pub fn write_as_project_owner(&mut self) -> std::io::Result<()> {
        self.resolver.write_as_owner()
    }

    /// Append the audit lines to `audit` from now on (a warm run learns
    /// its audit file when it gets its command).
    pub fn use_audit(&mut self, audit: std::fs::File) {
        self.audit = Some(Audit::new(audit));
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

    /// Run terminal.run commands with `runner` (sandboxes of the caller's
    /// own policy).
    pub fn use_nested_runner(&mut self, runner: std::sync::Arc<dyn super::terminal::NestedRunner>) {
        self.nested = Some(runner);
    }

    /// No job of this broker runs past `deadline` (the run's timeout).
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.run_deadline = deadline;
        if let Some(prompter) = &mut self.decider.prompter {
            prompter.not_after(deadline);
        }
    }

    /// Secrets this run may hand out, by name: the values come from the
    /// user (environment or file), never from the sandbox.
    pub fn use_secrets(&mut self, secrets: Vec<SecretSpec>) {
        self.secrets.add(secrets);
    }

    /// Who is asking (`command:<program>`, `skill:<name>`) and what it
    /// runs; [`Broker::bind_caller`] hashes that before the run starts.
    pub fn set_caller(&mut self, caller: String, program: Program) {
        self.decider.caller = caller;
        self.program = Some(program);
    }

    /// Hash what the caller runs, now, before the sandboxed code exists:
    /// stored grants are looked up and stored under this hash. Skipped
    /// (no grant then applies) when no stored grant names this caller and
    /// nobody can be asked, so that a plain run pays nothing for it.
    pub fn bind_caller(&mut self) {
        let needed =
            self.decider.prompter.is_some()
                || self.decider.grants.as_ref().is_some_and(|store| {
                    store.may_apply(&self.decider.project, &self.decider.caller)
                });
        if needed {
            self.decider.caller_hash = self.program.as_ref().and_then(identity::hash);
        }
    }

    /// Never allow more than `permissions` (a skill's manifest, `action` or
    /// `action:pattern`): anything else is denied without asking. An entry
    /// that is no valid permission allows nothing.
    pub fn restrict_to_declared(&mut self, permissions: Vec<String>) {
        self.decider.declared = Some(
            permissions
                .iter()
                .filter_map(|p| p.parse::<Permission>().ok())
                .collect(),
        );
    }

    /// Print the peer's `log` notifications on stderr, prefixed with `label`.
    pub fn show_logs(&mut self, label: String) {
        self.log_label = Some(label);
    }

    /// What the scan of the project hid and made read-only beyond the
    /// patterns (paths below the project root).
    pub fn cover(&mut self, hidden: &[PathBuf], read_only: &[PathBuf]) {
        self.resolver.cover(hidden, read_only);
    }

    /// Use stored grants (and store "always" answers) in `store`.
    pub fn use_grants(&mut self, store: super::grants::GrantStore) {
        self.decider.grants = Some(store);
    }

    /// Ask a person on this terminal when a decision is "ask".
    pub fn use_prompter(&mut self, prompter: super::prompt::Prompter) {
        self.use_asker(Box::new(prompter));
    }

    /// Ask `asker` when a decision is "ask" (the daemon's approval queue).
    pub fn use_asker(&mut self, mut asker: Box<dyn super::prompt::Asker>) {
        asker.not_after(self.run_deadline);
        self.decider.prompter = Some(asker);
    }

    /// Send `skill.invoke` with `params`; its answer comes back from
    /// [`Broker::take_answers`]. A JSON-RPC response with this id answers
    /// it, and so does a plain (non-JSON-RPC) message while it is the
    /// oldest one pending: that is what `process.send(result)` in a Node
    /// skill produces.
    pub fn invoke(&mut self, params: Value) -> String {
        let (line, id) = self.invocations.request(params);
        self.transport.push(&line);
        id
    }

    /// Stop waiting for the answer to `id` (it timed out).
    pub fn forget(&mut self, id: &str) {
        self.invocations.forget(id);
    }

    /// Answers that arrived since the last call.
    pub fn take_answers(&mut self) -> Vec<InvocationAnswer> {
        self.invocations.take()
    }

    /// Close the channel for writing once everything queued is sent: the
    /// peer reads end-of-file (Node's 'disconnect'), its cue to exit.
    pub fn close_when_sent(&mut self) {
        self.transport.close_when_sent();
    }

    /// Whether the channel should be shut now (see [`Broker::close_when_sent`]).
    pub fn ready_to_close(&self) -> bool {
        self.transport.ready_to_close()
    }

    /// Whether the broker wants to read more: not while answers pile up,
    /// frames already read wait, or a job's answer is outstanding (answers
    /// keep the order of the requests).
    pub fn wants_input(&self) -> bool {
        self.waiting.is_none() && self.transport.wants_input()
    }

    /// Whether answers wait to be written.
    pub fn wants_output(&self) -> bool {
        self.transport.wants_output()
    }

    /// Descriptors of a running job and of the net process's link, to
    /// poll with the run's own.
    pub fn poll_fds(&self) -> Vec<(BorrowedFd<'_>, PollFlags)> {
        let mut fds = match self.waiting.as_ref().map(|w| &w.job) {
            Some(Work::Terminal(job)) => job.poll_fds(),
            _ => Vec::new(),
        };
        fds.extend(self.network.as_ref().and_then(|n| n.poll_fd()));
        fds
    }

    /// When a running job needs a turn even if nothing is ready.
    pub fn deadline(&self) -> Option<Instant> {
        self.waiting.as_ref().map(|w| match &w.job {
            Work::Terminal(job) => job.deadline(),
            Work::Http { deadline, .. } => *deadline,
        })
    }

    /// The run's network: its allowlist, and proxied connections by host.
    pub fn use_network(&mut self, network: super::network::Network) {
        self.network = Some(network);
    }

    /// Proxied connections by host, for the report (empty without a
    /// proxy).
    pub fn connections(&self) -> BTreeMap<String, super::network::HostCounts> {
        self.network
            .as_ref()
            .map(|n| n.hosts.clone())
            .unwrap_or_default()
    }

    /// Decide what the net process asks and audit the connections it
    /// reports.
    fn service_network(&mut self) {
        let Some(network) = &mut self.network else {
            return;
        };
        let records = network.service(&mut self.decider);
        self.audit_connections(records);
    }

    /// The run ended: a `net.http` still waiting is audited (its request
    /// may have reached the server), and so is every connection the net
    /// process still reports before it ends.
    pub fn end_network(&mut self) {
        /// How long the net process gets to report its last attempts.
        const WIND_DOWN: std::time::Duration = std::time::Duration::from_millis(500);
        let records = self
            .network
            .as_mut()
            .map(|network| network.finish(WIND_DOWN))
            .unwrap_or_default();
        self.audit_connections(records);
        if matches!(
            self.waiting.as_ref().map(|w| &w.job),
            Some(Work::Http { .. })
        ) {
            if let Some(waiting) = self.waiting.take() {
                self.finish(
                    waiting.id,
                    waiting.method.as_str(),
                    waiting.record,
                    Err(fail(
                        code::INTERNAL_ERROR,
                        "net.http: the run ended before the answer came",
                    )),
                    waiting.started,
                );
            }
        }
        self.flush_audit();
    }

    fn audit_connections(&mut self, records: Vec<super::network::ConnectionRecord>) {
        let any = !records.is_empty();
        for record in records {
            self.audit_line(
                "net.connect",
                Some(&record.target),
                Some(&record.requested),
                if record.allowed { "allow" } else { "deny" },
                &record.rule,
                0,
            );
        }
        if any {
            self.flush_audit();
        }
    }

    /// A finished job's result, if it finished.
    fn job_result(&mut self) -> Option<Result<Value, Failure>> {
        let waiting = self.waiting.as_mut()?;
        match &mut waiting.job {
            Work::Terminal(job) => job.step(),
            Work::Http {
                fetch,
                bound_host,
                deadline,
            } => {
                let outcome = match self.network.as_mut().and_then(|n| n.take_fetched(*fetch)) {
                    Some(outcome) => outcome,
                    None if Instant::now() >= *deadline => {
                        return Some(Err(fail(
                            code::TIMEOUT,
                            "net.http: the network process did not answer in time",
                        )))
                    }
                    None => return None,
                };
                Some(match outcome {
                    crate::net::link::FetchOutcome::Response { response } => {
                        Ok(super::http::answer(response, &self.secrets, *bound_host))
                    }
                    crate::net::link::FetchOutcome::Refused { rule, message } => Err(Failure {
                        code: code::PERMISSION_DENIED,
                        message: self.secrets.redact_text(&message),
                        rule: Some(rule),
                    }),
                    crate::net::link::FetchOutcome::Failed { message, timed_out } => Err(
                        super::http::fetch_failure(&message, timed_out, &self.secrets),
                    ),
                })
            }
        }
    }

    /// Service a running job without waiting; when it ends, answer it and
    /// go on with the requests read meanwhile. True when answers are queued.
    pub fn step(&mut self) -> bool {
        self.service_network();
        if self.waiting.is_some() {
            if let Some(result) = self.job_result() {
                if let Some(waiting) = self.waiting.take() {
                    self.finish(
                        waiting.id,
                        waiting.method.as_str(),
                        waiting.record,
                        result,
                        waiting.started,
                    );
                }
                self.handle_pending();
                self.flush_audit();
            }
        }
        self.transport.wants_output()
    }

    /// Read what the peer sent and answer it. False when the peer closed.
    pub fn on_readable(&mut self, sock: BorrowedFd<'_>) -> bool {
        self.handle_pending();
        if !self.wants_input() {
            self.flush_audit();
            return true;
        }
        let filled = self.transport.read(sock);
        self.handle_pending();
        self.flush_audit();
        filled != Fill::Closed
    }

    /// Write the audit lines of the requests handled so far: before any
    /// answer is sent, and at the end of each turn.
    fn flush_audit(&mut self) {
        // One line for all the refusals since the last: a flood is audited
        // without a line per request it sends.
        if self.rate_refused > 0 {
            let per_second = self.rate.as_ref().map_or(0.0, |r| r.per_second);
            let rule = format!(
                "rate limit ({per_second} requests a second): {} refused",
                self.rate_refused
            );
            self.audit_line("rate_limit", None, None, "deny", &rule, 0);
            self.rate_refused = 0;
        }
        if let Some(audit) = &mut self.audit {
            audit.flush();
        }
    }

    /// One audit line for this run's caller (none without an audit file).
    fn audit_line(
        &mut self,
        method: &str,
        target: Option<&str>,
        requested: Option<&str>,
        decision: &str,
        rule: &str,
        duration_us: u64,
    ) {
        if let Some(audit) = &mut self.audit {
            audit.write(&Entry {
                time: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0),
                run: &self.run_id,
                caller: &self.decider.caller,
                caller_hash: self.decider.caller_hash.as_deref(),
                method,
                target,
                requested,
                decision,
                rule,
                duration_us,
            });
        }
    }

    /// Read what the peer left in the channel (it has exited): answers to
    /// invocations and log lines. Requests are not performed any more;
    /// nobody is left to read their answers.
    pub fn drain(&mut self, sock: BorrowedFd<'_>) {
        loop {
            while let Some(frame) = self.transport.next_frame_any() {
                if let Frame::Line(line) = frame {
                    self.take_leftover(&line);
                }
            }
            if self.transport.read(sock) != Fill::Data {
                break;
            }
        }
        self.flush_audit();
    }

    /// Write queued answers, then handle the frames that waited for room.
    /// False when the peer is gone.
    pub fn on_writable(&mut self, sock: BorrowedFd<'_>) -> bool {
        loop {
            self.flush_audit();
            if !self.transport.write(sock) {
                return false;
            }
            // Handle what waited for room until room or frames run out. One
            // pass is not enough: when the peer takes every answer as fast
            // as it is written, the turn would end with frames pending,
            // room for their answers and nothing queued, and the run's loop
            // then polls the channel for neither reading nor writing: the
            // peer waits for answers forever.
            if self.waiting.is_some() || !self.transport.has_pending() || !self.transport.has_room()
            {
                return true;
            }
            self.handle_pending();
        }
    }

    fn handle_pending(&mut self) {
        while self.waiting.is_none() {
            let Some(frame) = self.transport.next_frame() else {
                return;
            };
            match frame {
                Frame::Line(line) if line.iter().all(u8::is_ascii_whitespace) => {}
                Frame::Line(line) => self.handle(&line),
                Frame::TooLarge { bytes } => {
                    self.counts.errors += 1;
                    let message = format!(
                        "message of {bytes} bytes is over the {} byte limit",
                        self.transport.limits.max_message
                    );
                    self.transport.push(&protocol::error_response(
                        &Id::Null,
                        code::TOO_LARGE,
                        &message,
                        None,
                    ));
                }
            }
        }
    }

    /// After the peer exited: responses, plain answers and logs only.
    fn take_leftover(&mut self, line: &[u8]) {
        match protocol::parse(line, &self.transport.limits) {
            Ok(Message::Response {
                id: Id::String(id),
                outcome,
            }) => self.invocations.response(id, outcome),
            Ok(Message::Notification { method, .. }) if method == "log" => self.handle(line),
            Ok(_) => {}
            Err(_) => {
                if self.invocations.any_sent() {
                    self.take_plain(line);
                }
            }
        }
    }

    fn take_plain(&mut self, line: &[u8]) -> bool {
        match self.invocations.plain(line) {
            Plain::NotPlain => false,
            Plain::Taken => true,
            Plain::Unexpected => {
                self.counts.errors += 1;
                if let Some(label) = &self.log_label {
                    eprintln!("{label}: ignored a message that answers no pending invocation");
                }
                true
            }
        }
    }

    fn handle(&mut self, line: &[u8]) {
        let started = Instant::now();
        if let Some(rate) = &mut self.rate {
            if !rate.take() {
                self.counts.errors += 1;
                self.counts.rate_limited += 1;
                self.rate_refused += 1;
                let id = protocol::parse(line, &self.transport.limits)
                    .ok()
                    .and_then(|m| match m {
                        Message::Request { id, .. } => Some(id),
                        _ => None,
                    });
                if let Some(id) = id {
                    let message =
                        format!("more than {} requests a second; slow down", rate.per_second);
                    self.transport.push(&protocol::error_response(
                        &id,
                        code::RATE_LIMITED,
                        &message,
                        None,
                    ));
                }
                return;
            }
        }
        let message = match protocol::parse(line, &self.transport.limits) {
            Ok(message) => message,
            Err(_) if self.invocations.any_sent() && self.take_plain(line) => return,
            Err(err) => {
                self.counts.errors += 1;
                self.transport.push(&protocol::error_response(
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
                    self.invocations.response(id, outcome);
                }
                return;
            }
        };
        match self.by_action.get_mut(&method) {
            Some(count) => *count += 1,
            None => {
                self.by_action.insert(method.clone(), 1);
            }
        }
        let mut record = Record::default();
        let Ok(action) = method.parse::<Action>() else {
            record.rule = "broker.default".into();
            let failure = fail(code::METHOD_NOT_FOUND, format!("no method {method:?}"));
            self.finish(id, &method, record, Err(failure), started);
            return;
        };
        match self.serve(action, params, &mut record) {
            Ok(Served::Done(value)) => self.finish(id, &method, record, Ok(value), started),
            Ok(Served::Started(job)) => {
                self.waiting = Some(Waiting {
                    job,
                    id,
                    method: action,
                    record,
                    started,
                })
            }
            Err(failure) => self.finish(id, &method, record, Err(failure), started),
        }
    }

    /// Count, audit and answer one request.
    fn finish(
        &mut self,
        id: Option<Id>,
        method: &str,
        record: Record,
        result: Result<Value, Failure>,
        started: Instant,
    ) {
        self.counts.requests += 1;
        let decision = match &result {
            Err(f) if f.code == code::PERMISSION_DENIED || f.code == code::NEEDS_APPROVAL => {
                self.counts.denied += 1;
                "deny"
            }
            Err(f) if f.code == code::METHOD_NOT_FOUND || f.code == code::INVALID_PARAMS => {
                self.counts.errors += 1;
                "error"
            }
            _ => {
                self.counts.allowed += 1;
                "allow"
            }
        };
        let rule = match &result {
            Err(Failure {
                rule: Some(rule), ..
            }) => rule.clone(),
            _ => record.rule.clone(),
        };
        let rule = rule.as_str();
        self.audit_line(
            method,
            record.target.as_deref(),
            record.requested.as_deref(),
            decision,
            rule,
            started.elapsed().as_micros() as u64,
        );
        let Some(id) = id else { return };
        match result {
            Ok(value) => self.transport.answer(&id, &value),
            Err(f) => self.transport.push(&protocol::error_response(
                &id,
                f.code,
                &f.message,
                Some(&json!({ "rule": rule })),
            )),
        }
    }

    /// Decide `action` on `target` (what the request resolved to) and
    /// refuse unless allowed.
    fn gate(
        &mut self,
        action: Action,
        target: Option<&str>,
        record: &mut Record,
    ) -> Result<(), Failure> {
        let verdict = self.decider.decide(action, target);
        record.rule = verdict.rule.clone();
        self.refusal(action, &verdict, record)
    }

    fn refusal(&self, action: Action, verdict: &Verdict, record: &Record) -> Result<(), Failure> {
        match verdict.decision {
            Decision::Allow => Ok(()),
            Decision::Deny => Err(Failure {
                code: code::PERMISSION_DENIED,
                message: match (&record.requested, &record.target) {
                    (Some(requested), Some(target)) => format!(
                        "{requested} resolves to {target}, where {action} is denied by {}",
                        verdict.rule
                    ),
                    _ => format!("{action} is denied by {}", verdict.rule),
                },
                rule: Some(verdict.rule.clone()),
            }),
            Decision::Ask if action == Action::NetHttp && record.target.is_some() => Err(Failure {
                code: code::NEEDS_APPROVAL,
                message: super::network::needs_approval(
                    record.target.as_deref().unwrap_or_default(),
                    &verdict.rule,
                    self.decider.grant_command(),
                ),
                rule: Some(verdict.rule.clone()),
            }),
            Decision::Ask => Err(Failure {
                code: code::NEEDS_APPROVAL,
                message: format!(
                    "{action} needs approval ({}) and nobody can be asked in this run; \
                     pre-approve it with `{} --grant {action}`, or allow it in the profile: \
                     [broker] rules = {{ \"{action}\" = \"allow\" }}",
                    verdict.rule,
                    self.decider.grant_command()
                ),
                rule: Some(verdict.rule.clone()),
            }),
        }
    }

    /// Before anything is opened: refuse what a deny rule or the declared
    /// permissions name, so that a refused request learns nothing (not even
    /// whether the path exists).
    fn refuse_early(&self, action: Action, path: &str, record: &Record) -> Result<(), Failure> {
        let literal = lexical(&self.resolver.literal(path));
        let verdict = self.decider.settled(action, Some(&literal));
        if verdict.decision == Decision::Deny {
            return self.refusal(action, &verdict, record);
        }
        Ok(())
    }

    /// Note where `path` resolved to.
    fn resolved(record: &mut Record, path: &str, relative: &str) {
        record.target = Some(relative.to_string());
        if lexical(path) != relative {
            record.requested = Some(path.to_string());
        }
    }

    fn serve(
        &mut self,
        action: Action,
        params: Value,
        record: &mut Record,
    ) -> Result<Served, Failure> {
        match action {
            Action::PermissionQuery => {
                record.rule = "risk default (low)".into();
                let query: QueryParams = typed(action, params)?;
                let target = query.target.as_deref();
                let v = self
                    .decider
                    .undeclared(query.action, target)
                    .unwrap_or_else(|| {
                        permission::decide_for(&self.decider.policy, query.action.as_str(), target)
                    });
                let effective = if v.decision == Decision::Ask {
                    "deny"
                } else {
                    decision_name(v.decision)
                };
                Ok(Served::Done(json!({
                    "action": query.action,
                    "decision": decision_name(v.decision),
                    "effective": effective,
                    "rule": v.rule,
                })))
            }
            Action::Log => {
                let log: LogParams = typed(action, params)?;
                self.gate(action, None, record)?;
                if let Some(label) = &self.log_label {
                    // Escaped: a skill's log must not drive the terminal.
                    eprintln!("{label}: {}", log.message.escape_debug());
                }
                Ok(Served::Done(Value::Null))
            }
            Action::FsRead | Action::FsStat | Action::FsList => {
                let (path, read) = path_params(
                    action,
                    Action::FsRead,
                    params,
                    |r: &fs_actions::ReadParams| &r.path,
                )?;
                record.target = Some(self.resolver.literal(&path));
                self.refuse_early(action, &path, record)?;
                let flags = match action {
                    Action::FsRead => fs_actions::READ_FLAGS,
                    Action::FsList => fs_actions::LIST_FLAGS,
                    _ => OFlag::O_PATH,
                };
                // Opened as the owner: the open is the read's permission check.
                let object = {
                    let _acting = self.resolver.acting_as_owner()?;
                    self.resolver.object(&path, flags)?
                };
                Self::resolved(record, &path, &object.relative);
                self.gate(action, Some(&object.relative), record)?;
                let value = match (action, &read) {
                    (Action::FsRead, Some(read)) => fs_actions::read(&object, read)?,
                    (Action::FsList, _) => fs_actions::list(&self.resolver, object)?,
                    _ => fs_actions::stat(&object)?,
                };
                Ok(Served::Done(value))
            }
            Action::FsWrite | Action::FsMkdir | Action::FsDelete => {
                let (path, write) = path_params(
                    action,
                    Action::FsWrite,
                    params,
                    |w: &fs_actions::WriteParams| &w.path,
                )?;
                record.target = Some(self.resolver.literal(&path));
                self.refuse_early(action, &path, record)?;
                let target = {
                    let _acting = self.resolver.acting_as_owner()?;
                    self.resolver.name(&path)?
                };
                Self::resolved(record, &path, &target.relative);
                self.resolver.refuse_protected(&target, &path)?;
                self.gate(action, Some(&target.relative), record)?;
                let acting = self.resolver.acting_as_owner()?;
                let value = match (action, &write) {
                    (Action::FsWrite, Some(write)) => fs_actions::write(&target, write)?,
                    (Action::FsMkdir, _) => fs_actions::mkdir(&target)?,
                    _ => fs_actions::delete(&target)?,
                };
                drop(acting);
                Ok(Served::Done(value))
            }
            Action::SecretsGet => {
                let secret: SecretParams = typed(action, params)?;
                record.target = Some(secret.name.clone());
                self.gate(action, Some(&secret.name), record)?;
                // The plaintext only where the profile allows reading secrets
                // outright; otherwise the handle is all the sandbox gets.
                let reveal = permission::decide(&self.decider.policy, "secrets.read").decision
                    == Decision::Allow;
                Ok(Served::Done(self.secrets.get(&secret, reveal)?))
            }
            Action::TerminalRun => {
                let run: RunParams = typed(action, params)?;
                record.target = run.argv.first().cloned();
                self.gate(action, record.target.clone().as_deref(), record)?;
                let runner = self
                    .nested
                    .clone()
                    .ok_or_else(|| fail(code::INTERNAL_ERROR, "terminal.run is not set up"))?;
                let cwd = match &run.cwd {
                    Some(cwd) => {
                        let dir = {
                            let _acting = self.resolver.acting_as_owner()?;
                            self.resolver
                                .object(cwd, OFlag::O_PATH | OFlag::O_DIRECTORY)?
                        };
                        Some(self.resolver.project_path().join(&dir.relative))
                    }
                    None => None,
                };
                let job = Job::start(
                    runner,
                    self.resolver.project_path(),
                    cwd,
                    run,
                    self.run_deadline,
                )?;
                Ok(Served::Started(Work::Terminal(Box::new(job))))
            }
            Action::NetHttp => {
                // Refused before any decision: the request itself is bad,
                // or names a secret where its bindings do not let it go.
                record.rule = "net.http request checks and secret bindings".into();
                let prepared = super::http::prepare(params, &self.secrets)?;
                record.target = Some(prepared.target.clone());
                let Some(network) = &mut self.network else {
                    return Err(fail(
                        code::INTERNAL_ERROR,
                        "net.http is not set up in this broker",
                    ));
                };
                let verdict = match crate::net::allow::split_target(&prepared.target) {
                    Some((host, port)) => network.decide(&mut self.decider, &host, port),
                    None => {
                        return Err(fail(
                            code::INVALID_PARAMS,
                            format!("net.http: {:?} is not a host and port", prepared.target),
                        ))
                    }
                };
                record.rule = verdict.rule.clone();
                self.refusal(action, &verdict, record)?;
                let timeout = prepared.request.timeout;
                let bound_host = prepared.bound_host;
                let network = self
                    .network
                    .as_mut()
                    .ok_or_else(|| fail(code::INTERNAL_ERROR, "net.http is not set up"))?;
                let fetch = network
                    .fetch(prepared.request)
                    .map_err(|reason| fail(code::INTERNAL_ERROR, format!("net.http: {reason}")))?;
                // The net process ends the exchange at its timeout; this
                // bound only keeps a lost answer from holding the channel.
                let deadline = Instant::now() + timeout + std::time::Duration::from_secs(5);
                Ok(Served::Started(Work::Http {
                    fetch,
                    bound_host,
                    deadline,
                }))
            }
            Action::SecretsRead => {
                self.gate(action, None, record)?;
                Err(fail(
                    code::METHOD_NOT_FOUND,
                    format!("{action} is not provided by this version of the broker"),
                ))
            }
        }
    }

    /// Handle one line as if read from the channel (tests).
    #[cfg(test)]
    fn feed(&mut self, line: &[u8]) {
        self.handle(line);
    }
}

/// The broker's reading of one message, for the fuzz targets
/// (`crate::fuzzing`): parse, method, then the parameters as `serve`
/// decodes them before it decides or touches anything.
pub(crate) mod fuzzing {
    use super::*;

    /// One line as the channel delivers it.
    pub fn message(line: &[u8]) {
        let (id, method, params) = match protocol::parse(line, &protocol::Limits::default()) {
            Ok(Message::Request { id, method, params }) => (Some(id), method, params),
            Ok(Message::Notification { method, params }) => (None, method, params),
            Ok(Message::Response { .. }) => return,
            Err(error) => {
                let _ = protocol::error_response(&error.id, error.code, &error.message, None);
                return;
            }
        };
        if let Some(id) = &id {
            let _ = protocol::response(id, &params);
        }
        let Ok(action) = method.parse::<Action>() else {
            return;
        };
        let decoded: Result<(), Failure> = match action {
            Action::PermissionQuery => typed::<QueryParams>(action, params).map(drop),
            Action::Log => typed::<LogParams>(action, params).map(drop),
            Action::FsRead | Action::FsStat | Action::FsList => path_params(
                action,
                Action::FsRead,
                params,
                |r: &fs_actions::ReadParams| &r.path,
            )
            .map(|(path, _)| drop(lexical(&path))),
            Action::FsWrite | Action::FsMkdir | Action::FsDelete => path_params(
                action,
                Action::FsWrite,
                params,
                |w: &fs_actions::WriteParams| &w.path,
            )
            .map(|(path, _)| drop(lexical(&path))),
            Action::SecretsGet => typed::<SecretParams>(action, params).map(drop),
            Action::TerminalRun => typed::<RunParams>(action, params).map(drop),
            Action::NetHttp => {
                let mut secrets = Secrets::default();
                secrets.add(vec![SecretSpec::unbound("TOKEN", "fuzz-secret-value")]);
                super::super::http::prepare(params, &secrets).map(drop)
            }
            Action::SecretsRead => Ok(()),
        };
        if let Err(failure) = decoded {
            let id = id.unwrap_or(Id::Null);
            let _ = protocol::error_response(&id, failure.code, &failure.message, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broker with strict's rules over `project`, auditing to `audit`.
    fn strict_broker(project: &Path, audit: Option<std::fs::File>) -> Broker {
        let policy = crate::profile::load("strict").unwrap();
        Broker::new(
            policy.broker,
            project,
            &[],
            Default::default(),
            audit,
            "t".into(),
        )
        .unwrap()
    }

    const QUERY: &str =
        r#"{"jsonrpc":"2.0","id":1,"method":"permission.query","params":{"action":"fs.read"}}"#;

    /// A strict broker over `project` auditing to a file in it, and the file.
    fn audited_broker(project: &Path) -> (Broker, PathBuf) {
        let path = project.join("audit.jsonl");
        let audit = std::fs::File::create(&path).unwrap();
        (strict_broker(project, Some(audit)), path)
    }

    /// `count` queries sent at once on a fresh channel and read by `broker`
    /// in one turn; (the peer's end, the broker's end).
    fn one_turn_of_queries(
        broker: &mut Broker,
        count: usize,
    ) -> (
        std::os::unix::net::UnixStream,
        std::os::unix::net::UnixStream,
    ) {
        let (peer, ours) = std::os::unix::net::UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut &peer, format!("{QUERY}\n").repeat(count).as_bytes())
            .unwrap();
        assert!(broker.on_readable(std::os::fd::AsFd::as_fd(&ours)));
        (peer, ours)
    }

    fn answers(broker: &Broker) -> Vec<Value> {
        broker
            .transport
            .outbox()
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn the_rate_limit_answers_excess_requests_with_an_error() {
        let project = tempfile::tempdir().unwrap();
        let mut broker = strict_broker(project.path(), None);
        broker.set_rate_limit(1.0, 3.0);
        for _ in 0..5 {
            broker.feed(QUERY.as_bytes());
        }
        let answers = answers(&broker);
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

    /// A flood past the rate limit is audited (one line per turn, not per
    /// request, so the flood cannot fill the disk through the audit) and
    /// counted for the report, before any refusal is sent.
    #[test]
    fn requests_the_rate_limit_refuses_are_audited_and_counted() {
        let project = tempfile::tempdir().unwrap();
        let (mut broker, audit_path) = audited_broker(project.path());
        broker.set_rate_limit(1.0, 3.0);
        let _channel = one_turn_of_queries(&mut broker, 10);
        let text = std::fs::read_to_string(&audit_path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines.len(),
            4,
            "three served and one for the refusals: {text}"
        );
        let refused = &lines[3];
        assert_eq!(refused["method"], "rate_limit", "{refused}");
        assert_eq!(refused["decision"], "deny", "{refused}");
        assert!(
            refused["rule"].as_str().unwrap().ends_with(": 7 refused"),
            "{refused}"
        );
        assert_eq!(broker.counts.rate_limited, 7);
        assert_eq!(broker.counts.errors, 7);
    }

    #[test]
    fn every_audit_line_is_in_the_file_before_its_answer_is_sent() {
        use std::io::Read;
        use std::os::fd::AsFd;
        let project = tempfile::tempdir().unwrap();
        let (mut broker, audit_path) = audited_broker(project.path());
        let (mut peer, ours) = one_turn_of_queries(&mut broker, 50);
        let lines = || {
            std::fs::read_to_string(&audit_path)
                .unwrap()
                .lines()
                .count()
        };
        assert_eq!(lines(), 50, "handled: audited, though nothing is sent yet");
        peer.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 1];
        assert!(peer.read(&mut buf).is_err(), "no answer before on_writable");
        assert!(broker.on_writable(ours.as_fd()));
        peer.set_nonblocking(false).unwrap();
        let mut answers = String::new();
        let mut reader = std::io::BufReader::new(&peer);
        for _ in 0..50 {
            std::io::BufRead::read_line(&mut reader, &mut answers).unwrap();
        }
        assert_eq!(answers.matches("\"result\"").count(), 50);
        assert_eq!(lines(), 50);
    }

    /// The peer takes answers as fast as they are written (here: a send
    /// buffer that holds them all). Every request is still answered: the
    /// channel never ends a turn with requests waiting and nothing that
    /// would give it another. This hung a run reading in a thread while
    /// its other thread sent (`attack_broker`, on a busy machine).
    #[test]
    fn requests_past_the_outbox_are_answered_when_the_peer_reads_as_fast_as_it_is_sent() {
        use std::io::BufRead;
        use std::os::fd::AsFd;
        const REQUESTS: usize = 20;
        let project = tempfile::tempdir().unwrap();
        // Base64 makes each answer about 683 KiB: six fill the outbox.
        std::fs::write(project.path().join("big.txt"), vec![1u8; 512 << 10]).unwrap();
        let mut broker = strict_broker(project.path(), None);
        let (peer, ours) = std::os::unix::net::UnixStream::pair().unwrap();
        if let Err(err) =
            nix::sys::socket::setsockopt(&ours, nix::sys::socket::sockopt::SndBufForce, &(64 << 20))
        {
            let why = format!("skipped: a 64 MiB send buffer needs CAP_NET_ADMIN ({err})");
            assert!(std::env::var_os("SANDBOX_TEST_REQUIRE").is_none(), "{why}");
            eprintln!("{why}");
            return;
        }
        let request = r#"{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"big.txt"}}"#;
        std::io::Write::write_all(
            &mut &peer,
            format!("{request}\n").repeat(REQUESTS).as_bytes(),
        )
        .unwrap();
        assert!(broker.on_readable(ours.as_fd()));
        // The run's loop: the channel gets a turn only when it asks for one.
        for _ in 0..=REQUESTS {
            if !broker.wants_output() {
                break;
            }
            assert!(broker.on_writable(ours.as_fd()));
        }
        assert!(
            broker.wants_input() || broker.wants_output(),
            "the channel asks for no turn while requests wait"
        );
        drop(broker);
        drop(ours);
        let answered = std::io::BufReader::new(&peer)
            .lines()
            .map(|line| serde_json::from_str::<Value>(&line.unwrap()).unwrap())
            .filter(|answer| answer["result"]["content"].is_string())
            .count();
        assert_eq!(answered, REQUESTS);
    }

    #[test]
    fn unknown_parameters_are_refused_by_name() {
        let project = tempfile::tempdir().unwrap();
        let mut broker = strict_broker(project.path(), None);
        broker.feed(br#"{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"x","recursive":true}}"#);
        broker.feed(br#"{"jsonrpc":"2.0","id":2,"method":"fs.write","params":{"path":"x","content":"y","mode":2559}}"#);
        let answers = answers(&broker);
        for answer in &answers {
            assert_eq!(answer["error"]["code"], code::INVALID_PARAMS, "{answer}");
        }
        assert!(answers[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `recursive`"));
        assert!(answers[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `mode`"));
    }
}
