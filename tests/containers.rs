//! `sandbox` inside real Podman containers (rootful, runc), as CI jobs meet
//! it: the engine's default seccomp profile, masked /proc paths, no
//! CAP_SYS_ADMIN, a read-only cgroupfs. No image is pulled: the container's
//! root is a directory holding the host's /usr read-only. For each setup,
//! `doctor`'s verdict for every built-in profile must be exactly what `run`
//! then does, and what runs is checked from inside. Needs root, podman and
//! runc (`apt-get install podman runc`; `.ci/run` installs them).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Container {
    dir: tempfile::TempDir,
}

impl Container {
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn new() -> Container {
        let dir = tempfile::Builder::new()
            .prefix("sandbox-containers-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let root = dir.path().join("root");
        for sub in [
            "usr",
            "etc",
            "tmp",
            "proc",
            "dev",
            "sys",
            "project",
            "opt/sandbox",
            "run",
        ] {
            std::fs::create_dir_all(root.join(sub)).expect("mkdir");
        }
        for link in ["bin", "lib", "lib64", "sbin"] {
            std::os::unix::fs::symlink(format!("usr/{link}"), root.join(link)).expect("symlink");
        }
        for file in ["passwd", "group", "hosts", "nsswitch.conf"] {
            let _ = std::fs::copy(Path::new("/etc").join(file), root.join("etc").join(file));
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        Container { dir }
    }

    /// `podman run` of `argv` in this root with `options`.
    fn run(&self, options: &[&str], argv: &[&str]) -> Output {
        Command::new("podman")
            .args([
                "--runtime",
                "runc",
                "--cgroup-manager",
                "cgroupfs",
                "run",
                "--rm",
            ])
            .args(["--network", "none"])
            // Root may lack CAP_SYS_RESOURCE: podman must not raise rlimits.
            .args([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=4096:4096",
            ])
            .args(["-v", "/usr:/usr:ro"])
            .arg("-v")
            .arg(format!(
                "{}:/opt/sandbox/sandbox:ro",
                support::sandbox_bin()
            ))
            .args(["--workdir", "/project"])
            .args(options)
            .arg("--rootfs")
            .arg(self.root())
            .args(argv)
            .stdin(Stdio::null())
            .output()
            .expect("podman runs")
    }
}

fn podman_usable(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    support::require(
        test,
        "root with podman and runc",
        root && support::commands_exist(&["podman", "runc"]),
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Each setup, and what each profile must do there (`true`: runs).
const SETUPS: [(&str, &[&str], [bool; 3]); 4] = [
    // Masked /proc: no new pid namespace can mount its own.
    ("default", &[], [false, true, true]),
    (
        "seccomp=unconfined",
        &["--security-opt", "seccomp=unconfined"],
        [false, true, true],
    ),
    (
        "unmask=ALL",
        &["--security-opt", "unmask=ALL"],
        [true, true, true],
    ),
    (
        "root with a mapped range",
        &["--uidmap", "0:200000:65536", "--gidmap", "0:200000:65536"],
        [false, true, true],
    ),
];

const PROFILES: [&str; 3] = ["strict", "standard", "permissive"];

#[test]
fn doctor_predicts_every_profile_in_every_podman_setup_and_what_runs_is_confined() {
    let test = "doctor_predicts_every_profile_in_every_podman_setup_and_what_runs_is_confined";
    if !podman_usable(test) {
        return;
    }
    let container = Container::new();
    for (setup, options, expected) in SETUPS {
        let doctor = container.run(options, &["/opt/sandbox/sandbox", "doctor", "--json"]);
        let doctor_json: serde_json::Value =
            serde_json::from_slice(&doctor.stdout).unwrap_or_else(|e| {
                panic!(
                    "{setup}: doctor --json: {e}\n{}\n{}",
                    text(&doctor.stdout),
                    text(&doctor.stderr)
                )
            });
        assert_eq!(
            doctor.status.code(),
            Some(if expected[0] { 0 } else { 1 }),
            "{setup}: doctor exits 1 exactly when strict cannot run"
        );
        for (profile, runs) in PROFILES.into_iter().zip(expected) {
            let verdict = doctor_json["profiles"]
                .as_array()
                .and_then(|all| all.iter().find(|p| p["profile"] == profile))
                .unwrap_or_else(|| panic!("{setup}: no {profile} in doctor --json"));
            let script = "grep -E '^(NoNewPrivs|CapEff):' /proc/self/status; \
                 (echo x > /usr/planted) 2>/dev/null && echo WROTE-USR; \
                 (cat /etc/passwd > /dev/null) 2>/dev/null; echo ran > ran.txt; echo done";
            let out = container.run(
                options,
                &[
                    "/opt/sandbox/sandbox",
                    "run",
                    "--profile",
                    profile,
                    "--json",
                    "--",
                    "/bin/sh",
                    "-c",
                    script,
                ],
            );
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            let cell = format!("{setup} / {profile}");
            assert_eq!(
                verdict["can_run"], runs,
                "{cell}: doctor's verdict {verdict}\nrun: {stderr}"
            );
            if runs {
                assert_eq!(out.status.code(), Some(0), "{cell}: {stderr}");
                assert!(stdout.contains("NoNewPrivs:\t1"), "{cell}: {stdout}");
                assert!(
                    stdout.contains("CapEff:\t0000000000000000"),
                    "{cell}: {stdout}"
                );
                assert!(!stdout.contains("WROTE-USR"), "{cell}: {stdout}");
                assert!(stdout.contains("done"), "{cell}: {stdout}");
                // What doctor showed is what the run got.
                let report = support::json_report(&stderr, &cell);
                for field in ["isolation", "landlock", "namespaces", "no_new_privs"] {
                    let comparable = |v: &serde_json::Value| {
                        let mut v = v.clone();
                        // The private temporary directory's name differs per run.
                        if let Some(list) = v.get_mut("not_promised") {
                            *list = serde_json::Value::Null;
                        }
                        v
                    };
                    assert_eq!(
                        comparable(&verdict["enforced"][field]),
                        comparable(&report["enforced"][field]),
                        "{cell}: doctor and run disagree on {field}"
                    );
                }
            } else {
                assert_eq!(out.status.code(), Some(125), "{cell}: {stderr}");
                assert!(
                    stderr.contains("cause:") && stderr.contains("fix:"),
                    "{cell}: the refusal names no cause and fix: {stderr}"
                );
                assert!(!stdout.contains("done"), "{cell}");
                // doctor printed the message run printed.
                let refusal = verdict["refusal"].as_str().unwrap_or_default();
                let first = stderr
                    .lines()
                    .find(|l| !l.contains("warning:"))
                    .unwrap_or_default();
                assert!(
                    !refusal.is_empty() && first.contains(refusal.trim_start_matches("sandbox: ")),
                    "{cell}: doctor said {refusal:?}, run said {first:?}"
                );
            }
        }
    }
}
