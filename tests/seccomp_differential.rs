//! The seccomp compiler (crates/sandbox/src/seccomp) against libseccomp: every filter the
//! sandbox builds (the built-in profiles, the set-id guard, the filters of
//! runs without namespaces and in a user namespace of their own, and
//! randomly drawn policies) is also built by libseccomp from a statement
//! of the same policy written here, and both classic-BPF programs are run
//! by a small interpreter over the same system calls, architectures and
//! argument values. Every answer (action and errno) must agree.
//!
//! The policy is stated here from the compiler's documentation (crates/sandbox/src/seccomp
//! module docs and its rule tables' comments), not taken from the compiler:
//! a wrong layering (what wins over what) shows up as a disagreement as
//! much as wrong BPF does.
//!
//! libseccomp is driven through a small C program built at test time
//! against libseccomp-dev (`apt-get install libseccomp-dev`): no crate to
//! download, no `unsafe` in the tests, and a machine without the headers
//! skips loudly instead of failing to build the whole test suite.
//!
//! Random policies use a seed printed at the start; SANDBOX_SECCOMP_SEED=N
//! replays one.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandbox::seccomp::policy::{SyscallMode, SyscallPolicy};
use sandbox::seccomp::{self, CompiledFilter, MappedIds, SharedHost};

// ---- seccomp return values ----

const ALLOW: u32 = 0x7fff_0000;
const KILL_PROCESS: u32 = 0x8000_0000;
const fn errno(value: i32) -> u32 {
    0x0005_0000 | (value as u32 & 0xffff)
}
const EPERM: u32 = errno(libc::EPERM);
const ENOSYS: u32 = errno(libc::ENOSYS);
const EAFNOSUPPORT: u32 = errno(libc::EAFNOSUPPORT);
const EPROTONOSUPPORT: u32 = errno(libc::EPROTONOSUPPORT);

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
const AUDIT_ARCH_ARM: u32 = 0x4000_0028;
const AUDIT_ARCH_RISCV64: u32 = 0xC000_00F3;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// ---- the policy as stated here ----

/// One test on the low 32 bits of an argument (the kernel reads the
/// filtered arguments as 32-bit values; see crates/sandbox/src/seccomp/rules.rs).
#[derive(Debug, Clone, Copy)]
enum Test {
    AnyBit(usize, u32),
    Is(usize, u32),
    IsNot(usize, u32),
}

#[derive(Debug, Clone)]
struct Rule {
    all: Vec<Test>,
    then: u32,
}

#[derive(Debug, Clone)]
enum Verdict {
    Fixed(u32),
    /// The first rule that holds decides, else `otherwise`.
    Rules(Vec<Rule>, u32),
}

#[derive(Debug, Clone)]
struct Spec {
    calls: BTreeMap<u32, Verdict>,
    default: u32,
}

fn nr(name: &str) -> Option<u32> {
    seccomp::syscall_number(name).and_then(|n| u32::try_from(n).ok())
}

impl Spec {
    fn new(default: u32) -> Spec {
        Spec {
            calls: BTreeMap::new(),
            default,
        }
    }

    fn current(&self, nr: u32) -> Option<u32> {
        match self.calls.get(&nr) {
            None => Some(self.default),
            Some(Verdict::Fixed(action)) => Some(*action),
            Some(Verdict::Rules(..)) => None,
        }
    }

    fn set(&mut self, names: &[&str], action: u32) {
        for name in names {
            if let Some(nr) = nr(name) {
                self.calls.insert(nr, Verdict::Fixed(action));
            }
        }
    }

    /// Argument rules narrow what is allowed: they join the rules a call
    /// already has, or apply to a call allowed outright, and do nothing to
    /// a call refused anyway.
    fn narrow(&mut self, name: &str, rules: Vec<Rule>) {
        let Some(nr) = nr(name) else { return };
        if let Some(Verdict::Rules(existing, _)) = self.calls.get_mut(&nr) {
            existing.extend(rules);
        } else if self.current(nr) == Some(ALLOW) {
            self.calls.insert(nr, Verdict::Rules(rules, ALLOW));
        }
    }
}

fn rule(all: Vec<Test>, then: u32) -> Rule {
    Rule { all, then }
}

const SET_ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
const OPEN_CREATES: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;
const CLONE_NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWCGROUP) as u32;
const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541C;
const PERSONALITY_QUERY: u32 = 0xffff_ffff;
const PER_LINUX: u32 = 0;

