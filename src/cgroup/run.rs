//! The run's own cgroup: created below the supervisor's cgroup (or below a
//! delegated `--cgroup-parent`) before clone, limits written, init added
//! before it is released, statistics read and the directory removed at the
//! end. Never touches a cgroup that is not the run's own, except enabling
//! controllers for children in the parent on cgroup v2, which the kernel
//! requires.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{CgroupInfo, CgroupMode};

/// What went wrong, with the path (and the data written) named. The
/// message is the cause; [`CgroupError::fix`] adds what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Creating the run's directory failed.
    #[error("creating cgroup {path}: {source}")]
    Create {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Writing a control file failed.
    #[error("writing {data:?} to {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What was written.
        data: String,
        /// The error.
        source: std::io::Error,
    },
    /// The hierarchy is mounted read-only (EROFS).
    #[error(
        "the cgroup filesystem is mounted read-only at {path} (EROFS), as Docker, Podman and \
         Kubernetes mount it in a container by default"
    )]
    ReadOnly {
        /// The directory or file the kernel refused to change.
        path: PathBuf,
    },
    /// This user may not create a cgroup there.
    #[error("no write access to the cgroup {path}")]
    NotWritable {
        /// The directory.
        path: PathBuf,
        /// The cgroup version of the hierarchy.
        version: u8,
    },
    /// cgroup v2 lets only a cgroup without processes enable controllers
    /// for its children, and processes other than the supervisor are in it.
    #[error(
        "the cgroup {parent} holds processes other than this supervisor ({}), and cgroup v2 lets \
         a cgroup with processes in it enable no controllers for its children",
        describe_pids(others)
    )]
    InternalProcesses {
        /// The cgroup the run's cgroup would go below.
        parent: PathBuf,
        /// The other processes: pid and command name.
        others: Vec<(i32, String)>,
    },
    /// The parent was not given the controller (not delegated).
    #[error(
        "the {controller} controller is not delegated to {parent} (its cgroup.controllers lists \
         {available:?})"
    )]
    NotDelegated {
        /// The cgroup the run's cgroup would go below.
        parent: PathBuf,
        /// The missing controller.
        controller: String,
        /// What its cgroup.controllers lists.
        available: String,
    },
    /// No usable hierarchy for a controller the limits need.
    #[error("{0}")]
    Unavailable(String),
}

fn describe_pids(others: &[(i32, String)]) -> String {
    let mut listed: Vec<String> = others
        .iter()
        .take(5)
        .map(|(pid, comm)| format!("{pid} {comm}"))
        .collect();
    if others.len() > 5 {
        listed.push(format!("and {} more", others.len() - 5));
    }
    listed.join(", ")
}

/// Who is asking, for the fix: root is never told to run as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixContext {
    /// The supervisor runs as root (euid 0).
    pub root: bool,
}

impl FixContext {
    /// The running process.
    pub fn current() -> FixContext {
        FixContext {
            root: nix::unistd::geteuid().is_root(),
        }
    }
}

const BEST_EFFORT: &str = "or set enforce.cgroups = \"best-effort\" to fall back to rlimits";

impl CgroupError {
    /// What to do about it, for the refusal of a run that requires cgroups.
    pub fn fix(&self, context: FixContext) -> String {
        match self {
            CgroupError::ReadOnly { .. } => {
                "give the container a writable cgroup of its own: Podman: `--systemd=always` \
                 mounts the container's own cgroup (cgroup v2, private cgroup namespace) \
                 read-write; Docker has no such option short of `--privileged` — never bind the \
                 host's hierarchy (`-v /sys/fs/cgroup:/sys/fs/cgroup:rw` lets the container \
                 rewrite every limit on the host) — so set the limits on the container instead \
                 (`docker run --memory --pids-limit --cpus`); Kubernetes offers no writable \
                 cgroup: use the pod's resources.limits; then set enforce.cgroups = \
                 \"best-effort\" so that sandbox falls back to rlimits inside"
                    .to_owned()
            }
            CgroupError::NotWritable { version: 1, .. } if context.root => format!(
                "this root cannot create cgroups (root in a user namespace, or a cgroup \
                 hierarchy owned by another user): start sandbox from the host's root, or give \
                 it a cgroup v2 subtree it owns with --cgroup-parent, {BEST_EFFORT}"
            ),
            CgroupError::NotWritable { version: 1, .. } => format!(
                "cgroup v1 gives unprivileged users no cgroup of their own: run as root, or on a \
                 cgroup v2 host start sandbox in a delegated cgroup (it does so itself through \
                 `systemd-run --user --scope -p Delegate=yes` when a user systemd manager is \
                 running), {BEST_EFFORT}"
            ),
            CgroupError::NotWritable { .. } if context.root => format!(
                "this root cannot create cgroups here (root in a user namespace, or the \
                 cgroup is owned by another user): give sandbox a cgroup it owns with \
                 --cgroup-parent (e.g. `systemd-run --scope -p Delegate=yes sandbox run ...`), \
                 {BEST_EFFORT}"
            ),
            CgroupError::NotWritable { .. } => format!(
                "start sandbox in a delegated cgroup: it does so itself through `systemd-run \
                 --user --scope -p Delegate=yes` when a user systemd manager is reachable \
                 ($XDG_RUNTIME_DIR/systemd/private or $DBUS_SESSION_BUS_ADDRESS; \
                 `loginctl enable-linger $USER` starts one for CI users), or pass a delegated \
                 cgroup with --cgroup-parent, {BEST_EFFORT}"
            ),
            CgroupError::InternalProcesses { parent, .. } => format!(
                "run sandbox as the only process of its cgroup (`systemd-run --user --scope -p \
                 Delegate=yes sandbox run ...` does that; sandbox then moves itself into a leaf \
                 child), move the other processes into a leaf child of {} yourself (`mkdir \
                 {0}/main && echo PID > {0}/main/cgroup.procs`), or pass a cgroup without \
                 processes with --cgroup-parent, {BEST_EFFORT}",
                parent.display()
            ),
            CgroupError::NotDelegated { .. } => format!(
                "delegate the controller (systemd: `Delegate=memory pids cpu` on the unit or \
                 `-p Delegate=yes` on systemd-run), or enable it in the parent's \
                 cgroup.subtree_control, {BEST_EFFORT}"
            ),
            CgroupError::Create { .. }
            | CgroupError::Write { .. }
            | CgroupError::Unavailable(_) => {
                if context.root {
                    format!("check the cgroup hierarchy named above, {BEST_EFFORT}")
                } else {
                    format!(
                        "run as root, start sandbox in a delegated cgroup (`systemd-run --user \
                         --scope -p Delegate=yes sandbox run ...`), {BEST_EFFORT}"
                    )
                }
            }
        }
    }
}

