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
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use serde::Serialize;

use crate::sysctl::UsernsSysctls;

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

/// The way around a missing user namespace that needs no change outside.
pub const WITHOUT_NAMESPACES: &str =
    "or run without namespaces with a profile whose enforce.userns is \"best-effort\" \
     (`--profile standard`: Landlock, seccomp and rlimits only)";

impl Environment {
    /// Detect the environment of this process.
    pub fn detect() -> Environment {
        let mut env = Environment::detect_at(Path::new("/"), |name| std::env::var_os(name));
        use crate::sys::probe::{raw_probe_syscall, ProbeCall};
        env.landlock_abi = raw_probe_syscall(ProbeCall::LandlockAbiVersion)
            .ok()
            .and_then(|abi| u32::try_from(abi).ok())
            .filter(|abi| *abi >= 1);
        env
    }

    /// Detect the environment from the files beneath `root` (`/` for the
    /// real one) and the variables `var` returns.
    pub fn detect_at(root: &Path, var: impl Fn(&str) -> Option<OsString>) -> Environment {
        let read = |path: &str| std::fs::read_to_string(beneath(root, path)).ok();
        let exists = |path: &str| beneath(root, path).exists();
        let cgroup_paths = read("/proc/self/cgroup").unwrap_or_default()
            + &read("/proc/1/cgroup").unwrap_or_default();
        let pid1_environ = std::fs::read(beneath(root, "/proc/1/environ")).unwrap_or_default();
        let announced = pid1_environ
            .split(|b| *b == 0)
            .find_map(|entry| entry.strip_prefix(b"container="))
            .map(|value| String::from_utf8_lossy(value).into_owned())
            .or_else(|| read("/run/systemd/container").map(|s| s.trim().to_owned()))
            .filter(|s| !s.is_empty());
        let containerenv = read("/run/.containerenv");
        let container = if exists("/.dockerenv") || announced.as_deref() == Some("docker") {
            Some(Container::Docker)
        } else if containerenv.is_some() || announced.as_deref() == Some("podman") {
            Some(Container::Podman {
                rootless: containerenv
                    .as_deref()
                    .is_some_and(|c| c.lines().any(|l| l.trim() == "rootless=1")),
            })
        } else if let Some(name) = announced {
            Some(Container::Other { name })
        } else if in_docker_cgroup(&cgroup_paths) {
            Some(Container::Docker)
        } else if cgroup_paths.contains("libpod") {
            Some(Container::Podman { rootless: false })
        } else {
            None
        };
        let kubernetes = var("KUBERNETES_SERVICE_HOST").is_some()
            || exists("/var/run/secrets/kubernetes.io")
            || exists("/run/secrets/kubernetes.io")
            || cgroup_paths.contains("kubepods");

        let uid_map: Vec<String> = read("/proc/self/uid_map")
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|l| !l.is_empty())
            .collect();
        let initial_user_namespace = (!uid_map.is_empty()).then(|| uid_map == ["0 0 4294967295"]);
        let status = read("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        let is_root = match field("Uid:") {
            // The effective uid is the second field.
            Some(uids) => uids.split_whitespace().nth(1) == Some("0"),
            None => nix::unistd::geteuid().is_root(),
        };
        // CAP_SYS_ADMIN is bit 21 of the hexadecimal effective set.
        let cap_sys_admin = field("CapEff:")
            .and_then(|caps| u64::from_str_radix(&caps, 16).ok())
            .map_or(is_root, |caps| caps & (1 << 21) != 0);
        let seccomp = SeccompState {
            mode: field("Seccomp:").and_then(|v| v.parse().ok()),
            filters: field("Seccomp_filters:").and_then(|v| v.parse().ok()),
            no_new_privs: field("NoNewPrivs:").map(|v| v == "1"),
        };
        let label = read("/proc/self/attr/apparmor/current")
            .or_else(|| read("/proc/self/attr/current"))
            .map(|l| l.trim_end_matches(['\n', '\0']).trim().to_owned())
            .filter(|l| !l.is_empty());
        let sysctls = UsernsSysctls::read_at(root);
        let apparmor = AppArmor {
            enabled: read("/sys/module/apparmor/parameters/enabled").map(|v| v.trim() == "Y"),
            restrict_unprivileged_userns: sysctls.apparmor_restrict_unprivileged_userns,
            label,
        };
        let landlock_in_lsm_list = read("/sys/kernel/security/lsm")
            .map(|list| list.trim().split(',').any(|lsm| lsm == "landlock"));
        let mountinfo = read("/proc/self/mountinfo").unwrap_or_default();
        let (cgroupfs_read_only, proc_masked) = mounts(&mountinfo);
        Environment {
            container,
            kubernetes,
            outer: outer_sandbox(root, seccomp),
            initial_user_namespace,
            uid_map,
            setgroups: read("/proc/self/setgroups").map(|s| s.trim().to_owned()),
            root: is_root,
            cap_sys_admin,
            seccomp,
            apparmor,
            sysctls,
            landlock_in_lsm_list,
            landlock_abi: None,
            cgroupfs_read_only,
            proc_masked,
        }
    }

    /// Root of a user namespace that is not the initial one (`unshare -r`,
    /// rootless Podman, a CI container with a mapped range).
    pub fn root_in_child_user_namespace(&self) -> bool {
        self.root && self.initial_user_namespace == Some(false)
    }

    /// A short description for doctor, e.g. `Docker container, Kubernetes pod`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        match &self.container {
            Some(Container::Docker) => parts.push("Docker container".to_owned()),
            Some(Container::Podman { rootless: true }) => {
                parts.push("rootless Podman container".to_owned())
            }
            Some(Container::Podman { rootless: false }) => {
                parts.push("Podman container".to_owned())
            }
            Some(Container::Other { name }) => parts.push(format!("{name} container")),
            None => {}
        }
        if self.kubernetes {
            parts.push("Kubernetes pod".to_owned());
        }
        match self.outer {
            Some(Outer::Sandbox) => parts.push("inside another sandbox".to_owned()),
            Some(Outer::Bubblewrap) => parts.push("inside bubblewrap".to_owned()),
            None => {}
        }
        if self.initial_user_namespace == Some(false) {
            parts.push(format!(
                "{} of a child user namespace (uid_map {})",
                if self.root { "root" } else { "a user" },
                self.uid_map.join(", ")
            ));
        }
        if self.seccomp.mode == Some(2) {
            parts.push(format!(
                "{} seccomp filter(s) already applied",
                self.seccomp.filters.unwrap_or(1)
            ));
        }
        if self.apparmor.blocks_userns() && !self.cap_sys_admin {
            parts.push("AppArmor restricts unprivileged user namespaces".to_owned());
        } else if let Some(label) = self
            .apparmor
            .label
            .as_deref()
            .filter(|_| self.apparmor.confined())
        {
            parts.push(format!("AppArmor label {label}"));
        }
        if self.cgroupfs_read_only == Some(true) {
            parts.push("cgroup filesystem read-only".to_owned());
        }
        if parts.is_empty() {
            "a host with no container, outer sandbox or restriction detected".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// The cause and fix of `refusal` here, when the environment explains it.
    pub fn explain(&self, refusal: &Refusal) -> Option<Explanation> {
        match refusal {
            Refusal::UserNamespace(errno) => self.userns_blocker(*errno, true),
            // A container's seccomp profile stops the clone, never the maps.
            Refusal::IdMap => self
                .child_namespace_root()
                .or_else(|| self.userns_blocker(Errno::EPERM, false)),
            Refusal::Mount {
                errno,
                proc,
                idmapped,
                pivot,
            } => self.mount_blocker(*errno, *proc, *idmapped, *pivot),
            Refusal::Seccomp(errno) => self.seccomp_blocker(*errno),
            Refusal::Landlock(errno) => self.landlock_blocker(*errno),
        }
    }

    /// Known before clone: a user namespace can be created here but holds no
    /// capabilities (Ubuntu's AppArmor restriction for a process no profile
    /// grants `userns`), so the set-up of the sandbox's root would be
    /// refused. `None` when nothing known stops it.
    pub fn namespaces_withheld(&self) -> Option<Explanation> {
        if self.cap_sys_admin {
            return None;
        }
        self.namespaces_withheld_unprivileged()
    }

    /// [`Environment::namespaces_withheld`] for an unprivileged process with
    /// this process's AppArmor label (what root's probe as `nobody` gets).
    pub fn namespaces_withheld_unprivileged(&self) -> Option<Explanation> {
        self.apparmor
            .blocks_userns()
            .then(|| self.apparmor_blocker())
    }

    /// The way around missing namespaces that needs no change outside, as
    /// the tail of a fix: `--profile standard` where a run without
    /// namespaces starts (it needs Landlock at the ABI that also scopes
    /// signals and abstract sockets), else why it would not.
    fn or_without_namespaces(&self) -> String {
        let target = crate::landlock::TARGET_ABI_NUMBER;
        match self.landlock_abi {
            Some(abi) if abi >= target => format!(", {WITHOUT_NAMESPACES}"),
            abi => format!(
                " (`--profile standard` would be refused too: without namespaces Landlock is the \
                 only filesystem boundary, which needs Landlock ABI {target} (Linux 6.12+), and \
                 {})",
                abi.map_or_else(
                    || "Landlock is unavailable to this process".to_owned(),
                    |abi| format!("this kernel offers ABI {abi}")
                )
            ),
        }
    }

    fn apparmor_blocker(&self) -> Explanation {
        let label = self.apparmor.label.as_deref().unwrap_or("unconfined");
        Explanation {
            cause: format!(
                "AppArmor restricts unprivileged user namespaces \
                 (kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 23.10+) and no AppArmor \
                 profile grants `userns` to sandbox (its label is `{label}`): a new user namespace \
                 gets no capabilities, so its id maps, mounts and pivot_root are refused"
            ),
            fix: format!(
                "install the AppArmor profile from packaging/apparmor/sandbox, with the binary's \
                 real path in it (`sudo install -m 644 packaging/apparmor/sandbox \
                 /etc/apparmor.d/sandbox && sudo apparmor_parser -r /etc/apparmor.d/sandbox`), \
                 or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`{}",
                self.or_without_namespaces()
            ),
        }
    }

    /// Why user namespaces cannot be had here, most specific cause first.
    fn userns_blocker(&self, errno: Errno, containers: bool) -> Option<Explanation> {
        let alt = self.or_without_namespaces();
        if self.sysctls.max_user_namespaces == Some(0) {
            return Some(Explanation {
                cause: "user.max_user_namespaces is 0 in this user namespace".into(),
                fix: format!(
                    "`sysctl -w user.max_user_namespaces=15000` (as root of this namespace){alt}"
                ),
            });
        }
        match self.outer {
            Some(Outer::Sandbox) => {
                let inner = if alt.starts_with(", ") {
                    "run the inner sandbox with a profile whose enforce.userns is \"best-effort\" \
                     (`--profile standard`), which uses the Landlock and seccomp layers the outer \
                     one leaves, or run the command under the outer sandbox alone"
                        .to_owned()
                } else {
                    format!("run the command under the outer sandbox alone{alt}")
                };
                return Some(Explanation {
                    cause: "this runs inside another sandbox, whose seccomp filter forbids new \
                            user namespaces"
                        .into(),
                    fix: inner,
                });
            }
            Some(Outer::Bubblewrap) if errno == Errno::EPERM || errno == Errno::ENOSPC => {
                return Some(Explanation {
                    cause: "this runs inside bubblewrap, which forbids new user namespaces \
                            here (`--disable-userns`, or a seccomp filter given with `--seccomp`)"
                        .into(),
                    fix: format!(
                        "start bwrap without `--disable-userns` and without a filter that \
                         blocks CLONE_NEWUSER{alt}"
                    ),
                });
            }
            _ => {}
        }
        if !self.cap_sys_admin && self.sysctls.unprivileged_userns_clone == Some(false) {
            return Some(Explanation {
                cause: "kernel.unprivileged_userns_clone is 0: user namespaces are disabled for \
                        unprivileged users"
                    .into(),
                fix: format!("`sudo sysctl -w kernel.unprivileged_userns_clone=1`{alt}"),
            });
        }
        if let Some(explanation) = self.namespaces_withheld() {
            return Some(explanation);
        }
        if !containers {
            return None;
        }
        if errno == Errno::EPERM {
            if let Some(explanation) = self.container_blocker(Blocked::UserNamespace) {
                return Some(explanation);
            }
            if self.seccomp.mode == Some(2) {
                return Some(Explanation {
                    cause: format!(
                        "a seccomp filter on this process ({} stacked, inherited from what \
                         started sandbox) forbids new user namespaces",
                        self.seccomp.filters.unwrap_or(1)
                    ),
                    fix: format!(
                        "start sandbox outside that filter, or allow clone, clone3 and unshare \
                         with CLONE_NEWUSER in it{alt}"
                    ),
                });
            }
        }
        match errno {
            Errno::ENOSPC => Some(Explanation {
                cause: format!(
                    "the user namespace limit is reached (user.max_user_namespaces={}), or \
                     namespaces are nested 32 deep",
                    self.sysctls
                        .max_user_namespaces
                        .map_or_else(|| "unknown".to_owned(), |n| n.to_string())
                ),
                fix: format!("raise `user.max_user_namespaces`{alt}"),
            }),
            Errno::EUSERS => Some(Explanation {
                cause: "user namespaces are nested 32 deep, the kernel's limit".into(),
                fix: format!("start sandbox from a shallower namespace{alt}"),
            }),
            Errno::EINVAL | Errno::ENOSYS => Some(Explanation {
                cause: "the kernel has no user namespaces (built without CONFIG_USER_NS)".into(),
                fix: format!("use a kernel with CONFIG_USER_NS{alt}"),
            }),
            _ => None,
        }
    }

    /// The `docker run` or `podman run` options this container needs for
    /// namespaces, all at once: each one alone only moves the refusal to
    /// the next step. `seccomp`: the engine's default seccomp profile is in
    /// the way (it forbids CLONE_NEWUSER, and pivot_root even with
    /// `--cap-add SYS_ADMIN`); the masked paths when /proc has them; AppArmor
    /// when the engine's profile is attached (it forbids mount).
    fn engine_options(&self, seccomp: bool) -> Option<String> {
        let (command, unmask) = match self.container.as_ref()? {
            Container::Docker => ("docker run", "systempaths=unconfined"),
            Container::Podman { .. } => ("podman run", "unmask=ALL"),
            Container::Other { .. } => return None,
        };
        let mut options = Vec::new();
        if seccomp {
            options.push("seccomp=unconfined");
        }
        if self.proc_masked {
            options.push(unmask);
        }
        if self.engine_apparmor() {
            options.push("apparmor=unconfined");
        }
        let options: Vec<String> = options
            .iter()
            .map(|o| format!("--security-opt {o}"))
            .collect();
        Some(format!("`{command} {}`", options.join(" ")))
    }

    /// The container engine's own AppArmor profile is attached.
    fn engine_apparmor(&self) -> bool {
        self.apparmor
            .label
            .as_deref()
            .is_some_and(|l| l.starts_with("docker-default") || l.starts_with("containers-default"))
    }

    /// A container engine's default seccomp profile forbids what `blocked` names.
    fn container_blocker(&self, blocked: Blocked) -> Option<Explanation> {
        let alt = self.or_without_namespaces();
        let what = blocked.describe();
        if self.kubernetes {
            return Some(Explanation {
                cause: format!("the pod's seccomp profile (RuntimeDefault) forbids {what}"),
                fix: format!(
                    "set the container's `securityContext.seccompProfile.type: Unconfined` and \
                     `procMount: Unmasked`, and run the pod in its own user namespace with \
                     `hostUsers: false`{}{alt}",
                    if self.engine_apparmor() {
                        " (and `securityContext.appArmorProfile.type: Unconfined`)"
                    } else {
                        ""
                    }
                ),
            });
        }
        let engine = match self.container.as_ref()? {
            Container::Docker => "Docker",
            Container::Podman { .. } => "Podman",
            Container::Other { name } => {
                return Some(Explanation {
                    cause: format!(
                        "this runs in a {name} container whose seccomp profile or capability set \
                         forbids {what}"
                    ),
                    fix: format!(
                        "run the container with a seccomp profile that allows clone, clone3, \
                         unshare, mount and pivot_root (or none){alt}"
                    ),
                });
            }
        };
        let options = self.engine_options(true)?;
        Some(Explanation {
            cause: format!("{engine}'s default seccomp profile forbids {what}"),
            fix: format!(
                "{options} (or a seccomp profile that allows clone, clone3, unshare, mount and \
                 pivot_root){alt}"
            ),
        })
    }

    /// Root of a child user namespace: its mapping is someone else's.
    fn child_namespace_root(&self) -> Option<Explanation> {
        if !self.root_in_child_user_namespace() {
            return None;
        }
        Some(Explanation {
            cause: format!(
                "sandbox runs as root of a child user namespace (uid_map {}, setgroups {}), \
                 not as host root, so it cannot map a host uid of its own choosing",
                self.uid_map.join(", "),
                self.setgroups.as_deref().unwrap_or("unknown")
            ),
            fix: format!(
                "start sandbox outside that namespace, as the user who created it{}",
                self.or_without_namespaces()
            ),
        })
    }

    fn mount_blocker(
        &self,
        errno: Errno,
        proc: bool,
        idmapped: bool,
        pivot: bool,
    ) -> Option<Explanation> {
        if errno != Errno::EPERM && errno != Errno::EACCES {
            return None;
        }
        let alt = self.or_without_namespaces();
        if idmapped {
            if let Some(explanation) = self.child_namespace_root() {
                return Some(Explanation {
                    cause: format!(
                        "{}; idmapped mounts need root of the initial user namespace",
                        explanation.cause
                    ),
                    fix: explanation.fix,
                });
            }
        }
        // Checked first: the user namespace was made, so an outer sandbox
        // did not forbid it; what stops /proc is what sits over the outer one.
        if proc && self.proc_masked {
            let engine = self
                .engine_options(self.seccomp.mode == Some(2))
                .filter(|_| self.outer.is_none() && !self.kubernetes);
            let fix = if self.outer == Some(Outer::Bubblewrap) {
                "bubblewrap started by root covers /proc/irq and /proc/bus (and /proc/sys) \
                 read-only: run bwrap as a regular user"
                    .to_owned()
            } else if self.outer == Some(Outer::Sandbox) {
                "the outer sandbox covers paths of its /proc".to_owned()
            } else if self.kubernetes {
                "set the container's `securityContext.procMount: Unmasked` (with `hostUsers: false`)"
                    .to_owned()
            } else if let Some(options) = engine {
                options
            } else {
                "start sandbox where /proc has no paths mounted over it".to_owned()
            };
            return Some(Explanation {
                cause: "/proc here has paths mounted over it (a container's masked paths, or an \
                        outer sandbox's read-only covers), and the kernel refuses a fresh /proc \
                        for a new pid namespace then"
                    .into(),
                fix: format!("{fix}{alt}"),
            });
        }
        if let Some(explanation) = self.namespaces_withheld() {
            return Some(explanation);
        }
        if self.outer.is_some() {
            return self.userns_blocker(errno, false);
        }
        if let Some(profile) = self.apparmor.profile() {
            if !self.engine_apparmor() {
                return Some(Explanation {
                    cause: format!("the AppArmor profile `{profile}` forbids mounting"),
                    fix: format!(
                        "run sandbox under a profile that allows mount and pivot_root \
                         (packaging/apparmor/sandbox){alt}"
                    ),
                });
            }
            // The engine's profile. Under the engine's seccomp profile too
            // (a filter is on), pivot_root is refused next: named at once.
            let filtered = self.seccomp.mode == Some(2);
            let next = if filtered {
                ", and the engine's default seccomp profile forbids pivot_root, which comes next"
            } else {
                ""
            };
            let fix = if self.kubernetes {
                format!(
                    "set the container's `securityContext.appArmorProfile.type: Unconfined`{}",
                    if filtered {
                        " and `securityContext.seccompProfile.type: Unconfined`"
                    } else {
                        ""
                    }
                )
            } else {
                self.engine_options(filtered)?
            };
            return Some(Explanation {
                cause: format!("the AppArmor profile `{profile}` forbids mounting{next}"),
                fix: format!("{fix}{alt}"),
            });
        }
        // An engine's default seccomp profile refuses clone(CLONE_NEWUSER)
        // without CAP_SYS_ADMIN and lets mount through with it: once the
        // namespace was made, only pivot_root can be its refusal.
        if pivot && (self.container.is_some() || self.kubernetes) {
            return self.container_blocker(Blocked::Pivot);
        }
        if self.seccomp.mode == Some(2) {
            return Some(Explanation {
                cause: format!(
                    "a seccomp filter on this process ({} stacked, inherited from what started \
                     sandbox) refuses {}",
                    self.seccomp.filters.unwrap_or(1),
                    if pivot { "pivot_root" } else { "mount" }
                ),
                fix: format!(
                    "start sandbox outside that filter, or allow mount, umount2 and pivot_root \
                     in it{alt}"
                ),
            });
        }
        None
    }

    fn seccomp_blocker(&self, errno: Errno) -> Option<Explanation> {
        let stacked = self.seccomp.filters.filter(|n| *n > 0)?;
        let outer = match (self.outer, &self.container, self.kubernetes) {
            (Some(Outer::Sandbox), _, _) => "the outer sandbox",
            (Some(Outer::Bubblewrap), _, _) => "bubblewrap",
            (_, _, true) => "the pod",
            (_, Some(_), _) => "the container",
            _ => "the process that started sandbox",
        };
        let cause = if errno == Errno::ENOMEM {
            format!(
                "{stacked} seccomp filter(s) from {outer} are already stacked on this process, \
                 and with this profile's the kernel's limit on stacked filter length is passed"
            )
        } else {
            format!(
                "{stacked} seccomp filter(s) from {outer} are already stacked on this process, and \
                 they refuse the seccomp system call or this filter"
            )
        };
        // permissive's seccomp is best-effort, but only with namespaces: a
        // run without them needs its filter to close the host's network.
        let namespaces_blocked = self.userns_blocker(Errno::EPERM, false).is_some()
            || self.container_blocker(Blocked::UserNamespace).is_some();
        let permissive = if !namespaces_blocked {
            "run with `--profile permissive` (its enforce.seccomp is \"best-effort\"; the outer \
             filter still applies), set enforce.seccomp = \"best-effort\" in a profile of your \
             own, or start sandbox outside it"
        } else {
            "start sandbox outside it: without namespaces every profile needs its own filter, \
             which closes the host's network and IPC"
        };
        Some(Explanation {
            cause,
            fix: permissive.into(),
        })
    }

    fn landlock_blocker(&self, errno: Errno) -> Option<Explanation> {
        let best_effort = "or set enforce.landlock = \"best-effort\"";
        if errno == Errno::EOPNOTSUPP || self.landlock_in_lsm_list == Some(false) {
            return Some(Explanation {
                cause: "Landlock is built into the kernel but not enabled (not in the lsm= list)"
                    .into(),
                fix: format!("add `landlock` to the `lsm=` kernel boot parameter, {best_effort}"),
            });
        }
        if errno == Errno::ENOSYS && (self.container.is_some() || self.kubernetes) {
            return Some(Explanation {
                cause: "the container's seccomp profile does not know the Landlock system calls \
                        and answers ENOSYS (Docker before 23.0, older containerd and Podman)"
                    .into(),
                fix: format!(
                    "update the container engine, or run the container with \
                     `--security-opt seccomp=unconfined`, {best_effort}"
                ),
            });
        }
        // The kernel has it (securityfs lists it), or a filter that could
        // hide it is stacked here: the filter, not the kernel, is the cause.
        let hidden = self.landlock_in_lsm_list == Some(true) || self.seccomp.mode == Some(2);
        if hidden && (errno == Errno::ENOSYS || errno == Errno::EPERM) {
            let kernel = if self.landlock_in_lsm_list == Some(true) {
                "this kernel has Landlock (it is in /sys/kernel/security/lsm), but"
            } else {
                "the kernel may have Landlock, but"
            };
            return Some(Explanation {
                cause: format!(
                    "{kernel} a seccomp filter on this process ({} stacked, inherited from what \
                     started sandbox) answers the Landlock system calls with {errno}",
                    self.seccomp.filters.unwrap_or(1)
                ),
                fix: format!(
                    "start sandbox outside that filter, or allow landlock_create_ruleset, \
                     landlock_add_rule and landlock_restrict_self in it, {best_effort}"
                ),
            });
        }
        if errno == Errno::ENOSYS {
            return Some(Explanation {
                cause: "the kernel has no Landlock (older than 5.13 or built without \
                        CONFIG_SECURITY_LANDLOCK)"
                    .into(),
                fix: format!("use Linux 6.12+ with Landlock enabled, {best_effort}"),
            });
        }
        None
    }
}

