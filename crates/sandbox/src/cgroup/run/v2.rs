//! cgroup v2: one directory below the supervisor's cgroup (or a delegated
//! `--cgroup-parent`), the controllers enabled for it in the parent, and
//! the supervisor moved into a leaf of its own when the kernel's rule
//! that a cgroup with processes enables no controllers for its children
//! requires it. Deciding and creating (reads, the leaf, enabling, the
//! directory) go through [`CgroupOps`], so the tests below play the kernel
//! on a fake tree; limits and statistics are plain file writes and reads.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{
    create_error, keyed, read_u64, write, write_error, CgroupError, CgroupOps, CgroupStats,
    Placement, RunCgroup, CPU_PERIOD_US,
};
use crate::cgroup::CgroupInfo;

/// The leaf cgroup the supervisor moves itself into so that its former
/// cgroup may enable controllers for the run (cgroup v2's rule that a
/// cgroup with processes has no controllers enabled for children).
pub fn supervisor_leaf_name(pid: i32) -> String {
    format!("sandbox-supervisor-{pid}")
}

/// Where the run's cgroup goes on v2, and whether the supervisor has to
/// move into a leaf first: every obstacle the files show, read through
/// `ops`.
pub(super) fn predict(
    info: &CgroupInfo,
    parent: Option<&Path>,
    wanted: &[&'static str],
    ops: &dyn CgroupOps,
) -> Result<Placement, CgroupError> {
    let own_pid = ops.own_pid();
    let run_parent = run_parent_v2(info, parent, wanted, own_pid)?;
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

impl RunCgroup {
    pub(super) fn create_v2(
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
}

/// `memory.max`, and no swap on top of it.
pub(super) fn write_memory(dir: &Path, memory: u64) -> Result<(), CgroupError> {
    write(&dir.join("memory.max"), &memory.to_string())?;
    // Swap would let a run exceed its memory limit unnoticed.
    let swap = dir.join("memory.swap.max");
    if swap.exists() {
        write(&swap, "0")?;
    }
    Ok(())
}

/// `cpu.max`: the quota over [`CPU_PERIOD_US`].
pub(super) fn write_cpu(dir: &Path, quota: u64) -> Result<(), CgroupError> {
    write(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))
}

/// Peak memory and OOM kills (`memory.events`).
pub(super) fn read_memory(dir: &Path, stats: &mut CgroupStats) {
    stats.memory_peak = read_u64(&dir.join("memory.peak"));
    stats.oom_kills = keyed(&dir.join("memory.events"), "oom_kill").unwrap_or(0);
}

#[cfg(test)]
mod tests {
    use super::super::predict_with;
    use super::*;
    use crate::cgroup::{CgroupLimits, CgroupMode, ControllerInfo, FixContext};

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
        fn age(&self, path: &Path) -> Option<std::time::Duration> {
            let young = path.file_name().is_some_and(|n| n == "sandbox-31-2");
            Some(std::time::Duration::from_secs(if young { 3 } else { 60 }))
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
    fn what_dead_supervisors_left_is_removed_and_what_live_ones_have_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let (scope, info) = delegated_scope(root.path(), &[700]);
        let kernel = FakeKernel {
            root: root.path().to_path_buf(),
            pid: 700,
            comms: vec![(700, "sandbox"), (55, "sandbox"), (90, "sleep")],
        };
        let plant = |name: &str, procs: &str| {
            let dir = scope.join(name);
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("cgroup.procs"), procs).unwrap();
        };
        // Dead supervisor 31's leaf and its two runs' cgroups, one of them
        // with a process still in it; live supervisor 55's; a name that is
        // not a run's.
        for name in ["sandbox-supervisor-31", "sandbox-31-0", "sandbox-55-0"] {
            plant(name, "");
        }
        plant("sandbox-31-1", "90");
        // Made three seconds ago: perhaps by a supervisor of another pid
        // namespace that has yet to fill it.
        plant("sandbox-31-2", "");
        plant("sandbox-supervisor-55", "");
        plant("sandbox-31-x", "");
        plant("sandbox-supervisor-+31", "");
        let cgroup = RunCgroup::create_with(&info, None, "run-e", &ALL_LIMITS, &kernel).unwrap();
        // A janitor whose supervisor has spoken stops before removing any.
        cgroup.sweep_beside_with(&kernel, &|| true);
        assert!(scope.join("sandbox-31-0").exists());
        cgroup.sweep_beside_with(&kernel, &|| false);
        for (name, kept) in [
            ("sandbox-supervisor-31", false),
            ("sandbox-31-0", false),
            ("sandbox-31-1", true),
            ("sandbox-31-2", true),
            ("sandbox-supervisor-55", true),
            ("sandbox-55-0", true),
            ("sandbox-31-x", true),
            ("sandbox-supervisor-+31", true),
        ] {
            assert_eq!(scope.join(name).exists(), kept, "{name}");
        }
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
}
