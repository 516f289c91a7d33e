//! Ubuntu 23.10+ and GitHub's ubuntu-24.04 runners, simulated for real.
//! There `kernel.apparmor_restrict_unprivileged_userns=1` lets an
//! unconfined, unprivileged process create a user namespace but gives it no
//! capabilities in it, so the first mount inside is refused.
//!
//! The simulation, on a machine without AppArmor:
//! - the refusal: `seccomp_wrap.py nocaps`, a filter sandbox inherits, lets
//!   clone and unshare with namespace flags through and answers every mount
//!   call and pivot_root with EPERM, as the missing capability does;
//! - the sysctl: this kernel has no such file, so the test replaces
//!   /proc/sys/kernel, in a private mount namespace of its own (root's
//!   `unshare --mount`), by a copy of itself that also holds
//!   `apparmor_restrict_unprivileged_userns` = 1; nothing outside that
//!   namespace sees it. sandbox reads the real path: no test hook. (A mount
//!   below /proc also counts as a masked /proc, for the kernel and for
//!   sandbox: the AppArmor decision must come first and the messages must
//!   name it, which the test checks.)
//! - that no user namespace was attempted: `seccomp_wrap.py nouserns` kills
//!   sandbox with SIGSYS at any clone or unshare with CLONE_NEWUSER.
//!
//! The supervisor runs as an unprivileged user (the restriction spares
//! CAP_SYS_ADMIN).

mod support;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::{Project, Who};

/// What the command prints about itself: its confinement, its blocked
/// signals and its descriptors (to compare with a run that never tried
/// namespaces: nothing of a failed attempt may reach the payload).
const SELF_VIEW: &str =
    "grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters|CapEff|SigBlk):' /proc/self/status; \
    echo fds $(ls /proc/self/fd | tr '\\n' ' '); \
    (cat /etc/shadow >/dev/null 2>&1 && echo shadow-readable) || echo shadow-blocked";

/// Drops root for the unprivileged test user inside the mount namespace,
/// after the bind mount that needs root.
const DROP_ROOT: &str = "import os, sys\n\
    uid, gid = int(sys.argv[1]), int(sys.argv[2])\n\
    os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)\n\
    os.execvp(sys.argv[3], sys.argv[3:])\n";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `python3 seccomp_wrap.py MODE -- ...` for each mode (the first
/// outermost), then `sandbox ARGS`.
fn chain(project: &Project, modes: &[&str], args: &[&str]) -> Vec<OsString> {
    let mut argv: Vec<OsString> = Vec::new();
    for mode in modes {
        argv.extend(["python3", support::seccomp_wrapper(), mode, "--"].map(OsString::from));
    }
    argv.push(project.command().get_program().to_owned());
    argv.extend(args.iter().map(OsString::from));
    argv
}

/// `sandbox ARGS` run by the project's identity under the wrappers; with
/// `sysctls`, that directory is /proc/sys/kernel for it (see the module).
fn run(project: &Project, sysctls: Option<&Path>, modes: &[&str], args: &[&str]) -> Output {
    let argv = chain(project, modes, args);
    let as_root = nix::unistd::geteuid().is_root();
    let (uid, gid) = support::user_ids();
    let mut cmd = match sysctls {
        Some(dir) => {
            let mut cmd = Command::new("unshare");
            cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(
                    "mount --bind \"$0\" /proc/sys/kernel && \
                     exec python3 -c \"$DROP_ROOT\" \"$@\"",
                )
                .arg(dir)
                .arg(uid.to_string())
                .arg(gid.to_string())
                .args(&argv)
                .env("DROP_ROOT", DROP_ROOT);
            cmd
        }
        None => {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            if as_root {
                std::os::unix::process::CommandExt::uid(&mut cmd, uid);
                std::os::unix::process::CommandExt::gid(&mut cmd, gid);
            }
            cmd
        }
    };
    cmd.current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .expect("the wrappers start")
}

/// A copy of /proc/sys/kernel's readable files, plus the restriction on.
fn ubuntu_sysctls() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    for entry in std::fs::read_dir("/proc/sys/kernel")
        .expect("/proc/sys/kernel")
        .flatten()
    {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            if let Ok(value) = std::fs::read(entry.path()) {
                std::fs::write(dir.path().join(entry.file_name()), value).expect("copy");
            }
        }
    }
    std::fs::write(
        dir.path().join("apparmor_restrict_unprivileged_userns"),
        "1\n",
    )
    .expect("write");
    let readable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(dir.path(), readable).expect("chmod");
    dir
}

