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
    /// Watch at most this many directories and files (default: the user's
    /// `fs.inotify.max_user_watches`, which every program of the user shares).
    #[arg(long, value_name = "N")]
    pub max_watches: Option<usize>,
    /// Exit when the process PID exits (what `sandbox serve` passes for the
    /// watcher it starts).
    #[arg(long, value_name = "PID", hide = true)]
    pub exit_with: Option<i32>,
    /// Start the watcher in the background and return at once; it is
    /// nobody's child, so nothing has to wait for it.
    #[arg(long, hide = true)]
    pub detach: bool,
}

/// The most watches a user may hold (`fs.inotify.max_user_watches`): the
/// watcher's budget, shared with every other program of the user.
pub fn user_watch_limit() -> usize {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(8192)
}

pub fn run(args: WatchArgs) -> anyhow::Result<i32> {
    if args.detach {
        let again: Vec<std::ffi::OsString> = std::env::args_os()
            .skip(1)
            .filter(|arg| arg != "--detach")
            .collect();
        std::process::Command::new("/proc/self/exe")
            .args(again)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting the watcher")?;
        return Ok(0);
    }
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
        budget: args.max_watches.unwrap_or_else(user_watch_limit),
        exit_with: args.exit_with,
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
