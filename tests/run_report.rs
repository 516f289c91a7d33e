//! The report states only what happened: its `enforced` and `measured`
//! sections come from the payload's own view read just before exec, a
//! refused run claims nothing, the report has its own channel (never the
//! command's stdout), usage errors exit 2, and `--quiet`/`-v` change only
//! what stderr says.

mod support;

use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::{assert_ok, identities, sandbox_bin, sandbox_works, Project, Who};

fn read_report(project: &Project) -> Value {
    let text = std::fs::read_to_string(project.path().join("report.json")).expect("report");
    serde_json::from_str(&text).expect("report is JSON")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The value of `Field:` in a /proc/PID/status text.
fn status_field<'a>(status: &'a str, field: &str) -> &'a str {
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// The identity whose supervisor runs these tests' plain `Command`s.
fn current_identity(test: &str) -> Option<Who> {
    let who = if nix::unistd::geteuid().is_root() {
        Who::Root
    } else {
        Who::User
    };
    support::require(test, "a sandbox for the current user", sandbox_works(who)).then_some(who)
}

#[test]
fn the_strict_report_is_measured_from_inside_and_matches_what_the_command_sees() {
    for who in identities("the_strict_report_is_measured_from_inside") {
        let project = Project::new(who);
        let out = project.run_with(&["--report", "report.json"], &["cat", "/proc/self/status"]);
        assert_ok(&out, "strict run");
        let inside = String::from_utf8_lossy(&out.stdout).into_owned();
        let report = read_report(&project);
        let measured = &report["measured"];
        assert_eq!(measured["no_new_privs"], true, "{who:?}: {measured}");
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(measured["capabilities"][set], "0000000000000000", "{set}");
            // What the command itself saw (after one more exec) agrees.
            assert_eq!(status_field(&inside, set), "0000000000000000", "{set}");
        }
        assert_eq!(measured["seccomp_mode"], 2);
        let filters = measured["seccomp_filters"].as_u64().unwrap();
        let inherited = measured["seccomp_filters_inherited"].as_u64().unwrap();
        assert!(filters > inherited, "{measured}");
        assert_eq!(status_field(&inside, "Seccomp"), "2");
        assert_eq!(
            status_field(&inside, "Seccomp_filters"),
            filters.to_string()
        );
        assert_eq!(status_field(&inside, "NoNewPrivs"), "1");
        let enforced = &report["enforced"];
        for ns in ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"] {
            assert_eq!(measured["namespaces"][ns], "new", "{ns}");
            assert_eq!(enforced["namespaces"][ns], true, "{ns}");
        }
        assert_eq!(enforced["no_new_privs"], true);
        assert_eq!(enforced["capabilities"], serde_json::json!([]));
        assert_eq!(enforced["seccomp"]["status"], "installed");
        assert_eq!(
            enforced["user"]["inside_uid"].as_u64(),
            Some(u64::from(
                status_field(&inside, "Uid")
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u32>()
                    .unwrap()
            ))
        );
        // Nothing measured contradicts the plan, and nothing went unmeasured.
        assert!(
            !report["warnings"].to_string().contains("measure"),
            "{report}"
        );
    }
}

#[test]
fn with_seccomp_off_the_measured_filter_is_the_set_id_guard() {
    for who in identities("with_seccomp_off_the_measured_filter_is_the_set_id_guard") {
        let project = Project::new(who);
        let out = project.run_with_profile(
            "version = 1\nextends = \"strict\"\n[enforce]\nseccomp = \"off\"\n",
            &["--report", "report.json"],
            &["/bin/true"],
        );
        assert_ok(&out, "seccomp off");
        let report = read_report(&project);
        let seccomp = &report["enforced"]["seccomp"];
        assert_eq!(seccomp["status"], "set-id-guard", "{seccomp}");
        assert_eq!(seccomp["mode"], Value::Null);
        // Mode 2 all the same: the guard against set-id files is a filter.
        let measured = &report["measured"];
        assert_eq!(measured["seccomp_mode"], 2, "{measured}");
        assert!(
            measured["seccomp_filters"].as_u64().unwrap()
                > measured["seccomp_filters_inherited"].as_u64().unwrap()
        );
        assert_eq!(measured["no_new_privs"], true);
    }
}

