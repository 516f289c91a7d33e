//! The `sandbox` command. Thin: parse arguments, dispatch, turn errors into
//! a message and an exit status.
mod cli;

fn main() {
    std::process::exit(cli::main());
}
