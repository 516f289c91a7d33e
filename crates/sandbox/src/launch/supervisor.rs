//! One daemon run's supervisor: a process forked by the launcher that does
//! what `sandbox run` does ([`crate::Command::spawn`], then the wait with its
//! broker, limits, janitor and report), with the daemon on the other end of
//! an events socket instead of a person on a terminal, and the output
//! written as records of the run's log instead of to a terminal.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::PollFlags;

use super::protocol::{
    log_bound, Approval, Chunk, FromSupervisor, LogEvent, LogRecord, RunSpec, ToSupervisor,
    MAX_MESSAGE, SPAWN_FDS_EVENTS, SPAWN_FDS_LOG, SPAWN_FDS_STDIN,
};
use crate::broker::prompt::{Answer, Asker};
use crate::jsonl::{Fill, Frame, Framer};
use crate::poll_set::PollSet;
use crate::spawn::output::{OutputLog, OutputStream, SharedLog};
use crate::spawn::parent::{Driver, Steer, Turn};

/// The supervisor is single-threaded: a lock is never contended, and a
/// poisoned one (impossible without a second thread) is still usable.
fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The run's log file: numbered records, one write each (`O_APPEND`, so a
/// reader tailing it sees whole lines or nothing of a line).
struct RunLog {
    file: std::fs::File,
    seq: u64,
    /// False once a write failed (a full disk): the run goes on, its log
    /// stops, and the report says the output was not all kept.
    healthy: bool,
    /// Bytes written to the log.
    bytes: u64,
    /// Most bytes output records may take in the log. The output cap counts
    /// the command's bytes; their records can take several times more
    /// (escaped control bytes, a record per one-byte write), and the spool
    /// is the daemon's disk.
    max_bytes: u64,
    /// Output stopped at `max_bytes`.
    cut: bool,
}

impl RunLog {
    fn line(&self, event: LogEvent) -> std::io::Result<Vec<u8>> {
        let record = LogRecord {
            seq: self.seq + 1,
            time_ms: crate::clock::unix_ms(),
            event,
        };
        let mut line = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        Ok(line)
    }

    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if !self.healthy {
            return Err(std::io::Error::other("the run log failed earlier"));
        }
        let written = self.file.write_all(line);
        match written {
            Ok(()) => {
                self.seq += 1;
                self.bytes += line.len() as u64;
            }
            Err(_) => self.healthy = false,
        }
        written
    }

    fn record(&mut self, event: LogEvent) -> std::io::Result<()> {
        let line = self.line(event)?;
        self.write_line(&line)
    }
}

impl OutputLog for RunLog {
    fn output(&mut self, stream: OutputStream, bytes: &[u8]) -> std::io::Result<()> {
        if self.cut {
            return Err(std::io::Error::other("the run log is full"));
        }
        let chunk = Chunk::new(bytes);
        let line = self.line(match stream {
            OutputStream::Stdout => LogEvent::Stdout(chunk),
            OutputStream::Stderr => LogEvent::Stderr(chunk),
        })?;
        if self.bytes + line.len() as u64 > self.max_bytes {
            self.cut = true;
            let _ = self.record(LogEvent::OutputCapped {
                cap: self.max_bytes,
            });
            return Err(std::io::Error::other("the run log is full"));
        }
        self.write_line(&line)
    }

    fn capped(&mut self, cap: u64) {
        let _ = self.record(LogEvent::OutputCapped { cap });
    }
}

/// The events socket, read by the driver (cancel) and by the asker
/// (answers) from one buffer, so a line split across reads is never lost.
struct Events {
    sock: OwnedFd,
    buffer: Framer,
    /// A cancel arrived (possibly while a question was open).
    cancel: Option<Duration>,
    /// The daemon closed its end.
    closed: bool,
}

impl Events {
    fn send(&mut self, message: &FromSupervisor) {
        let Ok(mut line) = serde_json::to_vec(message) else {
            return;
        };
        line.push(b'\n');
        let mut rest = &line[..];
        while !rest.is_empty() {
            match nix::unistd::write(self.sock.as_fd(), rest) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::EINTR) => {}
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }

