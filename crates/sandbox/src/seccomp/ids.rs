//! EPERM instead of EINVAL for set-id and chown calls naming an id the
//! run's user namespace does not map.
//!
//! Bare, an unprivileged process that calls `setuid(0)` or `chown(f, 0, 0)`
//! gets EPERM, and test suites check for it (libuv's `fs_chown`,
//! `spawn_setuid_fails`, `spawn_setgid_fails`). In a run the kernel answers
//! EINVAL first, because the id has no mapping in the run's namespace.
//!
//! Why the rules can only change an errno, never an outcome: the run's user
//! namespace maps exactly one uid and one gid (the supervisor writes one
//! line to each map), the payload's own, and these calls fail with EINVAL
//! for any other id whatever the caller's capabilities. Only a nested user
//! namespace could give another id a meaning, and every filter these rules
//! join refuses to create one (`unshare`, `setns`, namespace flags on
//! `clone`, `clone3`); the set-id guard alone (`enforce.seccomp = "off"`)
//! does not get them. `(uid_t)-1` passes: it means "unchanged" to
//! `setres*id`, `setre*id` and the chown family, and is EINVAL bare too for
//! `setuid`/`setgid`. What changes beyond EINVAL: a chown naming a foreign id
//! on a path that does not exist (or a bad descriptor) answers EPERM, where
//! bare the lookup's ENOENT (or EBADF) comes first.

use super::rules::{IntArg, Rule, Test};
use super::{ArgRules, EPERM};

/// The one uid and gid a run's user namespace maps: the payload's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedIds {
    /// The uid inside.
    pub uid: u32,
    /// The gid inside.
    pub gid: u32,
}

/// `(uid_t)-1` and `(gid_t)-1`: "leave this id unchanged".
const UNCHANGED: u32 = u32::MAX;

/// The rules (see the module docs). Every id argument is a `uid_t` or
/// `gid_t`, which the kernel reads as 32 bits.
pub(super) fn unmapped_id_rules(ids: MappedIds) -> Vec<ArgRules> {
    let foreign = |own: u32, index: u8| Rule {
        all: vec![
            Test::IsNot(IntArg(index), own),
            Test::IsNot(IntArg(index), UNCHANGED),
        ],
        then: EPERM,
    };
    let uids =
        |indices: &[u8]| -> Vec<Rule> { indices.iter().map(|i| foreign(ids.uid, *i)).collect() };
    let gids =
        |indices: &[u8]| -> Vec<Rule> { indices.iter().map(|i| foreign(ids.gid, *i)).collect() };
    let owner = |uid: u8, gid: u8| -> Vec<Rule> {
        let mut rules = uids(&[uid]);
        rules.extend(gids(&[gid]));
        rules
    };
    vec![
        ("setuid", uids(&[0])),
        ("setreuid", uids(&[0, 1])),
        ("setresuid", uids(&[0, 1, 2])),
        ("setgid", gids(&[0])),
        ("setregid", gids(&[0, 1])),
        ("setresgid", gids(&[0, 1, 2])),
        // Architectures without chown and lchown (aarch64) skip them.
        ("chown", owner(1, 2)),
        ("lchown", owner(1, 2)),
        ("fchown", owner(1, 2)),
        ("fchownat", owner(2, 3)),
    ]
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::super::policy::{SyscallMode, SyscallPolicy};
    use super::super::{compile, compile_in_user_namespace, syscall_number, CompiledFilter};
    use super::*;

    const OWN: MappedIds = MappedIds {
        uid: 1000,
        gid: 1001,
    };
    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const DENY: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const X86_64: u32 = 0xC000_003E;

    fn verdict(filter: &CompiledFilter, name: &str, args: [u64; 6]) -> u32 {
        let nr = syscall_number(name).unwrap() as u32;
        super::super::tree::interpreter::run(&filter.programs()[0], X86_64, nr, args)
    }

    fn policy(mode: SyscallMode) -> SyscallPolicy {
        SyscallPolicy {
            mode,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }

    #[test]
    fn foreign_ids_get_eperm_and_the_own_ids_and_unchanged_pass() {
        let minus_one = u64::from(UNCHANGED);
        for mode in [SyscallMode::Allowlist, SyscallMode::Denylist] {
            let f = compile_in_user_namespace(&policy(mode), OWN).unwrap();
            let cases: [(&str, [u64; 6], u32); 16] = [
                ("setuid", [0, 0, 0, 0, 0, 0], DENY),
                ("setuid", [1000, 0, 0, 0, 0, 0], ALLOW),
                // EINVAL from the kernel, as bare.
                ("setuid", [minus_one, 0, 0, 0, 0, 0], ALLOW),
                // The kernel reads the low 32 bits: this is setuid(1000).
                ("setuid", [(1 << 32) | 1000, 0, 0, 0, 0, 0], ALLOW),
                ("setuid", [1 << 32, 0, 0, 0, 0, 0], DENY),
                ("setgid", [0, 0, 0, 0, 0, 0], DENY),
                ("setgid", [1001, 0, 0, 0, 0, 0], ALLOW),
                ("setgid", [1000, 0, 0, 0, 0, 0], DENY),
                ("setresuid", [minus_one, 1000, minus_one, 0, 0, 0], ALLOW),
                ("setresuid", [minus_one, minus_one, 0, 0, 0, 0], DENY),
                ("setresgid", [1001, 1001, 1001, 0, 0, 0], ALLOW),
                ("setreuid", [minus_one, 5, 0, 0, 0, 0], DENY),
                ("chown", [0, 1000, 1001, 0, 0, 0], ALLOW),
                ("chown", [0, minus_one, 0, 0, 0, 0], DENY),
                ("fchown", [3, 0, minus_one, 0, 0, 0], DENY),
                ("fchownat", [0, 0, minus_one, 1001, 0, 0], ALLOW),
            ];
            for (name, args, want) in cases {
                assert_eq!(verdict(&f, name, args), want, "{name}{args:?} in {mode:?}");
            }
            assert_eq!(
                verdict(&f, "fchownat", [0, 0, 1000, 0, 0, 0]),
                DENY,
                "{mode:?}"
            );
        }
    }

    #[test]
    fn the_rules_never_allow_what_the_policy_refuses() {
        // A call the profile denies stays EPERM for every id; one the
        // allowlist leaves out stays ENOSYS.
        let mut p = policy(SyscallMode::Allowlist);
        p.deny = vec!["setuid".into()];
        let f = compile_in_user_namespace(&p, OWN).unwrap();
        assert_eq!(verdict(&f, "setuid", [1000, 0, 0, 0, 0, 0]), DENY);
        let plain = compile(&policy(SyscallMode::Allowlist)).unwrap();
        let f = compile_in_user_namespace(&policy(SyscallMode::Allowlist), OWN).unwrap();
        for name in ["setfsuid", "setgroups", "chmod"] {
            for args in [[0u64; 6], [1000, 0, 0, 0, 0, 0]] {
                assert_eq!(
                    verdict(&f, name, args),
                    verdict(&plain, name, args),
                    "{name}{args:?}"
                );
            }
        }
    }
}
