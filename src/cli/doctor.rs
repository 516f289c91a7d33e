//! `sandbox doctor`: what this host supports, and what each built-in profile
//! would enforce here.
use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::Context as _;
use clap::Args;
use sandbox::cgroup::{CgroupMode, CONTROLLERS};
use sandbox::probe::{self, Assessment, Availability, LayerOutcome, Probes};
use sandbox::profile::policy::{Enforcement, Policy};
use serde::Serialize;

/// Arguments of `sandbox doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
struct Report<'a> {
    probes: &'a Probes,
    assessments: &'a [Assessment],
}

/// Probe, assess every built-in profile, print. Exits 0 whatever is missing:
/// a missing feature is a finding, not a failure of `doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<i32> {
    // Probe first, while the process is still single-threaded (the user
    // namespace probe forks).
    let probes = probe::probe();
    let assessments: Vec<Assessment> = builtin_policies()?
        .iter()
        .map(|(_, policy)| probe::assess(policy, &probes))
        .collect();
    let out = if args.json {
        let report = Report {
            probes: &probes,
            assessments: &assessments,
        };
        let mut json = serde_json::to_string_pretty(&report).context("serializing the report")?;
        json.push('\n');
        json
    } else {
        render_text(&probes, &assessments)
    };
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing to stdout")?;
    Ok(0)
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

fn render_text(probes: &Probes, assessments: &[Assessment]) -> String {
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

    let _ = writeln!(out, "\nprofiles");
    if assessments.is_empty() {
        let _ = writeln!(out, "  (no built-in profiles in this build)");
    }
    for a in assessments {
        let verdict = if a.can_run {
            "can run".to_owned()
        } else {
            format!("would refuse to run: {}", a.refusals().join("; "))
        };
        let _ = writeln!(out, "  {}: {verdict}", a.profile);
        for l in &a.layers {
            let enforcement = match l.enforcement {
                Enforcement::Required => "required",
                Enforcement::BestEffort => "best-effort",
                Enforcement::Off => "off",
            };
            let what = match &l.outcome {
                LayerOutcome::Enforced { detail } => format!("enforced: {detail}"),
                LayerOutcome::Partial { detail, reason } => {
                    format!("partly enforced: {detail}; missing: {reason}")
                }
                LayerOutcome::NotApplied { reason } => format!("not applied: {reason}"),
                LayerOutcome::Off => "off".to_owned(),
                LayerOutcome::Refused { reason } => format!("refused: {reason}"),
            };
            let _ = writeln!(out, "    {:<9} {enforcement:<12} {what}", l.layer.name());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox::probe::{Layer, LayerAssessment};

    #[test]
    fn refusing_profile_says_why() {
        let probes = probe::probe();
        let refused = Assessment {
            profile: "strict".to_owned(),
            can_run: false,
            layers: vec![LayerAssessment {
                layer: Layer::Landlock,
                enforcement: Enforcement::Required,
                outcome: LayerOutcome::Refused {
                    reason: "Landlock ABI 4 cannot restrict ioctl".to_owned(),
                },
            }],
        };
        let text = render_text(&probes, &[refused]);
        assert!(
            text.contains(
                "strict: would refuse to run: landlock: Landlock ABI 4 cannot restrict ioctl"
            ),
            "{text}"
        );
        assert!(text.contains("landlock  required     refused: "), "{text}");
    }
}
