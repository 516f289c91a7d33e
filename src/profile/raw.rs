//! The profile file as written: serde types that mirror the TOML one to one,
//! and the per-file checks that turn them into a [`Layer`].
//!
//! Every struct rejects unknown keys, and every closed set of values is a Rust
//! enum, so a typo is an error that lists the valid choices instead of a
//! setting that is silently ignored. Values that need checks beyond their
//! type (paths, sizes, names) keep their position in the file (`Spanned`) so
//! those errors point at them too.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::error::ProfileError;
use super::policy::{Decision, Enforcement, NetworkMode, Policy, ProjectAccess, SyscallMode};
use super::size::{parse_duration, parse_size};

/// Largest private `/tmp`: it is RAM (tmpfs), so a bigger one is almost certainly a typo.
const MAX_TMP: u64 = 64 << 30;
/// Largest CPU share, in cores.
const MAX_CPU: f64 = 1024.0;
/// Smallest memory limit: below this even a static binary fails to start,
/// which would look like a sandbox bug rather than a limit.
const MIN_MEMORY: u64 = 1 << 20;

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

/// The text of one profile and the name used for it in messages.
pub(crate) struct Source<'a> {
    /// A file name as the user gave it, or a built-in's name.
    pub origin: &'a str,
    /// The TOML text.
    pub text: &'a str,
}

impl Source<'_> {
    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }

    /// An [`ProfileError::Invalid`] at `span`.
    pub fn error(&self, span: Range<usize>, message: impl Into<String>) -> ProfileError {
        let (line, column) = self.line_column(span.start);
        ProfileError::Invalid {
            origin: self.origin.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }

    fn toml_error(&self, err: &toml::de::Error) -> ProfileError {
        self.error(err.span().unwrap_or(0..0), err.message().trim_end())
    }
}

/// One profile file after its own checks, before `extends` is applied.
/// `None` means "not set here": the value comes from the parent.
#[derive(Debug, Default)]
pub(crate) struct Layer {
    pub extends: Option<Spanned<String>>,
    pub project: Option<ProjectAccess>,
    pub read: ListEdit<PathBuf>,
    pub read_if_exists: ListEdit<PathBuf>,
    pub write: ListEdit<PathBuf>,
    pub hide: ListEdit<PathBuf>,
    pub secrets: ListEdit<String>,
    pub protect: ListEdit<String>,
    pub hardlinks: Option<crate::project::HardlinkPolicy>,
    pub tmp_size: Option<u64>,
    pub network: Option<NetworkMode>,
    pub network_allow: ListEdit<String>,
    pub network_resolve: Option<BTreeMap<String, std::net::IpAddr>>,
    pub memory: Option<Option<u64>>,
    pub pids: Option<Option<u64>>,
    pub cpu: Option<Option<f64>>,
    pub timeout: Option<Option<Duration>>,
    pub output: Option<Option<u64>>,
    pub nofile: Option<Option<u64>>,
    pub syscall_mode: Option<SyscallMode>,
    pub syscall_allow: ListEdit<String>,
    pub syscall_deny: ListEdit<String>,
    pub env_pass: ListEdit<String>,
    pub env_set: BTreeMap<String, String>,
    pub env_git_identity: Option<bool>,
    pub broker_default: Option<Decision>,
    pub broker_rules: BTreeMap<String, Decision>,
    pub userns: Option<Enforcement>,
    pub landlock: Option<Enforcement>,
    pub seccomp: Option<Enforcement>,
    pub cgroups: Option<Enforcement>,
    pub tools: ListEdit<String>,
}

/// One list key as a layer writes it: `KEY` replaces the inherited list,
/// `KEY_add` appends to it (once each), `KEY_remove` takes entries out, so a
/// child profile adjusts its parent's list without repeating it.
#[derive(Debug)]
pub(crate) struct ListEdit<T> {
    pub replace: Option<Vec<T>>,
    pub add: Vec<T>,
    pub remove: Vec<T>,
}

impl<T> Default for ListEdit<T> {
    fn default() -> Self {
        ListEdit {
            replace: None,
            add: Vec::new(),
            remove: Vec::new(),
        }
    }
}

