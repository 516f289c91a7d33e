//! One walk over the project before a run: secrets to mask, protected
//! entries to make read-only (and the ancestors to pin), and files hard-linked
//! to something outside the project.
//!
//! The walk works on directory descriptors opened with `O_NOFOLLOW`, never
//! re-resolving a path string, and stats only regular files (for their link
//! count) and entries whose type the directory does not report.
//!
//! Nothing is cached from one run's walk to the next. A directory's ctime
//! would tell which names changed, but a hard link made outside the project
//! to a file inside it changes only that file's link count and ctime: no
//! directory of the project, and not even an inotify watch on the file's
//! directory, sees it. Only a `stat` of every file answers for that, and it
//! is most of the walk's time (about 2 µs a file on a loaded 2-core
//! machine, against 0.5 µs for listing it), so a run's cost stays in
//! proportion to the project until something long-lived (the daemon,
//! `serve`) keeps a watch on every file. What the walk records does serve
//! the sweep after the same run ([`ListedDir`]).

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

struct Walker<'a> {
    root: &'a Path,
    rules: &'a Rules,
    writable: bool,
    hardlinks: HardlinkPolicy,
    scan: Scan,
    /// Regular files with more than one link: (identity) -> (links, paths here).
    linked: HashMap<Identity, (u64, Vec<PathBuf>)>,
    secret_inodes: HashSet<Identity>,
    visited_dirs: HashSet<Identity>,
    components: Vec<Vec<u8>>,
    /// Symlinks with a secret's name: what they point at is hidden too.
    secret_links: Vec<PathBuf>,
    /// Where directories go for another walker to take.
    queue: &'a Queue,
    /// Ctimes (seconds) below this are old enough to record a directory.
    trusted_before: i64,
    /// Per device: whether its ctimes are the local kernel's.
    local_ctime: HashMap<u64, bool>,
}

/// A directory waiting to be walked.
struct Job {
    dir: OwnedFd,
    components: Vec<Vec<u8>>,
    inside_protected: bool,
    /// The directory as it was before it was listed.
    stamp: DirStamp,
}

struct Shared {
    jobs: Vec<Job>,
    busy: usize,
    failed: Option<ScanError>,
}

/// Directories shared out between the walkers. Only a few wait at a time:
/// each holds an open descriptor, and a walker that finds the queue full
/// walks the directory itself.
struct Queue {
    state: std::sync::Mutex<Shared>,
    changed: std::sync::Condvar,
}

