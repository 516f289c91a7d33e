//! The broker's side of the network: decisions on hosts, the run's net
//! process, and the count of connections by host for the report.
//!
//! One order decides every target (`host:port`), for a connection the
//! proxy relays and for a `net.http` request alike: a profile rule that
//! denies it; the allowlist; an IP literal the allowlist does not name is
//! refused (an address bypasses every name check); then the rules, the
//! declared permissions, grants and a person, as for any other action.

use std::collections::BTreeMap;
use std::os::fd::{BorrowedFd, OwnedFd};

use nix::poll::PollFlags;

use super::decision::Decider;
use super::permission::{self, Verdict};
use crate::action::Action;
use crate::net::allow::{Allowlist, Host};
use crate::net::link::{FetchOutcome, FromNet, ToNet};
use crate::net::process::NetProcess;
use crate::poll_set::PollSet;
use crate::profile::policy::{Decision, NetworkMode, NetworkPolicy};

/// The most hosts the report counts connections for by name.
pub const MAX_COUNTED_HOSTS: usize = 1000;
/// The report's entry for the connections to hosts past that bound.
pub const OTHER_HOSTS: &str = "(other hosts)";

/// Most hosts put to a person in one run.
pub const MAX_QUESTIONS: u32 = 20;

/// Most hosts whose refusal is explained on stderr in one run: each is said
/// once, and a payload naming a new host in every attempt must neither
/// grow the supervisor's memory nor flood the person's terminal. The audit
/// and the report keep every attempt.
pub const MAX_EXPLAINED_HOSTS: usize = 32;

/// Connections to one host, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostCounts {
    /// Let through.
    pub allowed: u64,
    /// Refused.
    pub refused: u64,
}

/// A proxied connection attempt as the audit records it.
#[derive(Debug)]
pub struct ConnectionRecord {
    /// `host:port`.
    pub target: String,
    /// What the client sent.
    pub requested: String,
    /// allow or deny.
    pub allowed: bool,
    /// What decided.
    pub rule: String,
}

/// The run's network, seen from its broker.
#[derive(Debug)]
pub struct Network {
    policy: NetworkPolicy,
    allow: Allowlist,
    process: Option<NetProcess>,
    /// The process could not be started: `net.http` fails with this.
    failed: Option<String>,
    next_fetch: u64,
    /// Hosts put to a person in this run (see [`MAX_QUESTIONS`]).
    questions: u32,
    fetched: BTreeMap<u64, FetchOutcome>,
    /// Proxied connections by host.
    pub hosts: BTreeMap<String, HostCounts>,
    /// The run's syscall filter, which the net process runs under too.
    syscalls: Option<crate::seccomp::policy::SyscallPolicy>,
    /// Hosts whose refusal was already explained on stderr.
    explained: std::collections::BTreeSet<String>,
}

impl Network {
    /// The network of a run under `policy`; `process` is the net process
    /// the supervisor started for the allowlist (None: started when the
    /// first `net.http` is allowed).
    pub fn new(policy: NetworkPolicy, process: Option<NetProcess>) -> Network {
        // Entries were checked when the profile or flag was read.
        let allow = Allowlist::parse(&policy.allow).unwrap_or_default();
        Network {
            policy,
            allow,
            process,
            failed: None,
            next_fetch: 1,
            questions: 0,
            syscalls: None,
            fetched: BTreeMap::new(),
            hosts: BTreeMap::new(),
            explained: std::collections::BTreeSet::new(),
        }
    }

    /// The proxy's reason for refusing `host`, once per host, on the
    /// supervisor's stderr: a client shows only "403" (curl: "CONNECT
    /// tunnel failed"), and the fix ("list it") would otherwise be found
    /// only in the audit after the run. Returns the lines written.
    fn explain_refusal(&mut self, host: &str, refusal: &str) -> Option<String> {
        if self.explained.contains(host) || self.explained.len() > MAX_EXPLAINED_HOSTS {
            return None;
        }
        let line = if self.explained.len() == MAX_EXPLAINED_HOSTS {
            format!(
                "sandbox: network: more than {MAX_EXPLAINED_HOSTS} hosts refused;                  the audit log and the report name the rest"
            )
        } else {
            // The host and the text come from the payload's request: no
            // control character reaches the terminal raw.
            let text: String = refusal
                .chars()
                .flat_map(|c| {
                    let escaped: Vec<char> = if crate::broker::text::must_escape(c) {
                        c.escape_default().collect()
                    } else {
                        vec![c]
                    };
                    escaped
                })
                .collect();
            format!("sandbox: network: {text}")
        };
        self.explained.insert(host.to_owned());
        eprintln!("{line}");
        Some(line)
    }

