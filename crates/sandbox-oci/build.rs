//! Builds `oci-init` as a static program and hands it to the crate deflated
//! (`SANDBOX_OCI_INIT_DEFLATE`, with its size and digest), which embeds it: `sandbox oci` mounts it into
//! containers whose images have no compatible C library, and being static
//! it loads nothing from the image before its layers are in force.
//!
//! A nested cargo, because rustflags cannot differ between the packages of
//! one build: `+crt-static` with an explicit `--target` applies to the
//! init alone (build scripts and proc macros stay dynamic).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=../oci-init/src");
    println!("cargo:rerun-if-changed=../oci-init/Cargo.toml");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = out.join("oci-init");
    let mut build = Command::new(cargo);
    build
        .args(["build", "--release", "--locked", "--offline", "--quiet"])
        .args(["--package", "sandbox-oci-init", "--bin", "sandbox-oci-init"])
        .args(["--target", &target])
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's settings (its target directory, flags, clippy as
    // the compiler wrapper) are not the init's.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let outer =
            (name.starts_with("CARGO_") && name != "CARGO_HOME" && name != "CARGO_MAKEFLAGS")
                || name.starts_with("RUSTC_")
                || name == "RUSTFLAGS"
                || name == "RUSTDOCFLAGS";
        if outer {
            build.env_remove(name.as_ref());
        }
    }
    // Embedded in every copy of `sandbox`: small over fast (it runs once per
    // container, for microseconds, and a panic in it is an exit anyway).
    build
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "s")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols");
    build.env(
        "CARGO_ENCODED_RUSTFLAGS",
        "-Ctarget-feature=+crt-static\u{1f}-Crelocation-model=static",
    );
    match build.status() {
        Ok(status) if status.success() => {}
        Ok(status) => fail(&format!("building the static oci-init failed: {status}")),
        Err(err) => fail(&format!("running cargo to build oci-init: {err}")),
    }
    let binary = target_dir
        .join(&target)
        .join("release")
        .join("sandbox-oci-init");
    // Embedded deflated: a static program is mostly the C library's, which
    // compresses to well under half, and every copy of `sandbox` carries it.
    let bytes = match std::fs::read(&binary) {
        Ok(bytes) => bytes,
        Err(err) => fail(&format!("reading {}: {err}", binary.display())),
    };
    let deflated = out.join("sandbox-oci-init.deflate");
    if let Err(err) = std::fs::write(&deflated, miniz_oxide::deflate::compress_to_vec(&bytes, 10)) {
        fail(&format!("writing {}: {err}", deflated.display()));
    }
    println!(
        "cargo:rustc-env=SANDBOX_OCI_INIT_DEFLATE={}",
        deflated.display()
    );
    println!("cargo:rustc-env=SANDBOX_OCI_INIT_LEN={}", bytes.len());
    println!(
        "cargo:rustc-env=SANDBOX_OCI_INIT_DIGEST={:016x}",
        fnv1a(&bytes)
    );
}

/// FNV-1a, 64 bits: names the init's version in the state directory (the
/// directory's ownership, not the name, is what keeps the file genuine).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn fail(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(1);
}
