//! The walkers: threads that take directories from a shared queue, list
//! them, stat what needs it, and keep what each directory holds as that
//! directory's [`DirFacts`].

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Type;
use nix::sys::stat::{FileStat, Mode};

use super::{
    ctime_is_local, kind_of, last_name, list, relative, stat_at, DirStamp, Found, Identity,
    ListedDir, ScanError, DIR_FLAGS, MAX_DEPTH,
};
use crate::project::Rules;

/// What the walk found in one directory (not below it): its share of a
/// [`super::Scan`]. Kept per directory so that a watcher can walk again
/// only the directories whose watches reported a change
/// ([`super::Walked::rewalk`]).
#[derive(Debug, Clone)]
pub(super) struct DirFacts {
    /// The directory as opened, before it was listed.
    pub(super) stamp: DirStamp,
    /// Whether a protected directory holds it.
    pub(super) inside_protected: bool,
    /// Names listed.
    pub(super) entries: u64,
    /// Subdirectories walked: what the walk reached from here.
    pub(super) walked: Vec<Vec<u8>>,
    pub(super) secrets: Vec<Found>,
    /// Symlinks with a secret's name: what they point at is hidden too.
    pub(super) secret_links: Vec<PathBuf>,
    /// Secret files with more than one name.
    pub(super) secret_inodes: Vec<Identity>,
    pub(super) protected: Vec<Found>,
    pub(super) protected_links: Vec<PathBuf>,
    pub(super) protected_before: Vec<(PathBuf, Identity)>,
    /// Regular files with more than one link: identity, links, path.
    pub(super) linked: Vec<(Identity, u64, PathBuf)>,
    /// The directory as the sweep after a run may take it.
    pub(super) listed: Option<ListedDir>,
}

impl DirFacts {
    fn new(stamp: DirStamp, inside_protected: bool) -> DirFacts {
        DirFacts {
            stamp,
            inside_protected,
            entries: 0,
            walked: Vec::new(),
            secrets: Vec::new(),
            secret_links: Vec::new(),
            secret_inodes: Vec::new(),
            protected: Vec::new(),
            protected_links: Vec::new(),
            protected_before: Vec::new(),
            linked: Vec::new(),
            listed: None,
        }
    }
}

/// Directories a walk may take as already walked: what a watcher kept,
/// less what its watches reported changed.
pub(super) struct Keep<'a> {
    /// Every directory kept, by its path below the root.
    pub(super) dirs: &'a HashMap<PathBuf, DirFacts>,
    /// Directories walked again in this walk, each a job of its own: a
    /// walk that reaches one of them leaves it to its job.
    pub(super) rewalked: &'a HashSet<PathBuf>,
}

/// A directory waiting to be walked.
pub(super) struct Job {
    pub(super) dir: OwnedFd,
    pub(super) components: Vec<Vec<u8>>,
    pub(super) inside_protected: bool,
    /// The directory as it was before it was listed.
    pub(super) stamp: DirStamp,
}

struct Shared {
    jobs: Vec<Job>,
    busy: usize,
    failed: Option<ScanError>,
}

/// Directories shared out between the walkers. Only a few wait at a time:
/// each holds an open descriptor, and a walker that finds the queue full
/// walks the directory itself.
pub(super) struct Queue {
    state: std::sync::Mutex<Shared>,
    changed: std::sync::Condvar,
}

/// How many directories may wait in the queue.
const QUEUE_MAX: usize = 16;

impl Queue {
    /// A queue holding the walk's first directories.
    pub(super) fn new(jobs: Vec<Job>) -> Queue {
        Queue {
            state: std::sync::Mutex::new(Shared {
                jobs,
                busy: 0,
                failed: None,
            }),
            changed: std::sync::Condvar::new(),
        }
    }

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

    /// The first failure of any walker.
    fn failure(&self) -> Option<ScanError> {
        self.lock().failed.take()
    }
}

