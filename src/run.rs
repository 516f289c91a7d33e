//! `sandbox run`.
use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use sandbox::broker::secrets::SecretSpec;
use sandbox::profile::overrides::Overrides;
use sandbox::profile::policy::NetworkPolicy;
use sandbox::spawn::parent::LimitHit;
use sandbox::Report;

use super::UsageError;

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
    /// Keep every change the run makes to the project in a layer of its own, for
    /// `sandbox changes`, `sandbox apply` and `sandbox discard` (docs/src/review.md).
    #[arg(long)]
    pub review: bool,
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
    /// Override the profile's network: none, loopback (the sandbox's own only), host (no
    /// isolation), or allow:HOST[,HOST...] (a proxy to those hosts only; HOST is api.example.com,
    /// *.example.com, HOST:PORT or an address range such as 10.0.0.0/8:5432).
    #[arg(long, value_name = "MODE", value_parser = NetworkPolicy::from_spec)]
    pub net: Option<NetworkPolicy>,
    /// Resolve NAME to ADDRESS in the allowlist's proxy and the broker's net.http instead of
    /// asking DNS (repeatable); the address still passes their checks.
    #[arg(long = "resolve", value_name = "NAME=ADDRESS", value_parser = parse_pin)]
    pub resolve: Vec<(String, std::net::IpAddr)>,
    /// Set NAME=VALUE, or pass NAME from this environment (repeatable).
    #[arg(long = "env", short = 'e', value_name = "NAME[=VALUE]")]
    pub env: Vec<OsString>,
    /// Offer a secret to the broker: NAME=env:VAR or NAME=file:PATH, optionally @HOST[,HOST...]
    /// (repeatable). The sandbox gets a handle; net.http puts the value in place of the handle in
    /// request headers sent to those hosts only (entries as in --net allow:).
    #[arg(long = "secret", value_name = "NAME=SOURCE[@HOSTS]")]
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
    /// Write a signed in-toto statement of what the run enforced to FILE, with the
    /// project's state before and after it (docs/src/audit.md).
    #[arg(long, value_name = "FILE")]
    pub attest: Option<PathBuf>,
    /// Write the JSON report as one line to the inherited descriptor N, then close it
    /// (e.g. `--report-fd 3 3>report.json`); N must be open for writing; 1 and 2 are
    /// allowed when named, 0 is refused. The sandboxed command never inherits it.
    #[arg(long = "report-fd", value_name = "N", allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(0..))]
    pub report_fd: Option<i32>,
    /// Print the JSON report as one line on stderr, as its last line, after the command
    /// finishes (stdout stays the command's alone).
    #[arg(long)]
    pub json: bool,
    /// Do not print the supervisor's warnings on stderr (they stay in the report).
    #[arg(long, short = 'q', conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print each setup step on stderr as it happens, and the command's own view of its
    /// confinement (NoNewPrivs, capabilities, seccomp, namespaces) just before it starts.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Send the run to `sandbox daemon` instead of starting it here (--daemon=SOCKET, or a
    /// bare --daemon for $SANDBOX_DAEMON else the default socket; SANDBOX_DAEMON=SOCKET, or
    /// =1 for the default, does the same without the flag): the same output,
    /// exit status and report. Flags the daemon's API cannot carry are refused (exit 2).
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true,
          default_missing_value = "")]
    pub daemon: Option<String>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// A `--resolve NAME=ADDRESS`.
pub(crate) fn parse_pin(spec: &str) -> Result<(String, std::net::IpAddr), String> {
    let (name, address) = spec
        .split_once('=')
        .ok_or_else(|| format!("{spec:?}: expected NAME=ADDRESS, e.g. api.test=127.0.0.1"))?;
    sandbox::net::allow::check_name(name).map_err(|err| format!("{spec:?}: {err}"))?;
    let ip = address
        .parse()
        .map_err(|_| format!("{spec:?}: {address:?} is not an IP address"))?;
    Ok((name.to_ascii_lowercase(), ip))
}

