//! `sandbox __launch --fd N`: the daemon's fork server.
//!
//! Started by the daemon (fork and exec of its own binary) before the
//! daemon builds its threads, it holds nothing of the daemon but one
//! socket. Per spawn request it forks a run supervisor and goes back to its
//! socket; it never supervises a run itself, so one run's crash or hang
//! stays in that run's process. It is a child subreaper: the janitors of
//! supervisors that died are reparented to it and reaped here.
//!
//! When the daemon goes away (`stop`, its end of the socket closes, or the
//! parent death signal, SIGTERM), every supervisor is killed; each run's
//! janitor then removes its payload and cgroup, as it does for a killed
//! `sandbox run`, and the launcher removes the delegated cgroups.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::protocol::{FromLauncher, ToLauncher};
use super::wire::{self, WireError};
use crate::poll_set::PollSet;

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
    // SIGTERM, read from the signalfd like SIGCHLD, is the daemon's death
    // (a SIGKILL or a crash, which never sends `stop`): the launcher still
    // ends its supervisors and removes their delegated cgroups, which a
    // SIGKILL here would leave behind.
    let mut handled = SigSet::empty();
    handled.add(Signal::SIGCHLD);
    handled.add(Signal::SIGTERM);
    let mut old_mask = SigSet::empty();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&handled), Some(&mut old_mask))
        .map_err(sys("sigprocmask"))?;
    let signals = SignalFd::with_flags(&handled, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys("signalfd"))?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(sys("PR_SET_PDEATHSIG"))?;
    if nix::unistd::getppid() != daemon {
        // The daemon died before the death signal was armed.
        return Ok(());
    }
    nix::sys::prctl::set_child_subreaper(true).map_err(sys("PR_SET_CHILD_SUBREAPER"))?;
    let mut children = Children {
        supervisors: HashMap::new(),
        pool: Vec::new(),
        leftovers: Leftovers::new(),
    };
    let result = serve_loop(&control, &signals, &old_mask, &mut children);
    // Nothing of a run outlives the daemon's interest in it.
    children.end_all(&signals);
    result
}

/// How long a stopping launcher waits for its supervisors' janitors to
/// end and their delegated cgroups to empty.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Every process the launcher forked, until reaped.
struct Children {
    supervisors: HashMap<Pid, Supervisor>,
    /// Warm supervisors not handed a run yet.
    pool: Vec<WarmSandbox>,
    leftovers: Leftovers,
}

/// A warm supervisor in the pool (see [`super::warm`]).
struct WarmSandbox {
    key: String,
    gen: u64,
    pid: Pid,
    /// The launcher's end of its socket.
    sock: OwnedFd,
    /// What it was prepared for.
    spec: super::protocol::RunSpec,
    ready: bool,
    delegated: Option<String>,
}

