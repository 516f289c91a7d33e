//! P1: the sandbox's init, PID 1 of the new pid namespace.
//!
//! It finishes the namespaces (ids, mounts, network, hostname), starts the
//! payload, forwards signals to it, reaps every orphan, and exits with the
//! payload's status. When it exits the kernel kills everything else in the
//! pid namespace, which is what makes a double-forked daemon die with the run.
//!
//! Runs between clone and exec: no unwrap, no panic, errors become records.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::stat::Mode;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{Gid, Pid, Uid};

use super::channel::{self, PayloadExit, MAX_PASSED_FDS};
use super::failed::{Failed, StepExt, SETUP_FAILED};
use super::prepare::{ChildPlan, Handover, MountOp, NodeKind};
use super::Step;
use crate::profile::policy::NetworkMode;
use crate::sys::clone::ClonedChild;
use crate::sys::mount_api::{self, MountAttrs};

/// Descriptors init works with.
#[derive(Clone, Copy)]
pub struct InitFds<'a> {
    /// Init's end of the sync socket.
    pub sync: BorrowedFd<'a>,
    /// Write end of the report pipe.
    pub report: BorrowedFd<'a>,
    /// The supervisor's ends, which init must close so that the supervisor's
    /// death is seen as end-of-file.
    pub supervisor_ends: [RawFd; 2],
    /// How init gets into the run's cgroup before it forks anything.
    pub cgroup: CgroupJoin<'a>,
    /// Where the allowlist's listening socket goes (the net process).
    pub net_handover: Option<BorrowedFd<'a>>,
}

/// How init enters the run's cgroup.
#[derive(Clone, Copy)]
pub enum CgroupJoin<'a> {
    /// No cgroup, or created in it (`CLONE_INTO_CGROUP`).
    AlreadyThere,
    /// The supervisor moves init while init builds the root, and says so
    /// on the sync socket.
    BySupervisor,
    /// cgroup v1: init writes `0` into each hierarchy's `tasks` file, open
    /// here (see `RunCgroup::open_tasks_for_self_move`).
    Itself(&'a [OwnedFd]),
}

/// The namespaces init creates itself, first thing, instead of clone.
///
/// Clone creates the namespaces it is asked for in the caller, the
/// supervisor, before it returns; a network namespace alone (its sysctl
/// tables, its loopback) took 7% of a strict run's CPU, on the path every
/// later step waits on. Created by init, it is built on the other core
/// while the supervisor writes the id maps and idmaps the project, which
/// init waits for anyway. The same owner either way: init is already in
/// its new user namespace, where it holds every capability, as a child of
/// clone would be. What the kernel fixes at creation from the owner's uid
/// 0 (who owns /proc/net inside) may now see the maps written or not yet;
/// nothing of the host's depends on it. The capability check is init's
/// own now, not the supervisor's: where a security module withholds
/// capabilities in new user namespaces (Ubuntu's AppArmor restriction),
/// this is the step that fails, where the first mount failed before, with
/// the same fallback. Only namespaces nothing needs before init's release:
/// the user namespace is where the maps go, the mount namespace holds the
/// trees the supervisor hands over, and the pid namespace must be there
/// at clone for init to be its first process.
pub(crate) const UNSHARED_BY_INIT: CloneFlags = CloneFlags::CLONE_NEWNET
    .union(CloneFlags::CLONE_NEWIPC)
    .union(CloneFlags::CLONE_NEWUTS);

/// Of the `planned` namespaces, those clone creates for init; init creates
/// the rest itself ([`namespaces_made_by_init`]).
pub(crate) fn clone_flags_for_init(planned: CloneFlags) -> CloneFlags {
    planned.difference(UNSHARED_BY_INIT)
}

/// Of the `planned` namespaces, those init creates itself
/// ([`UNSHARED_BY_INIT`]) before its release.
pub(crate) fn namespaces_made_by_init(planned: CloneFlags) -> CloneFlags {
    planned.intersection(UNSHARED_BY_INIT)
}

/// Init's entry point after clone. Returns its exit status.
pub fn main(plan: &ChildPlan, handover: &Handover, fds: &InitFds<'_>, cloned: &ClonedChild) -> i32 {
    for fd in fds.supervisor_ends {
        let _ = nix::unistd::close(fd);
    }
    match run(plan, handover, fds, cloned) {
        Ok(status) => status,
        Err(Some(failed)) => {
            channel::report_failure(fds.report, failed.step, failed.errno, failed.detail);
            SETUP_FAILED
        }
        // The supervisor died before releasing us: nobody to tell.
        Err(None) => SETUP_FAILED,
    }
}

