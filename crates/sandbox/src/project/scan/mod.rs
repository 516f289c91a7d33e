//! One walk over the project before a run: secrets to mask, protected
//! entries to make read-only (and the ancestors to pin), and files hard-linked
//! to something outside the project.
//!
//! The walk works on directory descriptors opened with `O_NOFOLLOW`, never
//! re-resolving a path string, and stats only regular files (for their link
//! count) and entries whose type the directory does not report.
//!
//! A run's own walk keeps nothing for the next run. A directory's ctime
//! would tell which names changed, but a hard link made outside the project
//! to a file inside it changes only that file's link count and ctime: no
//! directory of the project, and not even an inotify watch on the file's
//! directory, sees it. Only a `stat` of every file answers for that, and it
//! is most of the walk's time (about 2 µs a file on a loaded 2-core
//! machine, against 0.5 µs for listing it). A long-lived watcher
//! ([`super::watcher`]) holds a watch on every file, and with it a walk
//! kept per directory ([`Walked`]): when watches report changes, only the
//! directories they name are walked again. What the walk records also
//! serves the sweep after the same run ([`ListedDir`]).

mod assemble;
#[cfg(test)]
mod tests;
mod walker;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use serde::{Deserialize, Serialize};

use super::{HardlinkPolicy, Rules};

/// Most mounts a scan may add to a run's view. Each costs init a few
/// microseconds and the kernel a little memory; far beyond this a project is
/// better served by fixing the tree (the error says how) than by a view of
/// thousands of mounts.
pub const MAX_SCAN_MOUNTS: usize = 4096;

/// Deepest directory nesting walked: deeper is a loop (a bind mount of an
/// ancestor) or an attack, and the run is refused rather than half-scanned.
const MAX_DEPTH: usize = 256;

/// How a scan can fail. Every failure refuses the run: a half-scanned tree
/// could leave a secret readable or a hook writable.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// A directory or entry could not be read.
    #[error("scanning the project: {path}: {source}; the run does not start without knowing what is below it (secrets, protected files, hard links): make it readable to you, or run from a narrower --project")]
    Read {
        /// The path below the project root.
        path: PathBuf,
        /// The errno.
        source: Errno,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("scanning the project: {path} is nested more than {MAX_DEPTH} directories deep (a bind-mount loop?); pass a narrower --project")]
    TooDeep {
        /// Where the walk stopped.
        path: PathBuf,
    },
    /// Files hard-linked outside the project, under `hardlinks = "refuse"`
    /// or beyond what can be made read-only.
    #[error("{count} file(s) in the project are hard links to files outside it, so a write through them would change the outside file: {examples}{more}. Fix: replace them with copies (for pnpm: `package-import-method=copy`; for git: clone without --local), run with a narrower --project, or set `[filesystem] hardlinks = \"allow\"` in a profile if you accept the risk")]
    OutsideLinks {
        /// How many.
        count: usize,
        /// The first few, comma-separated.
        examples: String,
        /// ", ..." when there are more.
        more: &'static str,
    },
    /// The view would need more than [`MAX_SCAN_MOUNTS`] mounts.
    #[error("the project needs {needed} read-only or hidden entries (secrets {secrets}, protected {protected} with {pins} pinned directories, outside hard links {links}), more than the {MAX_SCAN_MOUNTS} a view may have; pass a narrower --project or trim `[filesystem] secrets`/`protect` in a profile")]
    TooManyMounts {
        /// Mounts needed.
        needed: usize,
        /// Of which secrets.
        secrets: usize,
        /// Of which protected entries.
        protected: usize,
        /// Of which pins.
        pins: usize,
        /// Of which hard links.
        links: usize,
    },
}

/// The identity of a filesystem object, to tell a protected entry from one
/// the run put in its place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    dev: u64,
    ino: u64,
}

