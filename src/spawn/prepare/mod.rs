//! Everything the child needs, built in the supervisor before clone: after
//! clone the child only executes this plan, so it never parses, resolves or
//! decides anything (and allocates as little as possible).

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::sched::CloneFlags;
use nix::sys::resource::Resource;

pub use super::ids::{IdMapping, DEFAULT_ROOT_HOST_ID};
use super::SpawnError;
use crate::landlock::LandlockAccess;
use crate::profile::policy::{Enforcement, NetworkMode, Policy, ProjectAccess};
use crate::seccomp::CompiledFilter;

pub use super::stdio::Stdio;

/// The skill a run serves, as the broker needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillCaller {
    /// The skill's name (audit log, grants, log lines).
    pub name: String,
    /// Its declared permissions: `action` or `action:pattern`.
    pub permissions: Vec<String>,
    /// Its entry file on the host.
    pub main: PathBuf,
    /// Its directory on the host: all of it is hashed, before the skill
    /// starts, to key stored grants.
    pub dir: PathBuf,
}

/// What to run, and where.
#[derive(Debug)]
pub struct SpawnSpec {
    /// The program (a name looked up in the sandbox's PATH, or a path).
    pub program: OsString,
    /// Its arguments, without argv[0].
    pub args: Vec<OsString>,
    /// The project root: visible at its own path, writable when the profile says so.
    pub project: PathBuf,
    /// Whether the caller named the project (`--project`), rather than it
    /// defaulting to the current directory: only a named project may be a
    /// home directory or contain one.
    pub project_explicit: bool,
    /// The working directory inside the sandbox (default: the project root).
    pub cwd: Option<PathBuf>,
    /// Environment entries on top of the profile's: `Some` sets, `None` removes.
    pub env: Vec<(OsString, Option<OsString>)>,
    /// Do every setup step up to and including seccomp, then exit 0
    /// instead of executing the program.
    pub dry_run: bool,
    /// Host paths (first) made visible read-only at a path inside (second),
    /// mounted by the supervisor's hand so that they work even where the
    /// sandbox's user could not reach them: a skill's directory, the
    /// client libraries. Each must exist.
    pub read_only_extra: Vec<(PathBuf, PathBuf)>,
}

/// The kind of filesystem object a mount target must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A directory.
    Dir,
    /// Anything else (a file, a device).
    File,
}

/// One step of the mount plan, with paths already prefixed for the staging
/// layout (`/oldroot/...` sources, `/newroot/...` targets).
#[derive(Debug)]
pub enum MountOp {
    /// Bind a host path (recursively), read-only unless `writable`.
    Bind {
        /// `/oldroot` + host path.
        source: CString,
        /// `/newroot` + path.
        target: CString,
        /// Directory or file.
        kind: NodeKind,
        /// Read-write (nosuid, nodev still apply).
        writable: bool,
    },
    /// Attach the next idmapped tree received from the supervisor.
    Idmapped {
        /// Position in the list of trees the supervisor sends.
        index: usize,
        /// `/newroot` + path.
        target: CString,
        /// Directory or file.
        kind: NodeKind,
    },
    /// Recreate a host symlink (for example `/bin -> usr/bin`).
    Symlink {
        /// The link's content.
        link: CString,
        /// `/newroot` + path.
        target: CString,
    },
    /// Mask a directory with an empty read-only tmpfs.
    HideDir {
        /// `/newroot` + path.
        target: CString,
    },
    /// Mask a file with an empty unreadable one.
    HideFile {
        /// `/newroot` + path.
        target: CString,
    },
    /// Bind a path of the view onto itself: read-only to protect it, or
    /// as it is to pin it (a mount point cannot be renamed or removed, so
    /// a pinned ancestor keeps what is mounted below it in place).
    Rebind {
        /// `/newroot` + path.
        target: CString,
        /// Read-only, or kept as it is.
        read_only: bool,
    },
}

/// A run without namespaces: its own plan, and what it costs. Dropping it
/// removes the private temporary directory: the supervisor drops it after
/// the run (the processes that inherit a copy exit or exec without
/// dropping anything).
#[derive(Debug)]
pub struct NoNamespaces {
    /// The plan the child executes instead of the one with namespaces.
    pub plan: ChildPlan,
    /// Why the run has no namespaces.
    pub reason: String,
    /// The private temporary directory (TMPDIR), removed after the run.
    pub private_tmp: PathBuf,
    /// Protected entries to restore after the run (None: the project is
    /// not writable, or has none).
    pub snapshot: Option<std::sync::Arc<crate::project::quarantine::Snapshot>>,
    /// What this run cannot promise that a namespaced one does.
    pub not_promised: Vec<String>,
}

