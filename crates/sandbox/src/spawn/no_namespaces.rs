//! Runs without namespaces: where no user namespace can be created (a
//! container engine's default seccomp profile, a Kubernetes pod,
//! `user.max_user_namespaces=0`, Ubuntu's AppArmor restriction, another
//! sandbox whose filter refuses `CLONE_NEWUSER`) and the profile says
//! `enforce.userns = "best-effort"`, or where it says `"off"`.
//!
//! What needs no privilege still applies: Landlock, seccomp,
//! `no_new_privs`, dropped capabilities, rlimits, a cgroup where one can be
//! had, and the broker. What the namespaces did is replaced where it can
//! be and refused or said where it cannot:
//!
//! - The filesystem view is Landlock alone, on host paths. Landlock rules
//!   only grant, and a right on a directory covers everything below it, so
//!   a secret inside the project cannot be hidden: the run is refused,
//!   naming them. Hard links out of the project would be writable: refused.
//!   Protected entries cannot be read-only: they are copied before the run
//!   and put back after it. Hidden paths below a readable system directory
//!   are left out by granting that directory's other entries one by one.
//!   Landlock is then required at the ABI that scopes signals and abstract
//!   Unix sockets, or the run is refused.
//! - `/tmp` is a private directory the supervisor creates (0700) on the
//!   host's temporary filesystem and removes after the run.
//! - The network is the host's: `none` is kept by refusing `socket` for
//!   every family in seccomp (AF_UNIX too: a pathname socket is reached by
//!   path, which Landlock does not check on connect); `loopback` cannot be
//!   had without a network namespace and is enforced as `none`.
//! - System V IPC and POSIX message queues are the host's: refused.
//! - Processes: init becomes a child subreaper, so every orphan of the run
//!   is re-parented to it, and kills every descendant when the payload ends
//!   or the supervisor goes away. Host processes stay visible in /proc;
//!   Landlock's ptrace rule keeps their memory, environment and descriptors
//!   closed, and its signal scope keeps them from being signalled.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::sched::CloneFlags;
use serde::Serialize;

use super::prepare::{ChildPlan, NoNamespaces, Prepared, SANDBOX_BIN_DIR};
use super::SpawnError;
use crate::landlock::LandlockAccess;
use crate::profile::policy::{Enforcement, NetworkMode, ProjectAccess};
use crate::project::quarantine::SnapshotError;
use crate::project::HardlinkPolicy;

/// How many paths a refusal names before "and N more".
const NAMED: usize = 5;

/// Why a run cannot go on without namespaces.
#[derive(Debug, thiserror::Error)]
pub enum NoNamespacesError {
    /// Something the namespaces would have hidden or protected cannot be,
    /// so the run does not start.
    #[error("without user namespaces ({why}) {what}: {paths}. Fix: {fix}")]
    Refused {
        /// Why there are no namespaces.
        why: String,
        /// What cannot be done.
        what: &'static str,
        /// The paths, comma-separated.
        paths: String,
        /// The fixes, most useful first.
        fix: String,
    },
    /// Landlock is missing or too old to be the only filesystem boundary.
    #[error("without user namespaces ({why}) Landlock is the only filesystem boundary, and {landlock}. Fix: {fix}")]
    Landlock {
        /// Why there are no namespaces.
        why: String,
        /// What the kernel offers.
        landlock: String,
        /// The fixes.
        fix: String,
    },
    /// The protected entries could not be kept for restoring.
    #[error("without user namespaces ({why}): {source}")]
    Snapshot {
        /// Why there are no namespaces.
        why: String,
        /// What went wrong.
        source: SnapshotError,
    },
    /// The private temporary directory could not be created.
    #[error("creating the run's private temporary directory in {base}: {source}; set TMPDIR to a writable directory")]
    TempDir {
        /// Where it was tried.
        base: PathBuf,
        /// The errno.
        source: Errno,
    },
}

