//! A balanced decision tree over system call numbers, in classic BPF, each
//! run of consecutive listed numbers with the same block leading to one copy
//! of that block (a return, or argument rules).
//!
//! A chain of one comparison per listed call makes a 300-call allowlist a
//! 600-instruction walk. Every syscall of the payload walks it until
//! the kernel's action cache covers the call, and when the filter is
//! attached the kernel emulates it for every syscall number of every ABI to
//! build that cache: measured 0.73 ms per run here, a third of the whole
//! spawn. A tree answers in about 2·log2(n/4) + 8 instructions.
//!
//! Runs, not numbers, are the tree's leaves because the kernel compiles the
//! whole program (`bpf_prepare_filter`, the JIT) on every attach, at a cost
//! that grows with its length: strict's allowlist is mostly long runs of
//! adjacent numbers, and one leaf per number made it 1,022 instructions.
//!
//! The program assumes the accumulator already holds `seccomp_data.nr` (the
//! prelude leaves it there). Classic BPF jumps only forward, conditional
//! jumps by at most 255 instructions, so branches to the right subtree go
//! through an unconditional `ja`, whose offset is 32 bits.

use libc::sock_filter;

use super::SeccompError;

const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JGT_K: u16 = (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Runs per leaf: a leaf is at most twice this many comparisons, a default
/// return and the (deduplicated) blocks of its runs, so its jumps stay far
/// below the 255 limit for blocks of a few dozen instructions.
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
    emit(&runs(entries), otherwise, &mut out)?;
    Ok(out)
}

/// Numbers `first..=last` sharing one block.
struct Run<'a> {
    first: u32,
    last: u32,
    block: &'a [sock_filter],
}

/// `entries` (sorted, unique) as runs of consecutive numbers whose blocks
/// are the same.
fn runs(entries: &[(u32, Vec<sock_filter>)]) -> Vec<Run<'_>> {
    let mut runs: Vec<Run<'_>> = Vec::new();
    for (n, block) in entries {
        match runs.last_mut() {
            Some(run) if run.last.checked_add(1) == Some(*n) && same(run.block, block) => {
                run.last = *n;
            }
            _ => runs.push(Run {
                first: *n,
                last: *n,
                block,
            }),
        }
    }
    runs
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

