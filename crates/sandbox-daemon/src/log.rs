//! Reading a run's log (`spool/<id>/log.ndjson`) while its supervisor may
//! still append to it: only whole lines, from a byte position, a bounded
//! chunk at a time, so a reader never holds more than one chunk of a log
//! that may be many megabytes. The supervisor runs as the caller, so the
//! log is untrusted: its lines come through [`sandbox::jsonl::Framer`], and
//! a line over [`LOG_LINE_LIMIT`] is skipped, never held.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use sandbox::jsonl::{Frame, Framer};
use sandbox::launch::protocol::{LogEvent, LogRecord, MAX_MESSAGE};

/// Bytes one read takes from the log.
pub const CHUNK: usize = 64 * 1024;

/// Longest log line handed out. The longest record is the daemon's `end`,
/// which carries the report of a `finished` event (at most
/// [`MAX_MESSAGE`]) and its reason; an output record is one read of the
/// supervisor (64 KiB) at most six times over once escaped. Each follower
/// of a run holds up to this much of a line that has not ended.
pub const LOG_LINE_LIMIT: usize = 2 * MAX_MESSAGE;

/// The start of a line the writer had not ended when a read reached the
/// end of the log. Its bytes stay in the file, not in the follower: a
/// caller may open hundreds of followers on a log that ends in an unended
/// line just under the limit. They are read again, once, when the line
/// ends.
#[derive(Debug, Clone, Copy)]
struct Released {
    /// Where the line starts in the log.
    offset: u64,
    /// Its bytes so far.
    bytes: usize,
}

/// A reader of one log from a sequence number on.
#[derive(Debug)]
pub struct Tail {
    file: File,
    /// Lines still to skip (those with `seq <= since`).
    skip: u64,
    /// The lines of what one call reads.
    framer: Framer,
    /// The line being read, left in the file.
    released: Option<Released>,
    /// Lines over [`LOG_LINE_LIMIT`] skipped so far.
    too_large: u64,
}

impl Tail {
    /// Start reading `path` after record `since`.
    pub fn open(path: &Path, since: u64) -> io::Result<Tail> {
        let file = sandbox::safe_file::open_read(path)?;
        Ok(Tail {
            file,
            skip: since,
            framer: Framer::new(LOG_LINE_LIMIT),
            released: None,
            too_large: 0,
        })
    }

    /// The next whole lines that are there now (empty at the current end),
    /// each with its newline. A line over [`LOG_LINE_LIMIT`] is left out
    /// (it still counts as a record for `since`). Between calls the tail
    /// holds no bytes of the log.
    pub fn read_lines(&mut self) -> io::Result<Vec<u8>> {
        let mut buffer = vec![0u8; CHUNK];
        let mut frames = Vec::new();
        loop {
            let n = match self.file.read(&mut buffer) {
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if n == 0 {
                self.release()?;
                return Ok(Vec::new());
            }
            self.framer.push(&buffer[..n], &mut frames);
            let mut lines = Vec::new();
            for frame in frames.drain(..) {
                let frame = match self.released.take() {
                    Some(start) => self.join(start, frame)?,
                    None => frame,
                };
                if self.skip > 0 {
                    self.skip -= 1;
                    continue;
                }
                match frame {
                    Frame::Line(line) => {
                        lines.extend_from_slice(&line);
                        lines.push(b'\n');
                    }
                    Frame::TooLarge { bytes } => {
                        self.too_large += 1;
                        tracing::warn!(
                            "a run's log has a line of {bytes} bytes (at most {LOG_LINE_LIMIT}): left out"
                        );
                    }
                }
            }
            // A long line is not gathered in memory either: 16 blocking
            // threads gathering lines of 2 MiB while their writer has not
            // ended them made 80 MiB that the allocator kept.
            if self.framer.pending() > CHUNK || self.framer.skipping().is_some() {
                self.release()?;
            }
            if !lines.is_empty() {
                return Ok(lines);
            }
        }
    }

    /// Leave the line being read in the file (at the end of the log, or
    /// once it is long): its bytes are read again once it has ended.
    fn release(&mut self) -> io::Result<()> {
        let held = self.framer.skipping().unwrap_or(self.framer.pending());
        if held == 0 {
            return Ok(());
        }
        let end = self.file.stream_position()?;
        let start = self.released.get_or_insert(Released {
            offset: end.saturating_sub(held as u64),
            bytes: 0,
        });
        start.bytes = start.bytes.saturating_add(held);
        self.framer = Framer::new(LOG_LINE_LIMIT);
        Ok(())
    }

    /// The first frame after a release is the end of the released line.
    fn join(&self, start: Released, end: Frame) -> io::Result<Frame> {
        let bytes = start.bytes.saturating_add(match &end {
            Frame::Line(line) => line.len(),
            Frame::TooLarge { bytes } => *bytes,
        });
        let Frame::Line(rest) = end else {
            return Ok(Frame::TooLarge { bytes });
        };
        if bytes > LOG_LINE_LIMIT {
            return Ok(Frame::TooLarge { bytes });
        }
        use std::os::unix::fs::FileExt;
        let mut line = vec![0u8; start.bytes];
        self.file.read_exact_at(&mut line, start.offset)?;
        line.extend_from_slice(&rest);
        Ok(Frame::Line(line))
    }

    /// Lines over [`LOG_LINE_LIMIT`] left out so far.
    pub fn too_large(&self) -> u64 {
        self.too_large
    }
}

/// How many records a log holds (its newlines).
pub fn count_records(path: &Path) -> io::Result<u64> {
    let mut file = match sandbox::safe_file::open_read(path).map_err(io::Error::from) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    // Sized to the file when it is small: a run's log is mostly a few
    // records, and zeroing a whole chunk for them was most of the count.
    let size = file.metadata().map_or(CHUNK as u64, |m| m.len());
    let mut buffer =
        vec![0u8; usize::try_from(size.saturating_add(1)).map_or(CHUNK, |s| s.min(CHUNK))];
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
    let mut file = sandbox::safe_file::open_read_append(path, 0o600)?;
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
    use sandbox::launch::protocol::Chunk;

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
    fn an_endless_line_is_skipped_not_held_and_the_next_record_comes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.ndjson");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(line(1).as_bytes()).unwrap();
        file.write_all(&vec![b'x'; 3 * LOG_LINE_LIMIT]).unwrap();
        let mut reader = Tail::open(&path, 0).unwrap();
        assert_eq!(seqs(&reader.read_lines().unwrap()), [1]);
        assert!(reader.read_lines().unwrap().is_empty());
        assert_eq!(reader.framer.pending(), 0, "the long line is not held");
        assert_eq!(reader.framer.skipping(), None, "nor counted in the framer");
        file.write_all(b"\n").unwrap();
        file.write_all(line(3).as_bytes()).unwrap();
        assert_eq!(seqs(&reader.read_lines().unwrap()), [3]);
        assert_eq!(reader.too_large(), 1);
        let mut after = Tail::open(&path, 2).unwrap();
        assert_eq!(
            seqs(&after.read_lines().unwrap()),
            [3],
            "it counts for since"
        );
    }

