//! The `sandbox` command line as a library: one file per subcommand, and
//! [`main`], which every executable of this package runs with the faces it
//! links (src/faces.rs).
use clap::{Parser, Subcommand};

use daemon_client::ClientCommand;

pub mod attest;
pub mod audit;
pub mod client;
pub mod daemon;
pub mod daemon_client;
pub mod doctor;
pub mod explain;
pub mod faces;
pub mod generate;
pub mod grants;
pub mod ipc;
pub mod launch;
pub mod learn;
pub mod output;
pub mod profile;
pub mod recipe;
pub mod review;
pub mod run;
pub mod serve;
pub mod skill;
pub mod watch;

/// Run untrusted code in a layered Linux sandbox.
#[derive(Debug, Parser)]
#[command(name = "sandbox", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command inside a sandbox; exits with the command's status.
    Run(Box<run::RunArgs>),
    /// List, show and check profiles.
    #[command(subcommand)]
    Profile(profile::ProfileCommand),
    /// Learn the narrowest profile a command needs beyond a base one, confined (docs/src/learn.md).
    Learn(Box<learn::LearnArgs>),
    /// List, show and check skills.
    #[command(subcommand)]
    Skill(skill::SkillCommand),
    /// List and revoke stored broker grants.
    #[command(subcommand)]
    Grants(grants::GrantsCommand),
    /// Show what a review run (`run --review`) changed: a diff for text, sizes and hashes otherwise.
    Changes(review::ChangesArgs),
    /// Apply a review run's changes, all or below the paths named, under the host's rules.
    Apply(review::ApplyArgs),
    /// Drop a review run's changes.
    Discard(review::DiscardArgs),
    /// Write a signed in-toto statement of what a run enforced, or check one (docs/src/audit.md).
    Attest(attest::AttestArgs),
    /// Check an audit file's hash chains (docs/src/audit.md).
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Run a recipe: steps applied as one transaction, or not at all (docs/src/recipes.md).
    #[command(subcommand)]
    Recipe(recipe::RecipeCommand),
    /// Send one request to the broker from inside a sandbox and print the result.
    Ipc(ipc::IpcArgs),
    /// Rate how exposed a profile, or what a run enforced, leaves the host (docs/src/explain.md).
    Explain(explain::ExplainArgs),
    /// Show what this kernel and environment support, and what each built-in profile would enforce.
    Doctor(doctor::DoctorArgs),
    /// Keep a project's walk current so runs in it need not walk it again (docs/src/performance.md).
    Watch(watch::WatchArgs),
    /// Serve the run API on a Unix socket (docs/src/daemon.md).
    Daemon(daemon::DaemonArgs),
    /// Serve skills to an agent host: JSON-RPC 2.0 over stdin and stdout.
    Serve(serve::ServeArgs),
    /// List the runs of `sandbox daemon` (yours, or all with see_all).
    Ps(daemon_client::PsArgs),
    /// Print a daemon run's output (-f: follow it to the end).
    Logs(daemon_client::LogsArgs),
    /// Cancel a daemon run: SIGTERM, then every process killed after the daemon's grace.
    Cancel(daemon_client::CancelArgs),
    /// List the open questions of your daemon runs, or answer one.
    Approvals(daemon_client::ApprovalsArgs),
    /// Be an OCI runtime (runc's command line) for Podman, containerd, CRI-O and Docker (docs/src/oci.md).
    #[command(disable_help_flag = true)]
    Oci {
        /// runc's arguments: global flags, then create, start, state, kill, delete, exec, ...
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// The daemon's fork server (internal).
    #[command(name = "__launch", hide = true)]
    Launch(launch::LaunchArgs),
    /// One skill process of `sandbox serve` (internal).
    #[command(name = "__skill-host", hide = true)]
    SkillHost(skill::HostArgs),
    /// Shell completions and man pages from these definitions (packaging).
    #[command(name = "__generate", hide = true)]
    Generate(generate::GenerateArgs),
}

/// A command-line value that cannot be used (an unknown profile, a path
/// that does not exist, a malformed `--secret`): exit 2 like clap's own
/// errors, because nothing was tried. 125 stays "the sandbox failed".
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Exit status of a usage error.
pub const EXIT_USAGE: i32 = 2;