fn run<'a>(
    plan: &'a ChildPlan,
    handover: &'a Handover,
    fds: &InitFds<'_>,
    cloned: &ClonedChild,
) -> Result<i32, Option<Failed<'a>>> {
    crate::sys::proctitle::conceal();
    // The kernel clears the parent-death signal on credential changes, so it
    // is set again after switching ids below.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).step(Step::ParentDeathSignal, b"")?;
    nix::sys::prctl::set_no_new_privs().step(Step::NoNewPrivs, b"")?;
    let unshared = namespaces_made_by_init(plan.clone_flags);
    if !unshared.is_empty() {
        nix::sched::unshare(unshared).step(Step::UnshareNamespaces, b"")?;
    }

    let mut trees: [Option<OwnedFd>; MAX_PASSED_FDS] = std::array::from_fn(|_| None);
    match channel::wait_for_go(fds.sync, &mut trees) {
        Ok(_) => {}
        Err(channel::ChannelError::Closed) => return Err(None),
        Err(_) => {
            return Err(Some(Failed {
                step: Step::WaitForIdMaps,
                errno: Errno::EPROTO,
                detail: b"",
            }))
        }
    }

    if plan.ids.root_mode {
        // A map alone does not change the credentials of a running process:
        // until these calls, this process still has host uid 0 and host
        // root's supplementary groups.
        nix::unistd::setgroups(&[]).step(Step::DropGroups, b"")?;
        let gid = Gid::from_raw(plan.ids.inside_gid);
        let uid = Uid::from_raw(plan.ids.inside_uid);
        nix::unistd::setresgid(gid, gid, gid).step(Step::SetIds, b"gid")?;
        nix::unistd::setresuid(uid, uid, uid).step(Step::SetIds, b"uid")?;
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).step(Step::ParentDeathSignal, b"")?;
        if supervisor_gone(fds.sync) {
            return Err(None);
        }
    }
    // Init is a copy of the supervisor: its memory and /proc/1/environ hold
    // the host's whole environment. Today the payload cannot read them
    // because init keeps capabilities the payload lacks (ptrace access needs
    // a superset of the target's) and, with Landlock, because of its ptrace
    // rule; non-dumpable keeps them closed should either ever change. Only
    // now: the supervisor had to write this process's /proc id maps, which a
    // non-dumpable process's /proc files no longer allow.
    nix::sys::prctl::set_dumpable(false).step(Step::NoNewPrivs, b"PR_SET_DUMPABLE")?;
    // Its own process group, so a terminal's ^C reaches only the supervisor,
    // which forwards it once (the payload would otherwise see it twice).
    nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)).step(Step::ProcessGroup, b"")?;
    let without_namespaces = !plan.namespaces;
    // A review run's layer: init keeps its tmpfs open until the payload
    // ends, then hands it to the supervisor (see crate::review).
    let mut layer: Option<OwnedFd> = None;
    if without_namespaces {
        prepare_reaper(fds.sync)?;
    } else {
        build_root(plan, &mut trees, fds.report, &mut layer)?;

        if plan.network.has_loopback() {
            crate::sys::net::loopback_up().step(Step::Loopback, b"lo")?;
        }
        // The allowlist's proxy listens on the sandbox's own loopback; the
        // socket goes to the net process outside, and init keeps no copy
        // (the payload must never accept on it).
        if let (NetworkMode::Allowlist, Some(to)) = (plan.network, fds.net_handover) {
            let listener = crate::sys::net::listen_on_loopback(crate::net::PROXY_PORT)
                .step(Step::ProxyListener, b"127.0.0.1:3128")?;
            channel::send_fd(to, listener.as_fd()).step(Step::ProxyListener, b"handover")?;
        }
        if let Err(errno) = nix::unistd::sethostname("sandbox") {
            // Cosmetic (see COSMETIC_STEPS): said in the report, never fatal. A
            // container's seccomp profile denies sethostname even in a uts
            // namespace of one's own, and it stopped whole runs there.
            channel::report_skipped(fds.report, Step::Hostname, errno);
        }
    }

    // Into the run's cgroup before anything is forked that must be
    // counted. The cgroup namespace is created after the move, so its root
    // is the run's cgroup and the host's cgroup paths stay hidden.
    match fds.cgroup {
        CgroupJoin::AlreadyThere => {}
        CgroupJoin::Itself(tasks) => {
            for file in tasks {
                nix::unistd::write(file, b"0").step(Step::JoinCgroup, b"tasks")?;
                // Init keeps no writable cgroup file for the whole run. Closed
                // by number: init never drops the supervisor's copy, it exits.
                let _ = nix::unistd::close(std::os::fd::AsRawFd::as_raw_fd(file));
            }
        }
        // A move by another process waits for an RCU grace period (1 to
        // 20 ms): the supervisor makes it while init builds the root above.
        CgroupJoin::BySupervisor => match channel::wait_for_cgroup_joined(fds.sync) {
            Ok(()) => {}
            Err(channel::ChannelError::Closed) => return Err(None),
            Err(_) => {
                return Err(Some(Failed {
                    step: Step::WaitForCgroup,
                    errno: Errno::EPROTO,
                    detail: b"",
                }))
            }
        },
    }
    if !without_namespaces {
        nix::sched::unshare(CloneFlags::CLONE_NEWCGROUP).step(Step::UnshareCgroup, b"")?;
    }

    // Start the payload. Signals stay blocked (the supervisor blocked them
    // before clone) until forwarding is in place, so none is lost. In
    // init's memory, init suspended until it executes, when it goes
    // straight to execve. A copy, as fork makes, when it may wait long
    // first (a warm sandbox's command, a learning run's notified calls) or
    // when init must stay awake meanwhile (without namespaces init ends
    // the run when its sync socket closes): a suspended init could neither
    // forward a signal nor end the run.
    let start =
        |payload_child: &ClonedChild| super::child::main(plan, handover, fds.report, payload_child);
    let started = if plan.namespaces && handover.warm_commit.is_none() && plan.observer.is_none() {
        crate::sys::clone::clone_sharing_memory(start)
    } else {
        crate::sys::clone::clone_into_namespaces(CloneFlags::empty(), start)
    };
    let (payload, pidfd) = started.step(Step::ForkPayload, b"")?;
    // Init waits by pid. Closed here, not by `close_from` below: an owned
    // descriptor closed behind its back aborted init at its end in a debug
    // build (std's I/O-safety check), and pid 1 ignores the SIGABRT, so it
    // spun until its supervisor killed it (2 s of every skill activation's
    // teardown in the debug tests).
    drop(pidfd);
    crate::sys::signal::forward_signals_to(payload).step(Step::SignalForwarding, b"")?;
    // Without a pid namespace SIGCHLD stays blocked: init reads it from a
    // signalfd, next to the sync socket (see `supervise_descendants`).
    let mut unblocked = SigSet::empty();
    if without_namespaces {
        unblocked.add(Signal::SIGCHLD);
    }
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&unblocked), None);
    // From here init needs only its sync socket. It is a copy of the
    // supervisor, so it holds copies of everything the supervisor had open:
    // the report pipe (only the payload may write records now), the payload's
    // stdio pipes and broker socket, and, for a run the broker starts, the
    // outer run's descriptors. Any copy of a write end would keep its reader
    // from ever seeing end-of-file, so everything else is closed.
    // The review layer goes to 4, beside the sync socket: moved first if
    // it sits at 3, where the socket goes.
    if layer
        .as_ref()
        .is_some_and(|fd| std::os::fd::AsRawFd::as_raw_fd(fd) == 3)
    {
        if let Some(fd) = layer.take() {
            layer = Some(nix::unistd::dup(&fd).step(Step::CloseDescriptors, b"review layer")?);
        }
    }
    let sync = cloned
        .place(fds.sync, 3)
        .step(Step::CloseDescriptors, b"sync")?;
    let placed_layer = match &layer {
        Some(fd) => Some(
            cloned
                .place(fd.as_fd(), 4)
                .step(Step::CloseDescriptors, b"review layer")?,
        ),
        None => None,
    };
    // The layer's own number is closed below with the rest: its owner must
    // not close it again when init ends (a double close aborts a debug
    // build, and pid 1 cannot die of that).
    let _ = layer.map(std::os::fd::IntoRawFd::into_raw_fd);
    // Past the last placed descriptor: 4 is closed too when there is no
    // layer, since whatever the supervisor had there must not stay open.
    let first_closed = if placed_layer.is_some() { 5 } else { 4 };
    cloned
        .close_from(first_closed)
        .step(Step::CloseDescriptors, b"")?;
    if let Ok(null) = nix::fcntl::open(c"/dev/null", nix::fcntl::OFlag::O_RDWR, Mode::empty()) {
        for fd in 0..3 {
            let _ = crate::sys::fd::redirect_standard_stream(null.as_fd(), fd);
        }
    }

    let exit = if without_namespaces {
        supervise_descendants(payload, sync)
    } else {
        reap_until(payload)
    };
    let _ = channel::send_exit(sync, exit, placed_layer);
    Ok(exit.as_status())
}

