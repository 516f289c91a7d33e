//! The MCP server: rmcp's handler over the engine.
//!
//! Both protocol eras hosts use are served by the same handler: the
//! `2025-11-25` session (`initialize`, server-to-client requests for
//! elicitation, `notifications/tools/list_changed`) and the stateless
//! `2026-07-28` revision (`server/discover`, per-request metadata,
//! elicitation as an `input_required` result the client answers by calling
//! again, list changes through `subscriptions/listen` and a cache lifetime
//! of zero).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientResult, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion,
    ServerCapabilities, ServerConfig, ServerRequest, SubscriptionFilter, Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{json, Value};

use super::changes;
use super::engine::{Ask, Engine, EngineError, EngineEvent, Invocation};
use super::tools::{self, SandboxSummary};

/// How often a call with a progress token is said to be still running.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// The answers a person can give, as the elicitation offers them.
const CHOICES: [&str; 4] = sandbox::broker::prompt::ANSWER_WORDS;

/// A call waiting for the client's answer to a question.
struct Suspended {
    tool: String,
    waiting: Waiting,
    since: Instant,
}

/// What a suspended call asked.
enum Waiting {
    /// A skill's broker question.
    Skill { invocation: Invocation, ask: Ask },
    /// Whether to apply a review run's changes, as planned.
    Apply(sandbox::review::apply::Plan),
}

/// The handler rmcp drives.
#[derive(Clone)]
pub struct McpServer {
    engine: Engine,
    summary: SandboxSummary,
    shell: Option<Arc<super::ShellTool>>,
    /// The project (canonical): where review runs' changes are applied.
    project: Arc<std::path::PathBuf>,
    /// The session's peer, once a request has shown it (for list-changed
    /// notifications outside any request).
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    suspended: Arc<Mutex<HashMap<String, Suspended>>>,
    /// How long a call suspended on a question (2026-07-28) waits for the
    /// client to call again before it is cancelled: the question's own
    /// deadline, after which the host stops waiting for the answer anyway.
    suspended_for: Duration,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("summary", &self.summary)
            .finish()
    }
}

impl McpServer {
    /// A server over `engine`.
    pub fn new(
        engine: Engine,
        summary: SandboxSummary,
        shell: Option<super::ShellTool>,
        project: &std::path::Path,
        question_timeout: Duration,
    ) -> McpServer {
        // Review runs record the canonical project they ran in.
        let project = std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
        McpServer {
            engine,
            summary,
            shell: shell.map(Arc::new),
            project: Arc::new(project),
            peer: Arc::default(),
            suspended: Arc::default(),
            suspended_for: question_timeout,
        }
    }