/// The set-id guard: no S_ISUID/S_ISGID mode at creation or chmod; the
/// open calls only when they create.
fn set_id_guard(spec: &mut Spec) {
    use Test::*;
    for (name, mode) in [
        ("chmod", 1),
        ("fchmod", 1),
        ("fchmodat", 2),
        ("fchmodat2", 2),
        ("creat", 1),
        ("mknod", 1),
        ("mknodat", 2),
        ("mkdir", 1),
        ("mkdirat", 2),
    ] {
        spec.narrow(name, vec![rule(vec![AnyBit(mode, SET_ID_BITS)], EPERM)]);
    }
    for (name, flags, mode) in [("open", 1, 2), ("openat", 2, 3)] {
        spec.narrow(
            name,
            vec![rule(
                vec![AnyBit(flags, OPEN_CREATES), AnyBit(mode, SET_ID_BITS)],
                EPERM,
            )],
        );
    }
}

fn policy_rules(spec: &mut Spec, mode: SyscallMode) {
    use Test::*;
    spec.narrow(
        "clone",
        vec![rule(vec![AnyBit(0, CLONE_NAMESPACE_FLAGS)], EPERM)],
    );
    spec.narrow(
        "ioctl",
        vec![
            rule(vec![Is(1, TIOCSTI)], EPERM),
            rule(vec![Is(1, TIOCLINUX)], EPERM),
        ],
    );
    let family = |f: i32| f as u32;
    match mode {
        SyscallMode::Allowlist => {
            spec.narrow(
                "socket",
                vec![
                    rule(
                        [
                            libc::AF_UNIX,
                            libc::AF_INET,
                            libc::AF_INET6,
                            libc::AF_NETLINK,
                        ]
                        .into_iter()
                        .map(|f| IsNot(0, family(f)))
                        .collect(),
                        EAFNOSUPPORT,
                    ),
                    rule(
                        vec![
                            Is(0, family(libc::AF_NETLINK)),
                            IsNot(2, libc::NETLINK_ROUTE as u32),
                        ],
                        EPROTONOSUPPORT,
                    ),
                ],
            );
            spec.narrow(
                "socketpair",
                vec![rule(vec![IsNot(0, family(libc::AF_UNIX))], EAFNOSUPPORT)],
            );
            spec.narrow(
                "personality",
                vec![rule(
                    vec![IsNot(0, PERSONALITY_QUERY), IsNot(0, PER_LINUX)],
                    EPERM,
                )],
            );
        }
        SyscallMode::Denylist => {
            for name in ["socket", "socketpair"] {
                spec.narrow(
                    name,
                    vec![rule(vec![Is(0, family(libc::AF_VSOCK))], EAFNOSUPPORT)],
                );
            }
        }
    }
}

/// `seccomp::compile`: deny list EPERM over clone3/openat2 ENOSYS over
/// the argument rules over the mode's allow/deny.
fn policy_spec(policy: &SyscallPolicy) -> Spec {
    let mut spec = match policy.mode {
        SyscallMode::Allowlist => {
            let mut spec = Spec::new(ENOSYS);
            spec.set(seccomp::ALLOWED, ALLOW);
            let extra: Vec<&str> = policy.allow.iter().map(String::as_str).collect();
            spec.set(&extra, ALLOW);
            spec.set(seccomp::IPC, ALLOW);
            spec
        }
        SyscallMode::Denylist => Spec::new(ALLOW),
    };
    set_id_guard(&mut spec);
    policy_rules(&mut spec, policy.mode);
    spec.set(&["clone3", "openat2"], ENOSYS);
    spec.set(seccomp::DENIED, EPERM);
    let deny: Vec<&str> = policy.deny.iter().map(String::as_str).collect();
    spec.set(&deny, EPERM);
    spec
}

/// `seccomp::host_guard`: everything allowed but set-id modes (and
/// openat2, which carries its mode where the filter cannot read it).
fn guard_spec() -> Spec {
    let mut spec = Spec::new(ALLOW);
    set_id_guard(&mut spec);
    spec.set(&["openat2"], ENOSYS);
    spec
}

