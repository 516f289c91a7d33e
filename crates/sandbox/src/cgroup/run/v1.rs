//! cgroup v1: one hierarchy per controller, the run's directory created
//! below the supervisor's own cgroup in each. Tested for real where the
//! host has v1 controllers (tests/cgroup_env.rs, tests/run_limits.rs).

use std::path::Path;

use super::{
    create_error, keyed, read_u64, write, CgroupError, CgroupOps, CgroupStats, Placement,
    RunCgroup, CPU_PERIOD_US,
};
use crate::cgroup::CgroupInfo;

/// Where the run's cgroups go on v1: below the supervisor's own cgroup in
/// each hierarchy a limit needs (v1 has no delegated parent to name).
pub(super) fn predict(
    info: &CgroupInfo,
    parent: Option<&Path>,
    wanted: &[&'static str],
) -> Result<Placement, CgroupError> {
    if parent.is_some() {
        return Err(CgroupError::Unavailable(
            "--cgroup-parent needs cgroup v2: on v1 every controller has its own hierarchy".into(),
        ));
    }
    let mut parents = Vec::new();
    for controller in wanted {
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
    Ok(Placement {
        version: 1,
        parents,
        moves_supervisor: false,
    })
}

impl RunCgroup {
    pub(super) fn create_v1(
        info: &CgroupInfo,
        name: &str,
        wanted: &[&'static str],
        ops: &dyn CgroupOps,
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
            if let Err(source) = ops.mkdir(&dir) {
                cgroup.remove();
                return Err(create_error(&dir, 1, source));
            }
            cgroup.dirs.push((controller, dir));
        }
        Ok(cgroup)
    }

    /// Each v1 directory's `tasks` file, open for writing, for a process to
    /// move itself into the run's cgroup by writing `0` (init, and the net
    /// process before it executes); `None` on v2, or when one cannot be
    /// opened (the supervisor then moves the process by pid).
    ///
    /// Why they move themselves: writing a pid to `cgroup.procs` takes the
    /// kernel's cgroup_threadgroup_rwsem for writing, and taking that
    /// percpu semaphore waits for an RCU grace period, about 10 ms on an
    /// idle 2-core machine (`scripts/bench-cgroup-move`), more than the
    /// rest of a cold run.
    /// A thread that moves only itself (`0` written to `tasks`) cannot
    /// exit or exec meanwhile, so a recent kernel skips that semaphore:
    /// 0.04 ms on 6.18. Init is single-threaded until it forks, so its one
    /// thread is the whole process. A kernel without that shortcut moves
    /// it all the same, at the old cost. The kernel checks the opener's
    /// credentials (this supervisor's), so init's own ids, changed since
    /// in its user namespace, do not matter.
    pub fn open_tasks_for_self_move(&self) -> Option<Vec<std::os::fd::OwnedFd>> {
        if self.version != 1 {
            return None;
        }
        self.dirs
            .iter()
            .map(|(_, dir)| {
                std::fs::File::options()
                    .write(true)
                    .open(dir.join("tasks"))
                    .ok()
                    .map(std::os::fd::OwnedFd::from)
            })
            .collect()
    }

    /// Whether the process `pid` is in every one of the run's v1
    /// directories, as its `/proc/PID/cgroup` says (a process that moved
    /// itself: [`RunCgroup::open_tasks_for_self_move`]). False on v2.
    pub fn holds(&self, pid: i32) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            return false;
        };
        self.version == 1
            && self
                .dirs
                .iter()
                .all(|(controller, dir)| in_dir(&text, controller, dir))
    }
}

/// Whether `/proc/PID/cgroup`'s `text` puts the process in `dir` of the
/// v1 hierarchy that has `controller`: the line's path, relative to that
/// hierarchy's root, is how `dir` ends.
fn in_dir(text: &str, controller: &str, dir: &Path) -> bool {
    text.lines().any(|line| {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            return false;
        };
        let relative = path.trim_start_matches('/');
        controllers.split(',').any(|c| c == controller)
            && !relative.is_empty()
            && dir.ends_with(relative)
    })
}

/// `memory.limit_in_bytes`, and no swap on top of it.
pub(super) fn write_memory(dir: &Path, memory: u64) -> Result<(), CgroupError> {
    write(&dir.join("memory.limit_in_bytes"), &memory.to_string())?;
    // memory+swap equal to memory: no swap (present only with swap accounting).
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    if memsw.exists() {
        write(&memsw, &memory.to_string())?;
    }
    Ok(())
}

/// The CFS quota over [`CPU_PERIOD_US`].
pub(super) fn write_cpu(dir: &Path, quota: u64) -> Result<(), CgroupError> {
    write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
    write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())
}

/// Peak memory and OOM kills (`memory.oom_control`).
pub(super) fn read_memory(dir: &Path, stats: &mut CgroupStats) {
    stats.memory_peak = read_u64(&dir.join("memory.max_usage_in_bytes"));
    stats.oom_kills = keyed(&dir.join("memory.oom_control"), "oom_kill").unwrap_or(0);
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::cgroup::{CgroupInfo, CgroupLimits, CgroupMode, ControllerInfo, RunCgroup};

    /// A process is in the run's directory when its line for the
    /// controller names it, relative to the hierarchy's root.
    #[test]
    fn a_proc_cgroup_line_is_matched_by_controller_and_path() {
        let dir = Path::new("/sys/fs/cgroup/memory/session/sandbox-7-0");
        let inside = "4:memory:/session/sandbox-7-0\n8:pids:/\n";
        assert!(super::in_dir(inside, "memory", dir));
        assert!(!super::in_dir(inside, "pids", dir));
        assert!(!super::in_dir("4:memory:/session\n", "memory", dir));
        assert!(!super::in_dir("4:memory:/\n", "memory", dir));
        assert!(super::in_dir(
            "1:cpu,cpuacct:/sandbox-7-0\n",
            "cpu",
            Path::new("/c/sandbox-7-0")
        ));
        assert!(!super::in_dir("garbage\n", "memory", dir));
    }

    /// Init may move itself only where every hierarchy's `tasks` opens;
    /// else (and on v2) the supervisor moves it.
    #[test]
    fn init_moves_itself_only_when_every_tasks_file_opens() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<_> = ["memory", "pids"]
            .iter()
            .map(|c| {
                let dir = root.path().join(c).join("run");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("tasks"), "").unwrap();
                (*c, dir)
            })
            .collect();
        let cgroup = |version| RunCgroup {
            version,
            dirs: dirs.clone(),
            supervisor_leaf: None,
        };
        assert_eq!(
            cgroup(1).open_tasks_for_self_move().map(|f| f.len()),
            Some(2)
        );
        assert!(cgroup(2).open_tasks_for_self_move().is_none());
        std::fs::remove_file(dirs[1].1.join("tasks")).unwrap();
        assert!(cgroup(1).open_tasks_for_self_move().is_none());
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
}
