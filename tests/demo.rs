//! The README's first command runs `examples/demo/check.sh` under strict and
//! invites the reader to run it bare. Bare it must stay harmless (even as
//! root), and under strict every probe must be blocked while the job is done.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::{assert_ok, identities, Project};

fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo")
}

/// Copy the demo (script and its fake `.env`) into `project`.
fn copy_demo(project: &Project) {
    for name in ["check.sh", ".env"] {
        let text = std::fs::read_to_string(demo_dir().join(name)).expect("demo file");
        project.write(name, &text);
    }
    let script = project.path().join("check.sh");
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_demo_run_bare_leaves_nothing_outside_the_project() {
    let test = "the_demo_run_bare_leaves_nothing_outside_the_project";
    // A network namespace of its own, so the demo's network probe never
    // leaves this machine (`-r` maps the caller for unprivileged runs).
    let unshare = |dir: &Path, argv: &[&str]| {
        let mut cmd = Command::new("unshare");
        if !nix::unistd::geteuid().is_root() {
            cmd.arg("-r");
        }
        cmd.arg("-n")
            .args(argv)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("unshare")
    };
    let project = Project::new(support::Who::Root);
    let usable = unshare(project.path(), &["true"]).status.success();
    if !support::require(test, "unshare -n (a network namespace)", usable) {
        return;
    }
    copy_demo(&project);
    let parent = project.path().parent().unwrap().to_path_buf();
    let out = unshare(project.path(), &["sh", "check.sh"]);
    assert_ok(&out, "bare demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("reachable: writing outside the project"),
        "the bare run did write its canary: {stdout}"
    );
    let left: Vec<String> = listing(&parent)
        .into_iter()
        .filter(|name| name.contains("sandbox-demo-canary"))
        .collect();
    assert!(left.is_empty(), "the canary stayed: {left:?}");
    assert!(!Path::new("/usr/bin/planted").exists());
    assert!(
        !stdout.contains("root:") && !stdout.contains("SECRET"),
        "the bare run printed what it probed: {stdout}"
    );
    assert!(project.path().join("output.txt").exists());
}

#[test]
fn under_strict_every_probe_of_the_demo_is_blocked_and_the_job_is_done() {
    for who in identities("under_strict_every_probe_of_the_demo_is_blocked_and_the_job_is_done") {
        // Under /tmp too: there the project's parent is the run's private
        // /tmp, which takes the canary, and the probe must not call that
        // an escape (the host never saw it).
        for base in ["/var/tmp", "/tmp"] {
            let project = Project::new_in(who, Path::new(base));
            copy_demo(&project);
            let out = project.run_with(&["--profile", "strict"], &["./check.sh"]);
            assert_ok(&out, "demo under strict");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(!stdout.contains("reachable"), "{who:?} in {base}: {stdout}");
            assert_eq!(
                stdout.matches("blocked:").count(),
                6,
                "{who:?} in {base}: {stdout}"
            );
            assert!(project.path().join("output.txt").exists(), "{who:?}");
            let left: Vec<String> = listing(project.path())
                .into_iter()
                .filter(|name| name.contains("sandbox-demo-canary"))
                .collect();
            assert!(left.is_empty(), "{who:?} in {base}: {left:?}");
        }
    }
}