impl Children {
    /// Kill every supervisor, warm or not, then reap them and the janitors
    /// reparented here (each removes its run's own cgroup) for at most
    /// [`STOP_WAIT`], and remove the delegated cgroups they leave: a warm
    /// sandbox's (`sandbox-run-warm-PID-N`) is otherwise left behind once the
    /// daemon is gone, since no run's end removes it. So are the run
    /// cgroups of a supervisor killed before it forked its janitor
    /// ([`Leftovers::add_runs_of`]).
    fn end_all(&mut self, signals: &SignalFd) {
        let killed: std::collections::HashSet<Pid> = self
            .supervisors
            .keys()
            .chain(self.pool.iter().map(|warm| &warm.pid))
            .copied()
            .collect();
        for pid in &killed {
            let _ = kill(*pid, Signal::SIGKILL);
        }
        let delegated: Vec<String> = self
            .supervisors
            .values()
            .filter_map(|s| s.delegated.clone())
            .chain(self.pool.iter().filter_map(|w| w.delegated.clone()))
            .collect();
        for name in &delegated {
            self.leftovers.add(name);
        }
        let until = std::time::Instant::now() + STOP_WAIT;
        loop {
            let children_left = loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => break true,
                    Err(Errno::ECHILD) => break false,
                    Ok(WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, ..))
                        if killed.contains(&pid) =>
                    {
                        self.leftovers.add_runs_of(pid);
                    }
                    Err(Errno::EINTR) | Ok(_) => continue,
                    Err(_) => break false,
                }
            };
            // Until the deadline, not LEFTOVER_TRIES: a janitor may take
            // seconds to remove the run's own cgroup inside (a memory
            // cgroup of v1 stays busy while its pages are uncharged).
            self.leftovers.sweep_patiently();
            let left = until.saturating_duration_since(std::time::Instant::now());
            if (!children_left && self.leftovers.dirs.is_empty()) || left.is_zero() {
                return;
            }
            // A child's end wakes this; a cgroup still busy without
            // children here is retried every 50 ms.
            let retry = std::time::Instant::now().checked_add(std::time::Duration::from_millis(50));
            let mut set = PollSet::default();
            set.add(signals.as_fd(), PollFlags::POLLIN);
            let _ = set.wait([Some(until), retry]);
            while let Ok(Some(_)) = signals.read_signal() {}
        }
    }

    /// Take a warm supervisor out of the pool: it ends by itself (its
    /// socket closes with `warm`), and is reaped as a supervisor without
    /// a run.
    fn retire(&mut self, warm: WarmSandbox) {
        self.supervisors.insert(
            warm.pid,
            Supervisor {
                run: None,
                delegated: warm.delegated,
            },
        );
    }
}

/// A forked supervisor, until it is reaped.
struct Supervisor {
    /// `None` for a warm supervisor that was never given a run.
    run: Option<String>,
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
    dirs: Vec<Leftover>,
}

/// A cgroup directory to remove once empty.
struct Leftover {
    dir: std::path::PathBuf,
    tries: u32,
    /// The directory's (device, inode) when it was found by name alone
    /// ([`Leftovers::add_runs_of`]): a directory made since under the same
    /// name (its pid came round again) is another run's, and is left.
    found: Option<(u64, u64)>,
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
        for controller in crate::cgroup::CONTROLLERS {
            if let Some(found) = self.cgroups.controller(controller) {
                self.add_dir(found.own_cgroup.join(name));
            }
        }
    }

    fn add_dir(&mut self, dir: std::path::PathBuf) {
        self.add_found(dir, None);
    }

    fn add_found(&mut self, dir: std::path::PathBuf, found: Option<(u64, u64)>) {
        if !self.dirs.iter().any(|d| d.dir == dir) {
            self.dirs.push(Leftover {
                dir,
                tries: 0,
                found,
            });
        }
    }

    /// The run cgroups (`sandbox-PID-N`) a killed supervisor made in the
    /// launcher's own cgroups. Its janitor is forked only once the run's
    /// cgroup exists and its limits are written, so a supervisor killed in
    /// between (the daemon stopping, a run cancelled) left the directories
    /// with nobody to remove them. The pid is this launcher's own child,
    /// reaped here, so the names are its, and each directory is kept by
    /// its inode: one made later under the same name (the pid came round
    /// again) is left alone. Only a supervisor of another pid namespace in
    /// the same cgroup, with the same pid, setting up its run's cgroup at
    /// this moment, could lose it while it is still empty; its run then
    /// fails to join it, and fails.
    fn add_runs_of(&mut self, supervisor: Pid) {
        let mut own: Vec<std::path::PathBuf> = Vec::new();
        for controller in crate::cgroup::CONTROLLERS {
            if let Some(found) = self.cgroups.controller(controller) {
                if !own.contains(&found.own_cgroup) {
                    own.push(found.own_cgroup.clone());
                }
            }
        }
        for cgroup in own {
            let Ok(entries) = std::fs::read_dir(&cgroup) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let owner = name.to_str().and_then(crate::cgroup::run_cgroup_owner);
                if owner != Some(supervisor.as_raw()) {
                    continue;
                }
                if let Ok(meta) = entry.metadata() {
                    use std::os::unix::fs::MetadataExt;
                    self.add_found(entry.path(), Some((meta.dev(), meta.ino())));
                }
            }
        }
    }

    /// [`Leftovers::sweep`] without counting tries.
    fn sweep_patiently(&mut self) {
        for leftover in &mut self.dirs {
            leftover.tries = 0;
        }
        self.sweep();
    }

    fn sweep(&mut self) {
        self.dirs.retain_mut(|leftover| {
            leftover.tries += 1;
            if let Some(found) = leftover.found {
                use std::os::unix::fs::MetadataExt;
                match std::fs::symlink_metadata(&leftover.dir) {
                    Ok(meta) if (meta.dev(), meta.ino()) == found => {}
                    // Gone, or another directory under its name now.
                    _ => return false,
                }
            }
            match remove_cgroup_tree(&leftover.dir) {
                Ok(()) => false,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
                Err(_) => leftover.tries < LEFTOVER_TRIES,
            }
        });
    }
}

