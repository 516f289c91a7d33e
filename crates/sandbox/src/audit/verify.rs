//! The verifier of audit files sealed by [`super::chain`]. The file is
//! untrusted input (whoever could write it may have edited it), so it is
//! read as a stream through the code base's one bounded line reader: one
//! line of at most [`MAX_LINE`] bytes is held at a time, and per chain
//! only its name, its last number and its last hash, for at most
//! [`MAX_CHAINS`] chains of names of at most [`MAX_NAME`] bytes. Nothing
//! in the file can make it panic or hold more.
//!
//! What a chain without an anchor proves, and what it cannot:
//! - an edited line breaks the next line's `prev`; a removed line leaves
//!   a gap in `seq`; swapped lines run `seq` backwards; a forged line
//!   without the seal, with a wrong `prev` or a `seq` already used, is
//!   refused; a chain whose first lines were removed starts past 1.
//! - Lines cut from a chain's end (and a whole chain removed) leave a
//!   shorter chain that is still whole, and so does an edit of the last
//!   line; and the hash is not keyed, so whoever can write the file can
//!   rewrite a chain from any line on. Only an anchor kept elsewhere (the
//!   head a signed attestation names, `--head`) tells those apart.

use std::io::Read;

use serde::{Deserialize, Serialize};

use super::chain::{genesis, hex, line_hash};
use crate::jsonl::{Frame, Framer};

/// The longest line read. An OCI container's `enforced` line carries the
/// init's report (at most 1 MiB) with every character possibly escaped
/// as six.
pub const MAX_LINE: usize = 8 << 20;
/// Chains one file may hold (each run appending to one `--audit` file is
/// one).
pub const MAX_CHAINS: usize = 100_000;
/// The longest chain name.
pub const MAX_NAME: usize = 1024;

/// One chain of a verified file.
#[derive(Debug, Clone, Serialize)]
pub struct ChainSummary {
    /// Its name (`run:ID:RANDOM`, `container:…`, `daemon-run:…`).
    pub name: String,
    /// Its lines.
    pub lines: u64,
    /// SHA-256 (hex) of its last line: the anchor to keep.
    pub head: String,
    /// The file's line number of its first line (from 1).
    pub first_line: u64,
    /// The file's line number of its last line.
    pub last_line: u64,
}

/// A file whose every chain is whole.
#[derive(Debug, Clone, Serialize)]
pub struct Verified {
    /// Lines in the file.
    pub lines: u64,
    /// Its chains, in the order their first lines appear.
    pub chains: Vec<ChainSummary>,
    /// Whether `--head` was given and matched a chain's head.
    pub anchored: bool,
}

/// The first thing wrong with a file.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[error("{}{problem}", line.map(|n| format!("line {n}: ")).unwrap_or_default())]
pub struct Broken {
    /// The file's line number (from 1) where it was found, when a line
    /// is to blame.
    pub line: Option<u64>,
    /// The chain the line claims, when it names one.
    pub chain: Option<String>,
    /// What is wrong.
    pub problem: Problem,
}

