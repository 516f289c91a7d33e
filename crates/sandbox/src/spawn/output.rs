//! The payload's standard streams, relayed by the supervisor.
//!
//! Output: stdout and stderr go through pipes that the supervisor relays to
//! its own, up to the cap; past it the rest is read and dropped (so the
//! payload never blocks on a full pipe), a one-line notice is printed once,
//! and the run's report says so. One buffer, grown to at most 64 KiB while
//! reads fill it, keeps the supervisor's memory bounded whatever the
//! payload writes.
//!
//! Terminals: a standard stream that is a terminal is always relayed,
//! capped or not, so the payload never holds a descriptor of it (see
//! [`super::terminal`]). Input from a terminal is read by the supervisor
//! only while it is in the terminal's foreground process group (a
//! background supervisor reading it would be stopped by SIGTTIN, or steal
//! the shell's input), through its own open file description, so
//! `O_NONBLOCK` is never set on the description the person's shell shares.
//! A prompt runs inside the supervisor's loop, so while it is open nothing
//! is relayed either way.

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::PollFlags;

use super::ids::IdMapping;
pub use super::stdio::{OutputLog, OutputStream, SharedLog, Stdio};
use super::terminal::{is_tty, SavedTerminal};
use super::SpawnError;

/// Most bytes of terminal input held while the payload's stdin pipe is full.
const INPUT_BUFFER: usize = 4096;
/// How often a supervisor in the background checks whether it is back in
/// the foreground (no event says so without job-control signals).
const FOREGROUND_RECHECK: Duration = Duration::from_millis(200);

/// Where relayed output goes.
enum Target {
    /// A descriptor (the supervisor's stream, or the caller's).
    Fd(OwnedFd),
    /// Records of a log.
    Log(SharedLog, OutputStream),
}

enum Direction {
    /// The payload writes the pipe; the supervisor copies to `target`.
    Out {
        target: Target,
        /// False once writing to `target` failed (a closed downstream pipe).
        relaying: bool,
    },
    /// The supervisor reads the terminal `source` and writes the pipe.
    In { source: OwnedFd, pending: Vec<u8> },
}

struct Stream {
    pipe: Option<OwnedFd>,
    direction: Direction,
}

/// Relays the payload's standard streams.
pub struct OutputRelay {
    streams: Vec<Stream>,
    cap: u64,
    written: u64,
    capped: bool,
    buffer: crate::read_buffer::ReadBuffer,
    terminal: SavedTerminal,
}

impl std::fmt::Debug for OutputRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputRelay")
            .field("cap", &self.cap)
            .field("written", &self.written)
            .finish()
    }
}

fn sys(op: &'static str) -> impl FnOnce(Errno) -> SpawnError {
    move |source| SpawnError::Sys {
        op: op.into(),
        source,
    }
}

fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, SpawnError> {
    fd.try_clone_to_owned()
        .map_err(|e| sys("dup(stdio)")(Errno::from_raw(e.raw_os_error().unwrap_or(0))))
}

/// A descriptor of the terminal behind `fd` with a file description of the
/// supervisor's own, non-blocking (reopened through /proc); else a copy of
/// `fd`, read only when poll says it is readable.
fn own_reader(fd: BorrowedFd<'_>) -> Result<OwnedFd, SpawnError> {
    let reopened = nix::fcntl::open(
        format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    );
    match reopened {
        Ok(own) if is_tty(own.as_fd()) => Ok(own),
        _ => dup(fd),
    }
}

/// Whether this process may read the terminal without being stopped.
fn in_foreground(tty: BorrowedFd<'_>) -> bool {
    match nix::unistd::tcgetpgrp(tty) {
        Ok(group) => group == nix::unistd::getpgrp(),
        // Not our controlling terminal: job control does not apply.
        Err(_) => true,
    }
}

/// A pipe's inode belongs to its creator and is 0600: host root's pipe is
/// owned, inside, by an unmapped id, so a root-mode payload could use the
/// descriptor but not reopen it through /proc (`echo x > /dev/stderr`,
/// `cat /dev/stdin`: EACCES). The payload's end is given to its host ids.
fn give_to_sandbox(end: &OwnedFd, ids: &IdMapping) -> Result<(), SpawnError> {
    if !ids.root_mode {
        return Ok(());
    }
    let uid = nix::unistd::Uid::from_raw(ids.host_uid);
    let gid = nix::unistd::Gid::from_raw(ids.host_gid);
    nix::unistd::fchown(end.as_fd(), Some(uid), Some(gid)).map_err(sys("fchown(stdio pipe)"))
}

/// Give the payload a pipe as its stream `target`, relayed to `to`.
fn relayed_output(
    stdio: &mut [Stdio; 3],
    ids: &IdMapping,
    target: usize,
    to: Target,
) -> Result<Stream, SpawnError> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(sys("pipe2(output)"))?;
    give_to_sandbox(&write, ids)?;
    stdio[target] = Stdio::Fd(write);
    Ok(Stream {
        pipe: Some(read),
        direction: Direction::Out {
            target: to,
            relaying: true,
        },
    })
}