/// A host path made writable through an idmapped mount (root supervisor only).
#[derive(Debug)]
pub struct IdmappedTree {
    /// The host path.
    pub host_path: CString,
    /// Whether the tree stays writable.
    pub writable: bool,
    /// Whether it gets the sandbox's id mapping (false: passed over only
    /// because init could not reach the path itself).
    pub idmap: bool,
    /// The tree's owner on disk, when it is not the sandbox's uid inside:
    /// the tree is then idmapped so that this owner, rather than the
    /// sandbox's inside uid, is the sandbox (a writable path of root's in
    /// a run on another user's project).
    pub owner: Option<(u32, u32)>,
}

/// Everything prepared before clone: the plan the child executes and the
/// supervisor's own configuration, each built once by [`Prepared::new`];
/// what one start decides and learns lives in [`Started`].
#[derive(Debug)]
pub struct Prepared {
    /// The plan for a run with namespaces (see [`Prepared::plan`] for the
    /// one a start really executes).
    pub planned: ChildPlan,
    /// The supervisor's side of the run.
    pub config: RunConfig,
    /// What the start decided (a run without namespaces) and learned (its
    /// warnings, the confinement the payload must find).
    pub started: Started,
}

/// What init and the payload execute. Built before clone, read-only after
/// it: the child runs on a copy of the supervisor's memory, so nothing the
/// supervisor changes later could reach it anyway.
#[derive(Debug)]
pub struct ChildPlan {
    /// argv.
    pub argv: Vec<CString>,
    /// envp (`NAME=VALUE`).
    pub envp: Vec<CString>,
    /// The program as the user gave it, for messages.
    pub program: String,
    /// Paths execve tries, in order (PATH lookup done here).
    pub exec_candidates: Vec<CString>,
    /// The working directory inside.
    pub cwd: CString,
    /// Canonical project root.
    pub project: PathBuf,
    /// Directories to create in the new root before mounting, parents first.
    pub mount_dirs: Vec<CString>,
    /// The mount plan.
    pub mounts: Vec<MountOp>,
    /// Trees the supervisor idmaps and passes over (root mode).
    pub idmapped: Vec<IdmappedTree>,
    /// Landlock rules (paths inside the sandbox).
    pub landlock_rules: Vec<(CString, LandlockAccess)>,
    /// How hard Landlock is insisted on.
    pub landlock: Enforcement,
    /// The compiled seccomp programs (with seccomp off, the set-id guard alone;
    /// None only where no filter can be built for the architecture).
    pub seccomp: Option<CompiledFilter>,
    /// How hard seccomp is insisted on.
    pub seccomp_enforcement: Enforcement,
    /// The cgroup's cpu share: the payload narrows its CPU affinity to it.
    pub cpu_share: Option<f64>,
    /// Resource limits applied with setrlimit in the payload.
    pub rlimits: Vec<(Resource, u64)>,
    /// Namespaces to create with clone.
    pub clone_flags: CloneFlags,
    /// Whether the run has namespaces at all (false: see
    /// [`super::no_namespaces`]).
    pub namespaces: bool,
    /// Network mode.
    pub network: NetworkMode,
    /// `size=...,mode=1777` for the private /tmp.
    pub tmp_options: CString,
    /// Id mapping.
    pub ids: IdMapping,
    /// The files init writes as `/etc/passwd`, `/etc/group` and
    /// `/etc/hosts` (see [`super::etc`]).
    pub etc: Vec<super::etc::EtcFile>,
    /// Do every step up to and including seccomp, then exit 0 instead of
    /// executing the command: `doctor`'s verdict is the real spawn path's.
    pub dry_run: bool,
}

/// How the caller wants the run supervised: the part of the supervisor's
/// configuration that does not come from the profile.
#[derive(Debug, Clone, Default)]
pub struct Supervision {
    /// A delegated cgroup to create the run's cgroup in, instead of the supervisor's own.
    pub cgroup_parent: Option<PathBuf>,
    /// Where the broker writes one JSON line per request.
    pub audit: Option<PathBuf>,
    /// Whether "ask" may prompt on the supervisor's terminal.
    pub interactive: bool,
    /// Which stored grants apply.
    pub grant_store: crate::broker::grants::StoreChoice,
    /// Secrets the broker may hand out, read from the user's side, with
    /// the hosts `net.http` may send each to.
    pub secrets: Vec<crate::broker::secrets::SecretSpec>,
    /// Set when the run is a skill: the broker serves it by name and never
    /// allows more than it declared.
    pub skill: Option<SkillCaller>,
    /// Print each setup step on stderr as it happens (`sandbox run -v`).
    pub verbose: bool,
    /// Who starts the broker's `terminal.run` commands (None: the broker
    /// refuses them as not set up).
    pub nested: Option<std::sync::Arc<dyn crate::broker::terminal::NestedRunner>>,
}

