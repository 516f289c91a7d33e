//! One attempt to start the run's init: clone, id maps, release, and
//! what a refusal of the namespaces means.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

use crate::spawn::channel::{self, Record};
use crate::spawn::init::{CgroupJoin, InitFds};
use crate::spawn::prepare::{ChildPlan, Handover, Prepared};
use crate::spawn::{SpawnError, Step};

use super::decide::supervisor_effective_capabilities;
use super::notes::note_record;
use super::notes::step_note;
use super::release::{release_init, Kernel};
use super::sys;

/// An init that was cloned, given its id maps and released.
pub(super) struct Launched {
    pub(super) init_pid: Pid,
    pub(super) pidfd: OwnedFd,
    /// The supervisor's end of the sync socket.
    pub(super) sync: OwnedFd,
    /// The read end of the report pipe.
    pub(super) report: OwnedFd,
}

impl Launched {
    /// Kill init (it may have exited already) and reap it.
    pub(super) fn reap(&self) {
        let _ = kill(self.init_pid, Signal::SIGKILL);
        let _ = waitid(Id::PIDFd(self.pidfd.as_fd()), WaitPidFlag::WEXITED);
    }
}

/// How one attempt to start the run's init ended, when not in an error.
pub(super) enum Attempt {
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
pub(super) fn launch_init(
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
    let mut self_move = cgroup.and_then(crate::cgroup::RunCgroup::open_tasks_for_self_move);
    let fds = InitFds {
        sync: sync_child.as_fd(),
        report: report_write.as_fd(),
        supervisor_ends: [sync_parent.as_raw_fd(), report_read.as_raw_fd()],
        cgroup: match (cgroup, &self_move) {
            (None, _) => CgroupJoin::AlreadyThere,
            (Some(_), Some(tasks)) => CgroupJoin::Itself(tasks),
            (Some(_), None) => CgroupJoin::BySupervisor,
        },
        net_handover,
    };
    let plan = prepared.plan();
    let (cloned, created_in_cgroup) = clone_init(plan, handover, &fds, cgroup);
    let (init_pid, pidfd) = match cloned {
        Ok(pair) => pair,
        Err(errno) => return clone_refused(errno, may_fall_back),
    };
    drop(sync_child);
    drop(report_write);
    let moves_itself = self_move.take().is_some();
    let launched = Launched {
        init_pid,
        pidfd,
        sync: sync_parent,
        report: report_read,
    };
    step_note(
        prepared,
        format_args!(
            "cloned init (host pid {init_pid}) into new namespaces: {} (init makes: {}){}",
            namespace_names(crate::spawn::init::clone_flags_for_init(plan.clone_flags)),
            namespace_names(crate::spawn::init::namespaces_made_by_init(
                plan.clone_flags
            )),
            if created_in_cgroup {
                ", created in its cgroup (CLONE_INTO_CGROUP)"
            } else if moves_itself {
                ", to move itself into its cgroup (v1 `tasks`)"
            } else {
                ""
            }
        ),
    );
    // Init is released first and moved while it builds the root (see
    // `CgroupJoin`), unless it was created there or moves itself.
    let joined = || match cgroup {
        Some(_) if created_in_cgroup || moves_itself => Ok(()),
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
        plan.ids,
        plan.clone_flags,
        &plan.idmapped,
        supervisor_effective_capabilities(prepared),
        init_pid,
        &mut Kernel {
            sync: launched.sync.as_fd(),
        },
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
pub(super) fn refused_setup(
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
    if may_fall_back && crate::spawn::no_namespaces::means_unusable(step, Errno::from_raw(errno)) {
        Ok(Attempt::NamespacesRefused(refused_inside(&err)))
    } else {
        Err(err)
    }
}

/// The record a reaped init left on the report pipe, if any. Nothing of
/// the run can write there any more (the payload is forked only after the
/// release), so what is there is all there will be; not waited for.
pub(super) fn record_left_by_reaped(report: &OwnedFd) -> Option<Record> {
    // Init may have said other things first (that its namespaces are
    // usable, a cosmetic step skipped): the failure is the last word, and
    // taking the first one instead blamed a broken pipe for a failed mount.
    // Init is reaped and forked nothing yet, so what it wrote is all there
    // is; only what is already in the pipe is read.
    let mut last = None;
    for _ in 0..MAX_RECORDS_OF_A_FAILED_START {
        let mut fds = [PollFd::new(report.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
        match first_record(report) {
            Ok(Some(record @ Record::Failed { .. })) => return Some(record),
            Ok(Some(record)) => last = Some(record),
            Ok(None) | Err(_) => break,
        }
    }
    last
}

/// How many records a start that failed is read for: more than init writes
/// before it forks the payload.
const MAX_RECORDS_OF_A_FAILED_START: usize = 64;

/// Why a best-effort run has no namespaces when the namespace was created
/// but `refused` stopped its set-up, with the cause the environment gives.
pub(super) fn refused_inside(refused: &SpawnError) -> String {
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
pub(super) fn first_record(report: &OwnedFd) -> Result<Option<Record>, SpawnError> {
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

pub(super) fn namespace_names(flags: nix::sched::CloneFlags) -> String {
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

/// Clone init on `plan`: created in the run's cgroup v2 directory where
/// clone3 can do that, else with the classic clone (moved into the cgroup
/// later). Also returns whether it was created in its cgroup.
pub(super) fn clone_init(
    plan: &ChildPlan,
    handover: &Handover,
    fds: &InitFds<'_>,
    cgroup: Option<&crate::cgroup::RunCgroup>,
) -> (nix::Result<(Pid, OwnedFd)>, bool) {
    // cgroup v2: init is created in the run's cgroup and never moved.
    let cgroup_dir = cgroup.and_then(crate::cgroup::RunCgroup::clone_target);
    if let Some(dir) = &cgroup_dir {
        let in_cgroup = InitFds {
            cgroup: CgroupJoin::AlreadyThere,
            ..*fds
        };
        let flags = crate::spawn::init::clone_flags_for_init(plan.clone_flags);
        let cloned = crate::sys::clone::clone_into_cgroup(flags, dir.as_fd(), |init| {
            crate::spawn::init::main(plan, handover, &in_cgroup, init)
        });
        if cloned.is_ok() {
            return (cloned, true);
        }
    }
    // Without clone3 (a kernel before 5.7, a container's seccomp
    // profile) or when it refuses: the classic clone, then the move. A
    // refusal of the namespaces themselves comes again from it.
    let flags = crate::spawn::init::clone_flags_for_init(plan.clone_flags);
    let cloned = crate::sys::clone::clone_into_namespaces(flags, |init| {
        crate::spawn::init::main(plan, handover, fds, init)
    });
    (cloned, false)
}

/// Clone refused with `errno`: the fallback where that means no user
/// namespace can be had here and the profile allows it, else the run's
/// error.
fn clone_refused(errno: Errno, may_fall_back: bool) -> Result<Attempt, SpawnError> {
    if may_fall_back && crate::spawn::no_namespaces::means_unavailable(errno) {
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
    Err(SpawnError::Clone {
        source: errno,
        hint: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Init says its namespaces are usable and skips a cosmetic step
    /// before a mount fails: the failure is what the supervisor reports,
    /// not the first record (which left it to blame the broken pipe).
    #[test]
    fn the_failure_is_found_behind_earlier_records() {
        let (read, write) = nix::unistd::pipe().expect("pipe");
        channel::report_namespaces_usable(write.as_fd());
        channel::report_skipped(write.as_fd(), Step::Hostname, Errno::EPERM);
        channel::report_failure(write.as_fd(), Step::BindMount, Errno::ENOENT, b"/oldroot/x");
        drop(write);
        match record_left_by_reaped(&read) {
            Some(Record::Failed { step, errno, .. }) => {
                assert_eq!(step, Step::BindMount);
                assert_eq!(errno, Errno::ENOENT as i32);
            }
            other => panic!("not the failure: {other:?}"),
        }
        // Nothing written: nothing to say, and no wait for it.
        let (read, _write) = nix::unistd::pipe().expect("pipe");
        assert!(record_left_by_reaped(&read).is_none());
    }
}
