//! The output cap: the payload's stdout and stderr go through pipes that the
//! supervisor relays to its own, up to the cap; past it the rest is read and
//! dropped (so the payload never blocks on a full pipe), a one-line notice
//! is printed once, and the run's report says so. One fixed buffer keeps the
//! supervisor's memory bounded whatever the payload writes.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;

const BUFFER: usize = 64 * 1024;

struct Stream {
    pipe: Option<OwnedFd>,
    /// The supervisor's own descriptor this stream is relayed to (1 or 2).
    target: RawFd,
    /// False once writing to `target` failed (a closed downstream pipe).
    relaying: bool,
}

/// Relays capped output.
pub struct OutputRelay {
    streams: Vec<Stream>,
    cap: u64,
    written: u64,
    capped: bool,
    buffer: Box<[u8]>,
}

impl std::fmt::Debug for OutputRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputRelay")
            .field("cap", &self.cap)
            .field("written", &self.written)
            .finish()
    }
}

impl OutputRelay {
    /// A relay for `pipes` (read end, the supervisor's descriptor it goes to).
    pub fn new(cap: u64, pipes: Vec<(OwnedFd, RawFd)>) -> OutputRelay {
        let streams = pipes
            .into_iter()
            .map(|(pipe, target)| Stream {
                pipe: Some(pipe),
                target,
                relaying: true,
            })
            .collect();
        OutputRelay {
            streams,
            cap,
            written: 0,
            capped: false,
            buffer: vec![0; BUFFER].into_boxed_slice(),
        }
    }

    /// Open pipes, by stream index.
    pub fn open(&self) -> Vec<(usize, BorrowedFd<'_>)> {
        self.streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.pipe.as_ref()?.as_fd())))
            .collect()
    }

    /// Whether the cap was reached.
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// Bytes relayed.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Read once from stream `index` and relay what fits under the cap.
    pub fn pump(&mut self, index: usize) {
        let Some(stream) = self.streams.get_mut(index) else {
            return;
        };
        let Some(pipe) = &stream.pipe else { return };
        let n = match nix::unistd::read(pipe.as_fd(), &mut self.buffer) {
            Ok(0) => {
                stream.pipe = None;
                return;
            }
            Ok(n) => n,
            Err(Errno::EINTR | Errno::EAGAIN) => return,
            Err(_) => {
                stream.pipe = None;
                return;
            }
        };
        let room = self.cap.saturating_sub(self.written).min(n as u64) as usize;
        if room > 0 && stream.relaying {
            let target = crate::sys::fd::borrow(stream.target);
            let mut rest = &self.buffer[..room];
            while !rest.is_empty() {
                match nix::unistd::write(target, rest) {
                    Ok(w) => rest = &rest[w..],
                    Err(Errno::EINTR) => {}
                    Err(_) => {
                        // The reader went away (EPIPE): keep draining, stop relaying.
                        stream.relaying = false;
                        break;
                    }
                }
            }
        }
        self.written += room as u64;
        if room < n && !self.capped {
            self.capped = true;
            let notice = format!(
                "\nsandbox: output cap of {} reached: the rest of stdout and stderr is dropped\n",
                human(self.cap)
            );
            let _ = nix::unistd::write(crate::sys::fd::borrow(2), notice.as_bytes());
        }
    }

    /// After the run: relay what is left until every pipe reaches end-of-file
    /// (no writer is left once init has been reaped).
    pub fn drain(&mut self) {
        for index in 0..self.streams.len() {
            while self.streams[index].pipe.is_some() {
                self.pump(index);
            }
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
