//! A caller against the daemon that runs its commands. The caller's run is
//! supervised by a process of the caller's uid, which the caller may
//! ptrace or copy descriptors from (pidfd_getfd): each test does that for
//! real and checks that what root keeps (the spool, the run's record, the
//! open questions, the daemon's memory and journal) does not depend on it.
//! And a caller asks for projects where it cannot look.

mod support;

use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon::Daemon;
use support::{Project, Who};

fn ready(test: &str) -> bool {
    support::require_root_daemon(test)
        && support::require(
            test,
            "python3 (the attacker's pidfd_getfd)",
            support::commands_exist(&["python3"]),
        )
        && support::require_user_sandbox(test)
}

/// Root sees every run; the test user may run `strict` in `project`.
fn daemon_for(project: &Project) -> Daemon {
    Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\n\
         [[allow]]\nuids = [0]\nprojects = [\"/tmp\"]\nsee_all = true\n\
         [[allow]]\nuids = [{}]\nprofiles = [\"strict\"]\nprojects = [\"{}\"]\n",
        support::TEST_UID,
        project.path().display()
    ))
}

/// The test user's run of `sleep 600`, through the CLI.
fn sleeping_run(daemon: &Daemon, project: &Project, extra: &[&str]) -> Child {
    daemon
        .cli_as_user(project.path())
        .arg("run")
        .args(extra)
        .args(["--", "/bin/sh", "-c", "exec sleep 600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sandbox run starts")
}

fn cancel_and_wait(daemon: &Daemon, id: &str, mut client: Child) -> Value {
    let (status, _) = daemon.request("POST", &format!("/v1/runs/{id}/cancel"), None);
    assert!(
        status == 200 || status == 202 || status == 409,
        "cancel {id}: {status}"
    );
    let run = daemon.wait_finished(id);
    let _ = client.wait();
    run
}

/// The caller sends its own supervisor SIGSTOP (it is the caller's
/// process), and the supervisor is stopped. `kill` returns once the
/// signal is sent; a supervisor running on the other CPU stops a moment
/// later, so its state is waited for.
fn stop_as_caller(pid: u32) {
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .uid(support::TEST_UID)
        .gid(support::TEST_GID)
        .status()
        .unwrap();
    assert!(stopped.success(), "the caller stops its own supervisor");
    support::wait::until_true(
        "the supervisor to be stopped",
        Duration::from_secs(10),
        || {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            state
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        },
    );
}

fn size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Found by an attacker: 12 MiB written into root's spool past a 1 MiB
/// output cap through the supervisor's log descriptor. The log and audit
/// files stay within the cap's bound (twice the cap for escaping, and
/// room for the records around), and nothing the caller writes reaches
/// the daemon's own journal (its stdout and stderr).
#[test]
fn the_spool_stays_within_the_output_cap_whatever_the_supervisor_writes() {
    let test = "the_spool_stays_within_the_output_cap_whatever_the_supervisor_writes";
    if !ready(test) {
        return;
    }
    let project = Project::new(Who::User);
    let daemon = daemon_for(&project);
    let client = sleeping_run(&daemon, &project, &["--max-output", "1MiB"]);
    let (id, log, pid) = support::daemon::caller_run_supervisor(&daemon);
    let before = support::daemon::peak_rss_kib(daemon.pid());
    let attack = support::daemon::steal_and_write(pid, "flood");
    assert_eq!(attack["pidfd"], true, "{attack}");
    // No file of root's among them: the spool and the journal are pipes
    // the daemon reads, or not there at all.
    let files: Vec<&String> = attack["copied"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, kind)| *kind == "reg")
        .map(|(fd, _)| fd)
        .collect();
    assert!(
        files.is_empty(),
        "the supervisor holds regular files {files:?} ({attack})"
    );
    let run = cancel_and_wait(&daemon, &id, client);
    let bound = 2 * (1 << 20) + 2 * (64 << 10) + (8 << 10);
    let audit = log.with_file_name("audit.ndjson");
    assert!(
        size(&log) <= bound && size(&audit) <= bound,
        "the spool grew past the cap's bound of {bound}: log {} bytes, audit {} bytes ({attack})",
        size(&log),
        size(&audit)
    );
    let journal = daemon.log();
    assert!(
        !journal.contains("xxxxxxxxxxxxxxxx"),
        "the caller wrote into the daemon's journal ({attack}): {} bytes",
        journal.len()
    );
    assert_eq!(run["state"], "cancelled", "{run}");
    eprintln!(
        "{test}: log {} bytes, audit {} bytes, daemon VmHWM {before} KiB before, {} KiB after",
        size(&log),
        size(&audit),
        support::daemon::peak_rss_kib(daemon.pid())
    );
}