/// Setup steps whose failure leaves every promise of the profile intact, so
/// they warn instead of stopping the run:
///
/// - the hostname: a name only. The uts namespace is what isolates, and it
///   is created by init at its start (which fails the run if it cannot be); without the
///   call the payload sees its namespace's copy of the host's name, which
///   no profile promises to hide and which it still cannot change for the
///   host.
///
/// Not cosmetic, though they may look it: bringing loopback up in
/// `loopback` mode (the mode promises a working loopback; in `none` mode it
/// is not attempted at all), the cgroup namespace (it hides the host's
/// cgroup paths), the process group (without it a terminal's ^C reaches
/// the payload twice), no_new_privs, the parent-death signal and
/// non-dumpable (security).
pub const COSMETIC_STEPS: [Step; 1] = [Step::Hostname];

/// Whether a failure of `step` only warns (see [`COSMETIC_STEPS`]).
pub fn is_cosmetic(step: Step) -> bool {
    COSMETIC_STEPS.contains(&step)
}

/// Reap every child (orphans are re-parented to us) until the payload ends.
fn reap_until(payload: Pid) -> PayloadExit {
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == payload => return PayloadExit::Code(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == payload => {
                return PayloadExit::Signal(signal as i32)
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            // ECHILD: nothing left to wait for, which cannot happen before
            // the payload was reaped; treat it as a crash of the payload.
            Err(_) => return PayloadExit::Code(SETUP_FAILED),
        }
    }
}