/// The supervisor's own configuration of a run: broker, audit, grants,
/// limits it enforces itself, and the report's inputs. Never seen by the
/// child.
#[derive(Debug)]
pub struct RunConfig {
    /// The run's policy (tools exposed): its name for the report, the
    /// broker's decisions and hidden paths, the limits the supervisor
    /// enforces (timeout, output cap, cgroup).
    pub policy: Policy,
    /// How the caller wants the run supervised.
    pub supervision: Supervision,
    /// What preparing the plan found weaker than a user might assume.
    pub warnings: Vec<String>,
    /// The project's secrets and protected entries, as patterns (the broker
    /// and the sweep after the run apply them too).
    pub project_rules: crate::project::Rules,
    /// What the walk of the project found (None: the project is not visible).
    pub scan: Option<crate::project::scan::Scan>,
    /// Host paths shown read-only at a path inside (from [`SpawnSpec`]).
    pub read_only_extra: Vec<(PathBuf, PathBuf)>,
}

impl RunConfig {
    /// Limits for the run's cgroup.
    pub fn cgroup_limits(&self) -> crate::cgroup::CgroupLimits {
        crate::cgroup::CgroupLimits {
            memory: self.policy.limits.memory,
            pids: self.policy.limits.pids,
            cpu: self.policy.limits.cpu,
        }
    }
}

/// What one start consumes: the descriptors the payload gets, and the
/// supervisor's one-use handles. Closed in the supervisor once the child
/// holds its copies.
#[derive(Debug, Default)]
pub struct StartInputs {
    /// stdin, stdout, stderr of the payload.
    pub stdio: [Stdio; 3],
    /// A warm run: P2's end of the socket its command comes on (see
    /// [`super::warm`]).
    pub warm_commit: Option<std::os::fd::OwnedFd>,
    /// Who answers "ask" instead of the terminal (the daemon's approvals).
    pub asker: Option<Box<dyn crate::broker::prompt::Asker>>,
    /// The broker's audit file, already open (a daemon run's spool file,
    /// opened before the supervisor became the caller); wins over
    /// [`Supervision::audit`].
    pub audit_file: Option<std::fs::File>,
}

/// What the child gets from one start besides its plan, set up just before
/// clone.
#[derive(Debug)]
pub struct Handover {
    /// stdin, stdout, stderr of the payload, relays already in place.
    pub stdio: [Stdio; 3],
    /// The payload's end of the broker channel: fd 3.
    pub ipc: Option<std::os::fd::OwnedFd>,
    /// A warm run: the socket its command comes on.
    pub warm_commit: Option<std::os::fd::OwnedFd>,
    /// Limits standing in for a cgroup that could not be had.
    pub fallback_rlimits: Vec<(Resource, u64)>,
    /// What the payload must see of itself before exec.
    pub confinement: super::measure::Expected,
}

/// What a start decided and learned, for the supervision and the report.
#[derive(Debug, Default)]
pub struct Started {
    /// Set when the run has no namespaces: its own plan, and what it costs.
    pub no_namespaces: Option<NoNamespaces>,
    /// Limits standing in for a cgroup that could not be had (the payload
    /// gets a copy with its [`Handover`]).
    pub fallback_rlimits: Vec<(Resource, u64)>,
    /// What the start found weaker than a user might assume.
    pub warnings: Vec<String>,
    /// What the payload must see of itself before exec (from the
    /// supervisor's own view just before clone).
    pub confinement: super::measure::Expected,
}

impl Prepared {
    /// The plan a start executes: the one without namespaces once the run
    /// fell back to it, else the one planned.
    pub fn plan(&self) -> &ChildPlan {
        match &self.started.no_namespaces {
            Some(without) => &without.plan,
            None => &self.planned,
        }
    }

    /// Every warning, preparation's first.
    pub fn warnings(&self) -> Vec<String> {
        let mut all = self.config.warnings.clone();
        all.extend(self.started.warnings.iter().cloned());
        all
    }
}

/// Where the sandbox's own binary appears inside (appended to PATH).
pub const SANDBOX_BIN_DIR: &str = "/run/sandbox/bin";

const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A run's command as the sandbox will execute it: arguments, the
/// environment (the profile's, then the caller's changes, then the broker's
/// variables), the PATH lookup and the working directory (canonical, inside
/// the project). One resolution for a cold plan and a warm sandbox's commit,
/// so a warm run can never be resolved more loosely than a cold one.
pub(crate) struct CommandPlan {
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// The same environment as pairs (the run's /etc files read it).
    pub env: Vec<(OsString, OsString)>,
    /// The program as the caller gave it, for messages.
    pub program: String,
    pub exec_candidates: Vec<CString>,
    pub cwd: PathBuf,
}

