//! What a run did and what was actually enforced, for `--report`/`--json`.
//!
//! Nothing here is taken on trust from the plan: the namespaces, identity,
//! `no_new_privs` and capabilities come from the payload's own view read
//! just before exec (`measured`), the rest from records of steps that were
//! carried out. A field the run never reached is `null`, so a refused run's
//! report claims nothing it did not do.
//!
//! One type for every report written, built here and nowhere else: a run
//! that got a plan ([`Report::build`]) and a run refused before it had one
//! ([`Report::refused`], which has no [`RunDetails`] and `enforced: null`).
//! A report written by another process (a daemon run's supervisor, which
//! the caller controls; `sandbox run --report` read back by the MCP shell)
//! is read with [`Report::read`]: unreadable is an error, never a panic.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

use crate::profile::policy::{Enforcement, NetworkMode, Policy, SyscallMode};
use crate::project::quarantine::Sweep;
use crate::project::scan::Scan;
use crate::spawn::channel::PayloadExit;
use crate::spawn::measure::{Measured, NamespaceState, View};
use crate::spawn::parent::{CgroupUse, Outcome};
use crate::spawn::prepare::ChildPlan;
use crate::spawn::{Prepared, SpawnError, Step};

/// How the command ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    #[serde(default)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProjectView {
    /// Entries the walk visited.
    pub entries: u64,
    /// How long the walk took, in milliseconds (answered by a watcher:
    /// how long asking it took).
    pub scan_ms: f64,
    /// Who walked the project: `walk` (this run) or `watcher` (the
    /// project's `sandbox watch`, which keeps its walk current).
    #[serde(default = "walked")]
    pub scan_source: String,
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
///
/// Its JSON keeps one schema: the keys of [`RunDetails`] sit at the top
/// level next to these, and are absent (not null) from a refused run's
/// report; the optional labels below are absent unless set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Report format version.
    pub version: u32,
    /// Profile name.
    pub profile: String,
    /// How the command ended (None when it never started).
    pub exit: Option<ExitInfo>,
    /// Why the sandbox failed, when it did.
    pub error: Option<String>,
    /// What was enforced (None: the run was refused before it had a plan).
    pub enforced: Option<Enforced>,
    /// The payload's own view of its confinement, read just before exec
    /// (None: it never got that far).
    pub measured: Option<crate::spawn::measure::Measured>,
    /// The run's own record (None: refused before it had a plan).
    #[serde(flatten, deserialize_with = "run_details")]
    pub run: Option<RunDetails>,
    /// Whether a daemon's run came from a warm sandbox (set by the daemon's
    /// supervisor only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<bool>,
    /// A warm run's latency from the supervisor's receipt of its command to
    /// the payload's execve, in microseconds (set by the daemon's supervisor
    /// only, when the exec was seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_to_exec_us: Option<u64>,
    /// Who wrote the report, as the daemon labels a caller's supervisor's
    /// (`supervisor`): a claim, never what root observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_by: Option<String>,
    /// A review run's id and what it kept (`run`; see [`crate::review`]).
    #[serde(default, rename = "run", skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::review::Kept>,
}

/// What a run that had a plan reports besides what was enforced.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunDetails {
    /// The command line.
    pub command: Vec<String>,
    /// Canonical project root.
    pub project: PathBuf,
    /// Wall-clock time from clone to the end, in milliseconds.
    pub wall_time_ms: f64,
    /// What the run used.
    pub resources: Option<Resources>,
    /// Broker requests and decisions.
    pub broker: Option<crate::broker::server::BrokerCounts>,
    /// Connections through the allowlist's proxy, allowed and refused, by
    /// host (empty without a proxy).
    #[serde(default)]
    pub connections: BTreeMap<String, crate::broker::network::HostCounts>,
    /// Limits that ended or cut the run (`timeout`, `memory`, `pids`).
    #[serde(default)]
    pub limits_hit: Vec<crate::spawn::parent::LimitHit>,
    /// Protected entries the run created, renamed out of use after it.
    #[serde(default)]
    pub quarantined: Vec<crate::project::quarantine::Quarantined>,
    /// Layers weaker than asked or other caveats, also printed on stderr.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// The keys of [`RunDetails`]: a report holding any of them is a run's,
