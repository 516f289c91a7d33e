//! The two channels between the supervisor (P0) and the sandbox's processes.
//!
//! * The sync socket (SOCK_SEQPACKET, so each message arrives whole): P0 tells
//!   init (P1) that the id maps are written, passing any idmapped mount trees
//!   as file descriptors; P1 tells P0 how the payload ended. End-of-file on it
//!   tells P1 that the supervisor died.
//! * The report pipe: P1 and the payload (P2) write fixed-size records about
//!   setup (a failed step with its errno, the Landlock status, and the
//!   payload's own view of its confinement read just before exec). P2's copy
//!   is close-on-exec, so end-of-file without an error record means exec
//!   succeeded.
//!
//! Records are written with one `write(2)` of at most PIPE_BUF bytes, which the
//! kernel makes atomic, and are built without allocation in the child.

use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, MsgFlags};

use super::Step;

/// Upper bound on the detail text of a record (a path or program name).
pub const DETAIL_MAX: usize = 1024;
const RECORD_HEADER: usize = 1 + 1 + 4 + 2;
/// Size of an encoded record.
pub const RECORD_SIZE: usize = RECORD_HEADER + DETAIL_MAX;

const TAG_GO: u8 = 1;
const TAG_EXITED: u8 = 2;
const TAG_CGROUP_JOINED: u8 = 3;
/// Most mount trees one Go message may carry.
pub const MAX_PASSED_FDS: usize = 32;

/// A protocol violation or I/O failure on a channel.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The peer closed its end.
    #[error("the other side closed the channel")]
    Closed,
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The errno.
        source: Errno,
    },
    /// A message arrived that the protocol does not allow here.
    #[error("unexpected message on the sync channel: {0}")]
    Unexpected(String),
}

/// How the payload ended, as init saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadExit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl PayloadExit {
    /// The shell convention: the code, or 128 + the signal number.
    pub fn as_status(self) -> i32 {
        match self {
            PayloadExit::Code(code) => code,
            PayloadExit::Signal(signal) => 128 + signal,
        }
    }

    fn encode(self) -> [u8; 6] {
        let (kind, value) = match self {
            PayloadExit::Code(code) => (0u8, code),
            PayloadExit::Signal(signal) => (1u8, signal),
        };
        let v = value.to_le_bytes();
        [TAG_EXITED, kind, v[0], v[1], v[2], v[3]]
    }

    fn decode(bytes: &[u8]) -> Result<Self, ChannelError> {
        match bytes {
            [TAG_EXITED, kind, a, b, c, d] => {
                let value = i32::from_le_bytes([*a, *b, *c, *d]);
                match kind {
                    0 => Ok(PayloadExit::Code(value)),
                    1 => Ok(PayloadExit::Signal(value)),
                    other => Err(ChannelError::Unexpected(format!("exit kind {other}"))),
                }
            }
            other => Err(ChannelError::Unexpected(format!(
                "{} bytes where an exit record belongs",
                other.len()
            ))),
        }
    }
}

/// P1: hand one descriptor to the peer of `sock` (the proxy's listening
/// socket, to the net process).
pub fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> nix::Result<()> {
    let raw = [fd.as_raw_fd()];
    let payload = [TAG_GO];
    let iov = [IoSlice::new(&payload)];
    let cmsgs = [ControlMessage::ScmRights(&raw)];
    sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(())
}

/// P0: the one descriptor the peer of `sock` sent with [`send_fd`] (a
/// learning run's seccomp listener); None when the peer closed without.
pub fn recv_fd(sock: BorrowedFd<'_>) -> Result<Option<OwnedFd>, ChannelError> {
    let mut payload = [0u8; 8];
    let mut out = [None];
    recv_with_fds(
        sock,
        MsgFlags::MSG_DONTWAIT,
        "recvmsg(listener)",
        &mut payload,
        &mut out,
    )?;
    let [received] = out;
    Ok(received)
}

