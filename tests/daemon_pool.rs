//! Warm sandboxes through a real `sandbox daemon` with `[pool] enabled`:
//! the second run of a key takes the sandbox prepared after the first and
//! behaves exactly as a cold run (status, output, every layer in force);
//! a file created in the project after the sandbox was prepared sends the
//! run cold; a warm sandbox serves one run only.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon::{pooled_daemon, run_to_end, wait_for_warm_sandbox, Daemon};

fn my_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The daemon's warm supervisors (`sandbox-warm`, children of its
/// launcher) and every process below them (the sandbox's init and payload).
fn warm_processes(daemon: &Daemon) -> Vec<u32> {
    let Some(launcher) = daemon.launcher_pid() else {
        return Vec::new();
    };
    let mut found: Vec<u32> = support::children_of(launcher)
        .into_iter()
        .filter(|pid| comm(*pid) == "sandbox-warm")
        .collect();
    let mut next = 0;
    while next < found.len() {
        let below = support::children_of(found[next]);
        found.extend(below);
        next += 1;
    }
    found
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_default()
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
    let (cold, cold_out, _) = run_to_end(&daemon, project.path(), &["sh", "-c", PROBE]);
    assert_eq!(cold["report"]["warm"], false, "{cold}");
    wait_for_warm_sandbox(&daemon);
    let (warm, warm_out, warm_err) = run_to_end(&daemon, project.path(), &["sh", "-c", PROBE]);
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
    let (third, _, _) = run_to_end(&daemon, project.path(), &["true"]);
    let _ = third;
    wait_for_warm_sandbox(&daemon);
    let (fourth, _, _) = run_to_end(&daemon, project.path(), &["true"]);
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
    let (first, _, _) = run_to_end(&daemon, project.path(), &["true"]);
    assert_eq!(first["report"]["warm"], false, "{first}");
    wait_for_warm_sandbox(&daemon);
    // A `.env` a cold run would hide, created below the project after the
    // warm sandbox's walk.
    std::fs::write(project.path().join("sub/.env"), "TOKEN=secret\n").expect(".env");
    let (second, out, err) = run_to_end(&daemon, project.path(), &["sh", "-c", "cat sub/.env"]);
    // The pool may have prepared another warm sandbox meanwhile (it keeps
    // some ahead): one whose walk came after the file hides it, and may
    // be used. One prepared before may not.
    let hidden_by_its_walk = second["report"]["enforced"]["project_view"]["secrets_hidden"]
        .as_array()
        .is_some_and(|h| h.iter().any(|p| p == "sub/.env"));
    assert!(
        second["report"]["warm"] == false || hidden_by_its_walk,
        "a warm sandbox prepared before sub/.env existed ran the command\n{second}\n{}",
        daemon.log()
    );
    assert!(!out.contains("secret"), "{out}{err}");
}

/// A process's start time (`/proc/PID/stat` field 22): with the pid it
/// names one process, so a reused pid is not taken for a survivor.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The cgroup directories (v1 memory and pids, or v2) a process is in,
/// when they are not the ones `besides` is in.
fn own_cgroups(pid: u32, besides: u32) -> Vec<std::path::PathBuf> {
    let dirs = |pid: u32| -> Vec<std::path::PathBuf> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let mut fields = line.splitn(3, ':');
                let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                let base = match controllers {
                    "" => "/sys/fs/cgroup/unified".to_string(),
                    c if c.split(',').any(|c| c == "memory") => "/sys/fs/cgroup/memory".into(),
                    c if c.split(',').any(|c| c == "pids") => "/sys/fs/cgroup/pids".into(),
                    _ => return None,
                };
                let base = match controllers {
                    "" if !Path::new(&base).exists() => "/sys/fs/cgroup".to_string(),
                    _ => base,
                };
                Some(Path::new(&base).join(path.trim_start_matches('/')))
            })
            .collect()
    };
    let theirs = dirs(besides);
    dirs(pid)
        .into_iter()
        .filter(|dir| !theirs.contains(dir) && dir.is_dir())
        .collect()
}

fn wait_gone(what: &str, mut alive: impl FnMut() -> Vec<String>) {
    let mut left = Vec::new();
    let gone = support::wait::holds_within(Duration::from_secs(60), || {
        left = alive();
        left.is_empty()
    });
    assert!(gone, "{what} still there: {left:?}");
}

