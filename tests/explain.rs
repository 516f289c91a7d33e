//! `sandbox explain` and `sandbox skill explain`, run as the real binary:
//! the table, the JSON, `--threshold`, the errors on bad input, and
//! reports of real runs, full and fallen back.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::{Project, Who};

/// `sandbox ARGS` in `dir`, with a grant store of its own.
fn sandbox_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(support::sandbox_bin())
        .args(args)
        .current_dir(dir)
        .env("SANDBOX_STATE_DIR", dir.join(".state-for-test"))
        .stdin(Stdio::null())
        .output()
        .expect("run the sandbox binary")
}

fn sandbox(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    sandbox_in(dir.path(), args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON rating of `args` (which must include --json), after a success.
fn rating(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = sandbox_in(dir, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("explain --json prints JSON")
}

fn score(value: &serde_json::Value) -> f64 {
    value["score"].as_f64().expect("a score")
}

fn finding<'a>(value: &'a serde_json::Value, layer: &str, setting: &str) -> &'a serde_json::Value {
    value["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["layer"] == layer && f["setting"] == setting)
        .unwrap_or_else(|| panic!("no finding {layer}.{setting} in {value}"))
}

#[test]
fn the_table_has_a_line_per_setting_and_the_score_with_its_level() {
    let out = sandbox(&["explain", "strict"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("profile strict: what a run would enforce"),
        "{text}"
    );
    for line in [
        "namespaces.user",
        "landlock.rules",
        "filesystem.write",
        "filesystem.secrets",
        "seccomp.filter",
        "privileges.capabilities",
        "network.mode",
        "limits.memory",
        "broker.default",
    ] {
        assert!(text.lines().any(|l| l.starts_with(line)), "{line}: {text}");
    }
    assert!(
        text.contains("SETTING") && text.contains("WEIGHT"),
        "{text}"
    );
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("exposure ") && last.ends_with("of 10: OK"),
        "{last}"
    );
}

#[test]
fn the_json_has_its_documented_fields_and_orders_the_built_ins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let strict = rating(dir.path(), &["explain", "strict", "--json"]);
    assert_eq!(strict["version"], 1);
    assert_eq!(strict["subject"]["kind"], "profile");
    assert_eq!(strict["subject"]["name"], "strict");
    assert_eq!(strict["level"], "OK");
    for f in strict["findings"].as_array().expect("findings") {
        for key in ["layer", "setting", "value", "reason"] {
            assert!(f[key].is_string(), "{key} in {f}");
        }
        let exposure = f["exposure"].as_f64().expect("exposure");
        assert!((0.0..=1.0).contains(&exposure), "{f}");
        assert!(f["weight"].as_f64().expect("weight") > 0.0, "{f}");
    }
    assert!(strict["notes"].is_array());
    let standard = rating(dir.path(), &["explain", "standard", "--json"]);
    let permissive = rating(dir.path(), &["explain", "permissive", "--json"]);
    assert!(score(&strict) < score(&standard), "{strict} {standard}");
    assert!(score(&standard) < score(&permissive));
    assert_eq!(finding(&permissive, "network", "mode")["value"], "host");
    // A profile file, as `run --profile` takes one.
    let file = dir.path().join("home.toml");
    std::fs::write(
        &file,
        "version = 1\nextends = \"strict\"\n[filesystem]\nwrite = [\"/root\"]\n",
    )
    .expect("write profile");
    let home = rating(dir.path(), &["explain", file.to_str().unwrap(), "--json"]);
    assert_eq!(home["level"], "EXPOSED", "{home}");
    assert_eq!(finding(&home, "filesystem", "write")["exposure"], 1.0);
}

#[test]
fn the_threshold_passes_a_closed_profile_and_fails_an_open_one_with_exit_3() {
    let pass = sandbox(&["explain", "strict", "--threshold", "2"]);
    assert_eq!(pass.status.code(), Some(0), "{}", stderr(&pass));
    let fail = sandbox(&["explain", "permissive", "--threshold", "2"]);
    assert_eq!(fail.status.code(), Some(3), "{}", stderr(&fail));
    let why = stderr(&fail);
    assert!(why.contains("above the threshold 2.0"), "{why}");
    assert!(why.contains("network.mode host"), "{why}");
    // The table is still printed, for the log of the pipeline.
    assert!(stdout(&fail).contains("network.mode"));
    let json = sandbox(&["explain", "permissive", "--json", "--threshold", "2"]);
    assert_eq!(json.status.code(), Some(3));
    serde_json::from_slice::<serde_json::Value>(&json.stdout).expect("JSON still printed");
    for bad in ["11", "-1", "high"] {
        let out = sandbox(&["explain", "strict", "--threshold", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains("from 0 to 10"), "{}", stderr(&out));
    }
}

#[test]
fn bad_input_is_named_with_a_fix_and_never_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        path.display().to_string()
    };
    let garbage = write("garbage.json", b"\x00\xffnot json at all");
    let newer = write("newer.json", br#"{"version": 99, "profile": "strict"}"#);
    let foreign = write("foreign.json", br#"{"version": 1, "hello": "world"}"#);
    let refused = write(
        "refused.json",
        br#"{"version": 1, "profile": "strict", "exit": null, "error": "Landlock is required", "enforced": null, "measured": null}"#,
    );
    let deep = write("deep.json", "[".repeat(1 << 20).as_bytes());
    let missing = dir.path().join("missing.json").display().to_string();
    for (args, says) in [
        (vec!["explain", "nonesuch"], "unknown profile `nonesuch`"),
        (vec!["explain"], "name a profile"),
        (vec!["explain", "--report", &garbage], "is not JSON"),
        (
            vec!["explain", "--report", &newer],
            "newer than this sandbox reads",
        ),
        (
            vec!["explain", "--report", &foreign],
            "is not a run's report",
        ),
        (
            vec!["explain", "--report", &refused],
            "rate its profile instead",
        ),
        (vec!["explain", "--report", &deep], "is not JSON"),
        (vec!["explain", "--report", &missing], "opening the report"),
        (
            vec!["explain", "--report", "/dev/zero"],
            "opening the report",
        ),
        (
            vec!["explain", "--report", "/proc/self/mem"],
            "sandbox run --report FILE",
        ),
    ] {
        let out = sandbox(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_skill_is_rated_as_its_runs_get_it_narrowed_by_its_manifest() {
    let project = support::skill_project("sandbox-explain-skill-");
    support::write_skill(project.path(), "quiet", "", ("main.sh", "echo hi\n"));
    let root = project.path().to_str().unwrap();
    let skill = rating(
        project.path(),
        &[
            "skill",
            "explain",
            "quiet",
            "--profile",
            "permissive",
            "--project",
            root,
            "--json",
        ],
    );
    let permissive = rating(project.path(), &["explain", "permissive", "--json"]);
    assert_eq!(skill["subject"]["kind"], "skill");
    assert_eq!(skill["subject"]["name"], "quiet");
    // Declaring no net.http takes the host network away; declaring no
    // file action, the project.
    assert_eq!(finding(&skill, "network", "mode")["value"], "none");
    assert_eq!(finding(&skill, "filesystem", "project")["value"], "empty");
    assert!(score(&skill) < score(&permissive), "{skill} {permissive}");
    let unknown = sandbox_in(
        project.path(),
        &["skill", "explain", "nonesuch", "--project", root],
    );
    assert_ne!(unknown.status.code(), Some(0));
    assert!(stderr(&unknown).contains("no skill named nonesuch"));
}

/// `sandbox run --profile PROFILE --report FILE -- /bin/true` in a fresh
/// project, wrapped in `wrap` (a command line) when given; the report's
/// path, or None (with the reason) when the run did not succeed.
fn report_of_run(
    project: &Project,
    profile: &str,
    wrap: &[&str],
) -> Result<std::path::PathBuf, String> {
    let report = project.path().join("report.json");
    let mut argv: Vec<&str> = wrap.to_vec();
    argv.push(support::sandbox_bin());
    let report_arg = report.to_str().expect("UTF-8 path");
    argv.extend([
        "run",
        "--profile",
        profile,
        "--report",
        report_arg,
        "--",
        "/bin/true",
    ]);
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .expect("start the run");
    if out.status.success() && report.exists() {
        Ok(report)
    } else {
        Err(format!("exit {:?}: {}", out.status, stderr(&out).trim()))
    }
}

#[test]
fn a_full_runs_report_scores_as_its_profile() {
    let test = "a_full_runs_report_scores_as_its_profile";
    if !support::require_root_sandbox(test) {
        return;
    }
    let project = Project::new(Who::Root);
    let report = report_of_run(&project, "strict", &[]).expect("a strict run");
    let report = report.to_str().unwrap();
    let rated = rating(project.path(), &["explain", "--report", report, "--json"]);
    let profile = rating(project.path(), &["explain", "strict", "--json"]);
    assert_eq!(rated["subject"]["kind"], "report");
    assert_eq!(rated["subject"]["profile"], "strict");
    assert_eq!(score(&rated), score(&profile), "{rated}");
    assert_eq!(finding(&rated, "namespaces", "user")["value"], "new");
    assert_eq!(
        finding(&rated, "privileges", "no_new_privs")["value"],
        "set"
    );
    let text = sandbox_in(project.path(), &["explain", "--report", report]);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    assert!(stdout(&text).contains("what the run enforced"));
}

#[test]
fn a_run_that_fell_back_scores_worse_than_its_profile() {
    let test = "a_run_that_fell_back_scores_worse_than_its_profile";
    if !support::require_root_sandbox(test)
        || !support::require(test, "python3", support::commands_exist(&["python3"]))
    {
        return;
    }
    let project = Project::new(Who::Root);
    let standard = score(&rating(project.path(), &["explain", "standard", "--json"]));
    // Container engines' default seccomp profile refuses new namespaces:
    // standard (userns best-effort) runs without them. A kernel without
    // Landlock: standard (landlock best-effort) runs without it.
    for (mode, layer, setting) in [
        ("docker", "namespaces", "mount"),
        ("nolandlock", "landlock", "rules"),
    ] {
        let wrap = ["python3", support::seccomp_wrapper(), mode, "--"];
        let report = match report_of_run(&project, "standard", &wrap) {
            Ok(report) => report,
            Err(why) => {
                support::require(
                    test,
                    &format!("a run of standard under {mode} ({why})"),
                    false,
                );
                continue;
            }
        };
        let rated = rating(
            project.path(),
            &["explain", "--report", report.to_str().unwrap(), "--json"],
        );
        assert_eq!(
            finding(&rated, layer, setting)["exposure"],
            1.0,
            "{mode}: {rated}"
        );
        assert!(
            score(&rated) > standard + 0.2,
            "{mode}: the fallen-back run {} should score worse than standard {standard}",
            score(&rated)
        );
        let gate = format!("{:.1}", standard + 0.1);
        let gated = sandbox_in(
            project.path(),
            &[
                "explain",
                "--report",
                report.to_str().unwrap(),
                "--threshold",
                &gate,
            ],
        );
        assert_eq!(gated.status.code(), Some(3), "{mode}: {}", stderr(&gated));
    }
}
