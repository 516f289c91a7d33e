//! `sandbox recipe run` and `sandbox recipe check`: a list of steps run as
//! one transaction over the project (docs/src/recipes.md). The work is the
//! core's (`sandbox::recipe`); this file only reads flags and prints.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::UsageError;

/// `sandbox recipe`.
#[derive(Debug, Subcommand)]
pub enum RecipeCommand {
    /// Run a recipe's steps, each in review mode over what the steps before it left; apply
    /// the result when every step succeeds, drop it when one fails.
    Run(RecipeRunArgs),
    /// Read a recipe and say whether it is valid, without running anything.
    Check {
        /// The recipe (.toml, .yaml, .yml or .json).
        file: PathBuf,
    },
}

/// `sandbox recipe run`.
#[derive(Debug, Args)]
pub struct RecipeRunArgs {
    /// The recipe (.toml, .yaml, .yml or .json).
    pub file: PathBuf,
    /// Keep the changes for `sandbox changes`, `apply` and `discard` instead of applying them.
    #[arg(long)]
    pub review: bool,
    /// Run every step under this profile (name or file) instead of the recipe's `profile`
    /// (default: strict).
    #[arg(long, short = 'p', value_name = "NAME|PATH")]
    pub profile: Option<String>,
    /// Print the recipe's report as JSON, one line, as the last line on stderr (stdout stays
    /// the steps' own), instead of the text report.
    #[arg(long)]
    pub json: bool,
}

/// `sandbox recipe ...`.
pub fn run(cmd: RecipeCommand) -> anyhow::Result<i32> {
    match cmd {
        RecipeCommand::Check { file } => {
            let recipe = load(&file)?;
            println!(
                "{}: ok ({} step(s), profile {})",
                file.display(),
                recipe.steps.len(),
                recipe.profile.as_deref().unwrap_or("strict")
            );
            Ok(0)
        }
        RecipeCommand::Run(args) => run_recipe(args),
    }
}

fn load(file: &std::path::Path) -> anyhow::Result<sandbox::recipe::Recipe> {
    sandbox::recipe::load(file).map_err(|err| UsageError(err.to_string()).into())
}

fn run_recipe(args: RecipeRunArgs) -> anyhow::Result<i32> {
    let recipe = load(&args.file)?;
    let profile = args
        .profile
        .clone()
        .or_else(|| recipe.profile.clone())
        .unwrap_or_else(|| "strict".to_owned());
    let policy = sandbox::profile::load(&profile)
        .with_context(|| UsageError(format!("the recipe's profile {profile}")))?;
    let options = sandbox::recipe::run::Options {
        project: std::env::current_dir().context("the current directory")?,
        review: args.review,
        progress: |line| eprintln!("sandbox: {line}"),
    };
    let report = sandbox::recipe::run::run(&recipe, &policy, &options)?;
    if args.json {
        if let Some(step) = &report.failed_step {
            eprintln!(
                "sandbox: recipe {}: step `{step}` failed; nothing reached the project",
                args.file.display()
            );
        }
        eprintln!(
            "{}",
            serde_json::to_string(&report).context("printing the report")?
        );
    } else {
        eprint!("{}", report.render());
    }
    Ok(report.exit_status())
}
