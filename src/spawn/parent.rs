//! P0: the supervisor's side of a run. Creates the channels, clones init into
//! the new namespaces, writes the id maps, releases init, forwards signals,
//! and collects the records and the exit status.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::channel::{self, PayloadExit, Record};
use super::init::InitFds;
use super::measure::View;
use super::prepare::{ChildPlan, Handover, Prepared, RunConfig, StartInputs};
use super::{SpawnError, Step};
use crate::sys::mount_api::{self, MountAttrs};

/// What the supervisor learned from a run that started.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How the payload ended.
    pub exit: PayloadExit,
    /// Landlock (abi, status) as the payload reported it.
    pub landlock: Option<(u32, u8)>,
    /// The payload's own view of its confinement, read just before exec.
    pub measured: Option<View>,
    /// Best-effort steps that were skipped, with their errno.
    pub skipped: Vec<(Step, i32)>,
    /// Time from clone to the end.
    pub wall: Duration,
    /// Limits that ended or cut the run.
    pub limits_hit: Vec<LimitHit>,
    /// The run's cgroup, when one was used.
    pub cgroup: Option<CgroupUse>,
    /// User and system CPU time of every process of the run.
    pub cpu_user: Duration,
    /// System CPU time.
    pub cpu_system: Duration,
    /// What the broker decided.
    pub broker: Option<crate::broker::server::BrokerCounts>,
    /// Proxied connections by host.
    pub connections: std::collections::BTreeMap<String, crate::broker::network::HostCounts>,
    /// Protected entries the run created, moved aside after it ended.
    pub sweep: crate::project::quarantine::Sweep,
}

/// A limit the run ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitHit {
    /// The wall-clock timeout expired: the run got SIGTERM, then SIGKILL.
    Timeout,
    /// The OOM killer killed a process at the memory limit.
    Memory,
    /// A fork failed at the pids limit.
    Pids,
    /// Output past the cap was dropped.
    Output,
}

/// The run's cgroup as it was used.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CgroupUse {
    /// 1 or 2.
    pub version: u8,
    /// Controllers (v1) or `unified` (v2).
    pub controllers: Vec<String>,
    /// The run's cgroup directories (removed when the run ends).
    pub paths: Vec<std::path::PathBuf>,
    /// What the cgroup counted.
    pub stats: crate::cgroup::CgroupStats,
}

/// How long a timed-out run has between SIGTERM and SIGKILL, to flush
/// output and remove temporary files.
pub const TIMEOUT_GRACE: Duration = Duration::from_secs(2);

fn sys(op: impl Into<String>) -> impl FnOnce(Errno) -> SpawnError {
    let op = op.into();
    move |source| SpawnError::Sys { op, source }
}

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

/// A started run, until [`Running::wait`] collects it.
#[derive(Debug)]
pub struct Running {
    /// No pid namespace: killing init would orphan the rest, so the run
    /// is ended by asking init (see [`Running::end_run`]).
    without_namespaces: bool,
    init_pid: Pid,
    pidfd: OwnedFd,
    sync: OwnedFd,
    report: OwnedFd,
    signals: SignalFd,
    old_mask: SigSet,
    started: Instant,
    collected: bool,
    cgroup: Option<crate::cgroup::RunCgroup>,
    rusage_before: (Duration, Duration),
    output: Option<std::cell::RefCell<super::output::OutputRelay>>,
    janitor: Option<Janitor>,
    broker: Option<(OwnedFd, std::cell::RefCell<crate::broker::server::Broker>)>,
    broker_closed: std::cell::Cell<bool>,
    sweep: Option<SweepPlan>,
    /// The program the run executes, as an exec failure names it (a warm
    /// run's changes when it gets its command).
    program: String,
    /// The wall-clock limit, from the clone (a warm run's: from its commit).
    timeout: Option<Duration>,
}

/// What the sweep after a run needs: it runs once every process of the run
/// is gone, from [`Running::wait`], from dropping a [`Running`], or from the
/// janitor when the supervisor itself was killed.
#[derive(Debug, Clone)]
struct SweepPlan {
    root: std::path::PathBuf,
    rules: crate::project::Rules,
    before: std::collections::HashMap<std::path::PathBuf, crate::project::scan::Identity>,
    run: String,
    /// Without namespaces: the protected entries to put back.
    restore: Option<std::sync::Arc<crate::project::quarantine::Snapshot>>,
    /// Without namespaces: the private temporary directory to remove.
    private_tmp: Option<PathBuf>,
}

impl SweepPlan {
    fn for_run(prepared: &Prepared) -> Option<SweepPlan> {
        let without = prepared.started.no_namespaces.as_ref();
        let scan = prepared.config.scan.as_ref();
        let writable = prepared.config.policy.filesystem.project
            == crate::profile::policy::ProjectAccess::ReadWrite;
        if without.is_none() && !(writable && scan.is_some()) {
            return None;
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        Some(SweepPlan {
            root: prepared.planned.project.clone(),
            rules: prepared.config.project_rules.clone(),
            before: scan
                .filter(|_| writable)
                .map(|s| s.protected_before.clone())
                .unwrap_or_default(),
            run: format!("{:x}-{}", stamp, std::process::id()),
            restore: without.and_then(|w| w.snapshot.clone()),
            private_tmp: without.map(|w| w.private_tmp.clone()),
        })
    }

    fn run(&self) -> crate::project::quarantine::Sweep {
        let writable = !self.before.is_empty() || self.restore.is_some();
        let mut sweep = if !writable && self.private_tmp.is_some() {
            crate::project::quarantine::Sweep::default()
        } else {
            match crate::project::quarantine::sweep(
                &self.root,
                &self.rules,
                &self.before,
                &self.run,
            ) {
                Ok(sweep) => sweep,
                Err(err) => crate::project::quarantine::Sweep {
                    failed: vec![(std::path::PathBuf::new(), err.to_string())],
                    ..Default::default()
                },
            }
        };
        // After the sweep, which moves aside what is no longer the object
        // the scan saw: the snapshot then fills those places again, and
        // also catches what was changed in place.
        if let Some(snapshot) = &self.restore {
            crate::project::quarantine::restore(&self.root, snapshot, &self.run, &mut sweep);
        }
        if let Some(dir) = &self.private_tmp {
            let _ = std::fs::remove_dir_all(dir);
        }
        sweep
    }
}

/// The tree the payload can write (the project, a profile write path) that
/// holds `path`, judged by the real path of its nearest existing ancestor.
fn writable_tree_holding(
    config: &RunConfig,
    project: &std::path::Path,
    path: &std::path::Path,
) -> Option<std::path::PathBuf> {
    use crate::profile::policy::ProjectAccess;
    let real = path
        .ancestors()
        .find_map(|a| std::fs::canonicalize(a).ok())?;
    let policy = &config.policy;
    let project_writable = policy.filesystem.project == ProjectAccess::ReadWrite;
    std::iter::once(project)
        .filter(|_| project_writable)
        .chain(policy.filesystem.write.iter().map(PathBuf::as_path))
        .find(|tree| std::fs::canonicalize(tree).is_ok_and(|tree| real.starts_with(tree)))
        .map(std::path::Path::to_path_buf)
}

fn children_cpu() -> (Duration, Duration) {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(usage) => {
            let d = |t: nix::sys::time::TimeVal| {
                Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
            };
            (d(usage.user_time()), d(usage.system_time()))
        }
        Err(_) => (Duration::ZERO, Duration::ZERO),
    }
}