/// How the run was isolated, for the report.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Isolation {
    /// `all` (user, mount, pid, ipc, uts, cgroup and, unless the network
    /// is the host's, net) or `none`.
    pub namespaces: String,
    /// `mount-namespace` (a private root) or `landlock-only` (host paths,
    /// Landlock rules only).
    pub view: String,
    /// `read-only` during the run, or `restored-after-the-run`.
    pub protected_entries: String,
    /// Why the run has no namespaces.
    pub reason: Option<String>,
    /// What the run cannot promise.
    pub not_promised: Vec<String>,
}

impl Isolation {
    /// The isolation of the run `prepared` describes.
    pub fn of(prepared: &Prepared) -> Isolation {
        match &prepared.started.no_namespaces {
            None => Isolation {
                namespaces: "all".into(),
                view: "mount-namespace".into(),
                protected_entries: "read-only".into(),
                reason: None,
                not_promised: Vec::new(),
            },
            Some(plan) => Isolation {
                namespaces: "none".into(),
                view: "landlock-only".into(),
                protected_entries: "restored-after-the-run".into(),
                reason: Some(plan.reason.clone()),
                not_promised: plan.not_promised.clone(),
            },
        }
    }
}

/// Whether clone's errno for `CLONE_NEWUSER` (with the mount and pid
/// namespaces) means "no user namespaces here" (a policy or a limit),
/// rather than a failure to report.
///
/// - EPERM: a seccomp filter (Docker, containerd, another sandbox), the
///   AppArmor restriction, `kernel.unprivileged_userns_clone=0`, or a
///   caller in a chroot.
/// - ENOSPC: `user.max_user_namespaces` reached (0 disables them).
/// - EUSERS: 32 nested user namespaces.
/// - EINVAL: a kernel built without CONFIG_USER_NS.
/// - EACCES: what some LSMs answer.
///
/// ENOMEM and EAGAIN (a process limit) are not: they would fail a run
/// without namespaces too, and hiding them behind a weaker mode would turn
/// a transient shortage into a silent downgrade.
pub fn means_unavailable(errno: Errno) -> bool {
    matches!(
        errno,
        Errno::EPERM | Errno::ENOSPC | Errno::EUSERS | Errno::EINVAL | Errno::EACCES
    )
}

/// Whether init's failure at `step` with `errno` means the new user
/// namespace gives no privilege here, so that a best-effort profile runs
/// without namespaces: EPERM or EACCES at the id switch (root mode) or at
/// the first mounts and pivot_root, which need the capabilities a user
/// namespace gives its creator. Ubuntu's AppArmor restriction and an LSM
/// profile that denies mount refuse exactly these; Docker's default seccomp
/// profile refuses pivot_root even to a container given CAP_SYS_ADMIN.
/// Anything later, or another errno, is an error of the run. The network,
/// IPC and UTS namespaces init creates itself ([`crate::spawn::init`]):
/// EPERM or EACCES (refused), EINVAL (not in this kernel). Not ENOSPC,
/// which clone's refusal of them was judged by too: there it is now known
/// to be their own limits, which namespaces of runs just ended still
/// count until the kernel frees them, and a transient shortage must not
/// become a weaker run.
pub fn means_unusable(step: super::Step, errno: Errno) -> bool {
    use super::Step;
    match step {
        Step::UnshareNamespaces => matches!(errno, Errno::EPERM | Errno::EACCES | Errno::EINVAL),
        Step::DropGroups
        | Step::SetIds
        | Step::MountPrivate
        | Step::MountBase
        | Step::PivotToBase => matches!(errno, Errno::EPERM | Errno::EACCES),
        _ => false,
    }
}

fn enable_userns_fix() -> String {
    match crate::probe::userns_unavailable_reason() {
        Some(reason) => format!("enable user namespaces ({reason})"),
        None => "enable user namespaces (`sandbox doctor` names what blocks them here; in a container, run it with a seccomp profile that allows them, e.g. `--security-opt seccomp=unconfined` for Docker and Podman)".into(),
    }
}

