//! Shared helpers for the tests that run the real `sandbox` binary.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub mod daemon;
pub mod docs;
pub mod harness;
pub mod mcp_client;
pub mod net;
pub mod oci;
pub mod serve;
pub mod wait;

/// The binary under test.
pub fn sandbox_bin() -> &'static str {
    env!("CARGO_BIN_EXE_sandbox")
}

/// A throwaway unprivileged identity for the "same checks unprivileged"
/// runs. No passwd entry is needed: nothing in the tests looks the name up.
pub const TEST_UID: u32 = 61_234;
/// Its group.
pub const TEST_GID: u32 = 61_234;

/// The start of the Python probes tests run inside: `attempt(what, f)`
/// prints `what ok`, or `what ERRNO` when `f` raises an OSError.
pub const PY_ATTEMPT: &str = r#"
import errno, os, signal, socket
def attempt(what, f):
    try:
        f(); print(what, "ok")
    except OSError as e:
        print(what, errno.errorcode[e.errno])
"#;

/// Who runs the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// Host root (the sandbox maps itself to an unprivileged host id).
    Root,
    /// An unprivileged user (plain user namespaces).
    User,
}

fn require_everything() -> bool {
    std::env::var_os("SANDBOX_TEST_REQUIRE").is_some_and(|v| v == "1")
}

/// Skip loudly when a feature is missing, or fail under SANDBOX_TEST_REQUIRE=1.
pub fn require(test: &str, feature: &str, available: bool) -> bool {
    if !available {
        assert!(
            !require_everything(),
            "{test}: {feature} unavailable and SANDBOX_TEST_REQUIRE=1"
        );
        // Straight to the process's stderr: libtest captures eprintln! of
        // passing tests, which would make the skip silent.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIP: {test}: {feature} unavailable"
        );
        record_skip(test, feature);
        SKIPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    available
}

