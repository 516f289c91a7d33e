//! Asks: a host's question put to the client as a `skill.ask` request,
//! and the client's answer taken back to the host that asked, only while
//! it still runs the call that asked and only before the deadline.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::hosts::{HostProc, WATCHDOG_SLACK};
use super::ServeError;
use super::Server;
use crate::broker::protocol::Id;

/// A question of a host, put to the client as `skill.ask`.
#[derive(Debug)]
pub(super) struct PendingAsk {
    pub(super) skill: String,
    /// [`HostProc::serial`] of the host that asked.
    pub(super) host: u64,
    /// The host's number for it.
    pub(super) ask: u64,
    /// The invocation running when it asked.
    pub(super) call: Id,
    /// After this, the host has denied by itself.
    pub(super) deadline: Instant,
}

impl Server {
    /// A host asks: put the question to the client, or deny it at once
    /// when nobody is to be asked.
    pub(super) fn on_ask(&mut self, name: &str, event: &Value) -> Result<(), ServeError> {
        let Some(ask) = event["ask"].as_u64() else {
            return Ok(());
        };
        let now = Instant::now();
        let ask_client = self.options.ask_client;
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        let Some(host) = &mut slot.host else {
            return Ok(());
        };
        // A host only asks when told to; and a persistent skill's work
        // between calls has no call to show the question with. Denied at
        // once rather than left waiting (its broker, and so its next
        // call, waits with it).
        let Some(call) = slot.inflight.as_ref().filter(|_| ask_client) else {
            write_answer(host, ask, "unanswered");
            return Ok(());
        };
        // The host's own deadline, never more than the terminal's.
        let until_ms = event["deadline_ms"].as_u64().unwrap_or(0);
        let left = Duration::from_millis(until_ms.saturating_sub(crate::clock::unix_ms()))
            .min(self.options.question_timeout);
        let deadline = now + left;
        // Waiting for a person is no hang: the host gets its invocation's
        // time again after the answer.
        let watchdog = super::super::invocation_timeout(&slot.skill)
            .checked_add(left + WATCHDOG_SLACK)
            .and_then(|wait| now.checked_add(wait));
        host.watchdog = host.watchdog.max(watchdog);
        self.next_ask += 1;
        let request = format!("ask-{}", self.next_ask);
        let params = json!({
            "skill": name,
            "call": call.id.to_value(),
            "caller": event["caller"],
            "action": event["action"],
            "target": event["target"],
            "question": event["question"],
            "deadline_ms": until_ms,
        });
        self.asks.insert(
            request.clone(),
            PendingAsk {
                skill: name.to_string(),
                host: host.serial,
                ask,
                call: call.id.clone(),
                deadline,
            },
        );
        self.send(&json!({
            "jsonrpc": "2.0",
            "id": request,
            "method": "skill.ask",
            "params": params,
        }))
    }

    /// The client's response to a request of ours: a `skill.ask`'s answer
    /// goes to the host that asked, if it still runs the call that asked.
    pub(super) fn on_client_answer(
        &mut self,
        id: &Id,
        outcome: Result<Value, Value>,
    ) -> Result<(), ServeError> {
        let Id::String(request) = id else {
            return Ok(());
        };
        let Some(pending) = self.asks.remove(request) else {
            return Ok(());
        };
        if Instant::now() >= pending.deadline {
            return Ok(());
        }
        // An error, a malformed or unknown answer: nobody said no.
        let choice = outcome
            .as_ref()
            .ok()
            .and_then(|result| result.get("answer"))
            .and_then(Value::as_str)
            .and_then(crate::broker::prompt::Answer::from_word)
            .unwrap_or(crate::broker::prompt::Answer::Unanswered)
            .word();
        let Some(slot) = self.slots.get_mut(&pending.skill) else {
            return Ok(());
        };
        let running = slot.inflight.as_ref().is_some_and(|c| c.id == pending.call);
        if let Some(host) = slot.host.as_mut().filter(|h| h.serial == pending.host) {
            if running && !host.stopping {
                write_answer(host, pending.ask, choice);
            }
        }
        Ok(())
    }
}

