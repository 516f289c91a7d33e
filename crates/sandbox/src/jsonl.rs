//! The one reader of newline-framed streams (JSON lines) in the code base,
//! built for a peer that may be hostile: a caller, a skill, a container
//! image, a run's supervisor or a remote host.
//!
//! - Every use gives its own longest line (a named constant next to the
//!   reader, saying why that size). A longer line is skipped to its newline
//!   as it streams in, never buffered: the buffer never grows past the
//!   limit, whatever arrives, and the line is reported as
//!   [`Frame::TooLarge`] with its length, so the reader can answer it.
//! - Each byte is looked at once: a line split across many reads is never
//!   scanned again from its start (a tailer that did so spent minutes on
//!   one 32 MiB line and held every thread of the daemon's blocking pool).
//! - [`Framer::push`] is a pure function of the bytes pushed (what the
//!   fuzz targets drive); the shapes around it only move bytes:
//!   [`Framer::fill`] for poll-driven loops on non-blocking descriptors,
//!   [`Lines`] for threads reading a [`Read`], [`AsyncLines`] for tokio
//!   tasks.
//! - [`Framer::consumed`] counts every byte taken, for a reader that also
//!   needs a total budget over the stream.
//!
//! A `\r` before the newline is kept in the line: JSON takes it as
//! whitespace, and a reader that cares about it sees the bytes as sent.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::BorrowedFd;

use crate::read_buffer::ReadBuffer;

/// One line out of the stream, or the news that one was too long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line (without its newline).
    Line(Vec<u8>),
    /// A line over the limit was skipped; `bytes` is how long it was
    /// (newline excluded).
    TooLarge {
        /// Its length.
        bytes: usize,
    },
}

/// What one [`Framer::fill`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Bytes were read.
    Data,
    /// Nothing to read now.
    WouldBlock,
    /// End-of-file, or the descriptor failed.
    Closed,
}

/// Splits a byte stream into lines of at most `max_line` bytes, holding at
/// most that many bytes of a line that has not ended yet.
#[derive(Debug)]
pub struct Framer {
    buffer: Vec<u8>,
    max_line: usize,
    /// Bytes of an over-long line skipped so far (None: not skipping).
    skipping: Option<usize>,
    /// Every byte pushed, newlines included.
    consumed: u64,
    /// Where [`Framer::fill`]'s reads land, kept between reads: a fresh
    /// zeroed 64 KiB per read was a memset on every message of the
    /// broker's round trip.
    scratch: ReadBuffer,
    /// The descriptor said it is no socket (a pipe): read(2) it directly
    /// instead of failing recv(2) first on every read.
    not_socket: bool,
}

impl Framer {
    /// A framer for lines of at most `max_line` bytes (newline excluded).
    pub fn new(max_line: usize) -> Framer {
        Framer {
            buffer: Vec::new(),
            max_line,
            skipping: None,
            consumed: 0,
            scratch: ReadBuffer::default(),
            not_socket: false,
        }
    }

    /// The longest line this framer hands out.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// Feed bytes; the frames they complete are appended to `out`.
    pub fn push(&mut self, data: &[u8], out: &mut impl Extend<Frame>) {
        self.consumed = self.consumed.saturating_add(data.len() as u64);
        let mut rest = data;
        while !rest.is_empty() {
            match memchr::memchr(b'\n', rest) {
                Some(at) => {
                    if let Some(frame) = self.end_line(&rest[..at]) {
                        out.extend(std::iter::once(frame));
                    }
                    rest = &rest[at + 1..];
                }
                None => {
                    self.continue_line(rest);
                    rest = &[];
                }
            }
        }
    }

    /// Bytes of a line whose newline has not come yet.
    fn continue_line(&mut self, piece: &[u8]) {
        if let Some(skipped) = &mut self.skipping {
            *skipped = skipped.saturating_add(piece.len());
            return;
        }
        let length = self.buffer.len().saturating_add(piece.len());
        if length > self.max_line {
            // Freed, not cleared: a line that was almost the limit must not
            // keep its allocation for the rest of the stream.
            self.buffer = Vec::new();
            self.skipping = Some(length);
        } else {
            self.buffer.extend_from_slice(piece);
        }
    }

    /// The last bytes of a line (its newline came): the frame it makes.
    fn end_line(&mut self, piece: &[u8]) -> Option<Frame> {
        if let Some(skipped) = self.skipping.take() {
            return Some(Frame::TooLarge {
                bytes: skipped.saturating_add(piece.len()),
            });
        }
        let length = self.buffer.len().saturating_add(piece.len());
        if length > self.max_line {
            self.buffer = Vec::new();
            return Some(Frame::TooLarge { bytes: length });
        }
        if self.buffer.is_empty() {
            return Some(Frame::Line(piece.to_vec()));
        }
        self.buffer.extend_from_slice(piece);
        Some(Frame::Line(std::mem::take(&mut self.buffer)))
    }

