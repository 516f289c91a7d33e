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
//!
//! This module holds the broker and how a run sets it up; its turn on the
//! channel is in `channel`, the reading and serving of one request in
//! `dispatch`, the rate limit in `rate`, the jobs whose answers wait
//! (`terminal.run`, `net.http`) in `jobs`, and the audit lines in
//! `auditing`.

mod auditing;
mod channel;
mod dispatch;
mod jobs;
mod rate;

pub(crate) use dispatch::fuzzing;
pub use rate::RATE_LIMIT;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;

use super::audit::Audit;
use super::decision::Decider;
use super::fs::Resolver;
use super::identity::{self, Program};
use super::invoke::Invocations;
use super::secrets::{SecretSpec, Secrets};
use super::transport::Transport;
use crate::action::Permission;
use crate::profile::policy::BrokerPolicy;
use jobs::Waiting;
use rate::RateLimit;

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
    /// The name of the run's audit chain (absent without an audit file or
    /// before its first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_chain: Option<String>,
    /// SHA-256 (hex) of the chain's last line at the run's end: the anchor
    /// `sandbox audit verify --head` checks the file against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_head: Option<String>,
}

/// What a request acted on, for the audit line.
#[derive(Debug, Default)]
pub(super) struct Record {
    pub(super) target: Option<String>,
    pub(super) requested: Option<String>,
    pub(super) rule: String,
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
    /// A review run: the project must only change in the run's layer,
    /// which this broker (writing the project from outside) cannot reach.
    review: bool,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("project", &self.resolver.project_path())
            .field("counts", &self.counts)
            .finish()
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
            audit: audit.map(|file| Audit::new(file, crate::audit::Chain::unique("run", &run_id))),
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
            review: false,
        })
    }

    /// A review run's broker: `fs.write`, `fs.mkdir` and `fs.delete` are
    /// refused, since the broker works on the project itself, outside the
    /// layer that keeps the run's changes for review; served, they would
    /// reach the project with nobody accepting them.
    pub fn refuse_project_writes_for_review(&mut self) {
        self.review = true;
    }

    /// Create, write and remove the project's files as its owner (root's
    /// supervisor on a project it may not own), as the sandbox itself does.
    pub fn write_as_project_owner(&mut self) -> std::io::Result<()> {
        self.resolver.write_as_owner()
    }

    /// Append the audit lines to `audit` from now on (a warm run learns
    /// its audit file when it gets its command).
    pub fn use_audit(&mut self, audit: std::fs::File) {
        let chain = crate::audit::Chain::unique("run", &self.run_id);
        self.audit = Some(Audit::new(audit, chain));
    }

    /// Append the audit lines to `audit`, a chain its caller also writes
    /// its own lines to (an OCI container's supervisor: its events and
    /// the broker's requests are one chain).
    pub fn use_audit_chain(&mut self, audit: Audit) {
        self.audit = Some(audit);
    }

    /// Write `value` as the next line of this broker's audit chain, with
    /// every line before it (nothing without an audit).
    pub fn audit_record<T: serde::Serialize>(&mut self, value: &T) {
        self.flush_audit();
        if let Some(audit) = &mut self.audit {
            audit.record(value);
            audit.flush();
        }
    }

    /// The counts for the run's report, after writing every pending audit
    /// line, with the audit chain's head.
    pub fn final_counts(&mut self) -> BrokerCounts {
        self.flush_audit();
        let mut counts = self.counts.clone();
        if let Some((chain, head)) = self.audit_head() {
            counts.audit_chain = Some(chain);
            counts.audit_head = Some(head);
        }
        counts
    }

    /// The audit chain's name and head (the hash of its last line written
    /// or pending), None without an audit or before its first line.
    pub fn audit_head(&self) -> Option<(String, String)> {
        let audit = self.audit.as_ref()?;
        let (name, head) = audit.head();
        Some((name.to_owned(), head?))
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
            self.decider.caller_hash = match self.program.as_ref() {
                Some(program) => identity::pin(program),
                None => identity::CallerHash::taken(None),
            };
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
}

/// What the tests of every part of the broker share.
#[cfg(test)]
mod tests {
    use super::*;

    /// A broker with strict's rules over `project`, auditing to `audit`.
    pub(super) fn strict_broker(project: &Path, audit: Option<std::fs::File>) -> Broker {
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

    pub(super) const QUERY: &str =
        r#"{"jsonrpc":"2.0","id":1,"method":"permission.query","params":{"action":"fs.read"}}"#;

    /// A strict broker over `project` auditing to a file in it, and the file.
    pub(super) fn audited_broker(project: &Path) -> (Broker, PathBuf) {
        let path = project.join("audit.jsonl");
        let audit = std::fs::File::create(&path).unwrap();
        (strict_broker(project, Some(audit)), path)
    }

    /// `count` queries sent at once on a fresh channel and read by `broker`
    /// in one turn; (the peer's end, the broker's end).
    pub(super) fn one_turn_of_queries(
        broker: &mut Broker,
        count: usize,
    ) -> (
        std::os::unix::net::UnixStream,
        std::os::unix::net::UnixStream,
    ) {
        let (peer, ours) = std::os::unix::net::UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut &peer, format!("{QUERY}\n").repeat(count).as_bytes())
            .unwrap();
        // Until the socket is drained: a read starts at a page, so a burst
        // takes a few turns of the loop until the buffer has grown.
        let waiting = |fd: &std::os::unix::net::UnixStream| {
            let mut byte = [0u8; 1];
            nix::sys::socket::recv(
                std::os::fd::AsRawFd::as_raw_fd(fd),
                &mut byte,
                nix::sys::socket::MsgFlags::MSG_PEEK | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            )
            .is_ok_and(|n| n > 0)
        };
        for _ in 0..64 {
            if !waiting(&ours) {
                break;
            }
            assert!(broker.on_readable(std::os::fd::AsFd::as_fd(&ours)));
        }
        assert!(!waiting(&ours), "the broker stopped reading");
        (peer, ours)
    }

    pub(super) fn answers(broker: &Broker) -> Vec<Value> {
        broker
            .transport
            .outbox()
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }
}
