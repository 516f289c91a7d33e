//! Where `sandbox` is running: a container engine, a Kubernetes pod, a user
//! namespace someone else created, another sandbox, an AppArmor-restricted
//! Ubuntu, and the sysctls that switch user namespaces off.
//!
//! One place detects this, and every refusal that the environment can
//! explain ([`Environment::explain`]) names the cause and the fix for the
//! environment detected, instead of a bare errno. Detection only chooses the
//! words of a message and doctor's findings: it never relaxes a layer, so a
//! forged marker can at worst make a message less helpful.
//!
//! Every file is read beneath a root directory ([`Environment::detect_at`]),
//! so that tests can fake a tree: a machine without AppArmor, Docker or
//! Kubernetes still has the messages for them tested against a fake
//! `/proc/sys/kernel/apparmor_restrict_unprivileged_userns`, `/.dockerenv`
//! or `/var/run/secrets/kubernetes.io`.
//!
//! Being inside another `sandbox` is recognised by PID 1's command line,
//! `sandbox-init`, which our init writes into its own memory before the
//! payload exists (see `sys::proctitle`). The payload cannot change it: it is
//! not PID 1, is not allowed to ptrace, has no capability to rewrite another
//! process's memory, and init is not dumpable. `SANDBOX_IPC_FD` or
//! `/run/sandbox` are weaker: the first disappears with `env -i`, the second
//! exists only where a mount namespace was built. A run without a pid
//! namespace is recognised by an ancestor process named `sandbox-init` or
//! `sandbox` (the supervisor), walking the parent chain.
//!
//! One file per job: `detect` (reading the situation), `explain` (the
//! refusals it explains), `userns` (why user namespaces fail, the sysctls'
//! one explanation among it).

use nix::errno::Errno;
use serde::Serialize;

use crate::sysctl::UsernsSysctls;

mod detect;
mod explain;
#[cfg(test)]
mod testing;
mod userns;

pub use detect::proc_is_masked;
pub use userns::{namespaces_withheld_here, sysctl_blocker_here};

/// A container engine, as far as it can be told from inside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "engine", rename_all = "kebab-case")]
pub enum Container {
    /// Docker (`/.dockerenv`, or `docker` in the cgroup path).
    Docker,
    /// Podman (`/run/.containerenv`, or `libpod` in the cgroup path).
    Podman {
        /// `rootless=1` in `/run/.containerenv`.
        rootless: bool,
    },
    /// Another engine that announces itself (`container=` in PID 1's
    /// environment or `/run/systemd/container`: lxc, systemd-nspawn, oci...).
    Other {
        /// The name it gives.
        name: String,
    },
}

/// A sandbox this process runs inside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outer {
    /// Another `sandbox` run.
    Sandbox,
    /// bubblewrap (`bwrap`), or Flatpak, which uses it.
    Bubblewrap,
}

/// This process's seccomp state (`/proc/self/status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SeccompState {
    /// `Seccomp:` 0 none, 1 strict, 2 filter.
    pub mode: Option<u8>,
    /// `Seccomp_filters:`, the number of filters stacked on this process.
    pub filters: Option<u32>,
    /// `NoNewPrivs:`.
    pub no_new_privs: Option<bool>,
}

/// AppArmor as it applies to this process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AppArmor {
    /// `/sys/module/apparmor/parameters/enabled` is `Y`.
    pub enabled: Option<bool>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+).
    pub restrict_unprivileged_userns: Option<bool>,
    /// This process's label (`/proc/self/attr/apparmor/current` or
    /// `/proc/self/attr/current`), e.g. `unconfined`, `docker-default (enforce)`
    /// or `sandbox (unconfined)`.
    pub label: Option<String>,
}

/// The name of the profile shipped in `packaging/apparmor/sandbox`, which
/// grants `userns`.
pub const APPARMOR_PROFILE: &str = "sandbox";

/// The profile Ubuntu moves an unconfined process into when it creates a
/// user namespace under the restriction: it denies every capability there.
const APPARMOR_RESTRICTION_PROFILE: &str = "unprivileged_userns";

impl AppArmor {
    /// A profile is attached to this process (its label is not `unconfined`).
    pub fn confined(&self) -> bool {
        self.label.as_deref().is_some_and(|l| l != "unconfined")
    }

    /// The profile's name in the label: `docker-default` of
    /// `docker-default (enforce)`; `None` when unconfined or unreadable.
    pub fn profile(&self) -> Option<&str> {
        let label = self.label.as_deref().filter(|_| self.confined())?;
        Some(label.split_once(" (").map_or(label, |(name, _)| name))
    }