/// One message on `sock` into `payload`, and the descriptors it carries
/// into `out` (those beyond it are closed): the message's length and how
/// many descriptors `out` took.
fn recv_with_fds(
    sock: BorrowedFd<'_>,
    flags: MsgFlags,
    op: &'static str,
    payload: &mut [u8],
    out: &mut [Option<OwnedFd>],
) -> Result<(usize, usize), ChannelError> {
    let mut cmsg_space = nix::cmsg_space!([RawFd; MAX_PASSED_FDS]);
    let mut iov = [std::io::IoSliceMut::new(payload)];
    let msg = loop {
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_space),
            flags | MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(Errno::EINTR) => continue,
            other => break other.map_err(|source| ChannelError::Io { op, source })?,
        }
    };
    let len = msg.bytes;
    let mut count = 0;
    crate::sys::fd::for_each_received_fd(msg, |owned| {
        // Beyond `out` the descriptor is dropped, so closed.
        if let Some(slot) = out.get_mut(count) {
            *slot = Some(owned);
            count += 1;
        }
    });
    Ok((len, count))
}

/// P0: tell init the id maps are in place, handing over the mount trees.
pub fn send_go(sock: BorrowedFd<'_>, trees: &[OwnedFd]) -> Result<(), ChannelError> {
    if trees.len() > MAX_PASSED_FDS {
        return Err(ChannelError::Unexpected(format!(
            "{} mount trees (at most {MAX_PASSED_FDS})",
            trees.len()
        )));
    }
    let raw: Vec<RawFd> = trees.iter().map(|fd| fd.as_raw_fd()).collect();
    let payload = [TAG_GO];
    let iov = [IoSlice::new(&payload)];
    let cmsgs = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsgs };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map_err(
        |source| ChannelError::Io {
            op: "sendmsg(go)",
            source,
        },
    )?;
    Ok(())
}

/// P1: wait until the supervisor has written the id maps. Returns the mount
/// trees it passed, in the order of the mount plan's idmapped entries.
/// The received descriptors are written into `out`, which is preallocated by
/// the caller so that this path does not allocate in the child.
pub fn wait_for_go(
    sock: BorrowedFd<'_>,
    out: &mut [Option<OwnedFd>; MAX_PASSED_FDS],
) -> Result<usize, ChannelError> {
    let mut payload = [0u8; 8];
    let (len, count) = recv_with_fds(sock, MsgFlags::empty(), "recvmsg(go)", &mut payload, out)?;
    if len == 0 {
        return Err(ChannelError::Closed);
    }
    if len != 1 || payload[0] != TAG_GO {
        return Err(ChannelError::Unexpected(format!(
            "tag {} ({} bytes) where go belongs",
            payload[0], len
        )));
    }
    Ok(count)
}

/// P0: tell init it is in the run's cgroup, so what it forks from now on
/// is counted and limited there.
pub fn send_cgroup_joined(sock: BorrowedFd<'_>) -> Result<(), ChannelError> {
    nix::sys::socket::send(
        sock.as_raw_fd(),
        &[TAG_CGROUP_JOINED],
        MsgFlags::MSG_NOSIGNAL,
    )
    .map_err(|source| ChannelError::Io {
        op: "send(cgroup joined)",
        source,
    })?;
    Ok(())
}

/// P1: whether the message waiting on the sync socket is the cgroup move's
/// (looked at, not taken).
pub fn cgroup_joined_pending(sock: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 8];
    let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
    matches!(
        nix::sys::socket::recv(sock.as_raw_fd(), &mut buf, flags),
        Ok(1) if buf[0] == TAG_CGROUP_JOINED
    )
}

/// P1: wait until the supervisor has moved init into the run's cgroup.
pub fn wait_for_cgroup_joined(sock: BorrowedFd<'_>) -> Result<(), ChannelError> {
    let mut buf = [0u8; 8];
    let len = loop {
        match nix::sys::socket::recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Err(Errno::EINTR) => continue,
            // ECONNRESET: the supervisor was killed, which a SEQPACKET socket
            // may report as a reset rather than end-of-file.
            Ok(0) | Err(Errno::ECONNRESET) => return Err(ChannelError::Closed),
            Ok(len) => break len,
            Err(source) => {
                return Err(ChannelError::Io {
                    op: "recv(cgroup joined)",
                    source,
                })
            }
        }
    };
    if len != 1 || buf[0] != TAG_CGROUP_JOINED {
        return Err(ChannelError::Unexpected(format!(
            "tag {} ({len} bytes) where cgroup joined belongs",
            buf[0]
        )));
    }
    Ok(())
}

