//! The library entry point, shaped like [`std::process::Command`].

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::broker::terminal::{NestedCommand, NestedExit, NestedFailure, NestedRun, NestedRunner};
use crate::profile::policy::Policy;
use crate::spawn::channel::PayloadExit;
use crate::spawn::parent;
use crate::spawn::prepare::{StartInputs, Supervision};
use crate::spawn::report::Report;
use crate::spawn::{Prepared, SpawnError, SpawnSpec, Stdio};

/// A command to run in a sandbox.
///
/// Defaults: the project root and working directory are the current
/// directory; the environment is exactly the policy's (nothing is inherited
/// unless the policy passes it); stdin, stdout and stderr are inherited.
///
/// ```no_run
/// let policy = sandbox::profile::load("strict")?;
/// let status = sandbox::Command::new("make", policy).arg("test").status()?;
/// assert!(status.success());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Command {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    project: Option<PathBuf>,
    policy: Policy,
    stdio: [Stdio; 3],
    cgroup_parent: Option<PathBuf>,
    cgroup_layout: Option<crate::cgroup::CgroupInfo>,
    audit: Option<PathBuf>,
    interactive: bool,
    secrets: Vec<crate::broker::secrets::SecretSpec>,
    skill: Option<crate::spawn::prepare::SkillCaller>,
    read_only_extra: Vec<(PathBuf, PathBuf)>,
    review_stack: Option<crate::review::stack::Stack>,
    verbose: bool,
    dry_run: bool,
    asker: Option<Box<dyn crate::broker::prompt::Asker>>,
    grant_store: crate::broker::grants::StoreChoice,
    review_store: Option<PathBuf>,
    audit_file: Option<std::fs::File>,
    warm_commit: Option<std::os::fd::OwnedFd>,
    learning: Option<crate::learn::Learning>,
}

/// How a sandboxed command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus(PayloadExit);

impl ExitStatus {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.0 == PayloadExit::Code(0)
    }
    /// The exit code, unless a signal killed the command.
    pub fn code(&self) -> Option<i32> {
        match self.0 {
            PayloadExit::Code(code) => Some(code),
            PayloadExit::Signal(_) => None,
        }
    }
    /// The signal that killed the command.
    pub fn signal(&self) -> Option<i32> {
        match self.0 {
            PayloadExit::Signal(signal) => Some(signal),
            PayloadExit::Code(_) => None,
        }
    }
    /// The shell convention: the code, or 128 + the signal number.
    pub fn as_shell_status(&self) -> i32 {
        self.0.as_status()
    }
}

/// A finished run: the result and the report of what was enforced.
#[derive(Debug)]
pub struct Finished {
    /// How the command ended, or why it could not run.
    pub result: Result<ExitStatus, SpawnError>,
    /// The report (also filled in when the run failed after preparation).
    pub report: Option<Report>,
}

impl Command {
    /// A command running `program` under `policy`.
    pub fn new(program: impl AsRef<OsStr>, policy: Policy) -> Command {
        Command {
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            project: None,
            policy,
            stdio: [Stdio::Inherit, Stdio::Inherit, Stdio::Inherit],
            cgroup_parent: None,
            cgroup_layout: None,
            audit: None,
            interactive: false,
            secrets: Vec::new(),
            skill: None,
            read_only_extra: Vec::new(),
            review_stack: None,
            verbose: false,
            dry_run: false,
            asker: None,
            grant_store: crate::broker::grants::StoreChoice::Default,
            review_store: None,
            audit_file: None,
            warm_commit: None,
            learning: None,
        }
    }

    /// Make this a learning run (`sandbox learn`, see [`crate::learn`]):
    /// as confined as without, and what the command looked for outside
    /// its view, or tried to write there, lands in `learning.observed`.
    pub fn learn(&mut self, learning: crate::learn::Learning) -> &mut Command {
        self.learning = Some(learning);
        self
    }

