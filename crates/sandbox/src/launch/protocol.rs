//! What `sandbox daemon`, its launcher (`sandbox __launch`) and each run's
//! supervisor say to each other (design: `docs/src/launcher.md`).
//!
//! Three channels:
//! - daemon ↔ launcher: one `SOCK_SEQPACKET` socket, one JSON object per
//!   message ([`ToLauncher`], [`FromLauncher`]), descriptors beside a spawn
//!   request as `SCM_RIGHTS` (see [`super::wire`]);
//! - daemon ↔ one run's supervisor: a `SOCK_STREAM` socket handed over
//!   with the spawn request, one JSON object per line ([`FromSupervisor`],
//!   [`ToSupervisor`]);
//! - the run's log and audit: pipes whose read ends the daemon keeps. The
//!   supervisor writes [`LogRecord`] lines (and the broker its audit
//!   lines) into them; the daemon checks, numbers and bounds each line and
//!   alone writes the files in its spool, which readers (the daemon's
//!   NDJSON stream, `sandbox logs`) tail. The supervisor runs as the
//!   caller, who may take any of its descriptors (`pidfd_getfd`), so it
//!   is never given one the caller could not have opened itself
//!   (`docs/src/daemon.md`, "What a caller's supervisor can do").

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::profile::policy::Policy;

/// Largest message on the launcher socket and largest line on a run's
/// events socket. A spawn request is a resolved policy, argv, environment
/// and secrets; the daemon refuses a submitted run that would not fit.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Descriptors that travel with [`ToLauncher::Spawn`], in this order:
/// the run's events socket, the write end of its log pipe, then stdin
/// when [`RunSpec::stdin`] is true (a sealed copy of the submitted bytes).
pub const SPAWN_FDS_EVENTS: usize = 0;
/// Index of the log file among a spawn request's descriptors.
pub const SPAWN_FDS_LOG: usize = 1;
/// Index of stdin among a spawn request's descriptors, when there is one.
/// The write end of the run's audit pipe, when [`RunSpec::audit`] names
/// one, comes last.
pub const SPAWN_FDS_STDIN: usize = 2;

/// Room in a run's log for the records around the output (started, asks,
/// exit).
pub const LOG_SLACK: u64 = 64 << 10;

/// Most bytes a run's output records may take in its log. The output cap
/// counts the command's bytes; their records can take several times more
/// (escaped control bytes, a record per one-byte write), and the spool is
/// the daemon's disk. The supervisor stops its output here, and the
/// daemon, which alone writes the spool, stops the whole log at this plus
/// [`LOG_SLACK`] whatever the supervisor sends.
pub fn log_bound(output_cap: Option<u64>) -> u64 {
    output_cap.map_or(u64::MAX, |cap| {
        cap.saturating_mul(2).saturating_add(LOG_SLACK)
    })
}

/// One run, fully resolved by the daemon after the caller's mapping
/// narrowed it. The launcher never looks a profile up by name: it gets the
/// policy itself, with `env.pass` already resolved against the caller's
/// submitted environment (never the daemon's own).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSpec {
    /// The policy the run is held to.
    pub policy: Policy,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The payload's environment on top of the policy's `env.set`.
    pub env: Vec<(String, String)>,
    /// The project root (absolute, checked against the caller's mapping).
    pub project: PathBuf,
    /// Working directory inside the project (absolute), if not the root.
    pub cwd: Option<PathBuf>,
    /// Secrets offered to the broker's `secrets.get` and `net.http`.
    pub secrets: Vec<crate::broker::secrets::SecretSpec>,
    /// The delegated cgroup to create the run's cgroup below.
    pub cgroup_parent: Option<PathBuf>,
    /// Where the daemon keeps the broker's audit lines (in its spool).
    /// Never opened by the launcher or the supervisor: when it is set, the
    /// write end of a pipe the daemon reads travels as the last spawn
    /// descriptor.
    pub audit: Option<PathBuf>,
    /// The caller's own grant store; `None` uses no stored grants (never
    /// the daemon user's).
    pub grant_store: Option<PathBuf>,
    /// Where a review run keeps its changes: the caller's store in the
    /// daemon's state (None: the supervisor user's own store).
    #[serde(default)]
    pub review_store: Option<PathBuf>,
    /// How long an "ask" waits for an approval through the API before it
    /// is denied.
    pub ask_deadline_ms: u64,
    /// A stdin descriptor travels with the request; otherwise /dev/null.
    pub stdin: bool,
    /// The caller the run belongs to, when it is not the daemon's own user:
    /// the supervisor becomes this user before anything of the run
    /// happens, so the run (its sandbox, its broker, its view of the
    /// project) never has more than the caller has.
    #[serde(default)]
    pub run_as: Option<RunAs>,
}

