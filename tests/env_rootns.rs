//! `sandbox` started by root inside a user namespace (`unshare -r`, a
//! rootless container's mapped range, bubblewrap), and a setup step that is
//! only cosmetic failing there. Each run must work under `strict`, keep the
//! payload inside the project, and leave what it creates owned by the
//! caller.

mod support;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use support::{assert_ok, require, sandbox_bin};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether `program args` runs and exits 0 here.
fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A world-writable directory on the host with a project inside: the payload
/// may write the project, never its parent.
fn outer_and_project() -> (tempfile::TempDir, std::path::PathBuf) {
    let outer = tempfile::Builder::new()
        .prefix("sandbox-rootns-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let project = outer.path().join("project");
    std::fs::create_dir(&project).expect("project");
    (outer, project)
}

/// The payload's script: write in the project, try to write next to it
/// (below /tmp that lands in the sandbox's private /tmp, so the host side
/// is what is checked) and into /usr, print its own uid map. The marker is
/// quoted apart so that the command line, which the report repeats, never
/// matches it.
fn payload(outer: &Path) -> String {
    format!(
        "cat /proc/self/uid_map; echo made > made; \
         echo x > {outer}/escaped 2>/dev/null; \
         touch /usr/planted-rootns 2>/dev/null && echo PLANT''ED; true",
        outer = outer.display()
    )
}

fn assert_contained(stdout: &str, outer: &Path) {
    assert!(!stdout.contains("PLANTED"), "wrote into /usr");
    assert!(!stdout.contains("ESCAPED"), "wrote next to the project");
    assert!(!outer.join("escaped").exists(), "wrote next to the project");
    assert!(!Path::new("/usr/planted-rootns").exists());
}

#[test]
fn root_in_a_namespace_mapping_only_itself_runs_strict() {
    let test = "root_in_a_namespace_mapping_only_itself_runs_strict";
    if !require(test, "root", is_root())
        || !require(
            test,
            "unshare -r (user namespaces)",
            works("unshare", &["-r", "true"]),
        )
    {
        return;
    }
    let (outer, project) = outer_and_project();
    let out = Command::new("unshare")
        .arg("-r")
        .arg(sandbox_bin())
        .args(["run", "--profile", "strict", "--project"])
        .arg(&project)
        .args(["--", "/bin/sh", "-c", &payload(outer.path())])
        .current_dir(&project)
        .stdin(Stdio::null())
        .output()
        .expect("unshare starts");
    assert_ok(&out, "sandbox under unshare -r");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_contained(&stdout, outer.path());
    // Only root is mapped there: the sandbox runs as the caller's own id,
    // as an unprivileged user's does, and says so.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("runs as the caller's own uid"),
        "stderr: {stderr}"
    );
    let made = std::fs::metadata(project.join("made")).expect("the payload wrote the project");
    assert_eq!((made.uid(), made.gid()), (0, 0), "owned by the caller");
}

