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
//!
//! When `serve` puts questions to its client, the skill's broker asks
//! through [`ControlAsker`]: out `{"event": "ask", "ask": K, "caller",
//! "action", "target", "question", "deadline_ms"}`, in `{"answer": K,
//! "choice": "once" | "run" | "always" | "deny"}`. The broker's loop
//! (and with it this host's) waits meanwhile, so the asker reads the
//! control socket itself, through the same [`Framer`] as the host: a line
//! that is not its answer stays queued for the host, and an answer that
//! arrives after its question ended is dropped by both.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::poll::PollFlags;
use serde_json::{json, Value};

use crate::broker::prompt::{self, Answer as Choice, Asker};
use crate::broker::protocol::code;
use crate::jsonl::{Fill, Frame, Framer};
use crate::poll_set::PollSet;
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

/// The control socket, shared by a host and its [`ControlAsker`] (both
/// run on the supervisor's one thread; the lock only makes the asker
/// `Send`, as the broker requires).
#[derive(Debug)]
struct Control {
    stream: UnixStream,
    framer: Framer,
    /// Frames the asker read while waiting that are not its answer.
    held: VecDeque<Frame>,
    /// Time spent waiting for answers since the host last looked: it does
    /// not count against the invocation's timeout (a person was reading).
    asking: Duration,
}

type SharedControl = Arc<Mutex<Control>>;

fn lock(control: &SharedControl) -> MutexGuard<'_, Control> {
    // A panic while holding it cannot leave a half-written line behind
    // (write_all is one call); the data stays usable.
    control
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Control {
    fn write_line(&mut self, line: &Value) {
        // A control peer that is gone shows as end-of-file on the next
        // read, which ends the run.
        let _ = self.stream.write_all(format!("{line}\n").as_bytes());
    }
}

/// An answer to an ask, as a line of the control socket says it.
fn is_answer(line: &[u8]) -> Option<(Value, Value)> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let ask = value.get("answer")?.clone();
    Some((ask, value.get("choice").cloned().unwrap_or(Value::Null)))
}

/// The [`Driver`] of a skill's run.
pub struct Host {
    name: String,
    timeout: Duration,
    once: bool,
    control: Option<(SharedControl, OwnedFd)>,
    queue: VecDeque<(Value, Value)>,
    current: Option<Current>,
    executing: bool,
    activation_deadline: Instant,
    closing_deadline: Option<Instant>,
    served: usize,
    replies: Vec<(Value, Answer)>,
    timed_out: bool,
    /// Its sandbox was prepared before the call (told in the `active` event).
    prepared: bool,
    /// Answers held back until the run's review layer is captured
    /// ([`Host::defer_answers`]).
    deferred: Option<Vec<(Value, Answer)>>,
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
            prepared: false,
            deferred: None,
        }
    }

    /// Hold every answer back until [`Host::release`]: a review run's
    /// changes are captured only once all of its processes are gone, and
    /// the answer must say what they are. Only for an on-demand skill,
    /// whose process (and so its layer) serves one invocation.
    pub fn defer_answers(&mut self) {
        if self.once {
            self.deferred.get_or_insert_with(Vec::new);
        }
    }

    /// Send the answers held back, each with what the run kept for review
    /// (`review`, beside the skill's result rather than in it: the skill
    /// chooses its result and must not be able to claim a review of its
    /// own). The run is over: nothing else will be answered.
    pub fn release(&mut self, review: Option<&crate::review::Kept>) {
        let Some(held) = self.deferred.take() else {
            return;
        };
        let review = review.map(|kept| serde_json::to_value(kept).unwrap_or(Value::Null));
        for (id, answer) in held {
            let mut line = match &answer {
                Ok(result) => json!({ "id": id, "result": result }),
                Err(error) => json!({ "id": id, "error": error }),
            };
            if let Some(review) = &review {
                line["review"] = review.clone();
            }
            match &self.control {
                Some((control, _)) => lock(control).write_line(&line),
                None => self.replies.push((id, answer)),
            }
        }
    }

    /// The call arrived: the activation timeout counts from now, not from
    /// when the host started waiting with its sandbox prepared (`prepared`:
    /// whether that sandbox is the one used).
    pub fn activation_starts_now(&mut self, prepared: bool) {
        self.activation_deadline = Instant::now() + ACTIVATION_TIMEOUT;
        self.prepared = prepared;
    }

    /// The control socket as the supervisor's loop polls it.
    pub fn input_fd(&self) -> Option<BorrowedFd<'_>> {
        self.control.as_ref().map(|(_, polled)| polled.as_fd())
    }

    /// Take invocations from `control` and send answers and events there.
    pub fn with_control(mut self, control: UnixStream) -> std::io::Result<Host> {
        // Polled by the supervisor's loop while the stream itself sits
        // behind the lock the asker shares.
        let polled = OwnedFd::from(control.try_clone()?);
        let control = Control {
            stream: control,
            framer: Framer::new(CONTROL_LINE_LIMIT),
            held: VecDeque::new(),
            asking: Duration::ZERO,
        };
        self.control = Some((Arc::new(Mutex::new(control)), polled));
        Ok(self)
    }

    /// An asker that puts the broker's questions to the control socket's
    /// peer (None without a control socket).
    pub fn asker(&self, deadline: Duration) -> Option<ControlAsker> {
        let (control, _) = self.control.as_ref()?;
        Some(ControlAsker {
            control: control.clone(),
            deadline,
            not_after: None,
            asked: 0,
        })
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
        if let Some((control, _)) = &self.control {
            lock(control).write_line(&event);
        }
    }

    fn reply(&mut self, id: Value, answer: Answer) {
        if let Some(held) = &mut self.deferred {
            held.push((id, answer));
            return;
        }
        match &self.control {
            Some((control, _)) => {
                let line = match &answer {
                    Ok(result) => json!({ "id": id, "result": result }),
                    Err(error) => json!({ "id": id, "error": error }),
                };
                lock(control).write_line(&line);
            }
            None => self.replies.push((id, answer)),
        }
    }

    /// Read invocations from the control socket (and those the asker held
    /// for this host); false at end-of-file.
    fn read_control(&mut self, readable: bool) -> bool {
        let Some((control, _)) = &self.control else {
            return true;
        };
        let mut frames: Vec<Frame>;
        {
            let mut control = lock(control);
            frames = control.held.drain(..).collect();
            if readable {
                let control = &mut *control;
                if control.framer.fill(control.stream.as_fd(), &mut frames) == Fill::Closed {
                    return false;
                }
            }
        }
        let mut bad = Vec::new();
        for frame in frames {
            let Frame::Line(line) = frame else {
                bad.push((Value::Null, "an invocation over the size limit".to_string()));
                continue;
            };
            // An answer to a question that ended (its deadline passed):
            // nobody waits for it, and it is no invocation.
            if is_answer(&line).is_some() {
                continue;
            }
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
        self.control.as_ref().map(|(_, polled)| polled.as_fd())
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
            let prepared = self.prepared;
            self.event(json!({ "event": "active", "prepared": prepared }));
        }
        let asked_for = self
            .control
            .as_ref()
            .map_or(Duration::ZERO, |(control, _)| {
                std::mem::take(&mut lock(control).asking)
            });
        if let Some(current) = &mut self.current {
            current.deadline = current.deadline.and_then(|d| d.checked_add(asked_for));
        }
        if !self.read_control(turn.input_ready) {
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
            return self.end();
        }
        if self.closing_deadline.is_some_and(|d| now >= d) {
            self.closing_deadline = None;
            return self.end();
        }
        Steer::Continue
    }
}

