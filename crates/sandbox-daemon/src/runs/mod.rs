//! Runs from submission to result: admission (queue bounds and shares),
//! FIFO start as slots free, one task per running run that talks to its
//! supervisor over the events socket, cancel, approvals, and the result
//! written to the store before anyone waiting hears the run is over.
//!
//! The manager's state and what its jobs share are here; each job has its
//! own file: [`queue`] (admission, queue, dispatch), [`pool`] (warm
//! sandboxes), [`driver`] (one run's talk with its supervisor and the
//! launcher), [`approvals`] (the questions runs ask) and [`end`] (cancel,
//! stop, and the result recorded).

mod approvals;
mod driver;
mod end;
mod pool;
mod queue;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use tokio::sync::{mpsc, watch};

use super::config::Config;
use super::error::ApiError;
use super::launcher::Launcher;
use super::store::Store;
use sandbox::launch::protocol::{Approval, RunSpec, WarmPick};

pub use approvals::Question;
pub use driver::{kill_if_same, owned_by, proc_start_time};
pub use end::DAEMON_STOPPED;
use pool::PoolEntry;
pub use pool::PoolFigures;
pub use queue::queue_share;

/// A new run id: 16 hex digits from the kernel's random source, so ids
/// are not guessable from each other (a guessed id still meets the owner
/// check, but need not leak how busy the daemon is).
pub fn new_run_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        bytes = sandbox::clock::unix_ms()
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
    warm: Option<WarmPick>,
}

struct LiveRun {
    uid: u32,
    /// What its key's warm sandboxes are made from (`pool`), when the
    /// pool is on and the run has a key.
    warm_from: Option<pool::Template>,
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
    /// Warm sandboxes asked for or ready, by the number of the request
    /// (oldest first).
    pool: BTreeMap<u64, PoolEntry>,
    pool_gen: u64,
    /// Keys whose warm sandboxes are prepared after each run, not ahead
    /// (`pool`).
    pool_discarded: HashSet<String>,
}

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

/// The daemon's run manager.
pub struct Runs {
    /// The configuration.
    pub config: Arc<Config>,
    /// The records.
    pub store: Arc<Store>,
    /// `<state_dir>/spool`.
    pub spool: PathBuf,
    launcher: Arc<Launcher>,
    /// The callers' stores of review runs' changes.
    pub review: Arc<crate::review::ReviewStores>,
    state: Mutex<State>,
    pool_listening: std::sync::atomic::AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub use crate::error::blocking;

fn store_error(err: super::store::StoreError) -> ApiError {
    ApiError::internal(err.to_string())
}

impl Runs {
    /// A run manager over a store, a spool directory and a launcher.
    pub fn new(
        config: Arc<Config>,
        store: Arc<Store>,
        spool: PathBuf,
        launcher: Arc<Launcher>,
        review: Arc<crate::review::ReviewStores>,
    ) -> Arc<Runs> {
        Arc::new(Runs {
            config,
            store,
            spool,
            launcher,
            review,
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

    /// A receiver that turns true when the run is over; `None` when it is
    /// not live (over already, or unknown).
    pub fn watch_over(&self, id: &str) -> Option<watch::Receiver<bool>> {
        lock(&self.state).over.get(id).cloned()
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

#[cfg(test)]
mod tests {
    use super::*;

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
