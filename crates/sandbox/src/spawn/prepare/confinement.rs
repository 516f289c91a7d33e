//! The confinement the payload applies to itself before exec, beyond its
//! view: the Landlock rules every run has, the seccomp programs, the
//! resource limits, and the namespaces clone creates.

use std::ffi::CString;

use nix::sched::CloneFlags;
use nix::sys::resource::Resource;

use crate::landlock::LandlockAccess;
use crate::profile::policy::{Enforcement, NetworkMode, Policy};
use crate::seccomp::CompiledFilter;
use crate::spawn::SpawnError;

use super::IdMapping;

/// Landlock rules for what every run's view holds besides the profile's
/// paths.
pub(super) fn fixed_landlock_rules(landlock_rules: &mut Vec<(CString, LandlockAccess)>) {
    // For the files init writes there. /etc inside holds nothing else
    // than them and what the profile shows (already readable), and
    // always exists (init creates it), which a rule per file would not
    // (a file the view cannot hold is skipped; see `crate::spawn::etc`).
    landlock_rules.push((c"/etc".into(), LandlockAccess::Read));
    landlock_rules.push((c"/tmp".into(), LandlockAccess::ReadWrite));
    landlock_rules.push((c"/dev/shm".into(), LandlockAccess::ReadWrite));
    landlock_rules.push((c"/dev/mqueue".into(), LandlockAccess::MessageQueues));
    landlock_rules.push((c"/dev".into(), LandlockAccess::Device));
    landlock_rules.push((c"/proc".into(), LandlockAccess::Read));
    landlock_rules.push((c"/".into(), LandlockAccess::List));
}

/// The seccomp programs the payload loads (with seccomp off, the set-id
/// guard alone).
pub(super) fn seccomp_filter(
    policy: &Policy,
    ids: &IdMapping,
) -> Result<Option<CompiledFilter>, SpawnError> {
    let seccomp = match policy.enforce.seccomp {
        Enforcement::Off => crate::seccomp::host_guard()?,
        _ => Some(crate::seccomp::compile_in_user_namespace(
            &policy.syscalls,
            mapped_ids(ids),
        )?),
    };
    Ok(seccomp)
}

/// A learning run's one filter: [`seccomp_filter`]'s program with its
/// refusals and path-bearing calls sent to the supervisor (see
/// [`crate::seccomp::learning`]).
pub(super) fn learning_filter(
    policy: &Policy,
    ids: &IdMapping,
) -> Result<Vec<libc::sock_filter>, SpawnError> {
    let syscalls = (policy.enforce.seccomp != Enforcement::Off).then_some(&policy.syscalls);
    // A learning run that cannot observe would learn nothing and say it
    // learned everything: refused instead.
    crate::seccomp::learning(syscalls, mapped_ids(ids))?.ok_or_else(|| {
        SpawnError::Invalid(
            "learning needs a seccomp filter, which this build has none of for this architecture"
                .into(),
        )
    })
}

/// The payload's own user namespace maps only its ids.
fn mapped_ids(ids: &IdMapping) -> crate::seccomp::MappedIds {
    crate::seccomp::MappedIds {
        uid: ids.inside_uid,
        gid: ids.inside_gid,
    }
}

/// The limits the payload sets with setrlimit.
pub(super) fn rlimits(policy: &Policy) -> Vec<(Resource, u64)> {
    let mut rlimits = vec![(Resource::RLIMIT_CORE, 0)];
    if let Some(nofile) = policy.limits.nofile {
        rlimits.push((Resource::RLIMIT_NOFILE, nofile));
    }
    if let Some(share) = message_queue_share() {
        rlimits.push((Resource::RLIMIT_MSGQUEUE, share));
    }
    rlimits
}

/// The namespaces a run gets: a network namespace unless the profile
/// shares the host's. Clone creates some, init the others
/// (`crate::spawn::init::UNSHARED_BY_INIT`).
pub(super) fn clone_flags(policy: &Policy) -> CloneFlags {
    let mut clone_flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if policy.network.mode != NetworkMode::Host {
        clone_flags |= CloneFlags::CLONE_NEWNET;
    }
    clone_flags
}

/// How many bytes of POSIX message queues the payload may hold: a quarter
/// of the caller's RLIMIT_MSGQUEUE (None: the caller has no limit to
/// share).
///
/// The kernel charges a queue to its owner's uid in every user namespace
/// up the chain, and checks the charge of the host uid against the limit
/// its caller had when the run's namespace was made: the run's private
/// /dev/mqueue does not give it an allowance of its own. Without a share,
/// one run filling the allowance (about 28 queues at the default 800 KiB)
/// makes `mq_open` fail with EMFILE in every other run of the same caller,
/// and in the caller's own programs, until it ends. A lowered limit is
/// checked at the payload's own level first, and no process of the run can
/// raise it again (no CAP_SYS_RESOURCE), so the run holds at most this
/// share. A queue of the default shape (10 messages of 8 KiB) is charged
/// 10 x (8192 + 8 + 48) = 82,480 bytes, so a quarter of the default limit
/// (204,800) still holds two of them, or dozens of small ones, which is
/// what test suites and programs that use queues make; four such runs may
/// run side by side and the caller keeps the rest.
///
/// The run's IPC namespace could instead lower its own
/// /proc/sys/fs/mqueue limits (writable there on this kernel), but they
/// bound the number and the shape of queues, not their bytes: any setting
/// small enough to keep a run to a share of the allowance would refuse
/// the default queue shape, or most queues, that programs ask for.
fn message_queue_share() -> Option<u64> {
    const SHARE_DIVISOR: u64 = 4;
    let (soft, _) = nix::sys::resource::getrlimit(Resource::RLIMIT_MSGQUEUE).ok()?;
    (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft / SHARE_DIVISOR)
}
