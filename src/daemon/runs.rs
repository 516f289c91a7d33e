//! Runs from submission to result: admission (queue bounds and shares),
//! FIFO start as slots free, one task per running run that talks to its
//! supervisor over the events socket, cancel, approvals, and the result
//! written to the store before anyone waiting hears the run is over.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use super::config::{Config, Rule};
use super::error::ApiError;
use super::launcher::{Launcher, LauncherEvent};
use super::resolve::{Caller, Resolved};
use super::store::{Outcome, RunRecord, Store};
use super::verdict::{self, Claim, Observed};
use crate::jsonl::{AsyncLines, Frame};
use crate::launch::protocol::{
    Approval, FromLauncher, FromSupervisor, RunSpec, ToLauncher, ToSupervisor, MAX_MESSAGE,
};

/// A new run id: 16 hex digits from the kernel's random source, so ids
/// are not guessable from each other (a guessed id still meets the owner
/// check, but need not leak how busy the daemon is).
pub fn new_run_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        bytes = crate::clock::unix_ms()
            .wrapping_mul(6_364_136_223_846_793_005)
            .to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `id` has the shape of a run id (it becomes a path component).
pub fn is_run_id(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// One open question of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Question {
    /// `<run>/<n>`.
    pub id: String,
    /// The run.
    pub run: String,
    /// Who asks (`command:…`).
    pub caller: String,
    /// The broker action.
    pub action: String,
    /// Its target.
    pub target: Option<String>,
    /// When it is denied unanswered.
    pub deadline_ms: u64,
    #[serde(skip)]
    uid: u32,
}

/// Why a run was cancelled: its `reason`.
const CANCELLED_ON_REQUEST: &str = "a client cancelled it";
/// The reason of runs a stopping daemon ends (SIGTERM, SIGINT).
pub const DAEMON_STOPPED: &str = "the daemon stopped";

enum Control {
    /// SIGTERM to the command, everything killed after the grace; the
    /// run's reason says why.
    Cancel(&'static str),
    Answer(u64, Approval),
}

struct QueuedRun {
    id: String,
    uid: u32,
    rule_max: Option<usize>,
    spec: RunSpec,
    /// Its warm-sandbox key, when the pool is on and the project can be
    /// named (see [`pool_key`]).
    key: Option<String>,
    /// The ready warm sandbox it takes, chosen when it is dispatched.
    warm: Option<String>,
}

/// A warm sandbox the daemon asked the launcher for.
struct PoolEntry {
    uid: u32,
    gen: u64,
    ready: bool,
    asked: std::time::Instant,
}

/// The key a warm sandbox serves (`docs/src/launcher.md`): the caller, the
/// digest of the resolved policy (its timeout and output cap aside, which
/// a commit sets), the project by path and device/inode, the network mode.
fn pool_key(spec: &RunSpec, uid: u32) -> Option<String> {
    use sha2::Digest;
    use std::os::unix::fs::MetadataExt;
    let project = std::fs::metadata(&spec.project).ok()?;
    let mut policy = spec.policy.clone();
    policy.limits.timeout = None;
    policy.limits.output = None;
    let digest = sha2::Sha256::digest(serde_json::to_vec(&policy).ok()?);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{uid}:{hex}:{}:{}:{}:{:?}",
        spec.project.display(),
        project.dev(),
        project.ino(),
        spec.policy.network.mode
    ))
}

struct LiveRun {
    uid: u32,
    /// What to warm a sandbox for once the run is over (its key, rule
    /// bound and spec): refilled after the use, so the run's own writes in
    /// the project never discard it.
    refill: Option<(String, Option<usize>, RunSpec)>,
    control: mpsc::UnboundedSender<Control>,
    questions: BTreeMap<u64, Question>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<QueuedRun>,
    running: HashMap<String, LiveRun>,
    over: HashMap<String, watch::Receiver<bool>>,
    over_senders: HashMap<String, watch::Sender<bool>>,
    running_by_uid: HashMap<u32, usize>,
    queued_by_uid: HashMap<u32, usize>,
    /// Admitted but not yet in the queue (record being written).
    reserved: usize,
    stopping: bool,
    /// Warm sandboxes by key: asked for or ready.
    pool: HashMap<String, PoolEntry>,
    pool_gen: u64,
}

impl State {
    /// Warm sandboxes held for `uid` (all callers' with `None`), not
    /// counting the ready one of `key`, which a run of that key takes in
    /// place of a slot of its own.
    fn warm(&self, uid: Option<u32>, key: Option<&String>) -> usize {
        self.pool
            .iter()
            .filter(|(k, entry)| {
                uid.is_none_or(|uid| entry.uid == uid) && !(entry.ready && Some(*k) == key)
            })
            .count()
    }
}

/// How long a run waits for the second of its two ends (events socket
/// closed, supervisor reaped) once the first has come.
const LINGER: Duration = Duration::from_secs(5);

