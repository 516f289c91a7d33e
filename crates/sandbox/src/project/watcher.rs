//! `sandbox watch`: one long-lived process per user and project that keeps
//! the project's walk ([`super::scan`]) current, so that a run in a large
//! project asks for it instead of walking every file again.
//!
//! Why a process of its own: a run's supervisor lives for one run, and the
//! only thing that tells what changed in a tree without a `stat` of every
//! file is a watch on every file ([`super::watch`]), which must outlive
//! runs. The watcher answers from its last walk only while no watch has
//! reported anything since; otherwise it walks again before answering.
//! fsnotify queues an event inside the system call that made the change,
//! so every change completed before a run asked is in the queue the
//! watcher drains first: nothing stale is ever answered.
//!
//! A mount over a path inside the project raises no inotify event, so the
//! watcher also polls its mount table, and a run trusts only a watcher
//! that sees the same mount table it does.
//!
//! What a run trusts: the socket is found by the project's path in the
//! user's state directory, so anyone who can write there could put a fake
//! watcher in its place, a sandboxed command under a profile that makes the
//! home writable included. So the answer counts only when the kernel says
//! the peer is this user, in this mount namespace, and confined by nothing
//! that confines a sandboxed process (`no_new_privs` and seccomp are set in
//! every sandbox this crate makes, and neither can be dropped). Anything
//! else, and any failure, and the run walks the project itself.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::PollFlags;
use serde::{Deserialize, Serialize};

use super::scan::{Answered, Changes, Listing, Scan, Walked};
use super::watch::{TreeWatch, WatchError};
use super::{HardlinkPolicy, Rules};
use crate::jsonl::{Frame, Lines};
use crate::poll_set::PollSet;

/// The version of the request and answer below.
const PROTOCOL: u32 = 2;

/// Longest request a watcher reads: patterns and a path.
const REQUEST_LIMIT: usize = 256 * 1024;

/// Longest answer a run reads: a walk's findings, or the directories
/// changed since one.
const ANSWER_LIMIT: usize = 256 * 1024 * 1024;

/// How many drains' changes a watcher remembers, to tell the sweep after a
/// run where the run's changes are. A run that outlives more drains than
/// this (each one a batch of events) is swept whole.
const HISTORY: usize = 1024;

/// How long either side waits for the other's line: a watcher that is
/// walking a large project takes its time; one that sends nothing for this
/// long is not answering.
const WAIT: Duration = Duration::from_secs(60);

/// How long the watcher waits for a request: a run writes it as soon as it
/// has connected, and the watcher answers one connection at a time, so a
/// client that connects and says nothing must not hold every run up.
const REQUEST_WAIT: Duration = Duration::from_secs(2);

/// How long after the last change the watcher walks again by itself, so
/// that the next run finds the walk done.
const SETTLE: Duration = Duration::from_millis(200);

/// How many sets of rules (profiles) one watcher keeps a walk for.
const KEPT_RULES: usize = 8;

/// What decides a walk's outcome besides the tree: a profile's lists and
/// whether the project is writable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScanRules {
    /// `[filesystem] secrets`.
    pub secrets: Vec<String>,
    /// `[filesystem] protect`.
    pub protect: Vec<String>,
    /// Whether the project is writable in the run.
    pub writable: bool,
    /// `[filesystem] hardlinks`.
    pub hardlinks: HardlinkPolicy,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Request {
    /// The walk under these rules.
    Scan {
        protocol: u32,
        project: PathBuf,
        rules: ScanRules,
    },
    /// Whether any watch reported anything since a walk was answered.
    Changed {
        protocol: u32,
        project: PathBuf,
        instance: u64,
        generation: u64,
    },
}

/// Externally tagged: an internally tagged enum makes serde buffer the
/// whole answer before reading it, which tripled the time a run spent
/// reading a 100,000-file project's walk.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    Scan {
        protocol: u32,
        project: PathBuf,
        /// This watcher process, so that a generation is compared only
        /// with the one that counted it.
        instance: u64,
        /// The watches' generation the walk was current at.
        generation: u64,
        scan: Box<Scan>,
    },
    Changed {
        changed: bool,
        /// Where: every directory a watch reported a change in, and every
        /// name created, since the walk answered. None when the watcher
        /// cannot say (its watches were set again, or too long ago).
        #[serde(default)]
        since: Option<Changes>,
    },
    /// The walk failed; the run walks itself and fails the same way.
    Failed { message: String },
}