/// Exit status when the sandbox itself failed (as `env`, `timeout` and
/// container tools use 125), distinct from the command's own statuses and
/// from 126/127.
pub const EXIT_SANDBOX_FAILED: i32 = 125;

/// The command line. `sandbox run` is parsed first with the `run`
/// subcommand's arguments alone: clap builds every subcommand's arguments
/// before it parses, and that tree was 3% of a cold run's CPU. Anything
/// that parse does not accept (help, a version, a mistake) is parsed again
/// with the whole tree, so every message is the one the whole tree gives;
/// what it does accept, the whole tree parses the same way
/// (`run_alone_parses_as_the_whole_tree`).
fn parse(args: Vec<std::ffi::OsString>) -> Cli {
    if args.get(1).is_some_and(|a| a == "run") {
        if let Some(run) = parse_run_alone(&args) {
            return Cli {
                command: Command::Run(Box::new(run)),
            };
        }
    }
    Cli::parse_from(args)
}

fn parse_run_alone(args: &[std::ffi::OsString]) -> Option<run::RunArgs> {
    use clap::{Args, FromArgMatches};
    let run = run::RunArgs::augment_args(clap::Command::new("run"));
    let matches = clap::Command::new("sandbox")
        .subcommand(run)
        .try_get_matches_from(args)
        .ok()?;
    match matches.subcommand() {
        Some(("run", run)) => run::RunArgs::from_arg_matches(run).ok(),
        _ => None,
    }
}

