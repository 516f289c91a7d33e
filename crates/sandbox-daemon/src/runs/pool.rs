//! The warm pool: sandboxes prepared ahead for a caller's next runs like
//! the ones in flight, each holding a slot like a run, given way to runs
//! waiting.
//!
//! How many: as many as the key has runs in flight (queued or running),
//! since each is a client that will likely submit again, asked for when a
//! run of the key starts, so that the next ones find a sandbox ready
//! instead of waiting for one prepared after the run ended; and one more
//! when a run of the key ends. Bounded like runs: a warm sandbox holds
//! one of the caller's slots (its rule's `max_concurrent`) and one of the
//! daemon's, and none is asked for while a run waits for a slot. A key
//! whose warm sandbox the launcher discarded before its idle time (its
//! project changed, or it could not be prepared) goes back to one sandbox
//! prepared after each run, so runs that write their project do not pay
//! for sandboxes their writes discard; a sandbox of the key prepared while
//! its runs were in flight and then taken ready brings prepare-ahead back.

use std::sync::Arc;

use serde::Serialize;

use super::{lock, Runs, State};
use sandbox::launch::protocol::{FromLauncher, RunSpec, ToLauncher, WarmPick};

/// A warm sandbox the daemon asked the launcher for.
pub(super) struct PoolEntry {
    pub(super) key: String,
    pub(super) uid: u32,
    pub(super) ready: bool,
    pub(super) asked: std::time::Instant,
    /// Asked for while runs of its key were in flight: taken ready, it
    /// shows that the key's runs leave its project alone.
    pub(super) ahead: bool,
    /// What it was made from, to replace it.
    template: Template,
}

/// What a key's warm sandboxes are made from: its key, the rule's bound
/// on the caller's runs, and the run's spec.
pub(super) type Template = (String, Option<usize>, RunSpec);

/// The key a warm sandbox serves (`docs/src/launcher.md`): the caller, the
/// digest of the resolved policy (its timeout and output cap aside, which
/// a commit sets), the project by path and device/inode, the network mode.
pub(super) fn pool_key(spec: &RunSpec, uid: u32) -> Option<String> {
    use sha2::Digest;
    use std::os::unix::fs::MetadataExt;
    // A review run's changes go to its caller's store, which the spec of
    // a warm sandbox made ahead does not carry: review runs start cold.
    if spec.policy.filesystem.review {
        return None;
    }
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

/// Keys remembered as discarded at most: past it the memory starts over
/// (each key then prepares ahead once more), so a daemon serving many
/// projects does not grow it without end.
const DISCARDED_KEYS: usize = 1024;

/// Why a run ends or starts, for [`State::warm_to_ask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Moment {
    /// A run of the key took its slot.
    Started,
    /// A run of the key ended (and left the running set).
    Ended,
}

impl State {
    /// Warm sandboxes held for `uid` (all callers' with `None`), not
    /// counting one ready of `key`, which a run of that key takes in place
    /// of a slot of its own.
    pub(super) fn warm(&self, uid: Option<u32>, key: Option<&String>) -> usize {
        let held = self
            .pool
            .values()
            .filter(|entry| uid.is_none_or(|uid| entry.uid == uid))
            .count();
        let taken_in_place = key.is_some_and(|key| {
            self.pool
                .values()
                .any(|entry| entry.ready && entry.key == *key && uid.is_none_or(|u| entry.uid == u))
        });
        held - usize::from(taken_in_place)
    }

    /// Take the oldest ready warm sandbox of `key` out of the pool: it is
    /// the run's, and never counted or handed out again.
    pub(super) fn take_ready(&mut self, key: &str) -> Option<WarmPick> {
        let gen = self
            .pool
            .iter()
            .find(|(_, entry)| entry.ready && entry.key == key)
            .map(|(gen, _)| *gen)?;
        if self.pool.remove(&gen).is_some_and(|entry| entry.ahead) {
            self.pool_discarded.remove(key);
        }
        Some(WarmPick {
            key: key.to_string(),
            gen,
        })
    }

