//! Attacks on the network allowlist and on bound secrets, each performed
//! from inside a real sandbox against servers on the host's loopback. Each
//! test names the bypass it tries; each failed before the fix it guards.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use std::time::Duration;

use serde_json::{json, Value};
use support::net::{net_args, run_sandbox, secret_client_run, NetRun};
use support::{wait, Project, Who};

/// The secret's value: distinctive, so any copy of it anywhere is found.
const VALUE: &str = "s3cr3t-VALUE-attack-71d2";

/// An HTTP server on 127.0.0.1 that answers every request with its head
/// echoed back (so a header carrying a secret comes back in the body),
/// gzip-compressed when the request accepts gzip or when the path starts
/// with `/always-gzip`. Each request head is appended to the file in argv[1];
/// it listens on argv[2] (default 127.0.0.1), port argv[3] (default: free).
const GZIP_ECHO: &str = r#"
import gzip, sys, http.server
log = sys.argv[1]
class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        head = self.requestline + "\n" + "".join(f"{k}: {v}\n" for k, v in self.headers.items())
        with open(log, "a") as out:
            out.write(head + "--\n")
        body = head.encode()
        accepts = self.headers.get("Accept-Encoding", "")
        compress = "gzip" in accepts or self.path.startswith("/always-gzip")
        self.send_response(200)
        if compress:
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
address = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
server = http.server.ThreadingHTTPServer((address, port), Echo)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// A helper server process, killed when dropped.
struct Helper {
    child: Child,
    port: u16,
}