pub(crate) fn absolute(path: &PathBuf, what: &str) -> anyhow::Result<PathBuf> {
    std::fs::canonicalize(path).with_context(|| usage(format!("{what} {}", path.display())))
}

pub(crate) fn usage(message: String) -> UsageError {
    UsageError(message)
}

/// Where `--report-fd` writes: stdout or stderr, borrowed, or an inherited
/// descriptor this process took over (closed once the report is written).
pub(crate) enum ReportFd {
    Standard(i32, std::os::fd::BorrowedFd<'static>),
    Inherited(i32, std::os::fd::OwnedFd),
}

/// Check an inherited descriptor named by `--report-fd` before anything
/// runs, so a typo costs nothing. 0 is refused: it is the supervisor's
/// stdin, which a report would never be meant for.
pub(crate) fn check_report_fd(fd: i32) -> anyhow::Result<ReportFd> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::os::fd::AsFd;
    let example = "open it for writing in the calling shell, e.g. `--report-fd 3 3>report.json`";
    if fd == 0 {
        return Err(usage(format!(
            "--report-fd 0: descriptor 0 is standard input; {example}"
        ))
        .into());
    }
    let not_open = |errno: nix::errno::Errno| {
        usage(format!(
            "--report-fd {fd}: not an open descriptor ({}); {example}",
            errno.desc()
        ))
    };
    // Taken over (and made close-on-exec) now: nothing the supervisor
    // starts may hold it (the sandboxed command gets every descriptor above
    // its own closed anyway).
    let report_fd = match sandbox::os::standard_stream(fd) {
        Some(stream) => ReportFd::Standard(fd, stream),
        None => ReportFd::Inherited(fd, sandbox::os::adopt_inherited(fd).map_err(not_open)?),
    };
    let borrowed = match &report_fd {
        ReportFd::Standard(_, stream) => *stream,
        ReportFd::Inherited(_, owned) => owned.as_fd(),
    };
    let flags = fcntl(borrowed, FcntlArg::F_GETFL).map_err(not_open)?;
    if OFlag::from_bits_truncate(flags) & OFlag::O_ACCMODE == OFlag::O_RDONLY {
        return Err(usage(format!(
            "--report-fd {fd}: the descriptor is open read-only; {example}"
        ))
        .into());
    }
    Ok(report_fd)
}

/// Write the one-line report to the descriptor and close it (unless it is
/// stdout or stderr), so a reader waiting for end-of-file gets it now.
pub(crate) fn write_report_fd(report_fd: ReportFd, line: &[u8]) -> anyhow::Result<()> {
    use std::os::fd::AsFd;
    let (fd, borrowed) = match &report_fd {
        ReportFd::Standard(fd, stream) => (*fd, *stream),
        ReportFd::Inherited(fd, owned) => (*fd, owned.as_fd()),
    };
    let mut written = 0;
    while written < line.len() {
        match nix::unistd::write(borrowed, &line[written..]) {
            Ok(n) => written += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(errno) => anyhow::bail!("writing the report to --report-fd {fd}: {}", errno.desc()),
        }
    }
    drop(report_fd);
    Ok(())
}

