//! The broker channel from inside a strict sandbox: round trips, decisions,
//! and hostile input, each case named. A Python client speaks to fd 3.

mod support;

use serde_json::Value;
use support::{assert_ok, Project, Who};

/// Sends each input line and prints each answer line, one per input.
const CLIENT: &str = r#"
import os, socket, sys
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
f = s.makefile("rwb", buffering=0)
for raw in sys.stdin.buffer.read().split(b"\n--8<--\n"):
    f.write(raw + b"\n")
    print(f.readline().decode().strip(), flush=True)
"#;

fn exchange(project: &Project, requests: &[Vec<u8>]) -> Vec<Value> {
    exchange_with(project, &[], requests)
}

fn exchange_with(project: &Project, extra: &[&str], requests: &[Vec<u8>]) -> Vec<Value> {
    use std::io::Write;
    let mut child = project
        .command()
        .args(["run", "--audit", "audit.jsonl"])
        .args(extra)
        .args(["--", "python3", "-c", CLIENT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input = requests.join(&b"\n--8<--\n"[..]);
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, "broker client");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON answer per line"))
        .collect()
}

fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error, got {answer}"))
}

fn project_with_files(who: Who) -> Project {
    let project = Project::new(who);
    project.write("notes.txt", "hello broker\n");
    project.write(".env", "API_KEY=SECRET\n");
    project.write("sub/keep", "");
    std::os::unix::fs::symlink("/etc/passwd", project.path().join("abs-link")).unwrap();
    std::os::unix::fs::symlink(
        "../../../../../../etc/passwd",
        project.path().join("rel-link"),
    )
    .unwrap();
    std::os::unix::fs::symlink(".env", project.path().join("env-link")).unwrap();
    project
}

#[test]
fn allowed_reads_and_stats_round_trip() {
    for who in support::identities("allowed_reads_and_stats_round_trip") {
        let project = project_with_files(who);
        let answers = exchange(
            &project,
            &[
                request(1, "fs.read", serde_json::json!({"path": "notes.txt"})),
                request(2, "fs.stat", serde_json::json!({"path": "notes.txt"})),
                request(
                    3,
                    "permission.query",
                    serde_json::json!({"action": "fs.write"}),
                ),
                request(
                    4,
                    "fs.read",
                    serde_json::json!({"path": project.path().join("notes.txt").to_str().unwrap()}),
                ),
            ],
        );
        assert_eq!(answers[0]["result"]["content"], "hello broker\n", "{who:?}");
        assert_eq!(answers[1]["result"]["type"], "file");
        assert_eq!(answers[1]["result"]["size"], 13);
        assert_eq!(answers[2]["result"]["decision"], "ask");
        assert_eq!(answers[2]["result"]["effective"], "deny");
        assert_eq!(
            answers[3]["result"]["content"], "hello broker\n",
            "absolute path inside the project"
        );
    }
}

