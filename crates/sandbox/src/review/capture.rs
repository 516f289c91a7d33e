//! After a review run: its layer (the overlay's upper directory, on the
//! run's tmpfs, handed over by init) compared with the project and copied
//! into the store. Every process of the run is gone by then, so nothing
//! changes the layer while it is read; the project is read through
//! descriptors, one directory at a time, following no link.

use std::ffi::{CStr, OsStr};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use sha2::{Digest, Sha256};

use super::{Captured, Change, ChangeKind, Entry, EntryKind, ReviewError, Started, Store};

/// The directory init mounts the layer's tmpfs at, in the staging root:
/// `upper` and `work` are the overlay's.
pub const UPPER: &str = "upper";
/// The overlay's work directory, beside `upper`.
pub const WORK: &str = "work";

const OPAQUE: &CStr = c"user.overlay.opaque";

/// Compare the layer below `layer_root` (the tmpfs root init handed over)
/// with the project, keep the changed files' contents in the store and
/// record the run's changes. A run with nothing to keep writes nothing;
/// `started.id` changes if another run took the id meanwhile.
pub fn capture(
    store: &Store,
    started: &mut Started,
    layer_root: BorrowedFd<'_>,
) -> Result<Captured, ReviewError> {
    let layer_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReviewError::Layer { path, source }
    };
    let limit_reached = nix::sys::statvfs::fstatvfs(layer_root)
        .map(|s| s.blocks_available() == 0 || s.files_available() == 0)
        .map_err(layer_err(Path::new("/")))?;
    let upper = open_dir_at(layer_root, OsStr::new(UPPER)).map_err(layer_err(Path::new(UPPER)))?;
    let project = started.project.clone();
    let project_dir = nix::fcntl::open(
        &project,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(layer_err(&project))?;
    let mut walk = Walk {
        store,
        started,
        kept: None,
        changes: Vec::new(),
        kept_bytes: 0,
    };
    walk.dir(
        upper.as_fd(),
        Some(project_dir.as_fd()),
        Path::new(""),
        false,
        0,
    )?;
    walk.changes
        .sort_by(|a, b| Path::new(&a.path).cmp(Path::new(&b.path)));
    let captured = Captured {
        limit_reached,
        changes: std::mem::take(&mut walk.changes),
    };
    if captured.changes.is_empty() && !captured.limit_reached {
        if walk.kept.is_some() {
            // Files were kept before they proved unchanged.
            let _ = store.discard(&walk.started.id);
        }
        return Ok(captured);
    }
    walk.layer()?;
    store.first_changes(&walk.started.id, &captured)?;
    Ok(captured)
}

struct Walk<'a> {
    store: &'a Store,
    started: &'a mut Started,
    /// The run's `layer/` in the store, once something had to be kept.
    kept: Option<PathBuf>,
    changes: Vec<Change>,
    /// Bytes copied into the store so far.
    kept_bytes: u64,
}

impl Walk<'_> {
    /// The run's `layer/`, made (with the run's directory) on first use.
    fn layer(&mut self) -> Result<PathBuf, ReviewError> {
        if let Some(kept) = &self.kept {
            return Ok(kept.clone());
        }
        let kept = self.store.create_run(self.started)?.join("layer");
        std::fs::create_dir(&kept).map_err(|source| ReviewError::Io {
            op: "creating",
            path: kept.clone(),
            source,
        })?;
        self.kept = Some(kept.clone());
        Ok(kept)
    }
}