/// Past a run's timeout, what its supervisor may still take before root
/// kills it: the supervisor's own SIGTERM-to-SIGKILL grace (2 s) and
/// its tear-down, with room for a loaded machine.
const TIMEOUT_BACKSTOP_SLACK: Duration = Duration::from_secs(10);

/// Load figures for `/v1/info`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Load {
    /// Runs holding a slot.
    pub running: usize,
    /// Runs waiting.
    pub queued: usize,
    /// Slots.
    pub max_concurrent: usize,
    /// Queue bound.
    pub max_queue: usize,
}

/// A caller's warm sandboxes, for `/v1/info`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PoolFigures {
    /// `[pool] enabled`.
    pub enabled: bool,
    /// Ready for a run.
    pub ready: usize,
    /// Asked for, not ready yet.
    pub preparing: usize,
}

/// The daemon's run manager.
pub struct Runs {
    /// The configuration.
    pub config: Arc<Config>,
    /// The records.
    pub store: Arc<Store>,
    /// `<state_dir>/spool`.
    pub spool: PathBuf,
    launcher: Arc<Launcher>,
    state: Mutex<State>,
    pool_listening: std::sync::atomic::AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Run a blocking store or file call off the runtime's workers.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|err| ApiError::internal(format!("a blocking task failed: {err}")))?
}

fn store_error(err: super::store::StoreError) -> ApiError {
    ApiError::internal(err.to_string())
}

/// The share of the queue one caller may hold: half, so one busy caller
/// cannot shut everyone else out of a full queue.
pub fn queue_share(max_queue: usize) -> usize {
    max_queue.div_ceil(2).max(1)
}

