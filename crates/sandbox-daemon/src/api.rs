//! The HTTP routes of `docs/src/daemon.md`. Each handler identifies the caller
//! from the connection (never from the request), finds its rule, and does
//! blocking work (database, files) off the runtime's two workers.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::budget::{StreamBudget, MOST_ONE_READ_HOLDS};
use super::listener::CappedListener;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::sync::mpsc;

use super::config::{caller_groups, Config, Rule};
use super::error::ApiError;
use super::log::Tail;
use super::resolve::{resolve, Caller, SubmitRequest};
use super::runs::{blocking, is_run_id, Runs};
use super::store::RunRecord;
use sandbox::launch::protocol::{Approval, MAX_MESSAGE};

#[path = "api_attest.rs"]
mod attest_api;
#[path = "api_review.rs"]
mod review;

/// Largest request body.
pub const MAX_BODY: usize = 1 << 20;

/// Version of the API (the `/v1` prefix).
pub const API_VERSION: u32 = 1;

/// The other end of a connection, as the kernel reports it at connect
/// time (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// uid, gid and pid; `None` when the kernel gave none.
    pub caller: Option<Caller>,
}

impl Connected<axum::serve::IncomingStream<'_, CappedListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, CappedListener>) -> Self {
        Peer {
            caller: stream.io().caller(),
        }
    }
}

/// What every handler shares.
pub struct App {
    /// The configuration.
    pub config: Arc<Config>,
    /// The run manager.
    pub runs: Arc<Runs>,
    /// Doctor's verdict, computed once at start.
    pub doctor: serde_json::Value,
    /// The callers' skill servers.
    pub skills: Arc<super::skills::SkillHosts>,
    /// Bytes of run logs in flight to each caller.
    pub streams: Arc<super::budget::StreamBudget>,
    /// Where the daemon's attestation key lives (`STATE/attest`).
    pub attest_dir: std::path::PathBuf,
}

type Shared = State<Arc<App>>;

/// The routes.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/info", get(info))
        .route("/v1/runs", post(submit).get(list))
        .route("/v1/runs/{id}", get(show).delete(delete))
        .route("/v1/runs/{id}/events", get(events))
        .route("/v1/runs/{id}/cancel", post(cancel))
        .route("/v1/runs/{id}/audit", get(audit))
        .route("/v1/runs/{id}/changes", get(review::changes))
        .route("/v1/runs/{id}/apply", post(review::apply))
        .route("/v1/runs/{id}/discard", post(review::discard))
        .route("/v1/runs/{id}/attestation", get(attest_api::attestation))
        .route("/v1/attest/key", get(attest_api::public_key))
        .route("/v1/approvals", get(approvals))
        .route("/v1/approvals/{run}/{n}", post(answer))
        .route("/v1/skills", get(skills_list))
        .route("/v1/skills/reload", post(skills_reload))
        .route("/v1/skills/{name}/invoke", post(skills_invoke))
        .route("/v1/skills/{name}/enable", post(skills_enable))
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(app)
}

pub(crate) struct Who<'a> {
    caller: Caller,
    rule: &'a Rule,
}

impl Who<'_> {
    /// The uid whose runs the caller sees; `None`: everyone's.
    fn scope(&self) -> Option<u32> {
        (!self.rule.see_all).then_some(self.caller.uid)
    }

    fn may_see(&self, record: &RunRecord) -> bool {
        self.rule.see_all || record.uid == self.caller.uid
    }
}

pub(crate) fn who(app: &App, peer: Peer) -> Result<Who<'_>, ApiError> {
    let Some(caller) = peer.caller else {
        return Err(ApiError::forbidden(
            "not_allowed",
            "the kernel did not say who is connected",
            "connect over the daemon's Unix socket",
        ));
    };
    match app.config
        .rule_for(caller.uid, || caller_groups(caller.uid, caller.gid)) {
        Some(rule) => Ok(Who { caller, rule }),
        None => Err(ApiError::forbidden(
            "not_allowed",
            format!("uid {} (gid {}) matches no rule of the daemon's configuration", caller.uid, caller.gid),
            match &app.config.origin {
                Some(path) => format!("ask the daemon's administrator for an [[allow]] rule in {}", path.display()),
                None => "the daemon runs without a configuration and allows only its own uid; give it one with [[allow]] rules".into(),
            },
        )),
    }
}

