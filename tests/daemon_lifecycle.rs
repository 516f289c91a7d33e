//! A real `sandbox daemon`'s life as its operator sees it: the lines it
//! logs (listening, each run's start and end, stopping), and what a SIGTERM
//! does to runs in flight and to the clients attached to them.

mod support;

use std::time::Duration;

use serde_json::json;
use support::daemon::Daemon;
use support::{Project, Who};

fn ready(test: &str) -> bool {
    support::require_root_daemon(test)
}

/// Root's rule over projects below /tmp.
fn config(extra_daemon: &str) -> String {
    format!("[daemon]\n{extra_daemon}\n[[allow]]\nuids = [0]\nprojects = [\"/tmp\"]\n")
}

/// The daemon's log lines that mention `needle`.
fn lines_with<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    log.lines().filter(|line| line.contains(needle)).collect()
}

/// Poll the daemon's log until a line holds every one of `needles`.
fn wait_for_line(daemon: &Daemon, needles: &[&str]) -> String {
    support::wait::within(Duration::from_secs(60), || {
        daemon
            .log()
            .lines()
            .find(|line| needles.iter().all(|n| line.contains(n)))
            .map(str::to_string)
    })
    .unwrap_or_else(|| panic!("no log line with {needles:?}:\n{}", daemon.log()))
}

#[test]
fn the_daemon_logs_its_lifecycle_one_plain_line_per_event() {
    if !ready("the_daemon_logs_its_lifecycle_one_plain_line_per_event") {
        return;
    }
    let mut daemon = Daemon::start_with(&config(""), &["-v"]);
    let project = Project::new(Who::Root);
    wait_for_line(
        &daemon,
        &["INFO", "listening", &daemon.socket.display().to_string()],
    );

    let long = "L".repeat(5_000);
    let body = json!({
        "command": ["/bin/sh", "-c", "exit 3", "x\nINFO run ended forged", long],
        "project": project.path(),
        "env": {"LOGGED_ENV": "env-value-must-not-be-logged"},
        "secrets": {"TOKEN": "secret-value-must-not-be-logged"},
        "wait": true,
    });
    let (status, run) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 200, "{run}\n{}", daemon.log());
    assert_eq!(run["status"], 3, "{run}");
    let id = run["id"].as_str().expect("id");

    let started = wait_for_line(&daemon, &["INFO", "run started", id]);
    assert!(started.contains("uid=0"), "{started}");
    assert!(
        started.contains("command=/bin/sh -c \"exit 3\""),
        "{started}"
    );
    assert!(
        started.contains(r#""x\u{a}INFO run ended forged""#),
        "a newline in an argument is escaped, not a second line: {started}"
    );
    assert!(started.contains("… (cut; 5 arguments in all)"), "{started}");
    assert!(started.len() < 600, "a bounded line: {started}");
    let ended = wait_for_line(&daemon, &["INFO", "run ended run=", id]);
    for field in ["uid=0", "state=exited", "status=3"] {
        assert!(ended.contains(field), "{field} in {ended}");
    }
    // -v: the debug events too.
    wait_for_line(&daemon, &["DEBUG", "run queued", id]);

    let code = daemon.terminate();
    assert!(code.success(), "{code}\n{}", daemon.log());
    let log = daemon.log();
    assert_eq!(lines_with(&log, "stopping").len(), 1, "{log}");
    assert!(
        lines_with(&log, "stopping")[0].contains("signal=SIGTERM"),
        "{log}"
    );
    assert_eq!(lines_with(&log, " stopped").len(), 1, "{log}");
    assert!(
        !log.contains('\x1b'),
        "no colour when not a terminal:\n{log}"
    );
    assert!(!log.contains("must-not-be-logged"), "{log}");
    let ends = lines_with(&log, "run ended run=");
    assert_eq!(ends.len(), 1, "{log}");
    assert!(
        !ends[0].contains("forged"),
        "the forged line stays inside the run's start line:\n{log}"
    );
}

/// Without `-v`, only the lifecycle: no debug events.
#[test]
fn without_verbose_the_log_keeps_to_the_lifecycle() {
    if !ready("without_verbose_the_log_keeps_to_the_lifecycle") {
        return;
    }
    let daemon = Daemon::start(&config(""));
    let project = Project::new(Who::Root);
    let (run, _, _) = support::daemon::run_to_end(&daemon, project.path(), &["/bin/true"]);
    let id = run["id"].as_str().expect("id");
    wait_for_line(&daemon, &["run ended", id, "status=0"]);
    let log = daemon.log();
    assert!(lines_with(&log, "DEBUG").is_empty(), "{log}");
    assert_eq!(lines_with(&log, "run started").len(), 1, "{log}");
}

