//! The daemon's listener: each accepted connection is counted against its
//! peer's uid, and a uid holding [`MAX_CONNECTIONS_PER_UID`] already has the
//! next one closed at once. Without it one local user could hold open
//! connections (idle, or with half-sent requests) until the daemon runs out
//! of descriptors and nobody else gets in.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};

use super::quota::{PerUid, Slot};
use super::resolve::Caller;

/// Connections one uid may hold open at once: above a busy CI runner's
/// (a follow stream per run it waits for), far below the descriptors the
/// daemon has (its soft limit is raised to the hard one at start).
pub const MAX_CONNECTIONS_PER_UID: usize = 256;

/// A [`UnixListener`] that counts connections per peer uid.
pub struct CappedListener {
    inner: UnixListener,
    held: PerUid,
}

impl CappedListener {
    /// Wrap `inner`.
    pub fn new(inner: UnixListener) -> CappedListener {
        CappedListener {
            inner,
            held: PerUid::default(),
        }
    }
}

/// An accepted connection, with the caller the kernel named for it; its
/// place in the count is given back when it is dropped.
pub struct CountedStream {
    stream: UnixStream,
    caller: Option<Caller>,
    _slot: Option<Slot>,
}

impl CountedStream {
    /// Who is connected (`SO_PEERCRED` at accept time).
    pub fn caller(&self) -> Option<Caller> {
        self.caller
    }
}

impl axum::serve::Listener for CappedListener {
    type Io = CountedStream;
    type Addr = tokio::net::unix::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(accepted) => accepted,
                Err(_) => {
                    // EMFILE and the like: wait rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let caller = stream.peer_cred().ok().map(|cred| Caller {
                uid: cred.uid(),
                gid: cred.gid(),
                pid: cred.pid().unwrap_or(0),
            });
            let slot = match caller {
                Some(caller) => {
                    match self
                        .held
                        .take(caller.uid, MAX_CONNECTIONS_PER_UID, usize::MAX)
                    {
                        Ok(slot) => Some(slot),
                        // Closed unanswered: this uid has enough open already.
                        Err(_) => continue,
                    }
                }
                None => None,
            };
            return (
                CountedStream {
                    stream,
                    caller,
                    _slot: slot,
                },
                addr,
            );
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    // Forwarded so that hyper queues a response's chunks as they are
    // rather than copying each into a buffer of its own: the copy would
    // outlive the chunk and with it the caller's stream budget
    // (crates/sandbox-daemon/src/budget.rs).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