/// How many skips [`require`] counted in this process.
static SKIPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many checks this process has skipped so far (for [`harness`]).
pub fn skips_so_far() -> usize {
    SKIPS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Where this `cargo test` invocation's skips are collected: one directory
/// per parent process (every test binary of one invocation is a child of
/// the same cargo), read by `tests/zz_skip_summary.rs`, which cargo runs last.
pub fn skip_log_dir(cargo_pid: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("skips")
        .join(cargo_pid.to_string())
}

fn record_skip(test: &str, feature: &str) {
    use std::io::Write;
    let dir = skip_log_dir(std::os::unix::process::parent_id());
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let binary = std::env::args()
        .next()
        .and_then(|arg0| {
            Path::new(&arg0)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "test".into());
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{binary}.{}", std::process::id())))
    {
        let _ = writeln!(log, "{test}: {feature} unavailable");
    }
}

/// The uid and gid the unprivileged identity runs as: the throwaway ids
/// when the tests run as root, the caller's own otherwise.
pub fn user_ids() -> (u32, u32) {
    if running_as_root() {
        (TEST_UID, TEST_GID)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    }
}

fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The identities this test run can use: both when the tests run as root,
/// only the unprivileged one otherwise (reported as a loud skip of Root).
pub fn identities(test: &str) -> Vec<Who> {
    let mut out = Vec::new();
    if require(
        test,
        "root (to test the root supervisor)",
        running_as_root(),
    ) {
        out.push(Who::Root);
    }
    if require_user_sandbox(test) {
        out.push(Who::User);
    }
    out
}

/// For tests that need a sandbox started by the test's own identity (root
/// when the tests run as root, the caller otherwise): skip loudly (or fail
/// under SANDBOX_TEST_REQUIRE=1) when there is none.
pub fn require_root_sandbox(test: &str) -> bool {
    require(test, "a sandbox as root", sandbox_works(Who::Root))
}

/// For tests that start `sandbox daemon`, which runs as root and starts
/// root's sandboxes: skip loudly (or fail under SANDBOX_TEST_REQUIRE=1)
/// when either is missing.
pub fn require_root_daemon(test: &str) -> bool {
    require(
        test,
        "root (the daemon runs as root)",
        nix::unistd::geteuid().is_root(),
    ) && require_root_sandbox(test)
}

/// For tests that need a sandbox started by the unprivileged identity:
/// skip loudly (or fail under SANDBOX_TEST_REQUIRE=1) when there is none.
pub fn require_user_sandbox(test: &str) -> bool {
    require(
        test,
        "user namespaces for an unprivileged user",
        sandbox_works(Who::User),
    )
}

/// Whether a trivial run starts for `who` (probed once per identity).
pub fn sandbox_works(who: Who) -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    static USER: OnceLock<bool> = OnceLock::new();
    let cell = if who == Who::Root { &ROOT } else { &USER };
    *cell.get_or_init(|| {
        let project = Project::new(who);
        let out = project.run(&["/bin/true"]);
        if !out.status.success() {
            eprintln!(
                "probe run as {who:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out.status.success()
    })
}

/// A secret of the host's that a sandbox must not show: a file outside
/// every project (in /var/tmp, mode 0644) that both test identities read
/// bare, so a run that cannot read it was refused by the sandbox, not by
/// the file's permissions (as `/etc/shadow` would be for the unprivileged
/// one). Not in /tmp: every view puts a private /tmp over the host's, so a
/// canary there is hidden by that mount alone, whatever else the view
/// shows of the host.
pub struct HostCanary {
    file: tempfile::NamedTempFile,
    content: String,
}

impl HostCanary {
    /// A fresh canary.
    pub fn new() -> HostCanary {
        let file = tempfile::Builder::new()
            .prefix("host-canary-")
            .tempfile_in("/var/tmp")
            .expect("canary");
        let content = format!("CANARY-{}", marker("canary"));
        std::fs::write(file.path(), &content).expect("canary");
        std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        HostCanary { file, content }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// What it holds (never to be seen in a sandbox's output).
    pub fn content(&self) -> &str {
        &self.content
    }

    /// A shell fragment printing `canary-readable` (and the content) when
    /// the canary can be read, `canary-blocked` otherwise.
    pub fn probe(&self) -> String {
        format!(
            "(cat '{}' 2>/dev/null && echo && echo canary-readable) || echo canary-blocked",
            self.path().display()
        )
    }

    /// Asserts that `who`, outside any sandbox, reads the canary: without
    /// that, its being blocked inside proves nothing.
    #[track_caller]
    pub fn assert_readable_bare(&self, who: Who) {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", &self.probe()]).stdin(Stdio::null());
        if who == Who::User && running_as_root() {
            cmd.uid(TEST_UID).gid(TEST_GID);
        }
        let out = cmd.output().expect("sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("canary-readable") && stdout.contains(&self.content),
            "{who:?} cannot read the canary {} bare, so a sandbox blocking it shows nothing: {stdout}",
            self.path().display()
        );
    }

    /// Asserts that a sandbox's output `stdout` of [`HostCanary::probe`]
    /// shows the canary blocked and none of its content.
    #[track_caller]
    pub fn assert_blocked_in(&self, stdout: &str, what: &str) {
        assert!(
            stdout.contains("canary-blocked") && !stdout.contains("canary-readable"),
            "{what}: the host's canary was readable inside:\n{stdout}"
        );
        assert!(
            !stdout.contains(&self.content),
            "{what}: the canary's content leaked:\n{stdout}"
        );
    }
}

/// A temporary project root owned by the identity that runs the sandbox.
pub struct Project {
    dir: tempfile::TempDir,
    /// Who runs the supervisor on it.
    pub who: Who,
}

impl Project {
    /// A fresh empty project under /tmp (world-traversable, owned by `who`).
    pub fn new(who: Who) -> Project {
        Project::new_in(who, Path::new("/tmp"))
    }

    /// A fresh empty project under `base` (which must let others through).
    pub fn new_in(who: Who, base: &Path) -> Project {
        let dir = tempfile::Builder::new()
            .prefix("sandbox-test-")
            .tempdir_in(base)
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let project = Project { dir, who };
        project.chown_all();
        project
    }

    /// The project root.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a file into the project (owned by the runner).
    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, content).expect("write");
        self.chown_all();
        path
    }

    fn chown_all(&self) {
        if self.who == Who::User && running_as_root() {
            let status = Command::new("chown")
                .arg("-R")
                .arg(format!("{TEST_UID}:{TEST_GID}"))
                .arg(self.path())
                .status()
                .expect("chown");
            assert!(status.success());
        }
    }

    /// A `sandbox` command run by this project's identity, in the project.
    pub fn command(&self) -> Command {
        let bin = match self.who {
            Who::User if running_as_root() => binary_for_test_user(),
            _ => PathBuf::from(sandbox_bin()),
        };
        let mut cmd = Command::new(bin);
        cmd.current_dir(self.path());
        if self.who == Who::User && running_as_root() {
            // std drops supplementary groups when a root parent sets a uid.
            cmd.uid(TEST_UID).gid(TEST_GID);
        }
        cmd
    }

    /// `sandbox run [extra] -- argv` with stdin closed; collects the output.
    pub fn run_with(&self, extra: &[&str], argv: &[&str]) -> Output {
        let mut cmd = self.command();
        cmd.arg("run")
            .args(extra)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null());
        cmd.output().expect("sandbox starts")
    }

    /// `sandbox run --profile <a file holding profile_toml> [extra] -- argv`.
    pub fn run_with_profile(&self, profile_toml: &str, extra: &[&str], argv: &[&str]) -> Output {
        let path = self.write("profile.toml", profile_toml);
        let path = path.to_str().expect("UTF-8 temp path");
        let mut args = vec!["--profile", path];
        args.extend_from_slice(extra);
        self.run_with(&args, argv)
    }

    /// `sandbox run -- argv` under the default profile.
    pub fn run(&self, argv: &[&str]) -> Output {
        self.run_with(&[], argv)
    }

    /// Run a shell script inside; asserts it succeeded and returns stdout.
    pub fn sh_ok(&self, script: &str) -> String {
        let out = self.run(&["/bin/sh", "-c", script]);
        assert_ok(&out, script);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Whether every directory above `path` lets "other" users through.
fn reachable_by_others(path: &Path) -> bool {
    path.ancestors()
        .skip(1)
        .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
        && std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005)
}

/// The binary, at a path the throwaway user can execute. A checkout may sit
/// below a private directory (a CI clone under `mktemp -d`, a home
/// directory); then the binary is copied to a world-readable directory
/// (atomically, by rename, so a running copy is never overwritten).
/// The other executables `sandbox` looks for beside itself (the faces of
/// `sandbox daemon`, `serve --mcp` and `oci`, and a run's net process) are
/// staged beside the copy too.
pub fn binary_for_test_user() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let original = Path::new(sandbox_bin());
        if let Some(dir) = original.parent() {
            for face in [
                "sandbox-daemon",
                "sandbox-mcp",
                "sandbox-oci",
                "sandbox-net",
            ] {
                let path = dir.join(face);
                if path.exists() {
                    staged_for_test_user(&path, face);
                }
            }
        }
        staged_for_test_user(original, "sandbox")
    })
    .clone()
}