/// SIGTERM (systemd's stop) with a client attached to a running run: the
/// run is cancelled with the reason "the daemon stopped", its record and
/// log say so, and the client gets the run's real end from its stream and
/// exits with the run's status instead of waiting for a daemon that is
/// gone and exiting 125 "no daemon answers".
#[test]
fn sigterm_ends_runs_with_a_reason_and_attached_clients_get_their_end() {
    if !ready("sigterm_ends_runs_with_a_reason_and_attached_clients_get_their_end") {
        return;
    }
    let mut daemon = Daemon::start(&config("cancel_grace = \"1s\""));
    let project = Project::new(Who::Root);
    let marker = support::marker("sigterm");
    let mut client = daemon
        .cli()
        .current_dir(project.path())
        .args(["run", "--daemon", "--", "/bin/sh", "-c"])
        .arg(format!("echo started; sleep 60; : {marker}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("client starts");
    let id = daemon.find_run(&marker)["id"]
        .as_str()
        .expect("id")
        .to_string();
    // The payload has started once its first line reached the client: a
    // run whose record says "running" may not have printed it yet.
    let mut stdout = client.stdout.take().expect("piped stdout");
    let (first_line, got_first_line) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::{BufRead, Read};
        let mut reader = std::io::BufReader::new(&mut stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = first_line.send(line.clone());
        let mut rest = String::new();
        let _ = reader.read_to_string(&mut rest);
        line + &rest
    });
    let first = got_first_line
        .recv_timeout(support::wait::limit(Duration::from_secs(60)))
        .unwrap_or_else(|_| panic!("the run never printed:\n{}", daemon.log()));
    assert_eq!(first, "started\n");
    let stopped = daemon.terminate();
    assert!(stopped.success(), "{stopped}\n{}", daemon.log());

    let out = client.wait_with_output().expect("client ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("no daemon answers"), "{stderr}");
    assert!(
        stderr.contains(&format!("sandbox: run {id} cancelled: the daemon stopped")),
        "{stderr}"
    );
    assert_eq!(reader.join().expect("stdout reader"), "started\n");
    let ended = wait_for_line(&daemon, &["run ended run=", &id]);
    assert!(
        ended.contains("state=cancelled") && ended.contains("reason=the daemon stopped"),
        "{ended}"
    );

    // The record, read by the next daemon: cancelled, with its reason and
    // the status the client exited with; not found lost.
    daemon.restart();
    let (status, run) = daemon.request("GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["state"], "cancelled", "{run}");
    assert_eq!(run["reason"], "the daemon stopped", "{run}");
    let code = run["status"].as_i64().expect("a status") as i32;
    assert_ne!(code, 0, "{run}");
    assert_eq!(out.status.code(), Some(code), "{stderr}\n{run}");
    let (_, _, records) = daemon.output(&id);
    let last = records.last().expect("records");
    assert_eq!(last["type"], "end", "{last}");
    assert_eq!(last["reason"], "the daemon stopped", "{last}");
    assert_eq!(last["status"], code, "{last}");
    assert!(
        support::wait_until_gone(&marker, 10).is_empty(),
        "the run's processes are gone"
    );
}

/// With its socket in a directory everyone can write (`--socket
/// /tmp/sandbox.sock`), a caller planted `skills/<uid>` as a symlink to a
/// root-only file before the daemon made it: the daemon then `chown`ed the
/// link's target to the caller. The daemon must refuse such a socket
/// directory, name a private one, and leave the file root's.
#[test]
fn a_daemon_refuses_a_socket_directory_others_can_write() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    if !support::require(
        "a_daemon_refuses_a_socket_directory_others_can_write",
        "root (to plant as another user and check ownership)",
        nix::unistd::geteuid().is_root(),
    ) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("sandbox-shared-socket-dir-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let secret = dir.path().join("root-only");
    std::fs::write(&secret, "root's\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let planted = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "mkdir skills && ln -s ../root-only skills/{}",
            support::TEST_UID
        ))
        .current_dir(dir.path())
        .uid(support::TEST_UID)
        .gid(support::TEST_GID)
        .status()
        .unwrap();
    assert!(planted.success(), "the other user plants the link");
    let config = dir.path().join("daemon.toml");
    std::fs::write(&config, "").unwrap();
    let socket = dir.path().join("sandbox.sock");
    let mut daemon = support::daemon::command(
        std::process::Command::new(support::sandbox_bin()),
        &socket,
        &dir.path().join("state"),
        Some(&config),
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // It must exit without ever serving: a socket that appears, or a daemon
    // still running at the (load-scaled) limit, is the failure.
    let mut serving = false;
    let exited = support::wait::within(Duration::from_secs(60), || {
        serving = socket.exists();
        if serving {
            return Some(None);
        }
        daemon.try_wait().unwrap().map(Some)
    });
    let Some(Some(status)) = exited else {
        let _ = daemon.kill();
        let _ = daemon.wait();
        panic!(
            "the daemon serves on a socket in a directory everyone can write (serving: {serving})"
        );
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut daemon.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("can be written by others") && stderr.contains("/run/sandbox/sandbox.sock"),
        "the refusal says why and names a private directory: {stderr}"
    );
    assert_eq!(
        std::fs::metadata(&secret).unwrap().uid(),
        0,
        "the file stays root's"
    );
}