    /// Forward the engine's list changes to a 2025-11-25 session (a
    /// 2026-07-28 client learns them through `subscriptions/listen`).
    pub fn announce_list_changes(&self) {
        let mut events = self.engine.subscribe();
        let peer = self.peer.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) if changes_list(&event) => {}
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
                let Some(peer) = peer.get() else { continue };
                // Only a session that began with `initialize` has a peer
                // to notify outside a request.
                if peer.peer_info().is_some() {
                    let _ = peer.notify_tool_list_changed().await;
                }
            }
        });
    }

    fn remember_peer(&self, context: &RequestContext<RoleServer>) {
        let _ = self.peer.set(context.peer.clone());
    }

    async fn list(&self) -> Result<Vec<Tool>, McpError> {
        let listed = match self.engine.request("skill.list", json!({})).await {
            Ok(Ok(listed)) => listed,
            Ok(Err(error)) => return Err(McpError::internal_error(error.to_string(), None)),
            Err(err) => return Err(McpError::internal_error(err.to_string(), None)),
        };
        let mut tools = Vec::new();
        if let Some(shell) = &self.shell {
            tools.push(to_tool(shell.tool.clone())?);
        }
        let offers_changes = self.offers_changes(&listed);
        if offers_changes {
            for tool in changes::tool_entries(&self.project) {
                tools.push(to_tool(tool)?);
            }
        }
        for entry in listed["skills"].as_array().into_iter().flatten() {
            let name = entry["name"].as_str().unwrap_or_default();
            let taken = (self.shell.is_some() && name == super::SHELL_TOOL)
                || (offers_changes && [changes::APPLY_TOOL, changes::DISCARD_TOOL].contains(&name));
            if taken {
                eprintln!(
                    "sandbox serve --mcp: skill {name} is not offered: this server's own tool has that name"
                );
                continue;
            }
            if let Some(tool) = tools::tool_of(entry, &self.summary) {
                tools.push(to_tool(tool)?);
            }
        }
        Ok(tools)
    }

    /// Whether `apply_changes` and `discard_changes` are offered: with the
    /// shell tool (its review mode), or when a skill of `listed` (serve's
    /// `skill.list`) runs in review mode.
    fn offers_changes(&self, listed: &Value) -> bool {
        self.shell.is_some()
            || listed["skills"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|entry| entry["review"] == true)
    }

    /// [`McpServer::offers_changes`] now (a call can come without a listing).
    async fn changes_offered(&self) -> bool {
        if self.shell.is_some() {
            return true;
        }
        match self.engine.request("skill.list", json!({})).await {
            Ok(Ok(listed)) => self.offers_changes(&listed),
            _ => false,
        }
    }

    /// Drive an invocation to its end: answers, questions, progress,
    /// cancellation.
    async fn drive(
        &self,
        tool: String,
        mut invocation: Invocation,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut guard = CancelOnDrop {
            engine: self.engine.clone(),
            id: Some(invocation.id),
        };
        let progress_token = context.meta.get_progress_token();
        let started = Instant::now();
        // A timer only for a call that asked for progress: arming one costs
        // a call without it several microseconds.
        let mut ticks = progress_token.as_ref().map(|_| {
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY)
        });
        loop {
            tokio::select! {
                answer = &mut invocation.answer => {
                    guard.id = None;
                    return Ok(CallToolResponse::Complete(self.finished(&tool, invocation.id, answer)));
                }
                Some(ask) = invocation.asks.recv() => {
                    // Queued while the call waited for the client (its host
                    // has stopped waiting for it): not put to the person.
                    if ask.deadline_ms.is_some_and(|deadline| deadline <= sandbox::clock::unix_ms()) {
                        self.engine.answer(&ask, "unanswered");
                        continue;
                    }
                    if !can_elicit(context) {
                        // The broker's refusal then names the grant to add.
                        self.engine.answer(&ask, "unasked");
                        continue;
                    }
                    if is_modern(context.protocol_version().as_ref()) {
                        guard.id = None;
                        return Ok(CallToolResponse::InputRequired(self.suspend(tool, invocation, ask)?));
                    }
                    // rmcp only cancels the call's token: a question left
                    // open would keep the skill running (and its host
                    // taken) until the question's deadline, and an answer
                    // given after the cancel would still be obeyed.
                    let answer = tokio::select! {
                        biased;
                        () = context.ct.cancelled() => {
                            self.engine.answer(&ask, "unanswered");
                            return Ok(CallToolResponse::Complete(tools::failure(&format!(
                                "skill {tool}: cancelled by the client"
                            ))));
                        }
                        // The skill ended (crashed, timed out) meanwhile.
                        ended = &mut invocation.answer => {
                            guard.id = None;
                            return Ok(CallToolResponse::Complete(self.finished(&tool, invocation.id, ended)));
                        }
                        answer = elicit(&context.peer, &ask) => answer,
                    };
                    self.engine.answer(&ask, answer);
                }
                () = context.ct.cancelled() => {
                    // The client gave up on the call: free the skill's host
                    // at once (the guard sends the cancel).
                    return Ok(CallToolResponse::Complete(tools::failure(&format!(
                        "skill {tool}: cancelled by the client"
                    ))));
                }
                () = tick(&mut ticks) => {
                    let Some(token) = progress_token.clone() else { continue };
                    let elapsed = started.elapsed();
                    let mut param = ProgressNotificationParam::new(token, elapsed.as_secs_f64());
                    param.message = Some(format!("skill {tool}: running for {:.1} s", elapsed.as_secs_f64()));
                    let _ = context.peer.notify_progress(param).await;
                }
            }
        }
    }

    /// Keep a call whose skill asked a question until the client calls
    /// again with the answer (2026-07-28), and say what to ask.
    fn suspend(
        &self,
        tool: String,
        invocation: Invocation,
        ask: Ask,
    ) -> Result<InputRequiredResult, McpError> {
        let token = fresh_token();
        let request = elicitation_request(&ask);
        let result: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {"decision": request},
            "requestState": token,
        }))
        .map_err(|err| McpError::internal_error(format!("building the question: {err}"), None))?;
        self.keep_suspended(token, tool, Waiting::Skill { invocation, ask });
        Ok(result)
    }

    /// Hold `waiting` under `token` until the client calls again, expired
    /// on time even if it never does.
    fn keep_suspended(&self, token: String, tool: String, waiting: Waiting) {
        tokio::spawn({
            let server = self.clone();
            async move {
                tokio::time::sleep(server.suspended_for).await;
                server.expire_suspended();
            }
        });
        lock(&self.suspended).insert(
            token,
            Suspended {
                tool,
                waiting,
                since: Instant::now(),
            },
        );
    }

    /// Calls suspended too long are cancelled (the client went away).
    fn expire_suspended(&self) {
        let expired: Vec<Suspended> = {
            let mut suspended = lock(&self.suspended);
            let old: Vec<String> = suspended
                .iter()
                .filter(|(_, s)| s.since.elapsed() >= self.suspended_for)
                .map(|(token, _)| token.clone())
                .collect();
            old.iter().filter_map(|t| suspended.remove(t)).collect()
        };
        for call in expired {
            // An apply never accepted keeps its run's changes kept.
            let Waiting::Skill { invocation, ask } = call.waiting else {
                continue;
            };
            let engine = self.engine.clone();
            tokio::spawn(async move {
                engine.answer(&ask, "unanswered");
                engine.cancel(invocation.id);
                engine.forget(invocation.id);
            });
        }
    }

    async fn resume(
        &self,
        request: &CallToolRequestParams,
        state: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(call) = lock(&self.suspended).remove(state) else {
            let text = format!(
                "tool {}: this call's question expired or was already answered; call the tool again",
                request.name
            );
            return Ok(CallToolResponse::Complete(tools::failure(&text)));
        };
        if call.tool != request.name {
            // A client answering for another tool: the suspended call is
            // denied and cancelled rather than kept for a matching retry.
            if let Waiting::Skill { invocation, ask } = &call.waiting {
                self.engine.answer(ask, "unanswered");
                self.engine.cancel(invocation.id);
                self.engine.forget(invocation.id);
            }
            let text = format!(
                "tool {}: the requestState belongs to a call of {}",
                request.name, call.tool
            );
            return Ok(CallToolResponse::Complete(tools::failure(&text)));
        }
        let responses = request
            .input_responses
            .as_ref()
            .and_then(|r| serde_json::to_value(r).ok())
            .unwrap_or(Value::Null);
        match call.waiting {
            Waiting::Skill { invocation, ask } => {
                let answer = decision_of(&responses["decision"]);
                self.engine.answer(&ask, answer);
                self.drive(call.tool, invocation, context).await
            }
            Waiting::Apply(plan) => {
                let accepted = changes::accepts(&responses["decision"]);
                let store = sandbox::review::Store::user();
                Ok(CallToolResponse::Complete(changes::finish(
                    &store, &plan, accepted,
                )))
            }
        }
    }

    /// `apply_changes`: plan with the host's rules, put a clean plan to the
    /// person, write exactly what they accepted. The store's work is done
    /// on this thread: the runtime must stay single-threaded (the engine
    /// forks), and an apply is bounded by the run's layer limit.
    async fn apply_call(
        &self,
        project: &std::path::Path,
        arguments: &serde_json::Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let request = match changes::ChangesRequest::from_arguments(arguments, true) {
            Ok(request) => request,
            Err(err) => {
                let text = format!("{}: {err}", changes::APPLY_TOOL);
                return Ok(CallToolResponse::Complete(tools::failure(&text)));
            }
        };
        let store = sandbox::review::Store::user();
        let plan = match changes::plan(&store, project, &request) {
            changes::Planned::Done(result) => return Ok(CallToolResponse::Complete(result)),
            changes::Planned::Ask(plan) => plan,
        };
        if !can_elicit(context) {
            let text = format!(
                "{}: this host cannot ask the person (it offers no elicitation), so nothing was applied; the person applies run {} with `sandbox apply {}` in the project",
                changes::APPLY_TOOL,
                sandbox::broker::prompt::escape(&plan.id),
                sandbox::broker::prompt::escape(&plan.id),
            );
            return Ok(CallToolResponse::Complete(tools::failure(&text)));
        }
        let question = changes::question(&plan);
        if is_modern(context.protocol_version().as_ref()) {
            let token = fresh_token();
            let result: InputRequiredResult = serde_json::from_value(json!({
                "resultType": "input_required",
                "inputRequests": {"decision": question},
                "requestState": token,
            }))
            .map_err(|err| {
                McpError::internal_error(format!("building the question: {err}"), None)
            })?;
            self.keep_suspended(token, changes::APPLY_TOOL.to_owned(), Waiting::Apply(plan));
            return Ok(CallToolResponse::InputRequired(result));
        }
        let answer = tokio::select! {
            biased;
            () = context.ct.cancelled() => None,
            answer = ask_person(&context.peer, question, self.suspended_for) => answer,
        };
        let accepted = answer.as_ref().is_some_and(changes::accepts);
        Ok(CallToolResponse::Complete(changes::finish(
            &store, &plan, accepted,
        )))
    }

    async fn shell_call(
        &self,
        shell: &super::shell::ShellConfig,
        arguments: &serde_json::Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let request = match super::shell::ShellRequest::from_arguments(arguments, shell) {
            Ok(request) => request,
            Err(err) => {
                let text = format!("shell: {err}");
                return Ok(CallToolResponse::Complete(tools::failure(&text)));
            }
        };
        // Dropping the run's future kills it: a cancelled call leaves no
        // process behind.
        let outcome = tokio::select! {
            outcome = super::shell::run(shell, &request) => outcome,
            () = context.ct.cancelled() => {
                let text = "shell: cancelled by the client; the command was killed";
                return Ok(CallToolResponse::Complete(tools::failure(text)));
            }
        };
        let result = match outcome {
            Ok(outcome) => {
                let text = vec![rmcp::model::ContentBlock::text(outcome.text())];
                let result = if outcome.is_error() {
                    CallToolResult::error(text)
                } else {
                    CallToolResult::success(text)
                };
                tools::with_structured(result, outcome.structured())
            }
            Err(err) => tools::failure(&format!("shell: {err}")),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        );
        info.server_info.name = "sandbox".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        info.instructions = Some(format!(
            "Each tool runs in a sandbox under profile {} with the project {} as its only \
             writable directory. A tool's actions that need a person's approval are asked \
             through elicitation.",
            self.summary.profile, self.summary.project
        ));
        info
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.remember_peer(&context);
        Ok(ListToolsResult::with_all_items(self.list().await?))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.remember_peer(&context);
        self.expire_suspended();
        if let Some(state) = request.request_state.clone() {
            return self.resume(&request, &state, &context).await;
        }
        let arguments = request.arguments.clone().unwrap_or_default();
        if let Some(shell) = &self.shell {
            if request.name == super::SHELL_TOOL {
                let shell = Arc::clone(shell);
                return self.shell_call(&shell.config, &arguments, &context).await;
            }
        }
        let is_changes_tool =
            [changes::APPLY_TOOL, changes::DISCARD_TOOL].contains(&&*request.name);
        if is_changes_tool && self.changes_offered().await {
            let project = Arc::clone(&self.project);
            if request.name == changes::APPLY_TOOL {
                return self.apply_call(&project, &arguments, &context).await;
            }
            let result = match changes::ChangesRequest::from_arguments(&arguments, false) {
                Ok(asked) => changes::discard(&sandbox::review::Store::user(), &project, &asked),
                Err(err) => tools::failure(&format!("{}: {err}", changes::DISCARD_TOOL)),
            };
            return Ok(CallToolResponse::Complete(result));
        }
        let tool = request.name.to_string();
        let mut invocation = match self.engine.invoke(&tool, Value::Object(arguments)) {
            Ok(invocation) => invocation,
            Err(EngineError::Unsendable(why)) => {
                let text = format!("skill {tool}: {why}; send smaller, flatter arguments");
                return Ok(CallToolResponse::Complete(tools::failure(&text)));
            }
            Err(err) => return Err(McpError::internal_error(err.to_string(), None)),
        };
        // The engine refuses some calls at once (an unknown name, invalid
        // params, a disabled skill); MCP wants an unknown tool as a
        // protocol error, not a tool's failure.
        match invocation.answer.try_recv() {
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
            Ok(Err(error))
                if error["code"].as_i64()
                    == Some(sandbox::broker::protocol::code::NO_SUCH_SKILL) =>
            {
                self.engine.forget(invocation.id);
                return Err(McpError::invalid_params(
                    format!("no tool named {tool:?} (tools/list shows them)"),
                    None,
                ));
            }
            answered => {
                let result = match answered {
                    Ok(answer) => self.finished(&tool, invocation.id, Ok(answer)),
                    Err(_) => {
                        self.engine.forget(invocation.id);
                        tools::failure(&format!("skill {tool}: the skill engine ended"))
                    }
                };
                return Ok(CallToolResponse::Complete(result));
            }
        }
        self.drive(tool, invocation, &context).await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut events = self.engine.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                event = events.recv() => match event {
                    Ok(event) if changes_list(&event) => {
                        if context.sink().notify_tool_list_changed().await.is_err() {
                            return Ok(());
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }
}

/// Sends `skill.cancel` for an invocation whose call ended without its
/// answer (rmcp dropped the handler, or the client cancelled).
struct CancelOnDrop {
    engine: Engine,
    id: Option<u64>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let engine = self.engine.clone();
            tokio::spawn(async move {
                engine.cancel(id);
                engine.forget(id);
            });
        }
    }
}

