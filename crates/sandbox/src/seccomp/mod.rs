//! The seccomp filter: a profile's [`SyscallPolicy`] compiled into one BPF
//! program that the payload installs last, right before execve.
//!
//! The program is a decision tree over the system call number (see
//! [`tree`]) whose leaves are per-call blocks: a fixed return, or rules on
//! the call's arguments (see [`rules`]). One program with per-call errnos
//! replaces the earlier stack of seccompiler filters: the kernel runs every
//! installed filter on every call the action cache does not cover, so each
//! extra filter was a second walk for every `openat`.
//!
//! What a call gets, strongest first:
//!
//! 1. EPERM for the deny list (built-in and the profile's).
//! 2. ENOSYS for `clone3` and `openat2`: both pass what the filter would
//!    have to check (clone flags, a file mode) in memory that seccomp cannot
//!    read, so only forcing libc back to `clone` and `openat` lets the rules
//!    on those work.
//! 3. The argument rules: set-id modes (every mode), namespace flags on
//!    `clone` and terminal-injecting ioctls (both policy modes), socket
//!    families and personas (allowlist; the denylist refuses AF_VSOCK only);
//!    for a payload in a user namespace of its own, EPERM for set-id and
//!    chown calls naming an id it does not map (see [`ids`]).
//! 4. Allowlist mode: ALLOW for the listed calls, ENOSYS for the rest (so a
//!    program falls back from a call newer than the list). Denylist mode:
//!    ALLOW.
//!
//! A profile that turns the syscall policy off still gets the set-id guard
//! ([`host_guard`]): it protects the host's users, not the sandboxed program.
//!
//! The program starts with a hand-written prelude that kills the process on
//! a foreign architecture (i386 `int 0x80` entry points report
//! AUDIT_ARCH_I386) or an x32 system call number, which shares x86_64's
//! audit architecture and would otherwise slip past number-based rules.

mod ids;
pub mod policy;
mod rules;
mod tables;
mod tree;

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use policy::{SyscallMode, SyscallPolicy};
use rules::{IntArg, LongArg, Rule, Test, Verdict};

pub use ids::MappedIds;
pub use tables::{ALLOWED, DENIED, IPC};

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
    /// `allow` names a call the filter refuses whatever the allowlist says.
    /// Accepting it silently would leave a profile that reads as if the
    /// call worked.
    #[error("[syscalls] allow cannot allow {name:?}: {reason}")]
    CannotAllow {
        /// The name.
        name: String,
        /// Why the call stays refused.
        reason: &'static str,
    },
    /// The program outgrew what classic BPF can express (a bug in the
    /// tables, not in the profile).
    #[error(
        "the seccomp program needs a conditional jump over {0} instructions; classic BPF allows 255"
    )]
    JumpTooFar(usize),
    /// The program is longer than the kernel accepts.
    #[error("the seccomp program has {0} instructions; the kernel accepts at most 4096")]
    TooLong(usize),
    /// No filter can be built for this CPU architecture.
    #[error("seccomp filters are not supported on {0} by this build")]
    UnsupportedArch(&'static str),
}

/// The installable programs of a policy.
#[derive(Debug, Clone)]
pub struct CompiledFilter {
    programs: Vec<Vec<libc::sock_filter>>,
    sha256: String,
    mode: Option<SyscallMode>,
}

impl CompiledFilter {
    /// The BPF programs in the order they must be installed.
    pub fn programs(&self) -> &[Vec<libc::sock_filter>] {
        &self.programs
    }

    /// Install the filter on the calling thread (and, with TSYNC, its
    /// process): from here on every system call this process makes is
    /// judged by it. Needs no_new_privs or CAP_SYS_ADMIN, as the kernel
    /// does.
    pub fn install(&self) -> nix::Result<()> {
        crate::sys::seccomp::install_filters(self.programs())
    }
    /// Lowercase hex SHA-256 over every instruction of every program.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
    /// Allowlist or denylist; None for the set-id guard alone
    /// ([`host_guard`], when the profile turns the syscall policy off).
    pub fn mode(&self) -> Option<SyscallMode> {
        self.mode
    }
    /// Instructions in all programs.
    pub fn instruction_count(&self) -> usize {
        self.programs.iter().map(Vec::len).sum()
    }
}

/// The number of a system call on this architecture.
pub fn syscall_number(name: &str) -> Option<i64> {
    tables::number_of(name)
}

const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const fn errno(value: libc::c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (value as u32 & libc::SECCOMP_RET_DATA)
}
const EPERM: u32 = errno(libc::EPERM);
const ENOSYS: u32 = errno(libc::ENOSYS);

const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541C;
/// Namespace flags `clone` may not use. CLONE_NEWTIME (0x80) is left out: on
/// `clone` that bit belongs to the exit signal (CSIGNAL), and new time
/// namespaces can only be made with unshare, which is denied.
const CLONE_NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWCGROUP) as u32;