/// and must read as one.
const RUN_DETAIL_KEYS: [&str; 9] = [
    "command",
    "project",
    "wall_time_ms",
    "resources",
    "broker",
    "connections",
    "limits_hit",
    "quarantined",
    "warnings",
];

/// The flattened [`RunDetails`], strictly: absent when none of its keys
/// is there (a refused run's report), an error when they are there but do
/// not read (serde's own flattened `Option` would quietly make that None).
fn run_details<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<RunDetails>, D::Error> {
    let rest = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
    if !RUN_DETAIL_KEYS.iter().any(|key| rest.contains_key(*key)) {
        return Ok(None);
    }
    RunDetails::deserialize(serde_json::Value::Object(rest))
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// A report another process wrote that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("the run's report is unreadable: {0}")]
pub struct UnreadableReport(#[from] serde_json::Error);

impl Report {
    /// The report of a run refused before a plan existed: it says why, and
    /// claims nothing was enforced.
    pub fn refused(profile: &str, error: &str) -> Report {
        Report {
            version: 1,
            profile: profile.to_string(),
            exit: None,
            error: Some(error.to_string()),
            enforced: None,
            measured: None,
            run: None,
            warm: None,
            commit_to_exec_us: None,
            reported_by: None,
            review: None,
        }
    }

    /// A report as another process wrote it (JSON), checked against the
    /// schema; unknown keys are ignored.
    pub fn read(value: &serde_json::Value) -> Result<Report, UnreadableReport> {
        Ok(Report::deserialize(value)?)
    }

    /// [`Report::read`] from the bytes of a report file.
    pub fn read_slice(bytes: &[u8]) -> Result<Report, UnreadableReport> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// The report as JSON (the form every face writes).
    pub fn to_json(&self) -> serde_json::Value {
        // Every field is a string, number, bool, list or string-keyed map:
        // serialization cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The warnings (none for a refused run).
    pub fn warnings(&self) -> &[String] {
        self.run.as_ref().map_or(&[], |run| &run.warnings)
    }

    /// The limits the run reached (none for a refused run).
    pub fn limits_hit(&self) -> &[crate::spawn::parent::LimitHit] {
        self.run.as_ref().map_or(&[], |run| &run.limits_hit)
    }

    /// What the run used (None for a refused run, or one never started).
    pub fn resources(&self) -> Option<&Resources> {
        self.run.as_ref().and_then(|run| run.resources.as_ref())
    }
}

impl Report {
    /// The report of a run that had a plan: `policy` is the caller's (a
    /// warm run's limits are its commit's), `view` the payload's own,
    /// read just before exec.
    pub fn build(
        policy: &Policy,
        prepared: &Prepared,
        command: Vec<String>,
        outcome: &Result<Outcome, SpawnError>,
        view: Option<&View>,
    ) -> Report {
        let ok = outcome.as_ref().ok();
        let plan = prepared.plan();
        let skipped = ok.map(|o| o.skipped.as_slice()).unwrap_or_default();
        let mut warnings = prepared.warnings();
        let (landlock, shortfall) = LandlockReport::of(plan, ok.and_then(|o| o.landlock));
        warnings.extend(shortfall);
        warnings.extend(skipped_step_warnings(skipped));
        let seccomp = SeccompReport::of(plan, ok.is_some(), seccomp_skipped(skipped).is_some());
        warnings.extend(protected_entry_warnings(
            ok.map(|o| &o.sweep),
            prepared.config.scan.as_ref(),
        ));
        let host = prepared.started.confinement.host.as_ref();
        let measured = view.map(|view| Measured::new(view, host));
        if let Some(measured) = &measured {
            warnings.extend(measurement_warnings(prepared, measured, &seccomp));
        }
        let enforced = Enforced::of(
            policy,
            prepared,
            ok,
            view,
            measured.as_ref(),
            (landlock, seccomp),
        );
        Report {
            version: 1,
            profile: prepared.config.policy.name.clone(),
            exit: ok.map(|o| ExitInfo::of(o.exit)),
            error: outcome.as_ref().err().map(ToString::to_string),
            enforced: Some(enforced),
            measured,
            run: Some(RunDetails::of(command, plan, ok, warnings)),
            warm: None,
            commit_to_exec_us: None,
            reported_by: None,
            review: ok.and_then(|o| o.review.clone()).or_else(|| {
                prepared
                    .config
                    .review
                    .as_ref()
                    .map(|started| crate::review::Kept {
                        id: started.id.clone(),
                        changes: 0,
                        limit_reached: false,
                        error: Some("the run did not finish, so nothing was kept".into()),
                    })
            }),
        }
    }
}

impl Enforced {
    /// What a run that had a plan enforced: `landlock` and `seccomp` as
    /// already reported, the rest from the plan, the outcome (`ok`, None
    /// when the run failed) and the payload's own `view`.
    fn of(
        policy: &Policy,
        prepared: &Prepared,
        ok: Option<&Outcome>,
        view: Option<&View>,
        measured: Option<&Measured>,
        (landlock, seccomp): (LandlockReport, SeccompReport),
    ) -> Enforced {
        let plan = prepared.plan();
        // The payload set itself up up to exec: what it did is real even when
        // exec then failed.
        let reached_payload = view.is_some();
        Enforced {
            isolation: reached_payload
                .then(|| crate::spawn::no_namespaces::Isolation::of(prepared)),
            namespaces: measured.map(Namespaces::of),
            user: view.map(|view| UserReport::of(plan, view)),
            network: reached_payload.then_some(plan.network),
            network_allow: (reached_payload
                && plan.network == crate::profile::policy::NetworkMode::Allowlist)
                .then(|| policy.network.allow.clone()),
            landlock,
            seccomp,
            capabilities: view.and_then(Measured::capability_names),
            no_new_privs: measured.and_then(|m| m.no_new_privs),
            // The payload sets them before it measures; a run that stopped
            // earlier applied none.
            rlimits: plan
                .rlimits
                .iter()
                .chain(&prepared.started.fallback_rlimits)
                .filter(|_| reached_payload)
                .map(|(r, v)| (format!("{r:?}"), *v))
                .collect(),
            tmp_size: reached_payload.then_some(policy.filesystem.tmp_size),
            cgroup: ok
                .and_then(|o| o.cgroup.as_ref())
                .map(|cgroup| CgroupReport::of(cgroup, prepared.config.cgroup_limits())),
            // The caller's policy: a warm run's limits are its commit's.
            timeout_s: policy
                .limits
                .timeout
                .filter(|_| ok.is_some() || reached_payload)
                .map(|t| t.as_secs_f64()),
            project_view: prepared
                .config
                .scan
                .as_ref()
                .filter(|_| reached_payload)
                .map(ProjectView::of),
        }
    }
}

impl LandlockReport {
    /// Landlock as `applied` ((abi, status) as the payload reported it),
    /// with the shortfall to warn of when it applied less than all. What
    /// the run insisted on is the plan's, which a run without namespaces
    /// raises to required (Landlock is its only filesystem boundary).
    fn of(plan: &ChildPlan, applied: Option<(u32, u8)>) -> (LandlockReport, Option<String>) {
        match (plan.landlock, applied) {
            (Enforcement::Off, _) => (
                LandlockReport {
                    requested: Enforcement::Off,
                    abi: None,
                    status: "off".into(),
                    rules: 0,
                },
                None,
            ),
            (requested, Some((abi, status))) => (
                LandlockReport {
                    requested,
                    abi: Some(abi),
                    status: crate::landlock::status_name(status).into(),
                    rules: plan.landlock_rules.len(),
                },
                (status != 2)
                    .then(|| format!("Landlock: {}", crate::landlock::shortfall(abi, status))),
            ),
            (requested, None) => (
                LandlockReport {
                    requested,
                    abi: None,
                    status: "not-applied".into(),
                    rules: 0,
                },
                None,
            ),
        }
    }
}

impl SeccompReport {
    /// Seccomp as planned, and whether the run `started` and the payload
    /// `skipped` installing it (best-effort).
    fn of(plan: &ChildPlan, started: bool, skipped: bool) -> SeccompReport {
        match &plan.seccomp {
            None => SeccompReport {
                requested: plan.seccomp_enforcement,
                mode: None,
                filter_sha256: None,
                instructions: 0,
                status: "off".into(),
            },
            Some(filter) => SeccompReport {
                requested: plan.seccomp_enforcement,
                mode: filter.mode(),
                filter_sha256: Some(filter.sha256().to_string()),
                instructions: filter.instruction_count(),
                status: if !started {
                    "not-started".into()
                } else if skipped {
                    "skipped".into()
                } else if filter.mode().is_none() {
                    "set-id-guard".into()
                } else {
                    "installed".into()
                },
            },
        }
    }
}

impl Namespaces {
    /// Which namespaces the payload measured as its own.
    fn of(measured: &Measured) -> Namespaces {
        let new = |name: &str| match measured.namespaces.get(name) {
            Some(NamespaceState::New) => Some(true),
            Some(NamespaceState::Shared) => Some(false),
            _ => None,
        };
        Namespaces {
            user: new("user"),
            mount: new("mount"),
            pid: new("pid"),
            net: new("net"),
            ipc: new("ipc"),
            uts: new("uts"),
            cgroup: new("cgroup"),
        }
    }
}

impl UserReport {
    /// The identity the payload saw, the plan's where it could not read it.
    fn of(plan: &ChildPlan, view: &View) -> UserReport {
        UserReport {
            inside_uid: view.uid.map_or(plan.ids.inside_uid, |uid| uid as u32),
            host_uid: plan.ids.host_uid,
            inside_gid: view.gid.map_or(plan.ids.inside_gid, |gid| gid as u32),
            host_gid: plan.ids.host_gid,
            idmapped_trees: plan.idmapped.len(),
        }
    }
}

impl CgroupReport {
    /// The cgroup the run used, with the limits set on it.
    fn of(cgroup: &CgroupUse, limits: crate::cgroup::CgroupLimits) -> CgroupReport {
        CgroupReport {
            version: cgroup.version,
            controllers: cgroup.controllers.clone(),
            paths: cgroup.paths.clone(),
            memory: limits.memory,
            pids: limits.pids,
            cpu: limits.cpu,
        }
    }
}

fn walked() -> String {
    "walk".into()
}

impl ProjectView {
    /// What the walk of the project found.
    fn of(scan: &Scan) -> ProjectView {
        ProjectView {
            entries: scan.entries,
            scan_ms: scan.elapsed.as_secs_f64() * 1000.0,
            scan_source: if scan.watcher.is_some() {
                "watcher".into()
            } else {
                walked()
            },
            secrets_hidden: scan.secrets.iter().map(|f| f.path.clone()).collect(),
            protected: scan.protected.iter().map(|f| f.path.clone()).collect(),
            pinned: scan.pins.len(),
            hardlinks_read_only: scan.outside_links.clone(),
        }
    }
}

impl ExitInfo {
    /// How the payload ended, and the status `sandbox run` exits with.
    fn of(exit: PayloadExit) -> ExitInfo {
        ExitInfo {
            code: match exit {
                PayloadExit::Code(code) => Some(code),
                PayloadExit::Signal(_) => None,
            },
            signal: match exit {
                PayloadExit::Signal(signal) => Some(signal),
                PayloadExit::Code(_) => None,
            },
            status: exit.as_status(),
        }
    }
}

impl Resources {
    /// What the run used: CPU time always, the rest from its cgroup.
    fn of(outcome: &Outcome) -> Resources {
        let stats = outcome.cgroup.as_ref().map(|c| &c.stats);
        Resources {
            cpu_user_ms: outcome.cpu_user.as_secs_f64() * 1000.0,
            cpu_system_ms: outcome.cpu_system.as_secs_f64() * 1000.0,
            memory_peak: stats.and_then(|s| s.memory_peak),
            oom_kills: stats.map_or(0, |s| s.oom_kills),
            pids_limit_hits: stats.map_or(0, |s| s.pids_limit_hits),
            pids_peak: stats.and_then(|s| s.pids_peak),
        }
    }
}

impl RunDetails {
    /// The run's record, from its outcome (`ok`, None when it failed).
    fn of(
        command: Vec<String>,
        plan: &ChildPlan,
        ok: Option<&Outcome>,
        warnings: Vec<String>,
    ) -> RunDetails {
        RunDetails {
            command,
            project: plan.project.clone(),
            wall_time_ms: ok.map(|o| o.wall.as_secs_f64() * 1000.0).unwrap_or(0.0),
            resources: ok.map(Resources::of),
            broker: ok.and_then(|o| o.broker.clone()),
            connections: ok.map(|o| o.connections.clone()).unwrap_or_default(),
            limits_hit: ok.map(|o| o.limits_hit.clone()).unwrap_or_default(),
            quarantined: ok.map(|o| o.sweep.quarantined.clone()).unwrap_or_default(),
            warnings,
        }
    }
}

/// The payload's record of seccomp skipped (best-effort), with its errno.
fn seccomp_skipped(skipped: &[(Step, i32)]) -> Option<(Step, i32)> {
    skipped
        .iter()
        .find(|(step, _)| *step == Step::Seccomp)
        .copied()
}

/// The steps the payload skipped that are worth a warning: seccomp (a
/// best-effort layer missing), and the cosmetic ones.
fn skipped_step_warnings(skipped: &[(Step, i32)]) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some((_, errno)) = seccomp_skipped(skipped) {
        warnings.push(format!(
            "seccomp: not installed ({}); the profile marks it best-effort",
            nix::errno::Errno::from_raw(errno).desc()
        ));
    }
    for (step, errno) in skipped {
        if crate::spawn::init::is_cosmetic(*step) {
            warnings.push(format!(
                "{} was skipped ({}); it is cosmetic, the run went on with every layer in place",
                step.describe(),
                nix::errno::Errno::from_raw(*errno).desc()
            ));
        }
    }
    warnings
}

/// What the sweep after the run did to protected entries (`sweep`, None
/// when the run failed), and the hard links the walk (`scan`) made
/// read-only.
fn protected_entry_warnings(sweep: Option<&Sweep>, scan: Option<&Scan>) -> Vec<String> {
    let mut warnings = Vec::new();
    for moved in sweep.map(|s| s.quarantined.as_slice()).unwrap_or_default() {
        warnings.push(format!(
            "the run created the protected entry {}, which the host would act on later; moved it to {}",
            moved.path.display(),
            moved.moved_to.display()
        ));
    }
    for (path, why) in sweep.map(|s| s.failed.as_slice()).unwrap_or_default() {
        warnings.push(format!(
            "could not move the protected entry {} created by the run out of use ({why}): check it before git, your editor or your shell reads it",
            path.display()
        ));
    }
    if let Some(scan) = scan {
        if !scan.outside_links.is_empty() {
            warnings.push(format!(
                "{} file(s) hard-linked outside the project are read-only in this run (e.g. {})",
                scan.outside_links.len(),
                scan.outside_links[0].display()
            ));
        }
    }
    for path in sweep.map(|s| s.restored.as_slice()).unwrap_or_default() {
        warnings.push(format!(
            "the protected entry {} was changed by the run and restored after it (this run had no namespaces, so it could not be read-only during it); the run's version is next to it as NAME.sandbox-quarantine-RUN",
            path.display()
        ));
    }
    warnings
}

/// A measured value that falls short of what the report would otherwise
/// say, or a field that could not be read. (The payload refuses to exec on
/// a contradiction of a required layer; what is left here is best-effort
/// or unmeasured.)
fn measurement_warnings(
    prepared: &Prepared,
    measured: &Measured,
    seccomp: &SeccompReport,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let expected = &prepared.started.confinement;
    for (i, (name, _)) in crate::spawn::measure::NAMESPACES.iter().enumerate() {
        match measured.namespaces.get(*name) {
            Some(NamespaceState::Shared) if expected.new_namespaces[i] => warnings.push(format!(
                "the {name} namespace was asked for but the payload shares the supervisor's"
            )),
            Some(NamespaceState::Unmeasured) | None => warnings.push(format!(
                "the {name} namespace could not be measured from inside (unmeasured)"
            )),
            _ => {}
        }
    }
    if measured.no_new_privs.is_none() {
        warnings.push("no_new_privs could not be measured from inside (unmeasured)".into());
    }
    for (set, bits) in &measured.capabilities {
        if bits.is_none() {
            warnings.push(format!(
                "the {set} capability set could not be measured from inside (unmeasured)"
            ));
        }
    }
    if seccomp.status == "installed" || seccomp.status == "set-id-guard" {
        let wanted = measured.seccomp_filters_inherited.unwrap_or(0) + expected.seccomp_programs;
        match (measured.seccomp_mode, measured.seccomp_filters) {
            (Some(2), Some(filters)) if filters >= wanted => {}
            (None, _) | (_, None) => warnings.push(
                "the seccomp mode or filter count could not be measured from inside (unmeasured)"
                    .into(),
            ),
            (mode, filters) => warnings.push(format!(
                "seccomp: the payload measured mode {} with {} filter(s), {wanted} expected",
                mode.unwrap_or(0),
                filters.unwrap_or(0)
            )),
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's report as `sandbox run --report` wrote it before the report
    /// was typed (keys sorted, as every face writes it).
    const WRITTEN: &str = r#"{
 "broker": {
  "allowed": 0,
  "denied": 0,
  "errors": 0,
  "rate_limited": 0,
  "requests": 0
 },
 "command": [
  "/bin/true"
 ],
 "connections": {},
 "enforced": {
  "capabilities": [],
  "cgroup": {
   "controllers": [
    "memory",
    "pids"
   ],
   "cpu": null,
   "memory": 1073741824,
   "paths": [
    "/sys/fs/cgroup/memory/sandbox-1-0",
    "/sys/fs/cgroup/pids/sandbox-1-0"
   ],
   "pids": 512,
   "version": 1
  },
  "isolation": {
   "namespaces": "all",
   "not_promised": [],
   "protected_entries": "read-only",
   "reason": null,
   "view": "mount-namespace"
  },
  "landlock": {
   "abi": 7,
   "requested": "required",
   "rules": 35,
   "status": "fully-enforced"
  },
  "namespaces": {
   "cgroup": true,
   "ipc": true,
   "mount": true,
   "net": true,
   "pid": true,
   "user": true,
   "uts": true
  },
  "network": "loopback",
  "network_allow": null,
  "no_new_privs": true,
  "project_view": {
   "entries": 1,
   "hardlinks_read_only": [],
   "pinned": 0,
   "protected": [],
   "scan_ms": 0.5,
   "scan_source": "walk",
   "secrets_hidden": []
  },
  "rlimits": {
   "RLIMIT_CORE": 0,
   "RLIMIT_MSGQUEUE": 204800,
   "RLIMIT_NOFILE": 1024
  },
  "seccomp": {
   "filter_sha256": "8a33f5c07f434a65872500a44668e99a0e986708a727d5c54e07e4e4ef84b169",
   "instructions": 1022,
   "mode": "allowlist",
   "requested": "required",
   "status": "installed"
  },
  "timeout_s": 600.0,
  "tmp_size": 134217728,
  "user": {
   "host_gid": 2000000000,
   "host_uid": 2000000000,
   "idmapped_trees": 2,
   "inside_gid": 1000,
   "inside_uid": 1000
  }
 },
 "error": null,
 "exit": {
  "code": 0,
  "signal": null,
  "status": 0
 },
 "limits_hit": [
  "timeout"
 ],
 "measured": {
  "capabilities": {
   "CapAmb": "0000000000000000",
   "CapBnd": "0000000000000000",
   "CapEff": "0000000000000000",
   "CapInh": "0000000000000000",
   "CapPrm": "0000000000000000"
  },
  "gid": 1000,
  "namespaces": {
   "cgroup": "new",
   "ipc": "new",
   "mount": "new",
   "net": "new",
   "pid": "new",
   "user": "new",
   "uts": "new"
  },
  "no_new_privs": true,
  "seccomp_filters": 1,
  "seccomp_filters_inherited": 0,
  "seccomp_mode": 2,
  "uid": 1000
 },
 "profile": "strict",
 "project": "/work/project",
 "quarantined": [],
 "resources": {
  "cpu_system_ms": 0.0,
  "cpu_user_ms": 10.25,
  "memory_peak": 524288,
  "oom_kills": 0,
  "pids_limit_hits": 0,
  "pids_peak": 2
 },
 "version": 1,
 "wall_time_ms": 51.5,
 "warnings": [
  "a warning"
 ]
}"#;

    #[test]
    fn a_runs_report_reads_and_writes_back_the_same_json() {
        let written: serde_json::Value = serde_json::from_str(WRITTEN).unwrap();
        let report = Report::read(&written).unwrap();
        assert_eq!(report.to_json(), written);
        assert_eq!(
            serde_json::to_string_pretty(&report.to_json()).unwrap(),
            serde_json::to_string_pretty(&written).unwrap()
        );
        assert_eq!(
            report.limits_hit(),
            [crate::spawn::parent::LimitHit::Timeout]
        );
        assert_eq!(report.warnings(), ["a warning"]);
        let enforced = report.enforced.as_ref().unwrap();
        assert_eq!(enforced.cgroup.as_ref().unwrap().memory, Some(1 << 30));
        assert_eq!(enforced.timeout_s, Some(600.0));
        assert_eq!(report.resources().unwrap().pids_peak, Some(2));
    }

    #[test]
    fn a_refused_report_keeps_its_short_schema() {
        let refused = Report::refused("strict", "Landlock is required");
        let expected = serde_json::json!({
            "version": 1,
            "profile": "strict",
            "exit": null,
            "error": "Landlock is required",
            "enforced": null,
            "measured": null,
        });
        assert_eq!(refused.to_json(), expected);
        let back = Report::read(&expected).unwrap();
        assert!(back.run.is_none() && back.enforced.is_none());
        assert!(back.warnings().is_empty() && back.limits_hit().is_empty());
    }

    #[test]
    fn a_daemons_labels_are_kept_and_absent_unless_set() {
        let mut labelled: serde_json::Value = serde_json::from_str(WRITTEN).unwrap();
        labelled["reported_by"] = "supervisor".into();
        labelled["warm"] = true.into();
        labelled["commit_to_exec_us"] = 1500.into();
        let report = Report::read(&labelled).unwrap();
        assert_eq!(report.reported_by.as_deref(), Some("supervisor"));
        assert_eq!(
            (report.warm, report.commit_to_exec_us),
            (Some(true), Some(1500))
        );
        assert_eq!(report.to_json(), labelled);
    }

    #[test]
    fn a_report_that_does_not_read_is_an_error_not_a_guess() {
        let written: serde_json::Value = serde_json::from_str(WRITTEN).unwrap();
        let mut bad = Vec::new();
        for (key, value) in [
            ("limits_hit", serde_json::json!(["fire"])),
            ("warnings", serde_json::json!("one")),
            ("wall_time_ms", serde_json::json!("long")),
            ("exit", serde_json::json!({"code": "zero"})),
            ("version", serde_json::json!(-1)),
        ] {
            let mut report = written.clone();
            report[key] = value;
            bad.push(report);
        }
        bad.push(serde_json::json!("fine"));
        bad.push(serde_json::json!({"claim": "fine", "reported_by": "supervisor"}));
        // A refused run's keys with one of a run's: read as a run's, which
        // it is not.
        bad.push(serde_json::json!({
            "version": 1, "profile": "strict", "exit": null, "error": "x",
            "enforced": null, "measured": null, "warnings": ["w"],
        }));
        for report in bad {
            assert!(Report::read(&report).is_err(), "{report}");
        }
        assert!(Report::read_slice(b"{\"version\": 1,").is_err());
    }
}
