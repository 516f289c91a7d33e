//! Attacks on `sandbox oci`, each performed for real against runc through
//! the runtime's command line, the way an engine drives it.
//!
//! Who attacks: the container's image (its files, and what an engine
//! writes into `config.json` from it), the container's processes, and
//! whoever names containers or sets their annotations. The operator's
//! settings file is trusted. Needs root, runc and a static
//! `/bin/busybox` (`.ci/run` installs them).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use support::oci::{container_id as id, text, OciRuntime as Engine, LONGER_THAN_ANY_TEST};
use support::wait;

fn usable(test: &str) -> bool {
    support::oci::usable(test, &["runc"], "runc busybox-static")
}

fn process(script: &str) -> Value {
    json!({
        "args": ["/bin/sh", "-c", script],
        "cwd": "/",
        "env": ["PATH=/bin"],
        "user": {"uid": 0, "gid": 0},
    })
}

#[test]
fn a_start_container_hook_runs_no_image_code_outside_the_layers() {
    let test = "a_start_container_hook_runs_no_image_code_outside_the_layers";
    if !usable(test) {
        return;
    }
    // startContainer hooks resolve and run inside the container after runc
    // dropped capabilities but before the process: under plain runc they
    // are image code with none of the profile's layers, holding the broker
    // channel before the init wrote its report.
    let engine = Engine::new("sandbox-attack-", "");
    let forged = r#"{"method":"sandbox.enforced","params":{"landlock":"full","seccomp_programs":1,"no_new_privs":true,"args":["forged"]}}"#;
    let bundle = engine.bundle("hook", &["/bin/true"], |spec| {
        spec["hooks"] = json!({"startContainer": [{
            "path": "/bin/sh",
            "args": ["sh", "-c", format!("touch /etc/hooked; echo '{forged}' >&3")],
        }]});
    });
    let id = id("hook");
    let created = engine.create(&bundle, &id);
    if created {
        engine.start_and_wait(&id);
        let _ = engine.oci(&["delete", "--force", &id]);
    }
    assert!(
        !engine.rootfs().join("etc/hooked").exists(),
        "the hook wrote the image's /etc: {:?}",
        engine.audit()
    );
    let audit = engine.audit();
    assert!(
        !audit.iter().any(|l| l["enforced"]["args"][0] == "forged"),
        "{audit:?}"
    );
    assert!(!created, "a startContainer hook is refused");
    let output = engine.output(&id);
    assert!(output.contains("startContainer"), "{output}");
}

#[test]
fn a_second_create_with_a_running_containers_id_changes_none_of_its_layers() {
    let test = "a_second_create_with_a_running_containers_id_changes_none_of_its_layers";
    if !usable(test) {
        return;
    }
    let engine = Engine::new("sandbox-attack-", "");
    let id = engine.running("twice");
    // The same id again, with a config whose read-write volume at /etc
    // would make /etc writable: runc refuses the id, but what sandbox oci
    // recorded for it must still be the first container's layers.
    let volume = engine.path().join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    let second = engine.bundle("second", &["/bin/true"], |spec| {
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/etc",
            "type": "bind",
            "source": volume,
            "options": ["rbind", "rw"],
        }));
    });
    let log = std::fs::File::create(engine.path().join("second.log")).unwrap();
    let again = Command::new(engine.wrapper())
        .arg("--root")
        .arg(engine.runc_root())
        .args(["create", "--bundle"])
        .arg(&second)
        .arg(&id)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .expect("create");
    assert!(!again.success());
    let exec = engine.exec(
        &id,
        &process("touch /etc/planted && echo etc=written || echo etc=denied"),
    );
    let stdout = text(&exec.stdout);
    assert!(
        stdout.contains("etc=denied"),
        "{stdout}\n{}",
        text(&exec.stderr)
    );
    assert!(!engine.rootfs().join("etc/planted").exists());
    let _ = engine.oci(&["delete", "--force", &id]);
}

/// The container's task limit as runc reads it from its cgroup.
fn pids_limit(engine: &Engine, id: &str) -> Option<u64> {
    let out = engine.oci(&["events", "--stats", id]);
    let stats: Value = serde_json::from_slice(&out.stdout).ok()?;
    stats["data"]["pids"]["limit"].as_u64()
}

