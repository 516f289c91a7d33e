//! `sandbox daemon` driven by a real client (`curl --unix-socket`): a run
//! through the API, callers kept to their rules and their own runs, the
//! API's errors, readiness, a live socket left alone, systemd socket
//! activation, and a SIGKILLed daemon's runs found lost and killed.

mod support;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::daemon::Daemon;

/// A directory every test user can reach (the socket and projects live
/// below it).
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn my_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn error_code(value: &Value) -> &str {
    value["error"]["code"].as_str().unwrap_or("")
}

fn submit(project: &Path, command: &[&str], wait: bool) -> String {
    serde_json::json!({"command": command, "project": project, "wait": wait}).to_string()
}

#[test]
fn a_run_through_the_api_has_its_status_and_output() {
    if !support::require_root_sandbox("a_run_through_the_api_has_its_status_and_output") {
        return;
    }
    let daemon = Daemon::start(&format!(
        "[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        my_uid()
    ));
    let project = daemon.project("job", None);
    let (code, info) = daemon.json(None, "GET", "/v1/info", None);
    assert_eq!(code, 200, "{info}");
    assert_eq!(info["api"], 1);
    assert_eq!(info["caller"]["uid"], my_uid());
    let strict = info["doctor"]["profiles"]
        .as_array()
        .and_then(|profiles| profiles.iter().find(|p| p["profile"] == "strict"))
        .unwrap_or_else(|| panic!("doctor's verdict of strict in {info}"));
    assert_eq!(strict["can_run"], true, "{strict}");
    assert_eq!(info["doctor"]["default_profile_can_run"], true, "{info}");

    let (code, run) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/echo", "hi"], true)),
    );
    assert_eq!(code, 200, "{run}");
    assert_eq!(run["state"], "exited", "{run}");
    assert_eq!(run["status"], 0, "{run}");
    assert_eq!(run["report"]["version"], 1, "{run}");
    let id = run["id"].as_str().unwrap();

    let (code, events) = daemon.curl(None, "GET", &format!("/v1/runs/{id}/events"), None);
    assert_eq!(code, 200, "{events}");
    let records: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r["type"] == "stdout" && r["data"] == "hi\n"),
        "{events}"
    );
    // The supervisor's exit, then the daemon's end with the run object's
    // fields.
    assert_eq!(records[records.len() - 2]["type"], "exit", "{events}");
    let end = records.last().unwrap();
    assert_eq!(end["type"], "end", "{events}");
    assert_eq!(
        (&end["state"], &end["status"]),
        (&run["state"], &run["status"])
    );
    assert_eq!(end["report"], run["report"], "{events}");
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record["seq"], i as u64 + 1, "{events}");
    }
    // The record counts every line of its log, the end's included.
    let (_, shown) = daemon.json(None, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(shown["log_records"], records.len() as u64, "{shown}");
    // Resuming after the last record seen gives only what follows it.
    let (_, rest) = daemon.curl(
        None,
        "GET",
        &format!("/v1/runs/{id}/events?since=1&follow=true"),
        None,
    );
    assert_eq!(rest.lines().count(), records.len() - 1, "{rest}");

    // Without wait: 202 at once, the record is there, and it finishes.
    let (code, queued) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(
            &project,
            &["/bin/sh", "-c", "echo two; exit 3"],
            false,
        )),
    );
    assert_eq!(code, 202, "{queued}");
    let second = queued["id"].as_str().unwrap().to_string();
    let (_, followed) = daemon.curl(
        None,
        "GET",
        &format!("/v1/runs/{second}/events?follow=true"),
        None,
    );
    assert!(followed.contains("\"data\":\"two\\n\""), "{followed}");
    let (_, shown) = daemon.json(None, "GET", &format!("/v1/runs/{second}"), None);
    assert_eq!(shown["state"], "exited", "{shown}");
    assert_eq!(shown["status"], 3, "{shown}");
    let (_, listed) = daemon.json(None, "GET", "/v1/runs?state=exited", None);
    assert_eq!(listed["runs"].as_array().unwrap().len(), 2, "{listed}");

    let (code, _) = daemon.curl(None, "DELETE", &format!("/v1/runs/{second}"), None);
    assert_eq!(code, 204);
    let (code, gone) = daemon.json(None, "GET", &format!("/v1/runs/{second}"), None);
    assert_eq!((code, error_code(&gone)), (404, "no_such_run"));
    assert!(!daemon.dir().join("state/spool").join(&second).exists());
}

