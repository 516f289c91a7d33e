//! The seccomp filter: a profile's [`SyscallPolicy`] compiled into BPF
//! programs that the payload installs last, right before execve.
//!
//! seccompiler builds each program but has one match action per filter, no
//! x32 guard and no way to give different syscalls different errnos. So a
//! policy becomes two stacked filters. The kernel runs every installed filter
//! and keeps the most restrictive action; between two ERRNO results the most
//! recently installed filter wins. Installed in this order:
//!
//! 1. allowlist mode: allow the listed calls, ENOSYS for the rest (so a
//!    program falls back from a call newer than the list, and `clone3`, which
//!    is not listed, answers ENOSYS). Denylist mode: only `clone3` → ENOSYS.
//! 2. EPERM for the denied calls, for `clone` with a namespace flag, and for
//!    the TIOCSTI and TIOCLINUX ioctls.
//!
//! `clone3` must fail with ENOSYS: its flags live in memory that seccomp
//! cannot read, so only forcing libc back to `clone` lets the flag rules work.
//! Each program starts with a hand-written prelude that kills the process on
//! a foreign architecture (i386 `int 0x80` entry points report
//! AUDIT_ARCH_I386) or an x32 system call number, which shares x86_64's
//! audit architecture and would otherwise slip past number-based rules.

mod tables;
mod tree;

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use sha2::{Digest, Sha256};

use crate::profile::policy::{SyscallMode, SyscallPolicy};

pub use tables::{ALLOWED, DENIED};

/// Why a filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// A name in the profile is not a system call of this architecture.
    #[error(
        "unknown system call {name:?} in [syscalls] {list} (see `man 2 syscalls` for the names)"
    )]
    UnknownSyscall {
        /// The name.
        name: String,
        /// `allow` or `deny`.
        list: &'static str,
    },
    /// `allow` names a call the stacked filters refuse whatever the
    /// allowlist says. Accepting it silently would leave a profile that
    /// reads as if the call worked.
    #[error("[syscalls] allow cannot allow {name:?}: {reason}")]
    CannotAllow {
        /// The name.
        name: String,
        /// Why the call stays refused.
        reason: &'static str,
    },
    /// seccompiler rejected a filter.
    #[error("building the {which} filter: {source}")]
    Build {
        /// Which filter.
        which: &'static str,
        /// seccompiler's error.
        source: seccompiler::BackendError,
    },
    /// No filter can be built for this CPU architecture.
    #[error("seccomp filters are not supported on {0} by this build")]
    UnsupportedArch(&'static str),
}

/// The installable programs of a policy.
#[derive(Debug, Clone)]
pub struct CompiledFilter {
    programs: Vec<Vec<libc::sock_filter>>,
    sha256: String,
    mode: SyscallMode,
}

impl CompiledFilter {
    /// The BPF programs in the order they must be installed.
    pub fn programs(&self) -> &[Vec<libc::sock_filter>] {
        &self.programs
    }
    /// Lowercase hex SHA-256 over every instruction of every program.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
    /// Allowlist or denylist.
    pub fn mode(&self) -> SyscallMode {
        self.mode
    }
    /// Instructions in all programs.
    pub fn instruction_count(&self) -> usize {
        self.programs.iter().map(Vec::len).sum()
    }
}

/// The number of a system call on this architecture.
pub fn syscall_number(name: &str) -> Option<i64> {
    tables::SYSCALLS
        .iter()
        .find(|(n, _)| n.strip_prefix("SYS_") == Some(name))
        .map(|(_, nr)| *nr)
}

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
/// Namespace flags `clone` may not use. CLONE_NEWTIME (0x80) is left out: on
/// `clone` that bit belongs to the exit signal (CSIGNAL), and new time
/// namespaces can only be made with unshare, which is denied.
const CLONE_NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// Refuse `allow` entries that a later filter would override anyway.
fn check_allowable(allow: &[String]) -> Result<(), SeccompError> {
    for name in allow {
        let reason = if name == "clone3" {
            // clone3 passes its flags in memory that seccomp cannot read, so
            // allowing it would bypass the namespace-flag rules on clone.
            "it answers ENOSYS so that libc falls back to clone, whose flags the filter can check"
        } else if DENIED.contains(&name.as_str()) {
            "it is on the built-in deny list and answers EPERM in every mode"
        } else {
            continue;
        };
        return Err(SeccompError::CannotAllow {
            name: name.clone(),
            reason,
        });
    }
    Ok(())
}

