//! The person's terminal is not the sandboxed code's to touch.
//!
//! Handing the payload the supervisor's terminal as a standard stream let it
//! repaint the screen to fake a prompt, conceal the real one, read the
//! person's answer, and leave the terminal with echo off, non-blocking and
//! exclusive (TIOCEXCL) after the run. So a standard stream that is a
//! terminal reaches the payload only through a pipe the supervisor relays
//! ([`super::output`]); the payload's own session (setsid in the child) has
//! no controlling terminal, so it cannot open /dev/tty either. The payload
//! then sees a pipe, not a terminal (`isatty` is false, no job control): the
//! price of giving it no handle on the person's.
//!
//! What the supervisor found at the start (termios, the file status flags of
//! each standard stream's open file description, exclusive mode) is put
//! back when the run ends, whatever else held the terminal meanwhile.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use nix::fcntl::{FcntlArg, OFlag};
use nix::sys::termios::{self, SetArg, Termios};

/// Whether `fd` is a terminal.
pub fn is_tty(fd: BorrowedFd<'_>) -> bool {
    nix::unistd::isatty(fd).unwrap_or(false)
}

/// The terminal's state when the run started.
#[derive(Debug)]
pub struct SavedTerminal {
    /// A descriptor of the terminal and its termios.
    tty: Option<(OwnedFd, Termios, bool)>,
    /// File status flags of each standard stream that is a terminal.
    flags: Vec<(RawFd, OFlag)>,
}

impl SavedTerminal {
    /// Save the state of the terminal behind the standard streams, if any.
    pub fn save() -> SavedTerminal {
        let mut saved = SavedTerminal {
            tty: None,
            flags: Vec::new(),
        };
        for fd in 0..3 {
            let Some(borrowed) = crate::sys::fd::standard_stream(fd) else {
                continue;
            };
            if !is_tty(borrowed) {
                continue;
            }
            if let Ok(bits) = nix::fcntl::fcntl(borrowed, FcntlArg::F_GETFL) {
                saved.flags.push((fd, OFlag::from_bits_truncate(bits)));
            }
            if saved.tty.is_none() {
                if let (Ok(copy), Ok(state)) =
                    (borrowed.try_clone_to_owned(), termios::tcgetattr(borrowed))
                {
                    let exclusive = crate::sys::tty::is_exclusive(borrowed).unwrap_or(false);
                    saved.tty = Some((copy, state, exclusive));
                }
            }
        }
        saved
    }

    /// Whether a standard stream is a terminal.
    pub fn any(&self) -> bool {
        !self.flags.is_empty()
    }

    /// Put the saved state back (best effort: a terminal that went away
    /// needs nothing restored).
    pub fn restore(&self) {
        for (fd, flags) in &self.flags {
            let Some(borrowed) = crate::sys::fd::standard_stream(*fd) else {
                continue;
            };
            let now = nix::fcntl::fcntl(borrowed, FcntlArg::F_GETFL).map(OFlag::from_bits_truncate);
            if now.is_ok_and(|now| now != *flags) {
                let _ = nix::fcntl::fcntl(borrowed, FcntlArg::F_SETFL(*flags));
            }
        }
        if let Some((tty, state, exclusive)) = &self.tty {
            let tty = tty.as_fd();
            if termios::tcgetattr(tty).is_ok_and(|now| now != *state) {
                let _ = termios::tcsetattr(tty, SetArg::TCSANOW, state);
            }
            if !exclusive && crate::sys::tty::is_exclusive(tty).unwrap_or(false) {
                let _ = crate::sys::tty::clear_exclusive(tty);
            }
        }
    }
}
