//! The sandboxed shell tool: one command line, run by `/bin/sh -c` inside
//! `sandbox run` under the server's profile, with the project as working
//! directory.
//!
//! The command runs in a separate `sandbox run` process (the real binary,
//! `/proc/self/exe` in production) rather than through the library: the
//! spawn path clones with the raw system call, which is only sound from a
//! single-threaded process, and the MCP server's runtime may not stay
//! that (a blocking stdin reader). A separate process also gives
//! cancellation for free: dropping
//! the future kills the supervisor (`kill_on_drop`), whose death kills the
//! sandbox's init (its parent-death signal) and with it every process of
//! the run (the pid namespace).
//!
//! How the run ended is read from the run's JSON report (`--report`, to a
//! file in a private directory of this process), never from the exit
//! status alone: a command may exit 125 or 2 itself, and only the report
//! tells "the sandbox refused or failed" (its `error`, no `exit`) from
//! "the command exited", and a timeout (`limits_hit`) from a command that
//! happened to die of SIGTERM.
//!
//! Output is read concurrently from both pipes; each keeps its first
//! `output_cap` bytes, and the rest is read and counted but dropped, so the
//! command never blocks on a full pipe and memory stays bounded whatever it
//! prints.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::AsyncReadExt;

use crate::profile::policy::{NetworkMode, Policy, ProjectAccess};
use crate::profile::size::{format_duration, format_size};
use crate::spawn::parent::LimitHit;
use crate::spawn::Report;

/// The tool's name.
pub const TOOL_NAME: &str = "shell";

/// Bytes of stdout, and separately of stderr, returned by default.
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;
/// Timeout of a call that gives no `timeout_ms`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest `timeout_ms` a call may ask for (the profile's own timeout, when
/// shorter, lowers it further).
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(600);

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

/// Why the shell tool could not be set up or a call could not run.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// The server's profile does not load.
    #[error("the shell tool's profile {spec}: {source}")]
    Profile {
        /// The profile as given.
        spec: String,
        /// Why it does not load.
        #[source]
        source: crate::profile::ProfileError,
    },
    /// The project directory cannot be resolved.
    #[error("the shell tool's project {}: {source}; give an existing directory", path.display())]
    Project {
        /// The project as given.
        path: PathBuf,
        /// Why it cannot be resolved.
        #[source]
        source: std::io::Error,
    },
    /// The call has no `command`.
    #[error("missing argument \"command\": give the command line to run as a string, e.g. {{\"command\": \"ls -la\"}}")]
    MissingCommand,
    /// `command` is not a string.
    #[error("argument \"command\" must be a string holding the command line (run by /bin/sh -c), not {found}")]
    CommandNotString {
        /// The JSON type given.
        found: &'static str,
    },
    /// `command` is empty or only blanks.
    #[error("argument \"command\" is empty: give the command line to run, e.g. \"ls -la\"")]
    EmptyCommand,
    /// `command` holds a NUL byte, which no argument of a program can carry.
    #[error("argument \"command\" contains a NUL character, which a command line cannot carry; remove it")]
    CommandHasNul,
    /// `timeout_ms` is not a positive whole number.
    #[error("argument \"timeout_ms\" must be a whole number of milliseconds from 1 to {max_ms}, not {found}")]
    TimeoutNotInteger {
        /// What was given, as JSON.
        found: String,
        /// The largest value allowed.
        max_ms: u64,
    },
    /// `timeout_ms` is 0 or above the ceiling.
    #[error("argument \"timeout_ms\" is {given}: it must be from 1 to {max_ms} (leave it out for the default of {default_ms})")]
    TimeoutOutOfRange {
        /// The value given.
        given: u64,
        /// The largest value allowed.
        max_ms: u64,
        /// The default.
        default_ms: u64,
    },
    /// An argument the tool does not take.
    #[error(
        "unknown argument \"{name}\": the shell tool takes only \"command\" and \"timeout_ms\""
    )]
    UnknownArgument {
        /// Its name.
        name: String,
    },
    /// The private directory for the run's report could not be made.
    #[error("creating a private directory for the run's report in {}: {source}; check that the directory exists and is writable (or set TMPDIR)", dir.display())]
    ReportDir {
        /// Where it was tried.
        dir: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// `sandbox run` could not be started.
    #[error("starting {}: {source}; check that the sandbox binary exists and is executable", program.display())]
    Spawn {
        /// The binary.
        program: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Reading the command's output or waiting for it failed.
    #[error("{step} of the shell command: {source}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl ShellError {
    /// Whether the call's arguments are at fault (the caller can fix the
    /// call), as opposed to the server or the sandbox.
    pub fn is_invalid_arguments(&self) -> bool {
        matches!(
            self,
            ShellError::MissingCommand
                | ShellError::CommandNotString { .. }
                | ShellError::EmptyCommand
                | ShellError::CommandHasNul
                | ShellError::TimeoutNotInteger { .. }
                | ShellError::TimeoutOutOfRange { .. }
                | ShellError::UnknownArgument { .. }
        )
    }
}

/// How shell calls are run.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// The `sandbox` binary (`/proc/self/exe` in production).
    pub program: PathBuf,
    /// The profile as `sandbox run --profile` takes it: a built-in name or
    /// an absolute path.
    pub profile_spec: String,
    /// The profile, loaded: what the description promises and which
    /// variables `sandbox run` needs passed.
    pub policy: Policy,
    /// The project root (canonical): writable inside and the working directory.
    pub project: PathBuf,
    /// Bytes kept of stdout, and separately of stderr.
    pub output_cap: usize,
    /// Timeout of a call without `timeout_ms`.
    pub default_timeout: Duration,
    /// Longest `timeout_ms` allowed.
    pub max_timeout: Duration,
}