impl Helper {
    /// Start `python3 -c script args...`, which prints its port first.
    fn start(script: &str, args: &[&str]) -> Helper {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 starts a test server");
        let stdout = child.stdout.take().expect("its stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the server prints its port");
        let port = line.trim().parse().expect("a port number");
        Helper { child, port }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Gets the handle of secret TOKEN, then sends each `[method, params]` of
/// argv[1] with `{HANDLE}` replaced by it; for each answer it prints one
/// JSON line with the answer and, when the body came back as bytes, what
/// gzip decompression of them gives: what a payload would do to read an
/// echoed secret through compression.
/// (After [`support::net::PY_BROKER`], which defines `call`.)
const CLIENT: &str = r#"
got = call(1, "secrets.get", {"name": "TOKEN"})
handle = got["result"]["handle"]
for i, (method, params) in enumerate(json.loads(sys.argv[1]), 2):
    answer = call(i, method, json.loads(json.dumps(params).replace("{HANDLE}", handle)))
    decoded = None
    encoded = answer.get("result", {}).get("body_base64")
    if encoded:
        try:
            decoded = gzip.decompress(base64.b64decode(encoded)).decode(errors="replace")
        except Exception as err:
            decoded = f"not gzip: {err}"
    print(json.dumps({"answer": answer, "decoded": decoded}), flush=True)
"#;

/// One run of [`CLIENT`]: secret TOKEN (= [`VALUE`]) bound to `binding`,
/// secrets.get granted, `api.test` pinned to `ip` and `allow` listed.
/// The answers, one per request, as `{"answer", "decoded"}`.
fn secret_run(
    project: &Project,
    binding: &str,
    allow: &[String],
    ip: &str,
    requests: &Value,
) -> (NetRun, Vec<Value>) {
    secret_client_run(
        project,
        net_args(allow, &[("api.test", ip)]),
        &format!("@{binding}"),
        VALUE,
        CLIENT,
        requests,
    )
}

/// Panic if the value is anywhere the sandbox could read it back.
fn assert_value_nowhere(run: &NetRun, what: &str) {
    assert!(
        !run.stdout().contains(VALUE) && !run.stderr().contains(VALUE),
        "{what}: the secret's value reached the sandbox: {}",
        run.streams()
    );
    assert!(!run.audit_text.contains(VALUE), "{what}: audit");
    assert!(!run.report_text.contains(VALUE), "{what}: report");
}

#[test]
fn an_echoed_secret_does_not_come_back_compressed() {
    if !support::require_root_sandbox("an_echoed_secret_does_not_come_back_compressed") {
        return;
    }
    let project = Project::new(Who::Root);
    let log_dir = tempfile::tempdir().expect("a directory for the server's log");
    let log = log_dir.path().join("heads.txt");
    let server = Helper::start(GZIP_ECHO, &[log.to_str().expect("a UTF-8 path")]);
    let port = server.port;
    let allow = vec![format!("api.test:{port}"), format!("127.0.0.1:{port}")];
    let auth = "Bearer {HANDLE}";
    // 127.0.0.1 is listed but the secret is bound to api.test only.
    let (run, answers) = secret_run(
        &project,
        &format!("api.test:{port}"),
        &allow,
        "127.0.0.1",
        &json!([
            // The payload asks for gzip, in two spellings.
            ["net.http", {"url": format!("http://api.test:{port}/echo"),
                          "headers": {"Authorization": auth, "Accept-Encoding": "gzip"}}],
            ["net.http", {"url": format!("http://api.test:{port}/echo"),
                          "headers": {"Authorization": auth, "accept-encoding": "gzip, deflate"}}],
            // A server that compresses whatever was asked.
            ["net.http", {"url": format!("http://api.test:{port}/always-gzip"),
                          "headers": {"Authorization": auth}}],
            // Slices of an echo would each be too short to be recognized.
            ["net.http", {"url": format!("http://api.test:{port}/echo"),
                          "headers": {"Authorization": auth, "Range": "bytes=40-45"}}],
            // Without a handle, to a host the secret is bound to (which
            // may hold the value): asked for identity all the same.
            ["net.http", {"url": format!("http://api.test:{port}/plain"),
                          "headers": {"Accept-Encoding": "gzip"}}],
            // And a compressed answer from it is withheld.
            ["net.http", {"url": format!("http://api.test:{port}/always-gzip"),
                          "headers": {"Accept-Encoding": "gzip"}}],
            // To a host no secret is bound to, the payload's own Accept-Encoding is sent.
            ["net.http", {"url": format!("http://127.0.0.1:{port}/plain"),
                          "headers": {"Accept-Encoding": "gzip"}}],
        ]),
    );
    let streams = run.streams();
    assert_eq!(answers.len(), 7, "{streams}");
    assert_value_nowhere(&run, "a compressed echo");
    for answer in &answers[..2] {
        let result = &answer["answer"]["result"];
        assert_eq!(result["status"], 200, "{streams}");
        let body = result["body"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        assert!(
            body.to_ascii_lowercase()
                .contains("authorization: bearer secret:token:"),
            "asked for identity, the echo comes back readable and redacted: {answer}"
        );
    }
    let withheld = &answers[2]["answer"]["result"];
    assert_eq!(withheld["status"], 200, "{streams}");
    assert_eq!(withheld["body"], "", "{streams}");
    assert!(withheld.get("body_base64").is_none(), "{streams}");
    assert!(
        withheld["body_withheld"]
            .as_str()
            .is_some_and(|why| why.contains("gzip")),
        "the note names the coding: {withheld}"
    );
    assert_eq!(
        answers[3]["answer"]["error"]["code"], -32602,
        "a Range with a secret is refused: {streams}"
    );
    let plain = answers[4]["answer"]["result"]["body"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        plain.contains("get /plain") && plain.contains("accept-encoding: identity"),
        "a request to a bound host asks for identity: {streams}"
    );
    assert!(
        answers[5]["answer"]["result"]["body_withheld"].is_string(),
        "a compressed answer from a bound host is withheld: {streams}"
    );
    assert!(
        answers[6]["decoded"]
            .as_str()
            .is_some_and(|text| text.contains("GET /plain")),
        "a request to an unbound host keeps its encoding: {streams}"
    );
    let heads = std::fs::read_to_string(&log).expect("the server's log");
    let first = heads
        .split("--\n")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        first.contains("accept-encoding: identity") && !first.contains("gzip"),
        "the payload's Accept-Encoding was replaced: {heads}"
    );
    assert!(
        heads.contains(&format!("Bearer {VALUE}")),
        "the server got the value: {heads}"
    );
    assert!(
        !heads.to_ascii_lowercase().contains("range:"),
        "a refused request is never sent: {heads}"
    );
}

#[test]
fn a_secret_bound_without_a_port_is_never_sent_over_plain_http() {
    if !support::require_root_sandbox("a_secret_bound_without_a_port_is_never_sent_over_plain_http")
    {
        return;
    }
    let project = Project::new(Who::Root);
    let log_dir = tempfile::tempdir().expect("a directory for the server's log");
    let log = log_dir.path().join("heads.txt");
    // Port 80 itself: a binding without a port covers 443 and 80 as an
    // allowlist entry does. An address of its own in 127/8 keeps it apart
    // from anything else on the host's port 80.
    let ip = "127.0.0.147";
    let _server = Helper::start(GZIP_ECHO, &[log.to_str().expect("a UTF-8 path"), ip, "80"]);
    let allow = vec!["api.test".to_string(), format!("{ip}:80")];
    let (run, answers) = secret_run(
        &project,
        "api.test",
        &allow,
        ip,
        &json!([
            ["net.http", {"url": "http://api.test/user",
                          "headers": {"Authorization": "Bearer {HANDLE}"}}],
            ["net.http", {"url": "http://api.test/no-secret"}],
        ]),
    );
    let streams = run.streams();
    assert_value_nowhere(&run, "plain http");
    assert_eq!(
        answers[0]["answer"]["error"]["code"], -32001,
        "a port-less binding is https only: {streams}"
    );
    assert!(
        answers[0]["answer"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("https") && m.contains("api.test:80")),
        "the refusal names the fix: {streams}"
    );
    assert_eq!(
        answers[1]["answer"]["result"]["status"], 200,
        "the host itself is reachable over http: {streams}"
    );
    let heads = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !heads.contains(VALUE) && !heads.contains("/user"),
        "the value went out in clear: {heads}"
    );
}

/// Opens argv[1] connections to the proxy, each asking `CONNECT argv[2]`,
/// and counts the tunnels opened: once argv[3] (the bound) are open (or
/// argv[4] seconds passed), until none more opens for a second, so that a
/// tunnel over the bound shows; then closes ten of them and counts again,
/// the same way. Prints both counts. A slow proxy only makes it wait
/// longer: no count depends on how fast tunnels open.
const MANY_TUNNELS: &str = r#"
import selectors, socket, sys, time
count, target = int(sys.argv[1]), sys.argv[2]
bound, limit = int(sys.argv[3]), float(sys.argv[4])
sel = selectors.DefaultSelector()
socks = []
for _ in range(count):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
    socks.append(s)
opened = []
def pump(timeout):
    ready = sel.select(timeout=timeout)
    for key, _ in ready:
        data = key.fileobj.recv(4096)
        sel.unregister(key.fileobj)
        if data.startswith(b"HTTP/1.1 200"):
            opened.append(key.fileobj)
    return bool(ready)
def settle(expected):
    deadline = time.monotonic() + limit
    while len(opened) < expected and time.monotonic() < deadline:
        pump(max(0.0, deadline - time.monotonic()))
    while pump(1):
        pass
settle(bound)
first = len(opened)
for s in opened[:10]:
    s.close()
settle(bound + 10)
print(first, len(opened) - 10, flush=True)
"#;

#[test]
fn a_flood_of_tunnels_is_held_to_the_connection_bound() {
    if !support::require_root_sandbox("a_flood_of_tunnels_is_held_to_the_connection_bound") {
        return;
    }
    let project = Project::new(Who::Root);
    let server = support::net::TestServer::start("held");
    let port = server.port();
    let bound = 256;
    let flood = bound + 64;
    let run = run_sandbox(
        &project,
        &net_args(
            &[format!("api.test:{port}"), format!("127.0.0.1:{port}")],
            &[("api.test", "127.0.0.1")],
        ),
        &[],
        &[
            "python3",
            "-c",
            MANY_TUNNELS,
            &flood.to_string(),
            &format!("api.test:{port}"),
            &bound.to_string(),
            &wait::seconds(Duration::from_secs(60)).to_string(),
        ],
    );
    run.assert_ok("many tunnels");
    let counts: Vec<usize> = run
        .stdout()
        .split_whitespace()
        .map(|n| n.parse().expect("a count"))
        .collect();
    assert_eq!(
        counts,
        vec![bound, bound],
        "at most {bound} tunnels at once, and one that ends lets a waiting one in: {}",
        run.streams()
    );
}

/// Asks `CONNECT hN.flood.test:443` for N in 0..argv[1], one connection
/// each, and prints how many were refused.
const MANY_NAMES: &str = r#"
import socket, sys
refused = 0
for n in range(int(sys.argv[1])):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(f"CONNECT h{n}.flood.test:443 HTTP/1.1\r\n\r\n".encode())
    if s.recv(64).startswith(b"HTTP/1.1 403"):
        refused += 1
    s.close()
print(refused, flush=True)
"#;

#[test]
fn a_flood_of_new_names_does_not_grow_the_report_without_end() {
    if !support::require_root_sandbox("a_flood_of_new_names_does_not_grow_the_report_without_end") {
        return;
    }
    let project = Project::new(Who::Root);
    let flood = 1200;
    let run = run_sandbox(
        &project,
        &net_args(&["listed.test".to_string()], &[]),
        &[],
        &["python3", "-c", MANY_NAMES, &flood.to_string()],
    );
    run.assert_ok("many names");
    assert_eq!(run.stdout().trim(), flood.to_string(), "{}", run.streams());
    let connections = run.report["connections"]
        .as_object()
        .unwrap_or_else(|| panic!("no connections in the report: {}", run.report_text));
    assert!(
        connections.len() <= 1001,
        "{} hosts counted by name",
        connections.len()
    );
    let total: u64 = connections
        .values()
        .map(|counts| counts["refused"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(total, flood as u64, "every attempt is still counted");
    assert_eq!(run.connections("(other hosts)"), (0, 200));
    let audited = run
        .audit
        .iter()
        .filter(|line| line["method"] == "net.connect")
        .count();
    assert_eq!(audited, flood, "and audited");
}

/// A payload that makes its attempt and exits at once, without waiting for
/// any answer, still leaves every attempt in the audit: a refused CONNECT
/// it never read the answer of, and a `net.http` whose request reached the
/// server but whose answer the run did not wait for (data sent out with no
/// trace otherwise).
#[test]
fn an_attempt_made_just_before_the_payload_exits_is_audited() {
    if !support::require_root_sandbox("an_attempt_made_just_before_the_payload_exits_is_audited") {
        return;
    }
    let project = Project::new(Who::Root);
    // A server that reads the request and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let seen = std::sync::Arc::clone(&received);
    // Each round's request carries `X-Data: exfil-ROUND`; once it reached
    // the server, the server creates `reached-exfil-ROUND` in the project,
    // which is what the payload waits for before it exits.
    let reached_dir = project.path().to_path_buf();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            let mut reader = stream.try_clone().unwrap();
            let seen = std::sync::Arc::clone(&seen);
            let reached_dir = reached_dir.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut mine = Vec::new();
                while let Ok(n) = std::io::Read::read(&mut reader, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    seen.lock().unwrap().extend_from_slice(&buf[..n]);
                    mine.extend_from_slice(&buf[..n]);
                    let head = String::from_utf8_lossy(&mine).to_ascii_lowercase();
                    if let Some(value) = head
                        .split("\r\n")
                        .find_map(|line| line.strip_prefix("x-data: "))
                        .filter(|v| v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
                    {
                        let _ = std::fs::write(reached_dir.join(format!("reached-{value}")), "");
                    }
                }
            });
            held.push(stream);
        }
    });
    for round in 0..5 {
        // The payload exits as soon as its request reached the server,
        // without waiting for any answer: how fast the run forwards it
        // decides nothing.
        let script = format!(
            r#"
import json, os, socket, time
p = socket.create_connection(("127.0.0.1", 3128))
p.sendall(b"CONNECT gone.test:443 HTTP/1.1\r\nHost: gone.test:443\r\n\r\n")
b = socket.socket(fileno=3)
b.sendall((json.dumps({{"jsonrpc": "2.0", "id": 1, "method": "net.http",
    "params": {{"url": "http://api.test:{port}/exfil", "headers": {{"X-Data": "exfil-{round}"}}}}}}) + "\n").encode())
deadline = time.monotonic() + {limit}
while not os.path.exists("reached-exfil-{round}") and time.monotonic() < deadline:
    time.sleep(0.01)
"#,
            limit = wait::seconds(Duration::from_secs(60)),
        );
        let args = net_args(
            &[format!("api.test:{port}"), format!("127.0.0.1:{port}")],
            &[("api.test", "127.0.0.1")],
        );
        let run = run_sandbox(&project, &args, &[], &["python3", "-c", &script]);
        run.assert_ok("a payload that does not wait");
        let connect = run
            .audit
            .iter()
            .find(|line| line["method"] == "net.connect" && line["target"] == "gone.test:443");
        assert!(
            connect.is_some_and(|line| line["decision"] == "deny"),
            "round {round}: the refused CONNECT is in the audit: {}",
            run.audit_text
        );
        assert!(
            run.audit
                .iter()
                .any(|line| line["method"] == "net.http"
                    && line["target"] == format!("api.test:{port}")),
            "round {round}: the net.http whose answer nobody waited for is in the audit: {}",
            run.audit_text
        );
    }
    assert!(
        String::from_utf8_lossy(&received.lock().unwrap()).contains("x-data: exfil-"),
        "the requests reached the server (what the audit must not miss)"
    );
}

