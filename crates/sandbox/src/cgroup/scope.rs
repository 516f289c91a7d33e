//! A delegated cgroup for an unprivileged supervisor on a systemd machine:
//! the run is started again inside a transient user scope with
//! `Delegate=yes`, the way rootless Podman gets its cgroups. systemd then
//! hands the scope's cgroup to this user, with the controllers the user's
//! manager was given, and the supervisor creates the run's cgroup below it
//! (moving itself into a leaf first, see [`super::RunCgroup`]).
//!
//! `systemd-run --scope` execs the command itself, so the supervisor keeps
//! its pid, stdio, terminal and exit status; only its cgroup changes. A
//! marker in the environment stops the second start from trying again.
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::{predict, CgroupError, CgroupInfo, CgroupLimits, CgroupMode};

/// Set (to `1`) in the environment of a supervisor started in a delegated
/// scope; such a supervisor never asks for another one.
pub const SCOPE_MARKER: &str = "SANDBOX_DELEGATED_SCOPE";

/// The environment the decision depends on, so tests can fake it.
#[derive(Debug, Clone, Default)]
pub struct ScopeEnv {
    /// Started inside a delegated scope already ([`SCOPE_MARKER`]).
    pub in_scope: bool,
    /// `$XDG_RUNTIME_DIR`.
    pub runtime_dir: Option<PathBuf>,
    /// `$DBUS_SESSION_BUS_ADDRESS` is set.
    pub session_bus: bool,
    /// `$PATH`, to find `systemd-run`.
    pub path: Option<OsString>,
    /// The supervisor runs as root.
    pub root: bool,
}

impl ScopeEnv {
    /// This process's environment.
    pub fn current() -> ScopeEnv {
        ScopeEnv {
            in_scope: std::env::var_os(SCOPE_MARKER).is_some_and(|v| v == "1"),
            runtime_dir: std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
            session_bus: std::env::var_os("DBUS_SESSION_BUS_ADDRESS")
                .is_some_and(|v| !v.is_empty()),
            path: std::env::var_os("PATH"),
            root: nix::unistd::geteuid().is_root(),
        }
    }

    /// Whether a user systemd manager answers here: its private socket, or a
    /// session bus through which systemd-run reaches it.
    fn manager_reachable(&self) -> bool {
        let private = self
            .runtime_dir
            .as_ref()
            .map(|dir| dir.join("systemd/private"));
        private.is_some_and(|p| {
            use std::os::unix::fs::FileTypeExt;
            std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
        }) || self.session_bus
    }

    fn systemd_run(&self) -> Option<PathBuf> {
        let path = self.path.as_deref()?;
        std::env::split_paths(path)
            .map(|dir| dir.join("systemd-run"))
            .find(|candidate| {
                nix::unistd::access(candidate.as_path(), nix::unistd::AccessFlags::X_OK).is_ok()
            })
    }
}

/// What to do about the run's cgroup before anything else is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopePlan {
    /// Start again under this `systemd-run`.
    Reexec(PathBuf),
    /// Go on here; the string says why no scope is used (for the report
    /// when the run then falls back to rlimits), empty when none is needed.
    Stay(String),
}

/// Whether to re-execute in a delegated scope: only for an unprivileged
/// supervisor on cgroup v2 whose own cgroup cannot hold the run's (no write
/// access, or other processes in it), with no `--cgroup-parent` given, and a
/// user systemd manager to ask. Root is left alone: it can write its own
/// cgroup, and a system scope is a decision for whoever started it.
pub fn plan_scope(
    info: &CgroupInfo,
    limits: &CgroupLimits,
    cgroups_off: bool,
    cgroup_parent_given: bool,
    env: &ScopeEnv,
) -> ScopePlan {
    if !limits.any() || cgroups_off || cgroup_parent_given || env.root {
        return ScopePlan::Stay(String::new());
    }
    if env.in_scope {
        return ScopePlan::Stay(
            "started in a transient systemd scope with Delegate=yes, which gave no usable cgroup"
                .into(),
        );
    }
    if info.mode != CgroupMode::V2 {
        return ScopePlan::Stay(String::new());
    }
    match predict(info, None, limits) {
        Ok(_) => return ScopePlan::Stay(String::new()),
        // A read-only or undelegated hierarchy is the container's or the
        // host's choice; a scope below the same mount does not change it.
        Err(CgroupError::ReadOnly { .. } | CgroupError::NotDelegated { .. }) => {
            return ScopePlan::Stay(String::new())
        }
        Err(_) => {}
    }
    if !env.manager_reachable() {
        return ScopePlan::Stay(
            "no user systemd manager is reachable for a delegated scope \
             ($XDG_RUNTIME_DIR/systemd/private is missing and $DBUS_SESSION_BUS_ADDRESS is unset)"
                .into(),
        );
    }
    match env.systemd_run() {
        Some(systemd_run) => ScopePlan::Reexec(systemd_run),
        None => ScopePlan::Stay(
            "a user systemd manager is running but systemd-run is not on $PATH".into(),
        ),
    }
}