#[test]
fn a_namespace_the_run_shares_is_measured_as_shared() {
    for who in identities("a_namespace_the_run_shares_is_measured_as_shared") {
        let project = Project::new(who);
        let out = project.run_with(
            &["--net", "host", "--report", "report.json"],
            &["/bin/true"],
        );
        assert_ok(&out, "--net host");
        let report = read_report(&project);
        assert_eq!(report["measured"]["namespaces"]["net"], "shared");
        assert_eq!(report["enforced"]["namespaces"]["net"], false);
        assert_eq!(report["measured"]["namespaces"]["pid"], "new");
        assert_eq!(report["enforced"]["namespaces"]["pid"], true);
    }
}

/// Before, a refused run's report said every namespace, no_new_privs and
/// an empty capability set were enforced: three fields were constants.
#[test]
fn a_refused_run_claims_nothing_it_did_not_do() {
    for who in identities("a_refused_run_claims_nothing_it_did_not_do") {
        let project = Project::new(who);
        // A required layer that cannot be applied: no cgroup below a
        // parent that does not exist.
        let out = project.run_with_profile(
            "version = 1\nextends = \"strict\"\n[enforce]\ncgroups = \"required\"\n",
            &[
                "--cgroup-parent",
                "/sys/fs/cgroup/no-such-parent",
                "--report",
                "report.json",
            ],
            &["/bin/sh", "-c", "touch ran"],
        );
        assert_eq!(out.status.code(), Some(125), "{who:?}: {}", stderr(&out));
        assert!(!project.path().join("ran").exists());
        let report = read_report(&project);
        assert_eq!(report["exit"], Value::Null);
        assert!(
            report["error"].as_str().unwrap().contains("cgroups"),
            "{report}"
        );
        assert_eq!(report["measured"], Value::Null);
        let enforced = &report["enforced"];
        for field in [
            "isolation",
            "namespaces",
            "no_new_privs",
            "capabilities",
            "user",
            "network",
            "tmp_size",
            "cgroup",
            "timeout_s",
            "project_view",
        ] {
            assert_eq!(enforced[field], Value::Null, "{field}: {enforced}");
        }
        assert_eq!(enforced["rlimits"], serde_json::json!({}));
        assert_eq!(enforced["landlock"]["status"], "not-applied");
        assert_eq!(enforced["seccomp"]["status"], "not-started");
    }
}

#[test]
fn a_run_refused_before_any_plan_reports_no_enforcement() {
    for who in identities("a_run_refused_before_any_plan_reports_no_enforcement") {
        let project = Project::new(who);
        let out = project.run_with_profile(
            "version = 1\nextends = \"strict\"\n[filesystem]\nread = [\"/no/such/dir\"]\n",
            &["--report", "report.json"],
            &["/bin/true"],
        );
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        let report = read_report(&project);
        assert_eq!(report["enforced"], Value::Null, "{report}");
        assert_eq!(report["measured"], Value::Null);
        assert!(report["error"].as_str().unwrap().contains("/no/such/dir"));
    }
}

#[test]
fn a_command_that_cannot_be_executed_still_reports_the_view_it_was_refused_in() {
    for who in identities("a_command_that_cannot_be_executed_still_reports_the_view") {
        let project = Project::new(who);
        let out = project.run_with(&["--report", "report.json"], &["/no/such/program"]);
        assert_eq!(out.status.code(), Some(127));
        let report = read_report(&project);
        assert_eq!(report["exit"], Value::Null);
        // The payload set itself up and measured before execve failed.
        assert_eq!(report["measured"]["no_new_privs"], true, "{report}");
        assert_eq!(report["enforced"]["namespaces"]["pid"], true);
    }
}

