//! cgroups where CI runs: a read-only cgroup filesystem (Docker's and
//! Kubernetes' default) and an unprivileged user on cgroup v2 who gets a
//! delegated scope from the user's systemd. Each builds the environment for
//! real in a private mount namespace: the host's own hierarchies remounted
//! read-only, or the host's cgroup2 hierarchy mounted alone at
//! /sys/fs/cgroup. This machine runs no user systemd manager, so
//! `systemd-run` is a script that records its arguments and execs the
//! command the way `systemd-run --scope` does.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::{Project, Who};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn root_with_mount_namespaces(test: &str) -> bool {
    support::require(
        test,
        "root with unshare(1) and setpriv(1)",
        nix::unistd::geteuid().is_root() && have("unshare") && have("setpriv"),
    )
}

/// `script` in a private mount namespace (so nothing it mounts reaches the
/// host), in `dir`.
fn in_mount_namespace(dir: &Path, script: &str) -> Output {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-euc", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("unshare runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Remount every legacy hierarchy and any cgroup2 mount read-only, as a
/// container engine mounts them.
const READ_ONLY_CGROUPFS: &str = r#"
for m in $(awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo); do
    mount -o remount,bind,ro "$m"
done
"#;

#[test]
fn a_read_only_cgroupfs_is_named_with_its_fix_and_best_effort_says_what_replaces_it() {
    let test = "a_read_only_cgroupfs_is_named_with_its_fix_and_best_effort_says_what_replaces_it";
    if !root_with_mount_namespaces(test) || !support::require_root_sandbox(test) {
        return;
    }
    let project = Project::new(Who::Root);
    project.write(
        "required.toml",
        "version = 1\nextends = \"strict\"\n[enforce]\ncgroups = \"required\"\n",
    );
    let sandbox = support::sandbox_bin();
    let required = in_mount_namespace(
        project.path(),
        &format!(
            "{READ_ONLY_CGROUPFS}\nexec {sandbox} run --profile required.toml --memory 64MiB \
             -- /bin/sh -c 'touch ran'"
        ),
    );
    let message = stderr(&required);
    assert_eq!(required.status.code(), Some(125), "{message}");
    assert!(
        message.contains(
            "cgroups is required by the profile but cannot be set up: the cgroup \
                          filesystem is mounted read-only at /sys/fs/cgroup/"
        ),
        "{message}"
    );
    for fix in [
        "--systemd=always",
        "never bind the host's hierarchy",
        "resources.limits",
    ] {
        assert!(message.contains(fix), "missing {fix:?}: {message}");
    }
    assert!(message.contains("best-effort"), "{message}");
    assert!(
        !message.contains("run as root"),
        "root told to run as root: {message}"
    );
    assert!(!project.path().join("ran").exists());

    let best_effort = in_mount_namespace(
        project.path(),
        &format!(
            "{READ_ONLY_CGROUPFS}\nexec {sandbox} run --memory 64MiB --report report.json \
             -- /bin/sh -c 'touch ran'"
        ),
    );
    let warning = stderr(&best_effort);
    assert!(best_effort.status.success(), "{warning}");
    assert!(project.path().join("ran").exists());
    assert!(
        warning.contains("mounted read-only")
            && warning.contains("falling back to rlimits: memory as RLIMIT_DATA"),
        "{warning}"
    );
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.path().join("report.json")).expect("report"),
    )
    .expect("JSON report");
    assert!(report["enforced"]["cgroup"].is_null(), "{report}");
    assert_eq!(report["enforced"]["rlimits"]["RLIMIT_DATA"], 64 << 20);
}

/// A directory the throwaway user can use, with a fake `systemd-run` that
/// appends its arguments to `calls` and execs what follows `--`.
struct FakeSystemd {
    dir: tempfile::TempDir,
}