fn name_paths(paths: &[PathBuf]) -> String {
    let mut out: Vec<String> = paths
        .iter()
        .take(NAMED)
        .map(|p| p.display().to_string())
        .collect();
    if paths.len() > NAMED {
        out.push(format!("and {} more", paths.len() - NAMED));
    }
    out.join(", ")
}

/// The run without namespaces that stands in for `prepared`'s planned one,
/// with a plan of its own, or a refusal. `reason` says why there are none
/// (for messages and the report). The planned run is left as it is.
pub fn plan_without(prepared: &Prepared, reason: String) -> Result<NoNamespaces, SpawnError> {
    let policy = &prepared.config.policy;
    let planned = &prepared.planned;
    check_landlock(&reason)?;
    refuse_what_cannot_be_hidden(prepared, &reason)?;

    let project_writable = policy.filesystem.project == ProjectAccess::ReadWrite;
    let snapshot = match (&prepared.config.scan, project_writable) {
        (Some(scan), true) => {
            let mut paths: Vec<PathBuf> = scan.protected.iter().map(|f| f.path.clone()).collect();
            paths.extend(scan.protected_links.iter().cloned());
            if paths.is_empty() {
                None
            } else {
                let snapshot = crate::project::quarantine::snapshot(&planned.project, &paths)
                    .map_err(|source| NoNamespacesError::Snapshot {
                        why: reason.clone(),
                        source,
                    })?;
                Some(Arc::new(snapshot))
            }
        }
        _ => None,
    };

    let private_tmp = private_tmp()?;
    // From here on a failure must not leave the directory behind.
    let plan = match plan(
        planned,
        &prepared.config.read_only_extra,
        policy,
        &private_tmp,
    ) {
        Ok(plan) => plan,
        Err(err) => {
            let _ = std::fs::remove_dir_all(&private_tmp);
            return Err(err);
        }
    };
    let mut not_promised = vec![
        "pid isolation: host processes are visible in /proc (their command lines; Landlock keeps their memory, environment and descriptors closed and blocks signals to them)".to_owned(),
        format!(
            "a private /tmp of limited size: /tmp is {} on the host's temporary filesystem (TMPDIR), not size-limited, removed after the run",
            private_tmp.display()
        ),
        "protected entries read-only during the run: they are restored after it, and a host program reading them meanwhile sees the run's version".to_owned(),
        "a private hostname and a private cgroup view: both are the host's".to_owned(),
        // Without an IPC namespace the host's queues and segments would be
        // shared, so the filter refuses them instead of exposing them.
        "System V IPC and POSIX message queues: refused (EPERM), since the host's would be shared".to_owned(),
    ];
    match policy.network.mode {
        NetworkMode::Host => not_promised.push(
            "any network isolation: the network is the host's, including Unix sockets reached by path (a D-Bus session bus or a container engine's socket can start processes outside the sandbox)".into(),
        ),
        NetworkMode::Loopback => not_promised.push(
            "a private loopback: `loopback` needs a network namespace, so the run gets no network at all (socket() is refused)".into(),
        ),
        NetworkMode::Allowlist => not_promised.push(
            "the proxy to the allowlist: it needs a network namespace, so the run gets no network at all (socket() is refused); the broker's net.http still reaches the listed hosts".into(),
        ),
        NetworkMode::None => {}
    }
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        not_promised.push(
            "an unprivileged uid: the command runs as uid 0 without capabilities, so what Landlock lets it write is written as root".into(),
        );
    } else {
        not_promised.push(format!(
            "a separate uid: the command runs as your uid {uid}"
        ));
    }
    Ok(NoNamespaces {
        plan,
        reason,
        private_tmp,
        snapshot,
        not_promised,
    })
}

impl NoNamespaces {
    /// What the run's report and output say about it.
    pub fn warning(&self) -> String {
        format!(
            "running without namespaces ({}): the filesystem view is Landlock rules only; not promised: {}. For full isolation: {}",
            self.reason,
            self.not_promised.join("; "),
            enable_userns_fix()
        )
    }
}

