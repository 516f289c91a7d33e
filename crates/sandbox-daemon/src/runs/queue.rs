//! Admission and the queue: a run is admitted within the queue's bounds
//! and the caller's share, recorded, and started first come first served
//! as slots free.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::pool::{pool_key, Moment};
use super::{blocking, decrement, lock, new_run_id, store_error, LiveRun, QueuedRun, Runs, State};
use crate::config::Rule;
use crate::error::ApiError;
use crate::resolve::{Caller, Resolved};
use crate::store::RunRecord;
use sandbox::launch::protocol::{RunSpec, ToLauncher};

/// The share of the queue one caller may hold: half, so one busy caller
/// cannot shut everyone else out of a full queue.
pub fn queue_share(max_queue: usize) -> usize {
    max_queue.div_ceil(2).max(1)
}

impl Runs {
    /// Admit, record and queue a resolved run; returns its id.
    pub async fn submit(
        self: &Arc<Self>,
        caller: Caller,
        rule: &Rule,
        resolved: Resolved,
    ) -> Result<String, ApiError> {
        if !self.launcher.is_up() {
            return Err(ApiError::new(
                503,
                "launcher_down",
                "the daemon's launcher is not running, so no run can start",
                "retry shortly; the daemon restarts its launcher once, then needs a restart itself (see its log)",
            )
            .retry_after(5));
        }
        {
            let mut state = lock(&self.state);
            if state.stopping {
                return Err(ApiError::new(
                    503,
                    "queue_full",
                    "the daemon is stopping",
                    "retry once it is back",
                )
                .retry_after(5));
            }
            let queued = state.queue.len() + state.reserved;
            let free_slots = self
                .config
                .max_concurrent
                .saturating_sub(state.running.len());
            if queued >= self.config.max_queue + free_slots {
                return Err(ApiError::new(
                    503,
                    "queue_full",
                    format!(
                        "{queued} runs are waiting (max_queue {})",
                        self.config.max_queue
                    ),
                    "retry after a while, or raise [daemon] max_queue",
                )
                .retry_after(1));
            }
            let share = queue_share(self.config.max_queue);
            let mine = state.queued_by_uid.get(&caller.uid).copied().unwrap_or(0);
            if mine >= share + free_slots {
                return Err(ApiError::new(
                    429,
                    "quota_full",
                    format!("you have {mine} runs waiting, your share of the queue"),
                    "wait for some of your runs to start before submitting more",
                )
                .retry_after(1));
            }
            state.reserved += 1;
            *state.queued_by_uid.entry(caller.uid).or_default() += 1;
        }
        let admitted = self.record(caller, resolved).await;
        let mut state = lock(&self.state);
        state.reserved -= 1;
        let (id, spec) = match admitted {
            Ok(pair) => pair,
            Err(err) => {
                decrement(&mut state.queued_by_uid, caller.uid);
                return Err(err);
            }
        };
        let (sender, receiver) = watch::channel(false);
        state.over.insert(id.clone(), receiver);
        state.over_senders.insert(id.clone(), sender);
        let key = match self.config.pool.enabled {
            true => pool_key(&spec, caller.uid),
            false => None,
        };
        state.queue.push_back(QueuedRun {
            id: id.clone(),
            uid: caller.uid,
            rule_max: rule.max_concurrent,
            spec,
            key,
            warm: None,
        });
        tracing::debug!(run = %id, uid = caller.uid, "run queued");
        self.dispatch(&mut state);
        Ok(id)
    }