impl Runs {
    /// A run manager over a store, a spool directory and a launcher.
    pub fn new(
        config: Arc<Config>,
        store: Arc<Store>,
        spool: PathBuf,
        launcher: Arc<Launcher>,
    ) -> Arc<Runs> {
        Arc::new(Runs {
            config,
            store,
            spool,
            launcher,
            state: Mutex::new(State::default()),
            pool_listening: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The run's spool directory.
    pub fn run_dir(&self, id: &str) -> PathBuf {
        self.spool.join(id)
    }

    /// The run's log.
    pub fn log_path(&self, id: &str) -> PathBuf {
        self.run_dir(id).join("log.ndjson")
    }

    /// Load figures.
    pub fn load(&self) -> Load {
        let state = lock(&self.state);
        Load {
            running: state.running.len(),
            queued: state.queue.len(),
            max_concurrent: self.config.max_concurrent,
            max_queue: self.config.max_queue,
        }
    }

    /// The caller's warm sandboxes: (ready, being prepared). A client
    /// that wants its next run warm (the pool benchmark) waits for one to
    /// be ready.
    pub fn pool_of(&self, uid: u32) -> PoolFigures {
        let state = lock(&self.state);
        let mine = state.pool.values().filter(|entry| entry.uid == uid);
        let (ready, preparing) = mine.fold((0, 0), |(r, p), entry| match entry.ready {
            true => (r + 1, p),
            false => (r, p + 1),
        });
        PoolFigures {
            enabled: self.config.pool.enabled,
            ready,
            preparing,
        }
    }

    /// A receiver that turns true when the run is over; `None` when it is
    /// not live (over already, or unknown).
    pub fn watch_over(&self, id: &str) -> Option<watch::Receiver<bool>> {
        lock(&self.state).over.get(id).cloned()
    }

    /// Admit, record and queue a resolved run; returns its id.
    pub async fn submit(
        self: &Arc<Self>,
        caller: Caller,
        rule: &Rule,
        resolved: Resolved,
    ) -> Result<String, ApiError> {
        if !self.launcher.is_up() {
            return Err(ApiError::new(
                503,
                "launcher_down",
                "the daemon's launcher is not running, so no run can start",
                "retry shortly; the daemon restarts its launcher once, then needs a restart itself (see its log)",
            )
            .retry_after(5));
        }
        {
            let mut state = lock(&self.state);
            if state.stopping {
                return Err(ApiError::new(
                    503,
                    "queue_full",
                    "the daemon is stopping",
                    "retry once it is back",
                )
                .retry_after(5));
            }
            let queued = state.queue.len() + state.reserved;
            let free_slots = self
                .config
                .max_concurrent
                .saturating_sub(state.running.len());
            if queued >= self.config.max_queue + free_slots {
                return Err(ApiError::new(
                    503,
                    "queue_full",
                    format!(
                        "{queued} runs are waiting (max_queue {})",
                        self.config.max_queue
                    ),
                    "retry after a while, or raise [daemon] max_queue",
                )
                .retry_after(1));
            }
            let share = queue_share(self.config.max_queue);
            let mine = state.queued_by_uid.get(&caller.uid).copied().unwrap_or(0);
            if mine >= share + free_slots {
                return Err(ApiError::new(
                    429,
                    "quota_full",
                    format!("you have {mine} runs waiting, your share of the queue"),
                    "wait for some of your runs to start before submitting more",
                )
                .retry_after(1));
            }
            state.reserved += 1;
            *state.queued_by_uid.entry(caller.uid).or_default() += 1;
        }
        let admitted = self.record(caller, resolved).await;
        let mut state = lock(&self.state);
        state.reserved -= 1;
        let (id, spec) = match admitted {
            Ok(pair) => pair,
            Err(err) => {
                decrement(&mut state.queued_by_uid, caller.uid);
                return Err(err);
            }
        };
        let (sender, receiver) = watch::channel(false);
        state.over.insert(id.clone(), receiver);
        state.over_senders.insert(id.clone(), sender);
        let key = match self.config.pool.enabled {
            true => pool_key(&spec, caller.uid),
            false => None,
        };
        state.queue.push_back(QueuedRun {
            id: id.clone(),
            uid: caller.uid,
            rule_max: rule.max_concurrent,
            spec,
            key,
            warm: None,
        });
        tracing::debug!(run = %id, uid = caller.uid, "run queued");
        self.dispatch(&mut state);
        Ok(id)
    }

    async fn record(
        &self,
        caller: Caller,
        resolved: Resolved,
    ) -> Result<(String, RunSpec), ApiError> {
        let id = new_run_id();
        let dir = self.run_dir(&id);
        let store = self.store.clone();
        let record = RunRecord::queued(
            id.clone(),
            (caller.uid, caller.gid),
            resolved.spec.argv.clone(),
            resolved.profile.clone(),
            resolved.spec.project.display().to_string(),
            crate::clock::unix_ms(),
        );
        let mut spec = resolved.spec;
        spec.audit = Some(dir.join("audit.ndjson"));
        // Someone else's run is supervised as that someone: a root
        // supervisor would look at the project, and act for the broker,
        // with root's rights, and a project swapped for a symlink after
        // the checks above would be root's to the run.
        if caller.uid != nix::unistd::geteuid().as_raw() {
            spec.run_as = Some(crate::launch::protocol::RunAs {
                run: id.clone(),
                uid: caller.uid,
                gid: caller.gid,
                groups: super::config::caller_groups(caller.uid, caller.gid),
            });
        }
        let stdin = resolved.stdin;
        blocking(move || {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|err| ApiError::internal(format!("creating {}: {err}", dir.display())))?;
            if let Some(bytes) = stdin {
                write_new(&dir.join("stdin"), &bytes)?;
            }
            write_new(&dir.join("log.ndjson"), b"")?;
            store.insert(&record).map_err(store_error)
        })
        .await?;
        Ok((id, spec))
    }

    /// Start queued runs while slots are free, first come first served
    /// among callers under their own bound.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        let max = self.config.max_concurrent;
        // A warm sandbox holds a slot (its caller's and the daemon's) like
        // a run: past its idle time it has discarded itself, and one the
        // launcher never reported on (the launcher died) is forgotten.
        let stale = self.config.pool.idle + Duration::from_secs(10);
        state.pool.retain(|_, entry| entry.asked.elapsed() < stale);
        // A stopping daemon starts nothing; what is still queued is found
        // lost ("while the run was queued") by the next one.
        while !state.stopping {
            let fits = |state: &State, run: &QueuedRun| {
                let running = state.running_by_uid.get(&run.uid).copied().unwrap_or(0);
                let mine = state.warm(Some(run.uid), run.key.as_ref());
                let all = state.warm(None, run.key.as_ref());
                state.running.len() + all < max
                    && run.rule_max.is_none_or(|most| running + mine < most)
            };
            let eligible = state.queue.iter().position(|run| fits(state, run));
            let Some(index) = eligible else {
                // Warm sandboxes give way to runs waiting for their slots.
                if !state.queue.is_empty() && !state.pool.is_empty() {
                    let keys: Vec<String> = state.pool.keys().cloned().collect();
                    for key in keys {
                        state.pool.remove(&key);
                        self.tell_launcher(ToLauncher::Drain { key });
                    }
                    continue;
                }
                return;
            };
            let Some(mut run) = state.queue.remove(index) else {
                return;
            };
            decrement(&mut state.queued_by_uid, run.uid);
            *state.running_by_uid.entry(run.uid).or_default() += 1;
            if let Some(key) = &run.key {
                if state.pool.get(key).is_some_and(|entry| entry.ready) {
                    state.pool.remove(key);
                    run.warm = Some(key.clone());
                }
            }
            let refill = run
                .key
                .clone()
                .map(|key| (key, run.rule_max, run.spec.clone()));
            let (control, controls) = mpsc::unbounded_channel();
            state.running.insert(
                run.id.clone(),
                LiveRun {
                    uid: run.uid,
                    refill,
                    control,
                    questions: BTreeMap::new(),
                },
            );
            tracing::info!(
                run = %run.id,
                uid = run.uid,
                warm = run.warm.is_some(),
                command = %super::journal::command_line(&run.spec.argv),
                "run started"
            );
            let this = self.clone();
            tokio::spawn(async move {
                let (id, uid) = (run.id.clone(), run.uid);
                let outcome = this.drive(run, controls).await;
                this.conclude(&id, uid, outcome).await;
            });
        }
    }

    /// Ask for a warm sandbox for the next run like `run`, when none is
    /// there and one fits the caller's and the daemon's slots beside the
    /// runs.
    fn refill(
        self: &Arc<Self>,
        state: &mut State,
        uid: u32,
        (key, rule_max, spec): (String, Option<usize>, RunSpec),
    ) {
        let key = &key;
        if state.pool.contains_key(key) || !state.queue.is_empty() {
            return;
        }
        let running = state.running_by_uid.get(&uid).copied().unwrap_or(0);
        let room = state.running.len() + state.warm(None, None) < self.config.max_concurrent
            && rule_max.is_none_or(|most| running + state.warm(Some(uid), None) < most);
        if !room {
            return;
        }
        if state.pool.is_empty() {
            self.listen_to_pool();
        }
        state.pool_gen += 1;
        let gen = state.pool_gen;
        state.pool.insert(
            key.clone(),
            PoolEntry {
                uid,
                gen,
                ready: false,
                asked: std::time::Instant::now(),
            },
        );
        let mut spec = spec;
        spec.audit = None;
        spec.stdin = false;
        // Its own delegated cgroup: the run's name is the run's. With the
        // daemon's pid: two daemons' launchers may share a cgroup, and
        // each counts its warm sandboxes from 1.
        if let Some(run_as) = &mut spec.run_as {
            run_as.run = format!("warm-{}-{gen}", std::process::id());
        }
        self.tell_launcher(ToLauncher::Warm {
            key: key.clone(),
            gen,
            spec: Box::new(spec),
            count: 1,
            idle_ms: u64::try_from(self.config.pool.idle.as_millis()).unwrap_or(u64::MAX),
            budget: self.config.pool.budget,
        });
    }

    fn tell_launcher(&self, request: ToLauncher) {
        let launcher = self.launcher.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(err) = launcher.send(&request) {
                tracing::warn!("the pool's request to the launcher: {err}");
            }
        });
    }

    /// Hear the launcher's news of warm sandboxes (once per daemon).
    fn listen_to_pool(self: &Arc<Self>) {
        if self
            .pool_listening
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let mut news = self.launcher.pool_events();
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(message) = news.recv().await {
                let Some(this) = this.upgrade() else { return };
                let mut state = lock(&this.state);
                match message {
                    FromLauncher::WarmReady { key, gen } => {
                        if let Some(entry) = state.pool.get_mut(&key).filter(|e| e.gen == gen) {
                            entry.ready = true;
                        }
                    }
                    FromLauncher::WarmDiscarded { key, gen, .. }
                        if state.pool.get(&key).is_some_and(|e| e.gen == gen) =>
                    {
                        state.pool.remove(&key);
                        this.dispatch(&mut state);
                    }
                    _ => {}
                }
            }
        });
    }

    async fn conclude(self: &Arc<Self>, id: &str, uid: u32, mut outcome: Outcome) {
        log_end(id, uid, &outcome);
        let store = self.store.clone();
        let log = self.log_path(id);
        let run = id.to_string();
        let written = blocking(move || {
            if outcome.state == "lost" || (outcome.state == "failed" && outcome.report.is_none()) {
                if let Some(reason) = &outcome.reason {
                    if let Err(err) = super::log::append_lost(&log, reason, crate::clock::unix_ms())
                    {
                        tracing::warn!("run {run}: appending to its log: {err}");
                    }
                }
            }
            append_end(&run, &log, &outcome);
            outcome.log_records = super::log::count_records(&log).unwrap_or(0);
            outcome.finished_ms = crate::clock::unix_ms();
            store.finish(&run, &outcome).map_err(store_error)
        })
        .await;
        if let Err(err) = written {
            tracing::warn!("run {id}: recording its result: {err}");
        }
        let mut state = lock(&self.state);
        if let Some(live) = state.running.remove(id) {
            decrement(&mut state.running_by_uid, live.uid);
            if let Some(refill) = live.refill {
                self.refill(&mut state, live.uid, refill);
            }
        }
        finish_watch(&mut state, id);
        self.dispatch(&mut state);
    }

    /// One run from slot to result.
    async fn drive(
        self: &Arc<Self>,
        run: QueuedRun,
        mut controls: mpsc::UnboundedReceiver<Control>,
    ) -> Outcome {
        let failed = |state: &'static str, reason: String| Outcome {
            state,
            status: Some(125),
            reason: Some(reason),
            report: None,
            log_records: 0,
            finished_ms: 0,
        };
        let id = run.id.clone();
        let store = self.store.clone();
        let dir = self.run_dir(&id);
        let launcher = self.launcher.clone();
        let output_cap = run.spec.policy.limits.output;
        let timeout = run.spec.policy.limits.timeout;
        let launched = blocking(move || {
            store.set_running(&run.id).map_err(store_error)?;
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|err| ApiError::internal(format!("events socket: {err}")))?;
            // The supervisor runs as the caller and may lose any of its
            // descriptors to the caller: it gets pipes the daemon reads
            // and a sealed copy of the caller's own stdin, never a file of
            // root's spool (`relay`).
            let relay_error = |err: super::relay::RelayError| ApiError::internal(err.to_string());
            let (log_feed, log) =
                super::relay::log_pipe(&dir.join("log.ndjson"), output_cap).map_err(relay_error)?;
            let mut feeds = vec![log_feed];
            let audit = match &run.spec.audit {
                Some(path) => {
                    let (feed, write) =
                        super::relay::audit_pipe(path, output_cap).map_err(relay_error)?;
                    feeds.push(feed);
                    Some(write)
                }
                None => None,
            };
            let stdin = match run.spec.stdin {
                true => Some(sealed_copy(&dir.join("stdin"))?),
                false => None,
            };
            let theirs = OwnedFd::from(theirs);
            let mut fds = vec![theirs.as_fd(), log.as_fd()];
            if let Some(stdin) = &stdin {
                fds.push(stdin.as_fd());
            }
            if let Some(audit) = &audit {
                fds.push(audit.as_fd());
            }
            let request = ToLauncher::Spawn {
                run: run.id.clone(),
                spec: Box::new(run.spec),
                warm: run.warm,
            };
            let events = launcher
                .spawn(&request, &fds)
                .map_err(|err| ApiError::internal(err.to_string()))?;
            ours.set_nonblocking(true)
                .map_err(|err| ApiError::internal(format!("events socket: {err}")))?;
            Ok((ours, events, feeds))
        })
        .await;
        let (ours, mut launcher_events, feeds) = match launched {
            Ok(launched) => launched,
            Err(err) => {
                return failed(
                    "failed",
                    format!("the run could not be started: {}", err.message),
                )
            }
        };
        let relays = super::relay::Relays::start(&id, feeds);
        let outcome = self
            .hear_supervisor(&id, ours, timeout, &mut launcher_events, &mut controls)
            .await;
        // Before the daemon's `end`: nothing of the supervisor's follows it.
        relays.finish(LINGER).await;
        outcome
    }

    /// The run's events socket and the launcher's news of its supervisor,
    /// until both are over; the run's end as [`verdict::judge`] finds it.
    async fn hear_supervisor(
        self: &Arc<Self>,
        id: &str,
        ours: std::os::unix::net::UnixStream,
        timeout: Option<Duration>,
        launcher_events: &mut mpsc::UnboundedReceiver<LauncherEvent>,
        controls: &mut mpsc::UnboundedReceiver<Control>,
    ) -> Outcome {
        let stream = match tokio::net::UnixStream::from_std(ours) {
            Ok(stream) => stream,
            Err(err) => {
                return verdict::judge(
                    None,
                    None,
                    Observed::Refused(format!("events socket: {err}")),
                )
            }
        };
        let (reader, mut writer) = stream.into_split();
        // The supervisor runs as the caller: its lines are bounded like any
        // untrusted peer's (the largest it sends is `finished` with its
        // report); a longer one is skipped without being held.
        let mut lines = AsyncLines::new(reader, MAX_MESSAGE);
        let mut too_large = 0u64;
        let mut claim: Option<Claim> = None;
        let mut started = false;
        let mut observed = Observed::Unknown;
        let mut events_open = true;
        let mut launcher_open = true;
        let mut cancelled: Option<&'static str> = None;
        let mut controls_open = true;
        let mut refused_questions = 0u64;
        // The supervisor (the launcher's word) and when root kills it: a
        // cancel the supervisor does not carry out (the caller stopped or
        // ptraced it) ends it all the same, `cancel_grace` and [`LINGER`]
        // later, and its janitor cleans up as for a killed `sandbox run`.
        let mut supervisor: Option<(i32, Option<u64>)> = None;
        let mut kill_at: Option<tokio::time::Instant> = None;
        // The run's timeout is the supervisor's to enforce, and the
        // supervisor is the caller's to stop: root ends it too, once the
        // timeout, the supervisor's own grace and a cancel's are all over
        // (counted from before the supervisor started, so never first).
        if let Some(timeout) = timeout {
            let backstop = timeout
                .checked_add(TIMEOUT_BACKSTOP_SLACK + self.config.cancel_grace + LINGER)
                .and_then(|after| tokio::time::Instant::now().checked_add(after));
            kill_at = backstop;
        }
        let grace_ms = u64::try_from(self.config.cancel_grace.as_millis()).unwrap_or(u64::MAX);
        let ask_deadline_ms =
            u64::try_from(self.config.ask_deadline.as_millis()).unwrap_or(u64::MAX);
        while events_open || launcher_open {
            tokio::select! {
                read = lines.next_frame(), if events_open => match read {
                    Ok(Some(Frame::TooLarge { bytes })) => {
                        too_large += 1;
                        // Once a run: each is the caller's to repeat.
                        if too_large == 1 {
                            tracing::warn!(run = %id, "ignoring an event of {bytes} bytes (at most {MAX_MESSAGE}) and any more like it");
                        }
                    }
                    Ok(Some(Frame::Line(line))) => {
                        let message = serde_json::from_slice::<FromSupervisor>(&line);
                        match message {
                            // Once: a copy of the socket in the caller's
                            // hands may repeat it, and each is a write.
                            Ok(FromSupervisor::Started { init_pid, init_start }) if !started => {
                                started = true;
                                let store = self.store.clone();
                                let run = id.to_string();
                                let _ = blocking(move || {
                                    store
                                        .set_started(&run, init_pid, init_start, crate::clock::unix_ms())
                                        .map_err(store_error)
                                })
                                .await;
                            }
                            Ok(FromSupervisor::Started { .. }) => {}
                            Ok(FromSupervisor::Ask { id: n, caller, action, target, deadline_ms }) => {
                                let kept = self.keep_question(id, n, caller, action, target, verdict::bounded_deadline(deadline_ms, crate::clock::unix_ms(), ask_deadline_ms));
                                if !kept {
                                    refused_questions += 1;
                                    if refused_questions == 1 {
                                        tracing::warn!(run = %id, "the run asked more than {} open questions; the excess is refused", verdict::MAX_OPEN_QUESTIONS);
                                    }
                                }
                            }
                            // The first: what comes later on a copy of the
                            // socket is not the supervisor's last word.
                            Ok(FromSupervisor::Finished { status, report, error }) if claim.is_none() => {
                                claim = Some(Claim { status, report, error });
                            }
                            Ok(FromSupervisor::Finished { .. }) => {}
                            Err(err) => tracing::debug!("run {id}: ignoring a malformed event: {err}"),
                        }
                    }
                    Ok(None) | Err(_) => events_open = false,
                },
                event = launcher_events.recv(), if launcher_open => match event {
                    Some(LauncherEvent::Message(FromLauncher::Started { pid, start, .. })) => {
                        supervisor = Some((pid, start));
                        let store = self.store.clone();
                        let run = id.to_string();
                        let _ = blocking(move || {
                            store.set_supervisor(&run, pid, start).map_err(store_error)
                        })
                        .await;
                    }
                    Some(LauncherEvent::Message(FromLauncher::Refused { error, .. })) => {
                        observed = Observed::Refused(error);
                        launcher_open = false;
                    }
                    Some(LauncherEvent::Message(FromLauncher::Exited { code, signal, .. })) => {
                        observed = Observed::Reaped { code, signal };
                        launcher_open = false;
                    }
                    Some(LauncherEvent::Message(FromLauncher::WarmReady { .. } | FromLauncher::WarmDiscarded { .. })) => {}
                    Some(LauncherEvent::Gone) | None => launcher_open = false,
                },
                // One side ended and the other has not followed: a closed
                // events socket is normally reported by the launcher at once,
                // and a reaped supervisor's socket closes at once unless a
                // copy leaked (or the caller keeps one). Neither may hold the
                // run's slot for ever.
                _ = tokio::time::sleep(LINGER), if events_open != launcher_open => {
                    events_open = false;
                    launcher_open = false;
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)), if kill_at.is_some() && launcher_open => {
                    kill_at = None;
                    if let Some((pid, start)) = supervisor {
                        if kill_if_same(pid, start) {
                            let missed = if cancelled.is_some() { "the cancel" } else { "its timeout" };
                            tracing::warn!(run = %id, pid, "the run's supervisor did not end on {missed}; killed");
                        }
                    }
                }
                control = controls.recv(), if controls_open => {
                    let message = match control {
                        Some(Control::Cancel(reason)) => {
                            cancelled = Some(reason);
                            let after_cancel =
                                tokio::time::Instant::now() + self.config.cancel_grace + LINGER;
                            kill_at = Some(kill_at.map_or(after_cancel, |at| at.min(after_cancel)));
                            ToSupervisor::Cancel { grace_ms }
                        }
                        Some(Control::Answer(n, answer)) => ToSupervisor::Answer { id: n, answer },
                        None => {
                            controls_open = false;
                            continue;
                        }
                    };
                    if events_open {
                        let mut line = serde_json::to_vec(&message).unwrap_or_default();
                        line.push(b'\n');
                        if writer.write_all(&line).await.is_err() {
                            events_open = false;
                        }
                    }
                }
            }
        }
        if refused_questions > 0 {
            tracing::warn!(run = %id, refused = refused_questions, "questions refused past the run's bound");
        }
        verdict::judge(cancelled, claim, observed)
    }

    /// Keep question `n` of run `id` unless the run holds
    /// [`verdict::MAX_OPEN_QUESTIONS`] open ones already; its fields are
    /// cut to [`verdict::MAX_QUESTION_TEXT`]. False when it was refused.
    fn keep_question(
        &self,
        id: &str,
        n: u64,
        caller: String,
        action: String,
        target: Option<String>,
        deadline_ms: u64,
    ) -> bool {
        let now = crate::clock::unix_ms();
        let mut state = lock(&self.state);
        let Some(live) = state.running.get_mut(id) else {
            return false;
        };
        live.questions.retain(|_, q| q.deadline_ms > now);
        if !live.questions.contains_key(&n) && live.questions.len() >= verdict::MAX_OPEN_QUESTIONS {
            return false;
        }
        tracing::debug!(run = %id, question = n, action = %action, "question asked");
        let uid = live.uid;
        live.questions.insert(
            n,
            Question {
                id: format!("{id}/{n}"),
                run: id.to_string(),
                caller: verdict::bounded_text(caller),
                action: verdict::bounded_text(action),
                target: target.map(verdict::bounded_text),
                deadline_ms,
                uid,
            },
        );
        true
    }

    /// Cancel a run the caller may see. Returns its state after the call.
    pub async fn cancel(self: &Arc<Self>, id: &str) -> Result<String, ApiError> {
        let queued = {
            let mut state = lock(&self.state);
            if let Some(live) = state.running.get(id) {
                let _ = live.control.send(Control::Cancel(CANCELLED_ON_REQUEST));
                return Ok("running".into());
            }
            match state.queue.iter().position(|run| run.id == id) {
                Some(index) => {
                    let run = state.queue.remove(index);
                    if let Some(run) = &run {
                        decrement(&mut state.queued_by_uid, run.uid);
                    }
                    run.map(|run| run.uid)
                }
                None => None,
            }
        };
        if let Some(uid) = queued {
            self.conclude_unstarted(id, uid, "cancelled", "cancelled before it started")
                .await;
            return Ok("cancelled".into());
        }
        let store = self.store.clone();
        let run = id.to_string();
        let record = blocking(move || store.get(&run).map_err(store_error)).await?;
        Ok(record.map_or_else(|| "unknown".into(), |r| r.state))
    }

    async fn conclude_unstarted(
        self: &Arc<Self>,
        id: &str,
        uid: u32,
        state: &'static str,
        reason: &str,
    ) {
        let store = self.store.clone();
        let run = id.to_string();
        let mut outcome = Outcome {
            state,
            status: None,
            reason: Some(reason.to_string()),
            report: None,
            log_records: 0,
            finished_ms: crate::clock::unix_ms(),
        };
        log_end(id, uid, &outcome);
        let log = self.log_path(id);
        let written = blocking(move || {
            append_end(&run, &log, &outcome);
            outcome.log_records = super::log::count_records(&log).unwrap_or(0);
            store.finish(&run, &outcome).map_err(store_error)
        });
        if let Err(err) = written.await {
            tracing::warn!("run {id}: recording its result: {err}");
        }
        finish_watch(&mut lock(&self.state), id);
    }

    /// Open questions of runs `uid` may see (`None`: every run's).
    pub fn questions(&self, uid: Option<u32>) -> Vec<Question> {
        let now = crate::clock::unix_ms();
        let state = lock(&self.state);
        let mut out: Vec<Question> = state
            .running
            .values()
            .flat_map(|live| live.questions.values())
            .filter(|q| uid.is_none_or(|uid| q.uid == uid) && q.deadline_ms > now)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.deadline_ms.cmp(&b.deadline_ms).then(a.id.cmp(&b.id)));
        out
    }

    /// Answer a question of a run `uid` may see.
    pub fn answer(
        &self,
        uid: Option<u32>,
        run: &str,
        n: u64,
        answer: Approval,
    ) -> Result<(), ApiError> {
        let missing = || {
            ApiError::new(
                404,
                "no_such_approval",
                format!("no open question {run}/{n}"),
                "list open questions with GET /v1/approvals; an unanswered one is denied at its deadline",
            )
        };
        let mut state = lock(&self.state);
        let live = state.running.get_mut(run).ok_or_else(missing)?;
        if uid.is_some_and(|uid| live.uid != uid) {
            return Err(missing());
        }
        match live.questions.get(&n) {
            Some(q) if q.deadline_ms > crate::clock::unix_ms() => {}
            _ => return Err(missing()),
        }
        live.questions.remove(&n);
        tracing::debug!(run = %run, question = n, answer = ?answer, "question answered");
        live.control
            .send(Control::Answer(n, answer))
            .map_err(|_| missing())
    }

    /// Stop: queued runs are cancelled, running ones get a cancel (SIGTERM,
    /// everything killed after `cancel_grace`) with the reason "the daemon
    /// stopped", and the call returns when all are recorded, their logs
    /// ended with their `end` record, or the grace and [`STOP_MARGIN`] are
    /// up (a run not recorded by then is found lost by the next daemon).
    pub async fn shut_down(self: &Arc<Self>) {
        let (queued, watches) = {
            let mut state = lock(&self.state);
            state.stopping = true;
            let queued: Vec<(String, u32)> =
                state.queue.drain(..).map(|run| (run.id, run.uid)).collect();
            for live in state.running.values() {
                let _ = live.control.send(Control::Cancel(DAEMON_STOPPED));
            }
            let watches: Vec<watch::Receiver<bool>> = state
                .running
                .keys()
                .filter_map(|id| state.over.get(id).cloned())
                .collect();
            (queued, watches)
        };
        for (id, uid) in queued {
            self.conclude_unstarted(
                &id,
                uid,
                "cancelled",
                "the daemon stopped before the run started",
            )
            .await;
        }
        let deadline = self.config.cancel_grace + STOP_MARGIN;
        let all = async {
            for mut over in watches {
                let _ = over.wait_for(|over| *over).await;
            }
        };
        let _ = tokio::time::timeout(deadline, all).await;
    }
}

