//! The output cap. In its own test binary: the supervisor's peak RSS is read
//! with getrusage(RUSAGE_CHILDREN), which no other test may pollute.

mod support;

use support::{Project, Who};

#[test]
fn a_gigabyte_under_a_one_mebibyte_cap_is_cut_and_the_supervisor_stays_small() {
    if !support::require_root_sandbox("output cap") {
        return;
    }
    let project = Project::new(Who::Root);
    let out = project.run_with_profile(
        "version = 1\nextends = \"strict\"\n[limits]\noutput = \"1MiB\"\n",
        &["--report", "report.json"],
        &[
            "/bin/sh",
            "-c",
            "echo first-on-stderr >&2; head -c 1073741824 /dev/zero",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Both streams count against one cap.
    let stderr_payload = "first-on-stderr\n".len();
    assert_eq!(out.stdout.len() + stderr_payload, 1 << 20, "{stderr}");
    assert!(out.stdout.iter().all(|b| *b == 0));
    assert!(
        stderr.contains(
            "sandbox: output cap of 1MiB reached: the rest of stdout and stderr is dropped"
        ),
        "{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.path().join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["limits_hit"], serde_json::json!(["output"]));
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    let peak_kib = usage.max_rss();
    assert!(peak_kib < 32 * 1024, "supervisor peak RSS {peak_kib} KiB");
}

#[test]
fn output_under_the_cap_passes_through_unchanged() {
    if !support::require_root_sandbox("output cap") {
        return;
    }
    let project = Project::new(Who::Root);
    let out = project.run(&[
        "/bin/sh",
        "-c",
        "printf 'a\\nb\\n'; printf 'e\\n' >&2; exit 4",
    ]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(out.stdout, b"a\nb\n");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().next(),
        Some("e")
    );
}
