//! `sandbox serve` keeps a host with its sandbox prepared ahead for each
//! on-demand skill: each prepared sandbox serves exactly one activation,
//! with every layer in force; a skill edited after its sandbox was
//! prepared runs its new code; a grant revoked after it was prepared is
//! not used.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use support::serve::{self, Face, Serve};

/// Answers whether its sandbox served a call before (a file in its own
/// /tmp), what the kernel says of its confinement, whether it can write
/// the project or reach the network, and a token of its process.
const PROBE: &str = "import os, socket, sandbox_ipc\n\
def status():\n    \
fields = {}\n    \
for line in open('/proc/self/status'):\n        \
name, _, value = line.partition(':')\n        \
fields[name] = value.strip()\n    \
return fields\n\
def can(action):\n    \
try:\n        action()\n        return True\n    \
except OSError:\n        return False\n\
def handle(p):\n    \
fresh = not os.path.exists('/tmp/served')\n    \
open('/tmp/served', 'w').close()\n    \
s = status()\n    \
return {'fresh': fresh, 'version': VERSION, 'token': os.urandom(8).hex(),\n            \
'seccomp': s['Seccomp'], 'no_new_privs': s['NoNewPrivs'], 'cap_eff': s['CapEff'],\n            \
'project_writable': can(lambda: open(os.path.join(os.getcwd(), 'x'), 'w')),\n            \
'network': can(lambda: socket.create_connection(('192.0.2.1', 80), timeout=1))}\n\
sandbox_ipc.connect().serve(handle)\n";

fn probe(version: &str) -> String {
    format!("VERSION = {version}\n{PROBE}")
}

fn start_serve(project: &Path, extra: &[&str], state: &Path) -> Serve {
    let mut command = serve::command(Face::Stdio, project, extra);
    command.env("SANDBOX_STATE_DIR", state);
    Serve::start(command)
}

/// The `prepared` field of every `active` notification of `name` so far.
fn activations(serve: &Serve, name: &str) -> Vec<Value> {
    serve
        .seen
        .iter()
        .filter(|n| {
            n["method"] == "skill.stateChanged"
                && n["params"]["name"] == name
                && n["params"]["state"] == "active"
        })
        .map(|n| n["params"]["prepared"].clone())
        .collect()
}

#[test]
fn each_prepared_sandbox_serves_one_call_under_every_layer() {
    if !support::require_root_sandbox("each_prepared_sandbox_serves_one_call") {
        return;
    }
    let project = support::skill_project("sandbox-prepared-");
    let state = tempfile::tempdir().unwrap();
    support::write_skill(project.path(), "probe", "", ("main.py", &probe("1")));
    let mut serve = start_serve(project.path(), &[], state.path());
    let mut tokens = Vec::new();
    for n in 0..3 {
        let answer = serve.invoke_and_wait("probe", json!({"n": n}));
        let result = &answer["result"];
        assert_eq!(result["fresh"], true, "a sandbox served twice: {answer}");
        assert_eq!(result["seccomp"], "2", "{answer}");
        assert_eq!(result["no_new_privs"], "1", "{answer}");
        assert_eq!(result["cap_eff"], "0000000000000000", "{answer}");
        assert_eq!(result["network"], false, "{answer}");
        tokens.push(result["token"].clone());
    }
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "one process per call: {tokens:?}");
    assert_eq!(
        activations(&serve, "probe"),
        [json!(true), json!(true), json!(true)],
        "every call took a sandbox prepared ahead"
    );
    assert!(!project.path().join("x").exists());
}

#[test]
fn a_skill_edited_after_its_sandbox_was_prepared_runs_its_new_code() {
    if !support::require_root_sandbox("a_skill_edited_after_its_sandbox_was_prepared") {
        return;
    }
    let project = support::skill_project("sandbox-prepared-");
    let state = tempfile::tempdir().unwrap();
    let dir = support::write_skill(project.path(), "probe", "", ("main.py", &probe("1")));
    let mut serve = start_serve(project.path(), &[], state.path());
    let answer = serve.invoke_and_wait("probe", json!({}));
    assert_eq!(answer["result"]["version"], 1, "{answer}");
    // The next call's sandbox was prepared after that answer; the edit
    // comes after it, and the call at once, before any reload settles.
    std::fs::write(dir.join("main.py"), probe("22222")).unwrap();
    let answer = serve.invoke_and_wait("probe", json!({}));
    assert_eq!(answer["result"]["version"], 22222, "{answer}");
    // The manifest too: a new timeout is in force for the very next call.
    let manifest = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        manifest.replacen("---\n", "---\ntimeout: 7s\n", 1),
    )
    .unwrap();
    let answer = serve.invoke_and_wait("probe", json!({}));
    assert_eq!(answer["result"]["version"], 22222, "{answer}");
    let listed = serve.request("skill.list", json!({}));
    let skill = &listed["result"]["skills"][0];
    assert_eq!(skill["timeoutMs"], 7000, "{listed}");
}

/// Writes `path` through the broker; answers whether it could.
const WRITER: &str = "import sandbox_ipc\n\
c = sandbox_ipc.connect()\n\
def handle(p):\n    \
try:\n        c.fs.write(p['path'], 'yes')\n        return {'written': True}\n    \
except sandbox_ipc.SandboxError as e:\n        \
return {'written': False, 'code': e.code}\n\
c.serve(handle)\n";

#[test]
fn a_grant_revoked_after_a_sandbox_was_prepared_is_not_used() {
    if !support::require_root_sandbox("a_grant_revoked_after_a_sandbox_was_prepared") {
        return;
    }
    let project = support::skill_project("sandbox-prepared-");
    let state = tempfile::tempdir().unwrap();
    support::write_skill(
        project.path(),
        "writer",
        "permissions: [fs.write]\n",
        ("main.py", WRITER),
    );
    let mut serve = start_serve(project.path(), &["--ask-client"], state.path());
    let call = serve.invoke("writer", json!({"path": "kept.txt"}));
    let ask = serve.next_ask();
    serve.answer_ask(&ask, "always");
    assert_eq!(serve.response(call)["result"]["written"], true);
    // Prepared after the grant was stored: it applies without a question.
    let answer = serve.invoke_and_wait("writer", json!({"path": "kept.txt"}));
    assert_eq!(answer["result"]["written"], true, "{answer}");
    let asked = |serve: &Serve| {
        serve
            .seen
            .iter()
            .filter(|m| m["method"] == "skill.ask")
            .count()
    };
    assert_eq!(asked(&serve), 0, "the grant answered, nobody was asked");
    // The next sandbox is prepared from here on; the person revokes.
    let revoked = Command::new(support::sandbox_bin())
        .args(["grants", "revoke", "1"])
        .env("SANDBOX_STATE_DIR", state.path())
        .output()
        .unwrap();
    assert!(revoked.status.success(), "{revoked:?}");
    let call = serve.invoke("writer", json!({"path": "kept.txt"}));
    // Asked again: the revoked grant is in no sandbox's broker.
    let ask = serve.next_ask();
    serve.answer_ask(&ask, "deny");
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], false, "{answer}");
}