impl ShellConfig {
    /// Load `profile_spec` (a built-in name or a profile file, made
    /// absolute here since runs start in the project) for a project, with
    /// the default caps.
    pub fn new(
        program: impl Into<PathBuf>,
        profile_spec: &str,
        project: &Path,
    ) -> Result<ShellConfig, ShellError> {
        let profile_spec = if profile_spec.contains('/') || profile_spec.ends_with(".toml") {
            let absolute =
                std::path::absolute(profile_spec).map_err(|source| ShellError::Profile {
                    spec: profile_spec.to_owned(),
                    source: crate::profile::ProfileError::Read {
                        path: PathBuf::from(profile_spec),
                        source,
                    },
                })?;
            absolute.to_string_lossy().into_owned()
        } else {
            profile_spec.to_owned()
        };
        let policy = crate::profile::load(&profile_spec).map_err(|source| ShellError::Profile {
            spec: profile_spec.clone(),
            source,
        })?;
        ShellConfig::for_loaded(program, profile_spec, policy, project)
    }

    /// The same for a profile already loaded from `profile_spec` (a
    /// built-in name or an absolute path, as `serve` keeps it): not read
    /// and checked a second time at start-up.
    pub fn for_loaded(
        program: impl Into<PathBuf>,
        profile_spec: String,
        policy: crate::Policy,
        project: &Path,
    ) -> Result<ShellConfig, ShellError> {
        let project = std::fs::canonicalize(project).map_err(|source| ShellError::Project {
            path: project.to_path_buf(),
            source,
        })?;
        Ok(ShellConfig {
            program: program.into(),
            profile_spec,
            policy,
            project,
            output_cap: DEFAULT_OUTPUT_CAP,
            default_timeout: DEFAULT_TIMEOUT,
            max_timeout: DEFAULT_MAX_TIMEOUT,
        })
    }

    /// The longest timeout a call gets: `max_timeout`, or the profile's own
    /// timeout when that is shorter (a call never outlives the profile).
    pub fn timeout_ceiling(&self) -> Duration {
        match self.policy.limits.timeout {
            Some(profile) => profile.min(self.max_timeout),
            None => self.max_timeout,
        }
    }

    /// The timeout of a call without `timeout_ms`.
    pub fn effective_default_timeout(&self) -> Duration {
        self.default_timeout.min(self.timeout_ceiling())
    }
}