/// P1: tell the supervisor how the payload ended, handing over the review
/// layer's tmpfs (see [`crate::review`]) when the run has one: the
/// descriptor in flight keeps the layer alive after the run's mount
/// namespace is gone.
pub fn send_exit(
    sock: BorrowedFd<'_>,
    exit: PayloadExit,
    layer: Option<BorrowedFd<'_>>,
) -> Result<(), ChannelError> {
    let encoded = exit.encode();
    let iov = [IoSlice::new(&encoded)];
    let raw = [layer.map_or(-1, |fd| fd.as_raw_fd())];
    let cmsgs = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if layer.is_some() { &cmsgs } else { &[] };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map_err(
        |source| ChannelError::Io {
            op: "sendmsg(exit)",
            source,
        },
    )?;
    Ok(())
}

/// How the payload ended, as init said before exiting, with the review
/// layer it handed over.
#[derive(Debug, Default)]
pub struct ExitMessage {
    /// How the payload ended (None: init said nothing).
    pub exit: Option<PayloadExit>,
    /// The review layer's tmpfs root.
    pub layer: Option<OwnedFd>,
}

/// P0: read how the payload ended, if init said so before exiting.
pub fn try_recv_exit(sock: BorrowedFd<'_>) -> Result<ExitMessage, ChannelError> {
    let mut buf = [0u8; 16];
    let mut cmsg_space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let received = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg_space),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
    );
    let msg = match received {
        // ECONNRESET: init was killed (SIGKILL) with nothing sent, which a
        // SEQPACKET socket reports as a reset rather than end-of-file.
        Err(Errno::EAGAIN | Errno::ECONNRESET) => return Ok(ExitMessage::default()),
        Err(source) => {
            return Err(ChannelError::Io {
                op: "recv(exit)",
                source,
            })
        }
        Ok(msg) => msg,
    };
    let len = msg.bytes;
    let mut layer = None;
    crate::sys::fd::for_each_received_fd(msg, |owned| {
        // A second descriptor is dropped, so closed.
        if layer.is_none() {
            layer = Some(owned);
        }
    });
    if len == 0 {
        return Ok(ExitMessage::default());
    }
    Ok(ExitMessage {
        exit: Some(PayloadExit::decode(&buf[..len])?),
        layer,
    })
}

/// A record on the report pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A setup step failed.
    Failed {
        /// The step.
        step: Step,
        /// The errno (0 when the failure is not a system call's).
        errno: i32,
        /// The path, program or reason involved.
        detail: String,
    },
    /// A best-effort layer was not applied.
    Skipped {
        /// The step.
        step: Step,
        /// The errno.
        errno: i32,
    },
    /// The Landlock ruleset was applied with this status.
    Landlock {
        /// The ABI the kernel offered.
        abi: u32,
        /// 0 not enforced, 1 partially, 2 fully.
        status: u8,
    },
    /// The payload's view of itself just before exec.
    Measured(Box<super::measure::View>),
    /// Init's first mounts and pivot_root in the new namespaces worked:
    /// they give the privileges the sandbox's root is built with.
    NamespacesUsable,
}

const KIND_FAILED: u8 = 1;
const KIND_LANDLOCK: u8 = 2;
const KIND_SKIPPED: u8 = 3;
const KIND_MEASURED: u8 = 4;
const KIND_NAMESPACES_USABLE: u8 = 5;