/// S_ISUID | S_ISGID. The kernel stores a mode as umode_t (16 bits) taken
/// from the low bits of the register, so testing these bits of the low word
/// judges exactly the mode the kernel will use, whatever the high bits hold.
const SET_ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// The open flags under which the kernel uses the mode argument at all
/// (its WILL_CREATE): O_CREAT, and __O_TMPFILE, the bit of O_TMPFILE
/// without O_DIRECTORY. Without them the mode register may hold anything
/// (a variadic `syscall(SYS_open, path, O_RDONLY)` leaves junk there), and
/// refusing such opens would fail ordinary reads at random.
const OPEN_CREATES: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

/// personality(0xffffffff) only reads the current persona.
const PERSONALITY_QUERY: u32 = 0xffff_ffff;
/// The plain Linux persona. PER_LINUX32 (what `linux32`/`setarch i686`
/// ask for) is refused too: it only changes what uname reports, which the
/// programs strict is for (compilers, interpreters, build tools building
/// for this machine) never need, and a persona a payload can change is one
/// more kernel path and one more lie to the build tools it starts. A
/// 32-bit cross build wants `--profile standard`, which filters no persona.
const PER_LINUX: u32 = 0;

const NETLINK_ROUTE: u32 = libc::NETLINK_ROUTE as u32;

