//! Decisions: allow, ask or deny, and the rule that decided.
//!
//! Order: profile rules, then the action's risk default.
//! Skills' declared permissions and stored grants slot in before the rules
//! when they arrive. Without a person to ask (CI, daemon), ask means deny.

use serde::Serialize;

use super::policy::{BrokerPolicy, Decision};

pub use crate::action::{glob_matches, Risk};

/// The risk of a known action, None for an unknown one.
pub fn risk(action: &str) -> Option<Risk> {
    action
        .parse::<crate::action::Action>()
        .ok()
        .map(|a| a.risk())
}

/// A decision with the rule behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// allow, ask or deny.
    pub decision: Decision,
    /// What decided, for the audit log and the error message.
    pub rule: String,
}

/// A pattern that matches exactly `text`: a stored grant covers the path
/// that was shown to the person, even one holding `*` or `?`.
pub fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Decide `action` on `target` under `policy`: rules with a pattern that
/// matches the target come first (any matching deny wins, else the longest
/// pattern), then the action's own rule, then the risk default.
pub fn decide_for(policy: &BrokerPolicy, action: &str, target: Option<&str>) -> Verdict {
    if let Some(target) = target {
        let prefix = format!("{action}:");
        let matching: Vec<(&str, Decision)> = policy
            .rules
            .iter()
            .filter_map(|(key, d)| Some((key.strip_prefix(&prefix)?, *d)))
            .filter(|(pattern, decision)| {
                if *decision == Decision::Deny && action == "net.http" {
                    crate::net::allow::target_matches_any_port(pattern, target)
                } else {
                    crate::action::pattern_matches_named(action, pattern, target)
                }
            })
            .collect();
        let chosen = matching
            .iter()
            .find(|(_, d)| *d == Decision::Deny)
            .or_else(|| matching.iter().max_by_key(|(pattern, _)| pattern.len()));
        if let Some((pattern, decision)) = chosen {
            return Verdict {
                decision: *decision,
                rule: format!("broker.rules.\"{action}:{pattern}\""),
            };
        }
    }
    decide(policy, action)
}

/// Decide `action` under `policy` (rules without a pattern only).
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
    fn globs() {
        assert!(glob_matches("dist/**", "dist/app.js"));
        assert!(glob_matches("dist/**", "dist/a/b/c.js"));
        assert!(glob_matches("dist/**", "./dist/x"));
        assert!(!glob_matches("dist/**", "distribution/x"));
        assert!(glob_matches("*.md", "README.md"));
        assert!(!glob_matches("*.md", "docs/README.md"));
        assert!(glob_matches("**/*.md", "docs/README.md"));
        assert!(glob_matches("src/?.rs", "src/a.rs"));
        assert!(!glob_matches("src/?.rs", "src/ab.rs"));
        assert!(glob_matches("npm", "npm"));
        assert!(!glob_matches("npm", "npx"));
        assert!(glob_matches(&glob_escape("a*b?.txt"), "a*b?.txt"));
        assert!(!glob_matches(&glob_escape("a*b?.txt"), "aXXbY.txt"));
        assert!(!glob_matches(&glob_escape("dir/**"), "dir/x"));
    }

    #[test]
    fn pattern_rules_come_first_and_a_matching_deny_wins() {
        let p = policy(&[
            ("fs.write", Decision::Ask),
            ("fs.write:dist/**", Decision::Allow),
            ("fs.write:dist/secret/**", Decision::Deny),
        ]);
        assert_eq!(
            decide_for(&p, "fs.write", Some("dist/app.js")).decision,
            Decision::Allow
        );
        let v = decide_for(&p, "fs.write", Some("dist/secret/key"));
        assert_eq!(
            v,
            Verdict {
                decision: Decision::Deny,
                rule: "broker.rules.\"fs.write:dist/secret/**\"".into()
            }
        );
        assert_eq!(
            decide_for(&p, "fs.write", Some("src/main.rs")).decision,
            Decision::Ask
        );
        assert_eq!(decide_for(&p, "fs.write", None).decision, Decision::Ask);
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

    #[test]
    fn a_net_http_deny_without_a_port_covers_every_port_of_its_host() {
        let p = policy(&[
            ("net.http", Decision::Allow),
            ("net.http:evil.example", Decision::Deny),
            ("net.http:api.example", Decision::Allow),
        ]);
        for target in ["evil.example:443", "evil.example:8080"] {
            assert_eq!(
                decide_for(&p, "net.http", Some(target)).decision,
                Decision::Deny,
                "{target}"
            );
        }
        // An allow without a port stays at 443 and 80.
        assert_eq!(
            decide_for(&p, "net.http", Some("api.example:8080")).rule,
            "broker.rules.\"net.http\""
        );
    }
}