/// One validated call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellRequest {
    /// The command line, run by `/bin/sh -c`.
    pub command: String,
    /// The timeout asked for (None: the default).
    pub timeout: Option<Duration>,
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl ShellRequest {
    /// Validate a call's arguments against what `config` allows.
    pub fn from_arguments(
        arguments: &Map<String, Value>,
        config: &ShellConfig,
    ) -> Result<ShellRequest, ShellError> {
        if let Some(name) = arguments
            .keys()
            .find(|name| !matches!(name.as_str(), "command" | "timeout_ms"))
        {
            return Err(ShellError::UnknownArgument { name: name.clone() });
        }
        let command = match arguments.get("command") {
            None => return Err(ShellError::MissingCommand),
            Some(Value::String(command)) => command,
            Some(other) => {
                return Err(ShellError::CommandNotString {
                    found: json_type(other),
                })
            }
        };
        if command.trim().is_empty() {
            return Err(ShellError::EmptyCommand);
        }
        if command.contains('\0') {
            return Err(ShellError::CommandHasNul);
        }
        let max_ms = millis(config.timeout_ceiling());
        let timeout = match arguments.get("timeout_ms") {
            None | Some(Value::Null) => None,
            Some(value) => {
                let given = value
                    .as_u64()
                    .ok_or_else(|| ShellError::TimeoutNotInteger {
                        found: value.to_string(),
                        max_ms,
                    })?;
                if given == 0 || given > max_ms {
                    return Err(ShellError::TimeoutOutOfRange {
                        given,
                        max_ms,
                        default_ms: millis(config.effective_default_timeout()),
                    });
                }
                Some(Duration::from_millis(given))
            }
        };
        Ok(ShellRequest {
            command: command.clone(),
            timeout,
        })
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The JSON schema of the tool's arguments.
pub fn input_schema(config: &ShellConfig) -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "minLength": 1,
                "description": "The command line, run by /bin/sh -c in the project directory, with no input (stdin is empty)."
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "maximum": millis(config.timeout_ceiling()),
                "description": format!(
                    "Wall-clock limit in milliseconds (default {}): the command gets SIGTERM, then SIGKILL 2 s later.",
                    millis(config.effective_default_timeout())
                )
            }
        },
        "required": ["command"],
        "additionalProperties": false
    })
}

/// The JSON schema of the tool's structured result ([`ShellOutcome::structured`]).
pub fn output_schema() -> Value {
    let count =
        |description: &str| json!({"type": "integer", "minimum": 0, "description": description});
    json!({
        "type": "object",
        "properties": {
            "exit_code": {"type": ["integer", "null"], "description": "The command's exit code; null when a signal ended it or it never ran."},
            "signal": {"type": ["integer", "null"], "description": "The signal that ended the command, if one did."},
            "timed_out": {"type": "boolean", "description": "The timeout ended the command."},
            "timeout_ms": {"type": "integer", "minimum": 1, "description": "The timeout the command ran under."},
            "stdout": {"type": "string", "description": "The start of standard output (invalid UTF-8 replaced)."},
            "stderr": {"type": "string", "description": "The start of standard error (invalid UTF-8 replaced)."},
            "stdout_truncated": {"type": "boolean", "description": "stdout holds only the first stdout_shown_bytes of stdout_bytes."},
            "stderr_truncated": {"type": "boolean", "description": "stderr holds only the first stderr_shown_bytes of stderr_bytes."},
            "stdout_bytes": count("Bytes the command wrote to stdout in all."),
            "stderr_bytes": count("Bytes the command wrote to stderr in all."),
            "stdout_shown_bytes": count("Bytes of stdout returned."),
            "stderr_shown_bytes": count("Bytes of stderr returned."),
            "sandbox_error": {"type": ["string", "null"], "description": "Why the sandbox could not run the command; null when it ran."}
        },
        "required": [
            "exit_code", "signal", "timed_out", "timeout_ms", "stdout", "stderr",
            "stdout_truncated", "stderr_truncated", "stdout_bytes", "stderr_bytes",
            "stdout_shown_bytes", "stderr_shown_bytes", "sandbox_error"
        ],
        "additionalProperties": false
    })
}