/// How many directories may wait in the queue.
const QUEUE_MAX: usize = 16;

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // No walker panics while holding it; if one did, the state is
        // still consistent (every change is a single push, pop or count).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn offer(&self, job: Job) -> Result<(), Job> {
        let mut state = self.lock();
        if state.failed.is_some() || state.jobs.len() >= QUEUE_MAX {
            return Err(job);
        }
        state.jobs.push(job);
        drop(state);
        self.changed.notify_one();
        Ok(())
    }

    /// Whether directories wait to be walked.
    fn has_jobs(&self) -> bool {
        let state = self.lock();
        state.failed.is_none() && !state.jobs.is_empty()
    }

    /// The next directory, or None when every walker is idle or one failed.
    fn next(&self) -> Option<Job> {
        let mut state = self.lock();
        loop {
            if state.failed.is_some() {
                return None;
            }
            if let Some(job) = state.jobs.pop() {
                state.busy += 1;
                return Some(job);
            }
            if state.busy == 0 {
                return None;
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn done(&self, result: Result<(), ScanError>) {
        let mut state = self.lock();
        state.busy -= 1;
        if let Err(err) = result {
            state.failed.get_or_insert(err);
        }
        drop(state);
        self.changed.notify_all();
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

impl Walker<'_> {
    /// Walk `dir`, whose stamp (taken before listing it) is `stamp`.
    fn walk(
        &mut self,
        dir: &OwnedFd,
        stamp: DirStamp,
        inside_protected: bool,
    ) -> Result<(), ScanError> {
        let here = relative(&self.components);
        if self.components.len() >= MAX_DEPTH {
            return Err(ScanError::TooDeep { path: here });
        }
        // The sweep stops at a protected entry: what is below it is not
        // recorded.
        let record = !inside_protected
            && stamp.ctime.0 < self.trusted_before
            && self.ctime_is_local(dir, stamp);
        let mut subdirs = Vec::new();
        for (name, reported) in list(dir, &here)? {
            self.scan.entries += 1;
            self.components.push(name);
            let result = self.entry(dir, reported, inside_protected);
            let name = self.components.pop();
            if result? && record {
                subdirs.extend(name);
            }
        }
        if record {
            self.scan
                .listed_dirs
                .insert(here, ListedDir { stamp, subdirs });
        }
        Ok(())
    }

    fn ctime_is_local(&mut self, dir: &OwnedFd, stamp: DirStamp) -> bool {
        *self
            .local_ctime
            .entry(stamp.identity.dev)
            .or_insert_with(|| ctime_is_local(dir))
    }

    /// Look at the entry last in `components`; true when it is a directory a
    /// sweep descends into (neither secret nor protected).
    fn entry(
        &mut self,
        dir: &OwnedFd,
        reported: Option<Type>,
        inside_protected: bool,
    ) -> Result<bool, ScanError> {
        // Most entries match nothing and have one link: the path is only
        // built for those that are recorded or fail.
        let path = |components: &[Vec<u8>]| relative(components);
        // The entry's name, borrowed from `components` only for the calls
        // that take it: no copy per entry.
        let name = last_name;
        let mut stat = None;
        let kind = match reported {
            Some(kind) => kind,
            None => {
                let s = stat_at(dir, name(&self.components), &path(&self.components))?;
                let kind = kind_of(&s);
                stat = Some(s);
                kind
            }
        };
        let is_dir = kind == Type::Directory;
        // A symlink may lead to a directory: a directories-only pattern
        // (`.vscode/`) must still catch it.
        let link = kind == Type::Symlink;
        if self
            .rules
            .secrets
            .matching(&self.components, is_dir)
            .is_some()
            || (link
                && self
                    .rules
                    .secrets
                    .matching(&self.components, true)
                    .is_some())
        {
            if kind == Type::Symlink {
                // A mount would follow the link, so what it points at is
                // hidden instead (when that is in the project): `.env ->
                // config/prod.env` must not show the file under either name.
                self.secret_links.push(path(&self.components));
                return Ok(false);
            }
            let here = path(&self.components);
            if kind == Type::File {
                let s = match stat {
                    Some(s) => s,
                    None => stat_at(dir, name(&self.components), &here)?,
                };
                if s.st_nlink > 1 {
                    self.secret_inodes.insert(Identity::of(&s));
                    self.note_link(&s, &here);
                }
            }
            self.scan.secrets.push(Found { path: here, is_dir });
            return Ok(false); // nothing below a hidden directory is visible
        }
        let mut protected_here = inside_protected;
        let protected = self.rules.is_protected(&self.components, is_dir)
            || (link && self.rules.is_protected(&self.components, true));
        if self.writable && !inside_protected && protected {
            let here = path(&self.components);
            let s = match stat {
                Some(s) => s,
                None => stat_at(dir, name(&self.components), &here)?,
            };
            stat = Some(s);
            self.scan
                .protected_before
                .insert(here.clone(), Identity::of(&s));
            if kind == Type::Symlink {
                self.scan.protected_links.push(here);
            } else {
                self.scan.protected.push(Found { path: here, is_dir });
                protected_here = true;
            }
        }
        match kind {
            Type::Directory => {
                let child = nix::fcntl::openat(
                    dir.as_fd(),
                    OsStr::from_bytes(name(&self.components)),
                    DIR_FLAGS,
                    Mode::empty(),
                )
                .map_err(|source| ScanError::Read {
                    path: path(&self.components),
                    source,
                })?;
                // The opened directory's own stat, taken before it is listed:
                // its ctime is what a later sweep compares.
                let s = nix::sys::stat::fstat(child.as_fd()).map_err(|source| ScanError::Read {
                    path: path(&self.components),
                    source,
                })?;
                if !self.visited_dirs.insert(Identity::of(&s)) {
                    return Err(ScanError::TooDeep {
                        path: path(&self.components),
                    });
                }
                let job = Job {
                    dir: child,
                    components: self.components.clone(),
                    inside_protected: protected_here,
                    stamp: DirStamp::of(&s),
                };
                if let Err(job) = self.queue.offer(job) {
                    self.walk(&job.dir, job.stamp, protected_here)?;
                }
                return Ok(!protected);
            }
            Type::File => {
                let s = match stat {
                    Some(s) => s,
                    None => {
                        let name = name(&self.components);
                        stat_at(dir, name, Path::new(OsStr::from_bytes(name)))?
                    }
                };
                if s.st_nlink > 1 {
                    self.note_link(&s, &path(&self.components));
                }
            }
            _ => {}
        }
        Ok(false)
    }

    fn note_link(&mut self, stat: &FileStat, path: &Path) {
        let entry = self
            .linked
            .entry(Identity::of(stat))
            .or_insert_with(|| (stat.st_nlink, Vec::new()));
        entry.1.push(path.to_path_buf());
    }

    /// Where a symlink in the project leads, as a path below the project
    /// root; None when it leads nowhere or out of the project (not in the
    /// view), or to the root itself.
    fn link_target(&self, link: &Path) -> Option<Found> {
        let real = std::fs::canonicalize(self.root.join(link)).ok()?;
        let relative = real.strip_prefix(self.root).ok()?;
        if relative.as_os_str().is_empty() {
            return None;
        }
        Some(Found {
            path: relative.to_path_buf(),
            is_dir: real.is_dir(),
        })
    }

    fn finish(mut self) -> Result<Scan, ScanError> {
        for link in std::mem::take(&mut self.secret_links) {
            if let Some(target) = self.link_target(&link) {
                if !self.scan.secrets.contains(&target) {
                    self.scan.secrets.push(target);
                }
            }
        }
        // A protected name that is a symlink cannot be mounted over; what it
        // leads to is what the host reads, so that is made read-only.
        for link in self.scan.protected_links.clone() {
            if let Some(target) = self.link_target(&link) {
                if !self.scan.protected.contains(&target) {
                    self.scan.protected.push(target);
                }
            }
        }
        let mut outside = Vec::new();
        let protected: HashSet<&Path> = self
            .scan
            .protected
            .iter()
            .map(|f| f.path.as_path())
            .collect();
        let secrets: HashSet<PathBuf> = self.scan.secrets.iter().map(|f| f.path.clone()).collect();
        for (identity, (links, paths)) in &self.linked {
            if self.secret_inodes.contains(identity) {
                // Another name of a secret file shows the same content.
                for path in paths {
                    if !secrets.contains(path) {
                        self.scan.secrets.push(Found {
                            path: path.clone(),
                            is_dir: false,
                        });
                    }
                }
                continue;
            }
            let found = paths.len() as u64;
            if found < *links && self.writable && self.hardlinks != HardlinkPolicy::Allow {
                outside.extend(
                    paths
                        .iter()
                        .filter(|p| {
                            !protected.contains(p.as_path())
                                && !p.ancestors().any(|a| protected.contains(a))
                        })
                        .cloned(),
                );
            }
        }
        outside.sort();
        if !outside.is_empty()
            && (self.hardlinks == HardlinkPolicy::Refuse || outside.len() > MAX_SCAN_MOUNTS)
        {
            return Err(outside_links_error(&outside));
        }
        self.scan.outside_links = outside;

        let mut pins = BTreeSet::new();
        for found in &self.scan.protected {
            for ancestor in found.path.ancestors().skip(1) {
                if !ancestor.as_os_str().is_empty() {
                    pins.insert(ancestor.to_path_buf());
                }
            }
        }
        self.scan.pins = pins.into_iter().collect();
        // Nothing below a hidden directory is in the view, and a mount there
        // would find no mount point: a symlink's target can be anywhere.
        let hidden_dirs: Vec<PathBuf> = self
            .scan
            .secrets
            .iter()
            .filter(|f| f.is_dir)
            .map(|f| f.path.clone())
            .collect();
        let below_hidden = |p: &Path| {
            hidden_dirs
                .iter()
                .any(|d| p != d.as_path() && p.starts_with(d))
        };
        self.scan.secrets.retain(|f| !below_hidden(&f.path));
        self.scan.protected.retain(|f| !below_hidden(&f.path));
        self.scan.pins.retain(|p| !below_hidden(p));
        self.scan.outside_links.retain(|p| !below_hidden(p));
        self.scan.secrets.sort();
        self.scan.protected.sort();
        let needed = self.scan.mounts();
        if needed > MAX_SCAN_MOUNTS {
            return Err(ScanError::TooManyMounts {
                needed,
                secrets: self.scan.secrets.len(),
                protected: self.scan.protected.len(),
                pins: self.scan.pins.len(),
                links: self.scan.outside_links.len(),
            });
        }
        Ok(self.scan)
    }
}

fn outside_links_error(paths: &[PathBuf]) -> ScanError {
    const SHOWN: usize = 5;
    let examples = paths
        .iter()
        .take(SHOWN)
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    ScanError::OutsideLinks {
        count: paths.len(),
        examples,
        more: if paths.len() > SHOWN { ", ..." } else { "" },
    }
}

/// How many walkers take directories from the queue: the walk is one
/// `fstatat` per file, which the kernel serves in parallel on the two or
/// more cores this runs on.
const WALKERS: usize = 2;

/// Entries one walker goes through before the others start (a few
/// milliseconds of `fstatat`).
const ENTRIES_BEFORE_HELPERS: u64 = 2_000;

impl<'a> Walker<'a> {
    fn new(
        root: &'a Path,
        rules: &'a Rules,
        writable: bool,
        hardlinks: HardlinkPolicy,
        queue: &'a Queue,
        trusted_before: i64,
    ) -> Self {
        Walker {
            root,
            rules,
            writable,
            hardlinks,
            scan: Scan::default(),
            linked: HashMap::new(),
            secret_inodes: HashSet::new(),
            visited_dirs: HashSet::new(),
            components: Vec::new(),
            secret_links: Vec::new(),
            queue,
            trusted_before,
            local_ctime: HashMap::new(),
        }
    }

    /// Take directories from the queue until there are none left.
    fn work(&mut self) {
        while let Some(job) = self.queue.next() {
            self.take(job);
        }
    }

    fn take(&mut self, job: Job) {
        self.components = job.components;
        let result = self.walk(&job.dir, job.stamp, job.inside_protected);
        self.queue.done(result);
    }

    /// Take in what another walker found.
    fn absorb(&mut self, other: Walker<'_>) {
        let scan = other.scan;
        self.scan.entries += scan.entries;
        self.scan.secrets.extend(scan.secrets);
        self.scan.protected.extend(scan.protected);
        self.scan.protected_links.extend(scan.protected_links);
        self.scan.protected_before.extend(scan.protected_before);
        self.scan.listed_dirs.extend(scan.listed_dirs);
        for (identity, (links, paths)) in other.linked {
            self.linked
                .entry(identity)
                .or_insert_with(|| (links, Vec::new()))
                .1
                .extend(paths);
        }
        self.secret_inodes.extend(other.secret_inodes);
        self.secret_links.extend(other.secret_links);
    }
}

/// Walk the project at `root`. `writable`: whether the payload may write the
/// project (protection and hard links only matter then).
///
/// Directories are shared out between [`WALKERS`] threads, all joined
/// before this returns (the supervisor clones only from a single-threaded
/// process). Without a second thread, this one walks everything.
pub fn scan(
    root: &Path,
    rules: &Rules,
    writable: bool,
    hardlinks: HardlinkPolicy,
) -> Result<Scan, ScanError> {
    let started = Instant::now();
    let trusted_before = trusted_before(std::time::SystemTime::now());
    let dir = open_root(root)?;
    let stamp = nix::sys::stat::fstat(dir.as_fd())
        .map(|s| DirStamp::of(&s))
        .map_err(|source| ScanError::Read {
            path: root.to_path_buf(),
            source,
        })?;
    let queue = Queue {
        state: std::sync::Mutex::new(Shared {
            jobs: vec![Job {
                dir,
                components: Vec::new(),
                inside_protected: false,
                stamp,
            }],
            busy: 0,
            failed: None,
        }),
        changed: std::sync::Condvar::new(),
    };
    let mut main = Walker::new(root, rules, writable, hardlinks, &queue, trusted_before);
    // On this thread alone until the walk proves big: starting a second
    // walker (its stack and malloc arena) costs about half a millisecond
    // here, more than walking a small project takes.
    while main.scan.entries < ENTRIES_BEFORE_HELPERS || !queue.has_jobs() {
        match queue.next() {
            Some(job) => main.take(job),
            None => return finish(main, &queue, started),
        }
    }
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..WALKERS)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("sandbox-scan".into())
                    .spawn_scoped(scope, || {
                        let mut walker =
                            Walker::new(root, rules, writable, hardlinks, &queue, trusted_before);
                        walker.work();
                        walker
                    })
                    .ok()
            })
            .collect();
        main.work();
        for helper in helpers {
            match helper.join() {
                Ok(walker) => main.absorb(walker),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    finish(main, &queue, started)
}

fn finish(main: Walker<'_>, queue: &Queue, started: Instant) -> Result<Scan, ScanError> {
    if let Some(err) = queue.lock().failed.take() {
        return Err(err);
    }
    let mut scan = main.finish()?;
    scan.elapsed = started.elapsed();
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::PatternList;

    fn rules() -> Rules {
        Rules {
            secrets: PatternList::parse(&[".env", ".env.*", "!.env.example", ".ssh/", "*.pem"])
                .unwrap(),
            protect: PatternList::parse(&[".git/**/hooks", ".git/**/config", ".envrc", ".vscode/"])
                .unwrap(),
        }
    }

    fn paths(found: &[Found]) -> Vec<String> {
        found.iter().map(|f| f.path.display().to_string()).collect()
    }

    #[test]
    fn a_walk_big_enough_for_helpers_finds_what_one_walker_finds() {
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        let dirs = 40;
        let per_dir = (ENTRIES_BEFORE_HELPERS as usize / dirs) * 2;
        for d in 0..dirs {
            let dir = p.join(format!("d{d}"));
            std::fs::create_dir(&dir).unwrap();
            for f in 0..per_dir {
                std::fs::write(dir.join(format!("f{f}")), b"").unwrap();
            }
        }
        std::fs::write(p.join("d39/.env"), b"SECRET=1").unwrap();
        std::fs::write(p.join("d0/.env"), b"SECRET=1").unwrap();
        let scan = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert!(scan.entries > ENTRIES_BEFORE_HELPERS, "{}", scan.entries);
        assert_eq!(scan.entries, (dirs * (per_dir + 1) + 2) as u64);
        let mut secrets = paths(&scan.secrets);
        secrets.sort();
        assert_eq!(secrets, ["d0/.env", "d39/.env"]);
    }

    #[test]
    fn finds_secrets_protected_entries_pins_and_outside_links() {
        let outside = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        for dir in [
            ".git/hooks",
            ".git/modules/lib/hooks",
            "a/b/.ssh",
            "sub/.git",
            "c",
            ".vscode",
        ] {
            std::fs::create_dir_all(p.join(dir)).unwrap();
        }
        for file in [
            ".env",
            "a/.env.prod",
            "a/.env.example",
            "a/b/.ssh/id",
            "k.pem",
            ".git/config",
            "sub/.git/config",
            "c/plain",
            ".envrc",
        ] {
            std::fs::write(p.join(file), "x").unwrap();
        }
        std::fs::write(outside.path().join("victim"), "v").unwrap();
        std::fs::hard_link(outside.path().join("victim"), p.join("c/linked")).unwrap();
        // Two names inside the project only: fine.
        std::fs::hard_link(p.join("c/plain"), p.join("c/plain2")).unwrap();
        // A second name of a secret is a secret.
        std::fs::hard_link(p.join(".env"), p.join("c/innocent")).unwrap();
        std::os::unix::fs::symlink("/etc", p.join("c/.vscode")).unwrap();

        let scan = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert_eq!(
            paths(&scan.secrets),
            [".env", "a/.env.prod", "a/b/.ssh", "c/innocent", "k.pem"]
        );
        assert_eq!(
            paths(&scan.protected),
            [
                ".envrc",
                ".git/config",
                ".git/hooks",
                ".git/modules/lib/hooks",
                ".vscode",
                "sub/.git/config"
            ]
        );
        let pins: Vec<String> = scan.pins.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            pins,
            [
                ".git",
                ".git/modules",
                ".git/modules/lib",
                "sub",
                "sub/.git"
            ]
        );
        assert_eq!(scan.outside_links, [PathBuf::from("c/linked")]);
        // A symlink may lead to a directory, so `.vscode/` catches it; this
        // one leads out of the project, where nothing needs covering.
        assert_eq!(scan.protected_links, [PathBuf::from("c/.vscode")]);

        let err = super::scan(p, &rules(), true, HardlinkPolicy::Refuse).unwrap_err();
        assert!(err.to_string().contains("c/linked"), "{err}");
        let allowed = super::scan(p, &rules(), true, HardlinkPolicy::Allow).unwrap();
        assert!(allowed.outside_links.is_empty());
        let read_only = super::scan(p, &rules(), false, HardlinkPolicy::ReadOnly).unwrap();
        assert!(read_only.protected.is_empty() && read_only.outside_links.is_empty());
        assert_eq!(read_only.secrets.len(), 5);
    }
}

#[cfg(test)]
mod link_tests {
    use super::*;
    use crate::project::PatternList;

    #[test]
    fn what_secret_and_protected_symlinks_point_at_is_covered() {
        let project = tempfile::tempdir().unwrap();
        let p = std::fs::canonicalize(project.path()).unwrap();
        std::fs::create_dir_all(p.join("config/keys")).unwrap();
        std::fs::create_dir_all(p.join("editor")).unwrap();
        std::fs::write(p.join("config/prod.env"), "SECRET").unwrap();
        std::fs::write(p.join("config/keys/.env"), "SECRET").unwrap();
        std::os::unix::fs::symlink("config/prod.env", p.join(".env")).unwrap();
        std::os::unix::fs::symlink("config", p.join("sub.env")).unwrap();
        std::os::unix::fs::symlink("editor", p.join(".vscode")).unwrap();
        std::os::unix::fs::symlink("/etc", p.join(".idea")).unwrap();
        let rules = Rules {
            secrets: PatternList::parse(&[".env", "*.env"]).unwrap(),
            protect: PatternList::parse(&[".vscode", ".idea"]).unwrap(),
        };
        let scan = scan(&p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();
        let secrets: Vec<String> = scan
            .secrets
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        // config/prod.env and config/keys/.env are below the hidden config.
        assert_eq!(secrets, ["config"]);
        let protected: Vec<String> = scan
            .protected
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        assert_eq!(
            protected,
            ["editor"],
            "the link out of the project is not in the view"
        );
    }
}

#[cfg(test)]
mod walker_tests {
    use super::*;
    use crate::project::PatternList;

    /// Many directories: some go through the queue to the other walker,
    /// some are walked in place once it is full; nothing is missed twice or
    /// counted twice, and a hard link split across walkers is still whole.
    #[test]
    fn every_entry_is_walked_once_whoever_walks_it() {
        let project = tempfile::tempdir().unwrap();
        let p = std::fs::canonicalize(project.path()).unwrap();
        for d in 0..300 {
            let dir = p.join(format!("d{d}/e{}", d % 7));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("f"), "x").unwrap();
            if d % 50 == 0 {
                std::fs::write(dir.join(".env"), "S").unwrap();
            }
        }
        // Two names inside the project, in directories far apart.
        std::fs::hard_link(p.join("d1/e1/f"), p.join("d299/e5/g")).unwrap();
        let rules = Rules {
            secrets: PatternList::parse(&[".env"]).unwrap(),
            protect: PatternList::default(),
        };
        let scan = scan(&p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();
        // 300 d*, 300 e*, 300 f, 6 .env, 1 g.
        assert_eq!(scan.entries, 907);
        assert_eq!(scan.secrets.len(), 6);
        assert!(scan.outside_links.is_empty(), "{:?}", scan.outside_links);
    }
}

#[cfg(test)]
mod freshness_tests {
    use super::*;
    use crate::project::PatternList;

    fn rules() -> Rules {
        Rules {
            secrets: PatternList::parse(&[".env", "*.pem"]).unwrap(),
            protect: PatternList::parse(&[".envrc"]).unwrap(),
        }
    }

    fn deep_project() -> tempfile::TempDir {
        let project = tempfile::tempdir().unwrap();
        let deep = project.path().join("node_modules/a/node_modules/b/lib/x");
        std::fs::create_dir_all(&deep).unwrap();
        for n in 0..50 {
            std::fs::write(deep.join(format!("f{n}.js")), "x").unwrap();
        }
        project
    }

    /// Every scan answers for the tree as it is: a secret made deep in the
    /// tree after one scan is hidden by the next, whatever the first saw.
    #[test]
    fn a_secret_made_between_two_scans_is_found_by_the_second() {
        let project = deep_project();
        let p = project.path();
        let first = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert!(first.secrets.is_empty(), "{:?}", first.secrets);
        let deep = "node_modules/a/node_modules/b/lib/x";
        std::fs::write(p.join(deep).join(".env"), "TOKEN=1").unwrap();
        std::fs::write(p.join("node_modules/a/key.pem"), "KEY").unwrap();
        let second = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        let mut secrets: Vec<String> = second
            .secrets
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        secrets.sort();
        assert_eq!(secrets, ["node_modules/a/key.pem", &format!("{deep}/.env")]);
    }

    /// Hard links made after a scan, both ways: a name in a deep directory
    /// for a file outside (the directory changes), and a name outside for a
    /// file already deep inside (no directory of the project changes, only
    /// the file's link count). The next scan covers both.
    #[test]
    fn hard_links_made_between_two_scans_are_covered_by_the_second() {
        let outside = tempfile::tempdir().unwrap();
        let project = deep_project();
        let p = project.path();
        let deep = p.join("node_modules/a/node_modules/b/lib/x");
        let first = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert!(first.outside_links.is_empty(), "{:?}", first.outside_links);

        std::fs::write(outside.path().join("victim"), "v").unwrap();
        std::fs::hard_link(outside.path().join("victim"), deep.join("in.js")).unwrap();
        std::fs::hard_link(deep.join("f7.js"), outside.path().join("clone-of-f7")).unwrap();
        let second = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        let rel = Path::new("node_modules/a/node_modules/b/lib/x");
        assert_eq!(second.outside_links, [rel.join("f7.js"), rel.join("in.js")]);

        // A secret's other name made after a scan is hidden too.
        std::fs::write(deep.join(".env"), "TOKEN=1").unwrap();
        let third = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        std::fs::hard_link(deep.join(".env"), p.join("node_modules/a/innocent")).unwrap();
        let fourth = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert_eq!(third.secrets.len(), 1, "{:?}", third.secrets);
        assert!(
            fourth
                .secrets
                .iter()
                .any(|f| f.path == Path::new("node_modules/a/innocent")),
            "{:?}",
            fourth.secrets
        );
    }
}
