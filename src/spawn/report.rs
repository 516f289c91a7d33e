//! What a run did and what was actually enforced, for `--report`/`--json`.
//!
//! Nothing here is taken on trust from the plan: the namespaces, identity,
//! `no_new_privs` and capabilities come from the payload's own view read
//! just before exec (`measured`), the rest from records of steps that were
//! carried out. A field the run never reached is `null`, so a refused run's
//! report claims nothing it did not do.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::profile::policy::{Enforcement, NetworkMode, SyscallMode};

/// How the command ended.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal number, when a signal killed it.
    pub signal: Option<i32>,
    /// The status `sandbox run` exits with: the code, or 128 + the signal.
    pub status: i32,
}

/// Which namespaces the payload was in: true when its namespace differs
/// from the supervisor's, false when shared, None when not measured.
#[derive(Debug, Clone, Serialize)]
pub struct Namespaces {
    /// user
    pub user: Option<bool>,
    /// mount
    pub mount: Option<bool>,
    /// pid
    pub pid: Option<bool>,
    /// net
    pub net: Option<bool>,
    /// ipc
    pub ipc: Option<bool>,
    /// uts
    pub uts: Option<bool>,
    /// cgroup
    pub cgroup: Option<bool>,
}

/// Identity of the sandboxed process.
#[derive(Debug, Clone, Serialize)]
pub struct UserReport {
    /// uid inside the sandbox.
    pub inside_uid: u32,
    /// The host uid it maps to (never 0).
    pub host_uid: u32,
    /// gid inside the sandbox.
    pub inside_gid: u32,
    /// The host gid it maps to.
    pub host_gid: u32,
    /// Writable trees mounted idmapped (root supervisor), so files keep their host owner.
    pub idmapped_trees: usize,
}

/// Landlock as applied.
#[derive(Debug, Clone, Serialize)]
pub struct LandlockReport {
    /// What the profile asked for.
    pub requested: Enforcement,
    /// The kernel's Landlock ABI (None: not applied or not reported).
    pub abi: Option<u32>,
    /// fully-enforced, partially-enforced, not-enforced, off.
    pub status: String,
    /// Number of path rules.
    pub rules: usize,
}

/// Seccomp as applied.
#[derive(Debug, Clone, Serialize)]
pub struct SeccompReport {
    /// What the profile asked for.
    pub requested: Enforcement,
    /// Allowlist or denylist (None when off).
    pub mode: Option<SyscallMode>,
    /// SHA-256 of the installed BPF programs.
    pub filter_sha256: Option<String>,
    /// BPF instructions in all programs.
    pub instructions: usize,
    /// installed, skipped, off, or set-id-guard (policy off, set-id guard installed).
    pub status: String,
}

/// The run's cgroup as enforced.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupReport {
    /// 1 or 2.
    pub version: u8,
    /// Controllers (v1) or `unified` (v2).
    pub controllers: Vec<String>,
    /// The run's cgroup directories (removed when the run ended).
    pub paths: Vec<std::path::PathBuf>,
    /// Memory limit in bytes.
    pub memory: Option<u64>,
    /// Pids limit.
    pub pids: Option<u64>,
    /// CPU share in cores.
    pub cpu: Option<f64>,
}

/// What the run used.
#[derive(Debug, Clone, Serialize)]
pub struct Resources {
    /// User CPU time of every process of the run, in milliseconds.
    pub cpu_user_ms: f64,
    /// System CPU time, in milliseconds.
    pub cpu_system_ms: f64,
    /// Peak memory of the run's cgroup in bytes (None without a cgroup).
    pub memory_peak: Option<u64>,
    /// Processes killed by the OOM killer at the memory limit.
    pub oom_kills: u64,
    /// Forks refused at the pids limit.
    pub pids_limit_hits: u64,
    /// Most tasks at once (cgroup v2 only).
    pub pids_peak: Option<u64>,
}

/// What was actually enforced. `None` (null): the run stopped before this
/// was applied, or it could not be measured.
#[derive(Debug, Clone, Serialize)]
pub struct Enforced {
    /// With or without namespaces, and what a run without them cannot
    /// promise (None: the run was refused before its payload was set up).
    pub isolation: Option<crate::spawn::no_namespaces::Isolation>,
    /// Namespaces, as measured inside (None: the payload never got that far).
    pub namespaces: Option<Namespaces>,
    /// Identity (None: the payload never got that far).
    pub user: Option<UserReport>,
    /// Network mode (None: the payload never got that far).
    pub network: Option<NetworkMode>,
    /// The allowlist in force, as written (None: no proxy in this run).
    pub network_allow: Option<Vec<String>>,
    /// Landlock.
    pub landlock: LandlockReport,
    /// Seccomp.
    pub seccomp: SeccompReport,
    /// Capabilities left in any set, as measured inside (empty: none).
    pub capabilities: Option<Vec<String>>,
    /// no_new_privs, as measured inside.
    pub no_new_privs: Option<bool>,
    /// Resource limits applied with setrlimit (empty when none was applied).
    pub rlimits: BTreeMap<String, u64>,
    /// Size of the private /tmp in bytes.
    pub tmp_size: Option<u64>,
    /// The run's cgroup (None: no cgroup; see the warnings).
    pub cgroup: Option<CgroupReport>,
    /// Wall-clock limit in seconds.
    pub timeout_s: Option<f64>,
    /// What the walk of the project found and the view made of it (None:
    /// the project was not visible).
    pub project_view: Option<ProjectView>,
}

/// The project as the run saw it.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectView {
    /// Entries the walk visited.
    pub entries: u64,
    /// How long the walk took, in milliseconds.
    pub scan_ms: f64,
    /// Secrets masked (paths below the project root).
    pub secrets_hidden: Vec<PathBuf>,
    /// Entries made read-only because the host runs what they say.
    pub protected: Vec<PathBuf>,
    /// Directories pinned so that the protected entries stay in place.
    pub pinned: usize,
    /// Files hard-linked outside the project, made read-only.
    pub hardlinks_read_only: Vec<PathBuf>,
}

/// The whole report of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Report format version.
    pub version: u32,
    /// Profile name.
    pub profile: String,
    /// The command line.
    pub command: Vec<String>,
    /// Canonical project root.
    pub project: PathBuf,
    /// How the command ended (None when it never started).
    pub exit: Option<ExitInfo>,
    /// Why the sandbox failed, when it did.
    pub error: Option<String>,
    /// Wall-clock time from clone to the end, in milliseconds.
    pub wall_time_ms: f64,
    /// What was enforced.
    pub enforced: Enforced,
    /// The payload's own view of its confinement, read just before exec
    /// (None: it never got that far).
    pub measured: Option<crate::spawn::measure::Measured>,
    /// What the run used.
    pub resources: Option<Resources>,
    /// Broker requests and decisions.
    pub broker: Option<crate::broker::server::BrokerCounts>,
    /// Connections through the allowlist's proxy, allowed and refused, by
    /// host (empty without a proxy).
    pub connections: BTreeMap<String, crate::broker::network::HostCounts>,
    /// Limits that ended or cut the run (`timeout`, `memory`, `pids`).
    pub limits_hit: Vec<crate::spawn::parent::LimitHit>,
    /// Protected entries the run created, renamed out of use after it.
    pub quarantined: Vec<crate::project::quarantine::Quarantined>,
    /// Layers weaker than asked or other caveats, also printed on stderr.
    pub warnings: Vec<String>,
}
