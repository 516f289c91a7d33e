//! `sandbox serve --stdio` for agent-host front ends: `skill.cancel` of a
//! running and of a queued call, questions put to the client as
//! `skill.ask` requests (answered once, always, denied, answered under a
//! wrong id, answered for another skill, left open by a cancel) and without
//! `--ask-client`, `skill.listChanged` on reloads, and `outputSchema`.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use support::serve::{self, Face, Serve};

/// Writes `started` (if given), waits until `gate` exists in the project
/// (if given: the test holds the call running that way, for as long as it
/// needs, however slow the machine), then writes `mark` (if given), all
/// through the broker; answers with a token of its process (pids repeat:
/// each sandbox has its own pid namespace).
const SLEEPER: &str = "import os, time, sandbox_ipc\n\
token = os.urandom(8).hex()\n\
c = sandbox_ipc.connect()\n\
def gate_open(path):\n    \
try:\n        c.fs.stat(path)\n        return True\n    \
except sandbox_ipc.SandboxError:\n        return False\n\
def handle(p):\n    \
if p.get('started'):\n        c.fs.write(p['started'], 'x')\n    \
while p.get('gate') and not gate_open(p['gate']):\n        time.sleep(0.02)\n    \
if p.get('mark'):\n        c.fs.write(p['mark'], 'late')\n    \
return {'process': token}\n\
c.serve(handle)\n";

/// SLEEPER's manifest: persistent, writing and looking at files.
const SLEEPER_MANIFEST: &str =
    "activation: persistent\npermissions: [fs.write, fs.stat]\ntimeout: 30s\n";

/// Writes `path` through the broker; answers whether it could.
const WRITER: &str = "import sandbox_ipc\n\
c = sandbox_ipc.connect()\n\
def handle(p):\n    \
try:\n        c.fs.write(p['path'], 'yes')\n        return {'written': True}\n    \
except sandbox_ipc.SandboxError as e:\n        \
return {'written': False, 'code': e.code, 'message': e.message}\n\
c.serve(handle)\n";

/// `sandbox serve --stdio` for `project` with `extra` arguments and its
/// own state directory, driven like a front end.
fn start_serve(project: &Path, extra: &[&str], state: &Path) -> Serve {
    let mut command = serve::command(Face::Stdio, project, extra);
    command.env("SANDBOX_STATE_DIR", state);
    Serve::start(command)
}

#[test]
fn cancelling_a_running_call_kills_its_host_without_counting_a_crash() {
    if !support::require_root_sandbox("cancelling_a_running_call_kills_its_host") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let mark = support::marker("cancel");
    let name = format!("slow{mark}");
    support::write_skill(
        project.path(),
        &name,
        SLEEPER_MANIFEST,
        ("main.py", SLEEPER),
    );
    let mut serve = start_serve(project.path(), &["--grant", "fs.write"], state.path());
    let first = serve.invoke(&name, json!({}));
    let first = serve.response(first);
    let first_process = first["result"]["process"].clone();
    assert!(first_process.is_string(), "{first}");

    // Its gate never opens: the call runs until it is cancelled.
    let slow = serve.invoke(
        &name,
        json!({"started": "slow-started.txt", "gate": "never.txt", "mark": "late.txt"}),
    );
    // Running: the skill's process holds the call (it is persistent and
    // already active, so the call went to it at once).
    support::wait::until_true("the slow call to start", Duration::from_secs(60), || {
        project.path().join("slow-started.txt").exists()
    });
    assert!(!support::host_pids_with(&mark).is_empty());
    let cancel = serve.request("skill.cancel", json!({"id": slow}));
    assert_eq!(cancel["result"], json!({"cancelled": true}), "{cancel}");
    let answered = serve.response(slow);
    assert_eq!(answered["error"]["code"], -32800, "{answered}");
    assert_eq!(
        answered["error"]["message"], "cancelled by the client",
        "{answered}"
    );
    let left = support::wait_until_gone(&mark, 30);
    assert!(left.is_empty(), "the skill still runs: {left:?}");
    // The gate opens: a cancelled call that still ran anywhere would now
    // write its mark.
    std::fs::write(project.path().join("never.txt"), "").unwrap();

    // No crash, no back-off: the next call gets a fresh process at once.
    let next = serve.invoke(&name, json!({}));
    let next = serve.response(next);
    assert!(next["result"]["process"].is_string(), "{next}");
    assert_ne!(next["result"]["process"], first_process, "a fresh process");
    // Calls to a persistent skill are answered in turn: the cancelled one,
    // had it been run again, would have written its mark before this
    // answer came.
    assert!(!project.path().join("late.txt").exists());
    let states = serve.states(&name);
    assert!(
        !states.iter().any(|s| s == "failed" || s == "disabled"),
        "{states:?}"
    );
    // Answered already: nothing to cancel.
    let again = serve.request("skill.cancel", json!({"id": slow}));
    assert_eq!(again["result"], json!({"cancelled": false}), "{again}");
}

