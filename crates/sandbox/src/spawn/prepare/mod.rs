//! Everything the child needs, built in the supervisor before clone: after
//! clone the child only executes this plan, so it never parses, resolves or
//! decides anything (and allocates as little as possible).
//!
//! [`Prepared::new`] runs the steps in order, one file per job: the
//! project root ([`project`]), the command ([`command`]), the view of the
//! filesystem with its Landlock rules ([`view`]), and the rest of the
//! payload's confinement ([`confinement`]).

mod command;
mod confinement;
mod project;
mod view;

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use nix::sys::resource::Resource;

pub use super::ids::{IdMapping, DEFAULT_ROOT_HOST_ID};
use super::SpawnError;
use crate::landlock::LandlockAccess;
use crate::profile::policy::{Enforcement, NetworkMode, Policy};
use crate::seccomp::CompiledFilter;

pub use super::stdio::Stdio;
pub(crate) use command::{plan_command, CommandPlan};

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
    /// A review run that is one attempt of a recipe's step: the layer it
    /// sees above the project and where its own is kept
    /// ([`crate::review::stack`]). Only with review mode.
    pub review_stack: Option<crate::review::stack::Stack>,
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
    /// Review mode: a size-limited tmpfs in the staging root, and an
    /// overlay at `target` with the project there as its lower layer and
    /// the tmpfs as its upper one (see [`crate::review`]).
    ReviewLayer {
        /// `/newroot` + project.
        target: CString,
        /// The tmpfs's options (size, inodes).
        tmpfs_options: CString,
        /// The overlay's options (lower, upper and work directories).
        overlay_options: CString,
        /// The project root's permission bits, which the overlay's root
        /// takes from the upper directory.
        mode: u32,
        /// A recipe's accumulated layer, handed over as this tree and
        /// mounted in the staging root as the overlay's upper lower layer
        /// (see [`crate::review::stack`]).
        lower_tree: Option<usize>,
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
    /// A learning run's filter ([`crate::seccomp::learning`]), installed
    /// with a listener in place of `seccomp`, whose verdicts the supervisor
    /// gives through it.
    pub observer: Option<Vec<libc::sock_filter>>,
}

/// How the caller wants the run supervised: the part of the supervisor's
/// configuration that does not come from the profile.
#[derive(Debug, Clone, Default)]
pub struct Supervision {
    /// A delegated cgroup to create the run's cgroup in, instead of the supervisor's own.
    pub cgroup_parent: Option<PathBuf>,
    /// The cgroup layout the caller already detected ([`crate::Command::cgroup_layout`]).
    pub cgroup_layout: Option<crate::cgroup::CgroupInfo>,
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
    /// Where a review run's changes are kept (None: the user's own store,
    /// [`crate::review::Store::user`]); the daemon names each caller's.
    pub review_store: Option<PathBuf>,
    /// A learning run (`sandbox learn`): the payload installs the
    /// observing filter and the supervisor records what it sees there.
    pub learning: Option<crate::learn::Learning>,
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
    /// A review run's start record (see [`crate::review`]).
    pub review: Option<crate::review::Started>,
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
    /// A learning run: the payload's end of the socket it sends the
    /// observing filter's listener on.
    pub observer: Option<std::os::fd::OwnedFd>,
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

impl Prepared {
    /// Build the plan for running `spec` under `policy`. Pure apart from
    /// reading host metadata (the paths the plan mounts).
    pub fn new(
        policy: &Policy,
        spec: SpawnSpec,
        supervision: Supervision,
    ) -> Result<Prepared, SpawnError> {
        let mut warnings = Vec::new();
        let project = project::project_root(policy, &spec)?;
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

        // The ids decide how each tree is mounted, so they come first.
        let (ids, ids_note) = super::ids::choose(&view::writable_trees(policy, &project), &project);
        warnings.extend(ids_note);
        let mut view = view::ViewPlan::new(ids.root_mode);
        view.add_read_paths(policy)?;
        view.add_trees(policy, &project, &ids)?;
        view.add_handed_over(&spec.read_only_extra, &mut warnings)?;
        view.dangling_links(&mut warnings);
        view.order_parents_first();
        if policy.filesystem.review {
            view.review_layer(
                policy,
                &project,
                spec.review_stack.as_ref().map(|s| s.lower.as_path()),
                ids.inside_uid,
            )?;
        } else if spec.review_stack.is_some() {
            return Err(SpawnError::Invalid(
                "a recipe's step runs in review mode, and this one would not".into(),
            ));
        }
        view.hide(policy, &project, &mut warnings)?;
        let (project_rules, scan) = view.scan_project(policy, &project, &mut warnings)?;
        let view::View {
            mount_dirs,
            mounts,
            idmapped,
            mut landlock_rules,
        } = view.finish()?;

        let etc = view::etc_files(&ids, &project, &env, policy.network.mode);
        confinement::fixed_landlock_rules(&mut landlock_rules);
        let seccomp = confinement::seccomp_filter(policy, &ids)?;
        let observer = match &supervision.learning {
            Some(_) => Some(confinement::learning_filter(policy, &ids)?),
            None => None,
        };
        let rlimits = confinement::rlimits(policy);
        let clone_flags = confinement::clone_flags(policy);

        let tmp_options = cstring(
            "tmp size",
            format!("size={},mode=1777", policy.filesystem.tmp_size),
        )?;
        // The run's record in the store is made before anything runs, with
        // the start that host changes are compared with at apply.
        let review = if policy.filesystem.review && !spec.dry_run {
            let store = crate::review::Store::user();
            // A store that runs can write (the project, a `write` path)
            // would let a later run rewrite what this one kept, records
            // and content alike, before a person applies it.
            if let Some(tree) =
                crate::broker::assemble::writable_tree_holding(policy, &project, store.root())
            {
                return Err(SpawnError::Invalid(format!(
                    "review mode keeps a run's changes in {}, which is inside {}, where runs can write: a later run could rewrite them before they are applied. Set SANDBOX_STATE_DIR (or XDG_STATE_HOME) to a directory outside it",
                    store.root().display(),
                    tree.display()
                )));
            }
            let mut started = store.start(&project, policy);
            started.stack = spec.review_stack.clone();
            Some(started)
        } else {
            None
        };
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
            observer,
        };
        let config = RunConfig {
            policy: policy.clone(),
            supervision,
            warnings,
            project_rules,
            scan,
            read_only_extra: spec.read_only_extra,
            review,
        };
        Ok(Prepared {
            planned,
            config,
            started: Started::default(),
        })
    }
}