/// Start `script` in a new user and mount namespace whose uid and gid maps
/// are `map` (written by this root process, as newuidmap would for a
/// rootless container), and return its output.
fn in_mapped_namespace(map: &str, script: &str, env: &[(&str, &Path)]) -> std::process::Output {
    let mut child = Command::new("unshare")
        .args([
            "--user",
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
        ])
        .arg(format!("read go; {script}"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare starts");
    // `read go` holds the shell until the maps are written; unshare itself
    // created the namespace before exec'ing it, but may still be on its way.
    let proc_dir = format!("/proc/{}", child.id());
    let own_userns = std::fs::read_link("/proc/self/ns/user").expect("own userns");
    support::wait::until_true(
        "unshare to enter its namespace",
        std::time::Duration::from_secs(10),
        || std::fs::read_link(format!("{proc_dir}/ns/user")).ok() != Some(own_userns.clone()),
    );
    for file in ["uid_map", "gid_map"] {
        // One write: a map is accepted once, whole.
        std::fs::write(format!("{proc_dir}/{file}"), map).expect(file);
    }
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("release");
    child.wait_with_output().expect("unshare ends")
}

#[test]
fn root_in_a_wide_range_namespace_runs_as_an_unprivileged_id() {
    let test = "root_in_a_wide_range_namespace_runs_as_an_unprivileged_id";
    if !require(test, "root", is_root())
        || !require(
            test,
            "unshare --user --mount",
            works("unshare", &["--user", "--mount", "true"]),
        )
    {
        return;
    }
    // A tmpfs mounted inside the namespace belongs to it, so the sandbox can
    // idmap it: root mode, with an id from the range. The host's own
    // filesystem belongs to the initial namespace: no idmapping there, so
    // the caller's ids, as for an unprivileged user.
    let (outer, host_project) = outer_and_project();
    let mnt = tempfile::tempdir_in("/tmp").expect("mount point");
    let script = r#"
        mount -t tmpfs tmpfs "$MNT" || exit 90
        mkdir "$MNT/project" && cd "$MNT/project" || exit 91
        "$SANDBOX" run --profile strict --report "$MNT/report.json" -- /bin/sh -c "$PAYLOAD_IN_TMPFS"
        echo "tmpfs-status=$?"
        stat -c 'tmpfs-owner=%u:%g' made
        test -e "$MNT/escaped" && echo ESCAPED
        cat "$MNT/report.json"; echo
        cd "$HOST_PROJECT" || exit 92
        "$SANDBOX" run --profile strict -- /bin/sh -c "$PAYLOAD_ON_HOST"
        echo "host-status=$?"
    "#;
    let payload_in_tmpfs = tempfile::NamedTempFile::new().expect("payload");
    std::fs::write(payload_in_tmpfs.path(), payload(mnt.path())).expect("payload");
    let payload_on_host = tempfile::NamedTempFile::new().expect("payload");
    std::fs::write(payload_on_host.path(), payload(outer.path())).expect("payload");
    let script = script
        .replace(
            "\"$PAYLOAD_IN_TMPFS\"",
            &format!("\"$(cat {})\"", payload_in_tmpfs.path().display()),
        )
        .replace(
            "\"$PAYLOAD_ON_HOST\"",
            &format!("\"$(cat {})\"", payload_on_host.path().display()),
        );
    let out = in_mapped_namespace(
        // Rootless Podman's shape: 0 is the user, then 65536 subordinate ids.
        "0 0 1\n1 100000 65536\n",
        &script,
        &[
            ("MNT", mnt.path()),
            ("SANDBOX", Path::new(sandbox_bin())),
            ("HOST_PROJECT", &host_project),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("tmpfs-status=0"), "{what}");
    assert!(stdout.contains("host-status=0"), "{what}");
    // On the tmpfs the payload ran as the top id of the range, never root...
    let maps: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 3 && f[0] == "0")
        .collect();
    assert_eq!(maps.first(), Some(&vec!["0", "65536", "1"]), "{what}");
    let report_start = stdout.find('{').expect("report");
    let report_end = stdout.rfind('}').expect("report");
    let report: serde_json::Value =
        serde_json::from_str(&stdout[report_start..=report_end]).expect("report JSON");
    assert_eq!(report["enforced"]["user"]["host_uid"], 65536, "{what}");
    // ...and what it wrote is owned by the caller, through the idmapping.
    assert!(stdout.contains("tmpfs-owner=0:0"), "{what}");
    // On the host's filesystem it ran as the caller's own id and said why.
    assert_eq!(maps.get(1), Some(&vec!["0", "0", "1"]), "{what}");
    assert!(stderr.contains("cannot be idmapped"), "{what}");
    let made = std::fs::metadata(host_project.join("made")).expect("the payload wrote");
    assert_eq!((made.uid(), made.gid()), (0, 0), "owned by the caller");
    assert_contained(&stdout, outer.path());
}

/// A classic BPF program that makes sethostname fail with EPERM, as a
/// container engine's default seccomp profile does, and allows the rest.
fn deny_sethostname_filter() -> Option<Vec<u8>> {
    let nr: u32 = if cfg!(target_arch = "x86_64") {
        170
    } else if cfg!(target_arch = "aarch64") {
        161
    } else {
        return None;
    };
    const LOAD_NR: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS, offset 0: the syscall number
    const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET: u16 = 0x06; // BPF_RET | BPF_K
    let program: [(u16, u8, u8, u32); 4] = [
        (LOAD_NR, 0, 0, 0),
        (JEQ, 0, 1, nr),
        (RET, 0, 0, 0x0005_0000 | 1), // SECCOMP_RET_ERRNO | EPERM
        (RET, 0, 0, 0x7fff_0000),     // SECCOMP_RET_ALLOW
    ];
    let mut bytes = Vec::new();
    for (code, jt, jf, k) in program {
        bytes.extend_from_slice(&code.to_ne_bytes());
        bytes.push(jt);
        bytes.push(jf);
        bytes.extend_from_slice(&k.to_ne_bytes());
    }
    Some(bytes)
}

#[test]
fn a_denied_hostname_warns_and_the_run_goes_on_inside_bubblewrap() {
    let test = "a_denied_hostname_warns_and_the_run_goes_on_inside_bubblewrap";
    let Some(filter) = deny_sethostname_filter() else {
        require(test, "a sethostname number for this architecture", false);
        return;
    };
    if !require(
        test,
        "bubblewrap with a user namespace",
        works(
            "bwrap",
            &["--unshare-user", "--dev-bind", "/", "/", "--", "true"],
        ),
    ) {
        return;
    }
    let (outer, project) = outer_and_project();
    std::fs::set_permissions(&project, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let filter_file = tempfile::NamedTempFile::new().expect("filter");
    std::fs::write(filter_file.path(), filter).expect("filter");
    // bubblewrap as it runs in CI: its own user namespace (root inside, one
    // id mapped) and a seccomp filter that denies sethostname.
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"exec bwrap --unshare-user --uid 0 --gid 0 --dev-bind / / --seccomp 9 -- "$0" run --profile strict --project "$1" -- /bin/sh -c "$2" 9< "$3""#)
        .arg(sandbox_bin())
        .arg(&project)
        .arg(format!("{}; hostname > host-name-inside", payload(outer.path())))
        .arg(filter_file.path())
        .current_dir(&project)
        .stdin(Stdio::null())
        .output()
        .expect("bwrap starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !nix::unistd::geteuid().is_root() {
        // bwrap started by a regular user makes "root" of a namespace that
        // maps only that user, with every capability dropped: no child user
        // namespace can map it (see the CAP_SETFCAP test below), and strict
        // says so before anything starts.
        assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
        assert!(stderr.contains("CAP_SETFCAP"), "stderr: {stderr}");
        assert!(!project.join("made").exists());
        return;
    }
    assert_ok(&out, "sandbox inside bubblewrap with sethostname denied");
    assert!(
        stderr.contains("setting the hostname was skipped (Operation not permitted)"),
        "stderr: {stderr}"
    );
    assert_contained(&String::from_utf8_lossy(&out.stdout), outer.path());
    assert!(project.join("made").exists());
    assert!(project.join("host-name-inside").exists());
}

/// Root of a user namespace without CAP_SETFCAP (bubblewrap's `--uid 0` for
/// a regular user, `setpriv --bounding-set=-all`) cannot map its uid 0 into
/// a child namespace (Linux 5.12+). Known before clone: strict refuses
/// naming it, standard runs without namespaces, confined.
#[test]
fn root_without_cap_setfcap_refuses_strict_and_runs_standard_without_namespaces() {
    let test = "root_without_cap_setfcap_refuses_strict_and_runs_standard_without_namespaces";
    if !require(
        test,
        "unshare -r with setpriv",
        works(
            "unshare",
            &[
                "-r",
                "setpriv",
                "--bounding-set=-all",
                "--inh-caps=-all",
                "--",
                "true",
            ],
        ),
    ) {
        return;
    }
    let (outer, project) = outer_and_project();
    let run = |profile: &str| {
        Command::new("unshare")
            .args([
                "-r",
                "setpriv",
                "--bounding-set=-all",
                "--inh-caps=-all",
                "--",
            ])
            .arg(sandbox_bin())
            .args(["run", "-q", "--profile", profile, "--json", "--project"])
            .arg(&project)
            .args(["--", "/bin/sh", "-c"])
            .arg(payload(outer.path()))
            .current_dir(&project)
            .stdin(Stdio::null())
            .output()
            .expect("unshare starts")
    };
    let strict = run("strict");
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(125), "stderr: {stderr}");
    assert!(
        stderr.contains("CAP_SETFCAP") && stderr.contains("best-effort"),
        "stderr: {stderr}"
    );
    assert!(!project.join("made").exists());

    let standard = run("standard");
    let stderr = String::from_utf8_lossy(&standard.stderr);
    assert_ok(&standard, "standard without CAP_SETFCAP");
    assert!(
        stderr.contains("\"namespaces\":\"none\""),
        "stderr: {stderr}"
    );
    assert_contained(&String::from_utf8_lossy(&standard.stdout), outer.path());
    assert!(project.join("made").exists());
}