#[test]
fn update_cannot_lift_the_profiles_limits() {
    let test = "update_cannot_lift_the_profiles_limits";
    if !usable(test) {
        return;
    }
    // A Kubernetes in-place resize or `podman update` is runc's `update`:
    // strict's 512 tasks must stay a ceiling after create.
    let engine = Engine::new("sandbox-attack-", "");
    let id = engine.running("update");
    assert_eq!(pids_limit(&engine, &id), Some(512));
    let flag = engine.oci(&["update", "--pids-limit", "100000", &id]);
    let resources = engine.path().join("resources.json");
    std::fs::write(&resources, r#"{"pids":{"limit":-1},"memory":{"limit":-1}}"#).unwrap();
    let document = engine.oci(&["update", "-r", resources.to_str().unwrap(), &id]);
    assert_eq!(
        pids_limit(&engine, &id),
        Some(512),
        "{}\n{}",
        text(&flag.stderr),
        text(&document.stderr)
    );
    for refused in [&flag, &document] {
        assert!(!refused.status.success());
        assert!(
            text(&refused.stderr).contains("above the limit of the container's profile"),
            "{}",
            text(&refused.stderr)
        );
    }
    // runc reads `Pids` as `pids`, and of a key given twice merges both
    // values where serde_json keeps the last: neither lifts the ceiling.
    for (n, document) in [
        r#"{"Pids":{"limit":-1}}"#,
        r#"{"pids":{"limit":-1},"pids":{}}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let resources = engine.path().join(format!("resources-{n}.json"));
        std::fs::write(&resources, document).unwrap();
        let update = engine.oci(&["update", "-r", resources.to_str().unwrap(), &id]);
        assert_eq!(
            pids_limit(&engine, &id),
            Some(512),
            "{document}: {}",
            text(&update.stderr)
        );
    }
    // Lowering is an update like any other.
    let lower = engine.oci(&["update", "--pids-limit", "100", &id]);
    assert!(lower.status.success(), "{}", text(&lower.stderr));
    assert_eq!(pids_limit(&engine, &id), Some(100));
    let _ = engine.oci(&["delete", "--force", &id]);
}

#[test]
fn a_user_who_can_rename_the_state_directory_cannot_swap_a_record() {
    let test = "a_user_who_can_rename_the_state_directory_cannot_swap_a_record";
    if !usable(test) {
        return;
    }
    use std::os::unix::process::CommandExt;
    // The operator put state_dir below a directory an unprivileged user
    // owns. That user renames the state directory away and puts one of
    // their own in its place, with a record whose layers are none: the next
    // `exec` (root's) would read it.
    let engine = Engine::new("sandbox-attack-", "");
    let parent = engine.path().join("users");
    std::fs::create_dir(&parent).unwrap();
    std::os::unix::fs::chown(&parent, Some(support::TEST_UID), Some(support::TEST_GID)).unwrap();
    std::fs::set_permissions(engine.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::write(
        engine.path().join("oci.toml"),
        format!(
            "state_dir = \"{}/state\"\naudit_dir = \"{}/audit\"\n",
            parent.display(),
            engine.path().display()
        ),
    )
    .unwrap();
    let id = id("swap");
    let bundle = engine.bundle("swap", &["/bin/sleep", LONGER_THAN_ANY_TEST], |_| {});
    let created = engine.create(&bundle, &id);
    if created {
        let started = engine.oci(&["start", &id]);
        assert!(started.status.success(), "{}", text(&started.stderr));
        let dir = support::oci_container_dir(&parent.join("state"), &id).expect("the record");
        let relative = dir.strip_prefix(&parent).unwrap().display().to_string();
        let record_path = dir.join("record.json");
        let mut record: Value =
            serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
        record["layers"] = json!({"landlock": null, "seccomp": null});
        let forged = parent.join("forged.json");
        std::fs::write(&forged, serde_json::to_vec(&record).unwrap()).unwrap();
        let swapped = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "cd {} && mv state old && mkdir -p {relative} && \
                 cp forged.json {relative}/record.json",
                parent.display()
            ))
            .uid(support::TEST_UID)
            .gid(support::TEST_GID)
            .status()
            .expect("swap as the user");
        assert!(swapped.success());
        let exec = engine.exec(
            &id,
            &process("touch /etc/planted && echo etc=written || echo etc=denied"),
        );
        assert!(
            !text(&exec.stdout).contains("etc=written"),
            "{}",
            text(&exec.stdout)
        );
        let _ = engine.oci(&["delete", "--force", &id]);
    } else {
        let output = engine.output(&id);
        assert!(output.contains("another user can write"), "{output}");
    }
    assert!(!engine.rootfs().join("etc/planted").exists());
}

