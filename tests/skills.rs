//! Skills for real: `sandbox skill run` and `sandbox serve --stdio`, with
//! the example skills, declared-permission narrowing, timeouts, crash
//! back-off, hot reload, concurrency and clean-up.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::serve::{self, Face, Serve};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills")
}

fn skill_run(project: &Path, extra: &[&str], name: &str, params: Value) -> (i32, Value, String) {
    let out = Command::new(support::sandbox_bin())
        .args(["skill", "run", "--non-interactive", "--json", "--project"])
        .arg(project)
        .args(extra)
        .arg(name)
        .arg("--params")
        .arg(params.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        value,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

const PLAIN_NODE: &str = "process.on('message', async ({ params }) => {\n  \
const fs = require('fs/promises');\n  \
process.send({ content: await fs.readFile(params.path, 'utf8') });\n});\n";

#[test]
fn the_example_skills_run() {
    if !support::require_root_sandbox("the_example_skills_run") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    std::fs::write(project.path().join("notes.txt"), "one two\nthree\n").unwrap();
    let skills = examples();
    let dir = ["--skills-dir", skills.to_str().unwrap()];
    let (code, v, err) = skill_run(
        project.path(),
        &dir,
        "files",
        json!({"op": "list", "path": "."}),
    );
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["result"]["entries"][0]["name"], "notes.txt", "{v}");
    let (code, v, err) = skill_run(
        project.path(),
        &[&dir[..], &["--grant", "fs.write", "--grant", "fs.mkdir"]].concat(),
        "files",
        json!({"op": "write", "path": "out/a.txt", "content": "written"}),
    );
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("out/a.txt")).unwrap(),
        "written"
    );
    let (code, v, err) = skill_run(
        project.path(),
        &dir,
        "wordcount",
        json!({"path": "notes.txt"}),
    );
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(
        v["result"],
        json!({"path": "notes.txt", "lines": 2, "words": 3, "chars": 14})
    );
    let (code, v, err) = skill_run(project.path(), &dir, "shout", json!({"path": "notes.txt"}));
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["result"]["text"], "ONE TWO\nTHREE", "{v}");
    // Params are checked before anything starts, naming the field.
    let (code, _, err) = skill_run(project.path(), &dir, "wordcount", json!({"path": 7}));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid params at /path"), "{err}");
}

#[test]
fn a_plain_node_skill_runs_unchanged_and_gets_only_what_it_declared() {
    if !support::require_root_sandbox("a_plain_node_skill_runs_unchanged") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    std::fs::write(project.path().join("note.txt"), "hello\n").unwrap();
    support::write_skill(
        project.path(),
        "plain",
        "permissions: [fs.read]\nprofile: permissive\n",
        ("index.js", PLAIN_NODE),
    );
    // The skill names permissive: the person allows that much.
    let (code, v, err) = skill_run(
        project.path(),
        &["--profile", "permissive"],
        "plain",
        json!({"path": "note.txt"}),
    );
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["result"], json!({"content": "hello\n"}));

    // Without fs.write declared, a write is denied even under the
    // permissive profile and with the action granted: through the broker
    // and directly on the (read-only) project.
    let writer = "const s = require('sandbox-ipc');\n\
s.onInvoke(async () => {\n  let broker, direct;\n  \
try { await s.fs.write('x.txt', 'x'); broker = 'written'; } catch (e) { broker = e.message; }\n  \
try { require('fs').writeFileSync('y.txt', 'y'); direct = 'written'; } catch (e) { direct = e.code; }\n  \
return { broker, direct };\n});\n";
    support::write_skill(
        project.path(),
        "writer",
        "permissions: [fs.read]\nprofile: permissive\n",
        ("index.js", writer),
    );
    let (code, v, err) = skill_run(
        project.path(),
        &["--profile", "permissive", "--grant", "fs.write"],
        "writer",
        json!({}),
    );
    assert_eq!(code, 0, "{v} {err}");
    let broker = v["result"]["broker"].as_str().unwrap();
    assert!(
        broker.contains("declared permissions (fs.read)"),
        "{broker}"
    );
    assert_eq!(v["result"]["direct"], "EROFS", "{v}");
    assert!(!project.path().join("x.txt").exists());
    assert!(!project.path().join("y.txt").exists());
}