#[test]
fn callers_are_held_to_their_rule_and_their_own_runs() {
    let test = "callers_are_held_to_their_rule_and_their_own_runs";
    if !support::require(test, "root (to connect as a second uid)", my_uid() == 0)
        || !support::require_root_sandbox(test)
    {
        return;
    }
    let other = support::TEST_UID;
    let daemon = Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\n\
         [[allow]]\nuids = [0]\nprojects = [\"{{dir}}\"]\n\
         [[allow]]\nuids = [{other}]\nprofiles = [\"strict\"]\nprojects = [\"{{dir}}/theirs\"]\n"
    ));
    let mode = std::fs::metadata(&daemon.socket)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o666, "the socket has the configured mode");
    let mine = daemon.project("mine", None);
    let theirs = daemon.project("theirs", Some(other));

    let (code, run) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&mine, &["/bin/true"], true)),
    );
    assert_eq!(code, 200, "{run}");
    let root_run = run["id"].as_str().unwrap().to_string();

    // The second uid: another profile, another project, root's run.
    let body =
        serde_json::json!({"command": ["/bin/true"], "project": theirs, "profile": "permissive"});
    let (code, err) = daemon.json(Some(other), "POST", "/v1/runs", Some(&body.to_string()));
    assert_eq!(
        (code, error_code(&err)),
        (403, "profile_not_allowed"),
        "{err}"
    );
    let (code, err) = daemon.json(
        Some(other),
        "POST",
        "/v1/runs",
        Some(&submit(&mine, &["/bin/true"], false)),
    );
    assert_eq!(
        (code, error_code(&err)),
        (403, "project_not_allowed"),
        "{err}"
    );
    // Its own directory outside its root, reached by `..` or a symlink
    // from inside the root: the path is judged after resolution.
    let outside = daemon.project("outside", Some(other));
    std::os::unix::fs::symlink(&outside, theirs.join("link")).unwrap();
    for escape in [theirs.join("../outside"), theirs.join("link")] {
        let body = submit(&escape, &["/bin/true"], false);
        let (code, err) = daemon.json(Some(other), "POST", "/v1/runs", Some(&body));
        assert_eq!(
            (code, error_code(&err)),
            (403, "project_not_allowed"),
            "{}: {err}",
            escape.display()
        );
    }
    for (method, path) in [
        ("GET", format!("/v1/runs/{root_run}")),
        ("GET", format!("/v1/runs/{root_run}/events")),
        ("POST", format!("/v1/runs/{root_run}/cancel")),
        ("DELETE", format!("/v1/runs/{root_run}")),
    ] {
        let (code, err) = daemon.json(Some(other), method, &path, None);
        assert_eq!(
            (code, error_code(&err)),
            (404, "no_such_run"),
            "{method} {path}: {err}"
        );
    }
    let (_, listed) = daemon.json(Some(other), "GET", "/v1/runs", None);
    assert_eq!(listed["runs"], serde_json::json!([]), "{listed}");
    let (_, still) = daemon.json(None, "GET", &format!("/v1/runs/{root_run}"), None);
    assert_eq!(still["state"], "exited", "{still}");

    // A uid with no rule at all.
    let (code, err) = daemon.json(Some(other + 1), "GET", "/v1/info", None);
    assert_eq!((code, error_code(&err)), (403, "not_allowed"), "{err}");
}

