//! How runs end: cancel, a stopping daemon, and the result written to the
//! store (and the run's log ended) before anyone waiting hears the run is
//! over.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::pool::Moment;
use super::{blocking, decrement, finish_watch, lock, store_error, Control, Runs};
use crate::error::ApiError;
use crate::store::Outcome;

/// Why a run was cancelled: its `reason`.
const CANCELLED_ON_REQUEST: &str = "a client cancelled it";
/// The reason of runs a stopping daemon ends (SIGTERM, SIGINT).
pub const DAEMON_STOPPED: &str = "the daemon stopped";

impl Runs {
    pub(super) async fn conclude(self: &Arc<Self>, id: &str, uid: u32, mut outcome: Outcome) {
        log_end(id, uid, &outcome);
        let store = self.store.clone();
        let log = self.log_path(id);
        let run = id.to_string();
        let written = blocking(move || {
            if outcome.state == "lost" || (outcome.state == "failed" && outcome.report.is_none()) {
                if let Some(reason) = &outcome.reason {
                    if let Err(err) =
                        crate::log::append_lost(&log, reason, sandbox::clock::unix_ms())
                    {
                        tracing::warn!("run {run}: appending to its log: {err}");
                    }
                }
            }
            outcome.log_records = append_end(&run, &log, &outcome)
                .or_else(|| crate::log::count_records(&log).ok())
                .unwrap_or(0);
            outcome.finished_ms = sandbox::clock::unix_ms();
            store.finish(&run, &outcome).map_err(store_error)
        })
        .await;
        if let Err(err) = written {
            tracing::warn!("run {id}: recording its result: {err}");
        }
        let mut state = lock(&self.state);
        if let Some(live) = state.running.remove(id) {
            decrement(&mut state.running_by_uid, live.uid);
            if let Some(template) = &live.warm_from {
                self.prepare_ahead(&mut state, live.uid, template, Moment::Ended);
            }
        }
        finish_watch(&mut state, id);
        self.dispatch(&mut state);
    }

    /// Cancel a run the caller may see. Returns its state after the call.
    pub async fn cancel(self: &Arc<Self>, id: &str) -> Result<String, ApiError> {
        let queued = {
            let mut state = lock(&self.state);
            if let Some(live) = state.running.get(id) {
                let _ = live.control.send(Control::Cancel(CANCELLED_ON_REQUEST));
                return Ok("running".into());
            }
            match state.queue.iter().position(|run| run.id == id) {
                Some(index) => {
                    let run = state.queue.remove(index);
                    if let Some(run) = &run {
                        decrement(&mut state.queued_by_uid, run.uid);
                    }
                    run.map(|run| run.uid)
                }
                None => None,
            }
        };
        if let Some(uid) = queued {
            self.conclude_unstarted(id, uid, "cancelled", "cancelled before it started")
                .await;
            return Ok("cancelled".into());
        }
        let store = self.store.clone();
        let run = id.to_string();
        let record = blocking(move || store.get(&run).map_err(store_error)).await?;
        Ok(record.map_or_else(|| "unknown".into(), |r| r.state))
    }

    async fn conclude_unstarted(
        self: &Arc<Self>,
        id: &str,
        uid: u32,
        state: &'static str,
        reason: &str,
    ) {
        let store = self.store.clone();
        let run = id.to_string();
        let mut outcome = Outcome {
            state,
            status: None,
            reason: Some(reason.to_string()),
            report: None,
            log_records: 0,
            finished_ms: sandbox::clock::unix_ms(),
        };
        log_end(id, uid, &outcome);
        let log = self.log_path(id);
        let written = blocking(move || {
            outcome.log_records = append_end(&run, &log, &outcome)
                .or_else(|| crate::log::count_records(&log).ok())
                .unwrap_or(0);
            store.finish(&run, &outcome).map_err(store_error)
        });
        if let Err(err) = written.await {
            tracing::warn!("run {id}: recording its result: {err}");
        }
        finish_watch(&mut lock(&self.state), id);
    }

    /// Stop: queued runs are cancelled, running ones get a cancel (SIGTERM,
    /// everything killed after `cancel_grace`) with the reason "the daemon
    /// stopped", and the call returns when all are recorded, their logs
    /// ended with their `end` record, or the grace and [`STOP_MARGIN`] are
    /// up (a run not recorded by then is found lost by the next daemon).
    pub async fn shut_down(self: &Arc<Self>) {
        let (queued, watches) = {
            let mut state = lock(&self.state);
            state.stopping = true;
            let queued: Vec<(String, u32)> =
                state.queue.drain(..).map(|run| (run.id, run.uid)).collect();
            for live in state.running.values() {
                let _ = live.control.send(Control::Cancel(DAEMON_STOPPED));
            }
            let watches: Vec<watch::Receiver<bool>> = state
                .running
                .keys()
                .filter_map(|id| state.over.get(id).cloned())
                .collect();
            (queued, watches)
        };
        for (id, uid) in queued {
            self.conclude_unstarted(
                &id,
                uid,
                "cancelled",
                "the daemon stopped before the run started",
            )
            .await;
        }
        let deadline = self.config.cancel_grace + STOP_MARGIN;
        let all = async {
            for mut over in watches {
                let _ = over.wait_for(|over| *over).await;
            }
        };
        let _ = tokio::time::timeout(deadline, all).await;
    }
}

/// How long past `cancel_grace` a stopping daemon waits for its runs to be
/// recorded: the supervisor's kill, its report and the launcher's news of
/// its end ([`LINGER`](super::driver::LINGER) at most).
const STOP_MARGIN: Duration = Duration::from_secs(6);

/// End the run's log with its `end` record: what its run object says.
/// Append the run's `end` record; the log's records then, counted once
/// (the end's sequence number is how many records the log holds), or None
/// when the append failed.
fn append_end(run: &str, log: &Path, outcome: &Outcome) -> Option<u64> {
    let end = sandbox::launch::protocol::LogEvent::End {
        state: outcome.state.to_string(),
        status: outcome.status,
        reason: outcome.reason.clone(),
        report: outcome.report.clone(),
    };
    crate::log::append(log, end, sandbox::clock::unix_ms())
        .inspect_err(|err| tracing::warn!("run {run}: appending its end to its log: {err}"))
        .ok()
}

/// The daemon's log line of a run's end: how it ended, never its output.
fn log_end(id: &str, uid: u32, outcome: &Outcome) {
    let status = outcome
        .status
        .map_or_else(|| "none".to_string(), |s| s.to_string());
    match outcome.reason.as_deref() {
        Some(reason) => tracing::info!(
            run = %id,
            uid,
            state = %outcome.state,
            status = %status,
            reason = %sandbox::broker::prompt::escape(reason),
            "run ended"
        ),
        None => tracing::info!(
            run = %id,
            uid,
            state = %outcome.state,
            status = %status,
            "run ended"
        ),
    }
}
