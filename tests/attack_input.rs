//! Input that used to crash the supervisor: huge, zero, negative and
//! garbage values for every duration, size and count, on the command line,
//! in a profile and in a skill manifest. Each must be refused with a
//! precise message (exit 2 for a flag) and never a panic; the largest
//! value accepted must run.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::json;
use support::serve::{self, Face, Serve};

fn sandbox(args: &[&str]) -> Output {
    Command::new(support::sandbox_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const TIMEOUT_RANGE: &str = "must be more than 0 and at most 365d";

#[test]
fn every_limit_flag_of_run_refuses_bad_values_naming_the_flag_and_the_range() {
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "--timeout",
            &[
                "18446744073709551615",
                "0",
                "0s",
                "0ms",
                "366d",
                "9999999999999s",
            ],
            TIMEOUT_RANGE,
        ),
        (
            "--timeout",
            &["-1", "-5s", "x", "", "1.5s", "1h30"],
            "invalid duration",
        ),
        ("--timeout", &["18446744073709551615d"], "is too large"),
        (
            "--memory",
            &["0", "1KiB", "1048575"],
            "must be at least 1MiB",
        ),
        ("--memory", &["-1", "x", "", "1.5GiB"], "invalid size"),
        (
            "--memory",
            &["99999999999999999999", "16777216TiB"],
            "is too large",
        ),
        (
            "--pids",
            &["0", "4194305", "18446744073709551615"],
            "must be at least 1 and at most 4194304",
        ),
        ("--pids", &["-1", "x", "", "1.5"], "invalid count"),
        ("--pids", &["99999999999999999999"], "is too large"),
        (
            "--cpus",
            &["0", "-1", "nan", "inf", "-inf", "1025", "1e308"],
            "must be more than 0 and at most 1024 cores",
        ),
        ("--cpus", &["x", "", "1/2"], "invalid number of cores"),
        ("--max-output", &["-1", "x", ""], "invalid size"),
        ("--max-output", &["16777216TiB"], "is too large"),
        (
            "--tmp-size",
            &["0", "65GiB", "18446744073709551615"],
            "must be more than 0 and at most 64GiB",
        ),
        ("--tmp-size", &["-1", "x"], "invalid size"),
    ];
    for (flag, values, message) in cases {
        for value in *values {
            // Both spellings: a value starting with '-' must reach the
            // check, not be taken for another flag.
            for args in [
                vec!["run", flag, value, "--", "/bin/true"],
                vec!["run", &format!("{flag}={value}"), "--", "/bin/true"],
            ] {
                let out = sandbox(&args);
                let (_, stderr) = text(&out);
                assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
                assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
                assert!(
                    stderr.contains(&format!("for '{flag} <")) && stderr.contains(message),
                    "{args:?}: wanted {message:?} naming {flag}, got {stderr}"
                );
            }
        }
    }
}

#[test]
fn a_zero_timeout_is_refused_rather_than_reported_as_a_kill() {
    let out = sandbox(&["run", "--timeout", "0s", "--", "/bin/true"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("killed"), "{stderr}");
}

#[test]
fn the_largest_accepted_values_run() {
    // Unprivileged (where cgroup v1 is not delegated) the limits fall back
    // to rlimits above the inherited hard limits, which cannot be raised.
    for who in support::identities("the_largest_accepted_values_run") {
        let project = support::Project::new(who);
        let out = project.run_with(
            &[
                "--timeout",
                "365d",
                "--pids",
                "4194304",
                "--memory",
                "16TiB",
                "--max-output",
                "16777215TiB",
            ],
            &["/bin/true"],
        );
        let (_, stderr) = text(&out);
        assert!(!stderr.contains("panicked"), "{who:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{who:?}: {stderr}");
    }
}

#[test]
fn profile_values_have_the_same_ranges_and_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    for (value, message) in [
        (
            "timeout = 9223372036854775807",
            "`limits.timeout` must be more than 0 and at most 365d",
        ),
        (
            "timeout = \"18446744073709551615s\"",
            "`limits.timeout` must be more than 0 and at most 365d",
        ),
        (
            "pids = 9223372036854775807",
            "`limits.pids` must be at least 1 and at most 4194304",
        ),
    ] {
        let file = dir.path().join("p.toml");
        std::fs::write(&file, format!("version = 1\n[limits]\n{value}\n")).unwrap();
        let path = file.to_str().unwrap();
        let check = sandbox(&["profile", "check", path]);
        let (_, stderr) = text(&check);
        assert_eq!(check.status.code(), Some(2), "{value}: {stderr}");
        assert!(stderr.contains(message), "{value}: {stderr}");
        let run = sandbox(&["run", "--profile", path, "--", "/bin/true"]);
        let (_, stderr) = text(&run);
        assert!(!stderr.contains("panicked"), "{value}: {stderr}");
        assert_ne!(run.status.code(), Some(0), "{value}: {stderr}");
        assert!(stderr.contains(message), "{value}: {stderr}");
    }
}

