//! How exposed a sandbox leaves the host: `sandbox explain`.
//!
//! A profile (what a run would enforce) or a run's report (what one did
//! enforce) is first put into one shape, a [`Subject`], so that both are
//! rated by the same code on the same fixed list of settings: a report
//! that fell back to fewer layers then scores worse than its profile
//! because the same setting gets a worse exposure, never because the list
//! changed.
//!
//! Each setting becomes a [`Finding`] with a weight (how much it matters
//! for the host) and an exposure between 0 (closed) and 1 (open). The
//! score is the weighted mean of the exposures scaled to 0..10, in the
//! spirit of `systemd-analyze security`; the weights are fixed here, so
//! scores of different profiles compare. The levels:
//!
//! | score | level |
//! |---|---|
//! | below 2.0 | `OK` |
//! | 2.0 to below 5.0 | `MEDIUM` |
//! | 5.0 to below 8.0 | `EXPOSED` |
//! | 8.0 and above | `UNSAFE` |
//!
//! A mean lets many closed settings hide one that alone hands the host
//! over, so two settings set a floor: writing `/`, a home or the system's
//! directories (`filesystem.write`), and `CAP_SYS_ADMIN` left to the
//! payload (`privileges.capabilities`), each at an exposure of 0.9 or
//! more, lift the score to [`CRITICAL_FLOOR`] (EXPOSED) plus the mean
//! scaled into the points above it (so such profiles still order among
//! themselves), and a note says why.
//!
//! The score compares profiles and runs; it is not a proof of anything.
//! The unit tests below keep the order a person expects of the built-ins.

mod paths;
mod rate;
pub(crate) mod report_file;
mod subject;

use std::path::PathBuf;

use serde::Serialize;

pub use report_file::{read_report, ReportFileError, MAX_REPORT_BYTES};
pub use subject::{Standing, Subject};

use crate::profile::policy::Policy;
use crate::spawn::Report;

/// Version of the JSON `sandbox explain --json` prints; raised when a
/// field is renamed or removed (added fields keep it).
pub const JSON_VERSION: u32 = 1;

/// One setting that matters for exposure, rated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The layer: `namespaces`, `landlock`, `filesystem`, `seccomp`,
    /// `privileges`, `network`, `limits`, `broker`, `environment`.
    pub layer: &'static str,
    /// The setting within the layer (`user`, `write`, `mode`, ...).
    pub setting: &'static str,
    /// What it is, short (`host`, `/usr, /etc`, `required`).
    pub value: String,
    /// Why that exposes the host as much as it does, short.
    pub reason: String,
    /// How much this setting counts in the score.
    pub weight: f64,
    /// 0.0 (closed) to 1.0 (fully open).
    pub exposure: f64,
}

/// How exposed, in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    /// Below 2.0.
    Ok,
    /// 2.0 to below 5.0.
    Medium,
    /// 5.0 to below 8.0.
    Exposed,
    /// 8.0 and above.
    Unsafe,
}

impl Level {
    /// The level of a score.
    pub fn of(score: f64) -> Level {
        if score < 2.0 {
            Level::Ok
        } else if score < 5.0 {
            Level::Medium
        } else if score < 8.0 {
            Level::Exposed
        } else {
            Level::Unsafe
        }
    }

    /// `OK`, `MEDIUM`, `EXPOSED`, `UNSAFE`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Medium => "MEDIUM",
            Level::Exposed => "EXPOSED",
            Level::Unsafe => "UNSAFE",
        }
    }
}

/// What was rated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rated {
    /// `profile`, `report` or `skill`.
    pub kind: &'static str,
    /// The profile's name, the report's file, or the skill's name.
    pub name: String,
    /// The profile the findings on paths and the broker come from (for a
    /// report: the one it names or the one given; None: not known).
    pub profile: Option<String>,
}

/// The findings and the score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    /// [`JSON_VERSION`].
    pub version: u32,
    /// What was rated.
    pub subject: Rated,
    /// 0.0 (closed) to 10.0 (open), two decimals.
    pub score: f64,
    /// The score in words.
    pub level: Level,
    /// Every setting rated, in a fixed order.
    pub findings: Vec<Finding>,
    /// What the reader should know about how this was rated.
    pub notes: Vec<String>,
}

/// What the rating needs to know about the host besides the profile or
/// report (passed in so the rating stays pure).
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Home directories of the accounts here ([`crate::project::home::home_directories`]).
    pub homes: Vec<PathBuf>,
    /// Stored grants that allow something in the project at hand, as
    /// `ACTION PATTERN` (`sandbox grants list`).
    pub stored_grants: Vec<String>,
}

/// Why a report cannot be rated.
#[derive(Debug, thiserror::Error)]
pub enum ExposureError {
    /// The run was refused before anything was enforced.
    #[error("the report is of a run refused before it started ({error}), so nothing was enforced to rate; rate its profile instead: sandbox explain {profile}")]
    Refused {
        /// The report's error.
        error: String,
        /// The profile it names.
        profile: String,
    },
}

