//! Skills through the daemon: one `sandbox serve --stdio` process per
//! caller, project and profile, started on first use, so the daemon serves
//! skills with exactly the per-skill hosts, lazy activation, crash back-off,
//! disabling and hot reload that `serve` has. `serve` is executed (never a
//! fork of the daemon's threads) with an empty environment: the daemon's
//! variables and its user's own skill directory never reach a skill.
//!
//! Each server has one reader thread that routes answers by JSON-RPC id and
//! keeps the latest `skill.stateChanged` of each skill.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use sandbox::jsonl::{Frame, Lines};

/// Most `serve` processes at once, in all: past it a new one is refused
/// (never another caller's stopped to make room).
const MAX_SERVERS: usize = 16;
/// Most `serve` processes of one caller: its own unused longest is
/// stopped to make room for its next.
const MAX_SERVERS_PER_CALLER: usize = 4;
/// Longest line read from a `serve` process. A skill's answer reaches its
/// host in a broker message of at most 1 MiB (the channel's default
/// limit) and is re-encoded twice on the way (host, serve), never longer;
/// the skill that chose it is untrusted, and up to [`MAX_SERVERS`] readers
/// may each hold one line.
const SERVER_LINE_LIMIT: usize = 4 << 20;
/// A server nobody called for this long is stopped.
const IDLE: Duration = Duration::from_secs(600);
/// Skill calls waiting at once, in all. Each holds one of the runtime's
/// blocking threads (16) until its skill answers, and runs, logs and the
/// store need the others: a skill that hangs must not stall the daemon.
pub const MAX_CALLS: usize = 8;
/// Skill calls one caller may have waiting at once.
pub const MAX_CALLS_PER_CALLER: usize = 4;

/// Why a skill call failed.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// `sandbox serve` could not be started.
    #[error("starting `sandbox serve` for the skills: {0}")]
    Start(std::io::Error),
    /// Too many calls are waiting (in all, or this caller's).
    #[error("{0} skill calls are already waiting; try again when one has answered")]
    Busy(usize),
    /// Every skill server the daemon runs at once is in use by callers.
    #[error("{0} skill servers already run for other projects; try again once one has been idle")]
    TooManyServers(usize),
    /// The server ended (crashed, or was stopped) before answering.
    #[error("the skill server ended before answering")]
    Gone,
    /// No answer in time.
    #[error("no answer from the skill within {0:?}")]
    Timeout(Duration),
    /// The skill (or serve) answered with a JSON-RPC error.
    #[error("{message}")]
    Rpc {
        /// JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
        /// Its data, if any.
        data: Option<Value>,
    },
}

/// Which server a call goes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerKey {
    /// The caller.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// The project skills run in (checked against the caller's rule).
    pub project: PathBuf,
    /// The most any skill gets (a built-in profile name, or an absolute
    /// path of a file in the daemon's profile directory).
    pub profile: String,
}

type Pending = Arc<Mutex<HashMap<u64, mpsc::Sender<Result<Value, SkillError>>>>>;

struct Server {
    child: Mutex<Child>,
    stdin: Mutex<ChildStdin>,
    pending: Pending,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    states: Arc<Mutex<BTreeMap<String, Value>>>,
    last_used: Mutex<Instant>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The daemon's skill servers.
pub struct SkillHosts {
    program: PathBuf,
    skills_dirs: Vec<PathBuf>,
    /// Each caller's broker state (its grant store, the client libraries)
    /// lives below, per uid and owned by it: never the daemon user's own.
    /// Traversable by callers (the daemon's socket directory, never its
    /// state directory).
    state_dir: PathBuf,
    servers: Mutex<HashMap<ServerKey, Arc<Server>>>,
    /// Calls waiting, per caller.
    waiting: super::quota::PerUid,
}

impl std::fmt::Debug for SkillHosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillHosts")
            .field("skills_dirs", &self.skills_dirs)
            .finish()
    }
}

impl SkillHosts {
    /// Servers running `program serve` over `skills_dirs`, keeping each
    /// caller's state below `state_dir/<uid>`.
    pub fn new(program: PathBuf, skills_dirs: Vec<PathBuf>, state_dir: PathBuf) -> SkillHosts {
        SkillHosts {
            program,
            skills_dirs,
            state_dir,
            servers: Mutex::new(HashMap::new()),
            waiting: super::quota::PerUid::default(),
        }
    }