#[test]
fn cancelling_a_queued_call_drops_it_and_an_unknown_id_cancels_nothing() {
    if !support::require_root_sandbox("cancelling_a_queued_call_drops_it") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    support::write_skill(
        project.path(),
        "queue",
        SLEEPER_MANIFEST,
        ("main.py", SLEEPER),
    );
    let mut serve = start_serve(project.path(), &["--grant", "fs.write"], state.path());
    // The first call runs until the test opens its gate: the second one
    // is still queued when it is cancelled.
    let running = serve.invoke(
        "queue",
        json!({"started": "first-started.txt", "gate": "go.txt", "mark": "first.txt"}),
    );
    let queued = serve.invoke("queue", json!({"mark": "second.txt"}));
    support::wait::until_true("the first call to start", Duration::from_secs(60), || {
        project.path().join("first-started.txt").exists()
    });
    let cancel = serve.request("skill.cancel", json!({"id": queued}));
    assert_eq!(cancel["result"], json!({"cancelled": true}), "{cancel}");
    let dropped = serve.response(queued);
    assert_eq!(dropped["error"]["code"], -32800, "{dropped}");
    std::fs::write(project.path().join("go.txt"), "").unwrap();
    // The running call is untouched.
    let done = serve.response(running);
    assert!(done["result"]["process"].is_string(), "{done}");
    assert!(project.path().join("first.txt").exists());
    // The dropped call never ran (a later call's write shows the queue
    // has moved past where it stood).
    let after = serve.invoke("queue", json!({"mark": "third.txt"}));
    let after = serve.response(after);
    assert!(after["result"]["process"].is_string(), "{after}");
    assert!(project.path().join("third.txt").exists());
    assert!(!project.path().join("second.txt").exists());

    for id in [json!(999), json!("nope"), json!(null)] {
        let unknown = serve.request("skill.cancel", json!({"id": id}));
        assert_eq!(unknown["result"], json!({"cancelled": false}), "{unknown}");
    }
    let bad = serve.request("skill.cancel", json!({}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

fn asking_serve(project: &Path, state: &Path) -> Serve {
    support::write_skill(
        project,
        "writer",
        "activation: persistent\npermissions: [fs.write]\n",
        ("main.py", WRITER),
    );
    start_serve(project, &["--ask-client"], state)
}

#[test]
fn a_question_answered_once_allows_that_write_only() {
    if !support::require_root_sandbox("a_question_answered_once_allows_that_write_only") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let mut serve = asking_serve(project.path(), state.path());
    let call = serve.invoke("writer", json!({"path": "once.txt"}));
    let ask = serve.next_ask();
    assert_eq!(ask["jsonrpc"], "2.0");
    assert_eq!(ask["id"], "ask-1", "{ask}");
    let params = &ask["params"];
    assert_eq!(params["skill"], "writer", "{ask}");
    assert_eq!(params["call"], call, "{ask}");
    assert_eq!(params["caller"], "skill:writer", "{ask}");
    assert_eq!(params["action"], "fs.write", "{ask}");
    assert_eq!(params["target"], "once.txt", "{ask}");
    let question = params["question"].as_str().unwrap();
    assert!(
        question.starts_with("sandbox: skill:writer wants fs.write once.txt\n"),
        "{question:?}"
    );
    assert!(!question.contains("code"), "{question:?}");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(params["deadline_ms"].as_u64().unwrap() > now_ms, "{ask}");
    serve.answer_ask(&ask, "once");
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], true, "{answer}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("once.txt")).unwrap(),
        "yes"
    );
    // Once is once: the next write is asked again, under a fresh id.
    let call = serve.invoke("writer", json!({"path": "twice.txt"}));
    let ask = serve.next_ask();
    assert_eq!(ask["id"], "ask-2", "{ask}");
    serve.answer_ask(&ask, "deny");
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], false, "{answer}");
    assert!(!project.path().join("twice.txt").exists());
}

