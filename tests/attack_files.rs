//! Files the supervisor writes are never redirected by the sandboxed code:
//! the payload (or an earlier run) replaces the report or audit file in the
//! project with a link to a host file outside it, a FIFO, a directory or a
//! hard link, or swaps the report's directory for a link; the host file is
//! untouched, the supervisor does not hang, and the error names the file.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use support::{Project, Who};

/// A file outside the project that a root supervisor must never write.
struct Canary {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

const CANARY: &str = "host canary: must not change\n";

impl Canary {
    fn new() -> Canary {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shadow");
        std::fs::write(&path, CANARY).unwrap();
        Canary { _dir: dir, path }
    }

    fn assert_untouched(&self, out: &Output) {
        assert_eq!(
            std::fs::read_to_string(&self.path).unwrap(),
            CANARY,
            "the host file was overwritten; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Runs `sandbox run <extra> -- /bin/sh -c script`; a supervisor that hangs
/// (on a FIFO) is killed after a generous bound and fails the test.
fn run(project: &Project, extra: &[&str], script: &str) -> Output {
    let mut child = project
        .command()
        .arg("run")
        .args(extra)
        .args(["--", "/bin/sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if support::wait::exit_within(&mut child, Duration::from_secs(60)).is_none() {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "the supervisor hung; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn root_project(test: &str) -> Option<Project> {
    support::require_root_sandbox(test).then(|| Project::new(Who::Root))
}

#[test]
fn a_report_replaced_by_a_symlink_to_a_host_file_is_not_written_through() {
    let Some(project) = root_project("report symlink") else {
        return;
    };
    let canary = Canary::new();
    let script = format!(
        "rm -f report.json; ln -s {} report.json",
        canary.path.display()
    );
    let out = run(&project, &["--report", "./report.json"], &script);
    canary.assert_untouched(&out);
    let err = stderr(&out);
    assert!(err.contains("report.json is a symbolic link"), "{err}");
    assert!(
        err.contains("inside"),
        "the path inside the project is warned about: {err}"
    );
}

#[test]
fn a_report_replaced_by_a_fifo_does_not_hang_the_supervisor() {
    let Some(project) = root_project("report fifo") else {
        return;
    };
    let out = run(&project, &["--report", "report.json"], "mkfifo report.json");
    let err = stderr(&out);
    assert!(err.contains("report.json is a FIFO"), "{err}");
}

#[test]
fn a_report_replaced_by_a_directory_is_refused() {
    let Some(project) = root_project("report directory") else {
        return;
    };
    let out = run(&project, &["--report", "report.json"], "mkdir report.json");
    let err = stderr(&out);
    assert!(err.contains("report.json is a directory"), "{err}");
}

#[test]
fn a_report_hard_linked_to_a_host_file_is_refused() {
    let Some(project) = root_project("report hard link") else {
        return;
    };
    let canary = Canary::new();
    // Planted before the run (an earlier step, an unpacked archive): the
    // sandbox itself cannot link across mounts.
    std::fs::hard_link(&canary.path, project.path().join("report.json")).unwrap();
    let out = run(&project, &["--report", "report.json"], "true");
    canary.assert_untouched(&out);
    let err = stderr(&out);
    assert!(err.contains("report.json has 2 hard links"), "{err}");
}

#[test]
fn a_report_directory_swapped_for_a_link_during_the_run_is_not_followed() {
    let Some(project) = root_project("report directory swap") else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("reports")).unwrap();
    let script = format!(
        "mv reports reports.old && ln -s {} reports",
        outside.path().display()
    );
    let out = run(&project, &["--report", "reports/report.json"], &script);
    support::assert_ok(&out, "run");
    assert!(
        !outside.path().join("report.json").exists(),
        "the report followed the swapped link"
    );
    // The directory opened before the run, wherever it was moved.
    let report = std::fs::read_to_string(project.path().join("reports.old/report.json")).unwrap();
    assert!(report.contains("\"version\""), "{report}");
}

#[test]
fn an_audit_log_planted_as_a_symlink_is_refused_before_the_run() {
    let Some(project) = root_project("audit symlink") else {
        return;
    };
    let canary = Canary::new();
    // What a previous run left behind.
    std::os::unix::fs::symlink(&canary.path, project.path().join("audit.jsonl")).unwrap();
    let out = run(
        &project,
        &["--audit", "audit.jsonl", "--grant", "fs.write"],
        r#"sandbox ipc fs.write '{"path": "x.txt", "content": "x"}'; touch ran"#,
    );
    canary.assert_untouched(&out);
    let err = stderr(&out);
    assert!(err.contains("audit.jsonl is a symbolic link"), "{err}");
    assert!(
        !project.path().join("ran").exists(),
        "the run did not start"
    );
}

#[test]
fn a_report_outside_the_project_is_written_without_a_warning() {
    let Some(project) = root_project("report outside") else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    let path: &Path = &outside.path().join("report.json");
    let out = run(&project, &["--report", path.to_str().unwrap()], "true");
    support::assert_ok(&out, "run");
    // An unprivileged caller on cgroup v1 gets the cgroup fallback warning
    // on every run; only a warning about the report itself is wrong here.
    let report_warnings: Vec<String> = stderr(&out)
        .lines()
        .filter(|line| line.contains("warning") && line.contains("report"))
        .map(str::to_owned)
        .collect();
    assert!(report_warnings.is_empty(), "{report_warnings:?}");
    assert!(std::fs::read_to_string(path)
        .unwrap()
        .contains("\"version\""));
}
