//! Exit statuses, signals, and the guarantee that nothing of a run outlives it.

mod support;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::{identities, wait, wait_until_gone, Project, Who};

fn status_of(project: &Project, script: &str) -> (Option<i32>, String) {
    let out = project.run(&["/bin/sh", "-c", script]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn exit_codes_and_signals_propagate() {
    for who in identities("exit_codes_and_signals_propagate") {
        let project = Project::new(who);
        for code in [0, 1, 42, 255] {
            assert_eq!(
                status_of(&project, &format!("exit {code}")).0,
                Some(code),
                "{who:?}"
            );
        }
        assert_eq!(status_of(&project, "kill -TERM $$").0, Some(143), "{who:?}");
        assert_eq!(status_of(&project, "kill -KILL $$").0, Some(137), "{who:?}");
    }
}

#[test]
fn a_command_that_cannot_be_executed_exits_127_with_the_reason() {
    for who in identities("a_command_that_cannot_be_executed_exits_127_with_the_reason") {
        let project = Project::new(who);
        let out = project.run(&["no-such-program"]);
        assert_eq!(out.status.code(), Some(127));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("sandbox: cannot execute 'no-such-program': No such file or directory"),
            "{stderr}"
        );
        project.write("not-executable.sh", "echo hi\n");
        let out = project.run(&["./not-executable.sh"]);
        assert_eq!(out.status.code(), Some(127));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot execute './not-executable.sh': Permission denied"),
            "{stderr}"
        );
    }
}

#[test]
fn a_double_forked_daemon_does_not_outlive_the_run() {
    for who in identities("a_double_forked_daemon_does_not_outlive_the_run") {
        let project = Project::new(who);
        let marker = support::marker("daemon");
        // The command exits once both daemons have started (each writes
        // its file, then becomes the sleep), however slow the machine.
        let script = format!(
            "setsid /bin/sh -c '(: > a; exec sleep {marker}) & (: > b; exec sleep {marker}) &'; \
             while [ ! -e a ] || [ ! -e b ]; do sleep 0.01; done; exit 0"
        );
        let (code, stderr) = status_of(&project, &script);
        assert_eq!(code, Some(0), "{stderr}");
        // The run is over: the kernel already tore the pid namespace down.
        let left = support::host_pids_with(&format!("sleep {marker}"));
        assert!(
            left.is_empty(),
            "{who:?}: daemons survived the run: {left:?}"
        );
    }
}

fn sleeper_visible(marker: &str) -> bool {
    support::host_pids_with(marker).iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    })
}

fn wait_for_sleeper(marker: &str) {
    wait::until_true(
        "the sandboxed sleep to start",
        Duration::from_secs(60),
        || sleeper_visible(marker),
    );
}

fn cgroups_writable() -> bool {
    let info = sandbox::cgroup::detect();
    ["memory", "pids", "cpu"]
        .iter()
        .all(|c| info.controller(c).is_some_and(|c| c.writable))
}

/// The run cgroups a supervisor with this host pid created (`sandbox-<pid>-<n>`).
fn run_cgroup_dirs(supervisor: u32) -> Vec<std::path::PathBuf> {
    let info = sandbox::cgroup::detect();
    let prefix = format!("sandbox-{supervisor}-");
    let mut dirs = Vec::new();
    for controller in &info.controllers {
        if let Ok(entries) = std::fs::read_dir(&controller.own_cgroup) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .map(|e| e.path()),
            );
        }
    }
    dirs
}

#[test]
fn sigkill_of_the_supervisor_leaves_no_process_behind() {
    for who in identities("sigkill_of_the_supervisor_leaves_no_process_behind") {
        let project = Project::new(who);
        let marker = support::marker("sigkill");
        let script = format!("setsid sleep {marker} & sleep {marker}");
        // --cpus: strict sets no CPU quota, and the run is in a cpu cgroup
        // only with one.
        let mut supervisor = project
            .command()
            .args(["run", "--cpus", "1", "--", "/bin/sh", "-c", &script])
            .spawn()
            .unwrap();
        wait_for_sleeper(&marker);
        let cgroup_dirs = run_cgroup_dirs(supervisor.id());
        if who == Who::Root && cgroups_writable() {
            assert_eq!(
                cgroup_dirs.len(),
                3,
                "memory, pids and cpu cgroups: {cgroup_dirs:?}"
            );
        }
        supervisor.kill().unwrap(); // SIGKILL
        supervisor.wait().unwrap();
        let left = wait_until_gone(&format!("sleep {marker}"), 30);
        assert!(
            left.is_empty(),
            "{who:?}: processes survived the supervisor: {left:?}"
        );
        wait::holds_within(Duration::from_secs(30), || {
            !cgroup_dirs.iter().any(|d| d.exists())
        });
        let remaining: Vec<_> = cgroup_dirs.iter().filter(|d| d.exists()).collect();
        assert!(
            remaining.is_empty(),
            "{who:?}: the run's cgroup outlived the supervisor: {remaining:?}"
        );
    }
}