#[test]
fn bad_requests_get_json_errors() {
    let daemon = Daemon::start(&format!(
        "[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        my_uid()
    ));
    let project = daemon.project("p", None);
    let cases: Vec<(String, u16, &str)> = vec![
        ("{\"command\": [\"/bin/true\"]".into(), 400, "bad_request"),
        (
            format!("{{\"command\": [\"/bin/true\"], \"project\": {project:?}, \"colour\": 1}}"),
            400,
            "bad_request",
        ),
        (
            format!("{{\"command\": [\"/bin/true\"], \"project\": {project:?}, \"network\": \"host\"}}"),
            403,
            "network_not_allowed",
        ),
        (
            format!("{{\"command\": [\"/bin/true\"], \"project\": {project:?}, \"grants\": [\"fs.write\"]}}"),
            403,
            "grant_not_allowed",
        ),
        (
            format!("{{\"command\": [\"/bin/true\"], \"project\": {project:?}, \"limits\": {{\"output\": \"1TiB\"}}}}"),
            403,
            "limit_too_high",
        ),
        (format!("{{\"stdin\": \"{}\"}}", "x".repeat(1_100_000)), 413, "too_large"),
    ];
    for (body, status, code) in cases {
        let (got, err) = daemon.json(None, "POST", "/v1/runs", Some(&body));
        assert_eq!((got, error_code(&err)), (status, code), "{err}");
        assert!(err["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert!(err["error"]["fix"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let (code, err) = daemon.json(None, "GET", "/v1/runs/0123456789abcdef", None);
    assert_eq!((code, error_code(&err)), (404, "no_such_run"));
    let (code, err) = daemon.json(None, "PUT", "/v1/info", None);
    assert_eq!((code, error_code(&err)), (405, "bad_request"), "{err}");
    let (code, err) = daemon.json(None, "GET", "/v2/info", None);
    assert_eq!((code, error_code(&err)), (404, "not_found"), "{err}");
    let (code, err) = daemon.json(None, "GET", "/v1/runs?state=sleeping", None);
    assert_eq!((code, error_code(&err)), (400, "bad_request"), "{err}");
    let (code, err) = daemon.json(
        None,
        "POST",
        "/v1/approvals/0123456789abcdef/1",
        Some("{\"answer\": \"once\"}"),
    );
    assert_eq!((code, error_code(&err)), (404, "no_such_approval"), "{err}");

    // A second daemon on the same socket refuses to take it over.
    let out = support::daemon::command(
        Command::new(support::sandbox_bin()),
        &daemon.socket,
        &daemon.dir().join("state2"),
        Some(&daemon.config),
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("in use by a running daemon"), "{stderr}");
    let (code, _) = daemon.json(None, "GET", "/v1/info", None);
    assert_eq!(code, 200, "the first daemon still answers");
}

#[test]
fn a_killed_daemon_finds_its_runs_lost_and_kills_them() {
    if !support::require_root_sandbox("a_killed_daemon_finds_its_runs_lost_and_kills_them") {
        return;
    }
    let config = format!(
        "[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        my_uid()
    );
    let mut daemon = Daemon::start(&config);
    let project = daemon.project("p", None);
    let (code, done) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/echo", "kept"], true)),
    );
    assert_eq!(code, 200, "{done}");
    let marker = support::marker("daemon-kill");
    let (code, queued) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/sleep", &marker], false)),
    );
    assert_eq!(code, 202, "{queued}");
    let id = queued["id"].as_str().unwrap().to_string();
    wait_for_process(&marker);
    daemon.kill();
    daemon.restart();
    let left = support::wait_until_gone(&marker, 10);
    assert!(
        left.is_empty(),
        "processes of the lost run survived: {left:?}"
    );
    let (_, lost) = daemon.json(None, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(lost["state"], "lost", "{lost}");
    assert_eq!(
        lost["reason"], "the daemon stopped while the run was running",
        "{lost}"
    );
    let (_, events) = daemon.curl(None, "GET", &format!("/v1/runs/{id}/events"), None);
    assert!(
        events
            .lines()
            .last()
            .unwrap_or("")
            .contains("\"type\":\"lost\""),
        "{events}"
    );
    let kept = done["id"].as_str().unwrap();
    let (_, again) = daemon.json(None, "GET", &format!("/v1/runs/{kept}"), None);
    assert_eq!(again["state"], "exited", "{again}");
    let (_, output) = daemon.curl(None, "GET", &format!("/v1/runs/{kept}/events"), None);
    assert!(output.contains("kept\\n"), "{output}");
}

#[test]
fn systemd_socket_activation_hands_over_the_socket() {
    let tool = Path::new("/usr/bin/systemd-socket-activate");
    if !support::require(
        "systemd_socket_activation_hands_over_the_socket",
        "systemd-socket-activate",
        tool.exists(),
    ) {
        return;
    }
    let dir = open_dir();
    let socket = dir.path().join("activated.sock");
    let config = dir.path().join("daemon.toml");
    std::fs::write(&config, format!("[[allow]]\nuids = [{}]\n", my_uid())).unwrap();
    let mut activator = Command::new(tool)
        .arg("-l")
        .arg(&socket)
        .arg(support::sandbox_bin())
        .arg("daemon")
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    support::wait::until_true(
        "systemd-socket-activate to make its socket",
        Duration::from_secs(10),
        || socket.exists(),
    );
    let (code, info) = support::daemon::curl_json(&socket, None, "GET", "/v1/info", None);
    assert_eq!(code, 200, "{info}");
    assert_eq!(info["caller"]["uid"], my_uid());
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(activator.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = activator.wait().unwrap();
    let mut stderr = String::new();
    if let Some(mut pipe) = activator.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    assert!(
        status.success(),
        "the daemon stops cleanly on SIGTERM: {status:?}\n{stderr}"
    );
}

#[test]
fn a_restart_kills_a_recorded_process_only_while_it_is_the_same_one() {
    // A run recorded as running by a daemon that died, whose sandbox
    // survived (here: a plain process standing in for its init), and a
    // record whose pid now names an unrelated process (pid reuse: the
    // start time differs).
    let mut daemon = Daemon::stopped();
    let state = daemon.state.clone();
    std::fs::create_dir_all(state.join("spool")).unwrap();
    let mut survivor = Command::new("/bin/sleep").arg("600").spawn().unwrap();
    let mut bystander = Command::new("/bin/sleep").arg("600").spawn().unwrap();
    {
        use sandbox_daemon::runs::proc_start_time;
        use sandbox_daemon::store::{RunRecord, Store};
        let store = Store::open(&state.join("sandbox.db")).unwrap();
        for (id, child, start_offset) in [
            ("00000000000000a1", &survivor, 0),
            ("00000000000000a2", &bystander, 1),
        ] {
            let pid = child.id() as i32;
            std::fs::create_dir_all(state.join("spool").join(id)).unwrap();
            store
                .insert(&RunRecord::queued(
                    id.into(),
                    (my_uid(), my_uid()),
                    vec!["/bin/sleep".into()],
                    "strict".into(),
                    "/".into(),
                    sandbox::clock::unix_ms(),
                ))
                .unwrap();
            store.set_running(id).unwrap();
            let start = proc_start_time(pid).unwrap() + start_offset;
            store.set_started(id, pid, Some(start), 2).unwrap();
        }
    }
    daemon.launch(&format!("[[allow]]\nuids = [{}]\n", my_uid()));
    let status = support::wait::exit_within(&mut survivor, Duration::from_secs(10));
    if status.is_none() {
        let _ = survivor.kill();
        let _ = survivor.wait();
    }
    assert_eq!(
        status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s)),
        Some(9),
        "the surviving process of the lost run is killed"
    );
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "a process that only reuses a recorded pid is left alone"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
    let (_, lost) = daemon.json(None, "GET", "/v1/runs/00000000000000a1", None);
    assert_eq!(lost["state"], "lost", "{lost}");
    let (_, events) = daemon.curl(None, "GET", "/v1/runs/00000000000000a1/events", None);
    assert!(events.contains("\"type\":\"lost\""), "{events}");
}

fn wait_for_process(marker: &str) {
    support::wait::until_true(
        "the run to start (a process with its marker)",
        Duration::from_secs(20),
        || !support::host_pids_with(marker).is_empty(),
    );
}

#[test]
fn the_queue_is_bounded_and_runs_are_cancelled() {
    if !support::require_root_sandbox("the_queue_is_bounded_and_runs_are_cancelled") {
        return;
    }
    let mut daemon = Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 1\nmax_queue = 2\ncancel_grace = \"1s\"\n\
         [[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        my_uid()
    ));
    let project = daemon.project("p", None);
    let first = support::marker("queue-first");
    let (code, running) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/sleep", &first], false)),
    );
    assert_eq!(code, 202, "{running}");
    let running = running["id"].as_str().unwrap().to_string();
    wait_for_process(&first);
    let (code, queued) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/true"], false)),
    );
    assert_eq!(code, 202, "{queued}");
    let queued = queued["id"].as_str().unwrap().to_string();
    let (_, shown) = daemon.json(None, "GET", &format!("/v1/runs/{queued}"), None);
    assert_eq!(shown["state"], "queued", "one slot, taken: {shown}");
    // Half the queue (1 of 2) is one caller's share.
    let (code, err) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/true"], false)),
    );
    assert_eq!((code, error_code(&err)), (429, "quota_full"), "{err}");
    let headers = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-D", "-", "--unix-socket"])
        .arg(&daemon.socket)
        .args(["--data-binary", &submit(&project, &["/bin/true"], false)])
        .arg("http://daemon/v1/runs")
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&headers.stdout).to_ascii_lowercase();
    assert!(headers.contains("retry-after: 1"), "{headers}");

    let (code, cancelled) = daemon.json(None, "POST", &format!("/v1/runs/{queued}/cancel"), None);
    assert_eq!(
        (code, &cancelled["state"]),
        (202, &Value::from("cancelled")),
        "{cancelled}"
    );
    let (code, cancelling) = daemon.json(None, "POST", &format!("/v1/runs/{running}/cancel"), None);
    assert_eq!(code, 202, "{cancelling}");
    let (_, events) = daemon.curl(
        None,
        "GET",
        &format!("/v1/runs/{running}/events?follow=true"),
        None,
    );
    assert!(events.contains("\"type\":\"exit\""), "{events}");
    let (_, over) = daemon.json(None, "GET", &format!("/v1/runs/{running}"), None);
    assert_eq!(over["state"], "cancelled", "{over}");
    assert!(support::wait_until_gone(&first, 10).is_empty());
    let (_, never) = daemon.json(None, "GET", &format!("/v1/runs/{queued}"), None);
    assert_eq!(never["state"], "cancelled", "{never}");
    assert_eq!(never["started_ms"], Value::Null, "{never}");

    // SIGTERM: the run in flight is cancelled and recorded, the daemon
    // exits 0 and the next one finds the result.
    let last = support::marker("queue-term");
    let (_, busy) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/sleep", &last], false)),
    );
    let busy = busy["id"].as_str().unwrap().to_string();
    wait_for_process(&last);
    let status = daemon.terminate();
    assert!(status.success(), "{status:?}");
    assert!(support::wait_until_gone(&last, 10).is_empty());
    assert!(
        !daemon.socket.exists(),
        "the daemon removes the socket it made"
    );
    daemon.restart();
    let (_, after) = daemon.json(None, "GET", &format!("/v1/runs/{busy}"), None);
    assert_eq!(after["state"], "cancelled", "{after}");
}

