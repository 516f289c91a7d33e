//! One request: parse it, decode its parameters, decide on the object it
//! actually resolved to, serve it, then count, audit and answer it.

use std::path::{Component, Path};
use std::time::Instant;

use nix::fcntl::OFlag;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::jobs::{Waiting, Work};
use super::{Broker, Record};
use crate::action::Action;
use crate::broker::fs::{self as fs_actions};
use crate::broker::permission::{self, Verdict};
use crate::broker::protocol::{self, code, Id, Message};
use crate::broker::protocol::{fail, Failure};
use crate::broker::secrets::{SecretParams, SecretSpec, Secrets};
use crate::broker::terminal::{Job, RunParams};
use crate::profile::policy::Decision;

enum Served {
    Done(Value),
    Started(Work),
}

/// `permission.query` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryParams {
    action: Action,
    target: Option<String>,
}

/// `log` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogParams {
    #[serde(default)]
    message: String,
    #[allow(dead_code)]
    level: Option<String>,
}

/// Parameters as the typed struct of their method; absent ones are `{}`.
/// An unknown or mistyped field is -32602 naming it.
fn typed<T: DeserializeOwned>(action: Action, params: Value) -> Result<T, Failure> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params)
        .map_err(|e| fail(code::INVALID_PARAMS, format!("{action} params: {e}")))
}

/// The parameters of an fs action: the whole `P` for `full` (fs.read,
/// fs.write), only a path for the others of its family.
fn path_params<P: DeserializeOwned>(
    action: Action,
    full: Action,
    params: Value,
    path_of: fn(&P) -> &String,
) -> Result<(String, Option<P>), Failure> {
    if action == full {
        let whole: P = typed(action, params)?;
        Ok((path_of(&whole).clone(), Some(whole)))
    } else {
        let only: fs_actions::PathParams = typed(action, params)?;
        Ok((only.path, None))
    }
}

/// `path` without `.` and with `..` folded lexically: only to refuse early
/// what a deny rule names, before anything is opened.
fn lexical(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(name) => parts.push(name.to_str().unwrap_or("")),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

fn decision_name(decision: Decision) -> &'static str {
    match decision {
        Decision::Allow => "allow",
        Decision::Ask => "ask",
        Decision::Deny => "deny",
    }
}

impl Broker {
    pub(super) fn handle(&mut self, line: &[u8]) {
        let started = Instant::now();
        if let Some(rate) = &mut self.rate {
            if !rate.take() {
                self.counts.errors += 1;
                self.counts.rate_limited += 1;
                self.rate_refused += 1;
                let id = protocol::parse(line, &self.transport.limits)
                    .ok()
                    .and_then(|m| match m {
                        Message::Request { id, .. } => Some(id),
                        _ => None,
                    });
                if let Some(id) = id {
                    let message =
                        format!("more than {} requests a second; slow down", rate.per_second);
                    self.transport.push(&protocol::error_response(
                        &id,
                        code::RATE_LIMITED,
                        &message,
                        None,
                    ));
                }
                return;
            }
        }
        let message = match protocol::parse(line, &self.transport.limits) {
            Ok(message) => message,
            Err(_) if self.invocations.any_sent() && self.take_plain(line) => return,
            Err(err) => {
                self.counts.errors += 1;
                self.transport.push(&protocol::error_response(
                    &err.id,
                    err.code,
                    &err.message,
                    None,
                ));
                return;
            }
        };
        let (id, method, params) = match message {
            Message::Request { id, method, params } => (Some(id), method, params),
            Message::Notification { method, params } => (None, method, params),
            Message::Response { id, outcome } => {
                if let Id::String(id) = id {
                    self.invocations.response(id, outcome);
                }
                return;
            }
        };
        match self.by_action.get_mut(&method) {
            Some(count) => *count += 1,
            None => {
                self.by_action.insert(method.clone(), 1);
            }
        }
        let mut record = Record::default();
        let Ok(action) = method.parse::<Action>() else {
            record.rule = "broker.default".into();
            let failure = fail(code::METHOD_NOT_FOUND, format!("no method {method:?}"));
            self.finish(id, &method, record, Err(failure), started);
            return;
        };
        match self.serve(action, params, &mut record) {
            Ok(Served::Done(value)) => self.finish(id, &method, record, Ok(value), started),
            Ok(Served::Started(job)) => {
                self.waiting = Some(Waiting {
                    job,
                    id,
                    method: action,
                    record,
                    started,
                })
            }
            Err(failure) => self.finish(id, &method, record, Err(failure), started),
        }
    }

