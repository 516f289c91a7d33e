//! `sandbox oci` as Podman's runtime, and runc's command line through it.
//!
//! A real engine: Podman from the distribution's packages, pointed at the
//! build with `--runtime`, on a root filesystem holding nothing but
//! Debian's static busybox (no image registry is reachable), with its own
//! storage (vfs) and the cgroupfs manager. Needs root, podman, runc and
//! busybox-static (`.ci/run` installs them).

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::oci::{text, OciRuntime as Engine};

fn usable(test: &str) -> bool {
    support::oci::usable(test, &["podman", "runc"], "podman runc busybox-static")
}

/// What a process inside reports about itself and its writes.
const PROBE: &str = "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; \
    touch /etc/planted 2>/dev/null && echo etc=written || echo etc=denied; \
    touch /tmp/scratch && echo tmp=written || echo tmp=denied";

#[test]
fn podman_run_gets_the_layers_and_keeps_the_exit_code() {
    let test = "podman_run_gets_the_layers_and_keeps_the_exit_code";
    if !usable(test) {
        return;
    }
    let engine = Engine::new("sandbox-oci-", "");
    let out = engine.podman_run(&format!("{PROBE}; echo home=$HOME; exit 7"));
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    for expected in [
        "CapEff:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "etc=denied",
        "tmp=written",
    ] {
        assert!(stdout.contains(expected), "{expected}:\n{stdout}");
    }
    assert!(!engine.rootfs().join("etc/planted").exists());
    let enforced = engine
        .audit()
        .into_iter()
        .find(|l| l["event"] == "enforced")
        .expect("the init's report in the audit");
    assert_eq!(enforced["profile"], "strict");
    assert_eq!(enforced["enforced"]["landlock"], "full");
    assert_eq!(enforced["enforced"]["seccomp_programs"], 1);
    let init = std::fs::read_dir(engine.state_dir())
        .expect("state")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("init-")
        })
        .expect("the init in the state directory");
    assert!(
        support::is_static_elf(&init),
        "the init must load nothing from the image"
    );

    // The same container under plain runc writes /etc: the denial above is
    // this runtime's.
    let plain = engine.podman_run_with(
        Some(Path::new("runc")),
        &["--network", "none"],
        &format!("{PROBE}; echo home=$HOME"),
    );
    let plain_stdout = text(&plain.stdout);
    assert!(plain_stdout.contains("etc=written"), "{plain_stdout}");
    // runc's HOME for a process without one reaches it through the init.
    let home = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("home="))
            .map(str::to_owned)
    };
    assert!(home(&stdout).is_some());
    assert_eq!(home(&stdout), home(&plain_stdout));
}

