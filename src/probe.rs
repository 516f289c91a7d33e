//! Probes of what this kernel and environment support, and what a policy would
//! get here.
//!
//! Every probe asks the kernel (a real `unshare` in a child, the Landlock version
//! query, ...) instead of guessing from the kernel version: distributions backport
//! features, and container runtimes filter system calls. A probe never fails: a
//! feature that cannot be confirmed is [`Availability::Unavailable`] with a reason
//! that names the cause and the fix.
use std::fs;
use std::path::Path;

use nix::errno::Errno;
use nix::sched::CloneFlags;
use serde::Serialize;

use crate::cgroup::{CgroupInfo, CgroupMode};
use crate::profile::policy::{Enforcement, NetworkMode, Policy, ProjectAccess, SyscallMode};
use crate::sys::probe::{self as sys, ChildProbeError, ProbeCall};

/// The ids an unprivileged probe child switches to when the supervisor is root:
/// `nobody`/`nogroup` on every major distribution.
const NOBODY: u32 = 65534;

/// The Landlock ABI at which a `required` Landlock layer counts as fully
/// enforced: the one whose rights the spawn path asks for (see
/// [`crate::landlock::TARGET_ABI`]); below it a sandboxed process keeps
/// rights the policy does not grant.
pub const LANDLOCK_FULL_ABI: u32 = crate::landlock::TARGET_ABI_NUMBER;

/// Architectures the filter builder has system call tables for: doctor must
/// not promise seccomp where the spawn path would answer `UnsupportedArch`.
const SECCOMP_ARCHES: [&str; 1] = ["x86_64"];

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
    let user_namespaces = userns_availability(
        sys::try_unshare_in_child(CloneFlags::CLONE_NEWUSER),
        &sysctls,
        running_as_root,
    );
    let user_namespaces_unprivileged = running_as_root.then(|| {
        userns_availability(
            sys::try_unshare_in_child_as(CloneFlags::CLONE_NEWUSER, NOBODY, NOBODY),
            &sysctls,
            false,
        )
    });
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
/// sysctls alone (cheap: three small reads, no fork). `sandbox run` calls it to
/// explain a failed `clone(CLONE_NEWUSER)`. `None` when no sysctl explains it.
pub fn userns_unavailable_reason() -> Option<String> {
    UsernsSysctls::read().blocking_reason(nix::unistd::geteuid().is_root())
}

/// The sysctls that decide whether user namespaces may be created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsernsSysctls {
    /// `kernel.unprivileged_userns_clone` (Debian and Ubuntu kernels).
    pub unprivileged_userns_clone: Option<bool>,
    /// `user.max_user_namespaces` (per user namespace).
    pub max_user_namespaces: Option<u64>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+).
    pub apparmor_restrict_unprivileged_userns: Option<bool>,
}

impl UsernsSysctls {
    fn read() -> Self {
        Self::read_at(Path::new("/"))
    }

    /// Read them from `root`/proc/sys (`/` for this host; a faked tree in tests).
    pub fn read_at(root: &Path) -> Self {
        let sys = root.join("proc/sys");
        UsernsSysctls {
            unprivileged_userns_clone: read_bool(sys.join("kernel/unprivileged_userns_clone")),
            max_user_namespaces: read_trimmed(sys.join("user/max_user_namespaces"))
                .and_then(|s| s.parse().ok()),
            apparmor_restrict_unprivileged_userns: read_bool(
                sys.join("kernel/apparmor_restrict_unprivileged_userns"),
            ),
        }
    }

