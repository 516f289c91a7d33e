//! `sandbox run --daemon --audit FILE` copies the run's audit from the
//! daemon, and the audit is what an untrusted run produced: it may be
//! larger than any answer the client reads whole (256 MiB), its answer
//! may break off in the middle of a line, and a line may never end. A fake
//! daemon on a Unix socket answers the run, its event stream and its audit,
//! and the client must copy every whole line to the file, never a part of
//! one, with its memory bounded. In its own test binary: the client's peak
//! RSS is read with getrusage(RUSAGE_CHILDREN), which no other test may
//! pollute.
//!
//! The large audit goes to a FIFO the test reads and checks as it arrives,
//! not to a file: 300 MiB on disk filled a CI machine whose disk the build
//! had nearly used up, and what is under test is the client's copy, not
//! the file system. The client opens a FIFO as it opens a file
//! (`O_CREAT | O_APPEND`, write only).

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The audit of the large case: past the 256 MiB the client once read
/// whole, so that client failed with "more than 256 MiB" and wrote nothing.
const LARGE_AUDIT: usize = 300 << 20;

/// Bytes of one audit line of the large case (newline excluded); not a
/// divisor of the chunk size, so lines straddle the body's chunks.
const LINE_BYTES: usize = 4000;

/// Bytes of one chunk of the answer's body.
const CHUNK: usize = 1 << 20;

/// Most the client's peak RSS may reach: it holds one line (at most
/// 16 MiB) and one read of the body, never the audit. Before streaming,
/// the large audit failed after the client had held 256 MiB of it.
const PEAK_RSS_BOUND_KIB: i64 = 64 << 10;

/// What the fake daemon's audit answer is.
#[derive(Clone, Copy)]
enum Audit {
    /// [`LARGE_AUDIT`] bytes of numbered lines, then the body's end.
    Large,
    /// Three whole lines and half of a fourth, then the connection closes
    /// without the body's end.
    CutMidLine,
    /// Two whole lines, then a line that goes on until the client hangs up
    /// (at most 1 GiB).
    EndlessLine,
}

/// Line `n` of the audit, `bytes` long (newline excluded).
fn audit_line(n: usize, bytes: usize) -> Vec<u8> {
    let mut line = format!("{{\"n\":{n},\"pad\":\"").into_bytes();
    line.resize(bytes - 2, b'x');
    line.extend_from_slice(b"\"}");
    line
}

fn large_lines() -> usize {
    LARGE_AUDIT.div_ceil(LINE_BYTES + 1)
}

fn fake_daemon(socket: PathBuf, audit: Audit) {
    let listener = UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || answer(stream, audit));
        }
    });
}

/// Read one request (head and body) and answer it by its path.
fn answer(stream: UnixStream, audit: Audit) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let path = first.split_whitespace().nth(1).unwrap_or("").to_owned();
    let mut stream = stream;
    let whole = |stream: &mut UnixStream, status: &str, body: &[u8]| {
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(body);
    };
    if path == "/v1/runs" {
        whole(
            &mut stream,
            "201 Created",
            br#"{"id":"r1","state":"queued"}"#,
        );
    } else if path.starts_with("/v1/runs/r1/events") {
        whole(
            &mut stream,
            "200 OK",
            b"{\"seq\":1,\"time_ms\":1,\"type\":\"end\",\"state\":\"exited\",\"status\":0,\"reason\":null,\"report\":null}\n",
        );
    } else if path == "/v1/runs/r1/audit" {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";
        if stream.write_all(head.as_bytes()).is_ok() {
            send_audit(stream, audit);
        }
    } else {
        whole(
            &mut stream,
            "404 Not Found",
            br#"{"error":{"code":"not_found","message":"no such path","fix":"none"}}"#,
        );
    }
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

fn send_audit(mut stream: UnixStream, audit: Audit) {
    match audit {
        Audit::Large => {
            // Generated as it is sent: the test holds one chunk, not the audit.
            let mut pending = Vec::with_capacity(2 * CHUNK);
            for n in 1..=large_lines() {
                pending.extend_from_slice(&audit_line(n, LINE_BYTES));
                pending.push(b'\n');
                if pending.len() >= CHUNK {
                    let rest = pending.split_off(CHUNK);
                    if stream.write_all(&chunk(&pending)).is_err() {
                        return;
                    }
                    pending = rest;
                }
            }
            if !pending.is_empty() && stream.write_all(&chunk(&pending)).is_err() {
                return;
            }
            let _ = stream.write_all(b"0\r\n\r\n");
        }
        Audit::CutMidLine => {
            let mut body = Vec::new();
            for n in 1..=3 {
                body.extend_from_slice(&audit_line(n, 100));
                body.push(b'\n');
            }
            body.extend_from_slice(&audit_line(4, 100)[..50]);
            let _ = stream.write_all(&chunk(&body));
            // Closed without the last chunk: the body broke off.
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        Audit::EndlessLine => {
            let mut body = Vec::new();
            for n in 1..=2 {
                body.extend_from_slice(&audit_line(n, 100));
                body.push(b'\n');
            }
            body.extend_from_slice(b"{\"n\":3,\"pad\":\"");
            if stream.write_all(&chunk(&body)).is_err() {
                return;
            }
            let filler = chunk(&vec![b'x'; CHUNK]);
            for _ in 0..1024 {
                if stream.write_all(&filler).is_err() {
                    return;
                }
            }
        }
    }
}

/// `sandbox run --audit FILE -- true` against the daemon at `socket`.
fn run_with_audit(socket: &Path, audit: &Path, cwd: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["run", "--audit"])
        .arg(audit)
        .args(["--", "true"])
        .env("SANDBOX_DAEMON", socket)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The file's lines after the first (`before`, written by the test):
/// the audit lines it received, checked to be `1..` in order and whole.
fn received_lines(file: &Path, bytes: usize) -> usize {
    let mut reader = BufReader::new(std::fs::File::open(file).unwrap());
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line).unwrap();
    assert_eq!(line, b"before\n", "what the file held stays");
    count_lines(reader, bytes)
}