fn check_landlock(reason: &str) -> Result<(), SpawnError> {
    use crate::sys::probe::{raw_probe_syscall, ProbeCall};
    let target = crate::landlock::TARGET_ABI_NUMBER;
    let landlock = match raw_probe_syscall(ProbeCall::LandlockAbiVersion) {
        Ok(abi) if abi >= i64::from(target) => return Ok(()),
        Ok(abi) => format!(
            "this kernel's Landlock ABI is {abi}, below the {target} (Linux 6.12+) that also keeps signals and abstract Unix sockets inside the run"
        ),
        Err(Errno::EOPNOTSUPP) => {
            "Landlock is built into this kernel but disabled (add `landlock` to the `lsm=` boot parameter)".into()
        }
        Err(errno) => format!("this kernel has no Landlock ({})", errno.desc()),
    };
    Err(NoNamespacesError::Landlock {
        why: reason.to_owned(),
        landlock,
        fix: format!(
            "{}, or use a kernel with Landlock ABI {target}",
            enable_userns_fix()
        ),
    }
    .into())
}

/// Secrets, hidden paths inside what the run can reach, and hard links out
/// of the project: none can be kept from the payload by Landlock alone.
fn refuse_what_cannot_be_hidden(prepared: &Prepared, reason: &str) -> Result<(), SpawnError> {
    let policy = &prepared.config.policy;
    let project = &prepared.planned.project;
    let mut secrets: Vec<PathBuf> = Vec::new();
    if let Some(scan) = &prepared.config.scan {
        secrets.extend(scan.secrets.iter().map(|f| f.path.clone()));
    }
    let reachable: Vec<&PathBuf> = std::iter::once(project)
        .filter(|_| policy.filesystem.project != ProjectAccess::Empty)
        .chain(&policy.filesystem.write)
        .collect();
    for hidden in &policy.filesystem.hide {
        let path = if hidden.is_absolute() {
            hidden.clone()
        } else {
            project.join(hidden)
        };
        if reachable.iter().any(|r| path.starts_with(r)) && path.symlink_metadata().is_ok() {
            let shown = path
                .strip_prefix(project)
                .map(Path::to_path_buf)
                .unwrap_or(path);
            if !secrets.contains(&shown) {
                secrets.push(shown);
            }
        }
    }
    if !secrets.is_empty() {
        return Err(NoNamespacesError::Refused {
            why: reason.to_owned(),
            what: "the project's secrets cannot be hidden (Landlock can only grant a directory with everything below it)",
            paths: name_paths(&secrets),
            fix: format!(
                "{}; or move them out of the project; or, if the command may read them, use a profile that extends `{}` with `[filesystem] secrets_remove = [...]` naming them",
                enable_userns_fix(),
                policy.name
            ),
        }
        .into());
    }
    if let Some(scan) = &prepared.config.scan {
        let writable = policy.filesystem.project == ProjectAccess::ReadWrite;
        if writable
            && policy.filesystem.hardlinks != HardlinkPolicy::Allow
            && !scan.outside_links.is_empty()
        {
            return Err(NoNamespacesError::Refused {
                why: reason.to_owned(),
                what: "files hard-linked to files outside the project cannot be made read-only, so a write through them would change the outside file",
                paths: name_paths(&scan.outside_links),
                fix: format!(
                    "{}; or replace them with copies (pnpm: `package-import-method=copy`; git: clone without --local); or set `[filesystem] hardlinks = \"allow\"` in a profile if you accept the risk",
                    enable_userns_fix()
                ),
            }
            .into());
        }
    }
    Ok(())
}

fn private_tmp() -> Result<PathBuf, SpawnError> {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    // mkdtemp creates the directory 0700.
    nix::unistd::mkdtemp(&base.join("sandbox-run-XXXXXX")).map_err(|source| {
        NoNamespacesError::TempDir {
            base: base.clone(),
            source,
        }
        .into()
    })
}

fn cstring(path: &Path) -> Result<CString, SpawnError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|err| SpawnError::NulByte {
        what: "path",
        value: String::from_utf8_lossy(&err.into_vec()).into_owned(),
    })
}

