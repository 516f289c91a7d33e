//! Attacks on the root daemon through the lines it reads from processes
//! that run as the caller: a run's log (written by the run's supervisor)
//! and the run's events socket (held by the supervisor), and through the
//! body of an HTTP request. Each sends one endless line (or body) and
//! holds the daemon to a memory bound measured from /proc, while another
//! request is still answered.

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::children_of;
use support::daemon::Daemon;

/// Most the daemon's peak RSS may grow during one attack. The daemon
/// holds at most one line limit per reader (2 MiB for each of the 16 log
/// followers, 1 MiB on an events socket) and skips the rest; before the
/// shared reader, the same attacks grew it by 347 and 401 MiB.
const RSS_GROWTH_BOUND_KIB: u64 = 96 << 10;

/// Event streams open on the run while its log holds the endless line: as
/// many as the daemon's runtime has blocking threads.
const FOLLOWERS: usize = 16;

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("daemon status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The daemon's peak RSS so far (VmHWM), in KiB.
fn peak_rss_kib(daemon: &Daemon) -> u64 {
    status_kib(daemon.pid(), "VmHWM:")
}

fn daemon_for_root() -> Daemon {
    Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 4\n[[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\n",
        nix::unistd::geteuid().as_raw()
    ))
}

/// Submit `sleep` and wait until it runs: its supervisor is up, holding
/// the events socket and writing the log.
fn running_sleep(daemon: &Daemon, project: &Path) -> String {
    let body = serde_json::json!({"command": ["sleep", "600"], "project": project});
    let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 202, "{answer}\n{}", daemon.log());
    let id = answer["id"].as_str().expect("run id").to_string();
    support::wait::until("the run to start", Duration::from_secs(60), || {
        let (_, run) = daemon.request("GET", &format!("/v1/runs/{id}"), None);
        match run["state"].as_str() {
            Some("running") => Some(()),
            Some("queued") => None,
            other => panic!(
                "run {id} did not start ({other:?}): {run}\n{}",
                daemon.log()
            ),
        }
    });
    // The supervisor writes its `started` record after telling the daemon:
    // what the test appends must come after it, or that record would end
    // the test's line.
    let log = daemon.state.join("spool").join(&id).join("log.ndjson");
    support::wait::until_true("the started record", Duration::from_secs(60), || {
        std::fs::read(&log).is_ok_and(|text| text.windows(9).any(|w| w == b"\"started\""))
    });
    id
}

fn log_path(daemon: &Daemon, id: &str) -> PathBuf {
    let path = daemon.state.join("spool").join(id).join("log.ndjson");
    assert!(path.exists(), "no log at {}", path.display());
    path
}

/// Another caller's request: the run list, answered (and how long it took,
/// for the record).
fn list_is_answered(daemon: &Daemon) -> Duration {
    let started = Instant::now();
    let (status, list) = daemon.request("GET", "/v1/runs", None);
    assert_eq!(status, 200, "{list}");
    started.elapsed()
}

fn cancel_and_wait(daemon: &Daemon, id: &str) -> Value {
    let (status, answer) = daemon.request("POST", &format!("/v1/runs/{id}/cancel"), None);
    assert!(status < 300, "cancel: {status} {answer}");
    daemon.wait_finished(id)
}

/// Follow the run's events and return once `marker` came (true) or the
/// stream ended without it (false). Keeps only a window of the stream.
fn follow_until(socket: PathBuf, id: String, marker: &'static [u8]) -> bool {
    let Ok(mut stream) = UnixStream::connect(&socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(support::wait::limit(Duration::from_secs(300))));
    let head = format!(
        "GET /v1/runs/{id}/events?since=0&follow=true HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(head.as_bytes()).is_err() {
        return false;
    }
    let mut window: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                window.extend_from_slice(&buf[..n]);
                if window.windows(marker.len()).any(|w| w == marker) {
                    return true;
                }
                let keep = window.len().saturating_sub(marker.len());
                window.drain(..keep);
            }
        }
    }
}