    /// Make host path `host` visible read-only at `inside` (mounted by the
    /// supervisor, so it works where the sandbox's user cannot reach it).
    pub fn read_only(&mut self, host: impl AsRef<Path>, inside: impl AsRef<Path>) -> &mut Command {
        self.read_only_extra
            .push((host.as_ref().to_path_buf(), inside.as_ref().to_path_buf()));
        self
    }

    /// Run as one attempt of a recipe's step: review mode over the
    /// project with the recipe's accumulated layer above it, the attempt's
    /// own layer kept where `stack` says (see [`crate::review::stack`]).
    /// The policy must ask for review mode.
    pub fn review_stack(&mut self, stack: crate::review::stack::Stack) -> &mut Command {
        self.review_stack = Some(stack);
        self
    }

    /// Run a skill: the broker names it in the audit log and grants, and
    /// refuses whatever its manifest did not declare.
    pub fn skill(&mut self, skill: crate::spawn::prepare::SkillCaller) -> &mut Command {
        self.skill = Some(skill);
        self
    }
    /// Add an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Command {
        self.args.push(arg.as_ref().to_os_string());
        self
    }
    /// Add arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }
    /// Set an environment variable (on top of the policy's environment).
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Command {
        self.env.push((
            key.as_ref().to_os_string(),
            Some(value.as_ref().to_os_string()),
        ));
        self
    }
    /// Remove an environment variable the policy would set.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Command {
        self.env.push((key.as_ref().to_os_string(), None));
        self
    }
    /// The working directory inside the sandbox (must be inside the project root).
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.cwd = Some(dir.as_ref().to_path_buf());
        self
    }
    /// The project root (default: the current directory).
    pub fn project(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.project = Some(dir.as_ref().to_path_buf());
        self
    }
    /// Create the run's cgroup below this delegated cgroup directory
    /// instead of below the supervisor's own cgroup.
    pub fn cgroup_parent(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.cgroup_parent = Some(dir.as_ref().to_path_buf());
        self
    }
    /// The cgroup layout this process found moments ago
    /// ([`crate::cgroup::detect`]), for the run to create its cgroup by
    /// instead of reading `/proc/self/mountinfo` again: the kernel formats
    /// that file anew on every read, and a one-shot supervisor that also
    /// needs the layout for its delegated scope and its warnings read it
    /// three times a run. A long-lived caller should not keep one: mounts
    /// and cgroups change.
    pub fn cgroup_layout(&mut self, layout: crate::cgroup::CgroupInfo) -> &mut Command {
        self.cgroup_layout = Some(layout);
        self
    }
    /// Let broker decisions that are "ask" prompt on the controlling
    /// terminal (off by default: a library caller decides when a person is
    /// there; without a terminal, ask means deny).
    pub fn interactive(&mut self, interactive: bool) -> &mut Command {
        self.interactive = interactive;
        self
    }
    /// Make a secret available to the broker's `secrets.get` under `name`.
    pub fn secret(&mut self, name: impl Into<String>, value: impl Into<String>) -> &mut Command {
        self.secrets
            .push(crate::broker::secrets::SecretSpec::unbound(name, value));
        self
    }
    /// Make a secret available as [`Command::secret`] does, and let the
    /// broker's `net.http` put its value in place of its handle in request
    /// headers sent to `hosts` (allowlist entries: `api.example.com`,
    /// `*.example.com:8443`), and nowhere else.
    pub fn secret_for_hosts(
        &mut self,
        name: impl Into<String>,
        value: impl Into<String>,
        hosts: Vec<String>,
    ) -> &mut Command {
        self.secrets.push(crate::broker::secrets::SecretSpec {
            name: name.into(),
            value: value.into(),
            hosts,
        });
        self
    }
    /// Print each setup step on stderr as it happens, and the payload's own
    /// view of its confinement just before exec (`sandbox run -v`).
    /// Do every setup step up to and including the seccomp filter, then
    /// exit 0 instead of executing the program: `sandbox doctor`'s verdict
    /// is this, on the same path as `run`.
    pub fn dry_run(&mut self, dry_run: bool) -> &mut Command {
        self.dry_run = dry_run;
        self
    }

    /// Print each setup step on stderr as it happens.
    pub fn verbose(&mut self, verbose: bool) -> &mut Command {
        self.verbose = verbose;
        self
    }
    /// Append one JSON line per broker request to this file.
    pub fn audit(&mut self, file: impl AsRef<Path>) -> &mut Command {
        self.audit = Some(file.as_ref().to_path_buf());
        self
    }
    /// Where stdin comes from.
    pub fn stdin(&mut self, stdio: Stdio) -> &mut Command {
        self.stdio[0] = stdio;
        self
    }
    /// Where stdout goes.
    pub fn stdout(&mut self, stdio: Stdio) -> &mut Command {
        self.stdio[1] = stdio;
        self
    }
    /// Where stderr goes.
    pub fn stderr(&mut self, stdio: Stdio) -> &mut Command {
        self.stdio[2] = stdio;
        self
    }
    /// The policy this command runs under.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Who answers the broker's "ask" decisions instead of a person on the
    /// terminal (`sandbox daemon` asks through its approval API).
    pub fn asker(&mut self, asker: Box<dyn crate::broker::prompt::Asker>) -> &mut Command {
        self.asker = Some(asker);
        self
    }

    /// Append the broker's audit lines to this open file (instead of a
    /// path opened when the run starts).
    pub fn audit_file(&mut self, file: std::fs::File) -> &mut Command {
        self.audit_file = Some(file);
        self
    }

    /// Which stored grants the run uses (default: the supervisor user's store).
    pub fn grant_store(&mut self, store: crate::broker::grants::StoreChoice) -> &mut Command {
        self.grant_store = store;
        self
    }

    /// Where a review run keeps its changes (default: the user's own
    /// store, [`crate::review::Store::user`]). The daemon gives each caller
    /// a store of their own.
    pub fn review_store(&mut self, root: impl Into<PathBuf>) -> &mut Command {
        self.review_store = Some(root.into());
        self
    }

    /// Make this a warm run: the payload applies every layer, then waits
    /// on `sock` for its command ([`Child::commit_warm`]).
    pub fn warm_commit(&mut self, sock: std::os::fd::OwnedFd) -> &mut Command {
        self.warm_commit = Some(sock);
        self
    }

    /// Run to completion and return the exit status.
    pub fn status(&mut self) -> Result<ExitStatus, SpawnError> {
        self.run().result
    }

    /// Start the command and return a handle to it. Unlike
    /// `std::process::Child`, dropping the handle without waiting kills the
    /// run: nothing of a sandboxed run outlives it.
    pub fn spawn(&mut self) -> Result<Child, SpawnError> {
        let (mut prepared, inputs) = self.prepare()?;
        let running = parent::start(&mut prepared, inputs)?;
        Ok(Child {
            running,
            prepared,
            policy: self.policy.clone(),
            command: self.command_line(),
        })
    }

    /// The run's plan and configuration, and what its start consumes (the
    /// descriptors and one-use handles given to this command).
    fn prepare(&mut self) -> Result<(Prepared, StartInputs), SpawnError> {
        let project_explicit = self.project.is_some();
        let project = match self.project.clone() {
            Some(project) => project,
            None => std::env::current_dir().map_err(|source| SpawnError::Path {
                what: "current directory",
                path: ".".into(),
                source,
            })?,
        };
        let spec = SpawnSpec {
            program: self.program.clone(),
            args: self.args.clone(),
            project,
            project_explicit,
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            dry_run: self.dry_run,
            read_only_extra: self.read_only_extra.clone(),
            review_stack: self.review_stack.clone(),
        };
        // Toolchains named in the profile become concrete read paths and
        // variables here, below the caller's home directory.
        let mut policy = self.policy.clone();
        crate::profile::tools::expose(&mut policy, crate::profile::tools::home().as_deref())
            .map_err(|err| SpawnError::Invalid(err.to_string()))?;
        let stdio = std::mem::take(&mut self.stdio);
        let supervision = Supervision {
            cgroup_parent: self.cgroup_parent.clone(),
            cgroup_layout: self.cgroup_layout.clone(),
            audit: self.audit.clone(),
            interactive: self.interactive,
            grant_store: self.grant_store.clone(),
            review_store: self.review_store.clone(),
            secrets: self.secrets.clone(),
            skill: self.skill.clone(),
            verbose: self.verbose,
            // terminal.run gets the same sandbox, never a weaker one.
            nested: Some(std::sync::Arc::new(NestedSandbox {
                policy: policy.clone(),
                audit: self.audit.clone(),
                audit_file: self.audit_file.as_ref().and_then(|f| f.try_clone().ok()),
            })),
            learning: self.learning.clone(),
        };
        let prepared = Prepared::new(&policy, spec, supervision)?;
        let inputs = StartInputs {
            stdio,
            warm_commit: self.warm_commit.take(),
            asker: self.asker.take(),
            audit_file: self.audit_file.take(),
        };
        Ok((prepared, inputs))
    }

    /// Run to completion and return the status with the full report.
    pub fn run(&mut self) -> Finished {
        let (mut prepared, inputs) = match self.prepare() {
            Ok(prepared) => prepared,
            Err(err) => {
                return Finished {
                    result: Err(err),
                    report: None,
                }
            }
        };
        let (outcome, measured) = parent::run_measured(&mut prepared, inputs);
        let outcome = outcome.map_err(|err| where_on_host(err, &prepared));
        let report = Report::build(
            &self.policy,
            &prepared,
            self.command_line(),
            &outcome,
            measured.as_ref(),
        );
        Finished {
            result: outcome.map(|o| ExitStatus(o.exit)),
            report: Some(report),
        }
    }

    fn command_line(&self) -> Vec<String> {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }
}

