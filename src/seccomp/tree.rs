//! A balanced decision tree over system call numbers, in classic BPF.
//!
//! seccompiler emits one comparison per listed call, so a 300-call allowlist
//! is a 600-instruction chain. Every syscall of the payload walks it until
//! the kernel's action cache covers the call, and when the filter is
//! attached the kernel emulates it for every syscall number of every ABI to
//! build that cache: measured 0.73 ms per run here, a third of the whole
//! spawn. A tree answers in about 2·log2(n/4) + 4 instructions.
//!
//! The program assumes the accumulator already holds `seccomp_data.nr` (the
//! prelude leaves it there). Classic BPF jumps only forward, conditional
//! jumps by at most 255 instructions, so branches to the right subtree go
//! through an unconditional `ja`, whose offset is 32 bits.

use libc::sock_filter;

const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Numbers per leaf: a leaf is at most this many `jeq` plus two returns, so
/// its internal jumps stay far below the 255 limit.
const LEAF: usize = 4;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// A program returning `on_match` for the numbers in `sorted` (ascending,
/// unique) and `otherwise` for every other number.
pub fn membership(sorted: &[u32], on_match: u32, otherwise: u32) -> Vec<sock_filter> {
    let mut out = Vec::new();
    emit(sorted, on_match, otherwise, &mut out);
    out
}

fn emit(numbers: &[u32], on_match: u32, otherwise: u32, out: &mut Vec<sock_filter>) {
    if numbers.len() <= LEAF {
        // jeq n_i → the `on_match` return after the `otherwise` return.
        let count = numbers.len();
        for (i, n) in numbers.iter().enumerate() {
            let to_match = (count - i) as u8; // skip the remaining jeqs and the `otherwise` return
            out.push(insn(JEQ_K, to_match, 0, *n));
        }
        out.push(insn(RET_K, 0, 0, otherwise));
        out.push(insn(RET_K, 0, 0, on_match));
        return;
    }
    let mid = numbers.len() / 2;
    let (left, right) = numbers.split_at(mid);
    // jge right[0] → `ja right`; else fall over the `ja` into the left subtree.
    out.push(insn(JGE_K, 0, 1, right[0]));
    let ja_at = out.len();
    out.push(insn(JA, 0, 0, 0));
    let left_start = out.len();
    emit(left, on_match, otherwise, out);
    out[ja_at].k = (out.len() - left_start) as u32;
    emit(right, on_match, otherwise, out);
}

#[cfg(test)]
pub(crate) mod interpreter {
    //! Just enough of a classic-BPF interpreter to check generated filters.
    use libc::sock_filter;

    /// Run `program` on a `seccomp_data` of this arch, number and arguments.
    pub fn run(program: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u32; 16];
        data[0] = nr;
        data[1] = arch;
        for (i, arg) in args.iter().enumerate() {
            data[4 + 2 * i] = *arg as u32; // little-endian low word first
            data[5 + 2 * i] = (*arg >> 32) as u32;
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = program[pc];
            let class = u32::from(i.code) & 0x07;
            match class as libc::c_uint {
                libc::BPF_LD => acc = data[(i.k / 4) as usize],
                libc::BPF_ALU if u32::from(i.code) & 0xf0 == libc::BPF_AND => acc &= i.k,
                libc::BPF_RET => return i.k,
                libc::BPF_JMP => {
                    let op = u32::from(i.code) & 0xf0;
                    let taken = match op as libc::c_uint {
                        libc::BPF_JA => {
                            pc += 1 + i.k as usize;
                            continue;
                        }
                        libc::BPF_JEQ => acc == i.k,
                        libc::BPF_JGE => acc >= i.k,
                        libc::BPF_JGT => acc > i.k,
                        libc::BPF_JSET => acc & i.k != 0,
                        other => panic!("jump op {other:#x} not interpreted"),
                    };
                    pc += 1 + usize::from(if taken { i.jt } else { i.jf });
                    continue;
                }
                libc::BPF_MISC => {}
                other => panic!("class {other:#x} (code {:#x}) not interpreted", i.code),
            }
            pc += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_answers_exactly_the_set_for_every_number() {
        let sets: Vec<Vec<u32>> = vec![
            vec![],
            vec![7],
            (0..4).collect(),
            (0..5).collect(),
            (0..600).step_by(2).collect(),
            (0..460).filter(|n| n % 7 != 3).collect(),
        ];
        for set in sets {
            let mut program = vec![insn(
                (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
                0,
                0,
                0,
            )];
            program.extend(membership(&set, 1, 2));
            assert!(program.len() < 4096);
            for nr in 0..700 {
                let want = if set.contains(&nr) { 1 } else { 2 };
                assert_eq!(
                    interpreter::run(&program, 0, nr, [0; 6]),
                    want,
                    "nr {nr}, set of {}",
                    set.len()
                );
            }
        }
    }

    #[test]
    fn a_large_set_walks_a_short_path() {
        let set: Vec<u32> = (0..300).collect();
        let program = membership(&set, 1, 2);
        // Depth ~log2(300/4) levels of two instructions, then one leaf.
        let worst_path = 2 * 7 + LEAF + 2;
        assert!(program.len() > worst_path);
        // Longest forward jump fits, and every conditional offset is small.
        assert!(program
            .iter()
            .filter(|i| i.code != JA)
            .all(|i| i.jt < 8 && i.jf < 8));
    }
}