/// A supervisor (running as the caller) writes one 32 MiB line without a
/// newline into its run's log while 16 event streams follow the run.
/// Before the shared reader, each follower held the whole line and
/// rescanned it after every 64 KiB read: the 16 blocking threads were
/// pinned, another caller's `GET /v1/runs` waited 30 s, and the daemon
/// grew from 11 to 358 MiB.
#[test]
fn an_endless_line_in_a_run_log_holds_neither_memory_nor_the_daemon() {
    let test = "an_endless_line_in_a_run_log_holds_neither_memory_nor_the_daemon";
    if !support::require_root_daemon(test) {
        return;
    }
    let daemon = daemon_for_root();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let id = running_sleep(&daemon, project.path());
    let log = log_path(&daemon, &id);
    let before = peak_rss_kib(&daemon);

    // The same bytes the supervisor's log descriptor would write (O_APPEND).
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("log");
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..32 {
        file.write_all(&chunk).expect("append");
    }
    let followers: Vec<_> = (0..FOLLOWERS)
        .map(|_| {
            let (socket, id) = (daemon.socket.clone(), id.clone());
            std::thread::spawn(move || follow_until(socket, id, b"after-the-endless-line"))
        })
        .collect();
    // Another caller, while the followers read the line.
    let lister = {
        let socket = daemon.socket.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let answered = support::daemon::raw_request(&socket, "GET", "/v1/runs", None)
                .map(|(status, _)| status);
            (answered, started.elapsed())
        })
    };
    // The line ends, and a record follows it: every follower must get past
    // the endless line to it.
    file.write_all(b"\n{\"seq\":1000000,\"time_ms\":1,\"type\":\"stdout\",\"data\":\"after-the-endless-line\"}\n")
        .expect("append");
    // Watched while it happens, so that a daemon that holds the line fails
    // here as soon as it passes the bound, not after it is done with it.
    support::wait::until_true(
        "the lister and every follower to finish",
        Duration::from_secs(300),
        || {
            let grown = peak_rss_kib(&daemon).saturating_sub(before);
            assert!(
                grown < RSS_GROWTH_BOUND_KIB,
                "the daemon grew by {} MiB reading one endless log line ({FOLLOWERS} followers)",
                grown >> 10
            );
            lister.is_finished() && followers.iter().all(|f| f.is_finished())
        },
    );
    let (answered, took) = lister.join().expect("lister");
    assert_eq!(
        answered.expect("GET /v1/runs answered"),
        200,
        "another caller's request"
    );
    for follower in followers {
        assert!(
            follower.join().expect("follower"),
            "a follower never got the record after the endless line:\n{}",
            daemon.log()
        );
    }
    let after = peak_rss_kib(&daemon);
    eprintln!(
        "daemon peak RSS {} -> {} MiB; GET /v1/runs took {took:?} with {FOLLOWERS} followers on the line",
        before >> 10,
        after >> 10
    );
    assert!(
        after.saturating_sub(before) < RSS_GROWTH_BOUND_KIB,
        "the daemon grew by {} MiB reading one endless log line ({FOLLOWERS} followers)",
        after.saturating_sub(before) >> 10
    );
    let end = cancel_and_wait(&daemon, &id);
    assert_eq!(end["state"], "cancelled", "{end}");
}

/// The daemon's read positions in `log`, one per descriptor open for reading.
fn log_read_positions(daemon: &Daemon, log: &Path) -> Vec<u64> {
    let pid = daemon.pid();
    let mut positions = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if std::fs::read_link(entry.path()).ok().as_deref() != Some(log) {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            entry.file_name().to_string_lossy()
        ));
        let Ok(info) = info else { continue };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        // Readers only: the daemon's relay holds the log open for writing.
        let flags = field("flags:").and_then(|f| u32::from_str_radix(&f, 8).ok());
        if flags.is_none_or(|f| f & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32) {
            continue;
        }
        if let Some(pos) = field("pos:").and_then(|p| p.parse().ok()) {
            positions.push(pos);
        }
    }
    positions
}

