//! The fixed list of settings rated, their weights, and the exposure of
//! each value.
//!
//! The weights say what an escape through the setting costs the host:
//! writing the home directory or the system (code the person runs later,
//! keys) counts most, then the network (everything readable can leave),
//! then reading host files, the layers that keep the kernel's attack
//! surface small (namespaces, Landlock, seccomp, capabilities), and last
//! the limits, which protect the machine's availability only.

use std::path::{Path, PathBuf};

use crate::profile::policy::{Decision, NetworkMode, ProjectAccess, SyscallMode};

use super::paths::{combined, is_baseline_read, path_list, read_exposure, write_exposure};
use super::subject::{FilesystemView, Limit, Standing, Subject};
use super::{Context, Finding};

/// Exposure of a layer that stands so.
fn standing_exposure(standing: Standing) -> f64 {
    match standing {
        Standing::Enforced => 0.0,
        Standing::BestEffort => 0.3,
        Standing::Unmeasured => 0.5,
        Standing::Missing => 1.0,
    }
}

fn standing_name(standing: Standing) -> &'static str {
    match standing {
        Standing::Enforced => "enforced",
        Standing::BestEffort => "best-effort",
        Standing::Unmeasured => "unmeasured",
        Standing::Missing => "missing",
    }
}

fn finding(
    layer: &'static str,
    setting: &'static str,
    weight: f64,
    exposure: f64,
    value: impl Into<String>,
    reason: impl Into<String>,
) -> Finding {
    Finding {
        layer,
        setting,
        value: value.into(),
        reason: reason.into(),
        weight,
        exposure: (exposure.clamp(0.0, 1.0) * 100.0).round() / 100.0,
    }
}

/// Every setting, in the order printed.
pub(super) fn findings(subject: &Subject, context: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    namespaces(subject, &mut out);
    landlock(subject, &mut out);
    filesystem(subject, context, &mut out);
    seccomp(subject, &mut out);
    privileges(subject, &mut out);
    network(subject, &mut out);
    limits(subject, &mut out);
    broker(subject, context, &mut out);
    environment(subject, &mut out);
    out
}

fn namespaces(subject: &Subject, out: &mut Vec<Finding>) {
    for (name, standing) in subject.namespaces {
        let (weight, what) = match name {
            "user" => (2.0, "ids and capabilities of the host"),
            "mount" => (
                3.0,
                "the host's mount table: every path not hidden by Landlock alone",
            ),
            "pid" => (
                2.0,
                "the host's processes visible (and signalled without Landlock's scope)",
            ),
            "net" => (1.0, "the host's network interfaces"),
            "ipc" => (1.0, "the host's System V IPC and message queues"),
            _ => (0.5, "the host's hostname"),
        };
        let reason = match standing {
            Standing::Enforced => "a namespace of the sandbox's own".to_string(),
            Standing::BestEffort => format!("new where the kernel allows; without it, {what}"),
            Standing::Unmeasured => "could not be measured from inside".to_string(),
            Standing::Missing => format!("shared: {what}"),
        };
        let value = match standing {
            Standing::Enforced => "new",
            Standing::BestEffort => "new if possible",
            Standing::Unmeasured => "unmeasured",
            Standing::Missing => "host's",
        };
        out.push(finding(
            "namespaces",
            name,
            weight,
            standing_exposure(standing),
            value,
            reason,
        ));
    }
}

fn landlock(subject: &Subject, out: &mut Vec<Finding>) {
    let (exposure, reason) = match subject.landlock {
        Standing::Enforced => (0.0, "every path rule applied".to_string()),
        Standing::BestEffort if subject.landlock_partial => (
            0.4,
            format!(
                "applied in part (ABI {}): some rights are not checked",
                subject.landlock_abi.unwrap_or(0)
            ),
        ),
        Standing::BestEffort => (
            0.4,
            "skipped on a kernel without it: the mount view alone bounds files".to_string(),
        ),
        Standing::Unmeasured => (0.5, "not recorded".to_string()),
        Standing::Missing => (
            1.0,
            "no path rules: the mount view alone bounds files".to_string(),
        ),
    };
    let value = match (subject.landlock, subject.landlock_abi) {
        (Standing::Missing, _) => "off".to_string(),
        (standing, Some(abi)) => format!("{} (ABI {abi})", standing_name(standing)),
        (Standing::Enforced, None) => "required".to_string(),
        (standing, None) => standing_name(standing).to_string(),
    };
    out.push(finding("landlock", "rules", 4.0, exposure, value, reason));
    let (exposure, value, reason) = match subject.scope {
        Standing::Enforced => (0.0, "scoped", "signals and abstract sockets stay inside"),
        Standing::BestEffort => (
            0.2,
            "if namespaced",
            "kept inside by namespaces where they can be made, by Landlock ABI 6 otherwise",
        ),
        Standing::Unmeasured => (0.5, "unmeasured", "not recorded"),
        Standing::Missing => (
            1.0,
            "unscoped",
            "host processes can be signalled and abstract sockets reached",
        ),
    };
    out.push(finding("landlock", "scope", 1.0, exposure, value, reason));
}

