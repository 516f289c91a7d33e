//! One skill process and the invocations it serves: sends `skill.invoke`
//! over the broker channel, relays answers, enforces the invocation and
//! activation timeouts, and ends an on-demand skill after its answer.
//!
//! Invocations come either from the caller directly (`sandbox skill run`)
//! or from a control socket (`sandbox serve` runs one host process per
//! skill, so a skill's broker work, a crash or a hang never touches
//! another skill). On the control socket, one JSON object per line:
//! in `{"id": ID, "params": {...}}`; out `{"id": ID, "result": ...}` or
//! `{"id": ID, "error": {...}}`, and the events `{"event": "active"}` and
//! `{"event": "exited", ...}`.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::broker::protocol::{code, Fill, Frame, Framer};
use crate::spawn::parent::{Driver, Steer, Turn};

/// How long an invocation may take unless the manifest says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a skill may take from start to its runtime executing.
pub const ACTIVATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an on-demand skill may take to exit after its answer.
pub const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Longest control line (an invocation's params).
const CONTROL_LINE_LIMIT: usize = 1 << 20;

/// A JSON-RPC error object.
pub fn error_object(code: i64, message: impl Into<String>) -> Value {
    json!({ "code": code, "message": message.into() })
}

/// An invocation's outcome: the skill's result, or an error object.
pub type Answer = Result<Value, Value>;

struct Current {
    control_id: Value,
    invoke_id: String,
    deadline: Option<Instant>,
}

/// The [`Driver`] of a skill's run.
pub struct Host {
    name: String,
    timeout: Duration,
    once: bool,
    control: Option<(UnixStream, Framer)>,
    queue: VecDeque<(Value, Value)>,
    current: Option<Current>,
    executing: bool,
    activation_deadline: Instant,
    closing_deadline: Option<Instant>,
    served: usize,
    replies: Vec<(Value, Answer)>,
    timed_out: bool,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.name)
            .field("served", &self.served)
            .finish()
    }
}

impl Host {
    /// A host for skill `name` answering within `timeout`; `once` ends the
    /// skill after its first answer (on-demand activation).
    pub fn new(name: &str, timeout: Duration, once: bool) -> Host {
        Host {
            name: name.to_string(),
            timeout,
            once,
            control: None,
            queue: VecDeque::new(),
            current: None,
            executing: false,
            activation_deadline: Instant::now() + ACTIVATION_TIMEOUT,
            closing_deadline: None,
            served: 0,
            replies: Vec::new(),
            timed_out: false,
        }
    }

    /// Take invocations from `control` and send answers and events there.
    pub fn with_control(mut self, control: UnixStream) -> Host {
        self.control = Some((control, Framer::new(CONTROL_LINE_LIMIT)));
        self
    }

    /// Queue one invocation (its answer comes back under `id`).
    pub fn push(&mut self, id: Value, params: Value) {
        self.queue.push_back((id, params));
    }

    /// The answers given so far (without a control socket).
    pub fn take_replies(&mut self) -> Vec<(Value, Answer)> {
        std::mem::take(&mut self.replies)
    }

    /// Whether an invocation timed out (its process was then killed).
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Invocations answered.
    pub fn served(&self) -> usize {
        self.served
    }

    /// Send an event line on the control socket (no-op without one).
    pub fn event(&mut self, event: Value) {
        if let Some((stream, _)) = &mut self.control {
            let _ = stream.write_all(format!("{event}\n").as_bytes());
        }
    }

    fn reply(&mut self, id: Value, answer: Answer) {
        match &mut self.control {
            Some((stream, _)) => {
                let line = match &answer {
                    Ok(result) => json!({ "id": id, "result": result }),
                    Err(error) => json!({ "id": id, "error": error }),
                };
                // A control peer that is gone shows as end-of-file on the
                // next read, which ends the run.
                let _ = stream.write_all(format!("{line}\n").as_bytes());
            }
            None => self.replies.push((id, answer)),
        }
    }

