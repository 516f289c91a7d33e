//! Files the supervisor writes (the run's report, the audit log, the grant
//! store) where the sandboxed code may have been before.
//!
//! The supervisor often runs as root, and a report or audit path inside the
//! project is a name the payload can replace: with a symbolic link to
//! /etc/shadow (root would overwrite it), a FIFO (the supervisor would hang
//! in open), a directory, or a second hard link of a file elsewhere. So:
//!
//! - the parent directory is opened once, before the run starts, so the
//!   payload cannot swap it afterwards; inside a directory the sandboxed code
//!   can write (the project, the profile's write paths) every component is
//!   resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, since any
//!   link there may be one the payload planted in an earlier run;
//! - the file itself is opened beneath that directory with no link followed,
//!   `O_NONBLOCK` (a FIFO without reader fails at once instead of hanging the
//!   supervisor), then checked with `fstat` on the opened descriptor: only a
//!   regular file with a single link is written, and truncated only then;
//! - a file replaced whole (the grant store) is written to a fresh name
//!   created with `O_EXCL` and renamed over the old one within the same
//!   directory descriptor, so a link at either name is replaced, not followed.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{Mode, SFlag};

mod by_path;
pub use by_path::{create_new, open_append, open_read, open_read_append};

/// Why a file the supervisor writes could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum SafeFileError {
    /// The path names a directory, not a file.
    #[error("{path} names no file (it ends in `/`, `.` or `..`): give a file name")]
    NoFileName {
        /// The path as given.
        path: PathBuf,
    },
    /// The parent directory could not be opened.
    #[error(
        "opening the directory {dir} of {path}: {source}; create it first or choose another path"
    )]
    Parent {
        /// The directory.
        dir: PathBuf,
        /// The file path as given.
        path: PathBuf,
        /// The errno.
        source: Errno,
    },
    /// A component below a directory the sandbox can write is a symbolic link.
    #[error(
        "{path}: a directory on the way below {root} is a symbolic link or leaves it \
         (the sandboxed code can write there and may have planted it; links are not followed); \
         remove the link or choose a path outside {root}"
    )]
    LinkInWritableTree {
        /// The file path as given.
        path: PathBuf,
        /// The writable directory it is in.
        root: PathBuf,
    },
    /// The file is a symbolic link (or a magic link).
    #[error("{path} is a symbolic link, which is never followed for the supervisor's own files; remove it or choose another path")]
    Symlink {
        /// The file.
        path: PathBuf,
    },
    /// The file exists but is not a regular file.
    #[error("{path} is {kind}, not a regular file; remove it or choose another path")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is ("a directory", "a FIFO", ...).
        kind: &'static str,
    },
    /// The file has more than one name.
    #[error("{path} has {links} hard links: writing it would change every other name of the same file, which may lie outside the project; remove it or choose another path")]
    HardLinked {
        /// The file.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
    /// A directory the supervisor keeps private is someone else's or open
    /// to others.
    #[error(
        "{path}: {problem}; remove it (the daemon creates it again) or choose another directory"
    )]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// Who owns it or what its mode lets others do.
        problem: String,
    },
    /// Any other failure of a system call on the file.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl SafeFileError {
    /// Whether nothing was at the path (a file made on first use).
    pub fn is_not_found(&self) -> bool {
        matches!(self, SafeFileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Directory `name` in the open directory `parent`, created with `mode`
/// when missing, opened without following any symlink, and refused unless
/// it is a directory owned by this process's user or by `owner`, and
/// writable by no one else; then given to `owner` through the open fd.
/// For state kept where others can create names (a daemon's socket
/// directory): a planted symlink would make a path-based `chown` hand its
/// target to the caller, and a planted directory would let its planter
/// swap what is inside.
pub fn private_dir(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &str,
    mode: u32,
    owner: Option<u32>,
    shown: &Path,
) -> Result<OwnedFd, SafeFileError> {
    let io = |op: &'static str| {
        move |errno: Errno| SafeFileError::Io {
            op,
            path: shown.to_path_buf(),
            source: errno.into(),
        }
    };
    match nix::sys::stat::mkdirat(parent, name, Mode::from_bits_truncate(mode)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => return Err(io("creating")(errno)),
    }
    let spec = Beneath::new(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC).no_symlinks();
    let dir = openat2_beneath(parent, Path::new(name), spec).map_err(|errno| match errno {
        Errno::ELOOP => SafeFileError::Symlink {
            path: shown.to_path_buf(),
        },
        Errno::ENOTDIR => SafeFileError::NotRegular {
            path: shown.to_path_buf(),
            kind: "no directory",
        },
        errno => io("opening")(errno),
    })?;
    let stat = nix::sys::stat::fstat(&dir).map_err(io("stat"))?;
    let me = nix::unistd::geteuid().as_raw();
    if stat.st_uid != me && Some(stat.st_uid) != owner {
        return Err(SafeFileError::NotPrivate {
            path: shown.to_path_buf(),
            problem: format!("owned by uid {}, not by uid {me}", stat.st_uid),
        });
    }
    if stat.st_mode & 0o022 != 0 {
        return Err(SafeFileError::NotPrivate {
            path: shown.to_path_buf(),
            problem: format!("others can write it (mode {:o})", stat.st_mode & 0o7777),
        });
    }
    if let Some(uid) = owner.filter(|uid| *uid != stat.st_uid) {
        nix::unistd::fchown(&dir, Some(nix::unistd::Uid::from_raw(uid)), None)
            .map_err(io("chown"))?;
    }
    Ok(dir)
}

/// A file the supervisor will write, whose directory is already open.
#[derive(Debug)]
pub struct OutputTarget {
    dir: OwnedFd,
    name: OsString,
    path: PathBuf,
    inside: Option<PathBuf>,
}

/// What to open beneath a directory: `openat2` with `RESOLVE_BENEATH |
/// RESOLVE_NO_MAGICLINKS`, plus `RESOLVE_NO_SYMLINKS` when `no_symlinks`.
#[derive(Debug, Clone, Copy)]
pub struct Beneath {
    /// Open flags (O_CLOEXEC is the caller's to add).
    pub flags: OFlag,
    /// Mode for O_CREAT.
    pub mode: Mode,
    /// Refuse every symlink on the way, not only those leading out.
    pub no_symlinks: bool,
}

impl Beneath {
    /// `flags`, no mode, symlinks beneath followed.
    pub fn new(flags: OFlag) -> Beneath {
        Beneath {
            flags,
            mode: Mode::empty(),
            no_symlinks: false,
        }
    }

    /// With `mode` for a created file.
    pub fn mode(self, mode: Mode) -> Beneath {
        Beneath { mode, ..self }
    }

    /// Refusing every symlink.
    pub fn no_symlinks(self) -> Beneath {
        Beneath {
            no_symlinks: true,
            ..self
        }
    }

    fn how(self) -> OpenHow {
        let mut resolve = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS;
        if self.no_symlinks {
            resolve |= ResolveFlag::RESOLVE_NO_SYMLINKS;
        }
        OpenHow::new()
            .flags(self.flags)
            .mode(self.mode)
            .resolve(resolve)
    }
}

/// Open `path` beneath `dir`. With `openat2`, retried on EAGAIN: with
/// `RESOLVE_BENEATH` the kernel answers EAGAIN when a rename anywhere raced
/// the lookup, and a payload renaming things in a loop must not make the
/// supervisor fail to open its own file (or the broker a request's). Bounded,
/// so a rename storm cannot stall either.
///
/// Where `openat2` answers ENOSYS (inside another sandbox or container whose
/// seccomp filter cannot inspect its mode and refuses it), the path is walked
/// one component at a time with `O_NOFOLLOW`, refusing `..`, absolute paths
/// and every symlink (ELOOP): stricter than `openat2`, never looser.
pub fn openat2_beneath(
    dir: std::os::fd::BorrowedFd<'_>,
    path: &Path,
    spec: Beneath,
) -> nix::Result<OwnedFd> {
    let mut attempt = 0;
    loop {
        match nix::fcntl::openat2(dir, path, spec.how()) {
            Err(Errno::EAGAIN) if attempt < 64 => attempt += 1,
            Err(Errno::ENOSYS) => return open_by_components(dir, path, spec),
            other => return other,
        }
    }
}

fn open_by_components(
    dir: std::os::fd::BorrowedFd<'_>,
    path: &Path,
    spec: Beneath,
) -> nix::Result<OwnedFd> {
    use std::path::Component;
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            Component::RootDir | Component::ParentDir | Component::Prefix(_) => {
                return Err(Errno::EXDEV)
            }
        }
    }
    let Some((last, parents)) = names.split_last() else {
        return nix::fcntl::openat(dir, ".", spec.flags | OFlag::O_NOFOLLOW, spec.mode);
    };
    let mut current: Option<OwnedFd> = None;
    for name in parents {
        let base = current.as_ref().map_or(dir, |fd| fd.as_fd());
        let next = nix::fcntl::openat(
            base,
            *name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let kind = SFlag::from_bits_truncate(nix::sys::stat::fstat(next.as_fd())?.st_mode);
        if (kind & SFlag::S_IFMT) == SFlag::S_IFLNK {
            return Err(Errno::ELOOP);
        }
        if (kind & SFlag::S_IFMT) != SFlag::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        current = Some(next);
    }
    let base = current.as_ref().map_or(dir, |fd| fd.as_fd());
    let fd = nix::fcntl::openat(base, *last, spec.flags | OFlag::O_NOFOLLOW, spec.mode)?;
    // O_PATH | O_NOFOLLOW opens a symlink itself instead of failing.
    let kind = SFlag::from_bits_truncate(nix::sys::stat::fstat(fd.as_fd())?.st_mode);
    if (kind & SFlag::S_IFMT) == SFlag::S_IFLNK {
        return Err(Errno::ELOOP);
    }
    Ok(fd)
}