    /// Count, audit and answer one request.
    pub(super) fn finish(
        &mut self,
        id: Option<Id>,
        method: &str,
        record: Record,
        result: Result<Value, Failure>,
        started: Instant,
    ) {
        self.counts.requests += 1;
        let decision = match &result {
            Err(f) if f.code == code::PERMISSION_DENIED || f.code == code::NEEDS_APPROVAL => {
                self.counts.denied += 1;
                "deny"
            }
            Err(f) if f.code == code::METHOD_NOT_FOUND || f.code == code::INVALID_PARAMS => {
                self.counts.errors += 1;
                "error"
            }
            _ => {
                self.counts.allowed += 1;
                "allow"
            }
        };
        let rule = match &result {
            Err(Failure {
                rule: Some(rule), ..
            }) => rule.clone(),
            _ => record.rule.clone(),
        };
        let rule = rule.as_str();
        self.audit_line(
            method,
            record.target.as_deref(),
            record.requested.as_deref(),
            decision,
            rule,
            started.elapsed().as_micros() as u64,
        );
        let Some(id) = id else { return };
        match result {
            Ok(value) => self.transport.answer(&id, &value),
            Err(f) => self.transport.push(&protocol::error_response(
                &id,
                f.code,
                &f.message,
                Some(&json!({ "rule": rule })),
            )),
        }
    }

    /// Decide `action` on `target` (what the request resolved to) and
    /// refuse unless allowed.
    fn gate(
        &mut self,
        action: Action,
        target: Option<&str>,
        record: &mut Record,
    ) -> Result<(), Failure> {
        let verdict = self.decider.decide(action, target);
        record.rule = verdict.rule.clone();
        self.refusal(action, &verdict, record)
    }

    fn refusal(&self, action: Action, verdict: &Verdict, record: &Record) -> Result<(), Failure> {
        match verdict.decision {
            Decision::Allow => Ok(()),
            Decision::Deny => Err(Failure {
                code: code::PERMISSION_DENIED,
                message: match (&record.requested, &record.target) {
                    (Some(requested), Some(target)) => format!(
                        "{requested} resolves to {target}, where {action} is denied by {}",
                        verdict.rule
                    ),
                    _ => format!("{action} is denied by {}", verdict.rule),
                },
                rule: Some(verdict.rule.clone()),
            }),
            Decision::Ask if action == Action::NetHttp && record.target.is_some() => Err(Failure {
                code: code::NEEDS_APPROVAL,
                message: crate::broker::network::needs_approval(
                    record.target.as_deref().unwrap_or_default(),
                    &verdict.rule,
                    self.decider.grant_command(),
                ),
                rule: Some(verdict.rule.clone()),
            }),
            Decision::Ask => Err(Failure {
                code: code::NEEDS_APPROVAL,
                message: format!(
                    "{action} needs approval ({}) and nobody can be asked in this run; \
                     pre-approve it with `{} --grant {action}`, or allow it in the profile: \
                     [broker] rules = {{ \"{action}\" = \"allow\" }}",
                    verdict.rule,
                    self.decider.grant_command()
                ),
                rule: Some(verdict.rule.clone()),
            }),
        }
    }

    /// Before anything is opened: refuse what a deny rule or the declared
    /// permissions name, so that a refused request learns nothing (not even
    /// whether the path exists).
    fn refuse_early(&self, action: Action, path: &str, record: &Record) -> Result<(), Failure> {
        let literal = lexical(&self.resolver.literal(path));
        let verdict = self.decider.settled(action, Some(&literal));
        if verdict.decision == Decision::Deny {
            return self.refusal(action, &verdict, record);
        }
        Ok(())
    }

    /// Note where `path` resolved to.
    fn resolved(record: &mut Record, path: &str, relative: &str) {
        record.target = Some(relative.to_string());
        if lexical(path) != relative {
            record.requested = Some(path.to_string());
        }
    }

