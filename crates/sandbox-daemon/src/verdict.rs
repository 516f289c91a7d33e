//! What the daemon believes of a run's supervisor. A caller's run is
//! supervised by a process of the caller's uid, which the caller may
//! ptrace or speak for (its events socket, copied with `pidfd_getfd`):
//! everything it sends is a claim. The run's end is what root observed
//! (the launcher's `waitpid` of the supervisor, the daemon's own cancel);
//! the supervisor's report is kept, labelled as its own, and may make a
//! run look worse than root saw it, never better. Its questions are
//! bounded so a caller cannot make the daemon keep or list unbounded
//! state. Its report is kept as sent (within the events socket's line
//! bound) and read only through [`sandbox::spawn::Report::read`], which
//! keeps the label and calls what does not fit the schema unreadable.

use super::store::Outcome;

/// What the supervisor said of the run's end ([`FromSupervisor::Finished`]).
///
/// [`FromSupervisor::Finished`]: sandbox::launch::protocol::FromSupervisor::Finished
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The status it says the command ended with.
    pub status: i32,
    /// Its report.
    pub report: serde_json::Value,
    /// The failure it reports.
    pub error: Option<String>,
}

/// What root saw of the supervisor process.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// The launcher reaped it: exit code or signal.
    Reaped {
        /// Its exit code.
        code: Option<i32>,
        /// The signal that killed it.
        signal: Option<i32>,
    },
    /// The launcher refused to start it.
    Refused(String),
    /// Nothing: the launcher died or never reported its end.
    Unknown,
}

/// The key the daemon adds to a supervisor's report: it says who wrote it.
pub const REPORTED_BY: &str = "reported_by";

/// The report as the record keeps it: the supervisor's, labelled so.
fn labelled(report: serde_json::Value) -> serde_json::Value {
    let mut fields = match report {
        serde_json::Value::Object(fields) => fields,
        other => {
            let mut fields = serde_json::Map::new();
            fields.insert("claim".into(), other);
            fields
        }
    };
    fields.insert(REPORTED_BY.into(), "supervisor".into());
    serde_json::Value::Object(fields)
}

/// The run's end from root's observation, the daemon's cancel, and the
/// supervisor's claim. The supervisor exits with the status it reports
/// (`launch::supervisor::run`), so an honest one is confirmed by the
/// launcher's wait; one that disagrees, dies by a signal or goes without a
/// report failed, whatever it said.
pub fn judge(cancelled: Option<&str>, claim: Option<Claim>, observed: Observed) -> Outcome {
    let outcome = |state, status, reason: Option<String>, report| Outcome {
        state,
        status,
        reason,
        report,
        log_records: 0,
        finished_ms: 0,
    };
    let report = claim.as_ref().map(|c| labelled(c.report.clone()));
    let claimed_error = claim.as_ref().and_then(|c| c.error.clone());
    let (status, failure) = match (&observed, &claim) {
        (Observed::Refused(error), _) => (
            Some(125),
            Some(format!("the launcher refused the run: {error}")),
        ),
        (
            Observed::Reaped {
                signal: Some(signal),
                ..
            },
            _,
        ) => (
            Some(128 + signal),
            Some(format!(
                "the run's supervisor was killed by signal {signal}"
            )),
        ),
        (
            Observed::Reaped {
                code: Some(code), ..
            },
            None,
        ) => (
            Some(*code),
            Some(format!(
                "the run's supervisor exited with code {code} before it sent a result"
            )),
        ),
        (
            Observed::Reaped {
                code: Some(code), ..
            },
            Some(claim),
        ) if claim.status != *code => (
            Some(*code),
            Some(format!(
                "the run's supervisor reported status {} but exited with code {code}",
                claim.status
            )),
        ),
        (
            Observed::Reaped {
                code: Some(code), ..
            },
            Some(_),
        ) => (Some(*code), None),
        (Observed::Reaped { .. }, _) => (
            Some(125),
            Some("the run's supervisor ended without a status".into()),
        ),
        (Observed::Unknown, _) => {
            let reason = match &claim {
                Some(claim) => format!(
                    "the launcher did not see the run's supervisor end (it reported status {})",
                    claim.status
                ),
                None => "the launcher died and the run's supervisor ended without a result".into(),
            };
            return outcome("lost", None, Some(reason), report);
        }
    };
    if let Some(reason) = cancelled {
        return outcome("cancelled", status, Some(reason.to_string()), report);
    }
    match failure.or(claimed_error) {
        Some(reason) => outcome("failed", status, Some(reason), report),
        None => outcome("exited", status, None, report),
    }
}