/// Found by an attacker: a forged `finished` saying status 0 on the
/// supervisor's events socket, then the supervisor killed, and the record
/// said "exited 0" with a made-up report. The record's end is what root
/// saw (the launcher's wait: SIGKILL), and the report is labelled as the
/// supervisor's.
#[test]
fn a_forged_finished_does_not_make_a_killed_run_exit_0() {
    if !ready("a_forged_finished_does_not_make_a_killed_run_exit_0") {
        return;
    }
    let project = Project::new(Who::User);
    let daemon = daemon_for(&project);
    let mut client = sleeping_run(&daemon, &project, &[]);
    let (id, log, pid) = support::daemon::caller_run_supervisor(&daemon);
    let attack = support::daemon::steal_and_write(pid, "finished");
    assert_eq!(attack["pidfd"], true, "{attack}");
    assert!(
        !attack["written"].as_array().unwrap().is_empty(),
        "the events socket was not reached: {attack}"
    );
    let run = daemon.wait_finished(&id);
    let _ = client.wait();
    assert_ne!(run["state"], "exited", "{run}\n{}", daemon.log());
    assert_eq!(run["status"], 128 + 9, "{run}");
    if !run["report"].is_null() {
        assert_eq!(run["report"]["reported_by"], "supervisor", "{run}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let end: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(end["type"], "end");
    assert_eq!(end["state"], run["state"], "{end}");
    assert_eq!(end["status"], 137, "{end}");
}

/// Found by an attacker: after a forged `finished`, the daemon signed an
/// attestation whose `profile` and `command` (what `attest verify`
/// prints) were the forged report's. They are what the daemon resolved
/// and launched; the report stays the supervisor's, labelled so.
#[test]
fn a_forged_report_does_not_name_the_profile_or_command_the_daemon_signs() {
    if !ready("a_forged_report_does_not_name_the_profile_or_command_the_daemon_signs") {
        return;
    }
    let project = Project::new(Who::User);
    let daemon = daemon_for(&project);
    let mut client = sleeping_run(&daemon, &project, &[]);
    let (id, _, pid) = support::daemon::caller_run_supervisor(&daemon);
    let attack = support::daemon::steal_and_write(pid, "finished");
    assert!(
        !attack["written"].as_array().unwrap().is_empty(),
        "the events socket was not reached: {attack}"
    );
    let run = daemon.wait_finished(&id);
    let _ = client.wait();
    assert_eq!(run["report"]["profile"], "forged-profile", "{run}");
    let (code, envelope) = daemon.json(
        Some(support::TEST_UID),
        "GET",
        &format!("/v1/runs/{id}/attestation"),
        None,
    );
    assert_eq!(code, 200, "{envelope}\n{}", daemon.log());
    use base64::Engine as _;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(envelope["payload"].as_str().unwrap())
        .unwrap();
    let statement: Value = serde_json::from_slice(&payload).unwrap();
    let predicate = &statement["predicate"];
    assert_eq!(predicate["profile"]["name"], "strict", "{predicate}");
    assert_eq!(
        predicate["command"],
        json!(["/bin/sh", "-c", "exec sleep 600"]),
        "{predicate}"
    );
    assert_eq!(predicate["daemon"]["profile"], "strict", "{predicate}");
}

/// Found by an attacker: 50,000 forged open questions with far deadlines
/// were all kept and listed. A run keeps at most four open questions, with
/// deadlines no later than the daemon's own; the daemon's peak memory
/// under the attack is printed.
#[test]
fn forged_questions_are_bounded_per_run() {
    let test = "forged_questions_are_bounded_per_run";
    if !ready(test) {
        return;
    }
    let project = Project::new(Who::User);
    let daemon = daemon_for(&project);
    let client = sleeping_run(&daemon, &project, &[]);
    let (id, _, pid) = support::daemon::caller_run_supervisor(&daemon);
    let before = support::daemon::peak_rss_kib(daemon.pid());
    let attack = support::daemon::steal_and_write(pid, "asks");
    assert!(
        !attack["written"].as_array().unwrap().is_empty(),
        "the events socket was not reached: {attack}"
    );
    // The attacker waited until the daemon had read every byte; the last
    // few lines may still be in its buffer: the listing is read until it
    // is stable over a request.
    let listed = |daemon: &Daemon| {
        let (status, body) = daemon.request("GET", "/v1/approvals", None);
        assert_eq!(status, 200, "{body}");
        let all = body["approvals"].as_array().cloned().unwrap_or_default();
        all.into_iter()
            .filter(|q| q["run"] == id.as_str())
            .collect::<Vec<_>>()
    };
    let mut open = listed(&daemon);
    support::wait::within(Duration::from_secs(30), || {
        let again = listed(&daemon);
        let stable = again.len() == open.len();
        open = again;
        stable.then_some(())
    });
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        open.len() <= 4,
        "{} open questions kept for one run",
        open.len()
    );
    let (_, body) = daemon.request("GET", "/v1/approvals", None);
    assert!(
        !open.is_empty(),
        "no forged question reached the daemon ({attack}): {body}\n{}",
        daemon.log()
    );
    for question in &open {
        let deadline = question["deadline_ms"].as_u64().unwrap();
        assert!(
            deadline <= now_ms + 300_000,
            "a forged deadline was kept: {question}"
        );
    }
    let rss = support::daemon::peak_rss_kib(daemon.pid());
    let run = cancel_and_wait(&daemon, &id, client);
    let log = std::fs::read_to_string(daemon.state.join("spool").join(&id).join("log.ndjson"))
        .unwrap_or_default();
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for record in log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        *kinds.entry(record["type"].to_string()).or_default() += 1;
    }
    assert_eq!(
        run["state"],
        "cancelled",
        "{run}\nattack: {attack}\nlog: {kinds:?}\n{}",
        daemon.log()
    );
    eprintln!(
        "{test}: {} kept, daemon VmHWM {before} KiB before, {rss} KiB after ({attack})",
        open.len()
    );
}