/// A local run (`--daemon` is dispatched to the client before this).
pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let report_fd = args.report_fd.map(check_report_fd).transpose()?;
    let mut policy = sandbox::profile::load(&args.profile)
        .with_context(|| usage(format!("--profile {}", args.profile)))?;
    // Each flag is checked here, where its name can be said; the policy
    // changes in one place (`Overrides::apply`), as the daemon's does.
    let mut overrides = Overrides {
        memory: args.memory,
        pids: args.pids,
        cpu: args.cpus,
        timeout: args.timeout,
        output: args.max_output,
        tmp_size: args.tmp_size,
        network: args.net.clone(),
        resolve: args.resolve.clone(),
        review: args.review,
        ..Overrides::default()
    };
    for path in &args.allow_read {
        overrides.read.push(absolute(path, "--allow-read")?);
    }
    for tool in &args.tools {
        if sandbox::profile::tools::find(tool).is_none() {
            eprintln!(
                "sandbox: --tool {tool}: unknown tool; the known tools are {}",
                sandbox::profile::tools::known_names()
            );
            return Ok(2);
        }
        overrides.tools.push(tool.clone());
    }
    for path in &args.allow_write {
        overrides.write.push(absolute(path, "--allow-write")?);
    }
    for grant in &args.grants {
        check_grant(grant)?;
        overrides.grants.push(grant.clone());
    }
    overrides
        .apply(&mut policy)
        .map_err(|err| usage(err.to_string()))?;
    // Before anything is opened: a supervisor that re-executes itself in a
    // delegated systemd scope must not leave half-prepared state behind.
    let limits = sandbox::cgroup::CgroupLimits {
        memory: policy.limits.memory,
        pids: policy.limits.pids,
        cpu: policy.limits.cpu,
    };
    let cgroups_off = policy.enforce.cgroups == sandbox::profile::policy::Enforcement::Off;
    // Read once for the scope, the run's cgroup and its warnings.
    let cgroup_layout = sandbox::cgroup::detect();
    if let Some(err) = sandbox::cgroup::scope::enter_delegated_scope(
        &cgroup_layout,
        &limits,
        cgroups_off,
        args.cgroup_parent.is_some(),
    ) {
        eprintln!("sandbox: warning: no delegated cgroup scope ({err}); going on without one");
    }
    // Opened now, before the payload runs, so it cannot swap the directory.
    let report_target = match &args.report {
        Some(path) => {
            let mut roots = policy.filesystem.write.clone();
            roots.push(match &args.project {
                Some(project) => project.clone(),
                None => std::env::current_dir()?,
            });
            Some(prepare_report(path, &roots, args.quiet)?)
        }
        None => None,
    };
    let attesting = match &args.attest {
        Some(path) => {
            let project = match &args.project {
                Some(project) => project.clone(),
                None => std::env::current_dir()?,
            };
            let mut roots = policy.filesystem.write.clone();
            roots.push(project.clone());
            Some(crate::attest::Attesting::start(
                path, &project, &roots, &policy, args.quiet,
            )?)
        }
        None => None,
    };
    let (program, rest) = args.command.split_first().context("no command given")?;
    let identity = git_identity(&policy.env, args.project.as_ref(), args.quiet)?;
    let mut command = sandbox::Command::new(program, policy);
    // Before `--env`, which wins.
    for (name, value) in &identity {
        command.env(name, value);
    }
    command.args(rest);
    if let Some(parent) = &args.cgroup_parent {
        command.cgroup_parent(parent);
    }
    command.cgroup_layout(cgroup_layout.clone());
    if let Some(audit) = &args.audit {
        command.audit(audit);
    }
    command.interactive(!args.non_interactive);
    command.verbose(args.verbose);
    for spec in &args.secrets {
        let secret = resolve_secret(spec)?;
        command.secret_for_hosts(secret.name, secret.value, secret.hosts);
    }
    project_and_env(&mut command, args.project.as_ref(), &args.env)?;

    let finished = command.run();
    let report = match (finished.report, &finished.result) {
        (Some(report), _) => Some(report),
        // The run failed before a plan existed; CI still gets a report that
        // says why, and claims nothing was enforced.
        (None, Err(err)) => Some(Report::refused(&args.profile, &err.to_string())),
        (None, Ok(_)) => None,
    };
    if let (Some(report), false) = (&report, args.quiet) {
        print_warnings_with(report.warnings(), Some(cgroup_layout));
    }
    let json = report
        .as_ref()
        .map_or(serde_json::Value::Null, Report::to_json);
    let line = deliver_report(&json, report_target.as_ref(), report_fd)?;
    if let Some(attesting) = attesting {
        attesting.finish(&json)?;
    }
    for message in report.iter().flat_map(limit_messages) {
        eprintln!("sandbox: {message}");
    }
    if let Some(kept) = report.as_ref().and_then(|r| r.review.as_ref()) {
        if kept.error.is_none() && (kept.changes > 0 || kept.limit_reached) {
            let store = sandbox::review::Store::user();
            if let Err(err) = store.save_report(&kept.id, line.as_bytes()) {
                eprintln!(
                    "sandbox: run {}: the report was not kept with its changes: {err}",
                    kept.id
                );
            }
        }
        eprintln!("{}", kept.notice());
    }
    let status = match finished.result {
        Ok(status) => status.as_shell_status(),
        Err(err) => {
            eprintln!("sandbox: {err}");
            err.exit_status()
        }
    };
    // Last on stderr, after everything the command and the supervisor said,
    // so a caller takes the last line; stdout stays the command's own.
    if args.json {
        eprintln!("{line}");
    }
    Ok(status)
}

