//! Starting a run: the steps from a prepared plan to a released init,
//! in the order the kernel needs them.

use std::os::fd::AsFd;
use std::time::Instant;

use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

use crate::spawn::prepare::{Handover, Prepared, StartInputs};
use crate::spawn::SpawnError;

use super::broker::{open_broker, BrokerSide};
use super::cgroup::setup_cgroup;
use super::cgroup::RUN_COUNTER;
use super::decide::decide_namespaces;
use super::decide::expected_confinement;
use super::decide::fall_back;
use super::janitor::spawn_janitor;
use super::janitor::RunEnd;
use super::launch::launch_init;
use super::launch::{Attempt, Launched};
use super::notes::step_note;
use super::outcome::children_cpu;
use super::running::Running;
use super::sweep::SweepPlan;
use super::sys;

/// Clone the sandbox and release it; the command runs while the caller goes on.
///
/// The signals init forwards stay blocked in the calling process until
/// [`Running::wait`] returns (they are read from a signalfd and forwarded),
/// so a SIGTERM to the supervisor reaches the sandboxed command.
pub fn start(prepared: &mut Prepared, inputs: StartInputs) -> Result<Running, SpawnError> {
    start_unexplained(prepared, inputs, &mut Kernel).map_err(SpawnError::explained)
}

/// The steps of a start whose order the kernel imposes (the cgroup and
/// the broker's socket before the clone, the clone only from a
/// single-threaded process): the seam a unit test replaces with a
/// recording double. [`Kernel`] makes them for real.
pub(super) trait StartCalls {
    /// Refuse unless this process may be copied (one thread).
    fn check_single_threaded(&mut self) -> Result<(), SpawnError>;
    /// Create the run's cgroup (see [`setup_cgroup`]).
    fn create_cgroup(
        &mut self,
        config: &crate::spawn::prepare::RunConfig,
        warnings: &mut Vec<String>,
    ) -> Result<
        (
            Option<crate::cgroup::RunCgroup>,
            super::cgroup::FallbackRlimits,
        ),
        SpawnError,
    >;
    /// Bind the broker's caller and start the net process (see [`open_broker`]).
    fn open_broker(
        &mut self,
        prepared: &mut Prepared,
        asker: Option<Box<dyn crate::broker::prompt::Asker>>,
        audit_file: Option<std::fs::File>,
        run_id: String,
        cgroup: Option<&crate::cgroup::RunCgroup>,
    ) -> Result<BrokerSide, SpawnError>;
    /// Clone init, write its id maps and release it (see [`launch_or_fall_back`]).
    fn launch(
        &mut self,
        prepared: &mut Prepared,
        handover: &mut Handover,
        cgroup: Option<&crate::cgroup::RunCgroup>,
        net_handover: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<Launched, SpawnError>;
}

/// The real steps.
pub(super) struct Kernel;

impl StartCalls for Kernel {
    fn check_single_threaded(&mut self) -> Result<(), SpawnError> {
        crate::spawn::check_single_threaded()
    }

    fn create_cgroup(
        &mut self,
        config: &crate::spawn::prepare::RunConfig,
        warnings: &mut Vec<String>,
    ) -> Result<
        (
            Option<crate::cgroup::RunCgroup>,
            super::cgroup::FallbackRlimits,
        ),
        SpawnError,
    > {
        setup_cgroup(config, warnings)
    }

    fn open_broker(
        &mut self,
        prepared: &mut Prepared,
        asker: Option<Box<dyn crate::broker::prompt::Asker>>,
        audit_file: Option<std::fs::File>,
        run_id: String,
        cgroup: Option<&crate::cgroup::RunCgroup>,
    ) -> Result<BrokerSide, SpawnError> {
        open_broker(prepared, asker, audit_file, run_id, cgroup)
    }