/// The daemon resolved a request's project as root and said what it
/// found: "No such file or directory" for a path that is not there, a
/// rule refusal for one that is, inside a directory only root may read.
/// Resolved with the caller's rights, both answers are the same.
#[test]
fn a_caller_learns_nothing_of_paths_it_cannot_see() {
    if !ready("a_caller_learns_nothing_of_paths_it_cannot_see") {
        return;
    }
    let project = Project::new(Who::User);
    let daemon = daemon_for(&project);
    let hidden = tempfile::Builder::new()
        .prefix("sandbox-hidden-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::create_dir(hidden.path().join("there")).unwrap();
    // 0700 root: the caller cannot look inside.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(hidden.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let answer = |path: std::path::PathBuf, cwd: Option<&str>| {
        let mut body = json!({"command": ["true"], "project": path, "profile": "strict"});
        if let Some(cwd) = cwd {
            body["cwd"] = json!(cwd);
        }
        let script = format!(
            "import json, socket, sys\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.connect({socket:?})\n\
             body = sys.argv[1].encode()\n\
             s.sendall(b'POST /v1/runs HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n' % len(body) + body)\n\
             out = b''\n\
             while True:\n\
             \x20   chunk = s.recv(65536)\n\
             \x20   if not chunk: break\n\
             \x20   out += chunk\n\
             print(out.split(b'\\r\\n\\r\\n', 1)[1].decode())\n",
            socket = daemon.socket.display().to_string()
        );
        let out = std::process::Command::new("python3")
            .args(["-c", &script, &body.to_string()])
            .uid(support::TEST_UID)
            .gid(support::TEST_GID)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // Chunked or not, the JSON object is in there.
        let start = text.find('{').unwrap_or(0);
        let end = text.rfind('}').map_or(text.len(), |e| e + 1);
        serde_json::from_str::<Value>(&text[start..end])
            .unwrap_or_else(|_| panic!("no JSON answer: {text}"))
    };
    let there = answer(hidden.path().join("there"), None);
    let missing = answer(hidden.path().join("missing"), None);
    let shown = |answer: &Value, name: &str| answer.to_string().replace(name, "NAME");
    assert_eq!(
        shown(&there, "there"),
        shown(&missing, "missing"),
        "the answers tell what exists in a directory the caller cannot read"
    );
    // The same for a working directory reached through the caller's own
    // project by a link into the hidden directory.
    std::os::unix::fs::symlink(hidden.path(), project.path().join("peek")).unwrap();
    let there = answer(project.path().to_path_buf(), Some("peek/there"));
    let missing = answer(project.path().to_path_buf(), Some("peek/missing"));
    assert_eq!(
        shown(&there, "there"),
        shown(&missing, "missing"),
        "the cwd answers tell what exists where the caller cannot read"
    );
}

