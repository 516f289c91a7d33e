//! `sandbox changes`, `sandbox apply` and `sandbox discard`: a review run's
//! kept changes (docs/src/review.md). The work is the core's
//! (`sandbox::review`); this file only reads flags and prints.

use anyhow::Context;
use clap::Args;
use sandbox::broker::prompt::escape;
use sandbox::review::{apply::Allow, ReviewError, Store};

/// `sandbox changes`.
#[derive(Debug, Args)]
pub struct ChangesArgs {
    /// The run's id (printed when it ended, and in its report's `run`), or `last`: the
    /// newest kept run of the current directory.
    #[arg(required_unless_present = "list")]
    pub run: Option<String>,
    /// Print the changes as JSON, for programs.
    #[arg(long)]
    pub json: bool,
    /// List the ids of the kept runs instead (this user's own store, never the daemon's:
    /// `sandbox ps --daemon` lists those).
    #[arg(long, conflicts_with_all = ["run", "daemon"])]
    pub list: bool,
    /// Ask `sandbox daemon` about one of its runs instead (--daemon=SOCKET, or a bare
    /// --daemon for $SANDBOX_DAEMON else the default socket; SANDBOX_DAEMON does the same):
    /// RUN is then the daemon's run id, as `sandbox ps` lists it.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    pub daemon: Option<String>,
}

/// `sandbox apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The run's id, or `last`: the newest kept run of the current directory.
    pub run: String,
    /// Apply only the changes at or below these project paths (default: all).
    pub paths: Vec<String>,
    /// Also apply protected entries (git hooks and config, agent and editor settings,
    /// .sandbox/, .skills/, shell start-up files).
    #[arg(long)]
    pub allow_protected: bool,
    /// Also apply CI definitions (.github/workflows/, .gitlab-ci.yml).
    #[arg(long)]
    pub allow_ci: bool,
    /// Also apply set-user-id and set-group-id files.
    #[arg(long)]
    pub allow_setid: bool,
    /// Also apply symlinks that point outside the project.
    #[arg(long)]
    pub allow_outside_links: bool,
    /// Also apply files the run hard-linked together (each written as a file of its own).
    #[arg(long)]
    pub allow_hardlinks: bool,
    /// Also apply files with a secret's name (.env, keys).
    #[arg(long)]
    pub allow_secrets: bool,
    /// Apply the changes of a run that filled its layer (some of its writes failed).
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Print what was applied as JSON (`applied`, `remaining`), or what was refused
    /// (`refused`: each with `path`, `reason` and the `flag` that allows it).
    #[arg(long)]
    pub json: bool,
    /// Ask `sandbox daemon` about one of its runs instead (--daemon=SOCKET, or a bare
    /// --daemon for $SANDBOX_DAEMON else the default socket; SANDBOX_DAEMON does the same):
    /// RUN is then the daemon's run id, as `sandbox ps` lists it.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    pub daemon: Option<String>,
}

/// `sandbox discard`.
#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// The run's id, or `last`: the newest kept run of the current directory.
    pub run: String,
    /// Ask `sandbox daemon` about one of its runs instead (--daemon=SOCKET, or a bare
    /// --daemon for $SANDBOX_DAEMON else the default socket; SANDBOX_DAEMON does the same):
    /// RUN is then the daemon's run id, as `sandbox ps` lists it.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    pub daemon: Option<String>,
}

/// `sandbox changes`.
pub fn changes(args: ChangesArgs) -> anyhow::Result<i32> {
    let store = Store::user();
    if args.list {
        for id in store.list()? {
            if store.is_complete(&id) {
                println!("{id}");
            } else {
                println!(
                    "{id} (incomplete: killed before its changes were captured, or being captured now; `sandbox discard {id}` drops it)"
                );
            }
        }
        return Ok(0);
    }
    let id = resolve(&store, &args.run.unwrap_or_default())?;
    if args.json {
        let listing = sandbox::review::changes::listing(&store, &id)?;
        println!(
            "{}",
            serde_json::to_string(&listing).context("printing the changes")?
        );
    } else {
        print!("{}", sandbox::review::changes::render(&store, &id)?);
    }
    Ok(0)
}

impl ApplyArgs {
    /// The `--allow-*` flags.
    pub fn allow(&self) -> Allow {
        Allow {
            protected: self.allow_protected,
            ci: self.allow_ci,
            setid: self.allow_setid,
            outside_links: self.allow_outside_links,
            hardlinks: self.allow_hardlinks,
            secrets: self.allow_secrets,
            incomplete: self.allow_incomplete,
        }
    }
}

/// The daemon a review command asks, if any: `--daemon[=SOCKET]`, else
/// `SANDBOX_DAEMON` (as for `sandbox run`).
pub fn daemon_of(flag: Option<&str>) -> anyhow::Result<Option<std::path::PathBuf>> {
    Ok(match flag {
        Some(path) => Some(crate::client::resolve_socket(Some(std::path::Path::new(
            path,
        )))?),
        None => crate::client::socket_from_env()?,
    })
}

/// Print an apply's outcome as `sandbox apply` does; its exit status.
pub fn print_applied(id: &str, applied: &[String], remaining: usize) {
    for path in applied {
        println!("applied {}", escape(path));
    }
    if remaining == 0 {
        println!("run {id}: every change applied; the run is no longer kept");
    } else {
        println!("run {id}: {remaining} change(s) still kept (`sandbox changes {id}`)");
    }
}

/// Print an apply's refusals as `sandbox apply` does.
pub fn print_refused(id: &str, refusals: impl IntoIterator<Item = String>) {
    eprintln!("sandbox: apply {id}: nothing was applied:");
    // A path is the run's: escaped, it cannot fake a line of its own.
    for reason in refusals {
        eprintln!("  {}", escape(&reason));
    }
}

/// `sandbox apply`: exit 1 when something was refused (nothing applied).
pub fn apply(args: ApplyArgs) -> anyhow::Result<i32> {
    let allow = args.allow();
    let store = Store::user();
    let id = resolve(&store, &args.run)?;
    match sandbox::review::apply::apply(&store, &id, &args.paths, allow) {
        Ok(applied) => {
            if args.json {
                println!("{}", serde_json::to_string(&applied).context("printing")?);
                return Ok(0);
            }
            print_applied(&id, &applied.applied, applied.remaining);
            Ok(0)
        }
        Err(ReviewError::Refused(reasons)) => {
            if args.json {
                let refused = serde_json::json!({"applied": [], "refused": reasons});
                println!("{refused}");
            }
            print_refused(&id, reasons.iter().map(ToString::to_string));
            Ok(1)
        }
        Err(err) => Err(err.into()),
    }
}

/// `sandbox discard`.
pub fn discard(args: DiscardArgs) -> anyhow::Result<i32> {
    let store = Store::user();
    let id = resolve(&store, &args.run)?;
    store.discard(&id)?;
    println!("run {id}: changes discarded");
    Ok(0)
}

/// An id, or `last` for the current directory's newest kept run.
fn resolve(store: &Store, asked: &str) -> anyhow::Result<String> {
    let here = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .context("the current directory")?;
    Ok(store.resolve(asked, &here)?)
}
