//! `sandbox daemon`: serve the run API on a Unix socket (docs/src/daemon.md).
//! Its arguments; the command runs in src/bin/sandbox-daemon.rs.
use std::path::PathBuf;

use clap::Args;

/// Arguments of `sandbox daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Configuration file (default /etc/sandbox/daemon.toml for root, $XDG_CONFIG_HOME/sandbox/daemon.toml for a user).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Socket to listen on (default /run/sandbox/sandbox.sock for root, $XDG_RUNTIME_DIR/sandbox.sock for a user).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Where the run database and the output spool live.
    #[arg(long = "state-dir", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Log debug events too (runs queued, questions asked and answered), besides the
    /// lifecycle lines (listening, each run's start and end, stopping).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}