/// Removes the run's cgroup if the supervisor dies before it can: a process
/// forked before clone (so it is not in the run's cgroup), waiting on a pipe
/// only the supervisor can write. A byte means the supervisor cleaned up;
/// end-of-file means it died, and the janitor kills what is left of the run
/// and removes the directories.
#[derive(Debug)]
struct Janitor {
    pid: Pid,
    done: OwnedFd,
}

/// How long a janitor keeps trying to remove a dead supervisor's cgroup.
const JANITOR_PATIENCE: Duration = Duration::from_secs(10);

/// How a janitor tells that a dead supervisor's run is gone.
#[derive(Clone, Copy)]
enum RunEnd<'a> {
    /// Its cgroup can be removed (the janitor removes it).
    Cgroup(&'a crate::cgroup::RunCgroup),
    /// Its init has exited: a pid namespace's init exits only after every
    /// other process in it. For runs without a cgroup, whose janitor is
    /// forked after the clone to hold this descriptor.
    Init(BorrowedFd<'a>),
}

fn spawn_janitor(run_end: RunEnd<'_>, sweep: Option<&SweepPlan>) -> Result<Janitor, SpawnError> {
    let (wait_end, done) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(sys("pipe2(janitor)"))?;
    let done_raw = done.as_raw_fd();
    let (pid, _pidfd) =
        crate::sys::clone::clone_into_namespaces(nix::sched::CloneFlags::empty(), |cloned| {
            let _ = nix::unistd::close(done_raw);
            // Out of the terminal's process group (a ^C meant for the run must
            // not kill the janitor first), and holding nothing of the
            // supervisor's but its own pipe: a copy of any output pipe's write
            // end would keep its reader from ever seeing end-of-file.
            let _ = nix::unistd::setsid();
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
            let Ok(wait_end) = cloned.place(wait_end.as_fd(), 3) else {
                return 1;
            };
            let init = match run_end {
                RunEnd::Init(pidfd) => match cloned.place(pidfd, 4) {
                    Ok(init) => Some(init),
                    Err(_) => return 1,
                },
                RunEnd::Cgroup(_) => None,
            };
            if cloned.close_from(5).is_err() {
                return 1;
            }
            if let Ok(null) =
                nix::fcntl::open(c"/dev/null", OFlag::O_RDWR, nix::sys::stat::Mode::empty())
            {
                for fd in 0..3 {
                    let _ = crate::sys::fd::redirect_standard_stream(null.as_fd(), fd);
                }
            }
            let mut byte = [0u8; 1];
            loop {
                match nix::unistd::read(wait_end, &mut byte) {
                    Ok(1) => return 0,
                    Err(Errno::EINTR) => continue,
                    _ => break,
                }
            }
            match run_end {
                RunEnd::Cgroup(cgroup) => {
                    let deadline = Instant::now() + JANITOR_PATIENCE;
                    while !cgroup.remove() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                RunEnd::Init(_) => {
                    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
                    let Some(init) = init else { return 1 };
                    let mut fds = [PollFd::new(init, PollFlags::POLLIN)];
                    let patience =
                        PollTimeout::try_from(JANITOR_PATIENCE).unwrap_or(PollTimeout::MAX);
                    let _ = poll(&mut fds, patience);
                }
            }
            // The run is gone: what it planted is swept even though nobody is
            // left to report it.
            if let Some(sweep) = sweep {
                sweep.run();
            }
            0
        })
        .map_err(sys("fork(janitor)"))?;
    drop(wait_end);
    Ok(Janitor { pid, done })
}

impl Janitor {
    /// The supervisor removed the cgroup itself: release and reap the janitor.
    fn dismiss(self) {
        let _ = nix::unistd::write(self.done.as_fd(), &[1]);
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

/// The syscall filter the run's helpers outside the sandbox (its net
/// process) run under: the run's own, unless the profile turned it off.
fn syscalls_for_helpers(
    policy: &crate::profile::policy::Policy,
) -> Option<&crate::seccomp::policy::SyscallPolicy> {
    (policy.enforce.seccomp != crate::profile::policy::Enforcement::Off).then_some(&policy.syscalls)
}

/// Distinct names for the runs of one supervisor process.
static RUN_COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The rlimits that stand in for a cgroup that could not be had; the
/// payload applies them after the plan's own.
type FallbackRlimits = Vec<(nix::sys::resource::Resource, u64)>;

/// Create the run's cgroup before clone. Without one, a best-effort layer
/// falls back to rlimits, which the child gets with its handover.
fn setup_cgroup(
    config: &RunConfig,
    warnings: &mut Vec<String>,
) -> Result<(Option<crate::cgroup::RunCgroup>, FallbackRlimits), SpawnError> {
    use crate::profile::policy::Enforcement;
    use nix::sys::resource::Resource;
    let limits = config.cgroup_limits();
    let enforcement = config.policy.enforce.cgroups;
    let cgroup_parent = config.supervision.cgroup_parent.as_deref();
    if !limits.any() {
        return Ok((None, Vec::new()));
    }
    if enforcement == Enforcement::Off {
        warnings.push(
            "cgroups are off in this profile: memory, pids and cpu limits are not applied".into(),
        );
        return Ok((None, Vec::new()));
    }
    let info = crate::cgroup::detect();
    let name = format!(
        "sandbox-{}-{}",
        std::process::id(),
        RUN_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    match crate::cgroup::RunCgroup::create(&info, cgroup_parent, &name, &limits) {
        Ok(cgroup) => Ok((Some(cgroup), Vec::new())),
        Err(err) if enforcement == Enforcement::Required => Err(SpawnError::LayerUnavailable {
            layer: "cgroups",
            reason: crate::cgroup::refusal(&err, crate::cgroup::FixContext::current()),
        }),
        Err(err) => {
            let mut rlimits = Vec::new();
            let mut applied = Vec::new();
            if let Some(memory) = limits.memory {
                // RLIMIT_DATA, not RLIMIT_AS: since Linux 4.7 it counts private
                // writable mappings, so the large PROT_NONE reservations of V8
                // or a JVM do not count until committed. RLIMIT_AS at the
                // memory limit made Node abort at start-up.
                rlimits.push((Resource::RLIMIT_DATA, memory));
                applied.push("memory as RLIMIT_DATA (per process, committed private memory)");
            }
            if let Some(pids) = limits.pids {
                rlimits.push((Resource::RLIMIT_NPROC, pids));
                applied.push("pids as RLIMIT_NPROC");
            }
            let cpu = if limits.cpu.is_some() {
                "; the cpu share is not limited"
            } else {
                ""
            };
            warnings.push(crate::cgroup::notice::fallback_warning(
                format_args!(
                    "{err}{}",
                    crate::cgroup::scope_note(&info, &limits, cgroup_parent.is_some())
                ),
                &format!("{}{cpu}", applied.join(", ")),
            ));
            Ok((None, rlimits))
        }
    }
}

/// Run a prepared sandbox to completion.
pub fn run(prepared: &mut Prepared, inputs: StartInputs) -> Result<Outcome, SpawnError> {
    run_measured(prepared, inputs).0
}

/// [`run`], with the payload's own view of its confinement when it got as
/// far as reading it (also when the run failed afterwards, at exec).
pub fn run_measured(
    prepared: &mut Prepared,
    inputs: StartInputs,
) -> (Result<Outcome, SpawnError>, Option<View>) {
    match start(prepared, inputs) {
        Ok(running) => running.wait_measured(prepared, None),
        Err(err) => (Err(err), None),
    }
}

/// What the payload must find before exec: the namespaces it is cloned
/// into differ from the supervisor's, and the filters it installs sit on
/// top of the ones the supervisor inherited.
fn expected_confinement(plan: &ChildPlan) -> super::measure::Expected {
    use nix::sched::CloneFlags as F;
    let flags = plan.clone_flags;
    let host = super::measure::read_own_view();
    // Without a user namespace of its own the payload can clear its bounding
    // set only where the supervisor holds CAP_SETPCAP (root in a container
    // often does not); with no_new_privs an exec cannot use what remains.
    const CAP_SETPCAP: u64 = 1 << 8;
    let bounding_set_cleared =
        plan.namespaces || host.capabilities[2].is_some_and(|eff| eff & CAP_SETPCAP != 0);
    super::measure::Expected {
        host: Some(host),
        bounding_set_cleared,
        new_namespaces: [
            flags.contains(F::CLONE_NEWUSER),
            flags.contains(F::CLONE_NEWNS),
            flags.contains(F::CLONE_NEWPID),
            flags.contains(F::CLONE_NEWNET),
            flags.contains(F::CLONE_NEWIPC),
            flags.contains(F::CLONE_NEWUTS),
            // Init unshares the cgroup namespace itself, inside the new
            // user namespace it owns.
            flags.contains(F::CLONE_NEWUSER),
        ],
        seccomp_programs: plan
            .seccomp
            .as_ref()
            .map_or(0, |filter| filter.programs().len() as u64),
    }
}

/// `sandbox run -v`: one setup step on stderr, as it happens.
fn step_note(prepared: &Prepared, what: std::fmt::Arguments<'_>) {
    if prepared.config.supervision.verbose {
        eprintln!("sandbox: setup: {what}");
    }
}

/// Clone the sandbox and release it; the command runs while the caller goes on.
///
/// The signals init forwards stay blocked in the calling process until
/// [`Running::wait`] returns (they are read from a signalfd and forwarded),
/// so a SIGTERM to the supervisor reaches the sandboxed command.
pub fn start(prepared: &mut Prepared, inputs: StartInputs) -> Result<Running, SpawnError> {
    start_unexplained(prepared, inputs).map_err(SpawnError::explained)
}

/// The run goes on without namespaces, on a plan of its own (or is refused).
fn fall_back(prepared: &mut Prepared, reason: String) -> Result<(), SpawnError> {
    let without = super::no_namespaces::plan_without(prepared, reason)?;
    prepared.started.warnings.push(without.warning());
    prepared.started.no_namespaces = Some(without);
    Ok(())
}

/// Where the environment already says that a new user namespace would
/// hold no capabilities (Ubuntu's AppArmor restriction, see
/// [`crate::environment::Environment::namespaces_withheld`]), none is
/// attempted: a best-effort profile plans its run without namespaces, a
/// required one is refused naming the cause and the fixes.
fn decide_namespaces_up_front(prepared: &mut Prepared) -> Result<(), SpawnError> {
    use crate::profile::policy::Enforcement;
    if prepared.started.no_namespaces.is_some() || !prepared.planned.namespaces {
        return Ok(());
    }
    let Some(why) = crate::environment::namespaces_withheld_here() else {
        return Ok(());
    };
    step_note(
        prepared,
        format_args!("no user namespace attempted: {}", why.cause),
    );
    match prepared.config.policy.enforce.userns {
        Enforcement::Required => Err(SpawnError::Explained {
            error: Box::new(SpawnError::LayerUnavailable {
                layer: "userns",
                reason: "a new user namespace would get no capabilities here, so none was created"
                    .into(),
            }),
            cause: why.cause,
            fix: why.fix,
        }),
        Enforcement::BestEffort | Enforcement::Off => fall_back(prepared, why.cause),
    }
}

fn start_unexplained(prepared: &mut Prepared, inputs: StartInputs) -> Result<Running, SpawnError> {
    super::check_single_threaded()?;
    if prepared.config.policy.enforce.userns == crate::profile::policy::Enforcement::Off
        && prepared.started.no_namespaces.is_none()
    {
        fall_back(prepared, "the profile sets enforce.userns = \"off\"".into())?;
    }
    decide_namespaces_up_front(prepared)?;
    let (cgroup, fallback_rlimits) =
        setup_cgroup(&prepared.config, &mut prepared.started.warnings)?;
    prepared.started.fallback_rlimits = fallback_rlimits;
    match &cgroup {
        Some(cgroup) => step_note(
            prepared,
            format_args!("cgroup v{} created: {:?}", cgroup.version(), cgroup.paths()),
        ),
        None => step_note(prepared, format_args!("no cgroup for this run")),
    }
    prepared.started.confinement = expected_confinement(prepared.plan());
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
    match start_cloned(prepared, inputs, cgroup.as_ref()) {
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
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            if let Some(janitor) = janitor {
                janitor.dismiss();
            }
            Err(err)
        }
    }
}

fn start_cloned(
    prepared: &mut Prepared,
    inputs: StartInputs,
    cgroup: Option<&crate::cgroup::RunCgroup>,
) -> Result<Running, SpawnError> {
    let rusage_before = children_cpu();
    let StartInputs {
        mut stdio,
        warm_commit,
        asker,
        audit_file,
    } = inputs;
    let ids = prepared.plan().ids;
    let output = super::output::relay_stdio(
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
    let config = &prepared.config;
    let project = &prepared.planned.project;
    let warnings = &mut prepared.started.warnings;
    let audit = match (audit_file, &config.supervision.audit) {
        (Some(file), _) => Some(file),
        (None, Some(path)) => Some(crate::safe_file::open_audit(
            path,
            project,
            &config.policy.filesystem.write,
            warnings,
        )?),
        (None, None) => None,
    };
    let broker = crate::broker::server::Broker::new(
        config.policy.broker.clone(),
        project,
        &config.policy.filesystem.hide,
        config.project_rules.clone(),
        audit,
        run_id,
    )
    .map_err(|source| SpawnError::Path {
        what: "opening the project root for the broker",
        path: project.clone(),
        source,
    })?;
    let mut broker = broker;
    if prepared.planned.ids.root_mode {
        broker
            .write_as_project_owner()
            .map_err(|source| SpawnError::Path {
                what: "reading the owner of the project root for the broker",
                path: project.clone(),
                source,
            })?;
    }
    match &config.supervision.skill {
        Some(skill) => {
            let program = crate::broker::identity::Program::Skill {
                dir: skill.dir.clone(),
            };
            broker.set_caller(format!("skill:{}", skill.name), program);
            broker.restrict_to_declared(skill.permissions.clone());
            broker.show_logs(format!("skill {}", skill.name));
        }
        None => {
            // The plan so far: a profile without namespaces has its own.
            let plan = match &prepared.started.no_namespaces {
                Some(without) => &without.plan,
                None => &prepared.planned,
            };
            set_command_caller(&mut broker, plan.command(), &plan.cwd)
        }
    }
    broker.use_secrets(config.supervision.secrets.clone());
    // The allowlist's proxy: init hands its listening socket to the net
    // process over `handover`. Without namespaces there is no sandbox
    // loopback to listen on; net.http still works, through a net process
    // started when first needed.
    let proxied = config.policy.network.mode == crate::profile::policy::NetworkMode::Allowlist
        && prepared.started.no_namespaces.is_none();
    let (net_process, handover) = if proxied {
        let (send, receive) =
            crate::broker::network::listener_handover().map_err(sys("socketpair(proxy)"))?;
        let network = &config.policy.network;
        let process = crate::net::process::start(
            &network.allow,
            &network.resolve,
            syscalls_for_helpers(&config.policy),
            Some(receive),
        )?;
        (Some(process), Some(send))
    } else {
        (None, None)
    };
    let net_pid = net_process.as_ref().map(|process| process.pid);
    let mut network =
        crate::broker::network::Network::new(config.policy.network.clone(), net_process);
    network.confine_to(syscalls_for_helpers(&config.policy).cloned());
    broker.use_network(network);
    if let Some(runner) = &config.supervision.nested {
        broker.use_nested_runner(runner.clone());
    }
    // Far above any real client, low enough that a flooding sandbox cannot
    // keep the supervisor's core busy for free.
    broker.set_rate_limit(
        crate::broker::server::RATE_LIMIT.0,
        crate::broker::server::RATE_LIMIT.1,
    );
    if let Some(scan) = &config.scan {
        let paths = |found: &[crate::project::scan::Found]| -> Vec<std::path::PathBuf> {
            found.iter().map(|f| f.path.clone()).collect()
        };
        broker.cover(&paths(&scan.secrets), &paths(&scan.protected));
    }
    let store = match &config.supervision.grant_store {
        crate::broker::grants::StoreChoice::Default => Some(crate::broker::grants::default_path()),
        crate::broker::grants::StoreChoice::Without => None,
        crate::broker::grants::StoreChoice::At(path) => Some(path.clone()),
    };
    match store.as_ref().map(|store| (store, writable_tree_holding(config, project, store))) {
        None => {}
        // The payload could plant grants there for a later run.
        Some((store, Some(tree))) => warnings.push(format!(
            "stored grants are not used: the grant store {} is inside {}, which the sandboxed command can write; set SANDBOX_STATE_DIR or XDG_STATE_HOME to a directory outside it",
            store.display(),
            tree.display()
        )),
        Some((store, None)) => match crate::broker::grants::GrantStore::load(store) {
            Ok(store) => broker.use_grants(store),
            Err(err) => warnings.push(format!("stored grants are not used: {err}")),
        },
    }
    if let Some(asker) = asker {
        broker.use_asker(asker);
    } else if config.supervision.interactive {
        if let Some(prompter) = crate::broker::prompt::Prompter::open() {
            broker.use_prompter(prompter);
        }
    }
    // Before the clone: what the payload runs is hashed before it exists.
    broker.bind_caller();
    let timeout = config.policy.limits.timeout;
    broker.set_deadline(timeout.map(|t| Instant::now() + t));
    let broker = Some((broker_end, std::cell::RefCell::new(broker)));

    // Blocked before clone so that a signal arriving during setup waits
    // until init can forward it; init and the payload unblock them.
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
    let started = Instant::now();
    let net_handover = handover;
    crate::sys::proctitle::remember();
    let userns = prepared.config.policy.enforce.userns;
    if prepared.started.no_namespaces.is_none()
        && prepared
            .planned
            .clone_flags
            .contains(nix::sched::CloneFlags::CLONE_NEWPID)
        && crate::environment::proc_is_masked()
    {
        // Known before clone, so a best-effort profile runs without
        // namespaces instead of failing at init's /proc mount.
        if userns == crate::profile::policy::Enforcement::BestEffort {
            fall_back(
                prepared,
                "/proc here has paths mounted over it (a container's masked paths), and the kernel refuses a fresh /proc for a new pid namespace then".into(),
            )
            .map_err(restore)?;
            prepared.started.confinement = expected_confinement(prepared.plan());
        } else {
            return Err(restore(SpawnError::Setup {
                step: Step::MountProc,
                errno: Errno::EPERM as i32,
                detail: "/proc".into(),
            }));
        }
    }
    if prepared.started.no_namespaces.is_none()
        && prepared
            .planned
            .clone_flags
            .contains(nix::sched::CloneFlags::CLONE_NEWUSER)
        && !prepared.planned.ids.root_mode
        && prepared.planned.ids.host_uid == 0
        && userns == crate::profile::policy::Enforcement::BestEffort
        && !super::ids::may_map_root(supervisor_effective_capabilities(prepared))
    {
        // No user namespace can be had (see CANNOT_MAP_ROOT): known before
        // clone, so a best-effort profile runs without one. A required one
        // goes on to clone, where an outer sandbox's refusal is the more
        // precise message, else the id map names this.
        fall_back(prepared, CANNOT_MAP_ROOT.into()).map_err(restore)?;
        prepared.started.confinement = expected_confinement(prepared.plan());
    }
    let mut handover = Handover {
        stdio,
        ipc: Some(payload_end),
        warm_commit,
        fallback_rlimits: prepared.started.fallback_rlimits.clone(),
        confinement: prepared.started.confinement,
    };
    let net_handover = net_handover.as_ref().map(|fd| fd.as_fd());
    let launched = match launch_init(prepared, &handover, cgroup, net_handover).map_err(restore)? {
        Attempt::Started(launched) => launched,
        // The same fallback whether clone itself or the set-up inside the
        // new namespaces was refused: the failed init is reaped, its
        // channels closed, and nothing of it is in the cgroup any more.
        Attempt::NamespacesRefused(reason) => {
            fall_back(prepared, reason).map_err(restore)?;
            // The payload is now checked against the run it will really get.
            prepared.started.confinement = expected_confinement(prepared.plan());
            handover.confinement = prepared.started.confinement;
            match launch_init(prepared, &handover, cgroup, net_handover).map_err(restore)? {
                Attempt::Started(launched) => launched,
                Attempt::NamespacesRefused(reason) => {
                    return Err(restore(SpawnError::Invalid(format!(
                        "a run without namespaces was refused as if it had them: {reason}"
                    ))))
                }
            }
        }
    };
    // The child holds its copies: the supervisor's close here.
    drop(handover);
    let init_pid = launched.init_pid;
    // The net process holds the run's connections (socket and pipe
    // buffers, lookup threads): it is counted against the run's limits.
    // Moved only now, while init builds the root: on cgroup v1 a move
    // waits for an RCU grace period (1-10 ms) that must not delay init.
    if let (Some(cgroup), Some(pid)) = (cgroup, net_pid) {
        if let Err(err) = cgroup.add(pid.as_raw()) {
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
        program: prepared.plan().program.clone(),
        timeout,
    })
}

/// An init that was cloned, given its id maps and released.
struct Launched {
    init_pid: Pid,
    pidfd: OwnedFd,
    /// The supervisor's end of the sync socket.
    sync: OwnedFd,
    /// The read end of the report pipe.
    report: OwnedFd,
}

impl Launched {
    /// Kill init (it may have exited already) and reap it.
    fn reap(&self) {
        let _ = kill(self.init_pid, Signal::SIGKILL);
        let _ = waitid(Id::PIDFd(self.pidfd.as_fd()), WaitPidFlag::WEXITED);
    }
}

/// How one attempt to start the run's init ended, when not in an error.
enum Attempt {
    Started(Launched),
    /// A best-effort profile's namespaces cannot be had here, the reason
    /// says why: the run falls back to no namespaces. Nothing of the
    /// attempt is left (its init is reaped).
    NamespacesRefused(String),
}

/// Clone init on `prepared`'s current plan, write its id maps and release
/// it. Where the profile's user namespace is best-effort, a refusal that
/// means "no usable namespaces here" is returned as
/// [`Attempt::NamespacesRefused`] rather than as an error: at clone, at the
/// id maps, or at init's first mounts and pivot_root, for which the
/// supervisor waits before the run goes on (a few milliseconds).
fn launch_init(
    prepared: &Prepared,
    handover: &Handover,
    cgroup: Option<&crate::cgroup::RunCgroup>,
    net_handover: Option<BorrowedFd<'_>>,
) -> Result<Attempt, SpawnError> {
    let may_fall_back = prepared.plan().namespaces
        && prepared.config.policy.enforce.userns == crate::profile::policy::Enforcement::BestEffort;
    let (sync_parent, sync_child) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(sys("socketpair(sync)"))?;
    let (report_read, report_write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(sys("pipe2(report)"))?;
    let fds = InitFds {
        sync: sync_child.as_fd(),
        report: report_write.as_fd(),
        supervisor_ends: [sync_parent.as_raw_fd(), report_read.as_raw_fd()],
        await_cgroup: cgroup.is_some(),
        net_handover,
    };
    let plan = prepared.plan();
    // cgroup v2: init is created in the run's cgroup and never moved.
    let cgroup_dir = cgroup.and_then(crate::cgroup::RunCgroup::clone_target);
    let mut created_in_cgroup = false;
    let mut cloned = match &cgroup_dir {
        Some(dir) => {
            let in_cgroup = InitFds {
                await_cgroup: false,
                ..fds
            };
            crate::sys::clone::clone_into_cgroup(plan.clone_flags, dir.as_fd(), |init| {
                super::init::main(plan, handover, &in_cgroup, init)
            })
        }
        None => Err(Errno::ENOSYS),
    };
    match &cloned {
        Ok(_) => created_in_cgroup = true,
        // Without clone3 (a kernel before 5.7, a container's seccomp
        // profile) or when it refuses: the classic clone, then the move. A
        // refusal of the namespaces themselves comes again from it.
        Err(_) => {
            cloned = crate::sys::clone::clone_into_namespaces(plan.clone_flags, |init| {
                super::init::main(plan, handover, &fds, init)
            })
        }
    }
    let (init_pid, pidfd) = match cloned {
        Ok(pair) => pair,
        Err(errno) if may_fall_back && super::no_namespaces::means_unavailable(errno) => {
            let why = crate::probe::userns_unavailable_reason()
                .map(|r| format!(": {r}"))
                .unwrap_or_else(|| {
                    ": a seccomp filter or security module refuses it (a container engine's default profile, a Kubernetes pod, or another sandbox)".into()
                });
            return Ok(Attempt::NamespacesRefused(format!(
                "creating a user namespace failed with {errno}{why}"
            )));
        }
        // The cause and the fix come from SpawnError::explained.
        Err(source) => {
            return Err(SpawnError::Clone {
                source,
                hint: String::new(),
            })
        }
    };
    drop(sync_child);
    drop(report_write);
    let launched = Launched {
        init_pid,
        pidfd,
        sync: sync_parent,
        report: report_read,
    };
    step_note(
        prepared,
        format_args!(
            "cloned init (host pid {init_pid}) into new namespaces: {}{}",
            namespace_names(plan.clone_flags),
            if created_in_cgroup {
                ", created in its cgroup (CLONE_INTO_CGROUP)"
            } else {
                ""
            }
        ),
    );
    // Init is released first and moved while it builds the root (see
    // `InitFds::await_cgroup`).
    let joined = || match cgroup {
        Some(_) if created_in_cgroup => Ok(()),
        Some(cgroup) => cgroup
            .add(init_pid.as_raw())
            .map_err(|err| SpawnError::LayerUnavailable {
                layer: "cgroups",
                reason: format!("the run's init could not join its cgroup: {err}"),
            })
            .and_then(|()| Ok(channel::send_cgroup_joined(launched.sync.as_fd())?)),
        None => Ok(()),
    };
    if let Err(err) = release_init(
        plan,
        supervisor_effective_capabilities(prepared),
        init_pid,
        &launched.sync,
    )
    .and_then(|()| joined())
    {
        launched.reap();
        // Init may have failed first (it builds the root while the
        // supervisor moves it into the cgroup), and `err` is only its
        // absence, a closed socket or a vanished process: its record
        // says why.
        if let Some(Record::Failed {
            step,
            errno,
            detail,
        }) = record_left_by_reaped(&launched.report)
        {
            return refused_setup(prepared, may_fall_back, step, errno, detail);
        }
        return match err {
            SpawnError::IdMap { ref source, .. }
                if may_fall_back
                    && matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) =>
            {
                Ok(Attempt::NamespacesRefused(refused_inside(&err)))
            }
            err => Err(err),
        };
    }
    if !may_fall_back {
        return Ok(Attempt::Started(launched));
    }
    match first_record(&launched.report)? {
        Some(Record::NamespacesUsable) => {
            note_record(prepared, &Record::NamespacesUsable);
            Ok(Attempt::Started(launched))
        }
        // Init ended without a word: the supervision sees its status.
        None => Ok(Attempt::Started(launched)),
        Some(Record::Failed {
            step,
            errno,
            detail,
        }) => {
            launched.reap();
            refused_setup(prepared, may_fall_back, step, errno, detail)
        }
        Some(other) => {
            launched.reap();
            Err(SpawnError::Channel(channel::ChannelError::Unexpected(
                format!("{other:?} before the namespaces were set up"),
            )))
        }
    }
}

/// Init (reaped) reported that `step` failed before the namespaces were
/// usable: the fallback where that means they cannot be used here and the
/// profile allows it, else the run's error.
fn refused_setup(
    prepared: &Prepared,
    may_fall_back: bool,
    step: Step,
    errno: i32,
    detail: String,
) -> Result<Attempt, SpawnError> {
    note_record(
        prepared,
        &Record::Failed {
            step,
            errno,
            detail: detail.clone(),
        },
    );
    let err = SpawnError::Setup {
        step,
        errno,
        detail,
    };
    if may_fall_back && super::no_namespaces::means_unusable(step, Errno::from_raw(errno)) {
        Ok(Attempt::NamespacesRefused(refused_inside(&err)))
    } else {
        Err(err)
    }
}

/// The record a reaped init left on the report pipe, if any. Nothing of
/// the run can write there any more (the payload is forked only after the
/// release), so what is there is all there will be; not waited for.
fn record_left_by_reaped(report: &OwnedFd) -> Option<Record> {
    let mut fds = [PollFd::new(report.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => first_record(report).ok().flatten(),
        _ => None,
    }
}

/// Why a best-effort run has no namespaces when the namespace was created
/// but `refused` stopped its set-up, with the cause the environment gives.
fn refused_inside(refused: &SpawnError) -> String {
    let cause = refused
        .refusal()
        .and_then(|refusal| crate::environment::Environment::detect().explain(&refusal))
        .map_or_else(
            || "a security module or seccomp filter withholds the privileges a new user namespace gives (Ubuntu's AppArmor restriction, a container engine's profile)".to_owned(),
            |why| why.cause,
        );
    let what = match refused {
        SpawnError::Setup { step, errno, .. } => format!(
            "{} in it was refused ({})",
            step.describe(),
            Errno::from_raw(*errno)
        ),
        other => format!("its set-up was refused ({other})"),
    };
    format!("a user namespace was created, but {what}: {cause}")
}

/// The first record init writes, waited for (`None` at end-of-file).
fn first_record(report: &OwnedFd) -> Result<Option<Record>, SpawnError> {
    let mut buf = [0u8; channel::RECORD_SIZE];
    loop {
        match nix::unistd::read(report.as_fd(), &mut buf) {
            Ok(0) => return Ok(None),
            Ok(n) => return Ok(Some(channel::decode_record(&buf[..n])?)),
            Err(Errno::EINTR) => continue,
            Err(source) => {
                return Err(SpawnError::Sys {
                    op: "read(report)".into(),
                    source,
                })
            }
        }
    }
}

/// The broker's caller is the command the payload runs.
fn set_command_caller(
    broker: &mut crate::broker::server::Broker,
    command: super::warm::PayloadCommand<'_>,
    cwd: &std::ffi::CStr,
) {
    let cwd = PathBuf::from(std::ffi::OsStr::from_bytes(cwd.to_bytes()));
    let program = crate::broker::identity::Program::Command {
        // Relative programs (./tool) run from the working directory.
        candidates: command
            .exec_candidates
            .iter()
            .map(|c| cwd.join(std::ffi::OsStr::from_bytes(c.to_bytes())))
            .collect(),
        args: command
            .argv
            .iter()
            .skip(1)
            .map(|a| std::ffi::OsStr::from_bytes(a.to_bytes()).to_os_string())
            .collect(),
        cwd,
    };
    broker.set_caller(
        format!("command:{}", String::from_utf8_lossy(command.program)),
        program,
    );
}

impl Running {
    /// A warm run got its command: the broker names and hashes it, and the
    /// run's clock, timeout and output cap start now, as they would have at
    /// a cold run's clone.
    pub(crate) fn commit_warm(
        &mut self,
        commit: &super::warm::Commit,
        limits: &crate::profile::policy::Limits,
        audit: Option<std::fs::File>,
    ) {
        self.started = Instant::now();
        self.program = commit.program();
        self.timeout = limits.timeout;
        if let Some((_, broker)) = &self.broker {
            let mut broker = broker.borrow_mut();
            set_command_caller(&mut broker, commit.command(), &commit.cwd);
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

fn namespace_names(flags: nix::sched::CloneFlags) -> String {
    use nix::sched::CloneFlags as F;
    let names: Vec<&str> = [
        (F::CLONE_NEWUSER, "user"),
        (F::CLONE_NEWNS, "mount"),
        (F::CLONE_NEWPID, "pid"),
        (F::CLONE_NEWNET, "net"),
        (F::CLONE_NEWIPC, "ipc"),
        (F::CLONE_NEWUTS, "uts"),
    ]
    .into_iter()
    .filter(|(flag, _)| flags.contains(*flag))
    .map(|(_, name)| name)
    .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(" ")
    }
}

/// `-v`: what a record from inside says, as it arrives.
fn note_record(prepared: &Prepared, record: &Record) {
    match record {
        Record::Landlock { abi, status } => step_note(
            prepared,
            format_args!(
                "Landlock ABI {abi}: {} ({} rules)",
                crate::landlock::status_name(*status),
                prepared.plan().landlock_rules.len()
            ),
        ),
        Record::Skipped { step, errno } => step_note(
            prepared,
            format_args!(
                "skipped (best-effort) {}: {}",
                step.describe(),
                Errno::from_raw(*errno).desc()
            ),
        ),
        Record::Measured(view) => {
            let measured =
                super::measure::Measured::new(view, prepared.started.confinement.host.as_ref());
            let show =
                |value: Option<u64>| value.map_or("unmeasured".to_string(), |v| v.to_string());
            let namespaces: Vec<String> = measured
                .namespaces
                .iter()
                .map(|(name, state)| {
                    format!(
                        "{name}={}",
                        serde_json::to_value(state)
                            .map_or_else(|_| "?".into(), |v| v.as_str().unwrap_or("?").to_string())
                    )
                })
                .collect();
            step_note(
                prepared,
                format_args!(
                    "the payload's own view before exec: NoNewPrivs {}, CapEff {}, Seccomp mode {} with {} filter(s), uid {} gid {}, namespaces {}",
                    show(view.no_new_privs),
                    view.capabilities[2].map_or("unmeasured".to_string(), |c| format!("{c:016x}")),
                    show(view.seccomp_mode),
                    show(view.seccomp_filters),
                    show(view.uid),
                    show(view.gid),
                    namespaces.join(" ")
                ),
            );
        }
        Record::NamespacesUsable => step_note(
            prepared,
            format_args!("the new namespaces are usable: init mounted and pivoted"),
        ),
        Record::Failed {
            step,
            errno,
            detail,
        } => step_note(
            prepared,
            format_args!(
                "failed {} ({detail}): {}",
                step.describe(),
                Errno::from_raw(*errno).desc()
            ),
        ),
    }
}

fn read_one_record(fd: &OwnedFd, records: &mut Vec<Record>) -> Result<bool, SpawnError> {
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

fn outcome(
    program: &str,
    records: Vec<Record>,
    reported_exit: Option<PayloadExit>,
    init_status: WaitStatus,
    wall: Duration,
) -> Result<Outcome, SpawnError> {
    let mut landlock = None;
    let mut skipped = Vec::new();
    let mut measured = None;
    for record in records {
        match record {
            Record::Landlock { abi, status } => landlock = Some((abi, status)),
            Record::Skipped { step, errno } => skipped.push((step, errno)),
            Record::Measured(view) => measured = Some(*view),
            Record::NamespacesUsable => {}
            Record::Failed {
                step: Step::VerifyConfinement,
                detail,
                ..
            } => {
                let layer = match detail.split(':').next() {
                    Some("no_new_privs") => "no_new_privs",
                    Some("capabilities") => "dropping every capability",
                    Some("seccomp") => "seccomp",
                    _ => "every namespace the run was cloned into",
                };
                return Err(SpawnError::LayerUnavailable {
                    layer,
                    reason: format!(
                        "the payload's own view just before exec contradicts it ({detail}); nothing was executed"
                    ),
                });
            }
            Record::Failed {
                step: Step::Exec,
                errno,
                ..
            } => {
                return Err(SpawnError::Exec {
                    program: program.to_owned(),
                    errno,
                    hint: String::new(),
                })
            }
            Record::Failed {
                step: Step::LandlockNotEnforced,
                ..
            } => {
                let (abi, status) = landlock.unwrap_or((0, 0));
                return Err(SpawnError::LayerUnavailable {
                    layer: "Landlock",
                    reason: crate::landlock::shortfall(abi, status),
                });
            }
            Record::Failed {
                step,
                errno,
                detail,
            } => {
                return Err(SpawnError::Setup {
                    step,
                    errno,
                    detail,
                })
            }
        }
    }
    let exit = match (reported_exit, init_status) {
        (Some(exit), _) => exit,
        (None, WaitStatus::Exited(_, code)) => PayloadExit::Code(code),
        (None, WaitStatus::Signaled(_, signal, _)) => PayloadExit::Signal(signal as i32),
        (None, other) => {
            return Err(SpawnError::Invalid(format!(
                "the sandbox's init ended unexpectedly: {other:?}"
            )))
        }
    };
    Ok(Outcome {
        exit,
        landlock,
        measured,
        skipped,
        wall,
        limits_hit: Vec::new(),
        cgroup: None,
        cpu_user: Duration::ZERO,
        cpu_system: Duration::ZERO,
        broker: None,
        connections: Default::default(),
        sweep: Default::default(),
    })
}

/// The supervisor's CapEff as read for the run's expected confinement
/// just before clone.
fn supervisor_effective_capabilities(prepared: &Prepared) -> Option<u64> {
    prepared
        .started
        .confinement
        .host
        .as_ref()
        .and_then(|host| host.capabilities[2])
}

/// Why uid 0 without CAP_SETFCAP gets no user namespace. Since Linux 5.12
/// mapping uid 0 of the parent namespace into a child needs CAP_SETFCAP
/// there (so that the child's root cannot write file capabilities the
/// parent honours); root of a namespace whose creator dropped every
/// capability (bubblewrap's `--uid 0`, `setpriv --bounding-set=-all`) has
/// only its uid 0 to map.
const CANNOT_MAP_ROOT: &str = "this is uid 0 of a user namespace without CAP_SETFCAP, and the kernel (5.12+) lets only a holder of CAP_SETFCAP map uid 0 into a child user namespace";

/// Write the id maps, idmap the writable trees (root supervisor), and tell
/// init to go on.
/// `supervisor_capabilities`: see [`supervisor_effective_capabilities`].
fn release_init(
    plan: &ChildPlan,
    supervisor_capabilities: Option<u64>,
    init_pid: Pid,
    sync: &OwnedFd,
) -> Result<(), SpawnError> {
    let ids = plan.ids;
    let proc_dir = std::path::PathBuf::from(format!("/proc/{init_pid}"));
    let write = |name: &str, data: String| -> Result<(), SpawnError> {
        let path = proc_dir.join(name);
        std::fs::write(&path, data.as_bytes()).map_err(|source| {
            if source.raw_os_error() == Some(libc::EPERM)
                && !ids.root_mode
                && ids.host_uid == 0
                && !super::ids::may_map_root(supervisor_capabilities)
            {
                return SpawnError::LayerUnavailable {
                    layer: "userns",
                    reason: format!(
                        "{CANNOT_MAP_ROOT} (writing {}). Fix: start sandbox as a regular uid \
                         there (bubblewrap without `--uid 0`), keep CAP_SETFCAP for it, or run \
                         without namespaces with a profile whose enforce.userns is \
                         \"best-effort\" (`--profile standard`)",
                        path.display()
                    ),
                };
            }
            SpawnError::IdMap { path, data, source }
        })
    };
    // Unprivileged writers must deny setgroups before writing gid_map
    // (CVE-2014-8989: dropping groups could bypass negative group ACLs). Root
    // keeps it allowed so init can shed host root's supplementary groups.
    if !plan
        .clone_flags
        .contains(nix::sched::CloneFlags::CLONE_NEWUSER)
    {
        // No user namespace: no maps to write, nothing to idmap.
        channel::send_go(sync.as_fd(), &[])?;
        return Ok(());
    }
    write(
        "setgroups",
        if ids.root_mode {
            "allow".into()
        } else {
            "deny".into()
        },
    )?;
    write(
        "uid_map",
        format!("{} {} 1\n", ids.inside_uid, ids.host_uid),
    )?;
    write(
        "gid_map",
        format!("{} {} 1\n", ids.inside_gid, ids.host_gid),
    )?;

    let mut trees = Vec::with_capacity(plan.idmapped.len());
    if !plan.idmapped.is_empty() {
        let userns_path = proc_dir.join("ns/user");
        let userns = std::fs::File::open(&userns_path).map_err(|source| SpawnError::Path {
            what: "opening",
            path: userns_path,
            source,
        })?;
        // A writable tree whose owner is not the sandbox's uid inside gets
        // a namespace of its own mapping that owner to the sandbox's host
        // id, so the sandbox may do to it what its owner may, as in every
        // other writable tree; one namespace per distinct owner.
        let mut owner_namespaces: Vec<((u32, u32), std::fs::File)> = Vec::new();
        for (uid, gid) in plan.idmapped.iter().filter_map(|tree| tree.owner) {
            if owner_namespaces
                .iter()
                .any(|(owner, _)| *owner == (uid, gid))
            {
                continue;
            }
            let namespace = super::ids::mapping_namespace(
                &format!("{uid} {} 1", ids.host_uid),
                &format!("{gid} {} 1", ids.host_gid),
            )
            .map_err(|reason| SpawnError::LayerUnavailable {
                layer: "userns",
                reason: format!(
                    "idmapping a writable tree owned by {uid}:{gid} to the sandbox's uid: {reason}"
                ),
            })?;
            owner_namespaces.push(((uid, gid), namespace));
        }
        for tree in &plan.idmapped {
            let path = tree.host_path.to_string_lossy().into_owned();
            let fd = mount_api::clone_tree(&tree.host_path)
                .map_err(sys(format!("open_tree({path})")))?;
            // Files on disk owned by the tree's owner (the project's owner is
            // the sandbox's inside uid) appear owned by the sandbox, and what
            // the sandbox creates belongs to that owner on the host, while
            // the process itself is never host root nor the owner.
            if tree.idmap {
                let mapping = tree
                    .owner
                    .and_then(|owner| owner_namespaces.iter().find(|(o, _)| *o == owner))
                    .map_or(&userns, |(_, namespace)| namespace);
                mount_api::set_tree_idmap(fd.as_fd(), mapping.as_fd())
                .map_err(sys(format!(
                    "idmapping {path} for a sandbox started by root (mount_setattr MOUNT_ATTR_IDMAP needs Linux 5.12+ \
                     and a filesystem with idmapped-mount support such as ext4, xfs, btrfs or tmpfs; \
                     or run sandbox as a regular user, which needs no idmapping)"
                )))?;
            }
            let attrs = MountAttrs {
                read_only: !tree.writable,
                nosuid: true,
                nodev: true,
                noexec: false,
            };
            mount_api::set_tree_attrs(fd.as_fd(), attrs)
                .map_err(sys(format!("mount_setattr({path})")))?;
            trees.push(fd);
        }
    }
    channel::send_go(sync.as_fd(), &trees)?;
    Ok(())
}
