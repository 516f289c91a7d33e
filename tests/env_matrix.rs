//! The environments CI jobs run in, imitated on this machine with a seccomp
//! wrapper (`tests/support/seccomp_wrap.py`): Docker's and containerd's
//! default profile (no new namespaces, no mount calls, clone3 ENOSYS) and a
//! kernel without Landlock. Each case either runs with the layers its report
//! states, checked from inside the command, or refuses with the documented
//! message (exit 125, naming the cause and the fix). The other cells of the
//! matrix have their own files: no user namespaces by sysctl
//! (`env_no_namespaces`, `env_refusals`), root inside a user namespace
//! (`env_rootns`), nested (`nested`), a read-only cgroupfs (`cgroup_env`),
//! and real Podman containers (`containers`).

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::{identities, HostCanary, Project, Who};

fn wrapper() -> &'static str {
    support::seccomp_wrapper()
}

/// What the command prints about itself, for checking the report against,
/// and whether it reads `canary` (readable bare) or writes outside.
fn self_view(canary: &HostCanary) -> String {
    format!(
        "grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters|CapEff):' /proc/self/status; \
         readlink /proc/self/ns/user /proc/1/ns/user 2>&1; \
         {}; \
         (echo x > outside-test 2>/dev/null; echo x > /var/tmp/sandbox-matrix-$$ 2>/dev/null && echo wrote-outside) || echo outside-blocked",
        canary.probe()
    )
}

/// `sandbox ARGS` run by the project's identity under one seccomp wrapper
/// per mode (stacked, the first outermost).
fn wrapped(project: &Project, modes: &[&str], args: &[&str]) -> Output {
    let mut cmd = Command::new("python3");
    for (i, mode) in modes.iter().enumerate() {
        if i > 0 {
            cmd.arg("python3");
        }
        cmd.args([wrapper(), mode, "--"]);
    }
    cmd.arg(project.command().get_program());
    if project.who == Who::User && nix::unistd::geteuid().is_root() {
        let (uid, gid) = support::user_ids();
        std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, gid);
    }
    cmd.current_dir(project.path())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `sandbox run --profile PROFILE` under the wrappers, for a command that
/// would leave `ran` in the project: asserts the run was refused (exit 125,
/// nothing executed) and returns its stderr.
fn refused(project: &Project, modes: &[&str], profile: &str) -> String {
    let out = wrapped(
        project,
        modes,
        &[
            "run",
            "--profile",
            profile,
            "--",
            "/bin/sh",
            "-c",
            "echo ran > ran",
        ],
    );
    let err = text(&out.stderr);
    let who = project.who;
    assert_eq!(out.status.code(), Some(125), "{who:?} {profile}: {err}");
    assert!(!project.path().join("ran").exists(), "{who:?} {profile}");
    err
}