fn open_dir_plain(dir: &Path, path: &Path) -> Result<OwnedFd, SafeFileError> {
    nix::fcntl::open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| SafeFileError::Parent {
        dir: dir.to_path_buf(),
        path: path.to_path_buf(),
        source,
    })
}

fn kind_of(mode: libc::mode_t) -> &'static str {
    match SFlag::from_bits_truncate(mode & libc::S_IFMT) {
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFLNK => "a symbolic link",
        _ => "not a regular file",
    }
}

impl OutputTarget {
    /// Open the directory of `path` now (before the run starts).
    /// `writable_roots` are the host directories the sandboxed code can
    /// write; below them no symbolic link is followed.
    pub fn prepare(path: &Path, writable_roots: &[PathBuf]) -> Result<OutputTarget, SafeFileError> {
        let io = |op, source| SafeFileError::Io {
            op,
            path: path.to_path_buf(),
            source,
        };
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            // getcwd names the real directory, without links.
            std::env::current_dir()
                .map_err(|e| io("finding the current directory for", e))?
                .join(path)
        };
        let (Some(parent), Some(name)) = (absolute.parent(), absolute.file_name()) else {
            return Err(SafeFileError::NoFileName {
                path: path.to_path_buf(),
            });
        };
        // The outermost writable root holding the path: every component
        // below it is checked.
        let root = writable_roots
            .iter()
            .filter_map(|root| std::fs::canonicalize(root).ok())
            .filter(|root| parent.starts_with(root))
            .min_by_key(|root| root.components().count());
        let dir = match &root {
            Some(root) => {
                let root_fd = open_dir_plain(root, path)?;
                let below = parent.strip_prefix(root).unwrap_or(Path::new(""));
                let below = if below.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    below
                };
                let how = Beneath::new(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
                    .no_symlinks();
                openat2_beneath(root_fd.as_fd(), below, how).map_err(|errno| match errno {
                    Errno::ELOOP | Errno::EXDEV => SafeFileError::LinkInWritableTree {
                        path: path.to_path_buf(),
                        root: root.clone(),
                    },
                    source => SafeFileError::Parent {
                        dir: parent.to_path_buf(),
                        path: path.to_path_buf(),
                        source,
                    },
                })?
            }
            None => open_dir_plain(parent, path)?,
        };
        // Where the directory really is (a link outside the writable roots
        // may still lead into one), for the warning.
        let real = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&dir)
        ))
        .unwrap_or_else(|_| parent.to_path_buf());
        let inside = writable_roots
            .iter()
            .filter_map(|root| std::fs::canonicalize(root).ok())
            .find(|root| real.starts_with(root));
        Ok(OutputTarget {
            dir,
            name: name.to_os_string(),
            path: path.to_path_buf(),
            inside,
        })
    }

    /// The writable directory the file lies in, if any: the sandboxed code
    /// can delete or replace the file there (it is still never followed).
    pub fn inside_writable(&self) -> Option<&Path> {
        self.inside.as_deref()
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open(&self, append: bool) -> Result<File, SafeFileError> {
        let path = || self.path.clone();
        let mut flags = OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        if append {
            flags |= OFlag::O_APPEND;
        }
        let how = Beneath::new(flags)
            .mode(Mode::from_bits_truncate(0o666))
            .no_symlinks();
        let fd = openat2_beneath(self.dir.as_fd(), Path::new(&self.name), how)
            .map_err(|errno| open_error(errno, &self.path))?;
        let file = regular_file(fd, &self.path, Links::One)?;
        if !append {
            nix::unistd::ftruncate(file.as_fd(), 0).map_err(|source| SafeFileError::Io {
                op: "truncating",
                path: path(),
                source: source.into(),
            })?;
        }
        Ok(file)
    }

    /// Open for appending (the audit log), creating the file if needed.
    pub fn open_append(&self) -> Result<File, SafeFileError> {
        self.open(true)
    }

    /// Replace the file's content with `bytes` (the report).
    pub fn write_all(&self, bytes: &[u8]) -> Result<(), SafeFileError> {
        let mut file = self.open(false)?;
        file.write_all(bytes).map_err(|source| SafeFileError::Io {
            op: "writing",
            path: self.path.clone(),
            source,
        })
    }
}