/// Grant `access` beneath `path`, except below the `hidden` paths: a
/// directory holding one is granted entry by entry. Symlinks among those
/// entries are left out, since a rule on one would grant what it points at.
fn grant_except(
    path: &Path,
    access: LandlockAccess,
    hidden: &[PathBuf],
    rules: &mut Vec<(CString, LandlockAccess)>,
) -> Result<(), SpawnError> {
    if hidden.iter().any(|h| h == path) {
        return Ok(());
    }
    if !hidden.iter().any(|h| h.starts_with(path)) {
        rules.push((cstring(path)?, access));
        return Ok(());
    }
    let entries = std::fs::read_dir(path).map_err(|source| SpawnError::Path {
        what: "listing a directory that holds hidden paths",
        path: path.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| SpawnError::Path {
            what: "listing a directory that holds hidden paths",
            path: path.to_path_buf(),
            source,
        })?;
        let is_link = entry.file_type().map(|t| t.is_symlink()).unwrap_or(true);
        if !is_link {
            grant_except(&entry.path(), access, hidden, rules)?;
        }
    }
    Ok(())
}

/// The plan of a run without namespaces, from `planned`: host paths under
/// Landlock instead of a root of mounts, /tmp and the sandbox binary at
/// their places in the private directory, the filter standing in for the
/// namespaces.
fn plan(
    planned: &ChildPlan,
    read_only_extra: &[(PathBuf, PathBuf)],
    policy: &crate::profile::policy::Policy,
    private_tmp: &Path,
) -> Result<ChildPlan, SpawnError> {
    // A learning run tells what its view lacks by looking in its own root;
    // here the root is the host's, where everything is, so it would learn
    // nothing and claim the command needed nothing.
    if planned.observer.is_some() {
        return Err(SpawnError::Invalid(
            "learning needs a root of the run's own (user and mount namespaces), and this run has none".into(),
        ));
    }
    let mut rules = landlock_rules(planned, read_only_extra, policy, private_tmp)?;
    let bin_dir = private_tmp.join("bin");
    link_sandbox_binary(&bin_dir, &mut rules)?;
    let envp = relocated_environment(planned, read_only_extra, private_tmp, &bin_dir)?;
    let exec_candidates = relocated_exec_candidates(planned, &bin_dir)?;

    // Network and IPC: the filter stands in for the namespaces.
    let deny_sockets = policy.network.mode != NetworkMode::Host;
    let syscalls = (policy.enforce.seccomp != Enforcement::Off).then_some(&policy.syscalls);
    let seccomp = Some(crate::seccomp::compile_without_namespaces(
        syscalls,
        crate::seccomp::SharedHost { deny_sockets },
    )?);
    let network = match policy.network.mode {
        NetworkMode::Loopback | NetworkMode::Allowlist => NetworkMode::None,
        mode => mode,
    };

    Ok(ChildPlan {
        argv: planned.argv.clone(),
        envp,
        program: planned.program.clone(),
        exec_candidates,
        cwd: planned.cwd.clone(),
        project: planned.project.clone(),
        // No root of its own: the host's, seen through Landlock.
        mount_dirs: Vec::new(),
        mounts: Vec::new(),
        idmapped: Vec::new(),
        landlock_rules: rules,
        landlock: Enforcement::Required,
        seccomp,
        // Without it the host's network and IPC would be open: not best-effort.
        seccomp_enforcement: Enforcement::Required,
        cpu_share: planned.cpu_share,
        rlimits: planned.rlimits.clone(),
        clone_flags: CloneFlags::empty(),
        namespaces: false,
        network,
        tmp_options: planned.tmp_options.clone(),
        ids: super::ids::IdMapping::unprivileged(
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        ),
        etc: Vec::new(),
        dry_run: planned.dry_run,
        observer: None,
    })
}

