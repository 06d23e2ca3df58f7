//! The PostgreSQL state store, for several runner hosts sharing one queue (SPEC §8).
//!
//! The same tables and semantics as the SQLite store: a `jobs` row per job (the immutable spec
//! plus projection columns for listing) and an append-only `events` table (a trigger refuses
//! UPDATE, DELETE and TRUNCATE). Each append is one transaction that locks the job row
//! (`SELECT last_seq … FOR UPDATE`), checks the expected sequence number
//! ([`StoreError::Conflict`] otherwise), inserts the event and updates the projection columns.
//! [`PgStore::claim`] takes a queued job (`UPDATE … WHERE state = 'queued'`, which locks its row)
//! and journals its `job_started` in the same transaction, so two hosts never start the same job.
//!
//! Durability: every commit is flushed to the server's WAL before it returns, whatever the
//! server's default: [`Durability::Immediate`] events with `SET LOCAL synchronous_commit = on`
//! (and synchronous standbys, where configured), [`Durability::Deferred`] ones with `local` (the
//! primary's own WAL). The database is a process of its own that can crash while ralph lives:
//! an asynchronous commit (`off`) would let ralph announce an event — to the follow stream, to
//! metrics — that the crash then takes back (issue 17). Writes lost anyway (a failover to a
//! lagging replica) are journalled again by their runner ([`crate::store::journal`]).
//!
//! - [`target`]: the connection string (defaults, redaction).
//! - [`tls`], [`tls_connect`]: TLS to the server (`sslmode`, `sslrootcert`, ...; rustls).
//! - [`pool`]: the connection threads and their queue, the wait bound.
//! - [`worker`]: one connection: session settings, reconnects and retries.
//! - [`probe`]: whether the store can be reached now (`/readyz`).
//! - [`schema`]: `schema.sql` and its version.
//! - [`lease`]: runner leases, the run hold of this backend.
//! - `files`: the jobs' result files kept for every host ([`crate::store::job_files`]).

mod files;
pub mod lease;
pub mod pool;
pub mod probe;
pub mod schema;
pub mod target;
pub mod tls;
pub mod tls_connect;
pub mod worker;

use std::path::PathBuf;

use postgres::Transaction;

