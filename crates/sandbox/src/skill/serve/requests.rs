//! The client's requests: `skill.list`, `skill.invoke`, `skill.enable`,
//! `skill.reload`, `skill.cancel`, routed and answered; and whether a
//! skill may run under the person's profile at all.

use std::io::Write;

use serde_json::{json, Value};

use super::super::host::error_object;
use super::super::manifest::{self, ExecutionMode, Skill};
use super::hosts::{kill_host, CRASH_LIMIT};
use super::{Call, ServeError, Server, State};
use crate::broker::protocol::{self, code, Id, Message};

/// What a skill's refusal depends on besides its manifest and the person's
/// profile (both fixed for a slot: a changed skill gets a fresh cache): the
/// installed profile file it names, if any, as last seen. Comparing this is
/// one `stat`; deciding again parses and compares two whole policies, which
/// was most of a persistent call's round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ProfileSource {
    /// Its own profile is the person's or a built-in one.
    Fixed,
    /// An installed profile: the file's identity and times, None when absent.
    Installed(crate::skill::files::FileState),
}

impl ProfileSource {
    pub(super) fn of(skill: &Skill) -> ProfileSource {
        let Some(profile) = &skill.profile else {
            return ProfileSource::Fixed;
        };
        if crate::profile::builtin_names().contains(&profile.as_str()) {
            return ProfileSource::Fixed;
        }
        let file = manifest::installed_profiles().map(|dir| dir.join(format!("{profile}.toml")));
        ProfileSource::Installed(file.and_then(|f| crate::skill::files::file_state(&f)))
    }
}