impl<T: PartialEq> ListEdit<T> {
    /// Replace, then add, then remove.
    pub fn apply(self, list: &mut Vec<T>) {
        if let Some(replacement) = self.replace {
            *list = replacement;
        }
        for item in self.add {
            if !list.contains(&item) {
                list.push(item);
            }
        }
        list.retain(|item| !self.remove.contains(item));
    }
}

impl Layer {
    /// Parse and check one file. Pure: nothing outside `source` is looked at.
    pub fn parse(source: &Source) -> Result<Layer, ProfileError> {
        let version: RawVersion = toml::from_str(source.text).map_err(|e| source.toml_error(&e))?;
        match version.version {
            None => {
                return Err(source.error(
                    0..0,
                    "`version` is missing: add `version = 1` as the first line",
                ))
            }
            Some(v) if *v.get_ref() != toml::Value::Integer(1) => {
                return Err(source.error(
                    v.span(),
                    format!(
                        "unsupported profile version {}: this sandbox reads version 1 only",
                        v.get_ref()
                    ),
                ))
            }
            Some(_) => {}
        }
        let raw: RawProfile = toml::from_str(source.text).map_err(|e| source.toml_error(&e))?;
        raw.check(source)
    }

    /// Overwrite `policy` with every value this layer sets.
    pub fn apply(self, policy: &mut Policy) {
        fn set<T>(target: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *target = value;
            }
        }
        let fs = &mut policy.filesystem;
        set(&mut fs.project, self.project);
        self.read.apply(&mut fs.read);
        self.read_if_exists.apply(&mut fs.read_if_exists);
        self.write.apply(&mut fs.write);
        self.hide.apply(&mut fs.hide);
        self.secrets.apply(&mut fs.secrets);
        self.protect.apply(&mut fs.protect);
        set(&mut fs.hardlinks, self.hardlinks);
        set(&mut fs.tmp_size, self.tmp_size);
        set(&mut policy.network.mode, self.network);
        self.network_allow.apply(&mut policy.network.allow);
        set(&mut policy.network.resolve, self.network_resolve);
        // A mode without a proxy has nothing to list: a layer that turns
        // the proxy off (`mode = "none"` over a parent's allowlist) gets
        // exactly the mode it names.
        if policy.network.mode != NetworkMode::Allowlist {
            policy.network.allow.clear();
            policy.network.resolve.clear();
        }
        let limits = &mut policy.limits;
        set(&mut limits.memory, self.memory);
        set(&mut limits.pids, self.pids);
        set(&mut limits.cpu, self.cpu);
        set(&mut limits.timeout, self.timeout);
        set(&mut limits.output, self.output);
        set(&mut limits.nofile, self.nofile);
        set(&mut policy.syscalls.mode, self.syscall_mode);
        self.syscall_allow.apply(&mut policy.syscalls.allow);
        self.syscall_deny.apply(&mut policy.syscalls.deny);
        self.env_pass.apply(&mut policy.env.pass);
        // Maps merge key by key: a child adds or changes entries, it cannot drop the parent's.
        policy.env.set.extend(self.env_set);
        set(&mut policy.env.git_identity, self.env_git_identity);
        set(&mut policy.broker.default, self.broker_default);
        policy.broker.rules.extend(self.broker_rules);
        let enforce = &mut policy.enforce;
        set(&mut enforce.userns, self.userns);
        set(&mut enforce.landlock, self.landlock);
        set(&mut enforce.seccomp, self.seccomp);
        set(&mut enforce.cgroups, self.cgroups);
        self.tools.apply(&mut policy.tools);
    }
}