/// The tool's description: what the command may do in the sandbox, read
/// from the profile, so that an agent knows before it tries.
pub fn description(config: &ShellConfig) -> String {
    let policy = &config.policy;
    let fs = &policy.filesystem;
    let project = config.project.display();
    let mut out = format!(
        "Run a command line with /bin/sh -c inside a sandbox (profile \"{}\"), in the project directory {project}, and get its exit code, stdout and stderr. ",
        policy.name
    );
    out.push_str(match fs.project {
        ProjectAccess::ReadWrite => "The command can read and write the project",
        ProjectAccess::ReadOnly => "The command can read the project but not change it",
        ProjectAccess::Empty => {
            "The command cannot see the project's files (the directory is empty and read-only)"
        }
    });
    if fs.project != ProjectAccess::Empty && !fs.secrets.is_empty() {
        out.push_str(&format!(
            "; secret files in it read as empty ({})",
            pattern_list(&fs.secrets)
        ));
    }
    if fs.project == ProjectAccess::ReadWrite && !fs.protect.is_empty() {
        out.push_str(&format!(
            "; these stay read-only: {}",
            pattern_list(&fs.protect)
        ));
    }
    out.push_str(". ");
    let readable: Vec<&Path> = fs
        .read
        .iter()
        .chain(fs.read_if_exists.iter().filter(|path| path.exists()))
        .map(PathBuf::as_path)
        .collect();
    let readable = path_summary(&readable);
    if !readable.is_empty() {
        out.push_str(&format!(
            "Also readable, never writable: {}",
            readable.join(", ")
        ));
        if !fs.hide.is_empty() {
            let hidden: Vec<String> = fs.hide.iter().map(|p| p.display().to_string()).collect();
            out.push_str(&format!(" (except {})", hidden.join(", ")));
        }
        out.push_str(". ");
    }
    if !fs.write.is_empty() {
        let writable: Vec<String> = fs.write.iter().map(|p| p.display().to_string()).collect();
        out.push_str(&format!("Also writable: {}. ", writable.join(", ")));
    }
    out.push_str(&format!(
        "Nothing else of the host is visible; /tmp is private and empty ({}), and is gone after the call. ",
        format_size(fs.tmp_size)
    ));
    out.push_str(match policy.network.mode {
        NetworkMode::None => "No network at all. ",
        NetworkMode::Loopback => {
            "No network beyond the sandbox's own loopback (127.0.0.1 inside; nothing leaves the sandbox). "
        }
        NetworkMode::Allowlist => {
            "No network but a proxy (HTTP_PROXY, HTTPS_PROXY and ALL_PROXY are set) to the hosts the profile lists and those a person approves. "
        }
        NetworkMode::Host => "The host's network is available (no network isolation). ",
    });
    let mut env: Vec<&str> = policy.env.set.keys().map(String::as_str).collect();
    env.extend(policy.env.pass.iter().map(String::as_str));
    env.sort_unstable();
    env.dedup();
    // A profile may pass any variable of the host: the promise of no host
    // secrets holds only while every name it passes is of the kind that
    // never carries one.
    let passed_secrets: Vec<&str> = policy
        .env
        .pass
        .iter()
        .map(String::as_str)
        .filter(|name| !policy.env.set.contains_key(*name) && !is_harmless_variable(name))
        .collect();
    out.push_str(&format!("Environment: only {}", env.join(", ")));
    if passed_secrets.is_empty() {
        out.push_str(" (no host secrets, tokens or credentials). ");
    } else {
        out.push_str(&format!(
            " (the profile passes the host's {} as they are). ",
            passed_secrets.join(", ")
        ));
    }
    let mut limits = vec![format!(
        "timeout {} by default, at most {} with timeout_ms",
        format_duration(config.effective_default_timeout()),
        format_duration(config.timeout_ceiling())
    )];
    if let Some(memory) = policy.limits.memory {
        limits.push(format!("memory {}", format_size(memory)));
    }
    if let Some(pids) = policy.limits.pids {
        limits.push(format!("{pids} processes"));
    }
    if let Some(cpu) = policy.limits.cpu {
        limits.push(format!("{cpu} CPU"));
    }
    limits.push(format!(
        "stdout and stderr returned up to {} each (the rest is counted and said to be cut)",
        format_size(config.output_cap as u64)
    ));
    out.push_str(&format!("Limits: {}. ", limits.join("; ")));
    out.push_str("There is no input and no terminal; the command's processes end with the call.");
    out
}

