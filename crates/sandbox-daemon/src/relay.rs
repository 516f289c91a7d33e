//! The daemon is the only writer of a run's spool files (`log.ndjson`,
//! `audit.ndjson`). A caller's run is supervised by a process of the
//! caller's uid, made dumpable so it can write its sandbox's id maps; the
//! caller may ptrace it or copy any of its descriptors with `pidfd_getfd`.
//! So the supervisor gets the write end of a pipe per file, never the
//! file: whatever reaches the pipe is one claim among others, and this
//! relay decides what of it lands on root's disk. Each line is checked
//! (a log line must be a record the supervisor may write, never the
//! daemon's `end` or `lost`; an audit line a JSON object), the log's
//! records are numbered and timed by the daemon, the audit's lines are
//! sealed into the daemon's own hash chain for the run (what the
//! supervisor sealed them with is its claim, replaced here, so only the
//! daemon's chain is in root's file), and each file stops at
//! its bound ([`log_bound`] of the run's output cap): past it the pipe
//! is closed, so a writer gets EPIPE instead of filling the disk.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use sandbox::launch::protocol::{log_bound, LogEvent, LogRecord, LOG_SLACK, MAX_MESSAGE};

/// Why a relay could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The pipe.
    #[error("the run's {what} pipe: {source}")]
    Pipe {
        /// `log` or `audit`.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The spool file (its error names it).
    #[error(transparent)]
    File(sandbox::safe_file::SafeFileError),
}

/// One spool file and the read end of the pipe that feeds it, before the
/// relay runs (made off the runtime, on a blocking thread).
#[derive(Debug)]
pub struct Feed {
    kind: Kind,
    file: SpoolFile,
    read: OwnedFd,
    bound: u64,
    cap: u64,
}

/// A spool file, open, or named and made by its first write: most runs
/// audit nothing, and a file created per run was a third of the daemon's
/// own work per run on this machine's ext4 (`scripts/bench-daemon`, a
/// profile: inode allocation); a missing audit file reads as empty.
#[derive(Debug)]
enum SpoolFile {
    Open(std::fs::File),
    AtFirstWrite(std::path::PathBuf),
}

impl SpoolFile {
    /// Append `bytes`, creating the file first if it is not there yet
    /// (0600, never through a link: `safe_file`). Blocks.
    fn append(self, bytes: &[u8]) -> std::io::Result<SpoolFile> {
        use std::io::Write;
        let mut file = match self {
            SpoolFile::Open(file) => file,
            SpoolFile::AtFirstWrite(path) => sandbox::safe_file::open_append(&path, 0o600)
                .map_err(|err| std::io::Error::other(err.to_string()))?,
        };
        file.write_all(bytes)?;
        Ok(SpoolFile::Open(file))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Log,
    Audit,
}

/// A pipe into `path` (created 0600, root's, if missing): the feed the
/// daemon relays, and the write end the supervisor gets.
fn pipe_into(
    kind: Kind,
    path: &Path,
    output_cap: Option<u64>,
) -> Result<(Feed, OwnedFd), RelayError> {
    let what = match kind {
        Kind::Log => "log",
        Kind::Audit => "audit",
    };
    let file = match kind {
        Kind::Log => {
            SpoolFile::Open(sandbox::safe_file::open_append(path, 0o600).map_err(RelayError::File)?)
        }
        Kind::Audit => SpoolFile::AtFirstWrite(path.to_path_buf()),
    };
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|errno| RelayError::Pipe {
            what,
            source: errno.into(),
        })?;
    let bound = log_bound(output_cap).saturating_add(LOG_SLACK);
    let feed = Feed {
        kind,
        file,
        read,
        bound,
        cap: output_cap.unwrap_or(u64::MAX),
    };
    Ok((feed, write))
}

/// The run's log pipe.
pub fn log_pipe(path: &Path, output_cap: Option<u64>) -> Result<(Feed, OwnedFd), RelayError> {
    pipe_into(Kind::Log, path, output_cap)
}

/// The run's audit pipe, bounded like its log; the file is created by
/// the first line the relay accepts.
pub fn audit_pipe(path: &Path, output_cap: Option<u64>) -> Result<(Feed, OwnedFd), RelayError> {
    pipe_into(Kind::Audit, path, output_cap)
}

/// The relays of one run, running.
pub struct Relays {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Relays {
    /// Start relaying `feeds` (on the runtime).
    pub fn start(run: &str, feeds: Vec<Feed>) -> Relays {
        let (stop, stopped) = watch::channel(false);
        let tasks = feeds
            .into_iter()
            .map(|feed| tokio::spawn(relay(run.to_string(), feed, stopped.clone())))
            .collect();
        Relays { stop, tasks }
    }

