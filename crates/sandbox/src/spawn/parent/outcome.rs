//! What the supervisor learned from a run: the outcome, the limits it
//! ran into, its cgroup, read from init's records and status.

use std::time::Duration;

use nix::sys::wait::WaitStatus;

use crate::spawn::channel::{PayloadExit, Record};
use crate::spawn::measure::View;
use crate::spawn::{SpawnError, Step};

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
    /// A review run's changes, as kept (see [`crate::review`]).
    pub review: Option<crate::review::Kept>,
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

pub(super) fn children_cpu() -> (Duration, Duration) {
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

pub(super) fn outcome(
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
        review: None,
    })
}
