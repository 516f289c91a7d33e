//! `sandbox daemon` under load: 100 runs submitted at once through the CLI,
//! each result present and right, nothing left behind; then a SIGKILL of
//! the daemon while runs are in flight, a restart on the same state, and
//! every finished result still there while the in-flight ones are lost.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use support::daemon::Daemon;
use support::{Project, Who};

const RUNS: usize = 100;

/// The run cgroup directories below the daemon's own memory and pids
/// cgroups (cgroup v1), or below its unified cgroup (v2).
fn cgroup_children(pid: u32) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return out;
    };
    for line in table.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let base = match controllers {
            "" => PathBuf::from("/sys/fs/cgroup"),
            c if c.split(',').any(|c| c == "memory" || c == "pids") => {
                let name = c
                    .split(',')
                    .find(|c| *c == "memory" || *c == "pids")
                    .unwrap();
                PathBuf::from("/sys/fs/cgroup").join(name)
            }
            _ => continue,
        };
        let dir = base.join(path.trim_start_matches('/'));
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                out.insert(entry.path());
            }
        }
    }
    out
}

/// Poll `check` for up to `seconds` (scaled by the machine's load); its
/// last answer.
fn settle<T>(seconds: u64, mut check: impl FnMut() -> (bool, T)) -> T {
    let mut last = None;
    support::wait::within(Duration::from_secs(seconds), || {
        let (done, value) = check();
        last = Some(value);
        done.then_some(())
    });
    last.expect("checked at least once")
}

fn runs_by_command(daemon: &Daemon) -> Vec<Value> {
    let (status, list) = daemon.request("GET", "/v1/runs?limit=1000", None);
    assert_eq!(status, 200, "{list}");
    list["runs"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_hundred_runs_at_once_then_a_sigkill_mid_load_loses_nothing_finished() {
    let test = "a_hundred_runs_at_once_then_a_sigkill_mid_load_loses_nothing_finished";
    if !support::require_root_daemon(test) {
        return;
    }
    let mut daemon = Daemon::start(
        "[daemon]\nmax_queue = 256\ncancel_grace = \"1s\"\n\
         [[allow]]\nuids = [0]\nprofiles = [\"strict\"]\nprojects = [\"/tmp\"]\n",
    );
    let project = Project::new(Who::Root);
    let cgroups_before = cgroup_children(daemon.pid());

    // 100 clients at once, each a real `sandbox run --daemon`.
    let results: Vec<(usize, std::process::Output)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..RUNS)
            .map(|n| {
                let mut cmd = daemon.cli();
                cmd.current_dir(project.path())
                    .args(["run", "--", "/bin/echo"])
                    .arg(format!("load-{n}"));
                scope.spawn(move || (n, cmd.output().expect("client starts")))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (n, out) in &results {
        assert_eq!(
            out.status.code(),
            Some(0),
            "client {n}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            daemon.log()
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("load-{n}\n"));
    }
    let runs = runs_by_command(&daemon);
    let mut finished = Vec::new();
    for n in 0..RUNS {
        let word = format!("load-{n}");
        let matching: Vec<&Value> = runs
            .iter()
            .filter(|run| run["command"] == serde_json::json!(["/bin/echo", word]))
            .collect();
        assert_eq!(matching.len(), 1, "exactly one run of {word}");
        let run = matching[0];
        assert_eq!(run["state"], "exited", "{run}");
        assert_eq!(run["status"], 0, "{run}");
        let id = run["id"].as_str().unwrap().to_string();
        let (_, full) = daemon.request("GET", &format!("/v1/runs/{id}"), None);
        for path in full["report"]["enforced"]["cgroup"]["paths"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let path = PathBuf::from(path.as_str().unwrap());
            let gone = settle(10, || (!path.exists(), !path.exists()));
            assert!(gone, "the run's cgroup {} is left behind", path.display());
        }
        finished.push((id, format!("{word}\n")));
    }
    let launcher = daemon.launcher_pid().expect("the daemon has a launcher");
    let left = settle(10, || {
        let children = support::children_of(launcher);
        (children.is_empty(), children)
    });
    assert!(left.is_empty(), "the launcher still has children: {left:?}");
    let cgroups_after = settle(10, || {
        let now = cgroup_children(daemon.pid());
        (now == cgroups_before, now)
    });
    assert_eq!(cgroups_after, cgroups_before, "run cgroups left behind");

    // A second batch, and the daemon SIGKILLed while it runs. Its runs
    // wait for `gate`, made only after the restart: the ones running at
    // the SIGKILL cannot have finished before it, however slow the machine.
    let marker = support::marker("inflight");
    let gate = project.path().join("gate");
    let mut inflight = Vec::new();
    for n in 0..30 {
        let body = serde_json::json!({
            "command": ["/bin/sh", "-c", format!("until [ -e gate ]; do sleep 0.05; done; : {marker} {n}")],
            "project": project.path(),
        });
        let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
        assert_eq!(status, 202, "{answer}");
        inflight.push(answer["id"].as_str().unwrap().to_string());
    }
    let running = settle(30, || {
        let (_, info) = daemon.request("GET", "/v1/info", None);
        let running = info["load"]["running"].as_u64().unwrap_or(0);
        (running > 0, running)
    });
    assert!(running > 0, "no run of the second batch started");
    let old_launcher = daemon.launcher_pid();
    daemon.kill();
    daemon.restart();
    std::fs::write(&gate, "").unwrap();

    for (id, stdout) in &finished {
        let (status, run) = daemon.request("GET", &format!("/v1/runs/{id}"), None);
        assert_eq!(status, 200, "finished run {id} after the restart: {run}");
        assert_eq!(run["state"], "exited", "{run}");
        assert_eq!(run["status"], 0, "{run}");
        assert!(run["report"].is_object(), "its report is kept: {run}");
        let (out, _, _) = daemon.output(id);
        assert_eq!(String::from_utf8_lossy(&out), *stdout, "its output is kept");
    }
    let mut lost = 0;
    for id in &inflight {
        let run = daemon.wait_finished(id);
        match run["state"].as_str() {
            Some("exited") => assert_eq!(run["status"], 0, "{run}"),
            Some("lost") => {
                lost += 1;
                assert!(
                    run["reason"].as_str().is_some_and(|r| !r.is_empty()),
                    "a lost run says why: {run}"
                );
                let (_, _, records) = daemon.output(id);
                assert!(
                    records.last().is_some_and(|r| r["type"] == "lost"),
                    "its log ends with the loss: {records:?}"
                );
            }
            _ => panic!("after a restart a run is finished or lost: {run}"),
        }
    }
    assert!(lost > 0, "a run in flight at the SIGKILL is lost");
    let survivors = support::wait_until_gone(&marker, 20);
    assert!(
        survivors.is_empty(),
        "in-flight processes survived: {survivors:?}"
    );
    if let Some(pid) = old_launcher {
        let gone = settle(20, || {
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
                && support::daemon::cmdline(pid).contains("__launch");
            (!alive, !alive)
        });
        assert!(gone, "the killed daemon's launcher {pid} is left behind");
    }
}
