//! A started run: its handles, how it is ended, and what happens when it
//! is dropped.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

use crate::spawn::channel::{self, Record};
use crate::spawn::measure::View;
use crate::spawn::prepare::Prepared;
use crate::spawn::SpawnError;

use super::janitor::Janitor;
use super::notes::note_record;
use super::notes::step_note;
use super::outcome::children_cpu;
use super::outcome::outcome;
use super::outcome::CgroupUse;
use super::outcome::LimitHit;
use super::outcome::Outcome;
use super::start::command_caller;
use super::supervise::read_one_record;
use super::supervise::Driver;
use super::supervise::Steer;
use super::supervise::Turn;
use super::supervise::TIMEOUT_GRACE;
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
    /// The program the run executes, as an exec failure names it (a warm
    /// run's changes when it gets its command).
    pub(super) program: String,
    /// The wall-clock limit, from the clone (a warm run's: from its commit).
    pub(super) timeout: Option<Duration>,
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

    /// The host pid of the sandbox's init (PID 1 inside).
    pub fn init_pid(&self) -> Pid {
        self.init_pid
    }

    /// Tell the run to end: SIGTERM, which init forwards to the payload's
    /// process group. Returns when the grace is over.
    fn terminate(&self, grace: Duration) -> Option<Instant> {
        let _ = kill(self.init_pid, Signal::SIGTERM);
        Instant::now().checked_add(grace)
    }

    /// Kill every process of the run: SIGKILL to init tears down its pid
    /// namespace. Without one, init is asked through the sync socket
    /// (end-of-file there), and kills every descendant before it exits.
    fn end_run(&self) {
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

    /// Forward signals, collect the records, and wait until every process of
    /// the run is gone.
    pub fn wait(self, prepared: &Prepared) -> Result<Outcome, SpawnError> {
        self.wait_driven(prepared, None)
    }

    /// [`Running::wait`], with `driver` talking to the program meanwhile.
    /// The run needs its broker channel (an IPC-enabled profile).
    pub fn wait_driven(
        self,
        prepared: &Prepared,
        driver: Option<&mut dyn Driver>,
    ) -> Result<Outcome, SpawnError> {
        self.wait_measured(prepared, driver).0
    }

    /// [`Running::wait_driven`], with the payload's own view of its
    /// confinement when it got as far as reading it (also when the run
    /// failed afterwards, at exec).
    pub fn wait_measured(
        mut self,
        prepared: &Prepared,
        driver: Option<&mut dyn Driver>,
    ) -> (Result<Outcome, SpawnError>, Option<View>) {
        let mut measured = None;
        let result = self.wait_inner(prepared, driver, &mut measured);
        (result, measured)
    }

    fn wait_inner(
        &mut self,
        prepared: &Prepared,
        driver: Option<&mut dyn Driver>,
        measured: &mut Option<View>,
    ) -> Result<Outcome, SpawnError> {
        let mut result = self
            .supervise(prepared, driver, measured)
            .map_err(SpawnError::explained);
        if result.is_ok() {
            self.collected = true;
            if let Some(cgroup) = self.cgroup.take() {
                cgroup.remove();
            }
            if let (Ok(outcome), Some(plan)) = (&mut result, self.sweep.take()) {
                outcome.sweep = plan.run();
            }
            if let Some(janitor) = self.janitor.take() {
                janitor.dismiss();
            }
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.old_mask), None);
        }
        result
    }

    fn supervise(
        &self,
        prepared: &Prepared,
        mut driver: Option<&mut dyn Driver>,
        measured: &mut Option<View>,
    ) -> Result<Outcome, SpawnError> {
        let mut records = Vec::new();
        let mut report_open = true;
        let mut executing = false;
        let mut channel_shut = false;
        let mut limits_hit = Vec::new();
        // Checked: a policy built in code may hold a timeout past the
        // clock's range (profiles and flags cap it at a year); that is no
        // deadline, not a panic of the supervisor.
        let mut timeout_at = self.timeout.and_then(|t| self.started.checked_add(t));
        // Once the run was told to end (its timeout, a driver's cancel):
        // when the grace is over and every process is killed.
        let mut kill_at: Option<Instant> = None;
        let init_status = loop {
            let mut poll_fds = vec![
                PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
            ];
            if report_open {
                poll_fds.push(PollFd::new(self.report.as_fd(), PollFlags::POLLIN));
            }
            let relay = self.output.as_ref().map(|o| o.borrow());
            let outputs: Vec<(usize, BorrowedFd<'_>, PollFlags)> =
                relay.as_ref().map(|r| r.open()).unwrap_or_default();
            let first_output = poll_fds.len();
            for (_, fd, events) in &outputs {
                poll_fds.push(PollFd::new(*fd, *events));
            }
            let broker_at = poll_fds.len();
            if let Some((sock, broker)) = &self.broker {
                let broker = broker.borrow();
                let mut events = PollFlags::empty();
                if broker.wants_input() {
                    events |= PollFlags::POLLIN;
                }
                if broker.wants_output() {
                    events |= PollFlags::POLLOUT;
                }
                if !events.is_empty() && !self.broker_closed.get() {
                    poll_fds.push(PollFd::new(sock.as_fd(), events));
                }
            }
            // A terminal.run job's pipes: it runs inside this loop.
            let broker = self.broker.as_ref().map(|(_, b)| b.borrow());
            let job_at = poll_fds.len();
            if let Some(broker) = &broker {
                for (fd, events) in broker.poll_fds() {
                    poll_fds.push(PollFd::new(fd, events));
                }
            }
            let job_deadline = broker.as_ref().and_then(|b| b.deadline());
            let input_at = poll_fds.len();
            if let Some(input) = driver.as_ref().and_then(|d| d.input()) {
                poll_fds.push(PollFd::new(input, PollFlags::POLLIN));
            }
            let next = [
                timeout_at,
                kill_at,
                driver.as_ref().and_then(|d| d.deadline()),
                job_deadline,
                relay.as_ref().and_then(|r| r.recheck_at()),
            ]
            .into_iter()
            .flatten()
            .min();
            let wait = match next {
                None => PollTimeout::NONE,
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now()).as_millis();
                    PollTimeout::try_from(left.min(i32::MAX as u128) as i32)
                        .unwrap_or(PollTimeout::MAX)
                }
            };
            match poll(&mut poll_fds, wait) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(source) => {
                    return Err(SpawnError::Sys {
                        op: "poll".into(),
                        source,
                    })
                }
            }
            let ready = |i: usize| {
                poll_fds
                    .get(i)
                    .and_then(|p| p.revents())
                    .is_some_and(|r| !r.is_empty())
            };
            let (init_done, signal_ready, report_ready) =
                (ready(0), ready(1), report_open && ready(2));
            let broker_events = poll_fds
                .get(broker_at)
                .and_then(|p| p.revents())
                .unwrap_or(PollFlags::empty());
            let input_ready = driver.as_ref().is_some_and(|d| d.input().is_some())
                && poll_fds
                    .get(input_at)
                    .and_then(|p| p.revents())
                    .is_some_and(|r| !r.is_empty());
            let outputs_ready: Vec<usize> = outputs
                .iter()
                .enumerate()
                .filter(|(i, _)| ready(first_output + i))
                .map(|(_, (stream, _, _))| *stream)
                .collect();
            poll_fds.truncate(job_at);
            drop(poll_fds);
            drop(broker);
            drop(outputs);
            drop(relay);
            if let Some(output) = &self.output {
                let mut output = output.borrow_mut();
                for stream in outputs_ready {
                    output.pump(stream);
                }
            }
            if let Some((sock, broker)) = &self.broker {
                let mut broker = broker.borrow_mut();
                if broker_events
                    .intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
                    && !broker.on_readable(sock.as_fd())
                {
                    self.broker_closed.set(true);
                }
                if broker.wants_output() && !broker.on_writable(sock.as_fd()) {
                    self.broker_closed.set(true);
                }
            }
            if timeout_at.is_some_and(|at| Instant::now() >= at) {
                timeout_at = None;
                limits_hit.push(LimitHit::Timeout);
                kill_at = kill_at.or_else(|| self.terminate(TIMEOUT_GRACE));
            }
            if kill_at.is_some_and(|at| Instant::now() >= at) {
                // Grace is over. Killing init tears down its pid namespace.
                self.end_run();
                kill_at = None;
            }
            if signal_ready {
                while let Ok(Some(info)) = self.signals.read_signal() {
                    if let Ok(signal) = Signal::try_from(info.ssi_signo as i32) {
                        let _ = kill(self.init_pid, signal);
                    }
                }
            }
            // After the signals were read: finishing a job waits for its
            // run, whose loop reads the same signals.
            if let Some((sock, broker)) = &self.broker {
                let mut broker = broker.borrow_mut();
                if broker.step() && !broker.on_writable(sock.as_fd()) {
                    self.broker_closed.set(true);
                }
            }
            if report_ready {
                let seen = records.len();
                report_open = read_one_record(&self.report, &mut records)?;
                for record in &records[seen..] {
                    note_record(prepared, record);
                }
                // End-of-file with no failure record: the exec succeeded.
                executing = !report_open
                    && !records
                        .iter()
                        .any(|r| matches!(r, channel::Record::Failed { .. }));
                if executing {
                    step_note(prepared, format_args!("executed {}", self.program));
                }
            }
            if let (Some(driver), Some((sock, broker))) = (driver.as_deref_mut(), &self.broker) {
                let mut broker = broker.borrow_mut();
                let steer = driver.turn(Turn {
                    broker: &mut broker,
                    executing,
                    input_ready,
                    channel_closed: self.broker_closed.get(),
                    exited: false,
                });
                match steer {
                    Steer::Continue => {}
                    Steer::Kill => self.end_run(),
                    Steer::Terminate(grace) => {
                        kill_at = kill_at.or_else(|| self.terminate(grace));
                    }
                }
                if broker.wants_output() && !broker.on_writable(sock.as_fd()) {
                    self.broker_closed.set(true);
                }
                if broker.ready_to_close() && !channel_shut {
                    channel_shut = true;
                    let _ = nix::sys::socket::shutdown(
                        sock.as_raw_fd(),
                        nix::sys::socket::Shutdown::Write,
                    );
                }
            }
            if init_done {
                match waitid(Id::PIDFd(self.pidfd.as_fd()), WaitPidFlag::WEXITED) {
                    Ok(status) => break status,
                    Err(Errno::EINTR) => continue,
                    Err(source) => {
                        return Err(SpawnError::Sys {
                            op: "waitid(init)".into(),
                            source,
                        })
                    }
                }
            }
        };
        if let (Some(driver), Some((sock, broker))) = (driver, &self.broker) {
            let mut broker = broker.borrow_mut();
            broker.drain(sock.as_fd());
            driver.turn(Turn {
                broker: &mut broker,
                executing,
                input_ready: false,
                channel_closed: true,
                exited: true,
            });
        }
        // The net process's last reports, and a net.http the run did not
        // wait for, go into the audit before the report is made.
        if let Some((_, broker)) = &self.broker {
            broker.borrow_mut().end_network();
        }
        // Every process of the run is gone now (init's exit tore down its pid
        // namespace), so the pipe has no writer left: read what remains.
        if report_open {
            let seen = records.len();
            records.extend(channel::read_records(&self.report)?);
            for record in &records[seen..] {
                note_record(prepared, record);
            }
        }
        let failed = records
            .iter()
            .any(|r| matches!(r, channel::Record::Failed { .. }));
        if !executing && !failed {
            // The exec and the end of the run were seen at once.
            step_note(prepared, format_args!("executed {}", self.program));
        }
        *measured = records.iter().find_map(|record| match record {
            Record::Measured(view) => Some(**view),
            _ => None,
        });
        let wall = self.started.elapsed();
        let reported_exit = channel::try_recv_exit(self.sync.as_fd())?;
        if let Some(output) = &self.output {
            let mut output = output.borrow_mut();
            output.drain();
            if output.capped() {
                limits_hit.push(LimitHit::Output);
            }
        }
        let mut outcome = outcome(&self.program, records, reported_exit, init_status, wall)?;
        if let Some(cgroup) = &self.cgroup {
            let stats = cgroup.stats();
            if stats.oom_kills > 0 {
                limits_hit.push(LimitHit::Memory);
            }
            if stats.pids_limit_hits > 0 {
                limits_hit.push(LimitHit::Pids);
            }
            outcome.cgroup = Some(CgroupUse {
                version: cgroup.version(),
                controllers: cgroup.controllers(),
                paths: cgroup.paths(),
                stats,
            });
        }
        let (user, system) = children_cpu();
        outcome.cpu_user = user.saturating_sub(self.rusage_before.0);
        outcome.cpu_system = system.saturating_sub(self.rusage_before.1);
        outcome.limits_hit = limits_hit;
        outcome.broker = self.broker.as_ref().map(|(_, b)| b.borrow().counts.clone());
        outcome.connections = self
            .broker
            .as_ref()
            .map(|(_, b)| b.borrow().connections())
            .unwrap_or_default();
        Ok(outcome)
    }
}

impl Drop for Running {
    /// A run that is dropped without being waited for is killed and reaped:
    /// no process of a run outlives its handle.
    fn drop(&mut self) {
        if !self.collected {
            self.end_run();
            let _ = waitid(Id::PIDFd(self.pidfd.as_fd()), WaitPidFlag::WEXITED);
            if let Some(cgroup) = self.cgroup.take() {
                cgroup.remove();
            }
            if let Some(plan) = self.sweep.take() {
                plan.run();
            }
            if let Some(janitor) = self.janitor.take() {
                janitor.dismiss();
            }
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.old_mask), None);
        }
    }
}