/// A running sandboxed command.
#[derive(Debug)]
pub struct Child {
    running: parent::Running,
    prepared: Prepared,
    policy: Policy,
    command: Vec<String>,
}

impl Child {
    /// The host pid of the sandbox's init process (PID 1 inside the sandbox).
    pub fn id(&self) -> u32 {
        self.running.init_pid().as_raw() as u32
    }

    /// Kill every process of the run.
    pub fn kill(&mut self) -> Result<(), SpawnError> {
        self.running.kill()
    }

    /// Whether the run is in review mode: its changes are kept in a layer
    /// of its own, captured once every process of it is gone (the report's
    /// `review`).
    pub fn reviews(&self) -> bool {
        self.policy.filesystem.review
    }

    /// Wait until the run is over (every process gone) and return the
    /// status with the report.
    pub fn wait(self) -> Finished {
        self.finish(None)
    }

    /// [`Child::wait`], with `driver` talking to the program over its
    /// broker channel meanwhile (a skill host sending invocations).
    pub fn wait_driven(self, driver: &mut dyn parent::Driver) -> Finished {
        self.finish(Some(driver))
    }

    /// Give a warm run its command, from now on in force for its report,
    /// broker, timeout (`policy.limits.timeout`) and output cap
    /// (`policy.limits.output`); the caller then sends `commit` on the
    /// warm run's socket.
    pub fn commit_warm(
        &mut self,
        commit: &crate::spawn::warm::Commit,
        limits: &crate::profile::policy::Limits,
        audit: Option<std::fs::File>,
    ) {
        self.command = commit.command_line();
        self.policy.limits.timeout = limits.timeout;
        self.policy.limits.output = limits.output;
        self.running.commit_warm(commit, limits, audit);
    }

