//! `sandbox __launch --fd N`: the daemon's fork server.
//!
//! Started by the daemon (fork and exec of its own binary) before the
//! daemon builds its threads, it holds nothing of the daemon but one
//! socket. Per spawn request it forks a run supervisor and goes back to its
//! socket; it never supervises a run itself, so one run's crash or hang
//! stays in that run's process. It is a child subreaper: the janitors of
//! supervisors that died are reparented to it and reaped here.
//!
//! When the daemon goes away (its end of the socket closes, or the parent
//! death signal), every supervisor is killed; each run's janitor then
//! removes its payload and cgroup, as it does for a killed `sandbox run`.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::protocol::{FromLauncher, ToLauncher};
use super::wire::{self, WireError};

/// Why the launcher stopped.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A system call the loop depends on failed.
    #[error("launcher: {op}: {source}")]
    Sys {
        /// The call.
        op: &'static str,
        /// Its errno.
        #[source]
        source: Errno,
    },
    /// The daemon's socket failed.
    #[error("launcher: the daemon's socket: {0}")]
    Wire(#[from] WireError),
}

fn sys(op: &'static str) -> impl FnOnce(Errno) -> LaunchError {
    move |source| LaunchError::Sys { op, source }
}

/// Serve spawn requests on `control` until the daemon closes it.
pub fn serve(control: OwnedFd) -> Result<(), LaunchError> {
    let daemon = nix::unistd::getppid();
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(sys("PR_SET_PDEATHSIG"))?;
    if nix::unistd::getppid() != daemon {
        // The daemon died before the death signal was armed.
        return Ok(());
    }
    nix::sys::prctl::set_child_subreaper(true).map_err(sys("PR_SET_CHILD_SUBREAPER"))?;
    let mut children = SigSet::empty();
    children.add(Signal::SIGCHLD);
    let mut old_mask = SigSet::empty();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&children), Some(&mut old_mask))
        .map_err(sys("sigprocmask"))?;
    let signals = SignalFd::with_flags(&children, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys("signalfd"))?;
    let mut supervisors: HashMap<Pid, Supervisor> = HashMap::new();
    let mut leftovers = Leftovers::new();
    let result = serve_loop(
        &control,
        &signals,
        &old_mask,
        &mut supervisors,
        &mut leftovers,
    );
    // Nothing of a run outlives the daemon's interest in it.
    for pid in supervisors.keys() {
        let _ = kill(*pid, Signal::SIGKILL);
    }
    result
}

/// A forked supervisor, until it is reaped.
struct Supervisor {
    run: String,
    /// Its run's delegated cgroup (a caller's run), removed once empty.
    delegated: Option<String>,
}

/// Delegated cgroups of ended runs that are not empty yet: the run's
/// janitor, reparented here, leaves them last. Retried whenever a child
/// ends, until removed or gone.
struct Leftovers {
    /// The launcher's own cgroups (its supervisors' delegated ones lie
    /// below), read once: they do not change while it runs.
    cgroups: crate::cgroup::CgroupInfo,
    dirs: Vec<(std::path::PathBuf, u32)>,
}

/// Attempts before a delegated cgroup is left for the daemon's restart.
const LEFTOVER_TRIES: u32 = 64;

impl Leftovers {
    fn new() -> Leftovers {
        Leftovers {
            cgroups: crate::cgroup::detect(),
            dirs: Vec::new(),
        }
    }

    fn add(&mut self, name: &str) {
        for controller in ["memory", "pids", "cpu"] {
            if let Some(found) = self.cgroups.controller(controller) {
                let dir = found.own_cgroup.join(name);
                if !self.dirs.iter().any(|(d, _)| *d == dir) {
                    self.dirs.push((dir, 0));
                }
            }
        }
    }

    fn sweep(&mut self) {
        self.dirs.retain_mut(|(dir, tries)| {
            *tries += 1;
            match std::fs::remove_dir(&*dir) {
                Ok(()) => false,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
                Err(_) => *tries < LEFTOVER_TRIES,
            }
        });
    }
}