/// Resolve a command (see [`CommandPlan`]); `project` is canonical.
pub(crate) fn plan_command(
    policy: &Policy,
    program: &OsStr,
    args: &[OsString],
    env_changes: &[(OsString, Option<OsString>)],
    cwd: Option<&Path>,
    project: &Path,
) -> Result<CommandPlan, SpawnError> {
    let cwd = match cwd {
        Some(cwd) => {
            let cwd = std::fs::canonicalize(cwd).map_err(|source| SpawnError::Path {
                what: "working directory",
                path: cwd.to_path_buf(),
                source,
            })?;
            if !cwd.starts_with(project) {
                return Err(SpawnError::Invalid(format!(
                    "the working directory {} is outside the project root {}",
                    cwd.display(),
                    project.display()
                )));
            }
            cwd
        }
        None => project.to_path_buf(),
    };

    // Environment: exactly the profile's, then the caller's additions.
    let mut env: Vec<(OsString, OsString)> = policy.env.resolve(|name| std::env::var_os(name));
    for (name, value) in env_changes {
        env.retain(|(n, _)| n != name);
        if let Some(value) = value {
            env.push((name.clone(), value.clone()));
        }
    }
    // The broker channel is fd 3; Node programs get it as their IPC
    // channel too (process.send / process.on('message')).
    for (name, value) in [
        ("SANDBOX_IPC_FD", "3"),
        ("NODE_CHANNEL_FD", "3"),
        ("NODE_CHANNEL_SERIALIZATION_MODE", "json"),
    ] {
        env.retain(|(n, _)| n != name);
        env.push((OsString::from(name), OsString::from(value)));
    }
    // The proxy is the only way out: the run's own variables cannot point
    // clients anywhere else (nothing else would answer anyway).
    if policy.network.mode == NetworkMode::Allowlist {
        for (name, value) in crate::net::proxy_environment() {
            env.retain(|(n, _)| n != name);
            env.push((OsString::from(name), OsString::from(value)));
        }
    }
    if let Some((_, path)) = env.iter_mut().find(|(n, _)| n == "PATH") {
        path.push(":");
        path.push(SANDBOX_BIN_DIR);
    }
    let mut envp = Vec::with_capacity(env.len());
    for (name, value) in &env {
        if name.is_empty() || name.as_bytes().contains(&b'=') {
            return Err(SpawnError::Invalid(format!(
                "invalid environment variable name {name:?}"
            )));
        }
        let mut entry = name.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        envp.push(cstring("environment variable", entry)?);
    }

    let program_name = program.to_string_lossy().into_owned();
    if program.is_empty() {
        return Err(SpawnError::Invalid("the command is empty".into()));
    }
    let mut argv = vec![cstring("argument", program.as_bytes())?];
    for arg in args {
        argv.push(cstring("argument", arg.as_bytes())?);
    }
    let exec_candidates = exec_candidates(program, &env)?;
    Ok(CommandPlan {
        argv,
        envp,
        env,
        program: program_name,
        exec_candidates,
        cwd,
    })
}

fn cstring(what: &'static str, bytes: impl Into<Vec<u8>>) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|err| SpawnError::NulByte {
        what,
        value: String::from_utf8_lossy(&err.into_vec()).into_owned(),
    })
}

fn prefixed(prefix: &str, path: &Path) -> Result<CString, SpawnError> {
    let mut bytes = prefix.as_bytes().to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    cstring("path", bytes)
}

fn path_cstring(path: &Path) -> Result<CString, SpawnError> {
    cstring("path", path.as_os_str().as_bytes())
}

/// Lexically normalise an absolute path (no `..` may remain).
fn is_clean_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

struct Planner {
    dirs: Vec<PathBuf>,
    mounts: Vec<(PathBuf, MountOp)>,
    visible: Vec<PathBuf>,
}

impl Planner {
    fn need_parent_dirs(&mut self, path: &Path) {
        let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
        ancestors.reverse();
        for dir in ancestors {
            if dir != Path::new("/") && !self.dirs.iter().any(|d| d == dir) {
                self.dirs.push(dir.to_path_buf());
            }
        }
    }

