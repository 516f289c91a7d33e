//! `sandbox doctor`: what this host supports, and whether each built-in
//! profile can run here.
//!
//! The verdict is not a guess from the probes: each profile is started on
//! the real spawn path with a dry run ([`ChildPlan::dry_run`](crate::spawn::prepare::ChildPlan::dry_run)): every
//! namespace, mount, id map, cgroup, Landlock rule and the seccomp filter is
//! set up as for `sandbox run`, and the payload exits instead of executing.
//! A profile "can run" only when that succeeded; otherwise doctor prints the
//! very message `run` would print, and each layer line is what that run
//! applied and what it measured of itself just before it would have
//! executed the command (the run report's `enforced` and `measured`), so
//! doctor and `run` cannot disagree. The probes stay as the explanation.
use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::Context as _;
use clap::Args;
use sandbox::cgroup::{CgroupMode, CONTROLLERS};
use sandbox::command::Command;
use sandbox::environment::Environment;
use sandbox::probe::{self, Availability, Probes};
use sandbox::profile::policy::Policy;
use sandbox::spawn::measure::Measured;
use sandbox::spawn::report::Enforced;
use sandbox::spawn::Stdio;
use serde::Serialize;

/// The profile `sandbox run` uses without `--profile`: doctor exits 1 when
/// it cannot run.
const DEFAULT_PROFILE: &str = "strict";

/// Version of the `--json` document; raised only when a field changes
/// meaning or disappears (new fields may be added without it).
const JSON_VERSION: u32 = 1;

/// Arguments of `sandbox doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` document (documented in docs/src/doctor.md).
#[derive(Debug, Serialize)]
struct Report<'a> {
    version: u32,
    default_profile: &'static str,
    default_profile_can_run: bool,
    environment: &'a Environment,
    probes: &'a Probes,
    programs: &'a [Program],
    profiles: &'a [Verdict],
}

/// One of the installation's other programs, as `sandbox` looks for it
/// (`sandbox::installed`): beside itself, then in its prefix's
/// libexec/sandbox.
#[derive(Debug, Serialize)]
struct Program {
    name: &'static str,
    /// What needs it.
    used_for: &'static str,
    /// Where it was found; None when it is missing.
    path: Option<std::path::PathBuf>,
    /// Why it was not found: where it was looked for, and the fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    missing: Option<String>,
}

/// The programs `sandbox` executes: a run's net process and the faces.
fn programs() -> Vec<Program> {
    use crate::faces::Face;
    [
        (
            sandbox::net::process::PROGRAM,
            "a run with an allowlist, and net.http",
        ),
        (
            Face::Daemon.program(),
            "sandbox daemon, ps, logs, cancel, approvals, run --daemon",
        ),
        (Face::Mcp.program(), "sandbox serve --mcp"),
        (Face::Oci.program(), "sandbox oci, sandbox-runc"),
    ]
    .into_iter()
    .map(|(name, used_for)| match sandbox::installed::find(name) {
        Ok(path) => Program {
            name,
            used_for,
            path: Some(path),
            missing: None,
        },
        Err(err) => Program {
            name,
            used_for,
            path: None,
            missing: Some(err.to_string()),
        },
    })
    .collect()
}

/// What doctor found for one profile.
#[derive(Debug, Serialize)]
struct Verdict {
    profile: String,
    /// The dry run on the real spawn path succeeded.
    can_run: bool,
    /// What `sandbox run` would print (after `sandbox: `) and exit with.
    refusal: Option<String>,
    exit_status: i32,
    /// The warnings `run` would print (a cgroup fallback, ...).
    warnings: Vec<String>,
    /// What the dry run applied, in the run report's form (`null` when it
    /// was refused before anything was applied).
    enforced: Option<Enforced>,
    /// The dry run's own view of itself just before it would have
    /// executed the command.
    measured: Option<Measured>,
}