    /// `privileged`: the caller has CAP_SYS_ADMIN (root), which the
    /// unprivileged-user switches do not apply to; the namespace count limit
    /// applies to everyone.
    fn blocking_reason(&self, privileged: bool) -> Option<String> {
        if self.max_user_namespaces == Some(0) {
            return Some(
                "max_user_namespaces is 0: `sysctl -w user.max_user_namespaces=15000`".to_owned(),
            );
        }
        if privileged {
            return None;
        }
        if self.unprivileged_userns_clone == Some(false) {
            return Some(
                "user namespaces are disabled for unprivileged users: run \
                 `sysctl -w kernel.unprivileged_userns_clone=1`"
                    .to_owned(),
            );
        }
        if self.apparmor_restrict_unprivileged_userns == Some(true) {
            return Some(
                "AppArmor restricts unprivileged user namespaces: \
                 `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` \
                 or add an AppArmor profile for sandbox"
                    .to_owned(),
            );
        }
        None
    }
}

fn userns_availability(
    result: Result<(), ChildProbeError>,
    sysctls: &UsernsSysctls,
    privileged: bool,
) -> Availability {
    let errno = match result {
        Ok(()) => return Availability::Available,
        Err(ChildProbeError::Unshare(errno)) => errno,
        Err(other) => {
            let why = sysctls
                .blocking_reason(privileged)
                .map(|r| format!("; the sysctls say: {r}"))
                .unwrap_or_default();
            return Availability::Unavailable(format!(
                "could not probe user namespaces ({other}){why}"
            ));
        }
    };
    // A sysctl is the likelier and more actionable cause than the bare errno.
    if let Some(reason) = sysctls.blocking_reason(privileged) {
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

fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn read_bool(path: impl AsRef<Path>) -> Option<bool> {
    match read_trimmed(path)?.as_str() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// What a policy would get on this host.
// ---------------------------------------------------------------------------

/// A security layer a policy can require.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// User namespace and the namespaces created with it.
    Userns,
    /// Landlock filesystem rules.
    Landlock,
    /// Seccomp filter.
    Seccomp,
    /// cgroup limits.
    Cgroups,
}

impl Layer {
    /// The name used in profiles (`enforce.<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Layer::Userns => "userns",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::Cgroups => "cgroups",
        }
    }
}

/// What would happen to one layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum LayerOutcome {
    /// Applied in full.
    Enforced {
        /// What is applied.
        detail: String,
    },
    /// Best-effort layer applied only in part.
    Partial {
        /// What is applied.
        detail: String,
        /// What is missing, why, and the fix.
        reason: String,
    },
    /// Best-effort layer that cannot be applied here.
    NotApplied {
        /// Why, and the fix.
        reason: String,
    },
    /// The policy turns the layer off.
    Off,
    /// Required layer that cannot be applied (in full): the run would not start.
    Refused {
        /// Why, and the fix.
        reason: String,
    },
}

/// One layer of an [`Assessment`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerAssessment {
    /// Which layer.
    pub layer: Layer,
    /// What the policy asks for.
    pub enforcement: Enforcement,
    /// What would happen.
    #[serde(flatten)]
    pub outcome: LayerOutcome,
}

/// What a policy would enforce on this host, and whether it could run at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assessment {
    /// The policy's name.
    pub profile: String,
    /// False when a required layer cannot be applied.
    pub can_run: bool,
    /// One entry per layer, in the order they are set up.
    pub layers: Vec<LayerAssessment>,
}

impl Assessment {
    /// The reasons the run would be refused (empty when it can run).
    pub fn refusals(&self) -> Vec<String> {
        self.layers
            .iter()
            .filter_map(|l| match &l.outcome {
                LayerOutcome::Refused { reason } => Some(format!("{}: {reason}", l.layer.name())),
                _ => None,
            })
            .collect()
    }
}

/// Judge `policy` against `probes`. Pure: the same inputs give the same answer.
pub fn assess(policy: &Policy, probes: &Probes) -> Assessment {
    let layers = vec![
        assess_userns(policy, probes),
        assess_landlock(policy, probes),
        assess_seccomp(policy, probes),
        assess_cgroups(policy, probes),
    ];
    Assessment {
        profile: policy.name.clone(),
        can_run: !layers
            .iter()
            .any(|l| matches!(l.outcome, LayerOutcome::Refused { .. })),
        layers,
    }
}