/// Paths for a description: each one, except that many single entries
/// below one top directory (strict's files of /etc) are counted instead of
/// listed, which would cost an agent's context for little.
fn path_summary(paths: &[&Path]) -> Vec<String> {
    const LISTED_BELOW_ONE_TOP: usize = 3;
    let top = |path: &Path| -> Option<PathBuf> {
        let mut components = path.components();
        let root = components.next()?;
        let first = components.next()?;
        components.next()?;
        Some(Path::new(root.as_os_str()).join(first.as_os_str()))
    };
    let mut out = Vec::new();
    let mut counted: Vec<PathBuf> = Vec::new();
    for path in paths {
        match top(path) {
            Some(dir) if !paths.contains(&dir.as_path()) => {
                let below = paths
                    .iter()
                    .filter(|p| top(p).as_ref() == Some(&dir))
                    .count();
                if below <= LISTED_BELOW_ONE_TOP {
                    out.push(path.display().to_string());
                } else if !counted.contains(&dir) {
                    out.push(format!("{below} entries of {}", dir.display()));
                    counted.push(dir);
                }
            }
            // Already covered by its readable top directory.
            Some(_) => {}
            None => out.push(path.display().to_string()),
        }
    }
    out
}

/// Variables that say how to display text or where things are, never a credential.
fn is_harmless_variable(name: &str) -> bool {
    name.starts_with("LC_")
        || matches!(
            name,
            "LANG"
                | "LANGUAGE"
                | "TERM"
                | "COLORTERM"
                | "TZ"
                | "PATH"
                | "HOME"
                | "TMPDIR"
                | "USER"
                | "LOGNAME"
                | "SHELL"
        )
}

fn pattern_list(patterns: &[String]) -> String {
    const SHOWN: usize = 6;
    let kept: Vec<&str> = patterns
        .iter()
        .filter(|p| !p.starts_with('!'))
        .map(String::as_str)
        .collect();
    let mut out = kept
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if kept.len() > SHOWN {
        out.push_str(&format!(" and {} more", kept.len() - SHOWN));
    }
    out
}

/// One stream of the command's output, capped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedOutput {
    /// The bytes kept, as text (cut on a character boundary, invalid UTF-8 replaced).
    pub text: String,
    /// Bytes kept (at most the cap).
    pub shown_bytes: u64,
    /// Bytes the command wrote in all.
    pub total_bytes: u64,
    /// Whether bytes were dropped.
    pub truncated: bool,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellOutcome {
    /// The command's exit code (None: a signal ended it, or it never ran).
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Its timeout ended it.
    pub timed_out: bool,
    /// The timeout it ran under.
    pub timeout: Duration,
    /// Standard output.
    pub stdout: CapturedOutput,
    /// Standard error.
    pub stderr: CapturedOutput,
    /// Why the sandbox could not run it (None: it ran).
    pub sandbox_error: Option<String>,
}

impl ShellOutcome {
    /// Whether the call failed: a non-zero exit, a signal, a timeout or a
    /// sandbox failure.
    pub fn is_error(&self) -> bool {
        self.exit_code != Some(0)
            || self.signal.is_some()
            || self.timed_out
            || self.sandbox_error.is_some()
    }

    /// The structured result, as [`output_schema`] describes it.
    pub fn structured(&self) -> Value {
        json!({
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "timeout_ms": millis(self.timeout),
            "stdout": self.stdout.text,
            "stderr": self.stderr.text,
            "stdout_truncated": self.stdout.truncated,
            "stderr_truncated": self.stderr.truncated,
            "stdout_bytes": self.stdout.total_bytes,
            "stderr_bytes": self.stderr.total_bytes,
            "stdout_shown_bytes": self.stdout.shown_bytes,
            "stderr_shown_bytes": self.stderr.shown_bytes,
            "sandbox_error": self.sandbox_error,
        })
    }