fn usable(test: &str) -> bool {
    support::require(test, "python3", Path::new("/usr/bin/python3").exists())
        && support::require(
            test,
            "user namespaces for an unprivileged user",
            support::sandbox_works(Who::User),
        )
}

fn report_of(stderr: &str, what: &str) -> Value {
    support::json_report(stderr, what)
}

/// The payload ran confined: no privilege, its filter on top of the
/// wrappers', files outside its view unreadable.
fn assert_confined(stdout: &str, report: &Value) {
    assert!(stdout.contains("NoNewPrivs:\t1"), "{stdout}");
    assert!(stdout.contains("CapEff:\t0000000000000000"), "{stdout}");
    assert!(stdout.contains("shadow-blocked"), "{stdout}");
    let enforced = &report["enforced"];
    assert_eq!(enforced["isolation"]["namespaces"], "none", "{report}");
    assert_eq!(enforced["isolation"]["view"], "landlock-only", "{report}");
    assert_eq!(enforced["landlock"]["status"], "fully-enforced", "{report}");
    assert_eq!(enforced["seccomp"]["status"], "installed", "{report}");
    assert_eq!(
        report["measured"]["namespaces"]["user"], "shared",
        "{report}"
    );
}

/// The lines of the payload's view that a failed attempt could change.
fn leak_view(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("SigBlk:") || l.starts_with("fds "))
        .collect()
}

