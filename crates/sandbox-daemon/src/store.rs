//! The run records: one SQLite database in the state directory.
//!
//! SQLite because a record must be on disk before the run starts and
//! survive a SIGKILL of the daemon, with no server to run beside it; WAL
//! with `synchronous=NORMAL` keeps a commit to one append (an fsync only at
//! checkpoints) and a power loss can lose only the last commits, never
//! corrupt the file. Every call blocks: the runtime calls it from
//! `spawn_blocking`.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;

/// Why the database failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A statement failed.
    #[error("the run database {step}: {source}")]
    Sql {
        /// What the daemon was doing.
        step: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
}

fn sql(step: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |source| StoreError::Sql { step, source }
}

/// One run as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    /// Run id.
    pub id: String,
    /// Caller uid.
    pub uid: u32,
    /// Caller gid.
    #[serde(skip)]
    pub gid: u32,
    /// queued, running, exited, failed, cancelled, lost.
    pub state: String,
    /// argv.
    pub command: Vec<String>,
    /// Profile name.
    pub profile: String,
    /// Project root.
    pub project: String,
    /// Submitted.
    pub created_ms: u64,
    /// The sandbox existed.
    pub started_ms: Option<u64>,
    /// The run ended.
    pub finished_ms: Option<u64>,
    /// Shell-style status.
    pub status: Option<i32>,
    /// Why it failed or was lost.
    pub reason: Option<String>,
    /// The `--report` JSON.
    pub report: Option<serde_json::Value>,
    /// Lines of the run's log (counted at the end; live runs: at the time of the request).
    pub log_records: Option<u64>,
    /// Host pid of the run's supervisor.
    #[serde(skip)]
    pub supervisor_pid: Option<i32>,
    /// Its start time (`/proc/PID/stat` field 22).
    #[serde(skip)]
    pub supervisor_start: Option<u64>,
    /// Host pid of the sandbox's init.
    #[serde(skip)]
    pub init_pid: Option<i32>,
    /// Its start time.
    #[serde(skip)]
    pub init_start: Option<u64>,
}

impl RunRecord {
    /// A run just submitted: queued, nothing known yet of how it goes.
    pub fn queued(
        id: String,
        (uid, gid): (u32, u32),
        command: Vec<String>,
        profile: String,
        project: String,
        created_ms: u64,
    ) -> RunRecord {
        RunRecord {
            id,
            uid,
            gid,
            state: "queued".into(),
            command,
            profile,
            project,
            created_ms,
            started_ms: None,
            finished_ms: None,
            status: None,
            reason: None,
            report: None,
            log_records: None,
            supervisor_pid: None,
            supervisor_start: None,
            init_pid: None,
            init_start: None,
        }
    }

    /// Whether the run is over.
    pub fn is_finished(&self) -> bool {
        !matches!(self.state.as_str(), "queued" | "running")
    }
}

/// The database.
pub struct Store {
    connection: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    state TEXT NOT NULL,
    command TEXT NOT NULL,
    profile TEXT NOT NULL,
    project TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    started_ms INTEGER,
    finished_ms INTEGER,
    status INTEGER,
    reason TEXT,
    report TEXT,
    log_records INTEGER,
    supervisor_pid INTEGER,
    supervisor_start INTEGER,
    init_pid INTEGER,
    init_start INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs(state);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created_ms);
";

const COLUMNS: &str = "id, uid, gid, state, command, profile, project, created_ms, started_ms, finished_ms, status, reason, report, log_records, supervisor_pid, supervisor_start, init_pid, init_start";

fn from_row(row: &Row<'_>) -> rusqlite::Result<RunRecord> {
    let command: String = row.get(4)?;
    let report: Option<String> = row.get(12)?;
    Ok(RunRecord {
        id: row.get(0)?,
        uid: row.get(1)?,
        gid: row.get(2)?,
        state: row.get(3)?,
        command: serde_json::from_str(&command).unwrap_or_default(),
        profile: row.get(5)?,
        project: row.get(6)?,
        created_ms: row.get(7)?,
        started_ms: row.get(8)?,
        finished_ms: row.get(9)?,
        status: row.get(10)?,
        reason: row.get(11)?,
        report: report.and_then(|text| serde_json::from_str(&text).ok()),
        log_records: row.get(13)?,
        supervisor_pid: row.get(14)?,
        supervisor_start: row.get(15)?,
        init_pid: row.get(16)?,
        init_start: row.get(17)?,
    })
}

/// The result of a run, written once when it ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// exited, failed, cancelled or lost.
    pub state: &'static str,
    /// Shell-style status.
    pub status: Option<i32>,
    /// Why it failed.
    pub reason: Option<String>,
    /// The report.
    pub report: Option<serde_json::Value>,
    /// Lines in the log.
    pub log_records: u64,
    /// When it ended.
    pub finished_ms: u64,
}