    /// The first line of [`text`](Self::text): how the command ended.
    pub fn status_line(&self) -> String {
        let signal = |signal: i32| {
            let name = nix::sys::signal::Signal::try_from(signal)
                .map(|s| s.as_str().to_owned())
                .unwrap_or_else(|_| format!("signal {signal}"));
            format!("killed by {name}")
        };
        if let Some(error) = &self.sandbox_error {
            if self.timed_out {
                return format!(
                    "timed out after {}, and the sandbox failed: {error}",
                    format_duration(self.timeout)
                );
            }
            return format!("the sandbox could not run the command: {error}");
        }
        if self.timed_out {
            let how = match (self.exit_code, self.signal) {
                (_, Some(number)) => signal(number),
                (Some(code), None) => format!("exit code {code}"),
                (None, None) => "ended".to_owned(),
            };
            return format!(
                "timed out after {} ({how}); give a larger timeout_ms to let it finish",
                format_duration(self.timeout)
            );
        }
        match (self.exit_code, self.signal) {
            (_, Some(number)) => signal(number),
            (Some(code), None) => format!("exit code {code}"),
            (None, None) => "ended without an exit status".to_owned(),
        }
    }

    /// The result as text for clients without structured content: the
    /// status, then stdout, then stderr, with a line saying where a stream was cut.
    pub fn text(&self) -> String {
        let mut out = self.status_line();
        out.push('\n');
        for (name, stream) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if stream.total_bytes == 0 {
                out.push_str(&format!("{name}: (empty)\n"));
                continue;
            }
            out.push_str(&format!("{name}:\n"));
            out.push_str(&stream.text);
            if !stream.text.ends_with('\n') {
                out.push('\n');
            }
            if stream.truncated {
                out.push_str(&format!(
                    "[{name} truncated: {} of {} bytes shown]\n",
                    stream.shown_bytes, stream.total_bytes
                ));
            }
        }
        out
    }
}

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

/// Reads one pipe, keeping the first `cap` bytes.
struct Capture {
    kept: Vec<u8>,
    total: u64,
    cap: usize,
}

impl Capture {
    fn new(cap: usize) -> Capture {
        Capture {
            kept: Vec::new(),
            total: 0,
            cap,
        }
    }

    /// Read to end of file. Partial progress stays in `self` when the
    /// future is dropped.
    async fn read_from(&mut self, pipe: Option<impl tokio::io::AsyncRead + Unpin>) {
        let Some(mut pipe) = pipe else { return };
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            match pipe.read(&mut buffer).await {
                Ok(0) => return,
                Ok(n) => {
                    self.total += n as u64;
                    let room = self.cap.saturating_sub(self.kept.len());
                    self.kept.extend_from_slice(&buffer[..n.min(room)]);
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                // A pipe that fails to read has nothing more to give; what
                // was read stays, and the byte count says how much that was.
                Err(_) => return,
            }
        }
    }

    fn finish(self) -> CapturedOutput {
        let truncated = self.total > self.kept.len() as u64;
        let kept = if truncated {
            cut_to_char_boundary(&self.kept)
        } else {
            &self.kept[..]
        };
        CapturedOutput {
            text: String::from_utf8_lossy(kept).into_owned(),
            shown_bytes: kept.len() as u64,
            total_bytes: self.total,
            truncated,
        }
    }
}

/// `bytes` without a UTF-8 sequence the cap cut in two at its end, so the
/// text does not end in a replacement character that the command never wrote.
fn cut_to_char_boundary(bytes: &[u8]) -> &[u8] {
    // A sequence is at most 4 bytes: look back at most 3 for its lead byte.
    for back in 1..=bytes.len().min(4) {
        let at = bytes.len() - back;
        let byte = bytes[at];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue;
        }
        let needed = match byte {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return bytes,
        };
        return if needed > back { &bytes[..at] } else { bytes };
    }
    bytes
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
    crate::sys::fork::die_with_spawner(command.as_std_mut());
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
    };
    if overran {
        outcome.sandbox_error = Some(format!(
            "sandbox run did not end within {} of its timeout and was killed",
            format_duration(SANDBOX_KILL_GRACE + SUPERVISOR_SLACK)
        ));
        return Ok(outcome);
    }
    match read_report(&report_path) {
        Some(report) => apply_report(&mut outcome, &report, status),
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

fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "no status".to_owned(),
    }
}