/// The outcome of a layer that is either there or not.
fn all_or_nothing(
    enforcement: Enforcement,
    available: &Availability,
    detail: String,
) -> LayerOutcome {
    match (enforcement, available) {
        (Enforcement::Off, _) => LayerOutcome::Off,
        (_, Availability::Available) => LayerOutcome::Enforced { detail },
        (Enforcement::Required, Availability::Unavailable(reason)) => LayerOutcome::Refused {
            reason: reason.clone(),
        },
        (Enforcement::BestEffort, Availability::Unavailable(reason)) => LayerOutcome::NotApplied {
            reason: reason.clone(),
        },
    }
}

fn assess_userns(policy: &Policy, probes: &Probes) -> LayerAssessment {
    let enforcement = policy.enforce.userns;
    let network = match policy.network.mode {
        NetworkMode::None => "network (no interfaces up)",
        NetworkMode::Loopback => "network (loopback only)",
        NetworkMode::Host => "no network namespace (host network)",
    };
    let detail = format!("user, mount, pid, ipc, uts and cgroup namespaces; {network}");
    LayerAssessment {
        layer: Layer::Userns,
        enforcement,
        outcome: all_or_nothing(enforcement, &probes.user_namespaces, detail),
    }
}

/// What a Landlock ABI below [`LANDLOCK_FULL_ABI`] cannot restrict.
fn landlock_gaps(abi: u32) -> Vec<&'static str> {
    [
        (
            2,
            "file renames and links across directories (ABI 2, Linux 5.19)",
        ),
        (3, "truncation (ABI 3, Linux 6.2)"),
        // ABI 4's TCP rules are not used: the network namespace isolates.
        (5, "ioctl on device files (ABI 5, Linux 6.10)"),
        (
            6,
            "abstract Unix sockets and signals outside the sandbox (ABI 6, Linux 6.12)",
        ),
    ]
    .into_iter()
    .filter(|(needed, _)| abi < *needed)
    .map(|(_, what)| what)
    .collect()
}

fn assess_landlock(policy: &Policy, probes: &Probes) -> LayerAssessment {
    let enforcement = policy.enforce.landlock;
    let fs = &policy.filesystem;
    let project = match fs.project {
        ProjectAccess::ReadWrite => "read-write",
        ProjectAccess::ReadOnly => "read-only",
        ProjectAccess::Empty => "not visible",
    };
    let outcome = match (enforcement, probes.landlock_abi) {
        (Enforcement::Off, _) => LayerOutcome::Off,
        (_, None) => all_or_nothing(
            enforcement,
            &match &probes.landlock {
                Availability::Available => {
                    Availability::Unavailable("Landlock ABI unknown".to_owned())
                }
                missing => missing.clone(),
            },
            String::new(),
        ),
        (_, Some(abi)) => {
            let detail = format!(
                "ABI {abi}: {} read-only and {} read-write paths, project {project}",
                fs.read.len() + fs.read_if_exists.len(),
                fs.write.len()
            );
            let gaps = landlock_gaps(abi);
            if gaps.is_empty() {
                LayerOutcome::Enforced { detail }
            } else {
                let reason = format!(
                    "Landlock ABI {abi} cannot restrict {}: use Linux 6.12+ (ABI {LANDLOCK_FULL_ABI})",
                    gaps.join(", ")
                );
                if enforcement == Enforcement::Required {
                    LayerOutcome::Refused {
                        reason: format!("{reason}, or set enforce.landlock = \"best-effort\""),
                    }
                } else {
                    LayerOutcome::Partial { detail, reason }
                }
            }
        }
    };
    LayerAssessment {
        layer: Layer::Landlock,
        enforcement,
        outcome,
    }
}

