//! The embedded SQLite state store: `ralph.db` in the state directory, mode 0600 (with its
//! `-wal` and `-shm` files) whatever the umask.
//!
//! Events are append-only (triggers refuse UPDATE and DELETE); the `jobs` table holds the
//! immutable spec plus a few columns of the projection for listing, written in the same
//! transaction as the event. The database runs in WAL mode; each event's
//! [`Durability`](super::event::Durability) picks `synchronous=FULL` (the WAL is fsynced at commit:
//! a round's start is on disk before its process exists) or `NORMAL` (committed, and flushed by the
//! next FULL commit). A process crash loses no committed event either way. A closing
//! connection does not checkpoint: the WAL stays for the next runner (see [`SqliteStore::open`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use super::event::{Durability, Event, EventKind};
use super::projection::JobView;
use super::{QueuedJob, StoreError};

/// How many prepared statements a connection keeps ([`SqliteStore::open`]).
const STATEMENT_CACHE: usize = 64;

/// Database file name inside the state directory.
pub const DB_FILE: &str = "ralph.db";

/// Version 2 adds what the service asks of a big queue without reading every job's request
/// ([`INDEXES`]).
pub(crate) const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS jobs (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    state       TEXT NOT NULL,
    outcome     TEXT,
    rounds      INTEGER NOT NULL DEFAULT 0,
    priority    INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    last_seq    INTEGER NOT NULL,
    spec        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, priority DESC, created_at);
