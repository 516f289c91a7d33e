//! The warm pool: sandboxes prepared ahead for a caller's next run like
//! the last, each holding a slot like a run, given way to runs waiting.

use std::sync::Arc;

use serde::Serialize;

use super::{lock, Runs, State};
use sandbox::launch::protocol::{FromLauncher, RunSpec, ToLauncher};

/// A warm sandbox the daemon asked the launcher for.
pub(super) struct PoolEntry {
    pub(super) uid: u32,
    pub(super) gen: u64,
    pub(super) ready: bool,
    pub(super) asked: std::time::Instant,
}

/// The key a warm sandbox serves (`docs/src/launcher.md`): the caller, the
/// digest of the resolved policy (its timeout and output cap aside, which
/// a commit sets), the project by path and device/inode, the network mode.
pub(super) fn pool_key(spec: &RunSpec, uid: u32) -> Option<String> {
    use sha2::Digest;
    use std::os::unix::fs::MetadataExt;
    let project = std::fs::metadata(&spec.project).ok()?;
    let mut policy = spec.policy.clone();
    policy.limits.timeout = None;
    policy.limits.output = None;
    let digest = sha2::Sha256::digest(serde_json::to_vec(&policy).ok()?);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{uid}:{hex}:{}:{}:{}:{:?}",
        spec.project.display(),
        project.dev(),
        project.ino(),
        spec.policy.network.mode
    ))
}

impl State {
    /// Warm sandboxes held for `uid` (all callers' with `None`), not
    /// counting the ready one of `key`, which a run of that key takes in
    /// place of a slot of its own.
    pub(super) fn warm(&self, uid: Option<u32>, key: Option<&String>) -> usize {
        self.pool
            .iter()
            .filter(|(k, entry)| {
                uid.is_none_or(|uid| entry.uid == uid) && !(entry.ready && Some(*k) == key)
            })
            .count()
    }
}

/// A caller's warm sandboxes, for `/v1/info`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PoolFigures {
    /// `[pool] enabled`.
    pub enabled: bool,
    /// Ready for a run.
    pub ready: usize,
    /// Asked for, not ready yet.
    pub preparing: usize,
}

impl Runs {
    /// The caller's warm sandboxes: (ready, being prepared). A client
    /// that wants its next run warm (the pool benchmark) waits for one to
    /// be ready.
    pub fn pool_of(&self, uid: u32) -> PoolFigures {
        let state = lock(&self.state);
        let mine = state.pool.values().filter(|entry| entry.uid == uid);
        let (ready, preparing) = mine.fold((0, 0), |(r, p), entry| match entry.ready {
            true => (r + 1, p),
            false => (r, p + 1),
        });
        PoolFigures {
            enabled: self.config.pool.enabled,
            ready,
            preparing,
        }
    }

    /// Ask for a warm sandbox for the next run like `run`, when none is
    /// there and one fits the caller's and the daemon's slots beside the
    /// runs.
    pub(super) fn refill(
        self: &Arc<Self>,
        state: &mut State,
        uid: u32,
        (key, rule_max, spec): (String, Option<usize>, RunSpec),
    ) {
        let key = &key;
        if state.pool.contains_key(key) || !state.queue.is_empty() {
            return;
        }
        let running = state.running_by_uid.get(&uid).copied().unwrap_or(0);
        let room = state.running.len() + state.warm(None, None) < self.config.max_concurrent
            && rule_max.is_none_or(|most| running + state.warm(Some(uid), None) < most);
        if !room {
            return;
        }
        if state.pool.is_empty() {
            self.listen_to_pool();
        }
        state.pool_gen += 1;
        let gen = state.pool_gen;
        state.pool.insert(
            key.clone(),
            PoolEntry {
                uid,
                gen,
                ready: false,
                asked: std::time::Instant::now(),
            },
        );
        let mut spec = spec;
        spec.audit = None;
        spec.stdin = false;
        // Its own delegated cgroup: the run's name is the run's. With the
        // daemon's pid: two daemons' launchers may share a cgroup, and
        // each counts its warm sandboxes from 1.
        if let Some(run_as) = &mut spec.run_as {
            run_as.run = format!("warm-{}-{gen}", std::process::id());
        }
        self.tell_launcher(ToLauncher::Warm {
            key: key.clone(),
            gen,
            spec: Box::new(spec),
            count: 1,
            idle_ms: u64::try_from(self.config.pool.idle.as_millis()).unwrap_or(u64::MAX),
            budget: self.config.pool.budget,
        });
    }

    pub(super) fn tell_launcher(&self, request: ToLauncher) {
        let launcher = self.launcher.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(err) = launcher.send(&request) {
                tracing::warn!("the pool's request to the launcher: {err}");
            }
        });
    }

    /// Hear the launcher's news of warm sandboxes (once per daemon).
    fn listen_to_pool(self: &Arc<Self>) {
        if self
            .pool_listening
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let mut news = self.launcher.pool_events();
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(message) = news.recv().await {
                let Some(this) = this.upgrade() else { return };
                let mut state = lock(&this.state);
                match message {
                    FromLauncher::WarmReady { key, gen } => {
                        if let Some(entry) = state.pool.get_mut(&key).filter(|e| e.gen == gen) {
                            entry.ready = true;
                        }
                    }
                    FromLauncher::WarmDiscarded { key, gen, .. }
                        if state.pool.get(&key).is_some_and(|e| e.gen == gen) =>
                    {
                        state.pool.remove(&key);
                        this.dispatch(&mut state);
                    }
                    _ => {}
                }
            }
        });
    }
}
