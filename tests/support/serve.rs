//! The one client of `sandbox serve` in the tests, for both faces
//! (`--stdio` and `--mcp`): newline-delimited JSON-RPC over the server's
//! stdin and stdout, with the test deciding exactly when each message goes
//! out (which a full SDK does not let it; `mcp_client` is the SDK side).
//!
//! Both faces send requests of their own (`skill.ask`,
//! `elicitation/create`) whose ids may equal one of ours, so a response is
//! a message with our id and no `method`: a message with a `method` is the
//! server's request or notification, never the answer to a request of ours.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::wait;

/// How long a test waits for a message it expects, before scaling by the
/// machine's load ([`wait::limit`]).
pub const MESSAGE_LIMIT: Duration = Duration::from_secs(60);

/// Which face of `serve` a command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    /// `serve --stdio`: `skill.*` methods for agent-host front ends.
    Stdio,
    /// `serve --mcp`: the Model Context Protocol.
    Mcp,
}

/// What the server's stdin and stdout are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Two pipes (what most hosts give a child).
    Pipes,
    /// One socket for both (what a Node host, libuv, gives for `'pipe'`).
    Socketpair,
}

/// `sandbox serve FACE --project PROJECT EXTRA...` run by this process.
pub fn command(face: Face, project: &Path, extra: &[&str]) -> Command {
    command_from(Command::new(super::sandbox_bin()), face, project, extra)
}

/// [`command`] on `base`, a `sandbox` command already set up (another
/// identity's, another environment).
pub fn command_from(mut base: Command, face: Face, project: &Path, extra: &[&str]) -> Command {
    base.arg("serve")
        .arg(match face {
            Face::Stdio => "--stdio",
            Face::Mcp => "--mcp",
        })
        .arg("--project")
        .arg(project)
        .args(extra);
    base
}

/// Whether `message` is the response to our request `id` (not a request
/// of the server's that happens to carry the same id).
pub fn is_response_to(message: &Value, id: u64) -> bool {
    message["id"] == id && message.get("method").is_none()
}

/// A running `sandbox serve` and the client side of its protocol.
pub struct Serve {
    /// The server process (killed when this is dropped).
    pub child: Child,
    input: Box<dyn Write + Send>,
    /// Each line of stdout, parsed, or the line itself when not JSON.
    lines: mpsc::Receiver<Result<Value, String>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    /// Messages read while waiting for something else, in order.
    pub seen: Vec<Value>,
    next: u64,
    scratch: Vec<tempfile::TempDir>,
}

impl Serve {
    /// Start `command` (see [`command`]) over pipes.
    pub fn start(command: Command) -> Serve {
        Serve::start_over(command, Transport::Pipes)
    }

