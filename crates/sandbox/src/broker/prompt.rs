//! Asking a person, on the supervisor's controlling terminal (never the
//! sandboxed command's stdin: the payload holds no descriptor of the
//! terminal, see `spawn::terminal`).
//!
//! The payload's output reaches the same screen before the question, so it
//! could have left the terminal in any state (concealed or invisible text,
//! an alternate screen, a scroll region, echo off) or drawn a fake question.
//! Before asking, the terminal modes saved when the run started are put
//! back, a reset sequence undoes what output can change, and the question
//! starts on a fresh line; nothing the payload writes is relayed while it is
//! open (the question runs inside the supervisor's loop). Text from the
//! sandbox is escaped (control, bidi, zero-width and line-separator
//! characters could rewrite or hide the question) and only shortened past
//! [`MAX_SHOWN`], keeping its end.
//!
//! The answer must repeat a random code shown in the question. A payload
//! can draw a look-alike question just before a real one arrives, so that
//! keys the person types for the fake one land in the real one; input typed
//! before the question is flushed, and keys typed after it without the code
//! deny. Anything but an explicit answer with the code is a deny, and so is
//! no answer before the deadline.

use std::io::Write;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::PollFlags;
use nix::sys::termios::{self, LocalFlags, SetArg, Termios};

use crate::poll_set::PollSet;

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
    /// Nobody could be asked (a client that cannot show questions): the
    /// decision stays "ask", which the broker refuses naming the grant to add.
    Unasked,
    /// No answer came (the deadline passed, the channel closed, the asker
    /// failed): refused this time, but nobody said no, so it is asked again
    /// next time (an explicit [`Answer::Deny`] holds for the run).
    Unanswered,
}

/// The answers a person gives, spelled the same on every face: the
/// terminal's prompt (by their first letter), the daemon's approvals API
/// (all but `always`, which would store a grant with the daemon's rights),
/// `serve`'s `skill.ask` and the MCP elicitation.
pub const ANSWER_WORDS: [&str; 4] = ["once", "run", "always", "deny"];

impl Answer {
    /// The answer's word ([`ANSWER_WORDS`]; `unasked`, `unanswered` for
    /// the two non-answers).
    pub fn word(self) -> &'static str {
        match self {
            Answer::Once => "once",
            Answer::Run => "run",
            Answer::Always => "always",
            Answer::Deny => "deny",
            Answer::Unasked => "unasked",
            Answer::Unanswered => "unanswered",
        }
    }

    /// An answer a client sent as a word: one of [`ANSWER_WORDS`], or
    /// `unasked`; `session` is the deprecated spelling of `run` that
    /// `serve` and the MCP face took before, still accepted. Anything else
    /// is `None` (the caller decides what an unknown word means).
    pub fn from_word(word: &str) -> Option<Answer> {
        Some(match word {
            "once" => Answer::Once,
            "run" | "session" => Answer::Run,
            "always" => Answer::Always,
            "deny" => Answer::Deny,
            "unasked" => Answer::Unasked,
            _ => return None,
        })
    }
}

/// Longest shown target; longer ones keep their end.
pub const MAX_SHOWN: usize = 512;

/// How long a question waits for an answer before it is denied.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// Longest answer line read (a longer one is a deny).
const MAX_ANSWER: usize = 256;

/// Undo what output can have changed: DECSTR soft reset (insert mode,
/// origin mode, scroll region, character sets, SGR), then explicitly SGR
/// reset (concealed, invisible colours), cursor shown, autowrap on, the
/// main screen, no mouse reporting or bracketed paste (they would type into
/// the answer), the default palette and colours (a payload can set
/// foreground = background), G0 = ASCII and shift-in.
const RESET: &str = "\x1b[!p\x1b[0m\x1b[?25h\x1b[?7h\x1b[?1049l\x1b[r\x1b[4l\x1b[?6l\
\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\
\x1b]104\x07\x1b]110\x07\x1b]111\x07\x1b(B\x0f";

/// Escape characters that could fake or hide text on a terminal: C0 and C1
/// controls, DEL, bidi controls, zero-width and other invisible characters,
/// U+2028/2029.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if super::text::must_escape(c) {
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

/// The choices a question offers.
const CHOICES: &str = "allow [o]nce, for this [r]un, [a]lways for this project, or [D]eny?";

/// A target as shown: escaped, shortened, and quoted when it holds a
/// blank or a quote. The sandbox chooses its file names: bare, a name with
/// spaces would read as the question's own words after the path ("wants
/// fs.write notes.txt (a preview: nothing is written)").
fn shown_target(target: &str) -> String {
    let shown = shorten(&escape(target), MAX_SHOWN);
    if shown.chars().any(|c| c.is_whitespace() || c == '"') {
        format!("\"{}\"", shown.replace('"', "\\\""))
    } else {
        shown
    }
}

