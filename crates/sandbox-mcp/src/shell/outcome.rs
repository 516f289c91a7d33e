//! How a call ended: read from the run's report, and said to the agent as
//! structured content and as text.

use std::time::Duration;

use serde_json::{json, Value};

use super::request::millis;
use sandbox::profile::size::format_duration;
use sandbox::spawn::parent::LimitHit;
use sandbox::spawn::Report;

/// One stream of the command's output, capped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedOutput {
    /// The bytes kept, as text (cut on a character boundary, invalid UTF-8 replaced).
    pub text: String,
    /// Bytes kept (at most the cap).
    pub shown_bytes: u64,
    /// Bytes the command wrote in all.
    pub total_bytes: u64,
    /// Whether bytes were dropped.
    pub truncated: bool,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellOutcome {
    /// The command's exit code (None: a signal ended it, or it never ran).
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Its timeout ended it.
    pub timed_out: bool,
    /// The timeout it ran under.
    pub timeout: Duration,
    /// Standard output.
    pub stdout: CapturedOutput,
    /// Standard error.
    pub stderr: CapturedOutput,
    /// Why the sandbox could not run it (None: it ran).
    pub sandbox_error: Option<String>,
    /// A review run's change summary ([`super::review::summary`]).
    pub review: Option<Value>,
}

impl ShellOutcome {
    /// Whether the call failed: a non-zero exit, a signal, a timeout or a
    /// sandbox failure.
    pub fn is_error(&self) -> bool {
        self.exit_code != Some(0)
            || self.signal.is_some()
            || self.timed_out
            || self.sandbox_error.is_some()
    }

    /// The structured result, as [`output_schema`](super::output_schema) describes it.
    pub fn structured(&self) -> Value {
        json!({
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "timeout_ms": millis(self.timeout),
            "stdout": self.stdout.text,
            "stderr": self.stderr.text,
            "stdout_truncated": self.stdout.truncated,
            "stderr_truncated": self.stderr.truncated,
            "stdout_bytes": self.stdout.total_bytes,
            "stderr_bytes": self.stderr.total_bytes,
            "stdout_shown_bytes": self.stdout.shown_bytes,
            "stderr_shown_bytes": self.stderr.shown_bytes,
            "sandbox_error": self.sandbox_error,
            "review": self.review,
        })
    }

    /// The first line of [`text`](Self::text): how the command ended.
    pub fn status_line(&self) -> String {
        let signal = |signal: i32| {
            let name = nix::sys::signal::Signal::try_from(signal)
                .map(|s| s.as_str().to_owned())
                .unwrap_or_else(|_| format!("signal {signal}"));
            format!("killed by {name}")
        };
        if let Some(error) = &self.sandbox_error {
            if self.timed_out {
                return format!(
                    "timed out after {}, and the sandbox failed: {error}",
                    format_duration(self.timeout)
                );
            }
            return format!("the sandbox could not run the command: {error}");
        }
        if self.timed_out {
            let how = match (self.exit_code, self.signal) {
                (_, Some(number)) => signal(number),
                (Some(code), None) => format!("exit code {code}"),
                (None, None) => "ended".to_owned(),
            };
            return format!(
                "timed out after {} ({how}); give a larger timeout_ms to let it finish",
                format_duration(self.timeout)
            );
        }
        match (self.exit_code, self.signal) {
            (_, Some(number)) => signal(number),
            (Some(code), None) => format!("exit code {code}"),
            (None, None) => "ended without an exit status".to_owned(),
        }
    }

    /// The result as text for clients without structured content: the
    /// status, then stdout, then stderr, with a line saying where a stream was cut.
    pub fn text(&self) -> String {
        let mut out = self.status_line();
        out.push('\n');
        for (name, stream) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if stream.total_bytes == 0 {
                out.push_str(&format!("{name}: (empty)\n"));
                continue;
            }
            out.push_str(&format!("{name}:\n"));
            out.push_str(&stream.text);
            if !stream.text.ends_with('\n') {
                out.push('\n');
            }
            if stream.truncated {
                out.push_str(&format!(
                    "[{name} truncated: {} of {} bytes shown]\n",
                    stream.shown_bytes, stream.total_bytes
                ));
            }
        }
        if let Some(review) = &self.review {
            out.push_str(&super::review::text_line(review));
        }
        out
    }
}

pub(super) fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "no status".to_owned(),
    }
}

/// The supervisor's own lines on stderr (`sandbox: ...`), to quote in a
/// sandbox error.
pub(super) fn supervisor_said(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("sandbox: "))
        .collect();
    if lines.is_empty() {
        String::new()
    } else {
        format!(": {}", lines.join("; "))
    }
}

pub(super) fn apply_report(
    outcome: &mut ShellOutcome,
    report: &Report,
    status: std::process::ExitStatus,
) {
    outcome.exit_code = report.exit.as_ref().and_then(|exit| exit.code);
    outcome.signal = report.exit.as_ref().and_then(|exit| exit.signal);
    outcome.timed_out = report.limits_hit().contains(&LimitHit::Timeout);
    if report.exit.is_none() {
        let error = report.error.clone().unwrap_or_else(|| {
            format!(
                "the command never started ({}){}",
                describe_status(status),
                supervisor_said(&outcome.stderr.text)
            )
        });
        outcome.sandbox_error = Some(error);
    } else if let Some(error) = &report.error {
        // The command ran, and the sandbox failed after it (tearing down,
        // measuring): its status stands, and the failure is said.
        outcome.sandbox_error = Some(error.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_without_exit_is_a_sandbox_error_and_a_timeout_is_said() {
        use std::os::unix::process::ExitStatusExt;
        let mut outcome = ShellOutcome {
            exit_code: None,
            signal: None,
            timed_out: false,
            timeout: Duration::from_secs(1),
            stdout: CapturedOutput::default(),
            stderr: CapturedOutput::default(),
            sandbox_error: None,
            review: None,
        };
        let refused = Report::refused("strict", "Landlock is required");
        apply_report(
            &mut outcome,
            &refused,
            std::process::ExitStatus::from_raw(125 << 8),
        );
        assert_eq!(
            outcome.sandbox_error.as_deref(),
            Some("Landlock is required")
        );
        assert!(outcome.is_error());

        let mut killed = Report::refused("strict", "");
        killed.error = None;
        killed.exit = Some(sandbox::spawn::ExitInfo {
            code: None,
            signal: Some(15),
            status: 143,
        });
        killed.run = Some(sandbox::spawn::report::RunDetails {
            limits_hit: vec![LimitHit::Timeout],
            ..Default::default()
        });
        let mut outcome = ShellOutcome {
            sandbox_error: None,
            ..outcome
        };
        apply_report(
            &mut outcome,
            &killed,
            std::process::ExitStatus::from_raw(143 << 8),
        );
        assert!(outcome.timed_out);
        assert_eq!(outcome.signal, Some(15));
        assert_eq!(outcome.sandbox_error, None);
        assert!(outcome
            .status_line()
            .starts_with("timed out after 1s (killed by SIGTERM)"));
    }
}
