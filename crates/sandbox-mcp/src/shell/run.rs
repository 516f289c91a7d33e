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
/// dropped (also when the call's future is dropped).
struct ReportDir {
    path: PathBuf,
}

impl ReportDir {
    fn create() -> Result<ReportDir, ShellError> {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        loop {
            let path = base.join(format!(
                "sandbox-shell-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
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
        self.path.join("report.json")
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
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
