//! `sandbox-mcp`: the executable `sandbox serve --mcp` runs
//! (src/faces.rs). The whole command line of `sandbox`, with the MCP
//! SDK linked in; its skill hosts and `shell` tool run from itself
//! (/proc/self/exe).
#![forbid(unsafe_code)]
use sandbox_cli as cli;

use anyhow::Context;

struct Mcp;
impl cli::faces::Linked for Mcp {
    fn serve_mcp(args: cli::serve::ServeArgs) -> anyhow::Result<i32> {
        let with_shell = args.shell;
        let options = cli::serve::options(args)?;
        let shell = if with_shell {
            Some(
                sandbox_mcp::ShellTool::new(
                    &options.profile,
                    &options.profile_spec,
                    &options.project,
                )
                .context("--shell")?,
            )
        } else {
            None
        };
        sandbox_mcp::serve(options, shell).context("serving skills over MCP")?;
        Ok(0)
    }
}

fn main() {
    std::process::exit(cli::main::<Mcp>());
}
