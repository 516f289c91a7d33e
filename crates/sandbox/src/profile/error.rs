//! Errors from loading a profile. Each names the file and, where the problem
//! is in the text, the line and column, so an editor can jump to it.

use std::path::PathBuf;

/// Why a profile could not be loaded.
///
/// `Display` never repeats the source error; print the whole chain (anyhow's
/// `{:#}`) to see, for example, the operating system's reason a file is unreadable.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// `--profile NAME` named neither a built-in profile nor a path.
    #[error("unknown profile `{name}`: the built-in profiles are {choices}; a path to a profile file must contain '/' or end in \".toml\"", choices = super::builtin::choices())]
    UnknownProfile {
        /// The name as given.
        name: String,
    },
    /// The profile file could not be read.
    #[error("{}: cannot read the profile", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The file named by `extends` could not be read.
    #[error("{origin}:{line}:{column}: cannot read `{}`, named by `extends`", path.display())]
    ExtendsRead {
        /// The file containing the `extends` line.
        origin: String,
        /// 1-based line of the `extends` value.
        line: usize,
        /// 1-based column of the `extends` value.
        column: usize,
        /// The file it names, resolved against the directory of `origin`.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid profile: bad syntax, unknown key, wrong type,
    /// a value out of range. `message` says which and lists the valid choices.
    #[error("{origin}:{line}:{column}: {message}")]
    Invalid {
        /// The file (or built-in name) the text came from.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Following `extends` came back to a profile already in the chain.
    #[error("{origin}:{line}:{column}: `extends` cycle: {}", chain.join(" -> "))]
    ExtendsCycle {
        /// The file containing the `extends` line that closes the cycle.
        origin: String,
        /// 1-based line of the `extends` value.
        line: usize,
        /// 1-based column of the `extends` value.
        column: usize,
        /// The profiles in the cycle, first to last, ending with the repeated one.
        chain: Vec<String>,
    },
    /// The `extends` chain is longer than [`super::MAX_EXTENDS_DEPTH`].
    #[error("{origin}:{line}:{column}: `extends` chain is deeper than {max} levels: {}", chain.join(" -> "))]
    ExtendsTooDeep {
        /// The file containing the `extends` line that goes too deep.
        origin: String,
        /// 1-based line of the `extends` value.
        line: usize,
        /// 1-based column of the `extends` value.
        column: usize,
        /// The limit.
        max: usize,
        /// The profiles followed so far.
        chain: Vec<String>,
    },
}