/// Who wants what, escaped and shortened as the question shows it.
fn wants(caller: &str, action: &str, target: Option<&str>) -> String {
    let target = target
        .map(|t| format!(" {}", shown_target(t)))
        .unwrap_or_default();
    format!(
        "sandbox: {} wants {}{target}",
        shorten(&escape(caller), MAX_SHOWN),
        escape(action)
    )
}

/// The question, as shown.
pub fn question(caller: &str, action: &str, target: Option<&str>, code: &str) -> String {
    format!(
        "{}\r\n  {CHOICES}\r\n  \
         type the letter, a space and the code {code} (anything else denies): ",
        wants(caller, action, target)
    )
}

/// The question as put to someone who answers by other means than typing
/// on this terminal (an agent host's client): the same text without the
/// code line, lines ending in `\n`.
pub fn question_without_code(caller: &str, action: &str, target: Option<&str>) -> String {
    format!("{}\n  {CHOICES}", wants(caller, action, target))
}

/// Read the answer from a line: a choice, then the code.
pub fn parse_answer(line: &str, code: &str) -> Answer {
    let line = line.trim().to_ascii_lowercase();
    let mut words = line.split_whitespace();
    let (Some(choice), Some(given), None) = (words.next(), words.next(), words.next()) else {
        return Answer::Deny;
    };
    if given != code {
        return Answer::Deny;
    }
    match choice {
        "o" | "once" => Answer::Once,
        "r" | "run" => Answer::Run,
        "a" | "always" => Answer::Always,
        _ => Answer::Deny,
    }
}

/// A fresh code: four digits from std's randomly keyed hasher (seeded from
/// the kernel's random source, different for every `RandomState`).
fn fresh_code() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{:04}", hasher.finish() % 10_000)
}

/// Whoever answers an "ask": a person on the terminal ([`Prompter`]), or
/// `sandbox daemon`'s approval queue through the run's events socket.
pub trait Asker: std::fmt::Debug + Send {
    /// Ask; a failure to ask, or no answer in time, is a deny. The
    /// supervisor's loop waits meanwhile.
    fn ask(&mut self, caller: &str, action: &str, target: Option<&str>) -> Answer;
    /// Never wait past `at` (the run's deadline).
    fn not_after(&mut self, at: Option<Instant>);
}

impl Asker for Prompter {
    fn ask(&mut self, caller: &str, action: &str, target: Option<&str>) -> Answer {
        Prompter::ask(self, caller, action, target)
    }
    fn not_after(&mut self, at: Option<Instant>) {
        Prompter::not_after(self, at)
    }
}

/// The controlling terminal, when there is one.
pub struct Prompter {
    tty: std::fs::File,
    /// The terminal's modes when the run started.
    saved: Option<Termios>,
    deadline: Duration,
    /// The run's own end: a question never keeps the supervisor past the
    /// run's timeout (it blocks the supervision loop while it waits).
    not_after: Option<Instant>,
    /// Pending forwarded signals (SIGTERM, ^C, ...): one ends the question
    /// at once, as a deny, so that the supervisor handles it.
    interrupt: Option<nix::sys::signalfd::SignalFd>,
}