/// Answer a host's question `ask`.
pub(super) fn write_answer(host: &mut HostProc, ask: u64, choice: &str) {
    let line = json!({ "answer": ask, "choice": choice });
    // A host that is gone shows as its end-of-file.
    let _ = host.control.write_all(format!("{line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::super::testing::{fake_host, host_got, running, server, write_skill};
    use super::super::Call;
    use super::*;

    /// A server whose skill `s` runs call 5 on a host of serial 1.
    fn asking(
        ask_client: bool,
    ) -> (
        tempfile::TempDir,
        Server,
        super::super::testing::Output,
        std::os::unix::net::UnixStream,
    ) {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "s", "");
        let (mut server, output) = server(root.path(), ask_client);
        let peer = running(&mut server, "s", 5);
        output.take();
        (root, server, output, peer)
    }

    fn event(ask: u64) -> Value {
        json!({
            "event": "ask", "ask": ask, "caller": "skill s", "action": "fs.read",
            "target": "/etc/hosts", "question": "Read /etc/hosts?",
            "deadline_ms": crate::clock::unix_ms() + 30_000,
        })
    }

    #[test]
    fn a_question_goes_to_the_client_and_its_answer_to_the_host_that_asked() {
        let (_root, mut server, output, mut peer) = asking(true);
        server.on_ask("s", &event(3)).unwrap();
        let sent = output.take();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0]["method"], "skill.ask");
        assert_eq!(sent[0]["id"], "ask-1");
        assert_eq!(sent[0]["params"]["call"], 5);
        assert_eq!(sent[0]["params"]["skill"], "s");
        assert_eq!(sent[0]["params"]["action"], "fs.read");
        assert!(host_got(&mut peer).is_empty(), "nothing answered yet");
        assert!(server.next_wakeup().is_some(), "the deadline is a wakeup");

        let id = Id::String("ask-1".into());
        server
            .on_client_answer(&id, Ok(json!({"answer": "once"})))
            .unwrap();
        assert_eq!(
            host_got(&mut peer),
            vec![json!({"answer": 3, "choice": "once"})]
        );
        assert!(server.asks.is_empty());
        // A second answer to the same question reaches nobody.
        server
            .on_client_answer(&id, Ok(json!({"answer": "always"})))
            .unwrap();
        assert!(host_got(&mut peer).is_empty());
    }

    #[test]
    fn an_error_or_an_unknown_word_is_no_answer() {
        let (_root, mut server, _output, mut peer) = asking(true);
        server.on_ask("s", &event(1)).unwrap();
        server.on_ask("s", &event(2)).unwrap();
        server
            .on_client_answer(&Id::String("ask-1".into()), Ok(json!({"answer": "maybe"})))
            .unwrap();
        server
            .on_client_answer(
                &Id::String("ask-2".into()),
                Err(json!({"code": -1, "message": "no"})),
            )
            .unwrap();
        assert_eq!(
            host_got(&mut peer),
            vec![
                json!({"answer": 1, "choice": "unanswered"}),
                json!({"answer": 2, "choice": "unanswered"}),
            ]
        );
    }

    #[test]
    fn an_answer_for_a_call_or_host_that_is_gone_reaches_nobody() {
        let (_root, mut server, _output, mut peer) = asking(true);
        server.on_ask("s", &event(1)).unwrap();
        server.on_ask("s", &event(2)).unwrap();
        server.on_ask("s", &event(3)).unwrap();
        // Call 5 ended and call 6 runs on the same host.
        server.slots.get_mut("s").unwrap().inflight = Some(Call {
            id: Id::Number(6.into()),
            params: json!({}),
        });
        server
            .on_client_answer(&Id::String("ask-1".into()), Ok(json!({"answer": "deny"})))
            .unwrap();
        // Another host (a restart) for the skill.
        let (other, mut other_peer) = fake_host(2);
        let slot = server.slots.get_mut("s").unwrap();
        slot.inflight = Some(Call {
            id: Id::Number(5.into()),
            params: json!({}),
        });
        slot.host = Some(other);
        server
            .on_client_answer(&Id::String("ask-2".into()), Ok(json!({"answer": "once"})))
            .unwrap();
        assert!(host_got(&mut peer).is_empty());
        assert!(host_got(&mut other_peer).is_empty());
        // Past its deadline the host has denied by itself.
        server.asks.get_mut("ask-3").unwrap().deadline = Instant::now() - Duration::from_millis(1);
        server.asks.get_mut("ask-3").unwrap().host = 2;
        server
            .on_client_answer(&Id::String("ask-3".into()), Ok(json!({"answer": "once"})))
            .unwrap();
        assert!(host_got(&mut other_peer).is_empty());
        assert!(server.asks.is_empty());
    }

    #[test]
    fn without_ask_client_or_a_call_the_host_is_told_unanswered_at_once() {
        let (_root, mut server, output, mut peer) = asking(false);
        server.on_ask("s", &event(4)).unwrap();
        assert!(output.take().is_empty(), "the client is asked nothing");
        assert_eq!(
            host_got(&mut peer),
            vec![json!({"answer": 4, "choice": "unanswered"})]
        );
        let (_root, mut server, output, mut peer) = asking(true);
        server.slots.get_mut("s").unwrap().inflight = None;
        server.on_ask("s", &event(5)).unwrap();
        assert!(output.take().is_empty(), "no call to show it with");
        assert_eq!(
            host_got(&mut peer),
            vec![json!({"answer": 5, "choice": "unanswered"})]
        );
        assert!(server.asks.is_empty());
    }
}
