//! The run's own cgroup: created below the supervisor's cgroup (or below a
//! delegated `--cgroup-parent`) before clone, limits written, init added
//! before it is released, statistics read and the directory removed at the
//! end. Never touches a cgroup that is not the run's own, except enabling
//! controllers for children in the parent on cgroup v2, which the kernel
//! requires.

use std::path::{Path, PathBuf};

use super::{CgroupInfo, CgroupMode};

/// What went wrong, with the path (and the data written) named.
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
    /// No usable hierarchy for a controller the limits need.
    #[error("{0}")]
    Unavailable(String),
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
}

fn write(path: &Path, data: &str) -> Result<(), CgroupError> {
    std::fs::write(path, data).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        data: data.into(),
        source,
    })
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
    std::fs::create_dir(path).map_err(|source| CgroupError::Create {
        path: path.to_path_buf(),
        source,
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
        let wanted: Vec<&'static str> = [
            limits.memory.map(|_| "memory"),
            limits.pids.map(|_| "pids"),
            limits.cpu.map(|_| "cpu"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let v2 = info.mode == CgroupMode::V2
            || wanted
                .iter()
                .all(|c| info.controller(c).is_some_and(|c| c.version == 2));
        if !v2 && parent.is_some() {
            return Err(CgroupError::Unavailable(
                "--cgroup-parent needs cgroup v2: on v1 every controller has its own hierarchy"
                    .into(),
            ));
        }
        let cgroup = if v2 {
            Self::create_v2(info, parent, name, &wanted)?
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
    ) -> Result<RunCgroup, CgroupError> {
        let parent = match parent {
            Some(parent) => parent.to_path_buf(),
            None => wanted
                .first()
                .and_then(|c| info.controller(c))
                .map(|c| c.own_cgroup.clone())
                .ok_or_else(|| {
                    CgroupError::Unavailable("no cgroup v2 controller is available".into())
                })?,
        };
        // Controllers must be enabled for the children of the parent.
        let subtree = parent.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
        let missing: Vec<String> = wanted
            .iter()
            .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
            .map(|c| format!("+{c}"))
            .collect();
        if !missing.is_empty() {
            write(&subtree, &missing.join(" "))?;
        }
        let dir = parent.join(name);
        mkdir(&dir)?;
        Ok(RunCgroup {
            version: 2,
            dirs: vec![("unified", dir)],
        })
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
