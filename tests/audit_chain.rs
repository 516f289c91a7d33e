//! The audit's hash chain, end to end: real runs write an audit file
//! through the broker, `sandbox audit verify` accepts it, and each way of
//! tampering with it (an edited field, a removed line, two lines swapped,
//! a forged line, a cut end against the report's anchor) is refused and
//! named.

mod support;

use std::process::Output;

use serde_json::Value;
use support::{assert_ok, Project, Who};

/// Sends N fs.read requests over the broker's channel, one answer each.
const CLIENT: &str = r#"
import json, os, socket, sys
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
f = s.makefile("rwb", buffering=0)
for i in range(int(sys.argv[1])):
    f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "fs.read",
                        "params": {"path": "notes.txt"}}).encode() + b"\n")
    f.readline()
"#;

/// A project whose audit file holds `runs` chains of `requests` lines
/// each, written by real runs; the report of the last run.
fn audited(requests: u32, runs: u32) -> (Project, Value) {
    let project = Project::new(Who::Root);
    project.write("notes.txt", "hello\n");
    let mut report = Value::Null;
    for _ in 0..runs {
        let out = project.run_with(
            &["--audit", "audit.jsonl", "--json"],
            &["python3", "-c", CLIENT, &requests.to_string()],
        );
        assert_ok(&out, "an audited run");
        report = support::json_report(&String::from_utf8_lossy(&out.stderr), "audited run");
    }
    (project, report)
}

fn verify(project: &Project, extra: &[&str]) -> Output {
    project
        .command()
        .args(["audit", "verify", "audit.jsonl"])
        .args(extra)
        .output()
        .expect("sandbox starts")
}

/// The verdict as JSON, asserting the exit status matches it.
fn verdict(project: &Project, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let out = verify(project, &args);
    let value: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "verify --json printed no JSON ({err}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let ok = value["ok"].as_bool().expect("ok is a boolean");
    assert_eq!(out.status.code(), Some(if ok { 0 } else { 1 }), "{value}");
    value
}