    /// Start no net process from now on, for `reason`; one already started
    /// (the allowlist's) is kept.
    pub fn never_start(&mut self, reason: String) {
        if self.process.is_none() {
            self.failed = Some(reason);
        }
    }

    /// Run the net process under `syscalls` (the run's own filter) too.
    pub fn confine_to(&mut self, syscalls: Option<crate::seccomp::policy::SyscallPolicy>) {
        self.syscalls = syscalls;
    }

    /// The link to poll, with the events it waits for.
    pub fn poll_fd(&self) -> Option<(BorrowedFd<'_>, PollFlags)> {
        let link = &self.process.as_ref()?.link;
        if link.is_closed() {
            return None;
        }
        let mut events = PollFlags::POLLIN;
        if link.wants_output() {
            events |= PollFlags::POLLOUT;
        }
        Some((link.fd(), events))
    }

    /// Decide `host` on `port` (see the module documentation).
    pub fn decide(&mut self, decider: &mut Decider, host: &Host, port: u16) -> Verdict {
        let target = host.with_port(port);
        let from_profile = permission::decide_for(&decider.policy, "net.http", Some(&target));
        if from_profile.decision == Decision::Deny && from_profile.rule.starts_with("broker.rules")
        {
            return from_profile;
        }
        if self.policy.mode == NetworkMode::Allowlist {
            if let Some(entry) = self.allow.name_rule(host, port) {
                return Verdict {
                    decision: Decision::Allow,
                    rule: format!("network.allow \"{entry}\""),
                };
            }
        }
        if let Host::Ip(_) = host {
            return Verdict {
                decision: Decision::Deny,
                rule: crate::net::ADDRESS_LITERAL_RULE.to_string(),
            };
        }
        // A payload naming a new host in every attempt would keep a
        // person answering (and the supervisor waiting on them): after
        // MAX_QUESTIONS hosts, the rest are refused without a question.
        let settled = decider.settled(Action::NetHttp, Some(&target));
        if settled.decision == Decision::Ask && decider.prompter.is_some() {
            if self.questions >= MAX_QUESTIONS {
                return Verdict {
                    decision: Decision::Deny,
                    rule: format!(
                        "network: {MAX_QUESTIONS} hosts were already put to a person in this run; \
                         approve more ahead (--grant net.http:HOST, --net allow:HOST)"
                    ),
                };
            }
            self.questions += 1;
        }
        decider.decide(Action::NetHttp, Some(&target))
    }

    /// Read what the net process sent: asks are decided at once (a person
    /// may be asked, as for a request on the channel), connection records
    /// are counted and returned for the audit, fetch results kept for
    /// [`Network::take_fetched`].
    pub fn service(&mut self, decider: &mut Decider) -> Vec<ConnectionRecord> {
        let Some(process) = &mut self.process else {
            return Vec::new();
        };
        let messages = process.link.receive();
        self.take(messages, Some(decider)).0
    }