/// Deepest and widest cgroup tree [`remove_cgroup_tree`] walks: a delegated
/// cgroup is the caller's to fill with cgroups of its own, and the launcher
/// runs as root, so its walk is bounded rather than recursive.
const CGROUP_TREE_DEPTH: usize = 16;
const CGROUP_TREE_DIRS: usize = 4096;

/// Remove an empty cgroup and the empty cgroups below it, deepest first.
/// The run's janitor normally removes the run's own cgroup inside a
/// delegated one; when it is slow (a loaded machine) or was killed with its
/// supervisor, the delegated cgroup would stay busy until the launcher's
/// stop deadline passed, so the launcher does not depend on it.
fn remove_cgroup_tree(top: &std::path::Path) -> std::io::Result<()> {
    let mut found = vec![(top.to_path_buf(), 0usize)];
    let mut next = 0;
    while next < found.len() && found.len() < CGROUP_TREE_DIRS {
        let (dir, depth) = found[next].clone();
        next += 1;
        if depth >= CGROUP_TREE_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            // cgroupfs holds no links: file_type is the entry's own.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                found.push((entry.path(), depth + 1));
            }
        }
    }
    // Children were found after their parents: remove in reverse.
    for (dir, _) in found.iter().skip(1).rev() {
        let _ = std::fs::remove_dir(dir);
    }
    std::fs::remove_dir(top)
}