fn lines(project: &Project) -> Vec<String> {
    std::fs::read_to_string(project.path().join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn rewrite(project: &Project, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(project.path().join("audit.jsonl"), text).unwrap();
}

/// The refusal's problem kind and the file line it names.
fn refusal(value: &Value) -> (String, Option<u64>) {
    assert_eq!(value["ok"], false, "expected a refusal: {value}");
    (
        value["broken"]["problem"]["kind"]
            .as_str()
            .unwrap()
            .to_owned(),
        value["broken"]["line"].as_u64(),
    )
}

#[test]
fn a_real_runs_audit_verifies_and_its_report_anchors_the_head() {
    if !support::require_root_sandbox("a_real_runs_audit_verifies") {
        return;
    }
    let (project, report) = audited(4, 1);
    let all = lines(&project);
    assert_eq!(all.len(), 4, "{all:?}");
    // Readers of the lines before the chain still find every field.
    let first: Value = serde_json::from_str(&all[0]).unwrap();
    assert_eq!(first["method"], "fs.read");
    assert_eq!(first["decision"], "allow");
    assert_eq!(first["seq"], 1);
    let head = report["broker"]["audit_head"].as_str().expect("the anchor");
    assert_eq!(report["broker"]["audit_chain"], first["chain"]);

    let value = verdict(&project, &["--head", head]);
    assert_eq!(value["ok"], true, "{value}");
    assert_eq!(value["verified"]["lines"], 4);
    assert_eq!(value["verified"]["chains"][0]["head"], head);
    assert_eq!(value["verified"]["anchored"], true);
    let out = verify(&project, &[]);
    assert_ok(&out, "verify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("ok: 4 line(s) in 1 chain(s)"), "{text}");
    assert!(text.contains(head), "{text}");

    // The cut end: a whole chain without the anchor, refused with it.
    rewrite(&project, &all[..3]);
    assert_eq!(verdict(&project, &[])["ok"], true, "undetectable alone");
    let (kind, _) = refusal(&verdict(&project, &["--head", head]));
    assert_eq!(kind, "head_not_found");
}

#[test]
fn every_way_of_tampering_with_a_real_audit_is_refused() {
    if !support::require_root_sandbox("every_way_of_tampering") {
        return;
    }
    // Two runs appending to one file: two chains, interleaving allowed.
    let (project, _) = audited(4, 2);
    let original = lines(&project);
    assert_eq!(original.len(), 8);
    assert_eq!(
        verdict(&project, &[])["verified"]["chains"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // An edited field: a denial made to read as allowed.
    let mut edited = original.clone();
    let mut line: Value = serde_json::from_str(&edited[1]).unwrap();
    line["decision"] = "deny".into();
    edited[1] = line.to_string();
    rewrite(&project, &edited);
    let value = verdict(&project, &[]);
    assert_eq!(refusal(&value), ("mismatch".to_owned(), Some(3)), "{value}");
    assert_eq!(value["broken"]["problem"]["previous_line"], 2);
    let out = verify(&project, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("line 3:") && text.contains("edited"),
        "the text names the line and why: {text}"
    );

    // A removed line.
    let mut removed = original.clone();
    removed.remove(1);
    rewrite(&project, &removed);
    let value = verdict(&project, &[]);
    assert_eq!(refusal(&value), ("gap".to_owned(), Some(2)), "{value}");

    // Two lines swapped.
    let mut swapped = original.clone();
    swapped.swap(1, 2);
    rewrite(&project, &swapped);
    let value = verdict(&project, &[]);
    assert_eq!(refusal(&value), ("gap".to_owned(), Some(2)), "{value}");

    // A forged line without the seal, between two real ones.
    let mut forged = original.clone();
    forged.insert(
        2,
        r#"{"time":1,"run":"x","caller":"command:sh","method":"fs.read","target":"notes.txt","decision":"allow","rule":"forged","duration_us":1}"#.to_owned(),
    );
    rewrite(&project, &forged);
    assert_eq!(
        refusal(&verdict(&project, &[])),
        ("not_chained".to_owned(), Some(3))
    );

    // A forged line copying the seal of the line it follows (seq and
    // prev a real line's successor would carry): the real successor is
    // then refused, the forged line's hash being another.
    let mut sealed = original.clone();
    let mut copy: Value = serde_json::from_str(&sealed[2]).unwrap();
    copy["rule"] = "forged".into();
    sealed.insert(2, copy.to_string());
    rewrite(&project, &sealed);
    let (kind, line) = refusal(&verdict(&project, &[]));
    assert_eq!((kind.as_str(), line), ("backwards", Some(4)));

    // A line repeated (a replay) and the first line removed.
    let mut replayed = original.clone();
    replayed.insert(3, original[2].clone());
    rewrite(&project, &replayed);
    assert_eq!(refusal(&verdict(&project, &[])).0, "backwards");
    rewrite(&project, &original[1..]);
    assert_eq!(
        refusal(&verdict(&project, &[])),
        ("starts_late".to_owned(), Some(1))
    );

    // A line cut in the middle of its bytes at the end of the file.
    let mut text = original.join("\n");
    text.truncate(text.len() - 10);
    std::fs::write(project.path().join("audit.jsonl"), text).unwrap();
    assert_eq!(
        refusal(&verdict(&project, &[])),
        ("unterminated".to_owned(), Some(8))
    );

    // And the untouched file still verifies.
    rewrite(&project, &original);
    assert_eq!(verdict(&project, &[])["ok"], true);
}

#[test]
fn garbage_is_refused_without_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage");
    let cases: [&[u8]; 8] = [
        b"\xff\xfe\x00\n",
        b"[1,2,3]\n",
        b"{\"chain\":1,\"seq\":\"a\",\"prev\":[]}\n",
        b"{\"chain\":\"c\",\"seq\":1,\"prev\":\"zz\"}\n",
        b"{\"chain\":\"c\",\"seq\":18446744073709551615,\"prev\":\"00\"}\n",
        b"{\"chain\":\"c\",\"seq\":1,\"seq\":1,\"prev\":\"00\"}\n",
        b"\n",
        b"{\"a\":\"\x1b]0;pwned\x07\"}\n",
    ];
    for case in cases {
        std::fs::write(&path, case).unwrap();
        let out = std::process::Command::new(support::sandbox_bin())
            .args(["audit", "verify"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{case:?}: {out:?}");
        assert!(
            !out.stdout.contains(&0x1b) && !out.stdout.contains(&0x07),
            "the file's bytes never reach the terminal raw: {out:?}"
        );
    }
    // An empty file has nothing to break; a missing one is an error.
    std::fs::write(&path, b"").unwrap();
    let out = std::process::Command::new(support::sandbox_bin())
        .args(["audit", "verify"])
        .arg(&path)
        .output()
        .unwrap();
    assert_ok(&out, "an empty file");
    let out = std::process::Command::new(support::sandbox_bin())
        .args(["audit", "verify"])
        .arg(dir.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
}