    /// The run ended: tell the net process, and take what it still reports
    /// (refusals of the questions it had waiting, connections it had not
    /// reported yet) until it says it is done, at most `bound`. Without
    /// this, an attempt made just before the payload exited left no line
    /// in the audit.
    pub fn finish(&mut self, bound: std::time::Duration) -> Vec<ConnectionRecord> {
        let Some(process) = &mut self.process else {
            return Vec::new();
        };
        if process.link.is_closed() {
            return Vec::new();
        }
        process.link.shut_down();
        let deadline = std::time::Instant::now() + bound;
        let mut records = Vec::new();
        while let Some(process) = &mut self.process {
            let messages = process.link.receive();
            let (mut taken, done) = self.take(messages, None);
            records.append(&mut taken);
            let Some(process) = &self.process else {
                break;
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if done || process.link.is_closed() || left.is_zero() {
                break;
            }
            let mut set = PollSet::default();
            set.add(process.link.fd(), PollFlags::POLLIN);
            let recheck = std::time::Instant::now().checked_add(std::time::Duration::from_secs(1));
            let _ = set.wait([Some(deadline), recheck]);
        }
        // Killed and reaped now, not when the broker goes: it is in the
        // run's cgroup, which cannot be removed while it lives.
        self.process = None;
        records
    }

    /// Handle messages from the net process: asks are decided when a
    /// `decider` is given (and refused without one: the run has ended),
    /// connections counted and returned for the audit, fetch results kept.
    /// True when the process said it is done.
    fn take(
        &mut self,
        messages: Vec<FromNet>,
        mut decider: Option<&mut Decider>,
    ) -> (Vec<ConnectionRecord>, bool) {
        let mut records = Vec::new();
        let mut answers = Vec::new();
        let mut done = false;
        for message in messages {
            match message {
                FromNet::Closing => done = true,
                // Taken by `net::process::start` before the run went on.
                FromNet::Ready => {}
                FromNet::Ask { .. } if decider.is_none() => {}
                FromNet::Ask {
                    id,
                    target,
                    requested: _,
                } => {
                    let Some(decider) = decider.as_deref_mut() else {
                        continue;
                    };
                    let verdict = match crate::net::allow::split_target(&target) {
                        Some((host, port)) => unanswered_is_refused(
                            self.decide(decider, &host, port),
                            &target,
                            decider.grant_command(),
                        ),
                        None => Verdict {
                            decision: Decision::Deny,
                            rule: "network: not a host and port".into(),
                        },
                    };
                    answers.push(ToNet::Answer {
                        id,
                        allow: verdict.decision == Decision::Allow,
                        rule: verdict.rule,
                    });
                }
                FromNet::Connection {
                    target,
                    host,
                    requested,
                    allowed,
                    rule,
                    refusal,
                } => {
                    if let (false, Some(refusal)) = (allowed, &refusal) {
                        self.explain_refusal(&host, refusal);
                    }
                    // A payload naming a new host in every attempt would
                    // otherwise grow the supervisor and the report without
                    // end; the audit still has every attempt.
                    let key =
                        if self.hosts.len() < MAX_COUNTED_HOSTS || self.hosts.contains_key(&host) {
                            host
                        } else {
                            OTHER_HOSTS.to_string()
                        };
                    let counts = self.hosts.entry(key).or_default();
                    if allowed {
                        counts.allowed += 1;
                    } else {
                        counts.refused += 1;
                    }
                    records.push(ConnectionRecord {
                        target,
                        requested,
                        allowed,
                        rule,
                    });
                }
                FromNet::Fetched { id, outcome } => {
                    self.fetched.insert(id, outcome);
                }
            }
        }
        if let Some(process) = &mut self.process {
            for answer in &answers {
                process.link.send(answer);
            }
            process.link.flush();
        }
        (records, done)
    }

    /// Hand a request the broker allowed to the net process, starting it
    /// if this is the run's first. Returns its id.
    pub fn fetch(&mut self, request: crate::net::fetch::FetchRequest) -> Result<u64, String> {
        if let Some(reason) = &self.failed {
            return Err(reason.clone());
        }
        if self.process.is_none() {
            match crate::net::process::start(
                &self.policy.allow,
                &self.policy.resolve,
                self.syscalls.as_ref(),
                None,
                Vec::new(),
            ) {
                Ok(process) => self.process = Some(process),
                Err(err) => {
                    let reason = format!("the network process could not start: {err}");
                    self.failed = Some(reason.clone());
                    return Err(reason);
                }
            }
        }
        let Some(process) = &mut self.process else {
            return Err("the network process is gone".into());
        };
        if process.link.is_closed() {
            return Err("the network process ended".into());
        }
        let id = self.next_fetch;
        self.next_fetch += 1;
        process.link.send(&ToNet::Fetch { id, request });
        Ok(id)
    }

    /// The outcome of fetch `id` once it arrived; a closed link ends every
    /// fetch still out.
    pub fn take_fetched(&mut self, id: u64) -> Option<FetchOutcome> {
        if let Some(outcome) = self.fetched.remove(&id) {
            return Some(outcome);
        }
        match &self.process {
            Some(process) if !process.link.is_closed() => None,
            _ => Some(FetchOutcome::Failed {
                message: "the network process ended before it answered".into(),
                timed_out: false,
            }),
        }
    }

    /// The entries in force, as written (for the report).
    pub fn allowlist(&self) -> &[String] {
        &self.policy.allow
    }
}

/// A proxied connection cannot wait for an answer nobody will give: an
/// "ask" that found nobody to ask is refused, and the rule says how to
/// approve it ahead.
fn unanswered_is_refused(verdict: Verdict, target: &str, grant_command: &str) -> Verdict {
    if verdict.decision != Decision::Ask {
        return verdict;
    }
    Verdict {
        decision: Decision::Deny,
        rule: unanswerable(target, &verdict.rule, grant_command),
    }
}

/// Why a host that needs approval was refused without a person to ask,
/// and how to approve that host ahead (never the whole network). The
/// proxy's refusal adds the allowlist's own hint to this.
fn unanswerable(target: &str, rule: &str, grant_command: &str) -> String {
    format!(
        "{rule}: needs approval and nobody can be asked in this run; \
         pre-approve it with `{grant_command} --grant net.http:{target}`"
    )
}

/// The broker's answer to a `net.http` that needs approval nobody can
/// give: [`unanswerable`], and the allowlist entry that would list it.
pub fn needs_approval(target: &str, rule: &str, grant_command: &str) -> String {
    let host = crate::net::allow::split_target(target)
        .map_or_else(|| target.to_string(), |(host, _)| host.to_string());
    format!(
        "net.http to {target}: {}, or list it: --net allow:{host} or [network] allow = [\"{host}\"]",
        unanswerable(target, rule, grant_command)
    )
}

/// The socket init hands the proxy's listener over on, and the net
/// process's end of it: for a run in allowlist mode.
pub fn listener_handover() -> nix::Result<(OwnedFd, OwnedFd)> {
    nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refuses every question and counts them.
    #[derive(Debug, Default)]
    struct Refuses(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl super::super::prompt::Asker for Refuses {
        fn ask(&mut self, _: &str, _: &str, _: Option<&str>) -> super::super::prompt::Answer {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            super::super::prompt::Answer::Deny
        }
        fn not_after(&mut self, _: Option<std::time::Instant>) {}
    }

    #[test]
    fn a_refusal_is_explained_once_per_host_escaped_and_bounded() {
        let policy = crate::profile::load("strict").unwrap();
        let mut network = Network::new(policy.network, None);
        let first = network.explain_refusal("a.test", "a.test is not allowed\u{1b}[2J");
        assert_eq!(
            first.as_deref(),
            Some("sandbox: network: a.test is not allowed\\u{1b}[2J")
        );
        assert_eq!(network.explain_refusal("a.test", "again"), None);
        for n in 1..MAX_EXPLAINED_HOSTS {
            assert!(network
                .explain_refusal(&format!("h{n}.test"), "refused")
                .is_some());
        }
        let last = network.explain_refusal("one-more.test", "refused");
        assert!(
            last.is_some_and(|line| line.contains("the audit log and the report name the rest"))
        );
        assert_eq!(network.explain_refusal("yet-another.test", "refused"), None);
        assert_eq!(network.explained.len(), MAX_EXPLAINED_HOSTS + 1);
    }

    #[test]
    fn a_new_host_in_every_attempt_stops_being_asked_after_the_cap() {
        let policy = crate::profile::load("strict").unwrap();
        let mut decider = Decider::new(policy.broker, std::path::PathBuf::from("/p"));
        let asker = Refuses::default();
        let asked = std::sync::Arc::clone(&asker.0);
        decider.prompter = Some(Box::new(asker));
        let mut network = Network::new(policy.network, None);
        for n in 0..MAX_QUESTIONS + 5 {
            let host = Host::parse(&format!("h{n}.flood.test")).unwrap();
            let verdict = network.decide(&mut decider, &host, 443);
            assert_eq!(verdict.decision, Decision::Deny);
        }
        assert_eq!(
            asked.load(std::sync::atomic::Ordering::SeqCst),
            MAX_QUESTIONS as usize
        );
    }
}