/// Followers of a log that ends in an unended line just under the limit
/// (which a follower must hand out whole once it ends). Before the tail
/// left such a line in the file between reads, each follower held it:
/// 128 followers (a caller may hold 256 connections) made 256 MiB. Once
/// the line ends, every follower sends it, and the caller's stream budget
/// (crates/sandbox-daemon/src/budget.rs) bounds how much of that is in flight.
#[test]
fn followers_of_an_unended_line_under_the_limit_do_not_each_hold_it() {
    let test = "followers_of_an_unended_line_under_the_limit_do_not_each_hold_it";
    if !support::require_root_daemon(test) {
        return;
    }
    const MANY: usize = 128;
    let daemon = daemon_for_root();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let id = running_sleep(&daemon, project.path());
    let log = log_path(&daemon, &id);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("log");
    let head = b"{\"seq\":1000000,\"time_ms\":1,\"type\":\"stdout\",\"data\":\"";
    let tail = b"\"}\n";
    let filler =
        sandbox_daemon::log::LOG_LINE_LIMIT - head.len() - tail.len() - "unended-line-ends".len();
    file.write_all(head).expect("append");
    file.write_all(&vec![b'y'; filler]).expect("append");
    let size = std::fs::metadata(&log).expect("log").len();
    let before = peak_rss_kib(&daemon);
    let followers: Vec<_> = (0..MANY)
        .map(|_| {
            let (socket, id) = (daemon.socket.clone(), id.clone());
            std::thread::spawn(move || follow_until(socket, id, b"unended-line-ends"))
        })
        .collect();
    // Every follower has read up to the end of the log, the unended line
    // included (its descriptor's position in /proc says so).
    support::wait::until_true(
        "every follower to read to the end of the log",
        Duration::from_secs(120),
        || {
            let positions = log_read_positions(&daemon, &log);
            positions.len() == MANY && positions.iter().all(|pos| *pos == size)
        },
    );
    let held = peak_rss_kib(&daemon).saturating_sub(before);
    file.write_all(b"unended-line-ends").expect("append");
    file.write_all(tail).expect("append");
    for follower in followers {
        assert!(
            follower.join().expect("follower"),
            "a follower never got the line once it ended:\n{}",
            daemon.log()
        );
    }
    eprintln!(
        "daemon peak RSS grew {} MiB with {MANY} followers on the unended line, {} MiB in all",
        held >> 10,
        peak_rss_kib(&daemon).saturating_sub(before) >> 10
    );
    assert!(
        held < RSS_GROWTH_BOUND_KIB,
        "{MANY} followers of an unended {} MiB line grew the daemon by {} MiB",
        sandbox_daemon::log::LOG_LINE_LIMIT >> 20,
        held >> 10
    );
    // Once the line ends each follower hands it out whole, and the
    // caller's stream budget bounds how many are in flight at once.
    // Before it, the 128 copies sat in hyper's buffers: +320 MiB.
    let in_all = peak_rss_kib(&daemon).saturating_sub(before);
    assert!(
        in_all < RSS_GROWTH_BOUND_KIB,
        "{MANY} followers handing out one {} MiB line grew the daemon by {} MiB",
        sandbox_daemon::log::LOG_LINE_LIMIT >> 20,
        in_all >> 10
    );
    let end = cancel_and_wait(&daemon, &id);
    assert_eq!(end["state"], "cancelled", "{end}");
}

/// Takes the events socket the run's supervisor holds (pidfd_getfd: the
/// descriptor the caller's process legitimately has) and writes one
/// endless line of `MIB` MiB and a newline on it.
const WRITE_ON_EVENTS_SOCKET: &str = r#"
import ctypes, os, socket, struct, sys
supervisor, daemon, mib = map(int, sys.argv[1:4])
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(supervisor)
for name in os.listdir(f"/proc/{supervisor}/fd"):
    try:
        if not os.readlink(f"/proc/{supervisor}/fd/{name}").startswith("socket:"):
            continue
    except OSError:
        continue
    fd = libc.syscall(438, pidfd, int(name), 0)  # pidfd_getfd
    if fd < 0:
        continue
    sock = socket.socket(fileno=fd)
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    # The events socket is the daemon's socketpair (the launcher's is a
    # SOCK_SEQPACKET one; the broker's and the net link's are the
    # supervisor's own).
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM \
            or struct.unpack("3i", creds)[0] != daemon:
        sock.close()
        continue
    chunk = b"x" * (1 << 20)
    for _ in range(mib):
        sock.sendall(chunk)
    sock.sendall(b"\n")
    print("sent")
    sys.exit(0)
