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

/// Whether a run of `run` may take a sandbox warmed for `warm`: they
/// differ only in argv, environment, working directory, stdio, timeout and
/// output cap (and the run's own id and audit file). Compared field by
/// field: serialising both specs to compare them was a tenth of the
/// launcher's CPU under load, and every allocation it freed after a fork
/// cost the launcher a copy-on-write fault. Every field is named, so a
/// field added to the spec must be placed on one side or the other here.
pub fn fits(warm: &RunSpec, run: &RunSpec) -> bool {
    let RunSpec {
        policy,
        argv: _,
        env: _,
        project,
        cwd: _,
        secrets,
        cgroup_parent,
        audit: _,
        grant_store,
        review_store,
        ask_deadline_ms,
        stdin: _,
        run_as,
    } = warm;
    same_policy(policy, &run.policy)
        && *project == run.project
        && *secrets == run.secrets
        && *cgroup_parent == run.cgroup_parent
        && *grant_store == run.grant_store
        && *review_store == run.review_store
        && *ask_deadline_ms == run.ask_deadline_ms
        && match (run_as, &run.run_as) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                // The run's id differs by design; the caller may not.
                let super::protocol::RunAs {
                    run: _,
                    uid,
                    gid,
                    groups,
                } = a;
                *uid == b.uid && *gid == b.gid && *groups == b.groups
            }
            _ => false,
        }
}

/// Two policies alike but for the run's timeout and output cap, which a
/// commit sets.
fn same_policy(
    warm: &crate::profile::policy::Policy,
    run: &crate::profile::policy::Policy,
) -> bool {
    use crate::profile::policy::{Limits, Policy};
    let Policy {
        name,
        filesystem,
        network,
        limits,
        syscalls,
        env,
        broker,
        enforce,
        tools,
    } = warm;
    let Limits {
        memory,
        pids,
        cpu,
        timeout: _,
        output: _,
        nofile,
    } = limits;
    *name == run.name
        && *filesystem == run.filesystem
        && *network == run.network
        && *memory == run.limits.memory
        && *pids == run.limits.pids
        && *cpu == run.limits.cpu
        && *nofile == run.limits.nofile
        && *syscalls == run.syscalls
        && *env == run.env
        && *broker == run.broker
        && *enforce == run.enforce
        && *tools == run.tools
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
    // The sandbox may wait long for its command: the namespace holder its
    // start killed is reaped now, not kept as a zombie all that time.
    crate::sys::reap::wait_for_prompt();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::protocol::RunAs;

    fn spec() -> RunSpec {
        RunSpec {
            env: vec![("A".into(), "1".into())],
            ask_deadline_ms: 1,
            run_as: Some(RunAs {
                run: "warm-1-1".into(),
                uid: 1000,
                gid: 1000,
                groups: vec![1000],
            }),
            ..RunSpec::new(
                crate::profile::load("strict").unwrap(),
                vec!["/bin/true".into()],
                "/srv/p".into(),
            )
        }
    }

    #[test]
    fn a_warm_sandbox_fits_runs_that_differ_only_in_their_command() {
        let warm = spec();
        let mut run = spec();
        run.argv = vec!["make".into(), "test".into()];
        run.env = vec![("B".into(), "2".into())];
        run.cwd = Some("/srv/p/sub".into());
        run.stdin = true;
        run.audit = Some("/var/lib/sandbox/spool/r/audit.ndjson".into());
        run.policy.limits.timeout = Some(Duration::from_secs(5));
        run.policy.limits.output = Some(1 << 20);
        run.run_as.as_mut().unwrap().run = "r".into();
        assert!(fits(&warm, &run));
    }

    #[test]
    fn any_other_difference_makes_the_run_cold() {
        let warm = spec();
        type Change = Box<dyn Fn(&mut RunSpec)>;
        let changes: Vec<(&str, Change)> = vec![
            ("project", Box::new(|s| s.project = "/srv/q".into())),
            ("profile name", Box::new(|s| s.policy.name = "other".into())),
            (
                "memory",
                Box::new(|s| s.policy.limits.memory = Some(1 << 20)),
            ),
            ("pids", Box::new(|s| s.policy.limits.pids = Some(3))),
            ("cpu", Box::new(|s| s.policy.limits.cpu = Some(0.5))),
            ("nofile", Box::new(|s| s.policy.limits.nofile = Some(64))),
            (
                "read paths",
                Box::new(|s| s.policy.filesystem.read.push("/opt".into())),
            ),
            (
                "env policy",
                Box::new(|s| s.policy.env.pass.push("HOME".into())),
            ),
            ("tools", Box::new(|s| s.policy.tools.push("node".into()))),
            (
                "cgroup parent",
                Box::new(|s| s.cgroup_parent = Some("/sys/fs/cgroup/x".into())),
            ),
            (
                "grant store",
                Box::new(|s| s.grant_store = Some("/g".into())),
            ),
            (
                "review store",
                Box::new(|s| s.review_store = Some("/r".into())),
            ),
            ("ask deadline", Box::new(|s| s.ask_deadline_ms = 2)),
            ("uid", Box::new(|s| s.run_as.as_mut().unwrap().uid = 1001)),
            ("gid", Box::new(|s| s.run_as.as_mut().unwrap().gid = 1001)),
            (
                "groups",
                Box::new(|s| s.run_as.as_mut().unwrap().groups.push(27)),
            ),
            ("caller", Box::new(|s| s.run_as = None)),
        ];
        for (what, change) in changes {
            let mut run = spec();
            change(&mut run);
            assert!(!fits(&warm, &run), "{what}");
        }
    }
}