/// What an `open` of a supervisor's file answered, named: a link at the
/// name (ELOOP under `O_NOFOLLOW`), a directory, a FIFO or socket that
/// `O_NONBLOCK` turned away.
fn open_error(errno: Errno, path: &Path) -> SafeFileError {
    match errno {
        Errno::ELOOP => SafeFileError::Symlink {
            path: path.to_path_buf(),
        },
        Errno::EISDIR => SafeFileError::NotRegular {
            path: path.to_path_buf(),
            kind: "a directory",
        },
        // O_NONBLOCK | O_WRONLY on a FIFO without a reader, or a socket.
        Errno::ENXIO => SafeFileError::NotRegular {
            path: path.to_path_buf(),
            kind: "a FIFO or socket",
        },
        source => SafeFileError::Io {
            op: "opening",
            path: path.to_path_buf(),
            source: source.into(),
        },
    }
}

/// How many names a file opened for a supervisor may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Links {
    /// Exactly one: writing a second name of a file elsewhere would change
    /// that file too.
    One,
    /// Any number: only read, or the caller's directory is its own.
    Any,
}

/// The opened descriptor as a file, if `fstat` on it says it is a regular
/// file (with a single name when `links` asks), and blocking again: it
/// was opened `O_NONBLOCK` only so a FIFO could not hang the open.
fn regular_file(fd: OwnedFd, path: &Path, links: Links) -> Result<File, SafeFileError> {
    let stat = nix::sys::stat::fstat(fd.as_fd()).map_err(|source| SafeFileError::Io {
        op: "inspecting",
        path: path.to_path_buf(),
        source: source.into(),
    })?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(SafeFileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(stat.st_mode),
        });
    }
    if links == Links::One && stat.st_nlink > 1 {
        return Err(SafeFileError::HardLinked {
            path: path.to_path_buf(),
            links: stat.st_nlink as u64,
        });
    }
    let keep =
        OFlag::from_bits_truncate(nix::fcntl::fcntl(fd.as_fd(), FcntlArg::F_GETFL).unwrap_or(0))
            & !OFlag::O_NONBLOCK;
    let _ = nix::fcntl::fcntl(fd.as_fd(), FcntlArg::F_SETFL(keep));
    Ok(File::from(fd))
}