/// Rate a profile: what a run under it would enforce.
pub fn assess_policy(policy: &Policy, context: &Context) -> Assessment {
    let subject = Subject::of_policy(policy, context);
    assess(
        Rated {
            kind: "profile",
            name: policy.name.clone(),
            profile: Some(policy.name.clone()),
        },
        &subject,
        context,
    )
}

/// Rate a run's report: what it enforced. `policy` supplies what a report
/// does not record (the paths, the secrets' patterns, the broker's rules);
/// without it those findings are rated as unknown.
pub fn assess_report(
    report: &Report,
    name: &str,
    policy: Option<&Policy>,
    context: &Context,
) -> Result<Assessment, ExposureError> {
    let subject = Subject::of_report(report, policy, context)?;
    let rated = Rated {
        kind: "report",
        name: name.to_owned(),
        profile: policy.map(|p| p.name.clone()),
    };
    let Some(policy) = policy else {
        return Ok(assess(rated, &subject, context));
    };
    // A layer is rated no better than the profile rates it: one the
    // profile only asks for where the kernel allows stays a hedge even in
    // a run that got it, so a run scores at least its profile, and worse
    // exactly where it fell back. What the run measured of the rest (the
    // network, capabilities, no_new_privs) stands as measured.
    let promised = rate::findings(&Subject::of_policy(policy, context), context);
    let mut findings = rate::findings(&subject, context);
    for (found, profile) in findings.iter_mut().zip(promised) {
        if (found.layer, found.setting) == (profile.layer, profile.setting)
            && is_hedged(found)
            && profile.exposure > found.exposure
        {
            found.value = format!("{} (profile: {})", found.value, profile.value);
            found.reason = profile.reason;
            found.exposure = profile.exposure;
        }
    }
    Ok(with_findings(rated, findings, &subject))
}

/// Whether a profile can ask for the setting's layer only where the
/// kernel allows (`best-effort`), so a run may have had it or not.
fn is_hedged(finding: &Finding) -> bool {
    matches!(finding.layer, "namespaces" | "landlock" | "limits")
        || matches!(
            (finding.layer, finding.setting),
            ("seccomp", "filter") | ("filesystem", "protected")
        )
}

/// The findings and score of a subject (`rated` says what it was).
pub fn assess(rated: Rated, subject: &Subject, context: &Context) -> Assessment {
    with_findings(rated, rate::findings(subject, context), subject)
}

fn with_findings(rated: Rated, findings: Vec<Finding>, subject: &Subject) -> Assessment {
    let score = score_of(&findings);
    let mut notes = subject.notes.clone();
    for open in critical(&findings) {
        notes.push(format!(
            "{}.{} ({}) alone hands the host over: the score is at least {CRITICAL_FLOOR:.1}",
            open.layer, open.setting, open.value
        ));
    }
    Assessment {
        version: JSON_VERSION,
        subject: rated,
        score,
        level: Level::of(score),
        findings,
        notes,
    }
}

/// The least score when one setting alone hands the host over.
pub const CRITICAL_FLOOR: f64 = 6.0;

/// The settings that alone hand the host over when open.
const CRITICAL: [(&str, &str); 2] = [("filesystem", "write"), ("privileges", "capabilities")];

/// The findings that set the floor.
fn critical(findings: &[Finding]) -> impl Iterator<Item = &Finding> {
    findings
        .iter()
        .filter(|f| f.exposure >= 0.9 && CRITICAL.contains(&(f.layer, f.setting)))
}

/// The weighted mean exposure on 0..10 (two decimals; printed with one),
/// raised to the floor when a critical setting is open.
fn score_of(findings: &[Finding]) -> f64 {
    let total: f64 = findings.iter().map(|f| f.weight).sum();
    if total <= 0.0 {
        return 10.0;
    }
    let open: f64 = findings.iter().map(|f| f.weight * f.exposure).sum();
    let mut score = (open / total) * 10.0;
    if critical(findings).next().is_some() {
        // Above the floor, still ordered by the rest.
        score = CRITICAL_FLOOR + (10.0 - CRITICAL_FLOOR) * score / 10.0;
    }
    (score * 100.0).round() / 100.0
}

impl Assessment {
    /// The findings that expose the most (weight times exposure), most
    /// first, for a short "why".
    pub fn worst(&self, count: usize) -> Vec<&Finding> {
        let mut open: Vec<&Finding> = self.findings.iter().filter(|f| f.exposure > 0.0).collect();
        open.sort_by(|a, b| (b.weight * b.exposure).total_cmp(&(a.weight * a.exposure)));
        open.truncate(count);
        open
    }
}

#[cfg(test)]
mod tests;
