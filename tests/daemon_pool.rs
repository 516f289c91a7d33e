//! Warm sandboxes through a real `sandbox daemon` with `[pool] enabled`:
//! the second run of a key takes the sandbox prepared after the first and
//! behaves exactly as a cold run (status, output, every layer in force);
//! a file created in the project after the sandbox was prepared sends the
//! run cold; a warm sandbox serves one run only.

mod daemon_support;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use daemon_support::Daemon;
use serde_json::{json, Value};

fn my_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn pooled_daemon() -> Daemon {
    Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 4\n[pool]\nenabled = true\nidle = \"60s\"\n[[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\n",
        my_uid()
    ))
}

/// Submit, wait for the end, and return (run object, stdout, stderr).
fn run(daemon: &Daemon, project: &Path, command: &[&str]) -> (Value, String, String) {
    let body = json!({"command": command, "project": project});
    let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 202, "{answer}\n{}", daemon.log());
    let id = answer["id"].as_str().expect("run id").to_string();
    let finished = daemon.wait_finished(&id);
    let (stdout, stderr, _) = daemon.output(&id);
    (
        finished,
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// The warm sandbox of the project's key is prepared: a warm supervisor
/// process waits (its name is `sandbox-warm`).
fn wait_for_warm_sandbox(daemon: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if warm_supervisors() > 0 {
            // Ready is announced after the sandbox is built: give the
            // launcher's message the time to reach the daemon.
            std::thread::sleep(Duration::from_millis(1500));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no warm sandbox was prepared:\n{}", daemon.log());
}

fn warm_supervisors() -> usize {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            std::fs::read_to_string(entry.path().join("comm"))
                .is_ok_and(|comm| comm.trim() == "sandbox-warm")
        })
        .count()
}

const PROBE: &str = "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; \
     touch /usr/pool-escape 2>/dev/null && echo WROTE-OUTSIDE; \
     unshare -U true 2>/dev/null && echo UNSHARED; \
     echo made > inside.txt; cat inside.txt; exit 7";

#[test]
fn a_second_run_is_warm_and_behaves_as_a_cold_one() {
    if !support::require_root_sandbox("a_second_run_is_warm_and_behaves_as_a_cold_one") {
        return;
    }
    let daemon = pooled_daemon();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let (cold, cold_out, _) = run(&daemon, project.path(), &["sh", "-c", PROBE]);
    assert_eq!(cold["report"]["warm"], false, "{cold}");
    wait_for_warm_sandbox(&daemon);
    let (warm, warm_out, warm_err) = run(&daemon, project.path(), &["sh", "-c", PROBE]);
    assert_eq!(warm["report"]["warm"], true, "{warm}\n{}", daemon.log());
    assert_eq!(warm["status"], 7, "{warm}\n{warm_err}");
    assert_eq!(cold["status"], 7, "{cold}");
    assert_eq!(warm_out, cold_out, "{warm_err}");
    assert!(warm_out.contains("Seccomp:\t2"), "{warm_out}");
    assert!(warm_out.contains("NoNewPrivs:\t1"), "{warm_out}");
    assert!(!warm_out.contains("WROTE-OUTSIDE"), "{warm_out}");
    assert!(!warm_out.contains("UNSHARED"), "{warm_out}");
    assert!(warm_out.contains("made"), "{warm_out}");
    assert!(!Path::new("/usr/pool-escape").exists());
    assert_eq!(warm["report"]["command"], cold["report"]["command"]);
    assert_eq!(
        warm["report"]["measured"], cold["report"]["measured"],
        "the payload's own view of its confinement"
    );
    // A different profile never gets the strict run's warm sandbox.
    wait_for_warm_sandbox(&daemon);
    let body = json!({"command": ["true"], "project": project.path(), "profile": "standard"});
    let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 202, "{answer}");
    let other = daemon.wait_finished(answer["id"].as_str().expect("id"));
    assert_eq!(other["report"]["warm"], false, "{other}");
    // Each warm sandbox serves one run: the next warm run has a sandbox
    // (an init) of its own.
    let (third, _, _) = run(&daemon, project.path(), &["true"]);
    let _ = third;
    wait_for_warm_sandbox(&daemon);
    let (fourth, _, _) = run(&daemon, project.path(), &["true"]);
    assert_eq!(fourth["report"]["warm"], true, "{fourth}\n{}", daemon.log());
    assert_ne!(init_pid(&daemon, &warm), init_pid(&daemon, &fourth));
}

fn init_pid(daemon: &Daemon, run: &Value) -> Value {
    let (_, _, records) = daemon.output(run["id"].as_str().expect("id"));
    records
        .iter()
        .find(|r| r["type"] == "started")
        .map(|r| r["init_pid"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn a_file_created_after_the_sandbox_was_prepared_sends_the_run_cold() {
    if !support::require_root_sandbox(
        "a_file_created_after_the_sandbox_was_prepared_sends_the_run_cold",
    ) {
        return;
    }
    let daemon = pooled_daemon();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    std::fs::create_dir(project.path().join("sub")).expect("sub");
    let (first, _, _) = run(&daemon, project.path(), &["true"]);
    assert_eq!(first["report"]["warm"], false, "{first}");
    wait_for_warm_sandbox(&daemon);
    // A `.env` a cold run would hide, created below the project after the
    // warm sandbox's walk.
    std::fs::write(project.path().join("sub/.env"), "TOKEN=secret\n").expect(".env");
    let (second, out, err) = run(&daemon, project.path(), &["sh", "-c", "cat sub/.env"]);
    assert_eq!(
        second["report"]["warm"],
        false,
        "{second}\n{}",
        daemon.log()
    );
    assert!(!out.contains("secret"), "{out}{err}");
}