    /// Runs of `key` queued or running.
    pub(super) fn in_flight(&self, key: &str) -> usize {
        let queued = self
            .queue
            .iter()
            .filter(|run| run.key.as_deref() == Some(key))
            .count();
        let running = self
            .running
            .values()
            .filter(|live| live.warm_from.as_ref().is_some_and(|(k, _, _)| k == key))
            .count();
        queued + running
    }

    /// How many warm sandboxes of `key` to ask for now (see the module's
    /// comment), within the caller's bound `rule_max` and the daemon's
    /// `max_concurrent`, counted with the runs.
    pub(super) fn warm_to_ask(
        &self,
        key: &str,
        uid: u32,
        rule_max: Option<usize>,
        max_concurrent: usize,
        moment: Moment,
    ) -> usize {
        if !self.queue.is_empty() {
            return 0;
        }
        let wanted = match (moment, self.pool_discarded.contains(key)) {
            (Moment::Started, false) => self.in_flight(key),
            (Moment::Started, true) => 0,
            (Moment::Ended, false) => self.in_flight(key) + 1,
            (Moment::Ended, true) => 1,
        };
        let held = self.pool.values().filter(|entry| entry.key == key).count();
        let running = self.running_by_uid.get(&uid).copied().unwrap_or(0);
        let daemon_room = max_concurrent.saturating_sub(self.running.len() + self.warm(None, None));
        let caller_room = rule_max.map_or(usize::MAX, |most| {
            most.saturating_sub(running + self.warm(Some(uid), None))
        });
        wanted
            .saturating_sub(held)
            .min(daemon_room)
            .min(caller_room)
    }

    /// Count a warm sandbox asked for; its number.
    pub(super) fn add_warm(&mut self, template: &Template, uid: u32) -> u64 {
        self.pool_gen += 1;
        let key = &template.0;
        let ahead = self.in_flight(key) > 0;
        self.pool.insert(
            self.pool_gen,
            PoolEntry {
                key: key.clone(),
                uid,
                ready: false,
                asked: std::time::Instant::now(),
                ahead,
                template: template.clone(),
            },
        );
        self.pool_gen
    }