/// The cgroup filesystem operations that creating a run's cgroup performs,
/// so tests can play the kernel's part (EBUSY, EROFS) on a fake tree.
pub trait CgroupOps {
    /// Read a control file.
    fn read(&self, path: &Path) -> std::io::Result<String>;
    /// Write a control file.
    fn write(&self, path: &Path, data: &str) -> std::io::Result<()>;
    /// Create a cgroup.
    fn mkdir(&self, path: &Path) -> std::io::Result<()>;
    /// Remove an empty cgroup.
    fn rmdir(&self, path: &Path) -> std::io::Result<()>;
    /// This process's pid, as the cgroup files show it.
    fn own_pid(&self) -> i32;
    /// Whether a process is alive (a stale supervisor leaf can go).
    fn alive(&self, pid: i32) -> bool;
    /// A process's command name, for the explanation.
    fn comm(&self, pid: i32) -> String;
}

/// The real cgroup filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelOps;

impl CgroupOps for KernelOps {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn write(&self, path: &Path, data: &str) -> std::io::Result<()> {
        std::fs::write(path, data)
    }
    fn mkdir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir(path)
    }
    fn rmdir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_dir(path)
    }
    fn own_pid(&self) -> i32 {
        std::process::id() as i32
    }
    fn alive(&self, pid: i32) -> bool {
        Path::new("/proc").join(pid.to_string()).exists()
    }
    fn comm(&self, pid: i32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_owned())
            .unwrap_or_else(|_| "?".to_owned())
    }
}

/// The leaf cgroup the supervisor moves itself into so that its former
/// cgroup may enable controllers for the run (cgroup v2's rule that a
/// cgroup with processes has no controllers enabled for children).
pub fn supervisor_leaf_name(pid: i32) -> String {
    format!("sandbox-supervisor-{pid}")
}

/// The limits a cgroup enforces.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CgroupLimits {
    /// Bytes of memory (swap is not allowed on top).
    pub memory: Option<u64>,
    /// Tasks.
    pub pids: Option<u64>,
    /// Cores (0.5 = half a core).
    pub cpu: Option<f64>,
}

impl CgroupLimits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.memory.is_some() || self.pids.is_some() || self.cpu.is_some()
    }
}

/// What the cgroup saw, read before it is removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CgroupStats {
    /// Peak memory in bytes, where the kernel reports it.
    pub memory_peak: Option<u64>,
    /// Processes the OOM killer killed in the run's cgroup.
    pub oom_kills: u64,
    /// Times a fork failed at the pids limit.
    pub pids_limit_hits: u64,
    /// Most tasks at once, where the kernel reports it (cgroup v2 `pids.peak`).
    pub pids_peak: Option<u64>,
}

/// The CFS period used for CPU quotas (100 ms, the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// One run's cgroup (one directory per v1 hierarchy, or one v2 directory).
#[derive(Debug)]
pub struct RunCgroup {
    version: u8,
    /// (controller, directory) pairs; for v2 a single ("unified", dir).
    dirs: Vec<(&'static str, PathBuf)>,
    /// Where the supervisor moved itself (v2, a parent holding it).
    supervisor_leaf: Option<PathBuf>,
}

/// Where a run's cgroup would go, as far as it can be told without creating it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// 1 or 2.
    pub version: u8,
    /// The directories the run's cgroups go below (one per v1 hierarchy, one for v2).
    pub parents: Vec<PathBuf>,
    /// cgroup v2: the supervisor is in the parent, which has not enabled the
    /// controllers yet, so it will move itself into a leaf child first.
    pub moves_supervisor: bool,
}

/// The decision [`RunCgroup::create`] makes before it changes anything: which
/// hierarchy, below which cgroup, and every obstacle it can see (read-only
/// mount, no write access, controller not delegated, other processes in a v2
/// parent). `doctor` and the delegated-scope decision use it, so they say
/// what `run` will do.
pub fn predict(
    info: &CgroupInfo,
    parent: Option<&Path>,
    limits: &CgroupLimits,
) -> Result<Placement, CgroupError> {
    predict_with(info, parent, limits, &KernelOps)
}