pub(crate) fn bad_body(err: &dyn std::fmt::Display) -> ApiError {
    ApiError::bad_request(
        format!("the request body: {err}"),
        "send a JSON object with the fields docs/src/daemon.md lists",
    )
}

pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                413,
                "too_large",
                format!("the request body is over {MAX_BODY} bytes"),
                "send large input as a file in the project instead of in the request",
            )
        } else {
            bad_body(&rejection.body_text())
        }
    })
}

pub(crate) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query.map(|Query(q)| q).map_err(|rejection| {
        ApiError::bad_request(
            format!("the query string: {}", rejection.body_text()),
            "see docs/src/daemon.md for this endpoint's parameters",
        )
    })
}

async fn info(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    Ok(Json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "api": API_VERSION,
        "caller": {"uid": who.caller.uid, "gid": who.caller.gid, "pid": who.caller.pid},
        "doctor": app.doctor,
        "load": app.runs.load(),
        "pool": app.runs.pool_of(who.caller.uid),
        "skills": {"servers": app.skills.running(), "calls_waiting": app.skills.waiting()},
    }))
    .into_response())
}

/// Bytes of `value` as JSON, without building them.
fn encoded_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(usize::MAX, |()| count.0)
}

async fn submit(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    let bytes = body_bytes(body)?;
    let request: SubmitRequest = serde_json::from_slice(&bytes).map_err(|err| bad_body(&err))?;
    let wait = request.wait;
    let config = app.config.clone();
    let rule = who.rule.clone();
    let caller = who.caller;
    let resolved = blocking(move || {
        let resolved = resolve(&config, &rule, caller, request)?;
        // Counted, not kept: the launcher's message is the spec plus an
        // envelope well under the margin.
        let size = encoded_len(&resolved.spec);
        if size > MAX_MESSAGE - 4096 {
            return Err(ApiError::new(
                413,
                "too_large",
                format!("the resolved run is {size} bytes, more than the launcher takes"),
                "pass fewer or shorter arguments, variables or secrets",
            ));
        }
        Ok(resolved)
    })
    .await?;
    let id = app.runs.submit(caller, who.rule, resolved).await?;
    if !wait {
        return Ok((
            StatusCode::ACCEPTED,
            Json(serde_json::json!({"id": id, "state": "queued"})),
        )
            .into_response());
    }
    if let Some(mut over) = app.runs.watch_over(&id) {
        let _ = over.wait_for(|over| *over).await;
    }
    let record = load_visible(&app, &who, &id).await?;
    Ok(Json(record).into_response())
}

