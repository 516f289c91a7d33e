//! `sandbox run --attest`, `sandbox attest RUN` and `sandbox attest
//! verify`, end to end: a real run's signed statement verifies, names
//! what the run enforced and anchors its audit chain; a flipped byte of
//! the payload or the signature, an edited predicate and another key are
//! each refused.

mod support;

use base64::Engine;
use serde_json::Value;
use support::{assert_ok, Project, Who};

const CLIENT: &str = r#"
import json, os, socket
f = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"])).makefile("rwb", buffering=0)
f.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "fs.read", "params": {"path": "notes.txt"}}).encode() + b"\n")
f.readline()
open("out.txt", "w").write("made by the run\n")
"#;

/// A project, a state directory for its key, and a run of CLIENT with
/// `--attest`, `--audit` and `--report` outside the project.
struct Attested {
    project: Project,
    outside: tempfile::TempDir,
}

impl Attested {
    fn state(&self) -> std::path::PathBuf {
        self.outside.path().join("state")
    }

    fn file(&self, name: &str) -> String {
        self.outside.path().join(name).display().to_string()
    }

    fn sandbox(&self, args: &[&str]) -> std::process::Output {
        self.project
            .command()
            .env("SANDBOX_STATE_DIR", self.state())
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("sandbox starts")
    }

    fn verify(&self, envelope: &str, extra: &[&str]) -> (bool, Value) {
        let mut args = vec!["attest", "verify", envelope, "--json"];
        args.extend_from_slice(extra);
        let out = self.sandbox(&args);
        let value: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
            panic!("no JSON ({err}): {out:?}");
        });
        let ok = value["ok"] == true;
        assert_eq!(out.status.code(), Some(if ok { 0 } else { 1 }), "{value}");
        (ok, value)
    }
}

fn attested(extra: &[&str]) -> Attested {
    let project = Project::new(Who::Root);
    project.write("notes.txt", "hello\n");
    let outside = tempfile::tempdir().unwrap();
    let attested = Attested { project, outside };
    let (envelope, audit, report) = (
        attested.file("run.att"),
        attested.file("audit.jsonl"),
        attested.file("report.json"),
    );
    let mut args = vec![
        "run", "--attest", &envelope, "--audit", &audit, "--report", &report,
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "python3", "-c", CLIENT]);
    let out = attested.sandbox(&args);
    assert_ok(&out, "an attested run");
    attested
}