use super::event::{Durability, Event, EventKind};
use super::projection::JobView;
use super::{JobFilter, JobSummary, QueuedJob, StoreError};
use pool::{Connection, PoolOptions};
use target::Target;
use worker::{Attempt, CallError};

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PgStore {
    conn: Connection,
    /// The readiness probe, on a connection of its own.
    probe: probe::Probe,
    /// This process's runner lease ([`lease`]): the jobs it starts name it.
    lease: std::sync::Mutex<Option<String>>,
    /// The running jobs this process holds ([`crate::store::hold::RunHold`]): a running job of
    /// this process's lease that is not among them was given up (a store outage outlasted the
    /// journal's patience) and is closed as any orphan is ([`lease`]).
    held: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// One stored event row: (seq, at, data).
type Row = (i64, String, String);

impl PgStore {
    /// Connects to `url` with a pool of `options.size` connections, creating or checking the
    /// schema.
    pub fn open(url: &str, options: PoolOptions) -> Result<Self, StoreError> {
        let target = Target::parse(url).map_err(|source| StoreError::PostgresTarget {
            target: target::redact(url),
            source,
        })?;
        let probe = probe::Probe::start(&target)?;
        let conn = Connection::start(target, options)?;
        schema::ensure(&conn)?;
        Ok(Self {
            conn,
            probe,
            lease: std::sync::Mutex::new(None),
            held: Default::default(),
        })
    }

    /// The connection string, password redacted.
    pub fn target(&self) -> &str {
        self.conn.target()
    }

    /// Whether the database answers now ([`probe`]): never waits behind the pool's calls.
    pub fn reachable(&self) -> Result<(), StoreError> {
        self.probe.check()
    }

    /// Records a new job: its `jobs` row (the projection columns of `view`, the view after
    /// `events`) and its first events, in one transaction.
    pub fn insert_job(
        &self,
        events: &[Event],
        view: &JobView,
        priority: i32,
        durable: Durability,
    ) -> Result<(), StoreError> {
        let events = events.to_vec();
        let (Some(first), Some(last)) = (events.first().cloned(), events.last().cloned()) else {
            return Ok(());
        };
        let data = events
            .iter()
            .map(|e| encode(&e.kind))
            .collect::<Result<Vec<_>, _>>()?;
        let first_data = data.first().cloned().unwrap_or_default();
        let spec = serde_json::to_string(&view.spec).map_err(StoreError::Encode)?;
        let (id, kind, state) = (
            view.id.clone(),
            view.spec.kind.as_str(),
            view.state.as_str(),
        );
        let lease = if state == "running" {
            self.lease_id()
        } else {
            None
        };
        self.conn
            .call("insert a job into", move |client, attempt| {
                let mut tx = client.transaction()?;
                if attempt == Attempt::MaybeCommitted && stored(&mut tx, &first, &first_data)? {
                    return Ok(());
                }
                durability(&mut tx, durable)?;
                tx.execute(
                    "INSERT INTO jobs (id, kind, state, outcome, rounds, priority, created_at, updated_at, last_seq, spec, lease_id)
                     VALUES ($1, $2, $3, NULL, 0, $4, $5, $6, $7, $8, $9)",
                    &[&id, &kind, &state, &priority, &first.at, &last.at, &seq_i64(last.seq), &spec, &lease],
                )?;
                for (event, data) in events.iter().zip(&data) {
                    insert_event(&mut tx, event, data)?;
                }
                tx.commit()?;
                Ok(())
            })
    }

    /// Appends `event` (whose seq must be the next one) and stores the projection columns of
    /// `after`, in one transaction holding the job row's lock.
    pub fn append(&self, event: &Event, after: &JobView) -> Result<(), StoreError> {
        let event = event.clone();
        let data = encode(&event.kind)?;
        let (state, outcome, rounds) = (
            after.state.as_str(),
            after.outcome().map(|o| o.as_str()),
            i32::try_from(after.rounds_started).unwrap_or(i32::MAX),
        );
        self.conn
            .call("append an event to", move |client, attempt| {
                let mut tx = client.transaction()?;
                if attempt == Attempt::MaybeCommitted && stored(&mut tx, &event, &data)? {
                    return Ok(());
                }
                durability(&mut tx, event.kind.durability())?;
                let last: i64 = tx
                    .query_opt(
                        "SELECT last_seq FROM jobs WHERE id = $1 FOR UPDATE",
                        &[&event.job_id],
                    )?
                    .ok_or_else(|| StoreError::NoSuchJob {
                        id: event.job_id.clone(),
                    })?
                    .try_get(0)?;
                if u64::try_from(last).ok() != event.seq.checked_sub(1) {
                    return Err(CallError::Store(StoreError::Conflict {
                        id: event.job_id.clone(),
                        expected: event.seq.saturating_sub(1),
                        found: last,
                    }));
                }
                insert_event(&mut tx, &event, &data)?;
                tx.execute(
                    "UPDATE jobs SET state = $2, outcome = $3, rounds = $4, updated_at = $5, last_seq = $6
                     WHERE id = $1",
                    &[&event.job_id, &state, &outcome, &rounds, &event.at, &seq_i64(event.seq)],
                )?;
                tx.commit()?;
                Ok(())
            })
    }

    /// Claims the job `job_id` if it is still queued and this process's lease (if it has one)
    /// is live: journals `started` (a `job_started` event) as its next event and makes it
    /// running, in one transaction that locks the job's row (a concurrent claim by another host
    /// waits for it, then finds the job running). Returns whether it was claimed (`false`: no
    /// longer queued, no such job, or the lease lapsed).
    pub fn claim(&self, job_id: &str, started: &EventKind) -> Result<bool, StoreError> {
        let data = encode(started)?;
        let durable = started.durability();
        let id = job_id.to_owned();
        let lease = self.lease_id();
        self.conn.call("claim a job from", move |client, attempt| {
            let mut tx = client.transaction()?;
            if attempt == Attempt::MaybeCommitted {
                // The claim may have committed before the connection broke: find it again.
                let mine = tx.query_opt(
                    "SELECT 1 FROM jobs j JOIN events e ON e.job_id = j.id AND e.seq = j.last_seq
                     WHERE j.id = $1 AND j.state = 'running' AND e.type = 'job_started'
                       AND e.data = $2",
                    &[&id, &data],
                )?;
                if mine.is_some() {
                    return Ok(true);
                }
            }
            durability(&mut tx, durable)?;
            // The time is taken now, after the wait for the connection, and never before the
            // previous event's (the row's `updated_at`): a journal's times follow its order.
            let now = super::now_rfc3339();
            // Only under a live lease: a job claimed under one that lapsed (its renewals failed
            // through a store outage) would be closed by another host's sweep at once. The job
            // stays queued until a host with a live lease claims it.
            let claimed = tx.query_opt(
                "UPDATE jobs SET state = 'running', updated_at = GREATEST($2, updated_at),
                     last_seq = last_seq + 1, lease_id = $3, heartbeat = NULL
                 WHERE id = $1 AND state = 'queued'
                   AND ($3::text IS NULL OR EXISTS (
                        SELECT 1 FROM runner_leases l WHERE l.id = $3 AND l.expires_at > now()))
                 RETURNING last_seq, updated_at",
                &[&id, &now, &lease],
            )?;
            let Some(row) = claimed else {
                return Ok(false);
            };
            let seq: i64 = row.try_get(0)?;
            let at: String = row.try_get(1)?;
            tx.execute(
                "INSERT INTO events (job_id, seq, at, type, data) VALUES ($1, $2, $3, 'job_started', $4)",
                &[&id, &seq, &at, &data],
            )?;
            tx.commit()?;
            Ok(true)
        })
    }

    /// The whole journal of a job, in order.
    pub fn events(&self, job_id: &str) -> Result<Vec<Event>, StoreError> {
        let id = job_id.to_owned();
        let rows: Vec<Row> = self.conn.call("read events from", move |client, _| {
            let rows = client.query(
                "SELECT seq, at, data FROM events WHERE job_id = $1 ORDER BY seq",
                &[&id],
            )?;
            Ok(rows
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                .collect::<Result<Vec<Row>, postgres::Error>>()?)
        })?;
        if rows.is_empty() {
            return Err(StoreError::NoSuchJob {
                id: job_id.to_owned(),
            });
        }
        rows.into_iter()
            .map(|(seq, at, data)| decode(job_id, seq, at, &data))
            .collect()
    }

    /// Up to `limit` ids starting with the checked `prefix`, in order: a byte-wise range
    /// (`~>=~`, `~<~`) on the `text_pattern_ops` index, whatever the database's collation.
    pub fn ids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let low = prefix.to_owned();
        let high = crate::store::id_prefix::upper_bound(prefix);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn.call("look up job ids in", move |client, _| {
            let rows = client.query(
                "SELECT id FROM jobs WHERE id ~>=~ $1 AND id ~<~ $2 ORDER BY id COLLATE \"C\" LIMIT $3",
                &[&low, &high, &limit],
            )?;
            Ok(rows
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<Vec<String>, postgres::Error>>()?)
        })
    }

    /// Who asked to cancel the job in an event after `after_seq`, if anyone did.
    pub fn cancel_requested_after(
        &self,
        job_id: &str,
        after_seq: u64,
    ) -> Result<Option<String>, StoreError> {
        let id = job_id.to_owned();
        let row: Option<Row> = self.conn.call("read events from", move |client, _| {
            let row = client.query_opt(
                "SELECT seq, at, data FROM events
                 WHERE job_id = $1 AND seq > $2 AND type = 'cancel_requested'
                 ORDER BY seq LIMIT 1",
                &[&id, &seq_i64(after_seq)],
            )?;
            Ok(match row {
                Some(r) => Some((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)),
                None => None,
            })
        })?;
        row.map(|(seq, at, data)| decode(job_id, seq, at, &data))
            .transpose()
            .map(|e| match e.map(|e| e.kind) {
                Some(EventKind::CancelRequested { by }) => Some(by),
                _ => None,
            })
    }

    /// Ids of jobs in `state`, oldest first.
    pub fn job_ids_in_state(&self, state: &str) -> Result<Vec<String>, StoreError> {
        let state = state.to_owned();
        self.conn.call("list jobs in", move |client, _| {
            let rows = client.query(
                "SELECT id FROM jobs WHERE state = $1 ORDER BY created_at, id",
                &[&state],
            )?;
            Ok(rows
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<Vec<String>, _>>()?)
        })
    }

    /// How many jobs are in `state`.
    pub fn count_in_state(&self, state: &str) -> Result<u64, StoreError> {
        let state = state.to_owned();
        self.conn.call("count jobs in", move |client, _| {
            let n: i64 = client
                .query_one("SELECT count(*) FROM jobs WHERE state = $1", &[&state])?
                .try_get(0)?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    /// Jobs matching `filter`, newest first.
    pub fn list(&self, filter: &JobFilter) -> Result<Vec<JobSummary>, StoreError> {
        let state = filter.state.map(|s| s.as_str());
        let outcome = filter.outcome.map(|o| o.as_str());
        let before = filter.before.clone();
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let name = filter.name.clone();
        let labels = serde_json::to_string(&filter.labels).map_err(StoreError::Encode)?;
        let has_labels = !filter.labels.is_empty();
        let batch = filter.batch.clone();
        let submitted_by = filter.submitted_by.clone();
        self.conn.call("list jobs in", move |client, _| {
            // Only the conditions the filter has (see the SQLite store): each can use its index.
            let mut conds: Vec<String> = Vec::new();
            let mut values: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![&limit];
            if let Some(v) = &state {
                values.push(v);
                conds.push(format!("state = ${}", values.len()));
            }
            if let Some(v) = &outcome {
                values.push(v);
                conds.push(format!("outcome = ${}", values.len()));
            }
            if let Some(v) = &before {
                values.push(v);
                conds.push(format!("id < ${}", values.len()));
            }
            if let Some(v) = &name {
                values.push(v);
                conds.push(format!("spec::jsonb ->> 'name' = ${}", values.len()));
            }
            if has_labels {
                values.push(&labels);
                let n = values.len();
                conds.push(format!(
                    "id IN (SELECT l.job_id FROM job_labels AS l, jsonb_each_text(${n}::text::jsonb) AS w
                            WHERE l.key = w.key AND l.value = w.value
                            GROUP BY l.job_id
                            HAVING count(*) = (SELECT count(*) FROM jsonb_each_text(${n}::text::jsonb)))"
                ));
            }
            if let Some(v) = &batch {
                values.push(v);
                conds.push(format!("spec::jsonb ->> 'batch' = ${}", values.len()));
            }
            if let Some(v) = &submitted_by {
                values.push(v);
                conds.push(format!("spec::jsonb ->> 'submitted_by' = ${}", values.len()));
            }
            let mut sql = String::from(
                "SELECT id, kind, state, outcome, rounds, priority, created_at, updated_at,
                        spec::jsonb ->> 'name', (spec::jsonb -> 'labels')::text,
                        spec::jsonb ->> 'submitted_by' FROM jobs",
            );
            if !conds.is_empty() {
                sql.push_str(" WHERE ");
                sql.push_str(&conds.join(" AND "));
            }
            sql.push_str(" ORDER BY id DESC LIMIT $1");
            let rows = client.query(sql.as_str(), &values)?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let rounds: i32 = r.try_get(4)?;
                out.push(JobSummary {
                    id: r.try_get(0)?,
                    kind: r.try_get(1)?,
                    state: r.try_get(2)?,
                    outcome: r.try_get(3)?,
                    rounds: u32::try_from(rounds).unwrap_or(0),
                    priority: r.try_get(5)?,
                    created_at: r.try_get(6)?,
                    updated_at: r.try_get(7)?,
                    name: r.try_get(8)?,
                    labels: crate::store::labels_of(r.try_get::<_, Option<String>>(9)?.as_deref()),
                    submitted_by: r.try_get(10)?,
                });
            }
            Ok(out)
        })
    }

    /// Which of `paths` are writable trees (one lookup of the table's key per path).
    pub fn writable_trees_among(&self, paths: &[String]) -> Result<Vec<String>, StoreError> {
        let asked = paths.to_vec();
        self.conn.call("look up workspaces in", move |client, _| {
            let rows = client.query(
                "SELECT path FROM writable_trees WHERE path = ANY($1)",
                &[&asked],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                if let Some(p) = r.try_get::<_, Option<String>>(0)? {
                    out.push(p);
                }
            }
            Ok(out)
        })
    }

    /// The distinct workspaces and `write` directories of jobs not run `read-only`.
    pub fn writable_trees(&self) -> Result<Vec<String>, StoreError> {
        self.conn.call("list the workspaces in", move |client, _| {
            let rows = client.query("SELECT path FROM writable_trees", &[])?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                if let Some(p) = r.try_get::<_, Option<String>>(0)? {
                    out.push(p);
                }
            }
            Ok(out)
        })
    }

    /// The next queued job (highest priority first, then oldest) that is not in `skip` and whose
    /// workspace is not in `busy`.
    pub fn next_queued(
        &self,
        skip: &[String],
        busy: &[PathBuf],
    ) -> Result<Option<QueuedJob>, StoreError> {
        let skip = skip.to_vec();
        // A stored spec's workspace is always UTF-8 (it is JSON); other paths match nothing.
        let busy: Vec<String> = busy
            .iter()
            .filter_map(|p| p.to_str().map(str::to_owned))
            .collect();
        self.conn.call("read the queue of", move |client, _| {
            let row = client.query_opt(
                "SELECT id, spec::jsonb ->> 'workspace', spec::jsonb -> 'source' ->> 'kind',
                        spec::jsonb -> 'source' ->> 'upload' FROM jobs
                 WHERE state = 'queued' AND NOT (id = ANY($1))
                   AND NOT ((spec::jsonb ->> 'workspace') = ANY($2))
                 ORDER BY priority DESC, created_at, id LIMIT 1",
                &[&skip, &busy],
            )?;
            Ok(match row {
                Some(r) => Some(QueuedJob {
                    id: r.try_get(0)?,
                    workspace: PathBuf::from(r.try_get::<_, String>(1)?),
                    provisioned: r.try_get::<_, Option<String>>(2)?.is_some(),
                    upload: r.try_get(3)?,
                }),
                None => None,
            })
        })
    }
}