/// A host that keeps the `Authorization` header of any request and hands
/// it back later: `/replay` gives it as sent (in the body and the
/// `X-Stored` header), `/replay-encoded` in every encoding a payload can
/// undo (one `name:text` line each), `/replay-gzip` compressed whatever
/// was asked, `/echo-encoded` the current request's own header encoded.
const STORING_HOST: &str = r#"
import base64, binascii, gzip, json, sys, urllib.parse, http.server
stored = {"value": ""}
def encodings(value):
    raw = value.encode()
    out = {
        "percent_upper": urllib.parse.quote(value, safe=""),
        "percent_lower": "".join("%%%02x" % b for b in raw),
        "base64": base64.b64encode(raw).decode(),
        "base64_nopad": base64.b64encode(raw).decode().rstrip("="),
        "base64url": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "hex_lower": raw.hex(),
        "hex_upper": raw.hex().upper(),
        "json_unicode": "".join("\\u%04x" % b for b in raw),
    }
    for offset in range(3):
        out["base64_embedded_%d" % offset] = base64.b64encode(b"x" * offset + b"token=" + raw + b";").decode()
    return out
class Host(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        value = auth[len("Bearer "):] if auth.startswith("Bearer ") else auth
        if value:
            stored["value"] = value
        headers = {"Content-Type": "text/plain"}
        if self.path == "/replay":
            body = ("stored=" + stored["value"]).encode()
            headers["X-Stored"] = stored["value"]
        elif self.path in ("/replay-encoded", "/echo-encoded"):
            source = stored["value"] if self.path == "/replay-encoded" else value
            body = "\n".join(f"{k}:{v}" for k, v in encodings(source).items()).encode()
        elif self.path == "/replay-gzip":
            body = gzip.compress(("stored=" + stored["value"]).encode())
            headers["Content-Encoding"] = "gzip"
        else:
            body = b"stored"
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Host)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// Gets the handle of secret TOKEN, sends each request of argv[1] with
/// `{HANDLE}` replaced, and prints each answer together with everything a
/// payload would get by undoing each encoding of each `name:text` line of
/// its body, and by gunzipping a body that came as bytes.
/// (After [`support::net::PY_BROKER`], which defines `call`.)
const DECODING_CLIENT: &str = r#"
import binascii, urllib.parse
def undo(name, text):
    try:
        if name.startswith("percent"):
            return urllib.parse.unquote(text)
        if name.startswith("base64url"):
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode(errors="replace")
        if name.startswith("base64"):
            return base64.b64decode(text + "=" * (-len(text) % 4)).decode(errors="replace")
        if name.startswith("hex"):
            return bytes.fromhex(text).decode(errors="replace")
        if name.startswith("json"):
            return json.loads('"' + text + '"')
    except Exception as err:
        return f"undecodable {name}: {err}"
    return text
