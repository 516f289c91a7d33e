//! `sandbox doctor` run as a real binary.
//!
//! Feature checks depend on the host: a missing feature is a skip through
//! `support::require` (a loud `SKIP:` line, counted in the run's summary,
//! and a failure under `SANDBOX_TEST_REQUIRE=1`, set in CI on hosts that
//! must support everything), so a skip is never silent.

mod support;

use std::process::Command;

use serde_json::Value;

fn doctor(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .arg("doctor")
        .args(args)
        .output()
        .expect("running sandbox doctor")
}

/// A feature `doctor` reports missing is a skip of `test`'s check of it,
/// through [`support::require`]: counted, and a failure under
/// SANDBOX_TEST_REQUIRE=1.
fn require_or_skip(test: &str, feature: &str, present: bool, detail: &Value) {
    support::require(test, &format!("{feature} ({detail})"), present);
}

#[test]
fn text_output_names_every_feature_and_exits_by_the_default_profile() {
    let out = doctor(&[]);
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    let strict = text
        .lines()
        .find(|l| l.trim_start().starts_with("strict (default): "))
        .unwrap_or_else(|| panic!("no verdict for strict in:\n{text}"));
    // Exit 1 exactly when the default profile's dry run was refused.
    let can_run = strict.ends_with(": can run");
    assert_eq!(
        out.status.code(),
        Some(if can_run { 0 } else { 1 }),
        "{strict}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !can_run {
        assert!(
            strict.contains("cannot run (exit 125): sandbox: "),
            "{strict}"
        );
    }
    for needle in [
        "environment ",
        "user namespaces",
        "landlock",
        "seccomp filters",
        "clone3",
        "pidfd",
        "idmapped mounts",
        "cgroups:",
        "memory",
        "profiles (each started with a dry run",
        "standard: ",
        "permissive: ",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    for line in text
        .lines()
        .filter(|l| l.trim_start().starts_with("missing "))
    {
        // A missing kernel feature must come with its reason.
        assert!(line.contains(':'), "no reason given: {line}");
    }
}

#[test]
fn json_output_follows_the_documented_schema() {
    let test = "json_output_follows_the_documented_schema";
    let out = doctor(&["--json"]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    assert_eq!(json["version"], 1);
    assert_eq!(json["default_profile"], "strict");
    let can_run = json["default_profile_can_run"]
        .as_bool()
        .expect("default_profile_can_run is a bool");
    assert_eq!(
        out.status.code(),
        Some(if can_run { 0 } else { 1 }),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let environment = &json["environment"];
    for key in [
        "container",
        "kubernetes",
        "outer",
        "initial_user_namespace",
        "uid_map",
        "setgroups",
        "root",
        "seccomp",
        "apparmor",
        "sysctls",
        "landlock_in_lsm_list",
        "cgroupfs_read_only",
        "proc_masked",
    ] {
        assert!(
            environment.get(key).is_some(),
            "environment lacks {key:?}: {environment}"
        );
    }
    for key in ["enabled", "restrict_unprivileged_userns", "label"] {
        assert!(
            environment["apparmor"].get(key).is_some(),
            "apparmor lacks {key:?}"
        );
    }

    let profiles = json["profiles"].as_array().expect("profiles is an array");
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["profile"].as_str().expect("profile name"))
        .collect();
    assert_eq!(names, ["strict", "standard", "permissive"]);
    for profile in profiles {
        let can_run = profile["can_run"].as_bool().expect("can_run is a bool");
        assert_eq!(profile["refusal"].is_null(), can_run, "{profile}");
        assert_eq!(
            profile["exit_status"],
            if can_run { 0 } else { 125 },
            "{profile}"
        );
        assert!(profile["warnings"].is_array(), "{profile}");
        // What the dry run applied and measured, as in a run report.
        let enforced = &profile["enforced"];
        assert_eq!(enforced.is_null(), !can_run, "{profile}");
        if can_run {
            for key in [
                "isolation",
                "namespaces",
                "landlock",
                "seccomp",
                "no_new_privs",
            ] {
                assert!(
                    enforced.get(key).is_some(),
                    "enforced lacks {key:?}: {enforced}"
                );
            }
            assert_eq!(profile["measured"]["no_new_privs"], true, "{profile}");
        }
    }
    assert_eq!(profiles[0]["can_run"], json["default_profile_can_run"]);

    let probes = &json["probes"];
    for key in [
        "kernel_release",
        "arch",
        "running_as_root",
        "user_namespaces",
        "unprivileged_userns_clone",
        "max_user_namespaces",
        "apparmor_restrict_unprivileged_userns",
        "landlock_abi",
        "seccomp",
        "seccomp_user_notif",
        "clone3",
        "pidfd",
        "idmapped_mounts",
        "cgroup",
    ] {
        assert!(probes.get(key).is_some(), "probes lack {key:?}: {probes}");
    }
    for key in ["mode", "controllers", "unified_mount"] {
        assert!(probes["cgroup"].get(key).is_some(), "cgroup lacks {key:?}");
    }

    let userns = &probes["user_namespaces"];
    require_or_skip(
        test,
        "user namespaces",
        userns["status"] == "available",
        userns,
    );
    let seccomp = &probes["seccomp"];
    require_or_skip(test, "seccomp", seccomp["status"] == "available", seccomp);
    let abi = probes["landlock_abi"].as_u64();
    require_or_skip(
        test,
        "Landlock",
        abi.is_some_and(|v| v >= 1),
        &probes["landlock"],
    );
    require_or_skip(
        test,
        "the default profile running here",
        can_run,
        &profiles[0],
    );
}

/// The programs `sandbox` executes are listed with where they were found;
/// a `sandbox` copied alone says which are missing, what needs them and
/// the fix, and still exits by the default profile alone.
#[test]
fn the_installation_s_programs_are_listed_and_a_missing_one_is_named() {
    let out = doctor(&["--json"]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    let programs = json["programs"].as_array().expect("programs[]");
    let names: Vec<&str> = programs.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "sandbox-net",
            "sandbox-daemon",
            "sandbox-mcp",
            "sandbox-oci"
        ]
    );
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_sandbox"))
        .parent()
        .expect("the build directory");
    for program in programs {
        let name = program["name"].as_str().unwrap_or_default();
        assert_eq!(
            program["path"].as_str().map(std::path::PathBuf::from),
            Some(built.join(name)),
            "{program}"
        );
    }

    let alone = tempfile::tempdir().expect("a directory");
    let copy = alone.path().join("sandbox");
    std::fs::copy(env!("CARGO_BIN_EXE_sandbox"), &copy).expect("copying sandbox");
    let out = Command::new(&copy)
        .arg("doctor")
        .output()
        .expect("running the copy's doctor");
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("missing  sandbox-net"))
        .unwrap_or_else(|| panic!("sandbox-net not reported missing in:\n{text}"));
    assert!(line.contains("a run with an allowlist"), "{line}");
    assert!(
        line.contains(&alone.path().join("sandbox-net").display().to_string()),
        "{line}"
    );
    assert!(line.contains("reinstall"), "{line}");
    let strict_runs = text
        .lines()
        .any(|l| l.trim_start() == "strict (default): can run");
    assert_eq!(out.status.code(), Some(if strict_runs { 0 } else { 1 }));
}
