//! The engine: `sandbox serve --stdio`'s server ([`Server`]), in this
//! process, driven by a task of the front's runtime and spoken to with
//! serve's own JSON-RPC lines, in memory.
//!
//! The first version ran the engine as a forked process behind a
//! socketpair; that hop (two more wake-ups and sleeps of two processes per
//! call) cost about 45 µs of each call on a 2-core VM, most of what the MCP
//! layer added. Here a message to the engine is a function call and its
//! answer is read from a buffer. The runtime is single-threaded and no
//! transport here starts a thread, so the server can still fork a host per
//! skill; should a thread exist, it executes `sandbox __skill-host` instead
//! (serve's own fallback).

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::unix::AsyncFd;
use tokio::sync::{broadcast, mpsc, oneshot, Notify};

use sandbox::broker::protocol::{self, Limits};
use sandbox::jsonl::{Frame, Framer};
use sandbox::os::WaitSet;
use sandbox::skill::serve::{ServeError, ServeOptions, Server, HOST_LINE_LIMIT};

/// Why the engine failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Waiting for its hosts.
    #[error("the skill engine's wait set ({op}): {source}")]
    Wait {
        /// What was attempted.
        op: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The server itself.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// It ended (after an error, or the session is over).
    #[error("the skill engine ended")]
    Gone,
    /// A request the engine would refuse unread: serve answers a line over
    /// its limits with an error under a null id, which no request here
    /// could be matched to, so the call would never end.
    #[error("{0}")]
    Unsendable(String),
}

/// Something the engine said on its own.
#[derive(Debug, Clone)]
pub enum EngineEvent {
    /// Skills were added, removed or changed.
    ListChanged,
    /// A skill's state: `inactive`, `activating`, `active`, `failed`,
    /// `disabled`, `removed`.
    State {
        /// The skill.
        name: String,
        /// Its new state.
        state: String,
    },
}

/// A broker question a skill's host put to the client, for one invocation.
#[derive(Debug, Clone)]
pub struct Ask {
    /// The engine's request id, which the answer must carry.
    pub id: Value,
    /// The skill asking.
    pub skill: String,
    /// The action (`fs.write`, ...).
    pub action: String,
    /// What it applies to, escaped by the engine.
    pub target: Option<String>,
    /// The question as the terminal prompt shows it.
    pub question: String,
    /// When the host stops waiting (Unix ms).
    pub deadline_ms: Option<u64>,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, Value>>>>>;
type AskRoutes = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Ask>>>>;
type Reviews = Arc<Mutex<HashMap<u64, sandbox::review::Kept>>>;

/// Longest line of the server's own output: a host's answer
/// ([`HOST_LINE_LIMIT`]) in serve's envelope. The server writes whole
/// lines into memory; the limit only keeps one reader for every stream.
const SERVER_LINE_LIMIT: usize = HOST_LINE_LIMIT + (1 << 20);

/// What the server writes for the client: whole lines, read back by
/// [`Engine::flush`].
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The engine, shared by every request handler.
#[derive(Clone)]
pub struct Engine {
    server: Arc<Mutex<Server>>,
    lines: Lines,
    /// The server's descriptors or deadlines may have changed.
    changed: Arc<Notify>,
    /// What the driver waits for now.
    armed: Arc<Mutex<Armed>>,
    /// The driver stopped: nobody would read the hosts' answers, so no
    /// call is taken any more.
    stopped: Arc<std::sync::atomic::AtomicBool>,
    pending: Pending,
    asks: AskRoutes,
    /// What the review runs of invocations kept, as serve said just
    /// before their answers (`skill.reviewed`).
    reviews: Reviews,
    events: broadcast::Sender<EngineEvent>,
    next_id: Arc<AtomicU64>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// How often the driver looks at the server while a host runs, at least.
/// Shorter than any call's watchdog (its timeout plus 5 s), so that setting
/// one never needs to wake the driver.
const HEARTBEAT: Duration = Duration::from_secs(2);

/// What the driver last armed: its wake-up and the descriptors it waits
/// for (as the count and the hosts started so far).
#[derive(Debug, Clone, Copy, Default)]
struct Armed {
    at: Option<Instant>,
    started: u64,
    fds: usize,
}

/// One `skill.invoke` in flight.
#[derive(Debug)]
pub struct Invocation {
    /// Its request id (what `skill.cancel` names).
    pub id: u64,
    /// The engine's answer.
    pub answer: oneshot::Receiver<Result<Value, Value>>,
    /// Questions its skill asks while it runs.
    pub asks: mpsc::UnboundedReceiver<Ask>,
}

impl Engine {
    /// Serve `options`' skills (discovered now) and drive the server from
    /// a task of the current runtime.
    pub fn start(options: ServeOptions) -> Engine {
        let lines = Lines::default();
        let server = Server::writing_to(options, Box::new(lines.clone()));
        let (events, _) = broadcast::channel(64);
        let engine = Engine {
            server: Arc::new(Mutex::new(server)),
            lines,
            changed: Arc::new(Notify::new()),
            armed: Arc::default(),
            stopped: Arc::default(),
            pending: Arc::default(),
            asks: Arc::default(),
            reviews: Arc::default(),
            events,
            next_id: Arc::new(AtomicU64::new(1)),
        };
        tokio::spawn({
            let engine = engine.clone();
            async move {
                if let Err(err) = engine.drive().await {
                    eprintln!("sandbox serve --mcp: the skill engine stopped: {err}");
                }
                engine.stopped.store(true, Ordering::SeqCst);
                engine.fail_waiters();
            }
        });
        engine
    }