    async fn record(
        &self,
        caller: Caller,
        resolved: Resolved,
    ) -> Result<(String, RunSpec), ApiError> {
        let id = new_run_id();
        let dir = self.run_dir(&id);
        let store = self.store.clone();
        let record = RunRecord::queued(
            id.clone(),
            (caller.uid, caller.gid),
            resolved.spec.argv.clone(),
            resolved.profile.clone(),
            resolved.spec.project.display().to_string(),
            sandbox::clock::unix_ms(),
        );
        let mut spec = resolved.spec;
        spec.audit = Some(dir.join("audit.ndjson"));
        // Someone else's run is supervised as that someone: a root
        // supervisor would look at the project, and act for the broker,
        // with root's rights, and a project swapped for a symlink after
        // the checks above would be root's to the run.
        if caller.uid != nix::unistd::geteuid().as_raw() {
            spec.run_as = Some(sandbox::launch::protocol::RunAs {
                run: id.clone(),
                uid: caller.uid,
                gid: caller.gid,
                groups: crate::config::caller_groups(caller.uid, caller.gid),
            });
        }
        let stdin = resolved.stdin;
        let review = spec.policy.filesystem.review.then(|| self.review.clone());
        let uid = caller.uid;
        let spec = blocking(move || {
            if let Some(review) = review {
                spec.review_store = Some(review.store_of(uid)?);
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|err| ApiError::internal(format!("creating {}: {err}", dir.display())))?;
            if let Some(bytes) = stdin {
                write_new(&dir.join("stdin"), &bytes)?;
            }
            write_new(&dir.join("log.ndjson"), b"")?;
            store.insert(&record).map_err(store_error)?;
            Ok(spec)
        })
        .await?;
        Ok((id, spec))
    }

    /// Start queued runs while slots are free, first come first served
    /// among callers under their own bound.
    pub(super) fn dispatch(self: &Arc<Self>, state: &mut State) {
        let max = self.config.max_concurrent;
        // A warm sandbox holds a slot (its caller's and the daemon's) like
        // a run: past its idle time it has discarded itself, and one the
        // launcher never reported on (the launcher died) is forgotten.
        let stale = self.config.pool.idle + Duration::from_secs(10);
        state.pool.retain(|_, entry| entry.asked.elapsed() < stale);
        // A stopping daemon starts nothing; what is still queued is found
        // lost ("while the run was queued") by the next one.
        while !state.stopping {
            let fits = |state: &State, run: &QueuedRun| {
                let running = state.running_by_uid.get(&run.uid).copied().unwrap_or(0);
                let mine = state.warm(Some(run.uid), run.key.as_ref());
                let all = state.warm(None, run.key.as_ref());
                state.running.len() + all < max
                    && run.rule_max.is_none_or(|most| running + mine < most)
            };
            let eligible = state.queue.iter().position(|run| fits(state, run));
            let Some(index) = eligible else {
                // Warm sandboxes give way to runs waiting for their slots,
                // one at a time: the newest not ready yet first, then the
                // newest ready (which a waiting run of its key would take).
                let newest = |ready: bool| {
                    state
                        .pool
                        .iter()
                        .rev()
                        .find(|(_, entry)| entry.ready == ready)
                        .map(|(gen, _)| *gen)
                };
                let give_way = newest(false).or_else(|| newest(true));
                let Some(gen) = give_way.filter(|_| !state.queue.is_empty()) else {
                    return;
                };
                if let Some(entry) = state.pool.remove(&gen) {
                    self.tell_launcher(ToLauncher::Drain {
                        key: entry.key,
                        gen: Some(gen),
                    });
                }
                continue;
            };
            let Some(mut run) = state.queue.remove(index) else {
                return;
            };
            decrement(&mut state.queued_by_uid, run.uid);
            *state.running_by_uid.entry(run.uid).or_default() += 1;
            if let Some(key) = &run.key {
                run.warm = state.take_ready(key);
            }
            let warm_from = run
                .key
                .clone()
                .map(|key| (key, run.rule_max, run.spec.clone()));
            let (control, controls) = mpsc::unbounded_channel();
            state.running.insert(
                run.id.clone(),
                LiveRun {
                    uid: run.uid,
                    warm_from: warm_from.clone(),
                    control,
                    questions: BTreeMap::new(),
                },
            );
            // The sandbox for this run's successor, prepared while it runs.
            if let Some(template) = &warm_from {
                self.prepare_ahead(state, run.uid, template, Moment::Started);
            }
            tracing::info!(
                run = %run.id,
                uid = run.uid,
                warm = run.warm.is_some(),
                command = %crate::journal::command_line(&run.spec.argv),
                "run started"
            );
            let this = self.clone();
            tokio::spawn(async move {
                let (id, uid) = (run.id.clone(), run.uid);
                let outcome = this.drive(run, controls).await;
                this.conclude(&id, uid, outcome).await;
            });
        }
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<(), ApiError> {
    use std::io::Write;
    let mut file = sandbox::safe_file::create_new(path, 0o600)
        .map_err(|err| ApiError::internal(err.to_string()))?;
    file.write_all(bytes)
        .map_err(|err| ApiError::internal(format!("writing {}: {err}", path.display())))
}