fn resolve(names: &[&str], extra: &[String], list: &'static str) -> Result<Vec<i64>, SeccompError> {
    let mut numbers = Vec::new();
    // Built-in names the architecture lacks cannot be called here anyway.
    numbers.extend(names.iter().filter_map(|name| syscall_number(name)));
    for name in extra {
        let nr = syscall_number(name).ok_or_else(|| SeccompError::UnknownSyscall {
            name: name.clone(),
            list,
        })?;
        numbers.push(nr);
    }
    numbers.sort_unstable();
    numbers.dedup();
    Ok(numbers)
}

fn condition(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(arg, len, op, value).map_err(|source| SeccompError::Build {
        which: "deny",
        source,
    })
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(conditions).map_err(|source| SeccompError::Build {
        which: "deny",
        source,
    })
}

fn build(
    which: &'static str,
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    matched: SeccompAction,
    arch: seccompiler::TargetArch,
) -> Result<Vec<libc::sock_filter>, SeccompError> {
    let filter = SeccompFilter::new(rules, mismatch, matched, arch)
        .map_err(|source| SeccompError::Build { which, source })?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|source| SeccompError::Build { which, source })?;
    let mut out = prelude();
    out.extend(program.iter().map(|i| libc::sock_filter {
        code: i.code,
        jt: i.jt,
        jf: i.jf,
        k: i.k,
    }));
    Ok(out)
}

/// Kill on a foreign architecture or an x32 number (see the module docs).
fn prelude() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    // offsetof(struct seccomp_data, arch) and (…, nr).
    const ARCH_OFFSET: u32 = 4;
    const NR_OFFSET: u32 = 0;
    let kill = libc::SECCOMP_RET_KILL_PROCESS;
    vec![
        libc::sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: ARCH_OFFSET,
        },
        libc::sock_filter {
            code: JEQ_K,
            jt: 1,
            jf: 0,
            k: tables::AUDIT_ARCH,
        },
        libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: kill,
        },
        libc::sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: NR_OFFSET,
        },
        libc::sock_filter {
            code: JGE_K,
            jt: 0,
            jf: 1,
            k: tables::X32_SYSCALL_BIT,
        },
        libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: kill,
        },
    ]
}