    /// The stream ended: its last line if it had no newline (a line, or
    /// the news that it was too long), None if it ended on a newline.
    /// The framer is then empty again.
    pub fn finish(&mut self) -> Option<Frame> {
        if let Some(bytes) = self.skipping.take() {
            return Some(Frame::TooLarge { bytes });
        }
        if self.buffer.is_empty() {
            return None;
        }
        Some(Frame::Line(std::mem::take(&mut self.buffer)))
    }

    /// Bytes held for a line that has not ended.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }

    /// Bytes of an over-long line skipped so far, while it has not ended.
    pub fn skipping(&self) -> Option<usize> {
        self.skipping
    }

    /// Every byte taken from the stream so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Read what `fd` holds now, without waiting (sockets: MSG_DONTWAIT;
    /// a pipe only after poll said it is readable), and append the
    /// complete frames to `out`. One read: a poll loop calls it again when
    /// the descriptor is still readable, so one busy peer cannot starve
    /// the others.
    pub fn fill(&mut self, fd: BorrowedFd<'_>, out: &mut impl Extend<Frame>) -> Fill {
        use std::os::fd::AsRawFd;
        let mut buf = self.scratch.take();
        let read = if self.not_socket {
            nix::unistd::read(fd, &mut buf)
        } else {
            match nix::sys::socket::recv(
                fd.as_raw_fd(),
                &mut buf,
                nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            ) {
                Err(nix::errno::Errno::ENOTSOCK) => {
                    self.not_socket = true;
                    nix::unistd::read(fd, &mut buf)
                }
                other => other,
            }
        };
        let (filled, bytes) = match read {
            Ok(0) => (Fill::Closed, 0),
            Ok(n) => {
                self.push(&buf[..n], out);
                (Fill::Data, n)
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => (Fill::WouldBlock, 0),
            Err(_) => (Fill::Closed, 0),
        };
        self.scratch.put_back(buf, bytes);
        filled
    }

    /// What a blocking or async reader's `read` into `buf` (from
    /// [`ReadBuffer::take`]) gave: its frames go to `out`, the buffer back
    /// for the next read. True at end-of-file, when the last line, ended
    /// or not, has been handed out too.
    fn absorb(
        &mut self,
        buf: Vec<u8>,
        read: io::Result<usize>,
        out: &mut VecDeque<Frame>,
    ) -> io::Result<bool> {
        let (bytes, ended) = match read {
            Ok(0) => {
                out.extend(self.finish());
                (0, true)
            }
            Ok(n) => {
                self.push(&buf[..n], out);
                (n, false)
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => (0, false),
            Err(err) => {
                self.scratch.put_back(buf, 0);
                return Err(err);
            }
        };
        self.scratch.put_back(buf, bytes);
        Ok(ended)
    }
}

/// Frames from a blocking reader (a pipe read by a thread, a file): the
/// bounded replacement of `BufRead::lines`. At end-of-file the last line
/// is handed out even without its newline, as `lines` does.
#[derive(Debug)]
pub struct Lines<R> {
    reader: R,
    framer: Framer,
    ready: VecDeque<Frame>,
    ended: bool,
}

impl<R: Read> Lines<R> {
    /// Lines of at most `max_line` bytes from `reader`.
    pub fn new(reader: R, max_line: usize) -> Lines<R> {
        Lines {
            reader,
            framer: Framer::new(max_line),
            ready: VecDeque::new(),
            ended: false,
        }
    }

    /// The next frame; None at end-of-file.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Ok(Some(frame));
            }
            if self.ended {
                return Ok(None);
            }
            let mut buf = self.framer.scratch.take();
            let read = self.reader.read(&mut buf);
            self.ended = self.framer.absorb(buf, read, &mut self.ready)?;
        }
    }

    /// The framer (what it consumed, what it holds).
    pub fn framer(&self) -> &Framer {
        &self.framer
    }
}

impl<R: Read> Iterator for Lines<R> {
    type Item = io::Result<Frame>;

    fn next(&mut self) -> Option<io::Result<Frame>> {
        self.next_frame().transpose()
    }
}

