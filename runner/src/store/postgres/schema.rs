//! The PostgreSQL schema (`schema.sql`) and its version, kept in `ralph_schema`. Created once,
//! under an advisory lock so that several runners starting together do not race; a database
//! written by a newer ralph is refused, like SQLite's `user_version`.

use super::worker::{CallError, Connection};
use crate::store::StoreError;

/// The schema version this ralph writes.
pub const SCHEMA_VERSION: i32 = 1;

const SCHEMA: &str = include_str!("schema.sql");

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
            tx.batch_execute(SCHEMA)?;
            tx.execute(
                "INSERT INTO ralph_schema (version) VALUES ($1)
                 ON CONFLICT (only_row) DO UPDATE SET version = EXCLUDED.version",
                &[&SCHEMA_VERSION],
            )?;
        }
        tx.commit()?;
        Ok(())
    })
}