impl RawProfile {
    fn check(self, src: &Source) -> Result<Layer, ProfileError> {
        let mut layer = Layer {
            extends: self.extends,
            ..Layer::default()
        };
        if let Some(fs) = self.filesystem {
            layer.project = fs.project.map(|p| match p {
                RawProject::Rw => ProjectAccess::ReadWrite,
                RawProject::Ro => ProjectAccess::ReadOnly,
                RawProject::None => ProjectAccess::Empty,
            });
            let paths = |key: &str, replace, add, remove| {
                list_edit(key, replace, add, remove, |s, key| host_path(src, s, key))
            };
            layer.read = paths("filesystem.read", fs.read, fs.read_add, fs.read_remove)?;
            layer.read_if_exists = paths(
                "filesystem.read_if_exists",
                fs.read_if_exists,
                fs.read_if_exists_add,
                fs.read_if_exists_remove,
            )?;
            layer.write = list_edit(
                "filesystem.write",
                fs.write,
                fs.write_add,
                fs.write_remove,
                |s, key| writable_path(src, s, key),
            )?;
            layer.hide = list_edit(
                "filesystem.hide",
                fs.hide,
                fs.hide_add,
                fs.hide_remove,
                |s, key| hide_path(src, s, key),
            )?;
            let patterns = |key: &str, replace, add, remove| {
                list_edit(key, replace, add, remove, |s, key| {
                    name_pattern(src, s, key)
                })
            };
            layer.secrets = patterns(
                "filesystem.secrets",
                fs.secrets,
                fs.secrets_add,
                fs.secrets_remove,
            )?;
            layer.protect = patterns(
                "filesystem.protect",
                fs.protect,
                fs.protect_add,
                fs.protect_remove,
            )?;
            layer.hardlinks = fs.hardlinks;
            if let Some(tmp) = fs.tmp {
                let size = size_value(src, &tmp, "filesystem.tmp", false)?.unwrap_or(0);
                if size == 0 || size > MAX_TMP {
                    return Err(src.error(
                        tmp.span(),
                        "`filesystem.tmp` must be more than 0 and at most 64GiB (it is held in memory)",
                    ));
                }
                layer.tmp_size = Some(size);
            }
        }
        if let Some(net) = self.network {
            check_network(src, net, &mut layer)?;
        }
        if let Some(limits) = self.limits {
            check_limits(src, limits, &mut layer)?;
        }
        if let Some(sys) = self.syscalls {
            layer.syscall_mode = sys.mode.map(|m| match m {
                RawSyscallMode::Allowlist => SyscallMode::Allowlist,
                RawSyscallMode::Denylist => SyscallMode::Denylist,
            });
            let syscalls = |key: &str, replace, add, remove| {
                list_edit(key, replace, add, remove, |s, _| syscall_name(src, s))
            };
            layer.syscall_allow =
                syscalls("syscalls.allow", sys.allow, sys.allow_add, sys.allow_remove)?;
            layer.syscall_deny =
                syscalls("syscalls.deny", sys.deny, sys.deny_add, sys.deny_remove)?;
        }
        if let Some(env) = self.env {
            layer.env_pass = list_edit(
                "env.pass",
                env.pass,
                env.pass_add,
                env.pass_remove,
                |s, _| env_name(src, s),
            )?;
            layer.env_git_identity = env.git_identity;
            for (name, value) in env.set.unwrap_or_default() {
                let name = env_name(src, &name)?;
                if value.get_ref().contains('\0') {
                    return Err(src.error(value.span(), "environment values cannot contain NUL"));
                }
                layer.env_set.insert(name, value.into_inner());
            }
        }
        if let Some(broker) = self.broker {
            layer.broker_default = broker.default.map(decision);
            layer.broker_rules = broker
                .rules
                .unwrap_or_default()
                .into_iter()
                .map(|(key, d)| (key.to_string(), decision(d)))
                .collect();
        }
        if let Some(enforce) = self.enforce {
            // Below "required", a run where no user namespace can be made
            // goes on without namespaces (Landlock-only view, see
            // spawn::no_namespaces) instead of refusing.
            layer.userns = enforce.userns.map(|u| enforcement(u.into_inner()));
            layer.landlock = enforce.landlock.map(enforcement);
            layer.seccomp = enforce.seccomp.map(enforcement);
            layer.cgroups = enforce.cgroups.map(enforcement);
        }
        if let Some(tools) = self.tools {
            layer.tools = list_edit(
                "tools.expose",
                tools.expose,
                tools.expose_add,
                tools.expose_remove,
                |s, _| tool_name(src, s),
            )?;
        }
        Ok(layer)
    }
}

