//! `sandbox serve --stdio` and `sandbox serve --mcp`: skills for an agent
//! host over stdin and stdout.
use std::os::fd::AsFd;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use sandbox::skill::{manifest, serve};

/// Arguments of `sandbox serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Speak serve's own JSON-RPC 2.0 on stdin and stdout, one message per line.
    #[arg(long, required_unless_present = "mcp", conflicts_with = "mcp")]
    pub stdio: bool,
    /// Speak the Model Context Protocol on stdin and stdout: every skill is
    /// a tool, and questions go to the person through the host.
    #[arg(long)]
    pub mcp: bool,
    /// With --mcp: also offer the `shell` tool, which runs a command line
    /// under the profile with the project as working directory.
    #[arg(long, requires = "mcp")]
    pub shell: bool,
    #[command(flatten)]
    pub roots: super::skill::Roots,
    /// Pre-approve a broker action for every skill (repeatable); each skill
    /// still gets only what it declares.
    #[arg(long = "grant", value_name = "ACTION[:PATTERN]")]
    pub grants: Vec<String>,
    /// Append one JSON line per broker request of any skill to FILE.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// Put questions ("ask" decisions) to the client as `skill.ask`
    /// requests instead of denying them.
    #[arg(long)]
    pub ask_client: bool,
    /// How long a question put to the client waits for its answer before
    /// it counts as a deny (e.g. 90s, 10m; default 60s). `--mcp` asks the
    /// client whatever this says of `--ask-client`.
    #[arg(long, value_name = "DURATION", default_value = "60s",
          value_parser = sandbox::profile::size::timeout_flag)]
    pub question_timeout: std::time::Duration,
    /// Do not start a watcher of the project (`sandbox watch`) for the runs
    /// this serves; each run then walks the project itself.
    #[arg(long)]
    pub no_watch: bool,
}

/// `sandbox serve --stdio`; `--mcp` is the face of src/bin/sandbox-mcp.rs.
pub fn run(args: ServeArgs) -> anyhow::Result<i32> {
    let options = options(args)?;
    let stdout = std::io::stdout().as_fd().try_clone_to_owned()?;
    let stdin = std::io::stdin().as_fd().try_clone_to_owned()?;
    let server = serve::Server::new(options, stdout);
    server.run(stdin).context("serving skills")?;
    Ok(0)
}

/// What both protocols serve: the skills, profile, grants and audit file
/// the arguments name.
pub fn options(args: ServeArgs) -> anyhow::Result<serve::ServeOptions> {
    // Agent hosts start MCP servers with almost no environment. Skill
    // roots, the grant store and the client libraries' cache all live
    // below the person's home, so without HOME it is the account's own
    // (set while this process still has one thread), from /etc/passwd.
    if std::env::var_os("HOME").is_none() {
        if let Some(home) = sandbox::project::home::home_of_uid(nix::unistd::getuid().as_raw()) {
            std::env::set_var("HOME", home);
        }
    }
    for grant in &args.grants {
        super::run::check_grant(grant)?;
    }
    let project = super::skill::project_of(&args.roots)?;
    let roots = manifest::roots(&args.roots.skills_dirs, &project);
    let (profile, profile_spec) = args.roots.profile()?;
    if !args.no_watch {
        start_watcher(&project, &profile_spec);
    }
    let audit = match &args.audit {
        Some(path) => Some(std::path::absolute(path).context("--audit")?),
        None => None,
    };
    Ok(serve::ServeOptions {
        roots,
        profile,
        profile_spec,
        project,
        grants: args.grants,
        audit,
        // The running binary, even if the file was replaced since it started.
        host_program: PathBuf::from("/proc/self/exe"),
        ask_client: args.ask_client,
        question_timeout: args.question_timeout,
        prepare_ahead: true,
    })
}

/// Start `sandbox watch` for the project, for as long as this process
/// runs: an agent host sends many commands into one project, and without a
/// watcher each of them walks it (a third of a second in a tree of 100,000
/// files). A watcher already running for the project answers instead (the
/// new one sees its socket and exits), and one that cannot watch (too many
/// files, a network filesystem) exits and leaves the runs to walk. It takes
/// at most half of the user's inotify watches, which editors and build
/// tools share.
fn start_watcher(project: &std::path::Path, profile_spec: &str) {
    let budget = (super::watch::user_watch_limit() / 2).to_string();
    let started = std::process::Command::new("/proc/self/exe")
        .arg("watch")
        .arg("--project")
        .arg(project)
        .args(["--profile", profile_spec, "--max-watches", &budget])
        .args(["--exit-with", &std::process::id().to_string(), "--detach"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    // Without a watcher each run walks the project, and says so in its
    // report (`scan_source`): nothing is weaker, only slower.
    drop(started);
}
