use std::path::PathBuf;

use super::*;
use crate::profile;

fn context() -> Context {
    Context {
        // As /etc/passwd names them: system accounts' too.
        homes: vec![
            PathBuf::from("/home/alice"),
            PathBuf::from("/root"),
            PathBuf::from("/usr/sbin"),
            PathBuf::from("/var/lib/postgresql"),
        ],
        stored_grants: Vec::new(),
    }
}

fn score_of_builtin(name: &str) -> f64 {
    assess_policy(&profile::load(name).unwrap(), &context()).score
}

fn score_of_toml(toml: &str) -> f64 {
    let policy = profile::parse(toml, "/nonexistent/custom.toml").unwrap();
    assess_policy(&policy, &context()).score
}

fn finding<'a>(assessment: &'a Assessment, layer: &str, setting: &str) -> &'a Finding {
    assessment
        .findings
        .iter()
        .find(|f| f.layer == layer && f.setting == setting)
        .unwrap()
}

#[test]
fn the_built_ins_score_in_the_order_a_person_expects() {
    let strict = score_of_builtin("strict");
    let standard = score_of_builtin("standard");
    let permissive = score_of_builtin("permissive");
    assert!(strict < standard, "strict {strict} < standard {standard}");
    assert!(
        standard < permissive,
        "standard {standard} < permissive {permissive}"
    );
    assert_eq!(Level::of(strict), Level::Ok, "strict {strict}");
    // Host network is most of what permissive adds: clearly worse.
    assert!(permissive - standard >= 1.0, "{standard} -> {permissive}");
}

#[test]
fn host_network_and_a_writable_home_are_clearly_worse_and_one_read_path_only_slightly() {
    let strict = score_of_builtin("strict");
    let host = score_of_toml("version = 1\nextends = \"strict\"\n[network]\nmode = \"host\"\n");
    let home = score_of_toml(
        "version = 1\nextends = \"strict\"\n[filesystem]\nwrite = [\"/home/alice\"]\n",
    );
    // Profiles refuse a writable `/`; a policy built in code can hold one.
    let mut whole_host = profile::load("strict").unwrap();
    whole_host.filesystem.write.push(PathBuf::from("/"));
    let root = assess_policy(&whole_host, &context()).score;
    let one_read = score_of_toml(
        "version = 1\nextends = \"strict\"\n[filesystem]\nread = [\"/usr\", \"/data/tool\"]\n",
    );
    assert!(host >= strict + 1.0, "strict {strict}, host network {host}");
    assert!(
        home >= strict + 2.0,
        "strict {strict}, writable home {home}"
    );
    assert_eq!(Level::of(home), Level::Exposed, "writable home {home}");
    assert!(
        root >= home,
        "writable / {root} at least a writable home {home}"
    );
    assert!(
        one_read > strict && one_read <= strict + 0.3,
        "strict {strict}, one more read path {one_read}"
    );
    // Host network and a writable home together leave strict's layers
    // little to hold: past MEDIUM.
    let both = score_of_toml(
        "version = 1\nextends = \"strict\"\n[network]\nmode = \"host\"\n[filesystem]\nwrite = [\"/home/alice\"]\n",
    );
    assert!(both > home, "{both} > {home}");
}

#[test]
fn every_profile_rates_the_same_settings_and_weights() {
    let shape = |a: &Assessment| -> Vec<(&str, &str, u64)> {
        a.findings
            .iter()
            .map(|f| (f.layer, f.setting, (f.weight * 10.0) as u64))
            .collect()
    };
    let strict = assess_policy(&profile::load("strict").unwrap(), &context());
    let permissive = assess_policy(&profile::load("permissive").unwrap(), &context());
    assert_eq!(shape(&strict), shape(&permissive));
    assert!(strict
        .findings
        .iter()
        .all(|f| (0.0..=1.0).contains(&f.exposure) && f.weight > 0.0));
    assert_eq!(finding(&permissive, "network", "mode").value, "host");
    assert_eq!(finding(&strict, "network", "mode").value, "loopback");
}

