//! The run's plan, decided once: with namespaces or without them (a
//! best-effort profile where they cannot work here), and the confinement
//! the payload must then find.

use nix::errno::Errno;

use crate::spawn::measure::View;
use crate::spawn::prepare::{ChildPlan, Prepared};
use crate::spawn::{SpawnError, Step};

use super::notes::step_note;
use super::release::CANNOT_MAP_ROOT;

/// The run goes on without namespaces, on a plan of its own (or is refused).
pub(super) fn fall_back(prepared: &mut Prepared, reason: String) -> Result<(), SpawnError> {
    if prepared.config.policy.filesystem.review {
        // Review mode's overlay is mounted in the run's own user and mount
        // namespaces; without them the run would write the project itself.
        // Nothing of the run is stored yet (see review::Store::start).
        return Err(SpawnError::Invalid(format!(
            "review mode needs the run's own user and mount namespaces (init mounts the overlay that keeps the run's changes there), and this run would have none: {reason}. Make user namespaces available (`sandbox doctor` says how here), or run without review mode (no --review, no `[filesystem] review = true`)"
        )));
    }
    let without = crate::spawn::no_namespaces::plan_without(prepared, reason)?;
    prepared.started.warnings.push(without.warning());
    prepared.started.no_namespaces = Some(without);
    Ok(())
}

/// The run's plan, decided once before anything of the run exists: with
/// namespaces, or (a best-effort profile where they cannot work here) its
/// plan without them, or refused. Everything known before clone is asked
/// here, in this order; only a refusal that clone itself or init's first
/// steps meet is learned later ([`launch_init`]), and goes the same way
/// through [`fall_back`].
///
/// `supervisor_capabilities`: the supervisor's CapEff (see
/// [`supervisor_effective_capabilities`]).
pub(super) fn decide_namespaces(
    prepared: &mut Prepared,
    supervisor_capabilities: Option<u64>,
) -> Result<(), SpawnError> {
    use crate::profile::policy::Enforcement;
    let userns = prepared.config.policy.enforce.userns;
    if userns == Enforcement::Off && prepared.started.no_namespaces.is_none() {
        fall_back(prepared, "the profile sets enforce.userns = \"off\"".into())?;
    }
    if prepared.started.no_namespaces.is_some() || !prepared.planned.namespaces {
        return Ok(());
    }
    // Where the environment already says that a new user namespace would
    // hold no capabilities (Ubuntu's AppArmor restriction, see
    // [`crate::environment::Environment::namespaces_withheld`]), none is
    // attempted: a best-effort profile plans its run without namespaces, a
    // required one is refused naming the cause and the fixes.
    if let Some(why) = crate::environment::namespaces_withheld_here() {
        step_note(
            prepared,
            format_args!("no user namespace attempted: {}", why.cause),
        );
        return match userns {
            Enforcement::Required => Err(SpawnError::Explained {
                error: Box::new(SpawnError::LayerUnavailable {
                    layer: "userns",
                    reason:
                        "a new user namespace would get no capabilities here, so none was created"
                            .into(),
                }),
                cause: why.cause,
                fix: why.fix,
            }),
            Enforcement::BestEffort | Enforcement::Off => fall_back(prepared, why.cause),
        };
    }
    let flags = prepared.planned.clone_flags;
    if flags.contains(nix::sched::CloneFlags::CLONE_NEWPID) && crate::environment::proc_is_masked()
    {
        // Known before clone, so a best-effort profile runs without
        // namespaces instead of failing at init's /proc mount.
        return if userns == Enforcement::BestEffort {
            fall_back(
                prepared,
                "/proc here has paths mounted over it (a container's masked paths), and the kernel refuses a fresh /proc for a new pid namespace then".into(),
            )
        } else {
            Err(SpawnError::Setup {
                step: Step::MountProc,
                errno: Errno::EPERM as i32,
                detail: "/proc".into(),
            })
        };
    }
    let ids = prepared.planned.ids;
    if flags.contains(nix::sched::CloneFlags::CLONE_NEWUSER)
        && !ids.root_mode
        && ids.host_uid == 0
        && userns == Enforcement::BestEffort
        && !crate::spawn::ids::may_map_root(supervisor_capabilities)
    {
        // No user namespace can be had (see CANNOT_MAP_ROOT): known before
        // clone, so a best-effort profile runs without one. A required one
        // goes on to clone, where an outer sandbox's refusal is the more
        // precise message, else the id map names this.
        return fall_back(prepared, CANNOT_MAP_ROOT.into());
    }
    Ok(())
}

/// What the payload must find before exec: the namespaces it is cloned
/// into differ from the supervisor's, and the filters it installs sit on
/// top of the ones the supervisor inherited.
pub(super) fn expected_confinement(
    plan: &ChildPlan,
    host: View,
) -> crate::spawn::measure::Expected {
    use nix::sched::CloneFlags as F;
    let flags = plan.clone_flags;
    // Without a user namespace of its own the payload can clear its bounding
    // set only where the supervisor holds CAP_SETPCAP (root in a container
    // often does not); with no_new_privs an exec cannot use what remains.
    const CAP_SETPCAP: u64 = 1 << 8;
    let bounding_set_cleared =
        plan.namespaces || host.capabilities[2].is_some_and(|eff| eff & CAP_SETPCAP != 0);
    crate::spawn::measure::Expected {
        host: Some(host),
        bounding_set_cleared,
        new_namespaces: [
            flags.contains(F::CLONE_NEWUSER),
            flags.contains(F::CLONE_NEWNS),
            flags.contains(F::CLONE_NEWPID),
            flags.contains(F::CLONE_NEWNET),
            flags.contains(F::CLONE_NEWIPC),
            flags.contains(F::CLONE_NEWUTS),
            // Init unshares the cgroup namespace itself, inside the new
            // user namespace it owns.
            flags.contains(F::CLONE_NEWUSER),
        ],
        seccomp_programs: plan
            .seccomp
            .as_ref()
            .map_or(0, |filter| filter.programs().len() as u64),
    }
}

/// The supervisor's CapEff as read for the run's expected confinement
/// just before clone.
pub(super) fn supervisor_effective_capabilities(prepared: &Prepared) -> Option<u64> {
    prepared
        .started
        .confinement
        .host
        .as_ref()
        .and_then(|host| host.capabilities[2])
}