    /// Kill every skill's host (the session is over).
    pub fn shutdown(&self) {
        lock(&self.server).shutdown();
    }

    /// Engine events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<EngineEvent> {
        self.events.subscribe()
    }

    /// Send a request and wait for its answer: `Ok(result)` or `Err(error
    /// object)`.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Result<Value, Value>, EngineError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let sent =
            self.feed(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = match sent {
            Ok(()) => rx.await.map_err(|_| EngineError::Gone),
            Err(err) => Err(err),
        };
        lock(&self.pending).remove(&id);
        answer
    }

    /// Start `skill.invoke` of `name`.
    pub fn invoke(&self, name: &str, params: Value) -> Result<Invocation, EngineError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "skill.invoke",
                          "params": {"name": name, "params": params}})
        .to_string();
        let limits = Limits::default();
        if line.len() > limits.max_message {
            return Err(EngineError::Unsendable(format!(
                "the arguments make a request of {} bytes, over serve's limit of {} bytes",
                line.len(),
                limits.max_message
            )));
        }
        if protocol::depth_exceeds(line.as_bytes(), limits.max_depth) {
            return Err(EngineError::Unsendable(format!(
                "the arguments are nested deeper than serve's limit of {} levels",
                limits.max_depth
            )));
        }
        let (ask_tx, asks) = mpsc::unbounded_channel();
        lock(&self.asks).insert(id, ask_tx);
        let (tx, answer) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        if let Err(err) = self.feed_text(&line) {
            self.forget(id);
            return Err(err);
        }
        Ok(Invocation { id, answer, asks })
    }

    /// Stop routing anything to invocation `id` (it ended or was abandoned).
    pub fn forget(&self, id: u64) {
        lock(&self.pending).remove(&id);
        lock(&self.asks).remove(&id);
        lock(&self.reviews).remove(&id);
    }

    /// What invocation `id`'s review run kept (its skill runs in review
    /// mode), once its answer has come.
    pub fn take_review(&self, id: u64) -> Option<sandbox::review::Kept> {
        lock(&self.reviews).remove(&id)
    }

    /// Cancel invocation `id`: the engine drops it or kills its host.
    pub fn cancel(&self, id: u64) {
        // Its own answer says how it ended; the cancel's is not awaited.
        let next = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = self.feed(
            &json!({"jsonrpc": "2.0", "id": next, "method": "skill.cancel",
                                  "params": {"id": id}}),
        );
    }

    /// Answer a skill's question: `once`, `run`, `always`, `deny` or
    /// `unasked`.
    pub fn answer(&self, ask: &Ask, answer: &str) {
        let _ = self.feed(&json!({"jsonrpc": "2.0", "id": ask.id, "result": {"answer": answer}}));
    }

    /// Give the server one message, then pass on what it said.
    fn feed(&self, message: &Value) -> Result<(), EngineError> {
        self.feed_text(&message.to_string())
    }

    /// [`Engine::feed`] of a message already written out.
    fn feed_text(&self, line: &str) -> Result<(), EngineError> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(EngineError::Gone);
        }
        let (handled, moved) = {
            let mut server = lock(&self.server);
            let handled = server.on_input_line(line.as_bytes());
            // The driver looks again only when what it waits for changed:
            // a host started or ended, or something is due before it wakes.
            let armed = *lock(&self.armed);
            let due = server.next_wakeup();
            let moved = server.hosts_started() != armed.started
                || server.watched().len() != armed.fds
                || due.is_some_and(|at| armed.at.is_none_or(|armed| at < armed));
            (handled, moved)
        };
        if moved {
            self.changed.notify_one();
        }
        self.flush();
        handled.map_err(EngineError::from)
    }

    /// Pass on every line the server wrote. Called with the server
    /// unlocked: answering a question feeds the server again.
    fn flush(&self) {
        let written = std::mem::take(&mut *lock(&self.lines.0));
        let mut framer = Framer::new(SERVER_LINE_LIMIT);
        let mut frames = Vec::new();
        framer.push(&written, &mut frames);
        frames.extend(framer.finish());
        for frame in frames {
            let line = match frame {
                Frame::Line(line) if line.is_empty() => continue,
                Frame::Line(line) => line,
                Frame::TooLarge { bytes } => {
                    eprintln!("sandbox serve --mcp: a line of {bytes} bytes from the skill engine (at most {SERVER_LINE_LIMIT}) was dropped");
                    continue;
                }
            };
            match serde_json::from_slice::<Value>(&line) {
                Ok(message) => self.dispatch(message),
                Err(err) => {
                    eprintln!("sandbox serve --mcp: unreadable line from the skill engine: {err}")
                }
            }
        }
    }

    /// Wait for the server's hosts, its file watch and its deadlines, and
    /// let it work whenever one of them is due.
    async fn drive(&self) -> Result<(), EngineError> {
        let mut wait_set: Option<(Vec<RawFd>, u64, AsyncFd<WaitSet>)> = None;
        // One timer, moved rather than made again: registering a timer
        // earlier than the runtime's next wake-up costs a wake-up of its own.
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut timer_at: Option<tokio::time::Instant> = None;
        loop {
            let wakeup = {
                let server = lock(&self.server);
                let fds: Vec<RawFd> = server.watched().iter().map(|fd| fd.as_raw_fd()).collect();
                let started = server.hosts_started();
                let current = wait_set.as_ref().is_some_and(|(seen, seen_started, _)| {
                    *seen == fds && *seen_started == started
                });
                if !current {
                    // Rebuilt rather than edited: a host's descriptor is
                    // closed (and may be reused) before this task sees it.
                    let set =
                        WaitSet::of(server.watched()).map_err(|source| EngineError::Wait {
                            op: "epoll",
                            source,
                        })?;
                    wait_set = Some((fds.clone(), started, set));
                }
                let mut wakeup = server.next_wakeup();
                // While a host runs, look again at least every HEARTBEAT, so
                // that a call's watchdog (always further off) needs no
                // wake-up of this task when it is set: see `feed_text`.
                if fds.len() > usize::from(server.watched_file_changes()) {
                    let beat = Instant::now() + HEARTBEAT;
                    wakeup = Some(wakeup.map_or(beat, |at| at.min(beat)));
                }
                *lock(&self.armed) = Armed {
                    at: wakeup,
                    started,
                    fds: fds.len(),
                };
                wakeup
            };
            let Some((_, _, waiting)) = &wait_set else {
                return Err(EngineError::Gone);
            };
            let wanted = wakeup.map(tokio::time::Instant::from_std);
            if wanted != timer_at {
                if let Some(at) = wanted {
                    timer.as_mut().reset(at);
                }
                timer_at = wanted;
            }
            tokio::select! {
                ready = waiting.readable() => {
                    let mut guard = ready.map_err(|source| EngineError::Wait { op: "wait", source })?;
                    let ready = guard.get_inner().ready();
                    if ready.is_empty() {
                        guard.clear_ready();
                        continue;
                    }
                    self.step(Some(&ready))?;
                    // The call this answered runs before the wait set is
                    // looked at again: that work is off the call's path.
                    tokio::task::yield_now().await;
                }
                () = &mut timer, if timer_at.is_some() => {
                    timer_at = None;
                    self.step(None)?;
                }
                () = self.changed.notified() => {}
            }
        }
    }

    fn step(&self, ready: Option<&[RawFd]>) -> Result<(), EngineError> {
        let stepped = lock(&self.server).step(ready);
        self.flush();
        Ok(stepped?)
    }

    fn fail_waiters(&self) {
        lock(&self.pending).clear();
        lock(&self.asks).clear();
        lock(&self.reviews).clear();
    }

    fn dispatch(&self, mut message: Value) {
        let method = message.get("method").and_then(Value::as_str);
        match (method, message.get("id")) {
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { return };
                // Taken, not cloned: the result is the skill's whole answer.
                let answer = match message.get_mut("error").map(Value::take) {
                    Some(error) => Err(error),
                    None => Ok(message
                        .get_mut("result")
                        .map(Value::take)
                        .unwrap_or(Value::Null)),
                };
                if let Some(waiter) = lock(&self.pending).remove(&id) {
                    let _ = waiter.send(answer);
                }
                lock(&self.asks).remove(&id);
            }
            (Some("skill.ask"), Some(id)) => self.route_ask(id.clone(), &message["params"]),
            (Some("skill.reviewed"), None) => {
                let params = &message["params"];
                let call = params["call"].as_u64();
                let kept = serde_json::from_value(params["review"].clone()).ok();
                // Only for a call still waiting for its answer, which comes
                // next: nothing is kept for a call nobody will read.
                if let (Some(call), Some(kept)) = (call, kept) {
                    if lock(&self.pending).contains_key(&call) {
                        lock(&self.reviews).insert(call, kept);
                    }
                }
            }
            (Some("skill.listChanged"), None) => {
                let _ = self.events.send(EngineEvent::ListChanged);
            }
            (Some("skill.stateChanged"), None) => {
                let params = &message["params"];
                let name = params["name"].as_str().unwrap_or_default().to_string();
                let state = params["state"].as_str().unwrap_or_default().to_string();
                let _ = self.events.send(EngineEvent::State { name, state });
            }
            _ => {}
        }
    }

    fn route_ask(&self, id: Value, params: &Value) {
        let text = |key: &str| params.get(key).and_then(Value::as_str).map(str::to_owned);
        let ask = Ask {
            id,
            skill: text("skill").unwrap_or_default(),
            action: text("action").unwrap_or_default(),
            target: text("target"),
            question: text("question").unwrap_or_default(),
            deadline_ms: params.get("deadline_ms").and_then(Value::as_u64),
        };
        let route = params
            .get("call")
            .and_then(Value::as_u64)
            .and_then(|call| lock(&self.asks).get(&call).cloned());
        match route {
            Some(route) => {
                if let Err(unrouted) = route.send(ask) {
                    self.answer(&unrouted.0, "unanswered");
                }
            }
            // Its call is over or unknown: nobody can answer for it.
            None => self.answer(&ask, "unanswered"),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