fn emit(runs: &[Run<'_>], otherwise: u32, out: &mut Vec<sock_filter>) -> Result<(), SeccompError> {
    if runs.len() <= LEAF {
        // Runs with identical blocks (the common "allow") share one copy.
        let mut blocks: Vec<&[sock_filter]> = Vec::new();
        let mut block_of = Vec::with_capacity(runs.len());
        for run in runs {
            let index = match blocks.iter().position(|b| same(b, run.block)) {
                Some(index) => index,
                None => {
                    blocks.push(run.block);
                    blocks.len() - 1
                }
            };
            block_of.push(index);
        }
        // In ascending order, a lone number is one `jeq` (on to the next
        // run when it misses); a longer run is two comparisons: past its
        // last number, on to the next run; at or past its first, its block;
        // else (a gap below it) the `otherwise` return, which also follows
        // the last run. A number in a gap misses every later run too.
        let size = |run: &Run<'_>| if run.first == run.last { 1 } else { 2 };
        let comparisons: usize = runs.iter().map(size).sum();
        let far = |distance: usize| {
            u8::try_from(distance).map_err(|_| SeccompError::JumpTooFar(distance))
        };
        let mut at = 0;
        for (i, run) in runs.iter().enumerate() {
            let block_start: usize = blocks[..block_of[i]].iter().map(|b| b.len()).sum();
            let block = comparisons + 1 + block_start;
            at += size(run);
            if run.first == run.last {
                out.push(insn(JEQ_K, far(block - at)?, 0, run.first));
            } else {
                out.push(insn(JGT_K, 1, 0, run.last));
                out.push(insn(
                    JGE_K,
                    far(block - at)?,
                    far(comparisons - at)?,
                    run.first,
                ));
            }
        }
        out.push(insn(RET_K, 0, 0, otherwise));
        for block in blocks {
            out.extend_from_slice(block);
        }
        return Ok(());
    }
    let mid = runs.len() / 2;
    let (left, right) = runs.split_at(mid);
    // jge right[0] → `ja right`; else fall over the `ja` into the left subtree.
    out.push(insn(JGE_K, 0, 1, right[0].first));
    let ja_at = out.len();
    out.push(insn(JA, 0, 0, 0));
    let left_start = out.len();
    emit(left, otherwise, out)?;
    out[ja_at].k = (out.len() - left_start) as u32;
    emit(right, otherwise, out)
}

pub(crate) mod interpreter {
    //! Just enough of a classic-BPF interpreter to run the programs this
    //! module generates: the tests check filters with it, and a learning
    //! run's supervisor asks it what the profile's own filter answers a
    //! call (see `crate::learn`).
    use libc::sock_filter;

    /// Run `program` on a `seccomp_data` of this arch, number and
    /// arguments. None for an instruction it does not know, a load outside
    /// `seccomp_data`, or a jump out of the program: never a guess.
    pub fn evaluate(program: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> Option<u32> {
        let mut data = [0u32; 16];
        data[0] = nr;
        data[1] = arch;
        for (i, arg) in args.iter().enumerate() {
            data[4 + 2 * i] = *arg as u32; // little-endian low word first
            data[5 + 2 * i] = (*arg >> 32) as u32;
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = *program.get(pc)?;
            let class = u32::from(i.code) & 0x07;
            match class as libc::c_uint {
                libc::BPF_LD => acc = *data.get(usize::try_from(i.k / 4).ok()?)?,
                libc::BPF_ALU if u32::from(i.code) & 0xf0 == libc::BPF_AND => acc &= i.k,
                libc::BPF_RET => return Some(i.k),
                libc::BPF_JMP => {
                    let op = u32::from(i.code) & 0xf0;
                    let taken = match op as libc::c_uint {
                        libc::BPF_JA => {
                            pc = pc.checked_add(1)?.checked_add(usize::try_from(i.k).ok()?)?;
                            continue;
                        }
                        libc::BPF_JEQ => acc == i.k,
                        libc::BPF_JGE => acc >= i.k,
                        libc::BPF_JGT => acc > i.k,
                        libc::BPF_JSET => acc & i.k != 0,
                        _ => return None,
                    };
                    pc += 1 + usize::from(if taken { i.jt } else { i.jf });
                    continue;
                }
                _ => return None,
            }
            pc += 1;
        }
    }

    /// [`evaluate`] for tests, which only run programs it knows.
    #[cfg(test)]
    pub fn run(program: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        evaluate(program, arch, nr, args).expect("a program the interpreter knows")
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
        // No two numbers adjacent: one run each, the tree's widest case.
        let set: Vec<u32> = (0..600).step_by(2).collect();
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

    #[test]
    fn adjacent_numbers_with_one_block_compile_to_one_comparison_pair() {
        let set: Vec<u32> = (0..300).collect();
        // jgt 299, jge 0, the `otherwise` return, the block.
        assert_eq!(membership(&set, 1, 2).len(), 4);
        let two_runs: Vec<u32> = (0..100).chain(200..300).collect();
        assert_eq!(membership(&two_runs, 1, 2).len(), 6);
    }

    #[test]
    fn adjacent_numbers_with_different_blocks_keep_their_own() {
        // Neighbours alternate among three answers, with gaps between
        // stretches: every number must still get its own block's answer.
        let entries: Vec<(u32, Vec<sock_filter>)> = (0..400u32)
            .filter(|n| n % 50 < 40)
            .map(|n| (n, vec![insn(RET_K, 0, 0, 10 + n / 7 % 3)]))
            .collect();
        let mut program = vec![insn(
            (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            0,
            0,
            0,
        )];
        program.extend(dispatch(&entries, 2).expect("fits"));
        for nr in 0..500 {
            let want = match entries.iter().find(|(n, _)| *n == nr) {
                Some((n, _)) => 10 + n / 7 % 3,
                None => 2,
            };
            assert_eq!(interpreter::run(&program, 0, nr, [0; 6]), want, "nr {nr}");
        }
        assert!(program.len() < 2 * entries.len());
    }
}