impl Identity {
    pub(crate) fn of(stat: &FileStat) -> Identity {
        Identity {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }
}

/// One entry a scan found, relative to the project root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Found {
    /// The path below the project root.
    pub path: PathBuf,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// What a scan found. It crosses a socket from the project's watcher
/// ([`super::watcher`]) to a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Scan {
    /// Entries visited.
    pub entries: u64,
    /// Secrets to mask (and other names of a secret file's inode).
    pub secrets: Vec<Found>,
    /// Protected entries to make read-only.
    pub protected: Vec<Found>,
    /// Protected entries that are symlinks: a mount would follow them, so
    /// they are not mounted, only checked after the run.
    pub protected_links: Vec<PathBuf>,
    /// Directories to pin (every ancestor of a protected entry).
    pub pins: Vec<PathBuf>,
    /// Regular files with a link outside the project.
    pub outside_links: Vec<PathBuf>,
    /// Every protected entry and the object it was, for the sweep after the run.
    pub protected_before: HashMap<PathBuf, Identity>,
    /// How long the walk took (from a watcher: how long asking it took).
    pub elapsed: Duration,
    /// The project's watcher that answered for the walk (None: this
    /// process walked).
    #[serde(skip)]
    pub watcher: Option<Answered>,
    /// Directories the sweep after the run may take as listed here, as long
    /// as the kernel shows they are unchanged (see [`ListedDir`]).
    pub listed_dirs: HashMap<PathBuf, ListedDir>,
}

/// Which watcher ([`super::watcher`]) answered for a walk, and when: what
/// the sweep after the run asks it about
/// ([`super::watcher::changed_since`]). Here, with the walk it answered
/// for, so that the walk does not depend on the watcher that serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// The watcher's process id.
    pub pid: i32,
    /// The watcher process's own number (a later one has another).
    pub(crate) instance: u64,
    /// The watches' generation the walk was current at.
    pub(crate) generation: u64,
}

/// A directory as the scan listed it, so that the sweep after the run does
/// not list it again when nothing was added, removed or renamed in it.
///
/// Why the check is sound: any change to a directory's entries sets its
/// ctime to the current time, and nothing but the clock sets a ctime (a
/// payload that forges times with `utimensat` sets mtime; ctime becomes
/// "now"). So a directory whose ctime is still the one seen before it was
/// listed, and which was already older than the scan by more than the
/// coarsest timestamp granularity (one second, ext4's small inodes) plus a
/// clock tick, has had no entry changed since. Only filesystems whose
/// ctime the local kernel keeps are trusted ([`ctime_is_local`]); the
/// object is checked by identity too, so a mount or a directory put in its
/// place is listed again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedDir {
    stamp: DirStamp,
    /// The subdirectories a sweep descends into: neither secret nor
    /// protected.
    subdirs: Vec<Vec<u8>>,
}

impl ListedDir {
    /// The subdirectories to descend into when `now` (the directory as
    /// opened by the sweep) is still the directory that was listed.
    pub(crate) fn unchanged_subdirs(&self, now: &FileStat) -> Option<&[Vec<u8>]> {
        (DirStamp::of(now) == self.stamp).then_some(self.subdirs.as_slice())
    }
}

/// What identifies a directory and the last change to its entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct DirStamp {
    identity: Identity,
    ctime: (i64, i64),
}

impl DirStamp {
    fn of(stat: &FileStat) -> DirStamp {
        DirStamp {
            identity: Identity::of(stat),
            ctime: (stat.st_ctime, stat.st_ctime_nsec),
        }
    }
}

/// Whether the kernel running this keeps the ctimes of the filesystem
/// holding `dir` itself. A network or FUSE filesystem reports the server's
/// times, from another clock and at another granularity, so its
/// directories are always listed again.
fn ctime_is_local(dir: &OwnedFd) -> bool {
    use nix::sys::statfs;
    statfs::fstatfs(dir).is_ok_and(|fs| {
        [
            statfs::EXT4_SUPER_MAGIC,
            statfs::XFS_SUPER_MAGIC,
            statfs::BTRFS_SUPER_MAGIC,
            statfs::TMPFS_MAGIC,
        ]
        .contains(&fs.filesystem_type())
    })
}

/// Seconds since the epoch below which a directory's ctime is old enough to
/// be trusted by a later sweep: two seconds before the scan started, so
/// that a change after the scan, whose ctime comes from the kernel's coarse
/// clock (up to a tick behind the one read here) and may be cut to whole
/// seconds, can never carry the ctime recorded.
fn trusted_before(started: std::time::SystemTime) -> i64 {
    started
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX) - 1)
        .unwrap_or(i64::MIN)
}

impl Scan {
    /// Mounts the view needs for what was found.
    pub fn mounts(&self) -> usize {
        self.secrets.len() + self.protected.len() + self.pins.len() + self.outside_links.len()
    }
}

fn last_name(components: &[Vec<u8>]) -> &[u8] {
    components.last().map_or(b"", Vec::as_slice)
}