impl FakeSystemd {
    fn new(with_manager: bool) -> FakeSystemd {
        let dir = tempfile::Builder::new()
            .prefix("sandbox-fake-systemd-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("bin")).expect("bin");
        std::fs::create_dir_all(root.join("run/systemd")).expect("runtime dir");
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" \"==\" >> {calls}\n\
             while [ \"$1\" != \"--\" ]; do shift; done\nshift\nexec \"$@\"\n",
            calls = root.join("calls").display()
        );
        std::fs::write(root.join("bin/systemd-run"), script).expect("script");
        std::fs::write(root.join("calls"), "").expect("calls");
        if with_manager {
            let socket = std::os::unix::net::UnixListener::bind(root.join("run/systemd/private"))
                .expect("socket");
            std::mem::forget(socket);
        }
        for (path, mode) in [
            ("", 0o755),
            ("bin", 0o755),
            ("bin/systemd-run", 0o755),
            ("run", 0o755),
            ("run/systemd", 0o755),
            ("calls", 0o666),
        ] {
            std::fs::set_permissions(root.join(path), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
        }
        FakeSystemd { dir }
    }

    /// `sandbox run --memory 64MiB ARGV` as the throwaway user, on a host
    /// where cgroup2 alone is mounted at /sys/fs/cgroup (the host's own
    /// unified hierarchy, so its root cgroup is not the user's to write).
    fn run_unprivileged_on_v2(&self, project: &Project, argv: &str) -> Output {
        let root = self.dir.path();
        let sandbox = support::binary_for_test_user();
        in_mount_namespace(
            project.path(),
            &format!(
                "umount -l /sys/fs/cgroup\nmount -t cgroup2 none /sys/fs/cgroup\n\
                 exec setpriv --reuid={uid} --regid={uid} --clear-groups \
                 env -i PATH={bin}:/usr/bin:/bin HOME={home} XDG_RUNTIME_DIR={run} \
                 {sandbox} run --memory 64MiB --report report.json -- {argv}",
                uid = support::TEST_UID,
                bin = root.join("bin").display(),
                home = root.display(),
                run = root.join("run").display(),
                sandbox = sandbox.display(),
            ),
        )
    }

    fn calls(&self) -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(self.dir.path().join("calls")).expect("calls");
        text.split("==\n")
            .filter(|call| !call.is_empty())
            .map(|call| call.lines().map(str::to_owned).collect())
            .collect()
    }
}

fn cgroup2_available(test: &str) -> bool {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    support::require(
        test,
        "a cgroup2 hierarchy and an unprivileged sandbox",
        mountinfo.contains(" - cgroup2 ") && support::sandbox_works(Who::User),
    )
}

#[test]
fn an_unprivileged_user_on_cgroup_v2_restarts_once_in_a_delegated_systemd_scope() {
    let test = "an_unprivileged_user_on_cgroup_v2_restarts_once_in_a_delegated_systemd_scope";
    if !root_with_mount_namespaces(test) || !cgroup2_available(test) {
        return;
    }
    let systemd = FakeSystemd::new(true);
    let project = Project::new(Who::User);
    let out = systemd.run_unprivileged_on_v2(&project, "/bin/sh -c 'echo in-scope'");
    let message = stderr(&out);
    assert!(out.status.success(), "{message}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "in-scope\n");
    let calls = systemd.calls();
    assert_eq!(calls.len(), 1, "exactly one restart, no loop: {calls:?}");
    let call = &calls[0];
    assert_eq!(
        call[..7],
        [
            "--user",
            "--scope",
            "--quiet",
            "--collect",
            "-p",
            "Delegate=yes",
            "--"
        ],
        "{call:?}"
    );
    assert_eq!(
        call[7],
        support::binary_for_test_user().display().to_string(),
        "the supervisor itself, by its real path: {call:?}"
    );
    assert_eq!(
        call[8..],
        [
            "run",
            "--memory",
            "64MiB",
            "--report",
            "report.json",
            "--",
            "/bin/sh",
            "-c",
            "echo in-scope"
        ]
    );
    // This host binds memory, pids and cpu to cgroup v1, so the scope (the
    // fake one here) has none of them in cgroup2: the restarted supervisor
    // falls back to rlimits and the report says the scope was tried.
    assert!(
        message.contains("started in a transient systemd scope with Delegate=yes")
            && message.contains("falling back to rlimits"),
        "{message}"
    );
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.path().join("report.json")).expect("report"),
    )
    .expect("JSON report");
    assert!(
        report["warnings"].as_array().is_some_and(|w| w
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("Delegate=yes")))),
        "{report}"
    );
}

#[test]
fn without_a_user_systemd_manager_the_fallback_says_none_was_reachable() {
    let test = "without_a_user_systemd_manager_the_fallback_says_none_was_reachable";
    if !root_with_mount_namespaces(test) || !cgroup2_available(test) {
        return;
    }
    let systemd = FakeSystemd::new(false);
    let project = Project::new(Who::User);
    let out = systemd.run_unprivileged_on_v2(&project, "/bin/true");
    let message = stderr(&out);
    assert!(out.status.success(), "{message}");
    assert!(systemd.calls().is_empty(), "systemd-run was called");
    assert!(
        message.contains("no user systemd manager is reachable for a delegated scope")
            && message.contains("falling back to rlimits: memory as RLIMIT_DATA"),
        "{message}"
    );
}
