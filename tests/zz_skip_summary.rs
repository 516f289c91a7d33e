//! Prints how many checks this `cargo test` skipped, and which. Cargo runs
//! integration test binaries in name order, so this one comes last; each
//! skip was also printed as `SKIP:` where it happened. Under
//! `SANDBOX_TEST_REQUIRE=1` a skip already failed its own test; this fails
//! too, so a skip can never hide in a green run.

mod support;

use std::io::Write;

#[test]
fn skipped_checks_are_counted() {
    let dir = support::skip_log_dir(std::os::unix::process::parent_id());
    let mut lines = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let binary = entry.file_name().to_string_lossy().into_owned();
            let binary = binary.split('.').next().unwrap_or_default().to_owned();
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                lines.extend(text.lines().map(|line| format!("{binary}: {line}")));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    lines.sort();
    let mut err = std::io::stderr().lock();
    if lines.is_empty() {
        let _ = writeln!(err, "sandbox tests: no check was skipped");
    } else {
        let _ = writeln!(
            err,
            "sandbox tests: {} check(s) SKIPPED (a missing feature; SANDBOX_TEST_REQUIRE=1 makes each a failure):",
            lines.len()
        );
        for line in &lines {
            let _ = writeln!(err, "  SKIP {line}");
        }
    }
    assert!(
        lines.is_empty() || std::env::var_os("SANDBOX_TEST_REQUIRE").is_none_or(|v| v != "1"),
        "{} check(s) skipped under SANDBOX_TEST_REQUIRE=1",
        lines.len()
    );
}