    /// Plan a host path. `handed_over`, in root mode: where a path that init
    /// could not reach goes, for the supervisor to open.
    fn add_host_path(
        &mut self,
        path: &Path,
        writable: bool,
        must_exist: bool,
        handed_over: Option<&mut Vec<IdmappedTree>>,
    ) -> Result<bool, SpawnError> {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(err) if !must_exist && err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(false)
            }
            Err(source) => {
                return Err(SpawnError::Path {
                    what: if writable {
                        "writable path"
                    } else {
                        "read-only path"
                    },
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        self.need_parent_dirs(path);
        let target = prefixed("/newroot", path)?;
        let op = if meta.file_type().is_symlink() {
            let link = std::fs::read_link(path).map_err(|source| SpawnError::Path {
                what: "symlink",
                path: path.to_path_buf(),
                source,
            })?;
            MountOp::Symlink {
                link: path_cstring(&link)?,
                target,
            }
        } else {
            let kind = NodeKind::of(&meta);
            match handed_over {
                // In root mode init runs as an unprivileged host id, which
                // cannot pass a parent such as /root (0700): the supervisor,
                // still host root, opens the tree and hands it over, with
                // the same read-only attributes a bind would get.
                Some(trees) if !writable && !reachable_by_others(path) => {
                    trees.push(IdmappedTree {
                        host_path: path_cstring(path)?,
                        writable: false,
                        idmap: false,
                        owner: None,
                    });
                    MountOp::Idmapped {
                        index: trees.len() - 1,
                        target,
                        kind,
                    }
                }
                _ => MountOp::Bind {
                    source: prefixed("/oldroot", path)?,
                    target,
                    kind,
                    writable,
                },
            }
        };
        self.mounts.push((path.to_path_buf(), op));
        self.visible.push(path.to_path_buf());
        Ok(true)
    }
}

/// Whether a process that is neither owner nor group member of anything on
/// the way (the sandbox of host root) can look `path` up: every directory
/// above it lets "other" through.
fn reachable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.ancestors()
        .skip(1)
        .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// The directories a run may write: the profile's write paths and the
/// project when it is writable.
fn writable_trees(policy: &Policy, project: &Path) -> Vec<PathBuf> {
    let mut trees: Vec<PathBuf> = policy
        .filesystem
        .write
        .iter()
        .filter(|p| p.as_path() != project)
        .cloned()
        .collect();
    if policy.filesystem.project == ProjectAccess::ReadWrite {
        trees.push(project.to_path_buf());
    }
    trees
}

impl NodeKind {
    fn of(meta: &std::fs::Metadata) -> NodeKind {
        if meta.is_dir() {
            NodeKind::Dir
        } else {
            NodeKind::File
        }
    }
}

impl Prepared {
    /// Build the plan for running `spec` under `policy`. Pure apart from
    /// reading host metadata (the paths the plan mounts).
    pub fn new(
        policy: &Policy,
        spec: SpawnSpec,
        supervision: Supervision,
    ) -> Result<Prepared, SpawnError> {
        let mut warnings = Vec::new();
        let project = std::fs::canonicalize(&spec.project).map_err(|source| SpawnError::Path {
            what: "project root",
            path: spec.project.clone(),
            source,
        })?;
        if !project.is_dir() {
            return Err(SpawnError::Invalid(format!(
                "project root {} is not a directory",
                project.display()
            )));
        }
        if !spec.project_explicit && policy.filesystem.project != ProjectAccess::Empty {
            let homes = crate::project::home::home_directories();
            if let Some(why) = crate::project::home::too_broad(&project, &homes) {
                return Err(SpawnError::Invalid(format!(
                    "refusing to use the current directory {} as the project root: {why}, and the run could {} everything below it. Run from the project's own directory, or pass --project {} if you mean it",
                    project.display(),
                    if policy.filesystem.project == ProjectAccess::ReadWrite { "change" } else { "read" },
                    project.display()
                )));
            }
        }
        for forbidden in ["/", "/proc", "/sys", "/dev"] {
            if project == Path::new(forbidden)
                || (forbidden != "/" && project.starts_with(forbidden))
            {
                return Err(SpawnError::Invalid(format!(
                    "the project root cannot be {} (it would expose the host); pass --project with a project directory",
                    project.display()
                )));
            }
        }
        let CommandPlan {
            argv,
            envp,
            env,
            program,
            exec_candidates,
            cwd,
        } = plan_command(
            policy,
            &spec.program,
            &spec.args,
            &spec.env,
            spec.cwd.as_deref(),
            &project,
        )?;

        // Mount plan.
        let mut planner = Planner {
            dirs: Vec::new(),
            mounts: Vec::new(),
            visible: Vec::new(),
        };
        let mut landlock_rules = Vec::new();
        // The ids decide how each tree is mounted, so they come first.
        let (ids, ids_note) = super::ids::choose(&writable_trees(policy, &project), &project);
        warnings.extend(ids_note);
        let root_mode = ids.root_mode;
        let mut idmapped = Vec::new();
        for path in &policy.filesystem.read {
            planner.add_host_path(path, false, true, root_mode.then_some(&mut idmapped))?;
        }
        for path in &policy.filesystem.read_if_exists {
            planner.add_host_path(path, false, false, root_mode.then_some(&mut idmapped))?;
        }
        for path in planner.visible.clone() {
            landlock_rules.push((path_cstring(&path)?, LandlockAccess::ReadExec));
        }
        let mut writable_paths: Vec<PathBuf> = policy.filesystem.write.clone();
        let project_writable = policy.filesystem.project == ProjectAccess::ReadWrite;
        for path in &writable_paths {
            if !is_clean_absolute(path) {
                return Err(SpawnError::Invalid(format!(
                    "writable path {} must be absolute and normalised",
                    path.display()
                )));
            }
        }
        writable_paths.retain(|p| p != &project);
        // The project last among binds so that it lands on top of read-only
        // system paths it may be nested in (a project under /usr/src).
        let mut trees: Vec<(PathBuf, bool)> =
            writable_paths.into_iter().map(|p| (p, true)).collect();
        if policy.filesystem.project == ProjectAccess::Empty {
            planner.need_parent_dirs(&project);
            planner.dirs.push(project.clone());
        } else {
            trees.push((project.clone(), project_writable));
        }
        for (path, writable) in trees {
            let meta = std::fs::metadata(&path).map_err(|source| SpawnError::Path {
                what: "writable path",
                path: path.clone(),
                source,
            })?;
            planner.need_parent_dirs(&path);
            let target = prefixed("/newroot", &path)?;
            if root_mode && writable {
                if !meta.is_dir() {
                    return Err(SpawnError::Invalid(format!(
                        "writable path {} is not a directory (only directories can be idmapped)",
                        path.display()
                    )));
                }
                planner.mounts.push((
                    path.clone(),
                    MountOp::Idmapped {
                        index: idmapped.len(),
                        target,
                        kind: NodeKind::Dir,
                    },
                ));
                let owner = (meta.uid(), meta.gid());
                idmapped.push(IdmappedTree {
                    host_path: path_cstring(&path)?,
                    writable,
                    idmap: true,
                    owner: (owner.0 != ids.inside_uid).then_some(owner),
                });
            } else {
                let kind = NodeKind::of(&meta);
                planner.mounts.push((
                    path.clone(),
                    MountOp::Bind {
                        source: prefixed("/oldroot", &path)?,
                        target,
                        kind,
                        writable,
                    },
                ));
            }
            planner.visible.push(path.clone());
            let access = if writable {
                LandlockAccess::ReadWrite
            } else {
                LandlockAccess::ReadExec
            };
            landlock_rules.push((path_cstring(&path)?, access));
        }
        // The supervisor's own binary, read-only, so scripts inside can call
        // `sandbox ipc`. Best effort: a binary replaced on disk since it
        // started (a rebuild) cannot be bound, which is said, not fatal.
        let read_only_extra = spec.read_only_extra.clone();
        let mut handed_over: Vec<(PathBuf, PathBuf)> = spec.read_only_extra.clone();
        match std::env::current_exe().and_then(std::fs::canonicalize) {
            Ok(exe) if exe.is_file() => {
                handed_over.push((exe, Path::new(SANDBOX_BIN_DIR).join("sandbox")));
            }
            _ => warnings.push(
                "the sandbox binary cannot be made available inside: `sandbox ipc` will be missing"
                    .into(),
            ),
        }
        for (host, target) in handed_over {
            let meta = std::fs::metadata(&host).map_err(|source| SpawnError::Path {
                what: "read-only path",
                path: host.clone(),
                source,
            })?;
            let kind = NodeKind::of(&meta);
            planner.need_parent_dirs(&target);
            let newroot_target = prefixed("/newroot", &target)?;
            let op = if root_mode {
                // Init runs as an unprivileged host id by the time it
                // mounts and may not be able to reach these (below /root,
                // or a 0700 CI checkout), so the supervisor clones the
                // trees itself and hands them over.
                let index = idmapped.len();
                idmapped.push(IdmappedTree {
                    host_path: path_cstring(&host)?,
                    writable: false,
                    idmap: false,
                    owner: None,
                });
                MountOp::Idmapped {
                    index,
                    target: newroot_target,
                    kind,
                }
            } else {
                MountOp::Bind {
                    source: prefixed("/oldroot", &host)?,
                    target: newroot_target,
                    kind,
                    writable: false,
                }
            };
            planner.mounts.push((target.clone(), op));
            planner.visible.push(target.clone());
            let rule_path = if kind == NodeKind::Dir {
                target.as_path()
            } else {
                target.parent().unwrap_or(Path::new("/"))
            };
            landlock_rules.push((path_cstring(rule_path)?, LandlockAccess::ReadExec));
        }
        // Parents before children: a stable sort by depth keeps the project
        // (pushed last) after system paths of equal depth.
        planner
            .mounts
            .sort_by_key(|(path, _)| path.components().count());

        for hidden in &policy.filesystem.hide {
            let path = if hidden.is_absolute() {
                hidden.clone()
            } else {
                project.join(hidden)
            };
            if !is_clean_absolute(&path) {
                return Err(SpawnError::Invalid(format!(
                    "hidden path {} must not contain `..`",
                    hidden.display()
                )));
            }
            if !planner.visible.iter().any(|v| path.starts_with(v)) {
                continue; // not visible in the sandbox at all
            }
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(_) => continue,
            };
            if meta.file_type().is_symlink() {
                // Mounting over a symlink would follow it; the link itself
                // stays visible, so say so rather than pretend it is hidden.
                warnings.push(format!("not hiding {}: it is a symlink", path.display()));
                continue;
            }
            let target = prefixed("/newroot", &path)?;
            let op = if meta.is_dir() {
                MountOp::HideDir { target }
            } else {
                MountOp::HideFile { target }
            };
            planner.mounts.push((path, op));
        }

        let project_rules =
            crate::project::Rules::new(&policy.filesystem.secrets, &policy.filesystem.protect)
                .map_err(|err| SpawnError::Invalid(format!("profile `{}`: {err}", policy.name)))?;
        let scan = if policy.filesystem.project == ProjectAccess::Empty {
            None
        } else {
            let scan = crate::project::scan::scan(
                &project,
                &project_rules,
                project_writable,
                policy.filesystem.hardlinks,
            )?;
            planner.mounts.extend(scan_mounts(&project, &scan)?);
            Some(scan)
        };

        let mut mount_dirs = Vec::new();
        for dir in &planner.dirs {
            mount_dirs.push(prefixed("/newroot", dir)?);
        }
        let mounts = planner.mounts.into_iter().map(|(_, op)| op).collect();

        let etc = etc_files(&ids, &project, &env, policy.network.mode);
        // For the files init writes there. /etc inside holds nothing else
        // than them and what the profile shows (already readable), and
        // always exists (init creates it), which a rule per file would not
        // (a file the view cannot hold is skipped; see `super::etc`).
        landlock_rules.push((c"/etc".into(), LandlockAccess::Read));
        landlock_rules.push((c"/tmp".into(), LandlockAccess::ReadWrite));
        landlock_rules.push((c"/dev/shm".into(), LandlockAccess::ReadWrite));
        landlock_rules.push((c"/dev/mqueue".into(), LandlockAccess::MessageQueues));
        landlock_rules.push((c"/dev".into(), LandlockAccess::Device));
        landlock_rules.push((c"/proc".into(), LandlockAccess::Read));
        landlock_rules.push((c"/".into(), LandlockAccess::List));

        let seccomp = match policy.enforce.seccomp {
            Enforcement::Off => crate::seccomp::host_guard()?,
            // The payload's own user namespace maps only its ids.
            _ => Some(crate::seccomp::compile_in_user_namespace(
                &policy.syscalls,
                crate::seccomp::MappedIds {
                    uid: ids.inside_uid,
                    gid: ids.inside_gid,
                },
            )?),
        };

        let mut rlimits = vec![(Resource::RLIMIT_CORE, 0)];
        if let Some(nofile) = policy.limits.nofile {
            rlimits.push((Resource::RLIMIT_NOFILE, nofile));
        }
        if let Some(share) = message_queue_share() {
            rlimits.push((Resource::RLIMIT_MSGQUEUE, share));
        }

        let mut clone_flags = CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS;
        if policy.network.mode != NetworkMode::Host {
            clone_flags |= CloneFlags::CLONE_NEWNET;
        }

        let tmp_options = cstring(
            "tmp size",
            format!("size={},mode=1777", policy.filesystem.tmp_size),
        )?;
        let planned = ChildPlan {
            argv,
            envp,
            program,
            exec_candidates,
            cwd: path_cstring(&cwd)?,
            project,
            mount_dirs,
            mounts,
            idmapped,
            landlock_rules,
            landlock: policy.enforce.landlock,
            seccomp,
            seccomp_enforcement: policy.enforce.seccomp,
            cpu_share: policy.limits.cpu,
            rlimits,
            clone_flags,
            namespaces: true,
            network: policy.network.mode,
            tmp_options,
            ids,
            etc,
            dry_run: spec.dry_run,
        };
        let config = RunConfig {
            policy: policy.clone(),
            supervision,
            warnings,
            project_rules,
            scan,
            read_only_extra,
        };
        Ok(Prepared {
            planned,
            config,
            started: Started::default(),
        })
    }
}

/// The run's `/etc/passwd`, `/etc/group` and `/etc/hosts`, rendered here
/// so that init only writes them. A name is taken from the host's files
/// only for ids that are that host account's: the caller's own (an
/// unprivileged supervisor), or the project owner's that root's sandbox
/// takes; an id chosen for the sandbox
/// ([`super::ids::ROOT_PROJECT_INSIDE_ID`]) is not the account that may
/// happen to have that number. No network of its own: the host's `hosts`.
fn etc_files(
    ids: &IdMapping,
    project: &Path,
    env: &[(OsString, OsString)],
    network: NetworkMode,
) -> Vec<super::etc::EtcFile> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(project).ok();
    let host_account =
        |inside: u32, owner_id: Option<u32>| !ids.root_mode || owner_id == Some(inside);
    let mut uids = Vec::new();
    let mut gids = vec![65_534];
    if host_account(ids.inside_uid, owner.as_ref().map(MetadataExt::uid)) {
        uids.push(ids.inside_uid);
    }
    if host_account(ids.inside_gid, owner.as_ref().map(MetadataExt::gid)) {
        gids.push(ids.inside_gid);
    }
    let home = env
        .iter()
        .find(|(name, _)| name == "HOME")
        .and_then(|(_, value)| value.to_str())
        .unwrap_or("/");
    let plan = super::etc::EtcPlan::new(&uids, &gids, home, network != NetworkMode::Host);
    super::etc::files(&plan, ids)
}