fn envelope(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

#[test]
fn a_runs_attestation_verifies_and_anchors_its_audit() {
    if !support::require_root_sandbox("a_runs_attestation_verifies") {
        return;
    }
    let run = attested(&[]);
    let (ok, value) = run.verify(&run.file("run.att"), &[]);
    assert!(ok, "{value}");
    let statement = &value["verified"]["statement"];
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    let predicate = &statement["predicate"];
    assert_eq!(predicate["profile"]["name"], "strict");
    assert_eq!(predicate["profile"]["digest_of"], "policy");
    assert_eq!(predicate["command"][0], "python3");
    assert_eq!(predicate["measured"]["no_new_privs"], true, "{predicate}");
    let project = &predicate["project"];
    assert_ne!(
        project["before"]["sha256"], project["after"]["sha256"],
        "the run wrote out.txt: {project}"
    );
    assert_eq!(
        statement["subject"][0]["digest"]["sha256"],
        project["after"]["sha256"]
    );
    // The attestation's audit head is the report's, and anchors the file.
    let report: Value =
        serde_json::from_slice(&std::fs::read(run.file("report.json")).unwrap()).unwrap();
    let head = predicate["audit"]["head"].as_str().expect("an audit head");
    assert_eq!(report["broker"]["audit_head"], head);
    let out = run.sandbox(&["audit", "verify", &run.file("audit.jsonl"), "--head", head]);
    assert_ok(&out, "the audit against the attested head");
    // The key is the user's, private.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(run.state().join("attest/ed25519"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    // The text form.
    let out = run.sandbox(&["attest", "verify", &run.file("run.att")]);
    assert_ok(&out, "verify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("ok: signed by key "), "{text}");
    assert!(text.contains(&format!("audit head: {head}")), "{text}");
}

#[test]
fn a_tampered_attestation_or_another_key_is_refused() {
    if !support::require_root_sandbox("a_tampered_attestation") {
        return;
    }
    let run = attested(&[]);
    let original = envelope(&run.file("run.att"));
    let forged = run.file("forged.att");
    let refused = |changed: &Value| -> String {
        std::fs::write(&forged, serde_json::to_vec(changed).unwrap()).unwrap();
        let (ok, value) = run.verify(&forged, &[]);
        assert!(!ok, "accepted: {value}");
        value["error"].as_str().unwrap().to_owned()
    };

    let payload = b64().decode(original["payload"].as_str().unwrap()).unwrap();
    let mut flipped = payload.clone();
    flipped[40] ^= 0x01;
    let mut changed = original.clone();
    changed["payload"] = b64().encode(&flipped).into();
    let why = refused(&changed);
    assert!(why.contains("does not match the payload"), "{why}");

    let sig = b64()
        .decode(original["signatures"][0]["sig"].as_str().unwrap())
        .unwrap();
    let mut flipped = sig.clone();
    flipped[7] ^= 0x80;
    let mut changed = original.clone();
    changed["signatures"][0]["sig"] = b64().encode(&flipped).into();
    refused(&changed);

    // An edited predicate: a run under `permissive` passed off as `strict`
    // the other way round, re-encoded whole.
    let mut statement: Value = serde_json::from_slice(&payload).unwrap();
    statement["predicate"]["measured"]["no_new_privs"] = false.into();
    let mut changed = original.clone();
    changed["payload"] = b64().encode(serde_json::to_vec(&statement).unwrap()).into();
    refused(&changed);

    // Another user's key: a second state directory makes its own.
    let other = attested(&[]);
    let other_pub = other.state().join("attest/ed25519.pub");
    let (ok, value) = run.verify(
        &run.file("run.att"),
        &["--key", other_pub.to_str().unwrap()],
    );
    assert!(!ok);
    assert!(
        value["error"].as_str().unwrap().contains("another key"),
        "{value}"
    );
    // And with the signer's own public key named, it verifies.
    let own = run.state().join("attest/ed25519.pub");
    assert!(
        run.verify(&run.file("run.att"), &["--key", own.to_str().unwrap()])
            .0
    );
}

#[test]
fn a_kept_review_run_is_attested_with_its_changes() {
    if !support::require_root_sandbox("a_kept_review_run_is_attested") {
        return;
    }
    let run = attested(&["--review"]);
    let report: Value =
        serde_json::from_slice(&std::fs::read(run.file("report.json")).unwrap()).unwrap();
    let id = report["run"]["id"].as_str().expect("a kept run");
    // The run's own attestation names the change as a subject.
    let (ok, value) = run.verify(&run.file("run.att"), &[]);
    assert!(ok, "{value}");
    let names: Vec<&str> = value["verified"]["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.iter().any(|n| n.ends_with("/out.txt")), "{names:?}");
    // Review mode never wrote the project: before and after are one.
    let project = &value["verified"]["statement"]["predicate"]["project"];
    assert_eq!(project["before"], project["after"], "{project}");

    // `sandbox attest RUN` after the fact.
    let later = run.file("later.att");
    let out = run.sandbox(&["attest", id, "--out", &later]);
    assert_ok(&out, "sandbox attest RUN");
    let (ok, value) = run.verify(&later, &[]);
    assert!(ok, "{value}");
    let predicate = &value["verified"]["statement"]["predicate"];
    assert_eq!(predicate["review"]["id"], id);
    assert_eq!(predicate["review"]["changes"][0]["path"], "out.txt");
    assert_eq!(predicate["profile"]["digest_of"], "report.enforced");

    let out = run.sandbox(&["attest", "no-such-run"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// A run made through `sandbox daemon` is attested by the daemon, with a
/// key of its own made on first use in its state directory (0600, the
/// daemon's, beneath a 0700 directory no caller enters), for the run's
/// owner only: root, whom `see_all` lets list the run, gets it answered
/// as a run that does not exist. The statement anchors the head of the
/// daemon's own chain (the relay's reseal of the supervisor's audit
/// lines), which `sandbox audit verify --head` accepts on the run's audit
/// log; `attest verify --key` with the daemon's public key accepts the
/// statement and refuses it with a byte of its payload flipped.
#[test]
fn a_daemon_run_is_attested_with_the_daemons_key_for_its_owner_only() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let test = "a_daemon_run_is_attested_with_the_daemons_key_for_its_owner_only";
    if !support::require(
        test,
        "root (to connect as a second uid)",
        nix::unistd::geteuid().is_root(),
    ) || !support::require(
        test,
        "user namespaces for an unprivileged user",
        support::sandbox_works(Who::User),
    ) || !support::require(test, "curl", support::daemon::have_curl())
        || !support::require(test, "python3", support::commands_exist(&["python3"]))
    {
        return;
    }
    let user = support::TEST_UID;
    let daemon = support::daemon::Daemon::start(&format!(
        "[daemon]\nsocket_mode = \"0666\"\n\
         [[allow]]\nuids = [0]\nsee_all = true\nprojects = [\"{{dir}}\"]\n\
         [[allow]]\nuids = [{user}]\nprofiles = [\"strict\"]\nprojects = [\"{{dir}}/theirs\"]\n"
    ));
    let project = daemon.project("theirs", Some(user));
    let outside = daemon.project("out", Some(user));
    for (name, text) in [("notes.txt", "a note\n"), ("client.py", CLIENT)] {
        std::fs::write(project.join(name), text).unwrap();
        std::os::unix::fs::chown(project.join(name), Some(user), Some(user)).unwrap();
    }
    let body = serde_json::json!({
        "command": ["python3", "client.py"],
        "project": project,
        "wait": true,
    });
    let (code, run) = daemon.json(Some(user), "POST", "/v1/runs", Some(&body.to_string()));
    assert_eq!(code, 200, "{run}\n{}", daemon.log());
    assert_eq!(run["status"], 0, "{run}");
    let id = run["id"].as_str().unwrap();

    // Another caller, root with see_all included, gets nothing signed.
    let (code, answer) = daemon.json(None, "GET", &format!("/v1/runs/{id}/attestation"), None);
    assert_eq!(code, 404, "{answer}");
    assert_eq!(answer["error"]["code"], "no_such_run", "{answer}");
    let key_dir = daemon.state.join("attest");
    assert!(
        !key_dir.exists(),
        "a refused request made no key: {key_dir:?}"
    );

    // The owner, through the command line.
    let statement = outside.join("run.att").display().to_string();
    let public = outside.join("daemon.pub").display().to_string();
    let out = daemon
        .cli_as_user(&outside)
        .args(["attest", id, "--daemon", "-o", &statement])
        .output()
        .unwrap();
    assert_ok(&out, "sandbox attest RUN --daemon");
    let out = daemon
        .cli_as_user(&outside)
        .args(["attest", "key", "--daemon", "-o", &public])
        .output()
        .unwrap();
    assert_ok(&out, "sandbox attest key --daemon");

    // The key: the daemon's, private, made on first use.
    let private = std::fs::metadata(key_dir.join("ed25519")).unwrap();
    assert_eq!(private.permissions().mode() & 0o777, 0o600);
    assert_eq!(private.uid(), 0);
    let dir = std::fs::metadata(&key_dir).unwrap();
    assert_eq!(
        dir.permissions().mode() & 0o077,
        0,
        "{:o}",
        dir.permissions().mode()
    );
    assert_eq!(
        std::fs::read_to_string(&public).unwrap(),
        std::fs::read_to_string(key_dir.join("ed25519.pub")).unwrap()
    );

    let verify = |file: &str| {
        daemon
            .cli_as_user(&outside)
            .args(["attest", "verify", file, "--key", &public, "--json"])
            .output()
            .unwrap()
    };
    let out = verify(&statement);
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["ok"], true, "{value}");
    let predicate = &value["verified"]["statement"]["predicate"];
    assert_eq!(predicate["daemon"]["run"], id, "{predicate}");
    assert_eq!(predicate["daemon"]["uid"], user, "{predicate}");
    assert_eq!(predicate["daemon"]["report_by"], "supervisor");
    let chain = predicate["audit"]["chain"]
        .as_str()
        .expect("an audit chain");
    assert!(chain.starts_with(&format!("daemon-run:{id}:")), "{chain}");
    let head = predicate["audit"]["head"].as_str().unwrap();

    // The head anchors the daemon's own audit log of the run.
    let (code, log) = daemon.curl(Some(user), "GET", &format!("/v1/runs/{id}/audit"), None);
    assert_eq!(code, 200, "{log}");
    let log_file = outside.join("audit.ndjson");
    std::fs::write(&log_file, &log).unwrap();
    let out = daemon
        .cli()
        .args([
            "audit",
            "verify",
            &log_file.display().to_string(),
            "--head",
            head,
        ])
        .output()
        .unwrap();
    assert_ok(&out, "the daemon's audit against the attested head");

    // A flipped byte of the payload is refused.
    let mut envelope = envelope(&statement);
    let mut payload = b64().decode(envelope["payload"].as_str().unwrap()).unwrap();
    let at = payload.len() / 2;
    payload[at] ^= 1;
    envelope["payload"] = Value::String(b64().encode(&payload));
    let tampered = outside.join("tampered.att");
    std::fs::write(&tampered, envelope.to_string()).unwrap();
    std::os::unix::fs::chown(&tampered, Some(user), Some(user)).unwrap();
    let out = verify(&tampered.display().to_string());
    assert_eq!(out.status.code(), Some(1));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["ok"], false, "{value}");
}