/// Open questions one run may have. The supervisor is single-threaded and
/// its broker waits for each answer before it asks again, so an honest run
/// has one open at a time; four leave room for a question answered here
/// whose answer has not reached it yet. A question past this is not kept
/// (nor listed): its asker is denied at its deadline, as if unanswered.
pub const MAX_OPEN_QUESTIONS: usize = 4;

/// Longest text of a question's fields as kept and listed (bytes); a
/// broker target is a path, a command or a URL, escaped for display.
pub const MAX_QUESTION_TEXT: usize = 8 << 10;

/// `text` cut to [`MAX_QUESTION_TEXT`] on a character boundary, marked.
pub fn bounded_text(mut text: String) -> String {
    if text.len() > MAX_QUESTION_TEXT {
        text.truncate(sandbox::text::floor_char_boundary(&text, MAX_QUESTION_TEXT));
        text.push('…');
    }
    text
}

/// The deadline the daemon keeps for a question: the supervisor's, never
/// later than the daemon's own `ask_deadline` from now.
pub fn bounded_deadline(claimed_ms: u64, now_ms: u64, ask_deadline_ms: u64) -> u64 {
    claimed_ms.min(now_ms.saturating_add(ask_deadline_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(status: i32) -> Claim {
        Claim {
            status,
            report: serde_json::json!({"version": 1, "exit": {"code": status}}),
            error: None,
        }
    }

    #[test]
    fn an_honest_supervisor_is_confirmed_by_the_launchers_wait() {
        let out = judge(
            None,
            Some(claim(7)),
            Observed::Reaped {
                code: Some(7),
                signal: None,
            },
        );
        assert_eq!((out.state, out.status), ("exited", Some(7)));
        let report = out.report.unwrap();
        assert_eq!(report[REPORTED_BY], "supervisor");
        assert_eq!(report["exit"]["code"], 7);
    }

    #[test]
    fn a_claim_never_overrides_what_root_saw() {
        let killed = judge(
            None,
            Some(claim(0)),
            Observed::Reaped {
                code: None,
                signal: Some(9),
            },
        );
        assert_eq!((killed.state, killed.status), ("failed", Some(137)));
        let lying = judge(
            None,
            Some(claim(0)),
            Observed::Reaped {
                code: Some(1),
                signal: None,
            },
        );
        assert_eq!((lying.state, lying.status), ("failed", Some(1)));
        let cancelled = judge(
            Some("a client cancelled it"),
            Some(claim(0)),
            Observed::Reaped {
                code: Some(0),
                signal: None,
            },
        );
        assert_eq!(cancelled.state, "cancelled");
        let unseen = judge(None, Some(claim(0)), Observed::Unknown);
        assert_eq!((unseen.state, unseen.status), ("lost", None));
        let not_an_object = judge(
            None,
            Some(Claim {
                status: 0,
                report: serde_json::json!("fine"),
                error: None,
            }),
            Observed::Reaped {
                code: Some(0),
                signal: None,
            },
        );
        assert_eq!(not_an_object.report.unwrap()["claim"], "fine");
    }

    #[test]
    fn a_kept_report_reads_typed_with_its_label() {
        let refused = sandbox::spawn::Report::refused("strict", "no namespaces");
        let out = judge(
            None,
            Some(Claim {
                status: 125,
                report: refused.to_json(),
                error: Some("no namespaces".into()),
            }),
            Observed::Reaped {
                code: Some(125),
                signal: None,
            },
        );
        let typed = sandbox::spawn::Report::read(&out.report.unwrap()).unwrap();
        assert_eq!(typed.reported_by.as_deref(), Some("supervisor"));
        assert_eq!(typed.error.as_deref(), Some("no namespaces"));
        let not_a_report = labelled(serde_json::json!("fine"));
        assert!(sandbox::spawn::Report::read(&not_a_report).is_err());
    }

    #[test]
    fn question_fields_and_deadlines_are_bounded() {
        let long = "é".repeat(MAX_QUESTION_TEXT);
        let cut = bounded_text(long);
        assert!(cut.len() <= MAX_QUESTION_TEXT + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded_deadline(u64::MAX, 1000, 300), 1300);
        assert_eq!(bounded_deadline(1100, 1000, 300), 1100);
    }
}