/// How long past `cancel_grace` a stopping daemon waits for its runs to be
/// recorded: the supervisor's kill, its report and the launcher's news of
/// its end ([`LINGER`] at most).
const STOP_MARGIN: Duration = Duration::from_secs(6);

/// End the run's log with its `end` record: what its run object says.
fn append_end(run: &str, log: &Path, outcome: &Outcome) {
    let end = crate::launch::protocol::LogEvent::End {
        state: outcome.state.to_string(),
        status: outcome.status,
        reason: outcome.reason.clone(),
        report: outcome.report.clone(),
    };
    if let Err(err) = super::log::append(log, end, crate::clock::unix_ms()) {
        tracing::warn!("run {run}: appending its end to its log: {err}");
    }
}

/// The daemon's log line of a run's end: how it ended, never its output.
fn log_end(id: &str, uid: u32, outcome: &Outcome) {
    let status = outcome
        .status
        .map_or_else(|| "none".to_string(), |s| s.to_string());
    match outcome.reason.as_deref() {
        Some(reason) => tracing::info!(
            run = %id,
            uid,
            state = %outcome.state,
            status = %status,
            reason = %crate::broker::prompt::escape(reason),
            "run ended"
        ),
        None => tracing::info!(
            run = %id,
            uid,
            state = %outcome.state,
            status = %status,
            "run ended"
        ),
    }
}