fn relative(components: &[Vec<u8>]) -> PathBuf {
    let mut path = PathBuf::new();
    for c in components {
        path.push(OsStr::from_bytes(c));
    }
    path
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Open `root` for a walk.
pub(crate) fn open_root(root: &Path) -> Result<OwnedFd, ScanError> {
    nix::fcntl::open(root, DIR_FLAGS, Mode::empty()).map_err(|source| ScanError::Read {
        path: root.to_path_buf(),
        source,
    })
}

/// A name in a directory, with the type the directory reports (None: unknown).
pub(crate) type Listed = (Vec<u8>, Option<Type>);

/// Names in a directory.
pub(crate) fn list(dir: &OwnedFd, path: &Path) -> Result<Vec<Listed>, ScanError> {
    let read = |source| ScanError::Read {
        path: path.to_path_buf(),
        source,
    };
    let fd = dir
        .try_clone()
        .map_err(|e| read(Errno::from_raw(e.raw_os_error().unwrap_or(0))))?;
    let mut handle = Dir::from_fd(fd).map_err(read)?;
    let mut names = Vec::new();
    for entry in handle.iter() {
        let entry = entry.map_err(read)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names.push((name.to_vec(), entry.file_type()));
    }
    Ok(names)
}

pub(crate) fn stat_at(dir: &OwnedFd, name: &[u8], path: &Path) -> Result<FileStat, ScanError> {
    nix::sys::stat::fstatat(
        dir.as_fd(),
        OsStr::from_bytes(name),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(|source| ScanError::Read {
        path: path.to_path_buf(),
        source,
    })
}

pub(crate) fn kind_of(stat: &FileStat) -> Type {
    match SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFDIR => Type::Directory,
        SFlag::S_IFLNK => Type::Symlink,
        SFlag::S_IFREG => Type::File,
        SFlag::S_IFIFO => Type::Fifo,
        SFlag::S_IFSOCK => Type::Socket,
        SFlag::S_IFCHR => Type::CharacterDevice,
        _ => Type::BlockDevice,
    }
}

/// Walk the project at `root`. `writable`: whether the payload may write the
/// project (protection and hard links only matter then).
pub fn scan(
    root: &Path,
    rules: &Rules,
    writable: bool,
    hardlinks: HardlinkPolicy,
) -> Result<Scan, ScanError> {
    let started = Instant::now();
    let walked = Walked::walk(root, rules, writable)?;
    let mut scan = walked.scan(root, writable, hardlinks, Listing::Kept)?;
    scan.elapsed = started.elapsed();
    Ok(scan)
}

/// What changed in a project since it was walked, as its watches reported
/// it (paths below the root).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Directories whose names, or whose files' link counts or modes,
    /// changed: each is listed again.
    pub dirs: BTreeSet<PathBuf>,
    /// Names created or moved in: whatever was walked at or below them
    /// before is another object's, and they are walked whole.
    pub created: BTreeSet<PathBuf>,
}

impl Changes {
    /// Take in later changes.
    pub fn merge(&mut self, later: &Changes) {
        self.dirs.extend(later.dirs.iter().cloned());
        self.created.extend(later.created.iter().cloned());
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.created.is_empty()
    }
}

/// A walk kept per directory, for a watcher to walk again only where its
/// watches reported a change ([`Walked::rewalk`]).
#[derive(Debug, Clone)]
pub struct Walked {
    dirs: HashMap<PathBuf, walker::DirFacts>,
}

impl Walked {
    /// Walk the whole project at `root`.
    pub fn walk(root: &Path, rules: &Rules, writable: bool) -> Result<Walked, ScanError> {
        let asked = walker::Asked {
            rules,
            writable,
            trusted_before: trusted_before(std::time::SystemTime::now()),
            keep: None,
        };
        let dir = open_root(root)?;
        let stamp = stamp_of(&dir, root)?;
        let queue = walker::Queue::new(vec![walker::Job {
            dir,
            components: Vec::new(),
            inside_protected: false,
            stamp,
        }]);
        Ok(Walked {
            dirs: walker::walk(asked, &queue)?,
        })
    }