/// The command that starts `exe args` again in a delegated user scope.
/// `--collect` has systemd forget the scope even when the run fails, so
/// failed units do not pile up in the user's manager.
pub fn scope_command(systemd_run: &Path, exe: &Path, args: &[OsString]) -> std::process::Command {
    let mut command = std::process::Command::new(systemd_run);
    command
        .args(["--user", "--scope", "--quiet", "--collect"])
        .args(["-p", "Delegate=yes", "--"])
        .arg(exe)
        .args(args)
        .env(SCOPE_MARKER, "1");
    command
}

/// Why this supervisor has no delegated scope, to append to the warning of
/// a run that fell back to rlimits ("" when a scope would not have helped).
pub fn scope_note(info: &CgroupInfo, limits: &CgroupLimits, cgroup_parent_given: bool) -> String {
    match plan_scope(
        info,
        limits,
        false,
        cgroup_parent_given,
        &ScopeEnv::current(),
    ) {
        ScopePlan::Stay(reason) if reason.is_empty() => reason,
        ScopePlan::Stay(reason) => format!("; {reason}"),
        ScopePlan::Reexec(systemd_run) => format!(
            "; a delegated scope is to be had: `sandbox run` starts itself in one, or run this \
             program under `{} --user --scope -p Delegate=yes`",
            systemd_run.display()
        ),
    }
}

/// Re-exec in a delegated scope when [`plan_scope`] says so. Returns only
/// when no re-exec happened: `Some` with the reason when one was wanted and
/// `systemd-run` could not be executed (the run goes on without it).
pub fn enter_delegated_scope(
    info: &CgroupInfo,
    limits: &CgroupLimits,
    cgroups_off: bool,
    cgroup_parent_given: bool,
) -> Option<String> {
    let env = ScopeEnv::current();
    let ScopePlan::Reexec(systemd_run) =
        plan_scope(info, limits, cgroups_off, cgroup_parent_given, &env)
    else {
        return None;
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => return Some(format!("cannot find this executable to re-run it: {err}")),
    };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    use std::os::unix::process::CommandExt;
    let err = scope_command(&systemd_run, &exe, &args).exec();
    Some(format!(
        "executing {}: {err}",
        display(systemd_run.as_os_str())
    ))
}

