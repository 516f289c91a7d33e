//! Attacks on the daemon's warm sandboxes: what happens to the project
//! between the sandbox's walk and its commit must not let the payload do
//! what a cold run of the same command would refuse.

mod daemon_support;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use daemon_support::Daemon;
use serde_json::{json, Value};

fn pooled_daemon() -> Daemon {
    Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 4\n[pool]\nenabled = true\nidle = \"60s\"\n[[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\n",
        nix::unistd::geteuid().as_raw()
    ))
}

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

fn wait_for_warm_sandbox(daemon: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let (_, info) = daemon.request("GET", "/v1/info", None);
        if info["pool"]["ready"].as_u64().unwrap_or(0) > 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no warm sandbox was prepared:\n{}", daemon.log());
}

/// A project file that gains a hard link outside the project after the
/// warm sandbox's walk (a local `git clone`, a `cp -al` backup) is one a
/// cold run mounts read-only: the warm run must not let the payload write
/// the outside file through it. The new link is made outside the project,
/// so no watch on the project's directories sees it; only the file's own
/// link count changes.
#[test]
fn a_hard_link_made_outside_after_the_walk_does_not_let_a_warm_run_write_through_it() {
    if !support::require_root_sandbox(
        "a_hard_link_made_outside_after_the_walk_does_not_let_a_warm_run_write_through_it",
    ) {
        return;
    }
    let daemon = pooled_daemon();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let outside = tempfile::tempdir_in("/tmp").expect("outside");
    std::fs::create_dir(project.path().join("sub")).expect("sub");
    let inside = project.path().join("sub/shared.txt");
    std::fs::write(&inside, "original\n").expect("file");
    let (first, _, _) = run(&daemon, project.path(), &["true"]);
    assert_eq!(first["status"], 0, "{first}");
    wait_for_warm_sandbox(&daemon);
    let victim = outside.path().join("shared.txt");
    std::fs::hard_link(&inside, &victim).expect("link outside");
    let (second, out, err) = run(
        &daemon,
        project.path(),
        &["sh", "-c", "echo tampered > sub/shared.txt; echo wrote=$?"],
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("outside file"),
        "original\n",
        "the payload wrote a file outside the project through a hard link: {second}\n{out}{err}\n{}",
        daemon.log()
    );
}
