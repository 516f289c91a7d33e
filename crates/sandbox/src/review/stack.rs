//! Stacked layers: how a recipe's steps build on each other inside one
//! transaction (see `crate::recipe`).
//!
//! A recipe keeps one accumulated layer on disk, in the overlay's own
//! upper-directory format (whiteouts are 0/0 character devices, a
//! directory that replaced the project's carries `user.overlay.opaque`).
//! Each attempt of a step is an ordinary review run whose overlay has that
//! layer as an extra lower directory above the project
//! (`lowerdir=ACCUMULATED:PROJECT`) and a fresh tmpfs as its upper: the
//! step sees what the steps before it left, and writes only its own tmpfs.
//! When the attempt ends the supervisor copies its upper into a directory
//! of its own ([`keep`]) instead of capturing it into the store; the recipe
//! merges that copy into the accumulated layer when the attempt succeeded
//! ([`merge`]) and removes it when it failed, so a failed attempt's writes
//! reach neither the retry nor the next step. After the last step the
//! accumulated layer is captured like any review run's layer, so the
//! whole recipe's changes are checked at apply by the same rules.
//!
//! Why one accumulated layer rather than one lower per step: the overlay
//! then always has two lower layers, whatever the recipe's length, and the
//! final capture reads one directory. Why a copy on disk rather than the
//! tmpfs itself: the tmpfs lives in the run's mount namespace, which is
//! gone when the attempt ends.
//!
//! A whiteout is created with `mknod(S_IFCHR, 0)`, which an unprivileged
//! user may do since Linux 5.8; the opaque mark is a `user.` attribute,
//! which the state directory's filesystem must keep (ext4, xfs, btrfs and
//! tmpfs since 6.6 do): where it cannot, the step fails and says so.

use std::collections::HashMap;
use std::ffi::{CStr, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use serde::{Deserialize, Serialize};

use super::capture::{list, open_dir_at, UPPER};
use super::{Kept, ReviewError};

const OPAQUE: &CStr = c"user.overlay.opaque";

use super::MAX_DEPTH;

/// Where init mounts a recipe's accumulated layer when the supervisor
/// hands it over as a tree: in the staging root, which the payload never
/// sees.
pub const STAGED_LOWER: &str = "/recipe-layer";
/// [`STAGED_LOWER`] for init's calls.
pub const STAGED_LOWER_C: &CStr = c"/recipe-layer";

/// A review run that is one attempt of a recipe's step: the accumulated
/// layer it sees above the project, and where its own layer is copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stack {
    /// The accumulated layer (an overlay upper directory), mounted as a
    /// read-only lower layer above the project.
    pub lower: PathBuf,
    /// A directory that does not exist yet: the attempt's layer is copied
    /// there when it ends.
    pub keep: PathBuf,
}

/// What one attempt wrote, read from its kept layer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Paths written (files, links, directories that replaced another),
    /// below the project root.
    pub written: Vec<String>,
    /// Paths removed.
    pub removed: Vec<String>,
}

/// Copy the attempt's layer (the `upper` directory below `layer_root`,
/// the tmpfs init handed over) into `into`, byte for byte and entry for
/// entry: whiteouts, opaque marks, modes and hard links within the layer.
/// Every entry is owned by the supervisor's user, like the accumulated
/// layer's root: a run started by root gets that layer idmapped as it gets
/// the project, so the next step owns what the steps before it wrote. The
/// run is over, so nothing changes the layer while it is read.
pub fn keep(layer_root: BorrowedFd<'_>, id: &str, into: &Path) -> Kept {
    let limit_reached = nix::sys::statvfs::fstatvfs(layer_root)
        .is_ok_and(|s| s.blocks_available() == 0 || s.files_available() == 0);
    let result = (|| {
        let upper = open_dir_at(layer_root, OsStr::new(UPPER)).map_err(layer(UPPER))?;
        create_private_dir(into)?;
        let root = open_dir(into)?;
        let mut copy = Copy {
            root: root.as_fd(),
            links: HashMap::new(),
            entries: 0,
        };
        copy.dir(upper.as_fd(), root.as_fd(), Path::new(""), 0)?;
        Ok::<usize, ReviewError>(copy.entries)
    })();
    match result {
        Ok(entries) => Kept {
            id: id.to_owned(),
            changes: entries,
            limit_reached,
            error: None,
        },
        Err(err) => Kept {
            id: id.to_owned(),
            changes: 0,
            limit_reached,
            error: Some(err.to_string()),
        },
    }
}

struct Copy<'a> {
    root: BorrowedFd<'a>,
    /// Files with more than one link, by inode: the first copy's path.
    links: HashMap<u64, PathBuf>,
    entries: usize,
}

