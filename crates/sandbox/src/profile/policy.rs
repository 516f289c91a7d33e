//! The validated, fully resolved form of a profile.
//!
//! A [`Policy`] is what the spawn path consumes. It is produced only by
//! [`crate::profile::load`] (or by code that builds it field by field), after
//! every "X requires Y" check has passed, so the spawn code never has to
//! re-validate anything. It deserializes only so that `sandbox daemon` can
//! hand a policy it resolved to its own launcher (`crate::launch`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

// The filter's own types: the seccomp compiler is below the profile and
// owns what it compiles; a profile names them here.
pub use crate::seccomp::policy::{SyscallMode, SyscallPolicy};

/// How hard a security layer is insisted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// The run does not start if the layer cannot be applied.
    Required,
    /// Applied where the kernel allows; a missing layer is named on stderr and in the report.
    BestEffort,
    /// Not applied at all.
    Off,
}

impl Enforcement {
    /// The name profiles and reports use (`required`, `best-effort`, `off`).
    pub fn name(self) -> &'static str {
        match self {
            Enforcement::Required => "required",
            Enforcement::BestEffort => "best-effort",
            Enforcement::Off => "off",
        }
    }
}

/// Which network the sandbox sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// A new network namespace whose loopback interface stays down.
    None,
    /// A new network namespace with its own loopback interface up.
    Loopback,
    /// Like `Loopback`, plus a proxy the supervisor runs outside that
    /// leads to the hosts [`NetworkPolicy::allow`] lists (and to those the
    /// broker allows), and nowhere else.
    Allowlist,
    /// The host's network namespace (no network isolation).
    Host,
}

impl NetworkMode {
    /// The name profiles, flags and reports use.
    pub fn name(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Loopback => "loopback",
            NetworkMode::Allowlist => "allowlist",
            NetworkMode::Host => "host",
        }
    }

    /// The mode a profile, flag or request names, if it names one.
    pub fn from_name(name: &str) -> Option<NetworkMode> {
        [
            NetworkMode::None,
            NetworkMode::Loopback,
            NetworkMode::Allowlist,
            NetworkMode::Host,
        ]
        .into_iter()
        .find(|mode| mode.name() == name)
    }

    /// Whether the sandbox has a loopback interface of its own that is up.
    pub fn has_loopback(self) -> bool {
        matches!(self, NetworkMode::Loopback | NetworkMode::Allowlist)
    }
}

/// What the sandbox may do with the project root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProjectAccess {
    /// Read, write and execute.
    ReadWrite,
    /// Read and execute only.
    ReadOnly,
    /// Not visible: the working directory is an empty, read-only directory
    /// at the project's path, and files go through the broker.
    Empty,
}

/// A broker decision in a profile rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Perform the action.
    Allow,
    /// Ask a person (deny when nobody can be asked).
    Ask,
    /// Refuse the action.
    Deny,
}

/// Filesystem view of the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct FilesystemPolicy {
    /// Access to the project root (mounted at its own path, and the working directory).
    pub project: ProjectAccess,
    /// Absolute host paths made visible read-only (and executable). Each must exist.
    pub read: Vec<PathBuf>,
    /// Like `read`, but silently skipped when the path does not exist on this host
    /// (system directories that differ between distributions, such as `/lib32`).
    pub read_if_exists: Vec<PathBuf>,
    /// Absolute host paths made visible read-write. Each must exist.
    pub write: Vec<PathBuf>,
    /// Paths masked inside the sandbox: relative paths are taken below the project root,
    /// absolute ones as they are. A hidden directory appears empty and read-only,
    /// a hidden file empty and unreadable. Paths that do not exist are ignored.
    pub hide: Vec<PathBuf>,
    /// Secrets hidden at any depth of the project: name patterns (`.env`,
    /// `*.pem`, `.ssh/`, `!.env.example`), as in `crate::project::patterns`.
    pub secrets: Vec<String>,
    /// Entries made read-only at any depth of a writable project, because
    /// the host runs what they say later (git hooks and config, editor and
    /// agent settings, shell start-up files). Same pattern syntax.
    pub protect: Vec<String>,
    /// Files hard-linked to a file outside the project.
    pub hardlinks: crate::project::HardlinkPolicy,
    /// Size limit of the private `/tmp`, in bytes.
    pub tmp_size: u64,
    /// Review mode: the project's changes land in a layer of the run's
    /// own, kept until applied or discarded (see [`crate::review`]).
    pub review: bool,
    /// Most bytes a review run's layer may hold (enforced while it writes).
    pub review_size: u64,
}

/// Network view of the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct NetworkPolicy {
    /// Which network namespace the sandbox gets.
    pub mode: NetworkMode,
    /// In `Allowlist` mode, what the proxy lets through without asking:
    /// entries as `crate::net::allow` parses them (`api.example.com`,
    /// `*.pythonhosted.org:443`, `10.0.0.0/8:5432`), checked when the
    /// profile was loaded. Empty in the other modes.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Names the proxy resolves to fixed addresses instead of asking DNS
    /// (like curl's `--resolve`); the addresses still pass its checks.
    #[serde(default)]
    pub resolve: BTreeMap<String, std::net::IpAddr>,
}

