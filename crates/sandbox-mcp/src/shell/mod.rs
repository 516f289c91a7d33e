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
//!
//! One file per job: `request` checks a call's arguments, `describe` says
//! what the tool does (schemas, description), `run` runs one call,
//! `capture` reads the capped pipes and `outcome` says how it ended.

mod capture;
mod describe;
mod outcome;
mod request;
pub mod review;
mod run;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox::profile::policy::Policy;

pub use describe::{description, input_schema, output_schema};
pub use outcome::{CapturedOutput, ShellOutcome};
pub use request::ShellRequest;
pub use run::run;

/// The tool's name.
pub const TOOL_NAME: &str = "shell";

/// Bytes of stdout, and separately of stderr, returned by default.
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;
/// Timeout of a call that gives no `timeout_ms`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest `timeout_ms` a call may ask for (the profile's own timeout, when
/// shorter, lowers it further).
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(600);

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
        source: sandbox::profile::ProfileError,
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
    /// `review` is not a boolean.
    #[error("argument \"review\" must be a boolean, not {found}: give true to keep the command's changes for review")]
    ReviewNotBoolean {
        /// The JSON type given.
        found: &'static str,
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
                    source: sandbox::profile::ProfileError::Read {
                        path: PathBuf::from(profile_spec),
                        source,
                    },
                })?;
            absolute.to_string_lossy().into_owned()
        } else {
            profile_spec.to_owned()
        };
        let policy =
            sandbox::profile::load(&profile_spec).map_err(|source| ShellError::Profile {
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
        policy: sandbox::Policy,
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
