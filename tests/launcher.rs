//! The daemon's launcher (`sandbox __launch`), driven over its socket the
//! way `sandbox daemon` drives it: a spawn request with the run's events
//! socket and log file, the supervisor's events, the log's records, a
//! cancel, an approval, and the launcher's own end when the daemon goes.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use sandbox::launch::protocol::{
    Approval, FromLauncher, FromSupervisor, LogEvent, LogRecord, RunSpec, ToLauncher, ToSupervisor,
};
use sandbox::launch::wire;

struct Launcher {
    process: Child,
    control: OwnedFd,
}

impl Launcher {
    fn start() -> Launcher {
        // Close-on-exec from birth: the harness's other threads start
        // processes too, and one holding our end would keep the launcher
        // from ever seeing it close.
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        nix::fcntl::fcntl(
            &theirs,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )
        .unwrap();
        let process = Command::new(support::sandbox_bin())
            .args(["__launch", "--fd", &theirs.as_raw_fd().to_string()])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        drop(theirs);
        Launcher {
            process,
            control: ours,
        }
    }

    fn receive(&self) -> FromLauncher {
        wire::receive::<FromLauncher>(self.control.as_fd())
            .unwrap()
            .0
    }
}

struct Run {
    events: BufReader<UnixStream>,
    log: tempfile::NamedTempFile,
    supervisor: i32,
}

impl Run {
    fn next_event(&mut self) -> FromSupervisor {
        let mut line = String::new();
        self.events.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the events socket closed early");
        serde_json::from_str(&line).unwrap()
    }