/// The mounts that carry out a scan, parents before children: pins, then
/// what they keep in place.
fn scan_mounts(
    project: &Path,
    scan: &crate::project::scan::Scan,
) -> Result<Vec<(PathBuf, MountOp)>, SpawnError> {
    let mut ops = Vec::with_capacity(scan.mounts());
    let target = |relative: &Path| prefixed("/newroot", &project.join(relative));
    for pin in &scan.pins {
        ops.push((
            pin.clone(),
            MountOp::Rebind {
                target: target(pin)?,
                read_only: false,
            },
        ));
    }
    for found in &scan.protected {
        let op = MountOp::Rebind {
            target: target(&found.path)?,
            read_only: true,
        };
        ops.push((found.path.clone(), op));
    }
    for path in &scan.outside_links {
        ops.push((
            path.clone(),
            MountOp::Rebind {
                target: target(path)?,
                read_only: true,
            },
        ));
    }
    for found in &scan.secrets {
        let target = target(&found.path)?;
        let op = if found.is_dir {
            MountOp::HideDir { target }
        } else {
            MountOp::HideFile { target }
        };
        ops.push((found.path.clone(), op));
    }
    ops.sort_by_key(|(path, _)| path.components().count());
    Ok(ops)
}

/// The paths execve tries: the program itself when it contains a slash,
/// otherwise each directory of the sandbox's own PATH (not the host's).
pub(crate) fn exec_candidates(
    program: &OsStr,
    env: &[(OsString, OsString)],
) -> Result<Vec<CString>, SpawnError> {
    if program.as_bytes().contains(&b'/') {
        return Ok(vec![cstring("program", program.as_bytes())?]);
    }
    let path = env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| OsString::from(DEFAULT_PATH));
    let mut candidates = Vec::new();
    for dir in path.as_bytes().split(|b| *b == b':') {
        // An empty PATH entry means the working directory, a classic way to
        // run a planted binary; skip it.
        if dir.is_empty() || dir[0] != b'/' {
            continue;
        }
        let mut full = dir.to_vec();
        if !full.ends_with(b"/") {
            full.push(b'/');
        }
        full.extend_from_slice(program.as_bytes());
        candidates.push(cstring("program", full)?);
    }
    Ok(candidates)
}

