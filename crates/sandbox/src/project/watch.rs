//! inotify watches on every directory and regular file of a project: the
//! one way this crate learns, without walking it again, that a project may
//! no longer be what a walk saw.
//!
//! What a walk finds can change only through an event one of these watches
//! reports:
//! - a name added, removed or renamed in any directory (a new secret, a
//!   protected name, a file replaced) is an event of that directory's watch;
//! - a hard link made to a file from outside the project changes only the
//!   file's link count: no directory of the project sees it, so every
//!   regular file is watched for `IN_ATTRIB` too;
//! - a change of a directory's mode or owner (a walk that now fails) is an
//!   `IN_ATTRIB` of its own watch.
//!
//! A mount made over a path inside the project raises no inotify event;
//! the long-lived user of this type ([`super::watcher`]) also watches the
//! mount table. fsnotify queues an event inside the system call that made
//! the change, so once a change has returned, draining the queue sees it.
//!
//! Nor does renaming a directory above the project: the watches stay on
//! the tree that moved while something else takes the project's path, so
//! every drain also checks that the path still names the watched root.
//!
//! Each watch pins its inode in memory, and a user has
//! `fs.inotify.max_user_watches` of them in all (192,536 on the machine
//! this was measured on): a project is watched only within a budget.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use super::scan::Changes;

/// Why a project cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// More directories and files than the budget.
    #[error("the project has more than {0} directories and files, the budget of inotify watches (fs.inotify.max_user_watches bounds it for all of a user's programs); runs in it walk it themselves. To watch it, raise the limit as root (`sysctl fs.inotify.max_user_watches=N`, N above the project's count of directories and files plus what editors use) and, for `sandbox watch`, pass --max-watches N if it was given")]
    TooLarge(usize),
    /// inotify refused.
    #[error("watching {path}: {source}")]
    Watch {
        /// The directory or file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The project itself was removed or renamed.
    #[error("the project {0} was removed or renamed, or a directory above it was")]
    RootGone(PathBuf),
}

/// What a drain of the queue found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Drained {
    /// Events read.
    pub events: usize,
    /// The watches were set again from scratch (a lost event or a moved
    /// directory made the map of watches unreliable): anything may have
    /// changed anywhere, and `changes` says nothing.
    pub rebuilt: bool,
    /// Where the events were.
    pub changes: Changes,
}

/// Watches on a whole project.
pub struct TreeWatch {
    root: PathBuf,
    /// The device and inode `root` named when the watches were set.
    root_identity: (u64, u64),
    budget: usize,
    inotify: Inotify,
    /// Directory watches and the path each was set on.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// File watches and the directory watch of each name the file was
    /// watched under (a file hard-linked within the project has one watch,
    /// and a name in each directory).
    files: HashMap<WatchDescriptor, Parents>,
    watched: usize,
}

/// The directories a watched file was seen in: almost always one.
enum Parents {
    One(WatchDescriptor),
    Many(Vec<WatchDescriptor>),
}

impl Parents {
    fn add(&mut self, parent: WatchDescriptor) {
        match self {
            Parents::One(first) if *first == parent => {}
            Parents::One(first) => *self = Parents::Many(vec![first.clone(), parent]),
            Parents::Many(all) if all.contains(&parent) => {}
            Parents::Many(all) => all.push(parent),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &WatchDescriptor> {
        let (one, many) = match self {
            Parents::One(first) => (Some(first), &[][..]),
            Parents::Many(all) => (None, all.as_slice()),
        };
        one.into_iter().chain(many)
    }
}

const DIR_MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::DONT_FOLLOW)
    .union(WatchMask::ONLYDIR);

const FILE_MASK: WatchMask = WatchMask::ATTRIB.union(WatchMask::DONT_FOLLOW);

impl TreeWatch {
    /// Watch `root` and every directory and regular file below it (never
    /// through a link), at most `budget` of them. Each directory is
    /// watched before it is listed, so an entry made meanwhile is an event
    /// of its watched parent.
    pub fn new(root: &Path, budget: usize) -> Result<TreeWatch, WatchError> {
        let inotify = Inotify::init().map_err(|source| WatchError::Watch {
            path: root.to_path_buf(),
            source,
        })?;
        let mut watch = TreeWatch {
            root: root.to_path_buf(),
            root_identity: identity_at(root)?,
            budget,
            inotify,
            dirs: HashMap::new(),
            files: HashMap::new(),
            watched: 0,
        };
        watch.add_tree(root, None)?;
        Ok(watch)
    }

    /// Watch only `root` itself (its owner, mode, removal or rename): for a
    /// view that shows none of the project's contents.
    pub fn root_only(root: &Path) -> Result<TreeWatch, WatchError> {
        let inotify = Inotify::init().map_err(|source| WatchError::Watch {
            path: root.to_path_buf(),
            source,
        })?;
        // Before the watch: a root swapped in between is then a mismatch.
        let root_identity = identity_at(root)?;
        let mask = WatchMask::ATTRIB
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::DONT_FOLLOW
            | WatchMask::ONLYDIR;
        inotify
            .watches()
            .add(root, mask)
            .map_err(|source| WatchError::Watch {
                path: root.to_path_buf(),
                source,
            })?;
        Ok(TreeWatch {
            root: root.to_path_buf(),
            root_identity,
            budget: 1,
            inotify,
            dirs: HashMap::new(),
            files: HashMap::new(),
            watched: 1,
        })
    }