/// `--question-timeout` is the question's deadline: one nobody answers is
/// a deny when it passes, not a minute later.
#[test]
fn a_question_nobody_answers_is_denied_at_the_question_timeout() {
    if !support::require_root_sandbox("a_question_nobody_answers_is_denied_at_the_question_timeout")
    {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    support::write_skill(
        project.path(),
        "writer",
        "activation: persistent\npermissions: [fs.write]\n",
        ("main.py", WRITER),
    );
    let state = tempfile::tempdir().unwrap();
    let mut serve = start_serve(
        project.path(),
        &["--ask-client", "--question-timeout", "1s"],
        state.path(),
    );
    let call = serve.invoke("writer", json!({"path": "unanswered.txt"}));
    let ask = serve.next_ask();
    let read_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let deadline_ms = ask["params"]["deadline_ms"].as_u64().unwrap();
    assert!(
        deadline_ms <= read_ms + 1_000,
        "the deadline is the timeout from when it was asked: {ask}"
    );
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], false, "{answer}");
    assert!(!project.path().join("unanswered.txt").exists());
}

/// `run` allows that action on any target for the rest of the skill's
/// process, the word every face uses (the prompt's `[r]un`, the daemon's
/// approvals); `session`, its spelling before, is still understood.
#[test]
fn a_run_answer_allows_the_action_for_the_rest_of_the_skills_run() {
    if !support::require_root_sandbox("a_run_answer_allows_the_action_for_the_rest") {
        return;
    }
    for word in ["run", "session"] {
        let project = support::skill_project("sandbox-serve-");
        let state = tempfile::tempdir().unwrap();
        let mut serve = asking_serve(project.path(), state.path());
        let call = serve.invoke("writer", json!({"path": "first.txt"}));
        let ask = serve.next_ask();
        let question = ask["params"]["question"].as_str().unwrap();
        assert!(question.contains("[r]un"), "{question:?}");
        serve.answer_ask(&ask, word);
        let answer = serve.response(call);
        assert_eq!(answer["result"]["written"], true, "{word}: {answer}");
        // Another target, nobody asked: an unanswered question would be
        // refused at its deadline instead.
        let call = serve.invoke("writer", json!({"path": "second.txt"}));
        let answer = serve.response(call);
        assert_eq!(answer["result"]["written"], true, "{word}: {answer}");
        assert!(
            serve.seen.iter().all(|m| m["method"] != "skill.ask"),
            "{word}: asked again"
        );
        assert!(
            stored_grants(state.path()).as_array().unwrap().is_empty(),
            "{word}: run stores nothing"
        );
    }
}

/// A refusal holds for the rest of the skill's run: asking again for the
/// same target, in a loop until a tired person approves one by mistake,
/// gets the earlier answer without a question; another target is asked.
#[test]
fn a_denied_target_is_not_asked_again_in_the_same_run() {
    if !support::require_root_sandbox("a_denied_target_is_not_asked_again_in_the_same_run") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let mut serve = asking_serve(project.path(), state.path());
    let call = serve.invoke("writer", json!({"path": "no.txt"}));
    let ask = serve.next_ask();
    assert_eq!(ask["id"], "ask-1", "{ask}");
    serve.answer_ask(&ask, "deny");
    assert_eq!(serve.response(call)["result"]["written"], false);
    for _ in 0..3 {
        let call = serve.invoke("writer", json!({"path": "no.txt"}));
        let answer = serve.response(call);
        assert_eq!(answer["result"]["written"], false, "{answer}");
        let message = answer["result"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("earlier answer"), "{answer}");
    }
    assert!(!project.path().join("no.txt").exists());
    let call = serve.invoke("writer", json!({"path": "other.txt"}));
    let ask = serve.next_ask();
    assert_eq!(
        ask["id"], "ask-2",
        "a new target is asked, and only it: {ask}"
    );
    serve.answer_ask(&ask, "once");
    assert_eq!(serve.response(call)["result"]["written"], true);
}