got = call(1, "secrets.get", {"name": "TOKEN"})
handle = got["result"]["handle"]
print(json.dumps({"handle": handle}), flush=True)
for i, (method, params) in enumerate(json.loads(sys.argv[1]), 2):
    answer = call(i, method, json.loads(json.dumps(params).replace("{HANDLE}", handle)))
    result = answer.get("result", {})
    decoded = {}
    for line in (result.get("body") or "").splitlines():
        name, _, text = line.partition(":")
        decoded[name] = undo(name, text)
    if result.get("body_base64"):
        try:
            decoded["gunzip"] = gzip.decompress(base64.b64decode(result["body_base64"])).decode(errors="replace")
        except Exception as err:
            decoded["gunzip"] = f"not gzip: {err}"
    print(json.dumps({"answer": answer, "decoded": decoded}), flush=True)
"#;

/// A bound host keeps the value a request carried and gives it back
/// later, to requests that carry no handle, as sent, encoded, compressed,
/// and through a second listed host: none of it reaches the sandbox as the
/// value, and what is redacted comes back as the handle.
#[test]
fn a_stored_secret_does_not_come_back_in_a_later_answer_or_encoded() {
    if !support::require_root_sandbox(
        "a_stored_secret_does_not_come_back_in_a_later_answer_or_encoded",
    ) {
        return;
    }
    // Characters that percent-encoding changes, and a length that puts
    // base64's padding to work.
    const STORED: &str = "st0red/VALUE+x=9f3a&q";
    let project = Project::new(Who::Root);
    let server = Helper::start(STORING_HOST, &[]);
    let port = server.port;
    let allow = vec![
        format!("api.test:{port}"),
        format!("other.test:{port}"),
        format!("127.0.0.1:{port}"),
    ];
    let mut network = net_args(&allow, &[("api.test", "127.0.0.1")]);
    network.extend(["--resolve".to_string(), "other.test=127.0.0.1".to_string()]);
    let api = |path: &str| format!("http://api.test:{port}{path}");
    let (run, mut lines) = secret_client_run(
        &project,
        network,
        &format!("@api.test:{port}"),
        STORED,
        DECODING_CLIENT,
        &json!([
            ["net.http", {"url": api("/store"), "headers": {"Authorization": "Bearer {HANDLE}"}}],
            ["net.http", {"url": api("/replay")}],
            ["net.http", {"url": api("/replay-encoded")}],
            ["net.http", {"url": api("/echo-encoded"), "headers": {"Authorization": "Bearer {HANDLE}"}}],
            ["net.http", {"url": api("/replay-gzip"), "headers": {"Accept-Encoding": "gzip"}}],
            // Another listed host the value was never sent to hands it out.
            ["net.http", {"url": format!("http://other.test:{port}/replay")}],
            ["net.http", {"url": format!("http://other.test:{port}/replay-encoded")}],
        ]),
    );
    let streams = run.streams();
    let handle = lines.remove(0)["handle"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(handle.starts_with("secret:TOKEN:"), "{streams}");
    assert_eq!(lines.len(), 7, "{streams}");
    assert!(
        !streams.contains(STORED),
        "the stored value reached the sandbox: {streams}"
    );
    for probe in ["st0red", "VALUE+x", "9f3a&q"] {
        assert!(!streams.contains(probe), "{probe} of the value: {streams}");
    }
    assert!(!run.audit_text.contains(STORED) && !run.report_text.contains(STORED));
    let result = |index: usize| &lines[index]["answer"]["result"];
    for index in [1, 5] {
        assert_eq!(
            result(index)["body"],
            format!("stored={handle}"),
            "{streams}"
        );
        let headers = result(index)["headers"].to_string();
        assert!(headers.contains(&handle), "the header too: {headers}");
    }
    for index in [2, 3, 6] {
        let decoded = lines[index]["decoded"]
            .as_object()
            .unwrap_or_else(|| panic!("{streams}"));
        assert_eq!(decoded.len(), 11, "every encoding came back: {streams}");
        for (name, text) in decoded {
            assert!(
                !text.as_str().unwrap_or_default().contains("st0red"),
                "{name}: {text}"
            );
        }
        let body = result(index)["body"].as_str().unwrap_or_default();
        assert_eq!(
            body.matches(&handle).count(),
            11,
            "each encoding was found and replaced: {body}"
        );
    }
    assert_eq!(result(4)["body"], "", "{streams}");
    assert!(result(4)["body_withheld"].is_string(), "{streams}");
}