/// The audit lines `reader` yields, checked to be `1..` in order and whole.
fn count_lines(mut reader: impl BufRead, bytes: usize) -> usize {
    let mut line = Vec::new();
    let mut count = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).unwrap() == 0 {
            return count;
        }
        count += 1;
        assert_eq!(line.pop(), Some(b'\n'), "line {count} is cut");
        assert!(line == audit_line(count, bytes), "line {count} differs");
    }
}

/// A FIFO at `path` and a thread that reads it to its end, checking each
/// line as it comes: what reaches it is never on disk or held whole.
fn checked_fifo(path: &Path, bytes: usize) -> std::thread::JoinHandle<usize> {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let path = path.to_owned();
    std::thread::spawn(move || {
        // Opening for reading waits for the client to open it for writing.
        let fifo = std::fs::File::open(&path).unwrap();
        count_lines(BufReader::with_capacity(CHUNK, fifo), bytes)
    })
}

/// The FIFO reader's count, even if the client never opened the FIFO: a
/// writer that opens and closes it gives the reader its end of file. Tried
/// again until the reader is done, since the reader may not have reached
/// its `open` yet (then the open fails with ENXIO).
fn fifo_lines(path: &Path, reader: std::thread::JoinHandle<usize>) -> usize {
    use std::os::unix::fs::OpenOptionsExt;
    while !reader.is_finished() {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    reader.join().unwrap()
}

#[test]
fn an_audit_larger_than_an_answer_is_copied_whole_and_a_broken_one_only_in_whole_lines() {
    let dir = tempfile::Builder::new()
        .prefix("fake-daemon-audit-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let file = |name: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, b"before\n").unwrap();
        path
    };

    // 300 MiB of audit: every line reaches the file, none is held.
    let socket = dir.path().join("large.sock");
    fake_daemon(socket.clone(), Audit::Large);
    let audit = dir.path().join("large.ndjson");
    let reader = checked_fifo(&audit, LINE_BYTES);
    let (code, stderr) = run_with_audit(&socket, &audit, dir.path());
    let peak = support::children_peak_rss_kib();
    eprintln!("copying a 300 MiB audit: client peak RSS {peak} KiB");
    let lines = fifo_lines(&audit, reader);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(lines, large_lines());
    assert!(
        peak < PEAK_RSS_BOUND_KIB,
        "copying a 300 MiB audit: client peak RSS {peak} KiB"
    );

    // An answer that breaks off inside a line: the whole lines, and the
    // error says the audit is incomplete.
    let socket = dir.path().join("cut.sock");
    fake_daemon(socket.clone(), Audit::CutMidLine);
    let audit = file("cut.ndjson");
    let (code, stderr) = run_with_audit(&socket, &audit, dir.path());
    assert_eq!(code, Some(125), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "run r1: the audit appended to {} is incomplete: the daemon's answer broke off after 3 whole line(s); the 50 byte(s) of the line it stopped in were left out",
            audit.display()
        )),
        "{stderr}"
    );
    assert_eq!(received_lines(&audit, 100), 3, "no part of line 4");

    // A line that never ends: refused at the bound, the lines before it
    // written, the line never held.
    let socket = dir.path().join("endless.sock");
    fake_daemon(socket.clone(), Audit::EndlessLine);
    let audit = file("endless.ndjson");
    let (code, stderr) = run_with_audit(&socket, &audit, dir.path());
    assert_eq!(code, Some(125), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "run r1: the audit appended to {} is incomplete: line 3 of the daemon's answer is longer than 16 MiB, more than the client holds (the 2 line(s) before it were written, nothing after)",
            audit.display()
        )),
        "{stderr}"
    );
    let peak = support::children_peak_rss_kib();
    eprintln!("an endless audit line: client peak RSS {peak} KiB");
    assert_eq!(received_lines(&audit, 100), 2);
    assert!(
        peak < PEAK_RSS_BOUND_KIB,
        "an endless audit line: client peak RSS {peak} KiB"
    );
}