/// What a container's seccomp profile refused.
#[derive(Debug, Clone, Copy)]
enum Blocked {
    UserNamespace,
    Pivot,
}

impl Blocked {
    fn describe(self) -> &'static str {
        match self {
            Blocked::UserNamespace => "new user namespaces (clone and unshare with CLONE_NEWUSER)",
            Blocked::Pivot => {
                "pivot_root (even with `--cap-add SYS_ADMIN`, which lets mount through)"
            }
        }
    }
}

/// Whether a cgroup path in `/proc/*/cgroup` lines is a Docker
/// container's: `/docker/<id>` (cgroupfs driver) or
/// `docker-<id>.scope` (systemd driver). A process of the docker.service
/// unit, or one started by `dockerd` on a host, is in no container.
fn in_docker_cgroup(cgroup_lines: &str) -> bool {
    cgroup_lines.lines().any(|line| {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        let parts: Vec<&str> = path.split('/').collect();
        parts
            .windows(2)
            .any(|w| w[0] == "docker" && !w[1].is_empty())
            || parts
                .iter()
                .any(|p| p.starts_with("docker-") && p.ends_with(".scope"))
    })
}

/// `path` (absolute) beneath `root`.
fn beneath(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// Whether a mount at `mount_point` keeps the kernel from mounting a fresh
/// /proc in a new user namespace (`mnt_already_visible`: every mount over
/// a proc mount must sit on one of procfs's own empty mount-point
/// directories, and binfmt_misc's is the only such directory).
fn masks_proc(mount_point: &str) -> bool {
    mount_point.starts_with("/proc/") && mount_point != "/proc/sys/fs/binfmt_misc"
}

/// [`Environment::namespaces_withheld`] for this process, cheaply: the
/// whole environment is read only where the AppArmor restriction is on.
pub fn namespaces_withheld_here() -> Option<Explanation> {
    let sysctls = UsernsSysctls::read_at(Path::new("/"));
    if sysctls.apparmor_restrict_unprivileged_userns != Some(true) {
        return None;
    }
    Environment::detect().namespaces_withheld()
}

/// Whether this mount namespace's /proc has paths mounted over it, as
/// container engines do: a sandbox with a new pid namespace cannot mount
/// its own /proc then. One read of /proc/self/mountinfo.
pub fn proc_is_masked() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|text| mounts(&text).1)
}