    /// The descriptor to poll for events.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }

    /// Watches set.
    pub fn watched(&self) -> usize {
        self.watched
    }

    /// Whether an event is waiting, without reading it: for a user that
    /// only needs to know that something happened since the watches were
    /// set. A failed read counts as a change.
    pub fn pending(&self) -> bool {
        let mut set = crate::poll_set::PollSet::default();
        let slot = set.add(self.fd(), nix::poll::PollFlags::POLLIN);
        match set.wait_for(Some(std::time::Duration::ZERO)) {
            Ok(()) => set.ready(Some(slot)) || self.moved_away(),
            Err(_) => true,
        }
    }

    /// Whether the root's path names another object than the one watched
    /// (a directory above it renamed, or the root swapped through one):
    /// no watch reports that.
    fn moved_away(&self) -> bool {
        identity_at(&self.root).map_or(true, |now| now != self.root_identity)
    }

    /// Read every waiting event and keep the watches complete: an entry
    /// created in a watched directory is watched (a directory with all it
    /// holds); a lost event, a moved directory or a failed read sets every
    /// watch again. Nonzero `events` means the project may have changed
    /// since the last drain.
    pub fn drain(&mut self) -> Result<Drained, WatchError> {
        if self.moved_away() {
            return Err(WatchError::RootGone(self.root.clone()));
        }
        let mut drained = Drained::default();
        let mut created = Vec::new();
        let mut rebuild = false;
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let events = match self.inotify.read_events(&mut buffer) {
                Ok(events) => events,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    drained.events += 1;
                    rebuild = true;
                    break;
                }
            };
            let mut read = 0;
            for event in events {
                read += 1;
                let mask = event.mask;
                if mask.contains(EventMask::Q_OVERFLOW) {
                    rebuild = true;
                    continue;
                }
                if mask.contains(EventMask::IGNORED) {
                    // The watch is gone (its object removed): it no longer
                    // counts against the budget.
                    if self.dirs.remove(&event.wd).is_some()
                        || self.files.remove(&event.wd).is_some()
                    {
                        self.watched = self.watched.saturating_sub(1);
                    }
                    continue;
                }
                let Some(dir) = self.dirs.get(&event.wd) else {
                    // A file's watch: its link count or mode changed, which
                    // the walk of each directory naming it sees.
                    if let Some(parents) = self.files.get(&event.wd) {
                        for parent in parents.iter() {
                            if let Some(dir) = self.dirs.get(parent) {
                                drained.changes.dirs.insert(below(&self.root, dir));
                            }
                        }
                    }
                    continue;
                };
                if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
                    if *dir == self.root {
                        return Err(WatchError::RootGone(self.root.clone()));
                    }
                    // A moved directory's watch still names its old path.
                    rebuild |= mask.contains(EventMask::MOVE_SELF);
                    continue;
                }
                if mask.contains(EventMask::ISDIR)
                    && mask.intersects(EventMask::MOVED_FROM | EventMask::MOVED_TO)
                {
                    rebuild = true;
                    continue;
                }
                drained.changes.dirs.insert(below(&self.root, dir));
                if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                    if let Some(name) = event.name {
                        let path = dir.join(name);
                        drained.changes.created.insert(below(&self.root, &path));
                        created.push((path, event.wd.clone()));
                    }
                }
            }
            if read == 0 {
                break;
            }
            drained.events += read;
        }
        if rebuild && !self.dirs.is_empty() {
            *self = TreeWatch::new(&self.root, self.budget)?;
            drained.rebuilt = true;
        } else {
            for (path, parent) in created {
                self.add_tree(&path, Some(parent))?;
            }
        }
        Ok(drained)
    }

    /// Watch `top` (a name in the directory watched as `parent`) and, when
    /// it is a directory, everything below it. A name that is gone by now is
    /// skipped: its removal is an event.
    fn add_tree(&mut self, top: &Path, parent: Option<WatchDescriptor>) -> Result<(), WatchError> {
        let Ok(meta) = std::fs::symlink_metadata(top) else {
            return Ok(());
        };
        if meta.is_file() {
            return match parent {
                Some(parent) => self.add_file(top, parent),
                None => Ok(()),
            };
        }
        if !meta.is_dir() {
            return Ok(());
        }
        let mut pending = vec![top.to_path_buf()];
        while let Some(dir) = pending.pop() {
            self.count()?;
            let wd = match self.inotify.watches().add(&dir, DIR_MASK) {
                Ok(wd) => wd,
                // Replaced by something else since it was listed: an event.
                Err(err) if gone(&err) && dir != self.root => continue,
                Err(source) => return Err(WatchError::Watch { path: dir, source }),
            };
            self.dirs.insert(wd.clone(), dir.clone());
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(err) if gone(&err) && dir != self.root => continue,
                Err(source) => return Err(WatchError::Watch { path: dir, source }),
            };
            for entry in entries {
                let entry = entry.map_err(|source| WatchError::Watch {
                    path: dir.clone(),
                    source,
                })?;
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    pending.push(entry.path());
                } else if kind.is_file() {
                    self.add_file(&entry.path(), wd.clone())?;
                }
            }
        }
        Ok(())
    }

    fn add_file(&mut self, path: &Path, parent: WatchDescriptor) -> Result<(), WatchError> {
        match self.inotify.watches().add(path, FILE_MASK) {
            // Another name of a file already watched: one watch, one more
            // directory to walk when it reports.
            Ok(wd) => match self.files.get_mut(&wd) {
                Some(parents) => {
                    parents.add(parent);
                    Ok(())
                }
                None => {
                    self.files.insert(wd, Parents::One(parent));
                    self.count()
                }
            },
            Err(err) if gone(&err) => Ok(()),
            Err(source) => Err(WatchError::Watch {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    fn count(&mut self) -> Result<(), WatchError> {
        self.watched += 1;
        if self.watched > self.budget {
            return Err(WatchError::TooLarge(self.budget));
        }
        Ok(())
    }
}

/// `path` (a watched directory or a name in one) below the root.
fn below(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root).unwrap_or(path).to_path_buf()
}

/// The device and inode `path` names now.
fn identity_at(path: &Path) -> Result<(u64, u64), WatchError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .map(|meta| (meta.dev(), meta.ino()))
        .map_err(|source| WatchError::Watch {
            path: path.to_path_buf(),
            source,
        })
}

/// A name that went away, or became something else, between being listed
/// and being watched.
fn gone(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(watch: &mut TreeWatch) -> Drained {
        watch.drain().unwrap()
    }

    #[test]
    fn quiet_until_a_name_changes_anywhere_or_a_link_count_does() {
        let outside = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        std::fs::create_dir_all(p.join("a/b")).unwrap();
        std::fs::write(p.join("a/b/file"), "x").unwrap();
        let mut watch = TreeWatch::new(p, 100).unwrap();
        assert_eq!(watch.watched(), 4);
        assert_eq!(settle(&mut watch).events, 0);
        assert!(!watch.pending());

        // A new directory, and a file in it: both watched from now on.
        std::fs::create_dir(p.join("a/new")).unwrap();
        std::fs::write(p.join("a/new/.env"), "SECRET").unwrap();
        assert!(watch.pending());
        assert!(settle(&mut watch).events > 0);
        assert_eq!(settle(&mut watch).events, 0);
        std::fs::write(p.join("a/new/second"), "").unwrap();
        assert!(
            settle(&mut watch).events > 0,
            "the new directory is watched"
        );

        // A hard link made from outside: only the file's own watch sees it.
        std::fs::hard_link(p.join("a/b/file"), outside.path().join("link")).unwrap();
        assert!(settle(&mut watch).events > 0, "link count change unseen");
        // The file made in the new directory is watched too.
        std::fs::hard_link(p.join("a/new/second"), outside.path().join("l2")).unwrap();
        assert!(
            settle(&mut watch).events > 0,
            "new file's link count unseen"
        );
    }

    #[test]
    fn a_moved_directory_sets_the_watches_again() {
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        std::fs::create_dir_all(p.join("a/b")).unwrap();
        let mut watch = TreeWatch::new(p, 100).unwrap();
        std::fs::rename(p.join("a"), p.join("z")).unwrap();
        let drained = settle(&mut watch);
        assert!(drained.rebuilt && drained.events > 0);
        std::fs::write(p.join("z/b/new"), "").unwrap();
        assert!(settle(&mut watch).events > 0);
    }

    #[test]
    fn beyond_the_budget_is_an_error_and_the_root_going_away_too() {
        let project = tempfile::tempdir().unwrap();
        for n in 0..5 {
            std::fs::write(project.path().join(n.to_string()), "").unwrap();
        }
        assert!(matches!(
            TreeWatch::new(project.path(), 3),
            Err(WatchError::TooLarge(3))
        ));
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("p");
        std::fs::create_dir(&root).unwrap();
        let mut watch = TreeWatch::new(&root, 10).unwrap();
        std::fs::rename(&root, parent.path().join("q")).unwrap();
        assert!(matches!(watch.drain(), Err(WatchError::RootGone(_))));
    }

    #[test]
    fn a_directory_above_the_root_renamed_is_the_root_gone() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("above/p");
        std::fs::create_dir_all(&root).unwrap();
        let mut watch = TreeWatch::new(&root, 10).unwrap();
        let mut root_only = TreeWatch::root_only(&root).unwrap();
        std::fs::rename(parent.path().join("above"), parent.path().join("moved")).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        assert!(
            root_only.pending(),
            "no event, but the path names another root"
        );
        assert!(matches!(watch.drain(), Err(WatchError::RootGone(_))));
        assert!(matches!(root_only.drain(), Err(WatchError::RootGone(_))));
    }
}