    /// Send `method` with `params` to the key's server (started if needed)
    /// and wait for the answer. Blocking: call it off the async runtime.
    pub fn call(
        &self,
        key: &ServerKey,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, SkillError> {
        let _admitted = self
            .waiting
            .take(key.uid, MAX_CALLS_PER_CALLER, MAX_CALLS)
            .map_err(SkillError::Busy)?;
        let server = self.server(key)?;
        *server
            .last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        let id = server.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, wait) = mpsc::channel();
        server
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, answer);
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .map_err(|err| SkillError::Start(std::io::Error::other(err)))?;
        line.push(b'\n');
        let sent = server
            .stdin
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write_all(&line);
        if sent.is_err() || !server.alive.load(Ordering::Acquire) {
            self.forget(key);
            return Err(SkillError::Gone);
        }
        let result = match wait.recv_timeout(timeout) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(SkillError::Timeout(timeout)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(SkillError::Gone),
        };
        server
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if matches!(result, Err(SkillError::Gone)) {
            self.forget(key);
        }
        result
    }

    /// The latest state each skill of the key's server announced (empty
    /// until a skill changed state).
    pub fn states(&self, key: &ServerKey) -> BTreeMap<String, Value> {
        let servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        servers.get(key).map_or_else(BTreeMap::new, |server| {
            server
                .states
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }

    /// Skill calls waiting for an answer, in all.
    pub fn waiting(&self) -> usize {
        self.waiting.total()
    }

    /// How many servers run.
    pub fn running(&self) -> usize {
        self.servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn forget(&self, key: &ServerKey) {
        self.servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    fn server(&self, key: &ServerKey) -> Result<Arc<Server>, SkillError> {
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        servers.retain(|_, server| {
            server.alive.load(Ordering::Acquire)
                && server
                    .last_used
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .elapsed()
                    < IDLE
        });
        if let Some(server) = servers.get(key) {
            return Ok(server.clone());
        }
        let last_used = |server: &Arc<Server>| {
            *server
                .last_used
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        let own: Vec<(&ServerKey, &Arc<Server>)> =
            servers.iter().filter(|(k, _)| k.uid == key.uid).collect();
        if own.len() >= MAX_SERVERS_PER_CALLER {
            let oldest = own
                .iter()
                .min_by_key(|(_, server)| last_used(server))
                .map(|(key, _)| (*key).clone());
            if let Some(oldest) = oldest {
                servers.remove(&oldest);
            }
        } else if servers.len() >= MAX_SERVERS {
            return Err(SkillError::TooManyServers(servers.len()));
        }
        // Traversable, not listable: a caller reaches its own directory
        // only. Created and checked beneath open directories, never through
        // a symlink, and handed to the caller by fd: callers can reach the
        // socket directory, and a `chown` by path once gave a caller any
        // file its planted link named.
        let state = self.state_dir.join(key.uid.to_string());
        let parent = self.state_dir.parent().unwrap_or(Path::new("/"));
        let parent = std::fs::File::open(parent).map_err(SkillError::Start)?;
        let private = |err: sandbox::safe_file::SafeFileError| {
            SkillError::Start(std::io::Error::other(err.to_string()))
        };
        let skills = sandbox::safe_file::private_dir(
            parent.as_fd(),
            &self
                .state_dir
                .file_name()
                .map_or("skills".into(), |name| name.to_string_lossy()),
            0o711,
            None,
            &self.state_dir,
        )
        .map_err(private)?;
        let me = nix::unistd::geteuid().as_raw();
        sandbox::safe_file::private_dir(
            skills.as_fd(),
            &key.uid.to_string(),
            0o700,
            (key.uid != me).then_some(key.uid),
            &state,
        )
        .map_err(private)?;
        let server = Arc::new(start(&self.program, &self.skills_dirs, &state, key)?);
        servers.insert(key.clone(), server.clone());
        Ok(server)
    }
}

fn start(
    program: &Path,
    skills_dirs: &[PathBuf],
    state: &Path,
    key: &ServerKey,
) -> Result<Server, SkillError> {
    let mut command = Command::new(program);
    command
        .arg("serve")
        .arg("--stdio")
        .arg("--project")
        .arg(&key.project)
        .arg("--profile")
        .arg(&key.profile);
    for dir in skills_dirs {
        command.arg("--skills-dir").arg(dir);
    }
    // Another caller's skills are served as that caller: `serve` reads the
    // project's `.skills/` (a link there could point anywhere) and its
    // hosts' brokers act for the skills, so they get the caller's rights,
    // never the daemon's. Its supplementary groups are dropped with it.
    if key.uid != nix::unistd::geteuid().as_raw() {
        use std::os::unix::process::CommandExt;
        command.uid(key.uid).gid(key.gid);
    }
    let mut child = command
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("SANDBOX_STATE_DIR", state)
        // Where serve unpacks the client libraries skills import.
        .env("XDG_CACHE_HOME", state.join("cache"))
        .current_dir(&key.project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(SkillError::Start)?;
    if let Some(stderr) = child.stderr.take() {
        let uid = key.uid;
        std::thread::Builder::new()
            .name("skill-log".into())
            .spawn(move || relay_log(stderr, uid))
            .map_err(SkillError::Start)?;
    }
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        return Err(SkillError::Start(std::io::Error::other("no pipes")));
    };
    let pending: Pending = Arc::default();
    let alive = Arc::new(AtomicBool::new(true));
    let states: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
    {
        let (pending, alive, states) = (pending.clone(), alive.clone(), states.clone());
        std::thread::Builder::new()
            .name("skill-server".into())
            .spawn(move || read_answers(stdout, &pending, &states, &alive))
            .map_err(SkillError::Start)?;
    }
    Ok(Server {
        child: Mutex::new(child),
        stdin: Mutex::new(stdin),
        pending,
        next_id: AtomicU64::new(1),
        alive,
        states,
        last_used: Mutex::new(Instant::now()),
    })
}

fn read_answers(
    stdout: std::process::ChildStdout,
    pending: &Pending,
    states: &Mutex<BTreeMap<String, Value>>,
    alive: &AtomicBool,
) {
    for frame in Lines::new(stdout, SERVER_LINE_LIMIT) {
        let line = match frame {
            Ok(Frame::Line(line)) => line,
            Ok(Frame::TooLarge { bytes }) => {
                tracing::warn!("a skill server wrote a line of {bytes} bytes (at most {SERVER_LINE_LIMIT}): dropped");
                continue;
            }
            Err(_) => break,
        };
        let Ok(message) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if message["method"] == "skill.stateChanged" {
            if let Some(name) = message["params"]["name"].as_str() {
                states
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(name.to_string(), message["params"].clone());
            }
            continue;
        }
        let Some(id) = message["id"].as_u64() else {
            continue;
        };
        let result = match message.get("error") {
            Some(error) => Err(SkillError::Rpc {
                code: error["code"].as_i64().unwrap_or(-32603),
                message: error["message"]
                    .as_str()
                    .unwrap_or("the skill failed")
                    .to_string(),
                data: error.get("data").cloned(),
            }),
            None => Ok(message["result"].clone()),
        };
        if let Some(waiter) = pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id)
        {
            let _ = waiter.send(result);
        }
    }
    alive.store(false, Ordering::Release);
    // Every caller still waiting learns the server is gone.
    pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
}

/// Longest line of a skill server's log relayed; a longer one is left
/// out (its length is said), so a skill can neither hold the daemon's
/// memory with one endless line nor fill its journal with one.
const LOG_LINE: usize = 4096;

/// The skills' logs go to the daemon's own stderr (its journal), each line
/// prefixed with the caller's uid and escaped, so a skill can neither
/// write lines that look like the daemon's nor hide its own.
fn relay_log(stderr: std::process::ChildStderr, uid: u32) {
    for frame in Lines::new(stderr, LOG_LINE) {
        match frame {
            Ok(Frame::Line(line)) => {
                let text = String::from_utf8_lossy(&line);
                let text = sandbox::broker::prompt::escape(&text);
                tracing::warn!("skills of uid {uid}: {text}");
            }
            Ok(Frame::TooLarge { bytes }) => {
                tracing::warn!(
                    "skills of uid {uid}: a line of {bytes} bytes (at most {LOG_LINE}) left out"
                );
            }
            Err(_) => return,
        }
    }
}
