//! `GET /v1/runs/ID/changes`, `POST /v1/runs/ID/apply` and
//! `POST /v1/runs/ID/discard`: a review run's kept changes, for the caller
//! who owns the run and no one else (see [`crate::review`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::{bad_body, body_bytes, load_visible, query, who, App, Peer, Shared};
use crate::error::ApiError;
use crate::resolve::Caller;
use crate::review::{review_id, ApplyRequest, HelperOutput};

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// The run's review id, for its owner only. Another caller's run, even
/// one a `see_all` rule lets them list, answers as a run that does not
/// exist: its changes are the owner's project.
async fn owned_review(app: &Arc<App>, peer: Peer, id: &str) -> Result<(Caller, String), ApiError> {
    let who = who(app, peer)?;
    let record = load_visible(app, &who, id).await?;
    if record.uid != who.caller.uid {
        return Err(ApiError::no_such_run(id));
    }
    if !record.is_finished() {
        return Err(ApiError::not_finished(
            id,
            &record.state,
            "; its changes are kept when it ends",
            format!("wait for it (GET /v1/runs/{id}), then ask again"),
        ));
    }
    match review_id(record.report.as_ref()) {
        Some(review) => Ok((who.caller, review)),
        None => Err(ApiError::new(
            404,
            "no_changes",
            format!("run {id} kept no changes for review"),
            "submit the run with \"review\": true (or a profile with [filesystem] review = true) to keep its changes",
        )),
    }
}

/// A helper that failed: the store has no such run any more (applied
/// or discarded), or the helper's own message.
fn helper_failed(id: &str, out: &HelperOutput) -> ApiError {
    if out.stderr.contains("is kept in") || out.stderr.contains("is not a run id") {
        return ApiError::new(
            404,
            "no_changes",
            format!("run {id} keeps no changes any more (they were applied or discarded)"),
            "submit the run again",
        );
    }
    ApiError::new(
        409,
        "review_failed",
        format!("run {id}: {}", out.stderr),
        "see the message; the run's changes stay kept",
    )
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChangesQuery {
    /// Add the rendered changes (a unified diff for text files).
    #[serde(default)]
    diff: bool,
}

/// `GET /v1/runs/ID/changes[?diff=true]`.
pub(super) async fn changes(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
    q: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let (caller, review) = owned_review(&app, peer, &id).await?;
    let stores = &app.runs.review;
    let out = stores
        .helper(caller, &args(&["changes", "--json", "--", &review]))
        .await?;
    if out.status != Some(0) {
        return Err(helper_failed(&id, &out));
    }
    let mut body: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|err| ApiError::internal(format!("the review listing: {err}")))?;
    if q.diff {
        let out = stores
            .helper(caller, &args(&["changes", "--", &review]))
            .await?;
        if out.status != Some(0) {
            return Err(helper_failed(&id, &out));
        }
        body["diff"] = String::from_utf8_lossy(&out.stdout).into_owned().into();
    }
    body["id"] = id.into();
    body["review"] = review.into();
    Ok(Json(body).into_response())
}

/// `POST /v1/runs/ID/apply`: 200 with what was applied, or 409 with each
/// refusal (path, reason, flag) and nothing applied.
pub(super) async fn apply(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body)?;
    let request: ApplyRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ApplyRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|err| bad_body(&err))?
    };
    let (caller, review) = owned_review(&app, peer, &id).await?;
    let arguments = request.arguments(&review)?;
    let out = app.runs.review.helper(caller, &arguments).await?;
    let parsed = serde_json::from_slice::<serde_json::Value>(&out.stdout).ok();
    let (status, mut answer) = match (out.status, parsed) {
        (Some(0), Some(applied)) => (StatusCode::OK, applied),
        (Some(1), Some(refused)) if refused.get("refused").is_some() => {
            (StatusCode::CONFLICT, refused)
        }
        _ => return Err(helper_failed(&id, &out)),
    };
    answer["id"] = id.into();
    if answer.get("refused").is_none() {
        answer["refused"] = serde_json::json!([]);
    }
    Ok((status, Json(answer)).into_response())
}

/// `POST /v1/runs/ID/discard`.
pub(super) async fn discard(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (caller, review) = owned_review(&app, peer, &id).await?;
    let out = app
        .runs
        .review
        .helper(caller, &args(&["discard", "--", &review]))
        .await?;
    if out.status != Some(0) {
        return Err(helper_failed(&id, &out));
    }
    Ok(Json(serde_json::json!({"id": id, "discarded": true})).into_response())
}