    /// Wait for every writer to close its pipe, at most `linger`, then stop
    /// reading: a copy of a write end the caller keeps open past the run
    /// (taken from the supervisor) holds neither the run's end nor its
    /// files. When this returns nothing more is written to the files.
    pub async fn finish(mut self, linger: Duration) {
        let all = async {
            for task in &mut self.tasks {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(linger, all).await.is_err() {
            let _ = self.stop.send(true);
            for task in self.tasks.drain(..) {
                // A finished task's handle yields its result again: an
                // error (JoinError) at most, never a second write.
                let _ = task.await;
            }
        }
    }
}

async fn relay(run: String, feed: Feed, mut stop: watch::Receiver<bool>) {
    let Feed {
        kind,
        file,
        read,
        bound,
        cap,
    } = feed;
    let mut pipe = match tokio::net::unix::pipe::Receiver::from_owned_fd(read) {
        Ok(pipe) => pipe,
        Err(err) => {
            tracing::warn!("run {run}: relaying its {kind:?} pipe: {err}");
            return;
        }
    };
    let mut file = Some(file);
    let mut spool = Spool::new(kind, bound, cap, &run);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            biased;
            _ = stop.changed() => return,
            read = pipe.read(&mut chunk) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        let (out, full) = spool.push(&chunk[..n]);
        if out.is_empty() {
            // Nothing accepted yet (a partial line, a refused one).
        } else if let Some(taken) = file.take() {
            // Off the runtime's workers; awaited whole, so a stopped relay
            // never leaves a write behind it.
            let written = tokio::task::spawn_blocking(move || taken.append(&out)).await;
            match written {
                Ok(Ok(back)) => file = Some(back),
                _ => {
                    tracing::warn!("run {run}: writing its {kind:?} file failed; it stops here");
                    return;
                }
            }
        }
        if full {
            tracing::info!(run = %run, bound, "the run's {kind:?} reached its bound");
            return;
        }
    }
}

/// Lines in, the bytes the file gets out: the part of the relay that needs
/// no pipe, so every rule is tested without a run. The lines come from
/// the code base's one bounded reader: a line past [`MAX_MESSAGE`] is
/// dropped whole without being held.
struct Spool {
    kind: Kind,
    bound: u64,
    cap: u64,
    written: u64,
    seq: u64,
    chain: sandbox::audit::Chain,
    lines: sandbox::jsonl::Framer,
}

impl Spool {
    fn new(kind: Kind, bound: u64, cap: u64, run: &str) -> Spool {
        Spool {
            kind,
            bound,
            cap,
            written: 0,
            seq: 0,
            chain: sandbox::audit::Chain::unique("daemon-run", run),
            lines: sandbox::jsonl::Framer::new(MAX_MESSAGE),
        }
    }

    /// The bytes to append for `bytes` read from the pipe, and whether the
    /// file is full (nothing more is taken).
    fn push(&mut self, bytes: &[u8]) -> (Vec<u8>, bool) {
        let mut frames = Vec::new();
        self.lines.push(bytes, &mut frames);
        let mut out = Vec::new();
        for frame in frames {
            let sandbox::jsonl::Frame::Line(line) = frame else {
                continue;
            };
            if let Some(mut accepted) = self.accept(&line) {
                accepted.push(b'\n');
                if self.written + accepted.len() as u64 > self.bound {
                    out.extend(self.capped());
                    return (out, true);
                }
                self.written += accepted.len() as u64;
                out.extend(accepted);
            }
        }
        (out, false)
    }

    /// The line as the file gets it, or `None` when it is refused.
    fn accept(&mut self, line: &[u8]) -> Option<Vec<u8>> {
        match self.kind {
            Kind::Audit => {
                use sandbox::audit::chain::{CHAIN_FIELD, PREV_FIELD, SEQ_FIELD};
                let mut object: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(line).ok()?;
                for field in [CHAIN_FIELD, SEQ_FIELD, PREV_FIELD] {
                    object.remove(field);
                }
                Some(self.chain.seal(&object))
            }
            Kind::Log => {
                let record: LogRecord = serde_json::from_slice(line).ok()?;
                match record.event {
                    // The daemon's own: what the run's end was is root's
                    // to say (`runs::judge`), never a supervisor's.
                    LogEvent::End { .. } | LogEvent::Lost { .. } => None,
                    event => self.numbered(event),
                }
            }
        }
    }

    fn numbered(&mut self, event: LogEvent) -> Option<Vec<u8>> {
        self.seq += 1;
        serde_json::to_vec(&LogRecord {
            seq: self.seq,
            time_ms: sandbox::clock::unix_ms(),
            event,
        })
        .ok()
    }