/// `seccomp::compile_without_namespaces`.
fn without_namespaces_spec(policy: Option<&SyscallPolicy>, shared: SharedHost) -> Spec {
    let mut spec = match policy {
        Some(policy) => policy_spec(policy),
        None => guard_spec(),
    };
    spec.narrow(
        "socketpair",
        vec![rule(
            vec![Test::IsNot(0, libc::AF_UNIX as u32)],
            EAFNOSUPPORT,
        )],
    );
    if shared.deny_sockets {
        spec.set(&["socket"], EAFNOSUPPORT);
    }
    spec.set(seccomp::IPC, EPERM);
    spec
}

/// `seccomp::compile_in_user_namespace`: set-id and chown calls naming an
/// id other than the mapped one (or -1, "unchanged") answer EPERM.
fn user_namespace_spec(policy: &SyscallPolicy, ids: MappedIds) -> Spec {
    let mut spec = policy_spec(policy);
    let foreign = |own: u32, index: usize| {
        rule(
            vec![Test::IsNot(index, own), Test::IsNot(index, u32::MAX)],
            EPERM,
        )
    };
    let uids = |indices: &[usize]| indices.iter().map(|i| foreign(ids.uid, *i)).collect();
    let gids = |indices: &[usize]| indices.iter().map(|i| foreign(ids.gid, *i)).collect();
    let owner = |uid: usize, gid: usize| vec![foreign(ids.uid, uid), foreign(ids.gid, gid)];
    spec.narrow("setuid", uids(&[0]));
    spec.narrow("setreuid", uids(&[0, 1]));
    spec.narrow("setresuid", uids(&[0, 1, 2]));
    spec.narrow("setgid", gids(&[0]));
    spec.narrow("setregid", gids(&[0, 1]));
    spec.narrow("setresgid", gids(&[0, 1, 2]));
    spec.narrow("chown", owner(1, 2));
    spec.narrow("lchown", owner(1, 2));
    spec.narrow("fchown", owner(1, 2));
    spec.narrow("fchownat", owner(2, 3));
    spec
}

// ---- first-match rules as disjoint libseccomp rules ----
//
// libseccomp refuses two rules of different actions that overlap on one
// call, and compares whole 64-bit arguments except through a mask. So
// each call's ordered rules become disjoint regions, each a conjunction
// of masked comparisons on the low words ("cubes"), with the high word
// masked out as the kernel ignores it for these arguments.

/// Per argument: (mask, value) the low word must match under the mask.
type Cube = [Option<(u32, u32)>; 6];

const ANY: Cube = [None; 6];

fn intersect(a: &Cube, b: &Cube) -> Option<Cube> {
    let mut out = ANY;
    for i in 0..6 {
        out[i] = match (a[i], b[i]) {
            (None, x) | (x, None) => x,
            (Some((ma, va)), Some((mb, vb))) => {
                let common = ma & mb;
                if va & common != vb & common {
                    return None;
                }
                Some((ma | mb, (va & ma) | (vb & mb)))
            }
        };
    }
    Some(out)
}

fn intersect_sets(a: &[Cube], b: &[Cube]) -> Vec<Cube> {
    a.iter()
        .flat_map(|x| b.iter().filter_map(move |y| intersect(x, y)))
        .collect()
}

/// The complement of one cube as disjoint cubes: the first constrained
/// bit that differs decides.
fn complement(cube: &Cube) -> Vec<Cube> {
    let mut out = Vec::new();
    let mut prefix = ANY;
    for arg in 0..6 {
        let Some((mask, value)) = cube[arg] else {
            continue;
        };
        for bit in (0..32).rev().map(|b| 1u32 << b).filter(|b| mask & b != 0) {
            let mut flipped = prefix;
            let (m, v) = flipped[arg].unwrap_or((0, 0));
            flipped[arg] = Some((m | bit, v | (!value & bit)));
            out.push(flipped);
            let (m, v) = prefix[arg].unwrap_or((0, 0));
            prefix[arg] = Some((m | bit, v | (value & bit)));
        }
    }
    out
}

fn complement_set(cubes: &[Cube]) -> Vec<Cube> {
    cubes.iter().fold(vec![ANY], |acc, cube| {
        intersect_sets(&acc, &complement(cube))
    })
}