/// `sandbox run --profile PROFILE --json` of [`self_view`] under the
/// wrappers: asserts it ran, kept a host canary its identity reads bare
/// out of sight and wrote nothing outside; returns (stdout, stderr, the
/// report).
fn confined_run(project: &Project, modes: &[&str], profile: &str) -> (String, String, Value) {
    let canary = HostCanary::new();
    canary.assert_readable_bare(project.who);
    let view = self_view(&canary);
    let out = wrapped(
        project,
        modes,
        &[
            "run",
            "--profile",
            profile,
            "--json",
            "--",
            "/bin/sh",
            "-c",
            &view,
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let who = project.who;
    assert_eq!(out.status.code(), Some(0), "{who:?}:\n{stdout}\n{stderr}");
    canary.assert_blocked_in(&stdout, &format!("{who:?} {profile} under {modes:?}"));
    assert!(stdout.contains("outside-blocked"), "{who:?}: {stdout}");
    assert!(!stdout.contains("wrote-outside"), "{who:?}: {stdout}");
    let report = support::json_report(&stderr, profile);
    (stdout, stderr, report)
}

fn usable(test: &str) -> bool {
    support::require(test, "python3", Path::new("/usr/bin/python3").exists())
}

/// A fresh project for each identity `test` can use, none when the
/// wrappers cannot run here (skipped loudly).
fn projects(test: &str) -> Vec<Project> {
    if !usable(test) {
        return Vec::new();
    }
    identities(test).into_iter().map(Project::new).collect()
}

#[test]
fn under_dockers_default_profile_strict_refuses_with_the_fix_and_standard_runs_without_namespaces()
{
    let test = "under_dockers_default_profile_strict_refuses_with_the_fix_and_standard_runs_without_namespaces";
    for project in projects(test) {
        let who = project.who;
        let err = refused(&project, &["docker"], "strict");
        assert!(
            err.contains("cause:") && err.contains("fix:") && err.contains("best-effort"),
            "{who:?}: the refusal names no cause and fix: {err}"
        );

        let (out, err, report) = confined_run(&project, &["docker"], "standard");
        assert!(err.contains("running without namespaces"), "{who:?}: {err}");
        let enforced = &report["enforced"];
        assert_eq!(enforced["isolation"]["namespaces"], "none", "{who:?}");
        assert_eq!(enforced["isolation"]["view"], "landlock-only", "{who:?}");
        assert_eq!(enforced["landlock"]["status"], "fully-enforced", "{who:?}");
        // The only filesystem boundary left, so no longer best-effort.
        assert_eq!(enforced["landlock"]["requested"], "required", "{who:?}");
        // What the report measured is what the command sees of itself.
        let measured = &report["measured"];
        assert_eq!(measured["no_new_privs"], true, "{who:?}");
        assert_eq!(measured["namespaces"]["user"], "shared", "{who:?}");
        assert!(out.contains("NoNewPrivs:\t1"), "{who:?}: {out}");
        assert!(out.contains("CapEff:\t0000000000000000"), "{who:?}: {out}");
        let filters: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("Seccomp_filters:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        assert_eq!(
            Some(filters),
            measured["seccomp_filters"].as_u64(),
            "{who:?}: {out}"
        );
        assert!(filters >= 2, "the wrapper's filter and the run's: {out}");
    }
}

/// Docker's default profile with `--cap-add SYS_ADMIN`: the namespaces and
/// mounts work, pivot_root does not. The refusal blames pivot_root (not user
/// namespaces) and standard falls back at it.
#[test]
fn where_only_pivot_root_is_refused_strict_names_it_and_standard_runs_without_namespaces() {
    let test =
        "where_only_pivot_root_is_refused_strict_names_it_and_standard_runs_without_namespaces";
    for project in projects(test) {
        let who = project.who;
        let err = refused(&project, &["sysadmin"], "strict");
        assert!(
            err.contains("pivoting into the staging tmpfs"),
            "{who:?}: {err}"
        );
        let cause = err.split("cause:").nth(1).unwrap_or_default();
        assert!(cause.contains("pivot_root"), "{who:?}: {err}");
        assert!(!cause.contains("user namespaces"), "{who:?}: {err}");
        assert!(err.contains("--profile standard"), "{who:?}: {err}");

        let (_, err, report) = confined_run(&project, &["sysadmin"], "standard");
        assert!(err.contains("running without namespaces"), "{who:?}: {err}");
        let isolation = &report["enforced"]["isolation"];
        assert_eq!(isolation["namespaces"], "none", "{who:?}");
        assert!(
            isolation["reason"]
                .as_str()
                .is_some_and(|r| r.contains("pivoting into the staging tmpfs in it was refused")),
            "{who:?}: {report}"
        );
        assert_eq!(
            report["enforced"]["landlock"]["status"], "fully-enforced",
            "{who:?}"
        );
    }
}

#[test]
fn without_landlock_strict_refuses_naming_it_and_standard_states_what_is_missing() {
    let test = "without_landlock_strict_refuses_naming_it_and_standard_states_what_is_missing";
    for project in projects(test) {
        let who = project.who;
        let err = refused(&project, &["nolandlock"], "strict");
        assert!(err.contains("Landlock"), "{who:?}: {err}");

        // Namespaces still work: standard builds its view with them and says
        // Landlock is missing (best-effort there).
        let (_, err, report) = confined_run(&project, &["nolandlock"], "standard");
        assert_ne!(
            report["enforced"]["landlock"]["status"], "fully-enforced",
            "{who:?}"
        );
        assert_eq!(report["measured"]["namespaces"]["user"], "new", "{who:?}");
        assert!(
            err.lines()
                .any(|l| l.contains("warning") && l.contains("Landlock")),
            "{who:?}: the missing layer is not said: {err}"
        );
    }
}

#[test]
fn under_dockers_profile_without_landlock_nothing_is_left_to_build_a_view_and_every_profile_refuses(
) {
    let test = "under_dockers_profile_without_landlock_nothing_is_left_to_build_a_view_and_every_profile_refuses";
    for project in projects(test) {
        let who = project.who;
        // Both restrictions at once: the wrapper stacks two filters.
        for profile in ["strict", "standard", "permissive"] {
            let err = refused(&project, &["nolandlock", "docker"], profile);
            assert!(err.contains("Landlock"), "{who:?} {profile}: {err}");
        }
    }
}

/// Skills where no namespace can be made: the client libraries stay at
/// their host path (granted read-only) instead of being mounted at
/// /run/sandbox/lib, and the skill still sees only what it declared: a
/// shell skill declaring `fs.read:*.txt` reads through the broker, and its
/// direct read of the project is refused by Landlock.
#[test]
fn under_dockers_default_profile_skills_run_without_namespaces_and_stay_narrowed() {
    let test = "under_dockers_default_profile_skills_run_without_namespaces_and_stay_narrowed";
    for project in projects(test) {
        let who = project.who;
        project.write("notes.txt", "one two three\n");
        project.write(
            ".skills/peek/SKILL.md",
            "---\nname: peek\ndescription: Reads notes.txt directly and through the broker\n\
             runtime: sh\nmain: peek.sh\npermissions: [\"fs.read:*.txt\"]\n---\n",
        );
        project.write(
            ".skills/peek/peek.sh",
            "#!/bin/sh\nwhile sandbox ipc --invocation >/dev/null; do\n\
             if cat notes.txt >/dev/null 2>&1; then direct=read; else direct=refused; fi\n\
             words=$(sandbox ipc fs.read '{\"path\": \"notes.txt\"}' --raw | wc -w)\n\
             sandbox ipc --result \"{\\\"direct\\\": \\\"$direct\\\", \\\"words\\\": $words}\"\n\
             done\n",
        );
        // Declared with a pattern, the skill gets no view of the project at
        // all (`project = "none"`): everything goes through the broker.
        for (skill, params, want) in [
            ("peek", "{}", "\"direct\":\"refused\""),
            ("peek", "{}", "\"words\":3"),
        ] {
            let out = wrapped(
                &project,
                &["docker"],
                &[
                    "skill",
                    "run",
                    "--profile",
                    "standard",
                    "--json",
                    skill,
                    "--params",
                    params,
                ],
            );
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert_eq!(
                out.status.code(),
                Some(0),
                "{who:?} {skill}:\n{stdout}\n{stderr}"
            );
            assert!(
                stdout.replace(' ', "").contains(want),
                "{who:?} {skill}: want {want} in {stdout}\n{stderr}"
            );
            assert!(
                stderr.contains("running without namespaces"),
                "{who:?}: {stderr}"
            );
        }
    }
}
