//! Framing on the launcher socket: one JSON object per `SOCK_SEQPACKET`
//! message, descriptors beside it as `SCM_RIGHTS`.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, MsgFlags};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::protocol::MAX_MESSAGE;

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Why a message could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The peer closed the socket.
    #[error("the other end closed the socket")]
    Closed,
    /// A system call failed.
    #[error("{op}: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// Its errno.
        #[source]
        source: Errno,
    },
    /// The message is not what the protocol says.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The message is larger than [`MAX_MESSAGE`].
    #[error("message of {0} bytes (at most {MAX_MESSAGE})")]
    TooLarge(usize),
}

/// Send `message` with `fds` (at most [`MAX_FDS`]).
pub fn send<T: Serialize>(
    sock: BorrowedFd<'_>,
    message: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), WireError> {
    let bytes = serde_json::to_vec(message).map_err(|err| WireError::Malformed(err.to_string()))?;
    if bytes.len() > MAX_MESSAGE {
        return Err(WireError::TooLarge(bytes.len()));
    }
    if fds.len() > MAX_FDS {
        return Err(WireError::Malformed(format!(
            "{} descriptors (at most {MAX_FDS})",
            fds.len()
        )));
    }
    let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let iov = [IoSlice::new(&bytes)];
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(Errno::EINTR) => continue,
            Err(Errno::EPIPE | Errno::ECONNRESET) => return Err(WireError::Closed),
            Err(source) => {
                return Err(WireError::Io {
                    op: "sendmsg",
                    source,
                })
            }
            Ok(_) => return Ok(()),
        }
    }
}

/// Receive one message and the descriptors beside it (close-on-exec).
/// Blocks unless the socket is non-blocking (then `Io { source: EAGAIN }`).
pub fn receive<T: DeserializeOwned>(sock: BorrowedFd<'_>) -> Result<(T, Vec<OwnedFd>), WireError> {
    let mut reset = false;
    // The message's own size first: a buffer of MAX_MESSAGE zeroed per
    // message was the launcher's largest cost per run (256 pages written,
    // each a copy-on-write fault after its last fork), for requests of a
    // few KiB. The peek takes no descriptors (no control buffer).
    let size = loop {
        match nix::sys::socket::recv(
            sock.as_raw_fd(),
            &mut [],
            MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC,
        ) {
            Err(Errno::EINTR) => continue,
            // See below: reported once ahead of what is still queued.
            Err(Errno::ECONNRESET) if !reset => reset = true,
            Err(Errno::ECONNRESET) => return Err(WireError::Closed),
            Err(source) => {
                return Err(WireError::Io {
                    op: "recv(MSG_PEEK)",
                    source,
                })
            }
            Ok(size) => break size,
        }
    };
    // One byte more than the message: a larger one (sent between the peek
    // and the read by another writer) is still seen as truncated.
    let mut buffer = vec![0u8; size.min(MAX_MESSAGE) + 1];
    let mut cmsg_space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(&mut buffer)];
    let (len, truncated, fds) = loop {
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(Errno::EINTR) => continue,
            // A peer that closes with our messages unread in its queue
            // leaves ECONNRESET here, reported before what it sent us and
            // we have not read yet (a launcher handing a warm supervisor a
            // run, then closing with the supervisor's discard unread). The
            // error is cleared by reporting it: read once more for them.
            Err(Errno::ECONNRESET) if !reset => reset = true,
            Err(Errno::ECONNRESET) => return Err(WireError::Closed),
            Err(source) => {
                return Err(WireError::Io {
                    op: "recvmsg",
                    source,
                })
            }
            Ok(msg) => {
                let truncated = msg
                    .flags
                    .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
                let len = msg.bytes;
                let mut fds = Vec::new();
                crate::sys::fd::for_each_received_fd(msg, |fd| fds.push(fd));
                break (len, truncated, fds);
            }
        }
    };
    if len == 0 && fds.is_empty() {
        return Err(WireError::Closed);
    }
    if truncated || len > MAX_MESSAGE {
        return Err(WireError::TooLarge(len));
    }
    let message = serde_json::from_slice(&buffer[..len])
        .map_err(|err| WireError::Malformed(err.to_string()))?;
    Ok((message, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsFd;

    /// The launcher hands a warm supervisor a run and closes its end with
    /// the supervisor's own message unread: the run must still be read.
    #[test]
    fn a_message_sent_before_the_peer_closed_with_ours_unread_is_received() {
        let (launcher, warm) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        send(warm.as_fd(), &"discarded", &[]).unwrap();
        send(launcher.as_fd(), &"commit", &[]).unwrap();
        drop(launcher);
        let (message, fds): (String, _) = receive(warm.as_fd()).unwrap();
        assert_eq!(message, "commit");
        assert!(fds.is_empty());
        assert!(matches!(
            receive::<String>(warm.as_fd()),
            Err(WireError::Closed)
        ));
    }

    /// The buffer is the message's size: messages of any size (up to
    /// what the socket's send buffer takes) arrive whole, each with its
    /// descriptors, one after the other.
    #[test]
    fn messages_arrive_whole_at_their_own_size() {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        for size in [0usize, 1, 4095, 4096, 150_000, 7] {
            let text = "x".repeat(size);
            send(ours.as_fd(), &text, &[null.as_fd()]).unwrap();
            let (got, fds): (String, _) = receive(theirs.as_fd()).unwrap();
            assert_eq!(got, text);
            assert_eq!(fds.len(), 1, "the descriptor comes with its message");
        }
        send(ours.as_fd(), &"no descriptors", &[]).unwrap();
        let (got, fds): (String, _) = receive(theirs.as_fd()).unwrap();
        assert_eq!((got.as_str(), fds.len()), ("no descriptors", 0));
        drop(ours);
        assert!(matches!(
            receive::<String>(theirs.as_fd()),
            Err(WireError::Closed)
        ));
    }
}
