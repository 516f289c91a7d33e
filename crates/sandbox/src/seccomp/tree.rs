//! A balanced decision tree over system call numbers, in classic BPF, each
//! listed number leading to its own block (a return, or argument rules).
//!
//! A chain of one comparison per listed call makes a 300-call allowlist a
//! 600-instruction walk. Every syscall of the payload walks it until
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

use super::SeccompError;

const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Numbers per leaf: a leaf is at most this many `jeq`, a default return
/// and the (deduplicated) blocks of its numbers, so its jumps stay far below
/// the 255 limit for blocks of a few dozen instructions.
const LEAF: usize = 4;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn same(a: &[sock_filter], b: &[sock_filter]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x.code, x.jt, x.jf, x.k) == (y.code, y.jt, y.jf, y.k))
}

/// A program running each listed number's block and returning `otherwise`
/// for every other number. `entries` is sorted by number, without
/// duplicates; every block is self-contained (it ends in returns and jumps
/// only within itself).
pub fn dispatch(
    entries: &[(u32, Vec<sock_filter>)],
    otherwise: u32,
) -> Result<Vec<sock_filter>, SeccompError> {
    let mut out = Vec::new();
    emit(entries, otherwise, &mut out)?;
    Ok(out)
}

/// A program returning `on_match` for the numbers in `sorted` (ascending,
/// unique) and `otherwise` for every other number.
#[cfg(test)]
pub fn membership(sorted: &[u32], on_match: u32, otherwise: u32) -> Vec<sock_filter> {
    let entries: Vec<_> = sorted
        .iter()
        .map(|n| (*n, vec![insn(RET_K, 0, 0, on_match)]))
        .collect();
    dispatch(&entries, otherwise).expect("one-instruction blocks always fit")
}

fn emit(
    entries: &[(u32, Vec<sock_filter>)],
    otherwise: u32,
    out: &mut Vec<sock_filter>,
) -> Result<(), SeccompError> {
    if entries.len() <= LEAF {
        // Numbers with identical blocks (the common "allow") share one copy.
        let mut blocks: Vec<&[sock_filter]> = Vec::new();
        let mut block_of = Vec::with_capacity(entries.len());
        for (_, block) in entries {
            let index = match blocks.iter().position(|b| same(b, block)) {
                Some(index) => index,
                None => {
                    blocks.push(block);
                    blocks.len() - 1
                }
            };
            block_of.push(index);
        }
        let count = entries.len();
        for (i, (n, _)) in entries.iter().enumerate() {
            let block_start: usize = blocks[..block_of[i]].iter().map(|b| b.len()).sum();
            // Skip the remaining jeqs and the `otherwise` return.
            let distance = count - i + block_start;
            let jt = u8::try_from(distance).map_err(|_| SeccompError::JumpTooFar(distance))?;
            out.push(insn(JEQ_K, jt, 0, *n));
        }
        out.push(insn(RET_K, 0, 0, otherwise));
        for block in blocks {
            out.extend_from_slice(block);
        }
        return Ok(());
    }
    let mid = entries.len() / 2;
    let (left, right) = entries.split_at(mid);
    // jge right[0] → `ja right`; else fall over the `ja` into the left subtree.
    out.push(insn(JGE_K, 0, 1, right[0].0));
    let ja_at = out.len();
    out.push(insn(JA, 0, 0, 0));
    let left_start = out.len();
    emit(left, otherwise, out)?;
    out[ja_at].k = (out.len() - left_start) as u32;
    emit(right, otherwise, out)
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
