//! A started run: its handles, how it is ended, and what happens when it
//! is dropped.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

use crate::spawn::SpawnError;

use super::broker::command_caller;
use super::janitor::Janitor;
use super::sweep::SweepPlan;

/// A started run, until [`Running::wait`] collects it.
#[derive(Debug)]
pub struct Running {
    /// No pid namespace: killing init would orphan the rest, so the run
    /// is ended by asking init (see [`Running::end_run`]).
    pub(super) without_namespaces: bool,
    pub(super) init_pid: Pid,
    pub(super) pidfd: OwnedFd,
    pub(super) sync: OwnedFd,
    pub(super) report: OwnedFd,
    pub(super) signals: SignalFd,
    pub(super) old_mask: SigSet,
    pub(super) started: Instant,
    pub(super) collected: bool,
    pub(super) cgroup: Option<crate::cgroup::RunCgroup>,
    pub(super) rusage_before: (Duration, Duration),
    pub(super) output: Option<std::cell::RefCell<crate::spawn::output::OutputRelay>>,
    pub(super) janitor: Option<Janitor>,
    pub(super) broker: Option<(OwnedFd, std::cell::RefCell<crate::broker::server::Broker>)>,
    pub(super) broker_closed: std::cell::Cell<bool>,
    pub(super) sweep: Option<SweepPlan>,
    /// A review run's layer, as init handed it over with the payload's
    /// exit (see [`crate::review`]).
    pub(super) layer: std::cell::RefCell<Option<OwnedFd>>,
    /// The program the run executes, as an exec failure names it (a warm
    /// run's changes when it gets its command).
    pub(super) program: String,
    /// The wall-clock limit, from the clone (a warm run's: from its commit).
    pub(super) timeout: Option<Duration>,
    /// A learning run's observer (see [`crate::learn`]).
    pub(super) observer: Option<crate::learn::Observer>,
}

impl Running {
    /// A warm run got its command: the broker names and hashes it, and the
    /// run's clock, timeout and output cap start now, as they would have at
    /// a cold run's clone.
    pub(crate) fn commit_warm(
        &mut self,
        commit: &crate::spawn::warm::Commit,
        limits: &crate::profile::policy::Limits,
        audit: Option<std::fs::File>,
    ) {
        self.started = Instant::now();
        self.program = commit.program();
        self.timeout = limits.timeout;
        if let Some((_, broker)) = &self.broker {
            let mut broker = broker.borrow_mut();
            let (name, program) = command_caller(commit.command(), &commit.cwd);
            broker.set_caller(name, program);
            broker.bind_caller();
            broker.set_deadline(self.timeout.map(|t| self.started + t));
            if let Some(audit) = audit {
                broker.use_audit(audit);
            }
        }
        if let Some(output) = &self.output {
            output.borrow_mut().set_cap(limits.output);
        }
    }

    /// A warm run prepared with its command goes on to execute it: the
    /// run's clock and timeout start now, and the broker hashes what the
    /// caller runs now (the skill's files as they are at this moment, not
    /// as they were when the sandbox was prepared).
    pub(crate) fn start_prepared(&mut self) {
        self.started = Instant::now();
        if let Some((_, broker)) = &self.broker {
            let mut broker = broker.borrow_mut();
            broker.bind_caller();
            broker.set_deadline(self.timeout.map(|t| self.started + t));
        }
    }

    /// The host pid of the sandbox's init (PID 1 inside).
    pub fn init_pid(&self) -> Pid {
        self.init_pid
    }

    /// Tell the run to end: SIGTERM, which init forwards to the payload's
    /// process group. Returns when the grace is over.
    pub(super) fn terminate(&self, grace: Duration) -> Option<Instant> {
        let _ = kill(self.init_pid, Signal::SIGTERM);
        Instant::now().checked_add(grace)
    }

    /// Kill every process of the run: SIGKILL to init tears down its pid
    /// namespace. Without one, init is asked through the sync socket
    /// (end-of-file there), and kills every descendant before it exits.
    pub(super) fn end_run(&self) {
        if self.without_namespaces {
            let _ = nix::sys::socket::shutdown(
                self.sync.as_raw_fd(),
                nix::sys::socket::Shutdown::Write,
            );
        } else {
            let _ = kill(self.init_pid, Signal::SIGKILL);
        }
    }

    /// Kill every process of the run.
    pub fn kill(&self) -> Result<(), SpawnError> {
        if self.without_namespaces {
            self.end_run();
            return Ok(());
        }
        match kill(self.init_pid, Signal::SIGKILL) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(source) => Err(SpawnError::Sys {
                op: "kill(init)".into(),
                source,
            }),
        }
    }
}

impl Drop for Running {
    /// A run that is dropped without being waited for is killed and reaped:
    /// no process of a run outlives its handle.
    fn drop(&mut self) {
        if !self.collected {
            self.end_run();
            let _ = waitid(Id::PIDFd(self.pidfd.as_fd()), WaitPidFlag::WEXITED);
            let cgroup_removed = self.cgroup.take().is_none_or(|cgroup| cgroup.remove());
            if let Some(plan) = self.sweep.take() {
                plan.run();
            }
            if let Some(janitor) = self.janitor.take() {
                janitor.release(cgroup_removed);
            }
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.old_mask), None);
        }
    }
}