#[test]
fn another_caller_never_gets_the_first_callers_warm_sandbox() {
    if !support::require_root_sandbox("another_caller_never_gets_the_first_callers_warm_sandbox")
        || !support::require(
            "another_caller_never_gets_the_first_callers_warm_sandbox",
            "user namespaces for an unprivileged user",
            support::sandbox_works(support::Who::User),
        )
    {
        return;
    }
    let daemon = Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 4\nsocket_mode = \"0666\"\n[pool]\nenabled = true\nidle = \"60s\"\n\
         [[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\nsee_all = true\n\
         [[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\nany_owner = true\n",
        my_uid(),
        support::TEST_UID
    ));
    let project = support::Project::new(support::Who::Root);
    // The first caller's run carries an environment of its own; the warm
    // sandbox prepared after it is that caller's.
    let body = json!({"command": ["true"], "project": project.path(),
                      "env": {"POOL_FIRST_CALLER": "root-only-value"}});
    let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 202, "{answer}");
    daemon.wait_finished(answer["id"].as_str().expect("id"));
    wait_for_warm_sandbox(&daemon);
    let warm_before = warm_processes(&daemon);
    assert!(!warm_before.is_empty(), "{}", daemon.log());

    let marker = support::marker("pool-other-caller");
    let out = daemon
        .cli_as_user(project.path())
        .args([
            "run",
            "--",
            "sh",
            "-c",
            &format!("echo {marker}; env; id -u"),
        ])
        .output()
        .expect("sandbox run as the second caller");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    assert!(!stdout.contains("root-only-value"), "{stdout}");
    assert!(!stdout.contains("POOL_FIRST_CALLER"), "{stdout}");
    let theirs = daemon.find_run(&marker);
    let (_, theirs) = daemon.request(
        "GET",
        &format!("/v1/runs/{}", theirs["id"].as_str().expect("id")),
        None,
    );
    assert_eq!(theirs["uid"], support::TEST_UID, "{theirs}");
    assert_eq!(theirs["report"]["warm"], false, "{theirs}");
    // The first caller's warm sandbox was there all along, untouched: its
    // next run takes it, and sees nothing of the run before it either.
    let (mine, out, _) = run_to_end(&daemon, project.path(), &["env"]);
    assert_eq!(mine["report"]["warm"], true, "{mine}\n{}", daemon.log());
    assert!(!out.contains("root-only-value"), "{out}");
    // The record says the run ended when its command did; the sandbox's
    // processes are reaped just after.
    wait_gone("the used warm sandbox's processes", || {
        warm_before
            .iter()
            .filter(|pid| start_time(**pid).is_some())
            .map(|pid| pid.to_string())
            .collect()
    });
}

#[test]
fn an_idle_warm_sandbox_is_discarded_with_its_processes_and_cgroups() {
    if !support::require_root_sandbox(
        "an_idle_warm_sandbox_is_discarded_with_its_processes_and_cgroups",
    ) {
        return;
    }
    let daemon = Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 4\n[pool]\nenabled = true\nidle = \"2s\"\n\
         [[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\n",
        my_uid()
    ));
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let (first, _, _) = run_to_end(&daemon, project.path(), &["true"]);
    assert_eq!(first["status"], 0, "{first}");
    wait_for_warm_sandbox(&daemon);
    let processes: Vec<(u32, Option<u64>)> = warm_processes(&daemon)
        .into_iter()
        .map(|pid| (pid, start_time(pid)))
        .collect();
    let names: Vec<String> = processes.iter().map(|(pid, _)| comm(*pid)).collect();
    assert!(
        names.iter().any(|n| n == "sandbox-warm") && names.iter().any(|n| n == "sandbox-init"),
        "a warm supervisor and its sandbox's init: {names:?}"
    );
    let launcher = daemon.launcher_pid().expect("launcher");
    let cgroups: Vec<std::path::PathBuf> = processes
        .iter()
        .flat_map(|(pid, _)| own_cgroups(*pid, launcher))
        .collect();
    wait_gone("the idle warm sandbox's processes", || {
        processes
            .iter()
            .filter(|(pid, start)| start.is_some() && start_time(*pid) == *start)
            .map(|(pid, _)| format!("{pid} {}", comm(*pid)))
            .collect()
    });
    wait_gone("the idle warm sandbox's cgroups", || {
        cgroups
            .iter()
            .filter(|dir| dir.exists())
            .map(|dir| dir.display().to_string())
            .collect()
    });
    let (_, info) = daemon.request("GET", "/v1/info", None);
    assert_eq!(info["pool"]["ready"], 0, "{info}");
    // The key's next run is cold, and runs.
    let (next, out, err) = run_to_end(&daemon, project.path(), &["echo", "after-idle"]);
    assert_eq!(next["report"]["warm"], false, "{next}");
    assert_eq!(out, "after-idle\n", "{err}");
}