    /// Read what is there (one read), and return the complete messages.
    fn read(&mut self) -> Vec<ToSupervisor> {
        let mut frames = Vec::new();
        if self.buffer.fill(self.sock.as_fd(), &mut frames) == Fill::Closed {
            self.closed = true;
        }
        let mut messages = Vec::new();
        for frame in frames {
            // The daemon is trusted; a line that does not parse is dropped.
            let Frame::Line(line) = frame else { continue };
            if let Ok(message) = serde_json::from_slice::<ToSupervisor>(&line) {
                if let ToSupervisor::Cancel { grace_ms } = message {
                    self.cancel = Some(Duration::from_millis(grace_ms));
                }
                messages.push(message);
            }
        }
        messages
    }
}

/// Answers "ask" through the daemon's approval queue.
struct DaemonAsker {
    events: Arc<Mutex<Events>>,
    log: Arc<Mutex<RunLog>>,
    deadline: Duration,
    not_after: Option<Instant>,
    asked: u64,
}

impl std::fmt::Debug for DaemonAsker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonAsker")
            .field("asked", &self.asked)
            .finish()
    }
}

impl Asker for DaemonAsker {
    fn ask(&mut self, caller: &str, action: &str, target: Option<&str>) -> Answer {
        self.asked += 1;
        let id = self.asked;
        let mut until = Instant::now() + self.deadline;
        if let Some(end) = self.not_after {
            until = until.min(end);
        }
        let left = until.saturating_duration_since(Instant::now());
        let target = target.map(crate::broker::prompt::escape);
        {
            let mut events = lock(&self.events);
            if events.closed || events.cancel.is_some() {
                return Answer::Unanswered;
            }
            events.send(&FromSupervisor::Ask {
                id,
                caller: caller.to_string(),
                action: action.to_string(),
                target: target.clone(),
                deadline_ms: crate::clock::unix_ms() + left.as_millis() as u64,
            });
        }
        let _ = lock(&self.log).record(LogEvent::Ask {
            id,
            action: action.to_string(),
            target,
        });
        let approval = self.wait_for(id, until);
        let _ = lock(&self.log).record(LogEvent::Answer {
            id,
            answer: approval.unwrap_or(Approval::Deny),
        });
        match approval {
            Some(Approval::Once) => Answer::Once,
            Some(Approval::Run) => Answer::Run,
            Some(Approval::Deny) => Answer::Deny,
            None => Answer::Unanswered,
        }
    }

    fn not_after(&mut self, at: Option<Instant>) {
        self.not_after = at;
    }
}

impl DaemonAsker {
    /// The answer to question `id`, or None when none came (closed, cancelled,
    /// past `until`).
    fn wait_for(&mut self, id: u64, until: Instant) -> Option<Approval> {
        let mut events = lock(&self.events);
        loop {
            for message in events.read() {
                if let ToSupervisor::Answer {
                    id: answered,
                    answer,
                } = message
                {
                    if answered == id {
                        return Some(answer);
                    }
                }
            }
            if events.closed || events.cancel.is_some() {
                return None;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut set = PollSet::default();
            set.add(events.sock.as_fd(), PollFlags::POLLIN);
            if set.wait([Some(until)]).is_err() {
                return None;
            }
        }
    }
}

/// Turns the daemon's cancel into the run's end.
struct DaemonDriver {
    events: Arc<Mutex<Events>>,
    input: OwnedFd,
    /// When the supervisor first saw the command executed (the report
    /// pipe's end-of-file with no failure record: the payload's execve
    /// closed it).
    executed_at: Option<Instant>,
}

impl Driver for DaemonDriver {
    fn input(&self) -> Option<BorrowedFd<'_>> {
        Some(self.input.as_fd())
    }

    fn deadline(&self) -> Option<Instant> {
        None
    }