/// How many walkers take directories from the queue: the walk is one
/// `fstatat` per file, which the kernel serves in parallel on the two or
/// more cores this runs on.
const WALKERS: usize = 2;

/// Entries one walker goes through before the others start (a few
/// milliseconds of `fstatat`).
pub(super) const ENTRIES_BEFORE_HELPERS: u64 = 2_000;

/// What a walk is asked to find, the same for every walker.
#[derive(Clone, Copy)]
pub(super) struct Asked<'a> {
    pub(super) rules: &'a Rules,
    /// Whether the payload may write the project: protection and hard
    /// links only matter then.
    pub(super) writable: bool,
    /// Ctimes (seconds) below this are old enough to record a directory.
    pub(super) trusted_before: i64,
    pub(super) keep: Option<&'a Keep<'a>>,
}

/// Walk every directory of `queue`, and everything below it that `keep`
/// does not hold, into one map of what each directory holds.
///
/// Directories are shared out between [`WALKERS`] threads, all joined
/// before this returns (the supervisor clones only from a single-threaded
/// process). Without a second thread, this one walks everything.
pub(super) fn walk(
    asked: Asked<'_>,
    queue: &Queue,
) -> Result<HashMap<PathBuf, DirFacts>, ScanError> {
    let mut main = Walker::new(asked, queue);
    // On this thread alone until the walk proves big: starting a second
    // walker (its stack and malloc arena) costs about half a millisecond
    // here, more than walking a small project takes.
    while main.entries < ENTRIES_BEFORE_HELPERS || !queue.has_jobs() {
        match queue.next() {
            Some(job) => main.take(job),
            None => return queue.failure().map_or(Ok(main.dirs), Err),
        }
    }
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..WALKERS)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("sandbox-scan".into())
                    .spawn_scoped(scope, || {
                        let mut walker = Walker::new(asked, queue);
                        walker.work();
                        walker
                    })
                    .ok()
            })
            .collect();
        main.work();
        for helper in helpers {
            match helper.join() {
                Ok(walker) => main.dirs.extend(walker.dirs),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    queue.failure().map_or(Ok(main.dirs), Err)
}

struct Walker<'a> {
    asked: Asked<'a>,
    queue: &'a Queue,
    visited_dirs: HashSet<Identity>,
    components: Vec<Vec<u8>>,
    /// What the directory being listed holds.
    current: DirFacts,
    /// Every directory this walker walked, by its path below the root.
    dirs: HashMap<PathBuf, DirFacts>,
    /// Entries this walker listed.
    entries: u64,
    /// Per device: whether its ctimes are the local kernel's.
    local_ctime: HashMap<u64, bool>,
}