impl NetworkPolicy {
    /// The network a flag or an API request names: `none`, `loopback`,
    /// `host`, or `allow:HOST[,HOST...]` (the allowlist; `allow:` alone
    /// lists nothing, so every host is decided by the broker). The error
    /// names what is wrong and the accepted forms.
    pub fn from_spec(spec: &str) -> Result<NetworkPolicy, String> {
        if let Some(list) = spec.strip_prefix("allow:") {
            let mut policy = NetworkPolicy::of_mode(NetworkMode::Allowlist);
            for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                crate::net::allow::check_entry(entry)
                    .map_err(|err| format!("allow:{list}: {err}"))?;
                policy.allow.push(entry.to_string());
            }
            return Ok(policy);
        }
        NetworkMode::from_name(spec)
            .map(NetworkPolicy::of_mode)
            .ok_or_else(|| {
                format!(
                    "{spec:?} is not a network: use none, loopback, host or allow:HOST[,HOST...]"
                )
            })
    }

    /// A policy with `mode` and nothing listed.
    pub fn of_mode(mode: NetworkMode) -> NetworkPolicy {
        NetworkPolicy {
            mode,
            allow: Vec::new(),
            resolve: BTreeMap::new(),
        }
    }
}

/// Resource limits. `None` means "no limit from this profile".
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Limits {
    /// Memory limit in bytes.
    pub memory: Option<u64>,
    /// Maximum number of tasks (processes and threads).
    pub pids: Option<u64>,
    /// CPU share in cores (0.5 = half a core).
    pub cpu: Option<f64>,
    /// Wall-clock limit.
    #[serde(with = "duration_secs")]
    pub timeout: Option<Duration>,
    /// Combined stdout and stderr cap in bytes.
    pub output: Option<u64>,
    /// RLIMIT_NOFILE.
    pub nofile: Option<u64>,
}

/// The environment of the sandboxed process. Nothing is inherited unless named here.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct EnvPolicy {
    /// Variables copied from the supervisor's environment when set there.
    pub pass: Vec<String>,
    /// Variables set to fixed values (these win over `pass`).
    pub set: BTreeMap<String, String>,
    /// `sandbox run` passes the caller's git `user.name` and `user.email`
    /// as `GIT_AUTHOR_*` and `GIT_COMMITTER_*` (nothing else of git's
    /// configuration), so commits made inside carry the person's identity.
    #[serde(default)]
    pub git_identity: bool,
}

/// Broker policy (used by the permission broker).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BrokerPolicy {
    /// Decision when no rule matches and the action has no risk default.
    pub default: Decision,
    /// Per-action decisions, keyed by action name (`fs.read`, `terminal.run`, ...).
    pub rules: BTreeMap<String, Decision>,
}

/// How hard each layer is insisted on.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct EnforcePolicy {
    /// User namespace (and with it the mount, pid, ipc, uts and cgroup namespaces).
    pub userns: Enforcement,
    /// Landlock filesystem rules.
    pub landlock: Enforcement,
    /// Seccomp filter.
    pub seccomp: Enforcement,
    /// cgroup limits.
    pub cgroups: Enforcement,
}

/// A validated, resolved profile.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Policy {
    /// The profile's name (`strict`, or the file stem of a user profile).
    pub name: String,
    /// Filesystem view.
    pub filesystem: FilesystemPolicy,
    /// Network view.
    pub network: NetworkPolicy,
    /// Resource limits.
    pub limits: Limits,
    /// Seccomp filter.
    pub syscalls: SyscallPolicy,
    /// Environment.
    pub env: EnvPolicy,
    /// Broker decisions.
    pub broker: BrokerPolicy,
    /// Layer enforcement levels.
    pub enforce: EnforcePolicy,
    /// Toolchains to expose by name (`[tools] expose`), turned into read
    /// paths and variables by [`crate::profile::tools::expose`] when a run
    /// is prepared.
    pub tools: Vec<String>,
}

impl Policy {
    /// What decides the walk of the project for a run under this profile
    /// (None: the project is not visible, so it is not walked).
    pub fn scan_rules(&self) -> Option<crate::project::watcher::ScanRules> {
        (self.filesystem.project != ProjectAccess::Empty).then(|| {
            crate::project::watcher::ScanRules {
                secrets: self.filesystem.secrets.clone(),
                protect: self.filesystem.protect.clone(),
                writable: self.filesystem.project == ProjectAccess::ReadWrite,
                hardlinks: self.filesystem.hardlinks,
            }
        })
    }
}

impl EnvPolicy {
    /// The environment the sandboxed process starts with, as `NAME=VALUE` pairs.
    /// `lookup` reads the supervisor's environment (injected so this stays pure).
    pub fn resolve(&self, lookup: impl Fn(&str) -> Option<OsString>) -> Vec<(OsString, OsString)> {
        let mut out: BTreeMap<OsString, OsString> = BTreeMap::new();
        for name in &self.pass {
            if let Some(value) = lookup(name) {
                out.insert(OsString::from(name), value);
            }
        }
        for (name, value) in &self.set {
            out.insert(OsString::from(name), OsString::from(value));
        }
        out.into_iter().collect()
    }
}

mod duration_secs {
    use serde::Serializer;
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        use serde::Deserialize;
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(secs) => Duration::try_from_secs_f64(secs)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}
