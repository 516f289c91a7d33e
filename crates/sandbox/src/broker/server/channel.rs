//! The broker's turn on the channel: read what the peer sent, write the
//! queued answers, and handle the frames that waited for room; the
//! transport bounds what is queued.

use std::os::fd::BorrowedFd;

use super::Broker;
use crate::broker::invoke::Plain;
use crate::broker::protocol::{self, code, Id, Message};
use crate::jsonl::{Fill, Frame};

impl Broker {
    /// Close the channel for writing once everything queued is sent: the
    /// peer reads end-of-file (Node's 'disconnect'), its cue to exit.
    pub fn close_when_sent(&mut self) {
        self.transport.close_when_sent();
    }

    /// Whether the channel should be shut now (see [`Broker::close_when_sent`]).
    pub fn ready_to_close(&self) -> bool {
        self.transport.ready_to_close()
    }

    /// Whether the broker wants to read more: not while answers pile up,
    /// frames already read wait, or a job's answer is outstanding (answers
    /// keep the order of the requests).
    pub fn wants_input(&self) -> bool {
        self.waiting.is_none() && self.transport.wants_input()
    }

    /// Whether answers wait to be written.
    pub fn wants_output(&self) -> bool {
        self.transport.wants_output()
    }

    /// Read what the peer sent and answer it. False when the peer closed.
    pub fn on_readable(&mut self, sock: BorrowedFd<'_>) -> bool {
        self.handle_pending();
        if !self.wants_input() {
            self.flush_audit();
            return true;
        }
        let filled = self.transport.read(sock);
        self.handle_pending();
        self.flush_audit();
        filled != Fill::Closed
    }

    /// Read what the peer left in the channel (it has exited): answers to
    /// invocations and log lines. Requests are not performed any more;
    /// nobody is left to read their answers.
    pub fn drain(&mut self, sock: BorrowedFd<'_>) {
        loop {
            while let Some(frame) = self.transport.next_frame_any() {
                if let Frame::Line(line) = frame {
                    self.take_leftover(&line);
                }
            }
            if self.transport.read(sock) != Fill::Data {
                break;
            }
        }
        self.flush_audit();
    }

    /// Write queued answers, then handle the frames that waited for room.
    /// False when the peer is gone.
    pub fn on_writable(&mut self, sock: BorrowedFd<'_>) -> bool {
        loop {
            self.flush_audit();
            if !self.transport.write(sock) {
                return false;
            }
            // Handle what waited for room until room or frames run out. One
            // pass is not enough: when the peer takes every answer as fast
            // as it is written, the turn would end with frames pending,
            // room for their answers and nothing queued, and the run's loop
            // then polls the channel for neither reading nor writing: the
            // peer waits for answers forever.
            if self.waiting.is_some() || !self.transport.has_pending() || !self.transport.has_room()
            {
                return true;
            }
            self.handle_pending();
        }
    }

    pub(super) fn handle_pending(&mut self) {
        while self.waiting.is_none() {
            let Some(frame) = self.transport.next_frame() else {
                return;
            };
            match frame {
                Frame::Line(line) if line.iter().all(u8::is_ascii_whitespace) => {}
                Frame::Line(line) => self.handle(&line),
                Frame::TooLarge { bytes } => {
                    self.counts.errors += 1;
                    let message = format!(
                        "message of {bytes} bytes is over the {} byte limit",
                        self.transport.limits.max_message
                    );
                    self.transport.push(&protocol::error_response(
                        &Id::Null,
                        code::TOO_LARGE,
                        &message,
                        None,
                    ));
                }
            }
        }
    }

    /// After the peer exited: responses, plain answers and logs only.
    fn take_leftover(&mut self, line: &[u8]) {
        match protocol::parse(line, &self.transport.limits) {
            Ok(Message::Response {
                id: Id::String(id),
                outcome,
            }) => self.invocations.response(id, outcome),
            Ok(Message::Notification { method, .. }) if method == "log" => self.handle(line),
            Ok(_) => {}
            Err(_) => {
                if self.invocations.any_sent() {
                    self.take_plain(line);
                }
            }
        }
    }

