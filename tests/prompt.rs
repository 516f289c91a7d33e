//! Asking a person: the question appears on the supervisor's terminal, an
//! "always" answer becomes a stored grant that later runs use without a
//! terminal, revoking it restores the denial, and no answer means deny.

mod support;

use support::{Project, Who};

/// Runs argv[2:] on a new pty. Once the broker's question appears (input
/// typed earlier would be flushed), argv[1] says what the person does:
/// "wait" (never answers), "term" (SIGTERM to the supervisor), or an answer
/// typed with the code the question shows. Prints what was shown, the exit
/// code, whether it was asked, and the seconds from the question to the end.
const DRIVER: &str = r#"
import os, pty, re, signal, sys, time
answer, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
seen, asked_at = b"", None
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
    asked = re.search(rb"the code (\d{4}) \(anything else denies\): ", seen)
    if asked_at is None and asked:
        asked_at = time.monotonic()
        if answer == "term":
            os.kill(pid, signal.SIGTERM)
        elif answer != "wait":
            os.write(fd, (answer + " " + asked.group(1).decode() if answer else "").encode() + b"\n")
_, status = os.waitpid(pid, 0)
waited = time.monotonic() - asked_at if asked_at else -1
sys.stdout.write(seen.decode(errors="replace"))
print("\nEXIT", os.waitstatus_to_exitcode(status), "ASKED", asked_at is not None, "WAITED", int(waited))
"#;

const WRITE: &str = r#"sandbox ipc fs.write '{"path": "approved.txt", "content": "yes"}'"#;

fn drive(project: &Project, state: &std::path::Path, answer: &str) -> String {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(answer)
        .args([support::sandbox_bin(), "run", "--", "/bin/sh", "-c", WRITE])
        .current_dir(project.path())
        .env("SANDBOX_STATE_DIR", state)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_always_answer_becomes_a_grant_that_can_be_revoked() {
    if !support::require_root_sandbox("prompt") {
        return;
    }
    let project = Project::new(Who::Root);
    let state = tempfile::tempdir().unwrap();
    let shown = drive(&project, state.path(), "a");
    assert!(
        shown.contains("sandbox: command:/bin/sh wants fs.write approved.txt"),
        "{shown}"
    );
    assert!(shown.contains("EXIT 0 ASKED True WAITED"), "{shown}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("approved.txt")).unwrap(),
        "yes"
    );

    let grants = |args: &[&str]| {
        std::process::Command::new(support::sandbox_bin())
            .arg("grants")
            .args(args)
            .env("SANDBOX_STATE_DIR", state.path())
            .output()
            .unwrap()
    };
    let listed = String::from_utf8_lossy(&grants(&["list"]).stdout).into_owned();
    assert!(
        listed.contains("1  Allow fs.write command:/bin/sh"),
        "{listed}"
    );

    // Without a terminal, the stored grant decides.
    std::fs::remove_file(project.path().join("approved.txt")).unwrap();
    let run = |project: &Project| {
        project
            .command()
            .env("SANDBOX_STATE_DIR", state.path())
            .args([
                "run",
                "--audit",
                "audit.jsonl",
                "--",
                "/bin/sh",
                "-c",
                WRITE,
            ])
            .output()
            .unwrap()
    };
    let out = run(&project);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let audit = std::fs::read_to_string(project.path().join("audit.jsonl")).unwrap();
    assert!(audit.contains("\"rule\":\"grant #1\""), "{audit}");

    assert!(grants(&["revoke", "1"]).status.success());
    std::fs::remove_file(project.path().join("approved.txt")).unwrap();
    let out = run(&project);
    assert_eq!(
        out.status.code(),
        Some(1),
        "denied again after the revocation"
    );
    assert!(!project.path().join("approved.txt").exists());
}

#[test]
fn no_answer_is_a_deny() {
    if !support::require_root_sandbox("prompt") {
        return;
    }
    let project = Project::new(Who::Root);
    let state = tempfile::tempdir().unwrap();
    let shown = drive(&project, state.path(), "");
    assert!(shown.contains("ASKED True"), "{shown}");
    assert!(
        shown.contains("fs.write is denied by denied by a person") || shown.contains("denied"),
        "{shown}"
    );
    assert!(!project.path().join("approved.txt").exists());
    assert!(!state.path().join("grants.json").exists(), "nothing stored");
}

/// A question blocks the supervision loop while it waits, so it must give
/// way to the run's timeout and to a signal: a payload that makes the
/// supervisor ask must not buy itself the prompt's 60 seconds.
#[test]
fn a_question_gives_way_to_the_timeout_and_to_sigterm() {
    if !support::require_root_sandbox("prompt") {
        return;
    }
    for mode in ["wait", "term"] {
        let project = Project::new(Who::Root);
        let state = tempfile::tempdir().unwrap();
        let script = format!("{WRITE}; sleep 100");
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(DRIVER)
            .arg(mode)
            .args([support::sandbox_bin(), "run", "--timeout", "2s", "--"])
            .args(["/bin/sh", "-c", &script])
            .current_dir(project.path())
            .env("SANDBOX_STATE_DIR", state.path())
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(shown.contains("ASKED True"), "{mode}: {shown}");
        let waited: u64 = shown
            .rsplit("WAITED ")
            .next()
            .and_then(|w| w.trim().parse().ok())
            .unwrap_or(u64::MAX);
        // The prompt alone would wait 60 s; the timeout (2 s, then 2 s of
        // grace) or the signal must end it long before.
        assert!(waited < 30, "{mode}: the question held the run: {shown}");
        assert!(!project.path().join("approved.txt").exists(), "{mode}");
    }
}

/// A grant store the payload can write is a store it can plant grants in
/// for a later run: it is not used, and the run says why.
#[test]
fn a_grant_store_inside_the_project_is_not_trusted() {
    if !support::require_root_sandbox("prompt") {
        return;
    }
    let project = Project::new(Who::Root);
    let state = tempfile::tempdir().unwrap();
    // A real "always" grant for this program and target, made outside...
    let shown = drive(&project, state.path(), "a");
    assert!(shown.contains("EXIT 0 ASKED True WAITED"), "{shown}");
    std::fs::remove_file(project.path().join("approved.txt")).unwrap();
    // ...then found inside the project, where a payload could have put it.
    let planted = project.path().join(".state");
    std::fs::create_dir(&planted).unwrap();
    std::fs::copy(
        state.path().join("grants.json"),
        planted.join("grants.json"),
    )
    .unwrap();
    let out = project
        .command()
        .args(["run", "--non-interactive", "--", "/bin/sh", "-c", WRITE])
        .env("SANDBOX_STATE_DIR", &planted)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stored grants are not used") && stderr.contains("SANDBOX_STATE_DIR"),
        "{stderr}"
    );
    assert!(!project.path().join("approved.txt").exists(), "{stderr}");
    // The same store outside the project is used.
    let out = project
        .command()
        .args(["run", "--non-interactive", "--", "/bin/sh", "-c", WRITE])
        .env("SANDBOX_STATE_DIR", state.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(project.path().join("approved.txt").exists());
}
