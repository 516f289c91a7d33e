//! The profile file as written: serde types that mirror the TOML one to one,
//! and the per-file checks that turn them into a [`Layer`].
//!
//! Every struct rejects unknown keys, and every closed set of values is a Rust
//! enum, so a typo is an error that lists the valid choices instead of a
//! setting that is silently ignored. Values that need checks beyond their
//! type (paths, sizes, names) keep their position in the file (`Spanned`) so
//! those errors point at them too.
//!
//! This module is the schema; `layer` holds the checked [`Layer`] (with its
//! list edits, `KEY`/`KEY_add`/`KEY_remove`) and how it applies to a
//! policy, and `check` the per-file checks that build it.

mod check;
mod layer;

pub(crate) use check::normalize;
pub(crate) use layer::{Layer, Source};

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// A whole profile file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// Format version; must be 1.
    pub version: Option<Spanned<i64>>,
    /// A built-in profile name, or a path relative to this file.
    pub extends: Option<Spanned<String>>,
    /// `[filesystem]`.
    pub filesystem: Option<RawFilesystem>,
    /// `[network]`.
    pub network: Option<RawNetwork>,
    /// `[limits]`.
    pub limits: Option<RawLimits>,
    /// `[syscalls]`.
    pub syscalls: Option<RawSyscalls>,
    /// `[env]`.
    pub env: Option<RawEnv>,
    /// `[broker]`.
    pub broker: Option<RawBroker>,
    /// `[enforce]`.
    pub enforce: Option<RawEnforce>,
    /// `[tools]`.
    pub tools: Option<RawTools>,
}

/// `[tools]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTools {
    /// Built-in toolchain names (see [`super::tools::TOOLS`]).
    pub expose: Option<Vec<Spanned<String>>>,
    /// Entries added to the inherited `expose`.
    pub expose_add: Option<Vec<Spanned<String>>>,
    /// Entries removed from the inherited `expose` (exactly as written there).
    pub expose_remove: Option<Vec<Spanned<String>>>,
}

/// Only the version, read first so that a file written for a newer format
/// gets "unsupported version" rather than a complaint about a newer key.
#[derive(Debug, Deserialize)]
pub struct RawVersion {
    /// Format version, of whatever type was written.
    pub version: Option<Spanned<toml::Value>>,
}

/// `[filesystem]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilesystem {
    /// `rw` or `ro`.
    pub project: Option<RawProject>,
    /// Absolute paths made visible read-only (replaces the inherited list).
    pub read: Option<Vec<Spanned<String>>>,
    /// Entries added to the inherited `read`.
    pub read_add: Option<Vec<Spanned<String>>>,
    /// Entries removed from the inherited `read` (exactly as written there).
    pub read_remove: Option<Vec<Spanned<String>>>,
    /// Absolute paths made visible read-only when they exist (replaces the inherited list).
    pub read_if_exists: Option<Vec<Spanned<String>>>,
    /// Entries added to the inherited `read_if_exists`.
    pub read_if_exists_add: Option<Vec<Spanned<String>>>,
    /// Entries removed from the inherited `read_if_exists` (exactly as written there).
    pub read_if_exists_remove: Option<Vec<Spanned<String>>>,
    /// Absolute paths made visible read-write (replaces the inherited list).
    pub write: Option<Vec<Spanned<String>>>,
    /// Entries added to the inherited `write`.
    pub write_add: Option<Vec<Spanned<String>>>,
    /// Entries removed from the inherited `write` (exactly as written there).
    pub write_remove: Option<Vec<Spanned<String>>>,
    /// Paths masked in the sandbox (relative to the project root, or absolute).
    pub hide: Option<Vec<Spanned<String>>>,
    /// Entries added to the inherited `hide`.
    pub hide_add: Option<Vec<Spanned<String>>>,
    /// Entries removed from the inherited `hide` (exactly as written there).
    pub hide_remove: Option<Vec<Spanned<String>>>,
    /// Name patterns hidden at any depth of the project (replaces the inherited list).
    pub secrets: Option<Vec<Spanned<String>>>,
    /// Patterns added to the inherited `secrets`.
    pub secrets_add: Option<Vec<Spanned<String>>>,
    /// Patterns removed from the inherited `secrets` (exactly as written there).
    pub secrets_remove: Option<Vec<Spanned<String>>>,
    /// Name patterns read-only at any depth of a writable project (replaces the inherited list).
    pub protect: Option<Vec<Spanned<String>>>,
    /// Patterns added to the inherited `protect`.
    pub protect_add: Option<Vec<Spanned<String>>>,
    /// Patterns removed from the inherited `protect`.
    pub protect_remove: Option<Vec<Spanned<String>>>,
    /// Files hard-linked outside the project: `read-only`, `refuse` or `allow`.
    pub hardlinks: Option<crate::project::HardlinkPolicy>,
    /// Size of the private `/tmp`.
    pub tmp: Option<Spanned<Amount>>,
    /// Review mode: changes to the project are kept for review.
    pub review: Option<bool>,
    /// Most bytes a review run's layer may hold.
    pub review_size: Option<Spanned<Amount>>,
}

/// Access to the project root, as spelled in a file.
#[derive(Debug, Clone, Copy, Deserialize)]
pub enum RawProject {
    /// Read-write.
    #[serde(rename = "rw")]
    Rw,
    /// Read-only.
    #[serde(rename = "ro")]
    Ro,
    /// Not visible: an empty working directory.
    #[serde(rename = "none")]
    None,
}