/// The target comes from the sandbox: its control and bidi characters
/// reach the client escaped, as the terminal's question shows them.
#[test]
fn a_denied_question_refuses_and_its_target_is_escaped() {
    if !support::require_root_sandbox("a_denied_question_refuses") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let mut serve = asking_serve(project.path(), state.path());
    let sneaky = "a\u{1b}[2Jb\u{202e}txt.exe";
    let call = serve.invoke("writer", json!({"path": sneaky}));
    let ask = serve.next_ask();
    let target = ask["params"]["target"].as_str().unwrap().to_string();
    assert_eq!(target, "a\\u{1b}[2Jb\\u{202e}txt.exe");
    let question = ask["params"]["question"].as_str().unwrap();
    assert!(
        !question.contains('\u{1b}') && !question.contains('\u{202e}'),
        "{question:?}"
    );
    serve.answer_ask(&ask, "deny");
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], false, "{answer}");
    assert_eq!(answer["result"]["code"], -32001, "{answer}");
    assert!(!project.path().join(sneaky).exists());
}

/// The grants stored in the state directory `state`.
fn stored_grants(state: &Path) -> Value {
    let listed = Command::new(support::sandbox_bin())
        .args(["grants", "list", "--json"])
        .env("SANDBOX_STATE_DIR", state)
        .output()
        .unwrap();
    serde_json::from_slice(&listed.stdout).unwrap()
}

#[test]
fn an_always_answer_stores_a_grant_that_later_calls_use_without_asking() {
    if !support::require_root_sandbox("an_always_answer_stores_a_grant") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let mut serve = asking_serve(project.path(), state.path());
    let call = serve.invoke("writer", json!({"path": "kept.txt"}));
    let ask = serve.next_ask();
    serve.answer_ask(&ask, "always");
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], true, "{answer}");
    let listed = stored_grants(state.path());
    let grants = listed.as_array().unwrap();
    assert_eq!(grants.len(), 1, "{listed}");
    assert_eq!(grants[0]["caller"], "skill:writer", "{listed}");
    assert_eq!(grants[0]["action"], "fs.write", "{listed}");
    assert_eq!(grants[0]["pattern"], "kept.txt", "{listed}");
    assert_eq!(grants[0]["by_person"], true, "{listed}");
    // The same write again: the grant decides, nobody is asked.
    std::fs::remove_file(project.path().join("kept.txt")).unwrap();
    let call = serve.invoke("writer", json!({"path": "kept.txt"}));
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], true, "{answer}");
    assert!(!serve.seen.iter().any(|m| m["method"] == "skill.ask"));
}

/// A response under an id serve never used, or under the id of the invoke
/// itself, answers nothing; an error response to the real question is a
/// deny.
#[test]
fn only_a_response_to_the_questions_own_id_answers_it() {
    if !support::require_root_sandbox("only_a_response_to_the_questions_own_id_answers_it") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let mut serve = asking_serve(project.path(), state.path());
    let call = serve.invoke("writer", json!({"path": "forged.txt"}));
    let ask = serve.next_ask();
    for id in [json!("ask-999"), json!(call), json!("ask-0"), json!(1)] {
        serve.line(json!({"jsonrpc": "2.0", "id": id, "result": {"answer": "once"}}));
    }
    assert!(
        !serve.arrives_within(Duration::from_secs(2), |m| serve::is_response_to(m, call)),
        "a forged answer unblocked the question: {:?}",
        serve.seen
    );
    assert!(!project.path().join("forged.txt").exists());
    serve.line(json!({"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -1, "message": "no"}}));
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], false, "{answer}");
    assert!(!project.path().join("forged.txt").exists());
    // Garbage is a deny too.
    let call = serve.invoke("writer", json!({"path": "garbage.txt"}));
    let ask = serve.next_ask();
    serve.line(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"answer": "yes please"}}));
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], false, "{answer}");
    assert!(!project.path().join("garbage.txt").exists());
}