/// Compile `policy` into the programs to install.
pub fn compile(policy: &SyscallPolicy) -> Result<CompiledFilter, SeccompError> {
    let arch = tables::target().ok_or(SeccompError::UnsupportedArch(std::env::consts::ARCH))?;
    let mut programs = Vec::with_capacity(2);
    // Unknown names first: a typo is the likelier mistake and its message
    // more useful.
    resolve(&[], &policy.allow, "allow")?;
    check_allowable(&policy.allow)?;

    match policy.mode {
        SyscallMode::Allowlist => {
            let allowed: Vec<u32> = resolve(ALLOWED, &policy.allow, "allow")?
                .into_iter()
                .filter_map(|nr| u32::try_from(nr).ok())
                .collect();
            let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
            let mut program = prelude();
            program.extend(tree::membership(&allowed, libc::SECCOMP_RET_ALLOW, enosys));
            programs.push(program);
        }
        SyscallMode::Denylist => {
            // `allow` only widens an allowlist; its names were validated above.
            let clone3 = syscall_number("clone3")
                .into_iter()
                .map(|nr| (nr, Vec::new()))
                .collect();
            let enosys = SeccompAction::Errno(libc::ENOSYS as u32);
            programs.push(build("clone3", clone3, SeccompAction::Allow, enosys, arch)?);
        }
    }

    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = resolve(DENIED, &policy.deny, "deny")?
        .into_iter()
        .map(|nr| (nr, Vec::new()))
        .collect();
    if let Some(clone) = syscall_number("clone") {
        let mut rules = Vec::new();
        for flag in CLONE_NAMESPACE_FLAGS {
            rules.push(rule(vec![condition(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])?);
        }
        deny.insert(clone, rules);
    }
    if let Some(ioctl) = syscall_number("ioctl") {
        // The kernel truncates an ioctl's command to 32 bits, so only the low
        // word is compared: a command with junk in the upper bits is still
        // TIOCSTI to the tty driver (the bypass behind CVE-2019-10063).
        let rules = [TIOCSTI, TIOCLINUX]
            .into_iter()
            .map(|cmd| {
                rule(vec![condition(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    cmd,
                )?])
            })
            .collect::<Result<Vec<_>, _>>()?;
        deny.insert(ioctl, rules);
    }
    programs.push(build(
        "deny",
        deny,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?);

    let mut hasher = Sha256::new();
    for instruction in programs.iter().flatten() {
        hasher.update(instruction.code.to_le_bytes());
        hasher.update([instruction.jt, instruction.jf]);
        hasher.update(instruction.k.to_le_bytes());
    }
    let sha256 = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(CompiledFilter {
        programs,
        sha256,
        mode: policy.mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: SyscallMode) -> SyscallPolicy {
        SyscallPolicy {
            mode,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn both_modes_compile_to_two_programs_with_the_prelude() {
        for mode in [SyscallMode::Allowlist, SyscallMode::Denylist] {
            let filter = compile(&policy(mode)).unwrap();
            assert_eq!(filter.programs().len(), 2);
            for program in filter.programs() {
                assert_eq!(program[0].k, 4, "first load is seccomp_data.arch");
                assert_eq!(program[1].k, tables::AUDIT_ARCH);
                assert_eq!(program[2].k, libc::SECCOMP_RET_KILL_PROCESS);
                assert_eq!(program[4].k, 0x4000_0000, "x32 numbers are refused");
                assert!(
                    program.len() < 4096,
                    "BPF programs are limited to 4096 instructions"
                );
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn hash_is_stable_and_differs_between_modes() {
        let a = compile(&policy(SyscallMode::Allowlist)).unwrap();
        let b = compile(&policy(SyscallMode::Allowlist)).unwrap();
        let c = compile(&policy(SyscallMode::Denylist)).unwrap();
        assert_eq!(a.sha256(), b.sha256());
        assert_ne!(a.sha256(), c.sha256());
        assert_eq!(a.sha256().len(), 64);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn unknown_names_are_errors_naming_the_list() {
        let mut p = policy(SyscallMode::Allowlist);
        p.deny = vec!["no_such_call".into()];
        let err = compile(&p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown system call \"no_such_call\" in [syscalls] deny (see `man 2 syscalls` for the names)"
        );
        let mut p = policy(SyscallMode::Denylist);
        p.allow = vec!["SYS_read".into()];
        assert!(matches!(
            compile(&p),
            Err(SeccompError::UnknownSyscall { list: "allow", .. })
        ));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn lists_resolve_and_never_overlap() {
        for name in ALLOWED.iter().chain(DENIED) {
            assert!(
                syscall_number(name).is_some(),
                "{name} is not a system call here"
            );
        }
        for name in DENIED {
            assert!(!ALLOWED.contains(name), "{name} is both allowed and denied");
        }
        assert!(!ALLOWED.contains(&"clone3"), "clone3 must answer ENOSYS");
        assert_eq!(syscall_number("read"), Some(libc::SYS_read));
    }

    #[cfg(target_arch = "x86_64")]
    const X86_64: u32 = 0xC000_003E;

    #[cfg(target_arch = "x86_64")]
    fn verdict(filter: &CompiledFilter, nr: u32, args: [u64; 6]) -> u32 {
        // The kernel keeps the most restrictive action, the lowest as a
        // signed value (KILL_PROCESS is 0x80000000), and between equal
        // action types the newest filter's.
        let mut result = libc::SECCOMP_RET_ALLOW;
        for program in filter.programs() {
            let r = super::tree::interpreter::run(program, X86_64, nr, args);
            let action = (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
            let current = (result & libc::SECCOMP_RET_ACTION_FULL) as i32;
            if action < current
                || (action == current
                    && r & libc::SECCOMP_RET_ACTION_FULL != libc::SECCOMP_RET_ALLOW)
            {
                result = r;
            }
        }
        result
    }

    #[cfg(target_arch = "x86_64")]
    fn nr(name: &str) -> u32 {
        syscall_number(name).unwrap() as u32
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn verdicts_of_the_stacked_filters() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let allow = libc::SECCOMP_RET_ALLOW;
        for mode in [SyscallMode::Allowlist, SyscallMode::Denylist] {
            let f = compile(&policy(mode)).unwrap();
            for name in DENIED {
                assert_eq!(verdict(&f, nr(name), [0; 6]), eperm, "{name} in {mode:?}");
            }
            assert_eq!(verdict(&f, nr("clone3"), [0; 6]), enosys, "{mode:?}");
            assert_eq!(verdict(&f, nr("read"), [0; 6]), allow);
            assert_eq!(
                verdict(&f, nr("clone"), [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
                allow
            );
            let new_user = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64;
            assert_eq!(verdict(&f, nr("clone"), [new_user, 0, 0, 0, 0, 0]), eperm);
            for cmd in [0x5412u64, 0xffff_ffff_0000_5412, 0x541C] {
                assert_eq!(
                    verdict(&f, nr("ioctl"), [0, cmd, 0, 0, 0, 0]),
                    eperm,
                    "ioctl {cmd:#x}"
                );
            }
            assert_eq!(
                verdict(&f, nr("ioctl"), [0, 0x5401, 0, 0, 0, 0]),
                allow,
                "TCGETS"
            );
            assert_eq!(
                verdict(&f, 0x4000_0000 | nr("getpid"), [0; 6]),
                libc::SECCOMP_RET_KILL_PROCESS,
                "x32"
            );
            let i386 = super::tree::interpreter::run(&f.programs()[0], 0x4000_0003, 20, [0; 6]);
            assert_eq!(i386, libc::SECCOMP_RET_KILL_PROCESS, "i386 entry");
        }
        let strict = compile(&policy(SyscallMode::Allowlist)).unwrap();
        assert_eq!(
            verdict(&strict, nr("sethostname"), [0; 6]),
            enosys,
            "not listed"
        );
        let standard = compile(&policy(SyscallMode::Denylist)).unwrap();
        assert_eq!(verdict(&standard, nr("sethostname"), [0; 6]), allow);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn extra_allow_and_deny_change_the_filter() {
        let base = compile(&policy(SyscallMode::Allowlist)).unwrap();
        let mut p = policy(SyscallMode::Allowlist);
        p.allow = vec!["sethostname".into()];
        assert_ne!(compile(&p).unwrap().sha256(), base.sha256());
        let mut p = policy(SyscallMode::Allowlist);
        p.deny = vec!["uname".into()];
        assert_ne!(compile(&p).unwrap().sha256(), base.sha256());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn allow_cannot_lift_clone3_or_the_deny_list() {
        for (mode, name) in [
            (SyscallMode::Allowlist, "clone3"),
            (SyscallMode::Allowlist, "ptrace"),
            (SyscallMode::Denylist, "mount"),
        ] {
            let mut p = policy(mode);
            p.allow = vec!["read".into(), name.into()];
            match compile(&p) {
                Err(SeccompError::CannotAllow { name: got, .. }) => assert_eq!(got, name),
                other => panic!("{name} in {mode:?}: {other:?}"),
            }
        }
        let mut p = policy(SyscallMode::Allowlist);
        p.allow = vec!["clone3".into()];
        let message = compile(&p).unwrap_err().to_string();
        assert!(
            message.contains("\"clone3\"") && message.contains("ENOSYS"),
            "{message}"
        );
        // Denying a built-in allowed call is fine: the deny filter runs last.
        let mut p = policy(SyscallMode::Allowlist);
        p.deny = vec!["clone3".into(), "uname".into()];
        assert!(compile(&p).is_ok());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn nfsservctl_is_denied() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        assert!(DENIED.contains(&"nfsservctl"));
        for mode in [SyscallMode::Allowlist, SyscallMode::Denylist] {
            let f = compile(&policy(mode)).unwrap();
            assert_eq!(
                verdict(&f, 180, [0; 6]),
                eperm,
                "nfsservctl is 180 on x86_64"
            );
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[test]
    fn other_architectures_are_unsupported_not_unfiltered() {
        assert!(matches!(
            compile(&policy(SyscallMode::Denylist)),
            Err(SeccompError::UnsupportedArch(_))
        ));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn strict_allows_exactly_its_list_and_answers_enosys_for_every_other_call() {
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let strict = compile(&policy(SyscallMode::Allowlist)).unwrap();
        let standard = compile(&policy(SyscallMode::Denylist)).unwrap();
        for (name, number) in tables::SYSCALLS {
            let name = name.trim_start_matches("SYS_");
            let number = *number as u32;
            let (want_strict, want_standard) = if DENIED.contains(&name) {
                (eperm, eperm)
            } else if name == "clone3" {
                (enosys, enosys)
            } else if ALLOWED.contains(&name) {
                (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_ALLOW)
            } else {
                (enosys, libc::SECCOMP_RET_ALLOW)
            };
            assert_eq!(
                verdict(&strict, number, [0; 6]),
                want_strict,
                "{name} in strict"
            );
            assert_eq!(
                verdict(&standard, number, [0; 6]),
                want_standard,
                "{name} in standard"
            );
        }
        // Numbers no table knows (newer kernels' calls) take the default.
        assert_eq!(verdict(&strict, 463, [0; 6]), enosys);
        assert_eq!(verdict(&standard, 463, [0; 6]), libc::SECCOMP_RET_ALLOW);
    }
}