#[test]
fn restore_from_a_checkpoint_is_refused() {
    let test = "restore_from_a_checkpoint_is_refused";
    if !usable(test) {
        return;
    }
    // A checkpoint (an engine imports it from an archive) brings its own
    // config.json, with the image's process and no init in front of it.
    let engine = Engine::new("sandbox-attack-", "");
    let id = id("restore");
    let bundle = engine.bundle("restore", &["/bin/sh", "-c", "touch /etc/restored"], |_| {});
    let images = engine.path().join("checkpoint");
    std::fs::create_dir_all(&images).unwrap();
    let out = engine.oci(&[
        "restore",
        "--detach",
        "--image-path",
        images.to_str().unwrap(),
        "--bundle",
        bundle.to_str().unwrap(),
        &id,
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("restore: a container restored from a checkpoint"),
        "{}",
        text(&out.stderr)
    );
    assert!(engine.status(&id).is_empty(), "runc never saw it");
    assert!(!engine.rootfs().join("etc/restored").exists());
}

#[test]
fn a_working_directory_spelled_as_the_root_grants_no_write_on_the_image() {
    let test = "a_working_directory_spelled_as_the_root_grants_no_write_on_the_image";
    if !usable(test) {
        return;
    }
    // The image's working directory is writable under strict (its project
    // is read-write), except when it is `/`, the whole image. `//` and `/.`
    // are `/` too, and so is a volume mounted at one of them.
    let engine = Engine::new("sandbox-attack-", "");
    for (n, (cwd, mount)) in [("//", None), ("/.", None), ("/work", Some("/./"))]
        .into_iter()
        .enumerate()
    {
        let planted = format!("planted{n}");
        let script = format!("touch /etc/{planted}");
        let bundle = engine.bundle(&format!("cwd{n}"), &["/bin/sh", "-c", &script], |spec| {
            spec["process"]["cwd"] = cwd.into();
            if let Some(destination) = mount {
                spec["mounts"].as_array_mut().unwrap().push(json!({
                    "destination": destination,
                    "type": "tmpfs",
                    "source": "tmpfs",
                    "options": ["rw", "size=1m"],
                }));
            }
        });
        let id = id("cwd");
        if engine.create(&bundle, &id) {
            engine.start_and_wait(&id);
            let _ = engine.oci(&["delete", "--force", &id]);
        }
        assert!(
            !engine.rootfs().join("etc").join(&planted).exists(),
            "cwd {cwd:?}, mount {mount:?}: {}",
            engine.output(&id)
        );
    }
}

#[test]
fn the_brokers_file_access_stays_in_the_containers_root() {
    let test = "the_brokers_file_access_stays_in_the_containers_root";
    if !usable(test) {
        return;
    }
    // The broker runs on the host, as the engine's user (root), in the
    // container's root: the image's links must not lead it to the host's.
    // The target is a host file anyone may read, next to the root, so a
    // refusal is the broker's and not a missing file's or its mode's.
    let engine = Engine::new("sandbox-attack-", "");
    let secret = support::marker("host-secret");
    let outside = engine.path().join("host-secret");
    std::fs::write(&outside, format!("HOST-SECRET-{secret}\n")).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    let etc = engine.rootfs().join("etc");
    std::os::unix::fs::symlink(&outside, etc.join("absolute")).unwrap();
    std::os::unix::fs::symlink("../../host-secret", etc.join("relative")).unwrap();
    let outside = outside.to_str().unwrap();
    let mut script = String::new();
    for (n, path) in ["etc/absolute", "etc/relative", "../host-secret", outside]
        .iter()
        .enumerate()
    {
        script.push_str(&format!(
            "echo '{{\"jsonrpc\":\"2.0\",\"id\":{n},\"method\":\"fs.read\",\"params\":{{\"path\":\"{path}\"}}}}' >&3; head -n 1 <&3; "
        ));
    }
    let id = id("broker");
    let bundle = engine.bundle("broker", &["/bin/sh", "-c", &script], |_| {});
    assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
    engine.start_and_wait(&id);
    let _ = engine.oci(&["delete", "--force", &id]);
    let output = engine.output(&id);
    let answers: Vec<Value> = output
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(answers.len(), 4, "{output}");
    for answer in &answers {
        // Refused as an escape (-32001, the project-root rule), not merely
        // failed: a missing file would be -32005.
        assert_eq!(answer["error"]["code"], -32001, "{answer}");
        assert_eq!(answer["error"]["data"]["rule"], "project root", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("outside the project root")),
            "{answer}"
        );
    }
    assert!(!output.contains(&secret), "{output}");
}

