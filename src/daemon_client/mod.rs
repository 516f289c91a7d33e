//! The client commands of `sandbox daemon`: `run --daemon`, `ps`, `logs`,
//! `cancel`, `approvals`, and `changes`, `apply` and `discard` with `--daemon` (API: `docs/src/daemon.md`).
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
//!
//! They run from `sandbox-daemon` (src/faces.rs): `sandbox` parses them,
//! and decides with [`daemon_of_run`] whether a run is remote, but hands
//! every [`ClientCommand`] to that executable, so that the binary every
//! cold local run starts links no HTTP client and no async runtime.
use std::path::PathBuf;

use clap::Args;

use super::client::{Client, ClientError};
use super::run::RunArgs;

mod attest;
mod commands;
mod follow;
mod remote_run;
mod render;
mod request;
mod review;

pub use attest::AttestRequest;
pub use commands::{approvals, cancel, logs, ps, ApprovalsArgs, CancelArgs, LogsArgs, PsArgs};
pub use remote_run::{daemon_of_run, run_remote};
pub use review::ReviewCommand;

/// A client command, parsed: what [`super::faces::Linked::daemon_client`]
/// runs.
#[derive(Debug)]
pub enum ClientCommand {
    /// `sandbox run` sent to the daemon at this socket ([`daemon_of_run`]).
    Run(Box<RunArgs>, PathBuf),
    Ps(PsArgs),
    Logs(LogsArgs),
    Cancel(CancelArgs),
    Approvals(ApprovalsArgs),
    /// `sandbox changes`, `apply` or `discard` of a daemon run.
    Review(ReviewCommand),
    /// `sandbox attest RUN --daemon`, `sandbox attest key --daemon`.
    Attest(AttestRequest),
}

impl ClientCommand {
    /// The command as its user typed it, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            ClientCommand::Run(..) => "sandbox run --daemon",
            ClientCommand::Ps(_) => "sandbox ps",
            ClientCommand::Logs(_) => "sandbox logs",
            ClientCommand::Cancel(_) => "sandbox cancel",
            ClientCommand::Approvals(_) => "sandbox approvals",
            ClientCommand::Review(ReviewCommand::Changes(..)) => "sandbox changes --daemon",
            ClientCommand::Review(ReviewCommand::Apply(..)) => "sandbox apply --daemon",
            ClientCommand::Review(ReviewCommand::Discard(..)) => "sandbox discard --daemon",
            ClientCommand::Attest(AttestRequest::Statement { .. }) => "sandbox attest --daemon",
            ClientCommand::Attest(AttestRequest::Key { .. }) => "sandbox attest key --daemon",
        }
    }

    /// Run it here: in `sandbox-daemon`, which links the client.
    pub fn run(self) -> anyhow::Result<i32> {
        match self {
            ClientCommand::Run(args, socket) => run_remote(*args, socket),
            ClientCommand::Ps(args) => ps(args),
            ClientCommand::Logs(args) => logs(args),
            ClientCommand::Cancel(args) => cancel(args),
            ClientCommand::Approvals(args) => approvals(args),
            ClientCommand::Review(command) => command.run(),
            ClientCommand::Attest(request) => request.run(),
        }
    }
}

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