/// Why a file does not verify.
#[derive(Debug, Clone, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// The file could not be read.
    #[error("reading the file failed: {error}")]
    Read {
        /// The error.
        error: String,
    },
    /// A line past [`MAX_LINE`]: no writer of the code base writes one.
    #[error("the line is {bytes} bytes long, more than any audit line ({MAX_LINE})")]
    TooLong {
        /// Its length.
        bytes: usize,
    },
    /// The file ends inside a line: cut, or written partly by a crash.
    #[error("the file ends inside this line (no newline): it was cut, or its writer died while writing it")]
    Unterminated,
    /// Not one JSON object.
    #[error("not a JSON object ({error}): edited or inserted")]
    NotJson {
        /// The parser's message.
        error: String,
    },
    /// A JSON object without the chain's fields.
    #[error("the line has no chain, seq and prev: inserted, or written by a sandbox that did not chain its audit")]
    NotChained,
    /// A chain name past [`MAX_NAME`].
    #[error("the chain name is longer than {MAX_NAME} bytes")]
    NameTooLong,
    /// More chains than [`MAX_CHAINS`].
    #[error("more than {MAX_CHAINS} chains in one file")]
    TooManyChains,
    /// `prev` is not 64 hex digits.
    #[error("prev is not a SHA-256 in hex")]
    BadPrev,
    /// The first line of a chain seen is not its first.
    #[error("the chain's first line here is its line {seq}: the lines before it were removed")]
    StartsLate {
        /// Its number.
        seq: u64,
    },
    /// A chain's first line does not carry the chain's genesis.
    #[error(
        "the chain's first line does not carry the chain's genesis hash as prev: edited or forged"
    )]
    BadGenesis,
    /// A number skipped.
    #[error("the chain goes from its line {previous} to its line {found}: {} line(s) missing here, removed or moved further down", found.saturating_sub(*previous).saturating_sub(1))]
    Gap {
        /// The chain's last number before.
        previous: u64,
        /// The number found.
        found: u64,
    },
    /// A number repeated or going back.
    #[error("the chain goes from its line {previous} back to its line {found}: lines reordered, repeated or inserted")]
    Backwards {
        /// The chain's last number before.
        previous: u64,
        /// The number found.
        found: u64,
    },
    /// `prev` is not the hash of the chain's previous line.
    #[error("prev does not match the hash of the chain's previous line (file line {previous_line}): that line was edited, or this one forged")]
    Mismatch {
        /// The file's line number of the chain's previous line.
        previous_line: u64,
    },
    /// The anchor is no line of the file.
    #[error("no line of the file has the anchored head {head}: it was removed or edited, or the chain was cut before it")]
    HeadNotFound {
        /// The anchor.
        head: String,
    },
    /// The anchor is a line, but not its chain's last.
    #[error("the anchored head is line {anchored_line}, but its chain goes on for {after} line(s) past it")]
    HeadNotLast {
        /// The anchor's line.
        anchored_line: u64,
        /// Lines of its chain after it.
        after: u64,
    },
}

/// The fields every sealed line carries.
#[derive(Deserialize)]
struct Seal {
    chain: Option<String>,
    seq: Option<u64>,
    prev: Option<String>,
}

struct Tip {
    index: usize,
    seq: u64,
    hash: [u8; 32],
    line: u64,
}

/// Verify every chain of `reader`; with `head`, also that one chain ends
/// at that hash (hex).
pub fn verify(mut reader: impl Read, head: Option<&str>) -> Result<Verified, Box<Broken>> {
    let mut checker = Checker::new(head);
    let mut framer = Framer::new(MAX_LINE);
    let mut frames = std::collections::VecDeque::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                return Err(checker.broken(
                    None,
                    Problem::Read {
                        error: err.to_string(),
                    },
                ))
            }
        };
        framer.push(&chunk[..n], &mut frames);
        while let Some(frame) = frames.pop_front() {
            checker.frame(frame)?;
        }
    }
    match framer.finish() {
        Some(Frame::Line(_)) => {
            checker.number += 1;
            return Err(checker.broken(None, Problem::Unterminated));
        }
        Some(frame) => checker.frame(frame)?,
        None => {}
    }
    checker.finish()
}

/// The state of one pass: per chain its tip, and the anchor if seen.
struct Checker {
    anchor: Option<String>,
    tips: std::collections::HashMap<String, Tip>,
    chains: Vec<ChainSummary>,
    anchored: Option<(u64, usize, u64)>,
    number: u64,
}

impl Checker {
    fn new(head: Option<&str>) -> Checker {
        Checker {
            anchor: head.map(|h| h.trim().to_ascii_lowercase()),
            tips: std::collections::HashMap::new(),
            chains: Vec::new(),
            anchored: None,
            number: 0,
        }
    }