/// `(every cgroup filesystem is read-only, /proc has mounts over it)`.
fn mounts(mountinfo: &str) -> (Option<bool>, bool) {
    let mut cgroup_seen = false;
    let mut cgroup_writable = false;
    let mut proc_masked = false;
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split_whitespace().collect();
        let (Some(mount_point), Some(options)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        let fstype = after.split_whitespace().next().unwrap_or("");
        if fstype == "cgroup" || fstype == "cgroup2" {
            cgroup_seen = true;
            if options.split(',').any(|o| o == "rw") {
                cgroup_writable = true;
            }
        }
        if masks_proc(mount_point) {
            proc_masked = true;
        }
    }
    (cgroup_seen.then_some(!cgroup_writable), proc_masked)
}

/// An outer sandbox: PID 1's command line, else an ancestor's name. An
/// ancestor named `sandbox` counts only for a process that carries a seccomp
/// filter and `no_new_privs`, as everything a sandbox runs does: `sandbox
/// serve` is the unsandboxed parent of its skill hosts.
fn outer_sandbox(root: &Path, seccomp: SeccompState) -> Option<Outer> {
    let filtered = seccomp.mode == Some(2) && seccomp.no_new_privs == Some(true);
    let pid1 = std::fs::read(beneath(root, "/proc/1/cmdline")).unwrap_or_default();
    let argv0 = pid1.split(|b| *b == 0).next().unwrap_or_default();
    if argv0 == b"sandbox-init" {
        return Some(Outer::Sandbox);
    }
    if argv0.rsplit(|b| *b == b'/').next() == Some(b"bwrap".as_slice())
        || beneath(root, "/.flatpak-info").exists()
    {
        return Some(Outer::Bubblewrap);
    }
    // Without a pid namespace the outer supervisor is an ancestor.
    let mut pid = parent_of(root, "self")?;
    for _ in 0..64 {
        if pid <= 1 {
            return None;
        }
        let comm = std::fs::read_to_string(beneath(root, &format!("/proc/{pid}/comm")))
            .unwrap_or_default();
        match comm.trim() {
            "sandbox-init" => return Some(Outer::Sandbox),
            "sandbox" if filtered => return Some(Outer::Sandbox),
            "bwrap" => return Some(Outer::Bubblewrap),
            _ => {}
        }
        pid = parent_of(root, &pid.to_string())?;
    }
    None
}

