//! `sandbox profile`.
use clap::Subcommand;

/// Subcommands of `sandbox profile`.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// List the built-in profiles.
    List,
}

pub fn run(_cmd: ProfileCommand) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