    fn broken(&self, chain: Option<String>, problem: Problem) -> Box<Broken> {
        Box::new(Broken {
            line: Some(self.number),
            chain,
            problem,
        })
    }

    fn frame(&mut self, frame: Frame) -> Result<(), Box<Broken>> {
        self.number += 1;
        match frame {
            Frame::Line(line) => self.line(&line),
            Frame::TooLarge { bytes } => Err(self.broken(None, Problem::TooLong { bytes })),
        }
    }

    fn line(&mut self, line: &[u8]) -> Result<(), Box<Broken>> {
        let number = self.number;
        if line.first() != Some(&b'{') {
            return Err(self.broken(
                None,
                Problem::NotJson {
                    error: "it does not start with {".to_owned(),
                },
            ));
        }
        let seal: Seal = serde_json::from_slice(line).map_err(|err| {
            self.broken(
                None,
                Problem::NotJson {
                    error: err.to_string(),
                },
            )
        })?;
        let (Some(name), Some(seq), Some(prev)) = (seal.chain, seal.seq, seal.prev) else {
            return Err(self.broken(None, Problem::NotChained));
        };
        if name.len() > MAX_NAME {
            return Err(self.broken(None, Problem::NameTooLong));
        }
        let Some(prev) = parse_hex(&prev) else {
            return Err(self.broken(Some(name), Problem::BadPrev));
        };
        let hash = line_hash(line);
        let index = match self.tips.get_mut(&name) {
            None => {
                if seq != 1 {
                    return Err(self.broken(Some(name), Problem::StartsLate { seq }));
                }
                if prev != genesis(&name) {
                    return Err(self.broken(Some(name), Problem::BadGenesis));
                }
                if self.tips.len() >= MAX_CHAINS {
                    return Err(self.broken(Some(name), Problem::TooManyChains));
                }
                self.chains.push(ChainSummary {
                    name: name.clone(),
                    lines: 1,
                    head: hex(&hash),
                    first_line: number,
                    last_line: number,
                });
                let index = self.chains.len() - 1;
                self.tips.insert(
                    name,
                    Tip {
                        index,
                        seq,
                        hash,
                        line: number,
                    },
                );
                index
            }
            Some(tip) => {
                let previous = tip.seq;
                let previous_line = tip.line;
                let (expected_prev, index) = (tip.hash, tip.index);
                if seq <= previous {
                    return Err(self.broken(
                        Some(name),
                        Problem::Backwards {
                            previous,
                            found: seq,
                        },
                    ));
                }
                if seq != previous + 1 {
                    return Err(self.broken(
                        Some(name),
                        Problem::Gap {
                            previous,
                            found: seq,
                        },
                    ));
                }
                if prev != expected_prev {
                    return Err(self.broken(Some(name), Problem::Mismatch { previous_line }));
                }
                tip.seq = seq;
                tip.hash = hash;
                tip.line = number;
                if let Some(summary) = self.chains.get_mut(index) {
                    summary.lines = seq;
                    summary.last_line = number;
                    summary.head = hex(&hash);
                }
                index
            }
        };
        if self.anchor.as_deref() == Some(hex(&hash).as_str()) {
            self.anchored = Some((number, index, seq));
        }
        Ok(())
    }

    fn finish(self) -> Result<Verified, Box<Broken>> {
        if let Some(anchor) = self.anchor {
            match self.anchored {
                None => {
                    return Err(Box::new(Broken {
                        line: None,
                        chain: None,
                        problem: Problem::HeadNotFound { head: anchor },
                    }))
                }
                Some((line, index, seq)) => {
                    let Some(summary) = self.chains.get(index) else {
                        return Err(Box::new(Broken {
                            line: Some(line),
                            chain: None,
                            problem: Problem::HeadNotFound { head: anchor },
                        }));
                    };
                    if summary.lines != seq {
                        return Err(Box::new(Broken {
                            line: Some(line),
                            chain: Some(summary.name.clone()),
                            problem: Problem::HeadNotLast {
                                anchored_line: line,
                                after: summary.lines - seq,
                            },
                        }));
                    }
                }
            }
        }
        Ok(Verified {
            lines: self.number,
            chains: self.chains,
            anchored: self.anchored.is_some(),
        })
    }
}