/// Two skills ask at once: each answer reaches only the skill it was
/// given to.
#[test]
fn answers_reach_only_the_skill_that_asked() {
    if !support::require_root_sandbox("answers_reach_only_the_skill_that_asked") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    support::write_skill(
        project.path(),
        "other",
        "activation: persistent\npermissions: [fs.write]\n",
        ("main.py", WRITER),
    );
    let mut serve = asking_serve(project.path(), state.path());
    let writer = serve.invoke("writer", json!({"path": "writer.txt"}));
    let other = serve.invoke("other", json!({"path": "other.txt"}));
    let first = serve.next_ask();
    let second = serve.next_ask();
    let (to_writer, to_other) = if first["params"]["skill"] == "writer" {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(to_other["params"]["skill"], "other", "{to_other}");
    assert_eq!(to_other["params"]["call"], other, "{to_other}");
    serve.answer_ask(&to_other, "once");
    let answered = serve.response(other);
    assert_eq!(answered["result"]["written"], true, "{answered}");
    assert!(
        !serve.arrives_within(Duration::from_secs(1), |m| serve::is_response_to(m, writer)),
        "the other skill's answer reached writer"
    );
    assert!(!project.path().join("writer.txt").exists());
    serve.answer_ask(&to_writer, "deny");
    let answered = serve.response(writer);
    assert_eq!(answered["result"]["written"], false, "{answered}");
    assert!(!project.path().join("writer.txt").exists());
    assert!(project.path().join("other.txt").exists());
}

/// A call cancelled while its question is open: the question's late
/// answer allows nothing, and the next call is asked afresh.
#[test]
fn an_answer_to_a_cancelled_calls_question_allows_nothing() {
    if !support::require_root_sandbox("an_answer_to_a_cancelled_calls_question_allows_nothing") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let mut serve = asking_serve(project.path(), state.path());
    let call = serve.invoke("writer", json!({"path": "cancelled.txt"}));
    let ask = serve.next_ask();
    let cancel = serve.request("skill.cancel", json!({"id": call}));
    assert_eq!(cancel["result"], json!({"cancelled": true}), "{cancel}");
    assert_eq!(serve.response(call)["error"]["code"], -32800);
    serve.answer_ask(&ask, "always");
    let next = serve.invoke("writer", json!({"path": "next.txt"}));
    let asked = serve.next_ask();
    assert_ne!(asked["id"], ask["id"]);
    assert_eq!(asked["params"]["call"], next, "{asked}");
    serve.answer_ask(&asked, "deny");
    let answer = serve.response(next);
    assert_eq!(answer["result"]["written"], false, "{answer}");
    assert!(!project.path().join("cancelled.txt").exists());
    assert!(!project.path().join("next.txt").exists());
    // The late "always" reached no host: nothing was stored either.
    assert_eq!(stored_grants(state.path()), json!([]));
}

#[test]
fn without_ask_client_nobody_is_asked_and_the_broker_says_which_grant_to_add() {
    if !support::require_root_sandbox("without_ask_client_nobody_is_asked") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    support::write_skill(
        project.path(),
        "writer",
        "activation: persistent\npermissions: [fs.write]\n",
        ("main.py", WRITER),
    );
    let mut serve = start_serve(project.path(), &[], state.path());
    let call = serve.invoke("writer", json!({"path": "plain.txt"}));
    let answer = serve.response(call);
    assert_eq!(answer["result"]["written"], false, "{answer}");
    assert_eq!(answer["result"]["code"], -32002, "{answer}");
    let message = answer["result"]["message"].as_str().unwrap();
    assert!(message.contains("fs.write"), "{message}");
    assert!(!serve.seen.iter().any(|m| m["method"] == "skill.ask"));
    assert!(!project.path().join("plain.txt").exists());
}

/// The listChanged notification that tells `changes` (the field and the
/// skill's name), from a file watch or the reload itself.
fn list_changed(serve: &mut Serve, field: &str, name: &str) -> Value {
    let reload = serve.request("skill.reload", json!({}));
    assert!(reload["result"].is_object(), "{reload}");
    serve.wait_until(&format!("listChanged {field} {name}"), |m| {
        m["method"] == "skill.listChanged"
            && m["params"][field]
                .as_array()
                .is_some_and(|names| names.iter().any(|n| n == name))
    })
}

#[test]
fn reloads_announce_added_changed_and_removed_skills() {
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".skills")).unwrap();
    let mut serve = start_serve(project.path(), &[], state.path());
    assert_eq!(
        serve.request("skill.list", json!({}))["result"]["skills"],
        json!([])
    );
    let dir = support::write_skill(
        project.path(),
        "fresh",
        "",
        ("main.sh", "sandbox ipc --invocation >/dev/null\n"),
    );
    let added = list_changed(&mut serve, "added", "fresh");
    assert_eq!(added["jsonrpc"], "2.0");
    assert!(added.get("id").is_none(), "a notification: {added}");
    // Never started, so inactive before and after: only listChanged tells.
    std::fs::write(dir.join("main.sh"), "sandbox ipc --invocation\n").unwrap();
    list_changed(&mut serve, "changed", "fresh");
    std::fs::remove_dir_all(&dir).unwrap();
    list_changed(&mut serve, "removed", "fresh");
    // A reload that changes nothing says nothing.
    let quiet = serve.request("skill.reload", json!({}));
    assert_eq!(
        quiet["result"],
        json!({"added": [], "removed": [], "changed": []})
    );
    assert!(!serve.arrives_within(Duration::from_millis(500), |m| {
        m["method"] == "skill.listChanged"
    }));
}

