//! `terminal.run`: a command run in a nested sandbox with the caller's own
//! policy, as a job of the supervisor's loop. Its pipes are polled with the
//! run's other descriptors and serviced without waiting, it ends at its own
//! timeout or the run's deadline (whichever is first), and its output is
//! capped; meanwhile the run's timeout, signal forwarding and output relay
//! go on.
//!
//! The broker does not start sandboxes itself: whoever runs the broker
//! gives it a [`NestedRunner`] (the library's `Command`, with the run's own
//! policy), so the broker stays below the spawn path it serves.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::PollFlags;
use nix::sys::wait::{waitid, Id as WaitId, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::{json, Value};

use super::protocol::code;
use super::protocol::{fail, Failure};

/// Most bytes kept of each of stdout and stderr.
const OUTPUT_CAP: usize = 256 << 10;
/// How often an exit is looked for once both pipes are closed (a command
/// may close them and go on running; init's exit has no descriptor here).
const EXIT_CHECK: Duration = Duration::from_millis(20);

/// `terminal.run` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Seconds (0.1 to 3600, default 30).
    pub timeout: Option<f64>,
    /// Working directory, beneath the project root.
    pub cwd: Option<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Fed to the command's stdin.
    #[serde(default)]
    pub stdin: String,
}

/// A command `terminal.run` starts: the broker has checked and resolved it.
#[derive(Debug)]
pub struct NestedCommand<'a> {
    /// Program and arguments (never empty).
    pub argv: &'a [String],
    /// The project root, the nested sandbox's project too.
    pub project: &'a Path,
    /// The working directory, beneath the project root.
    pub cwd: Option<PathBuf>,
    /// Extra environment (no variable that loads code).
    pub env: &'a BTreeMap<String, String>,
    /// stdin, stdout and stderr: the job's pipes.
    pub stdio: [OwnedFd; 3],
}

/// Starts `terminal.run` commands, each in a sandbox no weaker than the
/// caller's own.
pub trait NestedRunner: std::fmt::Debug + Send + Sync {
    /// Start `command`; the error says why it did not start.
    fn start(&self, command: NestedCommand<'_>) -> Result<Box<dyn NestedRun>, String>;
}

/// A started nested command.
pub trait NestedRun: Send {
    /// The host pid to wait on: every process of the nested run is gone
    /// once it has exited.
    fn id(&self) -> u32;
    /// End the nested run now (its timeout).
    fn kill(&mut self);
    /// Wait for the end of the nested run (it has exited).
    fn wait(self: Box<Self>) -> Result<NestedExit, NestedFailure>;
}

/// How a nested command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NestedExit {
    /// Its exit code, unless a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
}

/// Why a nested command did not run to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NestedFailure {
    /// The program was not found or could not be executed.
    NotFound(String),
    /// Anything else (a layer the policy requires, a setup step).
    Failed(String),
}

/// One captured stream.
#[derive(Debug)]
struct Capture {
    fd: Option<OwnedFd>,
    data: Vec<u8>,
    cut: bool,
}

impl Capture {
    fn new(fd: OwnedFd) -> Capture {
        Capture {
            fd: Some(fd),
            data: Vec::new(),
            cut: false,
        }
    }

    /// Read what is there now.
    fn pump(&mut self) {
        let Some(fd) = &self.fd else { return };
        let mut buf = [0u8; 16 * 1024];
        loop {
            match nix::unistd::read(fd, &mut buf) {
                Ok(0) => {
                    self.fd = None;
                    return;
                }
                Ok(n) => {
                    let room = OUTPUT_CAP.saturating_sub(self.data.len()).min(n);
                    self.data.extend_from_slice(&buf[..room]);
                    self.cut |= room < n;
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                Err(_) => {
                    self.fd = None;
                    return;
                }
            }
        }
    }
}

/// A running `terminal.run`.
pub struct Job {
    child: Option<Box<dyn NestedRun>>,
    pid: Pid,
    stdout: Capture,
    stderr: Capture,
    stdin: Option<OwnedFd>,
    input: Vec<u8>,
    written: usize,
    deadline: Instant,
    timed_out: bool,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("pid", &self.pid).finish()
    }
}

/// Variables that make the dynamic loader or libc load code.
fn loads_code(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("LD_")
        || matches!(
            upper.as_str(),
            "GCONV_PATH" | "HOSTALIASES" | "LOCALDOMAIN" | "RESOLV_HOST_CONF"
        )
}

fn nonblocking_pipe() -> Result<(OwnedFd, OwnedFd), Failure> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))
}

fn set_nonblocking(fd: &OwnedFd) -> Result<(), Failure> {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
        .map(drop)
        .map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))
}