/// Without a pid namespace nothing kills the run's processes when init
/// exits, so init does it. It becomes a child subreaper, so every orphan of
/// the run is re-parented to it rather than to the host's init. Its
/// parent-death SIGKILL is replaced by watching the sync socket: killed
/// outright, init could not kill the rest; end-of-file there tells it the
/// supervisor died (or asks it to end the run), and it kills everything.
/// SIGCHLD is blocked before the payload exists, so none is lost.
fn prepare_reaper(sync: BorrowedFd<'_>) -> Result<(), Option<Failed<'static>>> {
    nix::sys::prctl::set_child_subreaper(true)
        .step(Step::ForkPayload, b"PR_SET_CHILD_SUBREAPER")?;
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&chld), None)
        .step(Step::SignalForwarding, b"SIGCHLD")?;
    nix::sys::prctl::set_pdeathsig(None).step(Step::ParentDeathSignal, b"")?;
    // The supervisor may have died before the signal was cleared.
    if supervisor_gone(sync) {
        return Err(None);
    }
    Ok(())
}

/// Reap until the payload ends, or until the supervisor is gone or asks
/// for the end (the sync socket is readable: it sends nothing after "go"),
/// then kill every descendant that is left.
fn supervise_descendants(payload: Pid, sync: BorrowedFd<'_>) -> PayloadExit {
    use crate::poll_set::PollSet;
    use nix::poll::PollFlags;
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use nix::sys::wait::WaitPidFlag;
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let signals = SignalFd::with_flags(&chld, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).ok();
    let mut exit = None;
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == payload => {
                    exit = Some(PayloadExit::Code(code))
                }
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == payload => {
                    exit = Some(PayloadExit::Signal(signal as i32))
                }
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        if let Some(exit) = exit {
            kill_descendants();
            return exit;
        }
        let mut set = PollSet::default();
        let supervisor = set.add(sync, PollFlags::POLLIN);
        if let Some(signals) = &signals {
            set.add(signals.as_fd(), PollFlags::POLLIN);
        }
        // Without a signalfd (descriptors exhausted), look every 50 ms.
        let wait = if signals.is_some() {
            None
        } else {
            Some(std::time::Duration::from_millis(50))
        };
        if set.wait_for(wait).is_err() {
            kill_descendants();
            return PayloadExit::Signal(Signal::SIGKILL as i32);
        }
        if set.ready(Some(supervisor)) {
            kill_descendants();
            return PayloadExit::Signal(Signal::SIGKILL as i32);
        }
        if let Some(signals) = &signals {
            while let Ok(Some(_)) = signals.read_signal() {}
        }
    }
}

/// A process found below init: its pid and start time (in clock ticks
/// since boot), which together name it even if the pid is reused.
type Descendant = (i32, u64);

/// pid, parent pid and start time from /proc/PID/stat.
fn stat_of(pid: i32) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after
    // the last ')'. Then: state, ppid, ... starttime is field 22 overall.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((ppid, start))
}

/// Every process below `root`, from one pass over /proc (this kernel need
/// not have /proc/PID/task/TID/children).
fn descendants_of(root: i32) -> Vec<Descendant> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut all: Vec<(i32, i32, u64)> = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((ppid, start)) = stat_of(pid) {
            all.push((pid, ppid, start));
        }
    }
    let mut found: Vec<Descendant> = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for &(pid, ppid, start) in &all {
            if ppid == parent && !found.iter().any(|(p, _)| *p == pid) {
                found.push((pid, start));
                parents.push(pid);
            }
        }
    }
    found
}

/// SIGKILL every descendant and reap until init has no child left. A
/// process forked meanwhile is found on the next pass (its parent, killed,
/// leaves it to init, the subreaper); init having no child means no
/// descendant is left, since any would have an ancestor among init's
/// children. Each kill goes through a pidfd opened after checking the
/// process's start time, so a reused pid is never hit.
fn kill_descendants() {
    use nix::sys::wait::WaitPidFlag;
    let me = nix::unistd::getpid().as_raw();
    loop {
        for (pid, start) in descendants_of(me) {
            let Ok(pidfd) = crate::sys::signal::pidfd_open(Pid::from_raw(pid)) else {
                continue;
            };
            if stat_of(pid).map(|(_, s)| s) == Some(start) {
                let _ = crate::sys::signal::pidfd_kill(pidfd.as_fd());
            }
        }
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => return,
            }
        }
        match waitpid(None, None) {
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(_) => return,
        }
    }
}

