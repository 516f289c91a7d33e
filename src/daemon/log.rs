//! Reading a run's log (`spool/<id>/log.ndjson`) while its supervisor may
//! still append to it: only whole lines, from a byte position, a bounded
//! chunk at a time, so a reader never holds more than one chunk of a log
//! that may be many megabytes.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::launch::protocol::{LogEvent, LogRecord};

/// Most bytes one read hands out (a longer line is handed out whole).
pub const CHUNK: usize = 64 * 1024;

/// A reader of one log from a sequence number on.
#[derive(Debug)]
pub struct Tail {
    file: File,
    /// Lines still to skip (those with `seq <= since`).
    skip: u64,
    /// Bytes read past the last newline handed out.
    partial: Vec<u8>,
}

impl Tail {
    /// Start reading `path` after record `since`.
    pub fn open(path: &Path, since: u64) -> io::Result<Tail> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)?;
        Ok(Tail {
            file,
            skip: since,
            partial: Vec::new(),
        })
    }

    /// The next whole lines that are there now (empty at the current end).
    pub fn read_lines(&mut self) -> io::Result<Vec<u8>> {
        let mut buffer = vec![0u8; CHUNK];
        loop {
            let n = match self.file.read(&mut buffer) {
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if n == 0 {
                return Ok(Vec::new());
            }
            self.partial.extend_from_slice(&buffer[..n]);
            let mut start = 0;
            while self.skip > 0 {
                match self.partial[start..].iter().position(|b| *b == b'\n') {
                    Some(at) => {
                        start += at + 1;
                        self.skip -= 1;
                    }
                    None => break,
                }
            }
            self.partial.drain(..start);
            if self.skip > 0 {
                continue;
            }
            if let Some(last) = self.partial.iter().rposition(|b| *b == b'\n') {
                let rest = self.partial.split_off(last + 1);
                return Ok(std::mem::replace(&mut self.partial, rest));
            }
        }
    }
}

/// How many records a log holds (its newlines).
pub fn count_records(path: &Path) -> io::Result<u64> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut buffer = vec![0u8; CHUNK];
    let mut count = 0u64;
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Ok(count),
            Ok(n) => count += buffer[..n].iter().filter(|b| **b == b'\n').count() as u64,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// Append a `lost` record, once nothing else writes the log (its
/// supervisor is gone).
pub fn append_lost(path: &Path, reason: &str, time_ms: u64) -> io::Result<u64> {
    append(
        path,
        LogEvent::Lost {
            reason: reason.to_string(),
        },
        time_ms,
    )
}

/// Append a record the daemon writes (`lost`, `end`), once nothing else
/// writes the log. A line the supervisor left half-written is ended first
/// so the new record is a line of its own.
pub fn append(path: &Path, event: LogEvent, time_ms: u64) -> io::Result<u64> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)?;
    let len = file.seek(SeekFrom::End(0))?;
    let mut line = Vec::new();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::End(-1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            line.push(b'\n');
        }
    }
    let seq = count_records(path)? + 1 + u64::from(!line.is_empty());
    let record = LogRecord {
        seq,
        time_ms,
        event,
    };
    serde_json::to_writer(&mut line, &record).map_err(io::Error::other)?;
    line.push(b'\n');
    file.write_all(&line)?;
    Ok(seq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::protocol::Chunk;

    fn line(seq: u64) -> String {
        let record = LogRecord {
            seq,
            time_ms: 1,
            event: LogEvent::Stdout(Chunk::new(format!("line {seq}\n").as_bytes())),
        };
        format!("{}\n", serde_json::to_string(&record).unwrap())
    }

    fn seqs(bytes: &[u8]) -> Vec<u64> {
        String::from_utf8_lossy(bytes)
            .lines()
            .map(|l| serde_json::from_str::<LogRecord>(l).unwrap().seq)
            .collect()
    }

    #[test]
    fn since_skips_records_and_partial_lines_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.ndjson");
        let mut file = std::fs::File::create(&path).unwrap();
        for seq in 1..=5 {
            file.write_all(line(seq).as_bytes()).unwrap();
        }
        let sixth = line(6);
        let (head, tail) = sixth.split_at(10);
        file.write_all(head.as_bytes()).unwrap();

        let mut reader = Tail::open(&path, 2).unwrap();
        assert_eq!(seqs(&reader.read_lines().unwrap()), [3, 4, 5]);
        assert!(
            reader.read_lines().unwrap().is_empty(),
            "half a line is not handed out"
        );
        file.write_all(tail.as_bytes()).unwrap();
        assert_eq!(seqs(&reader.read_lines().unwrap()), [6]);

        let mut all = Tail::open(&path, 0).unwrap();
        assert_eq!(seqs(&all.read_lines().unwrap()), [1, 2, 3, 4, 5, 6]);
        let mut past = Tail::open(&path, 6).unwrap();
        assert!(past.read_lines().unwrap().is_empty());
        file.write_all(line(7).as_bytes()).unwrap();
        assert_eq!(seqs(&past.read_lines().unwrap()), [7]);
        assert_eq!(count_records(&path).unwrap(), 7);
    }

    #[test]
    fn a_long_log_comes_in_bounded_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.ndjson");
        let mut text = String::new();
        for seq in 1..=5_000 {
            text.push_str(&line(seq));
        }
        std::fs::write(&path, &text).unwrap();
        let mut reader = Tail::open(&path, 100).unwrap();
        let mut got = Vec::new();
        loop {
            let chunk = reader.read_lines().unwrap();
            if chunk.is_empty() {
                break;
            }
            assert!(chunk.len() <= 2 * CHUNK);
            got.extend(seqs(&chunk));
        }
        assert_eq!(got, (101..=5_000).collect::<Vec<_>>());
    }

    #[test]
    fn lost_is_numbered_after_the_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.ndjson");
        std::fs::write(&path, format!("{}{}", line(1), "{\"seq\":2,\"ti")).unwrap();
        let seq = append_lost(&path, "the supervisor died", 5).unwrap();
        assert_eq!(seq, 3);
        let text = std::fs::read_to_string(&path).unwrap();
        let last: LogRecord = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last.seq, 3);
        assert_eq!(
            last.event,
            LogEvent::Lost {
                reason: "the supervisor died".into()
            }
        );
        let empty = dir.path().join("empty.ndjson");
        assert_eq!(append_lost(&empty, "x", 1).unwrap(), 1);
    }
}