#[test]
fn the_broker_answers_on_fd_3_and_audits_every_request() {
    let test = "the_broker_answers_on_fd_3_and_audits_every_request";
    if !usable(test) {
        return;
    }
    let engine = Engine::new("sandbox-oci-", "");
    std::fs::write(engine.rootfs().join("etc/motd"), "hello from the image\n").expect("motd");
    let out = engine.podman_run(
        r#"echo "fd=$SANDBOX_IPC_FD"
echo '{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"etc/motd"}}' >&3
head -n 1 <&3
echo '{"jsonrpc":"2.0","id":2,"method":"fs.write","params":{"path":"etc/motd","content":"x"}}' >&3
head -n 1 <&3"#,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "fd=3");
    let read: serde_json::Value = serde_json::from_str(lines[1]).expect("an answer");
    assert_eq!(read["id"], 1);
    assert_eq!(
        read["result"]["content"], "hello from the image\n",
        "{read}"
    );
    // strict puts writes to a person; a container has nobody to ask.
    let write: serde_json::Value = serde_json::from_str(lines[2]).expect("an answer");
    assert_eq!(write["id"], 2);
    assert!(write["error"].is_object(), "{write}");
    assert_eq!(
        std::fs::read_to_string(engine.rootfs().join("etc/motd")).unwrap(),
        "hello from the image\n"
    );
    let audit = engine.audit();
    let decisions: Vec<(&str, &str)> = audit
        .iter()
        .filter_map(|l| Some((l["method"].as_str()?, l["decision"].as_str()?)))
        .collect();
    assert!(decisions.contains(&("fs.read", "allow")), "{audit:?}");
    assert!(
        decisions
            .iter()
            .any(|(m, d)| *m == "fs.write" && *d != "allow"),
        "{audit:?}"
    );
    // The container's events and its broker's requests are one chain,
    // which `sandbox audit verify` accepts.
    assert_eq!(audit[0]["event"], "enforced", "{audit:?}");
    assert!(
        audit
            .iter()
            .all(|l| l["chain"] == audit[0]["chain"] && l["seq"].is_u64()),
        "{audit:?}"
    );
    assert!(audit[0]["chain"]
        .as_str()
        .is_some_and(|c| c.starts_with("container:")));
    for entry in std::fs::read_dir(engine.path().join("audit")).unwrap() {
        let out = std::process::Command::new(support::sandbox_bin())
            .args(["audit", "verify"])
            .arg(entry.unwrap().path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
}

#[test]
fn podman_exec_is_confined_tty_works_and_stop_leaves_nothing() {
    let test = "podman_exec_is_confined_tty_works_and_stop_leaves_nothing";
    if !usable(test) {
        return;
    }
    let engine = Engine::new("sandbox-oci-", "");
    let runtime = engine.wrapper();
    let start = |name: &str, script: &str| {
        let out = engine
            .podman(&runtime)
            .args(["run", "-d", "--name", name, "--network", "none"])
            .args([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
            ])
            .arg("--rootfs")
            .arg(engine.rootfs())
            .args(["/bin/sh", "-c", script])
            .output()
            .expect("podman run -d");
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    };
    let polite = start(
        "polite",
        "trap 'echo got-term; exit 0' TERM; while :; do sleep 0.1; done",
    );
    // The container's supervisor (the `sandbox oci create` process that
    // forked before runc) is confined too: a broker flaw is not the host's.
    let supervisors: Vec<u32> = support::host_pids_with(&polite)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| text(&c).replace('\0', " ").contains(" oci create "))
        })
        .collect();
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", supervisors[0])).unwrap();
    for expected in ["NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000"] {
        assert!(
            status.contains(expected),
            "supervisor: {expected}\n{status}"
        );
    }
    let exec = engine
        .podman(&runtime)
        .args(["exec", "polite", "/bin/sh", "-c", PROBE])
        .output()
        .expect("podman exec");
    let stdout = text(&exec.stdout);
    for expected in [
        "CapEff:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "etc=denied",
    ] {
        assert!(stdout.contains(expected), "exec: {expected}:\n{stdout}");
    }
    // Nothing piles up on disk per exec (a Kubernetes exec probe runs one
    // every few seconds for the container's whole life): besides the
    // record, one slot per live exec supervisor, the ended ones' removed
    // by the next exec.
    let dir = engine
        .container_dir(&polite)
        .expect("the container's state");
    let kept: Vec<String> = std::fs::read_dir(&dir)
        .expect("the container's state")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        kept.iter()
            .all(|name| ["record.json", "config.original.json", "execs"].contains(&name.as_str())),
        "{kept:?}"
    );
    let slots = std::fs::read_dir(dir.join("execs")).map_or(0, |d| d.count());
    assert!(slots <= 1, "{slots} exec slots after one exec");
    let tty = engine
        .podman(&runtime)
        .args([
            "exec",
            "-t",
            "polite",
            "/bin/sh",
            "-c",
            "tty; echo $SANDBOX_IPC_FD",
        ])
        .output()
        .expect("podman exec -t");
    let tty_out = text(&tty.stdout);
    assert!(
        tty_out.contains("/dev/pts/"),
        "{tty_out}\n{}",
        text(&tty.stderr)
    );
    let run_tty = engine.podman_run_with(None, &["--network", "none", "-t"], "tty");
    assert!(
        text(&run_tty.stdout).contains("/dev/pts/"),
        "{}",
        text(&run_tty.stderr)
    );
    let enforced: Vec<String> = engine
        .audit()
        .iter()
        .filter(|l| l["event"] == "enforced")
        .map(|l| l["started_by"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        enforced.iter().filter(|s| *s == "exec").count() >= 2,
        "every exec reports its layers: {enforced:?}"
    );

    // TERM reaches the container's own process (the init is gone by then).
    let stopped = engine
        .podman(&runtime)
        .args(["stop", "-t", "5", "polite"])
        .output()
        .expect("podman stop");
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    let logs = engine
        .podman(&runtime)
        .args(["logs", "polite"])
        .output()
        .expect("podman logs");
    assert!(
        text(&logs.stdout).contains("got-term"),
        "{}",
        text(&logs.stdout)
    );
    // A process that ignores TERM is killed after the grace.
    let stubborn = start("stubborn", "trap '' TERM; while :; do sleep 0.1; done");
    let began = std::time::Instant::now();
    let stopped = engine
        .podman(&runtime)
        .args(["stop", "-t", "1", "stubborn"])
        .output()
        .expect("podman stop");
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    assert!(began.elapsed() >= std::time::Duration::from_secs(1));
    for (name, id) in [("polite", &polite), ("stubborn", &stubborn)] {
        let removed = engine
            .podman(&runtime)
            .args(["rm", name])
            .output()
            .expect("podman rm");
        assert!(removed.status.success(), "{}", text(&removed.stderr));
        // No supervisor, runc or container process names it any more, and
        // its state is gone.
        let left = support::wait_until_gone(id, 10);
        assert!(left.is_empty(), "{name}: processes left: {left:?}");
        assert_eq!(engine.container_dir(id), None);
    }
}

