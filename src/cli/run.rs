//! `sandbox run`.
use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use sandbox::profile::policy::NetworkMode;

/// Network choices on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum NetArg {
    /// No network (a new namespace with loopback down).
    None,
    /// Only the sandbox's own loopback.
    Loopback,
    /// The host's network (no isolation).
    Host,
}

/// Arguments of `sandbox run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Built-in profile name or path to a profile file.
    #[arg(long, short = 'p', default_value = "strict", value_name = "NAME|PATH")]
    pub profile: String,
    /// The project root, writable inside and the working directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Make a host path visible read-only (repeatable).
    #[arg(long = "allow-read", value_name = "PATH")]
    pub allow_read: Vec<PathBuf>,
    /// Expose a built-in toolchain read-only (rust, node, python; repeatable), as `[tools] expose`.
    #[arg(long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
    /// Make a host directory visible read-write (repeatable).
    #[arg(long = "allow-write", value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    // The limits go through the profile's own checks (profile::size), so a
    // flag and a profile value have one range and one wording, and a bad
    // value is clap's exit 2 naming the flag. Hyphen values are taken so
    // that `--pids -1` gets that message instead of "unexpected argument".
    /// Wall-clock limit (e.g. 30s, 10m; at most 365d): SIGTERM to the whole run, SIGKILL 2 s later.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true,
          value_parser = sandbox::profile::size::timeout_flag)]
    pub timeout: Option<std::time::Duration>,
    /// Memory limit (e.g. 512MiB; at least 1MiB); swap is not allowed on top.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true,
          value_parser = sandbox::profile::size::memory_flag)]
    pub memory: Option<u64>,
    /// Most processes and threads at once (1 to 4194304).
    #[arg(long, value_name = "N", allow_hyphen_values = true,
          value_parser = sandbox::profile::size::pids_flag)]
    pub pids: Option<u64>,
    /// CPU share in cores (0.5 = half a core; at most 1024).
    #[arg(long, value_name = "FRACTION", allow_hyphen_values = true,
          value_parser = sandbox::profile::size::cpus_flag)]
    pub cpus: Option<f64>,
    /// Cap on stdout and stderr together (e.g. 1MiB); the rest is dropped with a notice.
    #[arg(long = "max-output", value_name = "SIZE", allow_hyphen_values = true,
          value_parser = sandbox::profile::size::output_flag)]
    pub max_output: Option<u64>,
    /// Size of the private /tmp and /dev/shm (e.g. 256MiB; at most 64GiB).
    #[arg(long = "tmp-size", value_name = "SIZE", allow_hyphen_values = true,
          value_parser = sandbox::profile::size::tmp_flag)]
    pub tmp_size: Option<u64>,
    /// Create the run's cgroup below this (delegated) cgroup directory instead of the supervisor's own.
    #[arg(long = "cgroup-parent", value_name = "PATH")]
    pub cgroup_parent: Option<PathBuf>,
    /// Override the profile's network mode.
    #[arg(long, value_enum)]
    pub net: Option<NetArg>,
    /// Set NAME=VALUE, or pass NAME from this environment (repeatable).
    #[arg(long = "env", short = 'e', value_name = "NAME[=VALUE]")]
    pub env: Vec<OsString>,
    /// Offer a secret to the broker's secrets.get: NAME=env:VAR or NAME=file:PATH (repeatable).
    #[arg(long = "secret", value_name = "NAME=SOURCE")]
    pub secrets: Vec<String>,
    /// Never prompt: broker actions that would ask are denied (as without a terminal).
    #[arg(long = "non-interactive")]
    pub non_interactive: bool,
    /// Pre-approve a broker action for this run (repeatable), e.g. --grant fs.write.
    #[arg(long = "grant", value_name = "ACTION")]
    pub grants: Vec<String>,
    /// Append one JSON line per broker request (decision, rule, target) to FILE.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// Write the run's JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Print the JSON report on stdout after the command finishes.
    #[arg(long)]
    pub json: bool,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn absolute(path: &PathBuf, what: &str) -> anyhow::Result<PathBuf> {
    std::fs::canonicalize(path).with_context(|| format!("{what} {}", path.display()))
}

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let mut policy = sandbox::profile::load(&args.profile)
        .with_context(|| format!("loading profile {}", args.profile))?;
    for path in &args.allow_read {
        policy.filesystem.read.push(absolute(path, "--allow-read")?);
    }
    for tool in &args.tools {
        if sandbox::profile::tools::find(tool).is_none() {
            eprintln!(
                "sandbox: --tool {tool}: unknown tool; the known tools are {}",
                sandbox::profile::tools::known_names()
            );
            return Ok(2);
        }
        if !policy.tools.contains(tool) {
            policy.tools.push(tool.clone());
        }
    }
    for path in &args.allow_write {
        policy
            .filesystem
            .write
            .push(absolute(path, "--allow-write")?);
    }
    if let Some(memory) = args.memory {
        policy.limits.memory = Some(memory);
    }
    if let Some(pids) = args.pids {
        policy.limits.pids = Some(pids);
    }
    if let Some(cpus) = args.cpus {
        policy.limits.cpu = Some(cpus);
    }
    for grant in &args.grants {
        check_grant(grant)?;
        policy
            .broker
            .rules
            .insert(grant.clone(), sandbox::profile::policy::Decision::Allow);
    }
    if let Some(output) = args.max_output {
        policy.limits.output = Some(output);
    }
    if let Some(tmp) = args.tmp_size {
        policy.filesystem.tmp_size = tmp;
    }
    if let Some(timeout) = args.timeout {
        policy.limits.timeout = Some(timeout);
    }
    if let Some(net) = args.net {
        policy.network.mode = match net {
            NetArg::None => NetworkMode::None,
            NetArg::Loopback => NetworkMode::Loopback,
            NetArg::Host => NetworkMode::Host,
        };
    }
    // Opened now, before the payload runs, so it cannot swap the directory.
    let report_target = match &args.report {
        Some(path) => {
            let mut roots = policy.filesystem.write.clone();
            roots.push(match &args.project {
                Some(project) => project.clone(),
                None => std::env::current_dir()?,
            });
            let target = sandbox::safe_file::OutputTarget::prepare(path, &roots)
                .with_context(|| "the report file (--report)")?;
            if let Some(root) = target.inside_writable() {
                eprintln!(
                    "sandbox: warning: {}",
                    sandbox::safe_file::inside_warning("report", path, root)
                );
            }
            Some(target)
        }
        None => None,
    };
    let policy_timeout = policy.limits.timeout;
    let (program, rest) = args.command.split_first().context("no command given")?;
    let policy_memory = policy.limits.memory;
    let policy_pids = policy.limits.pids;
    let mut command = sandbox::Command::new(program, policy);
    command.args(rest);
    if let Some(parent) = &args.cgroup_parent {
        command.cgroup_parent(parent);
    }
    if let Some(audit) = &args.audit {
        command.audit(audit);
    }
    command.interactive(!args.non_interactive);
    for spec in &args.secrets {
        let (name, source) = spec
            .split_once('=')
            .with_context(|| format!("--secret {spec}: expected NAME=env:VAR or NAME=file:PATH"))?;
        anyhow::ensure!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "--secret {spec}: the name may hold letters, digits, _ and - only"
        );
        let value = if let Some(var) = source.strip_prefix("env:") {
            std::env::var(var)
                .with_context(|| format!("--secret {name}: the variable {var} is not set"))?
        } else if let Some(path) = source.strip_prefix("file:") {
            std::fs::read_to_string(path)
                .with_context(|| format!("--secret {name}: reading {path}"))?
                .trim_end_matches('\n')
                .to_string()
        } else {
            anyhow::bail!("--secret {spec}: the source must be env:VAR or file:PATH");
        };
        command.secret(name, value);
    }
    if let Some(project) = &args.project {
        command.project(project);
        let cwd = std::env::current_dir()?;
        if cwd.starts_with(absolute(project, "--project")?) {
            command.current_dir(cwd);
        }
    }
    for entry in &args.env {
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(entry.as_os_str());
        match bytes.iter().position(|b| *b == b'=') {
            Some(eq) => {
                use std::os::unix::ffi::OsStrExt;
                command.env(
                    std::ffi::OsStr::from_bytes(&bytes[..eq]),
                    std::ffi::OsStr::from_bytes(&bytes[eq + 1..]),
                );
            }
            None => match std::env::var_os(entry) {
                Some(value) => {
                    command.env(entry, value);
                }
                None => {
                    command.env_remove(entry);
                }
            },
        }
    }

    let finished = command.run();
    if let (None, Err(err), Some(target)) = (&finished.report, &finished.result, &report_target) {
        // The run failed before a plan existed; CI still gets a report that says why.
        let json = serde_json::json!({ "version": 1, "profile": args.profile, "exit": null, "error": err.to_string() });
        target
            .write_all(&serde_json::to_vec_pretty(&json)?)
            .context("writing the report")?;
    }
    if let Some(report) = &finished.report {
        for warning in &report.warnings {
            eprintln!("sandbox: warning: {warning}");
        }
        if let Some(target) = &report_target {
            let json = serde_json::to_vec_pretty(report)?;
            target.write_all(&json).context("writing the report")?;
        }
        if args.json {
            println!("{}", serde_json::to_string(report)?);
        }
    }
    if let Some(report) = &finished.report {
        use sandbox::spawn::parent::LimitHit;
        for hit in &report.limits_hit {
            match (hit, policy_timeout, policy_memory, policy_pids) {
                (LimitHit::Timeout, Some(timeout), _, _) => {
                    eprintln!(
                        "sandbox: killed: timeout {} exceeded",
                        sandbox::profile::format_duration(timeout)
                    )
                }
                (LimitHit::Memory, _, Some(memory), _) => {
                    eprintln!("sandbox: killed: memory limit {}MiB exceeded", memory >> 20)
                }
                (LimitHit::Pids, _, _, Some(pids)) => {
                    eprintln!("sandbox: pids limit {pids} reached: a fork or new thread failed")
                }
                _ => {}
            }
        }
    }
    match finished.result {
        Ok(status) => Ok(status.as_shell_status()),
        Err(err) => {
            eprintln!("sandbox: {err}");
            Ok(err.exit_status())
        }
    }
}

/// A `--grant` value must name a broker action, with a non-empty pattern if any.
pub fn check_grant(grant: &str) -> anyhow::Result<()> {
    grant
        .parse::<sandbox::action::Permission>()
        .map(|_| ())
        .map_err(|err| anyhow::anyhow!("--grant {err}"))
}