    /// Let a warm run of a command known when it was prepared go on to
    /// execute that very command (a skill's runtime, which does not depend
    /// on the invocation): its clock and broker caller start now, as they
    /// would have at a cold run's clone, and the plan's own command is
    /// committed on `sock`, the other end of [`Command::warm_commit`]'s.
    /// Nothing about the command is decided here: it is exactly the one
    /// the sandbox was planned and confined for.
    pub fn start_prepared(&mut self, sock: std::os::fd::BorrowedFd<'_>) -> Result<(), SpawnError> {
        let plan = self.prepared.plan();
        let commit = crate::spawn::warm::Commit {
            argv: plan.argv.clone(),
            envp: plan.envp.clone(),
            exec_candidates: plan.exec_candidates.clone(),
            cwd: plan.cwd.clone(),
        };
        self.running.start_prepared();
        // The stdio the run was spawned with stays: none travels.
        commit.send(sock, [None, None, None])
    }

    fn finish(self, driver: Option<&mut dyn parent::Driver>) -> Finished {
        let Child {
            running,
            prepared,
            policy,
            command,
        } = self;
        let (outcome, measured) = running.wait_measured(&prepared, driver);
        let outcome = outcome.map_err(|err| where_on_host(err, &prepared));
        let report = Report::build(&policy, &prepared, command, &outcome, measured.as_ref());
        Finished {
            result: outcome.map(|o| ExitStatus(o.exit)),
            report: Some(report),
        }
    }
}