impl RunSpec {
    /// A run of `argv` in `project` under `policy` and nothing else: no
    /// environment beyond the policy's, the project's root as working
    /// directory, no secrets, cgroup parent, audit, grant or review store,
    /// stdin from /dev/null, the launcher's own user, and a question
    /// denied at once. The daemon fills in what a request and its rule give.
    pub fn new(policy: Policy, argv: Vec<String>, project: PathBuf) -> RunSpec {
        RunSpec {
            policy,
            argv,
            env: Vec::new(),
            project,
            cwd: None,
            secrets: Vec::new(),
            cgroup_parent: None,
            audit: None,
            grant_store: None,
            review_store: None,
            ask_deadline_ms: 0,
            stdin: false,
            run_as: None,
        }
    }
}

/// A caller's identity, from `SO_PEERCRED` and its group list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    /// The daemon's run id (names the run's delegated cgroup).
    pub run: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// The name of the cgroup a run that is not the daemon user's is
/// delegated, below the launcher's own in each hierarchy: its limits are
/// written there by root (so the caller cannot raise them), and the caller
/// may create the run's own cgroup inside.
pub fn delegated_cgroup_name(run: &str) -> String {
    format!("sandbox-run-{run}")
}

/// A process's start time (`/proc/PID/stat` field 22, clock ticks since
/// boot): with the pid, it names one process, never a later one that
/// reuses the pid.
pub fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces
    // and parentheses itself: fields are counted after its last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// daemon → launcher.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToLauncher {
    /// Fork a supervisor for this run (descriptors: see `SPAWN_FDS_*`).
    Spawn {
        /// The daemon's run id.
        run: String,
        /// What to run.
        spec: Box<RunSpec>,
        /// The warm sandbox to run it in, when the daemon holds one
        /// ready: used if its spec fits, else the run is cold. Either way
        /// that warm sandbox is gone afterwards.
        #[serde(default)]
        warm: Option<WarmPick>,
    },
    /// Prepare `count` warm sandboxes for runs of `spec` (its command,
    /// environment and working directory are ignored), each announced by
    /// [`FromLauncher::WarmReady`] and, when it goes, by
    /// [`FromLauncher::WarmDiscarded`].
    Warm {
        /// The pool key (see `docs/src/launcher.md`).
        key: String,
        /// The daemon's number for this request, echoed back.
        gen: u64,
        /// The run the sandboxes are for.
        spec: Box<RunSpec>,
        /// How many.
        count: u32,
        /// A warm sandbox unused this long is discarded.
        idle_ms: u64,
        /// Projects with more directories than this are never pooled.
        budget: usize,
    },
    /// The daemon stops: end every supervisor, wait for them and their
    /// janitors, remove their delegated cgroups (warm ones too), exit.
    Stop,
    /// Discard the warm sandbox of `key` made for request `gen`, or every
    /// warm sandbox of `key` when `gen` is not given.
    Drain {
        /// The pool key.
        key: String,
        /// The [`ToLauncher::Warm`] request, when only its sandbox goes.
        #[serde(default)]
        gen: Option<u64>,
    },
}

/// One warm sandbox: its key and the [`ToLauncher::Warm`] request it came
/// from (a key may have several ready; the daemon says which it counted
/// as taken).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmPick {
    /// The pool key.
    pub key: String,
    /// The request's number.
    pub gen: u64,
}

/// launcher → daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromLauncher {
    /// The run's supervisor process exists.
    Started {
        /// Run id.
        run: String,
        /// Host pid of the supervisor.
        pid: i32,
        /// Its start time ([`process_start_time`]), read while it was
        /// certainly this process (not yet reaped).
        #[serde(default)]
        start: Option<u64>,
    },
    /// The supervisor could not be started (bad spec, fork failed).
    Refused {
        /// Run id.
        run: String,
        /// Why, in words.
        error: String,
    },
    /// A warm sandbox of `key` waits for its command.
    WarmReady {
        /// The pool key.
        key: String,
        /// The [`ToLauncher::Warm`] request it came from.
        gen: u64,
    },
    /// A warm sandbox of `key` is gone without being used (idle, the
    /// project changed, drained, or it could not be prepared).
    WarmDiscarded {
        /// The pool key.
        key: String,
        /// The [`ToLauncher::Warm`] request it came from.
        gen: u64,
        /// Why, in words.
        reason: String,
    },
    /// The supervisor process ended (reaped by the launcher). A supervisor
    /// that ends without having sent [`FromSupervisor::Finished`] crashed:
    /// the run is failed with this status as the reason.
    Exited {
        /// Run id.
        run: String,
        /// Exit code, if it exited.
        code: Option<i32>,
        /// Signal, if one killed it.
        signal: Option<i32>,
    },
}

/// An answer to an "ask" through the API. "Always" is not offered: a stored
/// grant would be written with the daemon's rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// This request only.
    Once,
    /// Every such request of this run.
    Run,
    /// No.
    Deny,
}

