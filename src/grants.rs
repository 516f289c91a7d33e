//! `sandbox grants`: the decisions a person chose to keep.
use anyhow::Context;
use clap::Subcommand;
use sandbox::broker::grants::{default_path, GrantStore};

/// Subcommands of `sandbox grants`.
#[derive(Debug, Subcommand)]
pub enum GrantsCommand {
    /// List stored grants, numbered.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a grant by its number in `sandbox grants list`.
    Revoke {
        /// The grant's number.
        number: usize,
    },
}

pub fn run(cmd: GrantsCommand) -> anyhow::Result<i32> {
    let path = default_path();
    let mut store = GrantStore::load(&path)?;
    match cmd {
        GrantsCommand::List { json } => {
            if json {
                println!("{}", serde_json::to_string_pretty(store.list())?);
            } else if store.list().is_empty() {
                println!("no grants in {}", path.display());
            } else {
                for (i, g) in store.list().iter().enumerate() {
                    println!(
                        "{:>3}  {:?} {} {} in {} (program sha256 {}…){}",
                        i + 1,
                        g.decision,
                        g.action,
                        g.caller,
                        g.project.display(),
                        g.hash.get(..12).unwrap_or(&g.hash),
                        if g.by_person {
                            ""
                        } else {
                            " [not by a person]"
                        }
                    );
                }
            }
            Ok(0)
        }
        GrantsCommand::Revoke { number } => {
            let grant = store
                .revoke(number)
                .with_context(|| format!("no grant number {number} (see `sandbox grants list`)"))?;
            store.save()?;
            println!(
                "revoked: {} for {} in {}",
                grant.action,
                grant.caller,
                grant.project.display()
            );
            Ok(0)
        }
    }
}