#[test]
fn warm_sandboxes_are_drained_for_a_queued_run_and_leave_nothing() {
    if !support::require_root_sandbox(
        "warm_sandboxes_are_drained_for_a_queued_run_and_leave_nothing",
    ) {
        return;
    }
    // One slot: the warm sandbox holds it until a run of another key needs it.
    let daemon = Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 1\n[pool]\nenabled = true\nidle = \"60s\"\n\
         [[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\n",
        my_uid()
    ));
    let project = tempfile::tempdir_in("/tmp").expect("project");
    run_to_end(&daemon, project.path(), &["true"]);
    wait_for_warm_sandbox(&daemon);
    let processes: Vec<(u32, Option<u64>)> = warm_processes(&daemon)
        .into_iter()
        .map(|pid| (pid, start_time(pid)))
        .collect();
    assert!(!processes.is_empty());
    let body = json!({"command": ["echo", "took-the-slot"], "project": project.path(),
                      "profile": "standard"});
    let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 202, "{answer}");
    let id = answer["id"].as_str().expect("id");
    let other = daemon.wait_finished(id);
    assert_eq!(other["status"], 0, "{other}\n{}", daemon.log());
    assert_eq!(other["report"]["warm"], false, "{other}");
    wait_gone("the drained warm sandbox's processes", || {
        processes
            .iter()
            .filter(|(pid, start)| start.is_some() && start_time(*pid) == *start)
            .map(|(pid, _)| format!("{pid} {}", comm(*pid)))
            .collect()
    });
}

#[test]
fn a_timeout_given_at_commit_ends_the_warm_run() {
    if !support::require_root_sandbox("a_timeout_given_at_commit_ends_the_warm_run") {
        return;
    }
    let daemon = pooled_daemon();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    run_to_end(&daemon, project.path(), &["true"]);
    wait_for_warm_sandbox(&daemon);
    let body = json!({"command": ["sleep", "3600"], "project": project.path(),
                      "limits": {"timeout": "1s"}});
    let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 202, "{answer}");
    let finished = daemon.wait_finished(answer["id"].as_str().expect("id"));
    assert_eq!(
        finished["report"]["warm"],
        true,
        "{finished}\n{}",
        daemon.log()
    );
    let hit = finished["report"]["limits_hit"].to_string();
    assert!(hit.contains("timeout"), "{finished}");
    assert_ne!(finished["status"], 0, "{finished}");
}

/// The payload's descriptors: what a warm sandbox's supervisor, launcher or
/// waiting payload held must not reach the command.
#[test]
fn a_warm_payload_holds_exactly_the_descriptors_of_a_cold_one() {
    if !support::require_root_sandbox("a_warm_payload_holds_exactly_the_descriptors_of_a_cold_one")
    {
        return;
    }
    let daemon = pooled_daemon();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let list = "for fd in /proc/self/fd/*; do echo \"${fd##*/} $(readlink $fd | sed 's/[0-9]\\+/N/g')\"; done";
    let (cold, cold_out, _) = run_to_end(&daemon, project.path(), &["sh", "-c", list]);
    assert_eq!(cold["report"]["warm"], false, "{cold}");
    wait_for_warm_sandbox(&daemon);
    let (warm, warm_out, warm_err) = run_to_end(&daemon, project.path(), &["sh", "-c", list]);
    assert_eq!(warm["report"]["warm"], true, "{warm}");
    assert_eq!(warm_out, cold_out, "{warm_err}");
    assert!(
        warm["report"]["commit_to_exec_us"].is_u64(),
        "a warm run's report says how long its commit took to reach exec: {warm}"
    );
}

/// A caller's run in a delegated cgroup, and its warm successor's: the
/// dirs of the warm supervisor's delegated cgroup, once it is in them.
fn warm_delegated_cgroups(daemon: &Daemon, project: &support::Project) -> Vec<std::path::PathBuf> {
    let out = daemon
        .cli_as_user(project.path())
        .args(["run", "--", "true"])
        .output()
        .expect("sandbox run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    // The warm supervisor moves itself into its delegated cgroup before it
    // builds the sandbox below it.
    let launcher = daemon.launcher_pid().expect("launcher");
    let mut delegated = Vec::new();
    let found = support::wait::holds_within(Duration::from_secs(60), || {
        delegated = support::children_of(launcher)
            .into_iter()
            .filter(|pid| comm(*pid) == "sandbox-warm")
            .flat_map(|pid| own_cgroups(pid, launcher))
            .filter(|dir| {
                dir.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("sandbox-run-warm-"))
            })
            .collect();
        !delegated.is_empty()
    });
    assert!(
        found,
        "no warm sandbox in a delegated cgroup:\n{}",
        daemon.log()
    );
    delegated
}

