//! Why user namespaces fail here, most specific cause first: the sysctls
//! (`user.max_user_namespaces`, `kernel.unprivileged_userns_clone`),
//! Ubuntu's AppArmor restriction, an outer sandbox or bubblewrap, a
//! container's seccomp profile, the errno. The one explanation of the
//! sysctls: every refusal, doctor's probe and a run that goes on without
//! namespaces take their words from here.

use std::path::Path;

use nix::errno::Errno;

use super::explain::Blocked;
use super::{Environment, Explanation, Outer, WITHOUT_NAMESPACES};
use crate::sysctl::UsernsSysctls;

impl Environment {
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
            .then(|| self.apparmor_blocker(&self.or_without_namespaces()))
    }

    /// The way around missing namespaces that needs no change outside, as
    /// the tail of a fix: `--profile standard` where a run without
    /// namespaces starts (it needs Landlock at the ABI that also scopes
    /// signals and abstract sockets), else why it would not.
    pub(super) fn or_without_namespaces(&self) -> String {
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

    /// Ubuntu's AppArmor restriction; `alt`, the tail of the fix that
    /// names the way around without namespaces ("" where none is wanted).
    fn apparmor_blocker(&self, alt: &str) -> Explanation {
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
                 or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`{alt}"
            ),
        }
    }

    /// What the user namespace sysctls stop here, with the fix, judged
    /// from them and the AppArmor label alone: `user.max_user_namespaces`
    /// 0 stops everyone; `kernel.unprivileged_userns_clone` 0 and Ubuntu's
    /// AppArmor restriction spare CAP_SYS_ADMIN. The words are those of
    /// [`Environment::explain`]'s, without the way around (the callers,
    /// doctor's probe and a run going on without namespaces, say their own).
    pub fn sysctl_blocker(&self) -> Option<Explanation> {
        self.max_user_namespaces_blocker("")
            .or_else(|| self.unprivileged_clone_blocker(""))
            .or_else(|| {
                (!self.cap_sys_admin && self.apparmor.blocks_userns())
                    .then(|| self.apparmor_blocker(""))
            })
    }

    /// `user.max_user_namespaces` is 0: nobody, root included, gets a user
    /// namespace. `alt`: the tail of the fix, as for [`Self::apparmor_blocker`].
    fn max_user_namespaces_blocker(&self, alt: &str) -> Option<Explanation> {
        (self.sysctls.max_user_namespaces == Some(0)).then(|| Explanation {
            cause: "user.max_user_namespaces is 0 in this user namespace".into(),
            fix: format!(
                "`sysctl -w user.max_user_namespaces=15000` (as root of this namespace){alt}"
            ),
        })
    }

    /// `kernel.unprivileged_userns_clone` is 0 (Debian and Ubuntu kernels):
    /// only CAP_SYS_ADMIN gets a user namespace.
    fn unprivileged_clone_blocker(&self, alt: &str) -> Option<Explanation> {
        (!self.cap_sys_admin && self.sysctls.unprivileged_userns_clone == Some(false)).then(|| {
            Explanation {
                cause: "kernel.unprivileged_userns_clone is 0: user namespaces are disabled for \
                        unprivileged users"
                    .into(),
                fix: format!("`sudo sysctl -w kernel.unprivileged_userns_clone=1`{alt}"),
            }
        })
    }

    /// Why init, in the user namespace it was just given, could not create
    /// its network, IPC and UTS namespaces: their own limits and kernel
    /// options, or what refuses it the capabilities or the call.
    pub(super) fn namespaces_blocker(&self, errno: Errno) -> Option<Explanation> {
        let alt = self.or_without_namespaces();
        match errno {
            Errno::ENOSPC => Some(Explanation {
                cause: "a limit on network, IPC or UTS namespaces is reached \
                        (user.max_net_namespaces, user.max_ipc_namespaces, \
                        user.max_uts_namespaces), or namespaces of runs that just ended are \
                        not freed yet"
                    .into(),
                fix: format!("raise those limits, or run again{alt}"),
            }),
            Errno::EINVAL => Some(Explanation {
                cause: "the kernel has no network, IPC or UTS namespaces (built without \
                        CONFIG_NET_NS, CONFIG_IPC_NS or CONFIG_UTS_NS)"
                    .into(),
                fix: format!("use a kernel built with them{alt}"),
            }),
            // An engine's default seccomp profile refuses the clone that
            // made the user namespace, not this: once it was made, what
            // refuses is a security module withholding its capabilities,
            // or a filter of another kind.
            Errno::EPERM | Errno::EACCES => self.namespaces_withheld().or_else(|| {
                (self.seccomp.mode == Some(2)).then(|| {
                    self.inherited_filter(
                        "",
                        "forbids new network, IPC or UTS namespaces",
                        "unshare with CLONE_NEWNET, CLONE_NEWIPC and CLONE_NEWUTS",
                        &alt,
                    )
                })?
            }),
            _ => None,
        }
    }

    /// Why user namespaces cannot be had here, most specific cause first.
    pub(super) fn userns_blocker(&self, errno: Errno, containers: bool) -> Option<Explanation> {
        let alt = self.or_without_namespaces();
        if let Some(explanation) = self.max_user_namespaces_blocker(&alt) {
            return Some(explanation);
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
        if let Some(explanation) = self.unprivileged_clone_blocker(&alt) {
            return Some(explanation);
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

/// [`Environment::sysctl_blocker`] for this process (`privileged`: it has
/// CAP_SYS_ADMIN), cheaply: the three sysctls are read first, and the whole
/// environment (for the AppArmor label) only where one of them is set.
pub fn sysctl_blocker_here(privileged: bool) -> Option<Explanation> {
    let sysctls = UsernsSysctls::read_at(Path::new("/"));
    let set = sysctls.max_user_namespaces == Some(0)
        || sysctls.unprivileged_userns_clone == Some(false)
        || sysctls.apparmor_restrict_unprivileged_userns == Some(true);
    if !set {
        return None;
    }
    Environment {
        cap_sys_admin: privileged,
        ..Environment::detect()
    }
    .sysctl_blocker()
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;
    use nix::errno::Errno;

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
            Refusal::Namespaces(Errno::EPERM),
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
    fn inits_own_namespaces_are_explained_by_their_limits_and_kernel_options() {
        let env = Tree::new(&[]).detect();
        let short = env
            .explain(&Refusal::Namespaces(Errno::ENOSPC))
            .expect("explained");
        assert!(short.cause.contains("user.max_net_namespaces"), "{short:?}");
        assert!(!short.cause.contains("max_user_namespaces"), "{short:?}");
        let missing = env
            .explain(&Refusal::Namespaces(Errno::EINVAL))
            .expect("explained");
        assert!(missing.cause.contains("CONFIG_NET_NS"), "{missing:?}");
        assert!(!missing.cause.contains("CONFIG_USER_NS"), "{missing:?}");
        // A plain host says nothing it cannot see about a refusal.
        assert_eq!(env.explain(&Refusal::Namespaces(Errno::EPERM)), None);
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
    fn sysctl_reasons_name_the_fix_and_spare_root() {
        let with = |sysctls: UsernsSysctls, cap_sys_admin: bool| Environment {
            sysctls,
            cap_sys_admin,
            apparmor: super::super::AppArmor {
                restrict_unprivileged_userns: sysctls.apparmor_restrict_unprivileged_userns,
                ..Default::default()
            },
            ..Environment::default()
        };
        let off = UsernsSysctls {
            unprivileged_userns_clone: Some(false),
            ..UsernsSysctls::default()
        };
        assert!(with(off, false)
            .sysctl_blocker()
            .unwrap()
            .fix
            .contains("sysctl -w kernel.unprivileged_userns_clone=1"));
        assert_eq!(with(off, true).sysctl_blocker(), None);

        let apparmor = UsernsSysctls {
            apparmor_restrict_unprivileged_userns: Some(true),
            ..UsernsSysctls::default()
        };
        let why = with(apparmor, false).sysctl_blocker().unwrap();
        assert!(why.cause.contains("AppArmor"), "{why:?}");
        assert!(
            why.fix
                .ends_with("apparmor_restrict_unprivileged_userns=0`"),
            "{why:?}"
        );
        assert_eq!(with(apparmor, true).sysctl_blocker(), None);

        let zero = UsernsSysctls {
            max_user_namespaces: Some(0),
            ..UsernsSysctls::default()
        };
        // The count limit stops root too; the way around is the caller's.
        let why = with(zero, true).sysctl_blocker().unwrap();
        assert!(
            why.fix.contains("user.max_user_namespaces=15000"),
            "{why:?}"
        );
        assert!(!why.fix.contains("--profile standard"), "{why:?}");
        // The same words as the refusal of a failed clone.
        let refused = with(zero, true)
            .explain(&super::super::Refusal::UserNamespace(Errno::ENOSPC))
            .unwrap();
        assert_eq!(refused.cause, why.cause);
        assert!(refused.fix.starts_with(&why.fix), "{refused:?}");
        assert_eq!(with(UsernsSysctls::default(), false).sysctl_blocker(), None);
    }
}