#[test]
fn escapes_are_refused_every_way() {
    for who in support::identities("escapes_are_refused_every_way") {
        let project = project_with_files(who);
        let cases = [
            ("dot-dot", "../../../../etc/passwd", -32001),
            ("absolute outside", "/etc/passwd", -32001),
            ("proc self root", "/proc/self/root/etc/passwd", -32001),
            ("proc self fd", "/proc/self/fd/3", -32001),
            (
                "proc self fd, relative",
                "../../../../../../proc/self/fd/3",
                -32001,
            ),
            ("absolute symlink inside", "abs-link", -32001),
            ("relative symlink escaping", "rel-link", -32001),
            ("hidden file", ".env", -32001),
            ("symlink to a hidden file", "env-link", -32001),
            ("dot-dot back into a hidden file", "sub/../.env", -32001),
            ("missing", "no-such-file", -32005),
        ];
        let requests: Vec<Vec<u8>> = cases
            .iter()
            .enumerate()
            .map(|(i, (_, path, _))| {
                request(i as u64, "fs.read", serde_json::json!({ "path": path }))
            })
            .collect();
        let answers = exchange(&project, &requests);
        for ((name, _, expected), answer) in cases.iter().zip(&answers) {
            assert_eq!(error_code(answer), *expected, "{name} ({who:?}): {answer}");
            assert!(
                !answer.to_string().contains("root:x:0:0"),
                "{name} leaked /etc/passwd"
            );
            assert!(!answer.to_string().contains("SECRET"), "{name} leaked .env");
        }
        let nul = exchange(&project, &[br#"{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"notes.txt\u0000x"}}"#.to_vec()]);
        assert_eq!(error_code(&nul[0]), -32602, "NUL in a path");
    }
}

#[test]
fn ask_without_a_terminal_is_denied_with_the_fix() {
    let project = project_with_files(Who::Root);
    if !support::require_root_sandbox("broker") {
        return;
    }
    let answers = exchange(
        &project,
        &[request(
            1,
            "fs.write",
            serde_json::json!({"path": "x", "content": "y"}),
        )],
    );
    assert_eq!(error_code(&answers[0]), -32002);
    let message = answers[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("pre-approve it with `sandbox run --grant fs.write`"),
        "{message}"
    );
    assert!(
        message.contains("[broker] rules = { \"fs.write\" = \"allow\" }"),
        "{message}"
    );
    assert!(!project.path().join("x").exists());
}

#[test]
fn hostile_input_gets_errors_and_the_broker_stays_up() {
    if !support::require_root_sandbox("broker") {
        return;
    }
    let project = project_with_files(Who::Root);
    let mut deep = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":"#.to_vec();
    deep.extend(std::iter::repeat_n(b'[', 900_000));
    let cases: Vec<(&str, Vec<u8>, i64)> = vec![
        ("invalid JSON", b"{not json".to_vec(), -32700),
        (
            "truncated JSON",
            br#"{"jsonrpc":"2.0","id":1,"method":"fs.re"#.to_vec(),
            -32700,
        ),
        (
            "invalid UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}".to_vec(),
            -32700,
        ),
        ("2 MiB line", vec![b'x'; 2 << 20], -32004),
        ("900,000 nested brackets", deep, -32600),
        (
            "duplicate field",
            br#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#.to_vec(),
            -32600,
        ),
        (
            "unknown field",
            br#"{"jsonrpc":"2.0","id":1,"method":"log","x":1}"#.to_vec(),
            -32600,
        ),
        (
            "wrong type",
            br#"{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":5}}"#.to_vec(),
            -32602,
        ),
        (
            "unknown method",
            request(1, "no.such.method", Value::Null),
            -32601,
        ),
    ];
    let mut requests: Vec<Vec<u8>> = cases.iter().map(|(_, r, _)| r.clone()).collect();
    requests.push(request(
        99,
        "fs.read",
        serde_json::json!({"path": "notes.txt"}),
    ));
    let answers = exchange(&project, &requests);
    for ((name, _, expected), answer) in cases.iter().zip(&answers) {
        assert_eq!(error_code(answer), *expected, "{name}: {answer}");
    }
    assert_eq!(
        answers.last().unwrap()["result"]["content"],
        "hello broker\n",
        "still answering after all that"
    );
    let audit = std::fs::read_to_string(project.path().join("audit.jsonl")).unwrap();
    let last: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(last["method"], "fs.read");
    assert_eq!(last["decision"], "allow");
    assert_eq!(last["target"], "notes.txt");
}

#[test]
fn granted_writes_mkdirs_lists_and_deletes_work_inside_the_project() {
    for who in
        support::identities("granted_writes_mkdirs_lists_and_deletes_work_inside_the_project")
    {
        let project = project_with_files(who);
        let grants = [
            "--grant",
            "fs.write",
            "--grant",
            "fs.mkdir",
            "--grant",
            "fs.delete",
        ];
        let answers = exchange_with(
            &project,
            &grants,
            &[
                request(1, "fs.mkdir", serde_json::json!({"path": "out"})),
                request(
                    2,
                    "fs.write",
                    serde_json::json!({"path": "out/a.txt", "content": "from the broker"}),
                ),
                request(3, "fs.list", serde_json::json!({"path": "."})),
                request(4, "fs.delete", serde_json::json!({"path": "notes.txt"})),
                request(
                    5,
                    "fs.write",
                    serde_json::json!({"path": ".env", "content": "overwritten"}),
                ),
                request(
                    6,
                    "fs.write",
                    serde_json::json!({"path": "../escape.txt", "content": "x"}),
                ),
            ],
        );
        assert!(answers[0]["result"].is_object(), "{who:?} {}", answers[0]);
        assert_eq!(
            std::fs::read_to_string(project.path().join("out/a.txt")).unwrap(),
            "from the broker"
        );
        let names: Vec<&str> = answers[2]["result"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"out") && names.contains(&"notes.txt"),
            "{names:?}"
        );
        assert!(
            !names.contains(&".env"),
            "hidden entries are not listed: {names:?}"
        );
        assert!(!project.path().join("notes.txt").exists(), "deleted");
        assert_eq!(
            error_code(&answers[4]),
            -32001,
            "a hidden file cannot be written"
        );
        assert_eq!(
            std::fs::read_to_string(project.path().join(".env")).unwrap(),
            "API_KEY=SECRET\n"
        );
        assert_eq!(error_code(&answers[5]), -32001, "no write outside");
        assert!(!project.path().parent().unwrap().join("escape.txt").exists());
    }
}

#[test]
fn writes_through_hard_links_and_symlinks_are_refused() {
    if !support::require_root_sandbox("broker") {
        return;
    }
    let project = project_with_files(Who::Root);
    let outside = tempfile::Builder::new()
        .prefix("outside-")
        .tempfile_in("/tmp")
        .unwrap();
    std::fs::write(outside.path(), "original").unwrap();
    std::fs::hard_link(outside.path(), project.path().join("hard")).unwrap();
    let answers = exchange_with(
        &project,
        &["--grant", "fs.write"],
        &[
            request(
                1,
                "fs.write",
                serde_json::json!({"path": "hard", "content": "clobbered"}),
            ),
            request(
                2,
                "fs.write",
                serde_json::json!({"path": "abs-link", "content": "clobbered"}),
            ),
        ],
    );
    assert_eq!(error_code(&answers[0]), -32001, "{}", answers[0]);
    assert!(answers[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("more than one hard link"));
    assert_eq!(
        std::fs::read_to_string(outside.path()).unwrap(),
        "original",
        "the outside file is untouched"
    );
    assert_eq!(error_code(&answers[1]), -32001, "{}", answers[1]);
    assert!(std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .starts_with("root:"));
}

#[test]
fn a_grant_with_an_empty_pattern_or_an_unknown_action_is_refused_up_front() {
    let project = Project::new(Who::Root);
    let out = project.run_with(&["--grant", "fs.write:"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the pattern after ':' is empty"));
    let out = project.run_with(&["--grant", "fs.writ:dist/**"], &["/bin/true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"fs.writ\" is not a broker action"));
}

#[test]
fn rules_and_grants_with_patterns_narrow_to_their_targets() {
    for who in support::identities("rules_and_grants_with_patterns_narrow_to_their_targets") {
        let project = Project::new(who);
        project.write("private/key.txt", "secret-ish");
        project.write("public/readme.txt", "hello");
        let profile = project.write(
            "patterns.toml",
            "version = 1\nextends = \"strict\"\n[broker]\nrules = { \"fs.read:private/**\" = \"deny\" }\n",
        );
        let answers = exchange_with(
            &project,
            &[
                "--profile",
                profile.to_str().unwrap(),
                "--grant",
                "fs.write:dist/**",
                "--grant",
                "fs.mkdir:dist",
            ],
            &[
                request(1, "fs.mkdir", serde_json::json!({"path": "dist"})),
                request(
                    2,
                    "fs.write",
                    serde_json::json!({"path": "dist/app.js", "content": "built"}),
                ),
                request(
                    3,
                    "fs.write",
                    serde_json::json!({"path": "src.js", "content": "no"}),
                ),
                request(4, "fs.read", serde_json::json!({"path": "private/key.txt"})),
                request(
                    5,
                    "fs.read",
                    serde_json::json!({"path": "public/readme.txt"}),
                ),
                request(
                    6,
                    "permission.query",
                    serde_json::json!({"action": "fs.write", "target": "dist/x"}),
                ),
            ],
        );
        assert!(answers[0]["result"].is_object(), "{who:?}: {}", answers[0]);
        assert_eq!(
            std::fs::read_to_string(project.path().join("dist/app.js")).unwrap(),
            "built"
        );
        assert_eq!(
            error_code(&answers[2]),
            -32002,
            "outside the granted pattern it still asks"
        );
        assert_eq!(error_code(&answers[3]), -32001);
        assert_eq!(
            answers[3]["error"]["data"]["rule"],
            "broker.rules.\"fs.read:private/**\""
        );
        assert_eq!(answers[4]["result"]["content"], "hello");
        assert_eq!(answers[5]["result"]["decision"], "allow");
        assert!(!project.path().join("src.js").exists());
    }
}

/// Swaps `inside` (a regular file) and `link` (a symlink to /etc/passwd)
/// with renameat2(RENAME_EXCHANGE) in a loop, while reading `inside` through
/// the broker; prints how many reads returned outside content.
const RACE: &str = r#"
import ctypes, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
with open("inside", "w") as f: f.write("inside\n")
os.symlink("/etc/passwd", "link")
pid = os.fork()
if pid == 0:
    swaps = 0
    while swaps < 10000 or not os.path.exists("stop"):
        libc.syscall(316, AT_FDCWD, b"inside", AT_FDCWD, b"link", RENAME_EXCHANGE)
        swaps += 1
    with open("swaps", "w") as f: f.write(str(swaps))
    os._exit(0)
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
f = s.makefile("rwb", buffering=0)
leaks = reads = refusals = 0
while True:
    done, _ = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    f.write(b'{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"inside"}}\n')
    answer = json.loads(f.readline())
    if "result" in answer:
        reads += 1
        if "root:" in answer["result"]["content"]:
            leaks += 1
    else:
        refusals += 1
    if reads + refusals == 2000:
        open("stop", "w").close()
swaps = int(open("swaps").read())
print(json.dumps({"leaks": leaks, "reads": reads, "refusals": refusals, "swaps": swaps}))
"#;

#[test]
fn a_rename_exchange_race_never_redirects_a_read_outside() {
    for who in support::identities("a_rename_exchange_race_never_redirects_a_read_outside") {
        let project = Project::new(who);
        let out = project.run(&["python3", "-c", RACE]);
        assert_ok(&out, "race");
        let counts: Value = serde_json::from_slice(out.stdout.trim_ascii()).unwrap();
        assert_eq!(counts["leaks"], 0, "{who:?}: {counts}");
        assert!(counts["swaps"].as_u64().unwrap() >= 10_000, "{counts}");
        assert!(
            counts["reads"].as_u64().unwrap() > 0,
            "some reads hit the regular file: {counts}"
        );
        assert!(
            counts["refusals"].as_u64().unwrap() > 0,
            "some reads hit the symlink and were refused: {counts}"
        );
    }
}

/// Sends the broker a descriptor with SCM_RIGHTS inside a request, checks
/// the broker still answers, then waits (until the test kills it) so the
/// host can look.
const PASS_FD: &str = r#"
import json, os, socket, sys, time
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
fd = os.open("marker-passed-to-broker.txt", os.O_RDONLY)
req = b'{"jsonrpc":"2.0","id":1,"method":"fs.stat","params":{"path":"."}}\n'
socket.send_fds(s, [req], [fd])
answer = s.makefile("rb").readline()
print(json.loads(answer)["result"]["type"], flush=True)
time.sleep(3600)
"#;

#[test]
fn descriptors_passed_to_the_broker_are_closed_not_used() {
    if !support::require_root_sandbox("broker") {
        return;
    }
    let project = Project::new(Who::Root);
    project.write("marker-passed-to-broker.txt", "x");
    let mut child = project
        .command()
        .args(["run", "--", "python3", "-c", PASS_FD])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(
        line.trim(),
        "directory",
        "the broker answered the request that carried the descriptor"
    );
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", child.id()))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|p| p.display().to_string())
        .filter(|p| p.contains("marker-passed-to-broker"))
        .collect();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        held.is_empty(),
        "the supervisor kept a passed descriptor: {held:?}"
    );
}

#[test]
fn secrets_come_as_handles_and_as_values_only_where_the_profile_allows() {
    for who in
        support::identities("secrets_come_as_handles_and_as_values_only_where_the_profile_allows")
    {
        let project = Project::new(who);
        let get = |id| request(id, "secrets.get", serde_json::json!({"name": "TOKEN"}));
        let run = |extra: &[&str]| {
            let mut cmd = project.command();
            cmd.env("HOST_TOKEN", "s3cr3t-value")
                .args([
                    "run",
                    "--audit",
                    "audit.jsonl",
                    "--secret",
                    "TOKEN=env:HOST_TOKEN",
                ])
                .args(extra)
                .args(["--", "python3", "-c", CLIENT])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let input = [
                get(1),
                request(2, "secrets.get", serde_json::json!({"name": "OTHER"})),
            ]
            .join(&b"\n--8<--\n"[..]);
            std::io::Write::write_all(&mut child.stdin.take().unwrap(), &input).unwrap();
            let out = child.wait_with_output().unwrap();
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        };
        // strict: secrets.get asks, and nobody can be asked.
        let answers = run(&[]);
        assert_eq!(error_code(&answers[0]), -32002, "{who:?}");
        // Granted: a handle, no value.
        let answers = run(&["--grant", "secrets.get"]);
        let handle = answers[0]["result"]["handle"].as_str().unwrap();
        assert!(handle.starts_with("secret:TOKEN:"), "{handle}");
        assert!(answers[0]["result"].get("value").is_none());
        assert_eq!(error_code(&answers[1]), -32005, "unknown secret");
        // With secrets.read allowed too, the value.
        let answers = run(&["--grant", "secrets.get", "--grant", "secrets.read"]);
        assert_eq!(answers[0]["result"]["value"], "s3cr3t-value");
        let audit = std::fs::read_to_string(project.path().join("audit.jsonl")).unwrap();
        assert!(audit.contains("\"target\":\"TOKEN\""), "{audit}");
        assert!(!audit.contains("s3cr3t"), "the audit never holds a value");
    }
}

#[test]
fn terminal_run_runs_in_a_sandbox_as_strict_as_the_callers() {
    for who in support::identities("terminal_run_runs_in_a_sandbox_as_strict_as_the_callers") {
        let project = Project::new(who);
        let run = |id, params: Value| request(id, "terminal.run", params);
        let requests = [
            run(
                1,
                serde_json::json!({"argv": ["sh", "-c", "echo out; echo err >&2; cat; exit 3"], "stdin": "fed in"}),
            ),
            run(
                2,
                serde_json::json!({"argv": ["sh", "-c", "test -e /etc/shadow && echo SHADOW; test -e /root && echo ROOT; grep -c 'NoNewPrivs:.1' /proc/self/status"]}),
            ),
            run(
                3,
                serde_json::json!({"argv": ["true"], "env": {"LD_PRELOAD": "/tmp/evil.so"}}),
            ),
            // The timeout is what is tested, not how fast the nested run
            // starts: long enough (on this machine now) for the sleep to
            // start, and the sleep outlasts any scaled timeout.
            run(
                4,
                serde_json::json!({"argv": ["sleep", "3600"],
                                   "timeout": support::wait::seconds(std::time::Duration::from_secs(2))}),
            ),
            run(5, serde_json::json!({"argv": ["no-such-program"]})),
        ];
        let answers = exchange_with(&project, &["--grant", "terminal.run"], &requests);
        let first = &answers[0]["result"];
        assert_eq!(first["exit_code"], 3, "{who:?}: {}", answers[0]);
        assert_eq!(first["stdout"], "out\nfed in");
        assert_eq!(first["stderr"], "err\n");
        let second = &answers[1]["result"];
        // Neither /etc/shadow nor /root exists in its view, and no_new_privs is set.
        assert_eq!(
            second["stdout"], "1\n",
            "the nested command sees no more than the caller: {second}"
        );
        assert_eq!(
            error_code(&answers[2]),
            -32001,
            "LD_PRELOAD refused: {}",
            answers[2]
        );
        assert_eq!(answers[3]["result"]["timed_out"], true, "{}", answers[3]);
        assert_eq!(error_code(&answers[4]), -32005, "{}", answers[4]);
        // Without approval nothing runs.
        let denied = exchange(
            &project,
            &[run(1, serde_json::json!({"argv": ["touch", "ran"]}))],
        );
        assert_eq!(error_code(&denied[0]), -32002);
        assert!(!project.path().join("ran").exists());
    }
}