/// The broker's `terminal.run` commands, each in a sandbox of the run's
/// own policy.
#[derive(Debug)]
struct NestedSandbox {
    policy: Policy,
    /// The run's audit, which the nested runs' decisions and connections
    /// go into as well: a command run through the broker is no way around
    /// the record.
    audit: Option<std::path::PathBuf>,
    /// The same, when the run's audit is an open file (the daemon's).
    audit_file: Option<std::fs::File>,
}

impl NestedRunner for NestedSandbox {
    fn start(&self, nested: NestedCommand<'_>) -> Result<Box<dyn NestedRun>, String> {
        let Some((program, args)) = nested.argv.split_first() else {
            return Err("the command is empty".into());
        };
        let mut command = Command::new(program, self.policy.clone());
        command.args(args).project(nested.project);
        match (&self.audit, &self.audit_file) {
            (Some(path), _) => {
                command.audit(path);
            }
            (None, Some(file)) => {
                if let Ok(copy) = file.try_clone() {
                    command.audit_file(copy);
                }
            }
            (None, None) => {}
        }
        if let Some(cwd) = nested.cwd {
            command.current_dir(cwd);
        }
        for (name, value) in nested.env {
            command.env(name, value);
        }
        let [stdin, stdout, stderr] = nested.stdio;
        command
            .stdin(Stdio::Fd(stdin))
            .stdout(Stdio::Fd(stdout))
            .stderr(Stdio::Fd(stderr));
        match command.spawn() {
            Ok(child) => Ok(Box::new(child)),
            Err(err) => Err(err.to_string()),
        }
    }
}

impl NestedRun for Child {
    fn id(&self) -> u32 {
        Child::id(self)
    }

    fn kill(&mut self) {
        let _ = Child::kill(self);
    }

    fn wait(self: Box<Self>) -> Result<NestedExit, NestedFailure> {
        match Child::wait(*self).result {
            Ok(status) => Ok(NestedExit {
                code: status.code(),
                signal: status.signal(),
            }),
            Err(err @ SpawnError::Exec { .. }) => Err(NestedFailure::NotFound(err.to_string())),
            Err(err) => Err(NestedFailure::Failed(err.to_string())),
        }
    }
}