fn check_network(src: &Source, net: RawNetwork, layer: &mut Layer) -> Result<(), ProfileError> {
    let mode = net.mode.map(|m| match m {
        RawNetworkMode::None => NetworkMode::None,
        RawNetworkMode::Loopback => NetworkMode::Loopback,
        RawNetworkMode::Allowlist => NetworkMode::Allowlist,
        RawNetworkMode::Host => NetworkMode::Host,
    });
    // `allow_add` asks for the proxy as plainly as `allow` does; `allow_remove`
    // only edits an inherited list and implies nothing.
    let listed = net.allow.is_some() || net.allow_add.is_some() || net.resolve.is_some();
    if let (Some(mode), true) = (mode, listed) {
        if mode != NetworkMode::Allowlist {
            let (key, span) = match (&net.allow, &net.allow_add, &net.resolve) {
                (Some(allow), _, _) => ("allow", allow.first().map(|a| a.span())),
                (None, Some(add), _) => ("allow_add", add.first().map(|a| a.span())),
                (None, None, Some(resolve)) => ("resolve", resolve.keys().next().map(|k| k.span())),
                (None, None, None) => ("allow", None),
            };
            return Err(src.error(
                span.unwrap_or(0..0),
                format!(
                    "`network.{key}` goes with the proxy of mode \"allowlist\", not mode \"{}\"; \
                     drop `mode` (a list implies the allowlist) or the list",
                    mode.name()
                ),
            ));
        }
    }
    layer.network = match (mode, listed) {
        (None, true) => Some(NetworkMode::Allowlist),
        (mode, _) => mode,
    };
    layer.network_allow = list_edit(
        "network.allow",
        net.allow,
        net.allow_add,
        net.allow_remove,
        |entry, key| {
            crate::net::allow::check_entry(entry.get_ref())
                .map(|()| entry.get_ref().trim().to_string())
                .map_err(|err| src.error(entry.span(), format!("`{key}`: {err}")))
        },
    )?;
    if let Some(resolve) = net.resolve {
        let mut pins = BTreeMap::new();
        for (name, address) in resolve {
            crate::net::allow::check_name(name.get_ref())
                .map_err(|err| src.error(name.span(), format!("`network.resolve`: {err}")))?;
            let ip = address.get_ref().parse::<std::net::IpAddr>().map_err(|_| {
                src.error(
                    address.span(),
                    format!(
                        "`network.resolve`: {:?} is not an IP address (write e.g. \"10.0.0.5\" or \"fd00::5\")",
                        address.get_ref()
                    ),
                )
            })?;
            pins.insert(name.get_ref().to_ascii_lowercase(), ip);
        }
        layer.network_resolve = Some(pins);
    }
    Ok(())
}

fn decision(d: RawDecision) -> Decision {
    match d {
        RawDecision::Deny => Decision::Deny,
        RawDecision::Ask => Decision::Ask,
        RawDecision::Allow => Decision::Allow,
    }
}

fn enforcement(e: RawEnforcement) -> Enforcement {
    match e {
        RawEnforcement::Required => Enforcement::Required,
        RawEnforcement::BestEffort => Enforcement::BestEffort,
        RawEnforcement::Off => Enforcement::Off,
    }
}

/// A list key and its `_add` and `_remove` forms, each entry checked by
/// `check`, which is given the key as written (for its messages).
fn list_edit<T>(
    key: &str,
    replace: Option<Vec<Spanned<String>>>,
    add: Option<Vec<Spanned<String>>>,
    remove: Option<Vec<Spanned<String>>>,
    check: impl Fn(&Spanned<String>, &str) -> Result<T, ProfileError>,
) -> Result<ListEdit<T>, ProfileError> {
    let checked = |items: Option<Vec<Spanned<String>>>, key: &str| {
        items
            .unwrap_or_default()
            .iter()
            .map(|item| check(item, key))
            .collect::<Result<Vec<T>, ProfileError>>()
    };
    Ok(ListEdit {
        replace: replace.map(|items| checked(Some(items), key)).transpose()?,
        add: checked(add, &format!("{key}_add"))?,
        remove: checked(remove, &format!("{key}_remove"))?,
    })
}

/// `.` components and trailing slashes dropped; `..` kept (callers reject it).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

fn has_parent_dir(path: &Path) -> bool {
    path.components().any(|c| matches!(c, Component::ParentDir))
}