/// The supervisor's own lines on stderr (`sandbox: ...`), to quote in a
/// sandbox error.
fn supervisor_said(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("sandbox: "))
        .collect();
    if lines.is_empty() {
        String::new()
    } else {
        format!(": {}", lines.join("; "))
    }
}

fn apply_report(outcome: &mut ShellOutcome, report: &Report, status: std::process::ExitStatus) {
    outcome.exit_code = report.exit.as_ref().and_then(|exit| exit.code);
    outcome.signal = report.exit.as_ref().and_then(|exit| exit.signal);
    outcome.timed_out = report.limits_hit().contains(&LimitHit::Timeout);
    if report.exit.is_none() {
        let error = report.error.clone().unwrap_or_else(|| {
            format!(
                "the command never started ({}){}",
                describe_status(status),
                supervisor_said(&outcome.stderr.text)
            )
        });
        outcome.sandbox_error = Some(error);
    } else if let Some(error) = &report.error {
        // The command ran, and the sandbox failed after it (tearing down,
        // measuring): its status stands, and the failure is said.
        outcome.sandbox_error = Some(error.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_multibyte_character_is_dropped_whole() {
        let text = "aé€😀";
        let bytes = text.as_bytes();
        // Cutting inside each sequence drops just that character.
        assert_eq!(cut_to_char_boundary(&bytes[..2]), b"a");
        assert_eq!(cut_to_char_boundary(&bytes[..3]), "aé".as_bytes());
        assert_eq!(cut_to_char_boundary(&bytes[..4]), "aé".as_bytes());
        assert_eq!(cut_to_char_boundary(&bytes[..5]), "aé".as_bytes());
        assert_eq!(cut_to_char_boundary(&bytes[..6]), "aé€".as_bytes());
        assert_eq!(cut_to_char_boundary(&bytes[..9]), "aé€".as_bytes());
        assert_eq!(cut_to_char_boundary(bytes), bytes);
        assert_eq!(cut_to_char_boundary(b""), b"");
    }

    #[test]
    fn a_report_without_exit_is_a_sandbox_error_and_a_timeout_is_said() {
        use std::os::unix::process::ExitStatusExt;
        let mut outcome = ShellOutcome {
            exit_code: None,
            signal: None,
            timed_out: false,
            timeout: Duration::from_secs(1),
            stdout: CapturedOutput::default(),
            stderr: CapturedOutput::default(),
            sandbox_error: None,
        };
        let refused = Report::refused("strict", "Landlock is required");
        apply_report(
            &mut outcome,
            &refused,
            std::process::ExitStatus::from_raw(125 << 8),
        );
        assert_eq!(
            outcome.sandbox_error.as_deref(),
            Some("Landlock is required")
        );
        assert!(outcome.is_error());

        let mut killed = Report::refused("strict", "");
        killed.error = None;
        killed.exit = Some(crate::spawn::ExitInfo {
            code: None,
            signal: Some(15),
            status: 143,
        });
        killed.run = Some(crate::spawn::report::RunDetails {
            limits_hit: vec![LimitHit::Timeout],
            ..Default::default()
        });
        let mut outcome = ShellOutcome {
            sandbox_error: None,
            ..outcome
        };
        apply_report(
            &mut outcome,
            &killed,
            std::process::ExitStatus::from_raw(143 << 8),
        );
        assert!(outcome.timed_out);
        assert_eq!(outcome.signal, Some(15));
        assert_eq!(outcome.sandbox_error, None);
        assert!(outcome
            .status_line()
            .starts_with("timed out after 1s (killed by SIGTERM)"));
    }
}