/// Why a watcher could not be asked, or was not trusted.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Connecting, writing or reading failed.
    #[error("asking the project's watcher at {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The peer is not a watcher this run may trust.
    #[error("the project's watcher at {path} is not trusted ({why}); stop it and start `sandbox watch` again from a shell outside any sandbox")]
    Untrusted {
        /// The socket.
        path: PathBuf,
        /// What the kernel said about it.
        why: String,
    },
    /// The answer did not parse, or was for something else.
    #[error("the project's watcher at {path} answered wrongly: {why}")]
    Answer {
        /// The socket.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
    /// The watcher's own walk failed.
    #[error("the project's watcher could not walk the project: {0}")]
    Failed(String),
}

/// Filesystems where every change is made by this kernel, so that an
/// inotify watch sees it (the list the walk trusts ctimes on, too).
const LOCAL_FILESYSTEMS: &[&str] = &["ext4", "xfs", "btrfs", "tmpfs"];

/// The mount holding `project`, or one below it, whose filesystem is not
/// in [`LOCAL_FILESYSTEMS`]: (mount point, type).
fn unwatchable_mount(project: &Path, mountinfo: &str) -> Option<(PathBuf, String)> {
    let mounts = crate::cgroup::detect::parse_mountinfo(mountinfo);
    // The last of the longest mount points above it is the one on top.
    let holding = mounts
        .iter()
        .filter(|m| project.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len());
    let below = mounts
        .iter()
        .filter(|m| m.mount_point != project && m.mount_point.starts_with(project));
    holding
        .into_iter()
        .chain(below)
        .find(|m| !LOCAL_FILESYSTEMS.contains(&m.fstype.as_str()))
        .map(|m| (m.mount_point.clone(), m.fstype.clone()))
}

/// Why a watcher stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatcherError {
    /// The project could not be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// Setting up or serving the socket failed.
    #[error("the watcher's socket {path}: {source}")]
    Socket {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Another watcher serves this project.
    #[error("{path} is already served by a running `sandbox watch` for this project")]
    Running {
        /// The socket.
        path: PathBuf,
    },
    /// The state directory is unusable.
    #[error(transparent)]
    State(#[from] crate::safe_file::SafeFileError),
    /// The process to exit with is not there.
    #[error("--exit-with {pid}: {source}")]
    Owner {
        /// Its pid.
        pid: i32,
        /// Why it cannot be followed.
        source: nix::errno::Errno,
    },
    /// Part of the project is on a filesystem whose changes this kernel
    /// may not see.
    #[error("{mount} is a {fstype} mount, where a change made elsewhere (another host, a FUSE server, an overlay's lower layer) raises no inotify event here, so a watcher could answer from a stale walk; it watches only projects wholly on {}, and runs in this project walk it themselves", LOCAL_FILESYSTEMS.join(", "))]
    NotLocal {
        /// The mount point.
        mount: PathBuf,
        /// Its filesystem type.
        fstype: String,
    },
}

/// The socket a watcher of `project` (canonical) listens on, in the user's
/// state directory: named by a digest of the path, which may be longer
/// than a socket's name can be.
pub fn socket_path(project: &Path) -> PathBuf {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let digest = sha2::Sha256::digest(project.as_os_str().as_bytes());
    let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    crate::safe_file::state_dir()
        .join("watch")
        .join(format!("{name}.sock"))
}

/// Ask the watcher of `project` (canonical) for its walk under `rules`.
/// `Ok(None)`: no watcher runs for it (no socket, or nobody listening).
pub fn ask(project: &Path, rules: &ScanRules) -> Result<Option<Scan>, AskError> {
    let started = Instant::now();
    let request = Request::Scan {
        protocol: PROTOCOL,
        project: project.to_path_buf(),
        rules: rules.clone(),
    };
    let Some((pid, answer)) = exchange(project, &request)? else {
        return Ok(None);
    };
    match answer {
        Answer::Scan {
            protocol,
            project: answered,
            instance,
            generation,
            mut scan,
        } => {
            if protocol != PROTOCOL || answered != project {
                return Err(AskError::Answer {
                    path: socket_path(project),
                    why: format!(
                        "protocol {protocol} for {}, asked protocol {PROTOCOL} for {}",
                        answered.display(),
                        project.display()
                    ),
                });
            }
            scan.elapsed = started.elapsed();
            scan.watcher = Some(Answered {
                pid,
                instance,
                generation,
            });
            Ok(Some(*scan))
        }
        Answer::Failed { message } => Err(AskError::Failed(message)),
        Answer::Changed { .. } => Err(AskError::Answer {
            path: socket_path(project),
            why: "it answered another question".into(),
        }),
    }
}

/// What changed in a project since a walk was answered, as its watcher
/// tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// Nothing: no name made, removed or renamed, no link count or mode
    /// changed.
    Nothing,
    /// These directories and names, and nothing else.
    Only(Changes),
    /// Anything, anywhere: the watcher cannot say (another watcher, a
    /// failure, watches set again).
    Anything,
}

