//! Refusals in environments that take user namespaces away, run for real:
//! the message names the step, the cause and the fix, and `doctor` prints
//! the very same message and exits 1.
//!
//! AppArmor, Docker's and Kubernetes' messages are checked in
//! `environment`'s unit tests against faked trees (this machine has none of
//! them); what the kernel lets us build here runs here.
mod support;

use std::process::{Command, Output, Stdio};

use support::{require, sandbox_bin, sandbox_works, Project, Who};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `sandbox: ...` refusal line of `run` (warnings are other lines).
fn refusal_line(out: &Output) -> String {
    stderr(out)
        .lines()
        .find(|l| l.starts_with("sandbox: ") && !l.starts_with("sandbox: warning:"))
        .unwrap_or_else(|| panic!("no refusal on stderr: {}", stderr(out)))
        .to_owned()
}

/// doctor's line for the default profile.
fn doctor_strict_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.trim_start().starts_with("strict (default): "))
        .unwrap_or_else(|| panic!("no strict line: {}", String::from_utf8_lossy(&out.stdout)))
        .trim_start()
        .to_owned()
}

/// Run `script` as root of a fresh child user namespace (`unshare -Ur`).
fn in_child_userns(project: &Project, script: &str) -> Option<Output> {
    let out = Command::new("unshare")
        .args(["-Ur", "sh", "-c", script])
        .current_dir(project.path())
        .env("SANDBOX", sandbox_bin())
        .stdin(Stdio::null())
        .output()
        .ok()?;
    Some(out)
}

#[test]
fn no_user_namespaces_left_names_the_sysctl_and_the_namespace_free_profile() {
    let test = "no_user_namespaces_left";
    if !require(test, "a sandbox as root", sandbox_works(Who::Root)) {
        return;
    }
    let project = Project::new(Who::Root);
    let probe = in_child_userns(&project, "echo 0 > /proc/sys/user/max_user_namespaces");
    if !require(
        test,
        "unshare -Ur with a writable user.max_user_namespaces",
        probe.is_some_and(|o| o.status.success()),
    ) {
        return;
    }
    let run = in_child_userns(
        &project,
        "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$SANDBOX\" run --profile strict -- /bin/true",
    )
    .expect("unshare runs");
    assert_eq!(run.status.code(), Some(125), "{}", stderr(&run));
    let line = refusal_line(&run);
    assert!(
        line.starts_with("sandbox: cannot create the sandbox's namespaces (clone: ENOSPC"),
        "{line}"
    );
    assert!(
        line.contains("; cause: user.max_user_namespaces is 0 in this user namespace; fix: `sysctl -w user.max_user_namespaces=15000`"),
        "{line}"
    );
    assert!(line.contains("enforce.userns is \"best-effort\""), "{line}");

    let doctor = in_child_userns(
        &project,
        "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$SANDBOX\" doctor",
    )
    .expect("unshare runs");
    assert_eq!(doctor.status.code(), Some(1), "{}", stderr(&doctor));
    // The pid in nothing, the errno and the whole fix: the same line.
    assert_eq!(
        doctor_strict_line(&doctor),
        format!("strict (default): cannot run (exit 125): {line}")
    );
}

#[test]
fn nested_strict_names_the_outer_sandbox_and_the_fix() {
    let test = "nested_strict";
    let who = if sandbox_works(Who::Root) {
        Who::Root
    } else {
        Who::User
    };
    if !require(test, "a working sandbox", sandbox_works(who)) {
        return;
    }
    let project = Project::new(who);
    let bin = match who {
        Who::User if nix::unistd::geteuid().is_root() => support::binary_for_test_user(),
        _ => std::path::PathBuf::from(sandbox_bin()),
    };
    let bin = bin.to_str().expect("UTF-8 binary path");
    let run = project.run_with(
        &["--profile", "strict", "--allow-read", bin],
        &[bin, "run", "--profile", "strict", "--", "/bin/true"],
    );
    assert_eq!(run.status.code(), Some(125), "{}", stderr(&run));
    let line = refusal_line(&run);
    assert!(
        line.starts_with("sandbox: cannot create the sandbox's namespaces (clone: EPERM"),
        "{line}"
    );
    assert!(
        line.contains("cause: this runs inside another sandbox, whose seccomp filter forbids new user namespaces"),
        "{line}"
    );
    assert!(
        line.contains(
            "fix: run the inner sandbox with a profile whose enforce.userns is \"best-effort\""
        ),
        "{line}"
    );

    // doctor inside says the same, from its own dry run.
    let doctor = project.run_with(
        &["--profile", "strict", "--allow-read", bin],
        &[bin, "doctor"],
    );
    assert_eq!(doctor.status.code(), Some(1), "{}", stderr(&doctor));
    assert_eq!(
        doctor_strict_line(&doctor),
        format!("strict (default): cannot run (exit 125): {line}")
    );
}