fn host_path(src: &Source, s: &Spanned<String>, field: &str) -> Result<PathBuf, ProfileError> {
    let text = s.get_ref();
    if text.contains('\0') {
        return Err(src.error(s.span(), format!("`{field}` paths cannot contain NUL")));
    }
    let path = Path::new(text);
    if !path.is_absolute() {
        return Err(src.error(
            s.span(),
            format!("`{field}` paths must be absolute: \"{text}\" does not start with '/'"),
        ));
    }
    // `..` would make the path's meaning depend on symlinks resolved at mount
    // time, so what the profile shows is not what the sandbox gets.
    if has_parent_dir(path) {
        return Err(src.error(
            s.span(),
            format!("`{field}` paths cannot contain `..`: \"{text}\""),
        ));
    }
    Ok(normalize(path))
}

fn writable_path(src: &Source, s: &Spanned<String>, field: &str) -> Result<PathBuf, ProfileError> {
    let path = host_path(src, s, field)?;
    // Writing to these is writing to the kernel or to every device: no
    // filesystem-level sandbox survives it.
    for forbidden in ["/proc", "/sys", "/dev"] {
        if path.starts_with(forbidden) {
            return Err(src.error(
                s.span(),
                format!(
                    "`{field}` cannot contain \"{}\": {forbidden} and everything under it stay read-only",
                    path.display()
                ),
            ));
        }
    }
    if path == Path::new("/") {
        return Err(src.error(
            s.span(),
            format!("`{field}` cannot contain \"/\": that would make the whole host writable"),
        ));
    }
    Ok(path)
}

fn hide_path(src: &Source, s: &Spanned<String>, field: &str) -> Result<PathBuf, ProfileError> {
    let text = s.get_ref();
    if text.contains('\0') {
        return Err(src.error(s.span(), format!("`{field}` paths cannot contain NUL")));
    }
    let path = Path::new(text);
    // A relative `..` would reach outside the project root.
    if has_parent_dir(path) {
        return Err(src.error(
            s.span(),
            format!("`{field}` paths cannot contain `..`: \"{text}\""),
        ));
    }
    let path = normalize(path);
    if path.as_os_str().is_empty() || path == Path::new("/") {
        return Err(src.error(
            s.span(),
            format!("`{field}` entry \"{text}\" would hide the whole project or filesystem"),
        ));
    }
    Ok(path)
}

/// A `secrets`/`protect` pattern: kept as written, compiled once to check it.
fn name_pattern(src: &Source, s: &Spanned<String>, key: &str) -> Result<String, ProfileError> {
    crate::project::Pattern::parse(s.get_ref())
        .map(|_| s.get_ref().clone())
        .map_err(|err| src.error(s.span(), format!("`{key}`: {err}")))
}

fn syscall_name(src: &Source, s: &Spanned<String>) -> Result<String, ProfileError> {
    let name = s.get_ref();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(src.error(
            s.span(),
            format!(
                "invalid system call name \"{}\": expected lowercase letters, digits and '_'",
                name.escape_default()
            ),
        ));
    }
    Ok(name.clone())
}

fn tool_name(src: &Source, s: &Spanned<String>) -> Result<String, ProfileError> {
    match super::tools::find(s.get_ref()) {
        Some(tool) => Ok(tool.name.to_string()),
        None => Err(src.error(
            s.span(),
            format!(
                "unknown tool `{}` in tools.expose: the known tools are {}",
                s.get_ref(),
                super::tools::known_names()
            ),
        )),
    }
}

fn env_name(src: &Source, s: &Spanned<String>) -> Result<String, ProfileError> {
    let name = s.get_ref();
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(src.error(
            s.span(),
            format!(
                "invalid environment variable name \"{}\": it must be non-empty without '=' or NUL",
                name.escape_default()
            ),
        ));
    }
    Ok(name.clone())
}

fn is_unlimited(amount: &Amount) -> bool {
    matches!(amount, Amount::Text(t) if t == "unlimited")
}

