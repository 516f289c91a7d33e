//! A project owned by another user than the one running `sandbox` (a CI
//! workspace checked out by the runner user and sandboxed by root, a shared
//! group directory): inside, the caller may do to it what it may do bare,
//! through the project owner's rights, and nothing more.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::{assert_ok, require, sandbox_bin, TEST_GID, TEST_UID};

/// A uid and gid nobody on the machine uses: the project's owner in the
/// unprivileged cases, a third party in the root one.
const OTHER_UID: u32 = TEST_UID + 2;
/// A group the unprivileged caller is given as a supplementary group.
const SHARED_GID: u32 = TEST_GID + 6;

fn running_as_root(test: &str) -> bool {
    require(
        test,
        "root (to make a project owned by another uid)",
        nix::unistd::geteuid().is_root(),
    ) && support::require_root_sandbox(test)
}

/// A project directory (in a world-traversable temporary directory) owned
/// by `uid`:`gid` with `mode`, holding `existing` owned the same way.
fn project_owned_by(uid: u32, gid: u32, mode: u32) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-owner-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let existing = dir.path().join("existing");
    std::fs::write(&existing, "before\n").expect("write");
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(mode & 0o666))
        .expect("chmod");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).expect("chmod");
    for path in [&existing, &dir.path().to_path_buf()] {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown");
    }
    dir
}

/// Creating a file and appending to `existing`, as `sh` sees it.
const WRITE_PROBE: &str = "touch made 2>/dev/null && echo created; \
                           echo more >> existing 2>/dev/null && echo appended; true";

/// What WRITE_PROBE printed, then undo what it did, so the same probe can
/// run again (bare, then sandboxed) on the same state.
fn outcome(out: &Output, project: &Path) -> String {
    assert_ok(out, WRITE_PROBE);
    let _ = std::fs::remove_file(project.join("made"));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if text.contains("appended") {
        let existing = project.join("existing");
        let meta = std::fs::metadata(&existing).expect("existing");
        std::fs::write(&existing, "before\n").expect("restore");
        std::os::unix::fs::chown(&existing, Some(meta.uid()), Some(meta.gid())).expect("chown");
    }
    text
}

/// `argv` as the unprivileged test uid with `groups` as its supplementary
/// groups (setpriv: std's Command drops them when a root parent sets a uid).
fn as_test_user(groups: &[u32], project: &Path, argv: &[&str]) -> Output {
    let groups = groups
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={TEST_UID}"))
        .arg(format!("--regid={TEST_GID}"));
    if groups.is_empty() {
        cmd.arg("--clear-groups");
    } else {
        cmd.arg(format!("--groups={groups}"));
    }
    cmd.arg("--")
        .args(argv)
        .current_dir(project)
        .stdin(Stdio::null())
        .output()
        .expect("setpriv starts")
}

/// `sandbox run [extra] -- sh -c script` as root in `project`.
fn root_runs(project: &Path, extra: &[&str], script: &str) -> Output {
    Command::new(sandbox_bin())
        .arg("run")
        .args(extra)
        .args(["--", "sh", "-c", script])
        .current_dir(project)
        .stdin(Stdio::null())
        .output()
        .expect("sandbox starts")
}

#[test]
fn root_writes_a_project_owned_by_another_user_as_its_owner() {
    let test = "root_writes_a_project_owned_by_another_user_as_its_owner";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(TEST_UID, TEST_GID, 0o755);
    // A file of a third user's in it: its owner's rights do not cover it.
    let foreign = project.path().join("foreign");
    std::fs::write(&foreign, "theirs\n").unwrap();
    std::os::unix::fs::chown(&foreign, Some(OTHER_UID), Some(OTHER_UID)).unwrap();

    let out = root_runs(
        project.path(),
        &["--json"],
        &format!(
            "id -u; id -g; {WRITE_PROBE}; echo x >> foreign 2>/dev/null && echo FOREIGN-WRITTEN; true"
        ),
    );
    assert_ok(&out, "the probe as root");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..2],
        [TEST_UID.to_string(), TEST_GID.to_string()],
        "inside, the sandbox is the project's owner:\n{stdout}"
    );
    assert!(
        stdout.contains("created") && stdout.contains("appended"),
        "root may write its project bare, so it may inside:\n{stdout}"
    );
    assert!(
        !stdout.contains("FOREIGN-WRITTEN"),
        "a third user's file is not the project owner's to write:\n{stdout}"
    );
    let made = std::fs::metadata(project.path().join("made")).unwrap();
    assert_eq!(
        (made.uid(), made.gid()),
        (TEST_UID, TEST_GID),
        "what the run creates belongs to the project's owner on the host"
    );
    // On the host the process is still the unprivileged id root mode picks.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = support::json_report(&stderr, "the probe as root");
    let user = &report["enforced"]["user"];
    assert_eq!(user["inside_uid"], TEST_UID, "{user}");
    assert_ne!(user["host_uid"], 0, "{user}");
    assert_ne!(user["host_uid"], TEST_UID, "{user}");
}

