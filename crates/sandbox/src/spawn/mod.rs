//! The spawn path: prepare, clone, set up the child, supervise.
//!
//! P0 is the supervisor, P1 the sandbox's init (PID 1 of its pid namespace),
//! P2 the payload. One file per role: [`prepare`] (everything allocated before
//! clone), [`parent`] (P0), [`init`] (P1), [`child`] (P2). They talk over the
//! typed [`channel`]s; an error crosses a process boundary once, as a record.

pub mod channel;
pub mod child;
pub mod etc;
pub mod failed;
pub mod ids;
pub mod init;
pub mod measure;
pub mod no_namespaces;
pub mod output;
pub mod parent;
pub mod prepare;
pub mod report;
pub mod stdio;
pub mod terminal;
pub mod warm;

use std::path::PathBuf;

use nix::errno::Errno;

pub use prepare::{Prepared, SpawnSpec, Stdio};
pub use report::{Enforced, ExitInfo, Report};

/// A setup step inside the sandbox, named in error records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum Step {
    NoNewPrivs = 1,
    ParentDeathSignal,
    WaitForIdMaps,
    DropGroups,
    SetIds,
    ProcessGroup,
    UnshareCgroup,
    MountPrivate,
    MountBase,
    PivotToBase,
    MountNewRoot,
    CreateMountPoint,
    BindMount,
    AttachIdmappedTree,
    Symlink,
    HidePath,
    ProtectPath,
    MountTmp,
    MountProc,
    MountDev,
    RemountRootReadOnly,
    PivotRoot,
    DetachOldRoot,
    Chdir,
    Loopback,
    ProxyListener,
    Hostname,
    SignalForwarding,
    ForkPayload,
    Setsid,
    SignalReset,
    Rlimit,
    CloseDescriptors,
    Securebits,
    DropCapabilities,
    Landlock,
    LandlockNotEnforced,
    Seccomp,
    Exec,
    VerifyConfinement,
    WaitForCgroup,
    WaitForCommand,
    ReviewLayer,
    JoinCgroup,
    UnshareNamespaces,
}

impl Step {
    const ALL: [Step; 45] = [
        Step::NoNewPrivs,
        Step::ParentDeathSignal,
        Step::WaitForIdMaps,
        Step::DropGroups,
        Step::SetIds,
        Step::ProcessGroup,
        Step::UnshareCgroup,
        Step::MountPrivate,
        Step::MountBase,
        Step::PivotToBase,
        Step::MountNewRoot,
        Step::CreateMountPoint,
        Step::BindMount,
        Step::AttachIdmappedTree,
        Step::Symlink,
        Step::HidePath,
        Step::ProtectPath,
        Step::MountTmp,
        Step::MountProc,
        Step::MountDev,
        Step::RemountRootReadOnly,
        Step::PivotRoot,
        Step::DetachOldRoot,
        Step::Chdir,
        Step::Loopback,
        Step::ProxyListener,
        Step::Hostname,
        Step::SignalForwarding,
        Step::ForkPayload,
        Step::Setsid,
        Step::SignalReset,
        Step::Rlimit,
        Step::CloseDescriptors,
        Step::Securebits,
        Step::DropCapabilities,
        Step::Landlock,
        Step::LandlockNotEnforced,
        Step::Seccomp,
        Step::Exec,
        Step::VerifyConfinement,
        Step::WaitForCgroup,
        Step::WaitForCommand,
        Step::ReviewLayer,
        Step::JoinCgroup,
        Step::UnshareNamespaces,
    ];

    fn from_u8(value: u8) -> Option<Step> {
        Step::ALL.iter().copied().find(|step| *step as u8 == value)
    }