CREATE TABLE IF NOT EXISTS events (
    job_id  TEXT NOT NULL REFERENCES jobs(id),
    seq     INTEGER NOT NULL,
    at      TEXT NOT NULL,
    type    TEXT NOT NULL,
    data    TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
"#;

/// Version 2: what the service asks of a big queue, answered without reading every job's request.
/// The writable trees and the labels are kept by a trigger on `jobs`, so that every writer keeps
/// them, whatever code it runs; a version 1 store is filled in once, when it is upgraded.
const INDEXES: &str = "
CREATE TABLE IF NOT EXISTS writable_trees (path TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS job_labels (
    key     TEXT NOT NULL,
    value   TEXT NOT NULL,
    job_id  TEXT NOT NULL REFERENCES jobs(id),
    PRIMARY KEY (key, value, job_id)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS jobs_indexed AFTER INSERT ON jobs
BEGIN
    INSERT OR IGNORE INTO writable_trees
        SELECT json_extract(NEW.spec, '$.workspace')
        WHERE json_extract(NEW.spec, '$.sandbox.mode') IS NOT 'read-only'
          AND json_extract(NEW.spec, '$.workspace') IS NOT NULL;
    INSERT OR IGNORE INTO writable_trees
        SELECT e.value FROM json_each(NEW.spec, '$.sandbox.write') AS e
        WHERE json_extract(NEW.spec, '$.sandbox.mode') IS NOT 'read-only';
    INSERT OR IGNORE INTO job_labels
        SELECT l.key, l.value, NEW.id FROM json_each(NEW.spec, '$.labels') AS l;
END;
CREATE INDEX IF NOT EXISTS jobs_state_id ON jobs(state, id);
CREATE INDEX IF NOT EXISTS jobs_outcome_id ON jobs(outcome, id) WHERE outcome IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_name ON jobs(json_extract(spec, '$.name'))
    WHERE json_extract(spec, '$.name') IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs(json_extract(spec, '$.batch'))
    WHERE json_extract(spec, '$.batch') IS NOT NULL;
";

/// Indexes added since version 2 that change nothing an older binary reads or writes: made at
/// every open (a no-op once there), so a store needs no new version for them and an older
/// binary sharing it keeps working.
const ADDED_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS jobs_submitted_by ON jobs(json_extract(spec, '$.submitted_by'), id)
    WHERE json_extract(spec, '$.submitted_by') IS NOT NULL;
";

/// Fills the version 2 tables from the jobs a version 1 store holds (as the trigger would have).
const BACKFILL_V2: &str = "
INSERT OR IGNORE INTO writable_trees
    SELECT json_extract(spec, '$.workspace') FROM jobs
    WHERE json_extract(spec, '$.sandbox.mode') IS NOT 'read-only'
      AND json_extract(spec, '$.workspace') IS NOT NULL;
INSERT OR IGNORE INTO writable_trees
    SELECT e.value FROM jobs AS j, json_each(j.spec, '$.sandbox.write') AS e
    WHERE json_extract(j.spec, '$.sandbox.mode') IS NOT 'read-only';
INSERT OR IGNORE INTO job_labels
    SELECT l.key, l.value, j.id FROM jobs AS j, json_each(j.spec, '$.labels') AS l;
";

/// Bytes the WAL is cut back to after a checkpoint (SQLite's `journal_size_limit`): about the
/// size of the default `wal_autocheckpoint` of 1,000 pages.
const WAL_SIZE_LIMIT: i64 = 4 << 20;

/// `path` as an SQLite URI filename (`file:` and the path, `%`, `?` and `#` escaped), when it is
/// UTF-8.
fn sqlite_uri(path: &Path) -> Option<String> {
    let mut uri = String::from("file:");
    for c in path.to_str()?.chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    Some(uri)
}

/// The SQLite store.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Conn>,
    path: PathBuf,
}

#[derive(Debug)]
struct Conn {
    db: Connection,
    /// The `synchronous` setting in force.
    sync: Durability,
}

impl Conn {
    fn set_durability(&mut self, d: Durability) -> rusqlite::Result<()> {
        if self.sync != d {
            let level = match d {
                Durability::Immediate => "FULL",
                Durability::Deferred => "NORMAL",
            };
            self.db.pragma_update(None, "synchronous", level)?;
            self.sync = d;
        }
        Ok(())
    }
}

fn db_err<'a>(path: &'a Path, action: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |source| StoreError::Sqlite {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Creates the schema, or upgrades a store of `from` to [`SCHEMA_VERSION`], in one transaction
/// (a crash half-way leaves the old version, upgraded again at the next open).
fn upgrade(conn: &Connection, from: i64) -> rusqlite::Result<()> {
    let backfill = if from >= 1 { BACKFILL_V2 } else { "" };
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE; {SCHEMA} {INDEXES} {backfill} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
    ))
}

/// Makes the database of a new state directory whole in one flush ([`super::sqlite_new`]);
/// where this host cannot, it is left to be made the ordinary way by the open that follows.
fn make_new(path: &Path) -> Result<(), StoreError> {
    use super::sqlite_new::{Made, NewDbError, create, image};
    let made = image(|conn| {
        upgrade(conn, 0)?;
        conn.execute_batch(ADDED_INDEXES)
    })
    .and_then(|image| create(path, &image));
    match made {
        Ok(Made::Linked | Made::Exists) => Ok(()),
        Ok(Made::Unsupported(why)) => {
            tracing::debug!(%why, "new database made the ordinary way");
            Ok(())
        }
        Err(NewDbError::Schema(source)) => Err(StoreError::Sqlite {
            action: "create the schema of",
            path: path.to_owned(),
            source,
        }),
        Err(NewDbError::Io { action, source, .. }) => Err(StoreError::Io {
            action,
            path: path.to_owned(),
            source,
        }),
        Err(e @ NewDbError::NoHeader(_)) => Err(StoreError::Io {
            action: "create",
            path: path.to_owned(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `state_dir`.
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        super::state_dir_is_text(state_dir)?;
        create_private_dir(state_dir)?;
        let path = state_dir.join(DB_FILE);
        if std::fs::symlink_metadata(&path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            make_new(&path)?;
        }
        private_db_files(&path)?;
        let conn = Connection::open(&path).map_err(db_err(&path, "open"))?;
        // Room for every statement the store prepares (`list` makes one per filter shape), so
        // that an event's statements stay prepared: parsing and coding them again (the events
        // table's triggers with them) for each event cost ~1 ms of a one-round `ralph run`.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(db_err(&path, "configure"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db_err(&path, "configure"))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(db_err(&path, "configure"))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(db_err(&path, "configure"))?;
        // No checkpoint when the connection closes: the WAL and what it holds stay for the next
        // runner of this state directory, which appends to it. A closing `ralph run` would
        // otherwise copy the WAL into the database and fsync both, and the next one make a new
        // WAL and fsync its header and the directory (four flushes a job; issue 30). The WAL is
        // copied in by SQLite's automatic checkpoint, after the commit that takes it past
        // `wal_autocheckpoint` pages, and kept to a bounded size after that.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .map_err(db_err(&path, "configure"))?;
        conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
            .map_err(db_err(&path, "configure"))?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(db_err(&path, "read the schema of"))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                location: path.display().to_string(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version < SCHEMA_VERSION {
            upgrade(&conn, version).map_err(db_err(&path, "create the schema of"))?;
        }
        conn.execute_batch(ADDED_INDEXES)
            .map_err(db_err(&path, "create the indexes of"))?;
        Ok(Self {
            conn: Mutex::new(Conn {
                db: conn,
                sync: Durability::Immediate,
            }),
            path,
        })
    }

    /// Opens the store in `state_dir` for reading only (`query_only`): no directory, schema or
    /// setting is created or changed; a missing database is [`StoreError::NoStore`].
    pub fn open_read_only(state_dir: &Path) -> Result<Self, StoreError> {
        use rusqlite::OpenFlags;
        super::state_dir_is_text(state_dir)?;
        let path = state_dir.join(DB_FILE);
        if !path.is_file() {
            return Err(StoreError::NoStore { path });
        }
        // The state directory is left as it was. Runners leave their WAL and its `-shm` (see
        // `open`): a reader that finds both opens the database read-only with a read-only `-shm`
        // (`readonly_shm`: no read marks written, nothing checkpointed). Otherwise (or if that
        // fails: a `-shm` that needs rebuilding), it opens for writing (never creating) with
        // `query_only`, so that, as the WAL database's last connection, it removes the `-wal`
        // and `-shm` files it had to make (a WAL found without its `-shm`, copied alone, is
        // then checkpointed into the database). A store this user may not write is opened
        // read-only.
        let beside = |suffix: &str| path.with_file_name(format!("{DB_FILE}-{suffix}")).exists();
        if beside("wal")
            && beside("shm")
            && let Some(uri) = sqlite_uri(&path)
            && let Ok(conn) = Connection::open_with_flags(
                format!("{uri}?readonly_shm=1"),
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            && let Ok(store) = Self::reader(conn, &path)
        {
            return Ok(store);
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .or_else(|_| {
            Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
        })
        .map_err(db_err(&path, "open"))?;
        Self::reader(conn, &path)
    }

    /// `conn` made a reader of the store at `path` (`query_only`), its schema checked.
    fn reader(conn: Connection, path: &Path) -> Result<Self, StoreError> {
        conn.pragma_update(None, "query_only", true)
            .map_err(db_err(path, "configure"))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(db_err(path, "configure"))?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(db_err(path, "read the schema of"))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                location: path.display().to_string(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(Self {
            conn: Mutex::new(Conn {
                db: conn,
                sync: Durability::Immediate,
            }),
            path: path.to_owned(),
        })
    }

    /// Up to `limit` ids starting with the checked `prefix`, in order (a range on the key).
    pub fn ids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "look up job ids in");
        let mut stmt = conn
            .db
            .prepare_cached("SELECT id FROM jobs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3")
            .map_err(&err)?;
        let rows = stmt
            .query_map(
                params![
                    prefix,
                    super::id_prefix::upper_bound(prefix),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |r| r.get::<_, String>(0),
            )
            .map_err(&err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(&err)
    }

    fn conn(&self) -> Result<std::sync::MutexGuard<'_, Conn>, StoreError> {
        self.conn.lock().map_err(|_| StoreError::Poisoned)
    }

    /// Records a new job: its `jobs` row (the projection columns of `view`, the view after
    /// `events`) and its first events, in one transaction.
    pub fn insert_job(
        &self,
        events: &[Event],
        view: &JobView,
        priority: i32,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            return Ok(());
        };
        let mut conn = self.conn()?;
        let err = db_err(&self.path, "insert a job into");
        conn.set_durability(durability).map_err(&err)?;
        let tx = conn.db.transaction().map_err(&err)?;
        let spec = serde_json::to_string(&view.spec).map_err(StoreError::Encode)?;
        tx.prepare_cached(
            "INSERT INTO jobs (id, kind, state, outcome, rounds, priority, created_at, updated_at, last_seq, spec)
             VALUES (?1, ?2, ?3, NULL, 0, ?7, ?4, ?8, ?5, ?6)",
        )
        .and_then(|mut s| s.execute(params![view.id, view.spec.kind.as_str(), view.state.as_str(), first.at, last.seq, spec, priority, last.at]))
        .map_err(&err)?;
        for event in events {
            insert_event(&tx, event).map_err(&err)?;
        }
        tx.commit().map_err(&err)
    }

    /// Appends `event` (whose seq must be the next one) and stores the projection columns of
    /// `after`, in one transaction. A concurrent writer makes this fail with a conflict.
    pub fn append(&self, event: &Event, after: &JobView) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let err = db_err(&self.path, "append an event to");
        conn.set_durability(event.kind.durability()).map_err(&err)?;
        let tx = conn
            .db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&err)?;
        let last: Option<i64> = tx
            .prepare_cached("SELECT last_seq FROM jobs WHERE id = ?1")
            .and_then(|mut s| s.query_row(params![event.job_id], |r| r.get(0)))
            .optional()
            .map_err(&err)?;
        let last = last.ok_or_else(|| StoreError::NoSuchJob {
            id: event.job_id.clone(),
        })?;
        if u64::try_from(last).ok() != event.seq.checked_sub(1) {
            return Err(StoreError::Conflict {
                id: event.job_id.clone(),
                expected: event.seq - 1,
                found: last,
            });
        }
        insert_event(&tx, event).map_err(&err)?;
        tx.prepare_cached(
            "UPDATE jobs SET state = ?2, outcome = ?3, rounds = ?4, updated_at = ?5, last_seq = ?6 WHERE id = ?1",
        )
        .and_then(|mut s| s.execute(params![
                event.job_id,
                after.state.as_str(),
                after.outcome().map(|o| o.as_str()),
                after.rounds_started,
                event.at,
                event.seq
            ]))
        .map_err(&err)?;
        tx.commit().map_err(&err)
    }

    /// Claims the job `job_id` if it is still queued: journals `started` (a `job_started`
    /// event) as its next event and makes it running, inside one IMMEDIATE transaction (which
    /// holds the database's write lock: no other process can claim or append meanwhile).
    /// Returns whether it was claimed (`false`: no longer queued, or no such job).
    pub fn claim(&self, job_id: &str, started: &EventKind) -> Result<bool, StoreError> {
        let mut conn = self.conn()?;
        let err = db_err(&self.path, "claim a job from");
        conn.set_durability(started.durability()).map_err(&err)?;
        let tx = conn
            .db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&err)?;
        let last: Option<(i64, String)> = tx
            .prepare_cached(
                "SELECT last_seq, updated_at FROM jobs WHERE id = ?1 AND state = 'queued'",
            )
            .and_then(|mut s| s.query_row(params![job_id], |r| Ok((r.get(0)?, r.get(1)?))))
            .optional()
            .map_err(&err)?;
        let Some((last, previous)) = last else {
            return Ok(false);
        };
        // The time is taken now, under the write lock, never before the previous event's.
        let event = Event {
            job_id: job_id.to_owned(),
            seq: u64::try_from(last).unwrap_or(0) + 1,
            at: super::now_after(&previous),
            kind: started.clone(),
        };
        insert_event(&tx, &event).map_err(&err)?;
        tx.prepare_cached(
            "UPDATE jobs SET state = 'running', updated_at = ?2, last_seq = ?3 WHERE id = ?1",
        )
        .and_then(|mut s| s.execute(params![job_id, event.at, event.seq]))
        .map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(true)
    }

    /// Who asked to cancel the job in an event after `after_seq`, if anyone did.
    pub fn cancel_requested_after(
        &self,
        job_id: &str,
        after_seq: u64,
    ) -> Result<Option<String>, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "read events from");
        let row: Option<(i64, String)> = conn
            .db
            .prepare_cached(
                "SELECT seq, data FROM events
                 WHERE job_id = ?1 AND seq > ?2 AND type = 'cancel_requested'
                 ORDER BY seq LIMIT 1",
            )
            .map_err(&err)?
            .query_row(params![job_id, after_seq], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(&err)?;
        let Some((seq, data)) = row else {
            return Ok(None);
        };
        let kind: EventKind = serde_json::from_str(&data).map_err(|e| StoreError::Decode {
            id: job_id.to_owned(),
            seq: u64::try_from(seq).unwrap_or(0),
            message: e.to_string(),
        })?;
        Ok(match kind {
            EventKind::CancelRequested { by } => Some(by),
            _ => None,
        })
    }

    /// The whole journal of a job, in order.
    pub fn events(&self, job_id: &str) -> Result<Vec<Event>, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "read events from");
        let mut stmt = conn
            .db
            .prepare_cached("SELECT seq, at, data FROM events WHERE job_id = ?1 ORDER BY seq")
            .map_err(&err)?;
        let rows = stmt
            .query_map(params![job_id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(&err)?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at, data) = row.map_err(&err)?;
            let kind: EventKind = serde_json::from_str(&data).map_err(|e| StoreError::Decode {
                id: job_id.to_owned(),
                seq: u64::try_from(seq).unwrap_or(0),
                message: e.to_string(),
            })?;
            out.push(Event {
                job_id: job_id.to_owned(),
                seq: u64::try_from(seq).unwrap_or(0),
                at,
                kind,
            });
        }
        if out.is_empty() {
            return Err(StoreError::NoSuchJob {
                id: job_id.to_owned(),
            });
        }
        Ok(out)
    }

    /// Ids of jobs in `state`, oldest first.
    pub fn job_ids_in_state(&self, state: &str) -> Result<Vec<String>, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "list jobs in");
        let mut stmt = conn
            .db
            .prepare_cached("SELECT id FROM jobs WHERE state = ?1 ORDER BY created_at, id")
            .map_err(&err)?;
        let rows = stmt
            .query_map(params![state], |r| r.get::<_, String>(0))
            .map_err(&err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(&err)
    }

    /// How many jobs are in `state`.
    pub fn count_in_state(&self, state: &str) -> Result<u64, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "count jobs in");
        let n: i64 = conn
            .db
            .prepare_cached("SELECT count(*) FROM jobs WHERE state = ?1")
            .map_err(&err)?
            .query_row(params![state], |r| r.get(0))
            .map_err(&err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Jobs matching `filter`, newest first.
    pub fn list(&self, filter: &super::JobFilter) -> Result<Vec<super::JobSummary>, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "list jobs in");
        // Only the conditions the filter has, so that the planner can use the index each one
        // has (a generic `?1 IS NULL OR …` shape would scan every job).
        let labels = serde_json::to_string(&filter.labels).map_err(StoreError::Encode)?;
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let mut conds: Vec<&str> = Vec::new();
        let mut values: Vec<(&str, &dyn rusqlite::ToSql)> = vec![(":limit", &limit)];
        let state = filter.state.map(|s| s.as_str());
        let outcome = filter.outcome.map(|o| o.as_str());
        if let Some(v) = &state {
            conds.push("state = :state");
            values.push((":state", v));
        }
        if let Some(v) = &outcome {
            conds.push("outcome = :outcome");
            values.push((":outcome", v));
        }
        if let Some(v) = &filter.before {
            conds.push("id < :before");
            values.push((":before", v));
        }
        if let Some(v) = &filter.name {
            conds.push("json_extract(spec, '$.name') = :name");
            values.push((":name", v));
        }
        if !filter.labels.is_empty() {
            conds.push(
                "id IN (SELECT l.job_id FROM job_labels AS l, json_each(:labels) AS want
                        WHERE l.key = want.key AND l.value = want.value
                        GROUP BY l.job_id
                        HAVING count(*) = (SELECT count(*) FROM json_each(:labels)))",
            );
            values.push((":labels", &labels));
        }
        if let Some(v) = &filter.batch {
            conds.push("json_extract(spec, '$.batch') = :batch");
            values.push((":batch", v));
        }
        if let Some(v) = &filter.submitted_by {
            conds.push("json_extract(spec, '$.submitted_by') = :submitted_by");
            values.push((":submitted_by", v));
        }
        let mut sql = String::from(
            "SELECT id, kind, state, outcome, rounds, priority, created_at, updated_at,
                    json_extract(spec, '$.name'), json_extract(spec, '$.labels'),
                    json_extract(spec, '$.submitted_by') FROM jobs",
        );
        if !conds.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conds.join(" AND "));
        }
        sql.push_str(" ORDER BY id DESC LIMIT :limit");
        let mut stmt = conn.db.prepare_cached(&sql).map_err(&err)?;
        let rows = stmt
            .query_map(values.as_slice(), |r| {
                Ok(super::JobSummary {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    state: r.get(2)?,
                    outcome: r.get(3)?,
                    rounds: r.get(4)?,
                    priority: r.get(5)?,
                    created_at: r.get(6)?,
                    updated_at: r.get(7)?,
                    name: r.get(8)?,
                    labels: super::labels_of(r.get::<_, Option<String>>(9)?.as_deref()),
                    submitted_by: r.get(10)?,
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(&err)
    }

    /// The next queued job (highest priority first, then oldest) that is not in `skip` and whose
    /// workspace is not in `busy`.
    pub fn next_queued(
        &self,
        skip: &[String],
        busy: &[PathBuf],
    ) -> Result<Option<QueuedJob>, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "read the queue of");
        let mut stmt = conn
            .db
            .prepare_cached(
                "SELECT id, json_extract(spec, '$.workspace'), json_extract(spec, '$.source.kind'),
                        json_extract(spec, '$.source.upload')
                 FROM jobs WHERE state = 'queued'
                 ORDER BY priority DESC, created_at, id",
            )
            .map_err(&err)?;
        let mut rows = stmt.query([]).map_err(&err)?;
        while let Some(row) = rows.next().map_err(&err)? {
            let id: String = row.get(0).map_err(&err)?;
            let workspace = PathBuf::from(row.get::<_, String>(1).map_err(&err)?);
            if !skip.contains(&id) && !busy.contains(&workspace) {
                let kind: Option<String> = row.get(2).map_err(&err)?;
                return Ok(Some(QueuedJob {
                    id,
                    workspace,
                    provisioned: kind.is_some(),
                    upload: row.get(3).map_err(&err)?,
                }));
            }
        }
        Ok(None)
    }

    /// The distinct workspaces and `write` directories of jobs not run `read-only`.
    pub fn writable_trees(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "list the workspaces in");
        let mut stmt = conn
            .db
            .prepare_cached("SELECT path FROM writable_trees")
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| r.get::<_, Option<String>>(0))
            .map_err(&err)?;
        let all = rows.collect::<Result<Vec<_>, _>>().map_err(&err)?;
        Ok(all.into_iter().flatten().collect())
    }

    /// Which of `paths` are writable trees (one lookup of the table's key per path).
    pub fn writable_trees_among(&self, paths: &[String]) -> Result<Vec<String>, StoreError> {
        let conn = self.conn()?;
        let err = db_err(&self.path, "look up workspaces in");
        let asked = serde_json::to_string(paths).map_err(StoreError::Encode)?;
        let mut stmt = conn
            .db
            .prepare_cached(
                "SELECT path FROM writable_trees WHERE path IN (SELECT value FROM json_each(?1))",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([asked], |r| r.get::<_, Option<String>>(0))
            .map_err(&err)?;
        let found = rows.collect::<Result<Vec<_>, _>>().map_err(&err)?;
        Ok(found.into_iter().flatten().collect())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn insert_event(tx: &rusqlite::Transaction<'_>, event: &Event) -> rusqlite::Result<()> {
    let data = serde_json::to_string(&event.kind)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    tx.prepare_cached(
        "INSERT INTO events (job_id, seq, at, type, data) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        event.job_id,
        event.seq,
        event.at,
        event.kind.name(),
        data
    ])?;
    Ok(())
}

/// Makes the database file (created empty if missing) and its `-wal`/`-shm` files, when present,
/// mode 0600 whatever the umask and the directory's mode: the journal holds every job's
/// objective and reports. A looser existing file is tightened. SQLite creates the `-wal` and
/// `-shm` files later with the database file's mode.
fn private_db_files(db: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |action: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::Io {
            action,
            path,
            source,
        }
    };
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(db)
        .map_err(io("create", db))?;
    let mut sidecars = PathBuf::from(db).into_os_string();
    let base = sidecars.clone();
    let mut files = vec![db.to_owned()];
    for suffix in ["-wal", "-shm"] {
        sidecars.clone_from(&base);
        sidecars.push(suffix);
        files.push(PathBuf::from(&sidecars));
    }
    for f in files {
        let mode = match std::fs::symlink_metadata(&f) {
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io("read the mode of", &f)(e)),
        };
        if mode != 0o600 {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600))
                .map_err(io("set mode 0600 on", &f))?;
        }
    }
    Ok(())
}