impl std::fmt::Debug for Prompter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompter")
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl Prompter {
    /// Open /dev/tty (before the run starts, so its modes are the person's);
    /// None without a controlling terminal (CI, daemons).
    pub fn open() -> Option<Prompter> {
        use std::os::unix::fs::OpenOptionsExt;
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open("/dev/tty")
            .ok()?;
        Some(Prompter::on(tty))
    }

    fn on(tty: std::fs::File) -> Prompter {
        let saved = termios::tcgetattr(tty.as_fd()).ok();
        let mut forwarded = nix::sys::signal::SigSet::empty();
        for signal in crate::sys::signal::FORWARDED {
            forwarded.add(signal);
        }
        let interrupt = nix::sys::signalfd::SignalFd::with_flags(
            &forwarded,
            nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
        )
        .ok();
        Prompter {
            tty,
            saved,
            deadline: DEFAULT_DEADLINE,
            not_after: None,
            interrupt,
        }
    }

    /// Never wait past `at` (the run's deadline).
    pub fn not_after(&mut self, at: Option<Instant>) {
        self.not_after = at;
    }

    /// Deny when no answer came within `deadline`.
    pub fn with_deadline(mut self, deadline: Duration) -> Prompter {
        self.deadline = deadline;
        self
    }

    /// Ask; a failure to ask or to read is a deny.
    pub fn ask(&mut self, caller: &str, action: &str, target: Option<&str>) -> Answer {
        // The person's modes, with a visible, line-edited answer whatever
        // they were; TCSAFLUSH also drops input typed before the question.
        if let Some(saved) = &self.saved {
            let mut asking = saved.clone();
            asking.local_flags |= LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ECHOE;
            asking.input_flags |= termios::InputFlags::ICRNL;
            let _ = termios::tcsetattr(self.tty.as_fd(), SetArg::TCSAFLUSH, &asking);
        }
        let _ = termios::tcflush(self.tty.as_fd(), termios::FlushArg::TCIFLUSH);
        let code = fresh_code();
        let text = format!("{RESET}\r\n{}", question(caller, action, target, &code));
        let answer = if self.tty.write_all(text.as_bytes()).is_err() {
            Answer::Unanswered
        } else {
            match self.read_line() {
                Some(line) => parse_answer(&line, &code),
                None => {
                    let said = format!(
                        "sandbox: no answer within {}s: {action} denied",
                        self.deadline.as_secs()
                    );
                    let _ = self.tty.write_all(format!("\r\n{said}\r\n").as_bytes());
                    eprintln!("{said}");
                    Answer::Unanswered
                }
            }
        };
        if let Some(saved) = &self.saved {
            let _ = termios::tcsetattr(self.tty.as_fd(), SetArg::TCSANOW, saved);
        }
        answer
    }

    /// One line, or None at the deadline; end of input or an error is an
    /// empty line (a deny).
    fn read_line(&mut self) -> Option<String> {
        let mut until = Instant::now() + self.deadline;
        if let Some(end) = self.not_after {
            until = until.min(end);
        }
        let mut line = Vec::new();
        let mut byte = [0u8; 64];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut set = PollSet::default();
            let tty = set.add(self.tty.as_fd(), PollFlags::POLLIN);
            let interrupt = self
                .interrupt
                .as_ref()
                .map(|interrupt| set.add(interrupt.as_fd(), PollFlags::POLLIN));
            if set.wait([Some(until)]).is_err() {
                return Some(String::new());
            }
            // Left pending for the supervision loop, which forwards it.
            if set.ready(interrupt) {
                return Some(String::new());
            }
            // Nothing ready: the deadline passed or a signal came.
            if !set.ready(Some(tty)) {
                continue;
            }
            match nix::unistd::read(self.tty.as_fd(), &mut byte) {
                Ok(0) => return Some(String::new()),
                Ok(n) => {
                    line.extend_from_slice(&byte[..n]);
                    if let Some(end) = line.iter().position(|b| *b == b'\n') {
                        line.truncate(end);
                        return Some(String::from_utf8_lossy(&line).into_owned());
                    }
                    if line.len() > MAX_ANSWER {
                        return Some(String::new());
                    }
                }
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
                Err(_) => return Some(String::new()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bidi_and_invisible_characters_are_escaped() {
        assert_eq!(escape("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape("evil\u{202E}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(escape("line\nbreak"), "line\\u{a}break");
        assert_eq!(escape("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
        assert_eq!(
            escape("zero\u{200B}width\u{FEFF}"),
            "zero\\u{200b}width\\u{feff}"
        );
        assert_eq!(
            escape("iso\u{2066}late\u{2069}"),
            "iso\\u{2066}late\\u{2069}"
        );
        assert_eq!(escape("c1\u{9b}31m"), "c1\\u{9b}31m");
        assert_eq!(escape("tag\u{E0041}"), "tag\\u{e0041}");
        assert_eq!(escape("plain/path ü"), "plain/path ü");
    }

    #[test]
    fn a_target_with_blanks_or_quotes_is_quoted() {
        assert_eq!(
            question_without_code("skill:x", "fs.write", Some("a b (safe)")),
            format!("sandbox: skill:x wants fs.write \"a b (safe)\"\n  {CHOICES}")
        );
        assert!(question_without_code("skill:x", "fs.write", Some("a\"b"))
            .starts_with("sandbox: skill:x wants fs.write \"a\\\"b\"\n"));
        assert!(
            question_without_code("skill:x", "fs.write", Some("plain.txt"))
                .starts_with("sandbox: skill:x wants fs.write plain.txt\n")
        );
    }

    #[test]
    fn long_targets_keep_their_end() {
        let long = format!("{}/secret.txt", "a".repeat(2000));
        let short = shorten(&long, 20);
        assert_eq!(short.chars().count(), 20);
        assert!(short.starts_with('…') && short.ends_with("/secret.txt"));
        assert!(question("command:x", "fs.write", Some(&long), "1234").contains("/secret.txt"));
        let path = format!("/{}", "b/".repeat(200));
        assert!(
            question("command:x", "fs.write", Some(&path), "1234").contains(&path),
            "a path of 400 characters is shown whole"
        );
    }

    #[test]
    fn the_question_without_its_code_is_the_terminals_first_two_lines() {
        let target = Some("a\u{202E}b");
        let shown = question("skill:x", "fs.write", target, "1234");
        let lines: Vec<&str> = shown.split("\r\n").take(2).collect();
        assert_eq!(
            question_without_code("skill:x", "fs.write", target),
            lines.join("\n")
        );
        assert!(lines[0].ends_with("fs.write a\\u{202e}b"), "{shown:?}");
    }

    #[test]
    fn only_an_explicit_answer_with_the_code_allows() {
        assert_eq!(parse_answer("o 4821\n", "4821"), Answer::Once);
        assert_eq!(parse_answer(" Always  4821 ", "4821"), Answer::Always);
        assert_eq!(parse_answer("r 4821", "4821"), Answer::Run);
        for line in [
            "", "\n", "o", "a", "a 4822", "a4821", "yes 4821", "4821", "o 4821 x",
        ] {
            assert_eq!(parse_answer(line, "4821"), Answer::Deny, "{line:?}");
        }
    }

    #[test]
    fn every_face_spells_the_answers_the_same() {
        // The terminal's prompt offers them by their first letters and
        // takes them whole too.
        for word in ANSWER_WORDS {
            let letter = &word[..1];
            assert!(
                CHOICES.contains(&format!("[{}]", letter.to_uppercase()))
                    || CHOICES.contains(&format!("[{letter}]")),
                "{word} in {CHOICES}"
            );
            let answer = Answer::from_word(word).unwrap();
            assert_eq!(answer.word(), word);
            assert_eq!(parse_answer(&format!("{word} 4821"), "4821"), answer);
            assert_eq!(parse_answer(&format!("{letter} 4821"), "4821"), answer);
        }
        // The daemon's approvals API: the same words on input and output.
        for (word, approval) in [
            ("once", crate::launch::protocol::Approval::Once),
            ("run", crate::launch::protocol::Approval::Run),
            ("deny", crate::launch::protocol::Approval::Deny),
        ] {
            assert_eq!(serde_json::to_value(approval).unwrap(), word);
            assert_eq!(Answer::from_word(word).unwrap().word(), word);
        }
        assert_eq!(
            Answer::from_word("session"),
            Some(Answer::Run),
            "deprecated"
        );
        assert_eq!(Answer::from_word("Once"), None);
        assert_eq!(Answer::from_word("yes"), None);
    }

    #[test]
    fn codes_differ() {
        let codes: std::collections::HashSet<String> = (0..20).map(|_| fresh_code()).collect();
        assert!(codes.len() > 1);
        assert!(codes.iter().all(|c| c.len() == 4));
    }

    fn pty() -> (std::fs::File, std::fs::File) {
        let pair = nix::pty::openpty(None, None).unwrap();
        (
            std::fs::File::from(pair.master),
            std::fs::File::from(pair.slave),
        )
    }

    #[test]
    fn no_answer_before_the_deadline_is_refused_as_unanswered() {
        let (_master, slave) = pty();
        let mut prompter = Prompter::on(slave).with_deadline(Duration::from_millis(50));
        assert_eq!(
            prompter.ask("command:x", "fs.write", Some("f")),
            Answer::Unanswered
        );
    }

    #[test]
    fn the_answer_with_the_shown_code_allows_and_modes_are_restored() {
        use std::io::Read;
        let (mut master, slave) = pty();
        let mut modes = termios::tcgetattr(slave.as_fd()).unwrap();
        modes.local_flags.remove(LocalFlags::ECHO);
        termios::tcsetattr(slave.as_fd(), SetArg::TCSANOW, &modes).unwrap();
        let mut prompter = Prompter::on(slave.try_clone().unwrap());
        let person = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            loop {
                let n = master.read(&mut buf).unwrap();
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen).into_owned();
                if let Some(at) = text.find("the code ") {
                    if text[at..].contains("denies): ") {
                        let code = &text[at + 9..at + 13];
                        master.write_all(format!("o {code}\n").as_bytes()).unwrap();
                        return (master, text);
                    }
                }
            }
        });
        assert_eq!(
            prompter.ask("command:x", "fs.write", Some("f\u{1b}[8m")),
            Answer::Once
        );
        let (_master, shown) = person.join().unwrap();
        assert!(shown.starts_with(RESET), "{shown:?}");
        assert!(shown.contains("wants fs.write f\\u{1b}[8m"), "{shown:?}");
        let after = termios::tcgetattr(slave.as_fd()).unwrap();
        assert!(
            !after.local_flags.contains(LocalFlags::ECHO),
            "the saved modes are back"
        );
    }
}