    /// The launcher discarded a warm sandbox of `key` before its idle time
    /// (its project changed, it could not be prepared): prepare one after
    /// each run only.
    fn discarded(&mut self, key: String) {
        if self.pool_discarded.len() >= DISCARDED_KEYS {
            self.pool_discarded.clear();
        }
        self.pool_discarded.insert(key);
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

    /// Ask for the warm sandboxes a run of `template`'s key starting or
    /// ending calls for ([`State::warm_to_ask`]).
    pub(super) fn prepare_ahead(
        self: &Arc<Self>,
        state: &mut State,
        uid: u32,
        template: &Template,
        moment: Moment,
    ) {
        let (key, rule_max, _) = template;
        let count = state.warm_to_ask(key, uid, *rule_max, self.config.max_concurrent, moment);
        for _ in 0..count {
            self.ask_warm(state, uid, template);
        }
    }

    fn ask_warm(self: &Arc<Self>, state: &mut State, uid: u32, template: &Template) {
        if state.pool.is_empty() {
            self.listen_to_pool();
        }
        let gen = state.add_warm(template, uid);
        let (key, _, spec) = template;
        let mut spec = spec.clone();
        spec.audit = None;
        spec.stdin = false;
        // Its own delegated cgroup: the run's name is the run's. With the
        // daemon's pid: two daemons' launchers may share a cgroup, and
        // each counts its warm sandboxes from 1.
        if let Some(run_as) = &mut spec.run_as {
            run_as.run = format!("warm-{}-{gen}", std::process::id());
        }
        self.tell_launcher(ToLauncher::Warm {
            key: key.to_string(),
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
                        if let Some(entry) = state.pool.get_mut(&gen).filter(|e| e.key == key) {
                            entry.ready = true;
                        }
                    }
                    // One the daemon drained or handed to a run is no
                    // longer in the pool: only the launcher's own
                    // discards are news.
                    FromLauncher::WarmDiscarded { key, gen, reason }
                        if state.pool.get(&gen).is_some_and(|e| e.key == key) =>
                    {
                        tracing::debug!(%reason, "a warm sandbox was discarded");
                        let idle = this.config.pool.idle;
                        let entry = state.pool.remove(&gen);
                        if let Some(entry) = entry.filter(|e| e.asked.elapsed() < idle) {
                            state.discarded(key);
                            // Prepared during runs of its key that have all
                            // ended since (their writes, most likely, came
                            // after the refill at their end was weighed):
                            // one after them, once. One prepared with no run
                            // in flight is not replaced, so a project that
                            // keeps changing by itself does not keep a
                            // sandbox rebuilding.
                            if entry.ahead && state.in_flight(&entry.key) == 0 {
                                let template = &entry.template;
                                this.prepare_ahead(&mut state, entry.uid, template, Moment::Ended);
                            }
                        }
                        this.dispatch(&mut state);
                    }
                    _ => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LiveRun, QueuedRun};
    use super::*;
    use std::collections::BTreeMap;

    const KEY: &str = "1000:digest:/project";

    fn spec() -> RunSpec {
        RunSpec::new(
            sandbox::profile::load("strict").expect("the strict profile"),
            vec!["/bin/true".into()],
            "/tmp".into(),
        )
    }

    fn start(state: &mut State, id: &str, uid: u32, key: &str) {
        let (control, _) = tokio::sync::mpsc::unbounded_channel();
        state.running.insert(
            id.to_string(),
            LiveRun {
                uid,
                warm_from: Some((key.to_string(), None, spec())),
                control,
                questions: BTreeMap::new(),
            },
        );
        *state.running_by_uid.entry(uid).or_default() += 1;
    }

    fn end(state: &mut State, id: &str) {
        if let Some(live) = state.running.remove(id) {
            super::super::decrement(&mut state.running_by_uid, live.uid);
        }
    }

    fn ask(state: &mut State, uid: u32, key: &str, count: usize) {
        for _ in 0..count {
            state.add_warm(&(key.to_string(), None, spec()), uid);
        }
    }

    fn ready_all(state: &mut State) {
        for entry in state.pool.values_mut() {
            entry.ready = true;
        }
    }

    /// Concurrent clients of one key: each run that starts asks for the
    /// sandbox of the run after it, so there are as many ready as runs
    /// were in flight, and each next run finds one.
    #[test]
    fn several_are_prepared_ahead_for_one_key_as_its_runs_start() {
        let mut state = State::default();
        for n in 1..=4 {
            start(&mut state, &format!("run{n}"), 1000, KEY);
            let count = state.warm_to_ask(KEY, 1000, None, 16, Moment::Started);
            ask(&mut state, 1000, KEY, count);
        }
        assert_eq!(state.pool.len(), 4, "one ahead for each run in flight");
        ready_all(&mut state);
        for n in 1..=4 {
            end(&mut state, &format!("run{n}"));
            let count = state.warm_to_ask(KEY, 1000, None, 16, Moment::Ended);
            assert_eq!(count, 0, "the ended run's successor is already there");
        }
        let picks: Vec<u64> = (0..4)
            .map(|_| state.take_ready(KEY).expect("a ready sandbox").gen)
            .collect();
        assert_eq!(picks, [1, 2, 3, 4], "each a different one, oldest first");
        assert!(state.take_ready(KEY).is_none(), "none is handed out twice");
        assert!(state.pool.is_empty());
    }

    /// A warm sandbox holds a slot like a run: never more of them and of
    /// the caller's runs than its rule allows, nor more than the daemon's
    /// slots, and none while a run waits for a slot.
    #[test]
    fn warm_sandboxes_stay_within_the_callers_quota_and_the_daemons_slots() {
        let mut state = State::default();
        for n in 1..=2 {
            start(&mut state, &format!("run{n}"), 1000, KEY);
            let count = state.warm_to_ask(KEY, 1000, Some(3), 16, Moment::Started);
            ask(&mut state, 1000, KEY, count);
        }
        assert_eq!(state.running.len() + state.pool.len(), 3, "the rule's 3");
        end(&mut state, "run1");
        assert_eq!(
            state.warm_to_ask(KEY, 1000, Some(3), 16, Moment::Ended),
            1,
            "run1's slot goes to the successor of run2, which had none"
        );
        ask(&mut state, 1000, KEY, 1);
        assert_eq!(state.running.len() + state.pool.len(), 3);
        let other = "2000:digest:/other";
        start(&mut state, "theirs", 2000, other);
        let count = state.warm_to_ask(other, 2000, None, 5, Moment::Started);
        assert_eq!(count, 1, "the daemon's 5 slots: 2 runs and 2 warm held");
        ask(&mut state, 2000, other, count);
        assert_eq!(
            state.warm_to_ask(other, 2000, None, 5, Moment::Ended),
            0,
            "every slot is held"
        );
        state.queue.push_back(QueuedRun {
            id: "waiting".into(),
            uid: 3000,
            rule_max: None,
            spec: spec(),
            key: None,
            warm: None,
        });
        end(&mut state, "theirs");
        assert_eq!(
            state.warm_to_ask(other, 2000, None, 16, Moment::Ended),
            0,
            "a run waiting for a slot comes first"
        );
    }

    /// The ready one of the run's own key is the run's slot: a run at its
    /// caller's bound still starts when a sandbox of its key is ready.
    #[test]
    fn a_ready_sandbox_of_the_runs_key_is_its_slot() {
        let mut state = State::default();
        ask(&mut state, 1000, KEY, 2);
        ready_all(&mut state);
        let key = KEY.to_string();
        assert_eq!(state.warm(Some(1000), Some(&key)), 1);
        assert_eq!(state.warm(Some(1000), Some(&"another".to_string())), 2);
        assert_eq!(state.warm(Some(2000), Some(&key)), 0);
    }

    /// A key whose warm sandbox was discarded (its project changed under
    /// it) prepares one after each run, not ahead of runs that may change
    /// the project again; once one is used it prepares ahead again.
    #[test]
    fn a_discarded_key_prepares_after_each_run_until_a_warm_run_succeeds() {
        let mut state = State::default();
        start(&mut state, "run1", 1000, KEY);
        start(&mut state, "run2", 1000, KEY);
        state.discarded(KEY.to_string());
        assert_eq!(state.warm_to_ask(KEY, 1000, None, 16, Moment::Started), 0);
        end(&mut state, "run1");
        end(&mut state, "run2");
        assert_eq!(state.warm_to_ask(KEY, 1000, None, 16, Moment::Ended), 1);
        ask(&mut state, 1000, KEY, 1);
        assert_eq!(state.warm_to_ask(KEY, 1000, None, 16, Moment::Ended), 0);
        ready_all(&mut state);
        assert!(state.take_ready(KEY).is_some());
        start(&mut state, "run3", 1000, KEY);
        assert_eq!(
            state.warm_to_ask(KEY, 1000, None, 16, Moment::Started),
            0,
            "one prepared with no run in flight says nothing of runs' writes"
        );
        // One prepared while run3 was in flight, and taken ready.
        end(&mut state, "run3");
        start(&mut state, "run4", 1000, KEY);
        assert_eq!(state.warm_to_ask(KEY, 1000, None, 16, Moment::Ended), 1);
        ask(&mut state, 1000, KEY, 1);
        ready_all(&mut state);
        assert!(state.take_ready(KEY).is_some());
        start(&mut state, "run5", 1000, KEY);
        assert_eq!(
            state.warm_to_ask(KEY, 1000, None, 16, Moment::Started),
            2,
            "prepare-ahead is back: one for each run in flight"
        );
    }
}