/// `original`, at a path the throwaway user can read and execute: itself
/// when every directory above it lets others through, else a copy named
/// `name` in a world-readable directory (installed by rename, so a running
/// copy is never overwritten).
pub fn staged_for_test_user(original: &Path, name: &str) -> PathBuf {
    if reachable_by_others(original) {
        return original.to_path_buf();
    }
    let dir = PathBuf::from(format!("/tmp/sandbox-test-bin-{}", nix::unistd::geteuid()));
    std::fs::create_dir_all(&dir).expect("staging directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let staged = dir.join(format!("{name}.{}", std::process::id()));
    std::fs::copy(original, &staged).expect("copy for the test user");
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let target = dir.join(name);
    std::fs::rename(&staged, &target).expect("install for the test user");
    target
}

/// `tests/support/seccomp_wrap.py`, where the unprivileged test user can
/// read it too (a CI checkout may sit below a private directory).
pub fn seccomp_wrapper() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let original = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/seccomp_wrap.py");
        staged_for_test_user(&original, "seccomp_wrap.py")
            .to_string_lossy()
            .into_owned()
    })
}

/// The report `sandbox run --json` printed: the last line of its stderr
/// that is JSON (never on stdout, which is the command's). `what` names the
/// run in the panic when there is none.
pub fn json_report(stderr: &str, what: &str) -> serde_json::Value {
    stderr
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("{what}: no --json report in\n{stderr}"))
}