    /// Start `command` with `transport` as its stdin and stdout; its
    /// stderr is collected ([`Serve::stderr`]).
    pub fn start_over(mut command: Command, transport: Transport) -> Serve {
        command.stderr(Stdio::piped());
        let (mut child, input, output): (Child, Box<dyn Write + Send>, Box<dyn Read + Send>) =
            match transport {
                Transport::Pipes => {
                    command.stdin(Stdio::piped()).stdout(Stdio::piped());
                    let mut child = command.spawn().expect("sandbox serve starts");
                    let input = Box::new(child.stdin.take().expect("stdin"));
                    let output = Box::new(child.stdout.take().expect("stdout"));
                    (child, input, output)
                }
                Transport::Socketpair => {
                    let (ours, theirs) = UnixStream::pair().expect("socketpair");
                    command
                        .stdin(Stdio::from(OwnedFd::from(
                            theirs.try_clone().expect("socket"),
                        )))
                        .stdout(Stdio::from(OwnedFd::from(theirs)));
                    let child = command.spawn().expect("sandbox serve starts");
                    let output = Box::new(ours.try_clone().expect("socket"));
                    (child, Box::new(ours), output)
                }
            };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines() {
                let Ok(line) = line else { break };
                let message = serde_json::from_str::<Value>(&line).map_err(|_| line);
                if tx.send(message).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut pipe = child.stderr.take().expect("stderr");
        let sink = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                sink.lock()
                    .expect("stderr buffer")
                    .extend_from_slice(&chunk[..n]);
            }
        });
        Serve {
            child,
            input,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
            seen: Vec::new(),
            next: 1,
            scratch: Vec::new(),
        }
    }

    /// Keep `dir` (the server's HOME, state directory) as long as the server.
    pub fn keep(&mut self, dir: tempfile::TempDir) {
        self.scratch.push(dir);
    }

    /// What the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr buffer")).into_owned()
    }

    /// Kill the server and return its whole stderr.
    pub fn finish(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        self.stderr()
    }

    /// Write one message.
    pub fn line(&mut self, message: Value) {
        self.input
            .write_all(format!("{message}\n").as_bytes())
            .expect("writing to serve");
        self.input.flush().expect("writing to serve");
    }

    /// Send a request; returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        self.send_object(json!({"method": method, "params": params}))
    }

    /// Send `request` (an object with a `method`, and `params` or none)
    /// as a request of ours: `jsonrpc` and the next id are set here.
    pub fn send_object(&mut self, mut request: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        request["jsonrpc"] = json!("2.0");
        request["id"] = json!(id);
        self.line(request);
        id
    }

    /// Send a notification.
    pub fn notify(&mut self, method: &str, params: Value) {
        self.line(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Send a request and wait for its response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.response(id)
    }

    /// Send a request whose response must be the very next message (the
    /// server said nothing else in between).
    pub fn request_next(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        assert!(
            self.seen.is_empty(),
            "messages arrived before the request: {:?}",
            self.seen
        );
        let answer = self.next_message("the next message");
        assert!(
            is_response_to(&answer, id),
            "answers come in order here: the next message is not the response to {id}: {answer}"
        );
        answer
    }

    /// The response to our request `id`.
    pub fn response(&mut self, id: u64) -> Value {
        self.response_within(id, MESSAGE_LIMIT)
    }

    /// [`Serve::response`], giving up after `base` scaled by the load.
    pub fn response_within(&mut self, id: u64, base: Duration) -> Value {
        self.wait_until_within(&format!("response {id}"), base, |m| is_response_to(m, id))
    }

    /// The next message, whatever it is.
    pub fn next_message(&mut self, what: &str) -> Value {
        self.wait_until(what, |_| true)
    }

    /// The first message (seen or next) that `wanted` picks.
    pub fn wait_until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        self.wait_until_within(what, MESSAGE_LIMIT, wanted)
    }

    /// [`Serve::wait_until`], giving up after `base` scaled by the load.
    pub fn wait_until_within(
        &mut self,
        what: &str,
        base: Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(at) = self.seen.iter().position(&wanted) {
            return self.seen.remove(at);
        }
        let mut deadline = wait::Deadline::after(base);
        loop {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(Ok(message)) if wanted(&message) => return message,
                Ok(Ok(message)) => self.seen.push(message),
                Ok(Err(line)) => panic!(
                    "stdout carried a non-JSON line {line:?}\n--- stderr ---\n{}",
                    self.stderr()
                ),
                Err(RecvTimeoutError::Timeout) if !deadline.passed() => {}
                Err(failure) => panic!(
                    "no {what} from serve ({}, after {:.0?}); seen {:?}\n--- stderr ---\n{}",
                    match failure {
                        RecvTimeoutError::Timeout => "limit passed",
                        RecvTimeoutError::Disconnected => "stdout closed",
                    },
                    deadline.elapsed(),
                    self.seen,
                    self.stderr()
                ),
            }
        }
    }

    /// Whether a message `wanted` picks arrives within `window` scaled by
    /// the load (for what must not happen: the window bounds how long the
    /// test looks, and a loaded machine gets a longer look).
    pub fn arrives_within(&mut self, window: Duration, wanted: impl Fn(&Value) -> bool) -> bool {
        if self.seen.iter().any(&wanted) {
            return true;
        }
        let until = std::time::Instant::now() + wait::limit(window);
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(Ok(message)) => {
                    let hit = wanted(&message);
                    self.seen.push(message);
                    if hit {
                        return true;
                    }
                }
                Ok(Err(line)) => panic!("stdout carried a non-JSON line {line:?}"),
                Err(_) => break,
            }
        }
        false
    }

    /// `skill.invoke` of `name` (`--stdio`); returns the request's id.
    pub fn invoke(&mut self, name: &str, params: Value) -> u64 {
        self.send("skill.invoke", json!({"name": name, "params": params}))
    }

    /// `skill.invoke` of `name` (`--stdio`), and its response.
    pub fn invoke_and_wait(&mut self, name: &str, params: Value) -> Value {
        let id = self.invoke(name, params);
        self.response(id)
    }

    /// The server's next `skill.ask` request (`--stdio --ask-client`).
    pub fn next_ask(&mut self) -> Value {
        self.wait_until("skill.ask", |m| m["method"] == "skill.ask")
    }

    /// Answer the `skill.ask` request `ask` with `choice`.
    pub fn answer_ask(&mut self, ask: &Value, choice: &str) {
        let id = ask["id"].clone();
        self.line(json!({"jsonrpc": "2.0", "id": id, "result": {"answer": choice}}));
    }

    /// The `skill.stateChanged` states of skill `name` seen so far.
    pub fn states(&self, name: &str) -> Vec<String> {
        self.seen
            .iter()
            .filter(|n| n["method"] == "skill.stateChanged" && n["params"]["name"] == name)
            .map(|n| n["params"]["state"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// The MCP 2025-11-25 handshake (`--mcp`), declaring `capabilities`;
    /// the server's answer is the first message it sends.
    pub fn initialize(&mut self, capabilities: Value) -> Value {
        let init = self.request_next(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": {"name": "sandbox-tests", "version": "1"},
            }),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
        self.line(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init
    }

    /// `tools/call` of `name` (`--mcp`); returns the request's id.
    pub fn call_tool(&mut self, name: &str, arguments: Value) -> u64 {
        self.send("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// The server's next `elicitation/create` request (`--mcp`).
    pub fn elicitation(&mut self) -> Value {
        self.wait_until("elicitation/create", |m| {
            m["method"] == "elicitation/create"
        })
    }

    /// Accept the elicitation `elicitation` with `decision`.
    pub fn answer_elicitation(&mut self, elicitation: &Value, decision: &str) {
        let id = elicitation["id"].clone();
        self.line(json!({"jsonrpc": "2.0", "id": id,
                         "result": {"action": "accept", "content": {"decision": decision}}}));
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
