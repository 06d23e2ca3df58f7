//! The PostgreSQL schema (`schema.sql`, then the version 2 migration: runner leases, version
//! 3: the id prefix index, version 4: the jobs' kept result files, and version 5: what a big
//! queue is asked without reading every request — writable trees, labels, indexes) and its
//! version, kept in `ralph_schema`. Created once,
//! under an advisory lock so that several runners starting together do not race; a database
//! written by a newer ralph is refused, like SQLite's `user_version`.

use super::pool::Connection;
use super::worker::CallError;
use crate::store::StoreError;

/// The schema version this ralph writes.
pub const SCHEMA_VERSION: i32 = 5;

const SCHEMA: &str = include_str!("schema.sql");

/// Version 2: runner leases ([`super::lease`]); upgrades a version 1 database in place.
const LEASES: &str = "
CREATE TABLE IF NOT EXISTS runner_leases (
    id          text PRIMARY KEY,
    host        text NOT NULL,
    pid         bigint NOT NULL,
    role        text NOT NULL,
    boot_id     text NOT NULL,
    start_ticks bigint NOT NULL,
    expires_at  timestamptz NOT NULL
);
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS lease_id text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS heartbeat text;
CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (lease_id) WHERE state = 'running';
";

/// Version 3: a byte-wise index on the job id, for id prefixes ([`crate::store::Store::resolve_id`]).
const ID_PREFIXES: &str = "
CREATE INDEX IF NOT EXISTS jobs_id_prefix ON jobs (id text_pattern_ops);
";

/// Version 4: a job's result files kept for every host of a fleet ([`super::files`]).
const JOB_FILES: &str = "
CREATE TABLE IF NOT EXISTS job_files (
    job_id  text NOT NULL REFERENCES jobs (id),
    name    text NOT NULL,
    bytes   bigint NOT NULL,
    data    bytea,
    PRIMARY KEY (job_id, name)
);
";

/// Version 5: the writable trees (path checks of every submission) and the labels (listing by
/// label) kept by a trigger on `jobs`, so that every writer keeps them whatever code it runs,
/// filled in once from the jobs already there; the listings' indexes.
const INDEXES: &str = "
CREATE TABLE IF NOT EXISTS writable_trees (path text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS job_labels (
    key     text NOT NULL,
    value   text NOT NULL,
    job_id  text NOT NULL REFERENCES jobs (id),
    PRIMARY KEY (key, value, job_id)
);
CREATE OR REPLACE FUNCTION ralph_job_trees(s jsonb) RETURNS SETOF text LANGUAGE sql IMMUTABLE AS $$
    SELECT p FROM (
        SELECT s ->> 'workspace' AS p
        UNION ALL
        SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(s #> '{sandbox,write}') = 'array'
                                              THEN s #> '{sandbox,write}' ELSE '[]'::jsonb END)
    ) AS t
    WHERE p IS NOT NULL AND (s #>> '{sandbox,mode}') IS DISTINCT FROM 'read-only'
$$;
CREATE OR REPLACE FUNCTION ralph_job_labels(s jsonb) RETURNS TABLE (key text, value text)
LANGUAGE sql IMMUTABLE AS $$
    SELECT l.key, l.value FROM jsonb_each_text(CASE WHEN jsonb_typeof(s -> 'labels') = 'object'
                                                    THEN s -> 'labels' ELSE '{}'::jsonb END) AS l
$$;
CREATE OR REPLACE FUNCTION ralph_job_indexed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO writable_trees (path) SELECT ralph_job_trees(NEW.spec::jsonb)
        ON CONFLICT DO NOTHING;
    INSERT INTO job_labels (key, value, job_id)
        SELECT l.key, l.value, NEW.id FROM ralph_job_labels(NEW.spec::jsonb) AS l
        ON CONFLICT DO NOTHING;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS jobs_indexed ON jobs;
CREATE TRIGGER jobs_indexed AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION ralph_job_indexed();
INSERT INTO writable_trees (path) SELECT ralph_job_trees(spec::jsonb) FROM jobs
    ON CONFLICT DO NOTHING;
INSERT INTO job_labels (key, value, job_id)
    SELECT l.key, l.value, j.id FROM jobs AS j, ralph_job_labels(j.spec::jsonb) AS l
    ON CONFLICT DO NOTHING;
CREATE INDEX IF NOT EXISTS jobs_state_id ON jobs (state, id);
CREATE INDEX IF NOT EXISTS jobs_outcome_id ON jobs (outcome, id) WHERE outcome IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_name ON jobs ((spec::jsonb ->> 'name'))
    WHERE (spec::jsonb ->> 'name') IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs ((spec::jsonb ->> 'batch'))
    WHERE (spec::jsonb ->> 'batch') IS NOT NULL;
";

/// Indexes added since version 2 that change nothing an older binary reads or writes: made at
/// every start (a no-op once there), so a store needs no new version for them and an older
/// binary of a fleet keeps working. The first start after an upgrade builds them (a share lock
/// on `jobs` while it lasts: seconds at a million jobs).
const ADDED_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS jobs_submitted_by ON jobs ((spec::jsonb ->> 'submitted_by'), id)
    WHERE (spec::jsonb ->> 'submitted_by') IS NOT NULL;
";

/// Key of the transaction-scoped advisory lock taken while the schema is checked or created.
const SCHEMA_LOCK: i64 = 0x7261_6c70_6801;

/// Creates or checks the schema.
pub fn ensure(conn: &Connection) -> Result<(), StoreError> {
    let location = conn.target().to_owned();
    conn.call("create the schema of", move |client, _| {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS ralph_schema (
                 only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                 version  integer NOT NULL
             )",
        )?;
        let found: i32 = match tx.query_opt("SELECT version FROM ralph_schema", &[])? {
            Some(row) => row.try_get(0)?,
            None => 0,
        };
        if found > SCHEMA_VERSION {
            return Err(CallError::Store(StoreError::NewerSchema {
                location: location.clone(),
                found: i64::from(found),
                supported: i64::from(SCHEMA_VERSION),
            }));
        }
        if found < SCHEMA_VERSION {
            if found < 1 {
                tx.batch_execute(SCHEMA)?;
            }
            if found < 2 {
                tx.batch_execute(LEASES)?;
            }
            tx.batch_execute(ID_PREFIXES)?;
            tx.batch_execute(JOB_FILES)?;
            tx.batch_execute(INDEXES)?;
            tx.execute(
                "INSERT INTO ralph_schema (version) VALUES ($1)
                 ON CONFLICT (only_row) DO UPDATE SET version = EXCLUDED.version",
                &[&SCHEMA_VERSION],
            )?;
        }
        // Looked up first: `CREATE INDEX IF NOT EXISTS` would lock `jobs` against writes even
        // when the index is there (the advisory lock keeps two starts from racing here).
        let missing: bool = tx
            .query_one("SELECT to_regclass('jobs_submitted_by') IS NULL", &[])?
            .try_get(0)?;
        if missing {
            tx.batch_execute(ADDED_INDEXES)?;
        }
        tx.commit()?;
        Ok(())
    })
}