impl McpServer {
    /// The tool result of invocation `id`'s end, with what its review run
    /// kept (a skill in review mode), which the engine is then told to
    /// forget with the rest of the call. A failed call's changes are kept
    /// too (the skill may have written before it failed), so they are
    /// summarized either way.
    fn finished(
        &self,
        tool: &str,
        id: u64,
        answer: Result<Result<Value, Value>, tokio::sync::oneshot::error::RecvError>,
    ) -> CallToolResult {
        let review = self.engine.take_review(id);
        self.engine.forget(id);
        let result = match answer {
            Ok(Ok(result)) => tools::success(result),
            Ok(Err(error)) => tools::failure(&tools::failure_message(tool, &error)),
            Err(_) => tools::failure(&format!(
                "skill {tool}: the skill engine ended before answering (see this server's stderr)"
            )),
        };
        match review {
            Some(kept) => {
                let store = sandbox::review::Store::user();
                let summary = super::shell::review::summary(&store, &kept);
                super::shell::review::with_summary(result, summary)
            }
            None => result,
        }
    }
}

/// The next progress tick, never when the call has no timer.
async fn tick(ticks: &mut Option<tokio::time::Interval>) {
    match ticks {
        Some(ticks) => {
            ticks.tick().await;
        }
        None => std::future::pending().await,
    }
}

