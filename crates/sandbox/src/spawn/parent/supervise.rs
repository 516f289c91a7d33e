//! Supervising a started run until every process of it is gone: the
//! loop, its handlers, and the driver that talks to the program.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::signal::{kill, sigprocmask, SigmaskHow, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};

use super::notes::{note_record, step_note};
use super::outcome::{children_cpu, outcome, CgroupUse, LimitHit, Outcome};
use super::running::Running;
use crate::poll_set::{PollSet, Slot};
use crate::spawn::channel::{self, Record};
use crate::spawn::measure::View;
use crate::spawn::prepare::Prepared;
use crate::spawn::SpawnError;

/// How long a timed-out run has between SIGTERM and SIGKILL, to flush
/// output and remove temporary files.
pub const TIMEOUT_GRACE: Duration = Duration::from_secs(2);

/// What a [`Driver`] sees on one turn of the supervision loop.
#[derive(Debug)]
pub struct Turn<'a> {
    /// The run's broker: send requests with it, take their answers.
    pub broker: &'a mut crate::broker::server::Broker,
    /// The command was executed (on the turn this first becomes true and after).
    pub executing: bool,
    /// The driver's input descriptor is readable.
    pub input_ready: bool,
    /// The sandboxed program closed its end of the channel.
    pub channel_closed: bool,
    /// Every process of the run is gone (the last turn).
    pub exited: bool,
}

/// What the supervisor should do after a driver's turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// Go on.
    Continue,
    /// Kill every process of the run.
    Kill,
    /// SIGTERM to the command now (through init, as a forwarded signal),
    /// every process of the run killed after the grace (a cancel).
    Terminate(Duration),
}