/// Replace the payload's standard streams that need relaying by pipes:
/// every terminal, and stdout and stderr under an output cap. Returns the
/// relay, or None when nothing is relayed. `ids`: whose the payload's pipe
/// ends become; what the cap cannot cover is said in `warnings`.
pub fn relay_stdio(
    stdio: &mut [Stdio; 3],
    cap: Option<u64>,
    ids: &IdMapping,
    warnings: &mut Vec<String>,
) -> Result<Option<RefCell<OutputRelay>>, SpawnError> {
    for (target, given) in stdio.iter_mut().enumerate() {
        if matches!(given, Stdio::SupervisorStderr) && (target == 0 || cap.is_none()) {
            *given = Stdio::Fd(dup(std::io::stderr().as_fd())?);
        }
    }
    let mut streams = Vec::new();
    for target in 0..3usize {
        if let Stdio::Log(log) = &stdio[target] {
            let stream = match target {
                1 => OutputStream::Stdout,
                2 => OutputStream::Stderr,
                _ => {
                    return Err(SpawnError::Invalid(
                        "stdin cannot be a run log; give a descriptor or /dev/null".into(),
                    ))
                }
            };
            let log = log.clone();
            streams.push(relayed_output(
                stdio,
                ids,
                target,
                Target::Log(log, stream),
            )?);
            continue;
        }
        let inherited = matches!(stdio[target], Stdio::Inherit | Stdio::SupervisorStderr);
        let given = match &stdio[target] {
            Stdio::Inherit => crate::sys::fd::standard_stream(target as RawFd),
            Stdio::SupervisorStderr => crate::sys::fd::standard_stream(2),
            Stdio::Fd(fd) => Some(fd.as_fd()),
            Stdio::Null | Stdio::Log(_) => None,
        };
        let tty = given.is_some_and(is_tty);
        // The supervisor's own copies, taken while `given` borrows the plan.
        let (source, relayed_to) = match given {
            Some(fd) if target == 0 && tty => (Some(own_reader(fd)?), None),
            Some(fd) if target > 0 && (tty || (cap.is_some() && inherited)) => {
                (None, Some(dup(fd)?))
            }
            _ => (None, None),
        };
        match (source, relayed_to) {
            (Some(source), _) => {
                let (read, write) =
                    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(sys("pipe2(stdin)"))?;
                give_to_sandbox(&read, ids)?;
                // Only the supervisor's end: a payload that does not read
                // must not stall the loop; its own end blocks, as a terminal would.
                nix::fcntl::fcntl(
                    write.as_fd(),
                    nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK),
                )
                .map_err(sys("fcntl(stdin pipe)"))?;
                stdio[0] = Stdio::Fd(read);
                streams.push(Stream {
                    pipe: Some(write),
                    direction: Direction::In {
                        source,
                        pending: Vec::new(),
                    },
                });
            }
            (None, Some(to)) => {
                streams.push(relayed_output(stdio, ids, target, Target::Fd(to))?);
            }
            _ if target > 0 && cap.is_some() => {
                warnings.push(format!(
                    "the output cap of {} bytes does not apply to {}, which the caller redirected",
                    cap.unwrap_or(0),
                    if target == 1 { "stdout" } else { "stderr" }
                ));
            }
            _ => {}
        }
    }
    if streams.is_empty() && cap.is_none() {
        return Ok(None);
    }
    Ok(Some(RefCell::new(OutputRelay::new(
        cap.unwrap_or(u64::MAX),
        streams,
    ))))
}

impl OutputRelay {
    fn new(cap: u64, streams: Vec<Stream>) -> OutputRelay {
        OutputRelay {
            streams,
            cap,
            written: 0,
            capped: false,
            buffer: crate::read_buffer::ReadBuffer::default(),
            terminal: SavedTerminal::save(),
        }
    }

    /// Descriptors to poll, by stream index, with the events to wait for.
    pub fn open(&self) -> Vec<(usize, BorrowedFd<'_>, PollFlags)> {
        let mut out = Vec::new();
        for (i, stream) in self.streams.iter().enumerate() {
            let Some(pipe) = &stream.pipe else { continue };
            match &stream.direction {
                Direction::Out { .. } => out.push((i, pipe.as_fd(), PollFlags::POLLIN)),
                Direction::In { pending, .. } if !pending.is_empty() => {
                    out.push((i, pipe.as_fd(), PollFlags::POLLOUT))
                }
                Direction::In { source, .. } => {
                    if in_foreground(source.as_fd()) {
                        out.push((i, source.as_fd(), PollFlags::POLLIN));
                    }
                }
            }
        }
        out
    }