    fn turn(&mut self, turn: Turn<'_>) -> Steer {
        if turn.executing && self.executed_at.is_none() {
            self.executed_at = Some(Instant::now());
        }
        let mut events = lock(&self.events);
        if turn.input_ready {
            events.read();
        }
        // Only once the command runs: init forwards SIGTERM to the
        // command's process group, which does not exist before, and a
        // cancel that arrived during setup would be lost.
        if let (Some(grace), true) = (events.cancel, turn.executing) {
            return Steer::Terminate(grace);
        }
        if events.closed && !turn.exited {
            // Nobody is left to report to: the daemon is gone.
            return Steer::Kill;
        }
        Steer::Continue
    }
}

/// The run's two channels to the daemon, shared by the asker, the output
/// relay and the driver. A warm run has them before its run exists: they
/// start on /dev/null and are attached at commit.
pub(super) struct Session {
    events: Arc<Mutex<Events>>,
    log: Arc<Mutex<RunLog>>,
}

impl Session {
    pub(super) fn new(events: OwnedFd, log: OwnedFd, output_cap: Option<u64>) -> Session {
        Session {
            events: Arc::new(Mutex::new(Events {
                sock: events,
                buffer: Framer::new(MAX_MESSAGE),
                cancel: None,
                closed: false,
            })),
            log: Arc::new(Mutex::new(RunLog {
                file: std::fs::File::from(log),
                seq: 0,
                healthy: true,
                bytes: 0,
                max_bytes: log_bound(output_cap),
                cut: false,
            })),
        }
    }

    /// Point the session at a run's own events socket and log.
    pub(super) fn attach(&self, events: OwnedFd, log: OwnedFd, output_cap: Option<u64>) {
        *lock(&self.events) = Events {
            sock: events,
            buffer: Framer::new(MAX_MESSAGE),
            cancel: None,
            closed: false,
        };
        let mut run_log = lock(&self.log);
        run_log.file = std::fs::File::from(log);
        run_log.max_bytes = log_bound(output_cap);
    }

    /// The driver's copy of the events socket.
    fn input(&self) -> Option<OwnedFd> {
        lock(&self.events).sock.try_clone().ok()
    }

    /// The run failed before a sandbox existed.
    pub(super) fn failed(&self, spec: &RunSpec, error: String, status: i32) -> i32 {
        finish_failed(&self.events, spec, error, status)
    }

    /// The run is over: its last log record.
    pub(super) fn exit(&self, status: i32) {
        let _ = lock(&self.log).record(LogEvent::Exit { status });
    }
}

/// A spawn request's descriptors: events socket, log pipe, stdin if any,
/// audit pipe if any.
pub(super) struct RunFds {
    pub(super) events: OwnedFd,
    pub(super) log: OwnedFd,
    pub(super) stdin: Option<OwnedFd>,
    pub(super) audit: Option<std::fs::File>,
}

/// How many descriptors a spawn request of `spec` carries.
pub(super) fn spawn_fd_count(spec: &RunSpec) -> usize {
    2 + usize::from(spec.stdin) + usize::from(spec.audit.is_some())
}

/// Split a spawn request's descriptors; `None` when their count is not
/// [`spawn_fd_count`].
pub(super) fn split_fds(spec: &RunSpec, mut fds: Vec<OwnedFd>) -> Option<RunFds> {
    if fds.len() != spawn_fd_count(spec) {
        return None;
    }
    let audit = match spec.audit.is_some() {
        true => fds.pop().map(std::fs::File::from),
        false => None,
    };
    let stdin = match spec.stdin {
        true => Some(fds.remove(SPAWN_FDS_STDIN)),
        false => None,
    };
    let log = fds.remove(SPAWN_FDS_LOG);
    let events = fds.remove(SPAWN_FDS_EVENTS);
    Some(RunFds {
        events,
        log,
        stdin,
        audit,
    })
}

/// Run one daemon run to its end. The process exits with the status it
/// reports, so the launcher's wait (root's) confirms the report or shows
/// it false (`daemon::verdict`).
pub fn run(spec: RunSpec, fds: Vec<OwnedFd>) -> i32 {
    let Some(fds) = split_fds(&spec, fds) else {
        return 125;
    };
    let session = Session::new(fds.events, fds.log, spec.policy.limits.output);
    let status = supervise(spec, fds.stdin, fds.audit, Identity::Launcher, &session);
    session.exit(status);
    status & 0xff
}