fn supervisor_gone(sync: BorrowedFd<'_>) -> bool {
    // A look, not a wait, so not `PollSet`: an interrupted look reads as
    // gone (init goes no further unless the supervisor is known to be
    // there), where `PollSet` makes EINTR an empty turn, which would read
    // as still there.
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(sync, PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(0) => false,
        Ok(_) => match fds[0].revents() {
            Some(r) if r.contains(PollFlags::POLLHUP) => true,
            // The one message that may be waiting before init forks is the
            // cgroup move's; anything else (end-of-file included) means the
            // supervisor is gone or broke the protocol.
            Some(r) if r.contains(PollFlags::POLLIN) => !channel::cgroup_joined_pending(sync),
            _ => false,
        },
        Err(_) => true,
    }
}

/// A mount point that could not be created is fine if it already exists
/// (a read-only bind may cover it).
fn exists_or_fail(path: &CStr, errno: Errno) -> Result<(), Failed<'_>> {
    match nix::sys::stat::stat(path) {
        Ok(_) => Ok(()),
        Err(_) => Err(Failed {
            step: Step::CreateMountPoint,
            errno,
            detail: path.to_bytes(),
        }),
    }
}

fn mkdir_if_missing(path: &CStr) -> Result<(), Failed<'_>> {
    match nix::unistd::mkdir(path, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => Ok(()),
        Err(errno) => exists_or_fail(path, errno),
    }
}

fn file_if_missing(path: &CStr) -> Result<(), Failed<'_>> {
    use nix::fcntl::{open, OFlag};
    let flags = OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
    match open(path, flags, Mode::from_bits_truncate(0o644)) {
        Ok(_fd) => Ok(()),
        Err(errno) => exists_or_fail(path, errno),
    }
}

fn tmpfs(target: &CStr, flags: MsFlags, options: &CStr) -> nix::Result<()> {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(options))
}

fn bind_tree<'a>(source: &'a CStr, target: &'a CStr, attrs: MountAttrs) -> Result<(), Failed<'a>> {
    let tree = mount_api::clone_tree(source).step(Step::BindMount, source.to_bytes())?;
    mount_api::set_tree_attrs(tree.as_fd(), attrs).step(Step::BindMount, target.to_bytes())?;
    mount_api::attach_tree(tree.as_fd(), target).step(Step::BindMount, target.to_bytes())
}

const NONE: Option<&str> = None;
/// /dev/tty opens the caller's controlling terminal: the payload's session
/// (setsid in the child) has none, so it gets ENXIO as in CI, and a process
/// the payload starts on a pty of the run's own devpts gets that pty, as
/// `ssh`, `sudo`-style prompts and expect-driven tests need. It can never
/// reach the person's terminal.
const DEV_NODES: [(&CStr, &CStr); 6] = [
    (c"/oldroot/dev/null", c"/newroot/dev/null"),
    (c"/oldroot/dev/zero", c"/newroot/dev/zero"),
    (c"/oldroot/dev/full", c"/newroot/dev/full"),
    (c"/oldroot/dev/random", c"/newroot/dev/random"),
    (c"/oldroot/dev/urandom", c"/newroot/dev/urandom"),
    (c"/oldroot/dev/tty", c"/newroot/dev/tty"),
];
const DEV_LINKS: [(&CStr, &CStr); 4] = [
    (c"/proc/self/fd", c"/newroot/dev/fd"),
    (c"/proc/self/fd/0", c"/newroot/dev/stdin"),
    (c"/proc/self/fd/1", c"/newroot/dev/stdout"),
    (c"/proc/self/fd/2", c"/newroot/dev/stderr"),
];

/// Build the new root and pivot into it.
///
/// Staging layout (as bubblewrap does it): a tmpfs is mounted over /tmp and
/// becomes the root via a first pivot_root, with the host's tree reachable at
/// /oldroot. Sources are then always `/oldroot/<path>`, whatever the paths
/// (the project may itself live under /tmp). The new root is a second tmpfs
/// at /newroot; a final pivot_root(".", ".") plus a lazy unmount removes the
/// host tree from this mount namespace entirely.
///
/// Once the first mounts and pivot_root worked, the namespaces are known
/// to be usable, and `report` says so: the supervisor of a best-effort
/// profile waits for that, or for the refusal that makes the run fall back
/// to no namespaces (Ubuntu's AppArmor restriction lets the namespace be
/// created and refuses these).
fn build_root<'a>(
    plan: &'a ChildPlan,
    trees: &mut [Option<OwnedFd>; MAX_PASSED_FDS],
    report: BorrowedFd<'_>,
    layer: &mut Option<OwnedFd>,
) -> Result<(), Failed<'a>> {
    pivot_to_staging(report)?;
    mount_base_of_new_root(plan)?;
    mount_plan(plan, trees, layer)?;
    provide_etc(plan)?;
    enter_new_root()
}