fn seq_i64(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

fn encode(kind: &EventKind) -> Result<String, StoreError> {
    serde_json::to_string(kind).map_err(StoreError::Encode)
}

fn decode(job_id: &str, seq: i64, at: String, data: &str) -> Result<Event, StoreError> {
    let seq = u64::try_from(seq).unwrap_or(0);
    let kind: EventKind = serde_json::from_str(data).map_err(|e| StoreError::Decode {
        id: job_id.to_owned(),
        seq,
        message: e.to_string(),
    })?;
    Ok(Event {
        job_id: job_id.to_owned(),
        seq,
        at,
        kind,
    })
}

/// The `synchronous_commit` of a transaction journalling an event of class `d` (module doc).
fn synchronous_commit(d: Durability) -> &'static str {
    match d {
        Durability::Immediate => "on",
        Durability::Deferred => "local",
    }
}

/// Makes this transaction's commit as durable as its event's class promises.
fn durability(tx: &mut Transaction<'_>, d: Durability) -> Result<(), postgres::Error> {
    tx.batch_execute(&format!(
        "SET LOCAL synchronous_commit = {}",
        synchronous_commit(d)
    ))
}

fn insert_event(tx: &mut Transaction<'_>, event: &Event, data: &str) -> Result<(), CallError> {
    tx.execute(
        "INSERT INTO events (job_id, seq, at, type, data) VALUES ($1, $2, $3, $4, $5)",
        &[
            &event.job_id,
            &seq_i64(event.seq),
            &event.at,
            &event.kind.name(),
            &data,
        ],
    )?;
    Ok(())
}

/// Whether exactly this event is already stored (an earlier try committed it).
fn stored(tx: &mut Transaction<'_>, event: &Event, data: &str) -> Result<bool, CallError> {
    let row = tx.query_opt(
        "SELECT at, data FROM events WHERE job_id = $1 AND seq = $2",
        &[&event.job_id, &seq_i64(event.seq)],
    )?;
    Ok(match row {
        Some(r) => {
            let (at, stored): (String, String) = (r.try_get(0)?, r.try_get(1)?);
            at == event.at && stored == data
        }
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No event commits asynchronously: a database crash while ralph lives must not take back
    /// an event ralph announced (issue 17). `local` still flushes the primary's WAL.
    #[test]
    fn every_event_class_commits_synchronously() {
        for d in [Durability::Immediate, Durability::Deferred] {
            assert_ne!(synchronous_commit(d), "off", "{d:?}");
            assert_ne!(synchronous_commit(d), "remote_write", "{d:?}");
        }
        assert_eq!(synchronous_commit(Durability::Immediate), "on");
    }
}
