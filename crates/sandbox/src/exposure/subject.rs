//! A profile or a report put into one shape for rating.
//!
//! From a profile, a layer is `Enforced` when the profile requires it (the
//! run does not start without it) and `BestEffort` when a host that lacks
//! it runs without it. From a report, it is what the run recorded and the
//! payload measured: `Enforced` or `Missing`, `Unmeasured` when it could
//! not be read.

use std::path::PathBuf;

use crate::profile::policy::{
    BrokerPolicy, Enforcement, NetworkMode, Policy, ProjectAccess, SyscallMode,
};
use crate::spawn::Report;

use super::{Context, ExposureError};

/// How a layer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// In place: required by the profile, or recorded and measured by the run.
    Enforced,
    /// Asked for where the kernel allows: a run may go without it.
    BestEffort,
    /// Not in place.
    Missing,
    /// The run could not say.
    Unmeasured,
}

impl Standing {
    fn of_enforcement(enforcement: Enforcement) -> Standing {
        match enforcement {
            Enforcement::Required => Standing::Enforced,
            Enforcement::BestEffort => Standing::BestEffort,
            Enforcement::Off => Standing::Missing,
        }
    }

    fn of_measured(new: Option<bool>) -> Standing {
        match new {
            Some(true) => Standing::Enforced,
            Some(false) => Standing::Missing,
            None => Standing::Unmeasured,
        }
    }
}

/// What the filesystem view is made of (known from a profile only).
#[derive(Debug, Clone)]
pub struct FilesystemView {
    /// Readable host paths (`read` and `read_if_exists`).
    pub read: Vec<PathBuf>,
    /// Writable host paths.
    pub write: Vec<PathBuf>,
    /// Masked paths.
    pub hide: Vec<PathBuf>,
    /// The project's access.
    pub project: ProjectAccess,
    /// Review mode.
    pub review: bool,
    /// Secret patterns.
    pub secrets: Vec<String>,
    /// Protected patterns.
    pub protect: Vec<String>,
    /// Hard links out of the project writable.
    pub hardlinks_writable: bool,
    /// Toolchains exposed by name.
    pub tools: Vec<String>,
}

/// A limit and how sure it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    /// The value (bytes, tasks, cores or seconds); None: no limit.
    pub value: Option<f64>,
    /// How it is held: a cgroup (`Enforced`), a cgroup where one can be had
    /// and an rlimit otherwise (`BestEffort`), or nothing.
    pub standing: Standing,
}

