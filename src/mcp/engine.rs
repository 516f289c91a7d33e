//! The front's end of the engine: `sandbox serve --stdio`'s loop, forked
//! before the front starts its runtime, spoken to over a socketpair with
//! serve's own JSON-RPC lines.
//!
//! The engine stays single-threaded (it forks a host per skill, which a
//! threaded process may not), so this process holds no skill state of its
//! own: every answer about skills is the engine's.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::broker::protocol::{self, Limits};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{broadcast, mpsc, oneshot};

/// Longest line read from the engine: a skill's result can be large, and
/// serve's own limit on a host's line is 64 MiB.
const MAX_LINE: usize = 64 << 20;

/// Why talking to the engine failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The socket could not be used.
    #[error("the skill engine's socket: {0}")]
    Io(#[from] std::io::Error),
    /// The engine ended (it crashed, or this process is shutting down).
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
    /// Skills were added, removed or changed (or a skill's state moved in a
    /// way that changes what is listed).
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

/// A connection to the engine, shared by every request handler.
#[derive(Debug, Clone)]
pub struct Engine {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    asks: AskRoutes,
    events: broadcast::Sender<EngineEvent>,
    next_id: Arc<AtomicU64>,
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
    /// Speak to the engine on `socket`; its lines are read by a task of
    /// the current runtime.
    pub fn start(socket: OwnedFd) -> Result<Engine, EngineError> {
        let socket = std::os::unix::net::UnixStream::from(socket);
        socket.set_nonblocking(true)?;
        let socket = tokio::net::UnixStream::from_std(socket)?;
        let (reader, writer) = socket.into_split();
        let (events, _) = broadcast::channel(64);
        let engine = Engine {
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            pending: Arc::default(),
            asks: Arc::default(),
            events,
            next_id: Arc::new(AtomicU64::new(1)),
        };
        tokio::spawn(engine.clone().read_lines(reader));
        Ok(engine)
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
        let (id, answer) = self.send_request(method, params).await?;
        let answer = answer.await.map_err(|_| EngineError::Gone);
        self.pending_remove(id);
        answer
    }

    /// Start `skill.invoke` of `name`.
    pub async fn invoke(&self, name: &str, params: Value) -> Result<Invocation, EngineError> {
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
        if let Err(err) = self.write_text(line).await {
            self.forget(id);
            return Err(err);
        }
        Ok(Invocation { id, answer, asks })
    }

    /// Stop routing anything to invocation `id` (it ended or was abandoned).
    pub fn forget(&self, id: u64) {
        self.pending_remove(id);
        lock(&self.asks).remove(&id);
    }

    /// Cancel invocation `id`: the engine drops it or kills its host.
    pub async fn cancel(&self, id: u64) {
        // Fire and forget: the invocation's own answer says how it ended.
        let next = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line =
            json!({"jsonrpc": "2.0", "id": next, "method": "skill.cancel", "params": {"id": id}});
        let _ = self.write_line(&line).await;
    }

    /// Answer a skill's question: `once`, `session`, `always` or `deny`.
    pub async fn answer(&self, ask: &Ask, answer: &str) {
        let line = json!({"jsonrpc": "2.0", "id": ask.id, "result": {"answer": answer}});
        let _ = self.write_line(&line).await;
    }

    async fn send_request(
        &self,
        method: &str,
        params: Value,
    ) -> Result<(u64, oneshot::Receiver<Result<Value, Value>>), EngineError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(err) = self.write_line(&line).await {
            self.pending_remove(id);
            return Err(err);
        }
        Ok((id, rx))
    }

    fn pending_remove(&self, id: u64) {
        lock(&self.pending).remove(&id);
    }

    async fn write_line(&self, message: &Value) -> Result<(), EngineError> {
        self.write_text(message.to_string()).await
    }

    async fn write_text(&self, text: String) -> Result<(), EngineError> {
        let mut line = text.into_bytes();
        line.push(b'\n');
        let mut writer = self.writer.lock().await;
        writer.write_all(&line).await?;
        Ok(())
    }

    async fn read_lines(self, reader: OwnedReadHalf) {
        let mut reader = BufReader::with_capacity(64 << 10, reader);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') && line.len() >= MAX_LINE {
                eprintln!("sandbox serve --mcp: the skill engine sent a line over {MAX_LINE} bytes; stopping");
                break;
            }
            match serde_json::from_slice::<Value>(&line) {
                Ok(message) => self.dispatch(message).await,
                Err(err) => {
                    eprintln!("sandbox serve --mcp: unreadable line from the skill engine: {err}")
                }
            }
        }
        // Every waiter learns the engine is gone.
        lock(&self.pending).clear();
        lock(&self.asks).clear();
    }

    async fn dispatch(&self, message: Value) {
        let method = message.get("method").and_then(Value::as_str);
        match (method, message.get("id")) {
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { return };
                let answer = match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                if let Some(waiter) = lock(&self.pending).remove(&id) {
                    let _ = waiter.send(answer);
                }
                lock(&self.asks).remove(&id);
            }
            (Some("skill.ask"), Some(id)) => self.route_ask(id.clone(), &message["params"]).await,
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

    async fn route_ask(&self, id: Value, params: &Value) {
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
                    self.answer(&unrouted.0, "deny").await;
                }
            }
            // Its call is over or unknown: nobody can answer for it.
            None => self.answer(&ask, "deny").await,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
