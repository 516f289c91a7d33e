//! Review mode: a run's changes to the project land in a layer of its own
//! and reach the project only when a person or a policy applies them.
//!
//! Inside, the project is an overlay (the project as its lower layer, a
//! size-limited tmpfs as its upper one) mounted by init in the run's user
//! namespace; the masks of secrets and the read-only binds of protected
//! entries are mounted on top of the merged directory, since an overlay
//! shows nothing mounted below its lower directory. A write to a file that
//! is hard-linked outside the project copies it up into the layer, so it
//! never reaches the outside file. The tmpfs enforces the size limit while
//! the run writes; init hands its root to the supervisor with the payload's
//! exit, and the supervisor copies it into the store ([`capture`]) once
//! every process of the run is gone.
//!
//! After the run, [`changes`] lists what the run changed against the project
//! as it is now, and [`apply`] writes the accepted changes under the host's
//! rules: protected entries, CI definitions, set-id files, links out of the
//! project, hard links and secrets' names are refused unless a flag allows
//! them, and a path that changed on the host since the run started is a
//! conflict. Every face (the command line, later the daemon and MCP) calls
//! these.

pub mod apply;
pub mod capture;
pub mod changes;
pub mod stack;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The layer's size limit when the profile sets none: held in memory while
/// the run writes, like `/tmp`.
pub const DEFAULT_LAYER_SIZE: u64 = 512 << 20;

/// Most inodes the layer may hold (tmpfs' own default scales with memory).
pub const LAYER_INODES: u64 = 1 << 20;

/// A failure of review mode, naming the run, path or step.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// No stored run has this id.
    #[error("no run `{id}` is kept in {dir} (see `sandbox changes --list`; runs disappear once applied or discarded)")]
    UnknownRun {
        /// The id asked for.
        id: String,
        /// The store.
        dir: PathBuf,
    },
    /// `last` names no run: none of this project is kept.
    #[error("no review run of {} is kept (`last` is the newest of the current directory's; `sandbox changes --list` lists every kept run)", project.display())]
    NoLastRun {
        /// The project (the current directory).
        project: PathBuf,
    },
    /// The run has a start record but no record of its changes: its
    /// capture is under way, or its supervisor was killed during it.
    #[error("run `{0}` has no record of its changes: it was killed before its changes were captured, or they are being captured right now (nothing of it can be applied); drop it with `sandbox discard {0}`")]
    Incomplete(String),
    /// Another apply or discard of the run is under way.
    #[error("run `{0}` is being applied or discarded by another process; wait for it, then look again with `sandbox changes {0}`")]
    Busy(String),
    /// An id that cannot be a run's (path separators, dots).
    #[error("`{0}` is not a run id (ids look like 20261128-024501-3fa2)")]
    BadId(String),
    /// A file of the store could not be read or written.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A record of the store is not what this version writes.
    #[error("{path} is not a readable record of a review run: {source}")]
    Record {
        /// The record.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// The run's layer could not be read after the run.
    #[error("reading the run's layer at {path}: {source}")]
    Layer {
        /// The path below the layer.
        path: PathBuf,
        /// The errno.
        source: nix::errno::Errno,
    },
    /// The run's files read as more than its layer's limit (sparse files,
    /// or hard links to one file).
    #[error("the run's files add up to more than its layer's limit of {limit} bytes when read (at {}: sparse files, or many hard links to one file), so nothing of it was kept; raise [filesystem] review_size if the run really writes that much", path.display())]
    TooLarge {
        /// The file that went past the limit, below the layer.
        path: PathBuf,
        /// The layer's limit in bytes.
        limit: u64,
    },
    /// The run nested directories deeper than [`MAX_DEPTH`].
    #[error("the run's layer nests directories deeper than {MAX_DEPTH} levels (below {}), so nothing of it was kept; no project needs that depth, so look at what the command did", first_component(path))]
    TooDeep {
        /// The first directory too deep, below the layer.
        path: PathBuf,
    },
    /// Apply refused: each line names a path and why (and the flag that
    /// allows it, where one does).
    #[error("nothing was applied:\n{}", .0.iter().map(Refusal::to_string).collect::<Vec<_>>().join("\n"))]
    Refused(Vec<Refusal>),
    /// A path named on the command line is not among the run's changes.
    #[error("`{0}` is not among the run's changes (see `sandbox changes RUN`)")]
    NotAChange(String),
    /// Writing the project failed midway (what was written before stays,
    /// each file whole).
    #[error("applying {path}: {source} (the changes before it were applied, each file whole; the run keeps the rest)")]
    Apply {
        /// The project path.
        path: String,
        /// The errno.
        source: nix::errno::Errno,
    },
    /// A kept file is not what the run wrote: its size or hash differs
    /// from the record, or it is no longer a plain file.
    #[error("the content kept for {path} is not what the run wrote ({why}): the run's store was changed after the run, so it was not applied (the changes before it were); drop the run with `sandbox discard`")]
    Tampered {
        /// The project path.
        path: String,
        /// What differs.
        why: String,
    },
}

