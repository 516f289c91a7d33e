//! The CLI's output where it is the same on every machine, as transcripts
//! (`tests/cmd/*.toml`, run with `trycmd`): a case gives the arguments and
//! the exit status; `NAME.stdout` and `NAME.stderr` beside it are the whole
//! expected output (`[..]` stands for the rest of a line or a part of it
//! that differs between machines, `[CWD]` for the directory the case runs
//! in), and `NAME.in/` or the fixture its `fs.cwd` names (`profiles/`,
//! `skills-project/`, `pydantic-skill/`) is that directory (the commands
//! only read it). A case fails when its output or its status changes;
//! `TRYCMD=overwrite cargo test --test cli_transcripts` writes the new
//! output for review.
//!
//! What needs a machine's features or more than one step (a profile shown
//! and then checked, doctor's findings) stays a Rust test.

use std::path::Path;

const CASES: &str = "tests/cmd";

#[test]
fn cli_transcripts() {
    trycmd::TestCases::new()
        .register_bin("sandbox", Path::new(env!("CARGO_BIN_EXE_sandbox")))
        .case(format!("{CASES}/*.toml"));
}

/// trycmd checks a stream only when its file exists: a case without one
/// would pass whatever the command printed there.
#[test]
fn every_case_checks_both_streams() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(CASES);
    let mut cases = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/cmd") {
        let path = entry.expect("tests/cmd").path();
        if path.extension().is_some_and(|e| e == "toml") {
            cases += 1;
            for stream in ["stdout", "stderr"] {
                assert!(
                    path.with_extension(stream).exists(),
                    "{} has no .{stream}: an empty file says the stream must stay empty",
                    path.display()
                );
            }
        }
    }
    assert!(cases > 0, "no cases in {}", dir.display());
}
