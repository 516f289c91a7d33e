//! The run's own cgroup: created below the supervisor's cgroup (or below a
//! delegated `--cgroup-parent`) before clone, limits written, init added
//! before it is released, statistics read and the directory removed at the
//! end. Never touches a cgroup that is not the run's own, except enabling
//! controllers for children in the parent on cgroup v2, which the kernel
//! requires.
//!
//! What both hierarchies share is here: the filesystem seam
//! ([`CgroupOps`]), limits, statistics, the run's cgroup and the decision
//! between v1 and v2. Each hierarchy's own steps are in [`v1`] (one
//! directory per controller) and [`v2`] (one directory, controllers
//! enabled in the parent, the supervisor's leaf); the errors and their
//! fixes are in [`error`].

use std::path::{Path, PathBuf};

use super::{CgroupInfo, CgroupMode};

mod error;
mod v1;
mod v2;

pub use error::{CgroupError, FixContext};
pub use v2::supervisor_leaf_name;

/// The name of a run's cgroup: its supervisor's pid and the run's count in
/// that supervisor, so that whoever creates a cgroup later can tell a dead
/// supervisor's leftover by its name ([`sweep_stale`]).
pub fn run_cgroup_name(supervisor: u32, run: u32) -> String {
    format!("sandbox-{supervisor}-{run}")
}

/// The supervisor's pid in a run cgroup's name (`sandbox-<pid>-<run>`, both
/// ASCII digits), or `None` for any other name.
pub fn run_cgroup_owner(name: &str) -> Option<i32> {
    let (pid, run) = name.strip_prefix("sandbox-")?.split_once('-')?;
    digits(run)?;
    digits(pid)
}

/// The supervisor's pid in a v2 leaf's name ([`supervisor_leaf_name`]).
fn leaf_owner(name: &str) -> Option<i32> {
    digits(name.strip_prefix("sandbox-supervisor-")?)
}

/// A number written in ASCII digits only: `parse` alone takes `+1` and `-1`.
fn digits(text: &str) -> Option<i32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// How old a dead supervisor's cgroup must be before [`sweep_stale`] takes
/// it: a supervisor of another pid namespace (whose pid is none here) makes
/// its run's cgroup, writes the limits and moves init in within
/// milliseconds, so a cgroup this old is past that window and losing it
/// cannot cost a live run its limits. A cgroup's inode time is when the
/// kernel last instantiated it (at creation, or at a lookup after it was
/// evicted), so it errs towards young, and keeping.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Entries of a parent cgroup [`sweep_stale`] looks at: a janitor must not
/// spend its run listing a cgroup someone filled with thousands of children.
const SWEEP_ENTRIES: usize = 4096;

/// Leftovers [`sweep_stale`] tries to remove in one sweep (the next run's
/// janitor takes the rest).
const SWEEP_REMOVALS: usize = 64;

/// Remove, from the cgroup a run's cgroup is below, what dead supervisors
/// left there: their runs' cgroups ([`run_cgroup_name`]) and
/// their v2 leaves ([`supervisor_leaf_name`]). A supervisor killed between
/// creating its run's cgroup and forking the janitor that would remove it
/// (or killed together with that janitor) leaves an empty one for good
/// otherwise, and a machine running sandboxes all day collects them.
///
/// Only an empty cgroup is removed (rmdir answers EBUSY for one with
/// processes or children), so a leftover whose run still has processes
/// stays. A live supervisor's cgroups are never touched: its pid is alive
/// (`kill(pid, 0)`, which also sees another user's processes under a
/// `hidepid` /proc). A supervisor of another pid namespace in the same
/// cgroup has a pid that is none here, so its cgroups are taken only once
/// [`STALE_AFTER`] old, past the moment its run joins them; a run's cgroup
/// lost later still holds the run, and rmdir refuses it.
fn sweep_stale(parent: &Path, own: u64, ops: &dyn CgroupOps, stop: &dyn Fn() -> bool) {
    use std::os::unix::fs::MetadataExt;
    // A cgroup directory's link count is two plus its child cgroups
    // (kernfs counts them, as ext4 and tmpfs do; a file system that does
    // not says 1): with none but the run's own there is nothing to list.
    if std::fs::metadata(parent).is_ok_and(|meta| meta.nlink() == 2 + own) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let mut removals = 0;
    for entry in entries.take(SWEEP_ENTRIES).flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let Some(pid) = leaf_owner(name).or_else(|| run_cgroup_owner(name)) else {
            continue;
        };
        if pid == ops.own_pid() || ops.alive(pid) {
            continue;
        }
        // Each rmdir takes the kernel's cgroup lock, which the run being
        // set up beside needs too; a leftover that still holds processes
        // is tried again by every run.
        if removals == SWEEP_REMOVALS || stop() {
            return;
        }
        let path = entry.path();
        if ops.age(&path).is_some_and(|age| age >= STALE_AFTER) {
            removals += 1;
            let _ = ops.rmdir(&path);
        }
    }
}

