//! P2: the payload process, from fork to execve.
//!
//! The order is the one bubblewrap and the kernel impose: session and
//! signals, descriptors, working directory, limits; then capabilities (the
//! last credential change), the parent-death signal after it (the kernel
//! clears it on credential changes), Landlock after every mount, and seccomp
//! last, immediately before execve, so the filter need not allow setup calls.
//!
//! Runs between clone and exec: no unwrap, no panic, errors become records.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::stat::Mode;

use super::channel;
use super::failed::{Failed, StepExt, SETUP_FAILED};
use super::measure;
use super::prepare::{ChildPlan, Handover, Stdio};
use super::Step;
use crate::profile::policy::Enforcement;
use crate::sys::clone::ClonedChild;

/// Exit status when the command cannot be executed, as a shell uses it.
pub const EXEC_FAILED: i32 = 127;

/// The payload's entry point after fork. Never returns on success (execve).
pub fn main(
    plan: &ChildPlan,
    handover: &Handover,
    report: BorrowedFd<'_>,
    cloned: &ClonedChild,
) -> i32 {
    // Fds 0 to 3 are about to be overwritten (stdio, the broker channel at
    // 3): the report pipe must not be one of them.
    let moved;
    let report = if report.as_raw_fd() <= 3 {
        match crate::sys::fd::dup_at_or_above(report, 10) {
            Ok(fd) => {
                moved = fd;
                moved.as_fd()
            }
            Err(_) => return SETUP_FAILED,
        }
    } else {
        report
    };
    match run(plan, handover, report, cloned) {
        Ok(Ready::DryRun) => 0,
        Err(failed) => {
            channel::report_failure(report, failed.step, failed.errno, failed.detail);
            if failed.step == Step::Exec {
                EXEC_FAILED
            } else {
                SETUP_FAILED
            }
        }
    }
}

/// How the setup ended without an error (a successful execve never returns).
enum Ready {
    /// [`ChildPlan::dry_run`]: set up, not executed.
    DryRun,
}

fn run<'a>(
    plan: &'a ChildPlan,
    handover: &'a Handover,
    report: BorrowedFd<'_>,
    cloned: &ClonedChild,
) -> Result<Ready, Failed<'a>> {
    // No controlling terminal: TIOCSTI and friends can then not push input
    // into the supervisor's terminal (CVE-2017-5226 in bubblewrap).
    nix::unistd::setsid().step(Step::Setsid, b"")?;
    crate::sys::signal::reset_all_dispositions().step(Step::SignalReset, b"")?;
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .step(Step::SignalReset, b"")?;

    for (target, stdio) in handover.stdio.iter().enumerate() {
        let target = target as i32;
        match stdio {
            // The supervisor turned SupervisorStderr into a descriptor.
            Stdio::Inherit | Stdio::SupervisorStderr => {}
            // The supervisor replaced a log by its pipe; should one be left,
            // the payload's stream goes nowhere rather than anywhere else.
            Stdio::Null | Stdio::Log(_) => {
                let flags = if target == 0 {
                    OFlag::O_RDONLY
                } else {
                    OFlag::O_WRONLY
                };
                let null = open("/dev/null", flags, Mode::empty())
                    .step(Step::CloseDescriptors, b"/dev/null")?;
                redirect(null.as_fd(), target)?;
            }
            Stdio::Fd(fd) => redirect(fd.as_fd(), target)?,
        }
    }
    if let Some(ipc) = &handover.ipc {
        cloned
            .place(ipc.as_fd(), 3)
            .step(Step::CloseDescriptors, b"broker")?;
    }
    // Anything else the supervisor's own parent leaked to it must not reach
    // the command (the report pipe is already close-on-exec).
    let first_closed = if handover.ipc.is_some() { 4 } else { 3 };
    crate::sys::fd::cloexec_from(first_closed).step(Step::CloseDescriptors, b"")?;

    nix::unistd::chdir(plan.cwd.as_c_str()).step(Step::Chdir, plan.cwd.to_bytes())?;
    if let Some(cpus) = plan.cpu_share {
        visible_cpus(cpus);
    }
    for (resource, limit) in plan.rlimits.iter().chain(&handover.fallback_rlimits) {
        // An unprivileged caller cannot raise a hard limit: a limit above
        // the inherited one (`--pids 4194304` as RLIMIT_NPROC) is already
        // stricter than asked, so keep the inherited one instead of failing.
        let limit = match nix::sys::resource::getrlimit(*resource) {
            Ok((_, hard)) => (*limit).min(hard),
            Err(_) => *limit,
        };
        nix::sys::resource::setrlimit(*resource, limit, limit)
            .step(Step::Rlimit, resource_name(*resource))?;
    }

    let dropped = if !plan.namespaces {
        crate::caps::drop_all_available().map(drop)
    } else {
        crate::caps::drop_all()
    };
    dropped.map_err(|err| Failed {
        step: Step::DropCapabilities,
        errno: match err {
            crate::caps::CapsError::Securebits(errno) => errno,
            crate::caps::CapsError::Clear { .. } => Errno::EPERM,
        },
        detail: b"",
    })?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).step(Step::ParentDeathSignal, b"")?;

    if plan.landlock != Enforcement::Off {
        match crate::landlock::apply(&plan.landlock_rules) {
            Ok(applied) => {
                channel::report_landlock(report, applied.abi, applied.status);
                if plan.landlock == Enforcement::Required && applied.status != 2 {
                    return Err(Failed {
                        step: Step::LandlockNotEnforced,
                        errno: Errno::EPERM,
                        detail: b"",
                    });
                }
            }
            Err(failure) if plan.landlock == Enforcement::Required => {
                return Err(Failed {
                    step: Step::Landlock,
                    errno: failure.errno,
                    detail: failure.path,
                });
            }
            Err(_) => channel::report_landlock(report, 0, 0),
        }
    }

    // A learning run installs its one filter in place of the policy's: the
    // same program with its refusals and path-bearing calls handed to the
    // supervisor, which answers each as the policy's program would (see
    // `crate::seccomp::learning`). Not best-effort: a learning run that
    // cannot observe would claim its command needed nothing.
    let mut seccomp_installed = false;
    if let (Some(learning), Some(socket)) = (&plan.observer, &handover.observer) {
        let listener = crate::sys::seccomp_notify::install_with_listener(learning)
            .step(Step::Seccomp, b"learning")?;
        channel::send_fd(socket.as_fd(), listener.as_fd()).step(Step::Seccomp, b"learning")?;
        seccomp_installed = true;
    } else if let Some(filter) = &plan.seccomp {
        match filter.install() {
            Ok(()) => seccomp_installed = true,
            Err(errno) if plan.seccomp_enforcement == Enforcement::Required => {
                return Err(Failed {
                    step: Step::Seccomp,
                    errno,
                    detail: b"",
                });
            }
            Err(errno) => channel::report_skipped(report, Step::Seccomp, errno),
        }
    }

    // A warm sandbox learns its command only now, under every layer.
    let command = match &handover.warm_commit {
        Some(sock) => super::warm::wait_for_commit(sock.as_fd(), &plan.project)?.command(),
        None => plan.command(),
    };
    measure_and_verify(handover, report, seccomp_installed)?;
    if plan.dry_run {
        // Every step that could refuse has run; init's _exit takes this status.
        return Ok(Ready::DryRun);
    }

    // execvp's rules: keep looking after ENOENT/ENOTDIR, remember EACCES.
    let mut errno = Errno::ENOENT;
    for candidate in command.exec_candidates {
        let Err(err) = nix::unistd::execve(candidate, command.argv, command.envp);
        match err {
            Errno::ENOENT | Errno::ENOTDIR => {}
            Errno::EACCES => errno = Errno::EACCES,
            other => {
                errno = other;
                break;
            }
        }
    }
    Err(Failed {
        step: Step::Exec,
        errno,
        detail: command.program,
    })
}