fn parse_hex(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let digit = |b: u8| match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        };
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Chain;

    fn log(chains: &[(&str, usize)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut writers: Vec<Chain> = chains.iter().map(|(n, _)| Chain::new(*n)).collect();
        let most = chains.iter().map(|c| c.1).max().unwrap_or(0);
        for i in 0..most {
            for (writer, (_, count)) in writers.iter_mut().zip(chains) {
                if i < *count {
                    out.extend(writer.seal(&serde_json::json!({ "method": "fs.read", "i": i })));
                    out.push(b'\n');
                }
            }
        }
        out
    }

    #[test]
    fn interleaved_chains_verify_with_their_heads() {
        let bytes = log(&[("run:a", 3), ("run:b", 2)]);
        let verified = verify(&bytes[..], None).unwrap();
        assert_eq!(verified.lines, 5);
        assert_eq!(verified.chains.len(), 2);
        let head = verified.chains[1].head.clone();
        assert!(verify(&bytes[..], Some(&head)).unwrap().anchored);
        let early = hex(&line_hash(bytes.split(|b| *b == b'\n').next().unwrap()));
        let err = verify(&bytes[..], Some(&early)).unwrap_err();
        assert!(
            matches!(err.problem, Problem::HeadNotLast { after: 2, .. }),
            "{err}"
        );
    }

    /// A small deterministic generator: the test is the same every run.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn any_byte_changed_before_the_last_line_is_refused() {
        let bytes = log(&[("run:a", 6)]);
        let last_start = bytes[..bytes.len() - 1]
            .iter()
            .rposition(|b| *b == b'\n')
            .unwrap()
            + 1;
        let mut state = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let at = (next(&mut state) as usize) % last_start;
            let mut changed = bytes.clone();
            let flip = (next(&mut state) % 255 + 1) as u8;
            changed[at] ^= flip;
            assert!(
                verify(&changed[..], None).is_err(),
                "byte {at} ^ {flip:#x} went unnoticed"
            );
        }
    }

    #[test]
    fn garbage_never_panics() {
        let valid = log(&[("run:a", 4), ("container:b", 4)]);
        let mut state = 0x2545_f491_4f6c_dd1d;
        for round in 0..3000 {
            let mut input = valid.clone();
            match round % 4 {
                0 => {
                    let len = (next(&mut state) % 600) as usize;
                    input = (0..len).map(|_| next(&mut state) as u8).collect();
                }
                1 => input.truncate((next(&mut state) as usize) % (valid.len() + 1)),
                2 => {
                    for _ in 0..(next(&mut state) % 8 + 1) {
                        let at = (next(&mut state) as usize) % input.len();
                        input[at] = next(&mut state) as u8;
                    }
                }
                _ => {
                    let at = (next(&mut state) as usize) % input.len();
                    let junk: Vec<u8> = (0..(next(&mut state) % 40))
                        .map(|_| b"{}\":,[]0123456789abcdef\n"[(next(&mut state) % 24) as usize])
                        .collect();
                    input.splice(at..at, junk);
                }
            }
            let _ = verify(&input[..], Some("00"));
            let _ = verify(&input[..], None).map_err(|err| err.to_string());
        }
    }

    #[test]
    fn an_overlong_line_is_refused_without_being_held() {
        let mut input = vec![b'{'; MAX_LINE + 10];
        input.push(b'\n');
        let err = verify(&input[..], None).unwrap_err();
        assert!(matches!(err.problem, Problem::TooLong { .. }), "{err}");
    }
}