/// [`predict`] reading through `ops`.
pub fn predict_with(
    info: &CgroupInfo,
    parent: Option<&Path>,
    limits: &CgroupLimits,
    ops: &dyn CgroupOps,
) -> Result<Placement, CgroupError> {
    let wanted = wanted_controllers(limits);
    let v2 = info.mode == CgroupMode::V2
        || wanted
            .iter()
            .all(|c| info.controller(c).is_some_and(|c| c.version == 2));
    if !v2 {
        if parent.is_some() {
            return Err(CgroupError::Unavailable(
                "--cgroup-parent needs cgroup v2: on v1 every controller has its own hierarchy"
                    .into(),
            ));
        }
        let mut parents = Vec::new();
        for controller in &wanted {
            let Some(found) = info.controller(controller).filter(|c| c.version == 1) else {
                return Err(CgroupError::Unavailable(format!(
                    "no cgroup v1 hierarchy for the {controller} controller"
                )));
            };
            if found.read_only {
                return Err(CgroupError::ReadOnly {
                    path: found.own_cgroup.clone(),
                });
            }
            if !found.writable {
                return Err(CgroupError::NotWritable {
                    path: found.own_cgroup.clone(),
                    version: 1,
                });
            }
            parents.push(found.own_cgroup.clone());
        }
        return Ok(Placement {
            version: 1,
            parents,
            moves_supervisor: false,
        });
    }
    let own_pid = ops.own_pid();
    let run_parent = run_parent_v2(info, parent, &wanted, own_pid)?;
    if parent.is_none() {
        // The supervisor's own cgroup, as detection found it.
        if let Some(own) = wanted.iter().find_map(|c| info.controller(c)) {
            if own.read_only {
                return Err(CgroupError::ReadOnly {
                    path: own.own_cgroup.clone(),
                });
            }
            if !own.writable {
                return Err(CgroupError::NotWritable {
                    path: own.own_cgroup.clone(),
                    version: 2,
                });
            }
        }
    }
    let enabled = ops
        .read(&run_parent.join("cgroup.subtree_control"))
        .unwrap_or_default();
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| !enabled.split_whitespace().any(|e| e == *c))
        .collect();
    let mut moves_supervisor = false;
    if !missing.is_empty() {
        if let Ok(available) = ops.read(&run_parent.join("cgroup.controllers")) {
            if let Some(controller) = missing
                .iter()
                .find(|c| !available.split_whitespace().any(|a| a == **c))
            {
                return Err(CgroupError::NotDelegated {
                    parent: run_parent.clone(),
                    controller: (*controller).to_owned(),
                    available: available.trim().to_owned(),
                });
            }
        }
        // The root cgroup is exempt from the rule; it alone has no cgroup.type.
        let is_root = ops.read(&run_parent.join("cgroup.type")).is_err();
        let procs = pids_in(
            &ops.read(&run_parent.join("cgroup.procs"))
                .unwrap_or_default(),
        );
        if !is_root && !procs.is_empty() {
            let others: Vec<(i32, String)> = procs
                .iter()
                .filter(|p| **p != own_pid)
                .map(|p| (*p, ops.comm(*p)))
                .collect();
            if !others.is_empty() {
                return Err(CgroupError::InternalProcesses {
                    parent: run_parent,
                    others,
                });
            }
            moves_supervisor = true;
        }
    }
    Ok(Placement {
        version: 2,
        parents: vec![run_parent],
        moves_supervisor,
    })
}

fn wanted_controllers(limits: &CgroupLimits) -> Vec<&'static str> {
    [
        limits.memory.map(|_| "memory"),
        limits.pids.map(|_| "pids"),
        limits.cpu.map(|_| "cpu"),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The cgroup v2 directory the run's cgroup goes below: the given parent, or
/// the supervisor's own cgroup. A supervisor that already moved itself into
/// its leaf for an earlier run puts later runs beside that leaf, below the
/// cgroup it was started in, instead of nesting a leaf in the leaf.
fn run_parent_v2(
    info: &CgroupInfo,
    parent: Option<&Path>,
    wanted: &[&str],
    own_pid: i32,
) -> Result<PathBuf, CgroupError> {
    if let Some(parent) = parent {
        return Ok(parent.to_path_buf());
    }
    let own = wanted
        .iter()
        .find_map(|c| info.controller(c))
        .map(|c| c.own_cgroup.clone())
        .ok_or_else(|| {
            CgroupError::Unavailable(format!(
                "none of the {} controllers is delegated to this process's cgroup (cgroup v2; \
                 its cgroup.controllers lists none of them)",
                wanted.join(", ")
            ))
        })?;
    let leaf = supervisor_leaf_name(own_pid);
    match own.parent() {
        Some(above) if own.file_name().is_some_and(|n| n == leaf.as_str()) => {
            Ok(above.to_path_buf())
        }
        _ => Ok(own),
    }
}

fn pids_in(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Enable `wanted` in `parent`'s cgroup.subtree_control. When the kernel
/// answers EBUSY because processes sit in `parent` (the supervisor itself,
/// started in a delegated scope or a container's cgroup), this process, and
/// only this one, moves into a leaf child first. Returns that leaf.
fn enable_for_children(
    parent: &Path,
    wanted: &[&str],
    ops: &dyn CgroupOps,
) -> Result<Option<PathBuf>, CgroupError> {
    let subtree = parent.join("cgroup.subtree_control");
    let enabled = ops.read(&subtree).unwrap_or_default();
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| !enabled.split_whitespace().any(|e| e == *c))
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    // A controller the parent was not given cannot be enabled below it; the
    // kernel would say only ENOENT.
    if let Ok(available) = ops.read(&parent.join("cgroup.controllers")) {
        if let Some(controller) = missing
            .iter()
            .find(|c| !available.split_whitespace().any(|a| a == **c))
        {
            return Err(CgroupError::NotDelegated {
                parent: parent.to_path_buf(),
                controller: (*controller).to_owned(),
                available: available.trim().to_owned(),
            });
        }
    }
    let request = missing
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    let busy = match ops.write(&subtree, &request) {
        Ok(()) => return Ok(None),
        Err(err) if err.raw_os_error() == Some(libc::EBUSY) => err,
        Err(err) => return Err(write_error(&subtree, &request, err)),
    };
    let procs_file = parent.join("cgroup.procs");
    let me = ops.own_pid();
    let procs = pids_in(&ops.read(&procs_file).unwrap_or_default());
    let others: Vec<(i32, String)> = procs
        .iter()
        .filter(|p| **p != me)
        .map(|p| (*p, ops.comm(*p)))
        .collect();
    if !others.is_empty() {
        return Err(CgroupError::InternalProcesses {
            parent: parent.to_path_buf(),
            others,
        });
    }
    if !procs.contains(&me) {
        // EBUSY without processes: a threaded subtree or a controller in use
        // in a way the move cannot help.
        return Err(write_error(&subtree, &request, busy));
    }
    sweep_stale_leaves(parent, ops);
    let leaf = parent.join(supervisor_leaf_name(me));
    match ops.mkdir(&leaf) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(create_error(&leaf, 2, err)),
    }
    let leaf_procs = leaf.join("cgroup.procs");
    if let Err(err) = ops.write(&leaf_procs, &me.to_string()) {
        let _ = ops.rmdir(&leaf);
        return Err(write_error(&leaf_procs, &me.to_string(), err));
    }
    if let Err(err) = ops.write(&subtree, &request) {
        // Back where it was: nothing was enabled, so the parent takes it again.
        let _ = ops.write(&procs_file, &me.to_string());
        let _ = ops.rmdir(&leaf);
        return Err(write_error(&subtree, &request, err));
    }
    Ok(Some(leaf))
}