impl<'a> Walker<'a> {
    fn new(asked: Asked<'a>, queue: &'a Queue) -> Self {
        Walker {
            asked,
            queue,
            visited_dirs: HashSet::new(),
            components: Vec::new(),
            current: DirFacts::new(DirStamp::default(), false),
            dirs: HashMap::new(),
            entries: 0,
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

    fn facts(&mut self) -> &mut DirFacts {
        &mut self.current
    }

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
            && stamp.ctime.0 < self.asked.trusted_before
            && self.ctime_is_local(dir, stamp);
        // A directory walked in place, below the one being listed, has
        // facts of its own.
        let outer = std::mem::replace(&mut self.current, DirFacts::new(stamp, inside_protected));
        let listed = self.list_entries(dir, &here, inside_protected);
        let mut facts = std::mem::replace(&mut self.current, outer);
        let subdirs = listed?;
        if record {
            facts.listed = Some(ListedDir { stamp, subdirs });
        }
        self.dirs.insert(here, facts);
        Ok(())
    }

    /// List `dir` and look at each entry; the subdirectories a sweep
    /// descends into.
    fn list_entries(
        &mut self,
        dir: &OwnedFd,
        here: &Path,
        inside_protected: bool,
    ) -> Result<Vec<Vec<u8>>, ScanError> {
        let mut subdirs = Vec::new();
        for (name, reported) in list(dir, here)? {
            self.entries += 1;
            self.current.entries += 1;
            self.components.push(name);
            let result = self.entry(dir, reported, inside_protected);
            let name = self.components.pop();
            if result? {
                subdirs.extend(name);
            }
        }
        Ok(subdirs)
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
        let rules = self.asked.rules;
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
        if rules.secrets.matching(&self.components, is_dir).is_some()
            || (link && rules.secrets.matching(&self.components, true).is_some())
        {
            if kind == Type::Symlink {
                // A mount would follow the link, so what it points at is
                // hidden instead (when that is in the project): `.env ->
                // config/prod.env` must not show the file under either name.
                let here = path(&self.components);
                self.facts().secret_links.push(here);
                return Ok(false);
            }
            let here = path(&self.components);
            if kind == Type::File {
                let s = match stat {
                    Some(s) => s,
                    None => stat_at(dir, name(&self.components), &here)?,
                };
                if s.st_nlink > 1 {
                    self.facts().secret_inodes.push(Identity::of(&s));
                    self.note_link(&s, &here);
                }
            }
            self.facts().secrets.push(Found { path: here, is_dir });
            return Ok(false); // nothing below a hidden directory is visible
        }
        let mut protected_here = inside_protected;
        let protected = rules.is_protected(&self.components, is_dir)
            || (link && rules.is_protected(&self.components, true));
        if self.asked.writable && !inside_protected && protected {
            let here = path(&self.components);
            let s = match stat {
                Some(s) => s,
                None => stat_at(dir, name(&self.components), &here)?,
            };
            stat = Some(s);
            let facts = self.facts();
            facts
                .protected_before
                .push((here.clone(), Identity::of(&s)));
            if kind == Type::Symlink {
                facts.protected_links.push(here);
            } else {
                facts.protected.push(Found { path: here, is_dir });
                protected_here = true;
            }
        }
        match kind {
            Type::Directory => {
                self.subdirectory(dir, protected_here)?;
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

    /// Walk the directory last in `components`, now or through the queue,
    /// unless it was walked before and nothing in it changed since.
    fn subdirectory(&mut self, dir: &OwnedFd, inside_protected: bool) -> Result<(), ScanError> {
        let path = relative(&self.components);
        let child = nix::fcntl::openat(
            dir.as_fd(),
            OsStr::from_bytes(last_name(&self.components)),
            DIR_FLAGS,
            Mode::empty(),
        )
        .map_err(|source| ScanError::Read {
            path: path.clone(),
            source,
        })?;
        // The opened directory's own stat, taken before it is listed: its
        // ctime is what a later sweep compares.
        let s = nix::sys::stat::fstat(child.as_fd()).map_err(|source| ScanError::Read {
            path: path.clone(),
            source,
        })?;
        let name = last_name(&self.components).to_vec();
        self.facts().walked.push(name);
        if let Some(keep) = self.asked.keep {
            // Its own job walks it again; or its watch reported nothing
            // since it was walked (a directory put in its place is a name
            // created, which the keeper drops before the walk).
            let unchanged = keep.dirs.get(&path).is_some_and(|kept| {
                kept.stamp.identity == Identity::of(&s) && kept.inside_protected == inside_protected
            });
            if keep.rewalked.contains(&path) || unchanged {
                return Ok(());
            }
        }
        if !self.visited_dirs.insert(Identity::of(&s)) {
            return Err(ScanError::TooDeep { path });
        }
        let job = Job {
            dir: child,
            components: self.components.clone(),
            inside_protected,
            stamp: DirStamp::of(&s),
        };
        if let Err(job) = self.queue.offer(job) {
            self.walk(&job.dir, job.stamp, inside_protected)?;
        }
        Ok(())
    }

    fn note_link(&mut self, stat: &FileStat, path: &Path) {
        self.facts()
            .linked
            .push((Identity::of(stat), stat.st_nlink, path.to_path_buf()));
    }
}