/// A command not found inside that exists on the host: say where, and what
/// exposes it (a `--tool` for a known toolchain's directory, otherwise
/// `--allow-read`). Looked up in the host's PATH and the toolchains'
/// directories; never run.
fn where_on_host(err: SpawnError, prepared: &Prepared) -> SpawnError {
    let SpawnError::Exec {
        program,
        errno,
        hint,
    } = err
    else {
        return err;
    };
    if errno != nix::errno::Errno::ENOENT as i32 || !hint.is_empty() {
        return SpawnError::Exec {
            program,
            errno,
            hint,
        };
    }
    let home = crate::profile::tools::home();
    let found = if program.contains('/') {
        let path = Path::new(&program);
        (path.is_absolute() && path.exists()).then(|| path.to_path_buf())
    } else {
        let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        if let Some(home) = &home {
            dirs.extend(crate::profile::tools::program_dirs(home));
        }
        dirs.into_iter()
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(&program))
            .find(|candidate| is_executable(candidate))
    };
    let policy = &prepared.config.policy;
    let fs = &policy.filesystem;
    // Through links too: `/bin/python3` is shown only when what `/bin`
    // leads to is, since the view recreates a link, not its target.
    let in_view = |path: &Path| {
        let listed = |path: &Path| {
            fs.read
                .iter()
                .chain(&fs.read_if_exists)
                .any(|r| path.starts_with(r))
        };
        listed(path) && std::fs::canonicalize(path).is_ok_and(|real| listed(&real))
    };
    // Where the run itself looks (its PATH), among what it is shown: a
    // program there that still does not start lacks what starts it, and no
    // `--tool` or `--allow-read` of the program would help.
    let run_candidates = || -> Box<dyn Iterator<Item = PathBuf>> {
        if program.contains('/') {
            let path = Path::new(&program);
            Box::new(path.is_absolute().then(|| path.to_path_buf()).into_iter())
        } else {
            Box::new(
                policy
                    .env
                    .set
                    .get("PATH")
                    .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|dir| dir.is_absolute())
                    .map(|dir| dir.join(&program)),
            )
        }
    };
    let shown = run_candidates().find(|candidate| in_view(candidate) && is_executable(candidate));
    if let Some(shown) = shown {
        let hint = match crate::profile::lint::hidden_loader(policy, &shown) {
            Some(loader) => format!(
                "; {} is in the sandbox's view but its dynamic loader {} is not: the \
                 profile's read lists leave it out (a list key such as `read_if_exists = \
                 [...]` replaces the inherited list, `read_if_exists_add = [...]` adds to \
                 it; `sandbox profile check` names the key)",
                shown.display(),
                loader.display()
            ),
            None => String::new(),
        };
        return SpawnError::Exec {
            program,
            errno,
            hint,
        };
    }
    // Where the run looks (its PATH), a program strict shows and this
    // profile does not: the profile dropped what the program needs around
    // it too (its libraries, its loader), so exposing the program or a
    // toolchain would fail the same way; the fix is in the profile's list,
    // where `_add` keeps strict's.
    let strict = crate::profile::builtin::defaults();
    let strict_shows = |path: &Path| {
        let fs = &strict.filesystem;
        fs.read
            .iter()
            .chain(&fs.read_if_exists)
            .any(|r| path.starts_with(r))
    };
    let dropped = run_candidates().find(|candidate| {
        !in_view(candidate) && is_executable(candidate) && strict_shows(candidate)
    });
    if let Some(dropped) = dropped {
        let hint = format!(
            "; it is {} on the host, which strict shows and profile `{}` does not: the \
             profile's read lists leave it out (a list key such as `read = [...]` replaces \
             the list it inherits, `read_add = [...]` adds to it; `sandbox profile check` \
             names the key)",
            dropped.display(),
            policy.name
        );
        return SpawnError::Exec {
            program,
            errno,
            hint,
        };
    }
    let hint = match found {
        None => String::new(),
        Some(found) if in_view(&found) => String::new(),
        Some(found) => {
            let tool = home
                .as_deref()
                .and_then(|home| crate::profile::tools::tool_holding(&found, home));
            let dir = found.parent().unwrap_or(Path::new("/"));
            match tool {
                Some(tool) => format!(
                    "; it is {} on the host, outside the sandbox's view: add --tool {tool} (or `[tools] expose = [\"{tool}\"]` in the profile) to expose that toolchain read-only",
                    found.display()
                ),
                None => format!(
                    "; it is {} on the host, outside the sandbox's view: expose its directory read-only with --allow-read {} and run it as {}",
                    found.display(),
                    dir.display(),
                    found.display()
                ),
            }
        }
    };
    SpawnError::Exec {
        program,
        errno,
        hint,
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