/// supervisor → daemon, on the run's events socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromSupervisor {
    /// The sandbox exists; the command is about to be executed.
    Started {
        /// Host pid of the sandbox's init.
        init_pid: i32,
        /// Its start time, read by its parent before it could be reaped,
        /// so a recovering daemon never kills a process that took the pid.
        #[serde(default)]
        init_start: Option<u64>,
    },
    /// A broker request needs a person's decision; the run waits for a
    /// [`ToSupervisor::Answer`] until `deadline_ms` (milliseconds since the
    /// Unix epoch), then denies.
    Ask {
        /// Number of this question within the run (from 1).
        id: u64,
        /// Who asks (`command:…` or `skill:…`).
        caller: String,
        /// The broker action.
        action: String,
        /// What it is asked for (path, command, URL), escaped for display.
        target: Option<String>,
        /// When the question is denied unanswered.
        deadline_ms: u64,
    },
    /// The run is over. Last message on the socket.
    Finished {
        /// The shell-style status (`128 + signal` for a signal, 125 when
        /// the sandbox failed, 126/127 when the command could not run).
        status: i32,
        /// The same JSON report `sandbox run --report` writes.
        report: serde_json::Value,
        /// Why the run failed, when the sandbox itself failed.
        error: Option<String>,
    },
}

/// daemon → supervisor, on the run's events socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToSupervisor {
    /// The answer to question `id`.
    Answer {
        /// The question's number.
        id: u64,
        /// The decision.
        answer: Approval,
    },
    /// End the run: SIGTERM to the command now, every process of the run
    /// killed `grace_ms` later.
    Cancel {
        /// Time between SIGTERM and the kill.
        grace_ms: u64,
    },
}

/// One line of a run's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRecord {
    /// Position in the log, from 1, without gaps.
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub event: LogEvent,
}

/// What a log line holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LogEvent {
    /// Bytes the command wrote to stdout.
    Stdout(Chunk),
    /// Bytes the command wrote to stderr.
    Stderr(Chunk),
    /// The sandbox exists.
    Started {
        /// Host pid of the sandbox's init.
        init_pid: i32,
    },
    /// A question waits for an approval.
    Ask {
        /// The daemon's approval id is `<run>/<id>`.
        id: u64,
        /// The broker action.
        action: String,
        /// Its target.
        target: Option<String>,
    },
    /// A question was answered (or its deadline passed: `deny`).
    Answer {
        /// The question's number.
        id: u64,
        /// The decision.
        answer: Approval,
    },
    /// The output cap was reached; later output is dropped.
    OutputCapped {
        /// The cap in bytes.
        cap: u64,
    },
    /// The run ended.
    Exit {
        /// Shell-style status.
        status: i32,
    },
    /// The run ended without a result (its supervisor died, or the daemon
    /// restarted while it ran). Written by the daemon.
    Lost {
        /// Why.
        reason: String,
    },
    /// The run's record is final: the log's last record, written by the
    /// daemon once nothing else writes the log. It carries what the run
    /// object says, so a follower has the run's end even when the daemon
    /// stops right after (`docs/src/daemon.md`).
    End {
        /// `exited`, `failed`, `cancelled` or `lost`.
        state: String,
        /// The shell status a local run would exit with, when there is one.
        status: Option<i32>,
        /// Why it failed, was cancelled or lost.
        reason: Option<String>,
        /// The run's report (`--report`'s JSON), when it has one.
        report: Option<serde_json::Value>,
    },
}

/// A piece of output: text when it is UTF-8, base64 otherwise, so the
/// bytes a client writes out are exactly the command's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// The bytes, when they are valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The bytes in standard base64, when they are not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_b64: Option<String>,
}

impl Chunk {
    /// Wrap bytes as text or base64.
    pub fn new(bytes: &[u8]) -> Chunk {
        match std::str::from_utf8(bytes) {
            Ok(text) => Chunk {
                data: Some(text.to_string()),
                data_b64: None,
            },
            Err(_) => {
                use base64::Engine;
                Chunk {
                    data: None,
                    data_b64: Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
                }
            }
        }
    }

    /// The bytes back; `None` when the base64 is malformed.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        use base64::Engine;
        match (&self.data, &self.data_b64) {
            (Some(text), _) => Some(text.as_bytes().to_vec()),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD.decode(b64).ok(),
            (None, None) => Some(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_crosses_to_the_launcher_unchanged() {
        for name in ["strict", "standard", "permissive"] {
            let policy = crate::profile::load(name).unwrap();
            let spec = RunSpec::new(policy.clone(), vec!["/bin/true".into()], "/tmp".into());
            let message = serde_json::to_vec(&ToLauncher::Spawn {
                run: "r".into(),
                spec: Box::new(spec),
                warm: None,
            })
            .unwrap();
            let Ok(ToLauncher::Spawn { spec, .. }) = serde_json::from_slice(&message) else {
                panic!("not a spawn request");
            };
            assert_eq!(spec.policy, policy, "{name}");
        }
    }

    #[test]
    fn chunks_keep_their_bytes() {
        for bytes in [&b"text\n"[..], b"\xff\xfe binary", b""] {
            let line = serde_json::to_string(&LogEvent::Stdout(Chunk::new(bytes))).unwrap();
            let LogEvent::Stdout(chunk) = serde_json::from_str(&line).unwrap() else {
                panic!("{line}");
            };
            assert_eq!(chunk.bytes().unwrap(), bytes);
        }
    }
}
