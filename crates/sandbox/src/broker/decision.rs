//! Whether an action on a target may go ahead: the profile's rules, a
//! skill's declared permissions, what a person approved for this run,
//! stored grants, the risk defaults, and a person when there is one.
//!
//! The target is always what the request resolved to (for paths: the
//! object the descriptor names, after `..` and symlinks), so a pattern in a
//! rule, a declaration, a `--grant` or a stored grant covers exactly the
//! objects it names.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use super::grants::{Grant, GrantStore};
use super::permission::{self, Verdict};
use super::prompt::{Answer, Asker};
use crate::action::{Action, Permission};
use crate::profile::policy::{BrokerPolicy, Decision};

/// Decides for one run.
pub struct Decider {
    /// The profile's broker rules (with `--grant`s folded in).
    pub policy: BrokerPolicy,
    /// A skill's declared permissions: the most it can ever get.
    pub declared: Option<Vec<Permission>>,
    /// Actions a person allowed for the rest of this run.
    run_allowed: BTreeSet<Action>,
    /// Network targets (`host:port`) a person allowed for the rest of this
    /// run: "for this run" on one host is not every host, since a payload
    /// could then reach any name after one approval.
    run_allowed_targets: BTreeSet<(Action, String)>,
    /// What a person refused in this run (action and exact target): not
    /// asked again, so a payload cannot wear the person down by asking in
    /// a loop until one question is approved by mistake.
    run_denied: BTreeSet<(Action, Option<String>)>,
    /// Stored grants.
    pub grants: Option<GrantStore>,
    /// A person to ask.
    pub prompter: Option<Box<dyn Asker>>,
    /// The canonical project root (grants are per project).
    pub project: PathBuf,
    /// Who asks: `command:<program>` or `skill:<name>`.
    pub caller: String,
    /// SHA-256 of what the caller runs, taken before it started; None when
    /// it was not taken (no grant could apply and nobody could be asked).
    pub caller_hash: super::identity::CallerHash,
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider")
            .field("caller", &self.caller)
            .field("caller_hash", &self.caller_hash)
            .finish()
    }
}

impl Decider {
    /// Decisions under `policy` for a run in `project`.
    pub fn new(policy: BrokerPolicy, project: PathBuf) -> Decider {
        Decider {
            policy,
            declared: None,
            run_allowed: BTreeSet::new(),
            run_allowed_targets: BTreeSet::new(),
            run_denied: BTreeSet::new(),
            grants: None,
            prompter: None,
            project,
            caller: "command".into(),
            caller_hash: Default::default(),
        }
    }

