//! `sandbox run`.
use clap::Args;

/// Arguments of `sandbox run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

pub fn run(_args: RunArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
