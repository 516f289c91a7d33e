//! `sandbox-daemon`: the executable `sandbox daemon` runs (src/faces.rs).
//! The whole command line of `sandbox`, with the daemon's HTTP server and
//! SQLite store linked in; it starts its fork server (`__launch`) and skill
//! hosts from itself (/proc/self/exe). The daemon's client commands
//! (`sandbox ps`, `logs`, `cancel`, `approvals`, `run --daemon`) run here
//! too, so that `sandbox` links no HTTP client.
#![forbid(unsafe_code)]
use sandbox_cli as cli;

struct Daemon;
impl cli::faces::Linked for Daemon {
    fn daemon(args: cli::daemon::DaemonArgs) -> anyhow::Result<i32> {
        sandbox_daemon::run(sandbox_daemon::Options {
            config: args.config,
            socket: args.socket,
            state_dir: args.state_dir,
            verbose: args.verbose,
        })?;
        Ok(0)
    }

    fn daemon_client(command: cli::daemon_client::ClientCommand) -> anyhow::Result<i32> {
        command.run()
    }

    fn launch(args: cli::launch::LaunchArgs) -> anyhow::Result<i32> {
        cli::launch::run(args)
    }
}

fn main() {
    std::process::exit(cli::main::<Daemon>());
}