/// The deepest directory a review run's layer may hold. The supervisor's
/// walks of a layer recurse, one frame and descriptor per level, and the
/// payload decides the depth: 100,000 nested directories overflowed the
/// supervisor's stack. A run that nests deeper keeps nothing, and says
/// why. No real tree comes near: apply could not even name a path that
/// deep beneath the project (PATH_MAX is 4,096 bytes).
pub const MAX_DEPTH: usize = 256;

/// The first component of `path`, escaped, for a message that must not
/// repeat a path hundreds of levels long.
fn first_component(path: &Path) -> String {
    let first = path.iter().next().unwrap_or_default();
    crate::broker::prompt::escape(&first.to_string_lossy())
}

/// One reason apply refused: the path (None: the whole run), why, and the
/// `sandbox apply` flag that allows it (None: nothing does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The project path, `/`-separated.
    pub path: Option<String>,
    /// Why.
    pub reason: String,
    /// The flag that allows it, such as `--allow-protected`.
    pub flag: Option<String>,
}

impl Refusal {
    /// A refusal of `path`.
    pub fn at(path: &str, reason: impl Into<String>, flag: Option<&str>) -> Refusal {
        Refusal {
            path: Some(path.to_owned()),
            reason: reason.into(),
            flag: flag.map(str::to_owned),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A person reads this: the path and the reason (which may quote a
        // link target) are the run's, so no byte of them may steer the terminal.
        use crate::broker::prompt::escape;
        if let Some(path) = &self.path {
            write!(f, "{}: ", escape(path))?;
        }
        f.write_str(&escape(&self.reason))?;
        match &self.flag {
            Some(flag) => write!(f, ": pass {flag}"),
            None => Ok(()),
        }
    }
}

/// What the supervisor records when a review run starts: enough for the
/// run's changes to be checked against the project later.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Started {
    /// The run's id.
    pub id: String,
    /// The canonical project root.
    pub project: PathBuf,
    /// The profile's name.
    pub profile: String,
    /// The start in nanoseconds since the epoch, on the filesystems' clock:
    /// a project entry whose change time is at or after it changed while
    /// the run ran (a conflict).
    pub started_ns: i128,
    /// The profile's secret patterns (names refused at apply).
    pub secrets: Vec<String>,
    /// The profile's protected patterns (refused at apply).
    pub protect: Vec<String>,
    /// The layer's size limit.
    pub limit: u64,
    /// One attempt of a recipe's step: the layer it sees above the project
    /// and where its own goes, instead of the store ([`stack`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<stack::Stack>,
}

/// One apply or discard's hold on a run (see [`Store::lock`]).
#[derive(Debug)]
pub struct RunLock {
    _held: nix::fcntl::Flock<std::fs::File>,
}

/// What a review run kept, as its report says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// The run's id.
    pub id: String,
    /// How many paths it changed.
    pub changes: usize,
    /// It filled its layer: some writes failed, the changes may be partial.
    pub limit_reached: bool,
    /// Why nothing was kept (the layer could not be read).
    pub error: Option<String>,
}

impl Kept {
    /// The line `sandbox run` prints on stderr when the run ends.
    pub fn notice(&self) -> String {
        if let Some(error) = &self.error {
            return format!(
                "sandbox: run {}: its changes were not kept: {error}",
                self.id
            );
        }
        if self.changes == 0 && !self.limit_reached {
            return format!(
                "sandbox: run {}: no changes to the project, nothing kept",
                self.id
            );
        }
        let full = if self.limit_reached {
            " (it filled its layer: some writes failed, so they may be partial)"
        } else {
            ""
        };
        format!(
            "sandbox: run {}: {} change(s) kept for review{full}: `sandbox changes {}`, then `sandbox apply {}` or `sandbox discard {}`",
            self.id, self.changes, self.id, self.id, self.id
        )
    }
}

