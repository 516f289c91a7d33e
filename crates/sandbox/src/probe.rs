//! Probes of what this kernel and environment support. What a profile gets
//! here is not judged from them: `sandbox doctor` starts each profile with a
//! dry run on the real spawn path.
//!
//! Every probe asks the kernel (a real `unshare` in a child, the Landlock version
//! query, ...) instead of guessing from the kernel version: distributions backport
//! features, and container runtimes filter system calls. A probe never fails: a
//! feature that cannot be confirmed is [`Availability::Unavailable`] with a reason
//! that names the cause and the fix.
use std::fs;

use nix::errno::Errno;
use nix::sched::CloneFlags;
use serde::Serialize;

use crate::cgroup::CgroupInfo;
use crate::environment::Environment;
use crate::sys::probe::{self as sys, ChildProbeError, ProbeCall};
use crate::sysctl::{read_trimmed, UsernsSysctls};

/// The ids an unprivileged probe child switches to when the supervisor is root:
/// `nobody`/`nogroup` on every major distribution.
const NOBODY: u32 = 65534;

/// The Landlock ABI at which a `required` Landlock layer counts as fully
/// enforced: the one whose rights the spawn path asks for (see
/// [`crate::landlock::TARGET_ABI`]); below it a sandboxed process keeps
/// rights the policy does not grant.
pub const LANDLOCK_FULL_ABI: u32 = crate::landlock::TARGET_ABI_NUMBER;

/// Whether a feature can be used here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "kebab-case")]
pub enum Availability {
    /// The kernel confirmed it.
    Available,
    /// Not usable here; the text names the cause and the fix.
    Unavailable(String),
}

impl Availability {
    /// True for [`Availability::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }

    /// The reason it is unavailable, if it is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Availability::Available => None,
            Availability::Unavailable(reason) => Some(reason),
        }
    }
}

/// Everything `sandbox doctor` reports and `sandbox run` checks before it starts.
#[derive(Debug, Clone, Serialize)]
pub struct Probes {
    /// `uname -r`.
    pub kernel_release: String,
    /// The architecture this binary was built for (`x86_64`, `aarch64`, ...).
    pub arch: &'static str,
    /// Effective uid 0.
    pub running_as_root: bool,
    /// A child of this process could `unshare(CLONE_NEWUSER)`. As root this
    /// tests the kernel (root passes the unprivileged-user checks).
    pub user_namespaces: Availability,
    /// Only when running as root: whether an unprivileged user (a child switched
    /// to uid/gid 65534) could create a user namespace. `None` otherwise, since
    /// [`Probes::user_namespaces`] already answers for an unprivileged user.
    pub user_namespaces_unprivileged: Option<Availability>,
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian and Ubuntu kernels).
    pub unprivileged_userns_clone: Option<bool>,
    /// `/proc/sys/user/max_user_namespaces`.
    pub max_user_namespaces: Option<u64>,
    /// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+).
    pub apparmor_restrict_unprivileged_userns: Option<bool>,
    /// The Landlock ABI version; `None` when Landlock is unsupported or disabled.
    pub landlock_abi: Option<u32>,
    /// Landlock as an availability, with the reason when it is missing.
    pub landlock: Availability,
    /// Seccomp filter mode (with `SECCOMP_RET_ERRNO`).
    pub seccomp: Availability,
    /// Seccomp user notification (`SECCOMP_RET_USER_NOTIF`, Linux 5.0).
    pub seccomp_user_notif: Availability,
    /// The `clone3` system call (Linux 5.3).
    pub clone3: Availability,
    /// `pidfd_open` (Linux 5.3).
    pub pidfd: Availability,
    /// `mount_setattr`, and with it idmapped mounts (Linux 5.12).
    pub idmapped_mounts: Availability,
    /// cgroup layout and this process's own cgroups.
    pub cgroup: CgroupInfo,
}