/// A caller stops its run's supervisor (SIGSTOP: it is the caller's
/// process): a cancel it never carries out must still end the run, or the
/// run holds its slot (and its command runs on) for as long as the caller
/// likes. Root kills the supervisor once the cancel's grace is over.
#[test]
fn a_stopped_supervisor_does_not_outlive_a_cancel() {
    if !ready("a_stopped_supervisor_does_not_outlive_a_cancel") {
        return;
    }
    let project = Project::new(Who::User);
    let daemon = daemon_for(&project);
    let mut client = sleeping_run(&daemon, &project, &[]);
    let (id, _, pid) = support::daemon::caller_run_supervisor(&daemon);
    stop_as_caller(pid);
    let (status, _) = daemon.request("POST", &format!("/v1/runs/{id}/cancel"), None);
    assert!(status == 200 || status == 202, "cancel {id}: {status}");
    let run = daemon.wait_finished(&id);
    let _ = client.wait();
    assert_eq!(run["state"], "cancelled", "{run}\n{}", daemon.log());
    assert_eq!(run["status"], 137, "{run}");
}

/// The run's timeout is enforced by its supervisor, which the caller may
/// stop: root ends a run whose supervisor outlives its timeout, or a
/// stopped supervisor would hold the run's slot (and its command would
/// run on) for as long as the caller likes.
#[test]
fn a_stopped_supervisor_does_not_outlive_the_runs_timeout() {
    if !ready("a_stopped_supervisor_does_not_outlive_the_runs_timeout") {
        return;
    }
    let project = Project::new(Who::User);
    let daemon = daemon_for(&project);
    // Long enough that the supervisor is stopped well before its own
    // timeout fires (stop_as_caller waits until it is).
    let mut client = sleeping_run(&daemon, &project, &["--timeout", "10s"]);
    let (id, _, pid) = support::daemon::caller_run_supervisor(&daemon);
    stop_as_caller(pid);
    let run = daemon.wait_finished(&id);
    let _ = client.wait();
    assert_eq!(run["state"], "failed", "{run}\n{}", daemon.log());
    assert_eq!(run["status"], 137, "{run}");
    assert!(
        daemon.log().contains("did not end on its timeout; killed"),
        "{}",
        daemon.log()
    );
}