    #[test]
    fn an_unended_line_is_left_in_the_file_between_reads_and_comes_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.ndjson");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(line(1).as_bytes()).unwrap();
        let long = line(2).replace("line 2", &"y".repeat(LOG_LINE_LIMIT - 200));
        let (head, tail) = long.split_at(LOG_LINE_LIMIT / 2);
        let (middle, tail) = tail.split_at(CHUNK + 7);
        file.write_all(head.as_bytes()).unwrap();
        let mut reader = Tail::open(&path, 0).unwrap();
        assert_eq!(seqs(&reader.read_lines().unwrap()), [1]);
        for piece in [middle, ""] {
            assert!(reader.read_lines().unwrap().is_empty());
            assert_eq!(reader.framer.pending(), 0, "nothing held between reads");
            file.write_all(piece.as_bytes()).unwrap();
        }
        file.write_all(tail.as_bytes()).unwrap();
        file.write_all(line(3).as_bytes()).unwrap();
        let got = reader.read_lines().unwrap();
        assert_eq!(seqs(&got), [2, 3]);
        assert_eq!(&got[..long.len()], long.as_bytes(), "the line is whole");
        // Just over the limit in the same pieces: left out, and the next
        // record still comes.
        let over = format!("{}\n", "z".repeat(LOG_LINE_LIMIT + 1));
        let (head, tail) = over.split_at(LOG_LINE_LIMIT - 5);
        file.write_all(head.as_bytes()).unwrap();
        assert!(reader.read_lines().unwrap().is_empty());
        file.write_all(tail.as_bytes()).unwrap();
        file.write_all(line(5).as_bytes()).unwrap();
        assert_eq!(seqs(&reader.read_lines().unwrap()), [5]);
        assert_eq!(reader.too_large(), 1);
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

    /// A log replaced by a link to another file or by a FIFO (which would
    /// hang a blocking open with no writer) is refused at once by every
    /// reader and writer, and the link's target is left as it was.
    #[test]
    fn a_log_replaced_by_a_link_or_a_fifo_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("canary");
        std::fs::write(&canary, line(1)).unwrap();
        let link = dir.path().join("link.ndjson");
        std::os::unix::fs::symlink(&canary, &link).unwrap();
        let fifo = dir.path().join("fifo.ndjson");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        for path in [&link, &fifo] {
            assert!(Tail::open(path, 0).is_err(), "{}", path.display());
            assert!(count_records(path).is_err(), "{}", path.display());
            assert!(append_lost(path, "x", 1).is_err(), "{}", path.display());
        }
        assert_eq!(std::fs::read_to_string(&canary).unwrap(), line(1));
    }
}
