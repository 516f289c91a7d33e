//! Installing seccomp filters compiled by [`crate::seccomp`], and fixed probe
//! calls that check an installed filter from the inside.

use nix::errno::Errno;

/// Set no_new_privs and install each BPF program, in order.
pub fn install_filters(programs: &[Vec<libc::sock_filter>]) -> nix::Result<()> {
    nix::sys::prctl::set_no_new_privs()?;
    for program in programs {
        // A length that does not fit would be truncated into a different
        // (shorter) program; the kernel's own limit is 4096 instructions.
        let len = libc::c_ushort::try_from(program.len()).map_err(|_| Errno::EINVAL)?;
        let prog = libc::sock_fprog {
            len,
            filter: program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at `program`, which is alive for the call; the
        // kernel copies the filter and keeps no pointer to it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &prog as *const libc::sock_fprog,
            )
        };
        Errno::result(ret)?;
    }
    Ok(())
}

/// A system call made only to see what an installed filter answers.
///
/// The set is closed on purpose: a safe function taking any number and any
/// arguments could unmap memory or fork, so each probe has fixed arguments
/// that pass no pointers and change nothing. Without a filter every probe
/// fails inside the kernel with the errno named on its variant, so an EPERM
/// or ENOSYS seen instead came from seccomp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `clone3(NULL, 0)`: EINVAL (a size below `CLONE_ARGS_SIZE_VER0`).
    Clone3,
    /// `clone(flags | CLONE_SIGHAND, 0, 0, 0, 0)` with CLONE_VM taken out:
    /// EINVAL, because copy_process refuses CLONE_SIGHAND without CLONE_VM
    /// before it allocates anything, so this never creates a process.
    CloneRefused {
        /// The flags under test, e.g. a namespace flag.
        flags: u64,
    },
    /// `ioctl(-1, cmd, 0)`: EBADF, before the command is looked at.
    IoctlBadFd {
        /// The full 64-bit command register, upper bits included.
        cmd: u64,
    },
    /// `keyctl(0x7fffffff, 0, 0, 0, 0)`: EOPNOTSUPP (no such operation).
    Keyctl,
    /// `bpf(0x7fffffff, NULL, 0)`: EINVAL (no such command).
    Bpf,
    /// `ptrace(0x7fffffff, 0, 0, 0)`: ESRCH (pid 0 is nobody's tracee).
    Ptrace,
    /// `syslog(SYSLOG_ACTION_SIZE_BUFFER, NULL, 0)`: the log buffer's size,
    /// or EPERM under kernel.dmesg_restrict; it reads nothing.
    Syslog,
    /// `process_mrelease(-1, 0)`: EBADF. Neither allowed nor denied by the
    /// built-in lists, so a strict filter answers ENOSYS.
    ProcessMrelease,
    /// `getpid()`.
    Getpid,
    /// `getpid` through the x32 ABI (number | 0x40000000): ENOSYS, or the
    /// pid on kernels built with x32. The filters kill the process instead.
    #[cfg(target_arch = "x86_64")]
    X32Getpid,
}

/// Make the probe call; the return value or the errno.
pub fn probe(which: Probe) -> Result<i64, Errno> {
    // Every argument is word-sized: `syscall` is variadic, and a bare
    // integer literal would leave the register's upper half unspecified.
    const INVALID_OP: libc::c_long = 0x7fff_ffff;
    const SYSLOG_ACTION_SIZE_BUFFER: libc::c_long = 10;
    let ret = match which {
        // SAFETY: a NULL pointer with size 0; the kernel rejects the size
        // before it reads anything.
        Probe::Clone3 => unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) },
        Probe::CloneRefused { flags } => {
            let flags = (flags & !(libc::CLONE_VM as u64)) | libc::CLONE_SIGHAND as u64;
            // SAFETY: CLONE_SIGHAND without CLONE_VM is refused with EINVAL
            // before any task exists (see the variant), and the remaining
            // arguments are 0, so no memory is touched.
            unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) }
        }
        Probe::IoctlBadFd { cmd } => {
            // SAFETY: fd -1 fails with EBADF before the command or the NULL
            // argument are interpreted.
            unsafe { libc::syscall(libc::SYS_ioctl, -1 as libc::c_long, cmd, 0usize) }
        }
        // SAFETY: an unknown operation with integer arguments only.
        Probe::Keyctl => unsafe {
            libc::syscall(libc::SYS_keyctl, INVALID_OP, 0usize, 0usize, 0usize, 0usize)
        },
        // SAFETY: an unknown command; the NULL attribute pointer has size 0.
        Probe::Bpf => unsafe { libc::syscall(libc::SYS_bpf, INVALID_OP, 0usize, 0usize) },
        // SAFETY: an unknown request for pid 0, which cannot be a tracee.
        Probe::Ptrace => unsafe {
            libc::syscall(libc::SYS_ptrace, INVALID_OP, 0usize, 0usize, 0usize)
        },
        Probe::Syslog => {
            // SAFETY: SIZE_BUFFER only returns a number; the buffer is unused.
            unsafe { libc::syscall(libc::SYS_syslog, SYSLOG_ACTION_SIZE_BUFFER, 0usize, 0usize) }
        }
        Probe::ProcessMrelease => {
            // SAFETY: an invalid pidfd and no flags; nothing is read or written.
            unsafe { libc::syscall(libc::SYS_process_mrelease, -1 as libc::c_long, 0usize) }
        }
        // SAFETY: getpid takes no arguments and cannot fail.
        Probe::Getpid => unsafe { libc::syscall(libc::SYS_getpid) },
        #[cfg(target_arch = "x86_64")]
        Probe::X32Getpid => {
            const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
            // SAFETY: getpid under another ABI's number: no arguments, and
            // either ENOSYS or the pid.
            unsafe { libc::syscall(X32_SYSCALL_BIT | libc::SYS_getpid) }
        }
    };
    Errno::result(ret)
}