    /// The command whose `--grant` approves ahead for this caller: a skill
    /// is served (`serve --stdio`, `serve --mcp`) or run by hand, and
    /// either takes the same `--grant`.
    pub fn grant_command(&self) -> &'static str {
        if self.caller.starts_with("skill:") {
            "sandbox serve"
        } else {
            "sandbox run"
        }
    }

    /// Why the declared permissions refuse `action` on `target`, if they do.
    pub fn undeclared(&self, action: Action, target: Option<&str>) -> Option<Verdict> {
        let declared = self.declared.as_ref()?;
        if matches!(action, Action::Log | Action::PermissionQuery) {
            return None;
        }
        if declared.iter().any(|p| p.covers(action, target)) {
            return None;
        }
        let listed = if declared.is_empty() {
            "none".to_string()
        } else {
            declared
                .iter()
                .map(Permission::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        Some(Verdict {
            decision: Decision::Deny,
            rule: format!("the skill's declared permissions ({listed})"),
        })
    }

    /// The decision without asking anyone: a profile deny, the declared
    /// permissions, this run's approvals, stored grants, then the
    /// profile's rules and the risk default (which may say "ask").
    pub fn settled(&self, action: Action, target: Option<&str>) -> Verdict {
        let from_profile = permission::decide_for(&self.policy, action.as_str(), target);
        if from_profile.decision == Decision::Deny && from_profile.rule.starts_with("broker.rules")
        {
            return from_profile;
        }
        if let Some(refusal) = self.undeclared(action, target) {
            return refusal;
        }
        if self
            .run_denied
            .contains(&(action, target.map(str::to_owned)))
        {
            return Verdict {
                decision: Decision::Deny,
                rule: "a person's earlier answer in this run".into(),
            };
        }
        let target_approved =
            target.is_some_and(|t| self.run_allowed_targets.contains(&(action, t.to_owned())));
        if self.run_allowed.contains(&action) || target_approved {
            return Verdict {
                decision: Decision::Allow,
                rule: "approved for this run".into(),
            };
        }
        if let (Some(store), Some(hash)) = (&self.grants, self.caller_hash.get()) {
            if let Some((n, grant)) =
                store.find(&self.project, &self.caller, hash, action.as_str(), target)
            {
                return Verdict {
                    decision: grant.decision,
                    rule: format!("grant #{n}"),
                };
            }
        }
        from_profile
    }

    /// The decision, asking a person when it is "ask" and one is there.
    /// `target` is what is shown, and what an "always" answer is stored for.
    pub fn decide(&mut self, action: Action, target: Option<&str>) -> Verdict {
        let verdict = self.settled(action, target);
        if verdict.decision != Decision::Ask {
            return verdict;
        }
        let Some(prompter) = &mut self.prompter else {
            return verdict;
        };
        match prompter.ask(&self.caller, action.as_str(), target) {
            Answer::Once => Verdict {
                decision: Decision::Allow,
                rule: "approved once".into(),
            },
            Answer::Run => {
                match (action, target) {
                    (Action::NetHttp, Some(target)) => {
                        self.run_allowed_targets.insert((action, target.to_owned()));
                    }
                    _ => {
                        self.run_allowed.insert(action);
                    }
                }
                Verdict {
                    decision: Decision::Allow,
                    rule: "approved for this run".into(),
                }
            }
            Answer::Always => {
                let rule = self.store_always(action, target);
                Verdict {
                    decision: Decision::Allow,
                    rule,
                }
            }
            Answer::Unasked => verdict,
            Answer::Unanswered => Verdict {
                decision: Decision::Deny,
                rule: "no answer in time".into(),
            },
            Answer::Deny => {
                self.run_denied.insert((action, target.map(str::to_owned)));
                Verdict {
                    decision: Decision::Deny,
                    rule: "a person's answer".into(),
                }
            }
        }
    }

    /// Keep an "always" answer for exactly the target shown (escaped, so a
    /// `*` in a file name is no wildcard) and the content hashed before the
    /// caller started.
    fn store_always(&mut self, action: Action, target: Option<&str>) -> String {
        let Some(hash) = self.caller_hash.get().map(str::to_owned) else {
            return "approved once (what the caller runs could not be hashed, so nothing was stored)"
                .into();
        };
        let grant = Grant {
            project: self.project.clone(),
            caller: self.caller.clone(),
            hash,
            action: action.as_str().to_string(),
            pattern: target.map_or_else(|| "*".to_string(), permission::glob_escape),
            decision: Decision::Allow,
            time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            by_person: true,
        };
        let Some(store) = &mut self.grants else {
            return "approved once (no grant store)".into();
        };
        store.add(grant);
        match store.save() {
            Ok(()) => "approved always".into(),
            Err(err) => format!("approved once (the grant was not stored: {err})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every question "for this run" and counts them.
    #[derive(Debug, Default)]
    struct ForThisRun(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Asker for ForThisRun {
        fn ask(&mut self, _: &str, _: &str, _: Option<&str>) -> Answer {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Answer::Run
        }
        fn not_after(&mut self, _: Option<std::time::Instant>) {}
    }

    #[test]
    fn for_this_run_on_one_host_approves_that_host_only() {
        let policy = crate::profile::load("strict").unwrap().broker;
        let mut decider = Decider::new(policy, PathBuf::from("/p"));
        let asked = ForThisRun::default();
        let count = std::sync::Arc::clone(&asked.0);
        decider.prompter = Some(Box::new(asked));
        let first = decider.decide(Action::NetHttp, Some("tracker.test:443"));
        assert_eq!(first.decision, Decision::Allow);
        // The same host again: approved without a question.
        let again = decider.decide(Action::NetHttp, Some("tracker.test:443"));
        assert_eq!(again.rule, "approved for this run");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Another host is asked about, not let through.
        decider.decide(Action::NetHttp, Some("other.test:443"));
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Other actions keep "for this run" meaning the action.
        decider.decide(Action::FsWrite, Some("a"));
        decider.decide(Action::FsWrite, Some("b"));
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
