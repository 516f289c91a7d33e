//! `sandbox doctor`.
use clap::Args;

/// Arguments of `sandbox doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: DoctorArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