    fn send(&mut self, message: &ToSupervisor) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.events.get_mut().write_all(&line).unwrap();
    }

    fn records(&self) -> Vec<LogRecord> {
        std::fs::read_to_string(self.log.path())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn stdout(&self) -> Vec<u8> {
        self.records()
            .iter()
            .filter_map(|r| match &r.event {
                LogEvent::Stdout(chunk) => chunk.bytes(),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

fn spec(project: &std::path::Path, argv: &[&str]) -> RunSpec {
    RunSpec {
        ask_deadline_ms: 30_000,
        ..RunSpec::new(
            sandbox::profile::load("strict").unwrap(),
            argv.iter().map(|a| a.to_string()).collect(),
            project.to_path_buf(),
        )
    }
}

fn spawn(launcher: &Launcher, id: &str, spec: RunSpec) -> Run {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let log_fd = std::fs::OpenOptions::new()
        .append(true)
        .open(log.path())
        .unwrap();
    wire::send(
        launcher.control.as_fd(),
        &ToLauncher::Spawn {
            run: id.into(),
            spec: Box::new(spec),
            warm: None,
        },
        &[theirs.as_fd(), log_fd.as_fd()],
    )
    .unwrap();
    let supervisor = match launcher.receive() {
        FromLauncher::Started { run, pid, start } => {
            assert_eq!(run, id);
            assert!(pid > 0);
            assert!(start.is_some(), "the supervisor's start time");
            pid
        }
        other => panic!("expected started, got {other:?}"),
    };
    Run {
        events: BufReader::new(ours),
        log,
        supervisor,
    }
}

fn finished(run: &mut Run) -> (i32, serde_json::Value) {
    loop {
        match run.next_event() {
            FromSupervisor::Finished { status, report, .. } => return (status, report),
            FromSupervisor::Started {
                init_pid,
                init_start,
            } => assert!(init_pid > 0 && init_start.is_some()),
            // Left unanswered on purpose by the caller.
            FromSupervisor::Ask { .. } => {}
        }
    }
}

/// The supervisor exits with the status it reported, so the daemon's
/// record rests on the launcher's wait (root's), not on the report.
fn expect_exited(launcher: &Launcher, id: &str, status: i32) {
    match launcher.receive() {
        FromLauncher::Exited { run, code, signal } => {
            assert_eq!(run, id);
            assert_eq!(
                (code, signal),
                (Some(status), None),
                "the supervisor's own status"
            );
        }
        other => panic!("expected exited, got {other:?}"),
    }
}

#[test]
fn a_run_through_the_launcher_reports_like_a_local_run() {
    if !support::require_root_sandbox("launcher") {
        return;
    }
    let launcher = Launcher::start();
    let project = tempfile::tempdir_in("/tmp").unwrap();
    let mut run = spawn(
        &launcher,
        "r1",
        spec(
            project.path(),
            &["/bin/sh", "-c", "printf 'hi\\377'; echo err >&2; exit 3"],
        ),
    );
    let (status, report) = finished(&mut run);
    assert_eq!(status, 3);
    assert_eq!(report["exit"]["code"], 3, "{report}");
    assert_eq!(
        report["enforced"]["seccomp"]["status"], "installed",
        "{report}"
    );
    expect_exited(&launcher, "r1", 3);
    assert_eq!(run.stdout(), b"hi\xff", "exact bytes, not UTF-8 only");
    let records = run.records();
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=records.len() as u64).collect::<Vec<_>>());
    assert!(matches!(records[0].event, LogEvent::Started { .. }));
    assert!(records.iter().any(
        |r| matches!(&r.event, LogEvent::Stderr(chunk) if chunk.bytes().unwrap() == b"err\n")
    ));
    assert_eq!(
        records.last().unwrap().event,
        LogEvent::Exit { status: 3 },
        "the log ends with the status"
    );
}

#[test]
fn cancel_ends_the_run_with_sigterm() {
    if !support::require_root_sandbox("launcher") {
        return;
    }
    let launcher = Launcher::start();
    let project = tempfile::tempdir_in("/tmp").unwrap();
    let mut run = spawn(
        &launcher,
        "r2",
        spec(project.path(), &["/bin/sleep", "3600"]),
    );
    assert!(matches!(run.next_event(), FromSupervisor::Started { .. }));
    run.send(&ToSupervisor::Cancel { grace_ms: 5_000 });
    let (status, _) = finished(&mut run);
    assert_eq!(status, 128 + 15, "sleep dies of the SIGTERM");
    expect_exited(&launcher, "r2", 128 + 15);

    // A command that ignores SIGTERM is killed after the grace.
    let mut run = spawn(
        &launcher,
        "r3",
        spec(
            project.path(),
            &[
                "/bin/sh",
                "-c",
                "trap '' TERM; echo up; while :; do sleep 1; done",
            ],
        ),
    );
    assert!(matches!(run.next_event(), FromSupervisor::Started { .. }));
    support::wait::until_true("the command to print", Duration::from_secs(60), || {
        !run.stdout().is_empty()
    });
    run.send(&ToSupervisor::Cancel { grace_ms: 200 });
    let (status, _) = finished(&mut run);
    assert_eq!(status, 128 + 9, "killed after the grace");
}

#[test]
fn an_ask_waits_for_the_daemons_answer() {
    if !support::require_root_sandbox("launcher") {
        return;
    }
    let launcher = Launcher::start();
    let project = tempfile::tempdir_in("/tmp").unwrap();
    let mut run = spawn(
        &launcher,
        "r4",
        spec(
            project.path(),
            &["/usr/bin/python3", "-c", support::ASK_FS_WRITE],
        ),
    );
    assert!(matches!(run.next_event(), FromSupervisor::Started { .. }));
    match run.next_event() {
        FromSupervisor::Ask {
            id, action, target, ..
        } => {
            assert_eq!((id, action.as_str()), (1, "fs.write"));
            assert!(target.unwrap_or_default().contains("granted.txt"));
        }
        other => panic!("expected ask, got {other:?}"),
    }
    run.send(&ToSupervisor::Answer {
        id: 1,
        answer: Approval::Once,
    });
    let (status, _) = finished(&mut run);
    assert_eq!(status, 0);
    assert_eq!(
        std::fs::read_to_string(project.path().join("granted.txt")).unwrap(),
        "yes",
        "the approved write happened"
    );
    let records = run.records();
    assert!(records.iter().any(|r| r.event
        == LogEvent::Answer {
            id: 1,
            answer: Approval::Once
        }));

    // Unanswered: denied at the deadline, nothing written.
    let mut denied = spec(
        project.path(),
        &["/usr/bin/python3", "-c", support::ASK_FS_WRITE],
    );
    denied.ask_deadline_ms = 300;
    expect_exited(&launcher, "r4", 0);
    std::fs::remove_file(project.path().join("granted.txt")).unwrap();
    let mut run = spawn(&launcher, "r5", denied);
    let (status, _) = finished(&mut run);
    assert_eq!(status, 0, "the payload prints the refusal and exits");
    assert!(String::from_utf8_lossy(&run.stdout()).contains("\"error\""));
    assert!(!project.path().join("granted.txt").exists());
}

#[test]
fn the_launcher_kills_its_runs_when_the_daemon_goes() {
    if !support::require_root_sandbox("launcher") {
        return;
    }
    let mut launcher = Launcher::start();
    let project = tempfile::tempdir_in("/tmp").unwrap();
    let marker = support::marker("launcher-orphan");
    let mut run = spawn(
        &launcher,
        "r6",
        spec(project.path(), &["/bin/sleep", "600", &marker]),
    );
    assert!(matches!(run.next_event(), FromSupervisor::Started { .. }));
    support::wait::until_true("the sleep to start", Duration::from_secs(60), || {
        !support::host_pids_with(&marker).is_empty()
    });
    drop(std::mem::replace(
        &mut launcher.control,
        std::fs::File::open("/dev/null").unwrap().into(),
    ));
    let status = launcher.process.wait().unwrap();
    assert!(status.success(), "the launcher ends when its socket closes");
    assert_eq!(
        support::wait_until_gone(&marker, 10),
        Vec::<u32>::new(),
        "the run's processes are gone"
    );
}

#[test]
fn the_run_log_stays_within_twice_the_output_cap() {
    if !support::require_root_sandbox("launcher") {
        return;
    }
    let launcher = Launcher::start();
    let project = tempfile::tempdir_in("/tmp").unwrap();
    // Control bytes take six bytes each in a JSON record: 64 KiB of them
    // would be 384 KiB of log.
    let mut spec = spec(
        project.path(),
        &[
            "/usr/bin/python3",
            "-c",
            "import sys\nfor _ in range(300): sys.stdout.write('\\x01' * 1000); sys.stdout.flush()",
        ],
    );
    let cap = 64 << 10;
    spec.policy.limits.output = Some(cap);
    let mut run = spawn(&launcher, "r7", spec);
    let (status, _) = finished(&mut run);
    assert_eq!(status, 0);
    let size = std::fs::metadata(run.log.path()).unwrap().len();
    assert!(
        size <= 2 * cap + (64 << 10) + (4 << 10),
        "the log holds {size} bytes for a {cap}-byte cap"
    );
    assert!(run
        .records()
        .iter()
        .any(|r| matches!(r.event, LogEvent::OutputCapped { .. })));
}

/// A supervisor killed after it made its run's cgroup and before it forked
/// the janitor that removes it (the daemon stopping, a cancel) left the
/// empty directories behind for good: CI found one. The launcher reaps its
/// supervisors, so it removes what a killed one named `sandbox-PID-N` in its
/// own cgroups. The window is microseconds wide, so the test makes the
/// leftover itself beside a real run's cgroup and kills the supervisor.
#[test]
fn a_killed_supervisors_run_cgroups_are_removed_by_the_launcher() {
    let test = "a_killed_supervisors_run_cgroups_are_removed_by_the_launcher";
    if !support::require_root_sandbox(test) {
        return;
    }
    let info = sandbox::cgroup::detect();
    let mut own: Vec<std::path::PathBuf> = Vec::new();
    for controller in info.controllers.iter().filter(|c| c.writable) {
        if !own.contains(&controller.own_cgroup) {
            own.push(controller.own_cgroup.clone());
        }
    }
    if !support::require(test, "a writable cgroup of this process", !own.is_empty()) {
        return;
    }
    let launcher = Launcher::start();
    let project = tempfile::tempdir_in("/tmp").unwrap();
    let marker = support::marker("launcher-killed");
    let mut run = spawn(
        &launcher,
        "r8",
        spec(project.path(), &["/bin/sleep", "600", &marker]),
    );
    assert!(matches!(run.next_event(), FromSupervisor::Started { .. }));
    let pid = run.supervisor;
    let left: Vec<_> = own
        .iter()
        .map(|cgroup| cgroup.join(format!("sandbox-{pid}-4000")))
        .collect();
    for dir in &left {
        std::fs::create_dir(dir).unwrap();
    }
    let unrelated = own[0].join(format!("sandbox-{pid}x-0"));
    std::fs::create_dir(&unrelated).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    match launcher.receive() {
        FromLauncher::Exited { run, signal, .. } => {
            assert_eq!(run, "r8");
            assert_eq!(signal, Some(9));
        }
        other => panic!("expected exited, got {other:?}"),
    }
    let removed =
        support::wait::holds_within(Duration::from_secs(60), || left.iter().all(|d| !d.exists()));
    let unrelated_kept = unrelated.exists();
    // Not left in the test's cgroup when the check fails.
    for dir in left.iter().chain([&unrelated]) {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(removed, "the killed supervisor's cgroups are removed");
    assert!(unrelated_kept, "another name is not the supervisor's");
    assert_eq!(
        support::wait_until_gone(&marker, 10),
        Vec::<u32>::new(),
        "the run's processes are gone"
    );
}