fn test_cubes(test: Test) -> Vec<Cube> {
    let at = |arg: usize, mask: u32, value: u32| {
        let mut cube = ANY;
        cube[arg] = Some((mask, value));
        cube
    };
    match test {
        Test::Is(arg, value) => vec![at(arg, u32::MAX, value)],
        Test::IsNot(arg, value) => complement(&at(arg, u32::MAX, value)),
        Test::AnyBit(arg, mask) => complement(&at(arg, mask, 0)),
    }
}

/// Disjoint (cubes, action) regions covering every argument value.
fn regions(rules: &[Rule], otherwise: u32) -> Vec<(Vec<Cube>, u32)> {
    let mut rest = vec![ANY];
    let mut out = Vec::new();
    for rule in rules {
        let holds = rule.all.iter().fold(vec![ANY], |acc, test| {
            intersect_sets(&acc, &test_cubes(*test))
        });
        out.push((intersect_sets(&rest, &holds), rule.then));
        rest = intersect_sets(&rest, &complement_set(&holds));
    }
    out.push((rest, otherwise));
    out
}

// ---- libseccomp, through a small C program ----

const HELPER_SOURCE: &str = r#"
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

/* stdin: "names", or "default ACTION" then "rule ACTION NR N (ARG MASK VALUE){N}"
   lines; stdout: "NAME NR" lines, or libseccomp's BPF for x86_64. */
int main(void) {
    char word[32];
    if (scanf("%31s", word) != 1) return 2;
    if (strcmp(word, "names") == 0) {
        for (int nr = 0; nr < 1024; nr++) {
            char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
            if (name) { printf("%s %d\n", name, nr); free(name); }
        }
        return 0;
    }
    uint32_t def;
    if (strcmp(word, "default") != 0 || scanf("%u", &def) != 1) return 2;
    scmp_filter_ctx ctx = seccomp_init(def);
    if (!ctx) return 3;
    if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) return 4;
    while (scanf("%31s", word) == 1) {
        uint32_t action; int nr, n;
        if (strcmp(word, "rule") != 0 || scanf("%u %d %d", &action, &nr, &n) != 3 || n > 6)
            return 5;
        struct scmp_arg_cmp cmp[6];
        for (int i = 0; i < n; i++) {
            unsigned arg; uint64_t mask, value;
            if (scanf("%u %lu %lu", &arg, &mask, &value) != 3) return 6;
            cmp[i] = (struct scmp_arg_cmp){arg, SCMP_CMP_MASKED_EQ, mask, value};
        }
        int rc = seccomp_rule_add_exact_array(ctx, action, nr, n, cmp);
        if (rc) { fprintf(stderr, "rule %u %d: %s\n", action, nr, strerror(-rc)); return 7; }
    }
    int rc = seccomp_export_bpf(ctx, 1);
    if (rc) { fprintf(stderr, "export: %s\n", strerror(-rc)); return 8; }
    return 0;
}
"#;

/// The helper, built once; None when libseccomp-dev or a C compiler is missing.
fn helper() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let source = dir.join("seccomp_differential_helper.c");
    let binary = dir.join(format!(
        "seccomp_differential_helper.{}",
        std::process::id()
    ));
    std::fs::write(&source, HELPER_SOURCE).ok()?;
    let out = Command::new("cc")
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .arg("-lseccomp")
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "building the libseccomp helper failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(binary)
}

