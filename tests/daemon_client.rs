//! `sandbox run --daemon`, `ps`, `logs`, `cancel` and `approvals` against a
//! real `sandbox daemon`, compared with local runs; peer authentication
//! with a second user; the API's JSON through curl.

mod support;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::daemon::Daemon;
use support::{Project, Who};

/// Root's rule: the built-in profiles, projects under /tmp.
fn root_rule() -> String {
    "[[allow]]\nuids = [0]\nprofiles = [\"strict\", \"standard\"]\nprojects = [\"/tmp\"]\n\
     grants = [\"fs.write\"]\nnetworks = [\"none\", \"loopback\"]\n"
        .to_string()
}

fn daemon_with(extra_daemon: &str, extra_rules: &str) -> Daemon {
    Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\n{extra_daemon}\n{}{extra_rules}",
        root_rule()
    ))
}

fn ready(test: &str) -> bool {
    support::require_root_daemon(test)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// stderr without the supervisor's own lines (a local run may warn about
/// its cgroup scope, which a daemon run does not).
fn command_stderr(out: &Output) -> String {
    text(&out.stderr)
        .lines()
        .filter(|line| !line.starts_with("sandbox:") && !line.starts_with('{'))
        .map(|line| format!("{line}\n"))
        .collect()
}

fn run_both(
    daemon: &Daemon,
    project: &Project,
    extra: &[&str],
    argv: &[&str],
    stdin: &[u8],
) -> (Output, Output) {
    let run = |remote: bool| {
        use std::io::Write;
        let mut cmd = if remote {
            let mut cmd = daemon.cli();
            cmd.current_dir(project.path());
            cmd
        } else {
            let mut cmd = project.command();
            cmd.env_remove("SANDBOX_DAEMON");
            cmd
        };
        let mut child = cmd
            .arg("run")
            .args(extra)
            .arg("--")
            .args(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sandbox starts");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin)
            .expect("stdin written");
        child.wait_with_output().expect("sandbox ends")
    };
    (run(false), run(true))
}

#[test]
fn a_daemon_run_gives_the_bytes_status_and_report_of_a_local_run() {
    if !ready("a_daemon_run_gives_the_bytes_status_and_report_of_a_local_run") {
        return;
    }
    let daemon = daemon_with("", "");
    let project = Project::new(Who::Root);
    let script = r#"cat; printf 'bin:\377\376\000end\n'; echo "to stderr $X" >&2; exit 7"#;
    let (local, remote) = run_both(
        &daemon,
        &project,
        &["--json", "-e", "X=42"],
        &["/bin/sh", "-c", script],
        b"from stdin\n",
    );
    assert_eq!(
        local.status.code(),
        Some(7),
        "local: {}",
        text(&local.stderr)
    );
    assert_eq!(
        remote.status.code(),
        Some(7),
        "daemon: {}\n{}",
        text(&remote.stderr),
        daemon.log()
    );
    assert_eq!(remote.stdout, b"from stdin\nbin:\xff\xfe\x00end\n");
    assert_eq!(remote.stdout, local.stdout, "the same stdout bytes");
    assert_eq!(command_stderr(&remote), "to stderr 42\n");
    assert_eq!(command_stderr(&remote), command_stderr(&local));
    let local_report = support::json_report(&text(&local.stderr), "local");
    let remote_report = support::json_report(&text(&remote.stderr), "daemon");
    for pointer in [
        "/version",
        "/profile",
        "/command",
        "/exit",
        "/enforced/namespaces",
        "/enforced/network",
        "/enforced/no_new_privs",
        "/enforced/capabilities",
        "/enforced/seccomp/mode",
        "/enforced/seccomp/status",
        "/enforced/landlock/status",
        "/measured",
    ] {
        assert_eq!(
            remote_report.pointer(pointer),
            local_report.pointer(pointer),
            "report {pointer}"
        );
    }
    assert_eq!(remote_report["exit"]["code"], 7);

    // --report FILE and --report-fd: the same report as --json printed.
    let report_file = project.path().join("report.json");
    let out = daemon
        .cli()
        .current_dir(project.path())
        .args(["run", "--report"])
        .arg(&report_file)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let written: Value = serde_json::from_slice(&std::fs::read(&report_file).unwrap()).unwrap();
    assert_eq!(written["exit"]["code"], 0);
    assert_eq!(written["command"], serde_json::json!(["/bin/true"]));

    // `sandbox` hands a daemon run to sandbox-daemon by exec: the
    // descriptor it inherited must still be open there, and get the report.
    let fd_file = project.path().join("report-fd.json");
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg("exec \"$0\" run --report-fd 3 -- /bin/sh -c 'exit 5' 3>\"$1\"")
        .arg(support::sandbox_bin())
        .arg(&fd_file)
        .env("SANDBOX_DAEMON", &daemon.socket)
        .current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let written = std::fs::read(&fd_file).unwrap();
    assert!(written.ends_with(b"\n"), "one line: {}", text(&written));
    let written: Value = serde_json::from_slice(&written).unwrap();
    assert_eq!(written["exit"]["code"], 5);
}

#[test]
fn a_signal_killed_command_exits_like_a_local_one() {
    if !ready("a_signal_killed_command_exits_like_a_local_one") {
        return;
    }
    let daemon = daemon_with("", "");
    let project = Project::new(Who::Root);
    let (local, remote) = run_both(
        &daemon,
        &project,
        &["--json"],
        &["/bin/sh", "-c", "kill -KILL $$"],
        b"",
    );
    assert_eq!(local.status.code(), Some(137));
    assert_eq!(remote.status.code(), Some(137), "{}", text(&remote.stderr));
    let report = support::json_report(&text(&remote.stderr), "daemon");
    assert_eq!(report["exit"]["signal"], 9);
}

/// `SANDBOX_DAEMON` names the daemon once; a bare `--daemon` then means
/// "send it to that daemon", not "to the default socket" (where nothing
/// listens here, so the old behaviour failed with "no daemon answers").
#[test]
fn a_bare_daemon_flag_uses_the_socket_the_variable_names() {
    if !ready("a_bare_daemon_flag_uses_the_socket_the_variable_names") {
        return;
    }
    let daemon = daemon_with("", "");
    let project = Project::new(Who::Root);
    let marker = support::marker("bare-flag");
    let out = daemon
        .cli()
        .current_dir(project.path())
        .env_remove("XDG_RUNTIME_DIR")
        .args(["run", "--daemon", "--", "/bin/sh", "-c"])
        .arg(format!("echo {marker}; exit 3"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout {}\nstderr {}\n{}",
        text(&out.stdout),
        text(&out.stderr),
        daemon.log()
    );
    assert_eq!(text(&out.stdout), format!("{marker}\n"));
    let run = daemon.find_run(&marker);
    assert_eq!(
        run["status"], 3,
        "the daemon of SANDBOX_DAEMON ran it: {run}"
    );
}

#[test]
fn logs_and_ps_show_a_finished_run() {
    if !ready("logs_and_ps_show_a_finished_run") {
        return;
    }
    let daemon = daemon_with("", "");
    let project = Project::new(Who::Root);
    let marker = support::marker("logs");
    let out = daemon
        .cli()
        .current_dir(project.path())
        .args(["run", "--", "/bin/sh", "-c"])
        .arg(format!("printf 'out\\377 {marker}\\n'; echo err >&2"))
        .output()
        .unwrap();
    support::assert_ok(&out, "daemon run");
    let run = daemon.find_run(&marker);
    let id = run["id"].as_str().expect("id");
    assert_eq!(run["state"], "exited");
    assert_eq!(run["status"], 0);

    let logs = daemon.cli().args(["logs", id]).output().unwrap();
    support::assert_ok(&logs, "logs");
    assert_eq!(logs.stdout, out.stdout, "logs prints the run's own bytes");
    assert_eq!(logs.stderr, b"err\n");
    let raw = daemon.cli().args(["logs", "--json", id]).output().unwrap();
    let records: Vec<Value> = text(&raw.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("NDJSON"))
        .collect();
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "numbered from 1 without gaps"
    );
    assert_eq!(records[records.len() - 2]["type"], "exit");
    assert_eq!(records.last().unwrap()["type"], "end");
    assert_eq!(records.last().unwrap()["status"], 0);
    // Resuming after a sequence number gives only what follows it.
    let since = daemon
        .cli()
        .args([
            "logs",
            "--json",
            "--since",
            &(seqs.len() as u64 - 1).to_string(),
            id,
        ])
        .output()
        .unwrap();
    assert_eq!(text(&since.stdout).lines().count(), 1);

    let ps = daemon.cli().args(["ps", "--all-states"]).output().unwrap();
    support::assert_ok(&ps, "ps");
    let table = text(&ps.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with(id))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains("exited") && line.contains(&marker), "{line}");
    let active = daemon.cli().args(["ps"]).output().unwrap();
    assert!(
        !text(&active.stdout).contains(id),
        "ps alone lists running runs only"
    );
}

#[test]
fn cancel_and_ctrl_c_end_a_sleeping_run() {
    if !ready("cancel_and_ctrl_c_end_a_sleeping_run") {
        return;
    }
    let daemon = daemon_with("cancel_grace = \"1s\"\n", "");
    let project = Project::new(Who::Root);
    for how in ["cancel", "ctrl-c"] {
        let marker = support::marker("cancel");
        let client = daemon
            .cli()
            .current_dir(project.path())
            .args(["run", "--", "/bin/sh", "-c"])
            .arg(format!("sleep 3600; : {marker}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let run = daemon.find_run(&marker);
        let id = run["id"].as_str().unwrap().to_string();
        wait_for_state(&daemon, &id, "running");
        assert!(
            !support::host_pids_with(&marker).is_empty(),
            "the payload runs"
        );
        if how == "cancel" {
            let out = daemon.cli().args(["cancel", &id]).output().unwrap();
            support::assert_ok(&out, "sandbox cancel");
        } else {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(client.id() as i32),
                nix::sys::signal::Signal::SIGINT,
            )
            .unwrap();
        }
        let out = client.wait_with_output().unwrap();
        let run = daemon.wait_finished(&id);
        assert_eq!(run["state"], "cancelled", "{how}: {run}");
        assert_ne!(out.status.code(), Some(0), "{how}: {}", text(&out.stderr));
        assert!(
            support::wait_until_gone(&marker, 10).is_empty(),
            "{how}: the payload is gone"
        );
    }
    let out = daemon
        .cli()
        .args(["cancel", "no-such-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown id is a refusal");
    assert!(
        text(&out.stderr).starts_with("sandbox: "),
        "{}",
        text(&out.stderr)
    );
}

fn wait_for_state(daemon: &Daemon, id: &str, state: &str) {
    let mut run = Value::Null;
    let reached = support::wait::holds_within(Duration::from_secs(60), || {
        run = daemon.request("GET", &format!("/v1/runs/{id}"), None).1;
        run["state"] == state
    });
    assert!(reached, "run {id} never {state}: {run}");
}

#[test]
fn a_second_user_gets_only_its_rule_and_never_roots_runs() {
    if !ready("a_second_user_gets_only_its_rule_and_never_roots_runs")
        || !support::require_user_sandbox("a_second_user_gets_only_its_rule_and_never_roots_runs")
    {
        return;
    }
    let allowed = Project::new(Who::User);
    let outside = Project::new(Who::User);
    let rule = format!(
        "[[allow]]\nuids = [{}]\nprofiles = [\"strict\"]\nprojects = [\"{}\"]\n",
        support::TEST_UID,
        allowed.path().display()
    );
    let daemon = daemon_with("", &rule);

    // Inside its rule it runs.
    let ok = daemon
        .cli_as_user(allowed.path())
        .args(["run", "--", "/bin/echo", "mine"])
        .output()
        .unwrap();
    assert_eq!(
        text(&ok.stdout),
        "mine\n",
        "{}\n{}",
        text(&ok.stderr),
        daemon.log()
    );

    // A profile its rule does not list.
    let out = daemon
        .cli_as_user(allowed.path())
        .args(["run", "--profile", "standard", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("standard"),
        "{}",
        text(&out.stderr)
    );

    // A project outside its prefix, and a sibling that only shares the
    // prefix's characters (whole components only).
    let sibling = std::path::PathBuf::from(format!("{}-x", allowed.path().display()));
    std::fs::create_dir_all(&sibling).unwrap();
    std::os::unix::fs::chown(&sibling, Some(support::TEST_UID), Some(support::TEST_GID)).unwrap();
    for project in [outside.path(), sibling.as_path()] {
        let out = daemon
            .cli_as_user(project)
            .args(["run", "--", "/bin/true"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}: {}",
            project.display(),
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("project"),
            "{}",
            text(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir(&sibling);

    // Root's run: invisible and untouchable for the second user.
    let marker = support::marker("root");
    let root_project = Project::new(Who::Root);
    let mut root_run = daemon
        .cli()
        .current_dir(root_project.path())
        .args(["run", "--", "/bin/sh", "-c"])
        .arg(format!("sleep 3600; : {marker}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = daemon.find_run(&marker)["id"].as_str().unwrap().to_string();
    for args in [vec!["cancel", &id], vec!["logs", &id]] {
        let out = daemon
            .cli_as_user(allowed.path())
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let ps = daemon
        .cli_as_user(allowed.path())
        .args(["ps", "--all-states", "--json"])
        .output()
        .unwrap();
    support::assert_ok(&ps, "ps as the second user");
    let listed: Value = serde_json::from_slice(&ps.stdout).unwrap();
    for run in listed["runs"].as_array().unwrap() {
        assert_eq!(run["uid"], support::TEST_UID, "only its own runs: {run}");
    }
    let (_, run) = daemon.request("GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(
        run["state"], "running",
        "still running after the second user's cancel"
    );
    support::assert_ok(
        &daemon.cli().args(["cancel", &id]).output().unwrap(),
        "root cancels",
    );
    let _ = root_run.wait();
}

#[test]
fn curl_gets_the_info_and_json_errors() {
    if !ready("curl_gets_the_info_and_json_errors")
        || !support::require(
            "curl_gets_the_info_and_json_errors",
            "curl",
            support::daemon::have_curl(),
        )
    {
        return;
    }
    let daemon = daemon_with("", "");
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--unix-socket"])
            .arg(&daemon.socket)
            .args(["-w", "\n%{http_code}"])
            .args(args)
            .output()
            .unwrap();
        let body = text(&out.stdout);
        let (body, code) = body.rsplit_once('\n').unwrap();
        (
            code.parse::<u16>().unwrap(),
            serde_json::from_str::<Value>(body).unwrap_or(Value::Null),
        )
    };
    let (status, info) = curl(&["http://sandbox/v1/info"]);
    assert_eq!(status, 200);
    assert_eq!(info["api"], 1);
    assert_eq!(info["caller"]["uid"], 0);
    assert!(info["version"].is_string());
    assert!(info["load"]["max_concurrent"].as_u64().unwrap() >= 1);

    let (status, error) = curl(&["http://sandbox/v1/runs/no-such-run"]);
    assert_eq!(status, 404);
    assert_eq!(error["error"]["code"], "no_such_run");
    assert!(error["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    assert!(error["error"]["fix"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));

    let (status, error) = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"command": ["/bin/true"], "project": "/tmp", "colour": "red"}"#,
        "http://sandbox/v1/runs",
    ]);
    assert_eq!(status, 400);
    assert_eq!(error["error"]["code"], "bad_request");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{error}"
    );

    let project = Project::new(Who::Root);
    let body = serde_json::json!({
        "command": ["/bin/echo", "waited"], "project": project.path(), "wait": true
    });
    let (status, run) = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-d",
        &body.to_string(),
        "http://sandbox/v1/runs",
    ]);
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["state"], "exited");
    assert_eq!(run["status"], 0);
    let (stdout, _, _) = daemon.output(run["id"].as_str().unwrap());
    assert_eq!(stdout, b"waited\n");
}

/// Inside the sandbox: ask the broker to write a file (strict asks), then
/// show what is there.
const ASK_SCRIPT: &str = r#"sandbox ipc fs.write '{"path": "asked.txt", "content": "approved"}' >/dev/null 2>&1; cat asked.txt 2>/dev/null || echo absent"#;

#[test]
fn an_approval_lets_an_ask_through_and_silence_denies_it() {
    if !ready("an_approval_lets_an_ask_through_and_silence_denies_it") {
        return;
    }
    // Answered: the run waits for the approval.
    let daemon = daemon_with("ask_deadline = \"5m\"\n", "");
    let project = Project::new(Who::Root);
    let client = daemon
        .cli()
        .current_dir(project.path())
        .args(["run", "--", "/bin/sh", "-c", ASK_SCRIPT])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let approval = support::wait::within(Duration::from_secs(60), || {
        let out = daemon.cli().args(["approvals", "--json"]).output().unwrap();
        support::assert_ok(&out, "approvals");
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        list["approvals"]
            .as_array()
            .and_then(|a| a.first())
            .cloned()
    })
    .unwrap_or_else(|| panic!("no approval appeared:\n{}", daemon.log()));
    assert_eq!(approval["action"], "fs.write");
    assert!(
        approval["target"]
            .as_str()
            .unwrap_or("")
            .contains("asked.txt"),
        "{approval}"
    );
    let table = daemon.cli().args(["approvals"]).output().unwrap();
    assert!(text(&table.stdout).contains(approval["id"].as_str().unwrap()));
    let answer = daemon
        .cli()
        .args([
            "approvals",
            "answer",
            approval["id"].as_str().unwrap(),
            "once",
        ])
        .output()
        .unwrap();
    support::assert_ok(&answer, "approvals answer");
    let out = client.wait_with_output().unwrap();
    assert_eq!(text(&out.stdout), "approved", "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("sandbox approvals answer"),
        "the client says how to answer: {}",
        text(&out.stderr)
    );
    drop(daemon);

    // Unanswered: denied at the deadline, and the log says so.
    let daemon = daemon_with("ask_deadline = \"2s\"\n", "");
    let project = Project::new(Who::Root);
    let marker = support::marker("deny");
    let out = daemon
        .cli()
        .current_dir(project.path())
        .args(["run", "-q", "--", "/bin/sh", "-c"])
        .arg(format!("{ASK_SCRIPT}; : {marker}"))
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "absent\n", "{}", text(&out.stderr));
    assert!(!project.path().join("asked.txt").exists());
    let id = daemon.find_run(&marker)["id"].as_str().unwrap().to_string();
    let (_, _, records) = daemon.output(&id);
    assert!(
        records
            .iter()
            .any(|r| r["type"] == "answer" && r["answer"] == "deny"),
        "{records:?}"
    );
}

/// Review finding: a caller's run is supervised by a process of the
/// caller's uid that the launcher made dumpable again, holding the run's
/// log (root's file, 0600, in the daemon's 0700 spool) open for appending.
/// The caller takes that descriptor with pidfd_getfd and writes records of
/// its own: an `end` saying the run exited 0 (what `sandbox logs`, a
/// follower and a `see_all` reviewer read), and any number of bytes past
/// the output cap into the daemon's disk. A run's log must hold only what
/// the supervisor and the daemon wrote: one `end`, the daemon's. The
/// attack copies every descriptor the supervisor holds and writes the
/// forged `end` into each.
#[test]
fn a_caller_cannot_write_its_runs_log_past_the_supervisor() {
    if !ready("a_caller_cannot_write_its_runs_log_past_the_supervisor")
        || !support::sandbox_works(Who::User)
    {
        return;
    }
    let project = Project::new(Who::User);
    let rule = format!(
        "[[allow]]\nuids = [{}]\nprofiles = [\"strict\"]\nprojects = [\"{}\"]\n",
        support::TEST_UID,
        project.path().display()
    );
    let daemon = daemon_with("", &rule);
    let mut client = daemon
        .cli_as_user(project.path())
        .args(["run", "--", "/bin/sh", "-c", "exec sleep 60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (id, log, pid) = support::daemon::caller_run_supervisor(&daemon);
    let forged = support::daemon::steal_and_write(pid, "end");
    assert_eq!(
        forged["pidfd"], true,
        "the caller may pidfd_open its own supervisor: {forged}"
    );
    let _ = daemon
        .cli_as_user(project.path())
        .args(["cancel", &id])
        .output();
    let _ = client.wait();
    // The daemon's own `end` is the last record once the run is over.
    let mut text = String::new();
    let records: Vec<Value> = support::wait::within(Duration::from_secs(120), || {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        let records: Vec<Value> = text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        records
            .last()
            .is_some_and(|r| r["type"] == "end" && r["state"] != "exited")
            .then_some(records)
    })
    .unwrap_or_else(|| panic!("the run never ended with the daemon's end: {text}"));
    let ends: Vec<&Value> = records.iter().filter(|r| r["type"] == "end").collect();
    assert_eq!(
        ends.len(),
        1,
        "the caller wrote into its run's log ({forged}): {ends:?}"
    );
}

/// The client commands run from sandbox-daemon (src/faces.rs): `sandbox`
/// without it beside it says so for them, and still runs locally (here: a
/// usage error, which a local run finds without any executable of a face).
#[test]
fn the_client_commands_need_sandbox_daemon_and_a_local_run_does_not() {
    let dir = tempfile::Builder::new()
        .prefix("lonely-sandbox-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let lonely = dir.path().join("sandbox");
    if std::fs::hard_link(support::sandbox_bin(), &lonely).is_err() {
        std::fs::copy(support::sandbox_bin(), &lonely).unwrap();
    }
    let socket = dir.path().join("no-daemon.sock");
    for (args, command) in [
        (vec!["ps"], "sandbox ps"),
        (vec!["logs", "r1"], "sandbox logs"),
        (vec!["cancel", "r1"], "sandbox cancel"),
        (vec!["approvals"], "sandbox approvals"),
        (vec!["run", "--", "/bin/true"], "sandbox run --daemon"),
    ] {
        let out = Command::new(&lonely)
            .args(&args)
            .env("SANDBOX_DAEMON", &socket)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "sandbox: `{command}` runs sandbox-daemon, which is missing"
            )),
            "{args:?}: {stderr}"
        );
    }
    let out = Command::new(&lonely)
        .args(["run", "--profile", "no-such-profile", "--", "/bin/true"])
        .env_remove("SANDBOX_DAEMON")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("sandbox-daemon"), "{stderr}");
}

/// A user without `XDG_RUNTIME_DIR` has no default socket: `sandbox`
/// names the run's socket itself, before any executable of a face, and
/// both it and the client commands refuse with exit 2.
#[test]
fn no_default_socket_is_a_usage_error_before_and_after_the_exec() {
    if !support::require_user_sandbox(
        "no_default_socket_is_a_usage_error_before_and_after_the_exec",
    ) {
        return;
    }
    let project = Project::new(Who::User);
    for args in [vec!["run", "--", "/bin/true"], vec!["ps"]] {
        let mut cmd = Command::new(support::binary_for_test_user());
        cmd.args(&args)
            .env("SANDBOX_DAEMON", "1")
            .env_remove("XDG_RUNTIME_DIR")
            .current_dir(project.path())
            .stdin(Stdio::null());
        if nix::unistd::geteuid().is_root() {
            use std::os::unix::process::CommandExt;
            cmd.uid(support::TEST_UID).gid(support::TEST_GID);
        }
        let out = cmd.output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("sandbox: no daemon socket: XDG_RUNTIME_DIR is not set"),
            "{args:?}: {stderr}"
        );
    }
}
