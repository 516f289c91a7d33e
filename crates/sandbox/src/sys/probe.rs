//! System calls behind [`crate::probe`]: each one asks the kernel whether a
//! feature exists without changing the state of the calling process.
//!
//! Every entry point is safe to call: the arguments that reach the kernel are
//! fixed here (NULL pointers, sizes of 0, invalid fds, or a pointer to a local),
//! so no caller can turn a probe into an arbitrary system call.
use std::os::fd::{FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>` (not in libc).
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;

/// Exit statuses of the probe child for failures before `unshare`. They lie above
/// every errno value (Linux's largest is 133), so the parent can tell them apart
/// from an `unshare` errno, which is the child's exit status otherwise.
const EXIT_SETGROUPS: i32 = 201;
const EXIT_SETRESGID: i32 = 202;
const EXIT_SETRESUID: i32 = 203;
/// An errno that does not fit the encoding (should not happen).
const EXIT_UNKNOWN: i32 = 210;

/// Why a forked probe could not give an answer, or the answer was "no".
#[derive(Debug, thiserror::Error)]
pub enum ChildProbeError {
    /// `fork` in a multi-threaded process may leave the child with locks held by
    /// threads that no longer exist; the probe refuses rather than risk it.
    #[error("probing in a child needs a single-threaded process, this one has {0} threads")]
    MultiThreaded(usize),
    /// The thread count could not be read.
    #[error("cannot count threads in /proc/self/task: {0}")]
    ThreadCount(#[source] std::io::Error),
    /// `fork` failed.
    #[error("fork failed: {0}")]
    Fork(#[source] Errno),
    /// `waitpid` on the child failed.
    #[error("waiting for the probe child failed: {0}")]
    Wait(#[source] Errno),
    /// The child could not switch to the requested unprivileged ids.
    #[error("the probe child could not drop privileges ({0} failed)")]
    DropPrivileges(&'static str),
    /// The child ended other than by `_exit` (killed by a signal, e.g. a seccomp
    /// filter with `SECCOMP_RET_KILL`).
    #[error("the probe child ended abnormally: {0}")]
    Abnormal(String),
    /// The question was answered: `unshare` itself failed with this errno.
    #[error("unshare failed: {0}")]
    Unshare(#[source] Errno),
}

/// Fork a child that calls `unshare(flags)` and reports whether it worked.
///
/// The calling process must be single-threaded (checked by
/// [`super::thread::require_single_thread`], else
/// [`ChildProbeError::MultiThreaded`]),
/// because between `fork` and `_exit` the child only makes raw system calls and
/// must not touch a lock another thread could have held. The caller's own
/// namespaces are never changed.
pub fn try_unshare_in_child(flags: CloneFlags) -> Result<(), ChildProbeError> {
    fork_probe(flags, None)
}

/// Like [`try_unshare_in_child`], but the child first drops to `uid`/`gid` with
/// no supplementary groups. Run as root, this answers whether an *unprivileged*
/// user could unshare: root has `CAP_SYS_ADMIN` and passes checks such as
/// `kernel.unprivileged_userns_clone=0` that stop everyone else. The credential
/// change also clears the child's capabilities (no `SECBIT_KEEP_CAPS` is set).
pub fn try_unshare_in_child_as(
    flags: CloneFlags,
    uid: libc::uid_t,
    gid: libc::gid_t,
) -> Result<(), ChildProbeError> {
    fork_probe(flags, Some((uid, gid)))
}

fn fork_probe(
    flags: CloneFlags,
    ids: Option<(libc::uid_t, libc::gid_t)>,
) -> Result<(), ChildProbeError> {
    super::thread::require_single_thread().map_err(|refusal| match refusal {
        super::thread::NotSingleThreaded::Threads(threads) => {
            ChildProbeError::MultiThreaded(threads as usize)
        }
        super::thread::NotSingleThreaded::Unreadable(errno) => {
            ChildProbeError::ThreadCount(errno.into())
        }
    })?;
    let raw_flags = flags.bits();
    // SAFETY: the process is single-threaded (checked just above), so the child
    // is a complete copy with no lock held by a vanished thread; and the child
    // runs only `probe_child`, which makes raw system calls and `_exit`s without
    // allocating, unwinding or returning into Rust code of the parent.
    match unsafe { fork() }.map_err(ChildProbeError::Fork)? {
        ForkResult::Child => probe_child(raw_flags, ids),
        ForkResult::Parent { child } => loop {
            match waitpid(child, None) {
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(ChildProbeError::Wait(errno)),
                Ok(WaitStatus::Exited(_, 0)) => return Ok(()),
                Ok(WaitStatus::Exited(_, EXIT_SETGROUPS)) => {
                    return Err(ChildProbeError::DropPrivileges("setgroups"))
                }
                Ok(WaitStatus::Exited(_, EXIT_SETRESGID)) => {
                    return Err(ChildProbeError::DropPrivileges("setresgid"))
                }
                Ok(WaitStatus::Exited(_, EXIT_SETRESUID)) => {
                    return Err(ChildProbeError::DropPrivileges("setresuid"))
                }
                Ok(WaitStatus::Exited(_, code)) => {
                    return Err(ChildProbeError::Unshare(Errno::from_raw(code)))
                }
                Ok(other) => return Err(ChildProbeError::Abnormal(format!("{other:?}"))),
            }
        },
    }
}

/// The forked child. Raw system calls only: glibc's `setresuid` wrapper would
/// synchronise credentials across threads, and nothing here may allocate.
fn probe_child(flags: libc::c_int, ids: Option<(libc::uid_t, libc::gid_t)>) -> ! {
    if let Some((uid, gid)) = ids {
        // Groups and gid first: once the uid is unprivileged they can no longer be changed.
        // SAFETY: setgroups with a count of 0 and a NULL list reads no memory.
        if unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) } != 0 {
            exit_now(EXIT_SETGROUPS);
        }
        // SAFETY: setresgid takes integers only.
        if unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) } != 0 {
            exit_now(EXIT_SETRESGID);
        }
        // SAFETY: setresuid takes integers only.
        if unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) } != 0 {
            exit_now(EXIT_SETRESUID);
        }
    }
    // SAFETY: unshare takes an integer; it changes only this child, which exits next.
    let code = if unsafe { libc::syscall(libc::SYS_unshare, flags) } == 0 {
        0
    } else {
        match Errno::last_raw() {
            errno @ 1..=200 => errno,
            _ => EXIT_UNKNOWN,
        }
    };
    exit_now(code)
}

fn exit_now(code: i32) -> ! {
    // SAFETY: _exit ends the process without running atexit handlers or
    // flushing stdio buffers that belong to the parent's copy of the state.
    unsafe { libc::_exit(code) }
}

/// The fixed system calls [`raw_probe_syscall`] can make. Each passes only NULL
/// pointers, zero sizes or invalid fds, so the kernel reads and writes no memory
/// of this process, and none has a lasting effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeCall {
    /// `clone3(NULL, 0)`: a kernel with clone3 (5.3+) rejects the size with
    /// EINVAL before reading anything; without it, ENOSYS. Never creates a process.
    Clone3NullArgs,
    /// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`:
    /// returns the Landlock ABI version; EOPNOTSUPP when built but disabled at
    /// boot, ENOSYS when not built.
    LandlockAbiVersion,
    /// `pidfd_open(getpid(), 0)`: the fd it returns is closed again at once,
    /// and the call returns 0.
    PidfdOpenSelf,
    /// `mount_setattr(-1, NULL, 0, NULL, 0)`: EBADF or EINVAL when the call
    /// exists (5.12+, the kernel that brought idmapped mounts); ENOSYS otherwise.
    MountSetattrInvalid,
    /// `prctl(PR_GET_SECCOMP)`: the calling thread's seccomp mode (0 none,
    /// 2 filter); EINVAL when the kernel lacks CONFIG_SECCOMP.
    PrGetSeccomp,
}