/// Read the payload's own view of its confinement as the kernel keeps it,
/// send it to the supervisor for the report, and refuse to exec when it
/// contradicts what every run requires. Last before execve, after seccomp,
/// so the view is the one the command starts with.
fn measure_and_verify<'a>(
    handover: &'a Handover,
    report: BorrowedFd<'_>,
    seccomp_installed: bool,
) -> Result<(), Failed<'a>> {
    let view = measure::read_own_view();
    channel::report_view(report, &view);
    let mut expected = handover.confinement;
    if !seccomp_installed {
        expected.seccomp_programs = 0;
    }
    match measure::contradiction(&view, &expected) {
        Some(what) => Err(Failed {
            step: Step::VerifyConfinement,
            errno: Errno::EPERM,
            detail: what.as_bytes(),
        }),
        None => Ok(()),
    }
}

fn redirect<'a>(fd: BorrowedFd<'_>, stream: i32) -> Result<(), Failed<'a>> {
    crate::sys::fd::redirect_standard_stream(fd, stream).step(Step::CloseDescriptors, b"stdio")
}

fn resource_name(resource: nix::sys::resource::Resource) -> &'static [u8] {
    use nix::sys::resource::Resource;
    match resource {
        Resource::RLIMIT_CORE => b"RLIMIT_CORE",
        Resource::RLIMIT_NOFILE => b"RLIMIT_NOFILE",
        Resource::RLIMIT_NPROC => b"RLIMIT_NPROC",
        Resource::RLIMIT_AS => b"RLIMIT_AS",
        Resource::RLIMIT_DATA => b"RLIMIT_DATA",
        Resource::RLIMIT_CPU => b"RLIMIT_CPU",
        Resource::RLIMIT_FSIZE => b"RLIMIT_FSIZE",
        Resource::RLIMIT_MSGQUEUE => b"RLIMIT_MSGQUEUE",
        _ => b"rlimit",
    }
}

/// Pin the payload to as many CPUs as its share rounds up to, so that
/// `nproc`, `os.sched_getaffinity` and `pytest -n auto` size their worker
/// pools to the limit: under a 1-CPU quota a pool sized to every core runs
/// about twice as long. It only narrows the set, so a failure changes
/// nothing the sandbox promises and is ignored.
fn visible_cpus(cpus: f64) {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let Ok(allowed) = sched_getaffinity(Pid::from_raw(0)) else {
        return;
    };
    let want = cpus.ceil().max(1.0) as usize;
    let mut narrowed = CpuSet::new();
    let mut kept = 0;
    for cpu in 0..CpuSet::count() {
        if kept == want {
            break;
        }
        if allowed.is_set(cpu).unwrap_or(false) && narrowed.set(cpu).is_ok() {
            kept += 1;
        }
    }
    if kept == want {
        let _ = sched_setaffinity(Pid::from_raw(0), &narrowed);
    }
}