impl Server {
    /// One message (a line without its newline) from the client.
    pub fn on_input_line(&mut self, line: &[u8]) -> Result<(), ServeError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        self.on_request(line)
    }

    /// A message from the client over the size limit (it was dropped).
    pub fn on_input_too_large(&mut self, bytes: usize) -> Result<(), ServeError> {
        let message = format!(
            "message of {bytes} bytes is over the {} byte limit",
            self.limits.max_message
        );
        let line = protocol::error_response(&Id::Null, code::TOO_LARGE, &message, None);
        self.output.write_all(&line).map_err(ServeError::Output)
    }

    pub(super) fn on_request(&mut self, line: &[u8]) -> Result<(), ServeError> {
        let (id, method, params) = match protocol::parse(line, &self.limits) {
            Ok(Message::Request { id, method, params }) => (id, method, params),
            Ok(Message::Response { id, outcome }) => return self.on_client_answer(&id, outcome),
            Ok(Message::Notification { .. }) => return Ok(()),
            Err(err) => {
                let line = protocol::error_response(&err.id, err.code, &err.message, None);
                return self.output.write_all(&line).map_err(ServeError::Output);
            }
        };
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let answer = match (method.as_str(), name) {
            ("skill.list", _) => Ok(self.list()),
            ("skill.reload", _) => Ok(self.reload()?),
            ("skill.cancel", _) => match params.get("id").and_then(protocol::parse_id) {
                Some(call) => Ok(json!({ "cancelled": self.cancel(&call)? })),
                None => Err(error_object(
                    code::INVALID_PARAMS,
                    "skill.cancel needs {\"id\": ID}, the id of an earlier skill.invoke",
                )),
            },
            ("skill.invoke", Some(name)) => {
                let call_params = params.get("params").cloned().unwrap_or(json!({}));
                return self.invoke(id, &name, call_params);
            }
            ("skill.enable", Some(name)) => match self.slots.get_mut(&name) {
                Some(slot) => {
                    slot.crashes.clear();
                    slot.consecutive = 0;
                    slot.not_before = None;
                    let state = if slot.state == State::Disabled || slot.state == State::Failed {
                        State::Inactive
                    } else {
                        slot.state
                    };
                    self.set_state(&name, state, None)?;
                    self.prepare_ahead(&name);
                    Ok(json!({ "name": name, "state": state.name() }))
                }
                None => Err(no_such_skill(&name)),
            },
            ("skill.invoke" | "skill.enable", None) => Err(error_object(
                code::INVALID_PARAMS,
                format!("{method} needs {{\"name\": SKILL}}"),
            )),
            _ => Err(error_object(
                code::METHOD_NOT_FOUND,
                format!(
                    "no method {method:?} (skill.list, skill.invoke, skill.enable, skill.reload, \
                     skill.cancel)"
                ),
            )),
        };
        self.respond(&id, answer)
    }

    pub(super) fn invoke(&mut self, id: Id, name: &str, params: Value) -> Result<(), ServeError> {
        // Checked at every call, not once: the person's profile directory
        // can change between calls, and a refused skill never starts.
        if let Some(refusal) = self.cached_refusal(name) {
            self.respond(
                &id,
                Err(error_object(code::SKILL_UNAVAILABLE, refusal.clone())),
            )?;
            return self.set_state(name, State::Failed, Some(refusal));
        }
        let Some(slot) = self.slots.get_mut(name) else {
            return self.respond(&id, Err(no_such_skill(name)));
        };
        if slot.skill.execution_mode == ExecutionMode::Template {
            let message = format!(
                "skill {name} is a template: it is never run (its instructions are text for a model)"
            );
            return self.respond(&id, Err(error_object(code::SKILL_UNAVAILABLE, message)));
        }
        if slot.state == State::Disabled {
            let message = format!(
                "skill {name} is disabled after {CRASH_LIMIT} crashes within a minute; \
                 skill.enable it or change its files"
            );
            return self.respond(&id, Err(error_object(code::SKILL_DISABLED, message)));
        }
        if !params.is_object() {
            let message = "params must be a JSON object".to_string();
            return self.respond(&id, Err(error_object(code::INVALID_PARAMS, message)));
        }
        if let Err(super::super::SkillError::Params { field, message, .. }) =
            super::super::launch::check_params(&slot.skill, &params)
        {
            let mut error = error_object(
                code::INVALID_PARAMS,
                format!("invalid params at {field}: {message}"),
            );
            error["data"] = json!({ "field": field });
            return self.respond(&id, Err(error));
        }
        slot.queue.push_back(Call { id, params });
        self.pump(name)
    }

    pub(super) fn list(&self) -> Value {
        let skills: Vec<Value> = self
            .slots
            .values()
            .map(|slot| {
                let s = &slot.skill;
                let mut entry = json!({
                    "name": s.name,
                    "description": s.description,
                    "runtime": s.runtime,
                    "executionMode": s.execution_mode,
                    "activation": s.activation,
                    "permissions": s.permissions,
                    "profile": s.profile,
                    "timeoutMs": u64::try_from(super::super::invocation_timeout(s).as_millis()).unwrap_or(u64::MAX),
                    "inputSchema": s.input_schema.clone().unwrap_or_else(|| json!({"type": "object"})),
                    "state": slot.state.name(),
                });
                if let Some(schema) = &s.output_schema {
                    entry["outputSchema"] = schema.clone();
                }
                if let Some(error) = &slot.error {
                    entry["error"] = json!(error);
                }
                match self.decide(s) {
                    Ok(review) => entry["review"] = json!(review),
                    Err(refusal) => {
                        entry["state"] = json!(State::Failed.name());
                        entry["error"] = json!(refusal);
                    }
                }
                entry
            })
            .collect();
        let invalid: Vec<Value> = self
            .invalid
            .iter()
            .map(|e| {
                // A project's directory names and values reach the host too.
                json!({
                    "file": e.file,
                    "line": e.line,
                    "message": crate::broker::prompt::escape(&e.message),
                })
            })
            .collect();
        json!({ "skills": skills, "invalid": invalid, "shadowed": self.shadowed })
    }

    /// Whether `skill` runs in review mode (each invocation's changes kept
    /// for review), or why it may not run under the person's profile.
    pub(super) fn decide(&self, skill: &Skill) -> Result<bool, String> {
        if skill.execution_mode == ExecutionMode::Template {
            return Ok(false);
        }
        super::super::launch::served_policy(skill, &self.options.profile)
            .map(|policy| policy.filesystem.review)
            .map_err(|e| e.to_string())
    }

    /// [`Server::decide`]'s refusal of skill `name`, decided again only when the
    /// installed profile it names changed since the last call.
    pub(super) fn cached_refusal(&mut self, name: &str) -> Option<String> {
        let slot = self.slots.get(name)?;
        let source = ProfileSource::of(&slot.skill);
        if let Some((seen, refusal)) = &slot.refusal {
            if *seen == source {
                return refusal.clone();
            }
        }
        let decided = self.decide(&slot.skill);
        let refusal = decided.as_ref().err().cloned();
        if let Some(slot) = self.slots.get_mut(name) {
            slot.review = decided.unwrap_or(false);
            slot.refusal = Some((source, refusal.clone()));
        }
        refusal
    }

    /// `skill.cancel`: drop the queued call `id`, or kill the host running
    /// it; either way answer it as cancelled. Whether there was one.
    pub(super) fn cancel(&mut self, id: &Id) -> Result<bool, ServeError> {
        let mut cancelled = None;
        for (name, slot) in &mut self.slots {
            if let Some(at) = slot.queue.iter().position(|call| call.id == *id) {
                cancelled = slot.queue.remove(at);
                break;
            }
            if slot.inflight.as_ref().is_some_and(|call| call.id == *id) {
                cancelled = slot.inflight.take();
                if let Some(host) = &mut slot.host {
                    // On purpose: its end is no crash (no back-off), and
                    // the next call starts a fresh host. Its answer, if it
                    // is already on the way, finds no call in flight.
                    host.stopping = true;
                    host.watchdog = None;
                    kill_host(host);
                }
                let name = name.clone();
                self.asks.retain(|_, ask| ask.skill != name);
                break;
            }
        }
        let Some(call) = cancelled else {
            return Ok(false);
        };
        let error = error_object(code::CANCELLED, "cancelled by the client");
        self.respond(&call.id, Err(error))?;
        Ok(true)
    }
}