/// Make one of the fixed probe system calls and return its result or errno.
/// (A safe function taking a syscall number and arbitrary arguments would be
/// unsound, hence the enum.)
pub fn raw_probe_syscall(call: ProbeCall) -> Result<libc::c_long, Errno> {
    let ret = match call {
        // SAFETY: NULL args with size 0; the kernel checks the size first and reads nothing.
        ProbeCall::Clone3NullArgs => unsafe {
            libc::syscall(libc::SYS_clone3, std::ptr::null::<libc::c_void>(), 0usize)
        },
        // SAFETY: NULL attr with size 0 and the VERSION flag is the documented version query.
        ProbeCall::LandlockAbiVersion => unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        },
        ProbeCall::PidfdOpenSelf => {
            // SAFETY: pidfd_open takes integers only.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
            if fd >= 0 {
                let Ok(raw) = i32::try_from(fd) else {
                    return Err(Errno::EBADF);
                };
                // SAFETY: the kernel just returned this fd to us and nothing else owns it;
                // dropping the OwnedFd closes it.
                drop(unsafe { OwnedFd::from_raw_fd(raw) });
                return Ok(0);
            }
            fd
        }
        // SAFETY: an invalid dirfd, NULL path and NULL attr with size 0: the kernel
        // rejects the arguments without reading memory or touching any mount.
        ProbeCall::MountSetattrInvalid => unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                -1,
                std::ptr::null::<libc::c_char>(),
                0,
                std::ptr::null::<libc::c_void>(),
                0usize,
            )
        },
        // SAFETY: PR_GET_SECCOMP takes no pointer and only reads the thread's mode.
        ProbeCall::PrGetSeccomp => unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) }.into(),
    };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// `seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action)`: Ok when the kernel supports
/// filters returning `action` (e.g. `libc::SECCOMP_RET_ERRNO`,
/// `libc::SECCOMP_RET_USER_NOTIF`); EOPNOTSUPP when it does not know the action,
/// ENOSYS/EINVAL without seccomp filter support.
pub fn seccomp_action_available(action: u32) -> Result<(), Errno> {
    // SAFETY: the kernel reads one u32 through the pointer, which points to a
    // live local for the duration of the call; nothing is written.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_calls_never_panic_and_pidfd_is_closed() {
        for call in [
            ProbeCall::Clone3NullArgs,
            ProbeCall::LandlockAbiVersion,
            ProbeCall::PidfdOpenSelf,
            ProbeCall::MountSetattrInvalid,
            ProbeCall::PrGetSeccomp,
        ] {
            let _ = raw_probe_syscall(call);
        }
        if let Ok(v) = raw_probe_syscall(ProbeCall::PidfdOpenSelf) {
            assert_eq!(v, 0);
        }
    }

    #[test]
    fn clone3_with_null_args_never_creates_a_process() {
        // Any answer but success: success would mean a child now runs this test.
        assert!(raw_probe_syscall(ProbeCall::Clone3NullArgs).is_err());
    }

    #[test]
    fn unknown_seccomp_action_is_rejected() {
        assert!(seccomp_action_available(0x1234_5678).is_err());
    }

    #[test]
    fn forking_probe_refuses_in_the_multithreaded_test_harness() {
        // The test harness runs tests on worker threads, so the process has at least two.
        let spawned = std::thread::spawn(|| try_unshare_in_child(CloneFlags::CLONE_NEWUSER));
        let result = spawned.join().expect("probe thread panicked");
        assert!(matches!(result, Err(ChildProbeError::MultiThreaded(n)) if n >= 2));
    }
}