/// Secret patterns whose absence leaves a common key or token readable.
const KEY_SECRETS: &[&str] = &[
    ".env",
    ".ssh/",
    ".aws/",
    "*.pem",
    "*.key",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
];

/// Protected patterns whose absence lets a run plant what the host runs later.
const KEY_PROTECTED: &[&str] = &[
    ".git/**/hooks",
    ".git/**/config",
    ".gitmodules",
    ".vscode/",
    ".envrc",
    ".bashrc",
    ".mcp.json",
    ".claude/",
];

fn filesystem(subject: &Subject, context: &Context, out: &mut Vec<Finding>) {
    let homes = &context.homes;
    let Some(fs) = &subject.filesystem else {
        let unknown = "not recorded in the report; name its profile";
        for (setting, weight) in [("write", 10.0), ("read", 5.0)] {
            out.push(finding(
                "filesystem",
                setting,
                weight,
                0.5,
                "unknown",
                unknown,
            ));
        }
        project(subject, None, homes, out);
        out.push(finding(
            "filesystem",
            "secrets",
            3.0,
            0.5,
            "unknown",
            unknown,
        ));
        protected(subject, None, out);
        return;
    };
    let write: Vec<(f64, &'static str, &Path)> = fs
        .write
        .iter()
        .map(|p| {
            let (e, why) = write_exposure(p, homes);
            (e, why, p.as_path())
        })
        .collect();
    let (exposure, why) = combined(write, 0.05);
    let hardlinks = if fs.hardlinks_writable { 0.3 } else { 0.0 };
    out.push(finding(
        "filesystem",
        "write",
        10.0,
        exposure.max(hardlinks),
        path_list(&fs.write, 3),
        if fs.write.is_empty() && hardlinks == 0.0 {
            "nothing outside the project and a private /tmp".to_string()
        } else if fs.write.is_empty() {
            "hard links out of the project stay writable".to_string()
        } else {
            why
        },
    ));
    let readable: Vec<PathBuf> = fs.read.iter().chain(&fs.write).cloned().collect();
    let rated: Vec<(f64, &'static str, &Path)> = readable
        .iter()
        .map(|p| {
            let (e, why) = read_exposure(p, &fs.hide, homes);
            (e, why, p.as_path())
        })
        .collect();
    let (mut exposure, mut why) = combined(rated, 0.02);
    if !fs.tools.is_empty() {
        exposure += 0.02 * fs.tools.len() as f64;
        if why.is_empty() {
            why = format!("toolchains exposed: {}", fs.tools.join(", "));
        }
    }
    let beyond: Vec<PathBuf> = readable
        .iter()
        .filter(|p| !is_baseline_read(p))
        .cloned()
        .collect();
    out.push(finding(
        "filesystem",
        "read",
        5.0,
        exposure,
        if beyond.is_empty() {
            "system files only".to_string()
        } else {
            path_list(&beyond, 3)
        },
        if exposure == 0.0 {
            "the system's programs and libraries, read-only".to_string()
        } else {
            why
        },
    ));
    project(subject, Some(fs), homes, out);
    let secrets_exposure = if fs.project == ProjectAccess::Empty {
        0.0
    } else {
        let missing: Vec<&str> = KEY_SECRETS
            .iter()
            .copied()
            .filter(|p| !fs.secrets.iter().any(|s| s == p))
            .collect();
        missing.len() as f64 / KEY_SECRETS.len() as f64
    };
    let value = match subject.secrets_hidden {
        Some(hidden) => format!("{} patterns, {hidden} hidden", fs.secrets.len()),
        None => format!("{} patterns", fs.secrets.len()),
    };
    out.push(finding(
        "filesystem",
        "secrets",
        3.0,
        secrets_exposure,
        value,
        if fs.project == ProjectAccess::Empty {
            "the project is not visible".to_string()
        } else if secrets_exposure == 0.0 {
            "keys and tokens in the project are masked".to_string()
        } else {
            "some common keys or tokens in the project stay readable".to_string()
        },
    ));
    protected(subject, Some(fs), out);
}

fn project(
    subject: &Subject,
    fs: Option<&FilesystemView>,
    homes: &[PathBuf],
    out: &mut Vec<Finding>,
) {
    let broad = subject.project_root.as_deref().and_then(|root| {
        crate::project::home::too_broad(root, homes)
            .map(|why| format!("{} ({why})", root.display()))
    });
    let (exposure, value, reason) = match (fs, broad) {
        (Some(fs), Some(broad)) if fs.project != ProjectAccess::Empty => (
            1.0,
            broad,
            "the project root is a home or the root directory".to_string(),
        ),
        (None, _) => (
            0.5,
            "unknown".to_string(),
            "not recorded in the report".to_string(),
        ),
        (Some(fs), _) => match (fs.project, fs.review) {
            (ProjectAccess::ReadWrite, true) => (
                0.1,
                "review".to_string(),
                "changes are kept aside until a person applies them".to_string(),
            ),
            (ProjectAccess::ReadWrite, false) => (
                0.3,
                "read-write".to_string(),
                "the run changes the project in place".to_string(),
            ),
            (ProjectAccess::ReadOnly, _) => (
                0.1,
                "read-only".to_string(),
                "readable, not writable".to_string(),
            ),
            (ProjectAccess::Empty, _) => (
                0.0,
                "empty".to_string(),
                "not visible; files go through the broker".to_string(),
            ),
        },
    };
    out.push(finding(
        "filesystem",
        "project",
        2.0,
        exposure,
        value,
        reason,
    ));
}

fn protected(subject: &Subject, fs: Option<&FilesystemView>, out: &mut Vec<Finding>) {
    let Some(fs) = fs else {
        out.push(finding(
            "filesystem",
            "protected",
            2.0,
            0.5,
            "unknown",
            "not recorded in the report",
        ));
        return;
    };
    if fs.project != ProjectAccess::ReadWrite || fs.review {
        out.push(finding(
            "filesystem",
            "protected",
            2.0,
            0.0,
            format!("{} patterns", fs.protect.len()),
            "the project is not written in place",
        ));
        return;
    }
    let missing = KEY_PROTECTED
        .iter()
        .filter(|p| !fs.protect.iter().any(|s| s == *p))
        .count() as f64
        / KEY_PROTECTED.len() as f64;
    let (during, reason) = match subject.protected_during {
        Standing::Enforced => (
            0.0,
            "git hooks and config, editor and agent settings are read-only",
        ),
        Standing::BestEffort => (
            0.4,
            "read-only with namespaces; without them only restored after the run",
        ),
        Standing::Unmeasured => (0.5, "not recorded"),
        Standing::Missing => (0.6, "restored after the run, not read-only during it"),
    };
    let exposure = missing.max(during);
    out.push(finding(
        "filesystem",
        "protected",
        2.0,
        exposure,
        format!("{} patterns", fs.protect.len()),
        if missing > during {
            "some entries the host runs later (git hooks, editor settings) are writable"
        } else {
            reason
        },
    ));
}

fn seccomp(subject: &Subject, out: &mut Vec<Finding>) {
    let (exposure, reason) = match subject.seccomp {
        Standing::Enforced => (0.0, "installed before exec"),
        Standing::BestEffort => (0.3, "skipped where the kernel lacks it"),
        Standing::Unmeasured => (0.5, "installed, but its mode could not be measured inside"),
        Standing::Missing => (1.0, "no filter: every system call reaches the kernel"),
    };
    out.push(finding(
        "seccomp",
        "filter",
        4.0,
        exposure,
        standing_name(subject.seccomp),
        reason,
    ));
    let extra = subject.seccomp_extra.clone().unwrap_or_default();
    let (exposure, value, reason) = match subject.seccomp_mode {
        None => (
            1.0,
            "any".to_string(),
            "every system call is allowed".to_string(),
        ),
        Some(SyscallMode::Denylist) => (
            0.5,
            "denylist".to_string(),
            format!(
                "every call but {} refused ones (mount, bpf, ptrace, io_uring, ...)",
                crate::seccomp::DENIED.len()
            ),
        ),
        Some(SyscallMode::Allowlist) if extra.is_empty() => (
            0.0,
            "allowlist".to_string(),
            "only the built-in list of ordinary calls".to_string(),
        ),
        Some(SyscallMode::Allowlist) => (
            (0.1 * extra.len() as f64).min(0.6),
            format!("allowlist + {}", extra.join(", ")),
            "calls added to the built-in list".to_string(),
        ),
    };
    out.push(finding("seccomp", "allowed", 2.0, exposure, value, reason));
}

fn privileges(subject: &Subject, out: &mut Vec<Finding>) {
    let (exposure, value, reason) = match &subject.capabilities {
        Some(caps) if caps.is_empty() => (0.0, "none".to_string(), "every capability dropped"),
        Some(caps) => (
            if caps.iter().any(|c| c == "cap_sys_admin") {
                1.0
            } else {
                0.7
            },
            caps.join(", "),
            "capabilities left in the payload's sets",
        ),
        None => (0.5, "unmeasured".to_string(), "could not be read inside"),
    };
    out.push(finding(
        "privileges",
        "capabilities",
        4.0,
        exposure,
        value,
        reason,
    ));
    let (exposure, value, reason) = match subject.no_new_privs {
        Some(true) => (0.0, "set", "set-id programs gain nothing"),
        Some(false) => (1.0, "not set", "a set-id program can gain privileges"),
        None => (0.5, "unmeasured", "could not be read inside"),
    };
    out.push(finding(
        "privileges",
        "no_new_privs",
        2.0,
        exposure,
        value,
        reason,
    ));
}

fn network(subject: &Subject, out: &mut Vec<Finding>) {
    let allow = &subject.network_allow;
    let (exposure, value, reason) = match subject.network {
        Some(NetworkMode::None) => (0.0, "none".to_string(), "no network at all".to_string()),
        Some(NetworkMode::Loopback) => (
            0.05,
            "loopback".to_string(),
            "its own loopback only; nothing leaves".to_string(),
        ),
        Some(NetworkMode::Allowlist) => {
            let wide = allow.iter().any(|a| a.contains('*') || a.contains('/'));
            (
                (0.25 + 0.03 * allow.len() as f64 + if wide { 0.1 } else { 0.0 }).min(0.7),
                if allow.is_empty() {
                    "allowlist (none listed)".to_string()
                } else {
                    format!("allowlist: {}", allow.join(", "))
                },
                "data can leave to the hosts listed and those a person allows".to_string(),
            )
        }
        Some(NetworkMode::Host) => (
            1.0,
            "host".to_string(),
            "the host's network: anything readable can leave, local services are reachable"
                .to_string(),
        ),
        None => (0.5, "unknown".to_string(), "not recorded".to_string()),
    };
    out.push(finding("network", "mode", 8.0, exposure, value, reason));
}

fn limit_finding(
    setting: &'static str,
    weight: f64,
    limit: Limit,
    show: impl Fn(f64) -> String,
    size: impl Fn(f64) -> f64,
    unlimited: &str,
) -> Finding {
    let Some(value) = limit.value else {
        return finding("limits", setting, weight, 1.0, "unlimited", unlimited);
    };
    let (exposure, reason): (f64, &str) = match limit.standing {
        Standing::BestEffort => (
            0.3,
            "a cgroup where one can be had, an rlimit (per process) otherwise",
        ),
        Standing::Missing | Standing::Unmeasured => (1.0, "not applied"),
        Standing::Enforced => (0.0, "held by the kernel"),
    };
    finding(
        "limits",
        setting,
        weight,
        exposure.max(size(value)),
        show(value),
        reason,
    )
}

fn limits(subject: &Subject, out: &mut Vec<Finding>) {
    let gib = (1u64 << 30) as f64;
    out.push(limit_finding(
        "memory",
        1.0,
        subject.memory,
        |v| crate::profile::size::format_size(v as u64),
        |v| {
            if v <= gib {
                0.0
            } else if v <= 4.0 * gib {
                0.2
            } else if v <= 16.0 * gib {
                0.5
            } else {
                0.8
            }
        },
        "the run can take the host's memory",
    ));
    out.push(limit_finding(
        "pids",
        1.0,
        subject.pids,
        |v| format!("{v}"),
        |v| {
            if v <= 512.0 {
                0.0
            } else if v <= 2048.0 {
                0.2
            } else {
                0.5
            }
        },
        "a fork bomb can fill the host's process table",
    ));
    out.push(limit_finding(
        "cpu",
        0.5,
        subject.cpu,
        |v| format!("{v} cores"),
        |v| if v <= 1.0 { 0.0 } else { 0.2 },
        "the run can use every core",
    ));
    out.push(limit_finding(
        "timeout",
        0.5,
        subject.timeout,
        // A report's number may be anything JSON holds (negative, 1e300):
        // shown as given rather than turned into a Duration that panics.
        |v| match std::time::Duration::try_from_secs_f64(v) {
            Ok(duration) => crate::profile::size::format_duration(duration),
            Err(_) => format!("{v}s"),
        },
        |v| if v <= 3600.0 { 0.0 } else { 0.2 },
        "the run can go on forever",
    ));
}

/// Broker actions that change things or reach out, and how much allowing
/// them without asking opens.
const RISKY_ACTIONS: &[(&str, f64)] = &[
    ("terminal.run", 0.5),
    ("secrets.get", 0.5),
    ("net.http", 0.4),
    ("fs.write", 0.3),
    ("fs.delete", 0.3),
    ("fs.mkdir", 0.1),
];

fn broker(subject: &Subject, context: &Context, out: &mut Vec<Finding>) {
    let Some(broker) = &subject.broker else {
        out.push(finding(
            "broker",
            "default",
            2.0,
            0.5,
            "unknown",
            "not recorded in the report",
        ));
        out.push(finding(
            "broker",
            "grants",
            2.0,
            0.5,
            "unknown",
            "not recorded in the report",
        ));
        return;
    };
    let (exposure, value, reason) = match broker.default {
        Decision::Deny => (0.0, "deny", "an action no rule names is refused"),
        Decision::Ask => (0.3, "ask", "an action no rule names goes to a person"),
        Decision::Allow => (1.0, "allow", "an action no rule names is performed"),
    };
    out.push(finding("broker", "default", 2.0, exposure, value, reason));
    let allowed: Vec<(&str, f64)> = RISKY_ACTIONS
        .iter()
        .copied()
        .filter(|(action, _)| broker.rules.get(*action) == Some(&Decision::Allow))
        .collect();
    let stored = context.stored_grants.len();
    let exposure = allowed.iter().map(|(_, e)| e).sum::<f64>() + 0.1 * stored as f64;
    let mut value: Vec<String> = allowed.iter().map(|(a, _)| (*a).to_string()).collect();
    if stored > 0 {
        value.push(format!("{stored} stored"));
    }
    out.push(finding(
        "broker",
        "grants",
        2.0,
        exposure,
        if value.is_empty() {
            "none".to_string()
        } else {
            value.join(", ")
        },
        if value.is_empty() {
            "changes and outside actions are asked for or refused"
        } else {
            "allowed without asking"
        },
    ));
}

/// Variable names that usually carry a credential.
const CREDENTIAL_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
];

fn environment(subject: &Subject, out: &mut Vec<Finding>) {
    let Some(pass) = &subject.env_pass else {
        out.push(finding(
            "environment",
            "pass",
            1.0,
            0.5,
            "unknown",
            "not recorded in the report",
        ));
        return;
    };
    let credentials: Vec<&String> = pass
        .iter()
        .filter(|name| {
            let upper = name.to_uppercase();
            CREDENTIAL_WORDS.iter().any(|w| upper.contains(w))
        })
        .collect();
    out.push(finding(
        "environment",
        "pass",
        1.0,
        0.5 * credentials.len() as f64,
        if credentials.is_empty() {
            format!("{} variables", pass.len())
        } else {
            credentials
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        },
        if credentials.is_empty() {
            "no credential-like variable is passed"
        } else {
            "credentials from your environment are passed in (use --secret, which the broker guards)"
        },
    ));
}
