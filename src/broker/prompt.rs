//! Asking a person, on the supervisor's controlling terminal (never the
//! sandboxed command's stdin, which the command controls). Text from the
//! sandbox is escaped (control and bidi characters could rewrite the
//! question) and shortened keeping its end; input typed before the question
//! is flushed (so nothing queued in advance answers it); anything but an
//! explicit yes is a deny.

use std::io::{BufRead, Write};
use std::os::fd::AsFd;

/// What the person chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// This request only.
    Once,
    /// Every such request in this run.
    Run,
    /// Stored: always for this project and this caller.
    Always,
    /// No.
    Deny,
}

/// Longest shown target; longer ones keep their end.
const MAX_SHOWN: usize = 80;

/// Escape characters that could fake or hide text on a terminal.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Keep the end of a long text (the file name matters more than its root).
pub fn shorten(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let tail: String = text.chars().skip(count - (max - 1)).collect();
    format!("…{tail}")
}

/// The question, as shown.
pub fn question(caller: &str, action: &str, target: Option<&str>) -> String {
    let target = target
        .map(|t| format!(" {}", shorten(&escape(t), MAX_SHOWN)))
        .unwrap_or_default();
    format!(
        "sandbox: {} wants {}{target}\n  allow [o]nce, for this [r]un, [a]lways for this project, or [D]eny? ",
        shorten(&escape(caller), MAX_SHOWN),
        escape(action)
    )
}

/// Read the answer from a line.
pub fn parse_answer(line: &str) -> Answer {
    match line.trim().to_ascii_lowercase().as_str() {
        "o" | "once" => Answer::Once,
        "r" | "run" => Answer::Run,
        "a" | "always" => Answer::Always,
        _ => Answer::Deny,
    }
}

/// The controlling terminal, when there is one.
pub struct Prompter {
    tty: std::fs::File,
}

impl Prompter {
    /// Open /dev/tty; None without a controlling terminal (CI, daemons).
    pub fn open() -> Option<Prompter> {
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()?;
        Some(Prompter { tty })
    }

    /// Ask; a failure to ask or to read is a deny.
    pub fn ask(&mut self, caller: &str, action: &str, target: Option<&str>) -> Answer {
        let _ = nix::sys::termios::tcflush(self.tty.as_fd(), nix::sys::termios::FlushArg::TCIFLUSH);
        if self
            .tty
            .write_all(question(caller, action, target).as_bytes())
            .is_err()
        {
            return Answer::Deny;
        }
        let mut line = String::new();
        match std::io::BufReader::new(&self.tty).read_line(&mut line) {
            Ok(0) | Err(_) => Answer::Deny,
            Ok(_) => parse_answer(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(escape("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape("evil\u{202E}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(escape("line\nbreak"), "line\\u{a}break");
        assert_eq!(escape("plain/path ü"), "plain/path ü");
    }

    #[test]
    fn long_targets_keep_their_end() {
        let long = format!("{}/secret.txt", "a".repeat(200));
        let short = shorten(&long, 20);
        assert_eq!(short.chars().count(), 20);
        assert!(short.starts_with('…') && short.ends_with("/secret.txt"));
        assert!(question("command:x", "fs.write", Some(&long)).contains("/secret.txt"));
    }

    #[test]
    fn only_an_explicit_answer_allows() {
        assert_eq!(parse_answer("o\n"), Answer::Once);
        assert_eq!(parse_answer(" Always "), Answer::Always);
        assert_eq!(parse_answer("r"), Answer::Run);
        for line in ["", "\n", "yes", "y", "d", "x"] {
            assert_eq!(parse_answer(line), Answer::Deny, "{line:?}");
        }
    }
}