/// What `sandbox run` forks beside the run (the janitor, root's id-mapping
/// namespace holder) is reaped by it before it exits, never left to be
/// adopted: an init that does not reap (a container's first process often
/// does not) would keep a zombie per run. The caller here is a child
/// subreaper, so anything left would be its child.
#[test]
fn a_finished_run_leaves_no_child_to_its_caller() {
    if !support::require_root_sandbox("a_finished_run_leaves_no_child_to_its_caller") {
        return;
    }
    let project = Project::new(Who::Root);
    let adopter = r#"
import ctypes, os, subprocess, sys
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
for _ in range(5):
    assert subprocess.run(sys.argv[1:]).returncode == 0
print(open(f"/proc/self/task/{os.getpid()}/children").read().strip())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", adopter, support::sandbox_bin()])
        .args(["run", "--cpus", "1", "--", "/bin/true"])
        .current_dir(project.path())
        .output()
        .expect("python3");
    support::assert_ok(&out, "five runs under a subreaper");
    let adopted = String::from_utf8_lossy(&out.stdout);
    assert!(
        adopted.trim().is_empty(),
        "processes the runs left to their caller: {adopted}"
    );
}

#[test]
fn sigterm_to_the_supervisor_reaches_the_command() {
    for who in identities("sigterm_to_the_supervisor_reaches_the_command") {
        let project = Project::new(who);
        let script = "trap 'echo got-term > term.txt; exit 7' TERM; echo ready > ready.txt; \
                      while :; do sleep 0.05; done";
        let mut supervisor = project
            .command()
            .args(["run", "--", "/bin/sh", "-c", script])
            .spawn()
            .unwrap();
        wait::until_true("the command to start", Duration::from_secs(60), || {
            project.path().join("ready.txt").exists()
        });
        kill(Pid::from_raw(supervisor.id() as i32), Signal::SIGTERM).unwrap();
        let status = supervisor.wait().unwrap();
        assert_eq!(status.code(), Some(7), "{who:?}");
        assert_eq!(
            std::fs::read_to_string(project.path().join("term.txt")).unwrap(),
            "got-term\n"
        );
    }
}

#[test]
fn stdin_stdout_and_stderr_pass_through() {
    let project = Project::new(Who::Root);
    if !support::sandbox_works(Who::Root) && !support::require("stdio", "a root sandbox", false) {
        return;
    }
    let mut child = project
        .command()
        .args([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "tr a-z A-Z; echo to-stderr >&2",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello sandbox\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "HELLO SANDBOX\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("to-stderr"));
}

#[test]
fn a_broken_profile_stops_the_run_before_anything_starts() {
    let project = Project::new(Who::Root);
    let out = project.run_with_profile(
        "version = 1\nextends = \"strict\"\n[network]\nmode = \"lan\"\n",
        &[],
        &["/bin/sh", "-c", "touch ran"],
    );
    // A usage error (the profile named on the command line), not a failure
    // of the sandbox.
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "profile.toml:4:8: unknown variant `lan`, expected one of `none`, `loopback`, `allowlist`, `host`"
        ),
        "{stderr}"
    );
    assert!(!project.path().join("ran").exists());
}

#[test]
fn a_timeout_kills_the_command_and_its_grandchildren() {
    for who in identities("a_timeout_kills_the_command_and_its_grandchildren") {
        let project = Project::new(who);
        let marker = support::marker("timeout");
        let script = format!("setsid sleep {marker} & sleep {marker} & sleep {marker}");
        let started = Instant::now();
        let out = project.run_with(
            &["--timeout", "1s", "--report", "report.json"],
            &["/bin/sh", "-c", &script],
        );
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(143), "SIGTERM ended it ({who:?})");
        assert!(
            took >= Duration::from_secs(1),
            "ended before the timeout: {took:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("sandbox: killed: timeout 1s exceeded"),
            "{stderr}"
        );
        let left = support::host_pids_with(&format!("sleep {marker}"));
        assert!(left.is_empty(), "{who:?}: survivors {left:?}");
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(project.path().join("report.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(report["limits_hit"], serde_json::json!(["timeout"]));
        assert_eq!(report["exit"]["signal"], 15);
    }
}

#[test]
fn a_command_ignoring_sigterm_is_killed_after_the_grace_period() {
    let project = Project::new(Who::Root);
    if !support::sandbox_works(Who::Root) && !support::require("grace", "a root sandbox", false) {
        return;
    }
    let out = project.run_with(
        &["--timeout", "1s"],
        &["/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"],
    );
    assert_eq!(out.status.code(), Some(137));
    assert!(String::from_utf8_lossy(&out.stderr).contains("killed: timeout 1s exceeded"));
}