fn users_pooled_daemon(project: &support::Project) -> Daemon {
    Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 4\nsocket_mode = \"0666\"\n[pool]\nenabled = true\nidle = \"600s\"\n\
         [[allow]]\nuids = [0]\nprojects = [\"/tmp\"]\n\
         [[allow]]\nuids = [{}]\nprofiles = [\"strict\"]\nprojects = [\"{}\"]\n",
        support::TEST_UID,
        project.path().display()
    ))
}

/// A daemon that dies (SIGKILL, a crash) sends its launcher SIGTERM (the
/// parent death signal), which ends the warm sandboxes and removes their
/// delegated cgroups all the same.
#[test]
fn a_killed_daemon_leaves_no_warm_cgroup_behind() {
    let test = "a_killed_daemon_leaves_no_warm_cgroup_behind";
    if !support::require_root_sandbox(test) || !support::require_user_sandbox(test) {
        return;
    }
    let project = support::Project::new(support::Who::User);
    let mut daemon = users_pooled_daemon(&project);
    let delegated = warm_delegated_cgroups(&daemon, &project);
    let launcher = daemon.launcher_pid().expect("launcher");
    daemon.kill();
    let gone = support::wait::holds_within(Duration::from_secs(30), || {
        delegated.iter().all(|dir| !dir.exists())
            && !Path::new(&format!("/proc/{launcher}/exe")).exists()
    });
    let left: Vec<_> = delegated.iter().filter(|dir| dir.exists()).collect();
    assert!(
        gone,
        "the killed daemon left its warm sandbox's cgroups: {left:?}"
    );
}

/// A caller's warm sandbox has a delegated cgroup of its own
/// (`sandbox-run-warm-PID-N`, made by root with the run's limits): a daemon
/// that stops with it in the pool removes it, with the warm processes.
#[test]
fn a_stopped_daemon_leaves_no_warm_cgroup_behind() {
    let test = "a_stopped_daemon_leaves_no_warm_cgroup_behind";
    if !support::require_root_sandbox(test) || !support::require_user_sandbox(test) {
        return;
    }
    let project = support::Project::new(support::Who::User);
    let mut daemon = users_pooled_daemon(&project);
    let delegated = warm_delegated_cgroups(&daemon, &project);
    let status = daemon.terminate();
    assert!(status.success(), "{status}\n{}", daemon.log());
    let left: Vec<_> = delegated.iter().filter(|dir| dir.exists()).collect();
    assert!(
        left.is_empty(),
        "the stopped daemon left its warm sandbox's cgroups: {left:?}\n{}",
        daemon.log()
    );
}

/// Submit `command` in `project` and wait until its sandbox runs (its
/// `started` record): it holds its slot from then until it is cancelled.
fn running(daemon: &Daemon, project: &Path, command: &[&str]) -> String {
    let body = json!({"command": command, "project": project});
    let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 202, "{answer}\n{}", daemon.log());
    let id = answer["id"].as_str().expect("id").to_string();
    let started = support::wait::holds_within(Duration::from_secs(60), || {
        let (_, _, records) = daemon.output(&id);
        records.iter().any(|r| r["type"] == "started")
    });
    assert!(started, "run {id} never started:\n{}", daemon.log());
    id
}

fn cancel(daemon: &Daemon, id: &str) -> Value {
    let (status, answer) = daemon.request("POST", &format!("/v1/runs/{id}/cancel"), None);
    assert!(status < 300, "{status} {answer}");
    daemon.wait_finished(id)
}

/// `(ready, preparing)` of the caller's warm sandboxes, once the pool has
/// none preparing and at least `ready`.
fn settled_pool(daemon: &Daemon, ready: u64) -> (u64, u64) {
    let mut figures = (0, 0);
    let settled = support::wait::holds_within(Duration::from_secs(60), || {
        let (_, info) = daemon.request("GET", "/v1/info", None);
        figures = (
            info["pool"]["ready"].as_u64().unwrap_or(0),
            info["pool"]["preparing"].as_u64().unwrap_or(u64::MAX),
        );
        figures.0 >= ready && figures.1 == 0
    });
    assert!(
        settled,
        "the pool never had {ready} ready: {figures:?}\n{}",
        daemon.log()
    );
    figures
}