/// `GIT_AUTHOR_*` and `GIT_COMMITTER_*` from the caller's git `user.name`
/// and `user.email` when the profile's `env.git_identity` asks for them
/// (never one the profile sets or passes itself). A project that is a git
/// repository without an identity to pass is said once on stderr: commits
/// made inside would get git's made-up author.
fn git_identity(
    env: &sandbox::profile::policy::EnvPolicy,
    project: Option<&PathBuf>,
    quiet: bool,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    if !env.git_identity {
        return Ok(Vec::new());
    }
    let project = match project {
        Some(project) => absolute(project, "--project")?,
        None => std::env::current_dir()?,
    };
    match sandbox::project::git_identity::read(&project) {
        Ok(identity) => Ok(identity
            .variables()
            .into_iter()
            .filter(|(name, _)| !env.set.contains_key(*name) && !env.pass.iter().any(|p| p == name))
            .map(|(name, value)| (name, value.to_owned()))
            .collect()),
        Err(err) => {
            if !quiet && project.join(".git").exists() {
                eprintln!(
                    "sandbox: note: no git identity to pass ({err}); commits made in this run \
                     get git's made-up author"
                );
            }
            Ok(Vec::new())
        }
    }
}

/// A run's warnings on stderr; the cgroup v1 fallback, a fact of the
/// machine for a user other than root, only the first time on this machine
/// (see `sandbox::cgroup::notice`). The report keeps every warning.
pub(crate) fn print_warnings(warnings: &[String]) {
    print_warnings_with(warnings, None);
}

/// [`print_warnings`] with the cgroup layout already detected, if any.
pub(crate) fn print_warnings_with(
    warnings: &[String],
    layout: Option<sandbox::cgroup::CgroupInfo>,
) {
    let mut layout = layout;
    for warning in warnings {
        let shown = if sandbox::cgroup::notice::is_fallback(warning) {
            let info = layout.get_or_insert_with(sandbox::cgroup::detect);
            sandbox::cgroup::notice::to_print(
                warning,
                info,
                nix::unistd::geteuid().is_root(),
                &sandbox::safe_file::state_dir(),
            )
        } else {
            Some(warning.clone())
        };
        if let Some(text) = shown {
            eprintln!("sandbox: warning: {text}");
        }
    }
}

/// Open the `--report` file now, before the payload runs, so it cannot swap
/// the directory; warn when it lies where the run can write.
pub(crate) fn prepare_report(
    path: &std::path::Path,
    writable_roots: &[PathBuf],
    quiet: bool,
) -> anyhow::Result<sandbox::safe_file::OutputTarget> {
    let target = sandbox::safe_file::OutputTarget::prepare(path, writable_roots)
        .with_context(|| usage("the report file (--report)".into()))?;
    if let (Some(root), false) = (target.inside_writable(), quiet) {
        eprintln!(
            "sandbox: warning: {}",
            sandbox::safe_file::inside_warning("report", path, root)
        );
    }
    Ok(target)
}