/// Creates `dir` (and parents) with mode 0700 for the last component.
pub fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(source) => Err(StoreError::Io {
            action: "create",
            path: dir.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_database_and_its_wal_are_0600_in_an_open_state_dir() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        let store = SqliteStore::open(&state).unwrap();
        // A write brings the -wal and -shm files.
        store
            .conn()
            .unwrap()
            .db
            .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
        for f in ["ralph.db", "ralph.db-wal", "ralph.db-shm"] {
            assert_eq!(mode(&state.join(f)), 0o600, "{f}");
        }
        drop(store);
        // Files made looser meanwhile are tightened at the next open.
        for f in ["ralph.db", "ralph.db-wal"] {
            let p = state.join(f);
            if p.exists() {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
        let _store = SqliteStore::open(&state).unwrap();
        for f in ["ralph.db", "ralph.db-wal", "ralph.db-shm"] {
            let p = state.join(f);
            if p.exists() {
                assert_eq!(mode(&p), 0o600, "{f}");
            }
        }
    }

    fn files(dir: &Path) -> Vec<(String, u64, i64, i64)> {
        use std::os::unix::fs::MetadataExt;
        let mut out: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let m = e.metadata().unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    m.len(),
                    m.mtime(),
                    m.mtime_nsec(),
                )
            })
            .collect();
        out.sort();
        out
    }

    /// The one number `sql` selects from `store`.
    fn one_number(store: &SqliteStore, sql: &str) -> i64 {
        store
            .conn()
            .unwrap()
            .db
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_closing_writer_leaves_its_wal_and_a_reader_leaves_everything_as_found() {
        let dir = tempfile::tempdir().unwrap();
        // A state directory whose path needs escaping in a URI.
        let state = dir.path().join("st?a#te%20");
        let store = SqliteStore::open(&state).unwrap();
        store
            .conn()
            .unwrap()
            .db
            .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (7);")
            .unwrap();
        drop(store);
        // Not checkpointed on close: the WAL holds the commit, for the next runner.
        let wal = state.join("ralph.db-wal");
        assert!(std::fs::metadata(&wal).unwrap().len() > 0);
        let before = files(&state);
        let reader = SqliteStore::open_read_only(&state).unwrap();
        let x = one_number(&reader, "SELECT x FROM t");
        assert_eq!(x, 7, "the reader sees what the WAL holds");
        drop(reader);
        assert_eq!(files(&state), before, "reading changed the state directory");
        // A WAL copied without its -shm is read too (and checkpointed into the database).
        std::fs::remove_file(state.join("ralph.db-shm")).unwrap();
        let reader = SqliteStore::open_read_only(&state).unwrap();
        let x = one_number(&reader, "SELECT x FROM t");
        assert_eq!(x, 7, "a WAL without its -shm");
        drop(reader);
        // The next writer appends to it and reads every commit.
        let store = SqliteStore::open(&state).unwrap();
        let n = one_number(&store, "SELECT count(*) FROM t");
        assert_eq!(n, 1);
    }

    #[test]
    fn uris_escape_what_would_end_the_path() {
        assert_eq!(
            sqlite_uri(Path::new("/a b/c?d#e%f")).unwrap(),
            "file:/a b/c%3fd%23e%25f"
        );
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(
            sqlite_uri(Path::new(std::ffi::OsStr::from_bytes(b"/x\xff"))),
            None
        );
    }
}