fn write_record(fd: BorrowedFd<'_>, kind: u8, step: u8, errno: i32, detail: &[u8]) {
    let mut buf = [0u8; RECORD_SIZE];
    let len = detail.len().min(DETAIL_MAX);
    buf[0] = kind;
    buf[1] = step;
    buf[2..6].copy_from_slice(&errno.to_le_bytes());
    buf[6..8].copy_from_slice(&(len as u16).to_le_bytes());
    buf[RECORD_HEADER..RECORD_HEADER + len].copy_from_slice(&detail[..len]);
    // A failed write cannot be reported anywhere else; the supervisor then
    // sees the exit status without a record and says so.
    let _ = nix::unistd::write(fd, &buf);
}

/// Child side: report a failed step. Does not allocate.
pub fn report_failure(fd: BorrowedFd<'_>, step: Step, errno: Errno, detail: &[u8]) {
    write_record(fd, KIND_FAILED, step as u8, errno as i32, detail);
}

/// Child side: report the Landlock status.
pub fn report_landlock(fd: BorrowedFd<'_>, abi: u32, status: u8) {
    write_record(fd, KIND_LANDLOCK, status, abi as i32, &[]);
}

/// Child side: a best-effort layer could not be applied.
pub fn report_skipped(fd: BorrowedFd<'_>, step: Step, errno: Errno) {
    write_record(fd, KIND_SKIPPED, step as u8, errno as i32, &[]);
}

/// Child side: the payload's view of itself, read just before exec.
pub fn report_view(fd: BorrowedFd<'_>, view: &super::measure::View) {
    write_record(fd, KIND_MEASURED, 0, 0, &view.encode());
}

/// Init: its first mounts and pivot_root worked. Does not allocate.
pub fn report_namespaces_usable(fd: BorrowedFd<'_>) {
    write_record(fd, KIND_NAMESPACES_USABLE, 0, 0, &[]);
}

/// P0: read every record until end-of-file (all writers closed or exec'd).
pub fn read_records(fd: &OwnedFd) -> Result<Vec<Record>, ChannelError> {
    let mut records = Vec::new();
    let mut buf = [0u8; RECORD_SIZE];
    loop {
        let n = match nix::unistd::read(fd.as_fd(), &mut buf) {
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(source) => {
                return Err(ChannelError::Io {
                    op: "read(report)",
                    source,
                })
            }
        };
        if n == 0 {
            return Ok(records);
        }
        records.push(decode_record(&buf[..n])?);
    }
}