#[test]
fn skill_list_gives_the_declared_output_schema_only() {
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    support::write_skill(
        project.path(),
        "typed",
        "output-schema: {type: object, properties: {n: {type: integer}}, required: [n]}\n",
        ("main.sh", "true\n"),
    );
    support::write_skill(project.path(), "untyped", "", ("main.sh", "true\n"));
    let mut serve = start_serve(project.path(), &[], state.path());
    let list = serve.request("skill.list", json!({}));
    let skills = list["result"]["skills"].as_array().unwrap();
    let typed = skills.iter().find(|s| s["name"] == "typed").unwrap();
    assert_eq!(
        typed["outputSchema"],
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    );
    let untyped = skills.iter().find(|s| s["name"] == "untyped").unwrap();
    assert!(untyped.get("outputSchema").is_none(), "{untyped}");
}

/// A persistent skill's work between calls has no call to put a question
/// with: it is denied at once, and its broker (which the next call needs)
/// is not held up until the question's deadline.
#[test]
fn a_question_between_calls_is_denied_at_once() {
    if !support::require_root_sandbox("a_question_between_calls_is_denied_at_once") {
        return;
    }
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let audit = state.path().join("audit.jsonl");
    // It writes only once `go.txt` exists, which the test makes after the
    // first answer arrived: no call runs when it asks. (Sent right after
    // its answer, the write could be read by the host before that answer,
    // and be put to the client for the call still in flight.)
    let script = "sandbox ipc --invocation >/dev/null\n\
sandbox ipc --result '\"first\"'\n\
until sandbox ipc fs.stat '{\"path\": \"go.txt\"}' >/dev/null 2>&1; do sleep 0.05; done\n\
if sandbox ipc fs.write '{\"path\": \"between.txt\", \"content\": \"x\"}' >/dev/null 2>&1; \
then r=written; else r=denied; fi\n\
sandbox ipc --invocation >/dev/null\n\
sandbox ipc --result \"\\\"$r\\\"\"\n\
sandbox ipc --invocation >/dev/null\n\
if sandbox ipc fs.write '{\"path\": \"between.txt\", \"content\": \"x\"}' >/dev/null 2>&1; \
then r=written; else r=denied; fi\n\
sandbox ipc --result \"\\\"$r\\\"\"\n";
    support::write_skill(
        project.path(),
        "busy",
        "activation: persistent\npermissions: [\"fs.write:between.txt\", \"fs.stat:go.txt\"]\n",
        ("main.sh", script),
    );
    let mut serve = start_serve(
        project.path(),
        &[
            "--ask-client",
            "--question-timeout",
            "1h",
            "--audit",
            audit.to_str().unwrap(),
        ],
        state.path(),
    );
    let first = serve.invoke("busy", json!({}));
    assert_eq!(serve.response(first)["result"], "first");
    std::fs::write(project.path().join("go.txt"), "").unwrap();
    // The write between the calls is decided (the audit says so) before
    // the next call is sent.
    // Denied at once and denied at the question's deadline read the same
    // in the audit: the deadline is an hour, so a limit that scales with
    // the machine still tells them apart.
    support::wait::until_true(
        "the write between calls to be decided (else its question waits)",
        Duration::from_secs(60),
        || std::fs::read_to_string(&audit).is_ok_and(|a| a.contains("between.txt")),
    );
    let second = serve.invoke("busy", json!({}));
    assert_eq!(serve.response(second)["result"], "denied");
    assert!(!serve.seen.iter().any(|m| m["method"] == "skill.ask"));
    assert!(!project.path().join("between.txt").exists());
    // Nobody said no to that question: within a call, the same write is
    // asked (a person's explicit deny alone holds for the run).
    let third = serve.invoke("busy", json!({}));
    let ask = serve.next_ask();
    assert_eq!(ask["params"]["target"], "between.txt", "{ask}");
    serve.answer_ask(&ask, "once");
    assert_eq!(serve.response(third)["result"], "written");
}