    /// Whether this process's label grants `userns` under the restriction:
    /// `Some(false)` unconfined (or the restriction's own profile), which
    /// gets a namespace without capabilities; `Some(true)` our shipped
    /// profile; `None` another profile, whose rules are not known here.
    /// An unreadable label counts as unconfined: the restriction's sysctl
    /// exists only where AppArmor is on, and then an unconfined process is
    /// what has no label file (a kernel without the per-LSM attr directory).
    pub fn grants_userns(&self) -> Option<bool> {
        match self.profile() {
            None | Some(APPARMOR_RESTRICTION_PROFILE) => Some(false),
            Some(APPARMOR_PROFILE) => Some(true),
            Some(_) => None,
        }
    }

    /// The restriction stops unprivileged user namespaces for this process:
    /// it is on, and no profile (such as the one shipped in
    /// `packaging/apparmor/sandbox`) is attached that grants `userns`. A
    /// namespace can still be created; inside it every privileged step
    /// (an id map, a mount, pivot_root) is refused.
    pub fn blocks_userns(&self) -> bool {
        self.restrict_unprivileged_userns == Some(true) && self.grants_userns() == Some(false)
    }
}

/// Everything the refusal messages and doctor need to know about the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Environment {
    /// The container engine, if any.
    pub container: Option<Container>,
    /// Inside a Kubernetes pod (`KUBERNETES_SERVICE_HOST`, the service
    /// account directory, or `kubepods` in the cgroup path).
    pub kubernetes: bool,
    /// Inside another sandbox.
    pub outer: Option<Outer>,
    /// This process's user namespace is the initial one (`/proc/self/uid_map`
    /// is `0 0 4294967295`); `None` when unreadable.
    pub initial_user_namespace: Option<bool>,
    /// `/proc/self/uid_map`, one mapping per entry, spaces collapsed.
    pub uid_map: Vec<String>,
    /// `/proc/self/setgroups` (`allow` or `deny`).
    pub setgroups: Option<String>,
    /// Effective uid 0 (root of this process's user namespace).
    pub root: bool,
    /// CAP_SYS_ADMIN in this process's effective set (`CapEff:`), which
    /// exempts it from the sysctls that restrict unprivileged user
    /// namespaces; when unreadable, whether it is root.
    pub cap_sys_admin: bool,
    /// Seccomp filters already on this process.
    pub seccomp: SeccompState,
    /// AppArmor.
    pub apparmor: AppArmor,
    /// The user namespace sysctls.
    pub sysctls: UsernsSysctls,
    /// Whether `landlock` is in `/sys/kernel/security/lsm`; `None` when the
    /// list cannot be read (securityfs not mounted, as in most containers).
    pub landlock_in_lsm_list: Option<bool>,
    /// The Landlock ABI this process can use (the version query, which an
    /// outer seccomp filter may refuse); `None` without Landlock. Only
    /// [`Environment::detect`] asks the kernel; [`Environment::detect_at`]
    /// leaves it `None`. A run without namespaces needs
    /// [`crate::landlock::TARGET_ABI_NUMBER`], so a refusal names
    /// `--profile standard` only where it would run.
    pub landlock_abi: Option<u32>,
    /// Every cgroup filesystem mounted here is read-only (as containers
    /// mount them); `None` when none is mounted.
    pub cgroupfs_read_only: Option<bool>,
    /// `/proc` has paths mounted over it (a container's masked paths): the
    /// kernel then refuses a fresh `/proc` in a new pid namespace.
    pub proc_masked: bool,
}

/// A refusal the environment may explain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `clone`/`unshare` with `CLONE_NEWUSER` failed.
    UserNamespace(Errno),
    /// Init, already in its new user namespace, could not create the
    /// network, IPC and UTS namespaces (`unshare`).
    Namespaces(Errno),
    /// Writing `setgroups`, `uid_map` or `gid_map`, or switching to the
    /// mapped ids, failed.
    IdMap,
    /// A mount step failed (`mount`, `open_tree`, `mount_setattr`, pivot).
    Mount {
        /// The errno.
        errno: Errno,
        /// The step was mounting `/proc`.
        proc: bool,
        /// The step was an idmapped mount made by the supervisor (root mode).
        idmapped: bool,
        /// The step was `pivot_root`.
        pivot: bool,
    },
    /// Installing the seccomp filter failed.
    Seccomp(Errno),
    /// Applying Landlock failed.
    Landlock(Errno),
}

/// The cause of a refusal and its fix, for the environment detected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// Why, in this environment.
    pub cause: String,
    /// What to do: the exact flag, setting or command.
    pub fix: String,
}

impl Explanation {
    /// Cause and fix on one line, for a message that has its own frame.
    pub fn inline(&self) -> String {
        format!("{}; fix: {}", self.cause, self.fix)
    }
}

/// The way around a missing user namespace that needs no change outside.
pub const WITHOUT_NAMESPACES: &str =
    "or run without namespaces with a profile whose enforce.userns is \"best-effort\" \
     (`--profile standard`: Landlock, seccomp and rlimits only)";