/// Run every probe. Never panics. Forks short-lived children for the user
/// namespace probe, which needs a single-threaded process: call it before
/// starting threads (otherwise that probe reports why it could not run).
pub fn probe() -> Probes {
    let running_as_root = nix::unistd::geteuid().is_root();
    let sysctls = UsernsSysctls::read();
    let env = Environment::detect();
    // Root's probe as nobody is judged as nobody: the unprivileged
    // switches apply to it.
    let sysctl_reason = |privileged: bool| {
        Environment {
            cap_sys_admin: privileged,
            ..env.clone()
        }
        .sysctl_blocker()
        .map(|why| why.inline())
    };
    let user_namespaces = userns_availability(
        sys::try_unshare_in_child(CloneFlags::CLONE_NEWUSER),
        sysctl_reason(running_as_root),
    );
    let user_namespaces_unprivileged = running_as_root.then(|| {
        userns_availability(
            sys::try_unshare_in_child_as(CloneFlags::CLONE_NEWUSER, NOBODY, NOBODY),
            sysctl_reason(false),
        )
    });
    // Ubuntu's AppArmor restriction lets the probe's unshare succeed and
    // withholds the capabilities that make the namespace usable.
    let (user_namespaces, user_namespaces_unprivileged) = match sysctls
        .apparmor_restrict_unprivileged_userns
    {
        Some(true) => {
            let withheld = |why: Option<crate::environment::Explanation>, was: Availability| match (
                why, was,
            ) {
                (Some(why), Availability::Available) => {
                    Availability::Unavailable(format!("{}. Fix: {}", why.cause, why.fix))
                }
                (_, was) => was,
            };
            (
                withheld(env.namespaces_withheld(), user_namespaces),
                user_namespaces_unprivileged
                    .map(|was| withheld(env.namespaces_withheld_unprivileged(), was)),
            )
        }
        _ => (user_namespaces, user_namespaces_unprivileged),
    };
    let (landlock_abi, landlock) =
        landlock_availability(sys::raw_probe_syscall(ProbeCall::LandlockAbiVersion));
    Probes {
        kernel_release: read_trimmed("/proc/sys/kernel/osrelease")
            .unwrap_or_else(|| "unknown".to_owned()),
        arch: std::env::consts::ARCH,
        running_as_root,
        user_namespaces,
        user_namespaces_unprivileged,
        unprivileged_userns_clone: sysctls.unprivileged_userns_clone,
        max_user_namespaces: sysctls.max_user_namespaces,
        apparmor_restrict_unprivileged_userns: sysctls.apparmor_restrict_unprivileged_userns,
        landlock_abi,
        landlock,
        seccomp: seccomp_availability(),
        seccomp_user_notif: seccomp_user_notif_availability(sys::seccomp_action_available(
            libc::SECCOMP_RET_USER_NOTIF,
        )),
        clone3: clone3_availability(sys::raw_probe_syscall(ProbeCall::Clone3NullArgs)),
        pidfd: pidfd_availability(sys::raw_probe_syscall(ProbeCall::PidfdOpenSelf)),
        idmapped_mounts: idmapped_availability(sys::raw_probe_syscall(
            ProbeCall::MountSetattrInvalid,
        )),
        cgroup: crate::cgroup::detect(),
    }
}

/// Why creating a user namespace fails here, with the fix, judged from the
/// sysctls (cheap: three small reads, no fork, unless one is set), in the
/// words of the environment's refusals ([`Environment::sysctl_blocker`]).
/// `sandbox run` calls it to explain a failed `clone(CLONE_NEWUSER)`.
/// `None` when no sysctl explains it.
pub fn userns_unavailable_reason() -> Option<String> {
    crate::environment::sysctl_blocker_here(nix::unistd::geteuid().is_root())
        .map(|why| why.inline())
}