/// Parse the command line, run the subcommand, return the process exit
/// status. `L` says which faces this executable runs itself (src/faces.rs).
pub fn main<L: faces::Linked>() -> i32 {
    if let Err(err) = sandbox::os::ensure_stdio_open() {
        eprintln!("sandbox: cannot open /dev/null for a closed standard stream: {err}");
        return EXIT_SANDBOX_FAILED;
    }
    // An engine runs its runtime by path with runc's command line: as the
    // `sandbox-runc` link, or as `sandbox oci`, before clap sees anything.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.first().is_some_and(|a| faces::started_as_runtime(a)) {
        return L::oci(args[1..].to_vec());
    }
    if args.get(1).is_some_and(|a| a == "oci") {
        return L::oci(args[2..].to_vec());
    }
    let cli = parse(args);
    let result = match cli.command {
        Command::Run(args) => match daemon_client::daemon_of_run(&args) {
            Ok(Some(socket)) => L::daemon_client(ClientCommand::Run(args, socket)),
            Ok(None) => run::run(*args),
            Err(err) => Err(err.into()),
        },
        Command::Learn(args) => learn::run(*args),
        Command::Profile(cmd) => profile::run(cmd),
        Command::Changes(args) => match review::daemon_of(args.daemon.as_deref()) {
            Ok(Some(socket)) if !args.list => L::daemon_client(ClientCommand::Review(
                daemon_client::ReviewCommand::Changes(args, socket),
            )),
            Ok(_) => review::changes(args),
            Err(err) => Err(err),
        },
        Command::Apply(args) => match review::daemon_of(args.daemon.as_deref()) {
            Ok(Some(socket)) => L::daemon_client(ClientCommand::Review(
                daemon_client::ReviewCommand::Apply(args, socket),
            )),
            Ok(None) => review::apply(args),
            Err(err) => Err(err),
        },
        Command::Discard(args) => match review::daemon_of(args.daemon.as_deref()) {
            Ok(Some(socket)) => L::daemon_client(ClientCommand::Review(
                daemon_client::ReviewCommand::Discard(args, socket),
            )),
            Ok(None) => review::discard(args),
            Err(err) => Err(err),
        },
        Command::Recipe(cmd) => recipe::run(cmd),
        Command::Audit(cmd) => audit::run(cmd),
        Command::Attest(args) => match daemon_client::AttestRequest::of(&args) {
            Ok(Some(request)) => L::daemon_client(ClientCommand::Attest(request)),
            Ok(None) => attest::run(args),
            Err(err) => Err(err),
        },
        Command::Doctor(args) => doctor::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Watch(args) => watch::run(args),
        Command::Ipc(args) => ipc::run(args),
        Command::Grants(cmd) => grants::run(cmd),
        Command::Skill(cmd) => skill::run(cmd),
        Command::Serve(args) if args.mcp => L::serve_mcp(args),
        Command::Serve(args) => serve::run(args),
        Command::Daemon(args) => L::daemon(args),
        Command::SkillHost(args) => skill::host(args),
        Command::Ps(args) => L::daemon_client(ClientCommand::Ps(args)),
        Command::Logs(args) => L::daemon_client(ClientCommand::Logs(args)),
        Command::Cancel(args) => L::daemon_client(ClientCommand::Cancel(args)),
        Command::Approvals(args) => L::daemon_client(ClientCommand::Approvals(args)),
        Command::Launch(args) => L::launch(args),
        Command::Generate(args) => generate::run(args),
        Command::Oci { args } => return L::oci(args),
    };
    // The janitors and namespace holders the runs dismissed are gone by
    // now; reaped here, not left to an init that may never reap them.
    sandbox::os::reap_children_before_exit();
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("sandbox: {err:#}");
            if err.downcast_ref::<UsageError>().is_some()
                || err.downcast_ref::<client::NoSocket>().is_some()
            {
                return EXIT_USAGE;
            }
            if let Some(client) = err.downcast_ref::<client::ClientError>() {
                return client.exit_status();
            }
            EXIT_SANDBOX_FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &[&str]) -> Vec<std::ffi::OsString> {
        line.iter().map(Into::into).collect()
    }

    /// Whatever the `run` arguments alone accept, the whole tree parses to
    /// the same arguments; whatever the whole tree refuses (or answers
    /// with help or a version), they refuse too, so the whole tree speaks.
    #[test]
    fn run_alone_parses_as_the_whole_tree() {
        let cases: &[&[&str]] = &[
            &["sandbox", "run", "--", "/bin/true"],
            &["sandbox", "run", "/bin/true"],
            &[
                "sandbox", "run", "-p", "strict", "-e", "A=1", "--", "sh", "-c", "x",
            ],
            &[
                "sandbox",
                "run",
                "--profile",
                "./p.toml",
                "--net",
                "allow:example.com",
                "--",
                "curl",
                "-v",
            ],
            &[
                "sandbox",
                "run",
                "--timeout",
                "5s",
                "--memory",
                "1G",
                "--pids",
                "9",
                "--",
                "true",
            ],
            &[
                "sandbox", "run", "--cpus", "0.5", "--report", "r.json", "--audit", "a", "--",
                "true",
            ],
            &["sandbox", "run", "--daemon", "--", "true"],
            &["sandbox", "run", "--daemon=/run/s.sock", "true"],
            &["sandbox", "run", "help"],
            &["sandbox", "run", "--", "--help"],
            &["sandbox", "run", "true", "--help"],
            &["sandbox", "run", "-v", "--", "true"],
            &["sandbox", "run", "--help"],
            &["sandbox", "run", "-h"],
            &["sandbox", "run", "--version"],
            &["sandbox", "run"],
            &["sandbox", "run", "--no-such-option", "true"],
            &["sandbox", "run", "--timeout", "soon", "true"],
            &["sandbox", "run", "--profile"],
        ];
        let mut parsed = 0;
        for case in cases {
            let whole = Cli::try_parse_from(argv(case)).map(|cli| match cli.command {
                Command::Run(args) => format!("{args:?}"),
                other => panic!("{case:?} parsed as {other:?}"),
            });
            let alone = parse_run_alone(&argv(case)).map(|args| format!("{args:?}"));
            match (whole, alone) {
                (Ok(whole), Some(alone)) => {
                    assert_eq!(whole, alone, "{case:?}");
                    parsed += 1;
                }
                (Err(_), None) => {}
                (whole, alone) => panic!("{case:?}: whole tree {whole:?}, alone {alone:?}"),
            }
        }
        assert_eq!(parsed, 12, "the first twelve cases are valid command lines");
    }
}