    fn launch(
        &mut self,
        prepared: &mut Prepared,
        handover: &mut Handover,
        cgroup: Option<&crate::cgroup::RunCgroup>,
        net_handover: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<Launched, SpawnError> {
        launch_or_fall_back(prepared, handover, cgroup, net_handover)
    }
}

pub(super) fn start_unexplained(
    prepared: &mut Prepared,
    inputs: StartInputs,
    calls: &mut dyn StartCalls,
) -> Result<Running, SpawnError> {
    calls.check_single_threaded()?;
    let host = crate::spawn::measure::read_own_view();
    decide_namespaces(prepared, host.capabilities[2])?;
    let (cgroup, fallback_rlimits) =
        calls.create_cgroup(&prepared.config, &mut prepared.started.warnings)?;
    prepared.started.fallback_rlimits = fallback_rlimits;
    match &cgroup {
        Some(cgroup) => step_note(
            prepared,
            format_args!("cgroup v{} created: {:?}", cgroup.version(), cgroup.paths()),
        ),
        None => step_note(prepared, format_args!("no cgroup for this run")),
    }
    prepared.started.confinement = expected_confinement(prepared.plan(), host);
    let sweep = SweepPlan::for_run(prepared);
    let janitor = match &cgroup {
        Some(cgroup) => match spawn_janitor(RunEnd::Cgroup(cgroup), sweep.as_ref()) {
            Ok(janitor) => Some(janitor),
            Err(err) => {
                cgroup.remove();
                return Err(err);
            }
        },
        None => None,
    };
    let planned_without = prepared.started.no_namespaces.is_some();
    match start_cloned(prepared, inputs, cgroup.as_ref(), calls) {
        Ok(mut running) => {
            running.cgroup = cgroup;
            running.janitor = janitor;
            running.sweep = sweep;
            if !planned_without && prepared.started.no_namespaces.is_some() {
                // The run fell back to no namespaces at clone: its sweep now
                // also restores and cleans up, and a janitor forked before
                // must know that too.
                running.sweep = SweepPlan::for_run(prepared);
                if let Some(old) = running.janitor.take() {
                    old.dismiss();
                    if let Some(cgroup) = &running.cgroup {
                        running.janitor = Some(spawn_janitor(
                            RunEnd::Cgroup(cgroup),
                            running.sweep.as_ref(),
                        )?);
                    }
                }
            }
            if running.janitor.is_none() && running.sweep.is_some() {
                let init = RunEnd::Init(running.pidfd.as_fd());
                // On failure, dropping `running` kills and sweeps the run.
                running.janitor = Some(spawn_janitor(init, running.sweep.as_ref())?);
            }
            Ok(running)
        }
        Err(err) => {
            let cgroup_removed = cgroup.is_none_or(|cgroup| cgroup.remove());
            if let Some(janitor) = janitor {
                janitor.release(cgroup_removed);
            }
            Err(err)
        }
    }
}

pub(super) fn start_cloned(
    prepared: &mut Prepared,
    inputs: StartInputs,
    cgroup: Option<&crate::cgroup::RunCgroup>,
    calls: &mut dyn StartCalls,
) -> Result<Running, SpawnError> {
    let rusage_before = children_cpu();
    let StartInputs {
        mut stdio,
        warm_commit,
        asker,
        audit_file,
    } = inputs;
    let ids = prepared.plan().ids;
    let output = crate::spawn::output::relay_stdio(
        &mut stdio,
        prepared.config.policy.limits.output,
        &ids,
        &mut prepared.started.warnings,
    )?;
    let (broker_end, payload_end) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(sys("socketpair(broker)"))?;
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        RUN_COUNTER.load(std::sync::atomic::Ordering::Relaxed)
    );
    let timeout = prepared.config.policy.limits.timeout;
    let BrokerSide {
        broker,
        net_handover,
        net_pid,
    } = calls.open_broker(prepared, asker, audit_file, run_id, cgroup)?;
    let broker = Some((broker_end, std::cell::RefCell::new(broker)));
    let (signals, old_mask) = block_forwarded_signals()?;
    let restore = |err: SpawnError| {
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old_mask), None);
        err
    };
    let started = Instant::now();
    crate::sys::proctitle::remember();
    // A learning run: a socket of its own for the listener, so that the
    // broker's stream and the sync channel keep their protocols.
    let (observer, observer_end) = match &prepared.config.supervision.learning {
        Some(learning) if prepared.plan().observer.is_some() => {
            // What the profile's filter answers is what every notified call
            // gets; without that program there is nothing to answer with.
            let profile = prepared
                .plan()
                .seccomp
                .as_ref()
                .and_then(|filter| filter.programs().first().cloned())
                .ok_or_else(|| {
                    SpawnError::Invalid("learning needs the profile's seccomp program".into())
                })?;
            let (mine, theirs) = socketpair(
                AddressFamily::Unix,
                SockType::SeqPacket,
                None,
                SockFlag::SOCK_CLOEXEC,
            )
            .map_err(sys("socketpair(observer)"))?;
            let observer = crate::learn::Observer::new(
                mine,
                &prepared.config.policy,
                &prepared.plan().project,
                learning.clone(),
                profile,
                crate::seccomp::MappedIds {
                    uid: prepared.plan().ids.inside_uid,
                    gid: prepared.plan().ids.inside_gid,
                },
            );
            (Some(observer), Some(theirs))
        }
        _ => (None, None),
    };
    let mut handover = Handover {
        stdio,
        ipc: Some(payload_end),
        warm_commit,
        fallback_rlimits: prepared.started.fallback_rlimits.clone(),
        confinement: prepared.started.confinement,
        observer: observer_end,
    };
    let net_handover = net_handover.as_ref().map(|fd| fd.as_fd());
    let launched = calls
        .launch(prepared, &mut handover, cgroup, net_handover)
        .map_err(restore)?;
    // The child holds its copies: the supervisor's close here.
    drop(handover);
    let init_pid = launched.init_pid;
    // The net process holds the run's connections (socket and pipe
    // buffers, lookup threads): it is counted against the run's limits.
    // On cgroup v1 it moved itself before it executed; else it is moved
    // only now, while init builds the root, since a move by pid waits for
    // an RCU grace period that must not delay init.
    if let (Some(cgroup), Some(pid)) = (cgroup, net_pid) {
        let moved = || match cgroup.holds(pid.as_raw()) {
            true => Ok(()),
            false => cgroup.add(pid.as_raw()),
        };
        if let Err(err) = moved() {
            prepared.started.warnings.push(format!(
                "the allowlist's proxy runs outside the run's cgroup, so its buffers are not counted against the run's limits: {err}"
            ));
        }
    }
    step_note(
        prepared,
        format_args!(
            "id maps written (uid {} inside is {} outside), {} idmapped tree(s); init released to build the root",
            prepared.plan().ids.inside_uid,
            prepared.plan().ids.host_uid,
            prepared.plan().idmapped.len()
        ),
    );
    Ok(Running {
        without_namespaces: !prepared.plan().namespaces,
        init_pid,
        pidfd: launched.pidfd,
        sync: launched.sync,
        report: launched.report,
        signals,
        old_mask,
        started,
        collected: false,
        cgroup: None,
        rusage_before,
        output,
        janitor: None,
        broker,
        broker_closed: std::cell::Cell::new(false),
        sweep: None,
        layer: Default::default(),
        program: prepared.plan().program.clone(),
        timeout,
        observer,
    })
}