/// Who the supervisor is when a cold run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Identity {
    /// Still the launcher's (root for a system daemon): it becomes the
    /// run's caller first.
    Launcher,
    /// A warm supervisor that went cold at commit: it became the caller
    /// when it was forked.
    Caller,
}

/// A cold run.
pub(super) fn supervise(
    spec: RunSpec,
    stdin: Option<OwnedFd>,
    audit: Option<std::fs::File>,
    identity: Identity,
    session: &Session,
) -> i32 {
    let events = &session.events;
    if spec.argv.is_empty() {
        return finish_failed(events, &spec, "the run has no command".into(), 125);
    }
    if let (Some(run_as), Identity::Launcher) = (&spec.run_as, identity) {
        if let Err(why) = become_caller(run_as, &spec.policy) {
            return finish_failed(events, &spec, why, 125);
        }
    }
    let mut command = command_for(&spec, &spec.argv, session);
    command.stdin(match stdin {
        Some(fd) => crate::Stdio::Fd(fd),
        None => crate::Stdio::Null,
    });
    for (name, value) in &spec.env {
        command.env(name, value);
    }
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    if let Some(audit) = audit {
        command.audit_file(audit);
    }
    // `ps` tells the supervisors apart from the launcher by this name.
    let _ = nix::sys::prctl::set_name(c"sandbox-run");
    let child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            let status = err.exit_status();
            return finish_failed(events, &spec, err.to_string(), status);
        }
    };
    drive(child, session, None)
}

/// What every run of `spec` is given whatever its command: the policy,
/// project, broker, asker and output to the run's log.
pub(super) fn command_for(spec: &RunSpec, argv: &[String], session: &Session) -> crate::Command {
    let (program, args) = argv
        .split_first()
        .map_or(("", &[][..]), |(p, a)| (p.as_str(), a));
    let mut command = crate::Command::new(program, spec.policy.clone());
    command
        .args(args)
        .project(&spec.project)
        .interactive(false)
        .grant_store(match &spec.grant_store {
            Some(path) => crate::broker::grants::StoreChoice::At(path.clone()),
            None => crate::broker::grants::StoreChoice::Without,
        })
        .asker(Box::new(DaemonAsker {
            events: session.events.clone(),
            log: session.log.clone(),
            deadline: Duration::from_millis(spec.ask_deadline_ms),
            not_after: None,
            asked: 0,
        }))
        .stdout(crate::Stdio::Log(SharedLog(session.log.clone())))
        .stderr(crate::Stdio::Log(SharedLog(session.log.clone())));
    for secret in &spec.secrets {
        command.secret_for_hosts(
            secret.name.clone(),
            secret.value.clone(),
            secret.hosts.clone(),
        );
    }
    if let Some(parent) = &spec.cgroup_parent {
        command.cgroup_parent(parent);
    }
    if let Some(store) = &spec.review_store {
        command.review_store(store);
    }
    command
}

/// From a started sandbox to the run's result on the events socket; the
/// report says whether the run was `warm` and, for a warm run whose exec
/// was seen, `commit_to_exec_us`: from the supervisor's receipt of the run
/// (`committed`) to the payload's execve, the latency a pooled run adds in
/// front of its command.
pub(super) fn drive(child: crate::Child, session: &Session, committed: Option<Instant>) -> i32 {
    let events = &session.events;
    let init_pid = child.id() as i32;
    // Init is this process's child and not yet waited for: its pid is
    // still its own.
    let init_start = super::protocol::process_start_time(init_pid);
    lock(events).send(&FromSupervisor::Started {
        init_pid,
        init_start,
    });
    let _ = lock(&session.log).record(LogEvent::Started { init_pid });
    let Some(input) = session.input() else {
        return 125;
    };
    let mut driver = DaemonDriver {
        events: events.clone(),
        input,
        executed_at: None,
    };
    let mut finished = child.wait_driven(&mut driver);
    let report = match finished.report.as_mut() {
        Some(report) => {
            report.warm = Some(committed.is_some());
            if let (Some(committed), Some(executed)) = (committed, driver.executed_at) {
                let micros = executed.saturating_duration_since(committed).as_micros();
                report.commit_to_exec_us = Some(u64::try_from(micros).unwrap_or(u64::MAX));
            }
            report.to_json()
        }
        None => serde_json::Value::Null,
    };
    let (status, error) = match &finished.result {
        Ok(status) => (status.as_shell_status(), None),
        Err(err) => (err.exit_status(), Some(err.to_string())),
    };
    lock(events).send(&FromSupervisor::Finished {
        status,
        report,
        error,
    });
    status
}