    /// The file's last line once it is full.
    fn capped(&mut self) -> Vec<u8> {
        let line = match self.kind {
            Kind::Log => self.numbered(LogEvent::OutputCapped { cap: self.cap }),
            Kind::Audit => Some(self.chain.seal(&serde_json::json!({
                "event": "audit_capped",
                "bound": self.bound,
            }))),
        };
        let mut line = line.unwrap_or_default();
        line.push(b'\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox::launch::protocol::Chunk;

    fn record(seq: u64, event: LogEvent) -> Vec<u8> {
        let mut line = serde_json::to_vec(&LogRecord {
            seq,
            time_ms: 1,
            event,
        })
        .unwrap();
        line.push(b'\n');
        line
    }

    fn lines(bytes: &[u8]) -> Vec<serde_json::Value> {
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn the_daemons_records_and_garbage_never_reach_the_log() {
        let mut framer = Spool::new(Kind::Log, 1 << 20, 1000, "t");
        let mut input = record(7, LogEvent::Stdout(Chunk::new(b"hi")));
        input.extend(record(
            99,
            LogEvent::End {
                state: "exited".into(),
                status: Some(0),
                reason: None,
                report: None,
            },
        ));
        input.extend(record(
            3,
            LogEvent::Lost {
                reason: "forged".into(),
            },
        ));
        input.extend(b"not json\n");
        input.extend(record(8, LogEvent::Exit { status: 0 }));
        // Split anywhere: lines are whole or nothing.
        let (a, b) = input.split_at(5);
        let (mut out, full) = framer.push(a);
        assert!(!full);
        out.extend(framer.push(b).0);
        let records = lines(&out);
        let types: Vec<_> = records.iter().map(|r| r["type"].clone()).collect();
        assert_eq!(types, ["stdout", "exit"]);
        let seqs: Vec<_> = records.iter().map(|r| r["seq"].clone()).collect();
        assert_eq!(seqs, [1, 2], "numbered by the daemon");
    }

    #[test]
    fn a_log_stops_at_its_bound_with_one_capped_record() {
        let mut framer = Spool::new(Kind::Log, 4096, 10, "t");
        let line = record(1, LogEvent::Stdout(Chunk::new(&[b'x'; 200])));
        let mut total = Vec::new();
        let mut full = false;
        for _ in 0..1000 {
            let (out, now_full) = framer.push(&line);
            total.extend(out);
            if now_full {
                full = true;
                break;
            }
        }
        assert!(full);
        assert!(total.len() <= 4096 + 200, "{}", total.len());
        let records = lines(&total);
        assert_eq!(records.last().unwrap()["type"], "output_capped");
        assert_eq!(records.last().unwrap()["cap"], 10);
    }

    #[test]
    fn an_overlong_line_is_dropped_whole() {
        let mut framer = Spool::new(Kind::Audit, u64::MAX, u64::MAX, "t");
        let mut out = framer.push(&vec![b'{'; MAX_MESSAGE + 10]).0;
        out.extend(framer.push(b"}\n{\"a\":1}\n").0);
        let kept = lines(&out);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0]["a"], 1);
        assert_eq!(kept[0]["seq"], 1, "the first line of the daemon's chain");
        assert_eq!(framer.lines.pending(), 0, "the dropped line is not held");
    }

    /// A run that audits nothing leaves no audit file (read as empty);
    /// the first line creates it, the caller's and no one else's to read.
    #[tokio::test]
    async fn the_audit_file_is_made_by_its_first_line() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let quiet = dir.path().join("quiet.ndjson");
        let (feed, write) = audit_pipe(&quiet, None).unwrap();
        let relays = Relays::start("quiet", vec![feed]);
        drop(write);
        relays.finish(Duration::from_secs(30)).await;
        assert!(!quiet.exists(), "nothing audited, no file");

        let audited = dir.path().join("audited.ndjson");
        let (feed, write) = audit_pipe(&audited, None).unwrap();
        let relays = Relays::start("audited", vec![feed]);
        let mut pipe = std::fs::File::from(write);
        // The supervisor's own seal is its claim: the daemon's replaces it.
        pipe.write_all(
            b"not json\n{\"event\":\"fs\",\"chain\":\"forged\",\"seq\":9,\"prev\":\"x\"}\n",
        )
        .unwrap();
        drop(pipe);
        relays.finish(Duration::from_secs(30)).await;
        let written = std::fs::read(&audited).unwrap();
        let kept = lines(&written);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0]["event"], "fs");
        assert!(kept[0]["chain"]
            .as_str()
            .unwrap()
            .starts_with("daemon-run:audited:"));
        let verified = sandbox::audit::verify::verify(&written[..], None).unwrap();
        assert_eq!(verified.lines, 1);
        let mode = std::fs::metadata(&audited).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