fn serve_loop(
    control: &OwnedFd,
    signals: &SignalFd,
    old_mask: &SigSet,
    supervisors: &mut HashMap<Pid, Supervisor>,
    leftovers: &mut Leftovers,
) -> Result<(), LaunchError> {
    loop {
        let mut fds = [
            PollFd::new(control.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(source) => return Err(LaunchError::Sys { op: "poll", source }),
        }
        let control_ready = fds[0].revents().is_some_and(|r| !r.is_empty());
        let children_ready = fds[1].revents().is_some_and(|r| !r.is_empty());
        if children_ready {
            while let Ok(Some(_)) = signals.read_signal() {}
            reap(control, supervisors, leftovers)?;
            leftovers.sweep();
        }
        if control_ready {
            match wire::receive::<ToLauncher>(control.as_fd()) {
                Ok((ToLauncher::Spawn { run, spec }, fds)) => {
                    let delegated = spec
                        .run_as
                        .as_ref()
                        .map(|run_as| super::protocol::delegated_cgroup_name(&run_as.run));
                    let answer = match start_supervisor(*spec, fds, control, old_mask) {
                        Ok(pid) => {
                            supervisors.insert(
                                pid,
                                Supervisor {
                                    run: run.clone(),
                                    delegated,
                                },
                            );
                            FromLauncher::Started {
                                run,
                                pid: pid.as_raw(),
                                // Not reaped before this loop's next turn.
                                start: super::protocol::process_start_time(pid.as_raw()),
                            }
                        }
                        Err(error) => FromLauncher::Refused { run, error },
                    };
                    wire::send(control.as_fd(), &answer, &[])?;
                }
                Err(WireError::Closed) => return Ok(()),
                // One malformed request is refused; the socket stays usable.
                Err(err @ (WireError::Malformed(_) | WireError::TooLarge(_))) => {
                    wire::send(
                        control.as_fd(),
                        &FromLauncher::Refused {
                            run: String::new(),
                            error: err.to_string(),
                        },
                        &[],
                    )?;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}

/// Collect every child that ended: supervisors are reported, janitors and
/// other reparented processes only reaped.
fn reap(
    control: &OwnedFd,
    supervisors: &mut HashMap<Pid, Supervisor>,
    leftovers: &mut Leftovers,
) -> Result<(), LaunchError> {
    loop {
        let (pid, code, signal) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, Some(code), None),
            Ok(WaitStatus::Signaled(pid, signal, _)) => (pid, None, Some(signal as i32)),
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return Ok(()),
            Ok(_) => continue,
            Err(Errno::EINTR) => continue,
            Err(source) => {
                return Err(LaunchError::Sys {
                    op: "waitpid",
                    source,
                })
            }
        };
        if let Some(Supervisor { run, delegated }) = supervisors.remove(&pid) {
            if let Some(name) = delegated {
                leftovers.add(&name);
            }
            wire::send(
                control.as_fd(),
                &FromLauncher::Exited { run, code, signal },
                &[],
            )?;
        }
    }
}

fn start_supervisor(
    spec: super::protocol::RunSpec,
    fds: Vec<OwnedFd>,
    control: &OwnedFd,
    old_mask: &SigSet,
) -> Result<Pid, String> {
    let wanted = if spec.stdin { 3 } else { 2 };
    if fds.len() != wanted {
        return Err(format!(
            "a spawn request carries {} descriptors; {wanted} were expected (events socket, log{})",
            fds.len(),
            if spec.stdin { ", stdin" } else { "" }
        ));
    }
    let control_raw = std::os::fd::AsRawFd::as_raw_fd(control);
    crate::sys::fork::fork_single_threaded(move || {
        // The supervisor holds nothing of the launcher's: not its socket
        // (the daemon would not see it close), not its blocked SIGCHLD.
        let _ = nix::unistd::close(control_raw);
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(old_mask), None);
        let launcher = nix::unistd::getppid();
        if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
            || nix::unistd::getppid() != launcher
        {
            return 125;
        }
        super::supervisor::run(spec, fds)
    })
    .map_err(|err| err.to_string())
}