/// What Landlock grants in place of a root of mounts: the profile's paths
/// (less the hidden ones), the project, the private directory, the devices
/// a root of mounts would hold, and /proc.
fn landlock_rules(
    planned: &ChildPlan,
    read_only_extra: &[(PathBuf, PathBuf)],
    policy: &crate::profile::policy::Policy,
    private_tmp: &Path,
) -> Result<Vec<(CString, LandlockAccess)>, SpawnError> {
    let hidden: Vec<PathBuf> = policy
        .filesystem
        .hide
        .iter()
        .filter(|h| h.is_absolute())
        .cloned()
        .collect();
    let mut rules = Vec::new();
    let readable = policy.filesystem.read.iter().chain(
        policy
            .filesystem
            .read_if_exists
            .iter()
            .filter(|p| p.symlink_metadata().is_ok()),
    );
    for path in readable {
        grant_except(path, LandlockAccess::ReadExec, &hidden, &mut rules)?;
    }
    for (host, _) in read_only_extra {
        rules.push((cstring(host)?, LandlockAccess::ReadExec));
    }
    match policy.filesystem.project {
        ProjectAccess::ReadWrite => {
            rules.push((cstring(&planned.project)?, LandlockAccess::ReadWrite))
        }
        ProjectAccess::ReadOnly => {
            rules.push((cstring(&planned.project)?, LandlockAccess::ReadExec))
        }
        ProjectAccess::Empty => {}
    }
    for path in &policy.filesystem.write {
        rules.push((cstring(path)?, LandlockAccess::ReadWrite));
    }
    rules.push((cstring(private_tmp)?, LandlockAccess::ReadWrite));
    for device in [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
    ] {
        rules.push((cstring(Path::new(device))?, LandlockAccess::Device));
    }
    rules.push((c"/proc".into(), LandlockAccess::Read));

    Ok(rules)
}

/// A link to the sandbox binary in `bin_dir`, granted to the run; best
/// effort, as with namespaces.
fn link_sandbox_binary(
    bin_dir: &Path,
    rules: &mut Vec<(CString, LandlockAccess)>,
) -> Result<(), SpawnError> {
    // The sandbox binary, for `sandbox ipc` and nested runs: a link in the
    // private directory stands in for the mount at SANDBOX_BIN_DIR.
    if let Ok(exe) = std::env::current_exe().and_then(std::fs::canonicalize) {
        if exe.is_file()
            && std::fs::create_dir(bin_dir).is_ok()
            && std::os::unix::fs::symlink(&exe, bin_dir.join("sandbox")).is_ok()
        {
            rules.push((cstring(&exe)?, LandlockAccess::ReadExec));
            // A supervisor inside finds its net process beside the binary
            // the link resolves to, and executes it.
            if let Ok(net) = crate::installed::find(crate::net::process::PROGRAM) {
                rules.push((cstring(&net)?, LandlockAccess::ReadExec));
            }
        }
    }
    Ok(())
}

/// The planned environment, with the paths that are elsewhere without
/// namespaces (/tmp, the binary's directory, paths shown at another path)
/// named where they are.
fn relocated_environment(
    planned: &ChildPlan,
    read_only_extra: &[(PathBuf, PathBuf)],
    private_tmp: &Path,
    bin_dir: &Path,
) -> Result<Vec<CString>, SpawnError> {
    // Environment: /tmp and the binary's directory are elsewhere now.
    let tmp_bytes = private_tmp.as_os_str().as_bytes();
    let mut envp = planned.envp.clone();
    for entry in envp.iter_mut() {
        let bytes = entry.as_bytes();
        let replaced: Option<Vec<u8>> = if bytes.starts_with(b"TMPDIR=") {
            Some([b"TMPDIR=", tmp_bytes].concat())
        } else if bytes == b"HOME=/tmp" {
            Some([b"HOME=", tmp_bytes].concat())
        } else {
            // PATH names the binary's directory, which is elsewhere now.
            relocate_paths(bytes, Path::new(SANDBOX_BIN_DIR), bin_dir)
        };
        if let Some(bytes) = replaced {
            *entry = CString::new(bytes).map_err(|err| SpawnError::NulByte {
                what: "environment variable",
                value: String::from_utf8_lossy(&err.into_vec()).into_owned(),
            })?;
        }
    }
    if !envp.iter().any(|e| e.as_bytes().starts_with(b"TMPDIR=")) {
        envp.push(cstring(Path::new(OsStr::from_bytes(
            &[b"TMPDIR=", tmp_bytes].concat(),
        )))?);
    }
    // A path shown at another path inside (a skill's client libraries at
    // /run/sandbox/lib) stays at its host path, which Landlock grants
    // read-only above: variables that name the inside path name it instead.
    for (host, inside) in read_only_extra {
        if host == inside {
            continue;
        }
        for entry in envp.iter_mut() {
            if let Some(bytes) = relocate_paths(entry.as_bytes(), inside, host) {
                *entry = CString::new(bytes).map_err(|err| SpawnError::NulByte {
                    what: "environment variable",
                    value: String::from_utf8_lossy(&err.into_vec()).into_owned(),
                })?;
            }
        }
    }
    Ok(envp)
}

