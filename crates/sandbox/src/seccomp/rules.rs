//! Rules on system call arguments, and the classic BPF they compile to.
//!
//! The kernel's handler decides how many bits of an argument register it
//! reads: an `int`, `unsigned int` or `umode_t` parameter is the low 32 bits
//! (or fewer) of a 64-bit register whose upper half is whatever the caller
//! left there. A filter that compared all 64 bits would judge
//! `socket(1 << 32 | AF_VSOCK, …)` as an unknown family while the kernel
//! creates a vsock socket. So the rules here load only the low word of an
//! argument, and a comparison for equality can only be written against an
//! [`IntArg`], an argument the kernel itself truncates to 32 bits. Bit tests
//! on the low word are exact for `unsigned long` arguments too (clone's
//! flags are read through `lower_32_bits` anyway).

use libc::sock_filter;

use super::SeccompError;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// offsetof(struct seccomp_data, args): each argument is a little-endian
/// u64, so argument `i`'s low word is at 16 + 8·i.
const ARGS_OFFSET: u32 = 16;

/// An argument the kernel declares as a 32-bit (or narrower) integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntArg(pub u8);

/// An argument the kernel reads as a full `unsigned long`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongArg(pub u8);

/// One comparison; a [`Rule`] holds when all of its tests do.
#[derive(Debug, Clone, Copy)]
pub enum Test {
    /// Some bit of `mask` is set in a 32-bit argument.
    AnyBit(IntArg, u32),
    /// Some bit of `mask` is set in the low word of a 64-bit argument.
    AnyLowBit(LongArg, u32),
    /// A 32-bit argument equals the value.
    Is(IntArg, u32),
    /// A 32-bit argument differs from the value.
    IsNot(IntArg, u32),
}

impl Test {
    fn arg_index(self) -> u8 {
        match self {
            Test::AnyBit(IntArg(i), _) | Test::Is(IntArg(i), _) | Test::IsNot(IntArg(i), _) => i,
            Test::AnyLowBit(LongArg(i), _) => i,
        }
    }
}

/// Tests that together select the action `then`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// All must hold.
    pub all: Vec<Test>,
    /// The seccomp return value when they do.
    pub then: u32,
}

/// What one system call is answered: a fixed action, or rules tried in
/// order with a fallback.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Always this action.
    Fixed(u32),
    /// The first rule that holds decides; `otherwise` when none does.
    Rules {
        /// Tried in order.
        rules: Vec<Rule>,
        /// The action when no rule holds.
        otherwise: u32,
    },
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

impl Verdict {
    /// A self-contained block: ends in returns and jumps only forward
    /// within itself, so it can sit anywhere in a program.
    pub fn compile(&self) -> Result<Vec<sock_filter>, SeccompError> {
        let (rules, otherwise) = match self {
            Verdict::Fixed(action) => return Ok(vec![insn(RET_K, 0, 0, *action)]),
            Verdict::Rules { rules, otherwise } => (rules, *otherwise),
        };
        let mut out = Vec::new();
        for rule in rules {
            let mut body = Vec::new();
            // Indices of the jumps whose `fail` branch must reach the next rule.
            let mut fail_jumps: Vec<(usize, bool)> = Vec::new();
            let mut loaded = None;
            for test in &rule.all {
                let arg = test.arg_index();
                if loaded != Some(arg) {
                    body.push(insn(LD_W_ABS, 0, 0, ARGS_OFFSET + 8 * u32::from(arg)));
                    loaded = Some(arg);
                }
                let (code, k, fail_on_true) = match *test {
                    Test::AnyBit(_, mask) | Test::AnyLowBit(_, mask) => (JSET_K, mask, false),
                    Test::Is(_, value) => (JEQ_K, value, false),
                    Test::IsNot(_, value) => (JEQ_K, value, true),
                };
                fail_jumps.push((body.len(), fail_on_true));
                body.push(insn(code, 0, 0, k));
            }
            body.push(insn(RET_K, 0, 0, rule.then));
            let len = body.len();
            for (at, fail_on_true) in fail_jumps {
                // To the instruction right after this rule's return.
                let distance = len - at - 1;
                let offset =
                    u8::try_from(distance).map_err(|_| SeccompError::JumpTooFar(distance))?;
                if fail_on_true {
                    body[at].jt = offset;
                } else {
                    body[at].jf = offset;
                }
            }
            out.extend(body);
        }
        out.push(insn(RET_K, 0, 0, otherwise));
        Ok(out)
    }
}
