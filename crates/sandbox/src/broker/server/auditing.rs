//! The audit lines of a run's broker: one per request, one per connection
//! the net process reports, one per turn for the rate limit's refusals;
//! all written before any answer is sent.

use std::time::{SystemTime, UNIX_EPOCH};

use super::Broker;
use crate::broker::audit::Entry;

impl Broker {
    pub(super) fn audit_connections(
        &mut self,
        records: Vec<crate::broker::network::ConnectionRecord>,
    ) {
        let any = !records.is_empty();
        for record in records {
            self.audit_line(
                "net.connect",
                Some(&record.target),
                Some(&record.requested),
                if record.allowed { "allow" } else { "deny" },
                &record.rule,
                0,
            );
        }
        if any {
            self.flush_audit();
        }
    }

    /// Write the audit lines of the requests handled so far: before any
    /// answer is sent, and at the end of each turn.
    pub(super) fn flush_audit(&mut self) {
        // One line for all the refusals since the last: a flood is audited
        // without a line per request it sends.
        if self.rate_refused > 0 {
            let per_second = self.rate.as_ref().map_or(0.0, |r| r.per_second);
            let rule = format!(
                "rate limit ({per_second} requests a second): {} refused",
                self.rate_refused
            );
            self.audit_line("rate_limit", None, None, "deny", &rule, 0);
            self.rate_refused = 0;
        }
        if let Some(audit) = &mut self.audit {
            audit.flush();
        }
    }

    /// One audit line for this run's caller (none without an audit file).
    pub(super) fn audit_line(
        &mut self,
        method: &str,
        target: Option<&str>,
        requested: Option<&str>,
        decision: &str,
        rule: &str,
        duration_us: u64,
    ) {
        if let Some(audit) = &mut self.audit {
            audit.write(&Entry {
                time: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0),
                run: &self.run_id,
                caller: &self.decider.caller,
                caller_hash: self.decider.caller_hash.get(),
                method,
                target,
                requested,
                decision,
                rule,
                duration_us,
            });
        }
    }
}
