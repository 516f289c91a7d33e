//! Recording test servers on the host's loopback, and `sandbox run` with a
//! network allowlist, for the tests of the proxy and of broker `net.http`.
//!
//! A server records every connection and every byte it receives before it
//! answers, so once a client inside the sandbox has its answer the record
//! holds the request; [`TestServer::settled`] makes "the server saw nothing"
//! reliable too (see there).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use super::Project;

/// What one server has received, connection by connection.
#[derive(Debug, Default)]
struct Record {
    /// (peer, bytes received) per accepted connection, in accept order.
    connections: Vec<(SocketAddr, Vec<u8>)>,
}

/// A plain-HTTP server on a loopback address that answers every request
/// with `200` and a body naming the server and echoing the request head, so
/// a test sees which server a request reached and with which headers. The
/// request's `Authorization` header is also echoed as the response header
/// `X-Echo-Authorization`. A request for a path starting `/size/N` gets a
/// body of N bytes of `x` instead.
pub struct TestServer {
    /// The server's name, in every body it sends (`server=NAME`).
    pub name: String,
    addr: SocketAddr,
    record: Arc<Mutex<Record>>,
}

impl TestServer {
    /// A server named `name` on 127.0.0.1, on a free port.
    pub fn start(name: &str) -> TestServer {
        TestServer::start_on(name, "127.0.0.1")
    }

    /// A server named `name` on `ip` (any 127.0.0.0/8 address), on a free port.
    pub fn start_on(name: &str, ip: &str) -> TestServer {
        let listener = TcpListener::bind((ip, 0)).expect("bind a loopback test server");
        let addr = listener.local_addr().expect("local address");
        let record = Arc::new(Mutex::new(Record::default()));
        let server_name = name.to_string();
        let shared = Arc::clone(&record);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Ok(peer) = stream.peer_addr() else {
                    continue;
                };
                let index = {
                    let mut record = shared.lock().unwrap();
                    record.connections.push((peer, Vec::new()));
                    record.connections.len() - 1
                };
                let shared = Arc::clone(&shared);
                let name = server_name.clone();
                std::thread::spawn(move || serve_connection(stream, &name, index, &shared));
            }
        });
        TestServer {
            name: name.to_string(),
            addr,
            record,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Its address, `IP:PORT`.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Wait until every connection made before this call has been
    /// accepted: a probe connection of the test's own is accepted after
    /// them (the listen queue is first in, first out), and is left out of
    /// the record. Call before asserting that the server saw nothing.
    pub fn settled(&self) -> &TestServer {
        let probe = TcpStream::connect(self.addr).expect("probe connection");
        let local = probe.local_addr().expect("probe address");
        super::wait::until_true(
            &format!("server {} to accept the probe connection", self.name),
            std::time::Duration::from_secs(60),
            || {
                let mut record = self.record.lock().unwrap();
                let at = record.connections.iter().position(|(p, _)| *p == local);
                at.map(|at| record.connections.remove(at)).is_some()
            },
        );
        drop(probe);
        self
    }

    /// How many connections it accepted.
    pub fn connection_count(&self) -> usize {
        self.record.lock().unwrap().connections.len()
    }

    /// Everything it received, all connections in order, as text.
    pub fn received(&self) -> String {
        let record = self.record.lock().unwrap();
        record
            .connections
            .iter()
            .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned())
            .collect::<Vec<_>>()
            .join("\n--connection--\n")
    }

    /// Panic, naming `what`, unless nothing ever connected to it.
    pub fn assert_saw_nothing(&self, what: &str) {
        self.settled();
        assert_eq!(
            self.connection_count(),
            0,
            "{what}: server {} was reached; it received:\n{}",
            self.name,
            self.received()
        );
    }
}