/// What changed in `project` since `answered`'s walk, as the same watcher
/// process tells. Any doubt is [`Since::Anything`].
pub fn changed_since(project: &Path, answered: &Answered) -> Since {
    let request = Request::Changed {
        protocol: PROTOCOL,
        project: project.to_path_buf(),
        instance: answered.instance,
        generation: answered.generation,
    };
    match exchange(project, &request) {
        Ok(Some((pid, Answer::Changed { changed, since }))) if pid == answered.pid => {
            match (changed, since) {
                (false, _) => Since::Nothing,
                (true, Some(changes)) => Since::Only(changes),
                (true, None) => Since::Anything,
            }
        }
        _ => Since::Anything,
    }
}

/// One request to the trusted watcher of `project` and its answer, with
/// the watcher's process id. `Ok(None)`: no watcher listens.
fn exchange(project: &Path, request: &Request) -> Result<Option<(i32, Answer)>, AskError> {
    let path = socket_path(project);
    let io = |source| AskError::Io {
        path: path.clone(),
        source,
    };
    let stream = match UnixStream::connect(&path) {
        Ok(stream) => stream,
        // A watcher makes its directory for its own user alone: one this
        // process may not enter (a supervisor the daemon started as a
        // caller, with root's state directory) holds no watcher of its.
        Err(err)
            if matches!(
                err.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            return Ok(None)
        }
        Err(err) => return Err(io(err)),
    };
    let pid = trusted_peer(&stream).map_err(|why| AskError::Untrusted {
        path: path.clone(),
        why,
    })?;
    stream.set_read_timeout(Some(WAIT)).map_err(io)?;
    stream.set_write_timeout(Some(WAIT)).map_err(io)?;
    let mut line = serde_json::to_vec(request).map_err(|e| io(e.into()))?;
    line.push(b'\n');
    (&stream).write_all(&line).map_err(io)?;
    let wrong = |why: String| AskError::Answer {
        path: path.clone(),
        why,
    };
    let answer = match Lines::new(&stream, ANSWER_LIMIT).next_frame().map_err(io)? {
        Some(Frame::Line(line)) => line,
        Some(Frame::TooLarge { .. }) => return Err(wrong("the answer is too long".into())),
        None => return Err(wrong("it closed the connection".into())),
    };
    let answer = serde_json::from_slice::<Answer>(&answer).map_err(|e| wrong(e.to_string()))?;
    Ok(Some((pid, answer)))
}