/// Everything rated, from a profile or a report.
#[derive(Debug, Clone)]
pub struct Subject {
    /// user, mount, pid, net, ipc, uts.
    pub namespaces: [(&'static str, Standing); 6],
    /// Landlock as a whole.
    pub landlock: Standing,
    /// Landlock applied only in part (an older ABI than the rules need).
    pub landlock_partial: bool,
    /// Landlock's ABI, when a run reported it.
    pub landlock_abi: Option<u32>,
    /// Signals and abstract Unix sockets kept to the sandbox (Landlock's
    /// scope, or pid and net/ipc namespaces).
    pub scope: Standing,
    /// The filesystem view (None: a report without its profile).
    pub filesystem: Option<FilesystemView>,
    /// The project's root, when a report names it.
    pub project_root: Option<PathBuf>,
    /// Secrets a run hid (None: not a run, or not walked).
    pub secrets_hidden: Option<usize>,
    /// Protected entries: read-only during the run (`Enforced`), only
    /// restored after it (`BestEffort`).
    pub protected_during: Standing,
    /// The seccomp filter.
    pub seccomp: Standing,
    /// Its mode (None: no filter of the profile's).
    pub seccomp_mode: Option<SyscallMode>,
    /// Calls allowed beyond the built-in allowlist (None: not known).
    pub seccomp_extra: Option<Vec<String>>,
    /// Capabilities left (None: not measured).
    pub capabilities: Option<Vec<String>>,
    /// no_new_privs (None: not measured).
    pub no_new_privs: Option<bool>,
    /// The network (None: not recorded).
    pub network: Option<NetworkMode>,
    /// The allowlist.
    pub network_allow: Vec<String>,
    /// Memory in bytes.
    pub memory: Limit,
    /// Tasks.
    pub pids: Limit,
    /// Cores.
    pub cpu: Limit,
    /// Seconds.
    pub timeout: Limit,
    /// The broker's rules (None: not known).
    pub broker: Option<BrokerPolicy>,
    /// Variables passed from the caller's environment (None: not known).
    pub env_pass: Option<Vec<String>>,
    /// What the reader should know.
    pub notes: Vec<String>,
}

const NAMESPACES: [&str; 6] = ["user", "mount", "pid", "net", "ipc", "uts"];

fn filesystem_of(policy: &Policy) -> FilesystemView {
    let fs = &policy.filesystem;
    FilesystemView {
        read: fs.read.iter().chain(&fs.read_if_exists).cloned().collect(),
        write: fs.write.clone(),
        hide: fs.hide.clone(),
        project: fs.project,
        review: fs.review,
        secrets: fs.secrets.clone(),
        protect: fs.protect.clone(),
        hardlinks_writable: fs.hardlinks == crate::project::HardlinkPolicy::Allow,
        tools: policy.tools.clone(),
    }
}

impl Subject {
    /// What a run under `policy` would enforce.
    pub fn of_policy(policy: &Policy, _context: &Context) -> Subject {
        let userns = Standing::of_enforcement(policy.enforce.userns);
        let namespaces = NAMESPACES.map(|name| {
            let standing = if name == "net" && policy.network.mode == NetworkMode::Host {
                Standing::Missing
            } else {
                userns
            };
            (name, standing)
        });
        let cgroups = match policy.enforce.cgroups {
            Enforcement::Required => Standing::Enforced,
            Enforcement::BestEffort => Standing::BestEffort,
            Enforcement::Off => Standing::Missing,
        };
        let limit = |value: Option<f64>| Limit {
            value,
            standing: if value.is_some() {
                cgroups
            } else {
                Standing::Missing
            },
        };
        let seccomp = Standing::of_enforcement(policy.enforce.seccomp);
        Subject {
            namespaces,
            landlock: Standing::of_enforcement(policy.enforce.landlock),
            landlock_partial: false,
            landlock_abi: None,
            // With every namespace required, signals and abstract sockets
            // stay inside whatever Landlock's ABI; without them Landlock's
            // scope (ABI 6) is what keeps them in, and a run without
            // namespaces requires it.
            scope: userns,
            filesystem: Some(filesystem_of(policy)),
            project_root: None,
            secrets_hidden: None,
            protected_during: userns,
            seccomp,
            seccomp_mode: (seccomp != Standing::Missing).then_some(policy.syscalls.mode),
            seccomp_extra: Some(policy.syscalls.allow.clone()),
            capabilities: Some(Vec::new()),
            no_new_privs: Some(true),
            network: Some(policy.network.mode),
            network_allow: policy.network.allow.clone(),
            memory: limit(policy.limits.memory.map(|v| v as f64)),
            pids: limit(policy.limits.pids.map(|v| v as f64)),
            cpu: limit(policy.limits.cpu),
            timeout: Limit {
                value: policy.limits.timeout.map(|t| t.as_secs_f64()),
                standing: if policy.limits.timeout.is_some() {
                    Standing::Enforced
                } else {
                    Standing::Missing
                },
            },
            broker: Some(policy.broker.clone()),
            env_pass: Some(policy.env.pass.clone()),
            notes: Vec::new(),
        }
    }

    /// What the run of `report` enforced; `policy` (the profile it ran
    /// under) for what a report does not record.
    pub fn of_report(
        report: &Report,
        policy: Option<&Policy>,
        _context: &Context,
    ) -> Result<Subject, ExposureError> {
        let Some(enforced) = &report.enforced else {
            return Err(ExposureError::Refused {
                error: report
                    .error
                    .clone()
                    .unwrap_or_else(|| "no error given".into()),
                profile: report.profile.clone(),
            });
        };
        let mut notes = Vec::new();
        let without_namespaces = enforced
            .isolation
            .as_ref()
            .is_some_and(|i| i.namespaces == "none");
        let namespaces = NAMESPACES.map(|name| {
            let measured = enforced.namespaces.as_ref().and_then(|n| match name {
                "user" => n.user,
                "mount" => n.mount,
                "pid" => n.pid,
                "net" => n.net,
                "ipc" => n.ipc,
                _ => n.uts,
            });
            let standing = match measured {
                // A run without namespaces shares the host's, whatever was
                // (or was not) measured.
                _ if without_namespaces => Standing::Missing,
                new => Standing::of_measured(new),
            };
            (name, standing)
        });
        if let Some(isolation) = &enforced.isolation {
            if without_namespaces {
                notes.push(format!(
                    "the run had no namespaces ({}): a Landlock-only view of host paths",
                    isolation.reason.as_deref().unwrap_or("reason not recorded")
                ));
            }
        }
        let landlock_report = &enforced.landlock;
        let landlock = match landlock_report.status.as_str() {
            "fully-enforced" => Standing::Enforced,
            "partially-enforced" => Standing::BestEffort,
            _ => Standing::Missing,
        };
        let namespaced = |name: &str| {
            namespaces
                .iter()
                .any(|(n, s)| *n == name && *s == Standing::Enforced)
        };
        let scope = if landlock == Standing::Enforced && landlock_report.abi.unwrap_or(0) >= 6
            || namespaced("pid") && namespaced("net") && namespaced("ipc")
        {
            Standing::Enforced
        } else {
            Standing::Missing
        };
        let seccomp_report = &enforced.seccomp;
        let measured_filter = report.measured.as_ref().and_then(|m| m.seccomp_mode);
        let seccomp = match (seccomp_report.status.as_str(), measured_filter) {
            (_, Some(0)) => Standing::Missing,
            ("installed", Some(2)) => Standing::Enforced,
            ("installed", _) => Standing::Unmeasured,
            _ => Standing::Missing,
        };
        let seccomp_mode = if seccomp == Standing::Missing {
            None
        } else {
            seccomp_report.mode
        };
        if seccomp_report.status == "set-id-guard" {
            notes.push(
                "seccomp: only the set-id guard was installed (the profile's filter is off)".into(),
            );
        }
        let cgroup = enforced.cgroup.as_ref();
        let rlimit = |names: &[&str]| {
            names
                .iter()
                .find_map(|name| enforced.rlimits.get(*name))
                .map(|v| *v as f64)
        };
        let limit = |from_cgroup: Option<f64>, fallback: Option<f64>| match (from_cgroup, fallback)
        {
            (Some(value), _) => Limit {
                value: Some(value),
                standing: Standing::Enforced,
            },
            (None, Some(value)) => Limit {
                value: Some(value),
                standing: Standing::BestEffort,
            },
            (None, None) => Limit {
                value: None,
                standing: Standing::Missing,
            },
        };
        if cgroup.is_none() {
            notes.push(
                "the run had no cgroup: memory and tasks were held by rlimits at most".into(),
            );
        }
        let memory = limit(
            cgroup.and_then(|c| c.memory).map(|v| v as f64),
            rlimit(&["RLIMIT_AS", "RLIMIT_DATA"]),
        );
        let pids = limit(
            cgroup.and_then(|c| c.pids).map(|v| v as f64),
            rlimit(&["RLIMIT_NPROC"]),
        );
        let cpu = limit(cgroup.and_then(|c| c.cpu), None);
        let project_view = enforced.project_view.as_ref();
        let protected_during = match enforced.isolation.as_ref() {
            Some(isolation) if isolation.protected_entries == "read-only" => Standing::Enforced,
            // restored-after-the-run: writable during it.
            Some(_) => Standing::Missing,
            None => Standing::Unmeasured,
        };
        let filesystem = policy.map(filesystem_of);
        if let Some(policy) = policy.filter(|p| p.name != report.profile) {
            notes.push(format!(
                "the report names profile {}, and was rated with {}'s paths and rules as given",
                report.profile, policy.name
            ));
        }
        match policy {
            Some(policy) => notes.push(format!(
                "paths, secret patterns, broker rules and passed variables are profile {}'s: a report does not record them, nor flags of `sandbox run` that widened them",
                policy.name
            )),
            None => notes.push(format!(
                "no profile was given and the report's profile {} is not a built-in: paths, secret patterns and broker rules are rated as unknown; name the profile to rate them: sandbox explain --report FILE PROFILE",
                report.profile
            )),
        }
        Ok(Subject {
            namespaces,
            landlock,
            landlock_partial: landlock_report.status == "partially-enforced",
            landlock_abi: landlock_report.abi,
            scope,
            filesystem,
            project_root: report.run.as_ref().map(|run| run.project.clone()),
            secrets_hidden: project_view.map(|v| v.secrets_hidden.len()),
            protected_during,
            seccomp,
            seccomp_mode,
            seccomp_extra: policy.map(|p| p.syscalls.allow.clone()),
            capabilities: enforced.capabilities.clone(),
            no_new_privs: enforced.no_new_privs,
            network: enforced.network,
            network_allow: enforced.network_allow.clone().unwrap_or_default(),
            memory,
            pids,
            cpu,
            timeout: Limit {
                value: enforced.timeout_s,
                standing: if enforced.timeout_s.is_some() {
                    Standing::Enforced
                } else {
                    Standing::Missing
                },
            },
            broker: policy.map(|p| p.broker.clone()),
            env_pass: policy.map(|p| p.env.pass.clone()),
            notes,
        })
    }
}
