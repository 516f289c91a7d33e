//! Skill invocation: requests this side sends (`skill.invoke`) and the
//! answers that come back, as JSON-RPC responses or, from a plain Node
//! skill, as a bare `process.send(value)` message.

use std::collections::VecDeque;

use serde_json::{json, Value};

/// The answer to a request this side sent.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationAnswer {
    /// The id the request was sent with.
    pub id: String,
    /// Its result, or the error object the peer sent.
    pub outcome: Result<Value, Value>,
}

/// Invocations in flight.
#[derive(Debug, Default)]
pub struct Invocations {
    /// Ids sent and not yet answered, oldest first.
    pending: VecDeque<String>,
    sent: u64,
    answers: Vec<InvocationAnswer>,
}

/// What a plain (non-JSON-RPC) line was.
#[derive(Debug, PartialEq, Eq)]
pub enum Plain {
    /// Not JSON, or a JSON-RPC message: handle it as such.
    NotPlain,
    /// Taken (an answer, or Node's own message).
    Taken,
    /// JSON that answers nothing pending.
    Unexpected,
}

impl Invocations {
    /// A `skill.invoke` request line (newline included) and its id.
    pub fn request(&mut self, params: Value) -> (Vec<u8>, String) {
        self.sent += 1;
        let id = format!("invoke-{}", self.sent);
        let request =
            json!({"jsonrpc": "2.0", "id": id, "method": "skill.invoke", "params": params});
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        self.pending.push_back(id.clone());
        (line, id)
    }

    /// Whether anything was ever sent (only then can plain lines be answers).
    pub fn any_sent(&self) -> bool {
        self.sent > 0
    }

    /// Stop waiting for `id`.
    pub fn forget(&mut self, id: &str) {
        self.pending.retain(|pending| pending != id);
    }

    /// A JSON-RPC response: the answer to `id` if it is pending.
    pub fn response(&mut self, id: String, outcome: Result<Value, Value>) {
        if let Some(at) = self.pending.iter().position(|p| *p == id) {
            self.pending.remove(at);
            self.answers.push(InvocationAnswer { id, outcome });
        }
    }

    /// A line that is JSON but no JSON-RPC message: the result of the
    /// oldest pending invocation. Node's internal messages are skipped.
    pub fn plain(&mut self, line: &[u8]) -> Plain {
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return Plain::NotPlain;
        };
        if value.get("jsonrpc").is_some() {
            return Plain::NotPlain;
        }
        if value
            .get("cmd")
            .and_then(Value::as_str)
            .is_some_and(|cmd| cmd.starts_with("NODE_"))
        {
            return Plain::Taken;
        }
        match self.pending.pop_front() {
            Some(id) => {
                self.answers.push(InvocationAnswer {
                    id,
                    outcome: Ok(value),
                });
                Plain::Taken
            }
            None => Plain::Unexpected,
        }
    }

    /// Answers that arrived since the last call.
    pub fn take(&mut self) -> Vec<InvocationAnswer> {
        std::mem::take(&mut self.answers)
    }
}
