//! Finding the cgroup layout from `/proc/self/mountinfo` and `/proc/self/cgroup`.
//!
//! The mode is decided the way youki's libcgroups does it: cgroup2 at
//! `/sys/fs/cgroup` means unified; legacy controller hierarchies plus a cgroup2
//! mount (usually `/sys/fs/cgroup/unified`) mean hybrid; legacy hierarchies alone
//! mean v1. Each controller is then looked up where the kernel actually bound
//! it: a controller attached to a v1 hierarchy cannot appear in cgroup2, so the
//! v1 mount wins, and otherwise the controller must be listed in this process's
//! `cgroup.controllers`.
use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

use super::{CgroupInfo, CgroupMode, ControllerInfo, CONTROLLERS};

/// The controllers a legacy hierarchy can carry. Options of a `cgroup` mount
/// that are not in this list (`rw`, `name=systemd`, `clone_children`, ...) do not
/// make it a controller hierarchy: a host with only `name=systemd` on v1 is not hybrid.
const V1_CONTROLLERS: [&str; 14] = [
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "blkio",
    "perf_event",
    "net_prio",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
];

/// Where cgroup2 is expected, in order of preference when several are mounted.
const UNIFIED_CANDIDATES: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// Detect the layout of the running process (reads `/proc/self/mountinfo`,
/// `/proc/self/cgroup`, `cgroup.controllers`, and checks write access).
/// Unreadable files count as empty, so a host without `/proc` reports [`CgroupMode::None`].
pub fn detect() -> CgroupInfo {
    let mountinfo = crate::mountinfo::read_own();
    let cgroup = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    detect_in(Path::new("/"), &mountinfo, &cgroup)
}

/// Pure detection from canned text: touches no file. `writable` is always false,
/// and no cgroup2 controller is reported because `cgroup.controllers` is not read;
/// use [`detect_in`] with a fake root to cover those.
pub fn detect_from(mountinfo: &str, proc_self_cgroup: &str) -> CgroupInfo {
    detect_with(mountinfo, proc_self_cgroup, &NoFs)
}

/// Detection with every file access (`cgroup.controllers`, write checks) made
/// below `root` instead of `/`; reported paths stay as the host sees them.
/// `detect()` is `detect_in("/", ...)`; tests pass a temporary directory.
pub fn detect_in(root: &Path, mountinfo: &str, proc_self_cgroup: &str) -> CgroupInfo {
    detect_with(mountinfo, proc_self_cgroup, &RootedFs { root })
}

/// The file accesses detection needs, so tests can fake them.
trait CgroupFs {
    fn read(&self, path: &Path) -> Option<String>;
    fn access(&self, path: &Path) -> Access;
}

/// Whether a cgroup directory takes a new child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Writable,
    /// EROFS: the cgroup filesystem is mounted read-only here (Docker's and
    /// Kubernetes' default), whatever the permissions say.
    ReadOnly,
    Denied,
}

struct NoFs;

impl CgroupFs for NoFs {
    fn read(&self, _path: &Path) -> Option<String> {
        None
    }
    fn access(&self, _path: &Path) -> Access {
        Access::Denied
    }
}

struct RootedFs<'a> {
    root: &'a Path,
}

impl RootedFs<'_> {
    fn host(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }
}

impl CgroupFs for RootedFs<'_> {
    fn read(&self, path: &Path) -> Option<String> {
        fs::read_to_string(self.host(path)).ok()
    }
    fn access(&self, path: &Path) -> Access {
        // Creating a child cgroup is a mkdir in this directory; W_OK is what the
        // kernel checks for it. access() uses the real uid, which is the uid the
        // supervisor runs under (it is never setuid), and answers EROFS for a
        // read-only mount before it looks at permissions.
        match nix::unistd::access(&self.host(path), nix::unistd::AccessFlags::W_OK) {
            Ok(()) => Access::Writable,
            Err(nix::errno::Errno::EROFS) => Access::ReadOnly,
            Err(_) => Access::Denied,
        }
    }
}

pub(crate) use crate::mountinfo::{parse_mountinfo, Mount};

/// `/proc/self/cgroup`: the v1 lines (controller list, path) and the v2 path.
#[derive(Debug, Default)]
struct Membership {
    v1: Vec<(Vec<String>, String)>,
    v2: Option<String>,
}