fn serve_connection(stream: TcpStream, name: &str, index: usize, record: &Mutex<Record>) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut head = Vec::new();
        // The head, line by line, up to the empty line.
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => {
                    append(record, index, &line);
                    return;
                }
                Ok(_) => {}
            }
            append(record, index, &line);
            let blank = line == b"\r\n" || line == b"\n";
            head.extend_from_slice(&line);
            if blank {
                break;
            }
        }
        let head_text = String::from_utf8_lossy(&head).into_owned();
        let header = |wanted: &str| {
            head_text.lines().skip(1).find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.trim()
                    .eq_ignore_ascii_case(wanted)
                    .then(|| value.trim().to_string())
            })
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            append(record, index, &body);
            return;
        }
        append(record, index, &body);
        let target = head_text.split_whitespace().nth(1).unwrap_or("");
        let path = target
            .find("://")
            .and_then(|at| target[at + 3..].find('/').map(|p| &target[at + 3 + p..]))
            .unwrap_or(target);
        let answer: Vec<u8> = match path.strip_prefix("/size/") {
            Some(size) => vec![b'x'; size.parse().unwrap_or(0)],
            None => format!("server={name}\n{head_text}").into_bytes(),
        };
        let mut response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n",
            answer.len()
        );
        if let Some(auth) = header("authorization") {
            response.push_str(&format!("X-Echo-Authorization: {auth}\r\n"));
        }
        response.push_str("\r\n");
        if writer.write_all(response.as_bytes()).is_err() || writer.write_all(&answer).is_err() {
            return;
        }
    }
}

fn append(record: &Mutex<Record>, index: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    record.lock().unwrap().connections[index]
        .1
        .extend_from_slice(bytes);
}

/// What a `sandbox run` with a network allowlist left behind.
pub struct NetRun {
    /// Its exit status and streams.
    pub output: std::process::Output,
    /// Its audit, one JSON value per line.
    pub audit: Vec<serde_json::Value>,
    /// Its report (`Null` when it wrote none).
    pub report: serde_json::Value,
    /// The audit file's raw text.
    pub audit_text: String,
    /// The report file's raw text.
    pub report_text: String,
}

impl NetRun {
    /// The command's stdout.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// The supervisor's and the command's stderr.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Both streams, for failure messages.
    pub fn streams(&self) -> String {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}\naudit:\n{}",
            self.output.status,
            self.stdout(),
            self.stderr(),
            self.audit_text
        )
    }

    /// Panic with the streams unless the command exited 0.
    pub fn assert_ok(&self, what: &str) {
        assert!(self.output.status.success(), "{what}: {}", self.streams());
    }

    /// The audit lines of `method` whose target is `target`.
    pub fn audited(&self, method: &str, target: &str) -> Vec<&serde_json::Value> {
        self.audit
            .iter()
            .filter(|line| line["method"] == method && line["target"] == target)
            .collect()
    }

    /// Panic unless the audit has a `net.connect` line for `target` with
    /// `decision`; for "deny", also when any line for it allowed (a later
    /// request refused on an allowed connection is audited under the
    /// connection's target, so "allow" does not exclude a deny).
    pub fn assert_connect(&self, target: &str, decision: &str, what: &str) {
        let lines = self.audited("net.connect", target);
        assert!(
            lines.iter().any(|line| line["decision"] == decision),
            "{what}: no net.connect {decision} audit line for {target}; {}",
            self.streams()
        );
        if decision == "deny" {
            for line in lines {
                assert_eq!(
                    line["decision"], "deny",
                    "{what}: audit line for {target}: {line}"
                );
            }
        }
    }

    /// The report's `connections` counts for `host`: (allowed, refused).
    pub fn connections(&self, host: &str) -> (u64, u64) {
        let entry = &self.report["connections"][host];
        (
            entry["allowed"].as_u64().unwrap_or(0),
            entry["refused"].as_u64().unwrap_or(0),
        )
    }
}