impl Host {
    /// How a run that has to end now is ended. A review run is asked first
    /// (SIGTERM, then SIGKILL after the grace), as `sandbox run`'s timeout
    /// does: a killed init cannot hand its layer over, and what the skill
    /// wrote would be lost rather than shown.
    fn end(&self) -> Steer {
        if self.deferred.is_some() {
            Steer::Terminate(crate::spawn::parent::TIMEOUT_GRACE)
        } else {
            Steer::Kill
        }
    }
}

/// Puts a skill's broker questions to `serve`, which asks its client (see
/// the module docs for the lines). No answer by the deadline (the
/// default one of the terminal's question, never past the run's end), an
/// answer that is not one of the four choices, or the control socket's
/// end is a deny.
#[derive(Debug)]
pub struct ControlAsker {
    control: SharedControl,
    deadline: Duration,
    not_after: Option<Instant>,
    asked: u64,
}

impl ControlAsker {
    fn wait_for(&mut self, ask: u64, until: Instant) -> Choice {
        loop {
            let mut frames = Vec::new();
            let filled = {
                let mut control = lock(&self.control);
                let control = &mut *control;
                control.framer.fill(control.stream.as_fd(), &mut frames)
            };
            let mut answer = None;
            for frame in frames {
                match &frame {
                    Frame::Line(line) => match is_answer(line) {
                        Some((answered, choice)) if answered == ask && answer.is_none() => {
                            answer = Some(
                                choice
                                    .as_str()
                                    .and_then(Choice::from_word)
                                    .unwrap_or(Choice::Unanswered),
                            );
                        }
                        // An earlier question's late answer.
                        Some(_) => {}
                        None => lock(&self.control).held.push_back(frame),
                    },
                    Frame::TooLarge { .. } => lock(&self.control).held.push_back(frame),
                }
            }
            if let Some(answer) = answer {
                return answer;
            }
            if filled == Fill::Closed {
                return Choice::Unanswered;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Choice::Unanswered;
            }
            let control = lock(&self.control);
            let mut set = PollSet::default();
            set.add(control.stream.as_fd(), PollFlags::POLLIN);
            if set.wait([Some(until)]).is_err() {
                return Choice::Unanswered;
            }
        }
    }
}

