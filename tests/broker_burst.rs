//! 100,000 requests in one burst: every one is answered, in order, and the
//! supervisor's memory stays bounded (backpressure: no request is read
//! while answers wait).

mod rss;
mod support;

use rss::peak_rss_until_exit;

use support::{assert_ok, Project, Who};

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
    let mut child = project
        .command()
        .args(["run", "--timeout", "60s", "--", "python3", "-c", BURST])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let peak_kib = peak_rss_until_exit(&mut child);
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, "burst");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "100000");
    assert!(peak_kib > 0, "the supervisor was sampled");
    assert!(peak_kib < 32 * 1024, "supervisor peak RSS {peak_kib} KiB");
}

/// Streams a single 1 GiB line to the broker, then a valid request.
const GIGABYTE_LINE: &str = r#"
import os, socket
s = socket.socket(fileno=int(os.environ["SANDBOX_IPC_FD"]))
chunk = b"x" * (1 << 20)
for _ in range(1024):
    s.sendall(chunk)
s.sendall(b'\n{"jsonrpc":"2.0","id":2,"method":"permission.query","params":{"action":"fs.read"}}\n')
f = s.makefile("rb")
print(f.readline().decode().strip())
print(f.readline().decode().strip())
"#;

#[test]
fn a_one_gibibyte_line_is_refused_and_the_supervisor_stays_small() {
    if !support::require_root_sandbox("broker 1 GiB line") {
        return;
    }
    let project = Project::new(Who::Root);
    let mut child = project
        .command()
        .args([
            "run",
            "--timeout",
            "120s",
            "--",
            "python3",
            "-c",
            GIGABYTE_LINE,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let peak_kib = peak_rss_until_exit(&mut child);
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, "1 GiB line");
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
        peak_kib > 0 && peak_kib < 32 * 1024,
        "supervisor peak RSS {peak_kib} KiB"
    );
}