/// `sysctl_reason`: what the sysctls stop, from [`Environment::sysctl_blocker`].
fn userns_availability(
    result: Result<(), ChildProbeError>,
    sysctl_reason: Option<String>,
) -> Availability {
    let errno = match result {
        Ok(()) => return Availability::Available,
        Err(ChildProbeError::Unshare(errno)) => errno,
        Err(other) => {
            let why = sysctl_reason
                .map(|r| format!("; the sysctls say: {r}"))
                .unwrap_or_default();
            return Availability::Unavailable(format!(
                "could not probe user namespaces ({other}){why}"
            ));
        }
    };
    // A sysctl is the likelier and more actionable cause than the bare errno.
    if let Some(reason) = sysctl_reason {
        return Availability::Unavailable(reason);
    }
    Availability::Unavailable(match errno {
        Errno::EPERM => "creating a user namespace is not permitted (EPERM): a seccomp filter \
             or security module blocks it, as in most containers, or the process is chrooted; \
             run sandbox outside the container or allow CLONE_NEWUSER in its seccomp profile"
            .to_owned(),
        Errno::ENOSPC => "the user namespace limit is reached (ENOSPC): raise it with \
             `sysctl -w user.max_user_namespaces=15000` (or nesting is deeper than 32 levels)"
            .to_owned(),
        Errno::EUSERS => "user namespaces are nested too deeply (EUSERS, 32 levels): \
             run sandbox from a shallower namespace"
            .to_owned(),
        Errno::EINVAL | Errno::ENOSYS => "the kernel has no user namespaces (built without \
             CONFIG_USER_NS): use a kernel with user namespace support"
            .to_owned(),
        other => format!("unshare(CLONE_NEWUSER) failed: {other}"),
    })
}

fn landlock_availability(result: Result<libc::c_long, Errno>) -> (Option<u32>, Availability) {
    match result {
        Ok(abi) => match u32::try_from(abi) {
            Ok(abi) if abi >= 1 => (Some(abi), Availability::Available),
            _ => (
                None,
                Availability::Unavailable(format!("Landlock reported an invalid ABI {abi}")),
            ),
        },
        Err(Errno::EOPNOTSUPP) => (
            None,
            Availability::Unavailable(
                "Landlock is built into the kernel but disabled: add `landlock` to the \
                 `lsm=` kernel boot parameter"
                    .to_owned(),
            ),
        ),
        Err(Errno::ENOSYS) => (
            None,
            Availability::Unavailable(
                "the kernel has no Landlock (older than 5.13 or built without \
                 CONFIG_SECURITY_LANDLOCK), or a container's seccomp filter hides it: \
                 use Linux 6.12+ with Landlock enabled"
                    .to_owned(),
            ),
        ),
        Err(errno) => (
            None,
            Availability::Unavailable(format!(
                "the Landlock version query failed ({errno}): check the container's seccomp profile"
            )),
        ),
    }
}

fn seccomp_availability() -> Availability {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let has_status_line = status.lines().any(|l| l.starts_with("Seccomp:"));
    let mode = sys::raw_probe_syscall(ProbeCall::PrGetSeccomp);
    seccomp_from(
        mode,
        has_status_line,
        sys::seccomp_action_available(libc::SECCOMP_RET_ERRNO),
    )
}

fn seccomp_from(
    mode: Result<libc::c_long, Errno>,
    has_status_line: bool,
    errno_action: Result<(), Errno>,
) -> Availability {
    const NO_SECCOMP: &str = "the kernel has no seccomp (built without CONFIG_SECCOMP): \
                              use a kernel with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER";
    if mode.is_err() || !has_status_line {
        return Availability::Unavailable(NO_SECCOMP.to_owned());
    }
    match errno_action {
        Ok(()) => Availability::Available,
        Err(Errno::ENOSYS | Errno::EINVAL) => Availability::Unavailable(
            "the kernel lacks seccomp filters or SECCOMP_GET_ACTION_AVAIL (Linux 4.14): \
             use Linux 4.14+ with CONFIG_SECCOMP_FILTER"
                .to_owned(),
        ),
        Err(errno) => Availability::Unavailable(format!(
            "seccomp(SECCOMP_GET_ACTION_AVAIL, SECCOMP_RET_ERRNO) failed ({errno}): \
             an outer seccomp filter may block the seccomp system call"
        )),
    }
}

fn seccomp_user_notif_availability(result: Result<(), Errno>) -> Availability {
    match result {
        Ok(()) => Availability::Available,
        Err(Errno::EOPNOTSUPP) => Availability::Unavailable(
            "the kernel does not know SECCOMP_RET_USER_NOTIF (older than 5.0): upgrade the kernel"
                .to_owned(),
        ),
        Err(errno) => Availability::Unavailable(format!(
            "seccomp user notification cannot be checked ({errno}): seccomp filters are unavailable"
        )),
    }
}