/// A call and the rules on its arguments.
type ArgRules = (&'static str, Vec<Rule>);

/// The set-id guard: no mode with S_ISUID or S_ISGID, at creation or at
/// chmod. Files the sandbox creates in the project are the host's files
/// (host root's through the idmapped mount when root runs the supervisor),
/// so a set-id bit would hand a later local user the file owner's identity.
/// The price: a call with argument rules never enters the kernel's action
/// cache, so every `openat` runs the program; measured here about 0.2 µs per
/// call (300k opens in Python: 2% more CPU time).
fn set_id_rules() -> Vec<ArgRules> {
    let mode_at = |index: u8| {
        vec![Rule {
            all: vec![Test::AnyBit(IntArg(index), SET_ID_BITS)],
            then: EPERM,
        }]
    };
    let open_mode = |flags: u8, mode: u8| {
        vec![Rule {
            all: vec![
                Test::AnyBit(IntArg(flags), OPEN_CREATES),
                Test::AnyBit(IntArg(mode), SET_ID_BITS),
            ],
            then: EPERM,
        }]
    };
    vec![
        ("chmod", mode_at(1)),
        ("fchmod", mode_at(1)),
        ("fchmodat", mode_at(2)),
        ("fchmodat2", mode_at(2)),
        ("creat", mode_at(1)),
        ("open", open_mode(1, 2)),
        ("openat", open_mode(2, 3)),
        // mknod makes regular files too, with the mode as given.
        ("mknod", mode_at(1)),
        ("mknodat", mode_at(2)),
        // The kernel drops S_ISGID from mkdir's mode today; refusing it keeps
        // the guard from depending on that.
        ("mkdir", mode_at(1)),
        ("mkdirat", mode_at(2)),
    ]
}

/// Argument rules of the two policy modes, beyond the set-id guard.
fn policy_rules(mode: SyscallMode) -> Vec<ArgRules> {
    let mut out = vec![
        (
            "clone",
            vec![Rule {
                all: vec![Test::AnyLowBit(LongArg(0), CLONE_NAMESPACE_FLAGS)],
                then: EPERM,
            }],
        ),
        // The kernel truncates an ioctl's command to 32 bits, so a command
        // with junk in the upper bits is still TIOCSTI to the tty driver (the
        // bypass behind CVE-2019-10063).
        (
            "ioctl",
            [TIOCSTI, TIOCLINUX]
                .into_iter()
                .map(|cmd| Rule {
                    all: vec![Test::Is(IntArg(1), cmd)],
                    then: EPERM,
                })
                .collect(),
        ),
    ];
    // EAFNOSUPPORT and EPROTONOSUPPORT are what a kernel built without the
    // family or protocol answers, so programs take the path they already
    // have for that (libaudit treats an audit socket refused this way as
    // "no audit support"); EPERM reads as a hard failure to many.
    let eafnosupport = errno(libc::EAFNOSUPPORT);
    let family = IntArg(0);
    match mode {
        SyscallMode::Allowlist => {
            out.push((
                "socket",
                vec![
                    Rule {
                        all: [
                            libc::AF_UNIX,
                            libc::AF_INET,
                            libc::AF_INET6,
                            libc::AF_NETLINK,
                        ]
                        .into_iter()
                        .map(|f| Test::IsNot(family, f as u32))
                        .collect(),
                        then: eafnosupport,
                    },
                    Rule {
                        all: vec![
                            Test::Is(family, libc::AF_NETLINK as u32),
                            Test::IsNot(IntArg(2), NETLINK_ROUTE),
                        ],
                        then: errno(libc::EPROTONOSUPPORT),
                    },
                ],
            ));
            // Only AF_UNIX implements socketpair among the families above.
            out.push((
                "socketpair",
                vec![Rule {
                    all: vec![Test::IsNot(family, libc::AF_UNIX as u32)],
                    then: eafnosupport,
                }],
            ));
            out.push((
                "personality",
                vec![Rule {
                    all: [PERSONALITY_QUERY, PER_LINUX]
                        .into_iter()
                        .map(|p| Test::IsNot(IntArg(0), p))
                        .collect(),
                    then: EPERM,
                }],
            ));
        }
        SyscallMode::Denylist => {
            // vsock reaches the hypervisor's host from inside any VM and
            // ignores the network namespace, so no network mode covers it.
            let vsock = |index| Rule {
                all: vec![Test::Is(IntArg(index), libc::AF_VSOCK as u32)],
                then: eafnosupport,
            };
            out.push(("socket", vec![vsock(0)]));
            out.push(("socketpair", vec![vsock(0)]));
        }
    }
    out
}

/// Calls whose checks live in memory seccomp cannot read; they answer
/// ENOSYS so that libc falls back to the call the rules can check.
const FALLBACK_ENOSYS: [(&str, &str); 2] = [
    (
        "clone3",
        "it answers ENOSYS so that libc falls back to clone, whose flags the filter can check",
    ),
    (
        "openat2",
        "it answers ENOSYS so that programs fall back to openat, whose mode the filter can check for set-id bits",
    ),
];

/// Refuse `allow` entries that the filter overrides anyway.
fn check_allowable(allow: &[String]) -> Result<(), SeccompError> {
    for name in allow {
        let reason =
            if let Some((_, reason)) = FALLBACK_ENOSYS.iter().find(|(call, _)| call == name) {
                *reason
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

fn resolve(names: &[&str], extra: &[String], list: &'static str) -> Result<Vec<u32>, SeccompError> {
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
    let mut numbers: Vec<u32> = numbers
        .into_iter()
        .filter_map(|nr| u32::try_from(nr).ok())
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    Ok(numbers)
}

/// Per-call verdicts, from the weakest layer to the strongest.
struct Verdicts {
    calls: BTreeMap<u32, Verdict>,
    otherwise: u32,
}

impl Verdicts {
    fn current(&self, nr: u32) -> Option<u32> {
        match self.calls.get(&nr) {
            None => Some(self.otherwise),
            Some(Verdict::Fixed(action)) => Some(*action),
            Some(Verdict::Rules { .. }) => None,
        }
    }

    fn set(&mut self, numbers: impl IntoIterator<Item = u32>, action: u32) {
        for nr in numbers {
            self.calls.insert(nr, Verdict::Fixed(action));
        }
    }

    /// Rules only matter where the call would otherwise be allowed.
    fn add_rules(&mut self, list: Vec<ArgRules>) {
        for (name, rules) in list {
            let Some(nr) = syscall_number(name).and_then(|nr| u32::try_from(nr).ok()) else {
                continue;
            };
            if let Some(Verdict::Rules {
                rules: existing, ..
            }) = self.calls.get_mut(&nr)
            {
                existing.extend(rules);
            } else if self.current(nr) == Some(ALLOW) {
                let otherwise = ALLOW;
                self.calls.insert(nr, Verdict::Rules { rules, otherwise });
            }
        }
    }

    /// For a learning run ([`learning`]): USER_NOTIF in place of every
    /// errno, and for the `observed` calls in place of ALLOW.
    fn notify_refusals(&mut self, observed: &[u32]) {
        const NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
        let refuses = |action: u32| refusal_errno(action).is_some();
        let otherwise = self.otherwise;
        for nr in observed {
            self.calls.entry(*nr).or_insert(Verdict::Fixed(otherwise));
        }
        for (nr, verdict) in self.calls.iter_mut() {
            let seen = observed.contains(nr);
            let swap = |action: &mut u32| {
                if refuses(*action) || (seen && *action == ALLOW) {
                    *action = NOTIFY;
                }
            };
            match verdict {
                Verdict::Fixed(action) => swap(action),
                Verdict::Rules { rules, otherwise } => {
                    rules.iter_mut().for_each(|rule| swap(&mut rule.then));
                    swap(otherwise);
                }
            }
        }
        if refuses(self.otherwise) {
            self.otherwise = NOTIFY;
        }
    }

    fn program(self) -> Result<Vec<libc::sock_filter>, SeccompError> {
        let mut entries = Vec::with_capacity(self.calls.len());
        for (nr, verdict) in &self.calls {
            if matches!(verdict, Verdict::Fixed(action) if *action == self.otherwise) {
                continue;
            }
            entries.push((*nr, verdict.compile()?));
        }
        let mut program = prelude();
        program.extend(tree::dispatch(&entries, self.otherwise)?);
        // BPF_MAXINSNS.
        if program.len() > 4096 {
            return Err(SeccompError::TooLong(program.len()));
        }
        Ok(program)
    }
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

fn finish(program: Vec<libc::sock_filter>, mode: Option<SyscallMode>) -> CompiledFilter {
    let programs = vec![program];
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
    CompiledFilter {
        programs,
        sha256,
        mode,
    }
}

fn fallback_numbers() -> impl Iterator<Item = u32> {
    FALLBACK_ENOSYS
        .iter()
        .filter_map(|(name, _)| syscall_number(name))
        .filter_map(|nr| u32::try_from(nr).ok())
}

/// Compile `policy` into the programs to install.
pub fn compile(policy: &SyscallPolicy) -> Result<CompiledFilter, SeccompError> {
    Ok(finish(
        policy_verdicts(policy)?.program()?,
        Some(policy.mode),
    ))
}

/// Compile `policy` for a payload in a user namespace of its own that maps
/// only `ids`: [`compile`], plus EPERM (instead of the kernel's EINVAL)
/// for set-id and chown calls naming any other id, as bare for an
/// unprivileged user (see [`ids`]).
pub fn compile_in_user_namespace(
    policy: &SyscallPolicy,
    ids: MappedIds,
) -> Result<CompiledFilter, SeccompError> {
    Ok(finish(
        user_namespace_verdicts(policy, ids)?.program()?,
        Some(policy.mode),
    ))
}

fn user_namespace_verdicts(
    policy: &SyscallPolicy,
    ids: MappedIds,
) -> Result<Verdicts, SeccompError> {
    let mut verdicts = policy_verdicts(policy)?;
    verdicts.add_rules(ids::unmapped_id_rules(ids));
    Ok(verdicts)
}

/// What a run without namespaces shares with the host, which the filter
/// must then close itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedHost {
    /// No network namespace: `socket` is refused for every family. AF_UNIX
    /// too, because a pathname socket (`/var/run/docker.sock`, a D-Bus
    /// session bus) is reached by path and Landlock does not cover
    /// `connect`; `socketpair` stays, as it reaches nothing outside.
    pub deny_sockets: bool,
}

/// The filter for a run without namespaces: `policy` (None: the profile
/// turned the syscall policy off, so the set-id guard alone) plus the rules
/// that stand in for the namespaces the run lacks. Those are not part of
/// the syscall policy a profile can turn off: they are how `network = "none"`
/// and a private IPC are kept at all.
pub fn compile_without_namespaces(
    policy: Option<&SyscallPolicy>,
    shared: SharedHost,
) -> Result<CompiledFilter, SeccompError> {
    if !tables::SUPPORTED {
        return Err(SeccompError::UnsupportedArch(std::env::consts::ARCH));
    }
    let mut verdicts = match policy {
        Some(policy) => policy_verdicts(policy)?,
        None => guard_verdicts()?,
    };
    let eafnosupport = errno(libc::EAFNOSUPPORT);
    verdicts.add_rules(vec![(
        "socketpair",
        vec![Rule {
            all: vec![Test::IsNot(IntArg(0), libc::AF_UNIX as u32)],
            then: eafnosupport,
        }],
    )]);
    if shared.deny_sockets {
        verdicts.set(
            syscall_number("socket").and_then(|nr| u32::try_from(nr).ok()),
            eafnosupport,
        );
    }
    verdicts.set(resolve(IPC, &[], "deny")?, EPERM);
    Ok(finish(verdicts.program()?, policy.map(|p| p.mode)))
}

fn policy_verdicts(policy: &SyscallPolicy) -> Result<Verdicts, SeccompError> {
    if !tables::SUPPORTED {
        return Err(SeccompError::UnsupportedArch(std::env::consts::ARCH));
    }
    // Unknown names first: a typo is the likelier mistake and its message
    // more useful.
    resolve(&[], &policy.allow, "allow")?;
    check_allowable(&policy.allow)?;
    let denied = resolve(DENIED, &policy.deny, "deny")?;

    let mut verdicts = match policy.mode {
        SyscallMode::Allowlist => {
            let mut v = Verdicts {
                calls: BTreeMap::new(),
                otherwise: ENOSYS,
            };
            v.set(resolve(ALLOWED, &policy.allow, "allow")?, ALLOW);
            v.set(resolve(IPC, &[], "allow")?, ALLOW);
            v
        }
        // `allow` only widens an allowlist; its names were validated above.
        SyscallMode::Denylist => Verdicts {
            calls: BTreeMap::new(),
            otherwise: ALLOW,
        },
    };
    verdicts.add_rules(set_id_rules());
    verdicts.add_rules(policy_rules(policy.mode));
    verdicts.set(fallback_numbers(), ENOSYS);
    verdicts.set(denied, EPERM);
    Ok(verdicts)
}

/// The set-id guard alone, for a profile with `enforce.seccomp = "off"`:
/// that switch turns off the syscall policy, which only protects the
/// sandbox from its payload's kernel reach, while set-id files protect
/// the host's other users. None where this build has no filter for the
/// architecture (as `compile` fails there, nothing else is filtered either).
pub fn host_guard() -> Result<Option<CompiledFilter>, SeccompError> {
    if !tables::SUPPORTED {
        return Ok(None);
    }
    Ok(Some(finish(guard_verdicts()?.program()?, None)))
}

/// The calls a learning run observes (`sandbox learn`): each names a path
/// the view may lack.
pub const OBSERVED: &[&str] = &[
    "open",
    "openat",
    "execve",
    "execveat",
    "stat",
    "lstat",
    "newfstatat",
    "statx",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
];

/// The one filter of a learning run: the profile's own program (what
/// [`compile_in_user_namespace`] builds for `policy`, or the set-id guard
/// alone for None), with USER_NOTIF wherever that program answers an errno,
/// and for the [`OBSERVED`] calls wherever it allows them.
///
/// One program, because the kernel gives a process one listener (a second
/// filter asking for one fails with EBUSY) and ranks ERRNO above USER_NOTIF
/// across filters: beside the profile's filter, an observer never heard of
/// the calls that filter refused. So the supervisor answers every notified
/// call as the profile's program would ([`profile_answer`] on that
/// program): "continue" only where it allows, and exactly its errno where
/// it refuses, after noting the call. KILL stays in the program, so the
/// supervisor never has to carry it out. None where this build has no
/// filter for the architecture.
pub fn learning(
    policy: Option<&SyscallPolicy>,
    ids: MappedIds,
) -> Result<Option<Vec<libc::sock_filter>>, SeccompError> {
    if !tables::SUPPORTED {
        return Ok(None);
    }
    let mut verdicts = match policy {
        Some(policy) => user_namespace_verdicts(policy, ids)?,
        None => guard_verdicts()?,
    };
    let observed: Vec<u32> = OBSERVED
        .iter()
        .filter_map(|name| syscall_number(name))
        .filter_map(|nr| u32::try_from(nr).ok())
        .collect();
    verdicts.notify_refusals(&observed);
    verdicts.program().map(Some)
}

/// What `program` (one of this module's) answers a call: the seccomp
/// return value, or None when it cannot tell (then the caller refuses).
pub fn profile_answer(
    program: &[libc::sock_filter],
    arch: u32,
    nr: i32,
    args: [u64; 6],
) -> Option<u32> {
    tree::interpreter::evaluate(program, arch, nr as u32, args)
}

/// Whether a seccomp return value refuses with an errno, and which.
pub fn refusal_errno(action: u32) -> Option<i32> {
    (action & libc::SECCOMP_RET_ACTION_FULL == libc::SECCOMP_RET_ERRNO)
        .then_some((action & libc::SECCOMP_RET_DATA) as i32)
}

/// Whether a seccomp return value lets the call run.
pub fn allows(action: u32) -> bool {
    action & libc::SECCOMP_RET_ACTION_FULL == ALLOW
}

/// The name of system call `nr` on this architecture.
pub fn syscall_name(nr: i32) -> Option<&'static str> {
    tables::SYSCALLS
        .iter()
        .find(|(_, number)| *number == i64::from(nr))
        .and_then(|(name, _)| name.strip_prefix("SYS_"))
}

/// `policy` widened by the narrowest edit the profile format has for
/// letting `name` through: out of the profile's own `deny`, and (in
/// allowlist mode, when not allowed already) into `allow`. Whether that is
/// enough is for the compiled result to say: the built-in deny list and
/// the argument rules stay whatever a profile writes.
pub fn allowing(policy: &SyscallPolicy, name: &str) -> SyscallPolicy {
    let mut wider = policy.clone();
    wider.deny.retain(|denied| denied != name);
    let listed =
        ALLOWED.contains(&name) || IPC.contains(&name) || wider.allow.iter().any(|a| a == name);
    if wider.mode == SyscallMode::Allowlist && !listed {
        wider.allow.push(name.to_owned());
    }
    wider
}

fn guard_verdicts() -> Result<Verdicts, SeccompError> {
    let mut verdicts = Verdicts {
        calls: BTreeMap::new(),
        otherwise: ALLOW,
    };
    verdicts.add_rules(set_id_rules());
    // openat2 carries its mode in memory; without this it would bypass the guard.
    verdicts.set(
        syscall_number("openat2").and_then(|nr| u32::try_from(nr).ok()),
        ENOSYS,
    );
    Ok(verdicts)
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
    fn every_filter_is_one_program_with_the_prelude() {
        let guard = host_guard().unwrap().unwrap();
        for filter in [
            compile(&policy(SyscallMode::Allowlist)).unwrap(),
            compile(&policy(SyscallMode::Denylist)).unwrap(),
            guard,
        ] {
            assert_eq!(filter.programs().len(), 1);
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
    fn the_table_is_sorted_and_every_name_resolves_to_its_own_number() {
        for pair in tables::SYSCALLS.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{} before {}", pair[0].0, pair[1].0);
        }
        for (name, number) in tables::SYSCALLS {
            assert!(name.starts_with("SYS_"), "{name}");
            assert_eq!(syscall_number(&name[4..]), Some(*number), "{name}");
        }
        assert_eq!(syscall_number("SYS_read"), None);
        assert_eq!(syscall_number("no_such_call"), None);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn lists_resolve_and_never_overlap() {
        for name in ALLOWED.iter().chain(DENIED).chain(IPC) {
            assert!(
                syscall_number(name).is_some(),
                "{name} is not a system call here"
            );
        }
        for name in DENIED {
            assert!(!ALLOWED.contains(name), "{name} is both allowed and denied");
        }
        assert!(!ALLOWED.contains(&"clone3"), "clone3 must answer ENOSYS");
        assert!(!ALLOWED.contains(&"openat2"), "openat2 must answer ENOSYS");
        assert_eq!(syscall_number("read"), Some(libc::SYS_read));
    }

    #[cfg(target_arch = "x86_64")]
    const X86_64: u32 = 0xC000_003E;

    #[cfg(target_arch = "x86_64")]
    fn verdict(filter: &CompiledFilter, nr: u32, args: [u64; 6]) -> u32 {
        assert_eq!(filter.programs().len(), 1);
        super::tree::interpreter::run(&filter.programs()[0], X86_64, nr, args)
    }

    #[cfg(target_arch = "x86_64")]
    fn nr(name: &str) -> u32 {
        syscall_number(name).unwrap() as u32
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn verdicts_of_the_filter() {
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
        let strict = compile(&policy(SyscallMode::Allowlist)).unwrap();
        let standard = compile(&policy(SyscallMode::Denylist)).unwrap();
        let guard = host_guard().unwrap().unwrap();
        for (name, number) in tables::SYSCALLS {
            let name = name.trim_start_matches("SYS_");
            let number = *number as u32;
            let (want_strict, want_standard) = if DENIED.contains(&name) {
                (EPERM, EPERM)
            } else if FALLBACK_ENOSYS.iter().any(|(call, _)| *call == name) {
                (ENOSYS, ENOSYS)
            } else if ALLOWED.contains(&name) || IPC.contains(&name) {
                (ALLOW, ALLOW)
            } else {
                (ENOSYS, ALLOW)
            };
            let args = harmless_args(name);
            assert_eq!(
                verdict(&strict, number, args),
                want_strict,
                "{name} in strict"
            );
            assert_eq!(
                verdict(&standard, number, args),
                want_standard,
                "{name} in standard"
            );
            let want_guard = if name == "openat2" { ENOSYS } else { ALLOW };
            assert_eq!(
                verdict(&guard, number, args),
                want_guard,
                "{name} guard only"
            );
        }
        // Numbers no table knows (newer kernels' calls) take the default.
        assert_eq!(verdict(&strict, 463, [0; 6]), ENOSYS);
        assert_eq!(verdict(&standard, 463, [0; 6]), ALLOW);
        assert_eq!(verdict(&guard, 463, [0; 6]), ALLOW);
    }

    /// Arguments every argument rule lets through.
    #[cfg(target_arch = "x86_64")]
    fn harmless_args(name: &str) -> [u64; 6] {
        match name {
            "socket" | "socketpair" => [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
            "personality" => [0xffff_ffff, 0, 0, 0, 0, 0],
            _ => [0; 6],
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn all_filters() -> Vec<(&'static str, CompiledFilter)> {
        vec![
            ("strict", compile(&policy(SyscallMode::Allowlist)).unwrap()),
            ("standard", compile(&policy(SyscallMode::Denylist)).unwrap()),
            ("guard", host_guard().unwrap().unwrap()),
        ]
    }

    #[cfg(target_arch = "x86_64")]
    fn arg(index: usize, value: u64) -> [u64; 6] {
        let mut args = [0; 6];
        args[index] = value;
        args
    }

    /// Values whose low 32 bits the kernel reads, with junk above them.
    #[cfg(target_arch = "x86_64")]
    const HIGH: [u64; 3] = [0, 1 << 32, 0xffff_ffff_0000_0000];

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn set_id_modes_are_refused_in_every_mode_as_the_kernel_reads_them() {
        let mode_calls = [
            ("chmod", 1),
            ("fchmod", 1),
            ("fchmodat", 2),
            ("fchmodat2", 2),
            ("creat", 1),
            ("mknod", 1),
            ("mknodat", 2),
            ("mkdir", 1),
            ("mkdirat", 2),
        ];
        for (label, f) in all_filters() {
            for (name, index) in mode_calls {
                for high in HIGH {
                    for mode in [0o4755u64, 0o2755, 0o6777, 0o104755, 0o14_0000 | 0o4000] {
                        assert_eq!(
                            verdict(&f, nr(name), arg(index, high | mode)),
                            EPERM,
                            "{label}: {name} mode {:#o}",
                            high | mode
                        );
                    }
                    // umode_t keeps the low 16 bits: 0o10_0755 is 0755 with S_IFREG.
                    for mode in [0o755u64, 0o1777, 0o100644] {
                        assert_eq!(
                            verdict(&f, nr(name), arg(index, high | mode)),
                            ALLOW,
                            "{label}: {name} mode {:#o}",
                            high | mode
                        );
                    }
                }
            }
            let tmpfile = (libc::O_TMPFILE | libc::O_RDWR) as u64;
            let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
            for (name, flags_at) in [("open", 1), ("openat", 2)] {
                let call = |flags: u64, mode: u64| {
                    let mut args = [0; 6];
                    args[flags_at] = flags;
                    args[flags_at + 1] = mode;
                    verdict(&f, nr(name), args)
                };
                for high in HIGH {
                    for flags in [creat, tmpfile, libc::O_CREAT as u64 | libc::O_EXCL as u64] {
                        assert_eq!(call(high | flags, 0o4755), EPERM, "{label}: {name}");
                        assert_eq!(call(flags, high | 0o2711), EPERM, "{label}: {name}");
                        assert_eq!(call(high | flags, 0o644), ALLOW, "{label}: {name}");
                    }
                    // Without O_CREAT/O_TMPFILE the kernel ignores the mode.
                    assert_eq!(call(high | libc::O_RDONLY as u64, 0o4755), ALLOW, "{label}");
                    assert_eq!(call(high | libc::O_DIRECTORY as u64, 0o6777), ALLOW);
                }
            }
            assert_eq!(verdict(&f, nr("openat2"), [0; 6]), ENOSYS, "{label}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn strict_sockets_are_unix_inet_inet6_and_netlink_route_only() {
        let f = compile(&policy(SyscallMode::Allowlist)).unwrap();
        let eafnosupport = errno(libc::EAFNOSUPPORT);
        let allowed = [
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
        ];
        for high in HIGH {
            for family in 0..64u64 {
                let want = if allowed.contains(&(family as i32)) {
                    ALLOW
                } else {
                    eafnosupport
                };
                let args = [high | family, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
                assert_eq!(verdict(&f, nr("socket"), args), want, "family {family}");
                let want_pair = if family == libc::AF_UNIX as u64 {
                    ALLOW
                } else {
                    eafnosupport
                };
                assert_eq!(
                    verdict(&f, nr("socketpair"), args),
                    want_pair,
                    "pair {family}"
                );
            }
            for protocol in 0..32u64 {
                let args = [
                    libc::AF_NETLINK as u64,
                    libc::SOCK_RAW as u64,
                    high | protocol,
                    0,
                    0,
                    0,
                ];
                let want = if protocol == 0 {
                    ALLOW
                } else {
                    errno(libc::EPROTONOSUPPORT)
                };
                assert_eq!(verdict(&f, nr("socket"), args), want, "netlink {protocol}");
            }
            // The protocol of the other families is theirs to judge.
            let tcp = [
                high | libc::AF_INET as u64,
                1,
                libc::IPPROTO_TCP as u64,
                0,
                0,
                0,
            ];
            assert_eq!(verdict(&f, nr("socket"), tcp), ALLOW);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn denylist_refuses_vsock_whatever_the_high_bits() {
        let f = compile(&policy(SyscallMode::Denylist)).unwrap();
        for high in HIGH {
            let vsock = arg(0, high | libc::AF_VSOCK as u64);
            assert_eq!(verdict(&f, nr("socket"), vsock), errno(libc::EAFNOSUPPORT));
            assert_eq!(
                verdict(&f, nr("socketpair"), vsock),
                errno(libc::EAFNOSUPPORT)
            );
            let audit = [high | libc::AF_NETLINK as u64, 3, 9, 0, 0, 0];
            assert_eq!(verdict(&f, nr("socket"), audit), ALLOW);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn strict_personality_is_the_query_or_plain_linux_and_no_numa_policy() {
        let f = compile(&policy(SyscallMode::Allowlist)).unwrap();
        const READ_IMPLIES_EXEC: u64 = 0x040_0000;
        const ADDR_NO_RANDOMIZE: u64 = 0x004_0000;
        const UNAME26: u64 = 0x002_0000;
        const PER_LINUX32: u64 = 8;
        for high in HIGH {
            for persona in [0xffff_ffffu64, 0] {
                assert_eq!(
                    verdict(&f, nr("personality"), arg(0, high | persona)),
                    ALLOW
                );
            }
            for persona in [
                PER_LINUX32,
                READ_IMPLIES_EXEC,
                ADDR_NO_RANDOMIZE,
                UNAME26,
                ADDR_NO_RANDOMIZE | 8,
                0xffff_fffe,
                1,
            ] {
                assert_eq!(
                    verdict(&f, nr("personality"), arg(0, high | persona)),
                    EPERM,
                    "persona {:#x}",
                    high | persona
                );
            }
        }
        for name in [
            "mbind",
            "set_mempolicy",
            "get_mempolicy",
            "migrate_pages",
            "move_pages",
            "set_mempolicy_home_node",
        ] {
            assert_eq!(verdict(&f, nr(name), [0; 6]), ENOSYS, "{name}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_guard_alone_filters_nothing_but_set_id_modes_and_openat2() {
        let guard = host_guard().unwrap().unwrap();
        assert_eq!(guard.mode(), None);
        let new_user = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64;
        assert_eq!(verdict(&guard, nr("clone"), arg(0, new_user)), ALLOW);
        assert_eq!(verdict(&guard, nr("ptrace"), [0; 6]), ALLOW);
        assert_eq!(
            verdict(&guard, nr("socket"), arg(0, libc::AF_VSOCK as u64)),
            ALLOW
        );
        assert_eq!(verdict(&guard, nr("chmod"), arg(1, 0o4755)), EPERM);
        assert_eq!(
            verdict(&guard, 0x4000_0000 | nr("getpid"), [0; 6]),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_denied_call_stays_denied_even_when_it_has_argument_rules() {
        let mut p = policy(SyscallMode::Allowlist);
        p.deny = vec!["socket".into(), "openat".into()];
        let f = compile(&p).unwrap();
        assert_eq!(
            verdict(&f, nr("socket"), arg(0, libc::AF_UNIX as u64)),
            EPERM
        );
        assert_eq!(verdict(&f, nr("openat"), [0; 6]), EPERM);
        let mut p = policy(SyscallMode::Allowlist);
        p.allow = vec!["openat2".into()];
        assert!(matches!(
            compile(&p),
            Err(SeccompError::CannotAllow { name, .. }) if name == "openat2"
        ));
    }

    /// The learning program hands the supervisor every call the profile's
    /// own program refuses with an errno and every observed call it allows,
    /// and answers the rest exactly as that program does: it never allows a
    /// call the profile refuses, whatever the arguments.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_learning_program_allows_nothing_the_profile_refuses() {
        let ids = MappedIds {
            uid: 1000,
            gid: 1000,
        };
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let observed: Vec<u32> = OBSERVED.iter().map(|n| nr(n)).collect();
        let arg_sets: [[u64; 6]; 5] = [
            [0; 6],
            [u64::from(libc::AF_PACKET as u32), 3, 0, 0, 0, 0],
            [
                libc::AT_FDCWD as u64,
                0,
                (libc::O_CREAT | libc::O_WRONLY) as u64,
                0o4755,
                0,
                0,
            ],
            [2, 0, 0, 0o4755, 0, 0],
            [u64::from(libc::CLONE_NEWUSER as u32), 0, 0, 0, 0, 0],
        ];
        for mode in [SyscallMode::Allowlist, SyscallMode::Denylist] {
            let profile = compile_in_user_namespace(&policy(mode), ids).unwrap();
            let learning = learning(Some(&policy(mode)), ids).unwrap().unwrap();
            for call in 0..480u32 {
                for args in arg_sets {
                    let base = verdict(&profile, call, args);
                    let got = tree::interpreter::run(&learning, X86_64, call, args);
                    let want = if refusal_errno(base).is_some()
                        || (allows(base) && observed.contains(&call))
                    {
                        notify
                    } else {
                        base
                    };
                    assert_eq!(got, want, "{mode:?} nr {call} args {args:?}");
                    assert!(!allows(got) || allows(base), "{mode:?} nr {call}");
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_narrowest_entry_lifts_a_refusal_only_where_a_profile_can() {
        let strict = policy(SyscallMode::Allowlist);
        let wider = allowing(&strict, "get_mempolicy");
        assert_eq!(wider.allow, ["get_mempolicy"]);
        assert!(allows(verdict(
            &compile(&wider).unwrap(),
            nr("get_mempolicy"),
            [0; 6]
        )));
        // Already allowed: nothing to add.
        assert!(allowing(&strict, "read").allow.is_empty());
        // The profile's own deny is lifted by leaving it, in either mode.
        let mut denying = policy(SyscallMode::Denylist);
        denying.deny = vec!["mbind".into()];
        let wider = allowing(&denying, "mbind");
        assert!(wider.deny.is_empty() && wider.allow.is_empty());
        // The built-in deny list stays: the widened policy does not compile.
        assert!(compile(&allowing(&strict, "ptrace")).is_err());
        assert_eq!(
            syscall_name(nr("get_mempolicy") as i32),
            Some("get_mempolicy")
        );
    }
}
