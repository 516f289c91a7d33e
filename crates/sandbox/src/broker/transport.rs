//! The channel's bytes: requests framed out of the socket, answers queued
//! for it, and the bounds that keep both finite whatever the peer does.
//!
//! Memory is bounded by admitting work only while the queue of answers is
//! small: a read is only done when every frame of the previous one was
//! handled, and a frame is only handled while fewer than [`OUTBOX_LIMIT`]
//! bytes of answers wait. One answer is at most [`ANSWER_LIMIT`] bytes as
//! encoded (escapes counted), so the queue never exceeds the sum of the two.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;
use serde::Serialize;

use super::protocol::{self, code, Id, Limits};
use crate::jsonl::{Fill, Frame, Framer};

/// Most bytes of answers queued before no further request is handled.
pub const OUTBOX_LIMIT: usize = 4 << 20;
/// Largest encoded answer; a bigger one is replaced by a -32004 error.
pub const ANSWER_LIMIT: usize = 1 << 20;

/// The supervisor's end of one channel.
#[derive(Debug)]
pub struct Transport {
    /// Message limits of this channel.
    pub limits: Limits,
    framer: Framer,
    /// Frames read but not yet handled (at most one read's worth).
    pending: VecDeque<Frame>,
    outbox: Vec<u8>,
    /// Bytes of `outbox` already sent (compacted when large).
    sent: usize,
    closing: bool,
}

impl Transport {
    /// A channel with the default limits.
    pub fn new() -> Transport {
        let limits = Limits::default();
        Transport {
            limits,
            framer: Framer::new(limits.max_message),
            pending: VecDeque::new(),
            outbox: Vec::new(),
            sent: 0,
            closing: false,
        }
    }

    fn queued(&self) -> usize {
        self.outbox.len() - self.sent
    }

    /// Whether a frame may be handled now (answers do not pile up).
    pub fn has_room(&self) -> bool {
        self.queued() < OUTBOX_LIMIT
    }

    /// Whether the socket should be read: every frame read is handled and
    /// there is room for their answers.
    pub fn wants_input(&self) -> bool {
        self.pending.is_empty() && self.has_room()
    }

    /// Whether answers wait to be written.
    pub fn wants_output(&self) -> bool {
        self.queued() > 0
    }

    /// Read once, without waiting, and keep the frames for [`Transport::next_frame`].
    pub fn read(&mut self, sock: BorrowedFd<'_>) -> Fill {
        let mut frames = Vec::new();
        let filled = self.framer.fill(sock, &mut frames);
        self.pending.extend(frames);
        filled
    }

    /// The next frame to handle, while there is room for its answer.
    pub fn next_frame(&mut self) -> Option<Frame> {
        if self.has_room() {
            self.pending.pop_front()
        } else {
            None
        }
    }

    /// The next frame whatever is queued (the peer is gone: nothing more
    /// will be read, and no answer is queued for what is left).
    pub fn next_frame_any(&mut self) -> Option<Frame> {
        self.pending.pop_front()
    }

    /// Whether frames wait to be handled.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Queue one encoded line (newline included).
    pub fn push(&mut self, line: &[u8]) {
        self.outbox.extend_from_slice(line);
    }

    /// Queue the answer to request `id`, counting its encoded size.
    pub fn answer(&mut self, id: &Id, result: &serde_json::Value) {
        let line = encode_bounded(|w| {
            serde_json::to_writer(
                w,
                &Response {
                    jsonrpc: "2.0",
                    id: id_value(id),
                    result,
                },
            )
        });
        match line {
            Some(mut line) => {
                line.push(b'\n');
                self.push(&line);
            }
            None => self.push(&protocol::error_response(
                id,
                code::TOO_LARGE,
                &format!(
                    "the answer is over the {ANSWER_LIMIT} byte limit once encoded; \
                     ask for less (fs.read: offset and length; net.http: max_bytes)"
                ),
                None,
            )),
        }
    }

    /// Write queued answers. False when the peer is gone.
    pub fn write(&mut self, sock: BorrowedFd<'_>) -> bool {
        let result = loop {
            if self.queued() == 0 {
                break true;
            }
            match nix::sys::socket::send(
                sock.as_raw_fd(),
                &self.outbox[self.sent..],
                nix::sys::socket::MsgFlags::MSG_DONTWAIT | nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(n) => self.sent += n,
                Err(Errno::EAGAIN) => break true,
                Err(Errno::EINTR) => {}
                Err(_) => break false,
            }
        };
        if self.sent == self.outbox.len() {
            self.outbox.clear();
            self.sent = 0;
            // A burst's buffer is given back rather than kept for the run.
            if self.outbox.capacity() > 2 * ANSWER_LIMIT {
                self.outbox.shrink_to(ANSWER_LIMIT);
            }
        } else if self.sent > OUTBOX_LIMIT / 2 {
            self.outbox.drain(..self.sent);
            self.sent = 0;
        }
        result
    }

    /// Shut the channel for writing once the outbox is empty.
    pub fn close_when_sent(&mut self) {
        self.closing = true;
    }

    /// Whether the channel should be shut now.
    pub fn ready_to_close(&self) -> bool {
        self.closing && self.queued() == 0
    }

    /// Queued bytes, raw (tests).
    #[cfg(test)]
    pub fn outbox(&self) -> &[u8] {
        &self.outbox[self.sent..]
    }
}

impl Default for Transport {
    fn default() -> Self {
        Transport::new()
    }
}

#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    id: serde_json::Value,
    result: &'a serde_json::Value,
}

fn id_value(id: &Id) -> serde_json::Value {
    match id {
        Id::Number(n) => serde_json::Value::Number(n.clone()),
        Id::String(s) => serde_json::Value::String(s.clone()),
        Id::Null => serde_json::Value::Null,
    }
}

/// A writer that refuses to grow past [`ANSWER_LIMIT`].
pub struct Capped(Vec<u8>);

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > ANSWER_LIMIT {
            return Err(std::io::Error::other("answer over the limit"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encode with `write`, giving up (None) as soon as the encoding passes
/// [`ANSWER_LIMIT`]: the escaped size is what is queued, and a file of
/// control characters grows sixfold in JSON.
pub fn encode_bounded(
    write: impl FnOnce(&mut Capped) -> Result<(), serde_json::Error>,
) -> Option<Vec<u8>> {
    let mut out = Capped(Vec::with_capacity(256));
    write(&mut out).ok().map(|()| out.0)
}