fn clone3_availability(result: Result<libc::c_long, Errno>) -> Availability {
    match result {
        // EINVAL (size 0) or EFAULT: the call exists and rejected our arguments.
        // Ok cannot happen with a size of 0; if it did, the call exists too.
        Ok(_) | Err(Errno::EINVAL | Errno::EFAULT) => Availability::Available,
        Err(Errno::ENOSYS) => Availability::Unavailable(
            "clone3 is missing (kernel older than 5.3) or hidden by a container's seccomp \
             filter: upgrade the kernel or allow clone3; sandbox falls back to clone"
                .to_owned(),
        ),
        Err(errno) => Availability::Unavailable(format!(
            "clone3 is blocked ({errno}): allow it in the container's seccomp profile"
        )),
    }
}

fn pidfd_availability(result: Result<libc::c_long, Errno>) -> Availability {
    match result {
        Ok(_) => Availability::Available,
        Err(Errno::ENOSYS) => Availability::Unavailable(
            "pidfd_open is missing (kernel older than 5.3): upgrade the kernel".to_owned(),
        ),
        Err(errno) => Availability::Unavailable(format!(
            "pidfd_open failed ({errno}): allow it in the container's seccomp profile"
        )),
    }
}

fn idmapped_availability(result: Result<libc::c_long, Errno>) -> Availability {
    match result {
        Ok(_) | Err(Errno::EINVAL | Errno::EBADF) => Availability::Available,
        Err(Errno::ENOSYS) => Availability::Unavailable(
            "mount_setattr is missing (kernel older than 5.12), so no idmapped mounts: \
             upgrade the kernel; as root, files written to the project would not keep \
             their host owners"
                .to_owned(),
        ),
        Err(errno) => Availability::Unavailable(format!(
            "mount_setattr is blocked ({errno}): allow it in the container's seccomp profile"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userns_errno_is_explained_when_no_sysctl_is() {
        let eperm = userns_availability(Err(ChildProbeError::Unshare(Errno::EPERM)), None);
        assert!(eperm.reason().unwrap().contains("seccomp"));
        let off = Environment {
            sysctls: UsernsSysctls {
                unprivileged_userns_clone: Some(false),
                ..UsernsSysctls::default()
            },
            ..Environment::default()
        }
        .sysctl_blocker()
        .map(|why| why.inline());
        let explained =
            userns_availability(Err(ChildProbeError::Unshare(Errno::EPERM)), off.clone());
        assert!(explained
            .reason()
            .unwrap()
            .contains("unprivileged_userns_clone=1"));
        let threads = userns_availability(Err(ChildProbeError::MultiThreaded(3)), None);
        assert!(threads.reason().unwrap().contains("3 threads"));
        assert!(userns_availability(Ok(()), off).is_available());
    }

    #[test]
    fn syscall_errnos_map_to_availability() {
        assert_eq!(
            landlock_availability(Ok(7)),
            (Some(7), Availability::Available)
        );
        assert!(landlock_availability(Ok(0)).0.is_none());
        let (abi, why) = landlock_availability(Err(Errno::EOPNOTSUPP));
        assert!(abi.is_none() && why.reason().unwrap().contains("lsm="));
        assert!(clone3_availability(Err(Errno::EINVAL)).is_available());
        assert!(clone3_availability(Err(Errno::EFAULT)).is_available());
        assert!(!clone3_availability(Err(Errno::ENOSYS)).is_available());
        assert!(idmapped_availability(Err(Errno::EBADF)).is_available());
        assert!(!idmapped_availability(Err(Errno::ENOSYS)).is_available());
        assert!(!pidfd_availability(Err(Errno::ENOSYS)).is_available());
        assert!(seccomp_from(Ok(0), true, Ok(())).is_available());
        assert!(!seccomp_from(Err(Errno::EINVAL), false, Ok(())).is_available());
        assert!(!seccomp_from(Ok(0), true, Err(Errno::EINVAL)).is_available());
        assert!(!seccomp_user_notif_availability(Err(Errno::EOPNOTSUPP)).is_available());
    }

    #[test]
    fn probe_never_panics_even_in_a_threaded_process() {
        // Probing from a second thread guarantees at least two threads, so the
        // fork probe must refuse, not fork.
        let p = std::thread::spawn(probe).join().expect("probe panicked");
        assert!(p
            .user_namespaces
            .reason()
            .is_some_and(|r| r.contains("threads")));
        assert!(!p.kernel_release.is_empty());
    }
}