    fn serve(
        &mut self,
        action: Action,
        params: Value,
        record: &mut Record,
    ) -> Result<Served, Failure> {
        match action {
            Action::PermissionQuery => {
                record.rule = "risk default (low)".into();
                let query: QueryParams = typed(action, params)?;
                let target = query.target.as_deref();
                let v = self
                    .decider
                    .undeclared(query.action, target)
                    .unwrap_or_else(|| {
                        permission::decide_for(&self.decider.policy, query.action.as_str(), target)
                    });
                let effective = if v.decision == Decision::Ask {
                    "deny"
                } else {
                    decision_name(v.decision)
                };
                Ok(Served::Done(json!({
                    "action": query.action,
                    "decision": decision_name(v.decision),
                    "effective": effective,
                    "rule": v.rule,
                })))
            }
            Action::Log => {
                let log: LogParams = typed(action, params)?;
                self.gate(action, None, record)?;
                if let Some(label) = &self.log_label {
                    // Escaped: a skill's log must not drive the terminal.
                    eprintln!("{label}: {}", log.message.escape_debug());
                }
                Ok(Served::Done(Value::Null))
            }
            Action::FsRead | Action::FsStat | Action::FsList => {
                let (path, read) = path_params(
                    action,
                    Action::FsRead,
                    params,
                    |r: &fs_actions::ReadParams| &r.path,
                )?;
                record.target = Some(self.resolver.literal(&path));
                self.refuse_early(action, &path, record)?;
                let flags = match action {
                    Action::FsRead => fs_actions::READ_FLAGS,
                    Action::FsList => fs_actions::LIST_FLAGS,
                    _ => OFlag::O_PATH,
                };
                // Opened as the owner: the open is the read's permission check.
                let object = {
                    let _acting = self.resolver.acting_as_owner()?;
                    self.resolver.object(&path, flags)?
                };
                Self::resolved(record, &path, &object.relative);
                self.gate(action, Some(&object.relative), record)?;
                let value = match (action, &read) {
                    (Action::FsRead, Some(read)) => fs_actions::read(&object, read)?,
                    (Action::FsList, _) => fs_actions::list(&self.resolver, object)?,
                    _ => fs_actions::stat(&object)?,
                };
                Ok(Served::Done(value))
            }
            Action::FsWrite | Action::FsMkdir | Action::FsDelete => {
                let (path, write) = path_params(
                    action,
                    Action::FsWrite,
                    params,
                    |w: &fs_actions::WriteParams| &w.path,
                )?;
                record.target = Some(self.resolver.literal(&path));
                if self.review {
                    record.rule = "review mode".into();
                    return Err(Failure {
                        code: code::PERMISSION_DENIED,
                        message: format!(
                            "{action} is refused in review mode: the broker would change the project itself, outside the layer that keeps this run's changes for review; write the file from inside the run instead (the project is writable there, and the change is kept in the layer)"
                        ),
                        rule: Some("review mode".into()),
                    });
                }
                self.refuse_early(action, &path, record)?;
                let target = {
                    let _acting = self.resolver.acting_as_owner()?;
                    self.resolver.name(&path)?
                };
                Self::resolved(record, &path, &target.relative);
                self.resolver.refuse_protected(&target, &path)?;
                self.gate(action, Some(&target.relative), record)?;
                let acting = self.resolver.acting_as_owner()?;
                let value = match (action, &write) {
                    (Action::FsWrite, Some(write)) => fs_actions::write(&target, write)?,
                    (Action::FsMkdir, _) => fs_actions::mkdir(&target)?,
                    _ => fs_actions::delete(&target)?,
                };
                drop(acting);
                Ok(Served::Done(value))
            }
            Action::SecretsGet => {
                let secret: SecretParams = typed(action, params)?;
                record.target = Some(secret.name.clone());
                self.gate(action, Some(&secret.name), record)?;
                // The plaintext only where the profile allows reading secrets
                // outright; otherwise the handle is all the sandbox gets.
                let reveal = permission::decide(&self.decider.policy, "secrets.read").decision
                    == Decision::Allow;
                Ok(Served::Done(self.secrets.get(&secret, reveal)?))
            }
            Action::TerminalRun => {
                let run: RunParams = typed(action, params)?;
                record.target = run.argv.first().cloned();
                self.gate(action, record.target.clone().as_deref(), record)?;
                let runner = self
                    .nested
                    .clone()
                    .ok_or_else(|| fail(code::INTERNAL_ERROR, "terminal.run is not set up"))?;
                let cwd = match &run.cwd {
                    Some(cwd) => {
                        let dir = {
                            let _acting = self.resolver.acting_as_owner()?;
                            self.resolver
                                .object(cwd, OFlag::O_PATH | OFlag::O_DIRECTORY)?
                        };
                        Some(self.resolver.project_path().join(&dir.relative))
                    }
                    None => None,
                };
                let job = Job::start(
                    runner,
                    self.resolver.project_path(),
                    cwd,
                    run,
                    self.run_deadline,
                )?;
                Ok(Served::Started(Work::Terminal(Box::new(job))))
            }
            Action::NetHttp => {
                // Refused before any decision: the request itself is bad,
                // or names a secret where its bindings do not let it go.
                record.rule = "net.http request checks and secret bindings".into();
                let prepared = crate::broker::http::prepare(params, &self.secrets)?;
                record.target = Some(prepared.target.clone());
                let Some(network) = &mut self.network else {
                    return Err(fail(
                        code::INTERNAL_ERROR,
                        "net.http is not set up in this broker",
                    ));
                };
                let verdict = match crate::net::allow::split_target(&prepared.target) {
                    Some((host, port)) => network.decide(&mut self.decider, &host, port),
                    None => {
                        return Err(fail(
                            code::INVALID_PARAMS,
                            format!("net.http: {:?} is not a host and port", prepared.target),
                        ))
                    }
                };
                record.rule = verdict.rule.clone();
                self.refusal(action, &verdict, record)?;
                let timeout = prepared.request.timeout;
                let bound_host = prepared.bound_host;
                let network = self
                    .network
                    .as_mut()
                    .ok_or_else(|| fail(code::INTERNAL_ERROR, "net.http is not set up"))?;
                let fetch = network
                    .fetch(prepared.request)
                    .map_err(|reason| fail(code::INTERNAL_ERROR, format!("net.http: {reason}")))?;
                // The net process ends the exchange at its timeout; this
                // bound only keeps a lost answer from holding the channel.
                let deadline = Instant::now() + timeout + std::time::Duration::from_secs(5);
                Ok(Served::Started(Work::Http {
                    fetch,
                    bound_host,
                    deadline,
                }))
            }
            Action::SecretsRead => {
                self.gate(action, None, record)?;
                Err(fail(
                    code::METHOD_NOT_FOUND,
                    format!("{action} is not provided by this version of the broker"),
                ))
            }
        }
    }

