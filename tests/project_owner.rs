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
    if !support::require_user_sandbox(test) {
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

/// Pre-approves the broker's write actions (nobody can be asked here).
const GRANT_WRITES: &[&str] = &[
    "--grant",
    "fs.write",
    "--grant",
    "fs.mkdir",
    "--grant",
    "fs.delete",
];

/// A shell line sending one `sandbox ipc` request, which prints
/// `NAME ok` or `NAME refused: ERROR`.
fn ipc(name: &str, method: &str, params: &str) -> String {
    format!(
        "if out=$(sandbox ipc {method} '{params}' 2>&1); then echo '{name} ok'; \
         else echo \"{name} refused: $out\"; fi; "
    )
}

/// Root's sandbox writes through a mount idmapped to the project's owner;
/// the broker, which runs in root's supervisor, must leave the same owner
/// on what it creates, or the project's owner finds root's directories in
/// their checkout that they cannot write into.
#[test]
fn root_brokers_writes_in_a_project_of_another_user_belong_to_its_owner() {
    let test = "root_brokers_writes_in_a_project_of_another_user_belong_to_its_owner";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(TEST_UID, TEST_GID, 0o755);
    let foreign = project.path().join("foreign");
    std::fs::write(&foreign, "theirs\n").unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&foreign, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let script = [
        ipc("mkdir", "fs.mkdir", r#"{"path": "notes"}"#),
        ipc(
            "write",
            "fs.write",
            r#"{"path": "notes/todo.txt", "content": "from the broker\n"}"#,
        ),
        ipc(
            "foreign",
            "fs.write",
            r#"{"path": "foreign", "content": "overwritten\n"}"#,
        ),
    ]
    .concat();
    let out = root_runs(project.path(), GRANT_WRITES, &script);
    assert_ok(&out, "the broker requests as root");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("mkdir ok") && stdout.contains("write ok"),
        "{stdout}"
    );
    for made in ["notes", "notes/todo.txt"] {
        let meta = std::fs::metadata(project.path().join(made)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (TEST_UID, TEST_GID),
            "{made}, written by root's broker, belongs to the project's owner"
        );
    }
    // The sandbox may not write a third user's file (see above); its
    // broker may not either.
    assert!(stdout.contains("foreign refused"), "{stdout}");
    assert!(stdout.contains("permission denied"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "theirs\n");

    // The owner, bare, keeps working in what the broker made.
    let bare = as_test_user(
        &[],
        project.path(),
        &[
            "sh",
            "-c",
            "echo mine > notes/mine && echo more >> notes/todo.txt && echo owner-wrote",
        ],
    );
    assert_ok(&bare, "the owner writing into the broker's directory");
    assert!(
        String::from_utf8_lossy(&bare.stdout).contains("owner-wrote"),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
}

/// The attack on the above: root's broker acts for the sandbox with its
/// owner's ids, so a write led outside the project would land in the
/// owner's other files (their home), and a chown that followed a link
/// would hand the owner one of root's. The payload plants a symlink to
/// such a directory, writes through it, and swaps the symlink in for a
/// real directory while its requests are in flight.
#[test]
fn root_brokers_owner_writes_follow_no_link_out_of_the_project() {
    let test = "root_brokers_owner_writes_follow_no_link_out_of_the_project";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(TEST_UID, TEST_GID, 0o755);
    // The owner's home, outside the project: theirs to write, with a file
    // of root's in it.
    let home = project_owned_by(TEST_UID, TEST_GID, 0o755);
    let roots = home.path().join("roots");
    std::fs::write(&roots, "root's\n").unwrap();
    std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Root's too, under the names the raced requests use: what a chown
    // made after the write, by path, would reach when the link is swapped
    // in between.
    std::fs::write(home.path().join("raced"), "root's\n").unwrap();
    std::fs::create_dir(home.path().join("raced-dir")).unwrap();
    let listing = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing(home.path());
    let payload = format!(
        r#"
import json, os, socket, threading
home = {home:?}
os.symlink(home + "/existing", "to-existing")
os.symlink(home + "/roots", "to-roots")
os.symlink(home, "to-home")
s = socket.socket(fileno=3)
answers = s.makefile("r")
def ask(n, method, params):
    s.sendall((json.dumps({{"jsonrpc": "2.0", "id": n, "method": method, "params": params}}) + "\n").encode())
    return json.loads(answers.readline())
for n, path in enumerate(["to-existing", "to-roots", "to-home/planted"]):
    print(path, json.dumps(ask(n, "fs.write", {{"path": path, "content": "attacker"}})))
print("to-home/made", json.dumps(ask(9, "fs.mkdir", {{"path": "to-home/made"}})))
stop = False
def swap():
    os.mkdir("real")
    while not stop:
        os.rename("real", "d")
        os.rename("d", "real")
        os.symlink(home, "d.new")
        os.rename("d.new", "d")
        os.unlink("d")
racer = threading.Thread(target=swap)
racer.start()
served = refused = 0
for n in range(10, 1010):
    for method, path in [("fs.write", "d/raced"), ("fs.mkdir", "d/raced-dir"), ("fs.delete", "d/raced-dir")]:
        answer = ask(n, method, {{"path": path, "content": "attacker"}} if method == "fs.write" else {{"path": path}})
        if "result" in answer:
            served += 1
        else:
            refused += 1
stop = True
racer.join()
print("raced", served, "served", refused, "refused")
"#,
        home = home.path().to_str().unwrap()
    );
    let out = Command::new(sandbox_bin())
        .arg("run")
        .args(GRANT_WRITES)
        .args(["--", "python3", "-c", &payload])
        .current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .expect("sandbox starts");
    assert_ok(&out, "the attack as root");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("raced"), "{stdout}");
    let refusals: Vec<&str> = stdout.lines().filter(|l| l.starts_with("to-")).collect();
    assert_eq!(refusals.len(), 4, "{stdout}");
    for line in refusals {
        // -32001: refused as a link or an escape, not merely failed.
        assert!(
            line.contains(r#""code": -32001"#),
            "a write through a link out of the project was not refused: {line}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(home.path().join("existing")).unwrap(),
        "before\n"
    );
    for name in ["roots", "raced", "raced-dir"] {
        let meta = std::fs::symlink_metadata(home.path().join(name)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (0, 0),
            "root's {name} was chowned"
        );
    }
    assert_eq!(std::fs::read_to_string(&roots).unwrap(), "root's\n");
    assert_eq!(
        std::fs::read_to_string(home.path().join("raced")).unwrap(),
        "root's\n"
    );
    assert_eq!(
        listing(home.path()),
        before,
        "the broker created or removed something outside the project"
    );
}

/// The attack on the broker reading for the sandbox: root's supervisor
/// opened what the payload asked to read as root, so a file of root's in
/// the owner's project (a CI runner's token, mode 0600), which the sandbox
/// itself cannot read, was read out through `fs.read`, and root's private
/// directory listed through `fs.list`. Writes the same: a directory the
/// owner cannot enter (root's, 0700) was crossed on the way to a writable
/// directory below it, which the sandbox cannot reach either.
#[test]
fn root_brokers_reads_and_lookups_have_the_project_owners_rights() {
    let test = "root_brokers_reads_and_lookups_have_the_project_owners_rights";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(TEST_UID, TEST_GID, 0o755);
    let token = project.path().join("root-token");
    std::fs::write(&token, "ROOTS-SECRET-TOKEN\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let private = project.path().join("roots-private");
    std::fs::create_dir(&private).unwrap();
    std::fs::write(private.join("ROOTS-LISTED-NAME"), "").unwrap();
    let open_below = private.join("open");
    std::fs::create_dir(&open_below).unwrap();
    std::fs::set_permissions(&open_below, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut grants = vec!["--grant", "fs.read", "--grant", "fs.list"];
    grants.extend_from_slice(GRANT_WRITES);
    let script = [
        "cat root-token >/dev/null 2>&1 && echo INSIDE-READ; \
         ls roots-private >/dev/null 2>&1 && echo INSIDE-LISTED; \
         touch roots-private/open/inside 2>/dev/null && echo INSIDE-WROTE; "
            .to_string(),
        ipc("own", "fs.read", r#"{"path": "existing"}"#),
        ipc("read", "fs.read", r#"{"path": "root-token"}"#),
        "sandbox ipc fs.read '{\"path\": \"root-token\"}' 2>&1; ".to_string(),
        ipc("list", "fs.list", r#"{"path": "roots-private"}"#),
        "sandbox ipc fs.list '{\"path\": \"roots-private\"}' 2>&1; ".to_string(),
        ipc(
            "below",
            "fs.write",
            r#"{"path": "roots-private/open/planted", "content": "x"}"#,
        ),
    ]
    .concat();
    let out = root_runs(project.path(), &grants, &script);
    assert_ok(&out, "the broker reads as root");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for inside in ["INSIDE-READ", "INSIDE-LISTED", "INSIDE-WROTE"] {
        assert!(
            !stdout.contains(inside),
            "the sandbox itself is refused these (the premise):\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("ROOTS-SECRET-TOKEN"),
        "the broker read root's 0600 file for the sandbox, which may not:\n{stdout}"
    );
    assert!(
        !stdout.contains("ROOTS-LISTED-NAME"),
        "the broker listed root's 0700 directory for the sandbox:\n{stdout}"
    );
    assert!(
        stdout.contains("own ok"),
        "the owner's own file is read as before:\n{stdout}"
    );
    for name in ["read", "list", "below"] {
        assert!(
            stdout.contains(&format!("{name} refused")),
            "{name} was served:\n{stdout}"
        );
    }
    assert!(
        !open_below.join("planted").exists(),
        "the broker crossed root's 0700 directory to write below it:\n{stdout}"
    );
}

/// The attack on the write guard's identity: setfsuid/setfsgid leave the
/// supplementary groups alone, so root's supervisor started with one (a
/// service's SupplementaryGroups=, root's own group 0 from a login) wrote,
/// through `fs.write`, a third user's file writable by that group, which
/// the sandbox (the owner, with no such group) may not write.
#[test]
fn root_brokers_writes_do_not_keep_roots_supplementary_groups() {
    let test = "root_brokers_writes_do_not_keep_roots_supplementary_groups";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(TEST_UID, TEST_GID, 0o755);
    let grouped = project.path().join("group-writable");
    std::fs::write(&grouped, "theirs\n").unwrap();
    std::fs::set_permissions(&grouped, std::fs::Permissions::from_mode(0o664)).unwrap();
    std::os::unix::fs::chown(&grouped, Some(OTHER_UID), Some(SHARED_GID)).unwrap();
    let script = [
        "echo inside >> group-writable 2>/dev/null && echo INSIDE-WROTE; ".to_string(),
        ipc(
            "grouped",
            "fs.write",
            r#"{"path": "group-writable", "content": "overwritten\n"}"#,
        ),
    ]
    .concat();
    // Root, with SHARED_GID among its supplementary groups.
    let out = Command::new("setpriv")
        .arg(format!("--groups={SHARED_GID}"))
        .arg("--")
        .arg(sandbox_bin())
        .arg("run")
        .args(GRANT_WRITES)
        .args(["--", "sh", "-c", &script])
        .current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .expect("setpriv starts");
    assert_ok(&out, "the broker write as root with a supplementary group");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("INSIDE-WROTE"),
        "the sandbox itself may not write it (the premise):\n{stdout}"
    );
    assert!(
        stdout.contains("grouped refused") && stdout.contains("permission denied"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&grouped).unwrap(),
        "theirs\n",
        "root's broker wrote with root's supplementary group:\n{stdout}"
    );
}

/// The same on a project of root's: inside, the sandbox is a regular uid
/// whose writes are root's through the idmapped mount, without root's
/// capabilities, so a third user's files in root's project are closed to
/// it. Root's broker took "the owner's ids" (uid 0, a no-op) and kept its
/// capabilities: it read the third user's 0600 file and overwrote their
/// 0644 one for the payload.
#[test]
fn root_brokers_calls_in_roots_own_project_have_no_capabilities() {
    let test = "root_brokers_calls_in_roots_own_project_have_no_capabilities";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(0, 0, 0o755);
    let secret = project.path().join("their-secret");
    std::fs::write(&secret, "THIRD-USERS-SECRET\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let theirs = project.path().join("theirs");
    std::fs::write(&theirs, "theirs\n").unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o644)).unwrap();
    for path in [&secret, &theirs] {
        std::os::unix::fs::chown(path, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    }
    let mut grants = vec!["--grant", "fs.read"];
    grants.extend_from_slice(GRANT_WRITES);
    let script = [
        "cat their-secret >/dev/null 2>&1 && echo INSIDE-READ; \
         echo x >> theirs 2>/dev/null && echo INSIDE-WROTE; "
            .to_string(),
        ipc("own", "fs.write", r#"{"path": "made", "content": "x"}"#),
        ipc("read", "fs.read", r#"{"path": "their-secret"}"#),
        "sandbox ipc fs.read '{\"path\": \"their-secret\"}' 2>&1; ".to_string(),
        ipc(
            "write",
            "fs.write",
            r#"{"path": "theirs", "content": "overwritten\n"}"#,
        ),
    ]
    .concat();
    let out = root_runs(project.path(), &grants, &script);
    assert_ok(&out, "the broker in root's project");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for inside in ["INSIDE-READ", "INSIDE-WROTE"] {
        assert!(
            !stdout.contains(inside),
            "the sandbox itself is refused these (the premise):\n{stdout}"
        );
    }
    assert!(stdout.contains("own ok"), "{stdout}");
    let made = std::fs::metadata(project.path().join("made")).unwrap();
    assert_eq!(
        (made.uid(), made.gid()),
        (0, 0),
        "root's project, root's file"
    );
    assert!(
        !stdout.contains("THIRD-USERS-SECRET") && stdout.contains("read refused"),
        "root's broker read a third user's 0600 file for the sandbox:\n{stdout}"
    );
    assert!(stdout.contains("write refused"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "theirs\n",
        "root's broker overwrote a third user's file for the sandbox:\n{stdout}"
    );
}

/// `terminal.run`'s `cwd` was looked up by root's broker: below root's
/// 0700 directory in the owner's project, a name that exists got another
/// answer (the nested run failing to enter it) than one that does not
/// ("no such file"), an oracle on names the sandbox may not list.
#[test]
fn root_brokers_terminal_cwd_is_looked_up_as_the_project_owner() {
    let test = "root_brokers_terminal_cwd_is_looked_up_as_the_project_owner";
    if !running_as_root(test) {
        return;
    }
    let project = project_owned_by(TEST_UID, TEST_GID, 0o755);
    let private = project.path().join("roots-private");
    std::fs::create_dir_all(private.join("exists")).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let owners = project.path().join("owners");
    std::fs::create_dir(&owners).unwrap();
    std::os::unix::fs::chown(&owners, Some(TEST_UID), Some(TEST_GID)).unwrap();
    let payload = r#"
import json, os, socket
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
answers = s.makefile("r")
for n, name in enumerate(["exists", "missing", "owners"]):
    params = {"argv": ["true"], "cwd": name if name == "owners" else "roots-private/" + name}
    s.sendall((json.dumps({"jsonrpc": "2.0", "id": n, "method": "terminal.run", "params": params}) + "\n").encode())
    answer = json.loads(answers.readline())
    error = answer.get("error", {})
    print(name, error.get("code"), error.get("message", "").replace(name, "NAME"))
"#;
    let out = Command::new(sandbox_bin())
        .args([
            "run",
            "--grant",
            "terminal.run",
            "--",
            "python3",
            "-c",
            payload,
        ])
        .current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .expect("sandbox starts");
    assert_ok(&out, "terminal.run below root's directory");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answer = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no answer for {name}:\n{stdout}"))
            .to_string()
    };
    assert!(
        answer("owners").starts_with("None"),
        "a directory of the owner's is still a cwd: {stdout}"
    );
    assert!(!answer("exists").starts_with("None"), "{stdout}");
    assert_eq!(
        answer("exists"),
        answer("missing"),
        "a name below root's 0700 directory is told from a missing one"
    );
}