#[test]
fn a_dead_launcher_loses_its_runs_and_is_restarted_once() {
    if !support::require_root_sandbox("a_dead_launcher_loses_its_runs_and_is_restarted_once") {
        return;
    }
    let daemon = Daemon::start(&format!(
        "[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        my_uid()
    ));
    let project = daemon.project("p", None);
    let marker = support::marker("launcher-dies");
    let (_, run) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/sleep", &marker], false)),
    );
    let id = run["id"].as_str().unwrap().to_string();
    wait_for_process(&marker);
    let launcher = daemon.launcher_pid().expect("the daemon's launcher");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(launcher as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let mut after = Value::Null;
    support::wait::holds_within(Duration::from_secs(20), || {
        after = daemon.json(None, "GET", &format!("/v1/runs/{id}"), None).1;
        after["state"] != "running"
    });
    assert!(
        after["state"] == "lost" || after["state"] == "failed",
        "a run whose launcher died ends without a result: {after}"
    );
    assert!(
        after["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{after}"
    );
    assert!(support::wait_until_gone(&marker, 10).is_empty());
    // The replacement takes runs.
    let run = support::wait::until(
        "the launcher to be restarted",
        Duration::from_secs(20),
        || {
            let (code, run) = daemon.json(
                None,
                "POST",
                "/v1/runs",
                Some(&submit(&project, &["/bin/true"], true)),
            );
            if code == 200 {
                return Some(run);
            }
            assert_eq!((code, error_code(&run)), (503, "launcher_down"), "{run}");
            None
        },
    );
    assert_eq!(run["status"], 0, "{run}");
    let replacement = daemon.launcher_pid().expect("a new launcher");
    assert_ne!(replacement, launcher);
}

#[test]
fn a_question_is_answered_through_the_api_by_its_owner_only() {
    let test = "a_question_is_answered_through_the_api_by_its_owner_only";
    if !support::require(test, "root (to connect as a second uid)", my_uid() == 0)
        || !support::require_root_sandbox(test)
        || !support::require(
            test,
            "/usr/bin/python3",
            Path::new("/usr/bin/python3").exists(),
        )
    {
        return;
    }
    let other = support::TEST_UID;
    let daemon = Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\n\
         [[allow]]\nuids = [0]\nprojects = [\"{{dir}}\"]\n\
         [[allow]]\nuids = [{other}]\nprojects = [\"{{dir}}/theirs\"]\n"
    ));
    let project = daemon.project("p", None);
    let (code, run) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(
            &project,
            &["/usr/bin/python3", "-c", support::ASK_FS_WRITE],
            false,
        )),
    );
    assert_eq!(code, 202, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    let question = support::wait::until("a question", Duration::from_secs(20), || {
        let (_, listed) = daemon.json(None, "GET", "/v1/approvals", None);
        listed["approvals"]
            .as_array()
            .and_then(|a| a.first())
            .cloned()
    });
    assert_eq!(question["run"], id.as_str(), "{question}");
    assert_eq!(question["action"], "fs.write", "{question}");
    let qid = question["id"].as_str().unwrap().to_string();

    // Another caller neither sees nor answers it.
    let (_, theirs) = daemon.json(Some(other), "GET", "/v1/approvals", None);
    assert_eq!(theirs["approvals"], serde_json::json!([]), "{theirs}");
    let (code, err) = daemon.json(
        Some(other),
        "POST",
        &format!("/v1/approvals/{qid}"),
        Some("{\"answer\": \"once\"}"),
    );
    assert_eq!((code, error_code(&err)), (404, "no_such_approval"), "{err}");

    let (code, answered) = daemon.json(
        None,
        "POST",
        &format!("/v1/approvals/{qid}"),
        Some("{\"answer\": \"once\"}"),
    );
    assert_eq!(code, 200, "{answered}");
    assert_eq!(answered["answer"], "once");
    let (_, events) = daemon.curl(
        None,
        "GET",
        &format!("/v1/runs/{id}/events?follow=true"),
        None,
    );
    assert!(events.contains("\"type\":\"answer\""), "{events}");
    let (_, over) = daemon.json(None, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(over["status"], 0, "{over}");
    assert_eq!(
        std::fs::read_to_string(project.join("granted.txt")).unwrap(),
        "yes",
        "the approved write happened"
    );
    let (_, after) = daemon.json(None, "GET", "/v1/approvals", None);
    assert_eq!(after["approvals"], serde_json::json!([]), "{after}");
}

#[test]
fn a_run_cannot_reach_the_daemons_socket_or_database() {
    let test = "a_run_cannot_reach_the_daemons_socket_or_database";
    if !support::require_root_sandbox(test)
        || !support::require(
            test,
            "/usr/bin/python3",
            Path::new("/usr/bin/python3").exists(),
        )
    {
        return;
    }
    // The rule allows every project below the directory that also holds
    // the daemon's socket and state.
    let daemon = Daemon::start(&format!(
        "[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        my_uid()
    ));
    let state = daemon.dir().join("state");
    let script = format!(
        "{}\nattempt('socket', lambda: socket.socket(socket.AF_UNIX).connect({:?}))\n\
         attempt('database', lambda: open({:?}, 'rb').read(1))\n\
         attempt('spool', lambda: os.listdir({:?}))\n",
        support::PY_ATTEMPT,
        daemon.socket.display().to_string(),
        state.join("sandbox.db").display().to_string(),
        state.join("spool").display().to_string(),
    );
    let project = daemon.project("job", None);
    let (code, run) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(
            &project,
            &["/usr/bin/python3", "-c", &script],
            true,
        )),
    );
    assert_eq!(code, 200, "{run}");
    let id = run["id"].as_str().unwrap();
    let (_, events) = daemon.curl(None, "GET", &format!("/v1/runs/{id}/events"), None);
    for what in ["socket", "database", "spool"] {
        assert!(
            events.contains(&format!("{what} ")),
            "{what} was not tried: {events}"
        );
        assert!(
            !events.contains(&format!("{what} ok")),
            "the run reached the daemon's {what}: {events}"
        );
    }

    // Naming the directory that holds them as the project is refused,
    // as is the state directory itself.
    for project in [daemon.dir().to_path_buf(), state.clone()] {
        let (code, err) = daemon.json(
            None,
            "POST",
            "/v1/runs",
            Some(&submit(&project, &["/bin/true"], true)),
        );
        assert_eq!(
            (code, error_code(&err)),
            (403, "project_not_allowed"),
            "{}: {err}",
            project.display()
        );
    }
}

