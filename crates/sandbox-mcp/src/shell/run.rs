//! One call: `sandbox run` started, watched, read and cleaned up after.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::capture::Capture;
use super::outcome::{apply_report, describe_status, supervisor_said, ShellOutcome};
use super::{ShellConfig, ShellError, ShellRequest};
use sandbox::profile::policy::Policy;
use sandbox::profile::size::format_duration;
use sandbox::spawn::Report;

/// `sandbox run` sends SIGKILL this long after the SIGTERM of its timeout.
const SANDBOX_KILL_GRACE: Duration = Duration::from_secs(2);
/// How long past its own timeout and kill grace `sandbox run` is given to
/// end before it is killed from here: only a wedged supervisor gets there.
const SUPERVISOR_SLACK: Duration = Duration::from_secs(10);
/// How long the pipes are still read once `sandbox run` has exited. Its
/// relay ends with it, but a run without a pid namespace may leave a
/// process holding a pipe; the call must not wait for that process.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Variables `sandbox run` itself reads, passed to it when set here;
/// everything else is cleared. The command's own environment is built by
/// the profile (`[env] set` and `pass`) from these and the profile's
/// `pass` names, so nothing else of the host reaches it. `SANDBOX_DAEMON`
/// is deliberately absent: it would send the run to a daemon.
const SUPERVISOR_ENV: &[&str] = &[
    // systemd-run and the toolchains of `[tools]`.
    "PATH",
    // The grant store, `[tools]` locations and the home directory guard.
    "HOME",
    "XDG_STATE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "SANDBOX_STATE_DIR",
    // A delegated cgroup scope for an unprivileged supervisor.
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
    // Runs without namespaces put their private /tmp here.
    "TMPDIR",
];

/// A private directory of this process for one run's report, removed when
/// dropped (also when the call's future is dropped). Its name carries this
/// process's pid namespace and pid, so that a later server can tell the
/// directories of servers that were killed (no `Drop` runs on SIGKILL) and
/// remove them ([`sweep_report_dirs`]).
struct ReportDir {
    path: PathBuf,
}

/// The start of every report directory's name.
const REPORT_DIR_PREFIX: &str = "sandbox-shell-";
/// The one file `sandbox run --report` writes in a report directory.
const REPORT_FILE: &str = "report.json";
/// At most this many entries of the temporary directory are looked at, and
/// this many leftovers removed, once per process: the sweep runs on the
/// server's one thread, before its first shell call.
const SWEEP_ENTRIES: usize = 10_000;
const SWEEP_REMOVALS: usize = 256;

