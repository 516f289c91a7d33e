//! `sandbox` inside `sandbox`, every pair of the built-in profiles. The
//! outer run's seccomp filter refuses new user namespaces, so an inner
//! strict refuses (it requires them) and an inner standard or permissive
//! runs without namespaces, stacking its Landlock domain and seccomp filter
//! on the outer's. Each pair's restrictions are checked from inside.

mod support;

use support::Project;

const PROFILES: [&str; 3] = ["strict", "standard", "permissive"];

const PROBE: &str = r#"
attempt("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt("write-tmp", lambda: open("/tmp/written-by-inner", "w").write("x"))
attempt("write-project", lambda: open("inner.txt", "w").write("x"))
status = open("/proc/self/status").read()
for key in ("NoNewPrivs", "Seccomp_filters", "CapEff"):
    print(key, [l.split()[1] for l in status.splitlines() if l.startswith(key + ":")][0])
"#;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_pair_of_profiles_nests_or_refuses_with_a_message() {
    let test = "every_pair_of_profiles_nests_or_refuses_with_a_message";
    let Some(who) = support::identities(test).into_iter().next() else {
        return;
    };
    // An inner run needs Landlock ABI 6 without namespaces.
    let probe = Project::new(who);
    let plain = probe.run_with(&["--profile", "standard"], &["/bin/true"]);
    if !support::require(test, "a standard run", plain.status.success()) {
        return;
    }
    let probe = format!("{}{PROBE}", support::PY_ATTEMPT);
    for outer in PROFILES {
        for inner in PROFILES {
            let project = Project::new(who);
            let out = project.run_with(
                &["--profile", outer],
                &[
                    "sandbox",
                    "run",
                    "--profile",
                    inner,
                    "--json",
                    // The supervisor's own files open beneath a directory
                    // even where the outer filter refuses openat2.
                    "--report",
                    "inner-report.json",
                    "--",
                    "python3",
                    "-c",
                    &probe,
                ],
            );
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            let pair = format!("{who:?}: {outer} > {inner}");
            if inner == "strict" {
                assert_eq!(out.status.code(), Some(125), "{pair}: {stderr}");
                assert!(
                    stderr.contains("namespaces"),
                    "{pair}: the refusal names no cause: {stderr}"
                );
                assert!(!project.path().join("inner.txt").exists(), "{pair}");
                continue;
            }
            assert_eq!(out.status.code(), Some(0), "{pair}:\n{stdout}\n{stderr}");
            assert!(
                stderr.contains("running without namespaces"),
                "{pair}: {stderr}"
            );
            let want_inet = if inner == "permissive" {
                // The host's network as the outer run left it: a socket
                // can be made (the outer's own namespace has no route).
                "inet ok"
            } else {
                // loopback without a network namespace is enforced as none.
                "inet EAFNOSUPPORT"
            };
            for line in [
                want_inet,
                "write-tmp EACCES",
                "write-project ok",
                "NoNewPrivs 1",
                "CapEff 0000000000000000",
            ] {
                assert!(stdout.contains(line), "{pair}: want {line:?} in\n{stdout}");
            }
            // The inner filter stacks on the outer's.
            let filters: u32 = stdout
                .lines()
                .find_map(|l| l.strip_prefix("Seccomp_filters "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            assert!(filters >= 2, "{pair}: {filters} seccomp filters");
            assert!(project.path().join("inner.txt").exists(), "{pair}");
            let written = std::fs::read_to_string(project.path().join("inner-report.json"))
                .unwrap_or_default();
            assert!(
                written.contains("\"landlock-only\""),
                "{pair}: the inner --report was not written: {stderr}"
            );
            // `--json` is the inner run's last stderr line (never its stdout).
            let report = support::json_report(&stderr, &pair);
            let enforced = &report["enforced"];
            assert_eq!(enforced["isolation"]["namespaces"], "none", "{pair}");
            assert_eq!(enforced["isolation"]["view"], "landlock-only", "{pair}");
            assert_eq!(enforced["landlock"]["status"], "fully-enforced", "{pair}");
            assert_eq!(enforced["seccomp"]["status"], "installed", "{pair}");
        }
    }
}

/// Inside bubblewrap with every namespace: started by root, bwrap covers
/// /proc/irq and /proc/bus read-only, so strict refuses naming that (and
/// the way out) while standard runs without namespaces; started by a
/// regular user, bwrap leaves /proc whole and strict runs with namespaces.
#[test]
fn inside_bubblewrap_every_profile_runs_or_names_what_bubblewrap_covers() {
    let test = "inside_bubblewrap_every_profile_runs_or_names_what_bubblewrap_covers";
    if !support::require(
        test,
        "bwrap",
        std::path::Path::new("/usr/bin/bwrap").exists(),
    ) {
        return;
    }
    for who in support::identities(test) {
        let project = Project::new(who);
        let program = project.command().get_program().to_owned();
        let run_inside = |profile: &str| {
            let mut cmd = std::process::Command::new("bwrap");
            if who == support::Who::User && nix::unistd::geteuid().is_root() {
                use std::os::unix::process::CommandExt;
                let (uid, gid) = support::user_ids();
                cmd.uid(uid).gid(gid);
            }
            // A fresh /tmp, with the binary (a CI checkout may sit below /tmp)
            // and the project bound back in.
            cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
                .args(["--tmpfs", "/tmp", "--ro-bind"])
                .arg(&program)
                .arg(&program)
                .arg("--bind")
                .arg(project.path())
                .arg(project.path())
                .arg("--chdir")
                .arg(project.path())
                .args(["--unshare-all", "--"])
                .arg(&program)
                .args(["run", "-q", "--profile", profile, "--json", "--"])
                .args(["/bin/sh", "-c", "echo ran"])
                .stdin(std::process::Stdio::null())
                .output()
                .expect("bwrap runs")
        };
        let bwrap_as_root = who == support::Who::Root;
        let strict = run_inside("strict");
        let (out, err) = (text(&strict.stdout), text(&strict.stderr));
        if bwrap_as_root {
            assert_eq!(strict.status.code(), Some(125), "{who:?}: {err}");
            assert!(
                err.contains("bubblewrap started by root covers") && err.contains("best-effort"),
                "{who:?}: {err}"
            );
            assert!(!out.contains("ran"), "{who:?}");
        } else {
            assert_eq!(strict.status.code(), Some(0), "{who:?}: {err}");
            assert!(err.contains("\"namespaces\":\"all\""), "{who:?}: {err}");
        }
        let standard = run_inside("standard");
        let err = text(&standard.stderr);
        assert_eq!(standard.status.code(), Some(0), "{who:?}: {err}");
        assert!(text(&standard.stdout).contains("ran"), "{who:?}");
        let expected = if bwrap_as_root { "none" } else { "all" };
        assert!(
            err.contains(&format!("\"namespaces\":\"{expected}\"")),
            "{who:?}: {err}"
        );
    }
}

/// A run inside a run starts its own net process (an allowlist's proxy,
/// `net.http`'s client): the supervisor inside looks for `sandbox-net`
/// beside its binary, so the outer run shows it there too. Without it the
/// inner allowlist run refused, telling the user to reinstall.
#[test]
fn an_allowlist_run_inside_a_run_finds_its_net_process() {
    let test = "an_allowlist_run_inside_a_run_finds_its_net_process";
    let Some(who) = support::identities(test).into_iter().next() else {
        return;
    };
    let project = Project::new(who);
    let out = project.run_with(
        &["--profile", "standard"],
        &[
            "sandbox",
            "run",
            "--profile",
            "standard",
            "--net",
            "allow:example.com",
            "--",
            "/bin/echo",
            "inner-ran",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("inner-ran"), "{stdout}\n{stderr}");
    assert!(!stderr.contains("sandbox-net"), "{stderr}");
}
