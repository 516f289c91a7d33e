//! Detection: the files and variables that tell a container engine, a
//! Kubernetes pod, an outer sandbox or bubblewrap, a child user namespace,
//! AppArmor, the sysctls, Landlock and masked paths, read beneath a root
//! so that tests can fake a tree.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{AppArmor, Container, Environment, Outer, SeccompState};
use crate::sysctl::UsernsSysctls;

impl Environment {
    /// Detect the environment of this process.
    pub fn detect() -> Environment {
        let mut env = Environment::detect_at(Path::new("/"), |name| std::env::var_os(name));
        use crate::sys::probe::{raw_probe_syscall, ProbeCall};
        env.landlock_abi = raw_probe_syscall(ProbeCall::LandlockAbiVersion)
            .ok()
            .and_then(|abi| u32::try_from(abi).ok())
            .filter(|abi| *abi >= 1);
        env
    }

    /// Detect the environment from the files beneath `root` (`/` for the
    /// real one) and the variables `var` returns.
    pub fn detect_at(root: &Path, var: impl Fn(&str) -> Option<OsString>) -> Environment {
        let read = |path: &str| std::fs::read_to_string(beneath(root, path)).ok();
        let exists = |path: &str| beneath(root, path).exists();
        let cgroup_paths = read("/proc/self/cgroup").unwrap_or_default()
            + &read("/proc/1/cgroup").unwrap_or_default();
        let pid1_environ = std::fs::read(beneath(root, "/proc/1/environ")).unwrap_or_default();
        let announced = pid1_environ
            .split(|b| *b == 0)
            .find_map(|entry| entry.strip_prefix(b"container="))
            .map(|value| String::from_utf8_lossy(value).into_owned())
            .or_else(|| read("/run/systemd/container").map(|s| s.trim().to_owned()))
            .filter(|s| !s.is_empty());
        let containerenv = read("/run/.containerenv");
        let container = if exists("/.dockerenv") || announced.as_deref() == Some("docker") {
            Some(Container::Docker)
        } else if containerenv.is_some() || announced.as_deref() == Some("podman") {
            Some(Container::Podman {
                rootless: containerenv
                    .as_deref()
                    .is_some_and(|c| c.lines().any(|l| l.trim() == "rootless=1")),
            })
        } else if let Some(name) = announced {
            Some(Container::Other { name })
        } else if in_docker_cgroup(&cgroup_paths) {
            Some(Container::Docker)
        } else if cgroup_paths.contains("libpod") {
            Some(Container::Podman { rootless: false })
        } else {
            None
        };
        let kubernetes = var("KUBERNETES_SERVICE_HOST").is_some()
            || exists("/var/run/secrets/kubernetes.io")
            || exists("/run/secrets/kubernetes.io")
            || cgroup_paths.contains("kubepods");

        let uid_map: Vec<String> = read("/proc/self/uid_map")
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|l| !l.is_empty())
            .collect();
        let initial_user_namespace = (!uid_map.is_empty()).then(|| uid_map == ["0 0 4294967295"]);
        let status = read("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        let is_root = match field("Uid:") {
            // The effective uid is the second field.
            Some(uids) => uids.split_whitespace().nth(1) == Some("0"),
            None => nix::unistd::geteuid().is_root(),
        };
        // CAP_SYS_ADMIN is bit 21 of the hexadecimal effective set.
        let cap_sys_admin = field("CapEff:")
            .and_then(|caps| u64::from_str_radix(&caps, 16).ok())
            .map_or(is_root, |caps| caps & (1 << 21) != 0);
        let seccomp = SeccompState {
            mode: field("Seccomp:").and_then(|v| v.parse().ok()),
            filters: field("Seccomp_filters:").and_then(|v| v.parse().ok()),
            no_new_privs: field("NoNewPrivs:").map(|v| v == "1"),
        };
        let label = read("/proc/self/attr/apparmor/current")
            .or_else(|| read("/proc/self/attr/current"))
            .map(|l| l.trim_end_matches(['\n', '\0']).trim().to_owned())
            .filter(|l| !l.is_empty());
        let sysctls = UsernsSysctls::read_at(root);
        let apparmor = AppArmor {
            enabled: read("/sys/module/apparmor/parameters/enabled").map(|v| v.trim() == "Y"),
            restrict_unprivileged_userns: sysctls.apparmor_restrict_unprivileged_userns,
            label,
        };
        let landlock_in_lsm_list = read("/sys/kernel/security/lsm")
            .map(|list| list.trim().split(',').any(|lsm| lsm == "landlock"));
        let mountinfo = read("/proc/self/mountinfo").unwrap_or_default();
        let (cgroupfs_read_only, proc_masked) = mounts(&mountinfo);
        Environment {
            container,
            kubernetes,
            outer: outer_sandbox(root, seccomp),
            initial_user_namespace,
            uid_map,
            setgroups: read("/proc/self/setgroups").map(|s| s.trim().to_owned()),
            root: is_root,
            cap_sys_admin,
            seccomp,
            apparmor,
            sysctls,
            landlock_in_lsm_list,
            landlock_abi: None,
            cgroupfs_read_only,
            proc_masked,
        }
    }

    /// Root of a user namespace that is not the initial one (`unshare -r`,
    /// rootless Podman, a CI container with a mapped range).
    pub fn root_in_child_user_namespace(&self) -> bool {
        self.root && self.initial_user_namespace == Some(false)
    }

    /// A short description for doctor, e.g. `Docker container, Kubernetes pod`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        match &self.container {
            Some(Container::Docker) => parts.push("Docker container".to_owned()),
            Some(Container::Podman { rootless: true }) => {
                parts.push("rootless Podman container".to_owned())
            }
            Some(Container::Podman { rootless: false }) => {
                parts.push("Podman container".to_owned())
            }
            Some(Container::Other { name }) => parts.push(format!("{name} container")),
            None => {}
        }
        if self.kubernetes {
            parts.push("Kubernetes pod".to_owned());
        }
        match self.outer {
            Some(Outer::Sandbox) => parts.push("inside another sandbox".to_owned()),
            Some(Outer::Bubblewrap) => parts.push("inside bubblewrap".to_owned()),
            None => {}
        }
        if self.initial_user_namespace == Some(false) {
            parts.push(format!(
                "{} of a child user namespace (uid_map {})",
                if self.root { "root" } else { "a user" },
                self.uid_map.join(", ")
            ));
        }
        if self.seccomp.mode == Some(2) {
            parts.push(format!(
                "{} seccomp filter(s) already applied",
                self.seccomp.filters.unwrap_or(1)
            ));
        }
        if self.apparmor.blocks_userns() && !self.cap_sys_admin {
            parts.push("AppArmor restricts unprivileged user namespaces".to_owned());
        } else if let Some(label) = self
            .apparmor
            .label
            .as_deref()
            .filter(|_| self.apparmor.confined())
        {
            parts.push(format!("AppArmor label {label}"));
        }
        if self.cgroupfs_read_only == Some(true) {
            parts.push("cgroup filesystem read-only".to_owned());
        }
        if parts.is_empty() {
            "a host with no container, outer sandbox or restriction detected".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Whether a cgroup path in `/proc/*/cgroup` lines is a Docker
/// container's: `/docker/<id>` (cgroupfs driver) or
/// `docker-<id>.scope` (systemd driver). A process of the docker.service
/// unit, or one started by `dockerd` on a host, is in no container.
pub(super) fn in_docker_cgroup(cgroup_lines: &str) -> bool {
    cgroup_lines.lines().any(|line| {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        let parts: Vec<&str> = path.split('/').collect();
        parts
            .windows(2)
            .any(|w| w[0] == "docker" && !w[1].is_empty())
            || parts
                .iter()
                .any(|p| p.starts_with("docker-") && p.ends_with(".scope"))
    })
}

/// `path` (absolute) beneath `root`.
pub(super) fn beneath(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// Whether a mount at `mount_point` keeps the kernel from mounting a fresh
/// /proc in a new user namespace (`mnt_already_visible`: every mount over
/// a proc mount must sit on one of procfs's own empty mount-point
/// directories, and binfmt_misc's is the only such directory).
pub(super) fn masks_proc(mount_point: &str) -> bool {
    mount_point.starts_with("/proc/") && mount_point != "/proc/sys/fs/binfmt_misc"
}

/// Whether this mount namespace's /proc has paths mounted over it, as
/// container engines do: a sandbox with a new pid namespace cannot mount
/// its own /proc then. One read of /proc/self/mountinfo.
pub fn proc_is_masked() -> bool {
    mounts(&crate::mountinfo::read_own()).1
}

/// `(every cgroup filesystem is read-only, /proc has mounts over it)`.
pub(super) fn mounts(mountinfo: &str) -> (Option<bool>, bool) {
    let mut cgroup_seen = false;
    let mut cgroup_writable = false;
    let mut proc_masked = false;
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split_whitespace().collect();
        let (Some(mount_point), Some(options)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        let fstype = after.split_whitespace().next().unwrap_or("");
        if fstype == "cgroup" || fstype == "cgroup2" {
            cgroup_seen = true;
            if options.split(',').any(|o| o == "rw") {
                cgroup_writable = true;
            }
        }
        if masks_proc(mount_point) {
            proc_masked = true;
        }
    }
    (cgroup_seen.then_some(!cgroup_writable), proc_masked)
}

/// An outer sandbox: PID 1's command line, else an ancestor's name. An
/// ancestor named `sandbox` counts only for a process that carries a seccomp
/// filter and `no_new_privs`, as everything a sandbox runs does: `sandbox
/// serve` is the unsandboxed parent of its skill hosts.
fn outer_sandbox(root: &Path, seccomp: SeccompState) -> Option<Outer> {
    let filtered = seccomp.mode == Some(2) && seccomp.no_new_privs == Some(true);
    let pid1 = std::fs::read(beneath(root, "/proc/1/cmdline")).unwrap_or_default();
    let argv0 = pid1.split(|b| *b == 0).next().unwrap_or_default();
    if argv0 == b"sandbox-init" {
        return Some(Outer::Sandbox);
    }
    if argv0.rsplit(|b| *b == b'/').next() == Some(b"bwrap".as_slice())
        || beneath(root, "/.flatpak-info").exists()
    {
        return Some(Outer::Bubblewrap);
    }
    // Without a pid namespace the outer supervisor is an ancestor.
    let mut pid = parent_of(root, "self")?;
    for _ in 0..64 {
        if pid <= 1 {
            return None;
        }
        let comm = std::fs::read_to_string(beneath(root, &format!("/proc/{pid}/comm")))
            .unwrap_or_default();
        match comm.trim() {
            "sandbox-init" => return Some(Outer::Sandbox),
            "sandbox" if filtered => return Some(Outer::Sandbox),
            "bwrap" => return Some(Outer::Bubblewrap),
            _ => {}
        }
        pid = parent_of(root, &pid.to_string())?;
    }
    None
}

fn parent_of(root: &Path, pid: &str) -> Option<u32> {
    let stat = std::fs::read_to_string(beneath(root, &format!("/proc/{pid}/stat"))).ok()?;
    // The name (field 2) may hold spaces and parentheses; ppid is the second
    // field after its closing parenthesis.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::super::detect::mounts;
    use super::super::testing::*;
    use super::super::*;
    use nix::errno::Errno;

    #[test]
    fn docker_is_also_found_by_its_cgroup_path() {
        let env = Tree::new(&[("/proc/self/cgroup", "0::/docker/0123abcd\n")]).detect();
        assert_eq!(env.container, Some(Container::Docker));
    }

    #[test]
    fn other_engines_announce_themselves() {
        let env = Tree::new(&[("/run/systemd/container", "systemd-nspawn\n")]).detect();
        assert_eq!(
            env.container,
            Some(Container::Other {
                name: "systemd-nspawn".into()
            })
        );
        assert!(clone_eperm(&env).cause.contains("systemd-nspawn container"));
    }

    #[test]
    fn nested_in_bubblewrap() {
        let env = Tree::new(&[("/proc/1/cmdline", "bwrap\0--ro-bind\0/\0/\0")]).detect();
        assert_eq!(env.outer, Some(Outer::Bubblewrap));
        let why = env
            .explain(&Refusal::UserNamespace(Errno::ENOSPC))
            .expect("explained");
        assert!(why.cause.contains("bubblewrap"), "{why:?}");
        assert!(why.fix.contains("--disable-userns"), "{why:?}");
    }

    #[test]
    fn mountinfo_read_only_cgroups_and_masked_proc() {
        assert_eq!(mounts(""), (None, false));
        let host = "31 23 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    22 27 0:21 / /proc rw,relatime - proc proc rw\n";
        assert_eq!(mounts(host), (Some(false), false));
    }

    #[test]
    fn serializes_for_doctor_json() {
        let env = Tree::new(&[("/run/.containerenv", "")]).detect();
        let json = serde_json::to_value(&env).expect("serializes");
        assert_eq!(
            json["container"],
            serde_json::json!({"engine": "podman", "rootless": false})
        );
        assert_eq!(json["outer"], serde_json::Value::Null);
        assert_eq!(json["seccomp"]["mode"], 0);
    }
}
