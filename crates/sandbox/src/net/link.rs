//! The link between a run's broker (in the supervisor) and its net
//! process: one JSON object per line each way on a socket pair.
//!
//! The net process asks the broker about names the allowlist does not
//! list, and tells it how every proxied connection attempt ended (the
//! broker audits and counts them with the run's other decisions). The
//! broker hands it the `net.http` requests it allowed and gets their
//! responses back. Both ends are ours, but the net process parses what the
//! sandbox sends, so the supervisor's end still bounds what it reads and
//! never blocks on it.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use super::fetch::{FetchRequest, FetchResponse};
use crate::jsonl::{Fill, Frame, Framer};

/// The longest line the supervisor takes from the net process: a
/// response at `net.http`'s largest cap (640 KiB), base64-encoded, with
/// room for its headers.
pub const MAX_LINE: usize = 4 << 20;

/// From the net process to the broker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FromNet {
    /// A proxied connection to a name the allowlist does not list: the
    /// broker decides (rules, grants, a person).
    Ask {
        /// Echoed in the answer.
        id: u64,
        /// `host:port`.
        target: String,
        /// What the client sent (`CONNECT host:port`).
        requested: String,
    },
    /// How one proxied connection attempt ended.
    Connection {
        /// `host:port`.
        target: String,
        /// The host alone (the report counts by host).
        host: String,
        /// What the client sent.
        requested: String,
        /// Whether it was let through.
        allowed: bool,
        /// What decided.
        rule: String,
        /// What the client was told, for a refusal of where it went.
        #[serde(default)]
        refusal: Option<String>,
    },
    /// The process read its start, confined itself and serves: its first
    /// line, which the supervisor waits for before the run goes on.
    Ready,
    /// The run ended (the broker shut its side): everything the process
    /// had to say was said before this.
    Closing,
    /// A `net.http` request ended.
    Fetched {
        /// The broker's id for it.
        id: u64,
        /// Its response or why there is none.
        outcome: FetchOutcome,
    },
}

/// How a `net.http` request the broker allowed ended in the net process.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FetchOutcome {
    /// The server answered.
    Response {
        /// What it answered.
        response: FetchResponse,
    },
    /// The name resolved only to addresses the checks refuse.
    Refused {
        /// What refused it.
        rule: String,
        /// Why, and the fix.
        message: String,
    },
    /// Resolution, connection, TLS or HTTP failed.
    Failed {
        /// What failed.
        message: String,
        /// Whether the request's time ran out.
        #[serde(default)]
        timed_out: bool,
    },
}

/// What the net process serves: the first line the supervisor sends it,
/// before any [`ToNet`]. A field this build does not know is refused, not
/// ignored: the program executed is whatever sits beside the binary (an
/// older build after an upgrade), and a restriction it skipped would make
/// the run silently weaker than asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetStart {
    /// The supervisor's pid: the net process ends at once if its parent is
    /// another (the supervisor died before the parent-death signal was
    /// armed).
    pub supervisor: i32,
    /// The allowlist, entries as a profile writes them.
    pub allow: Vec<String>,
    /// Names fixed to an address (`[network] resolve`).
    pub pins: std::collections::BTreeMap<String, std::net::IpAddr>,
    /// The run's system call policy, which the net process applies to
    /// itself with exec refused too.
    pub syscalls: Option<crate::seccomp::policy::SyscallPolicy>,
    /// Whether init hands over the proxy's listening socket on
    /// [`LISTENER_SOURCE_FD`] (allowlist mode); without it the process
    /// serves `net.http` alone.
    pub proxy: bool,
}

/// The descriptor the net process finds its link on.
pub const LINK_FD: i32 = 3;
/// The descriptor on which init's listening socket arrives, when
/// [`NetStart::proxy`].
pub const LISTENER_SOURCE_FD: i32 = 4;