fn parent_of(root: &Path, pid: &str) -> Option<u32> {
    let stat = std::fs::read_to_string(beneath(root, &format!("/proc/{pid}/stat"))).ok()?;
    // The name (field 2) may hold spaces and parentheses; ppid is the second
    // field after its closing parenthesis.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    //! Every environment here is a faked tree: the machine the tests run on
    //! has no AppArmor, no Kubernetes and no Podman, so their detection and
    //! messages are checked against the files those would leave.
    use super::*;

    /// A faked root: `files` are (absolute path, content).
    struct Tree(tempfile::TempDir);

    impl Tree {
        fn new(files: &[(&str, &str)]) -> Tree {
            let tree = Tree(tempfile::tempdir().expect("tempdir"));
            // An unprivileged process in the initial user namespace, no filter.
            tree.write("/proc/self/uid_map", "         0          0 4294967295\n");
            tree.write(
                "/proc/self/status",
                "Name:\tsandbox\nUid:\t1000\t1000\t1000\t1000\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n",
            );
            for (path, content) in files {
                tree.write(path, content);
            }
            tree
        }

        fn write(&self, path: &str, content: &str) {
            let path = beneath(self.0.path(), path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, content).expect("write");
        }

        fn detect(&self) -> Environment {
            self.detect_with(&[])
        }

        fn detect_with(&self, vars: &[(&str, &str)]) -> Environment {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let mut env = Environment::detect_at(self.0.path(), |name| {
                vars.iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| OsString::from(v))
            });
            // A kernel on which a run without namespaces starts, unless a
            // test says otherwise.
            env.landlock_abi = Some(crate::landlock::TARGET_ABI_NUMBER);
            env
        }
    }

    const ROOT_STATUS: &str =
        "Uid:\t0\t0\t0\t0\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n";
    const FILTERED_STATUS: &str =
        "Uid:\t1000\t1000\t1000\t1000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";

    fn clone_eperm(env: &Environment) -> Explanation {
        env.explain(&Refusal::UserNamespace(Errno::EPERM))
            .expect("explained")
    }

    #[test]
    fn a_plain_host_explains_nothing_it_cannot_see() {
        let env = Tree::new(&[]).detect();
        assert_eq!(env.container, None);
        assert!(!env.kubernetes);
        assert_eq!(env.outer, None);
        assert_eq!(env.initial_user_namespace, Some(true));
        assert!(!env.root);
        assert_eq!(env.explain(&Refusal::UserNamespace(Errno::EPERM)), None);
        assert_eq!(env.explain(&Refusal::IdMap), None);
        assert!(env.summary().contains("no container"));
    }

    #[test]
    fn docker_names_its_seccomp_flag_and_the_no_namespace_profile() {
        let env = Tree::new(&[("/.dockerenv", "")]).detect();
        assert_eq!(env.container, Some(Container::Docker));
        let why = clone_eperm(&env);
        assert!(
            why.cause.contains("Docker's default seccomp profile"),
            "{why:?}"
        );
        assert!(
            why.fix
                .contains("docker run --security-opt seccomp=unconfined"),
            "{why:?}"
        );
        assert!(!why.fix.contains("apparmor"), "{why:?}");
        assert!(
            why.fix.contains("enforce.userns is \"best-effort\""),
            "{why:?}"
        );

        // With Docker's AppArmor profile on us, both options are needed.
        let env = Tree::new(&[
            ("/.dockerenv", ""),
            ("/proc/self/attr/current", "docker-default (enforce)\n"),
        ])
        .detect();
        assert!(clone_eperm(&env)
            .fix
            .contains("seccomp=unconfined --security-opt apparmor=unconfined"));
        let mount = env
            .explain(&Refusal::Mount {
                errno: Errno::EPERM,
                proc: false,
                idmapped: false,
                pivot: false,
            })
            .expect("explained");
        assert!(mount.cause.contains("docker-default"), "{mount:?}");
    }

    #[test]
    fn docker_is_also_found_by_its_cgroup_path() {
        let env = Tree::new(&[("/proc/self/cgroup", "0::/docker/0123abcd\n")]).detect();
        assert_eq!(env.container, Some(Container::Docker));
    }

    #[test]
    fn podman_rootless_and_masked_proc() {
        let env = Tree::new(&[
            (
                "/run/.containerenv",
                "engine=\"podman-4.3.1\"\nrootless=1\n",
            ),
            (
                "/proc/self/mountinfo",
                "22 27 0:21 / /proc rw - proc proc rw\n\
                 40 22 0:40 /null /proc/kcore ro - tmpfs tmpfs ro\n\
                 41 23 0:41 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 ro\n",
            ),
        ])
        .detect();
        assert_eq!(env.container, Some(Container::Podman { rootless: true }));
        assert!(env.proc_masked);
        assert_eq!(env.cgroupfs_read_only, Some(true));
        assert!(clone_eperm(&env)
            .fix
            .contains("podman run --security-opt seccomp=unconfined"));
        let proc = env
            .explain(&Refusal::Mount {
                errno: Errno::EPERM,
                proc: true,
                idmapped: false,
                pivot: false,
            })
            .expect("explained");
        assert!(proc.fix.contains("unmask=ALL"), "{proc:?}");
    }

    #[test]
    fn kubernetes_names_the_security_context() {
        for env in [
            Tree::new(&[]).detect_with(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")]),
            Tree::new(&[("/var/run/secrets/kubernetes.io/serviceaccount/token", "x")]).detect(),
            Tree::new(&[("/proc/self/cgroup", "0::/kubepods/burstable/pod1/abc\n")]).detect(),
        ] {
            assert!(env.kubernetes, "{env:?}");
            let why = clone_eperm(&env);
            assert!(
                why.fix.contains("seccompProfile.type: Unconfined"),
                "{why:?}"
            );
            assert!(why.fix.contains("hostUsers: false"), "{why:?}");
        }
    }

    #[test]
    fn other_engines_announce_themselves() {
        let env = Tree::new(&[("/run/systemd/container", "systemd-nspawn\n")]).detect();
        assert_eq!(
            env.container,
            Some(Container::Other {
                name: "systemd-nspawn".into()
            })
        );
        assert!(clone_eperm(&env).cause.contains("systemd-nspawn container"));
    }

    #[test]
    fn ubuntu_apparmor_restriction_names_the_shipped_profile_and_the_sysctl() {
        let restricted = Tree::new(&[
            (
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
                "1\n",
            ),
            ("/sys/module/apparmor/parameters/enabled", "Y\n"),
            ("/proc/self/attr/apparmor/current", "unconfined\n"),
        ]);
        let env = restricted.detect();
        assert_eq!(env.apparmor.enabled, Some(true));
        assert!(env.apparmor.blocks_userns());
        // Ubuntu lets the clone through and withholds the capabilities, so
        // the refusal shows as an id map or mount failure as well.
        for refusal in [
            Refusal::UserNamespace(Errno::EPERM),
            Refusal::IdMap,
            Refusal::Mount {
                errno: Errno::EPERM,
                proc: false,
                idmapped: false,
                pivot: false,
            },
        ] {
            let why = env.explain(&refusal).expect("explained");
            assert!(why.cause.contains("AppArmor restricts"), "{why:?}");
            assert!(why.fix.contains("packaging/apparmor/sandbox"), "{why:?}");
            assert!(
                why.fix
                    .contains("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
                "{why:?}"
            );
        }
        assert!(env.summary().contains("AppArmor restricts"));

        // Our profile attached: the restriction no longer applies to us.
        restricted.write("/proc/self/attr/apparmor/current", "sandbox (unconfined)\n");
        let env = restricted.detect();
        assert!(!env.apparmor.blocks_userns());
        assert_eq!(env.explain(&Refusal::UserNamespace(Errno::EPERM)), None);

        // Root is not subject to it.
        restricted.write("/proc/self/attr/apparmor/current", "unconfined\n");
        restricted.write("/proc/self/status", ROOT_STATUS);
        assert_eq!(
            restricted
                .detect()
                .explain(&Refusal::UserNamespace(Errno::EPERM)),
            None
        );
    }

    #[test]
    fn userns_sysctls_come_first_and_spare_root_where_the_kernel_does() {
        let env = Tree::new(&[
            ("/.dockerenv", ""),
            ("/proc/sys/user/max_user_namespaces", "0\n"),
        ])
        .detect();
        let why = env
            .explain(&Refusal::UserNamespace(Errno::ENOSPC))
            .expect("explained");
        assert!(why.cause.contains("max_user_namespaces is 0"), "{why:?}");

        let off = Tree::new(&[("/proc/sys/kernel/unprivileged_userns_clone", "0\n")]);
        assert!(clone_eperm(&off.detect())
            .fix
            .contains("kernel.unprivileged_userns_clone=1"));
        off.write("/proc/self/status", ROOT_STATUS);
        assert_eq!(
            off.detect().explain(&Refusal::UserNamespace(Errno::EPERM)),
            None
        );
    }

    #[test]
    fn nested_in_sandbox_by_pid1_or_by_ancestor() {
        let by_pid1 = Tree::new(&[
            ("/proc/1/cmdline", "sandbox-init\0\0\0\0"),
            ("/proc/self/status", FILTERED_STATUS),
        ])
        .detect();
        assert_eq!(by_pid1.outer, Some(Outer::Sandbox));
        let why = clone_eperm(&by_pid1);
        assert!(why.cause.contains("inside another sandbox"), "{why:?}");
        assert!(why.fix.contains("\"best-effort\""), "{why:?}");
        let seccomp = by_pid1
            .explain(&Refusal::Seccomp(Errno::EINVAL))
            .expect("explained");
        assert!(seccomp.cause.contains("the outer sandbox"), "{seccomp:?}");

        // No pid namespace: the supervisor is an ancestor, and counts only
        // for a process under a filter (a skill host of `sandbox serve` is not).
        let files = [
            ("/proc/1/cmdline", "/sbin/init\0"),
            ("/proc/self/stat", "40 (sh) S 30 40 40 0"),
            ("/proc/30/stat", "30 (sandbox) S 20 30 30 0"),
            ("/proc/30/comm", "sandbox\n"),
        ];
        let tree = Tree::new(&files);
        assert_eq!(tree.detect().outer, None);
        tree.write("/proc/self/status", FILTERED_STATUS);
        assert_eq!(tree.detect().outer, Some(Outer::Sandbox));
    }

    #[test]
    fn nested_in_bubblewrap() {
        let env = Tree::new(&[("/proc/1/cmdline", "bwrap\0--ro-bind\0/\0/\0")]).detect();
        assert_eq!(env.outer, Some(Outer::Bubblewrap));
        let why = env
            .explain(&Refusal::UserNamespace(Errno::ENOSPC))
            .expect("explained");
        assert!(why.cause.contains("bubblewrap"), "{why:?}");
        assert!(why.fix.contains("--disable-userns"), "{why:?}");
    }

    #[test]
    fn root_of_a_child_user_namespace_is_told_so() {
        let env = Tree::new(&[
            ("/proc/self/uid_map", "         0       1000          1\n"),
            ("/proc/self/setgroups", "deny\n"),
            ("/proc/self/status", ROOT_STATUS),
            ("/.dockerenv", ""),
        ])
        .detect();
        assert!(env.root_in_child_user_namespace());
        let why = env.explain(&Refusal::IdMap).expect("explained");
        assert!(
            why.cause
                .contains("root of a child user namespace (uid_map 0 1000 1, setgroups deny)"),
            "{why:?}"
        );
        let open_tree = env
            .explain(&Refusal::Mount {
                errno: Errno::EPERM,
                proc: false,
                idmapped: true,
                pivot: false,
            })
            .expect("explained");
        assert!(
            open_tree.cause.contains("idmapped mounts need root"),
            "{open_tree:?}"
        );
    }

    #[test]
    fn landlock_hidden_by_a_container_or_disabled() {
        let docker = Tree::new(&[("/.dockerenv", "")]).detect();
        let why = docker
            .explain(&Refusal::Landlock(Errno::ENOSYS))
            .expect("explained");
        assert!(
            why.cause.contains("seccomp profile does not know"),
            "{why:?}"
        );
        let disabled =
            Tree::new(&[("/sys/kernel/security/lsm", "lockdown,capability,yama\n")]).detect();
        assert_eq!(disabled.landlock_in_lsm_list, Some(false));
        let why = disabled
            .explain(&Refusal::Landlock(Errno::ENOSYS))
            .expect("explained");
        assert!(why.fix.contains("lsm="), "{why:?}");
    }

    const UBUNTU: [(&str, &str); 3] = [
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1\n",
        ),
        ("/sys/module/apparmor/parameters/enabled", "Y\n"),
        ("/proc/self/attr/apparmor/current", "unconfined\n"),
    ];

    #[test]
    fn ubuntu_withholds_namespaces_up_front_by_sysctl_label_and_capability() {
        let ubuntu = Tree::new(&UBUNTU);
        let withheld = ubuntu.detect().namespaces_withheld().expect("withheld");
        assert!(
            withheld.cause.contains("label is `unconfined`"),
            "{withheld:?}"
        );

        // Labels: the restriction's own profile withholds too; ours grants;
        // another profile's rules are not known, so nothing is decided.
        for (label, decided) in [
            ("unprivileged_userns (enforce)\n", true),
            ("sandbox (unconfined)\n", false),
            ("sandbox (enforce)\n", false),
            ("docker-default (enforce)\n", false),
        ] {
            ubuntu.write("/proc/self/attr/apparmor/current", label);
            assert_eq!(
                ubuntu.detect().namespaces_withheld().is_some(),
                decided,
                "{label}"
            );
        }
        // No per-LSM attr file: the older one says unconfined; neither
        // readable counts as no profile.
        let old_kernel = Tree::new(&[UBUNTU[0], ("/proc/self/attr/current", "unconfined\n")]);
        assert!(old_kernel.detect().namespaces_withheld().is_some());
        assert!(Tree::new(&[UBUNTU[0]])
            .detect()
            .namespaces_withheld()
            .is_some());

        // CAP_SYS_ADMIN exempts, root without it does not.
        ubuntu.write("/proc/self/attr/apparmor/current", "unconfined\n");
        ubuntu.write(
            "/proc/self/status",
            "Uid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\nSeccomp:\t0\n",
        );
        assert_eq!(ubuntu.detect().namespaces_withheld(), None);
        ubuntu.write(
            "/proc/self/status",
            "Uid:\t0\t0\t0\t0\nCapEff:\t00000000a80425fb\nSeccomp:\t0\n",
        );
        assert!(ubuntu.detect().namespaces_withheld().is_some());

        // The sysctl off: nothing withheld.
        ubuntu.write(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "0\n",
        );
        assert_eq!(ubuntu.detect().namespaces_withheld(), None);
    }

    #[test]
    fn strict_on_ubuntu_names_standard_only_where_it_would_run() {
        let mut env = Tree::new(&UBUNTU).detect();
        let why = env.namespaces_withheld().expect("withheld");
        assert!(why.fix.contains("packaging/apparmor/sandbox"), "{why:?}");
        assert!(
            why.fix
                .contains("or run without namespaces with a profile whose enforce.userns"),
            "{why:?}"
        );
        // A GitHub runner's 6.8 or 6.11 kernel: Landlock ABI 4 or 5, below
        // what a run without namespaces needs, so standard is refused too.
        for abi in [Some(5), None] {
            env.landlock_abi = abi;
            for why in [
                env.namespaces_withheld().expect("withheld"),
                env.explain(&Refusal::Mount {
                    errno: Errno::EPERM,
                    proc: false,
                    idmapped: false,
                    pivot: false,
                })
                .expect("explained"),
            ] {
                assert!(!why.fix.contains("or run without namespaces"), "{why:?}");
                assert!(
                    why.fix
                        .contains("`--profile standard` would be refused too"),
                    "{why:?}"
                );
                assert!(why.fix.contains("packaging/apparmor/sandbox"), "{why:?}");
                assert!(
                    why.fix
                        .contains("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
                    "{why:?}"
                );
            }
        }
    }

    #[test]
    fn docker_with_cap_sys_admin_blames_pivot_root_not_user_namespaces() {
        let env =
            Tree::new(&[("/.dockerenv", ""), ("/proc/self/status", FILTERED_STATUS)]).detect();
        let why = env
            .explain(&Refusal::Mount {
                errno: Errno::EPERM,
                proc: false,
                idmapped: false,
                pivot: true,
            })
            .expect("explained");
        assert!(why.cause.contains("forbids pivot_root"), "{why:?}");
        assert!(!why.cause.contains("user namespaces"), "{why:?}");
        assert!(
            why.fix
                .contains("docker run --security-opt seccomp=unconfined"),
            "{why:?}"
        );
    }

    #[test]
    fn dockers_default_container_gets_every_option_at_once() {
        let env = Tree::new(&[
            ("/.dockerenv", ""),
            ("/proc/self/status", FILTERED_STATUS),
            (
                "/proc/self/mountinfo",
                "22 27 0:21 / /proc rw - proc proc rw\n\
                 40 22 0:40 /null /proc/kcore ro - tmpfs tmpfs ro\n",
            ),
        ])
        .detect();
        let both =
            "docker run --security-opt seccomp=unconfined --security-opt systempaths=unconfined";
        // Refused first at /proc (known before clone), then at clone: both
        // messages name both options.
        let proc = env
            .explain(&Refusal::Mount {
                errno: Errno::EPERM,
                proc: true,
                idmapped: false,
                pivot: false,
            })
            .expect("explained");
        assert!(proc.fix.contains(both), "{proc:?}");
        assert!(
            clone_eperm(&env).fix.contains(both),
            "{:?}",
            clone_eperm(&env)
        );
    }

    #[test]
    fn a_mount_refused_under_an_inherited_filter_names_the_filter() {
        let env = Tree::new(&[("/proc/self/status", FILTERED_STATUS)]).detect();
        let why = env
            .explain(&Refusal::Mount {
                errno: Errno::EPERM,
                proc: false,
                idmapped: false,
                pivot: false,
            })
            .expect("explained");
        assert!(
            why.cause.contains("seccomp filter on this process"),
            "{why:?}"
        );
        assert!(why.cause.contains("refuses mount"), "{why:?}");
        assert!(why.fix.contains("--profile standard"), "{why:?}");
        // Without a filter or anything else known, nothing is guessed.
        let bare = Tree::new(&[]).detect();
        assert_eq!(
            bare.explain(&Refusal::Mount {
                errno: Errno::EPERM,
                proc: false,
                idmapped: false,
                pivot: false,
            }),
            None
        );
    }

    #[test]
    fn landlock_hidden_by_an_outer_filter_is_not_blamed_on_the_kernel() {
        for (lsm, status) in [
            ("lockdown,capability,landlock,yama\n", ""),
            ("", FILTERED_STATUS),
        ] {
            let mut files = vec![];
            if !lsm.is_empty() {
                files.push(("/sys/kernel/security/lsm", lsm));
            }
            if !status.is_empty() {
                files.push(("/proc/self/status", status));
            }
            let env = Tree::new(&files).detect();
            for errno in [Errno::ENOSYS, Errno::EPERM] {
                let why = env.explain(&Refusal::Landlock(errno)).expect("explained");
                assert!(why.cause.contains("seccomp filter"), "{why:?}");
                assert!(!why.cause.contains("has no Landlock"), "{why:?}");
                assert!(why.fix.contains("landlock_create_ruleset"), "{why:?}");
            }
        }
        // No sign of a filter: the kernel is the cause.
        let bare = Tree::new(&[]).detect();
        let why = bare
            .explain(&Refusal::Landlock(Errno::ENOSYS))
            .expect("explained");
        assert!(why.cause.contains("the kernel has no Landlock"), "{why:?}");
    }

    #[test]
    fn a_refused_seccomp_filter_names_its_source_and_the_profile_that_runs() {
        // A process of the docker.service unit is on a host, in no container.
        let host = Tree::new(&[
            ("/proc/self/status", FILTERED_STATUS),
            ("/proc/self/cgroup", "0::/system.slice/docker.service\n"),
        ])
        .detect();
        assert_eq!(host.container, None);
        let why = host
            .explain(&Refusal::Seccomp(Errno::EACCES))
            .expect("explained");
        assert!(!why.cause.contains("container"), "{why:?}");
        assert!(
            why.cause.contains("the process that started sandbox"),
            "{why:?}"
        );
        assert!(why.fix.contains("--profile permissive"), "{why:?}");
        // In Docker (systemd driver) user namespaces are refused too: a run
        // without them needs its own filter, so permissive would not help.
        let docker = Tree::new(&[
            ("/proc/self/status", FILTERED_STATUS),
            (
                "/proc/self/cgroup",
                "0::/system.slice/docker-0123456789abcdef.scope\n",
            ),
        ])
        .detect();
        assert_eq!(docker.container, Some(Container::Docker));
        let why = docker
            .explain(&Refusal::Seccomp(Errno::EACCES))
            .expect("explained");
        assert!(why.cause.contains("from the container"), "{why:?}");
        assert!(!why.fix.contains("permissive"), "{why:?}");
    }

    #[test]
    fn mountinfo_read_only_cgroups_and_masked_proc() {
        assert_eq!(mounts(""), (None, false));
        let host = "31 23 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    22 27 0:21 / /proc rw,relatime - proc proc rw\n";
        assert_eq!(mounts(host), (Some(false), false));
    }

    #[test]
    fn serializes_for_doctor_json() {
        let env = Tree::new(&[("/run/.containerenv", "")]).detect();
        let json = serde_json::to_value(&env).expect("serializes");
        assert_eq!(
            json["container"],
            serde_json::json!({"engine": "podman", "rootless": false})
        );
        assert_eq!(json["outer"], serde_json::Value::Null);
        assert_eq!(json["seccomp"]["mode"], 0);
    }
}
