//! `sandbox-net`: a run's net process, which the supervisor executes
//! (crates/sandbox/src/net/process.rs) with its link on descriptor 3.
//! Not a command people type: it is installed off PATH, in
//! libexec/sandbox.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(sandbox_net::main());
}