fn roomy_pooled_daemon(rule: &str) -> Daemon {
    Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 8\n[pool]\nenabled = true\nidle = \"600s\"\n\
         [[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\n{rule}",
        my_uid()
    ))
}

/// Three runs of one key in flight at once: the pool prepares a sandbox
/// for each one's successor while they run, so three are ready when they
/// end, and the next three runs each take a different one.
#[test]
fn several_warm_sandboxes_are_prepared_ahead_for_one_key_each_used_once() {
    let test = "several_warm_sandboxes_are_prepared_ahead_for_one_key_each_used_once";
    if !support::require_root_sandbox(test) {
        return;
    }
    let daemon = roomy_pooled_daemon("");
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let ids: Vec<String> = (0..3)
        .map(|_| running(&daemon, project.path(), &["sleep", "3600"]))
        .collect();
    // Asked for as the runs started, not after they ended.
    let (ready, _) = settled_pool(&daemon, 3);
    assert_eq!(ready, 3, "one for each run in flight\n{}", daemon.log());
    for id in &ids {
        assert_eq!(cancel(&daemon, id)["state"], "cancelled");
    }
    let warm: Vec<Value> = (0..3)
        .map(|_| run_to_end(&daemon, project.path(), &["true"]).0)
        .collect();
    for run in &warm {
        assert_eq!(run["report"]["warm"], true, "{run}\n{}", daemon.log());
        assert_eq!(run["status"], 0, "{run}");
    }
    let inits: std::collections::BTreeSet<String> = warm
        .iter()
        .map(|run| init_pid(&daemon, run).to_string())
        .collect();
    assert_eq!(
        inits.len(),
        3,
        "each warm run has a sandbox of its own: {inits:?}"
    );
}

/// A warm sandbox holds one of the caller's slots: with the rule's
/// `max_concurrent = 2` taken by two runs no sandbox is prepared, and when
/// one ends only its slot goes to the pool.
#[test]
fn warm_sandboxes_stay_within_the_callers_quota() {
    let test = "warm_sandboxes_stay_within_the_callers_quota";
    if !support::require_root_sandbox(test) {
        return;
    }
    let daemon = roomy_pooled_daemon("max_concurrent = 2\n");
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let first = running(&daemon, project.path(), &["sleep", "3600"]);
    let second = running(&daemon, project.path(), &["sleep", "3600"]);
    let (_, info) = daemon.request("GET", "/v1/info", None);
    assert_eq!(info["pool"]["ready"], 0, "{info}");
    assert_eq!(info["pool"]["preparing"], 0, "{info}");
    cancel(&daemon, &first);
    let (ready, preparing) = settled_pool(&daemon, 1);
    assert_eq!(
        (ready, preparing),
        (1, 0),
        "one run and one warm sandbox fill the rule's 2\n{}",
        daemon.log()
    );
    cancel(&daemon, &second);
    let (run, _, _) = run_to_end(&daemon, project.path(), &["true"]);
    assert_eq!(run["report"]["warm"], true, "{run}\n{}", daemon.log());
}

/// A change in the project discards every warm sandbox prepared before
/// it: none of them serves a run that would see the project as it was (a
/// warm run after the change has a sandbox built since, which hides the
/// new `.env` as a cold one does).
#[test]
fn every_warm_sandbox_of_a_changed_project_is_discarded() {
    let test = "every_warm_sandbox_of_a_changed_project_is_discarded";
    if !support::require_root_sandbox(test) {
        return;
    }
    let daemon = roomy_pooled_daemon("");
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let ids: Vec<String> = (0..2)
        .map(|_| running(&daemon, project.path(), &["sleep", "3600"]))
        .collect();
    for id in &ids {
        cancel(&daemon, id);
    }
    let (ready, _) = settled_pool(&daemon, 2);
    assert!(ready >= 2, "{}", daemon.log());
    std::fs::write(project.path().join(".env"), "TOKEN=secret\n").expect(".env");
    for _ in 0..ready + 1 {
        let (run, out, err) = run_to_end(&daemon, project.path(), &["sh", "-c", "cat .env"]);
        assert_eq!(run["status"], 1, "{run}\n{out}{err}");
        assert!(!out.contains("secret"), "{out}{err}");
        let hidden = run["report"]["enforced"]["project_view"]["secrets_hidden"].to_string();
        assert!(
            hidden.contains(".env"),
            "warm {}: {run}\n{}",
            run["report"]["warm"],
            daemon.log()
        );
    }
}