fn run_helper(helper: &Path, input: &str) -> Vec<u8> {
    let mut child = Command::new(helper)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the helper starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input.as_bytes())
        .expect("the helper reads its input");
    let out = child.wait_with_output().expect("the helper ends");
    assert!(
        out.status.success(),
        "libseccomp refused the policy ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// libseccomp's program for `spec`'s fixed verdicts alone (`only`: None),
/// or for the argument rules of call `only` alone.
///
/// One program per call with rules: the disjoint regions of a few `IsNot`
/// tests take hundreds of rules, and with every call's in one program
/// libseccomp 2.5.4 built 4,353 instructions (past the kernel's 4,096)
/// and got them wrong (a long jump landed on code that assumed the
/// accumulator still held an argument it no longer held).
fn libseccomp_program(helper: &Path, spec: &Spec, only: Option<u32>) -> Vec<libc::sock_filter> {
    let mut input = format!("default {}\n", spec.default);
    for (nr, verdict) in &spec.calls {
        let regions = match (verdict, only) {
            (Verdict::Fixed(action), None) => vec![(vec![ANY], *action)],
            (Verdict::Rules(rules, otherwise), Some(call)) if call == *nr => {
                regions(rules, *otherwise)
            }
            _ => continue,
        };
        for (cubes, action) in regions {
            // libseccomp refuses rules that repeat the default action.
            if action == spec.default {
                continue;
            }
            for cube in cubes {
                let compared: Vec<_> = cube
                    .iter()
                    .enumerate()
                    .filter_map(|(arg, c)| c.map(|(mask, value)| (arg, mask, value & mask)))
                    .collect();
                input.push_str(&format!("rule {action} {nr} {}", compared.len()));
                for (arg, mask, value) in compared {
                    input.push_str(&format!(" {arg} {mask} {value}"));
                }
                input.push('\n');
            }
        }
    }
    let bytes = run_helper(helper, &input);
    assert_eq!(bytes.len() % 8, 0, "BPF comes in 8-byte instructions");
    let program: Vec<libc::sock_filter> = bytes
        .chunks_exact(8)
        .map(|i| libc::sock_filter {
            code: u16::from_ne_bytes([i[0], i[1]]),
            jt: i[2],
            jf: i[3],
            k: u32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
        })
        .collect();
    assert!(
        program.len() <= 4096,
        "libseccomp's program has {} instructions, past what it compiles right",
        program.len()
    );
    program
}

// ---- a classic-BPF interpreter (what seccomp programs use of it) ----

fn run_bpf(program: &[libc::sock_filter], arch: u32, nr: u32, args: &[u64; 6]) -> u32 {
    let mut data = [0u32; 16];
    data[0] = nr;
    data[1] = arch;
    // instruction_pointer (data[2..4]) stays 0.
    for (i, arg) in args.iter().enumerate() {
        data[4 + 2 * i] = *arg as u32;
        data[5 + 2 * i] = (*arg >> 32) as u32;
    }
    let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
    let mut pc = 0usize;
    loop {
        let i = *program
            .get(pc)
            .unwrap_or_else(|| panic!("the program runs off its end at {pc}"));
        let code = u32::from(i.code);
        let src = if code & 0x08 == libc::BPF_X { x } else { i.k };
        match code & 0x07 {
            libc::BPF_LD => {
                a = match code & 0xe0 {
                    libc::BPF_ABS => {
                        assert!(i.k % 4 == 0 && i.k < 64, "load from {}", i.k);
                        data[(i.k / 4) as usize]
                    }
                    libc::BPF_IMM => i.k,
                    libc::BPF_MEM => mem[i.k as usize],
                    libc::BPF_LEN => 64,
                    mode => panic!("load mode {mode:#x}"),
                }
            }
            libc::BPF_LDX => {
                x = match code & 0xe0 {
                    libc::BPF_IMM => i.k,
                    libc::BPF_MEM => mem[i.k as usize],
                    libc::BPF_LEN => 64,
                    mode => panic!("ldx mode {mode:#x}"),
                }
            }
            libc::BPF_ST => mem[i.k as usize] = a,
            libc::BPF_STX => mem[i.k as usize] = x,
            libc::BPF_ALU => {
                a = match code & 0xf0 {
                    libc::BPF_ADD => a.wrapping_add(src),
                    libc::BPF_SUB => a.wrapping_sub(src),
                    libc::BPF_MUL => a.wrapping_mul(src),
                    libc::BPF_DIV => a.checked_div(src).unwrap_or(0),
                    libc::BPF_OR => a | src,
                    libc::BPF_AND => a & src,
                    libc::BPF_LSH => a.wrapping_shl(src),
                    libc::BPF_RSH => a.wrapping_shr(src),
                    libc::BPF_NEG => a.wrapping_neg(),
                    op => panic!("alu op {op:#x}"),
                }
            }
            libc::BPF_JMP => {
                let op = code & 0xf0;
                if op == libc::BPF_JA {
                    pc += 1 + i.k as usize;
                    continue;
                }
                let taken = match op {
                    libc::BPF_JEQ => a == src,
                    libc::BPF_JGT => a > src,
                    libc::BPF_JGE => a >= src,
                    libc::BPF_JSET => a & src != 0,
                    op => panic!("jump op {op:#x}"),
                };
                pc += 1 + usize::from(if taken { i.jt } else { i.jf });
                continue;
            }
            libc::BPF_RET => {
                return match code & 0x18 {
                    libc::BPF_K => i.k,
                    libc::BPF_A => a,
                    rval => panic!("ret source {rval:#x}"),
                }
            }
            libc::BPF_MISC => {
                if code & 0xf8 == libc::BPF_TAX {
                    x = a
                } else {
                    a = x
                }
            }
            class => panic!("class {class:#x}"),
        }
        pc += 1;
    }
}

// ---- inputs ----

/// Argument values: boundaries, every single bit, high-bit variants, every
/// socket family and the personas, and every constant a rule compares.
fn argument_values() -> Vec<u64> {
    let mut low: Vec<u32> = vec![0, 1, 2, 3, 0x7fff_ffff, 0x8000_0000, u32::MAX, u32::MAX - 1];
    low.extend((0..32).map(|b| 1u32 << b));
    low.extend(0..64); // every socket family (AF_MAX is 46), netlink protocols
    low.extend([
        SET_ID_BITS,
        libc::S_ISUID | 0o755,
        libc::S_ISGID | 0o755,
        0o644,
        0o7777,
        OPEN_CREATES,
        libc::O_CREAT as u32,
        libc::O_TMPFILE as u32,
        libc::O_DIRECTORY as u32,
        (libc::O_CREAT | libc::O_RDWR) as u32,
        CLONE_NAMESPACE_FLAGS,
        libc::CLONE_NEWUSER as u32,
        libc::CLONE_NEWTIME as u32,
        (libc::CLONE_VM | libc::CLONE_FS | libc::SIGCHLD) as u32,
        TIOCSTI,
        TIOCLINUX,
        TIOCSTI + 1,
        0x5401, // TCGETS
        // Personas: PER_LINUX32, ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, PER_BSD, PER_SVR4.
        0x0008,
        0x0004_0000,
        0x0040_0000,
        0x0006,
        0x0400_0001,
        1000,
        1001,
        65534,
    ]);
    let mut values: Vec<u64> = Vec::new();
    for v in low {
        let v = u64::from(v);
        values.extend([v, v | 1 << 32, v | 0xffff_ffff_0000_0000, v | 1 << 63]);
    }
    values.sort_unstable();
    values.dedup();
    values
}

/// A small deterministic generator (xorshift64*): the seed is all a
/// failure needs to be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

struct Case<'a> {
    name: String,
    ours: &'a CompiledFilter,
    spec: &'a Spec,
}