fn parse_proc_cgroup(text: &str) -> Membership {
    let mut membership = Membership::default();
    for line in text.lines() {
        // "hierarchy-id:controller-list:path"; the path itself may contain ':'.
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        if id == "0" && controllers.is_empty() {
            membership.v2 = Some(path.to_owned());
        } else {
            let list = controllers.split(',').map(str::to_owned).collect();
            membership.v1.push((list, path.to_owned()));
        }
    }
    membership
}

/// The directory of a cgroup given the mount of its hierarchy. The cgroup path is
/// relative to the hierarchy's root, but the mount may show only a subtree
/// (mount root not `/`): then the path must lie inside that subtree, else this
/// process's cgroup is not visible here and `None` is returned.
fn own_directory(mount: &Mount, cgroup_path: &str) -> Option<PathBuf> {
    let cgroup_path = Path::new(cgroup_path);
    // `..` appears when the process sits outside its cgroup namespace's root;
    // such a path cannot be joined safely onto the mount point.
    if cgroup_path
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return None;
    }
    let relative = cgroup_path.strip_prefix(Path::new(&mount.root)).ok()?;
    if relative.as_os_str().is_empty() {
        // Joining "" would add a trailing slash to the reported path.
        return Some(mount.mount_point.clone());
    }
    Some(mount.mount_point.join(relative))
}

fn is_v1_controller_mount(mount: &Mount) -> bool {
    mount.fstype == "cgroup"
        && mount
            .super_options
            .iter()
            .any(|o| V1_CONTROLLERS.contains(&o.as_str()))
}