/// Probe, dry-run every built-in profile, print. Exits 1 when the default
/// profile cannot run here, 0 otherwise (other profiles' refusals are
/// findings).
pub fn run(args: DoctorArgs) -> anyhow::Result<i32> {
    // Probe first, while the process is still single-threaded (the user
    // namespace probe forks).
    let probes = probe::probe();
    let environment = Environment::detect();
    let programs = programs();
    let verdicts: Vec<Verdict> = builtin_policies()?
        .into_iter()
        .map(|(_, policy)| verdict(policy))
        .collect::<anyhow::Result<_>>()?;
    let default_can_run = verdicts
        .iter()
        .any(|v| v.profile == DEFAULT_PROFILE && v.can_run);
    let out = if args.json {
        let report = Report {
            version: JSON_VERSION,
            default_profile: DEFAULT_PROFILE,
            default_profile_can_run: default_can_run,
            environment: &environment,
            probes: &probes,
            programs: &programs,
            profiles: &verdicts,
        };
        let mut json = serde_json::to_string_pretty(&report).context("serializing the report")?;
        json.push('\n');
        json
    } else {
        render_text(&probes, &environment, &programs, &verdicts)
    };
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing to stdout")?;
    Ok(if default_can_run { 0 } else { 1 })
}

/// Start `policy` with a dry run exactly as `sandbox run` starts it (the
/// same [`Command`]), on a fresh empty project, as the user running doctor:
/// the verdict and every layer shown come from what that run did.
fn verdict(policy: Policy) -> anyhow::Result<Verdict> {
    let project = EmptyProject::create()?;
    let name = policy.name.clone();
    let mut command = Command::new("true", policy);
    command
        .project(&project.0)
        // As `run` has them, so that the warnings are the ones it prints;
        // the dry run never executes anything that could write.
        .stdin(Stdio::Null)
        .dry_run(true);
    let finished = command.run();
    let (warnings, enforced, measured) = match finished.report {
        Some(report) => (report.warnings().to_vec(), report.enforced, report.measured),
        None => (Vec::new(), None, None),
    };
    let (can_run, refusal, exit_status) = match finished.result {
        Ok(status) if status.success() => (true, None, 0),
        Ok(status) => (
            false,
            Some(format!("the dry run ended with {status:?}")),
            125,
        ),
        Err(err) => (false, Some(err.to_string()), err.exit_status()),
    };
    Ok(Verdict {
        profile: name,
        can_run,
        refusal,
        exit_status,
        warnings,
        enforced: if can_run { enforced } else { None },
        measured,
    })
}