/// Makes every mount private and pivots into a small staging tmpfs that
/// holds `newroot`, `oldroot` (the host's tree, the binds' source) and the
/// file that masks hidden files.
fn pivot_to_staging(report: BorrowedFd<'_>) -> Result<(), Failed<'static>> {
    let rec_private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    mount(NONE, "/", NONE, rec_private, NONE).step(Step::MountPrivate, b"/")?;
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    tmpfs(c"/tmp", nosuid_nodev, c"mode=0755,size=1m").step(Step::MountBase, b"/tmp")?;
    nix::unistd::chdir("/tmp").step(Step::MountBase, b"/tmp")?;
    for dir in [c"newroot", c"oldroot"] {
        nix::unistd::mkdir(dir, Mode::from_bits_truncate(0o755))
            .step(Step::MountBase, dir.to_bytes())?;
    }
    // The empty, unreadable file that masks hidden files.
    file_if_missing(c"hidden")?;
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        c"hidden",
        Mode::empty(),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .step(Step::HidePath, b"hidden")?;
    nix::unistd::pivot_root(".", "oldroot").step(Step::PivotToBase, b"/tmp")?;
    nix::unistd::chdir("/").step(Step::PivotToBase, b"/")?;
    channel::report_namespaces_usable(report);
    Ok(())
}

/// The new root's own tmpfs, with its private `/tmp`, `/proc` and `/dev`.
fn mount_base_of_new_root(plan: &ChildPlan) -> Result<(), Failed<'_>> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    tmpfs(c"/newroot", nosuid_nodev, c"mode=0755").step(Step::MountNewRoot, b"/newroot")?;
    for dir in [c"/newroot/tmp", c"/newroot/proc", c"/newroot/dev"] {
        mkdir_if_missing(dir)?;
    }
    tmpfs(c"/newroot/tmp", nosuid_nodev, &plan.tmp_options).step(Step::MountTmp, b"/tmp")?;
    mount(
        Some("proc"),
        "/newroot/proc",
        Some("proc"),
        nosuid_nodev | MsFlags::MS_NOEXEC,
        NONE,
    )
    .step(Step::MountProc, b"/proc")?;
    build_dev(plan)?;
    Ok(())
}

/// The view the supervisor planned, in its order (parents before children).
fn mount_plan<'a>(
    plan: &'a ChildPlan,
    trees: &mut [Option<OwnedFd>; MAX_PASSED_FDS],
    layer: &mut Option<OwnedFd>,
) -> Result<(), Failed<'a>> {
    for dir in &plan.mount_dirs {
        mkdir_if_missing(dir)?;
    }
    let read_only = MountAttrs {
        read_only: true,
        nosuid: true,
        nodev: true,
        noexec: false,
    };
    let writable = MountAttrs {
        read_only: false,
        nosuid: true,
        nodev: true,
        noexec: false,
    };
    for op in &plan.mounts {
        if let MountOp::ReviewLayer {
            target,
            tmpfs_options,
            overlay_options,
            mode,
            lower_tree,
        } = op
        {
            let lower = match lower_tree {
                Some(index) => {
                    Some(trees.get_mut(*index).and_then(Option::take).ok_or(Failed {
                        step: Step::ReviewLayer,
                        errno: Errno::EBADF,
                        detail: b"recipe layer",
                    })?)
                }
                None => None,
            };
            *layer = Some(review_layer(
                target,
                tmpfs_options,
                overlay_options,
                *mode,
                lower,
            )?);
            continue;
        }
        mount_op(op, trees, read_only, writable)?;
    }
    Ok(())
}