    /// Handle one line as if read from the channel (tests).
    #[cfg(test)]
    pub(super) fn feed(&mut self, line: &[u8]) {
        self.handle(line);
    }
}

/// The broker's reading of one message, for the fuzz targets
/// (`crate::fuzzing`): parse, method, then the parameters as `serve`
/// decodes them before it decides or touches anything.
pub(crate) mod fuzzing {
    use super::*;

    /// One line as the channel delivers it.
    pub fn message(line: &[u8]) {
        let (id, method, params) = match protocol::parse(line, &protocol::Limits::default()) {
            Ok(Message::Request { id, method, params }) => (Some(id), method, params),
            Ok(Message::Notification { method, params }) => (None, method, params),
            Ok(Message::Response { .. }) => return,
            Err(error) => {
                let _ = protocol::error_response(&error.id, error.code, &error.message, None);
                return;
            }
        };
        if let Some(id) = &id {
            let _ = protocol::response(id, &params);
        }
        let Ok(action) = method.parse::<Action>() else {
            return;
        };
        let decoded: Result<(), Failure> = match action {
            Action::PermissionQuery => typed::<QueryParams>(action, params).map(drop),
            Action::Log => typed::<LogParams>(action, params).map(drop),
            Action::FsRead | Action::FsStat | Action::FsList => path_params(
                action,
                Action::FsRead,
                params,
                |r: &fs_actions::ReadParams| &r.path,
            )
            .map(|(path, _)| drop(lexical(&path))),
            Action::FsWrite | Action::FsMkdir | Action::FsDelete => path_params(
                action,
                Action::FsWrite,
                params,
                |w: &fs_actions::WriteParams| &w.path,
            )
            .map(|(path, _)| drop(lexical(&path))),
            Action::SecretsGet => typed::<SecretParams>(action, params).map(drop),
            Action::TerminalRun => typed::<RunParams>(action, params).map(drop),
            Action::NetHttp => {
                let mut secrets = Secrets::default();
                secrets.add(vec![SecretSpec::unbound("TOKEN", "fuzz-secret-value")]);
                crate::broker::http::prepare(params, &secrets).map(drop)
            }
            Action::SecretsRead => Ok(()),
        };
        if let Err(failure) = decoded {
            let id = id.unwrap_or(Id::Null);
            let _ = protocol::error_response(&id, failure.code, &failure.message, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::*;

    #[test]
    fn unknown_parameters_are_refused_by_name() {
        let project = tempfile::tempdir().unwrap();
        let mut broker = strict_broker(project.path(), None);
        broker.feed(br#"{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"x","recursive":true}}"#);
        broker.feed(br#"{"jsonrpc":"2.0","id":2,"method":"fs.write","params":{"path":"x","content":"y","mode":2559}}"#);
        let answers = answers(&broker);
        for answer in &answers {
            assert_eq!(answer["error"]["code"], code::INVALID_PARAMS, "{answer}");
        }
        assert!(answers[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `recursive`"));
        assert!(answers[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `mode`"));
    }
}