fn assess_seccomp(policy: &Policy, probes: &Probes) -> LayerAssessment {
    let enforcement = policy.enforce.seccomp;
    let syscalls = &policy.syscalls;
    let detail = match syscalls.mode {
        SyscallMode::Allowlist => format!(
            "allowlist filter ({} extra allowed, {} denied)",
            syscalls.allow.len(),
            syscalls.deny.len()
        ),
        SyscallMode::Denylist => format!(
            "denylist filter (built-in list plus {} denied)",
            syscalls.deny.len()
        ),
    };
    let available = if SECCOMP_ARCHES.contains(&probes.arch) {
        probes.seccomp.clone()
    } else {
        Availability::Unavailable(format!(
            "no seccomp filter can be compiled for {}: supported are {}",
            probes.arch,
            SECCOMP_ARCHES.join(", ")
        ))
    };
    LayerAssessment {
        layer: Layer::Seccomp,
        enforcement,
        outcome: all_or_nothing(enforcement, &available, detail),
    }
}

fn format_bytes(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

fn assess_cgroups(policy: &Policy, probes: &Probes) -> LayerAssessment {
    let enforcement = policy.enforce.cgroups;
    let limits = &policy.limits;
    let wanted: Vec<(&str, String)> = [
        limits.memory.map(|m| ("memory", format_bytes(m))),
        limits.pids.map(|p| ("pids", format!("{p} tasks"))),
        limits.cpu.map(|c| ("cpu", format!("{c} CPUs"))),
    ]
    .into_iter()
    .flatten()
    .collect();

    let cgroup = &probes.cgroup;
    let mut applied = Vec::new();
    let mut missing = Vec::new();
    let fix_context = crate::cgroup::FixContext {
        root: probes.running_as_root,
    };
    for (name, amount) in &wanted {
        match cgroup.controller(name) {
            Some(c) if c.writable => applied.push(format!("{name} {amount} (v{})", c.version)),
            Some(c) => missing.push(format!(
                "no write access to the {name} cgroup {}: {}",
                c.own_cgroup.display(),
                // Never "run as root" to root: its cgroupfs is read-only.
                if probes.running_as_root {
                    "the cgroup filesystem is read-only here (as in a container); pass a \
                     writable delegated cgroup with --cgroup-parent"
                } else {
                    "run as root, or start sandbox in a delegated cgroup \
                     (`systemd-run --user --scope -p Delegate=yes sandbox ...`)"
                }
            )),
            None if cgroup.mode == CgroupMode::None => missing.push(format!(
                "{name}: no cgroup filesystem is mounted: mount cgroup2 at /sys/fs/cgroup"
            )),
            None => missing.push(format!(
                "the {name} controller is not available to this process: enable it in the \
                 parent's cgroup.subtree_control (cgroup v2) or mount its hierarchy (v1)"
            )),
        }
    }

    if !wanted.is_empty() {
        // What `run` decides before it creates anything (a read-only mount,
        // other processes in a v2 cgroup, a controller not delegated), so
        // doctor says the same; the per-controller lines above stay for the
        // rest.
        use crate::cgroup::CgroupError;
        let cgroup_limits = crate::cgroup::CgroupLimits {
            memory: limits.memory,
            pids: limits.pids,
            cpu: limits.cpu,
        };
        match crate::cgroup::predict(cgroup, None, &cgroup_limits) {
            Err(
                err @ (CgroupError::ReadOnly { .. }
                | CgroupError::InternalProcesses { .. }
                | CgroupError::NotDelegated { .. }),
            ) => {
                applied.clear();
                missing = vec![format!("{err}: {}", err.fix(fix_context))];
            }
            Err(err) if missing.is_empty() => {
                applied.clear();
                missing.push(format!("{err}: {}", err.fix(fix_context)));
            }
            _ => {}
        }
    }
    let outcome = if enforcement == Enforcement::Off {
        LayerOutcome::Off
    } else if wanted.is_empty() {
        LayerOutcome::Enforced {
            detail: "no cgroup limits in this policy".to_owned(),
        }
    } else if missing.is_empty() {
        LayerOutcome::Enforced {
            detail: applied.join(", "),
        }
    } else {
        let reason = missing.join("; ");
        match (enforcement, applied.is_empty()) {
            (Enforcement::Required, _) => LayerOutcome::Refused { reason },
            (_, true) => LayerOutcome::NotApplied { reason },
            (_, false) => LayerOutcome::Partial {
                detail: applied.join(", "),
                reason,
            },
        }
    };
    LayerAssessment {
        layer: Layer::Cgroups,
        enforcement,
        outcome,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::cgroup::ControllerInfo;
    use crate::profile::policy::{
        BrokerPolicy, Decision, EnforcePolicy, EnvPolicy, FilesystemPolicy, Limits, NetworkPolicy,
        SyscallPolicy,
    };

    fn strict_policy() -> Policy {
        Policy {
            name: "strict".to_owned(),
            filesystem: FilesystemPolicy {
                project: ProjectAccess::ReadOnly,
                read: vec![PathBuf::from("/usr"), PathBuf::from("/etc/ssl")],
                read_if_exists: vec![PathBuf::from("/lib64")],
                write: vec![],
                hide: vec![PathBuf::from(".env")],
                secrets: vec![".env".into()],
                protect: vec![".git/**/hooks".into()],
                hardlinks: crate::project::HardlinkPolicy::ReadOnly,
                tmp_size: 64 << 20,
            },
            network: NetworkPolicy {
                mode: NetworkMode::None,
            },
            limits: Limits {
                memory: Some(512 << 20),
                pids: Some(64),
                cpu: Some(0.5),
                timeout: Some(Duration::from_secs(30)),
                output: Some(1 << 20),
                nofile: Some(256),
            },
            syscalls: SyscallPolicy {
                mode: SyscallMode::Allowlist,
                allow: vec![],
                deny: vec!["ptrace".to_owned()],
            },
            env: EnvPolicy {
                pass: vec!["PATH".to_owned()],
                set: BTreeMap::new(),
            },
            broker: BrokerPolicy {
                default: Decision::Deny,
                rules: BTreeMap::new(),
            },
            enforce: EnforcePolicy {
                userns: Enforcement::Required,
                landlock: Enforcement::Required,
                seccomp: Enforcement::Required,
                cgroups: Enforcement::BestEffort,
            },
            tools: Vec::new(),
        }
    }

    fn controller(name: &str, writable: bool) -> ControllerInfo {
        ControllerInfo {
            name: name.to_owned(),
            version: 2,
            own_cgroup: PathBuf::from("/sys/fs/cgroup/user.slice"),
            writable,
            read_only: false,
        }
    }

    /// A fully capable host: kernel 6.12, cgroup v2 with everything delegated.
    fn good_probes() -> Probes {
        Probes {
            kernel_release: "6.12.0".to_owned(),
            arch: "x86_64",
            running_as_root: false,
            user_namespaces: Availability::Available,
            user_namespaces_unprivileged: None,
            unprivileged_userns_clone: None,
            max_user_namespaces: Some(15000),
            apparmor_restrict_unprivileged_userns: None,
            landlock_abi: Some(6),
            landlock: Availability::Available,
            seccomp: Availability::Available,
            seccomp_user_notif: Availability::Available,
            clone3: Availability::Available,
            pidfd: Availability::Available,
            idmapped_mounts: Availability::Available,
            cgroup: CgroupInfo {
                mode: CgroupMode::V2,
                controllers: ["memory", "pids", "cpu"]
                    .into_iter()
                    .map(|n| controller(n, true))
                    .collect(),
                unified_mount: Some(PathBuf::from("/sys/fs/cgroup")),
            },
        }
    }

    fn outcome(a: &Assessment, layer: Layer) -> &LayerOutcome {
        &a.layers
            .iter()
            .find(|l| l.layer == layer)
            .expect("every layer is assessed")
            .outcome
    }

    #[test]
    fn capable_host_enforces_everything() {
        let a = assess(&strict_policy(), &good_probes());
        assert!(a.can_run, "{a:?}");
        assert!(a.refusals().is_empty());
        for l in &a.layers {
            assert!(matches!(l.outcome, LayerOutcome::Enforced { .. }), "{l:?}");
        }
        let LayerOutcome::Enforced { detail } = outcome(&a, Layer::Cgroups) else {
            unreachable!()
        };
        assert_eq!(
            detail,
            "memory 512 MiB (v2), pids 64 tasks (v2), cpu 0.5 CPUs (v2)"
        );
    }

    #[test]
    fn required_landlock_below_abi_5_refuses_best_effort_is_partial() {
        let mut probes = good_probes();
        probes.landlock_abi = Some(4);
        let a = assess(&strict_policy(), &probes);
        assert!(!a.can_run);
        let LayerOutcome::Refused { reason } = outcome(&a, Layer::Landlock) else {
            panic!("{a:?}")
        };
        assert!(reason.contains("ioctl on device files"), "{reason}");
        assert!(!reason.contains("truncation"), "{reason}");
        assert!(reason.contains("best-effort"), "{reason}");

        let mut policy = strict_policy();
        policy.enforce.landlock = Enforcement::BestEffort;
        let a = assess(&policy, &probes);
        assert!(a.can_run);
        assert!(matches!(
            outcome(&a, Layer::Landlock),
            LayerOutcome::Partial { .. }
        ));
    }

    #[test]
    fn missing_landlock_carries_the_probe_reason() {
        let mut probes = good_probes();
        probes.landlock_abi = None;
        probes.landlock = Availability::Unavailable("disabled: add lsm=landlock".to_owned());
        let a = assess(&strict_policy(), &probes);
        assert_eq!(
            outcome(&a, Layer::Landlock),
            &LayerOutcome::Refused {
                reason: "disabled: add lsm=landlock".to_owned()
            }
        );
        assert_eq!(
            a.refusals(),
            vec!["landlock: disabled: add lsm=landlock".to_owned()]
        );
    }

    #[test]
    fn missing_userns_refuses_when_required_and_is_named_when_best_effort() {
        let mut probes = good_probes();
        probes.user_namespaces = Availability::Unavailable("sysctl fix".to_owned());
        assert!(!assess(&strict_policy(), &probes).can_run);
        let mut policy = strict_policy();
        policy.enforce.userns = Enforcement::BestEffort;
        let a = assess(&policy, &probes);
        assert!(a.can_run);
        assert_eq!(
            outcome(&a, Layer::Userns),
            &LayerOutcome::NotApplied {
                reason: "sysctl fix".to_owned()
            }
        );
        policy.enforce.userns = Enforcement::Off;
        assert_eq!(
            outcome(&assess(&policy, &probes), Layer::Userns),
            &LayerOutcome::Off
        );
    }

    #[test]
    fn seccomp_on_an_unsupported_architecture_is_unavailable() {
        let mut probes = good_probes();
        probes.arch = "s390x";
        let a = assess(&strict_policy(), &probes);
        let LayerOutcome::Refused { reason } = outcome(&a, Layer::Seccomp) else {
            panic!("{a:?}")
        };
        assert!(reason.contains("s390x"));
    }

    #[test]
    fn cgroups_without_write_access_are_not_applied_under_best_effort() {
        let mut probes = good_probes();
        for c in &mut probes.cgroup.controllers {
            c.writable = false;
        }
        let a = assess(&strict_policy(), &probes);
        assert!(a.can_run);
        let LayerOutcome::NotApplied { reason } = outcome(&a, Layer::Cgroups) else {
            panic!("{a:?}")
        };
        assert!(reason.contains("Delegate=yes"), "{reason}");

        let mut policy = strict_policy();
        policy.enforce.cgroups = Enforcement::Required;
        assert!(!assess(&policy, &probes).can_run);

        probes.running_as_root = true;
        let a = assess(&strict_policy(), &probes);
        let LayerOutcome::NotApplied { reason } = outcome(&a, Layer::Cgroups) else {
            panic!("{a:?}")
        };
        assert!(!reason.contains("run as root"), "{reason}");
    }

    #[test]
    fn cgroups_with_one_controller_missing_are_partial() {
        let mut probes = good_probes();
        probes.cgroup.controllers.retain(|c| c.name != "cpu");
        let a = assess(&strict_policy(), &probes);
        let LayerOutcome::Partial { detail, reason } = outcome(&a, Layer::Cgroups) else {
            panic!("{a:?}")
        };
        assert!(
            detail.contains("memory") && !detail.contains("cpu"),
            "{detail}"
        );
        assert!(reason.contains("cpu controller"), "{reason}");
    }

    #[test]
    fn policy_without_limits_needs_no_cgroup() {
        let mut policy = strict_policy();
        policy.limits.memory = None;
        policy.limits.pids = None;
        policy.limits.cpu = None;
        policy.enforce.cgroups = Enforcement::Required;
        let mut probes = good_probes();
        probes.cgroup = CgroupInfo {
            mode: CgroupMode::None,
            controllers: vec![],
            unified_mount: None,
        };
        assert!(assess(&policy, &probes).can_run);
    }

    #[test]
    fn assessment_serializes_with_flat_outcome() {
        let mut probes = good_probes();
        probes.landlock_abi = Some(3);
        let json = serde_json::to_value(assess(&strict_policy(), &probes)).unwrap();
        assert_eq!(json["profile"], "strict");
        assert_eq!(json["can_run"], false);
        assert_eq!(json["layers"][1]["layer"], "landlock");
        assert_eq!(json["layers"][1]["enforcement"], "required");
        assert_eq!(json["layers"][1]["outcome"], "refused");
        assert!(json["layers"][1]["reason"].is_string());
        let avail = serde_json::to_value(Availability::Unavailable("x".to_owned())).unwrap();
        assert_eq!(
            avail,
            serde_json::json!({"status": "unavailable", "reason": "x"})
        );
    }

    #[test]
    fn sysctl_reasons_name_the_fix_and_spare_root() {
        let off = UsernsSysctls {
            unprivileged_userns_clone: Some(false),
            ..UsernsSysctls::default()
        };
        assert!(off
            .blocking_reason(false)
            .unwrap()
            .contains("sysctl -w kernel.unprivileged_userns_clone=1"));
        assert_eq!(off.blocking_reason(true), None);

        let apparmor = UsernsSysctls {
            apparmor_restrict_unprivileged_userns: Some(true),
            ..UsernsSysctls::default()
        };
        assert!(apparmor
            .blocking_reason(false)
            .unwrap()
            .contains("AppArmor"));

        let zero = UsernsSysctls {
            max_user_namespaces: Some(0),
            ..UsernsSysctls::default()
        };
        // The count limit stops root too.
        assert!(zero
            .blocking_reason(true)
            .unwrap()
            .contains("user.max_user_namespaces=15000"));
        assert_eq!(UsernsSysctls::default().blocking_reason(false), None);
    }

    #[test]
    fn userns_errno_is_explained_when_no_sysctl_is() {
        let none = UsernsSysctls::default();
        let eperm = userns_availability(Err(ChildProbeError::Unshare(Errno::EPERM)), &none, false);
        assert!(eperm.reason().unwrap().contains("seccomp"));
        let off = UsernsSysctls {
            unprivileged_userns_clone: Some(false),
            ..none
        };
        let explained =
            userns_availability(Err(ChildProbeError::Unshare(Errno::EPERM)), &off, false);
        assert!(explained
            .reason()
            .unwrap()
            .contains("unprivileged_userns_clone=1"));
        let threads = userns_availability(Err(ChildProbeError::MultiThreaded(3)), &none, false);
        assert!(threads.reason().unwrap().contains("3 threads"));
        assert!(userns_availability(Ok(()), &off, false).is_available());
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