/// One line per layer, from what a dry run applied and measured.
fn layer_lines(enforced: &Enforced, measured: Option<&Measured>) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    let namespaces = match (&enforced.isolation, measured) {
        (Some(isolation), _) if isolation.namespaces == "none" => format!(
            "none: {} view{}",
            isolation.view,
            isolation
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        (_, Some(measured)) => {
            let new: Vec<&str> = measured
                .namespaces
                .iter()
                .filter(|(_, state)| matches!(state, sandbox::spawn::measure::NamespaceState::New))
                .map(|(name, _)| name.as_str())
                .collect();
            format!("new (measured inside): {}", new.join(", "))
        }
        (Some(isolation), None) => isolation.namespaces.to_owned(),
        (None, None) => "not set up".to_owned(),
    };
    lines.push(("namespaces", namespaces));
    let landlock = &enforced.landlock;
    lines.push((
        "landlock",
        format!(
            "{} {}{}, {} rules",
            landlock.requested.name(),
            landlock.status,
            landlock
                .abi
                .map(|abi| format!(" (ABI {abi})"))
                .unwrap_or_default(),
            landlock.rules
        ),
    ));
    let seccomp = &enforced.seccomp;
    let filters = measured
        .and_then(|m| m.seccomp_filters.zip(m.seccomp_filters_inherited))
        .map(|(all, inherited)| format!(", {} filter(s) of its own", all.saturating_sub(inherited)))
        .unwrap_or_default();
    lines.push((
        "seccomp",
        format!(
            "{} {}{}{filters}",
            seccomp.requested.name(),
            seccomp.status,
            seccomp
                .mode
                .map(|mode| format!(" ({mode:?})").to_lowercase())
                .unwrap_or_default()
        ),
    ));
    let cgroups = match &enforced.cgroup {
        Some(cgroup) => format!("v{}: {}", cgroup.version, cgroup.controllers.join(", ")),
        None if enforced.rlimits.is_empty() => "none".to_owned(),
        None => format!(
            "none; rlimits instead: {}",
            enforced
                .rlimits
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    lines.push(("cgroups", cgroups));
    if let Some(measured) = measured {
        let caps_empty = measured.capabilities.values().all(|set| {
            set.as_deref()
                .is_some_and(|hex| hex.trim_start_matches('0').is_empty())
        });
        lines.push((
            "privileges",
            format!(
                "no_new_privs {}, capabilities {} (measured inside)",
                if measured.no_new_privs == Some(true) {
                    "set"
                } else {
                    "NOT set"
                },
                if caps_empty { "none" } else { "some left" }
            ),
        ));
    }
    lines
}

/// An empty private directory, removed on drop.
struct EmptyProject(std::path::PathBuf);

impl EmptyProject {
    fn create() -> anyhow::Result<EmptyProject> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let path = base.join(format!("sandbox-doctor-{}-{attempt}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(EmptyProject(path)),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(err) => {
                    return Err(err).with_context(|| {
                        format!("creating an empty project at {}", path.display())
                    })
                }
            }
        }
        anyhow::bail!("no free name for an empty project in {}", base.display())
    }
}

impl Drop for EmptyProject {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The built-in profiles, by name, as validated policies.
/// Every built-in profile, loaded. A built-in that fails to load is a bug in
/// this binary, so it is an error rather than a skipped line.
fn builtin_policies() -> anyhow::Result<Vec<(String, Policy)>> {
    sandbox::profile::builtin_names()
        .iter()
        .map(|name| {
            let policy = sandbox::profile::load(name)
                .map_err(|err| anyhow::anyhow!("built-in profile {name} does not load: {err:#}"))?;
            Ok((name.to_string(), policy))
        })
        .collect()
}

fn status_line(out: &mut String, name: &str, availability: &Availability) {
    let _ = match availability {
        Availability::Available => writeln!(out, "  ok       {name}"),
        Availability::Unavailable(reason) => writeln!(out, "  missing  {name}: {reason}"),
    };
}

fn opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "absent".to_owned(), |v| v.to_string())
}