/// Review mode: the layer's tmpfs in the staging root (which the payload
/// never sees: it is detached with the host's tree), and the overlay over
/// the project. Returns the tmpfs's root, which init hands to the
/// supervisor when the payload ends.
fn review_layer<'a>(
    target: &'a CStr,
    tmpfs_options: &'a CStr,
    overlay_options: &'a CStr,
    mode: u32,
    lower: Option<OwnedFd>,
) -> Result<OwnedFd, Failed<'a>> {
    use nix::fcntl::{open, OFlag};
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mkdir_if_missing(c"/review")?;
    tmpfs(c"/review", nosuid_nodev, tmpfs_options).step(Step::ReviewLayer, b"/review")?;
    for dir in [c"/review/upper", c"/review/work"] {
        nix::unistd::mkdir(dir, Mode::from_bits_truncate(0o700))
            .step(Step::ReviewLayer, dir.to_bytes())?;
    }
    // The overlay's root takes its mode from the upper directory.
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        c"/review/upper",
        Mode::from_bits_truncate(mode),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .step(Step::ReviewLayer, b"/review/upper")?;
    let root = open(
        c"/review",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .step(Step::ReviewLayer, b"/review")?;
    if let Some(tree) = lower {
        let staged = crate::review::stack::STAGED_LOWER_C;
        mkdir_if_missing(staged)?;
        mount_api::attach_tree(tree.as_fd(), staged).step(Step::ReviewLayer, staged.to_bytes())?;
    }
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        nosuid_nodev,
        Some(overlay_options),
    )
    .step(Step::ReviewLayer, target.to_bytes())?;
    Ok(root)
}

/// One step of the view.
fn mount_op<'a>(
    op: &'a MountOp,
    trees: &mut [Option<OwnedFd>; MAX_PASSED_FDS],
    read_only: MountAttrs,
    writable: MountAttrs,
) -> Result<(), Failed<'a>> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    match op {
        MountOp::Bind {
            source,
            target,
            kind,
            writable: rw,
        } => {
            match kind {
                NodeKind::Dir => mkdir_if_missing(target)?,
                NodeKind::File => file_if_missing(target)?,
            }
            bind_tree(source, target, if *rw { writable } else { read_only })?;
        }
        MountOp::Idmapped {
            index,
            target,
            kind,
        } => {
            match kind {
                NodeKind::Dir => mkdir_if_missing(target)?,
                NodeKind::File => file_if_missing(target)?,
            }
            let tree = trees.get_mut(*index).and_then(Option::take).ok_or(Failed {
                step: Step::AttachIdmappedTree,
                errno: Errno::EBADF,
                detail: target.to_bytes(),
            })?;
            mount_api::attach_tree(tree.as_fd(), target)
                .step(Step::AttachIdmappedTree, target.to_bytes())?;
        }
        MountOp::Symlink { link, target } => {
            match nix::unistd::symlinkat(link.as_c_str(), nix::fcntl::AT_FDCWD, target.as_c_str()) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(errno) => {
                    return Err(Failed {
                        step: Step::Symlink,
                        errno,
                        detail: target.to_bytes(),
                    })
                }
            }
        }
        MountOp::HideDir { target } => {
            let flags = nosuid_nodev | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY;
            tmpfs(target, flags, c"mode=0555,size=4k").step(Step::HidePath, target.to_bytes())?;
        }
        MountOp::Rebind {
            target,
            read_only: ro,
        } => {
            let tree = mount_api::clone_tree(target).step(Step::ProtectPath, target.to_bytes())?;
            if *ro {
                mount_api::set_tree_attrs(tree.as_fd(), read_only)
                    .step(Step::ProtectPath, target.to_bytes())?;
            }
            mount_api::attach_tree(tree.as_fd(), target)
                .step(Step::ProtectPath, target.to_bytes())?;
        }
        // Mounted by `review_layer`, which `mount_plan` calls instead.
        MountOp::ReviewLayer { .. } => {}
        MountOp::HideFile { target } => {
            mount(
                Some("/hidden"),
                target.as_c_str(),
                NONE,
                MsFlags::MS_BIND,
                NONE,
            )
            .step(Step::HidePath, target.to_bytes())?;
            mount(
                NONE,
                target.as_c_str(),
                NONE,
                MsFlags::MS_BIND
                    | MsFlags::MS_REMOUNT
                    | MsFlags::MS_RDONLY
                    | nosuid_nodev
                    | MsFlags::MS_NOEXEC,
                NONE,
            )
            .step(Step::HidePath, target.to_bytes())?;
        }
    }
    Ok(())
}

/// Makes the new root read-only, pivots into it and detaches the host's.
fn enter_new_root() -> Result<(), Failed<'static>> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(
        NONE,
        "/newroot",
        NONE,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | nosuid_nodev,
        NONE,
    )
    .step(Step::RemountRootReadOnly, b"/")?;
    nix::unistd::chdir("/newroot").step(Step::PivotRoot, b"/newroot")?;
    nix::unistd::pivot_root(".", ".").step(Step::PivotRoot, b"/newroot")?;
    umount2(".", MntFlags::MNT_DETACH).step(Step::DetachOldRoot, b"/")?;
    nix::unistd::chdir("/").step(Step::Chdir, b"/")?;
    Ok(())
}