/// Talks to the sandboxed program over the broker channel while the run
/// goes on: a skill host sends `skill.invoke` and relays the answers.
/// It runs inside the supervisor's loop, so it must never block.
pub trait Driver {
    /// A descriptor to wait on besides the run's own (a control socket).
    fn input(&self) -> Option<BorrowedFd<'_>>;
    /// When the driver needs a turn even if nothing happens (a timeout).
    fn deadline(&self) -> Option<Instant>;
    /// One turn, after the run's events were handled.
    fn turn(&mut self, turn: Turn<'_>) -> Steer;
}

pub(super) fn read_one_record(fd: &OwnedFd, records: &mut Vec<Record>) -> Result<bool, SpawnError> {
    let mut buf = [0u8; channel::RECORD_SIZE];
    match nix::unistd::read(fd.as_fd(), &mut buf) {
        Ok(0) => Ok(false),
        Ok(n) => {
            records.push(channel::decode_record(&buf[..n])?);
            Ok(true)
        }
        Err(Errno::EINTR | Errno::EAGAIN) => Ok(true),
        Err(source) => Err(SpawnError::Sys {
            op: "read(report)".into(),
            source,
        }),
    }
}

/// What the supervision loop keeps from one turn to the next.
#[derive(Debug, Default)]
struct LoopState {
    records: Vec<Record>,
    report_open: bool,
    executing: bool,
    channel_shut: bool,
    limits_hit: Vec<LimitHit>,
    timeout_at: Option<Instant>,
    /// Once the run was told to end (its timeout, a driver's cancel):
    /// when the grace is over and every process is killed.
    kill_at: Option<Instant>,
}

/// What one turn's wait found ready.
#[derive(Debug)]
struct Ready {
    init_done: bool,
    signals: bool,
    report: bool,
    broker: PollFlags,
    input: bool,
    /// A learning run: the listener arrived (or its socket closed).
    observer_socket: bool,
    /// A learning run: the listener's events (an observed call waits).
    listener: PollFlags,
    /// The output streams to pump.
    outputs: Vec<usize>,
}

impl Running {
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
            let cgroup_removed = self.cgroup.take().is_none_or(|cgroup| cgroup.remove());
            if let (Ok(outcome), Some(plan)) = (&mut result, self.sweep.take()) {
                outcome.sweep = plan.run();
            }
            if let (Ok(outcome), Some(started)) = (&mut result, &prepared.config.review) {
                outcome.review = Some(super::review::capture(
                    prepared.config.supervision.review_store.as_deref(),
                    started,
                    self.layer.borrow_mut().take(),
                ));
            }
            if let Some(janitor) = self.janitor.take() {
                janitor.release(cgroup_removed);
            }
            // What the run killed (the id-mapping namespace's holder) is
            // long gone by now.
            crate::sys::reap::finished();
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.old_mask), None);
        }
        result
    }

    /// The loop: wait, then let each handler take what is its own, in an
    /// order that matters (signals are read before a broker job finishes,
    /// the driver turns after the run's own events), until init's exit.
    fn supervise(
        &self,
        prepared: &Prepared,
        mut driver: Option<&mut dyn Driver>,
        measured: &mut Option<View>,
    ) -> Result<Outcome, SpawnError> {
        let mut state = LoopState {
            report_open: true,
            // Checked: a policy built in code may hold a timeout past the
            // clock's range (profiles and flags cap it at a year); that is no
            // deadline, not a panic of the supervisor.
            timeout_at: self.timeout.and_then(|t| self.started.checked_add(t)),
            ..LoopState::default()
        };
        let init_status = loop {
            let ready = self.wait_turn(&state, driver.as_deref())?;
            // First: every observed call holds its caller until answered.
            if let Some(observer) = &self.observer {
                if ready.observer_socket {
                    observer.on_socket();
                }
                observer.on_listener(ready.listener);
            }
            self.on_output(&ready.outputs);
            self.on_broker_io(ready.broker);
            self.on_deadlines(&mut state);
            if ready.signals {
                self.on_signals();
            }
            // After the signals were read: finishing a job waits for its
            // run, whose loop reads the same signals.
            self.on_broker_step();
            if ready.report {
                self.on_report(prepared, &mut state)?;
            }
            if let Some(driver) = driver.as_deref_mut() {
                self.on_driver(driver, &mut state, ready.input);
            }
            if ready.init_done {
                if let Some(status) = self.on_init_done()? {
                    break status;
                }
            }
        };
        self.collect(prepared, driver, state, init_status, measured)
    }

    /// Wait for the next event of the run, its broker or the driver, or
    /// the earliest deadline.
    fn wait_turn(
        &self,
        state: &LoopState,
        driver: Option<&dyn Driver>,
    ) -> Result<Ready, SpawnError> {
        let mut set = PollSet::default();
        let init = set.add(self.pidfd.as_fd(), PollFlags::POLLIN);
        let signals = set.add(self.signals.as_fd(), PollFlags::POLLIN);
        let report = state
            .report_open
            .then(|| set.add(self.report.as_fd(), PollFlags::POLLIN));
        let relay = self.output.as_ref().map(|o| o.borrow());
        let outputs: Vec<(usize, Slot)> = relay
            .as_ref()
            .map(|r| r.open())
            .unwrap_or_default()
            .into_iter()
            .map(|(stream, fd, events)| (stream, set.add(fd, events)))
            .collect();
        let broker = self.broker.as_ref().map(|(sock, b)| (sock, b.borrow()));
        let mut broker_slot = None;
        if let Some((sock, broker)) = &broker {
            let mut events = PollFlags::empty();
            if broker.wants_input() {
                events |= PollFlags::POLLIN;
            }
            if broker.wants_output() {
                events |= PollFlags::POLLOUT;
            }
            if !events.is_empty() && !self.broker_closed.get() {
                broker_slot = Some(set.add(sock.as_fd(), events));
            }
            // A terminal.run job's pipes: it runs inside this loop.
            for (fd, events) in broker.poll_fds() {
                set.add(fd, events);
            }
        }
        let input = driver
            .and_then(|d| d.input())
            .map(|fd| set.add(fd, PollFlags::POLLIN));
        let (observer_socket, listener) = self
            .observer
            .as_ref()
            .map(|o| o.poll_fds())
            .unwrap_or_default();
        let observer_socket = observer_socket.map(|fd| set.add(fd, PollFlags::POLLIN));
        let listener = listener.map(|fd| set.add(fd, PollFlags::POLLIN));
        set.wait([
            state.timeout_at,
            state.kill_at,
            driver.and_then(|d| d.deadline()),
            broker.as_ref().and_then(|(_, b)| b.deadline()),
            relay.as_ref().and_then(|r| r.recheck_at()),
        ])
        .map_err(|source| SpawnError::Sys {
            op: "poll".into(),
            source,
        })?;
        Ok(Ready {
            init_done: set.ready(Some(init)),
            signals: set.ready(Some(signals)),
            report: set.ready(report),
            broker: set.events(broker_slot),
            input: set.ready(input),
            observer_socket: set.ready(observer_socket),
            listener: set.events(listener),
            outputs: outputs
                .into_iter()
                .filter(|(_, slot)| set.ready(Some(*slot)))
                .map(|(stream, _)| stream)
                .collect(),
        })
    }

    /// Relay: copy what the ready streams hold to their destinations.
    fn on_output(&self, ready: &[usize]) {
        if let Some(output) = &self.output {
            let mut output = output.borrow_mut();
            for stream in ready {
                output.pump(*stream);
            }
        }
    }

    /// Broker: read requests, write answers.
    fn on_broker_io(&self, events: PollFlags) {
        if let Some((sock, broker)) = &self.broker {
            let mut broker = broker.borrow_mut();
            if events.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
                && !broker.on_readable(sock.as_fd())
            {
                self.broker_closed.set(true);
            }
            if broker.wants_output() && !broker.on_writable(sock.as_fd()) {
                self.broker_closed.set(true);
            }
        }
    }

    /// Deadlines: the timeout asks the run to end; the grace's end kills it.
    fn on_deadlines(&self, state: &mut LoopState) {
        if state.timeout_at.is_some_and(|at| Instant::now() >= at) {
            state.timeout_at = None;
            state.limits_hit.push(LimitHit::Timeout);
            state.kill_at = state.kill_at.or_else(|| self.terminate(TIMEOUT_GRACE));
        }
        if state.kill_at.is_some_and(|at| Instant::now() >= at) {
            // Grace is over. Killing init tears down its pid namespace.
            self.end_run();
            state.kill_at = None;
        }
    }

    /// Signals: what the supervisor got is forwarded to init.
    fn on_signals(&self) {
        while let Ok(Some(info)) = self.signals.read_signal() {
            if let Ok(signal) = Signal::try_from(info.ssi_signo as i32) {
                let _ = kill(self.init_pid, signal);
            }
        }
    }

    /// Broker: a step of its running job, and the answer it gives.
    fn on_broker_step(&self) {
        if let Some((sock, broker)) = &self.broker {
            let mut broker = broker.borrow_mut();
            if broker.step() && !broker.on_writable(sock.as_fd()) {
                self.broker_closed.set(true);
            }
        }
    }

    /// Records: one from init's report pipe; its end-of-file with no
    /// failure means the exec succeeded.
    fn on_report(&self, prepared: &Prepared, state: &mut LoopState) -> Result<(), SpawnError> {
        let seen = state.records.len();
        state.report_open = read_one_record(&self.report, &mut state.records)?;
        for record in &state.records[seen..] {
            note_record(prepared, record);
        }
        // End-of-file with no failure record: the exec succeeded.
        state.executing = !state.report_open
            && !state
                .records
                .iter()
                .any(|r| matches!(r, channel::Record::Failed { .. }));
        if state.executing {
            step_note(prepared, format_args!("executed {}", self.program));
        }
        Ok(())
    }

    /// Driver: its turn, and what it steers.
    fn on_driver(&self, driver: &mut dyn Driver, state: &mut LoopState, input_ready: bool) {
        let Some((sock, broker)) = &self.broker else {
            return;
        };
        let mut broker = broker.borrow_mut();
        let steer = driver.turn(Turn {
            broker: &mut broker,
            executing: state.executing,
            input_ready,
            channel_closed: self.broker_closed.get(),
            exited: false,
        });
        match steer {
            Steer::Continue => {}
            Steer::Kill => self.end_run(),
            Steer::Terminate(grace) => {
                state.kill_at = state.kill_at.or_else(|| self.terminate(grace));
            }
        }
        if broker.wants_output() && !broker.on_writable(sock.as_fd()) {
            self.broker_closed.set(true);
        }
        if broker.ready_to_close() && !state.channel_shut {
            state.channel_shut = true;
            let _ = nix::sys::socket::shutdown(sock.as_raw_fd(), nix::sys::socket::Shutdown::Write);
        }
    }

    /// Init: its status once it exited (None: interrupted, look again).
    fn on_init_done(&self) -> Result<Option<WaitStatus>, SpawnError> {
        match waitid(Id::PIDFd(self.pidfd.as_fd()), WaitPidFlag::WEXITED) {
            Ok(status) => Ok(Some(status)),
            Err(Errno::EINTR) => Ok(None),
            Err(source) => Err(SpawnError::Sys {
                op: "waitid(init)".into(),
                source,
            }),
        }
    }

    /// After init's exit: the driver's last turn, the broker's last words,
    /// the records left on the pipe, the output drained, and what the
    /// cgroup and the kernel counted, into the outcome.
    fn collect(
        &self,
        prepared: &Prepared,
        driver: Option<&mut dyn Driver>,
        mut state: LoopState,
        init_status: WaitStatus,
        measured: &mut Option<View>,
    ) -> Result<Outcome, SpawnError> {
        if let (Some(driver), Some((sock, broker))) = (driver, &self.broker) {
            let mut broker = broker.borrow_mut();
            broker.drain(sock.as_fd());
            driver.turn(Turn {
                broker: &mut broker,
                executing: state.executing,
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
        if state.report_open {
            let seen = state.records.len();
            state.records.extend(channel::read_records(&self.report)?);
            for record in &state.records[seen..] {
                note_record(prepared, record);
            }
        }
        let failed = state
            .records
            .iter()
            .any(|r| matches!(r, channel::Record::Failed { .. }));
        if !state.executing && !failed {
            // The exec and the end of the run were seen at once.
            step_note(prepared, format_args!("executed {}", self.program));
        }
        *measured = state.records.iter().find_map(|record| match record {
            Record::Measured(view) => Some(**view),
            _ => None,
        });
        let wall = self.started.elapsed();
        let channel::ExitMessage {
            exit: reported_exit,
            layer,
        } = channel::try_recv_exit(self.sync.as_fd())?;
        *self.layer.borrow_mut() = layer;
        if let Some(output) = &self.output {
            let mut output = output.borrow_mut();
            output.drain();
            if output.capped() {
                state.limits_hit.push(LimitHit::Output);
            }
        }
        let mut outcome = outcome(
            &self.program,
            state.records,
            reported_exit,
            init_status,
            wall,
        )?;
        if let Some(cgroup) = &self.cgroup {
            let stats = cgroup.stats();
            if stats.oom_kills > 0 {
                state.limits_hit.push(LimitHit::Memory);
            }
            if stats.pids_limit_hits > 0 {
                state.limits_hit.push(LimitHit::Pids);
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
        outcome.limits_hit = state.limits_hit;
        outcome.broker = self.broker.as_ref().map(|(_, b)| match b.try_borrow_mut() {
            Ok(mut broker) => broker.final_counts(),
            Err(_) => b.try_borrow().map(|b| b.counts.clone()).unwrap_or_default(),
        });
        outcome.connections = self
            .broker
            .as_ref()
            .map(|(_, b)| b.borrow().connections())
            .unwrap_or_default();
        Ok(outcome)
    }
}