/// The peer's process id when the kernel says it is this user, in this
/// mount namespace, and not confined the way a sandboxed process is.
///
/// The peer's credentials are those of the process that called listen(),
/// which may have exited since, leaving the socket to a child and its pid
/// to any process (the default pid_max is 32,768: a payload cycles through
/// it in seconds, and can wait for the next run to take the number). So
/// the peer is also held by a pidfd, and the checks count only if that
/// process still holds its pid after they are made.
fn trusted_peer(stream: &UnixStream) -> Result<i32, String> {
    use nix::sys::socket::{
        getsockopt,
        sockopt::{PeerCredentials, PeerPidfd},
    };
    let cred = getsockopt(&stream.as_fd(), PeerCredentials).map_err(|e| e.to_string())?;
    let pidfd = getsockopt(&stream.as_fd(), PeerPidfd).map_err(|e| {
        format!("no pidfd of the process that listens ({e}; SO_PEERPIDFD needs Linux 6.5)")
    })?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != me {
        return Err(format!(
            "it runs as uid {}, this run as uid {me}",
            cred.uid()
        ));
    }
    let pid = cred.pid();
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let theirs = ns(&pid.to_string());
    if theirs.is_none() || theirs != ns("self") {
        return Err(format!("pid {pid} sees another mount table"));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    if field("NoNewPrivs:") != Some("0") || field("Seccomp:") != Some("0") {
        return Err(format!(
            "pid {pid} runs with no_new_privs or a seccomp filter, as a sandboxed process does"
        ));
    }
    crate::sys::signal::pidfd_holds_pid(pidfd.as_fd()).map_err(|_| {
        format!("pid {pid}, which listened on the socket, has exited and its number names another process")
    })?;
    Ok(pid)
}

/// One walk kept for one set of rules.
struct Kept {
    rules: Rules,
    /// The watches' generation the walk was made at.
    generation: u64,
    outcome: Result<Scan, String>,
    /// The walk, per directory, to walk again only where it changed.
    walked: Option<Walked>,
    /// What the watches reported since the walk.
    pending: Changes,
    /// The watches were set again since the walk: walk it whole.
    whole: bool,
    /// The walk holds a secret or protected symlink ([`Walked::has_links`]),
    /// known once per walk rather than looked for at every answer.
    has_links: bool,
}

impl Kept {
    fn new(rules: Rules) -> Kept {
        Kept {
            rules,
            generation: u64::MAX,
            outcome: Err(String::new()),
            walked: None,
            pending: Changes::default(),
            whole: true,
            has_links: false,
        }
    }

    /// Walk again where the watches reported changes, or whole when they
    /// cannot say where (or walking again where they said found the tree
    /// otherwise).
    fn walk_again(&mut self, project: &Path, key: &ScanRules) {
        let started = Instant::now();
        let again = match (&mut self.walked, self.whole) {
            (Some(walked), false) => walked
                .rewalk(project, &self.rules, key.writable, &self.pending)
                .is_ok(),
            _ => false,
        };
        if !again {
            self.walked = None;
            match Walked::walk(project, &self.rules, key.writable) {
                Ok(walked) => self.walked = Some(walked),
                Err(err) => self.outcome = Err(err.to_string()),
            }
        }
        self.has_links = self.walked.as_ref().is_some_and(Walked::has_links);
        self.assemble(project, key, started);
        self.pending = Changes::default();
        self.whole = false;
    }

    /// The answer from the kept walk, as its links lead now.
    fn assemble(&mut self, project: &Path, key: &ScanRules, started: Instant) {
        if let Some(walked) = &self.walked {
            // The sweep after a run this answers asks where the changes
            // were instead (`changed_since`): a listing of every directory
            // would be most of the answer.
            self.outcome = walked
                .scan(project, key.writable, key.hardlinks, Listing::Left)
                .map(|mut scan| {
                    scan.elapsed = started.elapsed();
                    scan
                })
                .map_err(|err| err.to_string());
        }
    }

    /// Put the findings together again when the walk holds a secret or
    /// protected symlink: the path to what it covers may pass outside the
    /// project (`.env -> /elsewhere/link -> project/file`), where no watch
    /// sees that link change, and a whole walk would follow it as it is now.
    fn resolve_links_again(&mut self, project: &Path, key: &ScanRules) {
        if self.has_links {
            self.assemble(project, key, Instant::now());
        }
    }
}

/// The watcher of one project.
struct Watcher {
    project: PathBuf,
    /// Tells this process from a later watcher of the same project.
    instance: u64,
    budget: usize,
    tree: TreeWatch,
    /// Bumped at every drain that read an event.
    generation: u64,
    kept: HashMap<ScanRules, Kept>,
    /// When the last change was seen, for the walk ahead.
    changed_at: Option<Instant>,
    /// What each recent generation changed (None: anything, the watches
    /// were set again), the newest last.
    history: std::collections::VecDeque<(u64, Option<Changes>)>,
}

impl Watcher {
    /// Take in every event waiting; true when any was.
    fn drain(&mut self) -> Result<bool, WatchError> {
        let drained = self.tree.drain()?;
        if drained.events > 0 {
            self.generation += 1;
            self.changed_at = Some(Instant::now());
            for kept in self.kept.values_mut() {
                kept.whole |= drained.rebuilt;
                kept.pending.merge(&drained.changes);
            }
            let changes = (!drained.rebuilt).then_some(drained.changes);
            self.remember(changes);
        }
        Ok(drained.events > 0)
    }

    /// The mount table changed: anything may be anywhere.
    fn remount(&mut self, mounts: &MountTable) -> Result<(), WatcherError> {
        mounts.check(&self.project)?;
        self.tree = TreeWatch::new(&self.project, self.budget)?;
        self.generation += 1;
        self.changed_at = Some(Instant::now());
        for kept in self.kept.values_mut() {
            kept.whole = true;
        }
        self.remember(None);
        Ok(())
    }

    fn remember(&mut self, changes: Option<Changes>) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((self.generation, changes));
    }

    /// Every change after `generation`, when each generation since is
    /// remembered and none was a resetting of the watches.
    fn changes_after(&self, generation: u64) -> Option<Changes> {
        let first = self.history.front()?.0;
        if generation.checked_add(1)? < first {
            return None;
        }
        let mut all = Changes::default();
        for (seen, changes) in &self.history {
            if *seen > generation {
                all.merge(changes.as_ref()?);
            }
        }
        Some(all)
    }

    /// Walk again for every kept set of rules whose walk is older than the
    /// watches' last event.
    fn walk_stale(&mut self) {
        for (key, kept) in &mut self.kept {
            if kept.generation != self.generation {
                kept.walk_again(&self.project, key);
                kept.generation = self.generation;
            }
        }
    }

    fn answer(&mut self, request: Request) -> Result<Answer, WatchError> {
        let (protocol, project) = match &request {
            Request::Scan {
                protocol, project, ..
            }
            | Request::Changed {
                protocol, project, ..
            } => (*protocol, project),
        };
        if protocol != PROTOCOL || *project != self.project {
            return Ok(Answer::Failed {
                message: format!(
                    "this watcher speaks protocol {PROTOCOL} for {}",
                    self.project.display()
                ),
            });
        }
        self.drain()?;
        let rules = match request {
            Request::Scan { rules, .. } => rules,
            Request::Changed {
                instance,
                generation,
                ..
            } => {
                let same = instance == self.instance;
                return Ok(Answer::Changed {
                    changed: !same || generation != self.generation,
                    since: same.then(|| self.changes_after(generation)).flatten(),
                });
            }
        };
        self.scan_for(rules)
    }

    fn scan_for(&mut self, rules: ScanRules) -> Result<Answer, WatchError> {
        if !self.kept.contains_key(&rules) {
            let compiled = match Rules::new(&rules.secrets, &rules.protect) {
                Ok(rules) => rules,
                Err(err) => {
                    return Ok(Answer::Failed {
                        message: err.to_string(),
                    })
                }
            };
            if self.kept.len() >= KEPT_RULES {
                self.kept.clear();
            }
            self.kept.insert(rules.clone(), Kept::new(compiled));
        }
        self.walk_stale();
        if let Some(kept) = self.kept.get_mut(&rules) {
            kept.resolve_links_again(&self.project, &rules);
        }
        Ok(match self.kept.get(&rules).map(|k| &k.outcome) {
            Some(Ok(scan)) => Answer::Scan {
                protocol: PROTOCOL,
                project: self.project.clone(),
                instance: self.instance,
                generation: self.generation,
                scan: Box::new(scan.clone()),
            },
            Some(Err(message)) => Answer::Failed {
                message: message.clone(),
            },
            None => Answer::Failed {
                message: "no walk kept".into(),
            },
        })
    }
}