/// A size in bytes; `None` for "unlimited" when `unlimited_ok`.
fn size_value(
    src: &Source,
    value: &Spanned<Amount>,
    field: &str,
    unlimited_ok: bool,
) -> Result<Option<u64>, ProfileError> {
    let hint = if unlimited_ok {
        ", or \"unlimited\""
    } else {
        ""
    };
    match value.get_ref() {
        Amount::Text(_) if unlimited_ok && is_unlimited(value.get_ref()) => Ok(None),
        Amount::Text(t) => parse_size(t)
            .map(Some)
            .map_err(|e| src.error(value.span(), format!("`{field}`: {e}{hint}"))),
        Amount::Int(n) => u64::try_from(*n)
            .map(Some)
            .map_err(|_| src.error(value.span(), format!("`{field}` cannot be negative"))),
        Amount::Float(_) => Err(src.error(
            value.span(),
            format!("`{field}` must be a whole number of bytes or a size such as \"512MiB\"{hint}"),
        )),
    }
}

/// A count; `None` for "unlimited".
fn count_value(
    src: &Source,
    value: &Spanned<Amount>,
    field: &str,
) -> Result<Option<u64>, ProfileError> {
    match value.get_ref() {
        a if is_unlimited(a) => Ok(None),
        Amount::Int(n) if *n >= 1 => Ok(u64::try_from(*n).ok()),
        Amount::Int(_) => Err(src.error(value.span(), format!("`{field}` must be at least 1"))),
        _ => Err(src.error(
            value.span(),
            format!("`{field}` must be an integer or \"unlimited\""),
        )),
    }
}

fn check_limits(src: &Source, limits: RawLimits, layer: &mut Layer) -> Result<(), ProfileError> {
    if let Some(v) = limits.memory {
        let memory = size_value(src, &v, "limits.memory", true)?;
        if memory.is_some_and(|m| m < MIN_MEMORY) {
            return Err(src.error(v.span(), "`limits.memory` must be at least 1MiB"));
        }
        layer.memory = Some(memory);
    }
    if let Some(v) = limits.output {
        layer.output = Some(size_value(src, &v, "limits.output", true)?);
    }
    if let Some(v) = limits.pids {
        let pids = count_value(src, &v, "limits.pids")?;
        if let Some(Err(e)) = pids.map(super::size::check_pids) {
            return Err(src.error(v.span(), format!("`limits.pids` {e}")));
        }
        layer.pids = Some(pids);
    }
    if let Some(v) = limits.nofile {
        layer.nofile = Some(count_value(src, &v, "limits.nofile")?);
    }
    if let Some(v) = limits.cpu {
        let cores =
            match v.get_ref() {
                a if is_unlimited(a) => None,
                // Cores are small integers: an i64 converts to f64 exactly in range.
                #[allow(clippy::cast_precision_loss)]
                Amount::Int(n) => Some(*n as f64),
                Amount::Float(f) => Some(*f),
                Amount::Text(_) => return Err(src.error(
                    v.span(),
                    "`limits.cpu` must be a number of cores (such as 0.5 or 2) or \"unlimited\"",
                )),
            };
        // Written as a negated range check so that NaN (valid TOML) fails it too.
        if let Some(c) = cores {
            if !(c > 0.0 && c <= MAX_CPU) {
                return Err(src.error(
                    v.span(),
                    "`limits.cpu` must be more than 0 and at most 1024 cores",
                ));
            }
        }
        layer.cpu = Some(cores);
    }
    if let Some(v) = limits.timeout {
        let timeout = match v.get_ref() {
            a if is_unlimited(a) => None,
            Amount::Text(t) => Some(
                parse_duration(t)
                    .map_err(|e| src.error(v.span(), format!("`limits.timeout`: {e}, or \"unlimited\"")))?,
            ),
            Amount::Int(n) => Some(Duration::from_secs(u64::try_from(*n).map_err(|_| {
                src.error(v.span(), "`limits.timeout` cannot be negative")
            })?)),
            Amount::Float(_) => {
                return Err(src.error(
                    v.span(),
                    "`limits.timeout` must be a duration such as \"10m\", an integer number of seconds, or \"unlimited\"",
                ))
            }
        };
        if let Some(Err(e)) = timeout.map(super::size::check_timeout) {
            return Err(src.error(
                v.span(),
                format!("`limits.timeout` {e}; use \"unlimited\" for no limit"),
            ));
        }
        layer.timeout = Some(timeout);
    }
    Ok(())
}
