//! `sandbox-oci`: the executable `sandbox oci` runs (src/faces.rs), and
//! the one the `sandbox-runc` link names, so that a container engine's
//! every runtime call starts it directly.
#![forbid(unsafe_code)]
use sandbox_cli as cli;

struct Oci;
impl cli::faces::Linked for Oci {
    fn oci(args: Vec<std::ffi::OsString>) -> i32 {
        sandbox_oci::main(args)
    }
}

fn main() {
    std::process::exit(cli::main::<Oci>());
}