/// What a watcher was started with.
#[derive(Debug)]
pub struct WatchOptions {
    /// The project, canonical.
    pub project: PathBuf,
    /// Exit after this long without a request.
    pub idle: Duration,
    /// Most directories and files watched.
    pub budget: usize,
    /// Rules to walk for before the first run asks (each profile's
    /// [`crate::profile::policy::Policy::scan_rules`]).
    pub walk_ahead: Vec<ScanRules>,
    /// Exit when the process with this pid does: the watcher that `serve`
    /// starts for its project lives as long as it.
    pub exit_with: Option<i32>,
}

/// Serve `options.project` until idle. `ready` is called once the socket
/// listens and every watch is set.
pub fn serve(options: &WatchOptions, ready: impl FnOnce(&Path)) -> Result<(), WatcherError> {
    let path = socket_path(&options.project);
    let socket_error = |source| WatcherError::Socket {
        path: path.clone(),
        source,
    };
    let state = crate::safe_file::state_dir();
    std::fs::create_dir_all(&state).map_err(socket_error)?;
    let state_fd = std::fs::File::open(&state).map_err(socket_error)?;
    crate::safe_file::private_dir(state_fd.as_fd(), "watch", 0o700, None, &state.join("watch"))?;
    // The mount table before the watches, and the watches before the
    // listener: a change made meanwhile is reported.
    let owner = match options.exit_with {
        Some(pid) => Some(
            crate::sys::signal::pidfd_open(nix::unistd::Pid::from_raw(pid))
                .map_err(|source| WatcherError::Owner { pid, source })?,
        ),
        None => None,
    };
    let mut mounts = MountTable::open().map_err(socket_error)?;
    mounts.check(&options.project)?;
    let tree = TreeWatch::new(&options.project, options.budget)?;
    let listener = match UnixListener::bind(&path) {
        Ok(listener) => listener,
        Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
            if UnixStream::connect(&path).is_ok() {
                return Err(WatcherError::Running { path });
            }
            // Left by a watcher that died.
            std::fs::remove_file(&path).map_err(socket_error)?;
            UnixListener::bind(&path).map_err(socket_error)?
        }
        Err(err) => return Err(socket_error(err)),
    };
    let _remove = RemoveOnDrop(&path);
    listener.set_nonblocking(true).map_err(socket_error)?;
    let mut watcher = Watcher {
        project: options.project.clone(),
        instance: instance_id(),
        budget: options.budget,
        tree,
        generation: 0,
        kept: HashMap::new(),
        changed_at: None,
        history: std::collections::VecDeque::new(),
    };
    // A walk that fails is kept as failed: a run under those rules walks
    // itself and says why.
    for rules in &options.walk_ahead {
        watcher.scan_for(rules.clone())?;
    }
    ready(&path);
    let mut last_request = Instant::now();
    loop {
        let idle_at = last_request + options.idle;
        let walk_at = watcher.changed_at.map(|at| at + SETTLE);
        let (listen_ready, events_ready, mounts_changed, owner_gone) = {
            let mut set = PollSet::default();
            let listen = set.add(listener.as_fd(), PollFlags::POLLIN);
            let events = set.add(watcher.tree.fd(), PollFlags::POLLIN);
            let table = set.add(mounts.file.as_fd(), PollFlags::POLLPRI);
            // A pidfd reads as ready once its process has exited.
            let owner = owner
                .as_ref()
                .map(|pidfd| set.add(pidfd.as_fd(), PollFlags::POLLIN));
            set.wait([Some(idle_at), walk_at])
                .map_err(|e| socket_error(e.into()))?;
            (
                set.ready(Some(listen)),
                set.ready(Some(events)),
                set.ready(Some(table)),
                owner.is_some_and(|slot| set.ready(Some(slot))),
            )
        };
        if owner_gone {
            return Ok(());
        }
        if mounts_changed && mounts.changed() {
            watcher.remount(&mounts)?;
        }
        if events_ready {
            watcher.drain()?;
        }
        if listen_ready {
            while let Ok((stream, _)) = listener.accept() {
                last_request = Instant::now();
                // A mount made since the loop woke up is not an inotify
                // event: look again right before answering.
                if mounts.changed() {
                    watcher.remount(&mounts)?;
                }
                serve_one(&mut watcher, stream)?;
            }
        }
        if walk_at.is_some_and(|at| Instant::now() >= at) {
            watcher.changed_at = None;
            watcher.drain()?;
            if watcher.changed_at.is_none() {
                watcher.walk_stale();
            }
        }
        if Instant::now() >= idle_at && watcher.changed_at.is_none() {
            return Ok(());
        }
    }
}