    /// Walk again the directories `changes` names, and whatever was created
    /// below them, keeping what was walked before everywhere else. The
    /// caller answers for `changes` holding every change since the last
    /// walk (a watcher that lost an event walks the whole project again);
    /// when the tree is not what `changes` says (a directory kept is gone
    /// or another object), this fails, and the caller walks it whole.
    pub fn rewalk(
        &mut self,
        root: &Path,
        rules: &Rules,
        writable: bool,
        changes: &Changes,
    ) -> Result<(), ScanError> {
        let stale = |path: &Path| ScanError::Read {
            path: path.to_path_buf(),
            source: Errno::ESTALE,
        };
        for created in &changes.created {
            if created.as_os_str().is_empty() {
                return Err(stale(root));
            }
            self.dirs.retain(|path, _| !path.starts_with(created));
        }
        let root_dir = open_root(root)?;
        let mut jobs = Vec::new();
        let mut rewalked = HashSet::new();
        for path in &changes.dirs {
            // Gone (its parent's listing drops it), hidden (below a secret)
            // or made again (its parent's walk takes it whole).
            let Some(kept) = self.dirs.get(path) else {
                continue;
            };
            let dir = match open_below(&root_dir, path) {
                Ok(dir) => dir,
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP)
                    if path
                        .parent()
                        .is_some_and(|parent| changes.dirs.contains(parent)) =>
                {
                    continue
                }
                Err(source) => {
                    return Err(ScanError::Read {
                        path: path.clone(),
                        source,
                    })
                }
            };
            let stamp = stamp_of(&dir, path)?;
            if stamp.identity != kept.stamp.identity {
                return Err(stale(path));
            }
            rewalked.insert(path.clone());
            jobs.push(walker::Job {
                dir,
                components: path.iter().map(|c| c.as_bytes().to_vec()).collect(),
                inside_protected: kept.inside_protected,
                stamp,
            });
        }
        let keep = walker::Keep {
            dirs: &self.dirs,
            rewalked: &rewalked,
        };
        let asked = walker::Asked {
            rules,
            writable,
            trusted_before: trusted_before(std::time::SystemTime::now()),
            keep: Some(&keep),
        };
        let fresh = walker::walk(asked, &walker::Queue::new(jobs))?;
        self.dirs.extend(fresh);
        self.drop_unreachable();
        Ok(())
    }

    /// Forget directories no walk reaches from the root any more (removed,
    /// or now below a secret).
    fn drop_unreachable(&mut self) {
        let mut reached = HashSet::new();
        let mut pending = vec![PathBuf::new()];
        while let Some(path) = pending.pop() {
            if let Some(facts) = self.dirs.get(&path) {
                pending.extend(
                    facts
                        .walked
                        .iter()
                        .map(|name| path.join(OsStr::from_bytes(name))),
                );
                reached.insert(path);
            }
        }
        self.dirs.retain(|path, _| reached.contains(path));
    }

    /// Whether the walk found a secret or protected name that is a
    /// symlink: what it points at is covered instead, and that is resolved
    /// anew each time the findings are put together, since a link outside
    /// the project on the way there can change with no event in it.
    pub fn has_links(&self) -> bool {
        self.dirs
            .values()
            .any(|facts| !facts.secret_links.is_empty() || !facts.protected_links.is_empty())
    }

    /// What the run's view needs, from this walk.
    pub fn scan(
        &self,
        root: &Path,
        writable: bool,
        hardlinks: HardlinkPolicy,
        listing: Listing,
    ) -> Result<Scan, ScanError> {
        assemble::assemble(root, writable, hardlinks, &self.dirs, listing)
    }
}

/// Whether a [`Scan`] keeps the directories' listing for the sweep after
/// the run ([`Scan::listed_dirs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Kept: the sweep after the run may skip what did not change.
    Kept,
    /// Left out: a watcher answers, and tells the sweep where the changes
    /// are instead.
    Left,
}

/// The stamp of an opened directory, taken before it is listed.
fn stamp_of(dir: &OwnedFd, path: &Path) -> Result<DirStamp, ScanError> {
    nix::sys::stat::fstat(dir.as_fd())
        .map(|s| DirStamp::of(&s))
        .map_err(|source| ScanError::Read {
            path: path.to_path_buf(),
            source,
        })
}

/// Open the directory at `path` below `root`, one name at a time, never
/// through a symlink.
pub(crate) fn open_below(root: &OwnedFd, path: &Path) -> Result<OwnedFd, Errno> {
    let mut dir = root
        .try_clone()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)))?;
    for name in path.iter() {
        dir = nix::fcntl::openat(dir.as_fd(), name, DIR_FLAGS, Mode::empty())?;
    }
    Ok(dir)
}