/// A run the caller may see, with its log count filled in; another
/// caller's run is reported as missing, so ids reveal nothing.
pub(crate) async fn load_visible(
    app: &Arc<App>,
    who: &Who<'_>,
    id: &str,
) -> Result<RunRecord, ApiError> {
    if !is_run_id(id) {
        return Err(ApiError::no_such_run(id));
    }
    let store = app.runs.store.clone();
    let log = app.runs.log_path(id);
    let run = id.to_string();
    let record = blocking(move || {
        let record = store
            .get(&run)
            .map_err(|err| ApiError::internal(err.to_string()))?;
        Ok(record.map(|mut record| {
            if record.log_records.is_none() {
                record.log_records = super::log::count_records(&log).ok();
            }
            record
        }))
    })
    .await?;
    match record {
        Some(record) if who.may_see(&record) => Ok(record),
        _ => Err(ApiError::no_such_run(id)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    limit: Option<u32>,
}

const STATES: [&str; 6] = ["queued", "running", "exited", "failed", "cancelled", "lost"];

async fn list(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    let q = query(q)?;
    if let Some(state) = &q.state {
        if !STATES.contains(&state.as_str()) {
            return Err(ApiError::bad_request(
                format!("state: {state:?} is not a run state"),
                format!("use one of {}", STATES.join(", ")),
            ));
        }
    }
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let store = app.runs.store.clone();
    let scope = who.scope();
    let runs = blocking(move || {
        store
            .list(scope, q.state.as_deref(), limit)
            .map_err(|err| ApiError::internal(err.to_string()))
    })
    .await?;
    Ok(Json(serde_json::json!({ "runs": runs })).into_response())
}

async fn show(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    Ok(Json(load_visible(&app, &who, &id).await?).into_response())
}

async fn delete(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    let record = load_visible(&app, &who, &id).await?;
    if !record.is_finished() {
        return Err(ApiError::not_finished(
            &id,
            &record.state,
            "",
            format!("cancel it first (POST /v1/runs/{id}/cancel), then delete it once it is over"),
        ));
    }
    let store = app.runs.store.clone();
    let dir = app.runs.run_dir(&id);
    blocking(move || {
        store
            .delete(&id)
            .map_err(|err| ApiError::internal(err.to_string()))?;
        match std::fs::remove_dir_all(&dir) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(ApiError::internal(
                format!("removing {}: {err}", dir.display()),
            )),
            _ => Ok(()),
        }
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn cancel(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    load_visible(&app, &who, &id).await?;
    let state = app.runs.cancel(&id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"id": id, "state": state})),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    since: Option<u64>,
    follow: Option<bool>,
}

/// A body fed by a bounded channel: the task reading the log waits when
/// the client does not read, so a slow client holds one chunk, not a log.
/// An error sent ends the answer as broken (hyper drops the connection
/// without the body's end), so a client never takes a part for the whole.
struct ChannelBody(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| bytes.map(http_body::Frame::data)))
    }
}

/// How often a follower looks for new lines while the run writes.
const FOLLOW_POLL: Duration = Duration::from_millis(20);