/// Leaves of supervisors that have exited: a cgroup without processes is all
/// rmdir removes (EBUSY otherwise), so a live supervisor's leaf is never lost.
fn sweep_stale_leaves(parent: &Path, ops: &dyn CgroupOps) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("sandbox-supervisor-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid != ops.own_pid() && !ops.alive(pid) {
            let _ = ops.rmdir(&entry.path());
        }
    }
}

fn write(path: &Path, data: &str) -> Result<(), CgroupError> {
    std::fs::write(path, data).map_err(|source| write_error(path, data, source))
}

fn write_error(path: &Path, data: &str, source: std::io::Error) -> CgroupError {
    if source.raw_os_error() == Some(libc::EROFS) {
        return CgroupError::ReadOnly {
            path: path.to_path_buf(),
        };
    }
    CgroupError::Write {
        path: path.to_path_buf(),
        data: data.into(),
        source,
    }
}

fn create_error(path: &Path, version: u8, source: std::io::Error) -> CgroupError {
    match source.raw_os_error() {
        Some(libc::EROFS) => CgroupError::ReadOnly {
            path: path.to_path_buf(),
        },
        Some(libc::EACCES | libc::EPERM) => CgroupError::NotWritable {
            path: path.parent().unwrap_or(path).to_path_buf(),
            version,
        },
        _ => CgroupError::Create {
            path: path.to_path_buf(),
            source,
        },
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed file (`memory.events`, `pids.events`, `oom_control`).
fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        line.strip_prefix(key)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

fn mkdir(path: &Path) -> Result<(), CgroupError> {
    std::fs::create_dir(path).map_err(|source| create_error(path, 1, source))
}

impl RunCgroup {
    /// Create the run's cgroup named `name` and write `limits`. `parent`
    /// overrides the supervisor's own cgroup (a delegated subtree, v2).
    pub fn create(
        info: &CgroupInfo,
        parent: Option<&Path>,
        name: &str,
        limits: &CgroupLimits,
    ) -> Result<RunCgroup, CgroupError> {
        Self::create_with(info, parent, name, limits, &KernelOps)
    }

    /// [`RunCgroup::create`] with the cgroup v2 steps made through `ops`.
    pub fn create_with(
        info: &CgroupInfo,
        parent: Option<&Path>,
        name: &str,
        limits: &CgroupLimits,
        ops: &dyn CgroupOps,
    ) -> Result<RunCgroup, CgroupError> {
        let wanted = wanted_controllers(limits);
        let v2 = predict_with(info, parent, limits, ops)?.version == 2;
        let cgroup = if v2 {
            Self::create_v2(info, parent, name, &wanted, ops)?
        } else {
            Self::create_v1(info, name, &wanted)?
        };
        if let Err(err) = cgroup.write_limits(limits) {
            cgroup.remove();
            return Err(err);
        }
        Ok(cgroup)
    }

    fn create_v1(
        info: &CgroupInfo,
        name: &str,
        wanted: &[&'static str],
    ) -> Result<RunCgroup, CgroupError> {
        let mut cgroup = RunCgroup {
            version: 1,
            dirs: Vec::new(),
            supervisor_leaf: None,
        };
        for controller in wanted {
            let Some(found) = info.controller(controller).filter(|c| c.version == 1) else {
                cgroup.remove();
                return Err(CgroupError::Unavailable(format!(
                    "no cgroup v1 hierarchy for the {controller} controller"
                )));
            };
            let dir = found.own_cgroup.join(name);
            if let Err(err) = mkdir(&dir) {
                cgroup.remove();
                return Err(err);
            }
            cgroup.dirs.push((controller, dir));
        }
        Ok(cgroup)
    }

    fn create_v2(
        info: &CgroupInfo,
        parent: Option<&Path>,
        name: &str,
        wanted: &[&'static str],
        ops: &dyn CgroupOps,
    ) -> Result<RunCgroup, CgroupError> {
        let parent = run_parent_v2(info, parent, wanted, ops.own_pid())?;
        let supervisor_leaf = enable_for_children(&parent, wanted, ops)?;
        let dir = parent.join(name);
        ops.mkdir(&dir)
            .map_err(|source| create_error(&dir, 2, source))?;
        Ok(RunCgroup {
            version: 2,
            dirs: vec![("unified", dir)],
            supervisor_leaf,
        })
    }

    /// The leaf cgroup this supervisor moved itself into for this run's
    /// controllers, if it had to (see [`supervisor_leaf_name`]).
    pub fn supervisor_leaf(&self) -> Option<&Path> {
        self.supervisor_leaf.as_deref()
    }

    fn dir(&self, controller: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| *c == controller || *c == "unified")
            .map(|(_, d)| d.as_path())
    }

    fn write_limits(&self, limits: &CgroupLimits) -> Result<(), CgroupError> {
        let v2 = self.version == 2;
        if let (Some(memory), Some(dir)) = (limits.memory, self.dir("memory")) {
            if v2 {
                write(&dir.join("memory.max"), &memory.to_string())?;
                // Swap would let a run exceed its memory limit unnoticed.
                let swap = dir.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
            } else {
                write(&dir.join("memory.limit_in_bytes"), &memory.to_string())?;
                // memory+swap equal to memory: no swap (present only with swap accounting).
                let memsw = dir.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write(&memsw, &memory.to_string())?;
                }
            }
        }
        if let (Some(pids), Some(dir)) = (limits.pids, self.dir("pids")) {
            write(&dir.join("pids.max"), &pids.to_string())?;
        }
        if let (Some(cpu), Some(dir)) = (limits.cpu, self.dir("cpu")) {
            let quota = ((cpu * CPU_PERIOD_US as f64).round() as u64).max(1000);
            if v2 {
                write(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
            } else {
                write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
        }
        Ok(())
    }

    /// cgroup v2: the run's directory, opened for a clone that creates the
    /// run's first process in it (`clone3` with `CLONE_INTO_CGROUP`) rather
    /// than moving it there with [`RunCgroup::add`]. None on cgroup v1, where
    /// each hierarchy needs its own move, or when the directory cannot be
    /// opened (the caller then moves the process).
    pub fn clone_target(&self) -> Option<std::os::fd::OwnedFd> {
        if self.version != 2 {
            return None;
        }
        let (_, dir) = self.dirs.first()?;
        std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
            .ok()
            .map(std::os::fd::OwnedFd::from)
    }

    /// Put `pid` (and so everything it will fork) into the cgroup.
    pub fn add(&self, pid: i32) -> Result<(), CgroupError> {
        for (_, dir) in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The cgroup version (1 or 2).
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The run's cgroup directories.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, d)| d.clone()).collect()
    }

    /// Controllers in use.
    pub fn controllers(&self) -> Vec<String> {
        if self.version == 2 {
            return vec!["unified".into()];
        }
        self.dirs.iter().map(|(c, _)| c.to_string()).collect()
    }

    /// Read what the run did.
    pub fn stats(&self) -> CgroupStats {
        let mut stats = CgroupStats::default();
        if let Some(dir) = self.dir("memory") {
            if self.version == 2 {
                stats.memory_peak = read_u64(&dir.join("memory.peak"));
                stats.oom_kills = keyed(&dir.join("memory.events"), "oom_kill").unwrap_or(0);
            } else {
                stats.memory_peak = read_u64(&dir.join("memory.max_usage_in_bytes"));
                stats.oom_kills = keyed(&dir.join("memory.oom_control"), "oom_kill").unwrap_or(0);
            }
        }
        if let Some(dir) = self.dir("pids") {
            stats.pids_limit_hits = keyed(&dir.join("pids.events"), "max").unwrap_or(0);
            stats.pids_peak = read_u64(&dir.join("pids.peak"));
        }
        stats
    }

    /// Kill every task left in the cgroup. After a run's init is reaped its
    /// pid namespace is already empty; this covers a supervisor that died
    /// first. cgroup v2 kills atomically through `cgroup.kill` (Linux 5.14);
    /// v1 has no such file, so tasks are killed until none is left (a fork
    /// racing the sweep is caught by the next round).
    pub fn kill_all(&self) {
        for (_, dir) in &self.dirs {
            let kill_file = dir.join("cgroup.kill");
            if self.version == 2 && kill_file.exists() {
                let _ = std::fs::write(&kill_file, "1");
                continue;
            }
            for _ in 0..100 {
                let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
                    break;
                };
                let pids: Vec<i32> = procs
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }

    /// Remove the run's directories; true when none is left. The run is
    /// over (init's exit emptied the pid namespace), but the last exits may
    /// still be in flight, so an EBUSY is retried briefly.
    pub fn remove(&self) -> bool {
        self.kill_all();
        let mut all_gone = true;
        for (_, dir) in &self.dirs {
            for attempt in 0..100 {
                match std::fs::remove_dir(dir) {
                    Err(err) if err.raw_os_error() == Some(libc::EBUSY) && attempt < 99 => {
                        std::thread::sleep(std::time::Duration::from_millis(1))
                    }
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                        all_gone = false;
                        break;
                    }
                    _ => break,
                }
            }
        }
        all_gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::ControllerInfo;

    fn fake_v2(root: &Path) -> CgroupInfo {
        let own = root.join("user.slice/sandbox-test.scope");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("cgroup.subtree_control"), "pids").unwrap();
        let controller = |name: &str| ControllerInfo {
            name: name.into(),
            version: 2,
            own_cgroup: own.clone(),
            writable: true,
            read_only: false,
        };
        CgroupInfo {
            mode: CgroupMode::V2,
            controllers: vec![controller("memory"), controller("pids"), controller("cpu")],
            unified_mount: Some(root.to_path_buf()),
        }
    }

    #[test]
    fn v2_writes_the_right_files_in_a_fake_tree() {
        let root = tempfile::tempdir().unwrap();
        let info = fake_v2(root.path());
        let own = root.path().join("user.slice/sandbox-test.scope");
        let run_dir = own.join("run-1");
        let limits = CgroupLimits {
            memory: Some(256 << 20),
            pids: Some(64),
            cpu: Some(0.5),
        };
        let cgroup = RunCgroup::create(&info, None, "run-1", &limits).unwrap();
        assert_eq!(
            std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
            "+memory +cpu"
        );
        assert_eq!(
            std::fs::read_to_string(run_dir.join("memory.max")).unwrap(),
            "268435456"
        );
        assert_eq!(
            std::fs::read_to_string(run_dir.join("pids.max")).unwrap(),
            "64"
        );
        assert_eq!(
            std::fs::read_to_string(run_dir.join("cpu.max")).unwrap(),
            "50000 100000"
        );
        cgroup.add(4242).unwrap();
        assert_eq!(
            std::fs::read_to_string(run_dir.join("cgroup.procs")).unwrap(),
            "4242"
        );
        std::fs::write(
            run_dir.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(run_dir.join("memory.peak"), "1234\n").unwrap();
        std::fs::write(run_dir.join("pids.events"), "max 7\n").unwrap();
        std::fs::write(run_dir.join("pids.peak"), "12\n").unwrap();
        let stats = cgroup.stats();
        assert_eq!(
            stats,
            CgroupStats {
                memory_peak: Some(1234),
                oom_kills: 1,
                pids_limit_hits: 7,
                pids_peak: Some(12)
            }
        );
        assert_eq!(cgroup.version(), 2);
        std::fs::write(run_dir.join("cgroup.kill"), "").unwrap();
        cgroup.kill_all();
        assert_eq!(
            std::fs::read_to_string(run_dir.join("cgroup.kill")).unwrap(),
            "1",
            "v2 kills through cgroup.kill"
        );
    }

    #[test]
    fn a_missing_v1_hierarchy_is_an_error_that_leaves_nothing_behind() {
        let root = tempfile::tempdir().unwrap();
        let memory_own = root.path().join("memory/own");
        std::fs::create_dir_all(&memory_own).unwrap();
        let info = CgroupInfo {
            mode: CgroupMode::V1,
            controllers: vec![ControllerInfo {
                name: "memory".into(),
                version: 1,
                own_cgroup: memory_own.clone(),
                writable: true,
                read_only: false,
            }],
            unified_mount: None,
        };
        let limits = CgroupLimits {
            memory: Some(1 << 30),
            pids: Some(10),
            cpu: None,
        };
        let err = RunCgroup::create(&info, None, "run-2", &limits).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no cgroup v1 hierarchy for the pids controller"
        );
        assert!(
            !memory_own.join("run-2").exists(),
            "the memory directory was removed again"
        );
        let memory_only = CgroupLimits {
            memory: Some(1 << 30),
            pids: None,
            cpu: None,
        };
        let err = RunCgroup::create(&info, Some(Path::new("/delegated")), "run-3", &memory_only)
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--cgroup-parent needs cgroup v2"),
            "{err}"
        );
    }

    /// A fake cgroup v2 kernel over a temporary tree: it enforces the rule
    /// that a non-root cgroup with processes enables no controllers for its
    /// children (EBUSY), and the converse that processes cannot join a
    /// cgroup that has (EBUSY); a new cgroup gets the control files and the
    /// controllers its parent enabled; a move leaves the old cgroup.
    struct FakeKernel {
        root: PathBuf,
        pid: i32,
        comms: Vec<(i32, &'static str)>,
    }

    fn io(errno: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno)
    }

    impl FakeKernel {
        fn procs(&self, dir: &Path) -> Vec<i32> {
            pids_in(&std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default())
        }
        fn is_root(&self, dir: &Path) -> bool {
            dir == self.root
        }
        fn remove_everywhere(&self, dir: &Path, pid: i32) {
            let procs = dir.join("cgroup.procs");
            let left: Vec<String> = self
                .procs(dir)
                .into_iter()
                .filter(|p| *p != pid)
                .map(|p| p.to_string())
                .collect();
            std::fs::write(&procs, left.join("\n")).unwrap();
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                if entry.path().is_dir() {
                    self.remove_everywhere(&entry.path(), pid);
                }
            }
        }
    }

    impl CgroupOps for FakeKernel {
        fn read(&self, path: &Path) -> std::io::Result<String> {
            std::fs::read_to_string(path)
        }
        fn write(&self, path: &Path, data: &str) -> std::io::Result<()> {
            let dir = path.parent().unwrap();
            match path.file_name().and_then(|n| n.to_str()) {
                Some("cgroup.subtree_control") => {
                    if !self.is_root(dir) && !self.procs(dir).is_empty() {
                        return Err(io(libc::EBUSY));
                    }
                    let mut on: Vec<String> = std::fs::read_to_string(path)?
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect();
                    for c in data.split_whitespace() {
                        if let Some(c) = c.strip_prefix('+') {
                            on.push(c.to_owned());
                        }
                    }
                    std::fs::write(path, on.join(" "))
                }
                Some("cgroup.procs") => {
                    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control"))?;
                    if !self.is_root(dir) && !enabled.trim().is_empty() {
                        return Err(io(libc::EBUSY));
                    }
                    let pid: i32 = data.trim().parse().map_err(|_| io(libc::EINVAL))?;
                    self.remove_everywhere(&self.root, pid);
                    let mut procs = self.procs(dir);
                    procs.push(pid);
                    let text: Vec<String> = procs.iter().map(|p| p.to_string()).collect();
                    std::fs::write(path, text.join("\n"))
                }
                _ => std::fs::write(path, data),
            }
        }
        fn mkdir(&self, path: &Path) -> std::io::Result<()> {
            std::fs::create_dir(path)?;
            let parent = path.parent().unwrap();
            let given = std::fs::read_to_string(parent.join("cgroup.subtree_control"))?;
            std::fs::write(path.join("cgroup.controllers"), given)?;
            std::fs::write(path.join("cgroup.subtree_control"), "")?;
            std::fs::write(path.join("cgroup.procs"), "")?;
            std::fs::write(path.join("cgroup.type"), "domain\n")
        }
        fn rmdir(&self, path: &Path) -> std::io::Result<()> {
            if !self.procs(path).is_empty() {
                return Err(io(libc::EBUSY));
            }
            std::fs::remove_dir_all(path)
        }
        fn own_pid(&self) -> i32 {
            self.pid
        }
        fn alive(&self, pid: i32) -> bool {
            self.comms.iter().any(|(p, _)| *p == pid)
        }
        fn comm(&self, pid: i32) -> String {
            self.comms
                .iter()
                .find(|(p, _)| *p == pid)
                .map_or("?", |(_, c)| c)
                .to_owned()
        }
    }

    /// A delegated scope as systemd hands it over: owned by the user, the
    /// user manager's controllers available, nothing enabled below, and
    /// `procs` in it.
    fn delegated_scope(root: &Path, procs: &[i32]) -> (PathBuf, CgroupInfo) {
        let scope = root.join("user.slice/user@1000.service/app.slice/run-1.scope");
        std::fs::create_dir_all(&scope).unwrap();
        std::fs::write(scope.join("cgroup.controllers"), "cpu memory pids").unwrap();
        std::fs::write(scope.join("cgroup.subtree_control"), "").unwrap();
        std::fs::write(scope.join("cgroup.type"), "domain\n").unwrap();
        let text: Vec<String> = procs.iter().map(|p| p.to_string()).collect();
        std::fs::write(scope.join("cgroup.procs"), text.join("\n")).unwrap();
        let controller = |name: &str| ControllerInfo {
            name: name.into(),
            version: 2,
            own_cgroup: scope.clone(),
            writable: true,
            read_only: false,
        };
        let info = CgroupInfo {
            mode: CgroupMode::V2,
            controllers: vec![controller("memory"), controller("pids"), controller("cpu")],
            unified_mount: Some(root.to_path_buf()),
        };
        (scope, info)
    }

    const ALL_LIMITS: CgroupLimits = CgroupLimits {
        memory: Some(64 << 20),
        pids: Some(32),
        cpu: Some(1.0),
    };

    #[test]
    fn a_supervisor_alone_in_its_v2_cgroup_moves_into_a_leaf_and_the_run_gets_its_controllers() {
        let root = tempfile::tempdir().unwrap();
        let (scope, info) = delegated_scope(root.path(), &[700]);
        let kernel = FakeKernel {
            root: root.path().to_path_buf(),
            pid: 700,
            comms: vec![(700, "sandbox")],
        };
        // The plain write is what the kernel refuses: EBUSY.
        assert_eq!(
            kernel
                .write(&scope.join("cgroup.subtree_control"), "+memory")
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EBUSY)
        );
        let placement = predict_with(&info, None, &ALL_LIMITS, &kernel).unwrap();
        assert!(placement.moves_supervisor);
        assert_eq!(placement.parents, vec![scope.clone()]);

        let cgroup = RunCgroup::create_with(&info, None, "run-a", &ALL_LIMITS, &kernel).unwrap();
        let leaf = scope.join("sandbox-supervisor-700");
        assert_eq!(cgroup.supervisor_leaf(), Some(leaf.as_path()));
        assert_eq!(kernel.procs(&scope), Vec::<i32>::new());
        assert_eq!(kernel.procs(&leaf), vec![700]);
        assert_eq!(
            std::fs::read_to_string(scope.join("cgroup.subtree_control")).unwrap(),
            "memory pids cpu"
        );
        let run = scope.join("run-a");
        assert_eq!(cgroup.paths(), vec![run.clone()]);
        assert_eq!(
            std::fs::read_to_string(run.join("cgroup.controllers")).unwrap(),
            "memory pids cpu"
        );
        assert_eq!(std::fs::read_to_string(run.join("pids.max")).unwrap(), "32");
        assert_eq!(
            std::fs::read_to_string(run.join("memory.max")).unwrap(),
            "67108864"
        );

        // The next run of the same supervisor: detection now finds it in its
        // leaf; the run goes beside the leaf, not into it.
        let mut moved = info.clone();
        for c in &mut moved.controllers {
            c.own_cgroup = leaf.clone();
        }
        let second = RunCgroup::create_with(&moved, None, "run-b", &ALL_LIMITS, &kernel).unwrap();
        assert_eq!(second.paths(), vec![scope.join("run-b")]);
        assert_eq!(second.supervisor_leaf(), None);
        assert!(!leaf.join("run-b").exists());
    }

    #[test]
    fn other_processes_in_the_v2_cgroup_are_named_and_never_moved() {
        let root = tempfile::tempdir().unwrap();
        let (scope, info) = delegated_scope(root.path(), &[700, 41, 42]);
        let kernel = FakeKernel {
            root: root.path().to_path_buf(),
            pid: 700,
            comms: vec![(700, "sandbox"), (41, "bash"), (42, "make")],
        };
        let err = RunCgroup::create_with(&info, None, "run-a", &ALL_LIMITS, &kernel).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("holds processes other than this supervisor (41 bash, 42 make)"),
            "{message}"
        );
        let fix = err.fix(FixContext { root: false });
        assert!(fix.contains("Delegate=yes"), "{fix}");
        assert!(fix.contains("best-effort"), "{fix}");
        // Nobody moved, nothing created, nothing enabled.
        assert_eq!(kernel.procs(&scope), vec![700, 41, 42]);
        assert!(!scope.join("sandbox-supervisor-700").exists());
        assert!(!scope.join("run-a").exists());
        assert_eq!(
            std::fs::read_to_string(scope.join("cgroup.subtree_control")).unwrap(),
            ""
        );
        // The same decision, before anything is attempted (what doctor shows).
        assert_eq!(
            predict_with(&info, None, &ALL_LIMITS, &kernel)
                .unwrap_err()
                .to_string(),
            message
        );
    }

    #[test]
    fn the_kernels_ebusy_is_met_even_when_the_prediction_saw_no_processes() {
        // A process joined between detection and creation: create reacts to
        // the kernel's EBUSY, not only to what predict saw.
        let root = tempfile::tempdir().unwrap();
        let (scope, info) = delegated_scope(root.path(), &[]);
        let kernel = FakeKernel {
            root: root.path().to_path_buf(),
            pid: 700,
            comms: vec![(700, "sandbox"), (9, "sleep")],
        };
        assert!(
            !predict_with(&info, None, &ALL_LIMITS, &kernel)
                .unwrap()
                .moves_supervisor
        );
        std::fs::write(scope.join("cgroup.procs"), "700").unwrap();
        let cgroup = RunCgroup::create_with(&info, None, "run-c", &ALL_LIMITS, &kernel).unwrap();
        assert!(cgroup.supervisor_leaf().is_some());
        std::fs::write(scope.join("cgroup.subtree_control"), "").unwrap();
        std::fs::write(scope.join("cgroup.procs"), "700\n9").unwrap();
        std::fs::remove_dir_all(scope.join("sandbox-supervisor-700")).unwrap();
        let err = RunCgroup::create_with(&info, None, "run-d", &ALL_LIMITS, &kernel).unwrap_err();
        assert!(err.to_string().contains("(9 sleep)"), "{err}");
    }

    #[test]
    fn stale_leaves_of_dead_supervisors_are_removed_and_live_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let (scope, info) = delegated_scope(root.path(), &[700]);
        let kernel = FakeKernel {
            root: root.path().to_path_buf(),
            pid: 700,
            comms: vec![(700, "sandbox"), (55, "sandbox")],
        };
        for pid in [31, 55] {
            let leaf = scope.join(format!("sandbox-supervisor-{pid}"));
            std::fs::create_dir(&leaf).unwrap();
            std::fs::write(leaf.join("cgroup.procs"), "").unwrap();
        }
        RunCgroup::create_with(&info, None, "run-e", &ALL_LIMITS, &kernel).unwrap();
        assert!(
            !scope.join("sandbox-supervisor-31").exists(),
            "dead: removed"
        );
        assert!(scope.join("sandbox-supervisor-55").exists(), "alive: kept");
    }

    #[test]
    fn an_undelegated_controller_and_a_read_only_tree_are_told_apart() {
        let root = tempfile::tempdir().unwrap();
        let (scope, mut info) = delegated_scope(root.path(), &[700]);
        let kernel = FakeKernel {
            root: root.path().to_path_buf(),
            pid: 700,
            comms: vec![(700, "sandbox")],
        };
        std::fs::write(scope.join("cgroup.controllers"), "memory pids").unwrap();
        let err = predict_with(&info, None, &ALL_LIMITS, &kernel).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the cpu controller is not delegated to"),
            "{err}"
        );
        for c in &mut info.controllers {
            c.read_only = true;
            c.writable = false;
        }
        let err = RunCgroup::create_with(&info, None, "run-f", &ALL_LIMITS, &kernel).unwrap_err();
        assert!(matches!(err, CgroupError::ReadOnly { .. }), "{err}");
        assert!(!scope.join("run-f").exists());
    }

    #[test]
    fn fixes_never_tell_root_to_run_as_root() {
        let errors = [
            CgroupError::ReadOnly {
                path: "/sys/fs/cgroup".into(),
            },
            CgroupError::NotWritable {
                path: "/sys/fs/cgroup/x".into(),
                version: 1,
            },
            CgroupError::NotWritable {
                path: "/sys/fs/cgroup/x".into(),
                version: 2,
            },
            CgroupError::InternalProcesses {
                parent: "/sys/fs/cgroup".into(),
                others: vec![(1, "init".into())],
            },
            CgroupError::NotDelegated {
                parent: "/sys/fs/cgroup".into(),
                controller: "cpu".into(),
                available: "memory".into(),
            },
            CgroupError::Unavailable("no cgroup v1 hierarchy for the pids controller".into()),
        ];
        for err in &errors {
            let fix = err.fix(FixContext { root: true });
            assert!(!fix.contains("run as root"), "{err}: {fix}");
            assert!(fix.contains("best-effort"), "{err}: {fix}");
        }
        let unprivileged_v1 = errors[1].fix(FixContext { root: false });
        assert!(unprivileged_v1.contains("run as root"), "{unprivileged_v1}");
    }
}
