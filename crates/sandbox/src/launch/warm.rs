//! Warm sandboxes (design: `docs/src/launcher.md`): a run supervisor that has
//! done every step that does not depend on the command, and waits for it.
//!
//! The launcher forks one per [`super::protocol::ToLauncher::Warm`]; it
//! becomes the caller, watches every directory of the project, builds the
//! sandbox (cgroup, namespaces, mounts, the project's walk, and in the
//! payload every layer up to seccomp; see [`crate::spawn::warm`]) and tells
//! the launcher it is ready. On a spawn request the launcher hands it the
//! run ([`ToWarm::Commit`] with the run's descriptors); it resolves the
//! command as a cold run would and commits it to the waiting payload. If
//! the project changed since the watches were set, it discards the sandbox
//! and runs the request cold itself, so a stale sandbox is never used.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::PollFlags;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use serde::{Deserialize, Serialize};

use super::protocol::RunSpec;
use super::supervisor::{self, Identity, Session};
use super::wire::{self, WireError};
use crate::poll_set::PollSet;
use crate::project::watch::{TreeWatch, WatchError};

/// launcher → warm supervisor, on its own `SOCK_SEQPACKET` socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToWarm {
    /// Run this. Descriptors: the spawn request's (events socket, log
    /// pipe, stdin when the spec has one, audit pipe when it names one).
    Commit {
        /// The daemon's run id.
        run: String,
        /// The run.
        spec: Box<RunSpec>,
    },
}

/// warm supervisor → launcher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromWarm {
    /// The sandbox waits for its command.
    Ready,
    /// The sandbox is gone unused.
    Discarded {
        /// Why.
        reason: String,
    },
}

/// What differs between runs a warm sandbox may serve: everything else
/// is what the sandbox was built from.
fn without_command(spec: &RunSpec) -> serde_json::Value {
    let mut spec = spec.clone();
    spec.argv.clear();
    spec.env.clear();
    spec.cwd = None;
    spec.stdin = false;
    spec.audit = None;
    spec.policy.limits.timeout = None;
    spec.policy.limits.output = None;
    if let Some(run_as) = &mut spec.run_as {
        run_as.run.clear();
    }
    serde_json::to_value(&spec).unwrap_or(serde_json::Value::Null)
}

/// Whether a run of `run` may take a sandbox warmed for `warm`: they
/// differ only in argv, environment, working directory, stdio, timeout and
/// output cap (and the run's own id and audit file).
pub fn fits(warm: &RunSpec, run: &RunSpec) -> bool {
    let ours = without_command(warm);
    !ours.is_null() && ours == without_command(run)
}

/// Watches on the project ([`crate::project::watch::TreeWatch`]), set
/// before the sandbox's walk of it: any creation, removal, rename or
/// attribute change (a file's link count is one) after that is pending
/// when the sandbox is committed, and discards it.
pub struct Freshness {
    tree: TreeWatch,
}

/// Why a project cannot be watched.
pub type FreshnessError = WatchError;

impl Freshness {
    /// Watch `project` and every directory and regular file below it.
    pub fn watch(project: &Path, budget: usize) -> Result<Freshness, FreshnessError> {
        TreeWatch::new(project, budget).map(|tree| Freshness { tree })
    }

    /// Watch only `project` itself (its owner, mode, removal or rename):
    /// for a sandbox that shows none of the project's contents, which
    /// is therefore not walked.
    pub fn watch_root(project: &Path) -> Result<Freshness, FreshnessError> {
        TreeWatch::root_only(project).map(|tree| Freshness { tree })
    }

    /// Whether anything happened since the watches were set (read without
    /// blocking). A failed read counts as a change.
    pub fn changed(&mut self) -> bool {
        self.tree.pending()
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.tree.fd()
    }
}

/// The program a warm sandbox is planned with until its commit: a name no
/// PATH holds, so nothing is ever executed or hashed for it.
const NO_COMMAND_YET: &str = "sandbox-warm-no-command-yet";

fn dev_null() -> Option<OwnedFd> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .ok()
        .map(OwnedFd::from)
}