/// `[network]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetwork {
    /// Which network the sandbox sees.
    pub mode: Option<RawNetworkMode>,
    /// Hosts the proxy lets through (implies `mode = "allowlist"`).
    pub allow: Option<Vec<Spanned<String>>>,
    /// Hosts added to the inherited `allow` (implies `mode = "allowlist"` too).
    pub allow_add: Option<Vec<Spanned<String>>>,
    /// Hosts removed from the inherited `allow`.
    pub allow_remove: Option<Vec<Spanned<String>>>,
    /// Names pinned to addresses.
    pub resolve: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
}

/// Network mode, as spelled in a file.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawNetworkMode {
    /// No network at all.
    None,
    /// A private loopback interface.
    Loopback,
    /// A private loopback interface and the proxy to the listed hosts.
    Allowlist,
    /// The host's network.
    Host,
}

/// `[limits]`. Each value may also be `"unlimited"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Memory, a size.
    pub memory: Option<Spanned<Amount>>,
    /// Tasks, an integer.
    pub pids: Option<Spanned<Amount>>,
    /// CPU cores, a number.
    pub cpu: Option<Spanned<Amount>>,
    /// Wall-clock limit, a duration (or an integer number of seconds).
    pub timeout: Option<Spanned<Amount>>,
    /// Combined stdout and stderr, a size.
    pub output: Option<Spanned<Amount>>,
    /// Open files, an integer.
    pub nofile: Option<Spanned<Amount>>,
}

/// `[syscalls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSyscalls {
    /// Allowlist or denylist.
    pub mode: Option<RawSyscallMode>,
    /// Extra system calls to allow.
    pub allow: Option<Vec<Spanned<String>>>,
    /// Entries added to the inherited `allow`.
    pub allow_add: Option<Vec<Spanned<String>>>,
    /// Entries removed from the inherited `allow` (exactly as written there).
    pub allow_remove: Option<Vec<Spanned<String>>>,
    /// Extra system calls to refuse.
    pub deny: Option<Vec<Spanned<String>>>,
    /// Entries added to the inherited `deny`.
    pub deny_add: Option<Vec<Spanned<String>>>,
    /// Entries removed from the inherited `deny` (exactly as written there).
    pub deny_remove: Option<Vec<Spanned<String>>>,
}

/// Seccomp mode, as spelled in a file.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawSyscallMode {
    /// Only listed calls.
    Allowlist,
    /// All but dangerous calls.
    Denylist,
}

/// `[env]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnv {
    /// Variables copied from the supervisor's environment.
    pub pass: Option<Vec<Spanned<String>>>,
    /// Entries added to the inherited `pass`.
    pub pass_add: Option<Vec<Spanned<String>>>,
    /// Entries removed from the inherited `pass` (exactly as written there).
    pub pass_remove: Option<Vec<Spanned<String>>>,
    /// Variables set to fixed values.
    pub set: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
    /// Pass the caller's git user.name and user.email (`sandbox run`).
    pub git_identity: Option<bool>,
}

/// `[broker]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBroker {
    /// Decision when no rule matches.
    pub default: Option<RawDecision>,
    /// Per-action decisions, optionally narrowed to a target pattern.
    /// Keys are `ACTION` or `ACTION:PATTERN` for targets matching a glob
    /// (paths relative to the project root, a command for terminal.run, a
    /// name for secrets.get); a misspelt action is an error listing the
    /// valid ones instead of a rule that never matches.
    pub rules: Option<BTreeMap<crate::action::Permission, RawDecision>>,
}

/// A broker decision, as spelled in a file.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawDecision {
    /// Refuse.
    Deny,
    /// Ask a person.
    Ask,
    /// Perform.
    Allow,
}

/// `[enforce]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnforce {
    /// User namespace: `required`, or `best-effort`/`off` to run without
    /// namespaces where none can be made (or at all).
    pub userns: Option<Spanned<RawEnforcement>>,
    /// Landlock.
    pub landlock: Option<RawEnforcement>,
    /// Seccomp.
    pub seccomp: Option<RawEnforcement>,
    /// cgroups.
    pub cgroups: Option<RawEnforcement>,
}

/// Enforcement level, as spelled in a file.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawEnforcement {
    /// Fail if the layer cannot be applied.
    Required,
    /// Apply when possible, report when not.
    BestEffort,
    /// Do not apply.
    Off,
}

/// A limit as written: an integer, a float or a string ("512MiB", "10m",
/// "unlimited"). Which forms a field accepts is checked after parsing, with
/// a message specific to the field.
#[derive(Debug, Clone, PartialEq)]
pub enum Amount {
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Text(String),
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AmountVisitor;
        impl Visitor<'_> for AmountVisitor {
            type Value = Amount;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string such as \"512MiB\", \"10m\" or \"unlimited\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Amount, E> {
                Ok(Amount::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Amount, E> {
                i64::try_from(v)
                    .map(Amount::Int)
                    .map_err(|_| E::custom("number too large"))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Amount, E> {
                Ok(Amount::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Amount, E> {
                Ok(Amount::Text(v.to_owned()))
            }
        }
        deserializer.deserialize_any(AmountVisitor)
    }
}