/// Open the audit log for appending before the run starts, warning when
/// it lies where the sandboxed code can write.
pub fn open_audit(
    path: &Path,
    project: &Path,
    write_paths: &[PathBuf],
    warnings: &mut Vec<String>,
) -> Result<File, SafeFileError> {
    let mut roots = vec![project.to_path_buf()];
    roots.extend(write_paths.iter().cloned());
    let target = OutputTarget::prepare(path, &roots)?;
    if let Some(root) = target.inside_writable() {
        warnings.push(inside_warning("audit log", path, root));
    }
    target.open_append()
}

/// The warning for a supervisor's file the sandboxed code could delete or
/// replace between runs.
pub fn inside_warning(what: &str, path: &Path, root: &Path) -> String {
    format!(
        "the {what} {} is inside {}, which the sandboxed command can write: it may delete or replace \
         the file (it is never followed through a link and is refused if it is not a plain file); \
         prefer a path outside",
        path.display(),
        root.display()
    )
}

/// The directory the supervisor keeps its user's own state in (grants,
/// notices): `$SANDBOX_STATE_DIR`, else `$XDG_STATE_HOME/sandbox`, else
/// `~/.local/state/sandbox`, else `/var/lib/sandbox`.
pub fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SANDBOX_STATE_DIR") {
        return PathBuf::from(dir);
    }
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/var/lib"))
        .join("sandbox")
}

