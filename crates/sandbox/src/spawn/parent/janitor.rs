//! The janitor: a process that cleans up after a supervisor that died
//! before it could (the run's cgroup, the project's sweep), and meanwhile
//! removes the cgroups that dead supervisors left beside the run's
//! ([`crate::cgroup::RunCgroup::sweep_beside`]).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};

use crate::spawn::SpawnError;

use super::sweep::SweepPlan;
use super::sys;

/// Removes the run's cgroup if the supervisor dies before it can: a process
/// forked before clone (so it is not in the run's cgroup), waiting on a pipe
/// only the supervisor can write. A byte means the supervisor cleaned up
/// ([`CGROUP_LEFT`]: all but the cgroup, which the janitor goes on
/// removing); end-of-file means it died, and the janitor kills what is
/// left of the run, removes the directories and sweeps.
#[derive(Debug)]
pub(super) struct Janitor {
    pidfd: OwnedFd,
    done: OwnedFd,
}

/// How long a janitor keeps trying to remove a dead supervisor's cgroup.
pub(super) const JANITOR_PATIENCE: Duration = Duration::from_secs(10);

/// How a janitor tells that a dead supervisor's run is gone.
#[derive(Clone, Copy)]
pub(super) enum RunEnd<'a> {
    /// Its cgroup can be removed (the janitor removes it).
    Cgroup(&'a crate::cgroup::RunCgroup),
    /// Its init has exited: a pid namespace's init exits only after every
    /// other process in it. For runs without a cgroup, whose janitor is
    /// forked after the clone to hold this descriptor.
    Init(BorrowedFd<'a>),
}

pub(super) fn spawn_janitor(
    run_end: RunEnd<'_>,
    sweep: Option<&SweepPlan>,
) -> Result<Janitor, SpawnError> {
    crate::sys::reap::finished();
    let (wait_end, done) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(sys("pipe2(janitor)"))?;
    let done_raw = done.as_raw_fd();
    let (_pid, pidfd) =
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
            // Idle until the run ends: the time to tidy what supervisors
            // killed before their own janitors existed left beside this run,
            // stopping as soon as the supervisor writes or dies.
            if let RunEnd::Cgroup(cgroup) = run_end {
                use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
                let supervisor_spoke = || {
                    let mut fds = [PollFd::new(wait_end, PollFlags::POLLIN)];
                    poll(&mut fds, PollTimeout::ZERO).map_or(true, |ready| ready > 0)
                };
                cgroup.sweep_beside(&supervisor_spoke);
            }
            let mut byte = [0u8; 1];
            let swept = loop {
                match nix::unistd::read(wait_end, &mut byte) {
                    Ok(1) if byte[0] == CGROUP_LEFT => break true,
                    Ok(1) => return 0,
                    Err(Errno::EINTR) => continue,
                    _ => break false,
                }
            };
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
            if let (false, Some(sweep)) = (swept, sweep) {
                sweep.run();
            }
            0
        })
        .map_err(sys("fork(janitor)"))?;
    drop(wait_end);
    Ok(Janitor { pidfd, done })
}

impl Janitor {
    /// The supervisor removed the cgroup itself: release the janitor, and
    /// reap it later ([`crate::sys::reap`]): waiting for it to wake and exit
    /// here put a hand-over to another process at the end of every run,
    /// before its report.
    pub(super) fn dismiss(self) {
        let _ = nix::unistd::write(self.done.as_fd(), &[1]);
        crate::sys::reap::later(self.pidfd);
    }

    /// Dismiss the janitor if the run's cgroup is gone. If it is not (its
    /// last exits still in flight on a loaded machine when the supervisor
    /// gave up), the janitor goes on trying for its patience, without
    /// sweeping again: dismissing it left the directories behind for good,
    /// and a later supervisor given the same pid found its cgroup's name
    /// taken. Reaped later either way.
    pub(super) fn release(self, cgroup_removed: bool) {
        if cgroup_removed {
            self.dismiss();
        } else {
            let _ = nix::unistd::write(self.done.as_fd(), &[CGROUP_LEFT]);
            crate::sys::reap::when_done(self.pidfd);
        }
    }
}

/// The byte that tells the janitor the run is swept but its cgroup is not
/// removed yet.
const CGROUP_LEFT: u8 = 2;
