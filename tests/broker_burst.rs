//! 100,000 requests in one burst: every one is answered, in order, and the
//! supervisor's memory stays bounded (backpressure: no request is read
//! while answers wait).

mod rss;
mod support;

use rss::peak_rss_until_exit;

use std::time::Duration;

use support::{assert_ok, wait, Project, Who};

/// The supervisor's memory bound while a client floods it.
const SUPERVISOR_BOUND_KIB: u64 = 32 << 10;

const BURST: &str = r#"
import os, socket, threading
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
N = 100_000
def send():
    batch = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"permission.query","params":{"action":"fs.read"}}\n' % i for i in range(N))
    s.sendall(batch)
threading.Thread(target=send).start()
f = s.makefile("rb")
last = -1
ok = 0
for _ in range(N):
    line = f.readline()
    i = int(line.split(b'"id":')[1].split(b',')[0])
    assert i == last + 1, (i, last)
    last = i
    ok += b'"result"' in line
print(ok)
"#;

#[test]
fn a_burst_of_100k_requests_is_answered_with_bounded_memory() {
    if !support::require_root_sandbox("broker burst") {
        return;
    }
    let project = Project::new(Who::Root);
    // A limit for a hang, not a speed: it grows with the machine's load.
    let timeout = wait::timeout_arg(Duration::from_secs(60));
    let mut child = project
        .command()
        .args(["run", "--timeout", &timeout, "--", "python3", "-c", BURST])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let peak_kib = peak_rss_until_exit(&mut child);
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, "burst");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "100000");
    assert!(peak_kib > 0, "the supervisor was sampled");
    assert!(
        peak_kib < SUPERVISOR_BOUND_KIB,
        "supervisor peak RSS {peak_kib} KiB"
    );
}

/// The line's size: four times the supervisor's bound (and 128 times the
/// broker's message limit), so that a supervisor that kept it could not
/// stay under the bound. (A gibibyte proved no more and took 40 s of a
/// loaded machine in the debug build.)
const LINE_MIB: u64 = 4 * SUPERVISOR_BOUND_KIB / 1024;

/// Streams a single LINE_MIB MiB line to the broker, then a valid request.
fn huge_line() -> String {
    format!(
        r#"
import os, socket
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
chunk = b"x" * (1 << 20)
for _ in range({LINE_MIB}):
    s.sendall(chunk)
s.sendall(b'\n{{"jsonrpc":"2.0","id":2,"method":"permission.query","params":{{"action":"fs.read"}}}}\n')
f = s.makefile("rb")
print(f.readline().decode().strip())
print(f.readline().decode().strip())
"#
    )
}

#[test]
fn a_line_four_times_the_bound_is_refused_and_the_supervisor_stays_under_it() {
    if !support::require_root_sandbox("broker huge line") {
        return;
    }
    let project = Project::new(Who::Root);
    let timeout = wait::timeout_arg(Duration::from_secs(120));
    let script = huge_line();
    let mut child = project
        .command()
        .args(["run", "--timeout", &timeout, "--", "python3", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let peak_kib = peak_rss_until_exit(&mut child);
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, "huge line");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let first: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(first["error"]["code"], -32004, "{first}");
    let second: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        second["result"]["decision"], "allow",
        "still answering: {second}"
    );
    assert!(
        peak_kib > 0 && peak_kib < SUPERVISOR_BOUND_KIB,
        "supervisor peak RSS {peak_kib} KiB under a {LINE_MIB} MiB line"
    );
}