/// Panic with both streams when `out` is not a success.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Host pids whose parent is `parent` (`/proc/PID/stat` field 4; the
/// command name before it may hold spaces and parentheses).
pub fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1.to_owned();
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// Host pids whose command line contains `marker`.
pub fn host_pids_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline)
                .replace('\0', " ")
                .contains(marker)
            {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Wait until no host process has `marker` in its command line, up to
/// `seconds` scaled by the machine's load (see [`wait::limit`]); returns
/// the pids still there then.
pub fn wait_until_gone(marker: &str, seconds: u64) -> Vec<u32> {
    let mut left = Vec::new();
    wait::within(std::time::Duration::from_secs(seconds), || {
        left = host_pids_with(marker);
        left.is_empty().then_some(())
    });
    left
}

/// A marker unique to this test process and call site.
pub fn marker(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}{}{}",
        3_000_000 + std::process::id() % 1_000_000,
        tag.len(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A Python payload that asks the broker (fd 3) to write `granted.txt` and
/// prints the answer; strict puts the write to a person.
pub const ASK_FS_WRITE: &str = r#"
import socket
s = socket.socket(fileno=3)
s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"fs.write","params":{"path":"granted.txt","content":"yes"}}\n')
print(s.recv(65536).decode().strip())
"#;

/// A temporary project under /tmp that every identity can enter (skills'
/// hosts and sandboxes look at it).
pub fn skill_project(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `.skills/NAME` in `project`: see [`write_skill_at`]; returns its dir.
pub fn write_skill(
    project: &Path,
    name: &str,
    manifest_extra: &str,
    main: (&str, &str),
) -> PathBuf {
    let dir = project.join(".skills").join(name);
    write_skill_at(&dir, name, manifest_extra, main);
    dir
}

/// Skill `name` in `dir`: a manifest with `manifest_extra` lines and its
/// main file `main` = (name, text); the runtime follows the file's
/// extension (`.js` node, `.py` python, else sh).
pub fn write_skill_at(dir: &Path, name: &str, manifest_extra: &str, main: (&str, &str)) {
    std::fs::create_dir_all(dir).unwrap();
    let runtime = match Path::new(main.0).extension().and_then(|e| e.to_str()) {
        Some("js") => "node",
        Some("py") => "python",
        _ => "sh",
    };
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: test skill {name}\nruntime: {runtime}\nmain: {}\n{manifest_extra}---\nTest.\n",
            main.0
        ),
    )
    .unwrap();
    std::fs::write(dir.join(main.0), main.1).unwrap();
}

/// Whether every one of `tools` is a command on PATH.
pub fn commands_exist(tools: &[&str]) -> bool {
    tools.iter().all(|tool| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Where `sandbox oci` keeps container `id`'s record under `state_dir`
/// (one directory per runc `--root` below `containers/`), if anywhere.
pub fn oci_container_dir(state_dir: &Path, id: &str) -> Option<PathBuf> {
    std::fs::read_dir(state_dir.join("containers"))
        .ok()?
        .flatten()
        .map(|root| root.path().join(id))
        .find(|dir| dir.exists())
}

/// True when `path` is an ELF program with no interpreter (static).
pub fn is_static_elf(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 {
        return false;
    }
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|n| {
        let at = phoff + n * phentsize;
        // PT_INTERP = 3
        bytes.len() >= at + 4 && u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) != 3
    })
}

fn coarse_now_ns() -> i128 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE).unwrap();
    i128::from(now.tv_sec()) * 1_000_000_000 + i128::from(now.tv_nsec())
}

fn newest_change_ns(path: &std::path::Path) -> i128 {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).unwrap();
    let mut newest = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap().filter_map(Result::ok) {
            newest = newest.max(newest_change_ns(&entry.path()));
        }
    }
    newest
}

/// Wait until the filesystems' clock has moved past every change the test
/// made to the project, so that the run starts after them: a change in
/// the start's own clock tick counts as made during the run (a conflict
/// at apply, by design).
pub fn settle(project: &std::path::Path) {
    let newest = newest_change_ns(project);
    while coarse_now_ns() <= newest {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The largest resident size, in KiB, of any child this test process has
/// waited for (`getrusage(RUSAGE_CHILDREN)`): what a client it ran peaked at.
pub fn children_peak_rss_kib() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .unwrap()
        .max_rss()
}
