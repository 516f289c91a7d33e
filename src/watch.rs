//! `sandbox watch`: keep a project's walk current for the runs in it
//! (docs/src/performance.md, "Large projects").
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sandbox::project::watcher::{self, WatchOptions};

/// Arguments of `sandbox watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The project to watch (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// A profile whose walk to make before the first run asks (repeatable;
    /// default: every built-in profile). Runs under other profiles are
    /// answered too, after a walk for them.
    #[arg(long, value_name = "PROFILE")]
    pub profile: Vec<String>,
    /// Exit after this many minutes without a run asking.
    #[arg(long, value_name = "MINUTES", default_value_t = 60)]
    pub idle: u64,
}

/// The most watches a user may hold (`fs.inotify.max_user_watches`): the
/// watcher's budget, shared with every other program of the user.
fn user_watch_limit() -> usize {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(8192)
}

pub fn run(args: WatchArgs) -> anyhow::Result<i32> {
    let given = match args.project {
        Some(dir) => dir,
        None => std::env::current_dir().context("the current directory")?,
    };
    let project = std::fs::canonicalize(&given)
        .with_context(|| format!("the project {}", given.display()))?;
    let profiles: Vec<String> = if args.profile.is_empty() {
        sandbox::profile::builtin_names()
            .iter()
            .map(|name| name.to_string())
            .collect()
    } else {
        args.profile.clone()
    };
    let mut walk_ahead = Vec::new();
    for name in &profiles {
        let policy = sandbox::profile::load(name).with_context(|| format!("--profile {name}"))?;
        if let Some(rules) = policy.scan_rules() {
            if !walk_ahead.contains(&rules) {
                walk_ahead.push(rules);
            }
        }
    }
    let options = WatchOptions {
        walk_ahead,
        project: project.clone(),
        idle: Duration::from_secs(args.idle.saturating_mul(60)),
        budget: user_watch_limit(),
    };
    watcher::serve(&options, |socket| {
        eprintln!(
            "sandbox: watching {} for the runs in it (socket {}); stops after {} idle minutes",
            project.display(),
            socket.display(),
            args.idle
        );
    })
    .with_context(|| format!("watching {}", project.display()))?;
    Ok(0)
}