#[test]
fn root_keeps_its_own_writable_paths_in_a_project_of_another_user() {
    let test = "root_keeps_its_own_writable_paths_in_a_project_of_another_user";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(TEST_UID, TEST_GID, 0o755);
    let cache = tempfile::Builder::new()
        .prefix("sandbox-root-cache-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache_path = cache.path().to_str().unwrap();
    let out = root_runs(
        project.path(),
        &["--allow-write", cache_path],
        &format!(
            "touch {cache_path}/entry && echo cache-written; touch made && echo project-written"
        ),
    );
    assert_ok(&out, "writing root's cache");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cache-written") && stdout.contains("project-written"),
        "each writable tree is writable as its owner's:\n{stdout}"
    );
    let entry = std::fs::metadata(cache.path().join("entry")).unwrap();
    assert_eq!(
        (entry.uid(), entry.gid()),
        (0, 0),
        "root's tree keeps root's files"
    );
    let made = std::fs::metadata(project.path().join("made")).unwrap();
    assert_eq!(made.uid(), TEST_UID);
}

#[test]
fn a_user_writes_another_users_project_inside_exactly_when_bare() {
    let test = "a_user_writes_another_users_project_inside_exactly_when_bare";
    if !running_as_root(test) {
        return;
    }
    if !support::sandbox_works(support::Who::User) {
        require(test, "user namespaces for an unprivileged user", false);
        return;
    }
    let sandbox = support::binary_for_test_user();
    let sandbox = sandbox.to_str().unwrap();
    // (project mode, group owning it, the caller's supplementary groups,
    // what the caller may do bare).
    let cases: [(u32, u32, &[u32], &str); 4] = [
        (0o755, OTHER_UID, &[], ""),
        (0o775, SHARED_GID, &[SHARED_GID], "created\nappended"),
        (0o775, SHARED_GID, &[], ""),
        (0o777, OTHER_UID, &[], "created\nappended"),
    ];
    for (mode, group, groups, expected) in cases {
        let project = project_owned_by(OTHER_UID, group, mode);
        let what = format!("project {mode:o} owned by {OTHER_UID}:{group}, caller in {groups:?}");
        let bare = as_test_user(groups, project.path(), &["sh", "-c", WRITE_PROBE]);
        let bare = outcome(&bare, project.path());
        assert_eq!(bare, expected, "bare, {what}");
        let inside = as_test_user(
            groups,
            project.path(),
            &[sandbox, "run", "--", "sh", "-c", WRITE_PROBE],
        );
        let inside = outcome(&inside, project.path());
        assert_eq!(inside, bare, "inside as bare, {what}");
    }
}

/// Uid 0 without capabilities misleads programs that test for root (a
/// suite expecting root to execute any file with an `x` bit; npm switching
/// users for scripts): on a project of root's, the sandbox is a regular uid
/// inside, its project is still writable and what it makes is root's.
#[test]
fn root_runs_a_project_of_its_own_as_a_regular_uid() {
    let test = "root_runs_a_project_of_its_own_as_a_regular_uid";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(0, 0, 0o755);
    let out = root_runs(
        project.path(),
        &[],
        &format!(
            "id -u; id -un; {WRITE_PROBE}; touch only-others-x && chmod 0001 only-others-x && \
             if [ -x only-others-x ]; then echo EXECUTABLE; fi"
        ),
    );
    assert_ok(&out, "the probe on root's project");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..2],
        ["1000", "sandbox"],
        "a regular uid, named as the sandbox's own:\n{stdout}"
    );
    assert!(
        stdout.contains("created") && stdout.contains("appended"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("EXECUTABLE"),
        "a file only others may execute is not the sandbox's to run:\n{stdout}"
    );
    let made = std::fs::metadata(project.path().join("made")).unwrap();
    assert_eq!(
        (made.uid(), made.gid()),
        (0, 0),
        "root's project keeps root's files"
    );
}