fn display(path: &OsStr) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::ControllerInfo;

    /// A user in a terminal's session scope, owned by root: the common case
    /// of an unprivileged user on a systemd machine.
    fn session_scope(root: &Path, writable: bool) -> CgroupInfo {
        let own = root.join("user.slice/user-1000.slice/session-2.scope");
        std::fs::create_dir_all(&own).unwrap();
        let controller = |name: &str| ControllerInfo {
            name: name.into(),
            version: 2,
            own_cgroup: own.clone(),
            writable,
            read_only: false,
        };
        CgroupInfo {
            mode: CgroupMode::V2,
            controllers: vec![controller("memory"), controller("pids")],
            unified_mount: Some(root.to_path_buf()),
        }
    }

    const LIMITS: CgroupLimits = CgroupLimits {
        memory: Some(1 << 30),
        pids: Some(64),
        cpu: None,
    };

    /// An XDG_RUNTIME_DIR holding a listening socket at systemd/private,
    /// and a PATH with an executable systemd-run.
    fn user_manager(dir: &Path) -> ScopeEnv {
        std::fs::create_dir_all(dir.join("run/systemd")).unwrap();
        let listener =
            std::os::unix::net::UnixListener::bind(dir.join("run/systemd/private")).unwrap();
        std::mem::forget(listener);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let systemd_run = dir.join("bin/systemd-run");
        std::fs::write(&systemd_run, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&systemd_run, std::fs::Permissions::from_mode(0o755)).unwrap();
        ScopeEnv {
            in_scope: false,
            runtime_dir: Some(dir.join("run")),
            session_bus: false,
            path: Some(OsString::from(format!(
                "/nonexistent:{}",
                dir.join("bin").display()
            ))),
            root: false,
        }
    }

    #[test]
    fn an_unprivileged_user_without_a_writable_v2_cgroup_gets_a_delegated_scope() {
        let dir = tempfile::tempdir().unwrap();
        let info = session_scope(dir.path(), false);
        let env = user_manager(dir.path());
        assert_eq!(
            plan_scope(&info, &LIMITS, false, false, &env),
            ScopePlan::Reexec(dir.path().join("bin/systemd-run"))
        );
        // Never for root, with cgroups off, without limits, with a parent
        // given, or a second time.
        let root = ScopeEnv {
            root: true,
            ..env.clone()
        };
        let in_scope = ScopeEnv {
            in_scope: true,
            ..env.clone()
        };
        for (env, off, parent, limits) in [
            (&root, false, false, LIMITS),
            (&env, true, false, LIMITS),
            (&env, false, true, LIMITS),
            (&env, false, false, CgroupLimits::default()),
            (&in_scope, false, false, LIMITS),
        ] {
            assert!(matches!(
                plan_scope(&info, &limits, off, parent, env),
                ScopePlan::Stay(_)
            ));
        }
        let ScopePlan::Stay(reason) = plan_scope(&info, &LIMITS, false, false, &in_scope) else {
            unreachable!()
        };
        assert!(reason.contains("Delegate=yes"), "{reason}");
    }

    #[test]
    fn without_a_user_manager_the_reason_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let info = session_scope(dir.path(), false);
        let mut env = user_manager(dir.path());
        env.runtime_dir = Some(dir.path().join("elsewhere"));
        let ScopePlan::Stay(reason) = plan_scope(&info, &LIMITS, false, false, &env) else {
            panic!("no manager, no scope")
        };
        assert!(reason.contains("no user systemd manager"), "{reason}");
        // A session bus is enough for systemd-run to find the manager.
        env.session_bus = true;
        assert!(matches!(
            plan_scope(&info, &LIMITS, false, false, &env),
            ScopePlan::Reexec(_)
        ));
        env.path = Some(OsString::from("/nonexistent"));
        let ScopePlan::Stay(reason) = plan_scope(&info, &LIMITS, false, false, &env) else {
            panic!("no systemd-run, no scope")
        };
        assert!(reason.contains("systemd-run is not on $PATH"), "{reason}");
    }

    #[test]
    fn a_usable_own_cgroup_or_a_v1_host_needs_no_scope() {
        let dir = tempfile::tempdir().unwrap();
        let env = user_manager(dir.path());
        let writable = session_scope(dir.path(), true);
        assert_eq!(
            plan_scope(&writable, &LIMITS, false, false, &env),
            ScopePlan::Stay(String::new())
        );
        let mut v1 = session_scope(dir.path(), false);
        v1.mode = CgroupMode::V1;
        for c in &mut v1.controllers {
            c.version = 1;
        }
        assert_eq!(
            plan_scope(&v1, &LIMITS, false, false, &env),
            ScopePlan::Stay(String::new())
        );
    }

    #[test]
    fn the_scope_command_delegates_and_marks_the_second_start() {
        let command = scope_command(
            Path::new("/usr/bin/systemd-run"),
            Path::new("/opt/sandbox"),
            &[
                "run".into(),
                "--memory".into(),
                "1GiB".into(),
                "--".into(),
                "make".into(),
            ],
        );
        let args: Vec<&OsStr> = command.get_args().collect();
        assert_eq!(
            args,
            [
                "--user",
                "--scope",
                "--quiet",
                "--collect",
                "-p",
                "Delegate=yes",
                "--",
                "/opt/sandbox",
                "run",
                "--memory",
                "1GiB",
                "--",
                "make"
            ]
        );
        assert!(command
            .get_envs()
            .any(|(k, v)| k == SCOPE_MARKER && v == Some(OsStr::new("1"))));
    }
}
