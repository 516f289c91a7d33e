//! `sandbox profile show` and `check`, run as the real binary, where one
//! command's output is the next one's input. The output of single commands
//! (list, show, check's findings and errors) is in the transcripts of
//! `tests/cmd/profile-*.toml` (tests/cli_transcripts.rs).
use std::path::Path;
use std::process::{Command, Output};

fn sandbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(args)
        .output()
        .expect("run the sandbox binary")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Write `text` to `name` in `dir`, run `sandbox profile check` on it, and
/// return (exit status, stderr, the file's path).
fn check(dir: &Path, name: &str, text: &str) -> (Option<i32>, String, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write profile");
    let path = path.display().to_string();
    let out = sandbox(&["profile", "check", &path]);
    (out.status.code(), stderr(&out), path)
}

#[test]
fn show_prints_a_profile_that_checks() {
    let out = sandbox(&["profile", "show", "permissive"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("mode = \"host\""), "{text}");
    assert!(text.contains("cpu = \"unlimited\""), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("extends")), "{text}");

    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err, path) = check(dir.path(), "shown.toml", &text);
    assert_eq!(code, Some(0), "{err}");
    let again = sandbox(&["profile", "show", &path]);
    assert_eq!(
        stdout(&again).lines().skip(1).collect::<Vec<_>>(),
        text.lines().skip(1).collect::<Vec<_>>()
    );
}
