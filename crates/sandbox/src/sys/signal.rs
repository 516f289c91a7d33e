//! Signal plumbing for the sandbox's PID 1, which must forward signals to the
//! payload: the kernel delivers to a namespace's init only the signals it has
//! a handler for, so an init without handlers would swallow SIGTERM.

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// The pid (in the sandbox's namespace) that forwarded signals go to; 0 = none yet.
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

/// Signals PID 1 forwards to the payload's process group.
pub const FORWARDED: [Signal; 7] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

extern "C" fn forward(signal: libc::c_int) {
    let target = FORWARD_TO.load(Ordering::Relaxed);
    if target > 0 {
        // SAFETY: kill is async-signal-safe and takes plain integers. The
        // payload leads its own process group (it called setsid), so the
        // negative pid reaches its whole group.
        unsafe {
            libc::kill(-target, signal);
        }
    }
}

/// Forward [`FORWARDED`] signals to the process group of `pid` from now on.
pub fn forward_signals_to(pid: nix::unistd::Pid) -> nix::Result<()> {
    FORWARD_TO.store(pid.as_raw(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(forward),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in FORWARDED {
        // SAFETY: `forward` only reads an atomic and calls kill, both
        // async-signal-safe.
        unsafe { sigaction(signal, &action) }?;
    }
    Ok(())
}

/// Restore the default disposition of every catchable signal, so the payload
/// does not inherit handlers or ignored signals from the supervisor.
pub fn reset_all_dispositions() -> nix::Result<()> {
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for signal in Signal::iterator() {
        if matches!(signal, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: installing SIG_DFL runs no code of ours.
        unsafe { sigaction(signal, &default) }?;
    }
    Ok(())
}

/// A pidfd for `pid` (Linux 5.3): signals sent through it reach that
/// process or none, never one that reused its pid.
pub fn pidfd_open(pid: nix::unistd::Pid) -> nix::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes integers only.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(nix::errno::Errno::last());
    }
    let raw = i32::try_from(fd).map_err(|_| nix::errno::Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// Ok while the process `pidfd` refers to still holds its pid (running,
/// or exited and not yet reaped): until then no other process has that
/// number. ESRCH once it is gone.
pub fn pidfd_holds_pid(pidfd: std::os::fd::BorrowedFd<'_>) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor, signal 0 (only the checks, nothing sent),
    // a null siginfo and no flags.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if ret < 0 {
        return Err(nix::errno::Errno::last());
    }
    Ok(())
}

/// SIGKILL the process `pidfd` refers to.
pub fn pidfd_kill(pidfd: std::os::fd::BorrowedFd<'_>) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor, a signal number, a null siginfo (the kernel
    // then fills it as kill(2) would) and no flags.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if ret < 0 {
        return Err(nix::errno::Errno::last());
    }
    Ok(())
}

/// Whether a process `pid` exists in this pid namespace: `kill(pid, 0)`,
/// which another user's live process answers with EPERM (so it counts as
/// alive), where `/proc/PID` may be hidden (`hidepid`). For names that
/// carry their maker's pid: a name whose maker is gone is a leftover.
pub fn process_exists(pid: i32) -> bool {
    pid > 0
        && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            != Err(nix::errno::Errno::ESRCH)
}
