//! Resource limits: cgroups where the supervisor may create them (root on
//! this machine, cgroup v1 hierarchies), rlimits where it may not.

mod support;

use support::{assert_ok, Project, Who};

fn report(project: &Project) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(project.path().join("report.json")).unwrap())
        .unwrap()
}

/// Whether this process may create cgroups for memory, pids and cpu.
fn cgroups_writable(test: &str) -> bool {
    let info = sandbox::cgroup::detect();
    let ok = nix::unistd::geteuid().is_root()
        && ["memory", "pids", "cpu"]
            .iter()
            .all(|c| info.controller(c).is_some_and(|c| c.writable));
    support::require(
        test,
        "root with writable memory, pids and cpu cgroups",
        ok && support::sandbox_works(Who::Root),
    )
}

/// A fresh state directory (`SANDBOX_STATE_DIR`) that `who` owns.
fn state_dir_of(who: Who) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-state-")
        .tempdir()
        .expect("tempdir");
    if who == Who::User && nix::unistd::geteuid().is_root() {
        let (uid, gid) = support::user_ids();
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown");
    }
    dir
}

const BALLOON: &str = "b = []\nwhile True:\n    b.append(bytearray(8 << 20))\n";

#[test]
fn a_memory_balloon_is_oom_killed_and_reported() {
    if !cgroups_writable("a_memory_balloon_is_oom_killed_and_reported") {
        return;
    }
    let project = Project::new(Who::Root);
    let out = project.run_with(
        &["--memory", "64MiB", "--report", "report.json"],
        &["python3", "-c", BALLOON],
    );
    assert_eq!(
        out.status.code(),
        Some(137),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sandbox: killed: memory limit 64MiB exceeded"),
        "{stderr}"
    );
    let report = report(&project);
    assert_eq!(report["limits_hit"], serde_json::json!(["memory"]));
    assert_eq!(report["resources"]["oom_kills"], 1);
    let peak = report["resources"]["memory_peak"].as_u64().unwrap();
    assert!(peak <= 64 << 20 && peak > 32 << 20, "peak {peak}");
    assert_eq!(report["enforced"]["cgroup"]["memory"], 64 << 20);
    for path in report["enforced"]["cgroup"]["paths"].as_array().unwrap() {
        assert!(
            !std::path::Path::new(path.as_str().unwrap()).exists(),
            "{path} left behind after the OOM kill"
        );
    }
}

/// The OOM killer takes the largest process, here a worker: the command
/// lives on, and stderr says what the limit did and how to raise it rather
/// than claiming the command was killed.
#[test]
fn an_oom_killed_worker_is_named_and_the_command_goes_on() {
    if !cgroups_writable("an_oom_killed_worker_is_named_and_the_command_goes_on") {
        return;
    }
    let project = Project::new(Who::Root);
    let script = format!(
        "import subprocess, sys\n\
         r = subprocess.run([sys.executable, '-c', {BALLOON:?}])\n\
         print('worker status', r.returncode)\n"
    );
    let out = project.run_with(&["--memory", "64MiB"], &["python3", "-c", &script]);
    assert_ok(&out, "a parent whose worker is OOM-killed");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "worker status -9"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "sandbox: memory limit 64MiB reached: the kernel killed 1 process(es) of the run \
             (raise it with --memory SIZE or the profile's [limits] memory)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("killed: memory"), "{stderr}");
}