/// The cgroup filesystem operations that creating a run's cgroup (and
/// sweeping leftovers beside it) performs, so tests can play the kernel's
/// part (EBUSY, EROFS) on a fake tree.
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
    /// Whether a process is alive (a dead supervisor's leaf and run cgroups
    /// can go).
    fn alive(&self, pid: i32) -> bool;
    /// How long ago a cgroup's inode changed: `None` when it cannot be told
    /// (or lies ahead of the clock).
    fn age(&self, path: &Path) -> Option<std::time::Duration>;
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
        crate::sys::signal::process_exists(pid)
    }
    fn age(&self, path: &Path) -> Option<std::time::Duration> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        let changed = std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(
            u64::try_from(meta.ctime()).ok()?,
            u32::try_from(meta.ctime_nsec()).ok()?,
        ))?;
        std::time::SystemTime::now().duration_since(changed).ok()
    }
    fn comm(&self, pid: i32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_owned())
            .unwrap_or_else(|_| "?".to_owned())
    }
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
        return v1::predict(info, parent, &wanted);
    }
    v2::predict(info, parent, &wanted, ops)
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
            Self::create_v1(info, name, &wanted, ops)?
        };
        if let Err(err) = cgroup.write_limits(limits) {
            cgroup.remove();
            return Err(err);
        }
        Ok(cgroup)
    }

    /// Remove what dead supervisors left beside this run's cgroup (see
    /// [`sweep_stale`]), until `stop` says to: the run's janitor calls it
    /// while it waits, beside the run rather than before it, and stops
    /// when its supervisor has something to say or has died.
    pub fn sweep_beside(&self, stop: &dyn Fn() -> bool) {
        self.sweep_beside_with(&KernelOps, stop);
    }

    /// [`RunCgroup::sweep_beside`] through `ops`.
    pub fn sweep_beside_with(&self, ops: &dyn CgroupOps, stop: &dyn Fn() -> bool) {
        let mut swept: Vec<&Path> = Vec::new();
        for (_, dir) in &self.dirs {
            let Some(parent) = dir.parent().filter(|p| !swept.contains(p)) else {
                continue;
            };
            // This run's own children of `parent`: its cgroup there, and the
            // supervisor's leaf if it made one beside it.
            let own = self
                .dirs
                .iter()
                .filter(|(_, d)| d.parent() == Some(parent))
                .count()
                + usize::from(
                    self.supervisor_leaf
                        .as_deref()
                        .is_some_and(|leaf| leaf.parent() == Some(parent)),
                );
            sweep_stale(parent, own as u64, ops, stop);
            swept.push(parent);
        }
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
                v2::write_memory(dir, memory)?;
            } else {
                v1::write_memory(dir, memory)?;
            }
        }
        if let (Some(pids), Some(dir)) = (limits.pids, self.dir("pids")) {
            write(&dir.join("pids.max"), &pids.to_string())?;
        }
        if let (Some(cpu), Some(dir)) = (limits.cpu, self.dir("cpu")) {
            let quota = ((cpu * CPU_PERIOD_US as f64).round() as u64).max(1000);
            if v2 {
                v2::write_cpu(dir, quota)?;
            } else {
                v1::write_cpu(dir, quota)?;
            }
        }
        Ok(())
    }

    /// Put `pid` (and so everything it will fork) into the cgroup.
    pub fn add(&self, pid: i32) -> Result<(), CgroupError> {
        for (_, dir) in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Move the calling process into the cgroup. It must be single-threaded:
    /// on v1 only the calling thread moves, by `0` written to each `tasks`
    /// file, which spares the RCU grace period a move by pid waits for (see
    /// [`RunCgroup::open_tasks_for_self_move`]).
    pub fn add_self(&self) -> Result<(), CgroupError> {
        if self.version != 1 {
            return self.add(std::process::id() as i32);
        }
        for (_, dir) in &self.dirs {
            write(&dir.join("tasks"), "0")?;
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
                v2::read_memory(dir, &mut stats);
            } else {
                v1::read_memory(dir, &mut stats);
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

    #[test]
    fn a_run_cgroups_owner_is_read_only_from_a_run_cgroups_name() {
        assert_eq!(run_cgroup_owner(&run_cgroup_name(4711, 3)), Some(4711));
        for other in [
            "sandbox-supervisor-31",
            "sandbox-+1-0",
            "sandbox-1-",
            "sandbox--1",
            "sandbox-1-2-3",
            "sandbox-1-+2",
            "sandbox-99999999999-0",
            "x-1-0",
            "sandbox-1",
        ] {
            assert_eq!(run_cgroup_owner(other), None, "{other}");
        }
    }
}
