//! `GET /v1/runs/ID/attestation` and `GET /v1/attest/key`: a signed
//! statement of what one of the daemon's runs enforced, for the caller who
//! owns the run and no one else, and the public key that checks it.
//!
//! The key is the daemon's own (`STATE/attest/ed25519`, made on first use,
//! mode 0600 and owned by the daemon's user beneath a 0700 directory), so
//! no caller can sign as the daemon. What it signs is labelled by who
//! said it: the report is the run's supervisor's (a process of the
//! caller's uid, so a claim), while the profile and command the daemon
//! launched, the run's end and the audit chain's head are root's. The head anchored is the daemon's own chain, the one
//! the relay resealed every audit line into (`crate::relay`), read back
//! from root's spool file and checked link by link before it is signed.

use std::sync::Arc;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{load_visible, who, App, Peer, Shared};
use crate::error::ApiError;
use crate::runs::blocking;
use sandbox::attest::{self, key, ProjectState};

/// The daemon's key, made on first use.
fn daemon_key(app: &App) -> Result<key::SigningKey, ApiError> {
    let (key, made) = key::load_or_create(&app.attest_dir)
        .map_err(|err| ApiError::internal(format!("the daemon's attestation key: {err}")))?;
    if made {
        tracing::info!(
            keyid = %key::key_id(key.public()),
            path = %key::public_path(&app.attest_dir).display(),
            "made the daemon's attestation key"
        );
    }
    Ok(key)
}

/// The head of the daemon's own chain in the run's audit spool: the
/// chain the relay sealed (`daemon-run:ID:…`), verified whole. None when
/// the run audited nothing.
fn daemon_chain(file: &std::path::Path, id: &str) -> Result<Option<(String, String)>, ApiError> {
    let reader = match std::fs::File::open(file) {
        Ok(reader) => reader,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(ApiError::internal(format!("the run's audit log: {err}"))),
    };
    let verified = sandbox::audit::verify::verify(reader, None).map_err(|broken| {
        ApiError::internal(format!(
            "run {id}: its audit log does not verify ({broken}); the daemon signs no statement over it"
        ))
    })?;
    let prefix = format!("daemon-run:{id}:");
    let mut ours = verified
        .chains
        .iter()
        .filter(|chain| chain.name.starts_with(&prefix));
    match (ours.next(), ours.next()) {
        (None, _) => Ok(None),
        (Some(chain), None) => Ok(Some((chain.name.clone(), chain.head.clone()))),
        (Some(_), Some(_)) => Err(ApiError::internal(format!(
            "run {id}: its audit log holds more than one chain of the daemon's"
        ))),
    }
}

/// `GET /v1/runs/ID/attestation`: the DSSE envelope, for the run's owner.
pub(super) async fn attestation(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let who = who(&app, peer)?;
    let record = load_visible(&app, &who, &id).await?;
    // Another caller's run, even one a `see_all` rule lets them list,
    // answers as a run that does not exist: the daemon signs for a run's
    // owner only.
    if record.uid != who.caller.uid {
        return Err(ApiError::no_such_run(&id));
    }
    if !record.is_finished() {
        return Err(ApiError::not_finished(
            &id,
            &record.state,
            "; what it enforced is known when it ends",
            format!("wait for it (GET /v1/runs/{id}), then ask again"),
        ));
    }
    let Some(report) = record.report.clone() else {
        return Err(ApiError::new(
            404,
            "no_report",
            format!("run {id} ended without a report ({})", record.state),
            "nothing it enforced was measured; submit it again",
        ));
    };
    let audit = app.runs.run_dir(&id).join("audit.ndjson");
    let app2 = Arc::clone(&app);
    let envelope = blocking(move || {
        let chain = daemon_chain(&audit, &id)?;
        let mut statement = attest::statement(&attest::Inputs {
            report: &report,
            policy: None,
            project: ProjectState {
                path: record.project.clone(),
                ..ProjectState::default()
            },
            review: None,
        });
        let predicate = &mut statement["predicate"];
        // The supervisor's own chain is its claim (the relay replaced it);
        // the daemon's resealed chain is what root's file holds.
        predicate["audit"] = match chain {
            Some((chain, head)) => {
                serde_json::json!({ "chain": chain, "head": head, "sealed_by": "daemon" })
            }
            None => serde_json::Value::Null,
        };
        // What the daemon resolved and launched is root's to say: a report
        // is the supervisor's (the caller may forge it), so its profile
        // name and command, which `attest verify` prints, give way.
        predicate["profile"]["name"] = serde_json::json!(record.profile);
        predicate["command"] = serde_json::json!(record.command);
        predicate["daemon"] = serde_json::json!({
            "run": id,
            "uid": record.uid,
            "profile": record.profile,
            "command": record.command,
            "state": record.state,
            "status": record.status,
            "reason": record.reason,
            "report_by": "supervisor",
        });
        let key = daemon_key(&app2)?;
        Ok(attest::sign(&key, &statement))
    })
    .await?;
    Ok(Json(envelope).into_response())
}

/// `GET /v1/attest/key`: the daemon's public key (made on first use), for
/// `sandbox attest verify --key`.
pub(super) async fn public_key(
    State(app): Shared,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Result<Response, ApiError> {
    who(&app, peer)?;
    let app2 = Arc::clone(&app);
    let public = blocking(move || daemon_key(&app2).map(|key| *key.public())).await?;
    Ok(Json(serde_json::json!({
        "algorithm": "ed25519",
        "public": sandbox::audit::chain::hex(&public),
        "keyid": key::key_id(&public),
    }))
    .into_response())
}
