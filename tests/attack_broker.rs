//! Attacks on the broker from inside `sandbox run`: a payload speaking to
//! fd 3 tries to stall the supervisor, grow it, widen a grant, reuse a
//! grant with other code, and smuggle text into the audit log.

mod rss;
mod support;

use std::io::Read;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{wait, Project, Who};

/// Prelude of every payload: `call(method, params)` sends one request and
/// returns its answer; `send(method, params)` only sends.
const PRELUDE: &str = r#"
import json, os, socket, sys, time
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
f = s.makefile("rwb", buffering=0)
def send(method, params, id=1):
    f.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode() + b"\n")
def call(method, params, id=1):
    send(method, params, id)
    return json.loads(f.readline())
"#;

fn payload(body: &str) -> String {
    format!("{PRELUDE}\n{body}")
}

/// Wait for `child` at most `limit` (scaled by the machine's load); a
/// supervisor still running then is stuck (the attack worked): it is
/// killed and None returned. This bounds a hang, it measures nothing.
fn wait_at_most(mut child: Child, limit: Duration) -> Option<Output> {
    if wait::exit_within(&mut child, limit).is_some() {
        return Some(child.wait_with_output().unwrap());
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn spawn(project: &Project, extra: &[&str], script: &str) -> Child {
    project
        .command()
        .arg("run")
        .args(extra)
        .args(["--", "python3", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn answers(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

const FIFO_READ: &str = r#"
os.mkfifo("fifo")
answer = call("fs.read", {"path": "fifo"})
print(json.dumps(answer), flush=True)
open("sent", "w").close()
time.sleep(1000)
"#;

/// Asks for `sleep MARKER` (a number unique to the caller, so that tests
/// running side by side do not see each other's) and waits for its answer.
fn hanging_command(marker: &str) -> String {
    format!(
        r#"
send("terminal.run", {{"argv": ["sleep", "{marker}"], "timeout": 3600}})
open("sent", "w").close()
print(f.readline().decode().strip(), flush=True)
time.sleep(1000)
"#
    )
}

/// A grant stored for what ran before did not apply to `what` runs now:
/// its write was refused as not granted (-32002) and made nothing.
fn assert_grant_did_not_apply(project: &Project, out: &Output, what: &str) {
    assert_eq!(
        answers(out)[0]["error"]["code"],
        -32002,
        "the grant applied to {what}: {out:?}"
    );
    assert!(!project.path().join("granted.txt").exists(), "{what}");
}

#[test]
fn a_fifo_read_is_refused_and_the_timeout_holds() {
    if !support::require_root_sandbox("fifo read") {
        return;
    }
    let project = Project::new(Who::Root);
    // The answer must come before the timeout ends the run: the timeout
    // (3 s on an idle machine) grows with the load so that a slow Python
    // start cannot lose it.
    let timeout = wait::timeout_arg(Duration::from_secs(3));
    let child = spawn(&project, &["--timeout", &timeout], &payload(FIFO_READ));
    let out = wait_at_most(child, Duration::from_secs(90))
        .expect("the supervisor hung on a FIFO: its timeout did not hold");
    let answers = answers(&out);
    assert_eq!(
        answers.first().map(|a| &a["error"]["code"]),
        Some(&Value::from(-32602)),
        "{answers:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("killed: timeout"), "{stderr}");
}

#[test]
fn a_hanging_terminal_run_does_not_hold_the_timeout() {
    if !support::require_root_sandbox("hanging terminal.run") {
        return;
    }
    let project = Project::new(Who::Root);
    let marker = support::marker("hang");
    let child = spawn(
        &project,
        &["--timeout", "3s", "--grant", "terminal.run"],
        &payload(&hanging_command(&marker)),
    );
    let out = wait_at_most(child, Duration::from_secs(90))
        .expect("the supervisor waited for terminal.run past its own timeout");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("killed: timeout"), "{stderr}");
    let left = support::wait_until_gone(&format!("sleep {marker}"), 30);
    assert!(
        left.is_empty(),
        "the nested command outlived the run: {left:?}"
    );
}

/// SIGTERM to the supervisor once the payload's request is in flight and
/// `picked_up` says the supervisor is working on it.
fn sigterm_while(script: &str, extra: &[&str], picked_up: impl Fn(&Project) -> bool) -> Output {
    let project = Project::new(Who::Root);
    let child = spawn(&project, extra, &payload(script));
    let sent = project.path().join("sent");
    wait::until_true(
        "the payload to send its request",
        Duration::from_secs(60),
        || sent.exists(),
    );
    wait::until_true(
        "the supervisor to pick the request up",
        Duration::from_secs(60),
        || picked_up(&project),
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    wait_at_most(child, Duration::from_secs(60))
        .expect("SIGTERM to the supervisor did not end the run")
}

#[test]
fn sigterm_ends_the_run_during_a_fifo_read_and_a_hanging_terminal_run() {
    if !support::require_root_sandbox("sigterm during broker work") {
        return;
    }
    // The FIFO payload writes `sent` once its read was answered.
    let out = sigterm_while(FIFO_READ, &[], |_| true);
    assert_eq!(out.status.code(), Some(143), "fifo: {out:?}");
    // The nested command running is the supervisor working on the request.
    let marker = support::marker("term");
    let sleeping = format!("sleep {marker}");
    let out = sigterm_while(
        &hanging_command(&marker),
        &["--grant", "terminal.run"],
        |_| !support::host_pids_with(&sleeping).is_empty(),
    );
    assert_eq!(out.status.code(), Some(143), "terminal.run: {out:?}");
    let left = support::wait_until_gone(&sleeping, 30);
    assert!(
        left.is_empty(),
        "the nested command outlived the run: {left:?}"
    );
}

/// The supervisor's memory bound under a client that does not read.
const SUPERVISOR_BOUND_KIB: u64 = 64 << 10;
/// A 512 KiB file of control characters is answered in base64: about
/// 683 KiB an answer.
const ANSWER_KIB: u64 = 683;
/// Enough reads that answers kept for a client that does not read would
/// hold twice the bound: a supervisor that queued them all could not stay
/// under it. (More only makes the test slower: the answers are made one
/// at a time either way.)
const READS: u64 = 2 * SUPERVISOR_BOUND_KIB / ANSWER_KIB + 1;

/// The file, then READS reads of it in one write, answers read only
/// afterwards. The pause before reading gives a supervisor that buffers
/// answers time to grow: on a loaded machine it grows less, so the pause
/// can weaken the test but never fail a correct supervisor.
fn many_reads() -> String {
    format!(
        r#"
import threading
with open("big.txt", "w") as out:
    out.write("\x01" * (512 << 10))
batch = b"".join(b'{{"jsonrpc":"2.0","id":%d,"method":"fs.read","params":{{"path":"big.txt"}}}}\n' % i for i in range({READS}))
threading.Thread(target=lambda: s.sendall(batch)).start()
time.sleep(2)
reader = s.makefile("rb")
ok = 0
for _ in range({READS}):
    answer = json.loads(reader.readline())
    ok += "result" in answer and len(answer["result"]["content"]) > 0
print(ok)
"#
    )
}

#[test]
fn reads_adding_up_to_twice_the_bound_keep_the_supervisor_under_it() {
    if !support::require_root_sandbox("broker memory") {
        return;
    }
    let project = Project::new(Who::Root);
    let timeout = wait::timeout_arg(Duration::from_secs(300));
    let mut child = spawn(&project, &["--timeout", &timeout], &payload(&many_reads()));
    let peak_kib = rss::peak_rss_until_exit(&mut child);
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(
        stdout.trim(),
        READS.to_string(),
        "every read was answered: {stderr}"
    );
    assert!(peak_kib > 0, "the supervisor was sampled");
    assert!(
        peak_kib < SUPERVISOR_BOUND_KIB,
        "supervisor peak RSS {peak_kib} KiB under {READS} reads of 512 KiB"
    );
}

#[test]
fn a_path_pattern_grant_covers_only_what_the_path_resolves_to() {
    if !support::require_root_sandbox("resolved grants") {
        return;
    }
    let project = Project::new(Who::Root);
    project.write("dist/keep", "");
    std::os::unix::fs::symlink("..", project.path().join("dist/up")).unwrap();
    let script = payload(
        r#"
for i, path in enumerate(["dist/../victim.txt", "dist/up/victim.txt", "./dist/../dist/../victim2.txt", "dist/ok.txt"]):
    print(json.dumps(call("fs.write", {"path": path, "content": "planted"}, i)), flush=True)
"#,
    );
    let out = wait_at_most(
        spawn(&project, &["--grant", "fs.write:dist/**"], &script),
        Duration::from_secs(60),
    )
    .unwrap();
    support::assert_ok(&out, "resolved grants");
    let answers = answers(&out);
    for answer in &answers[..3] {
        assert!(
            answer["error"]["code"] == -32002 || answer["error"]["code"] == -32001,
            "{answer}"
        );
    }
    assert!(answers[3]["result"].is_object(), "{}", answers[3]);
    assert!(!project.path().join("victim.txt").exists());
    assert!(!project.path().join("victim2.txt").exists());
    assert_eq!(
        std::fs::read_to_string(project.path().join("dist/ok.txt")).unwrap(),
        "planted"
    );
}

const BENIGN: &str = r#"import json, os, socket
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
f = s.makefile("rwb", buffering=0)
for i, path in enumerate(["granted.txt", "other.txt"]):
    f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "fs.write", "params": {"path": path, "content": "benign"}}).encode() + b"\n")
    print(f.readline().decode().strip(), flush=True)
"#;

/// Rewrites itself into the benign script before its first request, then
/// asks for what the benign script was granted.
const IMPOSTOR: &str = r#"import json, os, socket, sys
open(sys.argv[0], "w").write(BENIGN)
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
f = s.makefile("rwb", buffering=0)
f.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "fs.write", "params": {"path": "granted.txt", "content": "impostor"}}).encode() + b"\n")
print(f.readline().decode().strip(), flush=True)
"#;

fn write_grant(state: &std::path::Path, project: &Project, hash: &str) {
    let grant = serde_json::json!([{
        "project": project.path(),
        "caller": "command:python3",
        "hash": hash,
        "action": "fs.write",
        "pattern": "granted.txt",
        "decision": "allow",
        "time": 1,
        "by_person": true,
    }]);
    std::fs::write(state.join("grants.json"), grant.to_string()).unwrap();
}

fn run_script(project: &Project, state: &std::path::Path) -> Output {
    project
        .command()
        .env("SANDBOX_STATE_DIR", state)
        .args([
            "run",
            "--audit",
            "audit.jsonl",
            "--",
            "python3",
            "script.py",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_stored_grant_binds_to_the_script_as_it_was_when_it_started() {
    if !support::require_root_sandbox("grants bound at exec") {
        return;
    }
    let project = Project::new(Who::Root);
    let state = tempfile::tempdir().unwrap();
    // A grant for this project and caller, for other content: the run
    // hashes what it executes and the audit line shows that hash.
    write_grant(state.path(), &project, &"0".repeat(64));
    project.write("script.py", BENIGN);
    let out = run_script(&project, state.path());
    support::assert_ok(&out, "benign, not granted yet");
    let audit = std::fs::read_to_string(project.path().join("audit.jsonl")).unwrap();
    let first: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    let hash = first["caller_hash"]
        .as_str()
        .expect("caller_hash")
        .to_string();
    assert_eq!(answers(&out)[0]["error"]["code"], -32002, "{first}");

    write_grant(state.path(), &project, &hash);
    let out = run_script(&project, state.path());
    support::assert_ok(&out, "benign, granted");
    let answers_benign = answers(&out);
    assert!(
        answers_benign[0]["result"].is_object(),
        "{answers_benign:?}"
    );
    assert_eq!(
        answers_benign[1]["error"]["code"], -32002,
        "the grant covers the target shown, not every target: {answers_benign:?}"
    );
    std::fs::remove_file(project.path().join("granted.txt")).unwrap();

    project.write(
        "script.py",
        &IMPOSTOR.replace("BENIGN", &format!("{BENIGN:?}")),
    );
    let out = run_script(&project, state.path());
    support::assert_ok(&out, "impostor");
    assert_eq!(
        std::fs::read_to_string(project.path().join("script.py")).unwrap(),
        BENIGN,
        "the impostor did rewrite itself"
    );
    assert_grant_did_not_apply(&project, &out, "the rewritten script");
}

/// Found by an attacker: only an interpreter's first operand was hashed as
/// its script, and `-E` (Python's "ignore the environment") was taken for
/// inline code, an option's value (`-W ignore`) for the script. The real
/// script was never hashed, so a grant given to it kept applying once a
/// payload had rewritten it into anything else.
#[test]
fn a_grant_is_not_kept_by_a_rewritten_script_behind_an_option() {
    if !support::require_root_sandbox("grants behind interpreter options") {
        return;
    }
    let impostor = r#"import json, os, socket
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
f = s.makefile("rwb", buffering=0)
f.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "fs.write", "params": {"path": "granted.txt", "content": "impostor"}}).encode() + b"\n")
print(f.readline().decode().strip(), flush=True)
"#;
    for options in [&["-E"][..], &["-W", "ignore"], &["-X", "utf8"]] {
        let project = Project::new(Who::Root);
        let state = tempfile::tempdir().unwrap();
        write_grant(state.path(), &project, &"0".repeat(64));
        project.write("script.py", BENIGN);
        let run = |project: &Project| {
            project
                .command()
                .env("SANDBOX_STATE_DIR", state.path())
                .args(["run", "--audit", "audit.jsonl", "--", "python3"])
                .args(options)
                .arg("script.py")
                .stdin(Stdio::null())
                .output()
                .unwrap()
        };
        let out = run(&project);
        support::assert_ok(&out, "benign, not granted yet");
        let audit = std::fs::read_to_string(project.path().join("audit.jsonl")).unwrap();
        let first: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
        let hash = first["caller_hash"].as_str().expect("caller_hash");
        write_grant(state.path(), &project, hash);
        let out = run(&project);
        support::assert_ok(&out, "benign, granted");
        assert!(
            answers(&out)[0]["result"].is_object(),
            "{options:?}: {out:?}"
        );
        std::fs::remove_file(project.path().join("granted.txt")).unwrap();

        // What a payload of an earlier run could leave in the project.
        project.write("script.py", impostor);
        let out = run(&project);
        support::assert_ok(&out, "impostor");
        assert_grant_did_not_apply(&project, &out, &format!("{options:?}: a rewritten script"));
    }
}

/// Found by an attacker: the script was hashed through the supervisor's
/// `/proc/self`, the interpreter in the sandbox read it through its own. A
/// project link `s.py -> /proc/self/cwd/NAME/real.py` named the granted
/// copy for a supervisor started beside the project (`--project NAME`)
/// and the impostor in `NAME/NAME/` for the payload, whose working
/// directory is the project: the grant applied to the impostor.
#[test]
fn a_grant_is_not_kept_by_a_script_behind_a_magic_link() {
    if !support::require_root_sandbox("grants behind a magic link") {
        return;
    }
    let project = Project::new(Who::Root);
    let name = project.path().file_name().unwrap().to_str().unwrap();
    let parent = project.path().parent().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_grant(state.path(), &project, &"0".repeat(64));
    let run = || {
        project
            .command()
            .current_dir(parent)
            .env("SANDBOX_STATE_DIR", state.path())
            .arg("run")
            .arg("--project")
            .arg(project.path())
            .arg("--audit")
            .arg(state.path().join("audit.jsonl"))
            .args(["--", "python3", "script.py"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    project.write("script.py", BENIGN);
    let out = run();
    support::assert_ok(&out, "benign, not granted yet");
    let audit = std::fs::read_to_string(state.path().join("audit.jsonl")).unwrap();
    let first: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    write_grant(
        state.path(),
        &project,
        first["caller_hash"].as_str().expect("caller_hash"),
    );

    // What a payload of an earlier run could leave in the project.
    project.write("real.py", BENIGN);
    project.write(
        &format!("{name}/real.py"),
        &IMPOSTOR.replace("BENIGN", &format!("{BENIGN:?}")),
    );
    std::fs::remove_file(project.path().join("script.py")).unwrap();
    std::os::unix::fs::symlink(
        format!("/proc/self/cwd/{name}/real.py"),
        project.path().join("script.py"),
    )
    .unwrap();
    let out = run();
    support::assert_ok(&out, "impostor");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"id\":0"),
        "the impostor ran: {out:?}"
    );
    assert_grant_did_not_apply(&project, &out, "the impostor");
}

/// Found by an attacker: a script run by its `#!` line was hashed, its
/// interpreter was not. With the interpreter in the project (a virtualenv's
/// `python` link), a payload of an earlier run replaced it, and the grant
/// given to the script went to whatever the interpreter became.
#[test]
fn a_grant_is_not_kept_by_a_replaced_shebang_interpreter() {
    if !support::require_root_sandbox("grants and #! interpreters") {
        return;
    }
    let project = Project::new(Who::Root);
    let state = tempfile::tempdir().unwrap();
    // The system's, which the view shows (a PATH entry may be a shim in
    // a home directory it does not).
    let python = std::path::PathBuf::from("/usr/bin/python3");
    if !python.exists() {
        let why = "SKIP: no /usr/bin/python3";
        assert!(std::env::var_os("SANDBOX_TEST_REQUIRE").is_none(), "{why}");
        eprintln!("{why}");
        return;
    }
    let interpreter = project.path().join("venv/python");
    std::fs::create_dir_all(interpreter.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&python, &interpreter).unwrap();
    let tool = project.write("tool", &format!("#!{}\n{BENIGN}", interpreter.display()));
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let grant = |hash: &str| {
        let grant = serde_json::json!([{
            "project": project.path(),
            "caller": "command:./tool",
            "hash": hash,
            "action": "fs.write",
            "pattern": "granted.txt",
            "decision": "allow",
            "time": 1,
            "by_person": true,
        }]);
        std::fs::write(state.path().join("grants.json"), grant.to_string()).unwrap();
    };
    grant(&"0".repeat(64));
    let run = || {
        project
            .command()
            .env("SANDBOX_STATE_DIR", state.path())
            .arg("run")
            .arg("--audit")
            .arg(state.path().join("audit.jsonl"))
            .args(["--", "./tool"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run();
    support::assert_ok(&out, "benign, not granted yet");
    let audit = std::fs::read_to_string(state.path().join("audit.jsonl")).unwrap();
    let first: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    grant(first["caller_hash"].as_str().expect("caller_hash"));
    let out = run();
    support::assert_ok(&out, "benign, granted");
    assert!(answers(&out)[0]["result"].is_object(), "{out:?}");
    std::fs::remove_file(project.path().join("granted.txt")).unwrap();

    // The interpreter replaced by a script of the payload's, run by
    // Python in its place (the kernel runs an interpreter's own `#!`).
    std::fs::remove_file(&interpreter).unwrap();
    project.write(
        "venv/python",
        &format!(
            "#!{}\n{}",
            python.display(),
            BENIGN.replace("\"benign\"", "\"impostor\"")
        ),
    );
    std::fs::set_permissions(
        &interpreter,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = run();
    support::assert_ok(&out, "impostor");
    assert_grant_did_not_apply(&project, &out, "a replaced interpreter");
}

#[test]
fn audit_lines_carry_no_terminal_controls_or_line_separators() {
    if !support::require_root_sandbox("audit escapes") {
        return;
    }
    let project = Project::new(Who::Root);
    let script = payload(
        r#"
hostile = "a\u009b31mb\u2028c\u2029d\u202ee\u2066f\u200bg\u0085h\u001b[2Ji"
print(json.dumps(call("fs.read", {"path": hostile})), flush=True)
print(json.dumps(call("secrets.get", {"name": hostile}, 2)), flush=True)
"#,
    );
    let out = wait_at_most(
        spawn(&project, &["--audit", "audit.jsonl"], &script),
        Duration::from_secs(60),
    )
    .unwrap();
    support::assert_ok(&out, "audit escapes");
    let audit = std::fs::read_to_string(project.path().join("audit.jsonl")).unwrap();
    let lines: Vec<&str> = audit.split('\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 2, "one line per request: {audit:?}");
    for c in audit.chars() {
        assert!(
            c == '\n'
                || !(c.is_control()
                    || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200b}'..='\u{200f}')),
            "raw U+{:04X} in the audit log: {audit:?}",
            c as u32
        );
    }
    for escaped in [
        "\\u009b", "\\u2028", "\\u2029", "\\u202e", "\\u2066", "\\u200b", "\\u0085", "\\u001b",
    ] {
        assert!(audit.contains(escaped), "{escaped} in {audit}");
    }
    let first: Value = serde_json::from_str(lines[0]).unwrap();
    assert!(
        first["target"].as_str().unwrap().contains('\u{9b}'),
        "still the same data"
    );
}