#[test]
fn keys_runc_reads_under_another_spelling_change_nothing_it_runs() {
    let test = "keys_runc_reads_under_another_spelling_change_nothing_it_runs";
    if !usable(test) {
        return;
    }
    // runc decodes config.json with Go's encoding/json, which matches a
    // struct's fields case-insensitively, and folds `ſ` (U+017F) to `s` and
    // `K` (U+212A) to `k`. A key sandbox oci does not read ("proceſs",
    // "argſ", "StartContainer") would be runc's `process`, its `args`, its
    // startContainer hooks: the image's process run in place of the init.
    let engine = Engine::new("sandbox-attack-", "");
    let escape = |n: usize| format!("touch /etc/escaped{n}");
    type Respelling = fn(&mut Value, String);
    let respellings: [(&str, Respelling); 3] = [
        ("process", |spec, script| {
            spec["proceſs"] = json!({"args": ["/bin/sh", "-c", script]});
        }),
        ("args", |spec, script| {
            spec["process"]["argſ"] = json!(["/bin/sh", "-c", script]);
        }),
        ("hooks", |spec, script| {
            spec["hooks"] = json!({"StartContainer": [{
                "path": "/bin/sh",
                "args": ["sh", "-c", script],
            }]});
        }),
    ];
    for (n, (name, respell)) in respellings.into_iter().enumerate() {
        let bundle = engine.bundle(name, &["/bin/true"], |spec| respell(spec, escape(n)));
        let id = id(name);
        let created = engine.create(&bundle, &id);
        if created {
            engine.start_and_wait(&id);
            let _ = engine.oci(&["delete", "--force", &id]);
        }
        assert!(
            !engine.rootfs().join(format!("etc/escaped{n}")).exists(),
            "{name}: the image's process ran without the init: {}",
            engine.output(&id)
        );
        assert!(!created, "{name}: created");
        let output = engine.output(&id);
        assert!(output.contains("spelled"), "{name}: {output}");
    }
    // exec's process file is decoded the same way.
    let id = engine.running("exec");
    let mut exec = process("true");
    exec["argſ"] = json!(["/bin/sh", "-c", escape(3)]);
    let out = engine.exec(&id, &exec);
    let _ = engine.oci(&["delete", "--force", &id]);
    assert!(
        !engine.rootfs().join("etc/escaped3").exists(),
        "exec ran the image's process without the init: {}",
        text(&out.stderr)
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("spelled"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_network_the_engine_connects_through_a_hook_is_refused_under_a_profile_off_the_network() {
    let test =
        "a_network_the_engine_connects_through_a_hook_is_refused_under_a_profile_off_the_network";
    let tools = ["runc", "ip", "nsenter", "sed"];
    if !support::oci::usable(test, &tools, "runc busybox-static iproute2 util-linux") {
        return;
    }
    // strict keeps containers off the network, and create refuses a
    // namespace the spec shows as joined. Docker's default bridge network
    // shows as a fresh namespace: a prestart hook (libnetwork-setkey)
    // connects it after create. This hook does the same with a veth pair.
    let engine = Engine::new("sandbox-attack-", "");
    let suffix: String = support::marker("n")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .rev()
        .take(8)
        .collect();
    let host_side = format!("sbx{suffix}");
    let hook = engine.path().join("connect.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\npid=$(sed -n 's/.*\"pid\":\\([0-9]*\\).*/\\1/p')\n\
             ip link add {host_side} type veth peer name eth0 netns \"$pid\" && \
             nsenter --net=/proc/$pid/ns/net ip link set eth0 up\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bundle = engine.bundle(
        "connected",
        &["/bin/sh", "-c", "echo the-process-ran; cat /proc/net/dev"],
        |spec| {
            spec["hooks"] = json!({"createRuntime": [{"path": hook}]});
        },
    );
    let id = id("net");
    let created = engine.create(&bundle, &id);
    if created {
        engine.start_and_wait(&id);
        let _ = engine.oci(&["delete", "--force", &id]);
    }
    let _ = Command::new("ip")
        .args(["link", "del", &host_side])
        .stderr(Stdio::null())
        .status();
    let output = engine.output(&id);
    assert!(
        !output.contains("the-process-ran"),
        "the process ran on the engine's network: {output}"
    );
    assert!(
        output.contains("eth0") && output.contains("--network none"),
        "{output}"
    );
}

#[test]
fn the_broker_reads_no_file_the_containers_user_cannot() {
    let test = "the_broker_reads_no_file_the_containers_user_cannot";
    if !usable(test) {
        return;
    }
    // The supervisor runs as the engine's user, root. An image that runs
    // its process as another user (`USER app`, a pod's runAsUser) keeps
    // files that user cannot read: the broker must not read them for it.
    let engine = Engine::new("sandbox-attack-", "");
    let secret = engine.rootfs().join("etc/secret");
    std::fs::write(&secret, "root-only-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let public = engine.rootfs().join("etc/public");
    std::fs::write(&public, "for-everyone\n").unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut script = String::from("cat /etc/secret 2>/dev/null || echo cat=denied; ");
    for (n, path) in ["etc/secret", "etc/public"].iter().enumerate() {
        script.push_str(&format!(
            "echo '{{\"jsonrpc\":\"2.0\",\"id\":{n},\"method\":\"fs.read\",\"params\":{{\"path\":\"{path}\"}}}}' >&3; head -n 1 <&3; "
        ));
    }
    let id = id("user");
    let bundle = engine.bundle("user", &["/bin/sh", "-c", &script], |spec| {
        spec["process"]["user"] = json!({"uid": 1000, "gid": 1000});
    });
    assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
    engine.start_and_wait(&id);
    let _ = engine.oci(&["delete", "--force", &id]);
    let output = engine.output(&id);
    assert!(output.contains("cat=denied"), "{output}");
    assert!(
        !output.contains("root-only-secret"),
        "the broker read a file its user cannot: {output}"
    );
    assert!(output.contains("for-everyone"), "{output}");
}

#[test]
fn a_working_directory_in_proc_or_dev_grants_no_write_there() {
    let test = "a_working_directory_in_proc_or_dev_grants_no_write_there";
    if !usable(test) {
        return;
    }
    // The image's working directory is writable under strict, but /proc,
    // /sys, /dev and the engine's files never are: a volume there is not
    // granted, and neither is a WORKDIR. With /proc/sys not read-only (an
    // engine that unmasks /proc, as Kubernetes' procMount: Unmasked does),
    // root without capabilities writes sysctls its mode allows: here the
    // container's own hostname, elsewhere kernel.core_pattern.
    let engine = Engine::new("sandbox-attack-", "");
    let cases = [
        (
            "/proc/sys/kernel",
            "echo planted > /proc/sys/kernel/hostname && echo proc=written || echo proc=denied",
            "proc=",
        ),
        (
            "/dev",
            "touch /dev/planted && echo dev=written || echo dev=denied",
            "dev=",
        ),
    ];
    for (n, (cwd, script, said)) in cases.into_iter().enumerate() {
        let bundle = engine.bundle(&format!("sys{n}"), &["/bin/sh", "-c", script], |spec| {
            spec["process"]["cwd"] = cwd.into();
            spec["linux"]["readonlyPaths"] = json!([]);
            spec["linux"]["maskedPaths"] = json!([]);
        });
        let id = id("sys");
        assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
        engine.start_and_wait(&id);
        let _ = engine.oci(&["delete", "--force", &id]);
        let output = engine.output(&id);
        assert!(
            output.contains(&format!("{said}denied")),
            "working directory {cwd}: {output}"
        );
    }
}

#[test]
fn an_annotation_names_no_criu_configuration_for_checkpoint() {
    let test = "an_annotation_names_no_criu_configuration_for_checkpoint";
    if !support::oci::usable(test, &["runc", "criu"], "runc busybox-static criu") {
        return;
    }
    // runc's checkpoint gives CRIU, run as root on the host, the
    // configuration file the annotation org.criu.config names; Podman
    // copies an image's annotations into config.json. A configuration's
    // log-file makes CRIU truncate and write any host file (its
    // action-script runs programs). runc reads annotations back from
    // "key=value" labels split at the first '=', so a key holding '='
    // is the same annotation.
    let engine = Engine::new("sandbox-attack-", "");
    for (n, equals_in_key) in [false, true].into_iter().enumerate() {
        let clobbered = engine.path().join(format!("clobbered{n}"));
        let config = engine.path().join(format!("criu{n}.conf="));
        std::fs::write(&config, format!("log-file {}\n", clobbered.display())).unwrap();
        let named = config.to_str().unwrap().to_owned();
        let bundle = engine.bundle(
            &format!("criu{n}"),
            &["/bin/sleep", LONGER_THAN_ANY_TEST],
            |spec| {
                spec["annotations"] = if equals_in_key {
                    let key = format!("org.criu.config={}", named.trim_end_matches('='));
                    json!({ key: "" })
                } else {
                    json!({"org.criu.config": named})
                };
            },
        );
        let id = id("criu");
        let created = engine.create(&bundle, &id);
        if created {
            let started = engine.oci(&["start", &id]);
            assert!(started.status.success(), "{}", text(&started.stderr));
            let images = engine.path().join(format!("checkpoint{n}"));
            std::fs::create_dir_all(&images).unwrap();
            let _ = engine.oci(&["checkpoint", "--image-path", images.to_str().unwrap(), &id]);
            let _ = engine.oci(&["delete", "--force", &id]);
        }
        assert!(
            !clobbered.exists(),
            "CRIU read the annotation's configuration (key with '=': {equals_in_key})"
        );
        assert!(!created, "created with org.criu.config");
        let output = engine.output(&id);
        assert!(output.contains("org.criu.config"), "{output}");
    }
}

#[test]
fn a_double_dash_before_the_command_is_no_way_around_exec() {
    let test = "a_double_dash_before_the_command_is_no_way_around_exec";
    if !usable(test) {
        return;
    }
    // runc's global flags are read by Go's flag package, which stops at
    // `--` and drops it: `runc -- exec` is runc's exec. sandbox oci must
    // not take `--` for a command it passes through unchecked.
    let engine = Engine::new("sandbox-attack-", "");
    let id = engine.running("dashes");
    let process_file = engine.path().join("dashes-process.json");
    let escape = process("touch /etc/escaped-dashes");
    std::fs::write(&process_file, serde_json::to_vec(&escape).unwrap()).unwrap();
    let out = engine.oci(&[
        "--",
        "exec",
        "--process",
        process_file.to_str().unwrap(),
        &id,
    ]);
    let _ = engine.oci(&["delete", "--force", &id]);
    assert!(
        !engine.rootfs().join("etc/escaped-dashes").exists(),
        "runc exec'd the process without the init: {}",
        text(&out.stderr)
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("\"--\""),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_process_whose_environment_is_larger_than_one_argument_starts() {
    let test = "a_process_whose_environment_is_larger_than_one_argument_starts";
    if !usable(test) {
        return;
    }
    // The kernel takes at most 128 KiB in one argument. Kubernetes gives a
    // pod seven variables per service of its namespace: a big namespace
    // passes that in all, which the process's own exec takes, and the init
    // in front of it must too.
    let engine = Engine::new("sandbox-attack-", "");
    let id = id("env");
    let bundle = engine.bundle(
        "env",
        &["/bin/sh", "-c", "echo count=$(env | grep -c ^SVC_)"],
        |spec| {
            let env = spec["process"]["env"].as_array_mut().unwrap();
            for n in 0..3000 {
                env.push(format!("SVC_{n}_SERVICE_HOST=10.96.{}.{}", n / 250, n % 250).into());
            }
            env.push(format!("SVC_BIG={}", "x".repeat(100_000)).into());
        },
    );
    assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
    engine.start_and_wait(&id);
    let _ = engine.oci(&["delete", "--force", &id]);
    let output = engine.output(&id);
    assert!(output.contains("count=3001"), "{output}");
}

#[test]
fn another_user_in_the_container_never_sees_an_execs_environment() {
    let test = "another_user_in_the_container_never_sees_an_execs_environment";
    if !usable(test) {
        return;
    }
    // A process's environment is readable in /proc only by its own user
    // (PTRACE_MODE_READ); its command line by everyone in its pid
    // namespace. A container's unprivileged process watches every command
    // line while the engine runs an exec as root with a secret in its
    // environment (a health check, `kubectl exec` with the pod's env): the
    // init in front of the exec must not hold the environment in its
    // arguments, or the secret is there to read until it executes the
    // process. The pattern is bracketed so the watcher's own command line
    // does not match it.
    let engine = Engine::new("sandbox-attack-", "");
    let id = id("environ");
    let watch =
        "while :; do grep -a -q -s 'hunte[r]2' /proc/[0-9]*/cmdline && touch /tmp/seen; done";
    let script = format!("for n in 1 2 3; do ( {watch} ) & done; wait");
    let bundle = engine.bundle("environ", &["/bin/sh", "-c", &script], |spec| {
        spec["process"]["user"] = json!({"uid": 1000, "gid": 1000});
    });
    assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
    let started = engine.oci(&["start", &id]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let seen = engine.rootfs().join("tmp/seen");
    let mut execs = 0;
    while execs < 150 && !seen.exists() {
        let exec = engine.exec(
            &id,
            &json!({
                "args": ["/bin/true"],
                "cwd": "/",
                "env": ["PATH=/bin", "DB_PASSWORD=hunter2"],
                "user": {"uid": 0, "gid": 0},
            }),
        );
        assert!(exec.status.success(), "{}", text(&exec.stderr));
        execs += 1;
    }
    let _ = engine.oci(&["delete", "--force", &id]);
    assert!(
        !seen.exists(),
        "user 1000 read root's exec environment from /proc/PID/cmdline (after {execs} execs)"
    );
}

#[test]
fn a_group_the_image_names_after_a_number_gives_the_process_no_other_group() {
    let test = "a_group_the_image_names_after_a_number_gives_the_process_no_other_group";
    if !usable(test) {
        return;
    }
    // runc reads each of process.user.additionalGids (which the engine
    // writes: --group-add, Kubernetes' fsGroup and supplementalGroups) as
    // a group name first, in the image's /etc/group: an image with a group
    // *named* 10 of gid 0 turns the engine's group 10 into root's group,
    // the host's without a user namespace.
    let engine = Engine::new("sandbox-attack-", "");
    let groups_of = |tag: &str, group_file: &str| {
        std::fs::write(engine.rootfs().join("etc/group"), group_file).unwrap();
        let id = id(tag);
        let bundle = engine.bundle(tag, &["/bin/sh", "-c", "echo groups=$(id -G)"], |spec| {
            spec["process"]["user"] = json!({"uid": 1000, "gid": 1000, "additionalGids": [10]});
        });
        assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
        engine.start_and_wait(&id);
        let _ = engine.oci(&["delete", "--force", &id]);
        let output = engine.output(&id);
        let groups: Option<Vec<String>> = output
            .lines()
            .find_map(|l| l.strip_prefix("groups="))
            .map(|g| g.split_whitespace().map(str::to_owned).collect());
        (groups, output)
    };
    let (groups, output) = groups_of("groups", "root:x:0:\nwheel:x:10:\n");
    assert_eq!(groups, Some(vec!["1000".into(), "10".into()]), "{output}");
    let (groups, output) = groups_of("named", "root:x:0:\n10:x:0:\nwheel:x:10:\n");
    assert!(
        !groups.iter().flatten().any(|g| g == "0"),
        "the image's group named 10 made the process a member of group 0: {output}"
    );
    assert!(groups.is_none(), "{output}");
    assert!(output.contains("/etc/group"), "{output}");
}

#[test]
fn a_container_flooding_its_broker_cannot_fill_the_hosts_disk_with_audit() {
    let test = "a_container_flooding_its_broker_cannot_fill_the_hosts_disk_with_audit";
    if !usable(test) {
        return;
    }
    // Every broker request is one audit line on the host, with the path
    // asked for in it. A container that sends fs.stat requests with 64 KiB
    // paths in a loop (strict allows fs.stat) writes megabytes a second
    // into the host's audit directory for as long as it runs.
    let engine = Engine::new("sandbox-attack-", "");
    let id = id("flood");
    let script = r#"p=a; i=0; while [ $i -lt 16 ]; do p=$p$p; i=$((i+1)); done
cat <&3 >/dev/null &
while :; do echo "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"fs.stat\",\"params\":{\"path\":\"$p\"}}"; done >&3"#;
    let bundle = engine.bundle("flood", &["/bin/sh", "-c", script], |_| {});
    assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
    let started = engine.oci(&["start", &id]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let path = engine.path().join("audit").join(format!("{id}.jsonl"));
    let limit: u64 = 64 << 20;
    // Ended (true), or grown far past the limit (false: no use waiting).
    let ended = wait::within(std::time::Duration::from_secs(120), || {
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let audit = std::fs::read_to_string(&path).unwrap_or_default();
        let ended = audit
            .lines()
            .rev()
            .take(3)
            .any(|l| l.contains("\"event\":\"ended\"") && l.contains("audit"));
        (ended || size > limit + (8 << 20)).then_some(ended)
    })
    .unwrap_or(false);
    let _ = engine.oci(&["delete", "--force", &id]);
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    assert!(
        ended && size <= limit + (1 << 20),
        "the container's audit grew to {size} bytes and its broker still serves"
    );
}

#[test]
fn processes_execs_leave_behind_cannot_pile_up_supervisors_on_the_host() {
    let test = "processes_execs_leave_behind_cannot_pile_up_supervisors_on_the_host";
    if !usable(test) {
        return;
    }
    // Each exec's supervisor is a host process that lives while anything
    // holds its broker channel. An exec of the image's (a health check run
    // every few seconds) that leaves a process behind keeps its supervisor
    // alive past the exec: without a bound they pile up on the host.
    let engine = Engine::new("sandbox-attack-", "");
    let id = engine.running("pileup");
    // Each exec leaves behind a process that lives until the test creates
    // `released` in the image: the 32 before the 33rd are alive when it is
    // tried, however long the execs take.
    let released = format!("/etc/released-{id}");
    let left_behind = format!("while [ ! -e {released} ]; do sleep 1; done >/dev/null 2>&1 &");
    let mut refused = None;
    for n in 1..=40 {
        let exec = engine.exec(&id, &process(&left_behind));
        if !exec.status.success() {
            refused = Some((n, text(&exec.stderr)));
            break;
        }
    }
    std::fs::write(engine.rootfs().join(released.trim_start_matches('/')), "").unwrap();
    let Some((n, stderr)) = refused else {
        let _ = engine.oci(&["delete", "--force", &id]);
        panic!("40 execs each left a supervisor alive on the host");
    };
    assert_eq!(n, 33, "{stderr}");
    assert!(stderr.contains("exec supervisors"), "{stderr}");
    // Once the processes left behind are gone, so are their supervisors,
    // and execs work again.
    let again = wait::within(std::time::Duration::from_secs(60), || {
        let again = engine.exec(&id, &process("true"));
        again.status.success().then_some(again)
    });
    let _ = engine.oci(&["delete", "--force", &id]);
    assert!(
        again.is_some(),
        "no exec worked again after the processes left behind ended"
    );
}

#[test]
fn a_container_sharing_the_hosts_pid_namespace_kills_no_host_process() {
    let test = "a_container_sharing_the_hosts_pid_namespace_kills_no_host_process";
    if !usable(test) {
        return;
    }
    // `--pid host` (Kubernetes hostPID): without a user namespace the
    // container's root is the host's, equal uids need no capability to
    // signal, and the profile's filter allows kill.
    let engine = Engine::new("sandbox-attack-", "");
    let mut victim = Command::new("/bin/sleep")
        .arg("600")
        .spawn()
        .expect("a host process");
    let pid = victim.id();
    let joined = format!("/proc/{pid}/ns/pid");
    for (tag, path) in [("missing", None), ("joined", Some(joined.as_str()))] {
        let script = format!("kill -9 {pid}; echo kill=$?");
        let bundle = engine.bundle(tag, &["/bin/sh", "-c", &script], |spec| {
            let list = spec["linux"]["namespaces"].as_array_mut().unwrap();
            list.retain(|ns| ns["type"] != "pid");
            if let Some(path) = path {
                list.push(json!({"type": "pid", "path": path}));
            }
        });
        let id = id(tag);
        let created = engine.create(&bundle, &id);
        if created {
            engine.start_and_wait(&id);
            let _ = engine.oci(&["delete", "--force", &id]);
        }
        let alive = victim.try_wait().expect("wait").is_none();
        let output = engine.output(&id);
        if !alive {
            panic!("{tag}: the container killed host process {pid}: {output}");
        }
        assert!(!created, "{tag}: the host's pid namespace is refused");
        assert!(
            output.contains("linux.namespaces")
                && output.contains("pid")
                && output.contains("--pid host"),
            "{tag}: {output}"
        );
    }
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn the_init_reports_landlocks_signal_and_socket_scopes_where_the_kernel_has_them() {
    let test = "the_init_reports_landlocks_signal_and_socket_scopes_where_the_kernel_has_them";
    let abi = sandbox::environment::Environment::detect().landlock_abi;
    if !usable(test)
        || !support::require(
            test,
            "Landlock ABI 6 (Linux 6.12) for scopes",
            abi.is_some_and(|abi| abi >= 6),
        )
    {
        return;
    }
    let engine = Engine::new("sandbox-attack-", "");
    let bundle = engine.bundle("scopes", &["/bin/true"], |_| {});
    let id = id("scopes");
    assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
    engine.start_and_wait(&id);
    let _ = engine.oci(&["delete", "--force", &id]);
    let audit = engine.audit();
    let enforced = audit
        .iter()
        .find(|line| line["enforced"].is_object())
        .unwrap_or_else(|| panic!("no report: {audit:?}"));
    assert_eq!(
        enforced["enforced"]["landlock_scopes"],
        json!(["signal", "abstract-unix-socket"]),
        "{enforced}"
    );
    // In force: an exec's process, under an init of its own, cannot
    // signal the container's main process.
    let running = engine.running("scoped");
    let out = engine.exec(&running, &process("kill -0 1; echo kill=$?"));
    let _ = engine.oci(&["delete", "--force", &running]);
    assert!(text(&out.stdout).contains("kill=1"), "{out:?}");
}

/// A loop device over a 1 MiB file in `dir`, detached on drop.
struct LoopDevice {
    path: String,
}

impl LoopDevice {
    fn new(dir: &Path) -> Option<LoopDevice> {
        let backing = dir.join("disk.img");
        std::fs::write(&backing, vec![0_u8; 1 << 20]).expect("backing file");
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&backing)
            .output()
            .ok()?;
        let path = text(&out.stdout).trim().to_owned();
        (out.status.success() && path.starts_with("/dev/loop")).then_some(LoopDevice { path })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.path]).status();
    }
}

#[test]
fn a_privileged_containers_host_block_device_cannot_be_written() {
    let test = "a_privileged_containers_host_block_device_cannot_be_written";
    if !usable(test) {
        return;
    }
    // `--privileged` puts the host's device nodes in linux.devices and lets
    // the device cgroup reach every device: root:disk 0660 nodes open for
    // the container's root, the host's root without a user namespace. A
    // loop device over a scratch file stands in for the host's disk.
    let engine = Engine::new("sandbox-attack-", "");
    let device = LoopDevice::new(engine.path());
    if !support::require(test, "losetup and a free loop device", device.is_some()) {
        return;
    }
    let device = device.unwrap();
    let rdev = std::os::unix::fs::MetadataExt::rdev(&std::fs::metadata(&device.path).unwrap());
    let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    let script = format!(
        "echo owned-by-the-container > {} && echo wrote",
        device.path
    );
    for (tag, rules) in [
        ("every", json!([{"allow": true, "access": "rwm"}])),
        (
            "block",
            json!([{"allow": true, "type": "b", "major": major, "minor": minor, "access": "rw"}]),
        ),
    ] {
        let bundle = engine.bundle(tag, &["/bin/sh", "-c", &script], |spec| {
            spec["linux"]["devices"] = json!([{
                "path": device.path, "type": "b", "major": major, "minor": minor,
                "fileMode": 0o660, "uid": 0, "gid": 6,
            }]);
            spec["linux"]["resources"]["devices"] = rules;
        });
        let id = id(tag);
        let created = engine.create(&bundle, &id);
        if created {
            engine.start_and_wait(&id);
            let _ = engine.oci(&["delete", "--force", &id]);
        }
        let mut head = [0_u8; 32];
        use std::io::Read;
        std::fs::File::open(&device.path)
            .and_then(|mut f| f.read_exact(&mut head))
            .expect("reading the loop device");
        let output = engine.output(&id);
        assert!(
            !head.starts_with(b"owned"),
            "{tag}: the container wrote the host's block device: {output}"
        );
        assert!(!created, "{tag}: the host's device is refused");
        assert!(
            output.contains("linux.devices") && output.contains(&device.path),
            "{tag}: {output}"
        );
    }
}

#[test]
fn landlock_grants_no_write_on_a_device_node_beyond_the_ordinary_ones() {
    let test = "landlock_grants_no_write_on_a_device_node_beyond_the_ordinary_ones";
    if !usable(test) {
        return;
    }
    // A node the engine leaves in /dev (a bind mount, as rootless engines
    // make for --device): here a second /dev/null, harmless to write, that
    // the device cgroup lets through. Landlock grants only the ordinary
    // devices by path, not all of /dev.
    let engine = Engine::new("sandbox-attack-", "");
    let node = engine.path().join("extra-null");
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .expect("mknod");
    let script = "echo x > /dev/extra-null && echo wrote-extra; \
                  echo x > /dev/null && echo wrote-null";
    let bundle = engine.bundle("devnode", &["/bin/sh", "-c", script], |spec| {
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/dev/extra-null",
            "type": "bind",
            "source": node,
            "options": ["bind", "rw"],
        }));
    });
    let id = id("devnode");
    assert!(engine.create(&bundle, &id), "{}", engine.output(&id));
    engine.start_and_wait(&id);
    let _ = engine.oci(&["delete", "--force", &id]);
    let output = engine.output(&id);
    assert!(output.contains("wrote-null"), "{output}");
    assert!(!output.contains("wrote-extra"), "{output}");
}