#[test]
fn stored_grants_and_allowed_risky_actions_raise_the_broker_grants() {
    let policy = profile::parse(
        "version = 1\nextends = \"strict\"\n[broker.rules]\n\"terminal.run\" = \"allow\"\n",
        "/nonexistent/custom.toml",
    )
    .unwrap();
    let plain = assess_policy(&profile::load("strict").unwrap(), &context());
    let granted = assess_policy(&policy, &context());
    let mut stored = context();
    stored.stored_grants.push("fs.write src/*".into());
    let with_stored = assess_policy(&profile::load("strict").unwrap(), &stored);
    assert_eq!(finding(&plain, "broker", "grants").exposure, 0.0);
    assert!(finding(&granted, "broker", "grants").exposure >= 0.5);
    assert!(finding(&with_stored, "broker", "grants").exposure > 0.0);
    assert!(with_stored.score >= plain.score);
}

/// strict's report as a full run wrote it (the shape of
/// `crate::spawn::report`'s own test), to be degraded below.
fn full_report() -> serde_json::Value {
    serde_json::json!({
        "version": 1, "profile": "strict", "error": null,
        "exit": {"code": 0, "signal": null, "status": 0},
        "command": ["/bin/true"], "project": "/work/project", "wall_time_ms": 10.0,
        "resources": null, "broker": null, "connections": {}, "limits_hit": [],
        "quarantined": [], "warnings": [],
        "measured": {
            "capabilities": {"CapEff": "0000000000000000"}, "gid": 1000, "uid": 1000,
            "namespaces": {"user": "new", "mount": "new", "pid": "new", "net": "new",
                           "ipc": "new", "uts": "new", "cgroup": "new"},
            "no_new_privs": true, "seccomp_filters": 1, "seccomp_filters_inherited": 0,
            "seccomp_mode": 2
        },
        "enforced": {
            "capabilities": [],
            "cgroup": {"controllers": ["memory", "pids"], "cpu": null, "memory": 1073741824,
                       "paths": [], "pids": 512, "version": 1},
            "isolation": {"namespaces": "all", "not_promised": [],
                          "protected_entries": "read-only", "reason": null,
                          "view": "mount-namespace"},
            "landlock": {"abi": 7, "requested": "required", "rules": 35,
                         "status": "fully-enforced"},
            "namespaces": {"cgroup": true, "ipc": true, "mount": true, "net": true,
                           "pid": true, "user": true, "uts": true},
            "network": "loopback", "network_allow": null, "no_new_privs": true,
            "project_view": null,
            "rlimits": {"RLIMIT_NOFILE": 1024},
            "seccomp": {"filter_sha256": "00", "instructions": 1022, "mode": "allowlist",
                        "requested": "required", "status": "installed"},
            "timeout_s": 600.0, "tmp_size": 134217728,
            "user": {"host_gid": 1000, "host_uid": 1000, "idmapped_trees": 0,
                     "inside_gid": 1000, "inside_uid": 1000}
        }
    })
}

fn report_score(value: &serde_json::Value) -> f64 {
    let report = crate::spawn::Report::read(value).unwrap();
    let strict = profile::load("strict").unwrap();
    assess_report(&report, "r.json", Some(&strict), &context())
        .unwrap()
        .score
}

#[test]
fn a_full_run_scores_as_its_profile_and_every_fallback_scores_worse() {
    let full = report_score(&full_report());
    let profile = score_of_builtin("strict");
    assert!(
        (full - profile).abs() <= 0.2,
        "report {full}, profile {profile}"
    );
    let mut no_seccomp = full_report();
    no_seccomp["enforced"]["seccomp"]["status"] = "skipped".into();
    no_seccomp["measured"]["seccomp_mode"] = 0.into();
    let mut no_landlock = full_report();
    no_landlock["enforced"]["landlock"] = serde_json::json!({"abi": null, "requested": "best-effort", "rules": 0, "status": "not-applied"});
    let mut no_namespaces = full_report();
    no_namespaces["enforced"]["isolation"] = serde_json::json!({
        "namespaces": "none", "not_promised": ["host processes visible"],
        "protected_entries": "restored-after-the-run", "reason": "user namespaces refused",
        "view": "landlock-only"});
    for name in ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"] {
        no_namespaces["enforced"]["namespaces"][name] = false.into();
    }
    let mut no_cgroup = full_report();
    no_cgroup["enforced"]["cgroup"] = serde_json::Value::Null;
    let mut unmeasured = full_report();
    unmeasured["enforced"]["capabilities"] = serde_json::Value::Null;
    unmeasured["enforced"]["no_new_privs"] = serde_json::Value::Null;
    for (what, report) in [
        ("seccomp skipped", no_seccomp),
        ("Landlock not applied", no_landlock),
        ("no namespaces", no_namespaces),
        ("no cgroup", no_cgroup),
        ("nothing measured", unmeasured),
    ] {
        let fallen = report_score(&report);
        assert!(
            fallen > full,
            "{what}: {fallen} should be worse than {full}"
        );
    }
}