/// The arguments a call's rules look at.
fn ruled_arguments(verdict: &Verdict) -> Vec<usize> {
    let Verdict::Rules(rules, _) = verdict else {
        return Vec::new();
    };
    let mut args: Vec<usize> = rules
        .iter()
        .flat_map(|r| &r.all)
        .map(|t| match *t {
            Test::AnyBit(i, _) | Test::Is(i, _) | Test::IsNot(i, _) => i,
        })
        .collect();
    args.sort_unstable();
    args.dedup();
    args
}

/// Run both programs over every input and require the same answer.
fn compare(helper: &Path, case: &Case, rng: &mut Rng, values: &[u64]) -> usize {
    assert_eq!(
        case.ours.programs().len(),
        1,
        "{}: one program per filter",
        case.name
    );
    let ours = &case.ours.programs()[0];
    let fixed = libseccomp_program(helper, case.spec, None);
    let mut checked = 0;
    let mut check = |theirs: &[libc::sock_filter], arch: u32, nr: u32, args: &[u64; 6]| {
        let (a, b) = (
            run_bpf(ours, arch, nr, args),
            run_bpf(theirs, arch, nr, args),
        );
        checked += 1;
        // The one place they differ by design: an x32 number under the
        // x86_64 audit arch. libseccomp's x86_64 filter lets the default
        // action answer it; ours kills, since the x32 ABI would reach the
        // same calls past every number-based rule.
        if arch == AUDIT_ARCH_X86_64 && nr & X32_SYSCALL_BIT != 0 && a != b {
            assert_eq!(a, KILL_PROCESS, "{}: x32 nr {nr:#x} is killed", case.name);
            return;
        }
        assert_eq!(
            a, b,
            "{}: ours {a:#x}, libseccomp {b:#x} for arch {arch:#x} nr {nr} args {args:#x?}",
            case.name
        );
    };
    // Other architectures, whatever the number: killed by both.
    let arches = [
        AUDIT_ARCH_I386,
        AUDIT_ARCH_AARCH64,
        AUDIT_ARCH_ARM,
        AUDIT_ARCH_RISCV64,
        0,
        u32::MAX,
        AUDIT_ARCH_X86_64 & !0x8000_0000,
    ];
    for arch in arches {
        for nr in [0, 1, 59, 322, 1000, X32_SYSCALL_BIT, u32::MAX] {
            check(&fixed, arch, nr, &[0; 6]);
        }
    }
    // Every number (and its x32 twin) with no arguments and with random
    // ones: calls without rules must not look at them.
    let numbers = (0..600)
        .chain((0..600).map(|n| n | X32_SYSCALL_BIT))
        .chain([0x3fff_ffff, 0x7fff_ffff, 0x8000_0000, u32::MAX]);
    for nr in numbers {
        if matches!(case.spec.calls.get(&nr), Some(Verdict::Rules(..))) {
            continue;
        }
        check(&fixed, AUDIT_ARCH_X86_64, nr, &[0; 6]);
        let args = std::array::from_fn(|_| rng.pick(values));
        check(&fixed, AUDIT_ARCH_X86_64, nr, &args);
    }
    // Calls with rules: every value in each argument a rule reads, pairs
    // of them, and random vectors in all six.
    for (&nr, verdict) in &case.spec.calls {
        let read = ruled_arguments(verdict);
        if read.is_empty() {
            continue;
        }
        let theirs = libseccomp_program(helper, case.spec, Some(nr));
        for &arg in &read {
            for &v in values {
                let mut args = [0; 6];
                args[arg] = v;
                check(&theirs, AUDIT_ARCH_X86_64, nr, &args);
            }
        }
        for (n, &i) in read.iter().enumerate() {
            for &j in &read[n + 1..] {
                for &vi in values {
                    for _ in 0..4 {
                        let mut args = [0; 6];
                        args[i] = vi;
                        args[j] = rng.pick(values);
                        check(&theirs, AUDIT_ARCH_X86_64, nr, &args);
                    }
                }
            }
        }
        for _ in 0..1000 {
            let args = std::array::from_fn(|_| rng.pick(values));
            check(&theirs, AUDIT_ARCH_X86_64, nr, &args);
        }
        // x32 numbers share nothing with the call.
        check(&theirs, AUDIT_ARCH_X86_64, nr | X32_SYSCALL_BIT, &[0; 6]);
    }
    checked
}