/// The run's own `/etc/passwd`, `/etc/group` and `/etc/hosts` (see
/// [`super::etc`]), written to the staging tmpfs and bound read-only on top
/// of whatever the profile shows in /etc; and `/etc/mtab`, which `df` and
/// `mount` read, as the link to the run's own mount table that it is on
/// current distributions.
fn provide_etc(plan: &ChildPlan) -> Result<(), Failed<'static>> {
    use nix::fcntl::{open, OFlag};
    mkdir_if_missing(c"/newroot/etc")?;
    let ro = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY;
    for file in &plan.etc {
        let target = file.target;
        let failed = |step, errno| Failed {
            step,
            errno,
            detail: target.to_bytes(),
        };
        let flags = OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
        match open(target, flags, Mode::from_bits_truncate(0o644)) {
            Ok(_) => {}
            Err(_) if nix::sys::stat::stat(target).is_ok() => {}
            // The profile shows a host /etc (read-only) that lacks the
            // file: the run lacks it too, as the host does.
            Err(Errno::EROFS) => continue,
            Err(errno) => return Err(failed(Step::CreateMountPoint, errno)),
        }
        write_file(file.staged, file.content.as_bytes())
            .map_err(|errno| failed(Step::BindMount, errno))?;
        mount(Some(file.staged), target, NONE, MsFlags::MS_BIND, NONE)
            .map_err(|errno| failed(Step::BindMount, errno))?;
        mount(
            NONE,
            target,
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | ro,
            NONE,
        )
        .map_err(|errno| failed(Step::BindMount, errno))?;
    }
    match nix::unistd::symlinkat(
        c"../proc/self/mounts",
        nix::fcntl::AT_FDCWD,
        c"/newroot/etc/mtab",
    ) {
        // EROFS: a host /etc without one, as above.
        Ok(()) | Err(Errno::EEXIST) | Err(Errno::EROFS) => Ok(()),
        Err(errno) => Err(Failed {
            step: Step::Symlink,
            errno,
            detail: b"/etc/mtab",
        }),
    }
}

/// Create `path` (mode 0644 whatever the umask: every user of the run
/// reads these) holding `content`.
fn write_file(path: &CStr, content: &[u8]) -> Result<(), Errno> {
    use nix::fcntl::{open, OFlag};
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
    let fd = open(path, flags, Mode::from_bits_truncate(0o644))?;
    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o644))?;
    let mut rest = content;
    while !rest.is_empty() {
        match nix::unistd::write(&fd, rest) {
            Ok(0) => return Err(Errno::EIO),
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(errno),
        }
    }
    Ok(())
}

fn build_dev<'a>(plan: &'a ChildPlan) -> Result<(), Failed<'a>> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    tmpfs(c"/newroot/dev", flags, c"mode=0755,size=64k").step(Step::MountDev, b"/dev")?;
    for (source, target) in DEV_NODES {
        file_if_missing(target)?;
        mount(Some(source), target, NONE, MsFlags::MS_BIND, NONE)
            .step(Step::MountDev, target.to_bytes())?;
    }
    for (link, target) in DEV_LINKS {
        nix::unistd::symlinkat(link, nix::fcntl::AT_FDCWD, target)
            .step(Step::MountDev, target.to_bytes())?;
    }
    mkdir_if_missing(c"/newroot/dev/shm")?;
    // Memory-backed like /tmp, so it gets the same size limit.
    tmpfs(
        c"/newroot/dev/shm",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &plan.tmp_options,
    )
    .step(Step::MountDev, b"/dev/shm")?;
    // The message-queue filesystem of the run's own IPC namespace (mqueue
    // takes the mounting process's namespace, which init created): the
    // Landlock rule on its root is what lets mq_open through, since the
    // kernel's internal mount of the same filesystem has no parent the
    // rule's walk could reach. It holds only the run's own queues.
    // ENODEV: a kernel without POSIX message queues, where mq_open fails
    // as it does bare.
    mkdir_if_missing(c"/newroot/dev/mqueue")?;
    match mount(
        Some(c"mqueue"),
        c"/newroot/dev/mqueue",
        Some(c"mqueue"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        NONE,
    ) {
        Ok(()) | Err(Errno::ENODEV) => {}
        Err(errno) => {
            return Err(Failed {
                step: Step::MountDev,
                errno,
                detail: b"/dev/mqueue",
            })
        }
    }
    // A devpts instance of the run's own (`newinstance`): programs that
    // open a pseudo-terminal (expect-style tests, `script`) get one that
    // reaches no host terminal, the person's least of all.
    mkdir_if_missing(c"/newroot/dev/pts")?;
    mount(
        Some(c"devpts"),
        c"/newroot/dev/pts",
        Some(c"devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(c"newinstance,ptmxmode=0666,mode=0620"),
    )
    .step(Step::MountDev, b"/dev/pts")?;
    nix::unistd::symlinkat(c"pts/ptmx", nix::fcntl::AT_FDCWD, c"/newroot/dev/ptmx")
        .step(Step::MountDev, b"/dev/ptmx")?;
    Ok(())
}
