//! Entry points for the coverage-guided fuzz targets in `fuzz/` (cargo-fuzz
//! and libFuzzer; `scripts/fuzz` runs them). Each takes the bytes an
//! untrusted peer controls and runs them through the same functions the
//! sandbox runs them through; anything but a panic or an abort is a pass.
//! Properties beyond "no panic" are asserted where the code promises them.
//!
//! Not a stable API: hidden from the documentation, and shaped by what the
//! targets need.

use std::path::Path;
use std::sync::OnceLock;

use crate::profile::policy::Policy;

/// A profile's TOML text, as `--profile FILE` reads it. A profile that
/// parses prints as TOML that parses again to the same policy, as
/// [`crate::profile::to_toml`] promises.
pub fn profile(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    // No such directory: a relative `extends` names nothing.
    let origin = "/nonexistent-sandbox-fuzz/fuzz.toml";
    let Ok(policy) = crate::profile::parse(text, origin) else {
        return;
    };
    let printed = crate::profile::to_toml(&policy);
    let again = crate::profile::parse(&printed, origin).unwrap_or_else(|err| {
        panic!("to_toml printed a profile that does not parse: {err}\n{printed}")
    });
    assert_eq!(again, policy, "to_toml lost a value:\n{printed}");
}

/// A `SKILL.md`, as skill discovery reads it from a skill's directory.
pub fn skill_manifest(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let _ = crate::skill::manifest::parse(Path::new("/nonexistent-sandbox-fuzz/skill"), text);
}

/// Bytes on a broker channel: split into lines by the code base's one framer (in
/// pieces whose sizes the input's first byte chooses, so that lines span
/// reads), each line parsed and its parameters decoded.
pub fn broker(bytes: &[u8]) {
    use crate::jsonl::{Frame, Framer};
    let Some((&step, stream)) = bytes.split_first() else {
        return;
    };
    // Small enough that the fuzzer reaches the over-long path too.
    const MAX: usize = 4096;
    let mut framer = Framer::new(MAX);
    let mut frames = Vec::new();
    let mut fed = 0;
    for piece in stream.chunks(usize::from(step).max(1)) {
        framer.push(piece, &mut frames);
        fed += piece.len();
        assert!(
            framer.pending() <= MAX,
            "the framer holds more than its limit"
        );
    }
    assert_eq!(fed, stream.len());
    // Every complete line comes out whole, or as its length when too long,
    // in order, whatever the pieces were.
    let complete = match stream.iter().rposition(|b| *b == b'\n') {
        Some(end) => stream[..end].split(|b| *b == b'\n').collect(),
        None => Vec::new(),
    };
    assert_eq!(frames.len(), complete.len(), "one frame per line");
    for (frame, expected) in frames.iter().zip(&complete) {
        match frame {
            Frame::Line(line) => assert_eq!(line, expected),
            Frame::TooLarge { bytes } => {
                assert!(expected.len() > MAX);
                assert_eq!(*bytes, expected.len());
            }
        }
    }
    for frame in frames {
        if let Frame::Line(line) = frame {
            crate::broker::server::fuzzing::message(&line);
        }
    }
}

/// One line as the broker's message parser gets it (no framing), so the
/// fuzzer spends its time on JSON-RPC and the parameters.
pub fn broker_message(bytes: &[u8]) {
    crate::broker::server::fuzzing::message(bytes);
}

/// A report file's bytes, as `sandbox explain --report` reads them (a run
/// may have written the file), rated with each built-in and with none:
/// the score stays within 0..10 and every exposure within 0..1.
pub fn report_explain(bytes: &[u8]) {
    let path = Path::new("fuzz-report.json");
    let Ok(report) = crate::exposure::report_file::parse(path, bytes) else {
        return;
    };
    let context = crate::exposure::Context {
        homes: vec![std::path::PathBuf::from("/home/fuzz")],
        stored_grants: vec!["fs.write *".into()],
    };
    let policies = crate::profile::builtin_names()
        .iter()
        .map(|name| builtin_policy(name))
        .chain([None]);
    for policy in policies {
        let Ok(rated) = crate::exposure::assess_report(&report, "fuzz", policy, &context) else {
            continue;
        };
        assert!((0.0..=10.0).contains(&rated.score), "score {}", rated.score);
        for finding in &rated.findings {
            assert!((0.0..=1.0).contains(&finding.exposure), "{finding:?}");
        }
    }
}

pub fn builtin_policy(name: &str) -> Option<&'static Policy> {
    static POLICIES: OnceLock<Vec<(&'static str, Policy)>> = OnceLock::new();
    POLICIES
        .get_or_init(|| {
            crate::profile::builtin_names()
                .iter()
                .filter_map(|name| Some((*name, crate::profile::load(name).ok()?)))
                .collect()
        })
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, policy)| policy)
}

/// Run `run` on every input of the checked-in corpus `fuzz/corpus/TARGET`
/// (the seeds and the inputs that once crashed), so that `cargo test` of
/// each crate keeps what the fuzzers found fixed without a nightly
/// toolchain. Panics, as a test does, when the corpus is missing or empty.
pub fn replay(target: &str, run: fn(&[u8])) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let bytes = std::fs::read(&path).expect("a corpus file reads");
        eprintln!("{target}: {}", path.display());
        run(&bytes);
        count += 1;
    }
    assert!(count > 0, "{} holds no inputs", dir.display());
}

#[cfg(test)]
mod tests {
    //! Every target replays its checked-in corpus (fuzz/corpus/TARGET, the
    //! seeds and the inputs that once crashed), so `cargo test` keeps what
    //! the fuzzers found fixed without a nightly toolchain.
    use super::replay;

    #[test]
    fn profile() {
        replay("profile", super::profile);
    }
    #[test]
    fn report_explain() {
        replay("report_explain", super::report_explain);
    }
    #[test]
    fn skill_manifest() {
        replay("skill_manifest", super::skill_manifest);
    }
    #[test]
    fn broker() {
        replay("broker", super::broker);
    }
    #[test]
    fn broker_message() {
        replay("broker_message", super::broker_message);
    }
}
