//! `sandbox profile`: list, show and check profiles.
use std::ffi::OsString;
use std::path::Path;

use clap::Subcommand;
use sandbox::profile::{self, policy::Policy, ProfileError};

/// Exit status for "the profile is invalid", distinct from 125 (the sandbox failed).
const INVALID: i32 = 2;

/// Subcommands of `sandbox profile`.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// List the built-in profiles.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the effective profile, with `extends` resolved, as TOML.
    Show {
        /// A built-in name, or a path (containing '/' or ending in ".toml").
        profile: OsString,
        /// Print JSON instead of TOML.
        #[arg(long)]
        json: bool,
    },
    /// Check a profile; exits 2 and names the file and line when it is invalid.
    Check {
        /// The profile file (a built-in name works too).
        file: OsString,
    },
}

pub fn run(cmd: ProfileCommand) -> anyhow::Result<i32> {
    match cmd {
        ProfileCommand::List { json } => list(json),
        ProfileCommand::Show { profile, json } => match load(&profile) {
            Ok(policy) => show(&policy, json),
            Err(err) => Ok(invalid(&err)),
        },
        ProfileCommand::Check { file } => {
            let checked = match file.to_str() {
                Some(text) => profile::check(text),
                None => profile::check_file(Path::new(&file)),
            };
            match checked {
                Ok(checked) => {
                    for warning in &checked.warnings {
                        eprintln!("warning: {warning}");
                    }
                    println!(
                        "{}: ok (profile {})",
                        Path::new(&file).display(),
                        checked.policy.name
                    );
                    Ok(0)
                }
                Err(err) => Ok(invalid(&err)),
            }
        }
    }
}

/// Names and paths are text in the library's API; a path that is not UTF-8
/// can only be a file, so it goes to `load_file` directly.
fn load(spec: &OsString) -> Result<Policy, ProfileError> {
    match spec.to_str() {
        Some(text) => profile::load(text),
        None => profile::load_file(Path::new(spec)),
    }
}

/// Print the error and its causes on one line; the first part is
/// `FILE:LINE:COLUMN:` so editors can jump to it.
fn invalid(err: &ProfileError) -> i32 {
    let mut message = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    eprintln!("{message}");
    INVALID
}

fn list(json: bool) -> anyhow::Result<i32> {
    let names = profile::builtin_names();
    let describe = |name: &str| profile::builtin::description(name).unwrap_or_default();
    if json {
        let entries: Vec<serde_json::Value> = names
            .iter()
            .map(|name| serde_json::json!({ "name": name, "description": describe(name) }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        let width = names.iter().map(|n| n.len()).max().unwrap_or(0);
        for name in names {
            println!("{name:width$}  {}", describe(name));
        }
    }
    Ok(0)
}

fn show(policy: &Policy, json: bool) -> anyhow::Result<i32> {
    if json {
        println!("{}", serde_json::to_string_pretty(policy)?);
    } else {
        print!("{}", profile::to_toml(policy));
    }
    Ok(0)
}