/// Decode one record read from the report pipe.
pub fn decode_record(bytes: &[u8]) -> Result<Record, ChannelError> {
    if bytes.len() != RECORD_SIZE {
        return Err(ChannelError::Unexpected(format!(
            "report record of {} bytes",
            bytes.len()
        )));
    }
    let errno = i32::from_le_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
    let len = usize::from(u16::from_le_bytes([bytes[6], bytes[7]])).min(DETAIL_MAX);
    let detail = String::from_utf8_lossy(&bytes[RECORD_HEADER..RECORD_HEADER + len]).into_owned();
    match bytes[0] {
        KIND_FAILED => {
            let step = Step::from_u8(bytes[1])
                .ok_or_else(|| ChannelError::Unexpected(format!("step {}", bytes[1])))?;
            Ok(Record::Failed {
                step,
                errno,
                detail,
            })
        }
        KIND_SKIPPED => {
            let step = Step::from_u8(bytes[1])
                .ok_or_else(|| ChannelError::Unexpected(format!("step {}", bytes[1])))?;
            Ok(Record::Skipped { step, errno })
        }
        KIND_MEASURED => super::measure::View::decode(&bytes[RECORD_HEADER..RECORD_HEADER + len])
            .map(|view| Record::Measured(Box::new(view)))
            .ok_or_else(|| ChannelError::Unexpected(format!("measured view of {len} bytes"))),
        KIND_NAMESPACES_USABLE => Ok(Record::NamespacesUsable),
        KIND_LANDLOCK => Ok(Record::Landlock {
            abi: errno as u32,
            status: bytes[1],
        }),
        other => Err(ChannelError::Unexpected(format!("record kind {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

    fn seqpacket() -> (OwnedFd, OwnedFd) {
        socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap()
    }

    #[test]
    fn go_carries_descriptors_in_order() {
        let (a, b) = seqpacket();
        let trees = vec![
            std::fs::File::open("/").unwrap().into(),
            std::fs::File::open("/tmp").unwrap().into(),
        ];
        send_go(a.as_fd(), &trees).unwrap();
        let mut out: [Option<OwnedFd>; MAX_PASSED_FDS] = std::array::from_fn(|_| None);
        assert_eq!(wait_for_go(b.as_fd(), &mut out).unwrap(), 2);
        assert!(out[0].is_some() && out[1].is_some() && out[2].is_none());
    }

    #[test]
    fn wait_for_go_sees_a_dead_supervisor_as_closed() {
        let (a, b) = seqpacket();
        drop(a);
        let mut out: [Option<OwnedFd>; MAX_PASSED_FDS] = std::array::from_fn(|_| None);
        assert!(matches!(
            wait_for_go(b.as_fd(), &mut out),
            Err(ChannelError::Closed)
        ));
    }

    #[test]
    fn wait_for_go_rejects_an_out_of_order_exit_message() {
        let (a, b) = seqpacket();
        send_exit(a.as_fd(), PayloadExit::Code(0), None).unwrap();
        let mut out: [Option<OwnedFd>; MAX_PASSED_FDS] = std::array::from_fn(|_| None);
        assert!(matches!(
            wait_for_go(b.as_fd(), &mut out),
            Err(ChannelError::Unexpected(_))
        ));
    }

    #[test]
    fn exit_round_trips_and_rejects_garbage() {
        let (a, b) = seqpacket();
        send_exit(a.as_fd(), PayloadExit::Signal(9), None).unwrap();
        let message = try_recv_exit(b.as_fd()).unwrap();
        assert_eq!(message.exit, Some(PayloadExit::Signal(9)));
        assert!(message.layer.is_none());
        assert_eq!(try_recv_exit(b.as_fd()).unwrap().exit, None);
        nix::sys::socket::send(a.as_raw_fd(), &[TAG_GO], MsgFlags::empty()).unwrap();
        assert!(try_recv_exit(b.as_fd()).is_err());
        assert_eq!(PayloadExit::Signal(9).as_status(), 137);
    }

    #[test]
    fn the_exit_carries_the_review_layer() {
        let (a, b) = seqpacket();
        let dir = tempfile::tempdir().unwrap();
        let layer = nix::fcntl::open(
            dir.path(),
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        send_exit(a.as_fd(), PayloadExit::Code(3), Some(layer.as_fd())).unwrap();
        drop(layer);
        let message = try_recv_exit(b.as_fd()).unwrap();
        assert_eq!(message.exit, Some(PayloadExit::Code(3)));
        let received = message.layer.expect("the layer travels with the exit");
        let same = nix::sys::stat::fstat(&received).unwrap();
        let original = nix::sys::stat::stat(dir.path()).unwrap();
        assert_eq!(
            (same.st_dev, same.st_ino),
            (original.st_dev, original.st_ino)
        );
    }

    #[test]
    fn records_round_trip_and_truncate_long_details() {
        let (r, w) = nix::unistd::pipe().unwrap();
        report_landlock(w.as_fd(), 7, 2);
        report_failure(w.as_fd(), Step::Exec, Errno::ENOENT, &[b'x'; 5000]);
        let view = super::super::measure::View {
            no_new_privs: Some(1),
            seccomp_filters: Some(2),
            ..Default::default()
        };
        report_view(w.as_fd(), &view);
        report_namespaces_usable(w.as_fd());
        drop(w);
        let records = read_records(&r).unwrap();
        assert_eq!(records[0], Record::Landlock { abi: 7, status: 2 });
        assert_eq!(records[2], Record::Measured(Box::new(view)));
        assert_eq!(records[3], Record::NamespacesUsable);
        match &records[1] {
            Record::Failed {
                step,
                errno,
                detail,
            } => {
                assert_eq!(*step, Step::Exec);
                assert_eq!(*errno, libc::ENOENT);
                assert_eq!(detail.len(), DETAIL_MAX);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