#[test]
fn a_fork_bomb_is_capped_at_the_pids_limit_and_cleaned_up() {
    if !cgroups_writable("a_fork_bomb_is_capped_at_the_pids_limit_and_cleaned_up") {
        return;
    }
    let project = Project::new(Who::Root);
    let marker = support::marker("bomb");
    // Each process starts two more and sleeps; without the cap it would fill the machine.
    let script = format!("bomb() {{ bomb & bomb & sleep {marker}; }}; bomb 2>/dev/null; sleep 1");
    let out = project.run_with(
        &[
            "--pids",
            "24",
            "--timeout",
            // Ends the bomb; long enough on a loaded machine to reach the cap.
            &support::wait::timeout_arg(std::time::Duration::from_secs(5)),
            "--report",
            "report.json",
        ],
        &["/bin/bash", "-c", &script],
    );
    let report = report(&project);
    assert!(
        report["resources"]["pids_limit_hits"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert!(report["limits_hit"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("pids")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("pids limit 24 reached: "), "{stderr}");
    assert!(
        stderr.contains("(raise it with --pids N or the profile's [limits] pids)"),
        "{stderr}"
    );
    let left = support::host_pids_with(&format!("sleep {marker}"));
    assert!(left.is_empty(), "survivors: {left:?}");
}

#[test]
fn a_cpu_spinner_gets_about_its_share() {
    if !cgroups_writable("a_cpu_spinner_gets_about_its_share") {
        return;
    }
    let project = Project::new(Who::Root);
    let spin = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass\n";
    let out = project.run_with(
        &["--cpus", "0.5", "--report", "report.json"],
        &["python3", "-c", spin],
    );
    assert_ok(&out, "spinner");
    let report = report(&project);
    let cpu = report["resources"]["cpu_user_ms"].as_f64().unwrap()
        + report["resources"]["cpu_system_ms"].as_f64().unwrap();
    let wall = report["wall_time_ms"].as_f64().unwrap();
    // CFS quota: 50 ms of CPU per 100 ms period. Unthrottled this is ~1.0.
    // Only the quota's ceiling is asserted: what the spinner gets below it
    // depends on everything else the two cores run.
    let share = cpu / wall;
    assert!(
        share > 0.0 && share <= 0.7,
        "CPU share {share:.2} under --cpus 0.5 (cpu {cpu} ms, wall {wall} ms)"
    );
}

/// On cgroup v1 init moves itself into every hierarchy (`0` written to
/// `tasks`), which skips the RCU grace period a move by pid waits for; the
/// payload it forks is counted there: its processes in pids, its pages in
/// memory, its time in cpu (the spinner above shows the quota).
#[test]
fn on_cgroup_v1_init_moves_itself_and_the_payload_is_counted() {
    if !cgroups_writable("on_cgroup_v1_init_moves_itself_and_the_payload_is_counted") {
        return;
    }
    let project = Project::new(Who::Root);
    let out = project.run_with(
        &["--cpus", "1", "-v", "--report", "report.json"],
        &["/bin/sh", "-c", "/bin/true & /bin/true & wait"],
    );
    assert_ok(&out, "sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("to move itself into its cgroup (v1 `tasks`)"),
        "{stderr}"
    );
    let report = report(&project);
    assert_eq!(report["enforced"]["cgroup"]["version"], 1);
    let resources = &report["resources"];
    // init, sh and its two children.
    assert!(resources["pids_peak"].as_u64().unwrap() >= 3, "{resources}");
    assert!(
        resources["memory_peak"].as_u64().unwrap() > 0,
        "{resources}"
    );
}

/// The allowlist's net process is counted in the run's cgroup v1
/// hierarchies: it moves itself there before it executes (`0` written to
/// `tasks`, sparing the supervisor a move by pid and its RCU grace period,
/// about 15 ms of an idle machine's `--net allow` run).
#[test]
fn on_cgroup_v1_the_net_process_is_in_the_runs_cgroup() {
    if !cgroups_writable("on_cgroup_v1_the_net_process_is_in_the_runs_cgroup") {
        return;
    }
    let project = Project::new(Who::Root);
    let child = project
        .command()
        .args([
            "run",
            "--net",
            "allow:example.com",
            "--",
            "/bin/sleep",
            "60",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let supervisor = child.id();
    // The net process is the supervisor's child named sandbox-net.
    let mut cgroup = None;
    for _ in 0..600 {
        cgroup = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .find_map(|entry| {
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                let (comm, rest) = stat.split_once(") ")?;
                let parent: u32 = rest.split(' ').nth(1)?.parse().ok()?;
                (comm.ends_with("(sandbox-net") && parent == supervisor)
                    .then(|| std::fs::read_to_string(entry.path().join("cgroup")).ok())
                    .flatten()
            });
        if cgroup.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cgroup = cgroup.unwrap_or_else(|| panic!("no sandbox-net process: {stderr}"));
    for controller in ["memory", "pids"] {
        let line = cgroup
            .lines()
            .find(|l| {
                l.split(':')
                    .nth(1)
                    .is_some_and(|c| c.split(',').any(|c| c == controller))
            })
            .unwrap_or_else(|| panic!("no {controller} line: {cgroup}"));
        assert!(line.contains("/sandbox-"), "{controller}: {cgroup}");
    }
    assert!(!stderr.contains("outside the run's cgroup"), "{stderr}");
}

#[test]
fn the_run_cgroup_is_removed_afterwards() {
    if !cgroups_writable("the_run_cgroup_is_removed_afterwards") {
        return;
    }
    let project = Project::new(Who::Root);
    // strict sets no CPU quota: --cpus puts the run in the cpu hierarchy too.
    let out = project.run_with(&["--cpus", "1", "--report", "report.json"], &["/bin/true"]);
    assert_ok(&out, "true");
    assert_eq!(report(&project)["enforced"]["cgroup"]["version"], 1);
    let paths = report(&project)["enforced"]["cgroup"]["paths"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        paths.len(),
        3,
        "memory, pids and cpu hierarchies: {paths:?}"
    );
    for path in paths {
        let path = path.as_str().unwrap();
        assert!(path.contains("/sandbox-"), "{path}");
        assert!(
            !std::path::Path::new(path).exists(),
            "{path} is left behind"
        );
    }
}

/// Directories left where this run's cgroup goes, under the name its
/// supervisor picks first; removed when the test ends, however it ends.
struct Leftovers(Vec<std::path::PathBuf>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// An earlier run's cgroup left behind (its supervisor and janitor killed
/// together) under the name a later supervisor, given the same pid, picks:
/// the later run takes another name and keeps its limits, and leaves the
/// leftover alone (it might be a live run's of another pid namespace).
/// Before, the run fell back to rlimits, or was refused where cgroups are
/// required.
#[test]
fn a_leftover_cgroup_under_the_runs_name_does_not_cost_it_its_limits() {
    if !cgroups_writable("a_leftover_cgroup_under_the_runs_name_does_not_cost_it_its_limits") {
        return;
    }
    let info = sandbox::cgroup::detect();
    let parents: Vec<String> = ["memory", "pids", "cpu"]
        .iter()
        .map(|c| info.controller(c).unwrap().own_cgroup.display().to_string())
        .collect();
    let project = Project::new(Who::Root);
    let sandbox = project.command().get_program().to_owned();
    // `exec` keeps the shell's pid, which the supervisor names its first
    // cgroup after; the shell reports the names it made before it execs.
    // Each holds a child cgroup, as a leftover whose run still has one
    // does: once this supervisor has exited, a run of another test would
    // otherwise remove an empty one as a dead supervisor's.
    let script = r#"for parent in $PARENTS; do
  mkdir "$parent/sandbox-$$-0" "$parent/sandbox-$$-0/held" || exit 99
  echo "$parent/sandbox-$$-0/held" >> held
  echo "$parent/sandbox-$$-0" >> leftovers
done
exec "$@""#;
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", script, "sh"])
        .arg(&sandbox)
        .args(["run", "--cpus", "1", "--report", "report.json", "--"])
        .args(["/bin/sh", "-c", "/bin/true & /bin/true & wait"])
        .env("PARENTS", parents.join(" "))
        .current_dir(project.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let held = std::fs::read_to_string(project.path().join("held")).unwrap_or_default();
    let made = std::fs::read_to_string(project.path().join("leftovers")).unwrap_or_default();
    let leftovers = Leftovers(held.lines().chain(made.lines()).map(Into::into).collect());
    assert_eq!(leftovers.0.len(), 6, "{held}{made}");
    assert_ok(&out, "sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("no cgroup for this run"), "{stderr}");
    let report = report(&project);
    assert_eq!(report["enforced"]["cgroup"]["version"], 1, "{stderr}");
    let paths = report["enforced"]["cgroup"]["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 3, "{paths:?}");
    for path in paths {
        let path = std::path::Path::new(path.as_str().unwrap());
        assert!(!leftovers.0.iter().any(|l| l == path), "{path:?}");
        assert!(!path.exists(), "{path:?} is left behind");
    }
    assert!(
        report["resources"]["pids_peak"].as_u64().unwrap() >= 3,
        "{}",
        report["resources"]
    );
    for leftover in &leftovers.0 {
        assert!(leftover.is_dir(), "{leftover:?} was removed");
    }
}

/// A run's cgroup still busy when the supervisor gives up removing it (on
/// a loaded machine, the last exits still in flight; here a child cgroup
/// the test makes inside it) is left to the janitor, which keeps trying
/// (for ten seconds) and removes it once it can. Before, the supervisor
/// dismissed the janitor all the same and the directory stayed for good.
#[test]
fn a_cgroup_busy_after_the_run_is_removed_by_the_janitor() {
    if !cgroups_writable("a_cgroup_busy_after_the_run_is_removed_by_the_janitor") {
        return;
    }
    let memory = sandbox::cgroup::detect()
        .controller("memory")
        .unwrap()
        .own_cgroup
        .clone();
    let project = Project::new(Who::Root);
    let mut child = project
        .command()
        .args(["run", "--", "/bin/sh", "-c"])
        .arg("while [ ! -e go ]; do sleep 0.05; done")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("sandbox-{}-", child.id());
    let mut run_dir = None;
    for _ in 0..600 {
        run_dir = std::fs::read_dir(&memory)
            .unwrap()
            .flatten()
            .find_map(|entry| {
                let name = entry.file_name();
                name.to_str()
                    .is_some_and(|n| n.starts_with(&prefix))
                    .then(|| entry.path())
            });
        if run_dir.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let run_dir = run_dir.expect("the run's memory cgroup");
    let held = Leftovers(vec![run_dir.join("held")]);
    std::fs::create_dir(&held.0[0]).unwrap();
    project.write("go", "");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(run_dir.exists(), "removed despite its child cgroup");
    drop(held);
    let mut gone = false;
    for _ in 0..180 {
        if !run_dir.exists() {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(gone, "{run_dir:?} is left behind");
}

#[test]
fn without_cgroup_access_the_limits_fall_back_to_rlimits_and_say_so() {
    if !support::require(
        "rlimit fallback",
        "user namespaces for an unprivileged user",
        support::sandbox_works(Who::User),
    ) {
        return;
    }
    let project = Project::new(Who::User);
    // A state directory of its own: on cgroup v1 the fallback is said on
    // the command line once per machine, and this test must see it.
    let state = state_dir_of(Who::User);
    let out = project
        .command()
        .args(["run", "--memory", "64MiB", "--report", "report.json"])
        .args(["--", "python3", "-c", BALLOON])
        .env("SANDBOX_STATE_DIR", state.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sandbox starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("MemoryError"), "{stderr}");
    assert!(
        stderr.contains("falling back to rlimits: memory as RLIMIT_DATA"),
        "{stderr}"
    );
    let report = report(&project);
    assert!(report["enforced"]["cgroup"].is_null());
    assert_eq!(report["enforced"]["rlimits"]["RLIMIT_DATA"], 64 << 20);
    assert!(report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("RLIMIT_NPROC")));
}

#[test]
fn required_cgroups_without_access_refuse_to_run() {
    if !support::require(
        "required cgroups",
        "user namespaces for an unprivileged user",
        support::sandbox_works(Who::User),
    ) {
        return;
    }
    let project = Project::new(Who::User);
    let out = project.run_with_profile(
        "version = 1\nextends = \"strict\"\n[enforce]\ncgroups = \"required\"\n",
        &[],
        &["/bin/sh", "-c", "touch ran"],
    );
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cgroups is required by the profile but cannot be set up"),
        "{stderr}"
    );
    assert!(stderr.contains("Delegate=yes"), "{stderr}");
    assert!(!project.path().join("ran").exists());
}

/// What a program sees of the CPU limit: `nproc` (the affinity mask) is as
/// many CPUs as the limit rounds up to, at most what the host allows, so
/// worker pools sized from it match the quota; without a limit (strict's
/// default) it is the caller's, as bare.
#[test]
fn nproc_inside_matches_the_cpu_limit() {
    let host: usize = String::from_utf8_lossy(
        &std::process::Command::new("nproc")
            .output()
            .expect("nproc")
            .stdout,
    )
    .trim()
    .parse()
    .expect("a number");
    let one_cpu = "version = 1\nextends = \"strict\"\n[limits]\ncpu = 1\n";
    for who in support::identities("nproc_inside_matches_the_cpu_limit") {
        let project = support::Project::new(who);
        for (args, want) in [
            (vec![], host),
            (vec!["--cpus", "1"], 1),
            (vec!["--cpus", "1.5"], 2usize.min(host)),
        ] {
            let out = project.run_with(&args, &["nproc"]);
            support::assert_ok(&out, "nproc");
            let seen: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            assert_eq!(seen, want, "{who:?} {args:?}");
        }
        let out = project.run_with_profile(one_cpu, &[], &["nproc"]);
        support::assert_ok(&out, "nproc with a profile's quota");
        let seen: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(seen, 1, "{who:?} with cpu = 1 in the profile");
        if support::require(
            "nproc_inside_matches_the_cpu_limit",
            "two CPUs (to narrow the caller's affinity to one)",
            host >= 2,
        ) {
            assert_eq!(nproc_under_taskset(&project), 1, "{who:?} under taskset");
        }
    }
}

/// `nproc` in a default run whose caller is pinned to its first CPU
/// (`taskset -c N sandbox run`): the run has the CPUs its caller has.
fn nproc_under_taskset(project: &Project) -> usize {
    use nix::sched::{sched_getaffinity, CpuSet};
    let mine = sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("sched_getaffinity");
    let first = (0..CpuSet::count())
        .find(|cpu| mine.is_set(*cpu).unwrap_or(false))
        .expect("some CPU");
    let sandbox = project.command();
    let mut cmd = std::process::Command::new("taskset");
    cmd.args(["-c", &first.to_string()])
        .arg(sandbox.get_program())
        .args(["run", "--", "nproc"])
        .current_dir(project.path())
        .stdin(std::process::Stdio::null());
    if project.who == Who::User && nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt;
        cmd.uid(support::TEST_UID).gid(support::TEST_GID);
    }
    let out = cmd.output().expect("taskset starts");
    assert_ok(&out, "nproc under taskset");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// An unprivileged user on cgroup v1 never gets a cgroup, on any run: the
/// fallback's long explanation is said on the first run on this machine,
/// not on every run, and every report keeps it with what was enforced.
#[test]
fn the_cgroup_v1_fallback_of_an_unprivileged_user_is_said_once_per_machine() {
    let test = "the_cgroup_v1_fallback_of_an_unprivileged_user_is_said_once_per_machine";
    let on_v1 = sandbox::cgroup::detect()
        .controllers
        .iter()
        .any(|c| c.version == 1);
    if !support::require(
        test,
        "memory, pids or cpu on a cgroup v1 hierarchy, and an unprivileged sandbox",
        on_v1 && support::sandbox_works(Who::User),
    ) {
        return;
    }
    let project = Project::new(Who::User);
    let state = state_dir_of(Who::User);
    let run = || {
        let out = project
            .command()
            .args(["run", "--memory", "64MiB", "--report", "report.json"])
            .args(["--", "/bin/true"])
            .env("SANDBOX_STATE_DIR", state.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("sandbox starts");
        assert_ok(&out, "a run without a cgroup");
        let report = report(&project);
        assert!(report["enforced"]["cgroup"].is_null(), "{report}");
        assert_eq!(report["enforced"]["rlimits"]["RLIMIT_DATA"], 64 << 20);
        assert!(
            report["warnings"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w
                    .as_str()
                    .is_some_and(|w| w.contains("falling back to rlimits")))),
            "{report}"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let first = run();
    assert!(
        first.contains("falling back to rlimits: memory as RLIMIT_DATA")
            && first.contains("said once on this machine"),
        "{first}"
    );
    for _ in 0..2 {
        let later = run();
        assert!(!later.contains("no cgroup for this run"), "{later}");
    }
}

/// A supervisor killed after its run's cgroup exists and before it forks
/// the janitor that would remove it (strace kills it as it enters that
/// `clone`, the first of the run) leaves the cgroup behind: nobody is left
/// to remove it. The next run made below the same cgroup removes it (its
/// janitor does, while the run goes on), since its name says whose it was
/// and that supervisor is dead. Before, such directories stayed for good
/// (CI's machines collected them).
#[test]
fn a_cgroup_left_by_a_supervisor_killed_before_its_janitor_is_removed_by_the_next_run() {
    let test = "a_cgroup_left_by_a_supervisor_killed_before_its_janitor_is_removed_by_the_next_run";
    if !cgroups_writable(test)
        || !support::require(test, "strace", support::commands_exist(&["strace"]))
    {
        return;
    }
    let project = Project::new(Who::Root);
    let sandbox = project.command().get_program().to_owned();
    let trace = project.path().join("trace");
    let out = std::process::Command::new("strace")
        .args(["-f", "-o"])
        .arg(&trace)
        .args(["-e", "trace=clone,clone3"])
        .args(["-e", "inject=clone,clone3:signal=KILL:when=1"])
        .arg(&sandbox)
        .args(["run", "--cpus", "1", "--", "/bin/true"])
        .current_dir(project.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let trace = std::fs::read_to_string(&trace).unwrap_or_default();
    let killed: i32 = trace
        .lines()
        .find(|line| line.ends_with("+++ killed by SIGKILL +++"))
        .and_then(|line| line.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no supervisor was killed: {out:?}\n{trace}"));
    let info = sandbox::cgroup::detect();
    let left = Leftovers(
        ["memory", "pids", "cpu"]
            .iter()
            .map(|c| {
                let parent = &info.controller(c).unwrap().own_cgroup;
                parent.join(sandbox::cgroup::run_cgroup_name(killed as u32, 0))
            })
            .collect(),
    );
    for dir in &left.0 {
        assert!(
            dir.is_dir(),
            "{dir:?} is not there: the supervisor was not killed between creating its \
             cgroup and forking its janitor\n{trace}"
        );
    }
    // Only a cgroup ten seconds old is taken (one younger may be a live
    // supervisor's of another pid namespace, about to fill it).
    for dir in &left.0 {
        support::wait::until_true(
            &format!("{dir:?} to be ten seconds old"),
            std::time::Duration::from_secs(30),
            || !dir.exists() || cgroup_age(dir) >= std::time::Duration::from_millis(10_500),
        );
    }
    // The next run goes on until the test lets it end: its janitor sweeps
    // only while the run lasts (it stops once its supervisor speaks).
    let next = project
        .command()
        .args(["run", "--cpus", "1", "--", "/bin/sh", "-c"])
        .arg("while [ ! -e go ]; do sleep 0.05; done")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let gone = support::wait::holds_within(std::time::Duration::from_secs(10), || {
        left.0.iter().all(|dir| !dir.exists())
    });
    project.write("go", "");
    let out = next.wait_with_output().unwrap();
    assert_ok(&out, "the next run");
    for dir in &left.0 {
        assert!(
            gone && !dir.exists(),
            "{dir:?} is still there during the next run"
        );
    }
}

/// How long ago `dir`'s inode changed (zero if it is gone).
fn cgroup_age(dir: &std::path::Path) -> std::time::Duration {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return std::time::Duration::ZERO;
    };
    let changed = std::time::UNIX_EPOCH
        + std::time::Duration::new(meta.ctime() as u64, meta.ctime_nsec() as u32);
    std::time::SystemTime::now()
        .duration_since(changed)
        .unwrap_or_default()
}