/// The watcher's mount table: `poll` reports `POLLPRI` on
/// `/proc/self/mountinfo` after a mount or unmount until it is read again.
struct MountTable {
    file: std::fs::File,
    sink: Vec<u8>,
}

impl MountTable {
    fn open() -> std::io::Result<MountTable> {
        let mut table = MountTable {
            file: std::fs::File::open("/proc/self/mountinfo")?,
            sink: Vec::new(),
        };
        table.reread();
        Ok(table)
    }

    /// Whether the table changed since it was last read (read again now).
    /// A failed poll counts as a change.
    fn changed(&mut self) -> bool {
        let changed = {
            let mut set = PollSet::default();
            let slot = set.add(self.file.as_fd(), PollFlags::POLLPRI);
            set.wait_for(Some(Duration::ZERO))
                .map_or(true, |()| set.ready(Some(slot)))
        };
        if changed {
            self.reread();
        }
        changed
    }

    /// Refuse a project this table puts, wholly or in part, on a
    /// filesystem whose changes may not be seen.
    fn check(&self, project: &Path) -> Result<(), WatcherError> {
        match unwatchable_mount(project, &String::from_utf8_lossy(&self.sink)) {
            Some((mount, fstype)) => Err(WatcherError::NotLocal { mount, fstype }),
            None => Ok(()),
        }
    }