fn changes_list(event: &EngineEvent) -> bool {
    match event {
        EngineEvent::ListChanged => true,
        EngineEvent::State { state, .. } => state == "removed",
    }
}

fn is_modern(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

fn can_elicit(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|caps| caps.elicitation.is_some())
}

/// The `elicitation/create` request for a skill's question: one choice
/// among [`CHOICES`], the question shown exactly as the terminal shows it.
fn elicitation_request(ask: &Ask) -> Value {
    let message = format!(
        "{}\nAnswer once (this request only), run (every {} of this skill, any target, \
         until its process ends), always (stored as a grant for this skill and exactly this \
         target) or deny.",
        ask.question, ask.action
    );
    let title = format!("Allow {} for skill {}?", ask.action, ask.skill);
    tools::choice_question(&message, &title, &CHOICES)
}

/// Ask through a 2025-11-25 session: the person's choice, or `unanswered`
/// when no valid answer came before the skill's deadline (refused this
/// time, asked again next time).
async fn elicit(peer: &Peer<RoleServer>, ask: &Ask) -> &'static str {
    let left = ask
        .deadline_ms
        .map(|deadline| Duration::from_millis(deadline.saturating_sub(sandbox::clock::unix_ms())))
        .unwrap_or(sandbox::broker::prompt::DEFAULT_DEADLINE);
    match ask_person(peer, elicitation_request(ask), left).await {
        Some(result) => decision_of(&result),
        None => "unanswered",
    }
}