#[test]
fn json_goes_to_stderr_and_stdout_stays_the_commands() {
    for who in identities("json_goes_to_stderr_and_stdout_stays_the_commands") {
        let project = Project::new(who);
        let out = project.run_with(&["--json"], &["/bin/sh", "-c", "echo out; echo err >&2"]);
        assert_ok(&out, "--json");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
        let err = stderr(&out);
        let last = err.lines().last().expect("a report line");
        let report: Value = serde_json::from_str(last).expect("the last stderr line is the report");
        assert_eq!(report["exit"]["code"], 0);
        assert_eq!(report["measured"]["seccomp_mode"], 2);
        assert!(err.starts_with("err\n"), "{err}");
    }
}

/// `sandbox run --report-fd 3 ... 3>FILE` through a shell.
fn run_with_report_fd(who: Who, project: &Project, target: &str, argv: &str) -> Output {
    let script = format!("exec \"$0\" run --report-fd 3 -- {argv} 3>\"$1\"");
    let bin = match who {
        Who::User if nix::unistd::geteuid().is_root() => support::binary_for_test_user(),
        _ => sandbox_bin().into(),
    };
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .arg(bin)
        .arg(target)
        .current_dir(project.path())
        .stdin(Stdio::null());
    if who == Who::User && nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt;
        cmd.uid(support::TEST_UID).gid(support::TEST_GID);
    }
    cmd.output().expect("sh starts")
}

#[test]
fn report_fd_gets_one_line_that_the_command_can_neither_see_nor_write() {
    for who in identities("report_fd_gets_one_line_that_the_command_can_neither_see_nor_write") {
        let project = Project::new(who);
        let outside = tempfile::Builder::new()
            .prefix("report-fd-target-")
            .tempdir_in("/tmp")
            .unwrap();
        let target = outside.path().join("report.json");
        std::fs::write(&target, "").unwrap();
        if who == Who::User && nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(outside.path(), Some(support::TEST_UID), None).unwrap();
            std::os::unix::fs::chown(&target, Some(support::TEST_UID), None).unwrap();
        }
        // The command looks for the descriptor among its own and tries to
        // forge a report through every one it has.
        let out = run_with_report_fd(
            who,
            &project,
            target.to_str().unwrap(),
            "/bin/sh -c 'for f in /proc/self/fd/*; do readlink $f; done; \
             for n in 3 4 5 6 7 8 9; do (echo FORGED$((6*7)) >&$n) 2>/dev/null; done; echo done'",
        );
        assert_ok(&out, "--report-fd");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.ends_with("done\n"), "{stdout}");
        assert!(
            !stdout.contains("report-fd-target"),
            "the command holds the report fd: {stdout}"
        );
        let written = std::fs::read_to_string(&target).unwrap();
        assert_eq!(written.lines().count(), 1, "{written}");
        // The command line is in the report; what it wrote would be FORGED42.
        assert!(!written.contains("FORGED42"), "{written}");
        let report: Value = serde_json::from_str(&written).unwrap();
        assert_eq!(report["exit"]["code"], 0);
        assert_eq!(report["measured"]["no_new_privs"], true);
    }
}

#[test]
fn report_fd_is_checked_before_anything_runs() {
    let Some(who) = current_identity("report_fd_is_checked_before_anything_runs") else {
        return;
    };
    let project = Project::new(who);
    for fd in ["0", "9"] {
        let out = project.run_with(&["--report-fd", fd], &["/bin/sh", "-c", "touch ran"]);
        assert_eq!(out.status.code(), Some(2), "{fd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("--report-fd {fd}:")),
            "{}",
            stderr(&out)
        );
    }
    // Open, but for reading only.
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg("exec \"$0\" run --report-fd 3 -- /bin/true 3</dev/null")
        .arg(sandbox_bin())
        .current_dir(project.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("read-only"), "{}", stderr(&out));
    assert!(!project.path().join("ran").exists());
}