/// A `--secret NAME=env:VAR[@HOSTS]|file:PATH[@HOSTS]`, read from this
/// process's environment or files (the supervisor's, or the daemon
/// client's). HOSTS, after the last `@`, is a comma-separated list of
/// allowlist entries `net.http` may send the value to; a file path that
/// holds an `@` keeps working when what follows is no host list.
pub(crate) fn resolve_secret(spec: &str) -> anyhow::Result<SecretSpec> {
    let (name, source) = spec.split_once('=').with_context(|| {
        usage(format!(
            "--secret {spec}: expected NAME=env:VAR or NAME=file:PATH, each optionally @HOST[,HOST...]"
        ))
    })?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(usage(format!(
            "--secret {spec}: the name may hold letters, digits, _ and - only"
        ))
        .into());
    }
    let (value, hosts) = if let Some(rest) = source.strip_prefix("env:") {
        let (var, hosts) = match rest.rsplit_once('@') {
            Some((var, list)) => (var, parse_secret_hosts(name, list)?),
            None => (rest, Vec::new()),
        };
        let value = std::env::var(var)
            .with_context(|| usage(format!("--secret {name}: the variable {var} is not set")))?;
        (value, hosts)
    } else if let Some(rest) = source.strip_prefix("file:") {
        let (path, hosts, not_hosts) = match rest.rsplit_once('@') {
            Some((path, list)) => match parse_secret_hosts(name, list) {
                Ok(hosts) => (path, hosts, None),
                Err(err) => (rest, Vec::new(), Some(err)),
            },
            None => (rest, Vec::new(), None),
        };
        let value = std::fs::read_to_string(path)
            .with_context(|| {
                usage(match &not_hosts {
                    Some(err) => format!(
                        "--secret {name}: reading {path} (what follows its last @ is not a host list either: {err:#})"
                    ),
                    None => format!("--secret {name}: reading {path}"),
                })
            })?
            .trim_end_matches('\n')
            .to_string();
        (value, hosts)
    } else {
        return Err(usage(format!(
            "--secret {spec}: the source must be env:VAR or file:PATH"
        ))
        .into());
    };
    Ok(SecretSpec {
        name: name.to_string(),
        value,
        hosts,
    })
}

/// The hosts after a secret's `@`: allowlist entries, comma-separated.
fn parse_secret_hosts(name: &str, list: &str) -> anyhow::Result<Vec<String>> {
    if list.is_empty() {
        return Err(usage(format!(
            "--secret {name}: no host after @: write @HOST[,HOST...], e.g. @api.github.com"
        ))
        .into());
    }
    list.split(',')
        .map(|entry| {
            sandbox::broker::secrets::parse_binding(entry).map_err(|err| {
                usage(format!(
                    "--secret {name}: {err} (hosts are written as in --net allow:, e.g. \
                     api.github.com, *.example.com, host:8443)"
                ))
                .into()
            })
        })
        .collect()
}

/// Write the report where `--report` and `--report-fd` asked; its one-line
/// form, for `--json`.
pub(crate) fn deliver_report(
    report: &serde_json::Value,
    target: Option<&sandbox::safe_file::OutputTarget>,
    fd: Option<ReportFd>,
) -> anyhow::Result<String> {
    if let Some(target) = target {
        target
            .write_all(&serde_json::to_vec_pretty(report)?)
            .context("writing the report")?;
    }
    let line = serde_json::to_string(report)?;
    if let Some(fd) = fd {
        write_report_fd(fd, format!("{line}\n").as_bytes())?;
    }
    Ok(line)
}

/// A `--grant` value must name a broker action, with a non-empty pattern if any.
/// A `--grant` value that does not parse is a usage error (exit 2), for
/// `run`, `skill run` and `serve` alike.
pub fn check_grant(grant: &str) -> Result<(), UsageError> {
    grant
        .parse::<sandbox::action::Permission>()
        .map(|_| ())
        .map_err(|err| usage(format!("--grant {err}")))
}