/// Send the `elicitation/create` request `question` through a 2025-11-25
/// session: the client's result, or None when none came within `left`.
async fn ask_person(peer: &Peer<RoleServer>, question: Value, left: Duration) -> Option<Value> {
    let request: ServerRequest = match serde_json::from_value(question) {
        Ok(request) => request,
        Err(err) => {
            eprintln!("sandbox serve --mcp: building the question: {err}");
            return None;
        }
    };
    match tokio::time::timeout(left, peer.send_request(request)).await {
        Ok(Ok(ClientResult::ElicitResult(result))) => serde_json::to_value(result).ok(),
        _ => None,
    }
}

/// The choice in an elicitation result: an accepted known decision, a
/// decline (the person said no), or `unanswered` (dismissed, or a reply no
/// person chose: refused this time without holding for the run).
fn decision_of(result: &Value) -> &'static str {
    match result["action"].as_str() {
        Some("accept") => {
            // A choice offered, or `session`, the deprecated spelling of
            // `run` hosts were offered before.
            let chosen = result["content"]["decision"].as_str().unwrap_or_default();
            match sandbox::broker::prompt::Answer::from_word(chosen) {
                Some(answer) if answer.word() != "unasked" => answer.word(),
                _ => "unanswered",
            }
        }
        Some("decline") => "deny",
        _ => "unanswered",
    }
}