/// The kept runs: `STATE/runs/ID/` with `started.json`, `changes.json`,
/// `report.json` and `layer/` (the changed files' contents).
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// The store in the user's state directory
    /// ([`crate::safe_file::state_dir`]).
    pub fn user() -> Store {
        Store {
            root: crate::safe_file::state_dir().join("runs"),
        }
    }

    /// A store at `root` (tests).
    pub fn at(root: PathBuf) -> Store {
        Store { root }
    }

    /// Where the store is.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of run `id`, checked to be a name of ours.
    pub fn run_dir(&self, id: &str) -> Result<PathBuf, ReviewError> {
        let valid = !id.is_empty()
            && id.len() <= 64
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !id.starts_with('-');
        if !valid {
            return Err(ReviewError::BadId(id.to_owned()));
        }
        Ok(self.root.join(id))
    }

    /// A review run's start: its id and what apply will compare with.
    /// Nothing is written until the run has changes to keep
    /// ([`Store::create_run`]), so a cold run that changes nothing costs
    /// no filesystem work here.
    pub fn start(&self, project: &Path, policy: &crate::profile::policy::Policy) -> Started {
        Started {
            id: new_id(0),
            project: project.to_path_buf(),
            profile: policy.name.clone(),
            started_ns: start_ns(),
            secrets: policy.filesystem.secrets.clone(),
            protect: policy.filesystem.protect.clone(),
            limit: policy.filesystem.review_size,
            stack: None,
        }
    }

    /// The run's directory, private to the user, with its start record.
    /// Two runs started in the same second with the same 16 bits are told
    /// apart here: the later one takes another id (`started.id` changes).
    pub fn create_run(&self, started: &mut Started) -> Result<PathBuf, ReviewError> {
        let io = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| ReviewError::Io { op, path, source }
        };
        create_private_dirs(&self.root).map_err(io("creating", &self.root))?;
        let mut attempt = 0u32;
        let dir = loop {
            let dir = self.run_dir(&started.id)?;
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && attempt < 64 => {
                    attempt += 1;
                    started.id = new_id(attempt);
                }
                Err(source) => return Err(io("creating", &dir)(source)),
            }
        };
        write_new_json(&dir.join("started.json"), started)?;
        Ok(dir)
    }

    /// The start record of run `id`.
    pub fn started(&self, id: &str) -> Result<Started, ReviewError> {
        let dir = self.existing(id)?;
        if !self.is_complete(id) {
            return Err(ReviewError::Incomplete(id.to_owned()));
        }
        read_json(&dir.join("started.json"))
    }

    /// The changes of run `id` (captured when it ended).
    pub fn changes(&self, id: &str) -> Result<Captured, ReviewError> {
        let dir = self.existing(id)?;
        if !self.is_complete(id) {
            return Err(ReviewError::Incomplete(id.to_owned()));
        }
        read_json(&dir.join("changes.json"))
    }

    /// Whether run `id` has the record of its changes: false while the
    /// run's end is being captured, and forever for a run whose supervisor
    /// was killed during the capture (`sandbox discard` drops it).
    pub fn is_complete(&self, id: &str) -> bool {
        self.run_dir(id).is_ok_and(|dir| {
            ["started.json", "changes.json"]
                .iter()
                .all(|record| std::fs::symlink_metadata(dir.join(record)).is_ok())
        })
    }

    /// The first changes record of run `id`, as the run ends.
    pub(crate) fn first_changes(&self, id: &str, captured: &Captured) -> Result<(), ReviewError> {
        let dir = self.existing(id)?;
        write_new_json(&dir.join("changes.json"), captured)
    }

    /// Replace the changes record of run `id`.
    pub fn save_changes(&self, id: &str, captured: &Captured) -> Result<(), ReviewError> {
        let dir = self.existing(id)?;
        write_json(&dir.join("changes.json"), captured)
    }

    /// Keep the run's report beside its changes.
    pub fn save_report(&self, id: &str, report_json: &[u8]) -> Result<(), ReviewError> {
        let dir = self.existing(id)?;
        let path = dir.join("report.json");
        crate::safe_file::replace(&path, report_json).map_err(|err| ReviewError::Io {
            op: "writing",
            path,
            source: std::io::Error::other(err.to_string()),
        })
    }

    /// Where the contents of the run's changed files are kept.
    pub fn layer_dir(&self, id: &str) -> Result<PathBuf, ReviewError> {
        Ok(self.existing(id)?.join("layer"))
    }

    /// Run `id` for one apply or discard at a time: held until dropped.
    pub fn lock(&self, id: &str) -> Result<RunLock, ReviewError> {
        let dir = self.existing(id)?;
        let file = std::fs::File::open(&dir).map_err(|source| ReviewError::Io {
            op: "opening",
            path: dir.clone(),
            source,
        })?;
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(RunLock { _held: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(ReviewError::Busy(id.to_owned())),
            Err((_, errno)) => Err(ReviewError::Io {
                op: "locking",
                path: dir,
                source: errno.into(),
            }),
        }
    }

    /// Drop run `id` and everything kept of it.
    pub fn discard(&self, id: &str) -> Result<(), ReviewError> {
        let _lock = self.lock(id)?;
        self.remove(id)
    }

    /// Remove run `id`; the caller holds its lock.
    pub(crate) fn remove(&self, id: &str) -> Result<(), ReviewError> {
        let dir = self.existing(id)?;
        std::fs::remove_dir_all(&dir).map_err(|source| ReviewError::Io {
            op: "removing",
            path: dir,
            source,
        })
    }

    /// The run `asked` names: an id, or `last`, the newest complete kept
    /// run of `project` (one being captured or killed mid-capture has no
    /// changes to show, and would hide the run before it).
    pub fn resolve(&self, asked: &str, project: &Path) -> Result<String, ReviewError> {
        if asked != "last" {
            return Ok(asked.to_owned());
        }
        for id in self.list()?.into_iter().rev() {
            if self.started(&id).is_ok_and(|s| s.project == project) {
                return Ok(id);
            }
        }
        Err(ReviewError::NoLastRun {
            project: project.to_path_buf(),
        })
    }

    /// The ids of the kept runs, oldest first.
    pub fn list(&self) -> Result<Vec<String>, ReviewError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(ReviewError::Io {
                    op: "listing",
                    path: self.root.clone(),
                    source,
                })
            }
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|id| self.run_dir(id).is_ok())
            .collect();
        ids.sort();
        Ok(ids)
    }

    fn existing(&self, id: &str) -> Result<PathBuf, ReviewError> {
        let dir = self.run_dir(id)?;
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(ReviewError::UnknownRun {
                id: id.to_owned(),
                dir: self.root.clone(),
            })
        }
    }
}