fn serve_loop(
    control: &OwnedFd,
    signals: &SignalFd,
    old_mask: &SigSet,
    children: &mut Children,
) -> Result<(), LaunchError> {
    loop {
        let mut set = PollSet::default();
        let control_slot = set.add(control.as_fd(), PollFlags::POLLIN);
        let signals_slot = set.add(signals.as_fd(), PollFlags::POLLIN);
        let pool_slots: Vec<_> = children
            .pool
            .iter()
            .map(|warm| set.add(warm.sock.as_fd(), PollFlags::POLLIN))
            .collect();
        set.wait([None])
            .map_err(|source| LaunchError::Sys { op: "poll", source })?;
        let (commanded, signalled) = (set.ready(Some(control_slot)), set.ready(Some(signals_slot)));
        // Warm supervisors' news first: their indices are the pool's.
        let mut heard: Vec<usize> = pool_slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| set.ready(Some(**slot)))
            .map(|(index, _)| index)
            .collect();
        drop(set);
        heard.reverse();
        for index in heard {
            hear_warm(control, children, index)?;
        }
        if signalled {
            let mut terminated = false;
            while let Ok(Some(info)) = signals.read_signal() {
                terminated |= info.ssi_signo == Signal::SIGTERM as u32;
            }
            if terminated {
                return Ok(());
            }
            reap(control, children)?;
            children.leftovers.sweep();
        }
        if commanded {
            match wire::receive::<ToLauncher>(control.as_fd()) {
                Ok((ToLauncher::Spawn { run, spec, warm }, fds)) => {
                    let answer = spawn(control, children, old_mask, run, *spec, warm, fds)?;
                    wire::send(control.as_fd(), &answer, &[])?;
                }
                Ok((
                    ToLauncher::Warm {
                        key,
                        gen,
                        spec,
                        count,
                        idle_ms,
                        budget,
                    },
                    _,
                )) => {
                    for _ in 0..count {
                        let idle = std::time::Duration::from_millis(idle_ms);
                        if let Err(reason) =
                            start_warm(children, old_mask, &key, gen, &spec, idle, budget)
                        {
                            wire::send(
                                control.as_fd(),
                                &FromLauncher::WarmDiscarded {
                                    key: key.clone(),
                                    gen,
                                    reason,
                                },
                                &[],
                            )?;
                        }
                    }
                }
                Ok((ToLauncher::Drain { key, gen }, _)) => {
                    let named = |w: &WarmSandbox| w.key == key && gen.is_none_or(|g| w.gen == g);
                    while let Some(index) = children.pool.iter().position(named) {
                        let warm = children.pool.remove(index);
                        let gen = warm.gen;
                        children.retire(warm);
                        wire::send(
                            control.as_fd(),
                            &FromLauncher::WarmDiscarded {
                                key: key.clone(),
                                gen,
                                reason: "drained".into(),
                            },
                            &[],
                        )?;
                    }
                }
                Ok((ToLauncher::Stop, _)) | Err(WireError::Closed) => return Ok(()),
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

/// A warm supervisor said something (or ended).
fn hear_warm(control: &OwnedFd, children: &mut Children, index: usize) -> Result<(), LaunchError> {
    let Some(warm) = children.pool.get_mut(index) else {
        return Ok(());
    };
    let reason = match wire::receive::<super::warm::FromWarm>(warm.sock.as_fd()) {
        Ok((super::warm::FromWarm::Ready, _)) => {
            warm.ready = true;
            let ready = FromLauncher::WarmReady {
                key: warm.key.clone(),
                gen: warm.gen,
            };
            return Ok(wire::send(control.as_fd(), &ready, &[])?);
        }
        Ok((super::warm::FromWarm::Discarded { reason }, _)) => reason,
        Err(err) => format!("its supervisor ended ({err})"),
    };
    let warm = children.pool.remove(index);
    let discarded = FromLauncher::WarmDiscarded {
        key: warm.key.clone(),
        gen: warm.gen,
        reason,
    };
    children.retire(warm);
    Ok(wire::send(control.as_fd(), &discarded, &[])?)
}

/// A spawn request: into the warm sandbox it names when that one fits,
/// else a supervisor of its own.
fn spawn(
    control: &OwnedFd,
    children: &mut Children,
    old_mask: &SigSet,
    run: String,
    spec: super::protocol::RunSpec,
    warm: Option<super::protocol::WarmPick>,
    fds: Vec<OwnedFd>,
) -> Result<FromLauncher, LaunchError> {
    let taken = warm.and_then(|pick| {
        let index = children
            .pool
            .iter()
            .position(|w| w.key == pick.key && w.gen == pick.gen && w.ready)?;
        Some(children.pool.remove(index))
    });
    if let Some(warm) = taken {
        let (key, gen, pid) = (warm.key.clone(), warm.gen, warm.pid);
        let handed = if super::warm::fits(&warm.spec, &spec) {
            hand_over(&warm, &run, &spec, &fds)
        } else {
            Err("the run's spec differs from the one it was prepared for".into())
        };
        match handed {
            Ok(()) => {
                children.supervisors.insert(
                    pid,
                    Supervisor {
                        run: Some(run.clone()),
                        delegated: warm.delegated,
                    },
                );
                return Ok(FromLauncher::Started {
                    run,
                    pid: pid.as_raw(),
                    start: super::protocol::process_start_time(pid.as_raw()),
                });
            }
            Err(reason) => {
                children.retire(warm);
                let discarded = FromLauncher::WarmDiscarded { key, gen, reason };
                wire::send(control.as_fd(), &discarded, &[])?;
            }
        }
    }
    let delegated = spec
        .run_as
        .as_ref()
        .map(|run_as| super::protocol::delegated_cgroup_name(&run_as.run));
    Ok(match start_supervisor(spec, fds, old_mask) {
        Ok(pid) => {
            children.supervisors.insert(
                pid,
                Supervisor {
                    run: Some(run.clone()),
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
    })
}

/// Give a warm supervisor its run: the spawn request's descriptors.
fn hand_over(
    warm: &WarmSandbox,
    run: &str,
    spec: &super::protocol::RunSpec,
    fds: &[OwnedFd],
) -> Result<(), String> {
    let wanted = super::supervisor::spawn_fd_count(spec);
    if fds.len() != wanted {
        return Err(format!("{} descriptors where {wanted} belong", fds.len()));
    }
    let passed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
    let commit = super::warm::ToWarm::Commit {
        run: run.to_string(),
        spec: Box::new(spec.clone()),
    };
    wire::send(warm.sock.as_fd(), &commit, &passed).map_err(|err| err.to_string())
}

fn start_warm(
    children: &mut Children,
    old_mask: &SigSet,
    key: &str,
    gen: u64,
    spec: &super::protocol::RunSpec,
    idle: std::time::Duration,
    budget: usize,
) -> Result<(), String> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|errno| format!("socketpair: {errno}"))?;
    let warm_spec = spec.clone();
    let pid = crate::sys::fork::fork_keeping_only(vec![theirs], move |kept| {
        let Some(theirs) = kept.into_iter().next() else {
            return 125;
        };
        if !detach_from_launcher(old_mask) || !silence_stdio() {
            return 125;
        }
        let status = super::warm::serve(warm_spec, theirs, idle, budget);
        crate::sys::reap::wait_for_prompt();
        status
    })
    .map_err(|err| err.to_string())?;
    let delegated = spec
        .run_as
        .as_ref()
        .map(|run_as| super::protocol::delegated_cgroup_name(&run_as.run));
    children.pool.push(WarmSandbox {
        key: key.to_string(),
        gen,
        pid,
        sock: ours,
        spec: spec.clone(),
        ready: false,
        delegated,
    });
    Ok(())
}

/// In a forked supervisor, which holds none of the launcher's descriptors
/// (`fork_keeping_only`: the daemon and the warm supervisors must see the
/// launcher's sockets close): drop the launcher's blocked SIGCHLD, and die
/// with it. False when the launcher is gone.
fn detach_from_launcher(old_mask: &SigSet) -> bool {
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(old_mask), None);
    let launcher = nix::unistd::getppid();
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_ok() && nix::unistd::getppid() == launcher
}

/// In a forked supervisor, before it becomes the caller: its stdio is
/// /dev/null, never the daemon's stdout and stderr (its journal), which
/// the caller could take from it and write as the daemon. False when
/// /dev/null cannot be opened.
fn silence_stdio() -> bool {
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return false;
    };
    nix::unistd::dup2_stdin(&null).is_ok()
        && nix::unistd::dup2_stdout(&null).is_ok()
        && nix::unistd::dup2_stderr(&null).is_ok()
}

/// Collect every child that ended: supervisors are reported, janitors and
/// other reparented processes only reaped.
fn reap(control: &OwnedFd, children: &mut Children) -> Result<(), LaunchError> {
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
        if let Some(index) = children.pool.iter().position(|warm| warm.pid == pid) {
            // Ended before it said why (its socket is read first when it did).
            let warm = children.pool.remove(index);
            let discarded = FromLauncher::WarmDiscarded {
                key: warm.key.clone(),
                gen: warm.gen,
                reason: "its supervisor ended".into(),
            };
            if let Some(name) = &warm.delegated {
                children.leftovers.add(name);
            }
            if signal.is_some() {
                children.leftovers.add_runs_of(pid);
            }
            wire::send(control.as_fd(), &discarded, &[])?;
            continue;
        }
        if let Some(Supervisor { run, delegated }) = children.supervisors.remove(&pid) {
            if let Some(name) = delegated {
                children.leftovers.add(&name);
            }
            if signal.is_some() {
                children.leftovers.add_runs_of(pid);
            }
            if let Some(run) = run {
                wire::send(
                    control.as_fd(),
                    &FromLauncher::Exited { run, code, signal },
                    &[],
                )?;
            }
        }
    }
}

fn start_supervisor(
    spec: super::protocol::RunSpec,
    fds: Vec<OwnedFd>,
    old_mask: &SigSet,
) -> Result<Pid, String> {
    let wanted = super::supervisor::spawn_fd_count(&spec);
    if fds.len() != wanted {
        return Err(format!(
            "a spawn request carries {} descriptors; {wanted} were expected (events socket, log{}{})",
            fds.len(),
            if spec.stdin { ", stdin" } else { "" },
            if spec.audit.is_some() { ", audit" } else { "" }
        ));
    }
    crate::sys::fork::fork_keeping_only(fds, move |fds| {
        if !detach_from_launcher(old_mask) || !silence_stdio() {
            return 125;
        }
        // The janitor it dismissed is reaped here, not left to the
        // launcher: until it has exited, the run's delegated cgroup, which
        // the launcher removes when this process ends, is not empty.
        let status = super::supervisor::run(spec, fds);
        crate::sys::reap::wait_for_prompt();
        status
    })
    .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delegated cgroup whose run's own cgroup the janitor never removed
    /// (its supervisor was killed before it started one) goes all the
    /// same; plain directories stand in for cgroupfs, whose rmdir has the
    /// same rule (only an empty directory goes).
    #[test]
    fn a_delegated_cgroup_goes_with_the_empty_cgroups_left_inside() {
        let root = tempfile::tempdir().unwrap();
        let delegated = root.path().join("sandbox-run-warm-1-1");
        std::fs::create_dir_all(delegated.join("run/inner")).unwrap();
        std::fs::create_dir_all(delegated.join("other")).unwrap();
        remove_cgroup_tree(&delegated).unwrap();
        assert!(!delegated.exists());
    }

    /// A killed supervisor's run directories are found by its pid and a
    /// counter of digits only, and kept by inode: one made again under the
    /// same name before the sweep (its pid came round) is another run's.
    /// Plain directories stand in for cgroupfs.
    #[test]
    fn a_killed_supervisors_directories_are_removed_but_not_a_new_one_of_the_same_name() {
        let own = tempfile::tempdir().unwrap();
        let controller = |name: &str| crate::cgroup::ControllerInfo {
            name: name.into(),
            version: 1,
            own_cgroup: own.path().to_path_buf(),
            writable: true,
            read_only: false,
        };
        let mut leftovers = Leftovers {
            cgroups: crate::cgroup::CgroupInfo {
                mode: crate::cgroup::CgroupMode::V1,
                controllers: vec![controller("memory"), controller("pids")],
                unified_mount: None,
            },
            dirs: Vec::new(),
        };
        for name in [
            "sandbox-77-0",
            "sandbox-77-1",
            "sandbox-77-+2",
            "sandbox-77x-0",
            "sandbox-770-0",
        ] {
            std::fs::create_dir(own.path().join(name)).unwrap();
        }
        leftovers.add_runs_of(Pid::from_raw(77));
        assert_eq!(
            leftovers.dirs.len(),
            2,
            "one own cgroup, listed once: -0 and -1"
        );
        // Made again under the same name after it was found: another
        // inode (made before the first goes, since a plain file system may
        // hand a freed inode number out again at once; cgroupfs does not).
        std::fs::create_dir(own.path().join("next")).unwrap();
        std::fs::remove_dir(own.path().join("sandbox-77-1")).unwrap();
        std::fs::rename(own.path().join("next"), own.path().join("sandbox-77-1")).unwrap();
        leftovers.sweep();
        assert!(leftovers.dirs.is_empty());
        assert!(
            !own.path().join("sandbox-77-0").exists(),
            "the killed one's"
        );
        for kept in [
            "sandbox-77-1",
            "sandbox-77-+2",
            "sandbox-77x-0",
            "sandbox-770-0",
        ] {
            assert!(own.path().join(kept).exists(), "{kept}");
        }
    }

    /// Past the walk's bounds the tree is left (for the daemon's restart),
    /// never walked without end.
    #[test]
    fn a_tree_deeper_than_the_bound_is_left_not_walked_for_ever() {
        let root = tempfile::tempdir().unwrap();
        let delegated = root.path().join("sandbox-run-1");
        let mut deep = delegated.clone();
        for _ in 0..CGROUP_TREE_DEPTH + 2 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        assert!(remove_cgroup_tree(&delegated).is_err());
        assert!(delegated.exists());
    }
}
