//! Attacks on the daemon client through the answers it reads: an answer
//! can carry what an untrusted run produced, so a fake daemon on a Unix
//! socket sends an endless answer body and an endless event line, and the
//! client (`sandbox ps`, `sandbox logs`) must stop with its clear error
//! while its memory stays bounded. In its own test binary: the client's
//! peak RSS is read with getrusage(RUSAGE_CHILDREN), which no other test
//! may pollute.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Stdio};

/// What the fake daemon sends at most on one connection before it gives
/// up: far past both client limits (256 MiB an answer, 16 MiB a line), so
/// an unbounded client would hold it all.
const SENT_AT_MOST: usize = 1 << 30;

/// Most the client's peak RSS may reach. It holds at most one answer limit
/// (256 MiB) or one line limit (16 MiB) of the attack; before the answer
/// limit, `sandbox ps` held all it was sent (1 GiB sent: about 2 GiB RSS).
const PEAK_RSS_BOUND_KIB: i64 = 384 << 10;

/// Answer every request on `socket` with a chunked body that starts with
/// `start` and goes on with `filler` bytes until the client hangs up.
fn fake_daemon(socket: std::path::PathBuf, start: &'static [u8], filler: u8) {
    let listener = UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || endless_answer(stream, start, filler));
        }
    });
}

fn endless_answer(stream: UnixStream, start: &[u8], filler: u8) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    // The request head; a client request here has no body.
    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
        line.clear();
    }
    let mut stream = stream;
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunk = |data: &[u8]| {
        let mut out = format!("{:x}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    };
    if stream.write_all(head.as_bytes()).is_err() || stream.write_all(&chunk(start)).is_err() {
        return;
    }
    let filler = chunk(&vec![filler; 1 << 20]);
    let mut sent = 0;
    while sent < SENT_AT_MOST {
        if stream.write_all(&filler).is_err() {
            return;
        }
        sent += 1 << 20;
    }
}

fn client(socket: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(args)
        .env("SANDBOX_DAEMON", socket)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_endless_answer_and_an_endless_event_line_stop_the_client_with_bounded_memory() {
    let dir = tempfile::Builder::new()
        .prefix("fake-daemon-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();

    // `sandbox ps` reads its answer whole: an endless JSON body.
    let whole = dir.path().join("whole.sock");
    fake_daemon(whole.clone(), b"{\"runs\":[\"", b'x');
    let (code, stderr) = client(&whole, &["ps"]);
    assert_eq!(code, Some(125), "{stderr}");
    assert!(
        stderr.contains("answered /v1/runs")
            && stderr.contains("with more than 256 MiB, more than the client reads whole")
            && stderr.contains("`sandbox logs`")
            && stderr.contains("--report FILE"),
        "{stderr}"
    );
    let peak = support::children_peak_rss_kib();
    assert!(peak < PEAK_RSS_BOUND_KIB, "sandbox ps peak RSS {peak} KiB");

    // `sandbox logs` reads the event stream line by line: one endless line.
    let lines = dir.path().join("lines.sock");
    fake_daemon(
        lines.clone(),
        b"{\"seq\":1,\"type\":\"stdout\",\"data\":\"",
        b'x',
    );
    let (code, stderr) = client(&lines, &["logs", "r1"]);
    assert_eq!(code, Some(125), "{stderr}");
    assert!(
        stderr.contains("answered the event stream unreadably: a line longer than 16 MiB"),
        "{stderr}"
    );
    let peak = support::children_peak_rss_kib();
    assert!(
        peak < PEAK_RSS_BOUND_KIB,
        "sandbox logs peak RSS {peak} KiB"
    );
}