fn render_text(
    probes: &Probes,
    environment: &Environment,
    programs: &[Program],
    verdicts: &[Verdict],
) -> String {
    // Writing to a String cannot fail; the results are ignored for that reason.
    let mut out = String::new();
    let who = if probes.running_as_root {
        "running as root"
    } else {
        "running unprivileged"
    };
    let _ = writeln!(
        out,
        "sandbox doctor: Linux {} ({}), {who}\n\nkernel features",
        probes.kernel_release, probes.arch
    );
    let _ = writeln!(out, "  environment  {}", environment.summary());
    status_line(&mut out, "user namespaces", &probes.user_namespaces);
    if let Some(unprivileged) = &probes.user_namespaces_unprivileged {
        status_line(
            &mut out,
            "user namespaces for unprivileged users",
            unprivileged,
        );
    }
    let landlock_name = match probes.landlock_abi {
        Some(abi) => format!("landlock (ABI {abi})"),
        None => "landlock".to_owned(),
    };
    status_line(&mut out, &landlock_name, &probes.landlock);
    status_line(&mut out, "seccomp filters", &probes.seccomp);
    status_line(
        &mut out,
        "seccomp user notification",
        &probes.seccomp_user_notif,
    );
    status_line(&mut out, "clone3", &probes.clone3);
    status_line(&mut out, "pidfd", &probes.pidfd);
    status_line(&mut out, "idmapped mounts", &probes.idmapped_mounts);
    let _ = writeln!(
        out,
        "  sysctls  kernel.unprivileged_userns_clone={} user.max_user_namespaces={} \
         kernel.apparmor_restrict_unprivileged_userns={}",
        opt(probes.unprivileged_userns_clone.map(u8::from)),
        opt(probes.max_user_namespaces),
        opt(probes.apparmor_restrict_unprivileged_userns.map(u8::from)),
    );

    let cgroup = &probes.cgroup;
    let mode = match cgroup.mode {
        CgroupMode::V2 => "v2",
        CgroupMode::V1 => "v1",
        CgroupMode::Hybrid => "hybrid (v1 controllers plus cgroup2)",
        CgroupMode::None => "none mounted",
    };
    let unified = cgroup
        .unified_mount
        .as_ref()
        .map(|p| format!(", cgroup2 at {}", p.display()))
        .unwrap_or_default();
    let _ = writeln!(out, "\ncgroups: {mode}{unified}");
    for name in CONTROLLERS {
        let _ = match cgroup.controller(name) {
            Some(c) => writeln!(
                out,
                "  {name:<7} v{}  {}  {}",
                c.version,
                c.own_cgroup.display(),
                match (c.read_only, c.writable) {
                    (true, _) => "read-only mount",
                    (false, true) => "writable",
                    (false, false) => "not writable",
                }
            ),
            None => writeln!(out, "  {name:<7} missing"),
        };
    }

    let _ = writeln!(
        out,
        "\nprograms (beside this executable, or in ../libexec/sandbox)"
    );
    for program in programs {
        let _ = match (&program.path, &program.missing) {
            (Some(path), _) => writeln!(
                out,
                "  ok       {:<15} {}  ({})",
                program.name,
                path.display(),
                program.used_for
            ),
            (None, missing) => writeln!(
                out,
                "  missing  {:<15} needed for {}: {}",
                program.name,
                program.used_for,
                missing.as_deref().unwrap_or("not found")
            ),
        };
    }

    let _ = writeln!(
        out,
        "\nprofiles (each started with a dry run: everything but executing the command)"
    );
    if verdicts.is_empty() {
        let _ = writeln!(out, "  (no built-in profiles in this build)");
    }
    for v in verdicts {
        let verdict = match &v.refusal {
            None => "can run".to_owned(),
            Some(message) => format!("cannot run (exit {}): sandbox: {message}", v.exit_status),
        };
        let default = if v.profile == DEFAULT_PROFILE {
            " (default)"
        } else {
            ""
        };
        let _ = writeln!(out, "  {}{default}: {verdict}", v.profile);
        for warning in &v.warnings {
            let _ = writeln!(out, "    warning: {warning}");
        }
        if let Some(enforced) = &v.enforced {
            for (layer, line) in layer_lines(enforced, v.measured.as_ref()) {
                let _ = writeln!(out, "    {layer:<10} {line}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusing_profile_prints_the_run_message() {
        let probes = probe::probe();
        let refused = Verdict {
            profile: "strict".to_owned(),
            can_run: false,
            refusal: Some(
                "cannot create the sandbox's namespaces (clone: EPERM); cause: x; fix: y"
                    .to_owned(),
            ),
            exit_status: 125,
            warnings: vec![],
            enforced: None,
            measured: None,
        };
        let text = render_text(&probes, &Environment::default(), &[], &[refused]);
        assert!(
            text.contains(
                "strict (default): cannot run (exit 125): sandbox: cannot create the sandbox's namespaces (clone: EPERM); cause: x; fix: y"
            ),
            "{text}"
        );
        // A refused profile shows no layer: nothing was applied.
        assert!(
            !text.contains("    namespaces ") && !text.contains("    landlock   "),
            "{text}"
        );
    }
}