impl Copy<'_> {
    fn dir(
        &mut self,
        from: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        relative: &Path,
        depth: usize,
    ) -> Result<(), ReviewError> {
        if depth > MAX_DEPTH {
            return Err(ReviewError::TooDeep {
                path: relative.to_path_buf(),
            });
        }
        let names = list(from).map_err(layer(relative))?;
        for name in &names {
            let path = relative.join(name);
            let err = layer(&path);
            let stat =
                nix::sys::stat::fstatat(from, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .map_err(&err)?;
            let mode = Mode::from_bits_truncate(stat.st_mode & 0o7777);
            let kind = SFlag::from_bits_truncate(stat.st_mode & libc::S_IFMT);
            self.entries += 1;
            match kind {
                SFlag::S_IFDIR => {
                    nix::sys::stat::mkdirat(to, name.as_os_str(), Mode::from_bits_truncate(0o700))
                        .map_err(&err)?;
                    let source = open_dir_at(from, name).map_err(&err)?;
                    let target = open_dir_at(to, name).map_err(&err)?;
                    if crate::sys::xattr::get(source.as_fd(), OPAQUE)
                        .map_err(&err)?
                        .is_some_and(|v| v == b"y")
                    {
                        crate::sys::xattr::set(target.as_fd(), OPAQUE, b"y").map_err(&err)?;
                    }
                    self.dir(source.as_fd(), target.as_fd(), &path, depth + 1)?;
                    nix::sys::stat::fchmod(target.as_fd(), mode).map_err(&err)?;
                }
                SFlag::S_IFREG => {
                    let first = (stat.st_nlink > 1)
                        .then(|| self.links.get(&stat.st_ino).cloned())
                        .flatten();
                    if let Some(first) = first {
                        nix::unistd::linkat(
                            self.root,
                            first.as_os_str(),
                            to,
                            name.as_os_str(),
                            AtFlags::empty(),
                        )
                        .map_err(&err)?;
                        continue;
                    }
                    copy_file(from, to, name, mode).map_err(&err)?;
                    if stat.st_nlink > 1 {
                        self.links.insert(stat.st_ino, path.clone());
                    }
                }
                SFlag::S_IFLNK => {
                    let target = nix::fcntl::readlinkat(from, name.as_os_str()).map_err(&err)?;
                    nix::unistd::symlinkat(target.as_os_str(), to, name.as_os_str())
                        .map_err(&err)?;
                }
                // A whiteout: the attempt removed what is below.
                SFlag::S_IFCHR if stat.st_rdev == 0 => {
                    nix::sys::stat::mknodat(to, name.as_os_str(), SFlag::S_IFCHR, Mode::empty(), 0)
                        .map_err(&err)?;
                }
                SFlag::S_IFIFO => {
                    nix::sys::stat::mknodat(to, name.as_os_str(), SFlag::S_IFIFO, mode, 0)
                        .map_err(&err)?;
                }
                // A socket (or a device, which the run cannot make): the
                // next step could not be shown it faithfully.
                _ => return Err(err(Errno::EOPNOTSUPP)),
            }
        }
        Ok(())
    }
}

fn copy_file(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    name: &OsStr,
    mode: Mode,
) -> Result<(), Errno> {
    let source = nix::fcntl::openat(
        from,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )?;
    let target = nix::fcntl::openat(
        to,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let mut input = std::fs::File::from(source);
    let mut output = std::fs::File::from(target);
    std::io::copy(&mut input, &mut output)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    // Set-id bits too: the final capture must see them to refuse them.
    nix::sys::stat::fchmod(output.as_fd(), mode)
}

/// Merge the kept layer `step` (made by [`keep`]) into the accumulated
/// layer `acc`, as the overlay would show `step` above `acc`: an entry of
/// `step` replaces `acc`'s, a directory that is not opaque merges into
/// `acc`'s, a whiteout stays a whiteout (it hides the project's entry).
/// Both are private directories of the recipe and no run is using them,
/// so entries are moved by name, following no link. `step` is consumed.
pub fn merge(step: &Path, acc: &Path) -> Result<(), ReviewError> {
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| ReviewError::Io { op, path, source }
    };
    let mut names: Vec<_> = std::fs::read_dir(step)
        .map_err(io("listing", step))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io("listing", step))?;
    names.sort();
    for name in names {
        let from = step.join(&name);
        let to = acc.join(&name);
        let source = std::fs::symlink_metadata(&from).map_err(io("reading", &from))?;
        let below = std::fs::symlink_metadata(&to).ok();
        if source.is_dir() {
            let opaque = is_opaque(&from)?;
            if !opaque && below.as_ref().is_some_and(std::fs::Metadata::is_dir) {
                let mode = source.permissions().mode() & 0o7777;
                // Opened for reading and writing whatever their modes.
                for dir in [&from, &to] {
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                        .map_err(io("opening", dir))?;
                }
                merge(&from, &to)?;
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))
                    .map_err(io("setting the mode of", &to))?;
                continue;
            }
            // A directory over what was not one hides what is below it.
            let cover = below.as_ref().is_some_and(|m| !m.is_dir());
            remove(&to, below.as_ref())?;
            std::fs::rename(&from, &to).map_err(io("moving", &from))?;
            if cover && !opaque {
                let dir = open_dir(&to)?;
                crate::sys::xattr::set(dir.as_fd(), OPAQUE, b"y").map_err(layer(&to))?;
            }
        } else {
            remove(&to, below.as_ref())?;
            std::fs::rename(&from, &to).map_err(io("moving", &from))?;
        }
    }
    std::fs::remove_dir(step).map_err(io("removing", step))
}

