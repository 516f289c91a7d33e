//! Landlock rules for the payload, applied after every mount (a
//! Landlock-restricted task can no longer mount) and before seccomp.
//!
//! The `landlock` crate's `path_beneath_rules` helper skips paths it cannot
//! open; here every path is opened explicitly and a missing one is an error,
//! so a rule the plan relies on can never silently vanish.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use landlock::{
    Access, AccessFs, BitFlags, LandlockStatus, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// The ABI whose rights this sandbox asks for: 5 adds device ioctls to the
/// filesystem rights; 6 adds scoping of abstract Unix sockets and signals,
/// which matters with `network = "host"`.
pub const TARGET_ABI: ABI = ABI::V6;
/// The same as a number, for messages.
pub const TARGET_ABI_NUMBER: u32 = 6;

/// What Landlock enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The ABI in effect (0 when unsupported).
    pub abi: u32,
    /// 0 not enforced, 1 partially, 2 fully.
    pub status: u8,
}

/// The Landlock access granted beneath a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockAccess {
    /// Read files, list directories, execute.
    ReadExec,
    /// Everything (project root, /tmp, write paths).
    ReadWrite,
    /// Read and write device files (the minimal /dev).
    Device,
    /// Create, open, list and remove message queues (the run's own
    /// mqueue filesystem at /dev/mqueue).
    MessageQueues,
    /// Read only (/proc).
    Read,
    /// List the directory only (the new root itself).
    List,
}

/// Why applying failed.
#[derive(Debug)]
pub struct Failure<'a> {
    /// The errno, when a system call failed.
    pub errno: nix::errno::Errno,
    /// The path involved, when there is one.
    pub path: &'a [u8],
}

fn rights(access: LandlockAccess, is_dir: bool) -> BitFlags<AccessFs> {
    let abi = ABI::V5;
    let wanted = match access {
        LandlockAccess::ReadExec => AccessFs::from_read(abi),
        LandlockAccess::ReadWrite => AccessFs::from_all(abi),
        // Truncate because a shell's `> /dev/null` opens with O_TRUNC.
        // IoctlDev because without it every ioctl on these devices fails
        // with EACCES where programs probe with TCGETS (isatty) and expect
        // ENOTTY. The minimal /dev holds null, zero, full, random and
        // urandom, whose ioctls are harmless or need CAP_SYS_ADMIN, and
        // terminals of the run's own: its devpts instance (ptmx, pts/N)
        // and tty, which opens only the caller's controlling terminal, one
        // of those ptys (TIOCSTI and TIOCLINUX stay refused by seccomp).
        LandlockAccess::Device => {
            AccessFs::ReadFile
                | AccessFs::WriteFile
                | AccessFs::ReadDir
                | AccessFs::Truncate
                | AccessFs::IoctlDev
        }
        // mq_open opens a queue for reading or writing (it creates through
        // the filesystem's own hook, which Landlock does not see); MakeReg
        // and RemoveFile are what `touch` and `rm` of a queue by path need.
        LandlockAccess::MessageQueues => {
            AccessFs::ReadFile
                | AccessFs::WriteFile
                | AccessFs::ReadDir
                | AccessFs::MakeReg
                | AccessFs::RemoveFile
        }
        LandlockAccess::Read => AccessFs::ReadFile | AccessFs::ReadDir,
        LandlockAccess::List => BitFlags::from(AccessFs::ReadDir),
    };
    if is_dir {
        wanted
    } else {
        // Directory rights on a file rule are rejected by the kernel.
        wanted & AccessFs::from_file(abi)
    }
}

fn errno_of(err: &(dyn std::error::Error + 'static)) -> nix::errno::Errno {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(code) = io.raw_os_error() {
                return nix::errno::Errno::from_raw(code);
            }
        }
        source = e.source();
    }
    nix::errno::Errno::EINVAL
}

/// Restrict the calling thread (and its future children) to `rules`.
pub fn apply(rules: &[(std::ffi::CString, LandlockAccess)]) -> Result<Applied, Failure<'_>> {
    let fail = |err: &(dyn std::error::Error + 'static), path: &'static [u8]| Failure {
        errno: errno_of(err),
        path,
    };
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI::V5))
        .map_err(|e| fail(&e, b"handle_access"))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|e| fail(&e, b"scope"))?
        .create()
        .map_err(|e| fail(&e, b"landlock_create_ruleset"))?;
    for (path, access) in rules {
        let path_ref = Path::new(OsStr::from_bytes(path.as_bytes()));
        let fd = PathFd::new(path_ref).map_err(|e| Failure {
            errno: errno_of(&e),
            path: path.to_bytes(),
        })?;
        // The opened object's own type: a second lookup by path costs a
        // walk and could meet another object than the one the rule holds.
        let is_dir = nix::sys::stat::fstat(std::os::fd::AsFd::as_fd(&fd))
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR);
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, rights(*access, is_dir)))
            .map_err(|e| Failure {
                errno: errno_of(&e),
                path: path.to_bytes(),
            })?;
    }
    let status = ruleset
        .restrict_self()
        .map_err(|e| fail(&e, b"landlock_restrict_self"))?;
    let abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => kernel_abi.map(|k| k as u32).unwrap_or(effective_abi as u32),
        _ => 0,
    };
    let status = match status.ruleset {
        RulesetStatus::FullyEnforced => 2,
        RulesetStatus::PartiallyEnforced => 1,
        RulesetStatus::NotEnforced => 0,
    };
    Ok(Applied { abi, status })
}

/// Text for a status code from [`Applied::status`].
pub fn status_name(status: u8) -> &'static str {
    match status {
        2 => "fully-enforced",
        1 => "partially-enforced",
        _ => "not-enforced",
    }
}

/// Why a status falls short, and the fix.
pub fn shortfall(abi: u32, status: u8) -> String {
    if abi == 0 {
        return "Landlock is not available on this kernel (needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK and `landlock` in the lsm= boot list); \
                use a profile with enforce.landlock = \"best-effort\" to run without it"
            .into();
    }
    format!(
        "Landlock is only {} here (kernel ABI {abi}; this sandbox's rules need ABI {TARGET_ABI_NUMBER}, Linux 6.12+): \
         upgrade the kernel, or use a profile with enforce.landlock = \"best-effort\"",
        status_name(status).replace('-', " ")
    )
}