fn syscall_names(helper: &Path) -> Vec<(String, u32)> {
    let out = run_helper(helper, "names");
    String::from_utf8(out)
        .expect("names are text")
        .lines()
        .filter_map(|line| {
            let (name, nr) = line.split_once(' ')?;
            Some((name.to_owned(), nr.parse().ok()?))
        })
        .collect()
}

fn seed() -> u64 {
    match std::env::var("SANDBOX_SECCOMP_SEED") {
        Ok(text) => text.parse().expect("SANDBOX_SECCOMP_SEED is a number"),
        Err(_) => {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_compiler_answers_every_call_as_libseccomp_does() {
    const TEST: &str = "the_compiler_answers_every_call_as_libseccomp_does";
    let helper = helper();
    if !support::require(
        TEST,
        "libseccomp-dev and a C compiler (apt-get install -y libseccomp-dev)",
        helper.is_some(),
    ) {
        return;
    }
    let helper = helper.expect("checked above");
    let seed = seed();
    eprintln!("seccomp differential: seed {seed} (replay with SANDBOX_SECCOMP_SEED={seed})");
    let mut rng = Rng(seed);
    let values = argument_values();

    // Both sides number the calls alike.
    let names = syscall_names(&helper);
    assert!(names.len() > 300, "libseccomp names {} calls", names.len());
    for (name, number) in &names {
        if let Some(ours) = nr(name) {
            assert_eq!(
                ours, *number,
                "{name} is {ours} here, {number} in libseccomp"
            );
        }
    }
    for name in seccomp::ALLOWED
        .iter()
        .chain(seccomp::DENIED)
        .chain(seccomp::IPC)
    {
        assert!(
            names.iter().any(|(n, _)| n == name),
            "libseccomp does not know {name}"
        );
    }

    let mut cases: Vec<(String, CompiledFilter, Spec)> = Vec::new();
    for profile in sandbox::profile::builtin_names() {
        let policy = sandbox::profile::load(profile).expect("a built-in profile loads");
        let syscalls = &policy.syscalls;
        cases.push((
            format!("profile {profile}"),
            seccomp::compile(syscalls).expect("compiles"),
            policy_spec(syscalls),
        ));
        for deny_sockets in [false, true] {
            let shared = SharedHost { deny_sockets };
            cases.push((
                format!("profile {profile} without namespaces, deny_sockets {deny_sockets}"),
                seccomp::compile_without_namespaces(Some(syscalls), shared).expect("compiles"),
                without_namespaces_spec(Some(syscalls), shared),
            ));
        }
        let ids = MappedIds {
            uid: 1000,
            gid: 1001,
        };
        cases.push((
            format!("profile {profile} in a user namespace"),
            seccomp::compile_in_user_namespace(syscalls, ids).expect("compiles"),
            user_namespace_spec(syscalls, ids),
        ));
    }
    cases.push((
        "the set-id guard".into(),
        seccomp::host_guard()
            .expect("compiles")
            .expect("x86_64 has a filter"),
        guard_spec(),
    ));
    cases.push((
        "the set-id guard without namespaces".into(),
        seccomp::compile_without_namespaces(None, SharedHost { deny_sockets: true })
            .expect("compiles"),
        without_namespaces_spec(None, SharedHost { deny_sockets: true }),
    ));

    // Random policies: random extra allows and denies among every call
    // both sides know, in either mode, in every compile variant.
    let refused: Vec<&str> = seccomp::DENIED
        .iter()
        .copied()
        .chain(["clone3", "openat2"])
        .collect();
    let known: Vec<&str> = names
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| nr(n).is_some())
        .collect();
    let allowable: Vec<&str> = known
        .iter()
        .copied()
        .filter(|n| !refused.contains(n))
        .collect();
    for round in 0..6 {
        let mode = if rng.below(2) == 0 {
            SyscallMode::Allowlist
        } else {
            SyscallMode::Denylist
        };
        let mut draw = |from: &[&str], most: usize| -> Vec<String> {
            let count = rng.below(most + 1);
            (0..count).map(|_| rng.pick(from).to_owned()).collect()
        };
        let policy = SyscallPolicy {
            mode,
            allow: draw(&allowable, 60),
            deny: draw(&known, 40),
        };
        let ids = MappedIds {
            uid: rng.pick(&[0, 1, 1000, 65534, u32::MAX - 1]),
            gid: rng.pick(&[0, 1, 1001, 65534, u32::MAX - 1]),
        };
        let shared = SharedHost {
            deny_sockets: rng.below(2) == 0,
        };
        let name = format!("random policy {round} ({policy:?}, {ids:?}, {shared:?})");
        cases.push((
            name.clone(),
            seccomp::compile(&policy).expect("compiles"),
            policy_spec(&policy),
        ));
        cases.push((
            format!("{name} in a user namespace"),
            seccomp::compile_in_user_namespace(&policy, ids).expect("compiles"),
            user_namespace_spec(&policy, ids),
        ));
        cases.push((
            format!("{name} without namespaces"),
            seccomp::compile_without_namespaces(Some(&policy), shared).expect("compiles"),
            without_namespaces_spec(Some(&policy), shared),
        ));
    }

    let mut total = 0;
    for (name, ours, spec) in &cases {
        let case = Case {
            name: name.clone(),
            ours,
            spec,
        };
        total += compare(&helper, &case, &mut rng, &values);
    }
    eprintln!(
        "seccomp differential: {} filters, {total} inputs, every answer the same",
        cases.len()
    );
    let _ = std::fs::remove_file(&helper);
}

/// What `allow` cannot widen is refused, naming why, for every such call.
#[cfg(target_arch = "x86_64")]
#[test]
fn allowing_a_call_the_filter_overrides_is_an_error() {
    for name in seccomp::DENIED.iter().chain(&["clone3", "openat2"]) {
        for mode in [SyscallMode::Allowlist, SyscallMode::Denylist] {
            let policy = SyscallPolicy {
                mode,
                allow: vec![(*name).to_owned()],
                deny: Vec::new(),
            };
            let err = seccomp::compile(&policy).expect_err("refused");
            assert!(
                err.to_string()
                    .starts_with(&format!("[syscalls] allow cannot allow {name:?}")),
                "{err}"
            );
        }
    }
}
