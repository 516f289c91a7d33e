//! The audit log: one JSON object per request, one line each. The file may
//! end up on a terminal (`tail -f`), in a pager or in a shell's hands, and
//! its strings come from the sandbox, so every character that could end a
//! line or drive a terminal is written as a `\uXXXX` escape, not only the
//! C0 controls JSON itself requires.

use std::io::Write;

use serde::Serialize;

use super::text::must_escape;

/// serde_json's compact output, with [`must_escape`] characters escaped.
struct SafeFormatter;

impl serde_json::ser::Formatter for SafeFormatter {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (at, c) in fragment.char_indices() {
            if must_escape(c) {
                writer.write_all(&fragment.as_bytes()[start..at])?;
                // Every listed character is in the Basic Multilingual Plane.
                write!(writer, "\\u{:04x}", c as u32)?;
                start = at + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// `value` as one line of plain JSON (no newline), safe to show anywhere.
pub fn to_line<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, SafeFormatter);
    // Serializing plain data into memory cannot fail.
    if value.serialize(&mut serializer).is_err() {
        out.clear();
        out.extend_from_slice(b"{}");
    }
    out
}

/// One audit entry.
#[derive(Debug, Serialize)]
pub struct Entry<'a> {
    /// Seconds since the epoch.
    pub time: f64,
    /// The run.
    pub run: &'a str,
    /// Who asked.
    pub caller: &'a str,
    /// SHA-256 of what the caller runs, taken before it started (absent
    /// when no grant could apply, so nothing was hashed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_hash: Option<&'a str>,
    /// The method.
    pub method: &'a str,
    /// What it acted on: the path it resolved to, a program, a secret's name.
    pub target: Option<&'a str>,
    /// The path as asked, when it differs from the one it resolved to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<&'a str>,
    /// allow, deny or error.
    pub decision: &'a str,
    /// What decided.
    pub rule: &'a str,
    /// How long the request took.
    pub duration_us: u64,
}

/// Where audit lines go, each sealed into the writer's hash chain
/// ([`crate::audit::Chain`]). Lines wait in memory only until
/// [`Audit::flush`], which the broker calls before it sends any answer
/// and at the end of every turn: an answer never reaches the sandbox
/// before the line that audits it is in the file, and a burst of
/// pipelined requests costs one write instead of one per request.
#[derive(Debug)]
pub struct Audit {
    file: std::fs::File,
    chain: crate::audit::Chain,
    pending: Vec<u8>,
}

/// Lines held before they are written even within one turn.
const PENDING_LIMIT: usize = 64 << 10;

impl Audit {
    /// Audit into `file` (opened for appending) as the chain `chain`.
    pub fn new(file: std::fs::File, chain: crate::audit::Chain) -> Audit {
        Audit {
            file,
            chain,
            pending: Vec::new(),
        }
    }

    /// The chain's name and the hash of its last line (None before the
    /// first): the anchor a report or an attestation keeps.
    pub fn head(&self) -> (&str, Option<String>) {
        (self.chain.name(), self.chain.head())
    }

    /// Add one line. A line that cannot be written is dropped: the broker
    /// keeps answering.
    pub fn write(&mut self, entry: &Entry<'_>) {
        self.record(entry);
    }

    /// Add one line of any object (a container's events): sealed into the
    /// same chain as the requests' lines.
    pub fn record<T: Serialize>(&mut self, value: &T) {
        let mut line = self.chain.seal(value);
        line.push(b'\n');
        self.pending.extend_from_slice(&line);
        if self.pending.len() >= PENDING_LIMIT {
            self.flush();
        }
    }

    /// Write the lines added since the last flush.
    pub fn flush(&mut self) {
        if !self.pending.is_empty() {
            let _ = self.file.write_all(&self.pending);
            self.pending.clear();
        }
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_ends_terminal_controls_and_invisible_characters_are_escaped() {
        let hostile =
            "a\nb\u{1b}[2J\u{9b}31m\u{2028}\u{2029}\u{202e}\u{2066}\u{200b}\u{feff}\u{7f}ü";
        let line = String::from_utf8(to_line(&serde_json::json!({ "target": hostile }))).unwrap();
        assert_eq!(
            line,
            r#"{"target":"a\nb\u001b[2J\u009b31m\u2028\u2029\u202e\u2066\u200b\ufeff\u007fü"}"#
        );
        assert!(line.chars().all(|c| !must_escape(c)));
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["target"], hostile, "still the same data");
    }
}