/// Usage errors exit 2 naming the flag, as clap's own do; 125 is left to
/// "the sandbox failed".
#[test]
fn usage_errors_exit_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--pids", "0"], "--pids"),
        (&["--memory", "0"], "--memory"),
        (&["--timeout", "0"], "--timeout"),
        (&["--net", "lan"], "--net"),
        (
            &["--profile", "no-such-profile"],
            "--profile no-such-profile",
        ),
        (&["--grant", "fs.writ"], "--grant"),
        (&["--secret", "NAME"], "--secret NAME"),
        (
            &["--secret", "NAME=env:SANDBOX_TEST_UNSET_VARIABLE"],
            "--secret NAME",
        ),
        (
            &["--allow-read", "/no/such/path"],
            "--allow-read /no/such/path",
        ),
        (
            &["--project", "/no/such/project"],
            "--project /no/such/project",
        ),
        (&["--report-fd", "-1"], "--report-fd"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (flags, named) in cases {
        let out = Command::new(sandbox_bin())
            .arg("run")
            .args(*flags)
            .args(["--", "/bin/sh", "-c", "touch ran"])
            .current_dir(dir.path())
            .env_remove("SANDBOX_TEST_UNSET_VARIABLE")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(named), "{flags:?}: wanted {named:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!dir.path().join("ran").exists());
}

const CGROUPS_OFF_WITH_A_LIMIT: &str =
    "version = 1\nextends = \"strict\"\n[enforce]\ncgroups = \"off\"\n[limits]\nmemory = \"256MiB\"\n";

#[test]
fn quiet_keeps_warnings_off_stderr_but_in_the_report() {
    for who in identities("quiet_keeps_warnings_off_stderr_but_in_the_report") {
        let project = Project::new(who);
        let loud = project.run_with_profile(CGROUPS_OFF_WITH_A_LIMIT, &[], &["/bin/true"]);
        assert_ok(&loud, "loud");
        assert!(
            stderr(&loud).contains("sandbox: warning: cgroups are off in this profile"),
            "{}",
            stderr(&loud)
        );
        let quiet = project.run_with_profile(
            CGROUPS_OFF_WITH_A_LIMIT,
            &["--quiet", "--report", "report.json"],
            &["/bin/sh", "-c", "echo from-the-command >&2"],
        );
        assert_ok(&quiet, "quiet");
        // The command's own stderr is untouched; the supervisor says nothing.
        assert_eq!(stderr(&quiet), "from-the-command\n");
        let report = read_report(&project);
        assert!(
            report["warnings"].as_array().unwrap().iter().any(|w| w
                .as_str()
                .unwrap()
                .starts_with("cgroups are off in this profile")),
            "{report}"
        );
    }
}

#[test]
fn verbose_prints_each_setup_step_and_the_measured_view() {
    for who in identities("verbose_prints_each_setup_step_and_the_measured_view") {
        let project = Project::new(who);
        let out = project.run_with(&["-v"], &["/bin/echo", "hello"]);
        assert_ok(&out, "-v");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
        let err = stderr(&out);
        let order = [
            "sandbox: setup: cloned init",
            "sandbox: setup: id maps written",
            "sandbox: setup: Landlock ABI",
            "sandbox: setup: the payload's own view before exec: NoNewPrivs 1, CapEff 0000000000000000, Seccomp mode 2",
            "sandbox: setup: executed /bin/echo",
        ];
        let mut at = 0;
        for step in order {
            let found = err[at..]
                .find(step)
                .unwrap_or_else(|| panic!("{who:?}: no {step:?} after byte {at} in {err}"));
            at += found + step.len();
        }
        assert!(err.contains("pid=new"), "{err}");
        // Without -v, none of it.
        let out = project.run(&["/bin/true"]);
        assert!(
            !stderr(&out).contains("sandbox: setup:"),
            "{}",
            stderr(&out)
        );
    }
}