/// What the kept layer `step` wrote and removed, below the project root.
pub fn summary(step: &Path) -> Result<Summary, ReviewError> {
    let mut summary = Summary::default();
    summarize(step, Path::new(""), &mut summary)?;
    Ok(summary)
}

fn summarize(dir: &Path, relative: &Path, summary: &mut Summary) -> Result<(), ReviewError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReviewError::Io {
            op: "reading",
            path,
            source,
        }
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .collect::<Result<_, _>>()
        .map_err(io(dir))?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = relative.join(entry.file_name());
        let shown = path.to_string_lossy().into_owned();
        let meta = std::fs::symlink_metadata(entry.path()).map_err(io(&entry.path()))?;
        if meta.is_dir() {
            if is_opaque(&entry.path())? {
                summary.written.push(format!("{shown}/"));
            }
            summarize(&entry.path(), &path, summary)?;
        } else if is_whiteout(&meta) {
            summary.removed.push(shown);
        } else {
            summary.written.push(shown);
        }
    }
    Ok(())
}

/// The bytes of the regular files below `dir` (each link counted), for
/// the bound on a recipe's accumulated layer.
pub fn size(dir: &Path) -> Result<u64, ReviewError> {
    let mut total = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| ReviewError::Io {
            op: "reading",
            path: dir.clone(),
            source,
        })?;
        for entry in entries.filter_map(Result::ok) {
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    Ok(total)
}

fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    meta.file_type().is_char_device() && meta.rdev() == 0
}

fn is_opaque(dir: &Path) -> Result<bool, ReviewError> {
    let fd = open_dir(dir)?;
    Ok(crate::sys::xattr::get(fd.as_fd(), OPAQUE)
        .map_err(layer(dir))?
        .is_some_and(|v| v == b"y"))
}

fn remove(path: &Path, meta: Option<&std::fs::Metadata>) -> Result<(), ReviewError> {
    let result = match meta {
        None => return Ok(()),
        // std's remove_dir_all follows no link (CVE-2022-21658 fixed).
        Some(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Some(_) => std::fs::remove_file(path),
    };
    result.map_err(|source| ReviewError::Io {
        op: "removing",
        path: path.to_path_buf(),
        source,
    })
}

fn open_dir(path: &Path) -> Result<OwnedFd, ReviewError> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(layer(path))
}

/// A new directory only the user can enter (its parents made as needed).
pub fn create_private_dir(dir: &Path) -> Result<(), ReviewError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| ReviewError::Io {
            op: "creating",
            path: dir.to_path_buf(),
            source,
        })
}

fn layer(path: impl AsRef<Path>) -> impl Fn(Errno) -> ReviewError {
    let path = path.as_ref().to_path_buf();
    move |source| ReviewError::Layer {
        path: path.clone(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_later_step_replaces_merges_and_removes_like_the_overlay() {
        let dir = tempfile::tempdir().unwrap();
        let acc = dir.path().join("acc");
        let step = dir.path().join("step");
        write(&acc.join("kept"), "1");
        write(&acc.join("replaced"), "1");
        write(&acc.join("d/old"), "1");
        write(&acc.join("gone"), "1");
        write(&step.join("replaced"), "2");
        write(&step.join("d/new"), "2");
        std::fs::create_dir_all(&step).unwrap();
        nix::sys::stat::mknod(&step.join("gone"), SFlag::S_IFCHR, Mode::empty(), 0).unwrap();
        let summary = summary(&step).unwrap();
        assert_eq!(summary.written, ["d/new", "replaced"]);
        assert_eq!(summary.removed, ["gone"]);
        merge(&step, &acc).unwrap();
        assert!(!step.exists());
        let read = |p: &str| std::fs::read_to_string(acc.join(p)).unwrap();
        assert_eq!(read("kept"), "1");
        assert_eq!(read("replaced"), "2");
        assert_eq!(read("d/old"), "1");
        assert_eq!(read("d/new"), "2");
        assert!(is_whiteout(
            &std::fs::symlink_metadata(acc.join("gone")).unwrap()
        ));
    }
}
