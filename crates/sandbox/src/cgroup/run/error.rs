//! Why a run's cgroup could not be made, and what to do about it for the
//! one asking (root is never told to run as root).

use std::path::PathBuf;

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
    /// Whether creating failed only because a directory of that name
    /// exists: another name may do.
    pub fn name_taken(&self) -> bool {
        matches!(self, CgroupError::Create { source, .. }
            if source.kind() == std::io::ErrorKind::AlreadyExists)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

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