#[test]
fn a_user_daemon_without_config_serves_only_its_own_uid() {
    let test = "a_user_daemon_without_config_serves_only_its_own_uid";
    if !support::require(
        test,
        "root (to start the daemon as another user)",
        my_uid() == 0,
    ) || !support::require(
        test,
        "user namespaces for an unprivileged user",
        support::sandbox_works(support::Who::User),
    ) {
        return;
    }
    let user = support::TEST_UID;
    let dir = open_dir();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(user), Some(user)).unwrap();
    let project = home.join("job");
    std::fs::create_dir(&project).unwrap();
    std::os::unix::fs::chown(&project, Some(user), Some(user)).unwrap();
    let socket = home.join("sandbox.sock");
    let mut command = support::daemon::command(
        Command::new(support::binary_for_test_user()),
        &socket,
        &home.join("state"),
        None,
    );
    command
        .env_clear()
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin")
        .uid(user)
        .gid(user);
    // Ready when it says READY=1 on NOTIFY_SOCKET, like every daemon here.
    let daemon = Daemon::adopt(dir, socket.clone(), command);
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o600,
        "a socket without socket_mode is its owner's only"
    );

    let (code, run) = daemon.json(
        Some(user),
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/echo", "mine"], true)),
    );
    assert_eq!(code, 200, "{run}");
    assert_eq!(run["status"], 0, "{run}");
    // Root gets past the socket's mode, but not past the daemon's rule.
    let (code, err) = daemon.json(None, "GET", "/v1/runs", None);
    assert_eq!((code, error_code(&err)), (403, "not_allowed"), "{err}");
}

