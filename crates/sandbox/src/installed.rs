//! Where the other programs of this installation are: the faces the
//! `sandbox` command executes and the run's net process (`sandbox-net`).
//!
//! Looked for beside the running executable, then in the libexec
//! directory of its prefix (the .deb: /usr/libexec/sandbox for
//! /usr/bin/sandbox; the tarball the same below /usr/local). Both are
//! derived from the kernel's record of the running executable, never from
//! PATH or any other part of the environment, so a caller cannot choose
//! which program a supervisor (or `sandbox daemon`, run as root by
//! systemd) executes; and beside comes first because the executables of
//! one build (target/release, `cargo install`, an unpacked tarball) are
//! meant to run together.

use std::path::{Path, PathBuf};

/// Below the prefix of the executable's own directory.
pub const LIBEXEC: &str = "libexec/sandbox";

/// Why a program of the installation cannot be found.
#[derive(Debug, thiserror::Error)]
pub enum NotInstalled {
    /// /proc/self/exe does not read.
    #[error("cannot find this executable (/proc/self/exe) to look beside it: {0}")]
    OwnPath(#[source] std::io::Error),
    /// No candidate is a file.
    #[error(
        "{program} is missing (looked for {tried}); reinstall the sandbox package, \
         or run `cargo build --release`, which builds every executable"
    )]
    Missing {
        /// The program's file name.
        program: &'static str,
        /// Every path looked at, in order.
        tried: String,
    },
}

/// The path of `program`, the first candidate that is a file.
pub fn find(program: &'static str) -> Result<PathBuf, NotInstalled> {
    let candidates = places(program)?;
    match candidates.iter().find(|path| path.is_file()) {
        Some(path) => Ok(path.clone()),
        None => Err(NotInstalled::Missing {
            program,
            tried: candidates
                .iter()
                .map(|path| path.display().to_string())
                .collect::<Vec<_>>()
                .join(" and "),
        }),
    }
}

/// Every path [`find`] looks at for `program`, in order, whether or not a
/// file is there now.
pub fn places(program: &str) -> Result<Vec<PathBuf>, NotInstalled> {
    let own = std::fs::read_link("/proc/self/exe").map_err(NotInstalled::OwnPath)?;
    Ok(candidates(&own, program))
}

/// Where `program` is looked for when the running executable is `own`.
pub fn candidates(own: &Path, program: &str) -> Vec<PathBuf> {
    let dir = own.parent().unwrap_or(Path::new("/"));
    let beside = dir.join(program);
    // The prefix is the directory's parent as written (/proc/self/exe is
    // already free of links), not `dir/..` resolved again on disk.
    let prefix = dir.parent().unwrap_or(Path::new("/"));
    vec![beside, prefix.join(LIBEXEC).join(program)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_looked_for_beside_the_binary_then_in_its_libexec() {
        assert_eq!(
            candidates(Path::new("/usr/bin/sandbox"), "sandbox-net"),
            [
                PathBuf::from("/usr/bin/sandbox-net"),
                PathBuf::from("/usr/libexec/sandbox/sandbox-net")
            ]
        );
        assert_eq!(
            candidates(Path::new("/usr/local/bin/sandbox"), "sandbox-oci"),
            [
                PathBuf::from("/usr/local/bin/sandbox-oci"),
                PathBuf::from("/usr/local/libexec/sandbox/sandbox-oci")
            ]
        );
    }

    #[test]
    fn a_missing_program_names_where_it_was_looked_for_and_the_fix() {
        let err = NotInstalled::Missing {
            program: "sandbox-net",
            tried: "/a/sandbox-net and /libexec/sandbox/sandbox-net".into(),
        }
        .to_string();
        assert!(err.contains("/a/sandbox-net and /libexec"), "{err}");
        assert!(err.contains("reinstall"), "{err}");
        assert!(err.contains("cargo build --release"), "{err}");
    }
}