impl ReportDir {
    fn create() -> Result<ReportDir, ShellError> {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // Read once, at the first call, which also sweeps.
        static NAMESPACE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        let base = std::env::temp_dir();
        let namespace = *NAMESPACE.get_or_init(|| {
            let namespace = pid_namespace();
            if let Some(namespace) = namespace {
                sweep_report_dirs(&base, namespace);
            }
            namespace
        });
        loop {
            let path = base.join(report_dir_name(
                namespace.unwrap_or(0),
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed),
            ));
            // 0700 and created here (never an existing directory): only
            // this user can put anything where the report is read from.
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(ReportDir { path }),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(ShellError::ReportDir { dir: base, source }),
            }
        }
    }

    fn report(&self) -> PathBuf {
        self.path.join(REPORT_FILE)
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`): a pid
/// means a process only within one.
fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// A report directory's name: its maker's pid namespace and pid (0 for a
/// namespace that could not be read: never swept), and a counter.
fn report_dir_name(namespace: u64, pid: u32, counter: u64) -> String {
    format!("{REPORT_DIR_PREFIX}{namespace}-{pid}-{counter}")
}

/// The pid namespace and pid in a report directory's name, if it is one.
fn report_dir_owner(name: &str) -> Option<(u64, i32)> {
    let mut parts = name.strip_prefix(REPORT_DIR_PREFIX)?.split('-');
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let (namespace, pid, counter) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !digits(namespace) || !digits(pid) || !digits(counter) {
        return None;
    }
    Some((namespace.parse().ok()?, pid.parse().ok()?))
}

/// Remove the report directories in `base` that servers of this user and
/// pid namespace left when they were killed: their pid is gone. Only what
/// a report directory holds is removed (its report, then the directory),
/// each step relative to descriptors of `base` and of the directory, and
/// only where no other user can rename a name of ours (`base` is ours or
/// root's, and sticky or writable by its owner alone). A directory of
/// another user, of another pid namespace (where its pid means another
/// process), of a live process, or holding anything else stays, and so
/// does anything that is not a directory.
fn sweep_report_dirs(base: &Path, namespace: u64) {
    use nix::fcntl::OFlag;
    use nix::sys::stat::{fstat, Mode};
    use nix::unistd::UnlinkatFlags;
    let say = |what: &dyn std::fmt::Display| {
        eprintln!("sandbox serve --mcp: sweeping {}: {what}", base.display());
    };
    let directory = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(base_fd) = nix::fcntl::open(
        base,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let uid = nix::unistd::geteuid().as_raw();
    let Ok(base_stat) = fstat(&base_fd) else {
        return;
    };
    let sticky = base_stat.st_mode & nix::libc::S_ISVTX != 0;
    let others_write = base_stat.st_mode & (nix::libc::S_IWGRP | nix::libc::S_IWOTH) != 0;
    if (base_stat.st_uid != uid && base_stat.st_uid != 0) || (others_write && !sticky) {
        return;
    }
    let Ok(listing) = nix::dir::Dir::openat(&base_fd, ".", directory, Mode::empty()) else {
        return;
    };
    let own = std::process::id() as i32;
    let mut removed = 0;
    for entry in listing.into_iter().take(SWEEP_ENTRIES).flatten() {
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        let Some((their_namespace, pid)) = report_dir_owner(name) else {
            continue;
        };
        if their_namespace != namespace || pid == own || sandbox::os::process_exists(pid) {
            continue;
        }
        let Ok(dir) = nix::fcntl::openat(&base_fd, name, directory, Mode::empty()) else {
            continue;
        };
        if !fstat(&dir).is_ok_and(|st| st.st_uid == uid) {
            continue;
        }
        match nix::unistd::unlinkat(&dir, REPORT_FILE, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
            Err(errno) => {
                say(&format_args!("{name}/{REPORT_FILE}: {errno}; it stays"));
                continue;
            }
        }
        match nix::unistd::unlinkat(&base_fd, name, UnlinkatFlags::RemoveDir) {
            Ok(()) => removed += 1,
            Err(errno) => say(&format_args!("{name}: {errno}; it stays")),
        }
        if removed == SWEEP_REMOVALS {
            return;
        }
    }
}

/// Run one call. Dropping the returned future kills the run.
pub async fn run(config: &ShellConfig, request: &ShellRequest) -> Result<ShellOutcome, ShellError> {
    let timeout = request
        .timeout
        .unwrap_or_else(|| config.effective_default_timeout())
        .min(config.timeout_ceiling())
        // `sandbox run --timeout` counts whole milliseconds, from 1.
        .max(Duration::from_millis(1));
    let report_dir = ReportDir::create()?;
    let report_path = report_dir.report();

    let mut command = tokio::process::Command::new(&config.program);
    command
        .arg("run")
        .arg("--profile")
        .arg(&config.profile_spec)
        .arg("--project")
        .arg(&config.project)
        .arg("--timeout")
        .arg(format_duration(timeout))
        .arg("--report")
        .arg(&report_path)
        // Nobody can answer a question on a terminal here: an action that
        // would ask is denied, never left waiting on /dev/tty.
        .arg("--non-interactive")
        .arg("--quiet")
        .args(request.review.then_some("--review"))
        .arg("--")
        .arg("/bin/sh")
        .arg("-c")
        .arg(&request.command)
        .current_dir(&config.project)
        .env_clear()
        .envs(supervisor_env(&config.policy))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // An agent host stops its server with a signal: `sandbox run` (and
    // with it the command) must end with this process, not run on to its
    // timeout unwatched. The front spawns from its runtime's one thread.
    sandbox::os::die_with_spawner(command.as_std_mut());
    let mut child = command.spawn().map_err(|source| ShellError::Spawn {
        program: config.program.clone(),
        source,
    })?;
    let stdout_pipe = child.stdout.take();
    let stderr_pipe = child.stderr.take();
    let mut stdout = Capture::new(config.output_cap);
    let mut stderr = Capture::new(config.output_cap);

    let (exited, exited_seen) = tokio::sync::oneshot::channel::<()>();
    let reading = async {
        let both =
            async { tokio::join!(stdout.read_from(stdout_pipe), stderr.read_from(stderr_pipe)) };
        let cut_off = async {
            let _ = exited_seen.await;
            tokio::time::sleep(DRAIN_AFTER_EXIT).await;
        };
        tokio::select! {
            _ = both => {}
            _ = cut_off => {}
        }
    };
    let deadline = timeout + SANDBOX_KILL_GRACE + SUPERVISOR_SLACK;
    let waiting = async {
        let result = match tokio::time::timeout(deadline, child.wait()).await {
            Ok(status) => status.map(|status| (status, false)),
            Err(_) => {
                let _ = child.start_kill();
                child.wait().await.map(|status| (status, true))
            }
        };
        let _ = exited.send(());
        result
    };
    let ((), waited) = tokio::join!(reading, waiting);
    let (status, overran) = waited.map_err(|source| ShellError::Io {
        step: "waiting for the end",
        source,
    })?;
    let stdout = stdout.finish();
    let stderr = stderr.finish();

    let mut outcome = ShellOutcome {
        exit_code: None,
        signal: None,
        timed_out: overran,
        timeout,
        sandbox_error: None,
        stdout,
        stderr,
        review: None,
    };
    if overran {
        outcome.sandbox_error = Some(format!(
            "sandbox run did not end within {} of its timeout and was killed",
            format_duration(SANDBOX_KILL_GRACE + SUPERVISOR_SLACK)
        ));
        return Ok(outcome);
    }
    match read_report(&report_path) {
        Some(report) => {
            apply_report(&mut outcome, &report, status);
            // The store is the one `sandbox run` used: it has this
            // process's state directory variables (SUPERVISOR_ENV).
            outcome.review = report
                .review
                .as_ref()
                .map(|kept| super::review::summary(&sandbox::review::Store::user(), kept));
        }
        None => {
            outcome.sandbox_error = Some(format!(
                "sandbox run ended ({}) without a report{}",
                describe_status(status),
                supervisor_said(&outcome.stderr.text)
            ));
        }
    }
    drop(report_dir);
    Ok(outcome)
}

/// The environment of `sandbox run`: [`SUPERVISOR_ENV`] and the names the
/// profile passes to the command, where set here.
fn supervisor_env(policy: &Policy) -> Vec<(String, OsString)> {
    SUPERVISOR_ENV
        .iter()
        .copied()
        .chain(policy.env.pass.iter().map(String::as_str))
        .filter_map(|name| std::env::var_os(name).map(|value| (name.to_owned(), value)))
        .collect()
}

/// The report `sandbox run --report` wrote; None when there is none or it
/// does not read as one.
fn read_report(path: &Path) -> Option<Report> {
    let text = std::fs::read(path).ok()?;
    Report::read_slice(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_directorys_owner_is_read_only_from_its_name() {
        assert_eq!(
            report_dir_owner(&report_dir_name(4026531836, 4711, 3)),
            Some((4026531836, 4711))
        );
        for other in [
            "sandbox-shell-4711-3",
            "sandbox-shell-1-2-3-4",
            "sandbox-shell-1--3",
            "sandbox-shell-1-+2-3",
            "sandbox-shell-1-99999999999-3",
            "sandbox-shell-x-2-3",
            "shell-1-2-3",
        ] {
            assert_eq!(report_dir_owner(other), None, "{other}");
        }
    }

    /// A pid no process has: a child's, once it is reaped.
    fn dead_pid() -> u32 {
        loop {
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let pid = child.id();
            child.wait().unwrap();
            if !sandbox::os::process_exists(pid as i32) {
                return pid;
            }
        }
    }

    fn make(base: &Path, name: String) -> PathBuf {
        let path = base.join(name);
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join(REPORT_FILE), "{}").unwrap();
        path
    }

    #[test]
    fn the_directories_of_killed_servers_are_removed_and_nothing_else() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path();
        let namespace = pid_namespace().expect("/proc/self/ns/pid");
        let dead = dead_pid();
        let left = make(base, report_dir_name(namespace, dead, 0));
        let left_too = make(base, report_dir_name(namespace, dead, 7));
        let own = make(base, report_dir_name(namespace, std::process::id(), 0));
        let alive = make(base, report_dir_name(namespace, 1, 0));
        let other_namespace = make(base, report_dir_name(namespace + 1, dead, 0));
        let unknown_namespace = make(base, report_dir_name(0, dead, 0));
        let old_name = make(base, format!("{REPORT_DIR_PREFIX}{dead}-0"));
        let holding_more = make(base, report_dir_name(namespace, dead, 5));
        std::fs::write(holding_more.join("planted"), "").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join(REPORT_FILE), "").unwrap();
        let link = base.join(report_dir_name(namespace, dead, 9));
        std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
        let another_users = make(base, report_dir_name(namespace, dead, 8));
        let chowned = nix::unistd::chown(
            &another_users,
            Some(nix::unistd::Uid::from_raw(65534)),
            None,
        );

        sweep_report_dirs(base, namespace);

        assert!(
            !left.exists() && !left_too.exists(),
            "a killed server's directories stay"
        );
        for kept in [
            &own,
            &alive,
            &other_namespace,
            &unknown_namespace,
            &old_name,
        ] {
            assert!(
                kept.join(REPORT_FILE).exists(),
                "{} was swept",
                kept.display()
            );
        }
        assert!(
            holding_more.join("planted").exists(),
            "what a report directory does not hold was removed"
        );
        assert!(link.symlink_metadata().is_ok(), "the link was removed");
        assert!(
            elsewhere.path().join(REPORT_FILE).exists(),
            "the sweep followed a link"
        );
        match chowned {
            Ok(()) => assert!(
                another_users.join(REPORT_FILE).exists(),
                "another user's directory was swept"
            ),
            Err(errno) => {
                let why = format!("SKIPPED: another user's directory (chown to 65534: {errno})");
                eprintln!("{why}");
                assert!(std::env::var_os("SANDBOX_TEST_REQUIRE").is_none(), "{why}");
            }
        }
    }

    #[test]
    fn nothing_is_swept_where_another_user_could_rename_our_names() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let namespace = pid_namespace().expect("/proc/self/ns/pid");
        let left = make(base.path(), report_dir_name(namespace, dead_pid(), 0));
        let mode = |mode| std::fs::set_permissions(base.path(), PermissionsExt::from_mode(mode));

        mode(0o777).unwrap();
        sweep_report_dirs(base.path(), namespace);
        assert!(left.exists(), "swept in a directory anyone can rename in");

        mode(0o1777).unwrap();
        sweep_report_dirs(base.path(), namespace);
        assert!(!left.exists(), "not swept in a sticky directory");
    }
}
