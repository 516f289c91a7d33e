//! Installing seccomp filters compiled by [`crate::seccomp`], and fixed probe
//! calls that check an installed filter from the inside.

use nix::errno::Errno;

/// Set no_new_privs and install each BPF program, in order.
pub fn install_filters(programs: &[Vec<libc::sock_filter>]) -> nix::Result<()> {
    nix::sys::prctl::set_no_new_privs()?;
    for program in programs {
        set_mode_filter(program, 0)?;
    }
    Ok(())
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, program)`: the kernel's
/// answer (a new descriptor with `SECCOMP_FILTER_FLAG_NEW_LISTENER`).
/// no_new_privs must be set already.
pub(super) fn set_mode_filter(
    program: &[libc::sock_filter],
    flags: libc::c_ulong,
) -> nix::Result<libc::c_long> {
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
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    Errno::result(ret)
}

// The probes below check an installed filter from the inside; only the
// workspace's tests (tests/seccomp_filter.rs) make them.
#[cfg(feature = "test-internals")]
pub use probes::*;

#[cfg(feature = "test-internals")]
mod probes {
    use nix::errno::Errno;

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
        /// A call that takes a file mode, made so that it fails before the
        /// kernel looks at the mode: a NULL path (EFAULT) or fd -1 (EBADF, for
        /// fchmod). Nothing is created or changed.
        Mode {
            /// Which call.
            call: ModeCall,
            /// The full 64-bit open flags register (open and openat only).
            flags: u64,
            /// The full 64-bit mode register, upper bits included.
            mode: u64,
        },
        /// `openat2(-1, NULL, NULL, 0)`: EINVAL (a size below OPEN_HOW_SIZE_VER0).
        Openat2,
        /// `socket(family, 15, protocol)`: EINVAL for every family the kernel
        /// numbers (type 15 is beyond SOCK_MAX, checked after the family's
        /// range and before any socket exists).
        Socket {
            /// The full 64-bit family register.
            family: u64,
            /// The full 64-bit protocol register.
            protocol: u64,
        },
        /// `socketpair(family, SOCK_STREAM, 0, NULL)`: EFAULT, storing the
        /// first descriptor number fails before a socket is created.
        Socketpair {
            /// The full 64-bit family register.
            family: u64,
        },
        /// `personality(persona)`, then the old persona is put back at once:
        /// the previous persona when allowed. Only for processes that run no
        /// other thread meanwhile.
        Personality {
            /// The full 64-bit persona register.
            persona: u64,
        },
        /// `getpid()`.
        Getpid,
        /// `getpid` through the x32 ABI (number | 0x40000000): ENOSYS, or the
        /// pid on kernels built with x32. The filters kill the process instead.
        #[cfg(target_arch = "x86_64")]
        X32Getpid,
    }

    /// The calls [`Probe::Mode`] can make.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ModeCall {
        /// `chmod(NULL, mode)`.
        Chmod,
        /// `fchmod(-1, mode)`.
        Fchmod,
        /// `fchmodat(AT_FDCWD, NULL, mode)`.
        Fchmodat,
        /// `fchmodat2(AT_FDCWD, NULL, mode, 0)`.
        Fchmodat2,
        /// `creat(NULL, mode)`.
        Creat,
        /// `open(NULL, flags, mode)`.
        Open,
        /// `openat(AT_FDCWD, NULL, flags, mode)`.
        Openat,
        /// `mknod(NULL, mode, 0)`.
        Mknod,
        /// `mknodat(AT_FDCWD, NULL, mode, 0)`.
        Mknodat,
        /// `mkdir(NULL, mode)`.
        Mkdir,
        /// `mkdirat(AT_FDCWD, NULL, mode)`.
        Mkdirat,
    }

    impl ModeCall {
        /// Every call.
        pub const ALL: [ModeCall; 11] = [
            ModeCall::Chmod,
            ModeCall::Fchmod,
            ModeCall::Fchmodat,
            ModeCall::Fchmodat2,
            ModeCall::Creat,
            ModeCall::Open,
            ModeCall::Openat,
            ModeCall::Mknod,
            ModeCall::Mknodat,
            ModeCall::Mkdir,
            ModeCall::Mkdirat,
        ];
    }

    fn mode_call(call: ModeCall, flags: u64, mode: u64) -> libc::c_long {
        const NULL: usize = 0;
        let cwd = libc::AT_FDCWD as libc::c_long;
        let bad_fd = -1 as libc::c_long;
        // SAFETY: in every arm the path is NULL, which the kernel rejects with
        // EFAULT when it copies the name in, before the mode is used; fchmod
        // gets fd -1, rejected with EBADF. No pointer is dereferenced here.
        unsafe {
            match call {
                ModeCall::Chmod => libc::syscall(libc::SYS_chmod, NULL, mode),
                ModeCall::Fchmod => libc::syscall(libc::SYS_fchmod, bad_fd, mode),
                ModeCall::Fchmodat => libc::syscall(libc::SYS_fchmodat, cwd, NULL, mode),
                ModeCall::Fchmodat2 => libc::syscall(libc::SYS_fchmodat2, cwd, NULL, mode, 0usize),
                ModeCall::Creat => libc::syscall(libc::SYS_creat, NULL, mode),
                ModeCall::Open => libc::syscall(libc::SYS_open, NULL, flags, mode),
                ModeCall::Openat => libc::syscall(libc::SYS_openat, cwd, NULL, flags, mode),
                ModeCall::Mknod => libc::syscall(libc::SYS_mknod, NULL, mode, 0usize),
                ModeCall::Mknodat => libc::syscall(libc::SYS_mknodat, cwd, NULL, mode, 0usize),
                ModeCall::Mkdir => libc::syscall(libc::SYS_mkdir, NULL, mode),
                ModeCall::Mkdirat => libc::syscall(libc::SYS_mkdirat, cwd, NULL, mode),
            }
        }
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
                unsafe {
                    libc::syscall(libc::SYS_syslog, SYSLOG_ACTION_SIZE_BUFFER, 0usize, 0usize)
                }
            }
            Probe::ProcessMrelease => {
                // SAFETY: an invalid pidfd and no flags; nothing is read or written.
                unsafe { libc::syscall(libc::SYS_process_mrelease, -1 as libc::c_long, 0usize) }
            }
            Probe::Mode { call, flags, mode } => mode_call(call, flags, mode),
            // SAFETY: NULL pointers with size 0; the size is refused first.
            Probe::Openat2 => unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    -1 as libc::c_long,
                    0usize,
                    0usize,
                    0usize,
                )
            },
            Probe::Socket { family, protocol } => {
                const BEYOND_SOCK_MAX: libc::c_long = 15;
                // SAFETY: integer arguments only; the type is refused before a
                // socket exists.
                unsafe { libc::syscall(libc::SYS_socket, family, BEYOND_SOCK_MAX, protocol) }
            }
            Probe::Socketpair { family } => {
                let stream = libc::SOCK_STREAM as libc::c_long;
                // SAFETY: the NULL result array makes the kernel fail with EFAULT
                // before it creates a socket; nothing is written here.
                unsafe { libc::syscall(libc::SYS_socketpair, family, stream, 0usize, 0usize) }
            }
            Probe::Personality { persona } => {
                // SAFETY: personality takes an integer and returns one.
                let old = unsafe { libc::syscall(libc::SYS_personality, persona) };
                if old >= 0 {
                    // SAFETY: as above; puts the previous persona back.
                    unsafe { libc::syscall(libc::SYS_personality, old) };
                }
                old
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
}