    /// A short human description of the step.
    pub fn describe(self) -> &'static str {
        match self {
            Step::NoNewPrivs => "setting no_new_privs",
            Step::ParentDeathSignal => "setting the parent-death signal",
            Step::WaitForIdMaps => "waiting for the user id maps",
            Step::DropGroups => "dropping supplementary groups",
            Step::SetIds => "switching to the sandbox user",
            Step::ProcessGroup => "creating a process group",
            Step::UnshareCgroup => "entering a new cgroup namespace",
            Step::UnshareNamespaces => "entering new network, IPC and UTS namespaces",
            Step::MountPrivate => "making the mount tree private",
            Step::MountBase => "mounting the staging tmpfs",
            Step::PivotToBase => "pivoting into the staging tmpfs",
            Step::MountNewRoot => "mounting the new root",
            Step::CreateMountPoint => "creating a mount point",
            Step::BindMount => "bind-mounting",
            Step::AttachIdmappedTree => "attaching the idmapped project tree",
            Step::Symlink => "creating a symlink",
            Step::HidePath => "hiding a path",
            Step::ProtectPath => "making a path read-only or pinning it",
            Step::ReviewLayer => {
                "mounting the review layer (a tmpfs, and an overlay over the project)"
            }
            Step::MountTmp => "mounting /tmp",
            Step::MountProc => "mounting /proc",
            Step::MountDev => "populating /dev",
            Step::RemountRootReadOnly => "making the new root read-only",
            Step::PivotRoot => "pivoting into the new root",
            Step::DetachOldRoot => "detaching the old root",
            Step::Chdir => "changing to the working directory",
            Step::Loopback => "bringing up the loopback interface",
            Step::ProxyListener => "opening the proxy's port on the sandbox's loopback",
            Step::Hostname => "setting the hostname",
            Step::SignalForwarding => "installing signal forwarding",
            Step::ForkPayload => "starting the payload process",
            Step::Setsid => "starting a new session",
            Step::SignalReset => "resetting signal handlers",
            Step::Rlimit => "setting a resource limit",
            Step::CloseDescriptors => "closing inherited descriptors",
            Step::Securebits => "locking securebits",
            Step::DropCapabilities => "dropping capabilities",
            Step::Landlock => "applying Landlock rules",
            Step::LandlockNotEnforced => "checking Landlock enforcement",
            Step::Seccomp => "installing the seccomp filter",
            Step::Exec => "executing the command",
            Step::VerifyConfinement => "checking the payload's own view of its confinement",
            Step::WaitForCgroup => "waiting to be moved into the run's cgroup",
            Step::JoinCgroup => "moving into the run's cgroup",
            Step::WaitForCommand => "waiting, warm, for the command",
        }
    }
}