/// From the broker to the net process.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToNet {
    /// The decision on an [`FromNet::Ask`].
    Answer {
        /// The ask's id.
        id: u64,
        /// Let it through.
        allow: bool,
        /// What decided.
        rule: String,
    },
    /// Perform a request the broker allowed.
    Fetch {
        /// Echoed in [`FromNet::Fetched`].
        id: u64,
        /// The request, secrets already in place.
        request: FetchRequest,
    },
}

/// The supervisor's end: non-blocking, buffered both ways.
#[derive(Debug)]
pub struct SupervisorEnd {
    sock: OwnedFd,
    read: Framer,
    write: Vec<u8>,
    closed: bool,
}

impl SupervisorEnd {
    /// Takes over `sock` (read and written without waiting, whatever its
    /// flags).
    pub fn new(sock: OwnedFd) -> SupervisorEnd {
        SupervisorEnd {
            sock,
            read: Framer::new(MAX_LINE),
            write: Vec::new(),
            closed: false,
        }
    }

    /// The socket, to poll.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Whether lines wait to be written.
    pub fn wants_output(&self) -> bool {
        !self.write.is_empty() && !self.closed
    }

    /// Whether the net process is gone (end of file, an error, or a line
    /// over [`MAX_LINE`]).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Say that nothing more will be sent (the net process then winds
    /// down and ends with [`FromNet::Closing`]).
    pub fn shut_down(&mut self) {
        self.flush();
        let _ =
            nix::sys::socket::shutdown(self.sock.as_raw_fd(), nix::sys::socket::Shutdown::Write);
    }

    /// Queue a message and write what the socket takes now.
    pub fn send(&mut self, message: &ToNet) {
        self.queue(message);
    }

    /// Queue the net process's start, its first line.
    pub(crate) fn send_start(&mut self, start: &NetStart) {
        self.queue(start);
    }

    fn queue(&mut self, message: &impl Serialize) {
        if self.closed {
            return;
        }
        match serde_json::to_vec(message) {
            Ok(mut line) => {
                line.push(b'\n');
                self.write.extend_from_slice(&line);
            }
            Err(_) => return,
        }
        self.flush();
    }

    /// Write what the socket takes without waiting.
    pub fn flush(&mut self) {
        while !self.write.is_empty() && !self.closed {
            match nix::sys::socket::send(
                self.sock.as_raw_fd(),
                &self.write,
                nix::sys::socket::MsgFlags::MSG_NOSIGNAL | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(n) => {
                    self.write.drain(..n);
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => break,
                Err(_) => self.closed = true,
            }
        }
    }

    /// Every complete message that arrived, without waiting. A line that
    /// does not parse ends the link: the net process is ours, so it is
    /// broken, and nothing it says after can be trusted to line up.
    pub fn receive(&mut self) -> Vec<FromNet> {
        let mut frames = Vec::new();
        while !self.closed {
            match self.read.fill(self.sock.as_fd(), &mut frames) {
                Fill::Data => {}
                Fill::WouldBlock => break,
                Fill::Closed => self.closed = true,
            }
            // A line over the limit ends the link as soon as it is seen.
            if self.read.skipping().is_some() {
                self.closed = true;
            }
        }
        let mut messages = Vec::new();
        for frame in frames {
            let parsed = match frame {
                Frame::Line(line) => serde_json::from_slice(&line).ok(),
                Frame::TooLarge { .. } => None,
            };
            match parsed {
                Some(message) => messages.push(message),
                None => {
                    self.closed = true;
                    break;
                }
            }
        }
        messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_with_a_field_this_build_does_not_know_is_refused() {
        let start = NetStart {
            supervisor: 1,
            allow: vec!["example.com".into()],
            pins: Default::default(),
            syscalls: None,
            proxy: true,
        };
        let line = serde_json::to_value(&start).unwrap();
        assert_eq!(
            serde_json::from_value::<NetStart>(line.clone()).unwrap(),
            start
        );
        let mut newer = line;
        newer["deny_ports"] = serde_json::json!([22]);
        assert!(serde_json::from_value::<NetStart>(newer).is_err());
    }
}