pub(super) fn no_such_skill(name: &str) -> Value {
    error_object(
        code::NO_SUCH_SKILL,
        format!("no skill named {name:?} (skill.list shows the loaded ones)"),
    )
}

#[cfg(test)]
mod tests {
    use super::super::testing::{request, running, server, write_skill};
    use super::*;
    use std::time::Instant;

    const SCHEMA: &str =
        "input-schema: {type: object, properties: {path: {type: string}}, required: [path]}\n";

    fn answer_to(sent: &[Value], id: u64) -> &Value {
        sent.iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id} in {sent:?}"))
    }

    #[test]
    fn requests_are_routed_by_method_and_bad_ones_answered_without_a_host() {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "s", SCHEMA);
        write_skill(root.path(), "t", "execution-mode: template\n");
        let (mut server, output) = server(root.path(), false);
        output.take();
        let cases = [
            (request(1, "skill.list", json!({})), None),
            (
                request(2, "skill.nothing", json!({})),
                Some(code::METHOD_NOT_FOUND),
            ),
            (
                request(3, "skill.invoke", json!({})),
                Some(code::INVALID_PARAMS),
            ),
            (
                request(4, "skill.enable", json!({})),
                Some(code::INVALID_PARAMS),
            ),
            (
                request(5, "skill.invoke", json!({"name": "x"})),
                Some(code::NO_SUCH_SKILL),
            ),
            (
                request(6, "skill.enable", json!({"name": "x"})),
                Some(code::NO_SUCH_SKILL),
            ),
            (
                request(7, "skill.cancel", json!({})),
                Some(code::INVALID_PARAMS),
            ),
            (request(8, "skill.cancel", json!({"id": 99})), None),
            (
                request(9, "skill.invoke", json!({"name": "s", "params": [1]})),
                Some(code::INVALID_PARAMS),
            ),
            (
                request(
                    10,
                    "skill.invoke",
                    json!({"name": "s", "params": {"path": 1}}),
                ),
                Some(code::INVALID_PARAMS),
            ),
            (
                request(11, "skill.invoke", json!({"name": "t"})),
                Some(code::SKILL_UNAVAILABLE),
            ),
        ];
        for (line, _) in &cases {
            server.on_input_line(line).unwrap();
        }
        server.on_input_line(b"  \t ").unwrap();
        let sent = output.take();
        assert_eq!(sent.len(), cases.len(), "one answer a request: {sent:?}");
        for (n, (_, error)) in cases.iter().enumerate() {
            let answer = answer_to(&sent, n as u64 + 1);
            assert_eq!(answer["error"]["code"].as_i64(), *error, "{answer}");
        }
        let names: Vec<&str> = answer_to(&sent, 1)["result"]["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["s", "t"]);
        assert_eq!(answer_to(&sent, 8)["result"], json!({"cancelled": false}));
        assert_eq!(answer_to(&sent, 10)["error"]["data"]["field"], "/path");
        let template = answer_to(&sent, 11)["error"]["message"].as_str().unwrap();
        assert!(template.contains("is a template"), "{template}");
        for slot in server.slots.values() {
            assert!(slot.host.is_none() && slot.queue.is_empty());
        }
    }

    #[test]
    fn malformed_and_oversized_messages_are_answered_with_null_ids() {
        let root = tempfile::tempdir().unwrap();
        let (mut server, output) = server(root.path(), false);
        server.on_input_line(b"{not json").unwrap();
        server.on_input_too_large(1 << 30).unwrap();
        let sent = output.take();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0]["error"]["code"], code::PARSE_ERROR);
        assert_eq!(sent[1]["error"]["code"], code::TOO_LARGE);
        assert!(sent.iter().all(|m| m["id"].is_null()));
    }

    #[test]
    fn a_disabled_skill_is_refused_until_enabled_which_forgets_its_crashes() {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "s", SCHEMA);
        let (mut server, output) = server(root.path(), false);
        let slot = server.slots.get_mut("s").unwrap();
        slot.state = State::Disabled;
        slot.crashes.push_back(Instant::now());
        slot.consecutive = 5;
        slot.not_before = Some(Instant::now());
        output.take();
        let invoke = request(
            1,
            "skill.invoke",
            json!({"name": "s", "params": {"path": "a"}}),
        );
        server.on_input_line(&invoke).unwrap();
        let sent = output.take();
        assert_eq!(answer_to(&sent, 1)["error"]["code"], code::SKILL_DISABLED);
        assert!(server.slots["s"].queue.is_empty(), "never queued");

        server
            .on_input_line(&request(2, "skill.enable", json!({"name": "s"})))
            .unwrap();
        let sent = output.take();
        assert_eq!(
            answer_to(&sent, 2)["result"],
            json!({"name": "s", "state": "inactive"})
        );
        assert!(sent
            .iter()
            .any(|m| m["method"] == "skill.stateChanged" && m["params"]["state"] == "inactive"));
        let slot = &server.slots["s"];
        assert_eq!(slot.state, State::Inactive);
        assert!(slot.crashes.is_empty());
        assert_eq!(slot.consecutive, 0);
        assert_eq!(slot.not_before, None);
    }

    #[test]
    fn cancel_drops_a_queued_call_or_stops_the_host_running_it() {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "s", "");
        let (mut server, output) = server(root.path(), false);
        let _peer = running(&mut server, "s", 20);
        server.slots.get_mut("s").unwrap().queue.push_back(Call {
            id: Id::Number(21.into()),
            params: json!({}),
        });
        output.take();
        assert!(server.cancel(&Id::Number(21.into())).unwrap());
        assert!(server.slots["s"].queue.is_empty());
        assert!(!server.slots["s"].host.as_ref().unwrap().stopping);
        assert!(server.cancel(&Id::Number(20.into())).unwrap());
        let slot = &server.slots["s"];
        assert!(slot.inflight.is_none());
        let host = slot.host.as_ref().unwrap();
        assert!(host.stopping, "its end is no crash");
        assert_eq!(host.watchdog, None);
        assert!(
            !server.cancel(&Id::Number(20.into())).unwrap(),
            "answered once"
        );
        let sent = output.take();
        assert_eq!(sent.len(), 2);
        for (message, id) in sent.iter().zip([21, 20]) {
            assert_eq!(message["id"], id);
            assert_eq!(message["error"]["code"], code::CANCELLED);
        }
    }
}