    fn reread(&mut self) {
        use std::io::Seek;
        let _ = self.file.rewind();
        self.sink.clear();
        let _ = self.file.read_to_end(&mut self.sink);
    }
}

/// Answer one connection. Only a failure of the watches ends the watcher;
/// a client that misbehaves is dropped.
fn serve_one(watcher: &mut Watcher, stream: UnixStream) -> Result<(), WatchError> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let Ok(cred) = getsockopt(&stream.as_fd(), PeerCredentials) else {
        return Ok(());
    };
    if cred.uid() != nix::unistd::geteuid().as_raw() {
        return Ok(());
    }
    if stream.set_nonblocking(false).is_err()
        || stream.set_read_timeout(Some(REQUEST_WAIT)).is_err()
        || stream.set_write_timeout(Some(WAIT)).is_err()
    {
        return Ok(());
    }
    let request = match Lines::new(&stream, REQUEST_LIMIT).next_frame() {
        Ok(Some(Frame::Line(line))) => serde_json::from_slice::<Request>(&line),
        _ => return Ok(()),
    };
    let answer = match request {
        Ok(request) => watcher.answer(request)?,
        Err(err) => Answer::Failed {
            message: format!("the request did not parse: {err}"),
        },
    };
    if let Ok(mut line) = serde_json::to_vec(&answer) {
        line.push(b'\n');
        let _ = (&stream).write_all(&line);
    }
    Ok(())
}

/// A number no earlier watcher of this project had: the clock and the
/// process id.
fn instance_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 40)
}

struct RemoveOnDrop<'a>(&'a Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:40 / /home/me/proj/node_modules rw - fuse.sshfs host:/nm rw
31 22 0:41 / /srv/nfs rw - nfs4 host:/x rw
32 31 0:42 / /srv/nfs/local rw - tmpfs tmpfs rw
33 22 0:43 / /home/me/other\\040dir rw - tmpfs tmpfs rw
";

    #[test]
    fn a_project_on_or_above_a_mount_whose_changes_may_be_unseen_is_refused() {
        let refused = |p: &str| unwatchable_mount(Path::new(p), MOUNTINFO);
        assert_eq!(refused("/home/me/other dir"), None);
        assert_eq!(refused("/home/me/work"), None);
        assert_eq!(
            refused("/home/me/proj"),
            Some(("/home/me/proj/node_modules".into(), "fuse.sshfs".into()))
        );
        assert_eq!(
            refused("/srv/nfs/a"),
            Some(("/srv/nfs".into(), "nfs4".into()))
        );
        // The tmpfs on top of the NFS mount holds this one entirely.
        assert_eq!(refused("/srv/nfs/local/p"), None);
    }
}