/// `sandbox run --profile strict --non-interactive --audit F --report F
/// [args] -- argv` in `project` (without `--profile strict` when `args`
/// name a profile), with `env` set for the supervisor. The audit and the
/// report go to a directory outside the project.
pub fn run_sandbox(
    project: &Project,
    args: &[String],
    env: &[(&str, &str)],
    argv: &[&str],
) -> NetRun {
    // Outside the project, which the payload can write: a test must not
    // read an audit or report the attack could have rewritten.
    let outside = Project::new(project.who);
    let audit = outside.path().join("audit.jsonl");
    let report = outside.path().join("report.json");
    let mut cmd = project.command();
    cmd.arg("run");
    if !args.iter().any(|arg| arg == "--profile") {
        cmd.args(["--profile", "strict"]);
    }
    cmd.arg("--non-interactive")
        .arg("--audit")
        .arg(&audit)
        .arg("--report")
        .arg(&report)
        .args(args)
        .arg("--")
        .args(argv)
        .stdin(std::process::Stdio::null());
    for (name, value) in env {
        cmd.env(name, value);
    }
    let output = cmd.output().expect("sandbox starts");
    let audit_text = std::fs::read_to_string(&audit).unwrap_or_default();
    let report_text = std::fs::read_to_string(&report).unwrap_or_default();
    NetRun {
        output,
        audit: audit_text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect(),
        report: serde_json::from_str(&report_text).unwrap_or(serde_json::Value::Null),
        audit_text,
        report_text,
    }
}

/// `--net allow:E1,E2,...` followed by `--resolve NAME=ADDR` for each pin.
pub fn net_args(allow: &[String], resolve: &[(&str, &str)]) -> Vec<String> {
    let mut args = vec!["--net".to_string(), format!("allow:{}", allow.join(","))];
    for (name, addr) in resolve {
        args.push("--resolve".into());
        args.push(format!("{name}={addr}"));
    }
    args
}

/// Whether the sandbox starts at all for root (a network allowlist needs
/// network namespaces, which every run has; probed once by support).
pub fn require_net_sandbox(test: &str) -> bool {
    super::require_root_sandbox(test)
}

/// A Python prelude for raw proxy conversations inside the sandbox:
/// `proxy()` connects to the proxy, `send(s, text)`, and `response(f)`
/// reads one HTTP response (status line, headers, Content-Length body) and
/// returns (status, body text); `f` is the socket's binary file.
pub const PY_PROXY: &str = r#"
import os, socket, sys
def proxy():
    # A limit that ends a hung test on a loaded machine, never a speed.
    s = socket.create_connection(("127.0.0.1", 3128), timeout=300)
    return s, s.makefile("rb")
def send(s, text):
    s.sendall(text.replace("\n", "\r\n").encode())
def response(f):
    status = f.readline().decode(errors="replace")
    if not status:
        return (0, "")
    length = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode(errors="replace").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    code = int(status.split()[1])
    return (code, f.read(length).decode(errors="replace"))
def head(f):
    status = f.readline().decode(errors="replace")
    while True:
        line = f.readline()
        if line in (b"\r\n", b"\n", b""):
            break
    return int(status.split()[1]) if status else 0
"#;

/// The start of a Python client of the broker on fd 3: `call(id, method,
/// params)` sends one request and returns its answer (the modules the
/// clients use are imported).
pub const PY_BROKER: &str = r#"
import base64, gzip, json, os, socket, sys
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
f = s.makefile("rwb", buffering=0)
def call(i, method, params):
    f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n")
    return json.loads(f.readline())
"#;

/// One run of the Python `client` (after [`PY_BROKER`]) with argv[1] = `requests` (JSON), the
/// secret TOKEN = `value` given as `--secret TOKEN=env:VAR{binding}`
/// (`binding` is `@HOST...` or empty), `secrets.get` granted and the
/// network flags `network`; the client's stdout as JSON lines.
pub fn secret_client_run(
    project: &Project,
    network: Vec<String>,
    binding: &str,
    value: &str,
    client: &str,
    requests: &serde_json::Value,
) -> (NetRun, Vec<serde_json::Value>) {
    let mut args = network;
    args.extend([
        "--grant".to_string(),
        "secrets.get".to_string(),
        "--secret".to_string(),
        format!("TOKEN=env:NET_TEST_TOKEN{binding}"),
    ]);
    let requests = requests.to_string();
    let run = run_sandbox(
        project,
        &args,
        &[("NET_TEST_TOKEN", value)],
        &["python3", "-c", &format!("{PY_BROKER}{client}"), &requests],
    );
    run.assert_ok("net.http client");
    let lines = run
        .stdout()
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON line"))
        .collect();
    (run, lines)
}