/// The planned exec candidates, with those in SANDBOX_BIN_DIR at the
/// binary's link instead.
fn relocated_exec_candidates(
    planned: &ChildPlan,
    bin_dir: &Path,
) -> Result<Vec<CString>, SpawnError> {
    let old_bin = format!("{SANDBOX_BIN_DIR}/");
    let mut exec_candidates = planned.exec_candidates.clone();
    for candidate in exec_candidates.iter_mut() {
        if let Some(rest) = candidate.as_bytes().strip_prefix(old_bin.as_bytes()) {
            *candidate = cstring(&bin_dir.join(OsStr::from_bytes(rest)))?;
        }
    }

    Ok(exec_candidates)
}

impl Drop for NoNamespaces {
    fn drop(&mut self) {
        // remove_dir_all does not follow symlinks the run left inside.
        let _ = std::fs::remove_dir_all(&self.private_tmp);
    }
}

/// `NAME=a:b:...` with every component at or below `inside` moved below
/// `host`; `None` when nothing changed.
fn relocate_paths(entry: &[u8], inside: &Path, host: &Path) -> Option<Vec<u8>> {
    let split = entry.iter().position(|b| *b == b'=')?;
    let (name, value) = (&entry[..split], &entry[split + 1..]);
    let mut changed = false;
    let parts: Vec<OsString> = std::env::split_paths(OsStr::from_bytes(value))
        .map(|part| match part.strip_prefix(inside) {
            Ok(rest) => {
                changed = true;
                if rest.as_os_str().is_empty() {
                    host.as_os_str().to_owned()
                } else {
                    host.join(rest).into_os_string()
                }
            }
            Err(_) => part.into_os_string(),
        })
        .collect();
    changed.then(|| [name, b"=", &parts.join(OsStr::new(":")).into_vec()].concat())
}

#[cfg(test)]
mod tests {

    #[test]
    fn variables_naming_a_relocated_path_name_its_host_path() {
        let inside = Path::new("/run/sandbox/lib");
        let host = Path::new("/home/u/.cache/sandbox/lib-ab");
        assert_eq!(
            relocate_paths(b"NODE_PATH=/run/sandbox/lib/node:/opt/x", inside, host),
            Some(b"NODE_PATH=/home/u/.cache/sandbox/lib-ab/node:/opt/x".to_vec())
        );
        assert_eq!(
            relocate_paths(b"PYTHONPATH=/run/sandbox/lib", inside, host),
            Some(b"PYTHONPATH=/home/u/.cache/sandbox/lib-ab".to_vec())
        );
        // A sibling whose name merely starts the same is not below it.
        assert_eq!(
            relocate_paths(b"X=/run/sandbox/library", inside, host),
            None
        );
        assert_eq!(relocate_paths(b"LANG=C.UTF-8", inside, host), None);
    }

    use super::*;

