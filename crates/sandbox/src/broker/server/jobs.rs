//! Requests whose answers wait for a job (`terminal.run`, `net.http` in
//! the net process): polled with the run's own descriptors and serviced
//! without waiting, one at a time, so that answers keep the order of the
//! requests.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use nix::poll::PollFlags;
use serde_json::Value;

use super::{Broker, Record};
use crate::action::Action;
use crate::broker::protocol::{code, fail, Failure, Id};
use crate::broker::terminal::Job;

/// What a request's answer waits for.
#[derive(Debug)]
pub(super) enum Work {
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
pub(super) struct Waiting {
    pub(super) job: Work,
    pub(super) id: Option<Id>,
    pub(super) method: Action,
    pub(super) record: Record,
    pub(super) started: Instant,
}

impl Broker {
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
    pub fn use_network(&mut self, network: crate::broker::network::Network) {
        self.network = Some(network);
    }

    /// Proxied connections by host, for the report (empty without a
    /// proxy).
    pub fn connections(&self) -> BTreeMap<String, crate::broker::network::HostCounts> {
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
                    crate::net::link::FetchOutcome::Response { response } => Ok(
                        crate::broker::http::answer(response, &self.secrets, *bound_host),
                    ),
                    crate::net::link::FetchOutcome::Refused { rule, message } => Err(Failure {
                        code: code::PERMISSION_DENIED,
                        message: self.secrets.redact_text(&message),
                        rule: Some(rule),
                    }),
                    crate::net::link::FetchOutcome::Failed { message, timed_out } => Err(
                        crate::broker::http::fetch_failure(&message, timed_out, &self.secrets),
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
}