/// What a run changed, as captured from its layer when it ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Captured {
    /// The layer filled up: the run was refused some writes, so its
    /// changes may be partial (apply refuses them unless allowed).
    pub limit_reached: bool,
    /// The changes, sorted by path (a directory before what is in it).
    pub changes: Vec<Change>,
}

/// One changed path of the project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Below the project root, `/`-separated.
    pub path: String,
    /// What happened to it.
    pub kind: ChangeKind,
    /// What is there after the run (None: deleted).
    pub after: Option<Entry>,
    /// What the project had there when the run ended (None: nothing).
    pub before: Option<EntryKind>,
    /// Applied already (kept so that `changes` can say so).
    #[serde(default)]
    pub applied: bool,
}

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// New.
    Added,
    /// Content, mode or kind changed.
    Modified,
    /// Removed (a directory with everything in it).
    Deleted,
}

/// The kind of a project entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A device, FIFO or socket.
    Special,
}

/// An entry as the run left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Entry {
    /// A regular file, its content kept in the store's layer.
    File {
        /// Permission bits, set-id bits included.
        mode: u32,
        /// Bytes.
        size: u64,
        /// SHA-256 of the content, hex.
        sha256: String,
        /// Links to the same file within the layer (more than one: a
        /// hard link the run made).
        links: u64,
    },
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
        /// It replaced the project's directory: what the run did not
        /// write in it is gone (listed as deletions).
        replaced: bool,
    },
    /// A symbolic link.
    Symlink {
        /// What it points at.
        target: String,
    },
    /// A device, FIFO or socket: never applied.
    Special {
        /// The whole mode, type bits included.
        mode: u32,
    },
}