impl Walk<'_> {
    /// One directory of the layer, beside the project's directory at the
    /// same path (None: the project has none there). `replacing`: an
    /// ancestor replaced the project's directory, so every directory below
    /// replaces the project's too.
    fn dir(
        &mut self,
        upper: BorrowedFd<'_>,
        project: Option<BorrowedFd<'_>>,
        relative: &Path,
        replacing: bool,
        depth: usize,
    ) -> Result<(), ReviewError> {
        if depth > super::MAX_DEPTH {
            return Err(ReviewError::TooDeep {
                path: relative.to_path_buf(),
            });
        }
        let err = |source| ReviewError::Layer {
            path: relative.to_path_buf(),
            source,
        };
        let names = list(upper).map_err(err)?;
        for name in &names {
            let path = relative.join(name);
            let stat =
                nix::sys::stat::fstatat(upper, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .map_err(|source| ReviewError::Layer {
                        path: path.clone(),
                        source,
                    })?;
            let before = project.and_then(|p| stat_at(p, name).map(|s| (kind_of(&s), s)));
            self.entry(
                (upper, project),
                name,
                &path,
                &stat,
                before,
                (replacing, depth),
            )?;
        }
        Ok(())
    }

    /// One entry of the layer directory `dirs.0`, beside the project's
    /// directory `dirs.1` at the same path.
    fn entry(
        &mut self,
        dirs: (BorrowedFd<'_>, Option<BorrowedFd<'_>>),
        name: &OsStr,
        path: &Path,
        stat: &FileStat,
        before: Option<(EntryKind, FileStat)>,
        (replacing, depth): (bool, usize),
    ) -> Result<(), ReviewError> {
        let (upper, project) = dirs;
        let layer_err = |source| ReviewError::Layer {
            path: path.to_path_buf(),
            source,
        };
        let before_kind = before.as_ref().map(|(k, _)| *k);
        let Some(shown) = path.to_str().map(str::to_owned) else {
            // A name the record cannot carry exactly is kept as a change
            // that is never applied, rather than dropped.
            self.push(
                path.to_string_lossy().into_owned(),
                before_kind,
                Some(Entry::Special { mode: stat.st_mode }),
            );
            return Ok(());
        };
        let file_type = SFlag::from_bits_truncate(stat.st_mode & libc::S_IFMT);
        let mode = stat.st_mode & 0o7777;
        if file_type == SFlag::S_IFCHR && stat.st_rdev == 0 {
            // A whiteout: the run removed what the project has here.
            if before.is_some() {
                self.push(shown, before_kind, None);
            }
            return Ok(());
        }
        match file_type {
            SFlag::S_IFDIR => {
                let dir = open_dir_at(upper, name).map_err(layer_err)?;
                let opaque = replacing
                    || crate::sys::xattr::get(dir.as_fd(), OPAQUE)
                        .map_err(layer_err)?
                        .is_some_and(|v| v == b"y");
                let project_dir = match &before {
                    Some((EntryKind::Dir, _)) => project.and_then(|p| open_dir_at(p, name).ok()),
                    _ => None,
                };
                let kind_changed = !matches!(before_kind, Some(EntryKind::Dir) | None);
                let replaced = opaque || kind_changed;
                let mode_changed = before
                    .as_ref()
                    .is_some_and(|(_, s)| s.st_mode & 0o7777 != mode);
                if before.is_none() || kind_changed || mode_changed {
                    self.push(shown, before_kind, Some(Entry::Dir { mode, replaced }));
                }
                if opaque && before_kind == Some(EntryKind::Dir) {
                    self.deleted_below(upper, project, name, path)?;
                }
                self.dir(
                    dir.as_fd(),
                    project_dir.as_ref().map(AsFd::as_fd),
                    path,
                    opaque,
                    depth + 1,
                )?;
            }
            SFlag::S_IFREG => {
                let (size, sha256) = self.keep_file(upper, name, path)?;
                let unchanged = match &before {
                    Some((EntryKind::File, s))
                        if s.st_mode & 0o7777 == mode && s.st_size == stat.st_size =>
                    {
                        project.and_then(|p| hash_at(p, name).ok()).as_deref()
                            == Some(sha256.as_str())
                    }
                    _ => false,
                };
                if unchanged {
                    let _ = std::fs::remove_file(self.layer()?.join(path));
                } else {
                    // st_nlink is a u32 on some architectures.
                    #[allow(clippy::useless_conversion)]
                    let links = u64::from(stat.st_nlink);
                    self.push(
                        shown,
                        before_kind,
                        Some(Entry::File {
                            mode,
                            size,
                            sha256,
                            links,
                        }),
                    );
                }
            }
            SFlag::S_IFLNK => {
                let target = nix::fcntl::readlinkat(upper, name).map_err(layer_err)?;
                let unchanged = before_kind == Some(EntryKind::Symlink)
                    && project
                        .and_then(|p| nix::fcntl::readlinkat(p, name).ok())
                        .as_deref()
                        == Some(target.as_os_str());
                if !unchanged {
                    let target = target.to_string_lossy().into_owned();
                    self.push(shown, before_kind, Some(Entry::Symlink { target }));
                }
            }
            _ => self.push(
                shown,
                before_kind,
                Some(Entry::Special { mode: stat.st_mode }),
            ),
        }
        Ok(())
    }

    /// What the project has in a directory the run replaced and did not
    /// write again: deleted.
    fn deleted_below(
        &mut self,
        upper: BorrowedFd<'_>,
        project: Option<BorrowedFd<'_>>,
        name: &OsStr,
        path: &Path,
    ) -> Result<(), ReviewError> {
        let Some(project_dir) = project.and_then(|p| open_dir_at(p, name).ok()) else {
            return Ok(());
        };
        let layer_dir = open_dir_at(upper, name).map_err(|source| ReviewError::Layer {
            path: path.to_path_buf(),
            source,
        })?;
        let written = list(layer_dir.as_fd()).unwrap_or_default();
        for child in list(project_dir.as_fd()).unwrap_or_default() {
            if written.contains(&child) {
                continue;
            }
            let child_path = path.join(&child);
            let kind = stat_at(project_dir.as_fd(), &child).map(|s| kind_of(&s));
            self.push(child_path.to_string_lossy().into_owned(), kind, None);
        }
        Ok(())
    }

    fn push(&mut self, path: String, before: Option<EntryKind>, after: Option<Entry>) {
        let kind = match (&before, &after) {
            (None, _) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Deleted,
            (Some(_), Some(_)) => ChangeKind::Modified,
        };
        self.changes.push(Change {
            path,
            kind,
            after,
            before,
            applied: false,
        });
    }

    /// Copy a file of the layer into the store, hashing it on the way.
    fn keep_file(
        &mut self,
        upper: BorrowedFd<'_>,
        name: &OsStr,
        path: &Path,
    ) -> Result<(u64, String), ReviewError> {
        let source = nix::fcntl::openat(
            upper,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .map_err(|source| ReviewError::Layer {
            path: path.to_path_buf(),
            source,
        })?;
        let kept = self.layer()?.join(path);
        let io = |source| ReviewError::Io {
            op: "keeping",
            path: kept.clone(),
            source,
        };
        if let Some(parent) = kept.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&kept)
            .map_err(io)?;
        let mut input = std::fs::File::from(source);
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = input.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            // The layer's size bounds the blocks a run uses, not what its
            // files read as: a sparse file of 2 GiB takes no block of a
            // 512 MiB layer and 2 GiB of the store once copied. What is
            // kept is bounded by the same limit.
            self.kept_bytes += n as u64;
            if self.kept_bytes > self.started.limit {
                return Err(ReviewError::TooLarge {
                    path: path.to_path_buf(),
                    limit: self.started.limit,
                });
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io)?;
            size += n as u64;
        }
        Ok((size, hex(&hasher.finalize())))
    }
}

/// The SHA-256 of the regular file `name` in `dir`, hex.
pub(super) fn hash_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<String, Errno> {
    let fd = nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )?;
    let mut file = std::fs::File::from(fd);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

pub(super) fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Option<FileStat> {
    nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()
}

pub(super) fn kind_of(stat: &FileStat) -> EntryKind {
    match SFlag::from_bits_truncate(stat.st_mode & libc::S_IFMT) {
        SFlag::S_IFREG => EntryKind::File,
        SFlag::S_IFDIR => EntryKind::Dir,
        SFlag::S_IFLNK => EntryKind::Symlink,
        _ => EntryKind::Special,
    }
}

/// The names in a directory, without `.` and `..`, sorted.
pub(super) fn list(dir: BorrowedFd<'_>) -> Result<Vec<std::ffi::OsString>, Errno> {
    let fd = nix::fcntl::openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut entries = nix::dir::Dir::from_fd(fd)?;
    let mut names = Vec::new();
    for entry in entries.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    names.sort();
    Ok(names)
}