#[test]
fn an_invocation_that_takes_too_long_times_out_and_its_process_is_killed() {
    if !support::require_root_sandbox("an_invocation_that_takes_too_long_times_out") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    let mark = support::marker("slow");
    support::write_skill(
        project.path(),
        "slow",
        "timeout: 1s\n",
        (
            "slow.js",
            &format!("// {mark}\nprocess.on('message', () => {{}});\n"),
        ),
    );
    // The skill never answers: only its timeout ends the run (124, -32003),
    // however long the machine takes to get there.
    let (code, v, err) = skill_run(project.path(), &[], "slow", json!({}));
    assert_eq!(code, 124, "{v} {err}");
    assert_eq!(v["error"]["code"], -32003, "{v}");
    assert!(support::wait_until_gone(&mark, 30).is_empty());
}

/// `sandbox serve --stdio` for `project`, driven like an agent host.
fn start_serve(project: &Path) -> Serve {
    Serve::start(serve::command(Face::Stdio, project, &[]))
}

#[test]
fn serve_lists_and_invokes_skills_lazily() {
    if !support::require_root_sandbox("serve_lists_and_invokes_skills_lazily") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    support::write_skill(
        project.path(),
        "echo",
        "activation: persistent\ninput-schema: {type: object, properties: {n: {type: integer}}}\n",
        (
            "echo.js",
            "require('sandbox-ipc').onInvoke((p) => ({ n: p.n, pid: process.pid }));\n",
        ),
    );
    let mut serve = start_serve(project.path());
    let list = serve.request("skill.list", json!({}));
    let skill = &list["result"]["skills"][0];
    assert_eq!(skill["name"], "echo");
    assert_eq!(skill["state"], "inactive", "nothing starts before a call");
    assert_eq!(skill["inputSchema"]["properties"]["n"]["type"], "integer");
    let first = serve.invoke_and_wait("echo", json!({"n": 1}));
    assert_eq!(first["result"]["n"], 1, "{first}");
    let second = serve.invoke_and_wait("echo", json!({"n": 2}));
    assert_eq!(
        second["result"]["pid"], first["result"]["pid"],
        "a persistent skill serves many calls"
    );
    assert_eq!(serve.states("echo"), ["activating", "active"]);
    let bad = serve.invoke_and_wait("echo", json!({"n": "two"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert_eq!(bad["error"]["data"]["field"], "/n", "{bad}");
    let missing = serve.invoke_and_wait("nope", json!({}));
    assert_eq!(missing["error"]["code"], -32010, "{missing}");
}

#[test]
fn an_on_demand_skill_answers_calls_sent_right_after_its_last_answer() {
    if !support::require_root_sandbox(
        "an_on_demand_skill_answers_calls_sent_right_after_its_last_answer",
    ) {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    support::write_skill(
        project.path(),
        "once",
        "",
        (
            "main.py",
            "import sandbox_ipc\nsandbox_ipc.connect().serve(lambda p: {'n': p.get('n')})\n",
        ),
    );
    let mut serve = start_serve(project.path());
    // Each call goes out the moment the previous answer arrives, while the
    // on-demand skill that gave it is still ending: the call must wait for
    // a fresh process, not be handed to the dying one.
    for n in 1..=4 {
        let answer = serve.invoke_and_wait("once", json!({"n": n}));
        assert_eq!(answer["result"]["n"], n, "call {n}: {answer}");
    }
}

#[test]
fn a_crashing_skill_restarts_with_back_off_then_is_disabled_and_others_are_unaffected() {
    if !support::require_root_sandbox("a_crashing_skill_restarts_with_back_off") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    support::write_skill(
        project.path(),
        "crash",
        "activation: persistent\n",
        (
            "crash.js",
            "process.on('message', () => process.exit(3));\n",
        ),
    );
    support::write_skill(
        project.path(),
        "steady",
        "activation: persistent\n",
        (
            "steady.js",
            "require('sandbox-ipc').onInvoke(async (p) => { await new Promise(r => setTimeout(r, 300)); return { ok: p.k }; });\n",
        ),
    );
    let mut serve = start_serve(project.path());
    // Concurrent: a slow call to steady while crash crashes.
    let steady = serve.send(
        "skill.invoke",
        json!({"name": "steady", "params": {"k": 1}}),
    );
    let crash = serve.send("skill.invoke", json!({"name": "crash", "params": {}}));
    let crashed = serve.response(crash);
    let mut starts = vec![Instant::now()];
    assert_eq!(crashed["error"]["code"], -32011, "{crashed}");
    let steady = serve.response(steady);
    assert_eq!(steady["result"]["ok"], 1, "{steady}");

    for _ in 0..4 {
        let answer = serve.invoke_and_wait("crash", json!({}));
        starts.push(Instant::now());
        assert_eq!(answer["error"]["code"], -32011, "{answer}");
    }
    // The waits before restarts 2..5 are at least 0.1, 0.5, 2 and 10 s.
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    for (gap, least) in gaps.iter().zip([100u64, 500, 2000, 10_000]) {
        assert!(
            *gap >= Duration::from_millis(least),
            "gaps {gaps:?} should follow the back-off"
        );
    }
    let disabled = serve.invoke_and_wait("crash", json!({}));
    assert_eq!(disabled["error"]["code"], -32012, "{disabled}");
    assert_eq!(serve.states("crash").last().unwrap(), "disabled");
    let again = serve.invoke_and_wait("steady", json!({"k": 2}));
    assert_eq!(again["result"]["ok"], 2, "{again}");
    let enabled = serve.request("skill.enable", json!({"name": "crash"}));
    assert_eq!(enabled["result"]["state"], "inactive", "{enabled}");
}

#[test]
fn editing_a_skill_while_serving_changes_the_next_result() {
    if !support::require_root_sandbox("editing_a_skill_while_serving") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    let dir = support::write_skill(
        project.path(),
        "greet",
        "activation: persistent\n",
        (
            "greet.py",
            "import sandbox_ipc\nsandbox_ipc.connect().serve(lambda p: 'hello')\n",
        ),
    );
    let mut serve = start_serve(project.path());
    assert_eq!(serve.invoke_and_wait("greet", json!({}))["result"], "hello");
    std::fs::write(
        dir.join("greet.py"),
        "import sandbox_ipc\nsandbox_ipc.connect().serve(lambda p: 'bonjour')\n",
    )
    .unwrap();
    let mut answer = Value::Null;
    let changed = support::wait::holds_within(Duration::from_secs(60), || {
        answer = serve.invoke_and_wait("greet", json!({}));
        answer["result"] == "bonjour"
    });
    assert!(changed, "still {answer}");
    // A new skill appears without a restart, and is announced.
    support::write_skill(
        project.path(),
        "late",
        "",
        (
            "late.sh",
            "sandbox ipc --invocation >/dev/null && sandbox ipc --result '\"late\"'\n",
        ),
    );
    let appeared = support::wait::holds_within(Duration::from_secs(60), || {
        answer = serve.invoke_and_wait("late", json!({}));
        answer["result"] == "late"
    });
    assert!(appeared, "still {answer}");
    assert!(serve.states("greet").contains(&"inactive".to_string()));
}

#[test]
fn killing_serve_kills_every_skill_process() {
    if !support::require_root_sandbox("killing_serve_kills_every_skill_process") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    let mark = support::marker("kill");
    support::write_skill(
        project.path(),
        &format!("k{mark}"),
        "activation: persistent\n",
        ("k.js", "require('sandbox-ipc').onInvoke(() => 'up');\n"),
    );
    let mut serve = start_serve(project.path());
    let answer = serve.invoke_and_wait(&format!("k{mark}"), json!({}));
    assert_eq!(answer["result"], "up", "{answer}");
    assert!(!support::host_pids_with(&mark).is_empty());
    serve.child.kill().unwrap();
    let _ = serve.child.wait();
    let left = support::wait_until_gone(&mark, 30);
    assert!(left.is_empty(), "still running: {left:?}");
}

/// `socket:[…]` and `pipe:[…]` objects behind descriptor 3 and up of `pid`.
fn shared_objects(pid: u32) -> std::collections::BTreeSet<String> {
    let mut objects = std::collections::BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return objects;
    };
    for entry in entries.flatten() {
        let number: i32 = entry.file_name().to_string_lossy().parse().unwrap_or(-1);
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        if number > 2 && (target.starts_with("socket:") || target.starts_with("pipe:")) {
            objects.insert(target);
        }
    }
    objects
}

/// A skill's host is a fork of serve: it must not keep serve's end of
/// another host's control socket, through which it could read that skill's
/// results or answer for it.
#[test]
fn a_skill_host_holds_none_of_serves_sockets() {
    if !support::require_root_sandbox("a_skill_host_holds_none_of_serves_sockets") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    let mark = support::marker("fds");
    for name in ["first", "second"] {
        support::write_skill(
            project.path(),
            &format!("{name}{mark}"),
            "activation: persistent\n",
            ("k.js", "require('sandbox-ipc').onInvoke(() => 'up');\n"),
        );
    }
    let mut serve = start_serve(project.path());
    for name in ["first", "second"] {
        let answer = serve.invoke_and_wait(&format!("{name}{mark}"), json!({}));
        assert_eq!(answer["result"], "up", "{answer}");
    }
    let serve_pid = serve.child.id();
    let serves = shared_objects(serve_pid);
    assert!(serves.len() >= 2, "serve's own sockets: {serves:?}");
    let hosts = support::children_of(serve_pid);
    assert_eq!(hosts.len(), 2, "one host per skill: {hosts:?}");
    for host in hosts {
        let held: Vec<_> = shared_objects(host)
            .intersection(&serves)
            .cloned()
            .collect();
        assert!(held.is_empty(), "host {host} holds serve's {held:?}");
    }
}

/// `sandbox skill run` under a profile with `review = true`: the skill's
/// writes are kept for review (the project is untouched until `sandbox
/// apply`), and it says so as `sandbox run --review` does; a persistent
/// skill under that profile fails `skill check`, which names the fix.
#[test]
fn a_skill_run_in_review_mode_keeps_its_writes_for_apply() {
    if !support::require_root_sandbox("a_skill_run_in_review_mode_keeps_its_writes_for_apply") {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    let writes = "import sandbox_ipc\nc = sandbox_ipc.connect()\n\
def handle(p):\n    open('out.txt', 'w').write('kept\\n')\n    return {'ok': True}\n\
c.serve(handle)\n";
    support::write_skill(
        project.path(),
        "scribe",
        "permissions: [fs.read, fs.write, fs.mkdir, fs.delete]\n",
        ("main.py", writes),
    );
    let state = tempfile::tempdir().unwrap();
    let profile = state.path().join("review.toml");
    std::fs::write(
        &profile,
        "version = 1\nextends = \"strict\"\n[filesystem]\nreview = true\n",
    )
    .unwrap();
    let sandbox = |args: &[&str]| {
        Command::new(support::sandbox_bin())
            .current_dir(project.path())
            .env("SANDBOX_STATE_DIR", state.path().join("state"))
            .args(args)
            .output()
            .unwrap()
    };
    let profile = profile.to_str().unwrap();
    let out = sandbox(&[
        "skill",
        "run",
        "--non-interactive",
        "--json",
        "--profile",
        profile,
        "scribe",
    ]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    if said.contains("mounting the review layer") {
        support::require(
            "a_skill_run_in_review_mode_keeps_its_writes_for_apply",
            "overlayfs over tmpfs in a user namespace",
            false,
        );
        return;
    }
    assert!(out.status.success(), "{said}");
    assert!(!project.path().join("out.txt").exists(), "{said}");
    let id = said
        .lines()
        .find_map(|l| l.strip_prefix("sandbox: run ")?.split(':').next())
        .filter(|_| said.contains("1 change(s) kept for review"))
        .unwrap_or_else(|| panic!("no review notice in {said}"))
        .to_owned();
    let applied = sandbox(&["apply", &id]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("out.txt")).unwrap(),
        "kept\n"
    );

    support::write_skill(
        project.path(),
        "lasting",
        "activation: persistent\npermissions: [fs.read, fs.write, fs.mkdir, fs.delete]\n",
        ("main.py", writes),
    );
    let checked = sandbox(&["skill", "check", "--profile", profile]);
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(!checked.status.success(), "{said}");
    assert!(
        said.contains("skill lasting is persistent")
            && said.contains("remove `activation: persistent`"),
        "{said}"
    );
}

/// The Python client is offered with its bytecode: a skill's `import
/// sandbox_ipc` loads it instead of compiling the source on every call
/// (the directory is read-only to skills, so Python could never cache it
/// itself). A skill cannot plant bytecode there for the next run.
#[test]
fn a_python_skill_loads_the_client_from_bytecode_it_cannot_replace() {
    if !support::require_root_sandbox("a_python_skill_loads_the_client_from_bytecode") {
        return;
    }
    if !support::require(
        "a_python_skill_loads_the_client_from_bytecode",
        "/usr/bin/python3",
        std::path::Path::new("/usr/bin/python3").exists(),
    ) {
        return;
    }
    let project = support::skill_project("sandbox-skills-");
    let cache = tempfile::tempdir().unwrap();
    // A `python3` first in PATH (a project's virtualenv, say) must never
    // be what compiles the client: that runs outside any sandbox. It leaves
    // a mark where no sandbox can write, then runs the real one.
    let fake_bin = tempfile::tempdir().unwrap();
    let mark = fake_bin.path().join("ran-outside");
    let fake = fake_bin.path().join("python3");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ntouch '{}'\nexec /usr/bin/python3 \"$@\"\n",
            mark.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        fake_bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Compiling a module raises the `compile` audit event; loading its
    // bytecode does not.
    let script = "import sys, os, importlib.util\n\
compiled = []\n\
sys.addaudithook(lambda e, a: compiled.append(str(a[1])) if e == 'compile' else None)\n\
import sandbox_ipc\n\
src = sandbox_ipc.__file__\n\
pyc = importlib.util.cache_from_source(src)\n\
try:\n    open(pyc, 'wb').write(b'poison'); planted = 'written'\n\
except OSError as e:\n    planted = e.strerror\n\
sandbox_ipc.connect().serve(lambda p: {'compiled': [c for c in compiled if 'sandbox_ipc' in c], \
'pyc': os.path.exists(pyc), 'planted': planted})\n";
    support::write_skill(
        project.path(),
        "py",
        "profile: permissive\n",
        ("main.py", script),
    );
    let run = || {
        let out = Command::new(support::sandbox_bin())
            .env("XDG_CACHE_HOME", cache.path())
            .env("PATH", &path)
            .args([
                "skill",
                "run",
                "--non-interactive",
                "--json",
                "--profile",
                "permissive",
                "--project",
            ])
            .arg(project.path())
            .args(["py", "--params", "{}"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let v: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{v} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        v
    };
    for _ in 0..2 {
        let v = run();
        assert_eq!(v["result"]["pyc"], true, "{v}");
        assert_eq!(v["result"]["compiled"], json!([]), "{v}");
        assert_ne!(v["result"]["planted"], "written", "{v}");
    }
    assert!(
        !mark.exists(),
        "a python3 from PATH ran outside the sandbox"
    );
}