/// A run's log (or audit) as a response, read by a task that pays for each
/// chunk from `uid`'s stream budget before reading it.
fn ndjson(
    budget: Arc<StreamBudget>,
    uid: u32,
    tail: Tail,
    over: Option<tokio::sync::watch::Receiver<bool>>,
    follow: bool,
) -> Response {
    let (sender, receiver) = mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    tokio::spawn(async move {
        let mut tail = tail;
        let mut over = over;
        loop {
            // Read before deciding the stream is over: a run that ended
            // after this check still has its last lines read below.
            let was_over = over.as_ref().is_none_or(|watch| *watch.borrow());
            let Some(reserved) = budget.reserve(uid, MOST_ONE_READ_HOLDS).await else {
                return;
            };
            let read = tokio::task::spawn_blocking(move || {
                let chunk = tail.read_lines();
                (tail, chunk)
            })
            .await;
            let Ok((back, chunk)) = read else { return };
            tail = back;
            match chunk {
                Ok(chunk) if !chunk.is_empty() => {
                    if sender.send(Ok(reserved.attach(chunk))).await.is_err() {
                        return;
                    }
                    continue;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!("reading a run's log: {err}");
                    return;
                }
            }
            if !follow || was_over {
                return;
            }
            match over.as_mut() {
                Some(watch) => {
                    tokio::select! {
                        _ = tokio::time::sleep(FOLLOW_POLL) => {}
                        changed = watch.changed() => if changed.is_err() { over = None; },
                    }
                }
                None => return,
            }
        }
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::new(ChannelBody(receiver)),
    )
        .into_response()
}

async fn events(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    let q = query(q)?;
    let over = app.runs.watch_over(&id);
    load_visible(&app, &who, &id).await?;
    let path = app.runs.log_path(&id);
    let since = q.since.unwrap_or(0);
    let tail = blocking(move || match Tail::open(&path, since) {
        Ok(tail) => Ok(Some(tail)),
        // A run recorded by an older daemon whose spool is gone.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(ApiError::internal(format!("the run's log: {err}"))),
    })
    .await?;
    Ok(match tail {
        Some(tail) => ndjson(
            app.streams.clone(),
            who.caller.uid,
            tail,
            over,
            q.follow.unwrap_or(false),
        ),
        None => ([(header::CONTENT_TYPE, "application/x-ndjson")], "").into_response(),
    })
}

async fn audit(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    load_visible(&app, &who, &id).await?;
    let path = app.runs.run_dir(&id).join("audit.ndjson");
    let tail = blocking(move || match Tail::open(&path, 0) {
        Ok(tail) => Ok(Some(tail)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(ApiError::internal(format!("the run's audit log: {err}"))),
    })
    .await?;
    Ok(match tail {
        Some(tail) => ndjson(app.streams.clone(), who.caller.uid, tail, None, false),
        None => ([(header::CONTENT_TYPE, "application/x-ndjson")], "").into_response(),
    })
}

async fn approvals(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    let questions = app.runs.questions(who.scope());
    Ok(Json(serde_json::json!({ "approvals": questions })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    answer: Approval,
}

async fn answer(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((run, n)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    let bytes = body_bytes(body)?;
    let body: AnswerBody = serde_json::from_slice(&bytes).map_err(|err| {
        ApiError::bad_request(
            format!("the request body: {err}"),
            "send {\"answer\": \"once\"}, \"run\" or \"deny\"",
        )
    })?;
    let number: u64 = n.parse().map_err(|_| {
        ApiError::new(
            404,
            "no_such_approval",
            format!("no open question {run}/{n}"),
            "list open questions with GET /v1/approvals",
        )
    })?;
    app.runs.answer(who.scope(), &run, number, body.answer)?;
    Ok(
        Json(serde_json::json!({"id": format!("{run}/{n}"), "answer": body.answer}))
            .into_response(),
    )
}

/// Where a caller's skills run: `?project=` on a list, the body otherwise.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillsWhere {
    project: std::path::PathBuf,
    profile: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InvokeBody {
    project: std::path::PathBuf,
    profile: Option<String>,
    #[serde(default)]
    params: serde_json::Value,
}

/// Longest a skill call is waited for; a skill's own timeout (at most
/// this) ends it sooner, inside `serve`.
const SKILL_CALL_TIMEOUT: Duration = Duration::from_secs(3600);
/// Listing, enabling and reloading answer at once.
const SKILL_ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

fn skill_error(err: super::skills::SkillError) -> ApiError {
    use super::skills::SkillError;
    use sandbox::broker::protocol::code;
    match err {
        SkillError::Rpc { code, message, .. } if code == code::NO_SUCH_SKILL => {
            ApiError::new(404, "no_such_skill", message, "GET /v1/skills lists the skills")
        }
        SkillError::Rpc { code, message, .. }
            if code == code::SKILL_DISABLED || code == code::SKILL_UNAVAILABLE =>
        {
            ApiError::new(
                409,
                "skill_unavailable",
                message,
                "fix the skill (GET /v1/skills shows its state and error), then POST /v1/skills/{name}/enable",
            )
        }
        SkillError::Rpc { code, message, .. } if code == code::INVALID_PARAMS => {
            ApiError::bad_request(message, "send params that match the skill's input-schema")
        }
        SkillError::Rpc { code, message, .. } => ApiError::new(
            422,
            "skill_failed",
            format!("{message} (JSON-RPC error {code})"),
            "the skill's own log is in the daemon's journal, marked with your uid",
        ),
        SkillError::Busy(_) => ApiError::new(
            503,
            "skills_busy",
            err.to_string(),
            format!(
                "wait for an answer first: at most {} skill calls wait at once, {} of one caller",
                super::skills::MAX_CALLS,
                super::skills::MAX_CALLS_PER_CALLER
            ),
        )
        .retry_after(1),
        SkillError::TooManyServers(_) => ApiError::new(
            503,
            "skills_busy",
            err.to_string(),
            "retry later; servers idle for 10 minutes are stopped",
        )
        .retry_after(60),
        SkillError::Timeout(_) => ApiError::new(
            504,
            "skill_timeout",
            err.to_string(),
            "give the skill a shorter job, or raise its timeout in SKILL.md",
        ),
        SkillError::Gone | SkillError::Start(_) => ApiError::new(
            502,
            "skill_server_failed",
            err.to_string(),
            "try again; the next call starts a fresh skill server",
        ),
    }
}

async fn skill_call(
    app: Arc<App>,
    peer: Peer,
    place: SkillsWhere,
    method: &'static str,
    params: serde_json::Value,
    timeout: Duration,
) -> Result<(serde_json::Value, super::skills::ServerKey), ApiError> {
    let who = who(&app, peer)?;
    let (config, rule, caller) = (app.config.clone(), who.rule.clone(), who.caller);
    let hosts = app.skills.clone();
    blocking(move || {
        let server = super::resolve::resolve_skills(
            &config,
            &rule,
            caller,
            &place.project,
            place.profile.as_deref(),
        )?;
        let key = super::skills::ServerKey {
            uid: caller.uid,
            gid: caller.gid,
            project: server.project,
            profile: server.profile,
        };
        let result = hosts
            .call(&key, method, params, timeout)
            .map_err(skill_error)?;
        Ok((result, key))
    })
    .await
}

fn skill_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body_bytes(body)?;
    serde_json::from_slice(&bytes).map_err(|err| bad_body(&err))
}

async fn skills_list(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    query: Result<Query<SkillsWhere>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(place) = query.map_err(|err| {
        ApiError::bad_request(
            format!("the query: {err}"),
            "GET /v1/skills?project=/absolute/project[&profile=NAME]",
        )
    })?;
    let hosts = app.skills.clone();
    let (mut listed, key) = skill_call(
        app,
        peer,
        place,
        "skill.list",
        serde_json::json!({}),
        SKILL_ADMIN_TIMEOUT,
    )
    .await?;
    listed["states"] = serde_json::to_value(hosts.states(&key)).unwrap_or_default();
    Ok(Json(listed).into_response())
}

async fn skills_invoke(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: InvokeBody = skill_body(body)?;
    let place = SkillsWhere {
        project: body.project,
        profile: body.profile,
    };
    let params = serde_json::json!({"name": name, "params": body.params});
    let (result, _) =
        skill_call(app, peer, place, "skill.invoke", params, SKILL_CALL_TIMEOUT).await?;
    Ok(Json(serde_json::json!({ "result": result })).into_response())
}

async fn skills_enable(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let place: SkillsWhere = skill_body(body)?;
    let params = serde_json::json!({ "name": name });
    let (result, _) = skill_call(
        app,
        peer,
        place,
        "skill.enable",
        params,
        SKILL_ADMIN_TIMEOUT,
    )
    .await?;
    Ok(Json(result).into_response())
}

async fn skills_reload(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let place: SkillsWhere = skill_body(body)?;
    let (result, _) = skill_call(
        app,
        peer,
        place,
        "skill.reload",
        serde_json::json!({}),
        SKILL_ADMIN_TIMEOUT,
    )
    .await?;
    Ok(Json(result).into_response())
}

async fn not_found() -> ApiError {
    ApiError::new(
        404,
        "not_found",
        "no such endpoint",
        "see docs/src/daemon.md for the endpoints under /v1",
    )
}

async fn wrong_method() -> ApiError {
    ApiError::new(
        405,
        "bad_request",
        "this endpoint does not take that method",
        "see docs/src/daemon.md for each endpoint's method",
    )
}

/// The request bodies and query strings of the API, decoded as the
/// handlers decode them, for the fuzz targets (`crate::fuzzing`).
pub(crate) mod fuzzing {
    use super::*;

    /// `bytes` as every body and query the API reads.
    pub fn bodies(bytes: &[u8]) {
        let _ = serde_json::from_slice::<AnswerBody>(bytes);
        let _ = skill_body::<InvokeBody>(Ok(Bytes::copy_from_slice(bytes)));
        let _ = skill_body::<SkillsWhere>(Ok(Bytes::copy_from_slice(bytes)));
        if let Ok(apply) = serde_json::from_slice::<crate::review::ApplyRequest>(bytes) {
            let _ = apply.arguments("20261128-030301-be28");
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        let Ok(uri) = format!("/v1/runs?{text}").parse::<axum::http::Uri>() else {
            return;
        };
        let _ = Query::<ListQuery>::try_from_uri(&uri);
        let _ = Query::<EventsQuery>::try_from_uri(&uri);
        let _ = Query::<SkillsWhere>::try_from_uri(&uri);
        let _ = Query::<review::ChangesQuery>::try_from_uri(&uri);
    }
}