impl Asker for ControlAsker {
    fn ask(&mut self, caller: &str, action: &str, target: Option<&str>) -> Choice {
        let started = Instant::now();
        self.asked += 1;
        let ask = self.asked;
        let mut until = started + self.deadline;
        if let Some(end) = self.not_after {
            until = until.min(end);
        }
        let left = until.saturating_duration_since(started);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let event = json!({
            "event": "ask",
            "ask": ask,
            "caller": caller,
            "action": action,
            // From the sandbox: escaped as the terminal's question shows it.
            "target": target.map(prompt::escape),
            "question": prompt::question_without_code(caller, action, target),
            "deadline_ms": u64::try_from(now_ms + left.as_millis()).unwrap_or(u64::MAX),
        });
        lock(&self.control).write_line(&event);
        let answer = self.wait_for(ask, until);
        lock(&self.control).asking += started.elapsed();
        answer
    }

    fn not_after(&mut self, at: Option<Instant>) {
        self.not_after = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    fn host_and_peer() -> (Host, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let host = Host::new("t", DEFAULT_TIMEOUT, false)
            .with_control(ours)
            .unwrap();
        (host, theirs)
    }

    #[test]
    fn only_the_answer_to_this_ask_counts_and_other_lines_stay_the_hosts() {
        let (mut host, mut peer) = host_and_peer();
        let mut asker = host.asker(prompt::DEFAULT_DEADLINE).unwrap();
        // Before the question is even read: an invocation (the host's), a
        // late answer to another question, then this question's answer.
        peer.write_all(
            b"{\"id\":7,\"params\":{}}\n{\"answer\":9,\"choice\":\"once\"}\n{\"answer\":1,\"choice\":\"always\"}\n",
        )
        .unwrap();
        assert_eq!(
            asker.ask("skill:t", "fs.write", Some("/p/a\u{1b}[2J")),
            Choice::Always
        );
        let mut line = String::new();
        let mut from_host = BufReader::new(peer.try_clone().unwrap());
        from_host.read_line(&mut line).unwrap();
        let event: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(event["event"], "ask");
        assert_eq!(event["ask"], 1);
        assert_eq!(event["target"], "/p/a\\u{1b}[2J", "escaped: {event}");
        assert!(event["question"]
            .as_str()
            .unwrap()
            .starts_with("sandbox: skill:t wants fs.write /p/a\\u{1b}[2J\n"));
        assert!(!event["question"].as_str().unwrap().contains("code"));
        assert!(event["deadline_ms"].as_u64().unwrap() > 0);
        // The invocation the asker read is the host's, and nothing else.
        assert!(host.read_control(false));
        let ids: Vec<&Value> = host.queue.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, [&json!(7)]);
        // An answer arriving after its question ended is no invocation.
        peer.write_all(b"{\"answer\":1,\"choice\":\"once\"}\n")
            .unwrap();
        assert!(host.read_control(true));
        assert_eq!(host.queue.len(), 1);
        // Nor is it answered as a malformed one.
        peer.set_nonblocking(true).unwrap();
        let mut more = String::new();
        let read = from_host.read_line(&mut more);
        assert!(
            read.as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "the host wrote {more:?}"
        );
    }

    #[test]
    fn anything_but_one_of_the_choices_is_no_answer() {
        let (host, mut peer) = host_and_peer();
        let mut asker = host.asker(prompt::DEFAULT_DEADLINE).unwrap();
        for (n, choice) in ["\"yes\"", "null", "1", "\"ONCE\""].iter().enumerate() {
            let line = format!("{{\"answer\":{},\"choice\":{choice}}}\n", n + 1);
            peer.write_all(line.as_bytes()).unwrap();
            assert_eq!(
                asker.ask("skill:t", "fs.write", None),
                Choice::Unanswered,
                "{choice}"
            );
        }
        peer.write_all(b"{\"answer\":5,\"choice\":\"run\"}\n")
            .unwrap();
        assert_eq!(asker.ask("skill:t", "fs.write", None), Choice::Run);
    }

    #[test]
    fn no_answer_by_the_deadline_or_a_closed_socket_is_no_answer() {
        let (host, peer) = host_and_peer();
        let mut asker = host.asker(Duration::from_millis(50)).unwrap();
        assert_eq!(asker.ask("skill:t", "fs.write", None), Choice::Unanswered);
        // Never past the run's end, even with a long deadline.
        let mut asker = host.asker(prompt::DEFAULT_DEADLINE).unwrap();
        asker.not_after(Some(Instant::now()));
        assert_eq!(asker.ask("skill:t", "fs.write", None), Choice::Unanswered);
        drop(peer);
        let mut asker = host.asker(prompt::DEFAULT_DEADLINE).unwrap();
        assert_eq!(asker.ask("skill:t", "fs.write", None), Choice::Unanswered);
    }
}
