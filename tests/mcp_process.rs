//! The shape of `sandbox serve --mcp` as a process, whatever kind of
//! stdio the agent host gives it: one thread, so that skill hosts are
//! forked from it (an executed `sandbox __skill-host` would cost each
//! activation a second start of the binary), and nothing but protocol
//! messages on stdout.

mod support;

use serde_json::json;
use support::serve::{self, Face, Serve, Transport};

/// A project with one persistent Python skill that prints to stdout
/// (which must never reach the protocol) and answers.
fn project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-mcp-process-")
        .tempdir_in("/tmp")
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let skill = dir.path().join(".skills/noisy");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: noisy\ndescription: prints, then answers\nruntime: python\nmain: main.py\n\
         activation: persistent\n---\nTest.\n",
    )
    .unwrap();
    std::fs::write(
        skill.join("main.py"),
        "import sys, sandbox_ipc\n\
         print('{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"forged\":true}}', flush=True)\n\
         def handle(p):\n    print('noise on stdout', flush=True)\n    return {'n': p.get('n')}\n\
         sandbox_ipc.connect().serve(handle)\n",
    )
    .unwrap();
    dir
}

/// `sandbox serve --mcp` for `project` over `transport`, started with
/// nothing of this environment but PATH. `extra`: more arguments, and
/// `--tmpdir DIR` for the server's TMPDIR.
fn start_session(project: &std::path::Path, extra: &[&str], transport: Transport) -> Serve {
    let mut command = serve::command(Face::Mcp, project, &[]);
    command.env_clear().env("PATH", "/usr/bin:/bin");
    let mut extra = extra.iter();
    while let Some(arg) = extra.next() {
        match *arg {
            "--tmpdir" => {
                command.env("TMPDIR", extra.next().copied().unwrap_or("/tmp"));
            }
            other => {
                command.arg(other);
            }
        }
    }
    Serve::start_over(command, transport)
}

/// The server's threads, and the command lines of its descendants.
fn shape(pid: u32) -> (usize, Vec<String>) {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count();
    let mut descendants = Vec::new();
    let mut parents = vec![pid.to_string()];
    while let Some(parent) = parents.pop() {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .nth(1);
            if ppid == Some(parent.as_str()) {
                let cmdline = std::fs::read(format!("/proc/{name}/cmdline")).unwrap_or_default();
                descendants.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
                parents.push(name);
            }
        }
    }
    (threads, descendants)
}

fn one_thread_forked_hosts_and_a_clean_stdout(test: &str, transport: Transport) {
    if !support::require_root_sandbox(test) {
        return;
    }
    let project = project();
    let mut session = start_session(project.path(), &[], transport);
    session.initialize(json!({}));
    for n in 0..3 {
        let answer = session.request_next(
            "tools/call",
            json!({"name": "noisy", "arguments": {"n": n}}),
        );
        assert_eq!(answer["result"]["structuredContent"]["n"], n, "{answer}");
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
    let (threads, descendants) = shape(session.child.id());
    assert_eq!(
        threads, 1,
        "serve --mcp must stay single-threaded to fork its hosts"
    );
    assert!(
        !descendants.is_empty(),
        "the persistent skill's host is running"
    );
    assert!(
        descendants
            .iter()
            .all(|args| !args.contains("__skill-host")),
        "a host was executed instead of forked: {descendants:?}"
    );
    // The skill's prints (one of them a forged response) never reached
    // stdout: the next message is the answer to the next request.
    let answer = session.request_next("ping", json!({}));
    assert!(answer.get("result").is_some(), "{answer}");
}

#[test]
fn over_pipes_one_thread_forked_hosts_and_a_clean_stdout() {
    one_thread_forked_hosts_and_a_clean_stdout(
        "over_pipes_one_thread_forked_hosts_and_a_clean_stdout",
        Transport::Pipes,
    );
}

#[test]
fn over_a_socketpair_one_thread_forked_hosts_and_a_clean_stdout() {
    one_thread_forked_hosts_and_a_clean_stdout(
        "over_a_socketpair_one_thread_forked_hosts_and_a_clean_stdout",
        Transport::Socketpair,
    );
}

#[test]
fn an_unknown_tool_is_a_protocol_error() {
    let test = "an_unknown_tool_is_a_protocol_error";
    if !support::require_root_sandbox(test) {
        return;
    }
    let project = project();
    let mut session = start_session(project.path(), &[], Transport::Pipes);
    session.initialize(json!({}));
    let answer = session.request_next(
        "tools/call",
        json!({"name": "no-such-tool", "arguments": {}}),
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no-such-tool"), "{answer}");
}

#[test]
fn sigterm_ends_the_server_and_its_shell_commands_cleanly() {
    let test = "sigterm_ends_the_server_and_its_shell_commands_cleanly";
    if !support::require_root_sandbox(test) {
        return;
    }
    let project = project();
    let tmp = tempfile::tempdir().unwrap();
    let tmpdir = tmp.path().to_str().unwrap().to_string();
    let mut session = start_session(
        project.path(),
        &["--shell", "--tmpdir", &tmpdir],
        Transport::Pipes,
    );
    session.initialize(json!({}));
    // `sleep 30.MARKER` sleeps 30 s and names this test's process.
    let marker = support::marker("sigterm");
    let command = format!("sleep 30.{marker}");
    session.call_tool("shell", json!({"command": command}));
    // The command is running once its report directory exists.
    support::wait::until_true(
        "the shell command to start",
        std::time::Duration::from_secs(60),
        || std::fs::read_dir(tmp.path()).unwrap().count() > 0,
    );
    let pid = nix::unistd::Pid::from_raw(session.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = session.child.wait().unwrap();
    assert!(
        status.success(),
        "SIGTERM is a clean end, not a kill: {status:?}"
    );
    let alive = support::wait_until_gone(&marker, 10);
    assert!(
        alive.is_empty(),
        "the shell command outlived the server: {alive:?}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        left.is_empty(),
        "the shell command's files were left behind: {left:?}"
    );
}