#[test]
fn a_refused_run_and_an_unknown_profile_are_said_not_guessed() {
    let refused = crate::spawn::Report::refused("strict", "Landlock is required");
    assert!(matches!(
        assess_report(&refused, "r.json", None, &context()),
        Err(ExposureError::Refused { .. })
    ));
    let report = crate::spawn::Report::read(&full_report()).unwrap();
    let unknown = assess_report(&report, "r.json", None, &context()).unwrap();
    assert_eq!(finding(&unknown, "filesystem", "write").value, "unknown");
    assert!(unknown
        .notes
        .iter()
        .any(|n| n.contains("sandbox explain --report FILE PROFILE")));
}

#[test]
fn a_project_root_that_is_a_home_is_rated_open() {
    let mut report = full_report();
    report["project"] = "/home/alice".into();
    let home = report_score(&report);
    let full = report_score(&full_report());
    assert!(home > full, "{home} > {full}");
}

#[test]
fn a_run_that_got_its_best_effort_layers_scores_as_its_profile_and_one_without_worse() {
    let standard = profile::load("standard").unwrap();
    let mut full = full_report();
    full["profile"] = "standard".into();
    full["enforced"]["seccomp"]["mode"] = "denylist".into();
    full["enforced"]["landlock"]["requested"] = "best-effort".into();
    let score = |value: &serde_json::Value| {
        let report = crate::spawn::Report::read(value).unwrap();
        assess_report(&report, "r.json", Some(&standard), &context())
            .unwrap()
            .score
    };
    let profile = assess_policy(&standard, &context()).score;
    assert_eq!(score(&full), profile);
    let mut no_landlock = full.clone();
    no_landlock["enforced"]["landlock"]["status"] = "not-applied".into();
    assert!(
        score(&no_landlock) > profile + 0.2,
        "{} > {profile}",
        score(&no_landlock)
    );
}

#[test]
fn a_hostile_reports_numbers_rate_without_panicking() {
    for (key, value) in [
        ("timeout_s", serde_json::json!(-1.0)),
        ("timeout_s", serde_json::json!(1e300)),
        ("timeout_s", serde_json::json!(f64::MAX)),
    ] {
        let mut report = full_report();
        report["enforced"][key] = value;
        report["enforced"]["cgroup"]["cpu"] = serde_json::json!(-5.0);
        report["enforced"]["cgroup"]["memory"] = serde_json::json!(u64::MAX);
        report["enforced"]["landlock"]["abi"] = serde_json::json!(u32::MAX);
        report["enforced"]["rlimits"]["RLIMIT_AS"] = serde_json::json!(u64::MAX);
        report["project"] = "/\u{1b}]0;title\u{7}".into();
        let score = report_score(&report);
        assert!((0.0..=10.0).contains(&score), "{score}");
    }
}

#[test]
fn what_a_run_measured_of_its_network_stands_whatever_profile_is_named() {
    let report = crate::spawn::Report::read(&full_report()).unwrap();
    let permissive = profile::load("permissive").unwrap();
    let rated = assess_report(&report, "r.json", Some(&permissive), &context()).unwrap();
    assert_eq!(finding(&rated, "network", "mode").value, "loopback");
    assert!(rated
        .notes
        .iter()
        .any(|n| n.contains("names profile strict")));
}