/// The run failed before a sandbox existed: the report says why and claims
/// nothing was enforced, as `sandbox run --report` does.
fn finish_failed(events: &Arc<Mutex<Events>>, spec: &RunSpec, error: String, status: i32) -> i32 {
    let report = crate::spawn::Report::refused(&spec.policy.name, &error).to_json();
    lock(events).send(&FromSupervisor::Finished {
        status,
        report,
        error: Some(error),
    });
    status
}

/// Become the caller whose run this is, after giving it a cgroup of its
/// own to put the run's below: created here as root with the run's limits,
/// so that the caller may create and fill cgroups inside it but can never
/// raise those limits (the files that hold them stay root's). Without a
/// delegated cgroup the run's own cgroup step reports the failure as it
/// would for that user running `sandbox run` (a warning under best-effort
/// cgroups, a refusal when they are required).
pub(super) fn become_caller(
    run_as: &super::protocol::RunAs,
    policy: &crate::profile::policy::Policy,
) -> Result<(), String> {
    use nix::unistd::{Gid, Uid};
    let limits = crate::cgroup::CgroupLimits {
        memory: policy.limits.memory,
        pids: policy.limits.pids,
        cpu: policy.limits.cpu,
    };
    if limits.any() && policy.enforce.cgroups != crate::profile::policy::Enforcement::Off {
        let name = super::protocol::delegated_cgroup_name(&run_as.run);
        if let Ok(cgroup) =
            crate::cgroup::RunCgroup::create(&crate::cgroup::detect(), None, &name, &limits)
        {
            let delegated = cgroup.paths().iter().all(|dir| {
                [
                    "",
                    "cgroup.procs",
                    "tasks",
                    "cgroup.subtree_control",
                    "cgroup.threads",
                ]
                .iter()
                .map(|file| dir.join(file))
                .filter(|path| path.exists())
                .all(|path| {
                    std::os::unix::fs::chown(&path, Some(run_as.uid), Some(run_as.gid)).is_ok()
                })
            }) && cgroup.add_self().is_ok();
            if !delegated {
                cgroup.remove();
            }
        }
    }
    let groups: Vec<Gid> = run_as.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    let (uid, gid) = (Uid::from_raw(run_as.uid), Gid::from_raw(run_as.gid));
    nix::unistd::setgroups(&groups).map_err(|e| format!("setgroups for uid {uid}: {e}"))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setresgid({gid}): {e}"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setresuid({uid}): {e}"))?;
    // setuid cleared the dumpable flag, which would leave /proc/<pid> of
    // the sandbox's processes root's: the id maps of the user namespace
    // this process creates could not be written. Dumpable, it is the
    // caller's to ptrace and to take descriptors from (pidfd_getfd), and
    // it would be even if it stayed undumpable: the flag comes back with
    // any execve and the payload it forks is the caller's anyway. So it
    // holds nothing of root's the caller could not have opened: pipes
    // the daemon reads and bounds for the log and audit, a sealed memfd
    // of the caller's own stdin, its events socket (whose every message
    // the daemon treats as a claim), /dev/null for stdio.
    nix::sys::prctl::set_dumpable(true).map_err(|e| format!("PR_SET_DUMPABLE: {e}"))?;
    Ok(())
}
