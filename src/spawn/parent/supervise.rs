//! Supervising a started run until every process of it is gone: the
//! loop, its handlers, and the driver that talks to the program.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use crate::spawn::channel::{self, Record};
use crate::spawn::SpawnError;

/// How long a timed-out run has between SIGTERM and SIGKILL, to flush
/// output and remove temporary files.
pub const TIMEOUT_GRACE: Duration = Duration::from_secs(2);

/// What a [`Driver`] sees on one turn of the supervision loop.
#[derive(Debug)]
pub struct Turn<'a> {
    /// The run's broker: send requests with it, take their answers.
    pub broker: &'a mut crate::broker::server::Broker,
    /// The command was executed (on the turn this first becomes true and after).
    pub executing: bool,
    /// The driver's input descriptor is readable.
    pub input_ready: bool,
    /// The sandboxed program closed its end of the channel.
    pub channel_closed: bool,
    /// Every process of the run is gone (the last turn).
    pub exited: bool,
}

/// What the supervisor should do after a driver's turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// Go on.
    Continue,
    /// Kill every process of the run.
    Kill,
    /// SIGTERM to the command now (through init, as a forwarded signal),
    /// every process of the run killed after the grace (a cancel).
    Terminate(Duration),
}

/// Talks to the sandboxed program over the broker channel while the run
/// goes on: a skill host sends `skill.invoke` and relays the answers.
/// It runs inside the supervisor's loop, so it must never block.
pub trait Driver {
    /// A descriptor to wait on besides the run's own (a control socket).
    fn input(&self) -> Option<BorrowedFd<'_>>;
    /// When the driver needs a turn even if nothing happens (a timeout).
    fn deadline(&self) -> Option<Instant>;
    /// One turn, after the run's events were handled.
    fn turn(&mut self, turn: Turn<'_>) -> Steer;
}

pub(super) fn read_one_record(fd: &OwnedFd, records: &mut Vec<Record>) -> Result<bool, SpawnError> {
    let mut buf = [0u8; channel::RECORD_SIZE];
    match nix::unistd::read(fd.as_fd(), &mut buf) {
        Ok(0) => Ok(false),
        Ok(n) => {
            records.push(channel::decode_record(&buf[..n])?);
            Ok(true)
        }
        Err(Errno::EINTR | Errno::EAGAIN) => Ok(true),
        Err(source) => Err(SpawnError::Sys {
            op: "read(report)".into(),
            source,
        }),
    }
}