    /// Read invocations from the control socket; false at end-of-file.
    fn read_control(&mut self) -> bool {
        let Some((stream, framer)) = &mut self.control else {
            return true;
        };
        let mut frames = Vec::new();
        if framer.fill(stream.as_fd(), &mut frames) == Fill::Closed {
            return false;
        }
        let mut bad = Vec::new();
        for frame in frames {
            let Frame::Line(line) = frame else {
                bad.push((Value::Null, "an invocation over the size limit".to_string()));
                continue;
            };
            match serde_json::from_slice::<Value>(&line) {
                Ok(request) if request.get("id").is_some() => {
                    let params = request.get("params").cloned().unwrap_or(json!({}));
                    self.queue.push_back((request["id"].clone(), params));
                }
                Ok(_) => bad.push((Value::Null, "an invocation needs an id".into())),
                Err(e) => bad.push((Value::Null, format!("not JSON: {e}"))),
            }
        }
        for (id, message) in bad {
            self.reply(id, Err(error_object(code::INVALID_REQUEST, message)));
        }
        true
    }

    fn dispatch(&mut self, turn: &mut Turn<'_>) {
        if self.current.is_some() || (self.once && self.served > 0) {
            return;
        }
        let Some((control_id, params)) = self.queue.pop_front() else {
            return;
        };
        // Sent at once, even before the runtime is up: it waits in the
        // channel, and the runtime's start-up is the only wait. The timeout
        // counts from when the runtime is executing.
        let invoke_id = turn.broker.invoke(params);
        self.current = Some(Current {
            control_id,
            invoke_id,
            deadline: self
                .executing
                .then(|| Instant::now().checked_add(self.timeout))
                .flatten(),
        });
    }

    fn fail_all(&mut self, code: i64, message: &str) {
        if let Some(current) = self.current.take() {
            self.reply(current.control_id, Err(error_object(code, message)));
        }
        while let Some((id, _)) = self.queue.pop_front() {
            self.reply(id, Err(error_object(code, message)));
        }
    }
}

impl Driver for Host {
    fn input(&self) -> Option<BorrowedFd<'_>> {
        self.control.as_ref().map(|(stream, _)| stream.as_fd())
    }

    fn deadline(&self) -> Option<Instant> {
        [
            (!self.executing).then_some(self.activation_deadline),
            self.current.as_ref().and_then(|c| c.deadline),
            self.closing_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn turn(&mut self, mut turn: Turn<'_>) -> Steer {
        let now = Instant::now();
        if turn.executing && !self.executing {
            self.executing = true;
            if let Some(current) = &mut self.current {
                // A timeout past the clock's range (a Skill built in code;
                // manifests are bounded) is no deadline, not a panic.
                current.deadline = now.checked_add(self.timeout);
            }
            self.event(json!({ "event": "active" }));
        }
        if turn.input_ready && !self.read_control() {
            // The caller is gone: nobody is left to answer.
            self.queue.clear();
            self.current = None;
            return Steer::Kill;
        }
        for answer in turn.broker.take_answers() {
            let Some(current) = self.current.take_if(|c| c.invoke_id == answer.id) else {
                continue;
            };
            self.served += 1;
            self.reply(current.control_id, answer.outcome);
            if self.once {
                turn.broker.close_when_sent();
                self.closing_deadline = Some(now + EXIT_GRACE);
            }
        }
        if turn.exited {
            let message = format!("skill {} ended before answering", self.name);
            self.fail_all(code::SKILL_EXITED, &message);
            return Steer::Continue;
        }
        if !turn.channel_closed {
            self.dispatch(&mut turn);
        }
        if !self.executing && now >= self.activation_deadline {
            let message = format!(
                "skill {} did not start within {}s",
                self.name,
                ACTIVATION_TIMEOUT.as_secs()
            );
            self.fail_all(code::TIMEOUT, &message);
            self.timed_out = true;
            return Steer::Kill;
        }
        if let Some(current) = self
            .current
            .take_if(|c| c.deadline.is_some_and(|d| now >= d))
        {
            turn.broker.forget(&current.invoke_id);
            let message = format!(
                "skill {} did not answer within {}; its process was killed",
                self.name,
                crate::profile::format_duration(self.timeout)
            );
            self.reply(
                current.control_id,
                Err(error_object(code::TIMEOUT, message)),
            );
            self.timed_out = true;
            let message = format!("skill {} timed out on an earlier invocation", self.name);
            self.fail_all(code::SKILL_EXITED, &message);
            return Steer::Kill;
        }
        if self.closing_deadline.is_some_and(|d| now >= d) {
            return Steer::Kill;
        }
        Steer::Continue
    }
}