/// How many bytes of POSIX message queues the payload may hold: a quarter
/// of the caller's RLIMIT_MSGQUEUE (None: the caller has no limit to
/// share).
///
/// The kernel charges a queue to its owner's uid in every user namespace
/// up the chain, and checks the charge of the host uid against the limit
/// its caller had when the run's namespace was made: the run's private
/// /dev/mqueue does not give it an allowance of its own. Without a share,
/// one run filling the allowance (about 28 queues at the default 800 KiB)
/// makes `mq_open` fail with EMFILE in every other run of the same caller,
/// and in the caller's own programs, until it ends. A lowered limit is
/// checked at the payload's own level first, and no process of the run can
/// raise it again (no CAP_SYS_RESOURCE), so the run holds at most this
/// share. A queue of the default shape (10 messages of 8 KiB) is charged
/// 10 x (8192 + 8 + 48) = 82,480 bytes, so a quarter of the default limit
/// (204,800) still holds two of them, or dozens of small ones, which is
/// what test suites and programs that use queues make; four such runs may
/// run side by side and the caller keeps the rest.
///
/// The run's IPC namespace could instead lower its own
/// /proc/sys/fs/mqueue limits (writable there on this kernel), but they
/// bound the number and the shape of queues, not their bytes: any setting
/// small enough to keep a run to a share of the allowance would refuse
/// the default queue shape, or most queues, that programs ask for.
fn message_queue_share() -> Option<u64> {
    const SHARE_DIVISOR: u64 = 4;
    let (soft, _) = nix::sys::resource::getrlimit(Resource::RLIMIT_MSGQUEUE).ok()?;
    (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft / SHARE_DIVISOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_lookup_uses_the_sandbox_path_and_skips_relative_entries() {
        let env = vec![(OsString::from("PATH"), OsString::from("/a::.:/b/"))];
        let got = exec_candidates(OsStr::new("tool"), &env).unwrap();
        assert_eq!(
            got,
            vec![
                CString::new("/a/tool").unwrap(),
                CString::new("/b/tool").unwrap()
            ]
        );
        let got = exec_candidates(OsStr::new("./x"), &env).unwrap();
        assert_eq!(got, vec![CString::new("./x").unwrap()]);
    }

    #[test]
    fn clean_absolute_paths() {
        assert!(is_clean_absolute(Path::new("/usr/lib")));
        assert!(!is_clean_absolute(Path::new("/usr/../etc")));
        assert!(!is_clean_absolute(Path::new("usr")));
    }
}
