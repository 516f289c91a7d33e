//! The refusals the environment explains: for each failed step (the id
//! maps, a mount, seccomp, Landlock), the cause in this environment and the
//! fix that works here: the container engine's exact options, a pod's
//! security context, the outer filter.

use std::fmt::Display;

use nix::errno::Errno;

use super::{Container, Environment, Explanation, Outer, Refusal};

/// The tail of every Landlock fix: the way to run without Landlock.
const LANDLOCK_BEST_EFFORT: &str = ", or set enforce.landlock = \"best-effort\"";

/// The system calls a run with namespaces needs a container's seccomp
/// profile to allow.
const NAMESPACE_CALLS: &str = "clone, clone3, unshare, mount and pivot_root";

/// The explanation of a refusal, whose fix ends with `way_around`: the
/// tail that names what works without a change outside ("" for none).
fn explained(cause: impl Into<String>, fix: impl Display, way_around: &str) -> Option<Explanation> {
    Some(Explanation {
        cause: cause.into(),
        fix: format!("{fix}{way_around}"),
    })
}

impl Environment {
    /// The cause and fix of `refusal` here, when the environment explains it.
    pub fn explain(&self, refusal: &Refusal) -> Option<Explanation> {
        match refusal {
            Refusal::UserNamespace(errno) => self.userns_blocker(*errno, true),
            Refusal::Namespaces(errno) => self.namespaces_blocker(*errno),
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

    /// The `docker run` or `podman run` options this container needs for
    /// namespaces, all at once: each one alone only moves the refusal to
    /// the next step. `seccomp`: the engine's default seccomp profile is in
    /// the way (it forbids CLONE_NEWUSER, and pivot_root even with
    /// `--cap-add SYS_ADMIN`); the masked paths when /proc has them; AppArmor
    /// when the engine's profile is attached (it forbids mount).
    pub(super) fn engine_options(&self, seccomp: bool) -> Option<String> {
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
    pub(super) fn engine_apparmor(&self) -> bool {
        self.apparmor
            .label
            .as_deref()
            .is_some_and(|l| l.starts_with("docker-default") || l.starts_with("containers-default"))
    }

    /// A container engine's default seccomp profile forbids what `blocked` names.
    pub(super) fn container_blocker(&self, blocked: Blocked) -> Option<Explanation> {
        let alt = self.or_without_namespaces();
        let what = blocked.describe();
        if self.kubernetes {
            let apparmor = if self.engine_apparmor() {
                " (and `securityContext.appArmorProfile.type: Unconfined`)"
            } else {
                ""
            };
            return explained(
                format!("the pod's seccomp profile (RuntimeDefault) forbids {what}"),
                format!(
                    "set the container's `securityContext.seccompProfile.type: Unconfined` and \
                     `procMount: Unmasked`, and run the pod in its own user namespace with \
                     `hostUsers: false`{apparmor}"
                ),
                &alt,
            );
        }
        let engine = match self.container.as_ref()? {
            Container::Docker => "Docker",
            Container::Podman { .. } => "Podman",
            Container::Other { name } => {
                return explained(
                    format!(
                        "this runs in a {name} container whose seccomp profile or capability set \
                         forbids {what}"
                    ),
                    format!(
                        "run the container with a seccomp profile that allows {NAMESPACE_CALLS} \
                         (or none)"
                    ),
                    &alt,
                );
            }
        };
        let options = self.engine_options(true)?;
        explained(
            format!("{engine}'s default seccomp profile forbids {what}"),
            format!("{options} (or a seccomp profile that allows {NAMESPACE_CALLS})"),
            &alt,
        )
    }

    /// Root of a child user namespace: its mapping is someone else's.
    pub(super) fn child_namespace_root(&self) -> Option<Explanation> {
        if !self.root_in_child_user_namespace() {
            return None;
        }
        explained(
            format!(
                "sandbox runs as root of a child user namespace (uid_map {}, setgroups {}), \
                 not as host root, so it cannot map a host uid of its own choosing",
                self.uid_map.join(", "),
                self.setgroups.as_deref().unwrap_or("unknown")
            ),
            "start sandbox outside that namespace, as the user who created it",
            &self.or_without_namespaces(),
        )
    }

    /// A seccomp filter inherited from what started sandbox `refuses` (the
    /// cause, after `prefix`); the fix allows `calls` in it.
    pub(super) fn inherited_filter(
        &self,
        prefix: &str,
        refuses: &str,
        calls: &str,
        way_around: &str,
    ) -> Option<Explanation> {
        explained(
            format!(
                "{prefix}a seccomp filter on this process ({} stacked, inherited from what \
                 started sandbox) {refuses}",
                self.seccomp.filters.unwrap_or(1)
            ),
            format!("start sandbox outside that filter, or allow {calls} in it"),
            way_around,
        )
    }

    pub(super) fn mount_blocker(
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
            } else if self.outer == Some(Outer::Sandbox) {
                "the outer sandbox covers paths of its /proc"
            } else if self.kubernetes {
                "set the container's `securityContext.procMount: Unmasked` (with `hostUsers: false`)"
            } else if let Some(options) = &engine {
                options.as_str()
            } else {
                "start sandbox where /proc has no paths mounted over it"
            };
            return explained(
                "/proc here has paths mounted over it (a container's masked paths, or an \
                 outer sandbox's read-only covers), and the kernel refuses a fresh /proc \
                 for a new pid namespace then",
                fix,
                &alt,
            );
        }
        if let Some(explanation) = self.namespaces_withheld() {
            return Some(explanation);
        }
        if self.outer.is_some() {
            return self.userns_blocker(errno, false);
        }
        if let Some(profile) = self.apparmor.profile() {
            if !self.engine_apparmor() {
                return explained(
                    format!("the AppArmor profile `{profile}` forbids mounting"),
                    "run sandbox under a profile that allows mount and pivot_root \
                     (packaging/apparmor/sandbox)",
                    &alt,
                );
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
            return explained(
                format!("the AppArmor profile `{profile}` forbids mounting{next}"),
                fix,
                &alt,
            );
        }
        // An engine's default seccomp profile refuses clone(CLONE_NEWUSER)
        // without CAP_SYS_ADMIN and lets mount through with it: once the
        // namespace was made, only pivot_root can be its refusal.
        if pivot && (self.container.is_some() || self.kubernetes) {
            return self.container_blocker(Blocked::Pivot);
        }
        if self.seccomp.mode == Some(2) {
            let refused = if pivot { "pivot_root" } else { "mount" };
            return self.inherited_filter(
                "",
                &format!("refuses {refused}"),
                "mount, umount2 and pivot_root",
                &alt,
            );
        }
        None
    }

    pub(super) fn seccomp_blocker(&self, errno: Errno) -> Option<Explanation> {
        let stacked = self.seccomp.filters.filter(|n| *n > 0)?;
        let outer = match (self.outer, &self.container, self.kubernetes) {
            (Some(Outer::Sandbox), _, _) => "the outer sandbox",
            (Some(Outer::Bubblewrap), _, _) => "bubblewrap",
            (_, _, true) => "the pod",
            (_, Some(_), _) => "the container",
            _ => "the process that started sandbox",
        };
        let refused = if errno == Errno::ENOMEM {
            "with this profile's the kernel's limit on stacked filter length is passed"
        } else {
            "they refuse the seccomp system call or this filter"
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
        explained(
            format!(
                "{stacked} seccomp filter(s) from {outer} are already stacked on this process, \
                 and {refused}"
            ),
            permissive,
            "",
        )
    }

    pub(super) fn landlock_blocker(&self, errno: Errno) -> Option<Explanation> {
        if errno == Errno::EOPNOTSUPP || self.landlock_in_lsm_list == Some(false) {
            return explained(
                "Landlock is built into the kernel but not enabled (not in the lsm= list)",
                "add `landlock` to the `lsm=` kernel boot parameter",
                LANDLOCK_BEST_EFFORT,
            );
        }
        if errno == Errno::ENOSYS && (self.container.is_some() || self.kubernetes) {
            return explained(
                "the container's seccomp profile does not know the Landlock system calls \
                 and answers ENOSYS (Docker before 23.0, older containerd and Podman)",
                "update the container engine, or run the container with \
                 `--security-opt seccomp=unconfined`",
                LANDLOCK_BEST_EFFORT,
            );
        }
        // The kernel has it (securityfs lists it), or a filter that could
        // hide it is stacked here: the filter, not the kernel, is the cause.
        let hidden = self.landlock_in_lsm_list == Some(true) || self.seccomp.mode == Some(2);
        if hidden && (errno == Errno::ENOSYS || errno == Errno::EPERM) {
            let kernel = if self.landlock_in_lsm_list == Some(true) {
                "this kernel has Landlock (it is in /sys/kernel/security/lsm), but "
            } else {
                "the kernel may have Landlock, but "
            };
            return self.inherited_filter(
                kernel,
                &format!("answers the Landlock system calls with {errno}"),
                "landlock_create_ruleset, landlock_add_rule and landlock_restrict_self",
                LANDLOCK_BEST_EFFORT,
            );
        }
        if errno == Errno::ENOSYS {
            return explained(
                "the kernel has no Landlock (older than 5.13 or built without \
                 CONFIG_SECURITY_LANDLOCK)",
                "use Linux 6.12+ with Landlock enabled",
                LANDLOCK_BEST_EFFORT,
            );
        }
        None
    }
}

/// What a container's seccomp profile refused.
#[derive(Debug, Clone, Copy)]
pub(super) enum Blocked {
    UserNamespace,
    Pivot,
}

impl Blocked {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Blocked::UserNamespace => "new user namespaces (clone and unshare with CLONE_NEWUSER)",
            Blocked::Pivot => {
                "pivot_root (even with `--cap-add SYS_ADMIN`, which lets mount through)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;
    use nix::errno::Errno;

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
}
