//! The run's cgroup, created before clone, or the rlimits that stand in
//! for it.

use crate::spawn::prepare::RunConfig;
use crate::spawn::SpawnError;

/// Distinct names for the runs of one supervisor process.
pub(super) static RUN_COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Names tried for a run's cgroup before its creation counts as failed.
const NAME_ATTEMPTS: u32 = 16;

/// The rlimits that stand in for a cgroup that could not be had; the
/// payload applies them after the plan's own.
pub(super) type FallbackRlimits = Vec<(nix::sys::resource::Resource, u64)>;

/// Create the run's cgroup before clone. Without one, a best-effort layer
/// falls back to rlimits, which the child gets with its handover.
pub(super) fn setup_cgroup(
    config: &RunConfig,
    warnings: &mut Vec<String>,
) -> Result<(Option<crate::cgroup::RunCgroup>, FallbackRlimits), SpawnError> {
    use crate::profile::policy::Enforcement;
    use nix::sys::resource::Resource;
    let limits = config.cgroup_limits();
    let enforcement = config.policy.enforce.cgroups;
    let cgroup_parent = config.supervision.cgroup_parent.as_deref();
    if !limits.any() {
        return Ok((None, Vec::new()));
    }
    if enforcement == Enforcement::Off {
        warnings.push(
            "cgroups are off in this profile: memory, pids and cpu limits are not applied".into(),
        );
        return Ok((None, Vec::new()));
    }
    let info = match &config.supervision.cgroup_layout {
        Some(layout) => layout.clone(),
        None => crate::cgroup::detect(),
    };
    // A name is taken when an earlier run's directories were left behind
    // (its supervisor and janitor killed together) and its pid came round
    // again: another name, never the leftover, which may not be stale (a
    // supervisor of another pid namespace in the same cgroup).
    let mut attempts = 0;
    let created = loop {
        let name = crate::cgroup::run_cgroup_name(
            std::process::id(),
            RUN_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        attempts += 1;
        match crate::cgroup::RunCgroup::create(&info, cgroup_parent, &name, &limits) {
            Err(err) if err.name_taken() && attempts < NAME_ATTEMPTS => continue,
            created => break created,
        }
    };
    match created {
        Ok(cgroup) => Ok((Some(cgroup), Vec::new())),
        Err(err) if enforcement == Enforcement::Required => Err(SpawnError::LayerUnavailable {
            layer: "cgroups",
            reason: crate::cgroup::refusal(&err, crate::cgroup::FixContext::current()),
        }),
        Err(err) => {
            let mut rlimits = Vec::new();
            let mut applied = Vec::new();
            if let Some(memory) = limits.memory {
                // RLIMIT_DATA, not RLIMIT_AS: since Linux 4.7 it counts private
                // writable mappings, so the large PROT_NONE reservations of V8
                // or a JVM do not count until committed. RLIMIT_AS at the
                // memory limit made Node abort at start-up.
                rlimits.push((Resource::RLIMIT_DATA, memory));
                applied.push("memory as RLIMIT_DATA (per process, committed private memory)");
            }
            if let Some(pids) = limits.pids {
                rlimits.push((Resource::RLIMIT_NPROC, pids));
                applied.push("pids as RLIMIT_NPROC");
            }
            let cpu = if limits.cpu.is_some() {
                "; the cpu share is not limited"
            } else {
                ""
            };
            warnings.push(crate::cgroup::notice::fallback_warning(
                format_args!(
                    "{err}{}",
                    crate::cgroup::scope_note(&info, &limits, cgroup_parent.is_some())
                ),
                &format!("{}{cpu}", applied.join(", ")),
            ));
            Ok((None, rlimits))
        }
    }
}