/// One statement, compiled once per connection: SQLite's parser was a
/// tenth of the daemon's CPU under load when each run's five writes
/// compiled their statements again (`perf`, `scripts/bench-daemon`).
fn execute(
    c: &Connection,
    step: &'static str,
    statement: &str,
    params: impl rusqlite::Params,
) -> Result<(), StoreError> {
    c.prepare_cached(statement)
        .and_then(|mut prepared| prepared.execute(params))
        .map(drop)
        .map_err(sql(step))
}

impl Store {
    /// Open (or create) the database.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let connection = Connection::open(path).map_err(sql("open"))?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(sql("journal_mode=WAL"))?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql("synchronous=NORMAL"))?;
        connection
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sql("busy_timeout"))?;
        // The records are small and read by id: a 512 KiB page cache
        // instead of SQLite's 2 MiB keeps the daemon's resting size down.
        connection
            .pragma_update(None, "cache_size", -512)
            .map_err(sql("cache_size"))?;
        connection.execute_batch(SCHEMA).map_err(sql("schema"))?;
        Ok(Store {
            connection: Mutex::new(connection),
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // A panic while holding the lock leaves a connection that is still
        // consistent (SQLite rolls back an open statement on its own).
        let guard = self
            .connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&guard)
    }

    /// Insert a new run (state `queued`).
    pub fn insert(&self, run: &RunRecord) -> Result<(), StoreError> {
        let command = serde_json::to_string(&run.command).unwrap_or_else(|_| "[]".into());
        self.with(|c| {
            execute(c, "insert", "INSERT INTO runs (id, uid, gid, state, command, profile, project, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", params![run.id, run.uid, run.gid, run.state, command, run.profile, run.project, run.created_ms])
        })
    }

    /// The run took a slot.
    pub fn set_running(&self, id: &str) -> Result<(), StoreError> {
        self.with(|c| {
            execute(
                c,
                "set running",
                "UPDATE runs SET state = 'running' WHERE id = ?1",
                params![id],
            )
        })
    }

    /// The launcher started the run's supervisor.
    pub fn set_supervisor(&self, id: &str, pid: i32, start: Option<u64>) -> Result<(), StoreError> {
        self.with(|c| {
            execute(
                c,
                "set supervisor",
                "UPDATE runs SET supervisor_pid = ?2, supervisor_start = ?3 WHERE id = ?1",
                params![id, pid, start],
            )
        })
    }

    /// The sandbox exists.
    pub fn set_started(
        &self,
        id: &str,
        init_pid: i32,
        init_start: Option<u64>,
        started_ms: u64,
    ) -> Result<(), StoreError> {
        self.with(|c| {
            execute(
                c,
                "set started",
                "UPDATE runs SET init_pid = ?2, init_start = ?3, started_ms = ?4 WHERE id = ?1",
                params![id, init_pid, init_start, started_ms],
            )
        })
    }

    /// Write the run's result.
    pub fn finish(&self, id: &str, outcome: &Outcome) -> Result<(), StoreError> {
        let report = outcome.report.as_ref().map(|r| r.to_string());
        self.with(|c| {
            execute(c, "finish", "UPDATE runs SET state = ?2, status = ?3, reason = ?4, report = ?5, log_records = ?6, finished_ms = ?7 WHERE id = ?1", params![id, outcome.state, outcome.status, outcome.reason, report, outcome.log_records, outcome.finished_ms])
        })
    }

    /// One run.
    pub fn get(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.with(|c| {
            c.prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"))
                .and_then(|mut prepared| prepared.query_row(params![id], from_row))
                .optional()
                .map_err(sql("get"))
        })
    }

    /// Runs newest first, of one uid (or all), in one state (or any).
    pub fn list(
        &self,
        uid: Option<u32>,
        state: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.with(|c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM runs WHERE (?1 IS NULL OR uid = ?1) AND (?2 IS NULL OR state = ?2) ORDER BY created_ms DESC, rowid DESC LIMIT ?3"
                ))
                .map_err(sql("list"))?;
            let rows = stmt
                .query_map(params![uid, state, limit], from_row)
                .map_err(sql("list"))?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql("list"))
        })
    }

    /// Remove a run's record.
    pub fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.with(|c| execute(c, "delete", "DELETE FROM runs WHERE id = ?1", params![id]))
    }

    /// At start: every run that was queued or running when the daemon
    /// stopped is lost. Returns them as they were recorded (pids included),
    /// so what survived of them can be killed.
    pub fn recover(&self, now_ms: u64) -> Result<Vec<RunRecord>, StoreError> {
        self.with(|c| {
            let mut stmt = c
                .prepare(&format!(
                    "SELECT {COLUMNS} FROM runs WHERE state IN ('queued', 'running')"
                ))
                .map_err(sql("recover"))?;
            let runs = stmt
                .query_map([], from_row)
                .map_err(sql("recover"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql("recover"))?;
            for run in &runs {
                execute(
                    c,
                    "recover",
                    "UPDATE runs SET state = 'lost', reason = ?2, finished_ms = ?3 WHERE id = ?1",
                    params![
                        run.id,
                        format!("the daemon stopped while the run was {}", run.state),
                        now_ms
                    ],
                )?;
            }
            Ok(runs)
        })
    }

    /// Delete finished runs older than `keep_for_ms` and beyond the newest
    /// `keep_runs`; returns their ids (their spool goes too).
    pub fn prune(
        &self,
        now_ms: u64,
        keep_runs: u64,
        keep_for_ms: u64,
    ) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            let cutoff = now_ms.saturating_sub(keep_for_ms);
            let mut stmt = c
                .prepare(
                    "SELECT id FROM runs WHERE state NOT IN ('queued', 'running') AND (created_ms < ?1 OR id NOT IN (SELECT id FROM runs WHERE state NOT IN ('queued', 'running') ORDER BY created_ms DESC, rowid DESC LIMIT ?2))",
                )
                .map_err(sql("prune"))?;
            let ids = stmt
                .query_map(params![cutoff, keep_runs], |row| row.get::<_, String>(0))
                .map_err(sql("prune"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql("prune"))?;
            for id in &ids {
                execute(c, "prune", "DELETE FROM runs WHERE id = ?1", params![id])?;
            }
            Ok(ids)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, uid: u32, created_ms: u64) -> RunRecord {
        RunRecord::queued(
            id.into(),
            (uid, uid),
            vec!["/bin/true".into()],
            "strict".into(),
            "/srv".into(),
            created_ms,
        )
    }

    fn outcome(at: u64) -> Outcome {
        Outcome {
            state: "exited",
            status: Some(0),
            reason: None,
            report: Some(serde_json::json!({"version": 1})),
            log_records: 3,
            finished_ms: at,
        }
    }

    #[test]
    fn a_run_is_recorded_and_finished() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("sandbox.db")).unwrap();
        store.insert(&record("a", 1000, 10)).unwrap();
        assert_eq!(store.get("a").unwrap().unwrap().state, "queued");
        store.set_running("a").unwrap();
        store.set_started("a", 4242, Some(77), 11).unwrap();
        store.finish("a", &outcome(12)).unwrap();
        let run = store.get("a").unwrap().unwrap();
        assert_eq!(run.state, "exited");
        assert_eq!(run.status, Some(0));
        assert_eq!(run.init_pid, Some(4242));
        assert_eq!(run.init_start, Some(77));
        assert_eq!(run.report, Some(serde_json::json!({"version": 1})));
        assert_eq!(run.log_records, Some(3));
        assert!(store.get("b").unwrap().is_none());
        store.insert(&record("b", 1001, 20)).unwrap();
        let mine = store.list(Some(1000), None, 100).unwrap();
        assert_eq!(
            mine.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        let all = store.list(None, None, 100).unwrap();
        assert_eq!(
            all.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["b", "a"]
        );
        assert_eq!(store.list(None, Some("queued"), 100).unwrap().len(), 1);
        store.delete("a").unwrap();
        assert!(store.get("a").unwrap().is_none());
    }

    #[test]
    fn a_restart_marks_in_flight_runs_lost_and_keeps_results() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandbox.db");
        {
            let store = Store::open(&path).unwrap();
            store.insert(&record("done", 1, 1)).unwrap();
            store.finish("done", &outcome(2)).unwrap();
            store.insert(&record("waiting", 1, 3)).unwrap();
            store.insert(&record("busy", 1, 4)).unwrap();
            store.set_running("busy").unwrap();
            store.set_started("busy", 99, Some(5), 5).unwrap();
            // Dropped without any shutdown, as a SIGKILL leaves it.
        }
        let store = Store::open(&path).unwrap();
        let lost = store.recover(100).unwrap();
        let mut ids: Vec<_> = lost.iter().map(|r| r.id.clone()).collect();
        ids.sort();
        assert_eq!(ids, ["busy", "waiting"]);
        assert_eq!(
            lost.iter().find(|r| r.id == "busy").unwrap().init_pid,
            Some(99)
        );
        let busy = store.get("busy").unwrap().unwrap();
        assert_eq!(busy.state, "lost");
        assert_eq!(
            busy.reason.as_deref(),
            Some("the daemon stopped while the run was running")
        );
        assert_eq!(
            store.get("waiting").unwrap().unwrap().reason.as_deref(),
            Some("the daemon stopped while the run was queued")
        );
        assert_eq!(store.get("done").unwrap().unwrap().state, "exited");
        assert!(store.recover(101).unwrap().is_empty());
    }

    #[test]
    fn pruning_by_count_and_age_spares_live_runs() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("sandbox.db")).unwrap();
        for (i, id) in ["old", "a", "b", "c"].iter().enumerate() {
            let created = if *id == "old" { 1 } else { 1_000 + i as u64 };
            store.insert(&record(id, 1, created)).unwrap();
            store.finish(id, &outcome(created)).unwrap();
        }
        store.insert(&record("live", 1, 0)).unwrap();
        let mut pruned = store.prune(2_000, 2, 1_500).unwrap();
        pruned.sort();
        assert_eq!(pruned, ["a", "old"]);
        let left: Vec<_> = store
            .list(None, None, 10)
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(left, ["c", "b", "live"]);
    }
}
