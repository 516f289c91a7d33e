//! The `sandbox` command. Thin: parse arguments, dispatch, turn errors into
//! a message and an exit status. `sandbox daemon`, `sandbox serve --mcp`
//! and `sandbox oci` run from their own executables (src/bin/*.rs, found
//! by src/faces.rs), and so do the daemon's client commands (`ps`, `logs`,
//! `cancel`, `approvals`, a run sent to a daemon), so this one, which every
//! cold `sandbox run` starts, links none of them.
#![forbid(unsafe_code)]
use sandbox_cli as cli;

/// Every face in its own executable.
struct Core;
impl cli::faces::Linked for Core {}

fn main() {
    std::process::exit(cli::main::<Core>());
}