/// Why a sandboxed run could not start or be supervised.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The supervisor has more than one thread, so it cannot clone safely.
    #[error("the supervisor has {threads} threads; cloning is only safe from a single-threaded process (daemons must go through `sandbox __launch`)")]
    NotSingleThreaded {
        /// Threads seen in /proc/self/task.
        threads: u64,
    },
    /// An argument or environment value cannot be passed to execve.
    #[error("{what} contains a NUL byte: {value:?}")]
    NulByte {
        /// What it was (argument, variable).
        what: &'static str,
        /// The offending value, lossily printed.
        value: String,
    },
    /// A path the profile requires does not exist or cannot be inspected.
    #[error("{what} {path}: {source}")]
    Path {
        /// What the path is for.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The profile or the command line asked for something inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// The seccomp filter could not be compiled.
    #[error("compiling the seccomp filter: {0}")]
    Seccomp(#[from] crate::seccomp::SeccompError),
    /// A file the supervisor writes (the audit log) is unsafe or unusable.
    #[error("the audit log: {0}")]
    OutputFile(#[from] crate::safe_file::SafeFileError),
    /// The allowlist's proxy could not be started: the run does not start
    /// without the network it was given.
    #[error("the allowlist's proxy: {0}")]
    NetProcess(#[from] crate::net::process::NetProcessError),
    /// A system call in the supervisor failed.
    #[error("{op}: {source}")]
    Sys {
        /// The operation, with its path where there is one.
        op: String,
        /// The errno.
        source: Errno,
    },
    /// Creating the namespaces failed.
    #[error("cannot create the sandbox's namespaces (clone: {source}){hint}")]
    Clone {
        /// The errno.
        source: Errno,
        /// Cause and fix, when known (starts with ": ").
        hint: String,
    },
    /// Writing a user-namespace id map failed.
    #[error("writing {path} ({data:?}): {source}")]
    IdMap {
        /// The /proc file.
        path: PathBuf,
        /// What was written.
        data: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The walk of the project found something the run cannot start with,
    /// or could not finish.
    #[error("{0}")]
    Scan(#[from] crate::project::scan::ScanError),
    /// A run without namespaces cannot keep what the profile promises.
    #[error("{0}")]
    NoNamespaces(#[from] no_namespaces::NoNamespacesError),
    /// A channel to the child failed.
    #[error("talking to the sandbox's init: {0}")]
    Channel(#[from] channel::ChannelError),
    /// A setup step inside the sandbox failed.
    #[error("sandbox setup failed while {}{}: {}", step.describe(), in_parentheses(detail), Errno::from_raw(*errno).desc())]
    Setup {
        /// The step.
        step: Step,
        /// The errno.
        errno: i32,
        /// The path or reason.
        detail: String,
    },
    /// A layer the profile requires is not fully enforced.
    #[error("{layer} is required by the profile but {reason}")]
    LayerUnavailable {
        /// The layer.
        layer: &'static str,
        /// What is missing and how to fix it.
        reason: String,
    },
    /// A refusal the environment explains: the error names the step, the
    /// explanation the cause and the fix for the environment detected.
    #[error("{error}; cause: {cause}; fix: {fix}")]
    Explained {
        /// The refusal as the step reported it.
        error: Box<SpawnError>,
        /// Why, in this environment.
        cause: String,
        /// What to do.
        fix: String,
    },
    /// The command could not be executed inside the sandbox.
    #[error("cannot execute '{program}': {}{hint}", Errno::from_raw(*errno).desc())]
    Exec {
        /// The program as given.
        program: String,
        /// The errno of the last attempt.
        errno: i32,
        /// Where the program is on the host and how to expose it, when it
        /// was not found inside (starts with "; "), else empty.
        hint: String,
    },
}

impl SpawnError {
    /// The refusal itself, without the explanation around it.
    pub fn step_error(&self) -> &SpawnError {
        match self {
            SpawnError::Explained { error, .. } => error,
            other => other,
        }
    }

    /// The refusal as the environment explains it: the cause and the fix
    /// for the container, sysctl, AppArmor or outer sandbox detected here
    /// ([`crate::environment`]); unchanged when nothing there explains it.
    pub fn explained(self) -> SpawnError {
        let Some(refusal) = self.refusal() else {
            return self;
        };
        let Some(why) = crate::environment::Environment::detect().explain(&refusal) else {
            return self;
        };
        match self {
            SpawnError::Clone { source, .. } => SpawnError::Clone {
                source,
                hint: format!("; cause: {}; fix: {}", why.cause, why.fix),
            },
            error => SpawnError::Explained {
                error: Box::new(error),
                cause: why.cause,
                fix: why.fix,
            },
        }
    }

    /// What kind of refusal the environment might explain.
    pub(crate) fn refusal(&self) -> Option<crate::environment::Refusal> {
        use crate::environment::Refusal;
        match self {
            SpawnError::Clone { hint, .. } if !hint.is_empty() => None,
            SpawnError::Clone { source, .. } => Some(Refusal::UserNamespace(*source)),
            SpawnError::IdMap { .. } => Some(Refusal::IdMap),
            SpawnError::Sys { op, source } => {
                let idmapped = op.starts_with("open_tree") || op.starts_with("idmapping");
                (idmapped || op.starts_with("mount_setattr")).then_some(Refusal::Mount {
                    errno: *source,
                    proc: false,
                    idmapped,
                    pivot: false,
                })
            }
            // cgroup refusals carry their own cause and fix (crate::cgroup::refusal).
            SpawnError::Setup { step, errno, .. } => {
                let errno = Errno::from_raw(*errno);
                match step {
                    Step::WaitForIdMaps | Step::DropGroups | Step::SetIds => Some(Refusal::IdMap),
                    Step::UnshareCgroup
                    | Step::MountPrivate
                    | Step::MountBase
                    | Step::PivotToBase
                    | Step::MountNewRoot
                    | Step::BindMount
                    | Step::AttachIdmappedTree
                    | Step::HidePath
                    | Step::ProtectPath
                    | Step::MountTmp
                    | Step::MountProc
                    | Step::MountDev
                    | Step::RemountRootReadOnly
                    | Step::PivotRoot
                    | Step::DetachOldRoot
                    | Step::Hostname => Some(Refusal::Mount {
                        errno,
                        proc: *step == Step::MountProc,
                        idmapped: false,
                        pivot: matches!(step, Step::PivotToBase | Step::PivotRoot),
                    }),
                    Step::UnshareNamespaces => Some(Refusal::Namespaces(errno)),
                    Step::Seccomp => Some(Refusal::Seccomp(errno)),
                    Step::Landlock => Some(Refusal::Landlock(errno)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The exit status `sandbox run` uses for this error: 127 when the command
    /// could not be executed (as a shell does), 125 for the sandbox's own failures.
    pub fn exit_status(&self) -> i32 {
        match self {
            SpawnError::Exec { .. } => 127,
            _ => 125,
        }
    }
}

/// ` (detail)`, or nothing for a step that names no path.
fn in_parentheses(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    }
}

/// Cloning with the raw system call is only sound from a single-threaded process.
pub fn check_single_threaded() -> Result<(), SpawnError> {
    // The same check the clone wrapper makes (one stat of /proc/self/task),
    // made first so that the refusal names the thread count.
    use crate::sys::thread::NotSingleThreaded;
    match crate::sys::thread::require_single_thread() {
        Ok(()) => Ok(()),
        Err(NotSingleThreaded::Threads(threads)) => Err(SpawnError::NotSingleThreaded { threads }),
        Err(NotSingleThreaded::Unreadable(errno)) => Err(SpawnError::Path {
            what: "reading",
            path: "/proc/self/task".into(),
            source: std::io::Error::from(errno),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_without_a_path_prints_no_empty_parentheses() {
        let seccomp = SpawnError::Setup {
            step: Step::Seccomp,
            errno: libc::EACCES,
            detail: String::new(),
        };
        let text = seccomp.to_string();
        assert!(!text.contains("()"), "{text}");
        assert!(
            text.starts_with("sandbox setup failed while installing the seccomp filter: "),
            "{text}"
        );
        let mount = SpawnError::Setup {
            step: Step::MountPrivate,
            errno: libc::EPERM,
            detail: "/".into(),
        };
        assert!(
            mount
                .to_string()
                .contains("making the mount tree private (/): "),
            "{mount}"
        );
    }

    #[test]
    fn pivot_root_refusals_are_told_apart_from_mounts() {
        use crate::environment::Refusal;
        for (step, pivot) in [
            (Step::PivotToBase, true),
            (Step::PivotRoot, true),
            (Step::MountPrivate, false),
        ] {
            let error = SpawnError::Setup {
                step,
                errno: libc::EPERM,
                detail: String::new(),
            };
            assert_eq!(
                error.refusal(),
                Some(Refusal::Mount {
                    errno: Errno::EPERM,
                    proc: false,
                    idmapped: false,
                    pivot,
                }),
                "{step:?}"
            );
        }
    }
}
