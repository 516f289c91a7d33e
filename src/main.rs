//! The `sandbox` command. Thin: parse arguments, dispatch, turn errors into
//! a message and an exit status.
#![forbid(unsafe_code)]
mod cli;

fn main() {
    std::process::exit(cli::main());
}