/// Frames from a tokio reader (the daemon's run sockets, the net
/// process's link); with the `tokio` feature, which the faces enable. [`AsyncLines::next_frame`] is cancel-safe: a frame is
/// only taken out when it is returned, and bytes only enter the framer
/// once their read completed, so it can sit in a `select!`.
#[cfg(any(test, feature = "tokio"))]
#[derive(Debug)]
pub struct AsyncLines<R> {
    reader: R,
    framer: Framer,
    ready: VecDeque<Frame>,
    ended: bool,
}

#[cfg(any(test, feature = "tokio"))]
impl<R: tokio::io::AsyncRead + Unpin> AsyncLines<R> {
    /// Lines of at most `max_line` bytes from `reader`.
    pub fn new(reader: R, max_line: usize) -> AsyncLines<R> {
        AsyncLines {
            reader,
            framer: Framer::new(max_line),
            ready: VecDeque::new(),
            ended: false,
        }
    }

    /// The next frame; None at end-of-file (the last line is handed out
    /// even without its newline).
    pub async fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Ok(Some(frame));
            }
            if self.ended {
                return Ok(None);
            }
            // Cancelled while waiting, the buffer is dropped and the next
            // read starts again from a page: nothing was read into it.
            let mut buf = self.framer.scratch.take();
            let read = self.reader.read(&mut buf).await;
            self.ended = self.framer.absorb(buf, read, &mut self.ready)?;
        }
    }

    /// The framer (what it consumed, what it holds).
    pub fn framer(&self) -> &Framer {
        &self.framer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(framer: &mut Framer, data: &[u8]) -> Vec<Frame> {
        let mut out = Vec::new();
        framer.push(data, &mut out);
        out
    }

    fn line(text: &[u8]) -> Frame {
        Frame::Line(text.to_vec())
    }

    #[test]
    fn lines_split_across_reads_are_reassembled() {
        let mut f = Framer::new(100);
        assert!(frames(&mut f, b"{\"a\":").is_empty());
        assert!(frames(&mut f, b"1").is_empty());
        assert_eq!(
            frames(&mut f, b"}\n{}\n\n"),
            vec![line(b"{\"a\":1}"), line(b"{}"), line(b"")]
        );
        assert_eq!(f.pending(), 0);
        assert_eq!(f.consumed(), 12);
    }

    #[test]
    fn every_split_of_a_stream_gives_the_same_frames() {
        let stream = b"{\"a\":1}\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n\n{\"b\":2}\r\nyyyyyyyyyyyyyyyyyyyyyyyyy\nlast";
        let mut whole = Framer::new(20);
        let mut expected = frames(&mut whole, stream);
        expected.extend(whole.finish());
        assert_eq!(
            expected,
            vec![
                line(b"{\"a\":1}"),
                Frame::TooLarge { bytes: 31 },
                line(b""),
                line(b"{\"b\":2}\r"),
                Frame::TooLarge { bytes: 25 },
                line(b"last"),
            ]
        );
        for first in 0..stream.len() {
            for second in first..stream.len() {
                let mut f = Framer::new(20);
                let mut got = Vec::new();
                f.push(&stream[..first], &mut got);
                f.push(&stream[first..second], &mut got);
                f.push(&stream[second..], &mut got);
                got.extend(f.finish());
                assert_eq!(got, expected, "split at {first} and {second}");
            }
        }
    }

    #[test]
    fn the_limit_is_inclusive() {
        let mut f = Framer::new(4);
        assert_eq!(
            frames(&mut f, b"abcd\nabcde\nabcd"),
            vec![line(b"abcd"), Frame::TooLarge { bytes: 5 }]
        );
        assert_eq!(f.pending(), 4);
        assert!(frames(&mut f, b"e").is_empty());
        assert_eq!(f.pending(), 0, "an over-long line is not held");
        assert_eq!(f.skipping(), Some(5));
        assert_eq!(
            frames(&mut f, b"\nok\n"),
            vec![Frame::TooLarge { bytes: 5 }, line(b"ok")]
        );
        assert_eq!(f.skipping(), None);
    }

    #[test]
    fn a_gigabyte_line_is_skipped_with_bounded_memory_then_a_good_line_comes() {
        let mut f = Framer::new(1 << 20);
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..1024 {
            assert!(frames(&mut f, &chunk).is_empty());
            assert!(f.pending() <= 1 << 20);
        }
        assert_eq!(
            frames(&mut f, b"\n{}\n"),
            vec![Frame::TooLarge { bytes: 1 << 30 }, line(b"{}")]
        );
        assert_eq!(f.pending(), 0);
    }

    #[test]
    fn no_newline_at_the_end_is_the_last_line_or_too_large() {
        let mut f = Framer::new(8);
        assert_eq!(frames(&mut f, b"a\ntail"), vec![line(b"a")]);
        assert_eq!(f.finish(), Some(line(b"tail")));
        assert_eq!(f.finish(), None, "finish empties the framer");
        frames(&mut f, b"far too long");
        assert_eq!(f.finish(), Some(Frame::TooLarge { bytes: 12 }));
        assert_eq!(frames(&mut f, b"x\n"), vec![line(b"x")], "usable again");
        assert_eq!(f.finish(), None, "a stream ending on a newline");
    }

    #[test]
    fn crlf_lines_keep_their_carriage_return_and_still_parse_as_json() {
        let mut f = Framer::new(100);
        let got = frames(&mut f, b"{\"a\":1}\r\n");
        assert_eq!(got, vec![line(b"{\"a\":1}\r")]);
        let Frame::Line(text) = &got[0] else {
            unreachable!()
        };
        let value: serde_json::Value = serde_json::from_slice(text).unwrap();
        assert_eq!(value["a"], 1);
    }

    #[test]
    fn the_blocking_reader_hands_out_frames_and_the_unterminated_last_line() {
        // A reader that returns one byte at a time: every split.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let Some((first, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                buf[0] = *first;
                self.0 = rest;
                Ok(1)
            }
        }
        let lines = Lines::new(Trickle(b"one\n0123456789\ntwo"), 5);
        let got: Vec<Frame> = lines.map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![line(b"one"), Frame::TooLarge { bytes: 10 }, line(b"two")]
        );
    }

    #[test]
    fn the_blocking_reader_holds_at_most_its_limit_of_an_endless_line() {
        let endless = io::repeat(b'x').take(64 << 20);
        let mut lines = Lines::new(endless.chain(&b"\nafter\n"[..]), 1 << 10);
        assert_eq!(
            lines.next_frame().unwrap(),
            Some(Frame::TooLarge { bytes: 64 << 20 })
        );
        assert_eq!(lines.next_frame().unwrap(), Some(line(b"after")));
        assert_eq!(lines.next_frame().unwrap(), None);
        assert_eq!(lines.framer().consumed(), (64 << 20) + 7);
    }

    #[test]
    fn the_async_reader_is_the_same_framer() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (mut writer, reader) = tokio::io::duplex(64);
            let feed = tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                writer.write_all(b"{\"a\":1}\n").await.unwrap();
                writer.write_all(&[b'x'; 1000]).await.unwrap();
                writer.write_all(b"\n{\"b\"").await.unwrap();
                writer.write_all(b":2}").await.unwrap();
            });
            let mut lines = AsyncLines::new(reader, 100);
            let mut got = Vec::new();
            while let Some(frame) = lines.next_frame().await.unwrap() {
                got.push(frame);
            }
            feed.await.unwrap();
            assert_eq!(
                got,
                vec![
                    line(b"{\"a\":1}"),
                    Frame::TooLarge { bytes: 1000 },
                    line(b"{\"b\":2}")
                ]
            );
        });
    }

    #[test]
    fn fill_reads_a_socket_without_waiting() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut f = Framer::new(16);
        let mut got = Vec::new();
        assert_eq!(f.fill(theirs.as_fd(), &mut got), Fill::WouldBlock);
        ours.write_all(b"{}\n{\"a\"").unwrap();
        assert_eq!(f.fill(theirs.as_fd(), &mut got), Fill::Data);
        assert_eq!(got, vec![line(b"{}")]);
        drop(ours);
        assert_eq!(f.fill(theirs.as_fd(), &mut got), Fill::Closed);
        assert_eq!(f.finish(), Some(line(b"{\"a\"")));
    }

    #[test]
    fn reads_start_at_a_page_and_grow_only_while_they_fill_the_buffer() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut f = Framer::new(1 << 20);
        let mut got = Vec::new();
        ours.write_all(b"{\"small\":1}\n").unwrap();
        assert_eq!(f.fill(theirs.as_fd(), &mut got), Fill::Data);
        assert_eq!(
            f.scratch.len(),
            crate::read_buffer::FIRST_READ_SIZE,
            "a small message"
        );
        // A line of 100 KiB waiting in the socket: each read fills the
        // buffer until it reaches its most, and the line comes out whole.
        ours.write_all(&vec![b'x'; 100 << 10]).unwrap();
        ours.write_all(b"\n").unwrap();
        got.clear();
        while got.is_empty() {
            assert_eq!(f.fill(theirs.as_fd(), &mut got), Fill::Data);
        }
        assert_eq!(got, vec![Frame::Line(vec![b'x'; 100 << 10])]);
        assert_eq!(
            f.scratch.len(),
            crate::read_buffer::READ_SIZE,
            "grown to its most, no further"
        );
    }
}
