//! Buffered reading: a reader with the bytes read but not yet consumed,
//! shared by the SOCKS5 and HTTP readers.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

/// A reader with the bytes read but not yet consumed.
pub(super) struct Inbound<R> {
    pub(super) io: R,
    pub(super) buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Inbound<R> {
    pub(super) fn new(io: R) -> Self {
        Inbound {
            io,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    /// Reads more; 0 at end of stream.
    pub(super) async fn fill(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        self.io.read_buf(&mut self.buf).await
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.buf.drain(..n.min(self.buf.len()));
    }

    /// Reads until at least `n` bytes are buffered.
    pub(super) async fn need(&mut self, n: usize, deadline: Instant) -> io::Result<()> {
        while self.buf.len() < n {
            let read = tokio::time::timeout_at(deadline, self.fill())
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the client went silent"))??;
            if read == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    /// Takes one line (with its line ending) of at most `limit` bytes.
    pub(super) async fn line(&mut self, limit: usize) -> io::Result<Vec<u8>> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                if end >= limit {
                    break;
                }
                return Ok(self.buf.drain(..=end).collect());
            }
            if self.buf.len() >= limit {
                break;
            }
            if self.fill().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed in the middle of a chunked body",
                ));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a line of a chunked body is too long",
        ))
    }
}