fn decrement(counts: &mut HashMap<u32, usize>, uid: u32) {
    if let Some(count) = counts.get_mut(&uid) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            counts.remove(&uid);
        }
    }
}

fn finish_watch(state: &mut State, id: &str) {
    state.over.remove(id);
    if let Some(sender) = state.over_senders.remove(id) {
        let _ = sender.send(true);
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<(), ApiError> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut file| file.write_all(bytes))
        .map_err(|err| ApiError::internal(format!("writing {}: {err}", path.display())))
}

/// The submitted stdin as a sealed memfd: the caller's own bytes, which
/// the caller (holding the supervisor's descriptors) may read but neither
/// change nor use to reach the spool file they came from.
fn sealed_copy(path: &Path) -> Result<OwnedFd, ApiError> {
    use std::io::{Seek, Write};
    let fail = |err: std::io::Error| {
        ApiError::internal(format!("the run's stdin {}: {err}", path.display()))
    };
    let bytes = std::fs::read(path).map_err(fail)?;
    let memfd = nix::sys::memfd::memfd_create(
        c"sandbox-stdin",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(|errno| fail(errno.into()))?;
    let mut file = std::fs::File::from(memfd);
    file.write_all(&bytes).map_err(fail)?;
    file.rewind().map_err(fail)?;
    use nix::fcntl::SealFlag;
    nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_SEAL,
        ),
    )
    .map_err(|errno| fail(errno.into()))?;
    Ok(OwnedFd::from(file))
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat`,
/// field 22): with the pid it names one process, where a pid alone may
/// have been reused by the time it is read again.
pub use crate::launch::protocol::process_start_time as proc_start_time;

/// Whether `pid` is a process whose files in /proc belong to `uid` (its
/// owner, while it is dumpable, as a sandbox's init of that caller is).
pub fn owned_by(pid: Option<i32>, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    pid.filter(|pid| *pid > 1)
        .and_then(|pid| std::fs::metadata(format!("/proc/{pid}")).ok())
        .is_some_and(|meta| meta.uid() == uid)
}

/// Kill a process recorded by an earlier daemon if it is still the same
/// process (same start time).
pub fn kill_if_same(pid: i32, start: Option<u64>) -> bool {
    let Some(start) = start else { return false };
    if pid <= 1 || proc_start_time(pid) != Some(start) {
        return false;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_names_one_process() {
        let own = std::process::id() as i32;
        let start = proc_start_time(own).unwrap();
        assert!(start > 0);
        assert_eq!(proc_start_time(own), Some(start));
        assert!(
            !kill_if_same(own, Some(start + 1)),
            "a different start time is another process"
        );
        assert!(!kill_if_same(own, None));
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(owned_by(Some(pid), 0));
        assert!(
            !owned_by(Some(pid), 61_234),
            "root's process is not a caller's init"
        );
        assert!(kill_if_same(pid, proc_start_time(pid)));
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }

    #[test]
    fn run_ids_are_path_safe() {
        let id = new_run_id();
        assert!(is_run_id(&id), "{id}");
        assert_ne!(id, new_run_id());
        assert!(!is_run_id("../../etc/passwd"));
        assert!(!is_run_id("0123456789ABCDEF"));
        assert_eq!(queue_share(64), 32);
        assert_eq!(queue_share(1), 1);
    }
}