/// The forked warm supervisor: prepare, wait, serve one run. Returns the
/// process's exit status.
pub fn serve(spec: RunSpec, launcher: OwnedFd, idle: Duration, budget: usize) -> i32 {
    let discard = |reason: String| {
        let _ = wire::send(launcher.as_fd(), &FromWarm::Discarded { reason }, &[]);
        0
    };
    if let Some(run_as) = &spec.run_as {
        if let Err(why) = supervisor::become_caller(run_as, &spec.policy) {
            return discard(why);
        }
    }
    let project = match std::fs::canonicalize(&spec.project) {
        Ok(project) => project,
        Err(err) => return discard(format!("the project {}: {err}", spec.project.display())),
    };
    // Before the sandbox's own walk, so no change falls between the two.
    let mut fresh = match Freshness::watch(&project, budget) {
        Ok(fresh) => fresh,
        Err(err) => return discard(err.to_string()),
    };
    let (Some(events), Some(log)) = (dev_null(), dev_null()) else {
        return discard("no descriptor for /dev/null".into());
    };
    let session = Session::new(events, log, spec.policy.limits.output);
    let (ours, theirs) = match socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(pair) => pair,
        Err(errno) => return discard(format!("socketpair(commit): {errno}")),
    };
    let mut command = supervisor::command_for(&spec, &[NO_COMMAND_YET.into()], &session);
    command.stdin(crate::Stdio::Null).warm_commit(theirs);
    let _ = nix::sys::prctl::set_name(c"sandbox-warm");
    let child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return discard(format!("preparing the sandbox: {err}")),
    };
    if wire::send(launcher.as_fd(), &FromWarm::Ready, &[]).is_err() {
        return 0;
    }
    let until = Instant::now() + idle;
    let waited = loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err(format!("unused for {} s", idle.as_secs()));
        }
        let mut set = PollSet::default();
        let command_slot = set.add(launcher.as_fd(), PollFlags::POLLIN);
        let watch_slot = set.add(fresh.fd(), PollFlags::POLLIN);
        if let Err(errno) = set.wait([Some(until)]) {
            return discard(format!("poll: {errno}"));
        }
        let (commanded, touched) = (set.ready(Some(command_slot)), set.ready(Some(watch_slot)));
        if touched && fresh.changed() {
            break Err("the project changed after the sandbox was prepared".into());
        }
        if commanded {
            match wire::receive::<ToWarm>(launcher.as_fd()) {
                Ok((ToWarm::Commit { spec, .. }, fds)) => break Ok((*spec, fds, Instant::now())),
                // Drained: dropping the child ends the sandbox.
                Err(WireError::Closed) => return 0,
                Err(err) => return discard(format!("the launcher's message: {err}")),
            }
        }
    };
    let (run_spec, fds, committed, warm_child) = match waited {
        Ok((spec, fds, committed)) => (spec, fds, committed, Some(child)),
        Err(reason) => {
            drop(child);
            let _ = discard(reason);
            // The launcher may have handed a run over before it read the
            // discard: that run is in the socket, ahead of the launcher's
            // close, and is served cold rather than lost.
            match wire::receive::<ToWarm>(launcher.as_fd()) {
                Ok((ToWarm::Commit { spec, .. }, fds)) => (*spec, fds, Instant::now(), None),
                Err(_) => return 0,
            }
        }
    };
    let Some(run_fds) = supervisor::split_fds(&run_spec, fds) else {
        return 125;
    };
    let (stdin, audit) = (run_fds.stdin, run_fds.audit);
    session.attach(run_fds.events, run_fds.log, run_spec.policy.limits.output);
    let status = match warm_child {
        Some(child) if !fresh.changed() => commit(
            child, &run_spec, &project, stdin, audit, &ours, &session, committed,
        )
        .unwrap_or_else(|(why, status)| session.failed(&run_spec, why, status)),
        still_warm => {
            if still_warm.is_some() {
                // A `.env` created since the walk would be visible, a
                // protected file created since would not be pinned: the
                // run goes cold.
                let _ = discard("the project changed after the sandbox was prepared".into());
                drop(still_warm);
            }
            supervisor::supervise(run_spec, stdin, audit, Identity::Caller, &session)
        }
    };
    session.exit(status);
    // As a cold supervisor does: root's wait confirms the report.
    status & 0xff
}

/// Hand the waiting payload its command and see the run to its end.
#[allow(clippy::too_many_arguments)]
fn commit(
    mut child: crate::Child,
    spec: &RunSpec,
    project: &Path,
    stdin: Option<OwnedFd>,
    audit: Option<std::fs::File>,
    sock: &OwnedFd,
    session: &Session,
    committed: Instant,
) -> Result<i32, (String, i32)> {
    let refused = |err: crate::SpawnError| (err.to_string(), err.exit_status());
    let commit = crate::spawn::warm::Commit::resolve(
        &spec.policy,
        &spec.argv,
        &spec.env,
        spec.cwd.as_deref(),
        project,
    )
    .map_err(refused)?;
    let stdin = match stdin {
        Some(fd) => fd,
        None => dev_null().ok_or(("no descriptor for /dev/null".to_string(), 125))?,
    };
    child.commit_warm(&commit, &spec.policy.limits, audit);
    commit
        .send(sock.as_fd(), [Some(stdin.as_fd()), None, None])
        .map_err(refused)?;
    Ok(supervisor::drive(child, session, Some(committed)))
}