    pub(super) fn take_plain(&mut self, line: &[u8]) -> bool {
        match self.invocations.plain(line) {
            Plain::NotPlain => false,
            Plain::Taken => true,
            Plain::Unexpected => {
                self.counts.errors += 1;
                if let Some(label) = &self.log_label {
                    eprintln!("{label}: ignored a message that answers no pending invocation");
                }
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use serde_json::Value;

    #[test]
    fn every_audit_line_is_in_the_file_before_its_answer_is_sent() {
        use std::io::Read;
        use std::os::fd::AsFd;
        let project = tempfile::tempdir().unwrap();
        let (mut broker, audit_path) = audited_broker(project.path());
        let (mut peer, ours) = one_turn_of_queries(&mut broker, 50);
        let lines = || {
            std::fs::read_to_string(&audit_path)
                .unwrap()
                .lines()
                .count()
        };
        assert_eq!(lines(), 50, "handled: audited, though nothing is sent yet");
        peer.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 1];
        assert!(peer.read(&mut buf).is_err(), "no answer before on_writable");
        assert!(broker.on_writable(ours.as_fd()));
        peer.set_nonblocking(false).unwrap();
        let mut answers = String::new();
        let mut reader = std::io::BufReader::new(&peer);
        for _ in 0..50 {
            std::io::BufRead::read_line(&mut reader, &mut answers).unwrap();
        }
        assert_eq!(answers.matches("\"result\"").count(), 50);
        assert_eq!(lines(), 50);
    }

    /// The peer takes answers as fast as they are written (here: a send
    /// buffer that holds them all). Every request is still answered: the
    /// channel never ends a turn with requests waiting and nothing that
    /// would give it another. This hung a run reading in a thread while
    /// its other thread sent (`attack_broker`, on a busy machine).
    #[test]
    fn requests_past_the_outbox_are_answered_when_the_peer_reads_as_fast_as_it_is_sent() {
        use std::io::BufRead;
        use std::os::fd::AsFd;
        const REQUESTS: usize = 20;
        let project = tempfile::tempdir().unwrap();
        // Base64 makes each answer about 683 KiB: six fill the outbox.
        std::fs::write(project.path().join("big.txt"), vec![1u8; 512 << 10]).unwrap();
        let mut broker = strict_broker(project.path(), None);
        let (peer, ours) = std::os::unix::net::UnixStream::pair().unwrap();
        if let Err(err) =
            nix::sys::socket::setsockopt(&ours, nix::sys::socket::sockopt::SndBufForce, &(64 << 20))
        {
            let why = format!("skipped: a 64 MiB send buffer needs CAP_NET_ADMIN ({err})");
            assert!(std::env::var_os("SANDBOX_TEST_REQUIRE").is_none(), "{why}");
            eprintln!("{why}");
            return;
        }
        let request = r#"{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"big.txt"}}"#;
        std::io::Write::write_all(
            &mut &peer,
            format!("{request}\n").repeat(REQUESTS).as_bytes(),
        )
        .unwrap();
        assert!(broker.on_readable(ours.as_fd()));
        // The run's loop: the channel gets a turn only when it asks for one.
        for _ in 0..=REQUESTS {
            if !broker.wants_output() {
                break;
            }
            assert!(broker.on_writable(ours.as_fd()));
        }
        assert!(
            broker.wants_input() || broker.wants_output(),
            "the channel asks for no turn while requests wait"
        );
        drop(broker);
        drop(ours);
        let answered = std::io::BufReader::new(&peer)
            .lines()
            .map(|line| serde_json::from_str::<Value>(&line.unwrap()).unwrap())
            .filter(|answer| answer["result"]["content"].is_string())
            .count();
        assert_eq!(answered, REQUESTS);
    }
}