/// What stderr says about each limit the run reached: which limit, what it
/// did to the run, and the flag and profile key that raise it. Read from
/// the report, so a local run and a daemon run say the same. The output
/// cap is not here: the relay says so the moment it is reached.
pub(crate) fn limit_messages(report: &Report) -> Vec<String> {
    let enforced = report.enforced.as_ref();
    let cgroup = enforced.and_then(|enforced| enforced.cgroup.as_ref());
    let resources = report.resources();
    let killed = report.exit.as_ref().and_then(|exit| exit.signal) == Some(libc::SIGKILL);
    let mut out = Vec::new();
    for hit in report.limits_hit() {
        match hit {
            LimitHit::Timeout => {
                if let Some(seconds) = enforced.and_then(|enforced| enforced.timeout_s) {
                    out.push(format!(
                        "killed: timeout {} exceeded (raise it with --timeout DURATION or the profile's [limits] timeout)",
                        sandbox::profile::format_duration(std::time::Duration::from_secs_f64(seconds))
                    ));
                }
            }
            LimitHit::Memory => {
                if let Some(memory) = cgroup.and_then(|cgroup| cgroup.memory) {
                    let memory = sandbox::profile::size::format_size(memory);
                    let raise = "raise it with --memory SIZE or the profile's [limits] memory";
                    out.push(if killed {
                        format!("killed: memory limit {memory} exceeded ({raise})")
                    } else {
                        // The OOM killer picks the largest process, often a
                        // worker: the command may live on and fail in its own words.
                        format!(
                            "memory limit {memory} reached: the kernel killed {} process(es) of the run ({raise})",
                            resources.map_or(0, |used| used.oom_kills)
                        )
                    });
                }
            }
            LimitHit::Pids => {
                if let Some(pids) = cgroup.and_then(|cgroup| cgroup.pids) {
                    out.push(format!(
                        "pids limit {pids} reached: {} fork(s) or new thread(s) failed (raise it with --pids N or the profile's [limits] pids)",
                        resources.map_or(0, |used| used.pids_limit_hits)
                    ));
                }
            }
            LimitHit::Output => {}
        }
    }
    out
}

/// `--project` (the working directory kept when it is inside the project)
/// and `--env NAME=VALUE` or `--env NAME` (passed from here, or removed
/// when unset here), as `sandbox run` and `sandbox learn` take them.
pub(crate) fn project_and_env(
    command: &mut sandbox::Command,
    project: Option<&std::path::PathBuf>,
    env: &[OsString],
) -> anyhow::Result<()> {
    if let Some(project) = project {
        command.project(project);
        let cwd = std::env::current_dir()?;
        if cwd.starts_with(absolute(project, "--project")?) {
            command.current_dir(cwd);
        }
    }
    for entry in env {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_text(spec: &str) -> String {
        let err = resolve_secret(spec).expect_err("refused");
        assert!(
            err.downcast_ref::<UsageError>().is_some(),
            "a usage error: {err:#}"
        );
        format!("{err:#}")
    }

    #[test]
    fn a_secret_takes_hosts_after_its_last_at() {
        let path = std::env::var("PATH").unwrap();
        let secret = resolve_secret("T=env:PATH@API.GitHub.com,*.example.com:8443").unwrap();
        assert_eq!(secret.name, "T");
        assert_eq!(secret.value, path);
        assert_eq!(secret.hosts, ["api.github.com", "*.example.com:8443"]);
        assert!(resolve_secret("T=env:PATH").unwrap().hosts.is_empty());
    }

    #[test]
    fn a_bad_host_list_is_a_precise_usage_error() {
        for (spec, says) in [
            ("T=env:PATH@", "no host after @"),
            ("T=env:PATH@bad host", "\"bad host\" is not a host entry"),
            ("T=env:PATH@api.test,", "empty"),
            ("T=env:PATH@api.test:0", "port"),
            ("T=file:/nonexistent/tok@bad host", "not a host list either"),
        ] {
            let message = usage_text(spec);
            assert!(message.contains(says), "{spec}: {message}");
        }
    }

    #[test]
    fn a_file_path_holding_an_at_keeps_working() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("me@host");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("token"), "tok\n").unwrap();
        let path = folder.join("token");
        let secret = resolve_secret(&format!("T=file:{}", path.display())).unwrap();
        assert_eq!((secret.value.as_str(), secret.hosts.len()), ("tok", 0));
        let secret = resolve_secret(&format!("T=file:{}@api.test", path.display())).unwrap();
        assert_eq!(secret.value, "tok");
        assert_eq!(secret.hosts, ["api.test"]);
    }
}
