//! `sandbox explain`: how exposed a profile, or what a run enforced,
//! leaves the host (the rating is `sandbox::exposure`; docs/src/explain.md).
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use sandbox::exposure::{self, Assessment, Context};
use sandbox::profile::policy::Decision;

use crate::UsageError;

/// Exit status when the score is worse than `--threshold`: distinct from
/// 2 (a usage error: nothing was rated) and 125 (the sandbox failed).
pub const EXIT_TOO_EXPOSED: i32 = 3;

/// Arguments of `sandbox explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The profile: a built-in name, or a path (containing '/' or ending in
    /// ".toml"). With --report: the profile the run used, for what a report
    /// does not record (default: the built-in the report names).
    #[arg(value_name = "PROFILE")]
    pub profile: Option<OsString>,
    /// Rate what a run enforced: the JSON report `sandbox run --report FILE` wrote.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// How the rating is printed and gated, shared with `sandbox skill explain`.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Print JSON (fields documented in docs/src/explain.md).
    #[arg(long)]
    pub json: bool,
    /// Exit 3 when the score is above N (0 to 10), naming what weighs most.
    #[arg(long, value_name = "N", value_parser = parse_threshold, allow_hyphen_values = true)]
    pub threshold: Option<f64>,
}

fn parse_threshold(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(n) if (0.0..=10.0).contains(&n) => Ok(n),
        _ => Err(format!(
            "{text:?} is not a score: give a number from 0 to 10, e.g. --threshold 2.0"
        )),
    }
}

pub fn run(args: ExplainArgs) -> anyhow::Result<i32> {
    let here = std::env::current_dir()
        .ok()
        .and_then(|d| std::fs::canonicalize(d).ok());
    let assessment = match &args.report {
        Some(path) => {
            let report = exposure::read_report(path).map_err(|e| UsageError(e.to_string()))?;
            let policy = match &args.profile {
                Some(spec) => Some(load(spec)?),
                None if sandbox::profile::builtin_source(&report.profile).is_some() => {
                    Some(load(&OsString::from(&report.profile))?)
                }
                None => None,
            };
            let project = report.run.as_ref().map(|run| run.project.as_path());
            let context = context(project.or(here.as_deref()));
            exposure::assess_report(
                &report,
                &path.display().to_string(),
                policy.as_ref(),
                &context,
            )
            .map_err(|e| UsageError(e.to_string()))?
        }
        None => {
            let Some(spec) = &args.profile else {
                return Err(UsageError(
                    "name a profile (e.g. `sandbox explain strict`) or a run's report (`sandbox explain --report report.json`)".into(),
                )
                .into());
            };
            exposure::assess_policy(&load(spec)?, &context(here.as_deref()))
        }
    };
    print(&assessment, &args.output)
}

/// A profile by name or path, its error a usage error (nothing was rated).
fn load(spec: &OsString) -> anyhow::Result<sandbox::Policy> {
    let loaded = match spec.to_str() {
        Some(text) => sandbox::profile::load(text),
        None => sandbox::profile::load_file(Path::new(spec)),
    };
    loaded.map_err(|err| {
        let mut message = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        UsageError(message).into()
    })
}

/// The homes of this host and the stored grants that allow something in
/// `project` (a grant store that does not read is said on stderr).
pub fn context(project: Option<&Path>) -> Context {
    let mut stored_grants = Vec::new();
    let path = sandbox::broker::grants::default_path();
    match sandbox::broker::grants::GrantStore::load(&path) {
        Ok(store) => {
            for grant in store.list() {
                if Some(grant.project.as_path()) == project && grant.decision == Decision::Allow {
                    stored_grants.push(format!("{} {}", grant.action, grant.pattern));
                }
            }
        }
        Err(err) => eprintln!(
            "sandbox: warning: stored grants not rated: {err} (see `sandbox grants list`)"
        ),
    }
    Context {
        homes: sandbox::project::home::home_directories(),
        stored_grants,
    }
}

/// Print the rating and return the exit status `--threshold` decides.
pub fn print(assessment: &Assessment, output: &OutputArgs) -> anyhow::Result<i32> {
    if output.json {
        println!(
            "{}",
            serde_json::to_string_pretty(assessment).context("encoding the rating")?
        );
    } else {
        print!("{}", text(assessment));
    }
    match output.threshold {
        Some(threshold) if assessment.score > threshold => {
            let worst: Vec<String> = assessment
                .worst(3)
                .iter()
                .map(|f| {
                    format!(
                        "{}.{} {}",
                        f.layer,
                        f.setting,
                        sandbox::broker::prompt::escape(&f.value)
                    )
                })
                .collect();
            eprintln!(
                "sandbox: exposure {:.1} is above the threshold {threshold:.1}; weighing most: {}",
                assessment.score,
                worst.join("; ")
            );
            Ok(EXIT_TOO_EXPOSED)
        }
        _ => Ok(0),
    }
}

/// Longest value shown in the table (the JSON has it whole).
const VALUE_WIDTH: usize = 26;

fn shorten(value: &str) -> String {
    if value.chars().count() <= VALUE_WIDTH {
        return value.to_owned();
    }
    let mut short: String = value.chars().take(VALUE_WIDTH - 1).collect();
    short.push('…');
    short
}

/// The table: one line per finding, then the notes and the score. A
/// report is untrusted input (its run may have written it), so every text
/// from it is shown with its escapes escaped.
fn text(assessment: &Assessment) -> String {
    use sandbox::broker::prompt::escape;
    let subject = &assessment.subject;
    let mut out = match subject.kind {
        "report" => format!(
            "report {} (profile {}): what the run enforced\n\n",
            escape(&subject.name),
            escape(subject.profile.as_deref().unwrap_or("unknown"))
        ),
        "skill" => format!(
            "skill {} (profile {}): what its runs would enforce\n\n",
            escape(&subject.name),
            escape(subject.profile.as_deref().unwrap_or("unknown"))
        ),
        _ => format!(
            "profile {}: what a run would enforce\n\n",
            escape(&subject.name)
        ),
    };
    out.push_str(&format!(
        "{:<24} {:<VALUE_WIDTH$} {:>6} {:>8}  WHY\n",
        "SETTING", "VALUE", "WEIGHT", "EXPOSURE"
    ));
    for f in &assessment.findings {
        out.push_str(&format!(
            "{:<24} {:<VALUE_WIDTH$} {:>6.1} {:>8.2}  {}\n",
            format!("{}.{}", f.layer, f.setting),
            shorten(&escape(&f.value)),
            f.weight,
            f.exposure,
            escape(&f.reason)
        ));
    }
    out.push('\n');
    for note in &assessment.notes {
        out.push_str(&format!("note: {}\n", escape(note)));
    }
    out.push_str(&format!(
        "exposure {:.1} of 10: {}\n",
        assessment.score,
        assessment.level.name()
    ));
    out
}