/// The directory a file named by `path` lives in (`.` for a bare name)
/// and its name; a path with no file name (`/`, `..`) is an error.
fn directory_and_name(path: &Path) -> Result<(&Path, &std::ffi::OsStr), SafeFileError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(SafeFileError::NoFileName {
            path: path.to_path_buf(),
        });
    };
    if parent.as_os_str().is_empty() {
        Ok((Path::new("."), name))
    } else {
        Ok((parent, name))
    }
}

/// Create an empty file at `path` (its directory too) unless something is
/// there already: true when this call created it. A marker whose existence
/// is all that counts: `O_CREAT | O_EXCL` beneath the opened directory, so
/// an existing name, a symbolic link included, is left alone and never
/// followed, and of two callers at once exactly one gets true.
pub fn create_marker(path: &Path) -> Result<bool, SafeFileError> {
    let (parent, name) = directory_and_name(path)?;
    std::fs::create_dir_all(parent).map_err(|source| SafeFileError::Io {
        op: "creating the directory of",
        path: path.to_path_buf(),
        source,
    })?;
    let dir = open_dir_plain(parent, path)?;
    let how = Beneath::new(
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
    )
    .mode(Mode::from_bits_truncate(0o600))
    .no_symlinks();
    match openat2_beneath(dir.as_fd(), Path::new(name), how) {
        Ok(_) => Ok(true),
        Err(Errno::EEXIST) => Ok(false),
        Err(source) => Err(SafeFileError::Io {
            op: "creating",
            path: path.to_path_buf(),
            source: source.into(),
        }),
    }
}

/// Replace the file at `path` whole with `bytes`, readable by the owner
/// only: written to a fresh name (`O_CREAT | O_EXCL`, so no link is
/// followed) in the same directory and renamed over the old file, so a
/// crash never leaves half a file and a link at `path` is replaced, not
/// written through.
pub fn replace(path: &Path, bytes: &[u8]) -> Result<(), SafeFileError> {
    let (dir, temporary, name) = write_temporary(path, bytes)?;
    nix::fcntl::renameat(dir.as_fd(), temporary.as_os_str(), dir.as_fd(), name)
        .map_err(|e| drop_temporary(&dir, &temporary, path, "replacing", e))
}

/// Create the file at `path` whole with `bytes`, readable by the owner
/// only, unless something is there already: true when this call created
/// it. Written as [`replace`] writes, then given its name without
/// replacing (`RENAME_NOREPLACE`): of two callers at once exactly one
/// creates it, and no caller, nor a crash, ever leaves the name on an
/// empty or partial file for another to read.
pub fn create_whole(path: &Path, bytes: &[u8]) -> Result<bool, SafeFileError> {
    let (dir, temporary, name) = write_temporary(path, bytes)?;
    match nix::fcntl::renameat2(
        dir.as_fd(),
        temporary.as_os_str(),
        dir.as_fd(),
        name,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => Ok(true),
        Err(errno) => {
            let err = drop_temporary(&dir, &temporary, path, "creating", errno);
            if errno == Errno::EEXIST {
                Ok(false)
            } else {
                Err(err)
            }
        }
    }
}