fn write_skill(root: &Path, name: &str, extra: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: d\nruntime: sh\nmain: main.sh\n{extra}\n---\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("main.sh"),
        "while sandbox ipc --invocation >/dev/null; do sandbox ipc --result '{}'; done\n",
    )
    .unwrap();
}

#[test]
fn manifest_values_have_the_same_ranges_and_never_panic() {
    let root = tempfile::tempdir().unwrap();
    let cases = [
        (
            "timeout: 18446744073709551615s",
            "timeout: must be more than 0 and at most 365d",
        ),
        (
            "timeout: 18446744073709551615",
            "timeout: must be more than 0 and at most 365d",
        ),
        (
            "timeout: 0s",
            "timeout: must be more than 0 and at most 365d",
        ),
        (
            "timeout: 366d",
            "timeout: must be more than 0 and at most 365d",
        ),
        ("timeout: \"-1s\"", "timeout: invalid duration"),
        ("timeout: soon", "timeout: invalid duration"),
        ("timeout: 18446744073709551615d", "timeout: duration"),
        ("memory: \"0\"", "memory: must be at least 1MiB"),
        ("memory: 16777216TiB", "memory: size"),
        ("memory: \"-1\"", "memory: invalid size"),
    ];
    for (i, (line, message)) in cases.iter().enumerate() {
        let name = format!("s{i}");
        write_skill(root.path(), &name, line);
        let dir = root.path().join(&name);
        let out = sandbox(&["skill", "check", dir.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        assert!(!stderr.contains("panicked"), "{line}: {stderr}");
        assert_eq!(out.status.code(), Some(2), "{line}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!("{}:6: {message}", dir.join("SKILL.md").display())),
            "{line}: wanted {message:?} at line 6, got {stderr}"
        );
    }
}

#[test]
fn a_skill_whose_timeout_overflows_the_clock_is_refused_before_it_runs() {
    let project = tempfile::Builder::new()
        .prefix("sandbox-input-")
        .tempdir_in("/tmp")
        .unwrap();
    let skills = project.path().join(".skills");
    write_skill(&skills, "forever", "timeout: 18446744073709551615s");
    let path = project.path().to_str().unwrap();
    let out = sandbox(&[
        "skill",
        "run",
        "--non-interactive",
        "--project",
        path,
        "forever",
    ]);
    let (_, stderr) = text(&out);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(TIMEOUT_RANGE), "{stderr}");

    let mut serve = Serve::start(serve::command(Face::Stdio, project.path(), &[]));
    let invoked = serve.invoke_and_wait("forever", json!({}));
    let list = serve.send_object(json!({"method": "skill.list"}));
    let listed = serve.response(list);
    let stderr = serve.finish();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(invoked["error"].is_object(), "{invoked}");
    assert!(
        listed["result"]["invalid"]
            .to_string()
            .contains(TIMEOUT_RANGE),
        "{listed}"
    );
}

#[test]
fn bad_skill_params_exit_2_with_a_precise_message() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), vec![b' '; 2 << 20]).unwrap();
    let big = format!("@{}", file.path().display());
    for (params, message) in [
        ("{", "--params is not valid JSON"),
        ("[]", "--params must be a JSON object"),
        ("7", "--params must be a JSON object"),
        (big.as_str(), "larger than 1048576 bytes"),
        (
            "@/nonexistent/params.json",
            "reading --params @/nonexistent/params.json",
        ),
    ] {
        let out = sandbox(&["skill", "run", "--params", params, "anything"]);
        let (_, stderr) = text(&out);
        assert!(!stderr.contains("panicked"), "{params}: {stderr}");
        assert_eq!(out.status.code(), Some(2), "{params}: {stderr}");
        assert!(stderr.contains(message), "{params}: {stderr}");
    }
}