#[test]
fn a_symlinked_scratch_directory_in_the_image_grants_nothing() {
    let test = "a_symlinked_scratch_directory_in_the_image_grants_nothing";
    if !usable(test) {
        return;
    }
    // The image decides what /tmp is. As a link to /etc, a write grant that
    // followed it would make the image's /etc writable.
    let engine = Engine::new("sandbox-oci-", "");
    std::fs::remove_dir(engine.rootfs().join("tmp")).expect("rmdir");
    std::os::unix::fs::symlink("/etc", engine.rootfs().join("tmp")).expect("symlink");
    let out = engine.podman_run("touch /tmp/through-link && echo link=written || echo link=denied");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("link=denied"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(!engine.rootfs().join("etc/through-link").exists());
}

#[test]
fn profiles_come_from_the_operator_not_from_the_container() {
    let test = "profiles_come_from_the_operator_not_from_the_container";
    if !usable(test) {
        return;
    }
    let engine = Engine::new("sandbox-oci-", "annotation_profiles = [\"standard\"]\n");
    let looser = engine.podman_run_with(
        None,
        &[
            "--network",
            "none",
            "--annotation",
            "run.sandbox.profile=permissive",
        ],
        "echo ran",
    );
    assert!(!looser.status.success());
    assert!(!text(&looser.stdout).contains("ran"));
    let stderr = text(&looser.stderr);
    assert!(
        stderr.contains("permissive") && stderr.contains("annotation_profiles"),
        "{stderr}"
    );
    let listed = engine.podman_run_with(
        None,
        &[
            "--network",
            "none",
            "--annotation",
            "run.sandbox.profile=standard",
        ],
        "echo ran",
    );
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert!(engine
        .audit()
        .iter()
        .any(|l| l["event"] == "enforced" && l["profile"] == "standard"));
    // strict keeps containers off the network: the host's is refused.
    let host = engine.podman_run_with(None, &["--network", "host"], "echo ran");
    assert!(!host.status.success());
    assert!(
        text(&host.stderr).contains("shares the host's network"),
        "{}",
        text(&host.stderr)
    );
}

#[test]
fn runc_command_line_state_follows_the_container_and_features_are_well_formed() {
    let test = "runc_command_line_state_follows_the_container_and_features_are_well_formed";
    if !usable(test) {
        return;
    }
    let engine = Engine::new("sandbox-oci-", "");
    let bundle = engine.bundle("sleep", &["/bin/sleep", "86400"], |_| {});
    let id = format!("oci-{}", support::marker("state"));
    assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
    assert_eq!(engine.status(&id), "created");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["process"]["args"][0], "/dev/.sandbox-init");
    assert!(engine.oci(&["start", &id]).status.success());
    assert_eq!(engine.status(&id), "running");
    assert!(engine.oci(&["kill", &id, "KILL"]).status.success());
    support::wait::holds_within(std::time::Duration::from_secs(60), || {
        engine.status(&id) == "stopped"
    });
    assert_eq!(engine.status(&id), "stopped");
    let deleted = engine.oci(&["delete", &id]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    assert_eq!(engine.container_dir(&id), None);
    assert!(support::wait_until_gone(&id, 10).is_empty());

    let features = engine.oci(&["features"]);
    assert!(features.status.success(), "{}", text(&features.stderr));
    let features: serde_json::Value = serde_json::from_slice(&features.stdout).expect("JSON");
    check_features_document(&features);
    assert_eq!(
        features["annotations"]["run.sandbox.profile.annotation"],
        "run.sandbox.profile"
    );
    // What this runtime refuses or takes away is not offered.
    assert!(!features["hooks"]
        .as_array()
        .expect("hooks")
        .contains(&"startContainer".into()));
    assert_eq!(features["annotations"]["run.sandbox.capabilities"], "none");
    assert!(features["potentiallyUnsafeConfigAnnotations"]
        .as_array()
        .expect("a list")
        .contains(&"run.sandbox.profile".into()));
    if features["annotations"]
        .get("org.opencontainers.runc.checkpoint.enabled")
        .is_some()
    {
        assert_eq!(
            features["annotations"]["org.opencontainers.runc.checkpoint.enabled"],
            "false"
        );
    }
    let version = engine.oci(&["--version"]);
    assert!(text(&version.stdout).starts_with("sandbox-runc version"));
    assert!(text(&version.stdout).contains("runc version"));
}

/// The features document's shape, field by field as the runtime spec's
/// features.md defines it: required version strings, optional lists of
/// strings, and objects where it says so.
fn check_features_document(features: &serde_json::Value) {
    let object = features.as_object().expect("an object");
    for required in ["ociVersionMin", "ociVersionMax"] {
        assert!(object[required].is_string(), "{required}");
    }
    let string_list = |value: &serde_json::Value, what: &str| {
        let items = value.as_array().unwrap_or_else(|| panic!("{what}: a list"));
        assert!(items.iter().all(serde_json::Value::is_string), "{what}");
    };
    let known = [
        "ociVersionMin",
        "ociVersionMax",
        "hooks",
        "mountOptions",
        "linux",
        "annotations",
        "potentiallyUnsafeConfigAnnotations",
    ];
    for (key, value) in object {
        assert!(known.contains(&key.as_str()), "unknown field {key}");
        match key.as_str() {
            "hooks" | "mountOptions" | "potentiallyUnsafeConfigAnnotations" => {
                string_list(value, key)
            }
            "annotations" => assert!(value
                .as_object()
                .expect("annotations: an object")
                .values()
                .all(serde_json::Value::is_string)),
            "linux" => {
                let linux = value.as_object().expect("linux: an object");
                for list in ["namespaces", "capabilities"] {
                    if let Some(value) = linux.get(list) {
                        string_list(value, list);
                    }
                }
                for sub in ["cgroup", "seccomp", "apparmor", "selinux", "intelRdt"] {
                    if let Some(value) = linux.get(sub) {
                        assert!(value.is_object(), "linux.{sub}: an object");
                    }
                }
            }
            _ => {}
        }
    }
}

#[test]
fn exec_into_a_container_sandbox_did_not_create_is_refused() {
    let test = "exec_into_a_container_sandbox_did_not_create_is_refused";
    if !usable(test) {
        return;
    }
    let engine = Engine::new("sandbox-oci-", "");
    let process = engine.path().join("process.json");
    std::fs::write(
        &process,
        r#"{"args":["/bin/sh"],"cwd":"/","user":{"uid":0,"gid":0}}"#,
    )
    .unwrap();
    let out = engine.oci(&[
        "exec",
        "--process",
        process.to_str().unwrap(),
        "made-by-plain-runc",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("was not created by sandbox oci"),
        "{stderr}"
    );
    // A command line instead of --process is not checked, so not passed on.
    let out = engine.oci(&["exec", "some-id", "/bin/sh"]);
    assert!(text(&out.stderr).contains("needs --process"));
    // An engine that reads runc's log for the reason (containerd's shim)
    // finds it there, in the format it asked for.
    let log = engine.path().join("runc.log");
    let out = engine.oci(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "exec",
        "some-id",
        "/bin/sh",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let logged: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&log).unwrap().trim()).expect("a JSON line");
    assert_eq!(logged["level"], "error");
    assert!(
        logged["msg"].as_str().unwrap().contains("needs --process"),
        "{logged}"
    );
}

#[test]
fn two_runc_roots_keep_containers_of_the_same_id_apart() {
    let test = "two_runc_roots_keep_containers_of_the_same_id_apart";
    if !usable(test) {
        return;
    }
    let engine = Engine::new("sandbox-oci-", "");
    let bundle = engine.bundle("sleep", &["/bin/sleep", "86400"], |_| {});
    let id = format!("oci-{}", support::marker("roots"));
    let with_root = |root: &str, args: &[&str]| {
        Command::new(engine.wrapper())
            .arg("--root")
            .arg(engine.path().join(root))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("sandbox oci")
    };
    let bundle_arg = bundle.to_str().unwrap();
    // The engine writes a fresh config.json for each container.
    let fresh = std::fs::read(bundle.join("config.json")).unwrap();
    assert!(with_root("root-a", &["create", "--bundle", bundle_arg, &id]).success());
    std::fs::write(bundle.join("config.json"), &fresh).unwrap();
    // The same id under another root is another container, not a leftover
    // of the first to be replaced, nor one runc already has.
    assert!(with_root("root-b", &["create", "--bundle", bundle_arg, &id]).success());
    let state = engine.state_dir().join("containers");
    let records = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .filter(|root| root.path().join(&id).join("record.json").exists())
        .count();
    assert_eq!(records, 2);
    for root in ["root-a", "root-b"] {
        assert!(with_root(root, &["delete", "--force", &id]).success());
    }
    assert_eq!(engine.container_dir(&id), None);
}