fn detect_with(mountinfo: &str, proc_self_cgroup: &str, fs: &dyn CgroupFs) -> CgroupInfo {
    let mounts = parse_mountinfo(mountinfo);
    let membership = parse_proc_cgroup(proc_self_cgroup);

    let unified = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup2")
        .min_by_key(|m| {
            UNIFIED_CANDIDATES
                .iter()
                .position(|c| m.mount_point == Path::new(c))
                .unwrap_or(UNIFIED_CANDIDATES.len())
        });
    let has_v1 = mounts.iter().any(is_v1_controller_mount);
    let unified_at_root =
        unified.is_some_and(|m| m.mount_point == Path::new(UNIFIED_CANDIDATES[0]));
    let mode = match (has_v1, unified.is_some()) {
        _ if unified_at_root => CgroupMode::V2,
        (true, true) => CgroupMode::Hybrid,
        (true, false) => CgroupMode::V1,
        (false, true) => CgroupMode::V2,
        (false, false) => CgroupMode::None,
    };

    let unified_dir = unified.and_then(|m| own_directory(m, membership.v2.as_deref()?));
    let unified_controllers: BTreeSet<String> = unified_dir
        .as_ref()
        .and_then(|dir| fs.read(&dir.join("cgroup.controllers")))
        .map(|text| text.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();

    let mut controllers = Vec::new();
    for name in CONTROLLERS {
        let v1_mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.super_options.iter().any(|o| o == name));
        let found = match v1_mount {
            Some(mount) => membership
                .v1
                .iter()
                .find(|(list, _)| list.iter().any(|c| c == name))
                .and_then(|(_, path)| own_directory(mount, path))
                .map(|dir| (1, dir, mount.read_only)),
            None if unified_controllers.contains(name) => unified
                .zip(unified_dir.clone())
                .map(|(mount, dir)| (2, dir, mount.read_only)),
            None => None,
        };
        if let Some((version, own_cgroup, mount_read_only)) = found {
            let access = fs.access(&own_cgroup);
            controllers.push(ControllerInfo {
                name: name.to_owned(),
                version,
                writable: access == Access::Writable && !mount_read_only,
                read_only: mount_read_only || access == Access::ReadOnly,
                own_cgroup,
            });
        }
    }

    CgroupInfo {
        mode,
        controllers,
        unified_mount: unified.map(|m| m.mount_point.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fedora/Ubuntu style: cgroup2 at /sys/fs/cgroup, the user inside a systemd user slice.
    const V2_MOUNTINFO: &str = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    const V2_CGROUP: &str =
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-term.scope\n";

    /// Debian 10 style pure v1, `cpu,cpuacct` joined in one hierarchy.
    const V1_MOUNTINFO: &str = "\
25 18 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755
27 25 0:25 / /sys/fs/cgroup/systemd rw,nosuid shared:6 - cgroup cgroup rw,xattr,name=systemd
31 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:12 - cgroup cgroup rw,cpu,cpuacct
32 25 0:30 / /sys/fs/cgroup/memory rw,nosuid shared:13 - cgroup cgroup rw,memory
33 25 0:31 / /sys/fs/cgroup/pids rw,nosuid shared:14 - cgroup cgroup rw,pids
";
    const V1_CGROUP: &str = "\
12:pids:/user.slice/user-1000.slice/session-2.scope
5:memory:/user.slice/user-1000.slice/session-2.scope
3:cpu,cpuacct:/user.slice
1:name=systemd:/user.slice/user-1000.slice/session-2.scope
";

    /// This development machine: v1 controllers plus cgroup2 (hugetlb only) at unified.
    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
4:memory:/process_api/c544
2:cpuacct:/
1:cpu:/
0::/
";

    fn names(info: &CgroupInfo) -> Vec<(&str, u8, &Path)> {
        info.controllers
            .iter()
            .map(|c| (c.name.as_str(), c.version, c.own_cgroup.as_path()))
            .collect()
    }

    #[test]
    fn pure_v2_systemd_user_slice() {
        let root = tempfile::tempdir().unwrap();
        let scope =
            "sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/app-term.scope";
        fs::create_dir_all(root.path().join(scope)).unwrap();
        // A user slice usually gets memory and pids delegated but not cpu.
        fs::write(
            root.path().join(scope).join("cgroup.controllers"),
            "memory pids\n",
        )
        .unwrap();

        let info = detect_in(root.path(), V2_MOUNTINFO, V2_CGROUP);
        assert_eq!(info.mode, CgroupMode::V2);
        assert_eq!(
            info.unified_mount.as_deref(),
            Some(Path::new("/sys/fs/cgroup"))
        );
        let own = Path::new("/").join(scope);
        assert_eq!(
            names(&info),
            vec![("memory", 2, own.as_path()), ("pids", 2, own.as_path())]
        );
        // The fake directory exists below the temporary root, so it is writable.
        assert!(info.controllers.iter().all(|c| c.writable));
    }

    #[test]
    fn pure_v2_without_filesystem_reports_no_controllers() {
        let info = detect_from(V2_MOUNTINFO, V2_CGROUP);
        assert_eq!(info.mode, CgroupMode::V2);
        assert!(info.controllers.is_empty());
    }

    #[test]
    fn pure_v1_with_joined_cpu_cpuacct() {
        let info = detect_from(V1_MOUNTINFO, V1_CGROUP);
        assert_eq!(info.mode, CgroupMode::V1);
        assert_eq!(info.unified_mount, None);
        assert_eq!(
            names(&info),
            vec![
                (
                    "memory",
                    1,
                    Path::new("/sys/fs/cgroup/memory/user.slice/user-1000.slice/session-2.scope")
                ),
                (
                    "pids",
                    1,
                    Path::new("/sys/fs/cgroup/pids/user.slice/user-1000.slice/session-2.scope")
                ),
                ("cpu", 1, Path::new("/sys/fs/cgroup/cpu,cpuacct/user.slice")),
            ]
        );
        assert!(info.controllers.iter().all(|c| !c.writable));
    }

    #[test]
    fn hybrid_layout_of_this_machine() {
        let root = tempfile::tempdir().unwrap();
        for dir in ["memory/process_api/c544", "pids", "unified"] {
            fs::create_dir_all(root.path().join("sys/fs/cgroup").join(dir)).unwrap();
        }
        // cgroup2 only has hugetlb here: memory, pids, cpu are bound to v1.
        fs::write(
            root.path().join("sys/fs/cgroup/unified/cgroup.controllers"),
            "hugetlb\n",
        )
        .unwrap();

        let info = detect_in(root.path(), HYBRID_MOUNTINFO, HYBRID_CGROUP);
        assert_eq!(info.mode, CgroupMode::Hybrid);
        assert_eq!(
            info.unified_mount.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            names(&info),
            vec![
                (
                    "memory",
                    1,
                    Path::new("/sys/fs/cgroup/memory/process_api/c544")
                ),
                ("pids", 1, Path::new("/sys/fs/cgroup/pids")),
                ("cpu", 1, Path::new("/sys/fs/cgroup/cpu")),
            ]
        );
        // The cpu directory was not created below the fake root: not writable.
        let writable: Vec<bool> = info.controllers.iter().map(|c| c.writable).collect();
        assert_eq!(writable, vec![true, true, false]);
    }

    #[test]
    fn nothing_mounted() {
        let info = detect_from("22 1 0:21 / / rw - ext4 /dev/sda1 rw\n", "");
        assert_eq!(info.mode, CgroupMode::None);
        assert!(info.controllers.is_empty());
        assert_eq!(info.unified_mount, None);
    }

    #[test]
    fn only_name_systemd_on_v1_is_not_a_controller_hierarchy() {
        let mountinfo = "\
27 25 0:25 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
41 25 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";
        assert_eq!(detect_from(mountinfo, "").mode, CgroupMode::V2);
    }

    #[test]
    fn container_mount_root_is_stripped_and_paths_outside_it_are_dropped() {
        // Docker on v1 without a cgroup namespace: the hierarchy is mounted from
        // the container's own cgroup, and /proc/self/cgroup shows the full path.
        let mountinfo = "\
50 40 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory
51 40 0:36 /docker/abc /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids
";
        let cgroup = "4:memory:/docker/abc\n8:pids:/elsewhere\n";
        let info = detect_from(mountinfo, cgroup);
        assert_eq!(
            names(&info),
            vec![("memory", 1, Path::new("/sys/fs/cgroup/memory"))]
        );
    }

    #[test]
    fn parent_components_in_cgroup_path_are_refused() {
        let info = detect_from(V2_MOUNTINFO, "0::/../../escape\n");
        assert_eq!(info.mode, CgroupMode::V2);
        assert!(info.controllers.is_empty());
        let info = detect_from(V1_MOUNTINFO, "5:memory:/../x\n");
        assert!(info.controller("memory").is_none());
    }

    #[test]
    fn escaped_mount_points_are_decoded() {
        let mountinfo = "41 25 0:38 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n";
        let info = detect_from(mountinfo, "0::/\n");
        assert_eq!(
            info.unified_mount.as_deref(),
            Some(Path::new("/mnt/cg two"))
        );
    }

    #[test]
    fn garbled_input_does_not_panic() {
        let garbage = [
            "",
            "\n\n\n",
            " - ",
            "- - - - -",
            "1 2 3 - cgroup2",
            "1 2 3 4 5 6 - cgroup",
            "a b c d e f - cgroup x rw,memory\n",
            "\\\\\\ \\0 \\777 \\1 - cgroup2 \\ \\",
            "\u{0}\u{ffff}:::::",
            "0::relative\n:memory:\n::\n0:\n9999999999999999999:memory:/x",
        ];
        for mountinfo in garbage {
            for cgroup in garbage {
                let _ = detect_from(mountinfo, cgroup);
                let _ = detect_in(Path::new("/nonexistent-root"), mountinfo, cgroup);
            }
        }
        let bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let noise = String::from_utf8_lossy(&bytes);
        let _ = detect_from(&noise, &noise);
    }

    #[test]
    fn a_read_only_cgroup_mount_is_reported_and_never_writable() {
        // Docker's default: cgroup2 at /sys/fs/cgroup, mounted ro, in the
        // container's own cgroup namespace.
        let mountinfo = "\
1021 1003 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate
";
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("sys/fs/cgroup")).unwrap();
        fs::write(
            root.path().join("sys/fs/cgroup/cgroup.controllers"),
            "cpu memory pids\n",
        )
        .unwrap();
        let info = detect_in(root.path(), mountinfo, "0::/\n");
        assert_eq!(info.controllers.len(), 3);
        for c in &info.controllers {
            assert!(c.read_only, "{c:?}");
            assert!(!c.writable, "{c:?}");
        }
        // The same hierarchy mounted rw: writable, not read-only.
        let info = detect_in(
            root.path(),
            &mountinfo.replacen(" ro,", " rw,", 1),
            "0::/\n",
        );
        assert!(info.controllers.iter().all(|c| c.writable && !c.read_only));
        // v1 (Docker on a v1 host): the per-controller mounts are ro.
        let info = detect_from(
            "50 40 0:32 / /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
            "4:memory:/\n",
        );
        assert!(info.controller("memory").is_some_and(|c| c.read_only));
    }
}
