//! What a recipe did: per step, each attempt's exit status and time and
//! the step's changes; overall, what reached the project.

use std::fmt::Write as _;

use serde::Serialize;

use crate::broker::prompt::escape;
use crate::review::stack::Summary;

/// Paths listed per step in the text report (the JSON has them all).
const LISTED: usize = 20;

/// The whole recipe's report (`sandbox recipe run --json`).
#[derive(Debug, Clone, Serialize)]
pub struct RecipeReport {
    /// The recipe file.
    pub recipe: String,
    /// Its title.
    pub title: String,
    /// The profile every step ran under.
    pub profile: String,
    /// Every step (and the checks) succeeded.
    pub ok: bool,
    /// The step that failed after its retries (or `checks`).
    pub failed_step: Option<String>,
    /// Tries of the whole recipe (more than 1 only with Goose's `retry`).
    pub tries: u32,
    /// The steps of the last try, in order (a step never reached is absent).
    pub steps: Vec<StepReport>,
    /// What reached the project.
    pub outcome: Outcome,
    /// Wall time of the whole recipe, in seconds.
    pub seconds: f64,
}

/// One step of one try.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    /// Its name.
    pub name: String,
    /// It succeeded (its changes are in the transaction).
    pub ok: bool,
    /// Each attempt.
    pub attempts: Vec<Attempt>,
    /// What the successful attempt wrote and removed.
    pub changes: Option<Summary>,
}

/// One attempt of a step.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// 1 for the first.
    pub number: u32,
    /// The shell's status (128 + signal for a signal); None: it did not run.
    pub status: Option<i32>,
    /// Why the attempt failed besides its status (could not start, layer
    /// full or unreadable, time limit).
    pub error: Option<String>,
    /// Wall time, in seconds.
    pub seconds: f64,
}

/// What the recipe's transaction ended with.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Outcome {
    /// Every change was applied to the project.
    Applied {
        /// The paths written or removed.
        applied: Vec<String>,
    },
    /// The steps changed nothing.
    NoChanges,
    /// `--review`: the changes are kept as review run `run`.
    Kept {
        /// The run id for `sandbox changes`, `apply`, `discard`.
        run: String,
        /// How many paths changed.
        changes: usize,
    },
    /// Apply refused some changes: nothing was applied, all are kept.
    Refused {
        /// The run id the changes are kept as.
        run: String,
        /// Each refused path, why, and the `sandbox apply` flag that allows it.
        reasons: Vec<crate::review::Refusal>,
    },
    /// A step failed: nothing reached the project, nothing was kept.
    RolledBack,
}

impl RecipeReport {
    /// The report for a person, a few lines.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "recipe {} ({}), profile {}: {} step(s), {:.2} s",
            self.title,
            self.recipe,
            self.profile,
            self.steps.len(),
            self.seconds
        );
        for (index, step) in self.steps.iter().enumerate() {
            let attempts: Vec<String> = step
                .attempts
                .iter()
                .map(|a| {
                    let status = a
                        .status
                        .map_or_else(|| "did not run".to_owned(), |s| format!("exit {s}"));
                    match &a.error {
                        Some(error) => {
                            format!("{status} ({}), {:.2} s", escape(error), a.seconds)
                        }
                        None => format!("{status}, {:.2} s", a.seconds),
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "  {}. {} {}: {}",
                index + 1,
                if step.ok { "ok" } else { "FAILED" },
                step.name,
                attempts.join("; ")
            );
            if let Some(changes) = &step.changes {
                for (sign, paths) in [("+", &changes.written), ("-", &changes.removed)] {
                    for path in paths.iter().take(LISTED) {
                        let _ = writeln!(out, "       {sign} {}", escape(path));
                    }
                    if paths.len() > LISTED {
                        let _ = writeln!(out, "       {sign} … {} more", paths.len() - LISTED);
                    }
                }
            }
        }
        if self.tries > 1 {
            let _ = writeln!(out, "  the whole recipe was tried {} times", self.tries);
        }
        let _ = match &self.outcome {
            Outcome::Applied { applied } => writeln!(
                out,
                "every step succeeded; {} change(s) applied to the project",
                applied.len()
            ),
            Outcome::NoChanges => writeln!(out, "every step succeeded; no changes to the project"),
            Outcome::Kept { run, changes } => writeln!(
                out,
                "every step succeeded; {changes} change(s) kept for review as run {run}: `sandbox changes {run}`, then `sandbox apply {run}` or `sandbox discard {run}`"
            ),
            Outcome::Refused { run, reasons } => {
                let _ = writeln!(
                    out,
                    "every step succeeded, but applying was refused, so nothing reached the project:"
                );
                for reason in reasons {
                    let _ = writeln!(out, "    {reason}");
                }
                writeln!(
                    out,
                    "the changes are kept as run {run}: `sandbox changes {run}`, then `sandbox apply {run}` with the flags above, or `sandbox discard {run}`"
                )
            }
            Outcome::RolledBack => writeln!(
                out,
                "step `{}` failed: nothing reached the project (every change of the recipe was dropped)",
                self.failed_step.as_deref().unwrap_or("?")
            ),
        };
        out
    }

    /// The command's exit status: 0 when the recipe succeeded and its
    /// changes were applied or kept, 1 when a step failed or apply refused.
    pub fn exit_status(&self) -> i32 {
        match self.outcome {
            Outcome::Applied { .. } | Outcome::NoChanges | Outcome::Kept { .. } => 0,
            Outcome::Refused { .. } | Outcome::RolledBack => 1,
        }
    }
}