/// `bytes` written and synced to a fresh name beside `path`: the opened
/// directory, that name, and `path`'s own name.
fn write_temporary<'p>(
    path: &'p Path,
    bytes: &[u8],
) -> Result<(OwnedFd, OsString, &'p OsStr), SafeFileError> {
    let (parent, name) = directory_and_name(path)?;
    let dir = open_dir_plain(parent, path)?;
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{}.tmp", std::process::id()));
    // Two threads of one process would share the pid's name.
    temporary.push(format!(".{}", next_temporary()));
    let io = |op, source: Errno| SafeFileError::Io {
        op,
        path: path.to_path_buf(),
        source: source.into(),
    };
    let how = || {
        Beneath::new(
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        )
        .mode(Mode::from_bits_truncate(0o600))
        .no_symlinks()
    };
    let fd = match openat2_beneath(dir.as_fd(), Path::new(&temporary), how()) {
        // A leftover of a crashed writer with this pid: it is ours to remove.
        Err(Errno::EEXIST) => {
            nix::unistd::unlinkat(
                dir.as_fd(),
                temporary.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )
            .map_err(|e| io("removing a stale temporary file next to", e))?;
            openat2_beneath(dir.as_fd(), Path::new(&temporary), how())
        }
        other => other,
    }
    .map_err(|e| io("creating a temporary file next to", e))?;
    let mut file = File::from(fd);
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(source) = written {
        let _ = nix::unistd::unlinkat(
            dir.as_fd(),
            temporary.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        return Err(SafeFileError::Io {
            op: "writing",
            path: path.to_path_buf(),
            source,
        });
    }
    Ok((dir, temporary, name))
}

/// A number no other temporary of this process has.
fn next_temporary() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Remove the temporary after `op` failed with `errno`: the error to return.
fn drop_temporary(
    dir: &OwnedFd,
    temporary: &OsStr,
    path: &Path,
    op: &'static str,
    errno: Errno,
) -> SafeFileError {
    let _ = nix::unistd::unlinkat(
        dir.as_fd(),
        temporary,
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
    SafeFileError::Io {
        op,
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk used where openat2 is refused (ENOSYS under an outer
    /// sandbox's filter) never leaves the directory and follows no link.
    #[test]
    fn the_component_walk_stays_beneath_and_follows_no_symlink() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/b")).unwrap();
        std::fs::write(root.path().join("a/b/file"), "ok").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("a/out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("a/leak"))
            .unwrap();
        std::os::unix::fs::symlink("b", root.path().join("a/inner")).unwrap();
        let dir = nix::fcntl::open(
            root.path(),
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let read = Beneath::new(OFlag::O_RDONLY | OFlag::O_CLOEXEC);
        let opened = open_by_components(dir.as_fd(), Path::new("a/./b/file"), read).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut File::from(opened), &mut text).unwrap();
        assert_eq!(text, "ok");
        for (path, errno) in [
            ("a/out/secret", Errno::ELOOP),
            ("a/leak", Errno::ELOOP),
            ("a/inner/file", Errno::ELOOP),
            ("a/../../etc/passwd", Errno::EXDEV),
            ("/etc/passwd", Errno::EXDEV),
            ("a/b/file/x", Errno::ENOTDIR),
        ] {
            assert_eq!(
                open_by_components(dir.as_fd(), Path::new(path), read).err(),
                Some(errno),
                "{path}"
            );
        }
        let link_itself = Beneath::new(OFlag::O_PATH | OFlag::O_CLOEXEC);
        assert_eq!(
            open_by_components(dir.as_fd(), Path::new("a/leak"), link_itself).err(),
            Some(Errno::ELOOP)
        );
        let create =
            Beneath::new(OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC)
                .mode(Mode::from_bits_truncate(0o600));
        assert!(open_by_components(dir.as_fd(), Path::new("a/b/new"), create).is_ok());
        assert!(root.path().join("a/b/new").exists());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).unwrap(),
            "s"
        );
    }

    #[test]
    fn links_fifos_and_directories_are_refused_and_their_targets_untouched() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let canary = outside.path().join("canary");
        std::fs::write(&canary, "canary").unwrap();
        let roots = [root.path().to_path_buf()];

        let link = root.path().join("link.json");
        std::os::unix::fs::symlink(&canary, &link).unwrap();
        let err = OutputTarget::prepare(&link, &roots)
            .unwrap()
            .write_all(b"x")
            .unwrap_err();
        assert!(matches!(err, SafeFileError::Symlink { .. }), "{err}");

        let fifo = root.path().join("fifo.json");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let err = OutputTarget::prepare(&fifo, &roots)
            .unwrap()
            .write_all(b"x")
            .unwrap_err();
        assert!(matches!(err, SafeFileError::NotRegular { .. }), "{err}");

        let dir = root.path().join("dir.json");
        std::fs::create_dir(&dir).unwrap();
        let err = OutputTarget::prepare(&dir, &roots)
            .unwrap()
            .open_append()
            .unwrap_err();
        assert!(matches!(err, SafeFileError::NotRegular { .. }), "{err}");

        let hard = root.path().join("hard.json");
        std::fs::hard_link(&canary, &hard).unwrap();
        let err = OutputTarget::prepare(&hard, &roots)
            .unwrap()
            .write_all(b"x")
            .unwrap_err();
        assert!(
            matches!(err, SafeFileError::HardLinked { links: 2, .. }),
            "{err}"
        );

        std::os::unix::fs::symlink(outside.path(), root.path().join("up")).unwrap();
        let err = OutputTarget::prepare(&root.path().join("up/canary"), &roots).unwrap_err();
        assert!(
            matches!(err, SafeFileError::LinkInWritableTree { .. }),
            "{err}"
        );

        assert_eq!(std::fs::read_to_string(&canary).unwrap(), "canary");

        let plain = OutputTarget::prepare(&root.path().join("report.json"), &roots).unwrap();
        assert!(plain.inside_writable().is_some());
        plain.write_all(b"first, longer").unwrap();
        plain.write_all(b"second").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("report.json")).unwrap(),
            "second"
        );
    }

    #[test]
    fn replace_swaps_a_link_instead_of_writing_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("canary");
        std::fs::write(&canary, "canary").unwrap();
        let store = dir.path().join("grants.json");
        std::os::unix::fs::symlink(&canary, &store).unwrap();
        let temporary = dir
            .path()
            .join(format!(".grants.json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&canary, &temporary).unwrap();
        replace(&store, b"[]").unwrap();
        assert_eq!(std::fs::read_to_string(&canary).unwrap(), "canary");
        assert_eq!(std::fs::read_to_string(&store).unwrap(), "[]");
        assert!(!std::fs::symlink_metadata(&store)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn a_marker_is_created_once_and_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("notices/seen");
        assert!(create_marker(&marker).unwrap());
        assert!(!create_marker(&marker).unwrap());
        let target = dir.path().join("target");
        let link = dir.path().join("notices/linked");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(!create_marker(&link).unwrap());
        assert!(!target.exists(), "created through the link");
        assert!(matches!(
            create_marker(Path::new("/")),
            Err(SafeFileError::NoFileName { .. })
        ));
    }

    #[test]
    fn a_private_dir_never_follows_a_planted_link_or_takes_a_shared_one() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let parent = File::open(tmp.path()).unwrap();
        let target = tmp.path().join("target");
        std::fs::write(&target, "x").unwrap();
        let owner_before = std::fs::metadata(&target).unwrap().uid();
        std::os::unix::fs::symlink("target", tmp.path().join("planted")).unwrap();
        let someone_else = owner_before + 1;
        let planted = private_dir(
            parent.as_fd(),
            "planted",
            0o700,
            Some(someone_else),
            &tmp.path().join("planted"),
        );
        assert!(
            matches!(planted, Err(SafeFileError::Symlink { .. })),
            "{planted:?}"
        );
        assert_eq!(std::fs::metadata(&target).unwrap().uid(), owner_before);
        std::fs::create_dir(tmp.path().join("shared")).unwrap();
        std::fs::set_permissions(
            tmp.path().join("shared"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let shared = private_dir(parent.as_fd(), "shared", 0o700, None, Path::new("shared"));
        assert!(
            matches!(shared, Err(SafeFileError::NotPrivate { .. })),
            "{shared:?}"
        );
        let fresh = private_dir(parent.as_fd(), "fresh", 0o700, None, Path::new("fresh"));
        assert!(fresh.is_ok(), "{fresh:?}");
        assert!(tmp.path().join("fresh").is_dir());
    }
}
