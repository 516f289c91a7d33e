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
    /// List the ids of the kept runs instead.
    #[arg(long, conflicts_with = "run")]
    pub list: bool,
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
}

/// `sandbox discard`.
#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// The run's id, or `last`: the newest kept run of the current directory.
    pub run: String,
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

/// `sandbox apply`: exit 1 when something was refused (nothing applied).
pub fn apply(args: ApplyArgs) -> anyhow::Result<i32> {
    let allow = Allow {
        protected: args.allow_protected,
        ci: args.allow_ci,
        setid: args.allow_setid,
        outside_links: args.allow_outside_links,
        hardlinks: args.allow_hardlinks,
        secrets: args.allow_secrets,
        incomplete: args.allow_incomplete,
    };
    let store = Store::user();
    let id = resolve(&store, &args.run)?;
    match sandbox::review::apply::apply(&store, &id, &args.paths, allow) {
        Ok(applied) => {
            if args.json {
                println!("{}", serde_json::to_string(&applied).context("printing")?);
                return Ok(0);
            }
            for path in &applied.applied {
                println!("applied {}", escape(path));
            }
            if applied.remaining == 0 {
                println!("run {id}: every change applied; the run is no longer kept");
            } else {
                println!(
                    "run {id}: {} change(s) still kept (`sandbox changes {id}`)",
                    applied.remaining
                );
            }
            Ok(0)
        }
        Err(ReviewError::Refused(reasons)) => {
            if args.json {
                let refused = serde_json::json!({"applied": [], "refused": reasons});
                println!("{refused}");
            }
            eprintln!("sandbox: apply {id}: nothing was applied:");
            for reason in reasons {
                eprintln!("  {reason}");
            }
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