impl Job {
    /// Start `params.argv` with `runner` in `project` (working directory
    /// `cwd`, already resolved beneath it), ending by `run_deadline` at the latest.
    pub fn start(
        runner: std::sync::Arc<dyn NestedRunner>,
        project: &Path,
        cwd: Option<PathBuf>,
        params: RunParams,
        run_deadline: Option<Instant>,
    ) -> Result<Job, Failure> {
        if params.argv.is_empty() {
            return Err(fail(
                code::INVALID_PARAMS,
                "terminal.run needs {\"argv\": [PROGRAM, ARGS...]}",
            ));
        }
        if let Some(name) = params.env.keys().find(|name| loads_code(name)) {
            return Err(Failure {
                code: code::PERMISSION_DENIED,
                message: format!(
                    "the environment variable {name} is refused: it can load code into the command"
                ),
                rule: Some("terminal.run environment".into()),
            });
        }
        let timeout = params.timeout.unwrap_or(30.0);
        let timeout = if timeout.is_finite() {
            timeout.clamp(0.1, 3600.0)
        } else {
            30.0
        };
        let mut deadline = Instant::now() + Duration::from_secs_f64(timeout);
        if let Some(run) = run_deadline {
            deadline = deadline.min(run);
        }
        let (out_r, out_w) = nonblocking_pipe()?;
        let (err_r, err_w) = nonblocking_pipe()?;
        let (in_r, in_w) = nonblocking_pipe()?;
        for fd in [&out_r, &err_r, &in_w] {
            set_nonblocking(fd)?;
        }
        let child = runner
            .start(NestedCommand {
                argv: &params.argv,
                project,
                cwd,
                env: &params.env,
                stdio: [in_r, out_w, err_w],
            })
            .map_err(|e| {
                fail(
                    code::INTERNAL_ERROR,
                    format!("starting {}: {e}", params.argv[0]),
                )
            })?;
        let pid = Pid::from_raw(child.id() as i32);
        Ok(Job {
            child: Some(child),
            pid,
            stdout: Capture::new(out_r),
            stderr: Capture::new(err_r),
            stdin: Some(in_w),
            input: params.stdin.into_bytes(),
            written: 0,
            deadline,
            timed_out: false,
        })
    }

    /// Descriptors to poll, with their events.
    pub fn poll_fds(&self) -> Vec<(BorrowedFd<'_>, PollFlags)> {
        let mut fds = Vec::with_capacity(3);
        for capture in [&self.stdout, &self.stderr] {
            if let Some(fd) = &capture.fd {
                fds.push((fd.as_fd(), PollFlags::POLLIN));
            }
        }
        if let Some(fd) = &self.stdin {
            fds.push((fd.as_fd(), PollFlags::POLLOUT));
        }
        fds
    }

    /// When the job needs a turn even if no descriptor is ready.
    pub fn deadline(&self) -> Instant {
        let pipes_open = self.stdout.fd.is_some() || self.stderr.fd.is_some();
        match (self.timed_out, pipes_open) {
            (false, true) => self.deadline,
            (false, false) => self.deadline.min(Instant::now() + EXIT_CHECK),
            (true, _) => Instant::now() + EXIT_CHECK,
        }
    }

    /// Service the job without waiting; its result once it is over.
    pub fn step(&mut self) -> Option<Result<Value, Failure>> {
        self.stdout.pump();
        self.stderr.pump();
        if let Some(fd) = &self.stdin {
            if self.written >= self.input.len() {
                self.stdin = None; // end-of-file for the command
            } else {
                match nix::unistd::write(fd, &self.input[self.written..]) {
                    Ok(n) => self.written += n,
                    Err(Errno::EAGAIN | Errno::EINTR) => {}
                    Err(_) => self.stdin = None,
                }
                if self.written >= self.input.len() {
                    self.stdin = None;
                }
            }
        }
        if !self.timed_out && Instant::now() >= self.deadline {
            self.timed_out = true;
            if let Some(child) = &mut self.child {
                child.kill();
            }
        }
        // WNOWAIT: only look; the run's own wait below reaps init.
        let exited = !matches!(
            waitid(
                WaitId::Pid(self.pid),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
            ),
            Ok(WaitStatus::StillAlive)
        );
        if !exited {
            return None;
        }
        // Init's exit tore down its pid namespace: nobody holds the pipes.
        self.stdout.pump();
        self.stderr.pump();
        let finished = self.child.take()?.wait();
        Some(self.result(finished))
    }

    fn result(&self, finished: Result<NestedExit, NestedFailure>) -> Result<Value, Failure> {
        let status = finished.map_err(|e| match e {
            NestedFailure::NotFound(message) => fail(code::NOT_FOUND, message),
            NestedFailure::Failed(message) => fail(code::INTERNAL_ERROR, message),
        })?;
        Ok(json!({
            "exit_code": status.code,
            "signal": status.signal,
            "timed_out": self.timed_out,
            "stdout": String::from_utf8_lossy(&self.stdout.data),
            "stderr": String::from_utf8_lossy(&self.stderr.data),
            "stdout_truncated": self.stdout.cut,
            "stderr_truncated": self.stderr.cut,
        }))
    }
}