/// A skill directory `dir/name` whose main file `main` holds `code`;
/// `extra` adds manifest lines (`key: value\n`).
fn write_skill(
    dir: &Path,
    name: &str,
    description: &str,
    main: (&str, &str),
    extra: &str,
) -> PathBuf {
    let runtime = if main.0.ends_with(".py") {
        "python"
    } else {
        "sh"
    };
    let skill = dir.join(name);
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: {description}\nruntime: {runtime}\nmain: {}\n{extra}---\nTest.\n",
            main.0
        ),
    )
    .unwrap();
    std::fs::write(skill.join(main.0), main.1).unwrap();
    skill
}

#[test]
fn skills_are_listed_and_invoked_through_the_daemon() {
    if !support::require_root_sandbox("skills_are_listed_and_invoked_through_the_daemon") {
        return;
    }
    let skills = open_dir();
    write_skill(
        skills.path(),
        "echo-n",
        "answers n",
        (
            "main.py",
            "import sandbox_ipc\nsandbox_ipc.connect().serve(lambda p: {'n': p.get('n')})\n",
        ),
        "",
    );
    let other = support::TEST_UID;
    let daemon = Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\nskills_dirs = [\"{}\"]\n[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n[[allow]]\nuids = [{other}]\nprojects = [\"{{dir}}/theirs\"]\n",
        skills.path().display(),
        my_uid(),
    ));
    let project = daemon.project("job", None);
    let query = format!("/v1/skills?project={}", project.display());
    let (code, listed) = daemon.json(None, "GET", &query, None);
    assert_eq!(code, 200, "{listed}");
    assert!(
        listed["skills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "echo-n"),
        "{listed}"
    );

    let invoke = serde_json::json!({"project": project, "params": {"n": 7}}).to_string();
    let (code, answer) = daemon.json(None, "POST", "/v1/skills/echo-n/invoke", Some(&invoke));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["result"]["n"], 7, "{answer}");
    // Served by a skill host that stays: a second call answers too.
    let (code, answer) = daemon.json(None, "POST", "/v1/skills/echo-n/invoke", Some(&invoke));
    assert_eq!(
        (code, answer["result"]["n"].as_i64()),
        (200, Some(7)),
        "{answer}"
    );

    let (code, missing) = daemon.json(None, "POST", "/v1/skills/nope/invoke", Some(&invoke));
    assert_eq!(code, 404, "{missing}");
    assert_eq!(error_code(&missing), "no_such_skill");

    // Another uid is held to its own rule's projects for skills too.
    let (code, refused) = daemon.json(Some(other), "GET", &query, None);
    assert_eq!(code, 403, "{refused}");
    assert_eq!(error_code(&refused), "project_not_allowed", "{refused}");
    // In its own project it is served as itself: a skill directory of its
    // project linked to one only root can read is not read for it.
    let theirs = daemon.project("theirs", Some(other));
    let hidden = write_skill(
        &daemon.dir().join("root-only"),
        "leaked",
        "root only",
        ("x.sh", "echo '{}'\n"),
        "",
    );
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(theirs.join(".skills")).unwrap();
    std::os::unix::fs::symlink(&hidden, theirs.join(".skills").join("c")).unwrap();
    std::os::unix::fs::lchown(theirs.join(".skills"), Some(other), Some(other)).unwrap();
    let query = format!("/v1/skills?project={}", theirs.display());
    let (code, listed) = daemon.json(Some(other), "GET", &query, None);
    assert_eq!(code, 200, "{listed}");
    assert!(
        !listed.to_string().contains("root only") && !listed.to_string().contains("leaked"),
        "{listed}"
    );
    let invoke = serde_json::json!({"project": theirs, "params": {"n": 3}}).to_string();
    let (code, answer) = daemon.json(
        Some(other),
        "POST",
        "/v1/skills/echo-n/invoke",
        Some(&invoke),
    );
    assert_eq!(
        (code, answer["result"]["n"].as_i64()),
        (200, Some(3)),
        "{answer}"
    );
}