fn to_tool(tool: Value) -> Result<Tool, McpError> {
    serde_json::from_value(tool)
        .map_err(|err| McpError::internal_error(format!("building a tool: {err}"), None))
}

fn fresh_token() -> String {
    let mut bytes = [0u8; 16];
    if getrandom(&mut bytes).is_err() {
        // Uniqueness is all the token needs (it names server-side state
        // the client can only answer); the clock and a counter give that.
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return format!("{}-{n}", sandbox::clock::unix_ms());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn getrandom(bytes: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(bytes)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask() -> Ask {
        Ask {
            id: json!("ask-1"),
            skill: "notes".into(),
            action: "fs.write".into(),
            target: Some("/p/x".into()),
            question: "skill:notes asks to fs.write /p/x".into(),
            deadline_ms: None,
        }
    }

    #[test]
    fn the_question_is_a_valid_elicitation_request() {
        let request: ServerRequest = serde_json::from_value(elicitation_request(&ask())).unwrap();
        let back = serde_json::to_value(request).unwrap();
        assert_eq!(back["method"], "elicitation/create");
        assert_eq!(
            back["params"]["requestedSchema"]["properties"]["decision"]["enum"],
            json!(CHOICES)
        );
        let result: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {"decision": elicitation_request(&ask())},
            "requestState": "t",
        }))
        .unwrap();
        assert_eq!(result.request_state.as_deref(), Some("t"));
    }

    #[test]
    fn only_an_accepted_known_choice_allows() {
        let accepted = |d: &str| json!({"action": "accept", "content": {"decision": d}});
        assert_eq!(decision_of(&accepted("once")), "once");
        assert_eq!(decision_of(&accepted("always")), "always");
        assert_eq!(decision_of(&accepted("run")), "run");
        assert_eq!(
            decision_of(&accepted("session")),
            "run",
            "the old spelling is still understood"
        );
        assert_eq!(decision_of(&accepted("unasked")), "unanswered");
        assert_eq!(CHOICES, ["once", "run", "always", "deny"]);
        assert_eq!(decision_of(&accepted("ONCE")), "unanswered");
        assert_eq!(decision_of(&accepted("yes")), "unanswered");
        assert_eq!(decision_of(&accepted("deny")), "deny");
        assert_eq!(
            decision_of(&json!({"action": "decline", "content": {"decision": "once"}})),
            "deny"
        );
        assert_eq!(decision_of(&json!({"action": "cancel"})), "unanswered");
        assert_eq!(decision_of(&Value::Null), "unanswered");
    }
}
