//! Relaying a tunnel with `splice(2)`: the bytes go from one socket into a
//! pipe and from the pipe into the other socket without being copied into
//! the net process. A CONNECT tunnel (almost every HTTPS download) would
//! otherwise cost two extra copies of every byte, which on loopback took a
//! quarter of the bare throughput (`scripts/bench-net`).

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{splice, FcntlArg, OFlag, SpliceFFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// How much one `splice` moves at most, and the pipe's size: large enough
/// that a fast sender is not held to the kernel's default 64 KiB pipe.
const PIPE_SIZE: usize = 1 << 20;

/// A pipe for one direction, emptied before each refill.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // A smaller pipe only means more calls: the kernel caps the size
        // per user (fs.pipe-max-size, pipe-user-pages-soft).
        let _ = nix::fcntl::fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32));
        Ok(Pipe { read, write })
    }
}

/// Relay both ways between `a` and `b` until both directions ended: a
/// direction ends at its source's end of file (the other side's write half
/// is then shut down, as a half-closed TCP connection expects) or at an
/// error, which ends the whole tunnel.
pub async fn relay(a: &TcpStream, b: &TcpStream) -> io::Result<()> {
    let (a_to_b, b_to_a) = (Pipe::new()?, Pipe::new()?);
    let forward = one_way(a, b, &a_to_b);
    let backward = one_way(b, a, &b_to_a);
    tokio::pin!(forward, backward);
    let (mut forward_done, mut backward_done) = (false, false);
    while !(forward_done && backward_done) {
        tokio::select! {
            result = &mut forward, if !forward_done => {
                result?;
                forward_done = true;
            }
            result = &mut backward, if !backward_done => {
                result?;
                backward_done = true;
            }
        }
    }
    Ok(())
}

async fn one_way(from: &TcpStream, to: &TcpStream, pipe: &Pipe) -> io::Result<()> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        let filled = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(from.as_fd(), None, &pipe.write, None, PIPE_SIZE, flags)
                    .map_err(io::Error::from)
            }) {
                Ok(n) => break n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                Err(err) if err.raw_os_error() == Some(Errno::EINTR as i32) => continue,
                Err(err) => return Err(err),
            }
        };
        if filled == 0 {
            let _ = nix::sys::socket::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(to),
                nix::sys::socket::Shutdown::Write,
            );
            return Ok(());
        }
        let mut left = filled;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(&pipe.read, None, to.as_fd(), None, left, flags).map_err(io::Error::from)
            }) {
                Ok(n) => left -= n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                Err(err) if err.raw_os_error() == Some(Errno::EINTR as i32) => continue,
                Err(err) => return Err(err),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Bytes both ways arrive whole and in order, and a half-close in one
    /// direction reaches the other side while the reverse still flows.
    #[tokio::test]
    async fn a_tunnel_relays_both_ways_and_passes_a_half_close_on() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_addr = upstream_listener.local_addr().unwrap();
        let relay = tokio::spawn(async move {
            let (client, _) = listener.accept().await.unwrap();
            let upstream = tokio::net::TcpStream::connect(upstream_addr).await.unwrap();
            super::relay(&client, &upstream).await
        });
        let server = tokio::spawn(async move {
            let (mut conn, _) = upstream_listener.accept().await.unwrap();
            let mut got = Vec::new();
            conn.read_to_end(&mut got).await.unwrap();
            // The client closed its side; the answer still goes back.
            let answer: Vec<u8> = got.iter().rev().copied().collect();
            conn.write_all(&answer).await.unwrap();
            got.len()
        });
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let sent: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&sent).await.unwrap();
        client.shutdown().await.unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(server.await.unwrap(), sent.len());
        let expected: Vec<u8> = sent.iter().rev().copied().collect();
        assert!(back == expected, "the reverse direction arrived changed");
        relay.await.unwrap().unwrap();
    }
}