sys.exit("the supervisor holds no events socket")
"#;

/// A supervisor (running as the caller) writes one 400 MiB line without a
/// newline on its events socket. Before the shared reader, the daemon's
/// line reader took it all (+401 MiB).
#[test]
fn an_endless_line_on_the_events_socket_is_not_held_by_the_daemon() {
    let test = "an_endless_line_on_the_events_socket_is_not_held_by_the_daemon";
    if !support::require_root_daemon(test) {
        return;
    }
    let daemon = daemon_for_root();
    let project = tempfile::tempdir_in("/tmp").expect("project");
    let id = running_sleep(&daemon, project.path());
    let launcher = daemon.launcher_pid().expect("the launcher runs");
    let supervisor = support::wait::until("the run's supervisor", Duration::from_secs(30), || {
        children_of(launcher).into_iter().next()
    });
    let before = peak_rss_kib(&daemon);
    let mut writer = std::process::Command::new("python3")
        .args(["-c", WRITE_ON_EVENTS_SOCKET])
        .arg(supervisor.to_string())
        .arg(daemon.pid().to_string())
        .arg("400")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let took = list_is_answered(&daemon);
    let mut sent = String::new();
    writer
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut sent)
        .expect("writer output");
    assert!(writer.wait().expect("writer").success(), "{sent}");
    assert_eq!(sent.trim(), "sent");
    let took_after = list_is_answered(&daemon);
    let after = peak_rss_kib(&daemon);
    eprintln!(
        "daemon peak RSS {} -> {} MiB; GET /v1/runs took {took:?} during the line, {took_after:?} after",
        before >> 10,
        after >> 10
    );
    assert!(
        after.saturating_sub(before) < RSS_GROWTH_BOUND_KIB,
        "the daemon grew by {} MiB reading one endless line on an events socket",
        after.saturating_sub(before) >> 10
    );
    // The socket still works: the cancel reaches the supervisor, and its
    // result comes back on the same socket.
    let end = cancel_and_wait(&daemon, &id);
    assert_eq!(end["state"], "cancelled", "{end}\n{}", daemon.log());
    assert!(
        daemon.log().contains("ignoring an event of"),
        "the line was not reported:\n{}",
        daemon.log()
    );
}

/// A request body sent chunked (no Content-Length) and without end is cut
/// at the body limit: the caller gets 413 and the daemon holds at most the
/// limit.
#[test]
fn an_endless_chunked_request_body_is_refused_at_the_limit() {
    let test = "an_endless_chunked_request_body_is_refused_at_the_limit";
    if !support::require(
        test,
        "root (the daemon runs as root)",
        nix::unistd::geteuid().is_root(),
    ) {
        return;
    }
    let daemon = daemon_for_root();
    let before = peak_rss_kib(&daemon);
    let mut stream = UnixStream::connect(&daemon.socket).expect("connect");
    stream
        .set_read_timeout(Some(support::wait::limit(Duration::from_secs(120))))
        .expect("timeout");
    stream
        .write_all(
            b"POST /v1/runs HTTP/1.1\r\nHost: sandbox\r\nContent-Type: application/json\r\n\
              Transfer-Encoding: chunked\r\n\r\n",
        )
        .expect("head");
    let chunk = [b'x'; 1 << 20];
    let mut sent_mib = 0;
    for _ in 0..256 {
        let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
        // The daemon answers and closes once the limit is passed.
        if stream.write_all(&framed).is_err() {
            break;
        }
        sent_mib += 1;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let head = String::from_utf8_lossy(&answer[..answer.len().min(200)]).to_string();
    assert!(
        head.starts_with("HTTP/1.1 413"),
        "after {sent_mib} MiB: {head:?}"
    );
    let after = peak_rss_kib(&daemon);
    assert!(
        after.saturating_sub(before) < RSS_GROWTH_BOUND_KIB,
        "the daemon grew by {} MiB reading a body",
        after.saturating_sub(before) >> 10
    );
    list_is_answered(&daemon);
}