#[test]
fn a_callers_run_has_the_callers_rights_only() {
    let test = "a_callers_run_has_the_callers_rights_only";
    if !support::require_root_sandbox(test)
        || !support::require(
            test,
            "a sandbox as an unprivileged user",
            support::sandbox_works(support::Who::User),
        )
        || !support::require(
            test,
            "/usr/bin/python3",
            Path::new("/usr/bin/python3").exists(),
        )
    {
        return;
    }
    let user = support::TEST_UID;
    let daemon = Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\n[[allow]]\nuids = [{user}]\nprojects = [\"{{dir}}/u\"]\nmax_concurrent = 1\n"
    ));
    // Root's, unreadable to the caller.
    let secret = daemon.project("secret", None);
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(secret.join("flag"), "TOPSECRET").unwrap();
    let home = daemon.project("u", Some(user));
    let first = daemon.project("u/p1", Some(user));
    let second = daemon.project("u/p2", Some(user));

    // 1. The project is swapped for a link to root's directory after the
    //    daemon checked it, while the run waits in the queue.
    let (code, blocker) = daemon.json(
        Some(user),
        "POST",
        "/v1/runs",
        // Holds the only slot until the test lets it go, after the swap.
        Some(&submit(
            &first,
            &["/bin/sh", "-c", "until [ -e go ]; do sleep 0.05; done"],
            false,
        )),
    );
    assert_eq!(code, 202, "{blocker}");
    let (code, queued) = daemon.json(
        Some(user),
        "POST",
        "/v1/runs",
        Some(&submit(
            &second,
            &["/bin/sh", "-c", "cat flag; echo pwned > owned; id -u"],
            false,
        )),
    );
    assert_eq!(code, 202, "{queued}");
    std::fs::rename(&second, home.join("p2.old")).unwrap();
    std::os::unix::fs::symlink(&secret, &second).unwrap();
    std::fs::write(first.join("go"), "").unwrap();
    let id = queued["id"].as_str().unwrap();
    let run = daemon.wait_finished_as(Some(user), id);
    let (_, events) = daemon.curl(Some(user), "GET", &format!("/v1/runs/{id}/events"), None);
    assert!(
        !events.contains("TOPSECRET"),
        "the run read root's file: {events}\n{run}"
    );
    assert!(
        !secret.join("owned").exists(),
        "the run wrote into root's directory: {events}"
    );

    // 2. The broker acts with the caller's rights: a root-only file in the
    //    caller's own project is not read for it.
    let third = daemon.project("u/p3", Some(user));
    std::fs::write(third.join("rootfile"), "ROOTONLY").unwrap();
    std::fs::set_permissions(
        third.join("rootfile"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let script = "import socket\ns = socket.socket(fileno=3)\n\
         s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"fs.read\",\"params\":{\"path\":\"rootfile\"}}\\n')\n\
         print(s.recv(65536).decode())\n";
    let (code, run) = daemon.json(
        Some(user),
        "POST",
        "/v1/runs",
        Some(&submit(&third, &["/usr/bin/python3", "-c", script], true)),
    );
    assert_eq!(code, 200, "{run}");
    let id = run["id"].as_str().unwrap();
    let (_, events) = daemon.curl(Some(user), "GET", &format!("/v1/runs/{id}/events"), None);
    assert!(
        events.contains("\\\"error\\\""),
        "the broker answered: {events}"
    );
    assert!(
        !events.contains("ROOTONLY"),
        "the broker read root's file: {events}"
    );
    let (code, blocker_run) = daemon.json(
        Some(user),
        "GET",
        &format!("/v1/runs/{}", blocker["id"].as_str().unwrap()),
        None,
    );
    assert_eq!(code, 200);
    assert_eq!(
        blocker_run["status"], 0,
        "a caller's run still runs: {blocker_run}"
    );
}

#[test]
fn hanging_skill_calls_cannot_stall_the_daemon() {
    let test = "hanging_skill_calls_cannot_stall_the_daemon";
    if !support::require_root_sandbox(test) {
        return;
    }
    let skills = open_dir();
    write_skill(
        skills.path(),
        "hang",
        "never answers",
        ("hang.sh", "sleep 600\n"),
        "timeout: 10m\n",
    );
    let daemon = Daemon::start(&format!(
        "[daemon]\nskills_dirs = [\"{}\"]\n[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        skills.path().display(),
        my_uid(),
    ));
    let project = daemon.project("job", None);
    let invoke = serde_json::json!({"project": project, "params": {}}).to_string();
    let socket = daemon.socket.clone();
    let mut hung = Vec::new();
    for _ in 0..4 {
        let (socket, invoke) = (socket.clone(), invoke.clone());
        hung.push(
            Command::new("curl")
                .args([
                    "-s",
                    "--max-time",
                    "120",
                    "-H",
                    "content-type: application/json",
                ])
                .arg("--unix-socket")
                .arg(&socket)
                .args(["-d", &invoke, "http://daemon/v1/skills/hang/invoke"])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    let mut info = Value::Null;
    let waiting = support::wait::holds_within(Duration::from_secs(30), || {
        info = daemon.json(None, "GET", "/v1/info", None).1;
        info["skills"]["calls_waiting"] == 4
    });
    assert!(waiting, "{info}");
    // A fifth call of the same caller is turned away at once.
    let (code, busy) = daemon.json(None, "POST", "/v1/skills/hang/invoke", Some(&invoke));
    assert_eq!(code, 503, "{busy}");
    assert_eq!(error_code(&busy), "skills_busy", "{busy}");
    // And runs still go through.
    let (code, run) = daemon.json(
        None,
        "POST",
        "/v1/runs",
        Some(&submit(&project, &["/bin/true"], true)),
    );
    assert_eq!((code, run["status"].as_i64()), (200, Some(0)), "{run}");
    for mut call in hung {
        let _ = call.kill();
        let _ = call.wait();
    }
}

#[test]
fn one_uid_cannot_hold_every_connection() {
    let test = "one_uid_cannot_hold_every_connection";
    if !support::require_root_sandbox(test) {
        return;
    }
    let other = support::TEST_UID;
    let daemon = Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\n[[allow]]\nuids = [{}, {other}]\nprojects = [\"{{dir}}\"]\n",
        my_uid()
    ));
    // This uid opens more connections than it may hold, each with half a
    // request, and keeps them.
    let limit = sandbox_daemon::listener::MAX_CONNECTIONS_PER_UID;
    let mut held = Vec::new();
    for _ in 0..limit + 8 {
        let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
        use std::io::Write;
        let _ = stream.write_all(b"GET /v1/info HTTP/1.1\r\nHost: x\r\n");
        held.push(stream);
    }
    // The ones past the limit are closed by the daemon.
    let mut closed = 0;
    for stream in &mut held[limit..] {
        stream
            .set_read_timeout(Some(support::wait::limit(Duration::from_secs(10))))
            .unwrap();
        let mut byte = [0u8; 1];
        // Closed with the half request unread: end of file or a reset.
        match stream.read(&mut byte) {
            Ok(0) => closed += 1,
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, 8, "the connections past {limit} are closed");
    // Another user still gets in.
    let (code, info) = daemon.json(Some(other), "GET", "/v1/info", None);
    assert_eq!(code, 200, "{info}");
    drop(held);
    let (code, info) = daemon.json(None, "GET", "/v1/info", None);
    assert_eq!(code, 200, "{info}");
}

#[test]
fn descriptors_the_daemon_inherited_reach_none_of_its_children() {
    let test = "descriptors_the_daemon_inherited_reach_none_of_its_children";
    if !support::require_root_sandbox(test) {
        return;
    }
    // A pipe without close-on-exec, as a careless parent would leave it:
    // the daemon inherits it.
    let (read, write) = nix::unistd::pipe().unwrap();
    let leaked = std::fs::metadata(format!("/proc/self/fd/{}", write.as_raw_fd()))
        .unwrap()
        .ino();
    let daemon = Daemon::start(&format!(
        "[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        my_uid()
    ));
    drop((read, write));
    let daemon_pid = daemon.pid();
    let launcher = daemon.launcher_pid().expect("the daemon's launcher");
    let holds = |pid: i32| -> bool {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|entries| {
                entries
                    .flatten()
                    .any(|entry| std::fs::metadata(entry.path()).is_ok_and(|m| m.ino() == leaked))
            })
            .unwrap_or(false)
    };
    assert!(
        holds(daemon_pid as i32),
        "the test's premise: the daemon inherited it"
    );
    assert!(
        !holds(launcher as i32),
        "the launcher holds the daemon's inherited pipe"
    );
}

#[test]
fn a_skills_log_lines_are_marked_with_their_caller() {
    let test = "a_skills_log_lines_are_marked_with_their_caller";
    if !support::require_root_sandbox(test) {
        return;
    }
    let skills = open_dir();
    write_skill(
        skills.path(),
        "noisy",
        "logs",
        (
            "noisy.sh",
            "printf 'sandbox daemon: FORGED\\033[2J\\n' >&2\necho '{}'\n",
        ),
        "",
    );
    let daemon = Daemon::start(&format!(
        "[daemon]\nskills_dirs = [\"{}\"]\n[[allow]]\nuids = [{}]\nprojects = [\"{{dir}}\"]\n",
        skills.path().display(),
        my_uid(),
    ));
    let project = daemon.project("job", None);
    let invoke = serde_json::json!({"project": project, "params": {}}).to_string();
    let _ = daemon.json(None, "POST", "/v1/skills/noisy/invoke", Some(&invoke));
    let logged =
        support::wait::holds_within(Duration::from_secs(20), || daemon.log().contains("FORGED"));
    assert!(logged, "{}", daemon.log());
    let log = daemon.log();
    for line in log.lines().filter(|l| l.contains("FORGED")) {
        // The daemon's own prefix (time, level, source) comes first on
        // every line that holds the skill's text.
        let marked = format!(" WARN skills of uid {}: ", my_uid());
        let (head, _) = line
            .split_once(&marked)
            .unwrap_or_else(|| panic!("{line:?}"));
        assert!(!head.contains("FORGED"), "{line:?}");
        assert!(
            !line.contains('\u{1b}'),
            "escape sequences are escaped: {line:?}"
        );
    }
}