    /// When the loop must come back even if nothing happens (a background
    /// supervisor checking for the foreground).
    pub fn recheck_at(&self) -> Option<Instant> {
        let waiting = self.streams.iter().any(|stream| match &stream.direction {
            Direction::In { source, pending } => {
                stream.pipe.is_some() && pending.is_empty() && !in_foreground(source.as_fd())
            }
            Direction::Out { .. } => false,
        });
        waiting.then(|| Instant::now() + FOREGROUND_RECHECK)
    }

    /// Cap the output at `cap` bytes from now (a warm run's own cap).
    pub fn set_cap(&mut self, cap: Option<u64>) {
        self.cap = cap.unwrap_or(u64::MAX);
    }

    /// Whether the cap was reached.
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// Bytes relayed.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Move data once on stream `index`.
    pub fn pump(&mut self, index: usize) {
        let mut buffer = self.buffer.take();
        let read = self.pump_with(index, &mut buffer);
        self.buffer.put_back(buffer, read);
    }

    /// [`OutputRelay::pump`] through `buffer`; the bytes read from the
    /// payload's output.
    fn pump_with(&mut self, index: usize, buffer: &mut [u8]) -> usize {
        let Some(stream) = self.streams.get_mut(index) else {
            return 0;
        };
        if matches!(stream.direction, Direction::In { .. }) {
            let size = buffer.len().min(INPUT_BUFFER);
            pump_input(stream, &mut buffer[..size]);
            return 0;
        }
        let Some(pipe) = &stream.pipe else { return 0 };
        let n = match nix::unistd::read(pipe.as_fd(), buffer) {
            Ok(0) => {
                stream.pipe = None;
                return 0;
            }
            Ok(n) => n,
            Err(Errno::EINTR | Errno::EAGAIN) => return 0,
            Err(_) => {
                stream.pipe = None;
                return 0;
            }
        };
        let room = self.cap.saturating_sub(self.written).min(n as u64) as usize;
        let mut log = None;
        if let Direction::Out { target, relaying } = &mut stream.direction {
            match target {
                Target::Fd(target) if room > 0 && *relaying => {
                    let mut rest = &buffer[..room];
                    while !rest.is_empty() {
                        match nix::unistd::write(target.as_fd(), rest) {
                            Ok(w) => rest = &rest[w..],
                            Err(Errno::EINTR) => {}
                            Err(_) => {
                                // The reader went away (EPIPE): keep draining, stop relaying.
                                *relaying = false;
                                break;
                            }
                        }
                    }
                }
                Target::Log(shared, which) => {
                    if room > 0 && *relaying {
                        let written = match shared.0.lock() {
                            Ok(mut log) => log.output(*which, &buffer[..room]).is_ok(),
                            Err(_) => false,
                        };
                        *relaying = written;
                    }
                    log = Some(shared.clone());
                }
                Target::Fd(_) => {}
            }
        }
        self.written += room as u64;
        if room < n && !self.capped {
            self.capped = true;
            match log {
                // The log's reader says it to its own user, in order.
                Some(log) => {
                    if let Ok(mut log) = log.0.lock() {
                        log.capped(self.cap);
                    }
                }
                None => {
                    let notice = format!(
                        "\nsandbox: output cap of {} reached: the rest of stdout and stderr is dropped\n",
                        human(self.cap)
                    );
                    let _ = nix::unistd::write(std::io::stderr(), notice.as_bytes());
                }
            }
        }
        n
    }

    /// After the run: relay what is left of the output until every pipe
    /// reaches end-of-file (no writer is left once init has been reaped),
    /// and put the terminal back as it was.
    pub fn drain(&mut self) {
        for index in 0..self.streams.len() {
            if matches!(self.streams[index].direction, Direction::In { .. }) {
                self.streams[index].pipe = None;
                continue;
            }
            while self.streams[index].pipe.is_some() {
                self.pump(index);
            }
        }
        self.terminal.restore();
    }
}

impl Drop for OutputRelay {
    /// Also when a run is dropped without being waited for.
    fn drop(&mut self) {
        self.terminal.restore();
    }
}

fn pump_input(stream: &mut Stream, buffer: &mut [u8]) {
    let (Some(pipe), Direction::In { source, pending }) = (&stream.pipe, &mut stream.direction)
    else {
        return;
    };
    if pending.is_empty() {
        match nix::unistd::read(source.as_fd(), buffer) {
            // End of input (^D): the payload sees end-of-file.
            Ok(0) => {
                stream.pipe = None;
                return;
            }
            Ok(n) => pending.extend_from_slice(&buffer[..n]),
            // EIO: read from the background after all; try again later.
            Err(Errno::EINTR | Errno::EAGAIN | Errno::EIO) => return,
            Err(_) => {
                stream.pipe = None;
                return;
            }
        }
    }
    match nix::unistd::write(pipe.as_fd(), pending) {
        Ok(w) => {
            pending.drain(..w);
        }
        Err(Errno::EINTR | Errno::EAGAIN) => {}
        // The payload closed its stdin.
        Err(_) => {
            pending.clear();
            stream.pipe = None;
        }
    }
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{}MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{}KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}