/// The host as `sandbox __skill-host --ask-client` (what serve executes
/// when it cannot fork) asks over its control socket too.
#[test]
fn an_executed_host_asks_over_its_control_socket() {
    if !support::require_root_sandbox("an_executed_host_asks_over_its_control_socket") {
        return;
    }
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let project = support::skill_project("sandbox-serve-");
    let state = tempfile::tempdir().unwrap();
    let dir = support::write_skill(
        project.path(),
        "writer",
        "permissions: [fs.write]\n",
        ("main.py", WRITER),
    );
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut host = Command::new(support::sandbox_bin())
        .arg("__skill-host")
        .arg("--dir")
        .arg(&dir)
        .arg("--project")
        .arg(project.path())
        .args(["--profile", "strict", "--ask-client", "--parent"])
        .arg(std::process::id().to_string())
        .env("SANDBOX_STATE_DIR", state.path())
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut to_host = ours.try_clone().unwrap();
    to_host
        .write_all(b"{\"id\":1,\"params\":{\"path\":\"exec.txt\"}}\n")
        .unwrap();
    let mut from_host = BufReader::new(ours);
    let mut next = || {
        let mut line = String::new();
        from_host.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap_or(Value::Null)
    };
    let ask = loop {
        let event = next();
        assert!(!event.is_null(), "the host ended without asking");
        if event["event"] == "ask" {
            break event;
        }
    };
    assert_eq!(ask["action"], "fs.write", "{ask}");
    assert_eq!(ask["target"], "exec.txt", "{ask}");
    assert_eq!(ask["caller"], "skill:writer", "{ask}");
    let answer = json!({"answer": ask["ask"], "choice": "once"});
    to_host.write_all(format!("{answer}\n").as_bytes()).unwrap();
    let result = loop {
        let line = next();
        assert!(!line.is_null(), "the host ended without answering");
        if line["id"] == 1 {
            break line;
        }
    };
    assert_eq!(result["result"]["written"], true, "{result}");
    assert!(project.path().join("exec.txt").exists());
    let _ = host.kill();
    let _ = host.wait();
}