    #[test]
    fn unavailable_errnos_fall_back_and_shortages_do_not() {
        for errno in [
            Errno::EPERM,
            Errno::ENOSPC,
            Errno::EINVAL,
            Errno::EACCES,
            Errno::EUSERS,
        ] {
            assert!(means_unavailable(errno), "{errno}");
        }
        for errno in [Errno::ENOMEM, Errno::EAGAIN, Errno::EFAULT] {
            assert!(!means_unavailable(errno), "{errno}");
        }
    }

    #[test]
    fn init_refused_its_own_namespaces_means_unusable_but_not_when_short() {
        use crate::spawn::Step;
        let step = Step::UnshareNamespaces;
        for errno in [Errno::EPERM, Errno::EACCES, Errno::EINVAL] {
            assert!(means_unusable(step, errno), "{errno}");
        }
        // Their own limits, which runs just ended still hold: a shortage,
        // not a weaker run.
        for errno in [Errno::ENOSPC, Errno::ENOMEM, Errno::EAGAIN] {
            assert!(!means_unusable(step, errno), "{errno}");
        }
    }

    #[test]
    fn clone_and_init_share_the_planned_namespaces_between_them() {
        use crate::spawn::init::{clone_flags_for_init, namespaces_made_by_init};
        use nix::sched::CloneFlags as F;
        for network in [true, false] {
            let mut planned = F::CLONE_NEWUSER
                | F::CLONE_NEWNS
                | F::CLONE_NEWPID
                | F::CLONE_NEWIPC
                | F::CLONE_NEWUTS;
            if network {
                planned |= F::CLONE_NEWNET;
            }
            let at_clone = clone_flags_for_init(planned);
            let by_init = namespaces_made_by_init(planned);
            assert_eq!(at_clone | by_init, planned);
            assert!(at_clone.intersection(by_init).is_empty());
            // The maps go to the user namespace, the handed-over trees to
            // the mount namespace, and init must be the pid namespace's
            // first process: clone's, always.
            assert_eq!(
                at_clone,
                F::CLONE_NEWUSER | F::CLONE_NEWNS | F::CLONE_NEWPID
            );
            assert_eq!(by_init.contains(F::CLONE_NEWNET), network);
        }
    }

    #[test]
    fn only_a_refused_first_mount_or_pivot_means_unusable_namespaces() {
        use crate::spawn::Step;
        for step in [Step::MountPrivate, Step::MountBase, Step::PivotToBase] {
            assert!(means_unusable(step, Errno::EPERM), "{step:?}");
            assert!(means_unusable(step, Errno::EACCES), "{step:?}");
            assert!(!means_unusable(step, Errno::ENOMEM), "{step:?}");
            assert!(!means_unusable(step, Errno::EINVAL), "{step:?}");
        }
        // Past the first pivot the namespaces worked: a refusal there is
        // the run's error (a bind mount, /proc under masked paths, exec).
        for step in [
            Step::BindMount,
            Step::MountProc,
            Step::PivotRoot,
            Step::Exec,
        ] {
            assert!(!means_unusable(step, Errno::EPERM), "{step:?}");
        }
    }

    #[test]
    fn a_directory_holding_a_hidden_path_is_granted_entry_by_entry() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("ssl/private")).unwrap();
        std::fs::write(root.join("ssl/cert.pem"), "c").unwrap();
        std::fs::write(root.join("shadow"), "s").unwrap();
        std::fs::write(root.join("passwd"), "p").unwrap();
        std::os::unix::fs::symlink("/home", root.join("link")).unwrap();
        let hidden = vec![root.join("shadow"), root.join("ssl/private")];
        let mut rules = Vec::new();
        grant_except(root, LandlockAccess::ReadExec, &hidden, &mut rules).unwrap();
        let mut granted: Vec<String> = rules
            .iter()
            .map(|(p, _)| {
                Path::new(OsStr::from_bytes(p.as_bytes()))
                    .strip_prefix(root)
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect();
        granted.sort();
        assert_eq!(granted, ["passwd", "ssl/cert.pem"]);
    }
}
