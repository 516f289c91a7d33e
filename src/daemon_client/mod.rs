//! The client commands of `sandbox daemon`: `run --daemon`, `ps`, `logs`,
//! `cancel` and `approvals` (API: `docs/src/daemon.md`).
//!
//! Exit statuses: a run exits with its command's status, as a local run
//! does. Every command exits 2 when the daemon refused the request itself
//! (400, 403, 404, 409, 413: nothing was run, like a usage error) and 125
//! when it could not be reached or could not take the request now
//! (connection failures, 429, 5xx).
//!
//! One file per job: [`commands`] (`ps`, `logs`, `cancel`, `approvals`),
//! [`remote_run`] (`run --daemon` from submission to exit status),
//! [`request`] (the run's request built from `sandbox run`'s flags),
//! [`follow`] (a run's event stream, followed across reconnects) and
//! [`render`] (tables and values as the commands print them). HTTP over
//! the daemon's socket is [`super::client`]'s.
use std::path::PathBuf;

use clap::Args;

use super::client::{Client, ClientError};

mod commands;
mod follow;
mod remote_run;
mod render;
mod request;

pub use commands::{approvals, cancel, logs, ps, ApprovalsArgs, CancelArgs, LogsArgs, PsArgs};
pub use remote_run::{daemon_of_run, run_remote};

/// The socket option shared by the client commands.
#[derive(Debug, Args)]
pub struct SocketArg {
    /// The daemon's socket (default: $SANDBOX_DAEMON, else /run/sandbox/sandbox.sock for
    /// root and $XDG_RUNTIME_DIR/sandbox.sock for a user).
    #[arg(long = "daemon", value_name = "SOCKET", global = true)]
    pub daemon: Option<PathBuf>,
}

impl SocketArg {
    fn client(&self) -> Result<Client, ClientError> {
        Client::new(super::client::resolve_socket(self.daemon.as_deref())?)
    }
}