/// Block the signals init forwards, and read them from a signalfd: blocked
/// before clone so that a signal arriving during setup waits until init
/// can forward it; init and the payload unblock them. Returns the mask to
/// restore.
pub(super) fn block_forwarded_signals() -> Result<(SignalFd, SigSet), SpawnError> {
    let mut forwarded = SigSet::empty();
    for signal in crate::sys::signal::FORWARDED {
        forwarded.add(signal);
    }
    let mut old_mask = SigSet::empty();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&forwarded), Some(&mut old_mask))
        .map_err(sys("sigprocmask"))?;
    let restore = |err: SpawnError| {
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old_mask), None);
        err
    };
    let signals = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys("signalfd"))
        .map_err(restore)?;
    Ok((signals, old_mask))
}

/// Launch init on the decided plan; where the namespaces are refused at
/// clone or in init's first steps (a best-effort profile), once more on
/// the plan without them.
pub(super) fn launch_or_fall_back(
    prepared: &mut Prepared,
    handover: &mut Handover,
    cgroup: Option<&crate::cgroup::RunCgroup>,
    net_handover: Option<std::os::fd::BorrowedFd<'_>>,
) -> Result<Launched, SpawnError> {
    let launched = match launch_init(prepared, handover, cgroup, net_handover)? {
        Attempt::Started(launched) => launched,
        // The same fallback whether clone itself or the set-up inside the
        // new namespaces was refused: the failed init is reaped, its
        // channels closed, and nothing of it is in the cgroup any more.
        Attempt::NamespacesRefused(reason) => {
            fall_back(prepared, reason)?;
            // The payload is now checked against the run it will really get.
            let host = (prepared.started.confinement.host)
                .unwrap_or_else(crate::spawn::measure::read_own_view);
            prepared.started.confinement = expected_confinement(prepared.plan(), host);
            handover.confinement = prepared.started.confinement;
            match launch_init(prepared, handover, cgroup, net_handover)? {
                Attempt::Started(launched) => launched,
                Attempt::NamespacesRefused(reason) => {
                    return Err(SpawnError::Invalid(format!(
                        "a run without namespaces was refused as if it had them: {reason}"
                    )))
                }
            }
        }
    };
    Ok(launched)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recording double: each step is noted in order; the broker is the
    /// real one (its socket and bound caller), and the launch stops the
    /// start right after it is recorded, since nothing is cloned.
    #[derive(Default)]
    struct Recorder {
        calls: Vec<&'static str>,
    }

    impl StartCalls for Recorder {
        fn check_single_threaded(&mut self) -> Result<(), SpawnError> {
            self.calls.push("check single thread");
            Ok(())
        }

        fn create_cgroup(
            &mut self,
            _config: &crate::spawn::prepare::RunConfig,
            _warnings: &mut Vec<String>,
        ) -> Result<
            (
                Option<crate::cgroup::RunCgroup>,
                super::super::cgroup::FallbackRlimits,
            ),
            SpawnError,
        > {
            self.calls.push("create cgroup");
            Ok((None, Vec::new()))
        }

        fn open_broker(
            &mut self,
            prepared: &mut Prepared,
            asker: Option<Box<dyn crate::broker::prompt::Asker>>,
            audit_file: Option<std::fs::File>,
            run_id: String,
            cgroup: Option<&crate::cgroup::RunCgroup>,
        ) -> Result<BrokerSide, SpawnError> {
            self.calls.push("bind broker");
            open_broker(prepared, asker, audit_file, run_id, cgroup)
        }

        fn launch(
            &mut self,
            _prepared: &mut Prepared,
            handover: &mut Handover,
            _cgroup: Option<&crate::cgroup::RunCgroup>,
            _net_handover: Option<std::os::fd::BorrowedFd<'_>>,
        ) -> Result<Launched, SpawnError> {
            // The payload's end of the broker's socket is handed over at
            // clone: it exists by now.
            assert!(
                handover.ipc.is_some(),
                "the broker's socket exists at clone"
            );
            self.calls.push("clone init");
            Err(SpawnError::Invalid("the double clones nothing".into()))
        }
    }

    #[test]
    fn the_cgroup_and_the_broker_come_before_the_clone() {
        let policy = crate::profile::load("strict").expect("the strict profile");
        let dir = tempfile::tempdir().expect("a project directory");
        let project = std::fs::canonicalize(dir.path()).expect("its real path");
        let spec = crate::spawn::SpawnSpec {
            program: "true".into(),
            args: vec![],
            project,
            project_explicit: true,
            cwd: None,
            env: vec![],
            dry_run: false,
            read_only_extra: vec![],
            review_stack: None,
        };
        let mut prepared =
            Prepared::new(&policy, spec, Default::default()).expect("a prepared run");
        let mut recorder = Recorder::default();
        let started = start_unexplained(&mut prepared, StartInputs::default(), &mut recorder);
        assert!(
            matches!(started, Err(SpawnError::Invalid(ref why)) if why.contains("clones nothing")),
            "{started:?}"
        );
        assert_eq!(
            recorder.calls,
            [
                "check single thread",
                "create cgroup",
                "bind broker",
                "clone init"
            ]
        );
    }
}
