//! Where the payload's standard streams come from and go.

/// Where a standard stream of the payload comes from.
#[derive(Debug, Default)]
pub enum Stdio {
    /// The supervisor's own stream.
    #[default]
    Inherit,
    /// /dev/null.
    Null,
    /// This descriptor.
    Fd(std::os::fd::OwnedFd),
    /// The supervisor's stderr (under the output cap): a skill's prints go
    /// to the log, apart from the result on stdout.
    SupervisorStderr,
    /// Records of a run log (stdout and stderr only): the supervisor relays
    /// the stream and hands each chunk to the log, under the output cap.
    Log(SharedLog),
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A run log that takes the payload's output as records (`sandbox daemon`
/// spools each run's output this way, numbered with its other events).
pub trait OutputLog {
    /// Bytes the payload wrote to `stream`, within the cap. An error stops
    /// relaying to the log; the pipe is still drained.
    fn output(&mut self, stream: OutputStream, bytes: &[u8]) -> std::io::Result<()>;
    /// The output cap was reached; later output is dropped.
    fn capped(&mut self, cap: u64);
}

/// A log shared by the relay and its owner, who writes its own events
/// into it between chunks. A mutex, not a `RefCell`, only so that a run's
/// handles stay `Send` (the supervisor itself is single-threaded).
#[derive(Clone)]
pub struct SharedLog(pub std::sync::Arc<std::sync::Mutex<dyn OutputLog + Send>>);

impl std::fmt::Debug for SharedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedLog")
    }
}