#[test]
fn standard_falls_back_when_the_namespace_is_made_but_mounting_in_it_is_refused() {
    let test = "standard_falls_back_when_the_namespace_is_made_but_mounting_in_it_is_refused";
    if !usable(test) {
        return;
    }
    let project = Project::new(Who::User);
    let out = run(
        &project,
        None,
        &["nocaps"],
        &[
            "run",
            "--profile",
            "standard",
            "--json",
            "-v",
            "--",
            "/bin/sh",
            "-c",
            SELF_VIEW,
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report = report_of(&stderr, "standard");
    assert_confined(&stdout, &report);
    // The user namespace was made, the first step in it that needs its
    // capabilities refused (init creating the network, IPC and UTS
    // namespaces), then the run fell back.
    assert!(
        stderr.contains("cloned init") && stderr.contains("new namespaces: user mount pid"),
        "{stderr}"
    );
    assert!(
        stderr.contains("failed entering new network, IPC and UTS namespaces"),
        "{stderr}"
    );
    let reason = report["enforced"]["isolation"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("a user namespace was created, but entering new network, IPC and UTS namespaces in it was refused (EPERM")
            && reason.contains("seccomp filter on this process"),
        "{reason}"
    );
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("sandbox: warning: running without namespaces"))
            .count(),
        1,
        "one warning: {stderr}"
    );

    // Nothing of the failed attempt reaches the payload: its descriptors and
    // blocked signals are those of a run that never tried namespaces.
    let never_tried = run(
        &project,
        None,
        &["nocaps"],
        &[
            "run",
            "--profile",
            project
                .write(
                    "off.toml",
                    "version = 1\nextends = \"standard\"\n[enforce]\nuserns = \"off\"\n",
                )
                .to_str()
                .expect("UTF-8"),
            "--",
            "/bin/sh",
            "-c",
            SELF_VIEW,
        ],
    );
    let plain = text(&never_tried.stdout);
    assert_eq!(
        never_tried.status.code(),
        Some(0),
        "{plain}\n{}",
        text(&never_tried.stderr)
    );
    assert_eq!(leak_view(&stdout), leak_view(&plain));
    assert_eq!(leak_view(&stdout).len(), 2, "{stdout}");

    // strict needs the namespaces: refused, naming the filter and fixes
    // that work here (standard, which just ran).
    let out = run(
        &project,
        None,
        &["nocaps"],
        &[
            "run",
            "--profile",
            "strict",
            "--",
            "/bin/sh",
            "-c",
            "echo ran > ran",
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(!project.path().join("ran").exists());
    assert!(
        err.contains("entering new network, IPC and UTS namespaces"),
        "{err}"
    );
    let fix = err
        .split("fix:")
        .nth(1)
        .unwrap_or_else(|| panic!("no fix: {err}"));
    assert!(
        err.contains("cause: a seccomp filter on this process"),
        "{err}"
    );
    assert!(fix.contains("--profile standard"), "{err}");
    for wrong in ["docker", "--security-opt", "unprivileged_userns_clone"] {
        assert!(!fix.contains(wrong), "{wrong} in {err}");
    }
}

#[test]
fn where_apparmor_withholds_namespaces_none_is_attempted() {
    let test = "where_apparmor_withholds_namespaces_none_is_attempted";
    if !usable(test)
        || !support::require(
            test,
            "root (to bind a copy of /proc/sys/kernel in a mount namespace)",
            nix::unistd::geteuid().is_root(),
        )
        || !support::require(test, "unshare", support::commands_exist(&["unshare"]))
    {
        return;
    }
    let project = Project::new(Who::User);
    let sysctls = ubuntu_sysctls();

    // The witness works: without the sysctl, strict tries a user namespace
    // and is killed for it.
    let out = run(
        &project,
        None,
        &["nouserns"],
        &["run", "--profile", "strict", "--", "/bin/true"],
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSYS),
        "{}",
        text(&out.stderr)
    );

    let out = run(
        &project,
        Some(sysctls.path()),
        &["nocaps", "nouserns"],
        &[
            "run",
            "--profile",
            "standard",
            "--json",
            "-v",
            "--",
            "/bin/sh",
            "-c",
            SELF_VIEW,
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report = report_of(&stderr, "standard");
    assert_confined(&stdout, &report);
    assert!(
        stderr.contains("no user namespace attempted: AppArmor restricts"),
        "{stderr}"
    );
    assert!(!stderr.contains("failed making"), "{stderr}");
    let reason = report["enforced"]["isolation"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("AppArmor restricts unprivileged user namespaces")
            && reason.contains("label is `unconfined`"),
        "{reason}"
    );

    let out = run(
        &project,
        Some(sysctls.path()),
        &["nocaps", "nouserns"],
        &[
            "run",
            "--profile",
            "strict",
            "--",
            "/bin/sh",
            "-c",
            "echo ran > ran",
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(!project.path().join("ran").exists());
    assert!(
        err.contains("userns is required by the profile but a new user namespace would get no capabilities here, so none was created"),
        "{err}"
    );
    assert!(err.contains("cause: AppArmor restricts"), "{err}");
    let fix = err
        .split("fix:")
        .nth(1)
        .unwrap_or_else(|| panic!("no fix: {err}"));
    for want in [
        "packaging/apparmor/sandbox",
        "apparmor_parser -r /etc/apparmor.d/sandbox",
        "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        // This kernel's Landlock carries a run without namespaces, and
        // standard just ran here.
        "--profile standard",
    ] {
        assert!(fix.contains(want), "want {want} in {err}");
    }
    for wrong in ["systempaths", "seccomp=unconfined", "docker", "masked"] {
        assert!(!err.contains(wrong), "{wrong} in {err}");
    }

    // doctor's unshare probe succeeds here, as on Ubuntu (so no `nouserns`
    // filter: it would kill the probe); doctor still reports user
    // namespaces missing, and its dry runs agree with the runs above.
    let out = run(&project, Some(sysctls.path()), &["nocaps"], &["doctor"]);
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(
        said.contains("missing  user namespaces: AppArmor restricts"),
        "{said}"
    );
    assert!(
        said.contains("strict (default): cannot run (exit 125)"),
        "{said}"
    );
    assert!(said.contains("standard: can run"), "{said}");
}
