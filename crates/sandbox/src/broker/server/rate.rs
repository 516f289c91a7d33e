//! The rate limit: a token bucket per run, so that a flooding sandbox
//! cannot keep the supervisor's core busy for free.

use std::time::Instant;

use super::Broker;

/// The rate limit of a run's broker (requests a second, and the burst
/// answered before it applies): far above any real client, low enough that
/// a flooding sandbox cannot keep the supervisor's core busy for free.
/// `scripts/bench-broker` measures throughput under it.
pub const RATE_LIMIT: (f64, f64) = (100_000.0, 200_000.0);

/// A token bucket.
#[derive(Debug)]
pub(super) struct RateLimit {
    pub(super) per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl RateLimit {
    pub(super) fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.per_second)
            .min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Broker {
    /// Answer at most `per_second` requests a second on average, with bursts
    /// of up to `burst`; the rest get -32006 instead of work.
    pub fn set_rate_limit(&mut self, per_second: f64, burst: f64) {
        self.rate = Some(RateLimit {
            per_second,
            burst,
            tokens: burst,
            last: Instant::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use crate::broker::protocol::code;
    use serde_json::Value;

    #[test]
    fn the_rate_limit_answers_excess_requests_with_an_error() {
        let project = tempfile::tempdir().unwrap();
        let mut broker = strict_broker(project.path(), None);
        broker.set_rate_limit(1.0, 3.0);
        for _ in 0..5 {
            broker.feed(QUERY.as_bytes());
        }
        let answers = answers(&broker);
        assert_eq!(answers.len(), 5);
        assert!(
            answers[..3].iter().all(|a| a.get("result").is_some()),
            "the burst is served"
        );
        assert!(
            answers[3..]
                .iter()
                .all(|a| a["error"]["code"] == code::RATE_LIMITED),
            "{answers:?}"
        );
        assert_eq!(broker.counts.errors, 2);
    }

    /// A flood past the rate limit is audited (one line per turn, not per
    /// request, so the flood cannot fill the disk through the audit) and
    /// counted for the report, before any refusal is sent.
    #[test]
    fn requests_the_rate_limit_refuses_are_audited_and_counted() {
        let project = tempfile::tempdir().unwrap();
        let (mut broker, audit_path) = audited_broker(project.path());
        broker.set_rate_limit(1.0, 3.0);
        let _channel = one_turn_of_queries(&mut broker, 10);
        let text = std::fs::read_to_string(&audit_path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines.len(),
            4,
            "three served and one for the refusals: {text}"
        );
        let refused = &lines[3];
        assert_eq!(refused["method"], "rate_limit", "{refused}");
        assert_eq!(refused["decision"], "deny", "{refused}");
        assert!(
            refused["rule"].as_str().unwrap().ends_with(": 7 refused"),
            "{refused}"
        );
        assert_eq!(broker.counts.rate_limited, 7);
        assert_eq!(broker.counts.errors, 7);
    }
}