impl Entry {
    /// Its kind.
    pub fn kind(&self) -> EntryKind {
        match self {
            Entry::File { .. } => EntryKind::File,
            Entry::Dir { .. } => EntryKind::Dir,
            Entry::Symlink { .. } => EntryKind::Symlink,
            Entry::Special { .. } => EntryKind::Special,
        }
    }
}

/// A new run id: the start's UTC date and time, and 16 bits of the clock's
/// nanoseconds, the process id and `attempt`, so that two runs in one
/// second differ.
fn new_id(attempt: u32) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (date, time) = crate::clock::utc_date_time(now.as_secs());
    let mix =
        now.subsec_nanos() ^ std::process::id().rotate_left(16) ^ attempt.wrapping_mul(0x9e37);
    format!("{date}-{time}-{:04x}", (mix ^ (mix >> 16)) & 0xffff)
}

/// The start as change times are compared with it, in nanoseconds since
/// the epoch: the coarse realtime clock, which filesystems stamp changes
/// with (or a finer one), so a change made after this instant never
/// carries an earlier time. A change made in the same clock tick just
/// before it (at most a few milliseconds) counts as made during the run:
/// a false conflict, never a missed one.
fn start_ns() -> i128 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE) {
        Ok(now) => i128::from(now.tv_sec()) * 1_000_000_000 + i128::from(now.tv_nsec()),
        // Without the coarse clock, the precise one a tick (10 ms) back.
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            i128::try_from(now.as_nanos()).unwrap_or(i128::MAX) - 10_000_000
        }
    }
}

fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ReviewError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|source| ReviewError::Record {
        path: path.to_path_buf(),
        source,
    })?;
    crate::safe_file::replace(path, &bytes).map_err(|err| ReviewError::Io {
        op: "writing",
        path: path.to_path_buf(),
        source: std::io::Error::other(err.to_string()),
    })
}

/// A record in a run directory this process just made (private to the
/// user, so no name in it can be planted): created, never replaced, and
/// not synced, since a cold run waits for it (a run whose record is lost
/// in a crash is one to run again, and apply replaces records durably).
fn write_new_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ReviewError> {
    let io = |source| ReviewError::Io {
        op: "writing",
        path: path.to_path_buf(),
        source,
    };
    let bytes = serde_json::to_vec_pretty(value).map_err(|source| ReviewError::Record {
        path: path.to_path_buf(),
        source,
    })?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    std::io::Write::write_all(&mut file, &bytes).map_err(io)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ReviewError> {
    let file = crate::safe_file::open_read(path).map_err(|err| ReviewError::Io {
        op: "reading",
        path: path.to_path_buf(),
        source: std::io::Error::other(err.to_string()),
    })?;
    serde_json::from_reader(std::io::BufReader::new(file)).map_err(|source| ReviewError::Record {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_plain_names() {
        let store = Store::at(PathBuf::from("/state/runs"));
        assert!(store.run_dir("20261128-024501-3fa2").is_ok());
        for bad in ["", "..", "a/b", "-x", ".hidden", "a b"] {
            assert!(store.run_dir(bad).is_err(), "{bad:?}");
        }
        let id = new_id(0);
        assert!(store.run_dir(&id).is_ok(), "{id}");
    }

    #[test]
    fn one_apply_or_discard_of_a_run_at_a_time() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::at(state.path().join("runs"));
        let mut started = Started {
            id: new_id(0),
            project: state.path().to_path_buf(),
            profile: "strict".into(),
            started_ns: start_ns(),
            secrets: Vec::new(),
            protect: Vec::new(),
            limit: DEFAULT_LAYER_SIZE,
            stack: None,
        };
        store.create_run(&mut started).unwrap();
        let held = store.lock(&started.id).unwrap();
        assert!(matches!(store.lock(&started.id), Err(ReviewError::Busy(_))));
        assert!(matches!(
            store.discard(&started.id),
            Err(ReviewError::Busy(_))
        ));
        drop(held);
        store.discard(&started.id).unwrap();
        assert!(matches!(
            store.started(&started.id),
            Err(ReviewError::UnknownRun { .. })
        ));
    }
}
