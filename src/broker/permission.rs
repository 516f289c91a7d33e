//! Decisions: allow, ask or deny, and the rule that decided.
//!
//! Order (DESIGN.md §6): profile rules, then the action's risk default.
//! Skills' declared permissions and stored grants slot in before the rules
//! when they arrive. Without a person to ask (CI, daemon), ask means deny.

use serde::Serialize;

use crate::profile::policy::{BrokerPolicy, Decision};

/// How much harm an action can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Risk {
    /// Reading inside the granted view.
    Low,
    /// Changing files.
    Medium,
    /// Deleting, running commands, the network, secrets.
    High,
}

/// The risk of a known action, None for an unknown one.
pub fn risk(action: &str) -> Option<Risk> {
    Some(match action {
        "fs.read" | "fs.list" | "fs.stat" | "log" | "permission.query" => Risk::Low,
        "fs.write" | "fs.mkdir" => Risk::Medium,
        "fs.delete" | "terminal.run" | "net.http" | "secrets.get" | "secrets.read" => Risk::High,
        _ => return None,
    })
}

/// A decision with the rule behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// allow, ask or deny.
    pub decision: Decision,
    /// What decided, for the audit log and the error message.
    pub rule: String,
}

/// Decide `action` under `policy`.
pub fn decide(policy: &BrokerPolicy, action: &str) -> Verdict {
    if let Some(decision) = policy.rules.get(action) {
        return Verdict {
            decision: *decision,
            rule: format!("broker.rules.\"{action}\""),
        };
    }
    match risk(action) {
        Some(Risk::Low) => Verdict {
            decision: Decision::Allow,
            rule: "risk default (low)".into(),
        },
        Some(Risk::Medium) => Verdict {
            decision: Decision::Ask,
            rule: "risk default (medium)".into(),
        },
        Some(Risk::High) => Verdict {
            decision: Decision::Ask,
            rule: "risk default (high)".into(),
        },
        None => Verdict {
            decision: policy.default,
            rule: "broker.default".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn policy(rules: &[(&str, Decision)]) -> BrokerPolicy {
        BrokerPolicy {
            default: Decision::Deny,
            rules: rules
                .iter()
                .map(|(a, d)| (a.to_string(), *d))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn rules_win_over_risk_defaults() {
        let p = policy(&[("fs.read", Decision::Deny), ("fs.write", Decision::Allow)]);
        assert_eq!(
            decide(&p, "fs.read"),
            Verdict {
                decision: Decision::Deny,
                rule: "broker.rules.\"fs.read\"".into()
            }
        );
        assert_eq!(decide(&p, "fs.write").decision, Decision::Allow);
    }

    #[test]
    fn risk_defaults_and_the_profile_default() {
        let p = policy(&[]);
        assert_eq!(decide(&p, "fs.stat").decision, Decision::Allow);
        assert_eq!(decide(&p, "fs.mkdir").decision, Decision::Ask);
        assert_eq!(decide(&p, "terminal.run").decision, Decision::Ask);
        assert_eq!(
            decide(&p, "no.such.action"),
            Verdict {
                decision: Decision::Deny,
                rule: "broker.default".into()
            }
        );
    }
}
