//! One PostgreSQL connection as a pool thread owns it ([`super::pool`]): the sync client, its
//! session settings, and how one call is run on it.
//!
//! A broken connection is reopened with bounded retries and backoff, and the call is tried
//! again; a call that may have committed before the connection broke is told so
//! ([`Attempt::MaybeCommitted`]) and checks its own write first. Past the retries the caller gets
//! [`StoreError::Postgres`] naming the redacted target.

use std::time::Duration;

use postgres::Client;
use postgres::error::SqlState;

use super::target::Target;
use crate::store::StoreError;

/// Connection attempts per call before giving up (backoff 100 ms, doubling, capped at 2 s).
const CONNECT_ATTEMPTS: u32 = 6;
/// Tries of one call when the connection breaks or the server asks for a retry.
const CALL_ATTEMPTS: u32 = 4;

/// Session settings of every connection: a transaction of ours never waits forever for a row
/// lock, no statement runs unboundedly, and a client that vanished mid-transaction does not
/// hold its locks for long.
pub const SESSION: &str = "SET lock_timeout = '30s'; SET statement_timeout = '60s'; \
     SET idle_in_transaction_session_timeout = '60s'";

/// Whether an earlier try of this call may have committed (the connection broke during it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Nothing of this call reached the database yet, or it was rolled back.
    First,
    /// A try failed with a broken connection: its commit may or may not have happened.
    MaybeCommitted,
}

/// Why one try of a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The database said no, or the connection broke.
    Db(postgres::Error),
    /// A store-level answer (a conflict, no such job, an undecodable event): final.
    Store(StoreError),
}

impl From<postgres::Error> for CallError {
    fn from(e: postgres::Error) -> Self {
        CallError::Db(e)
    }
}

impl From<StoreError> for CallError {
    fn from(e: StoreError) -> Self {
        CallError::Store(e)
    }
}

/// One connection (opened on the first call, reopened after it breaks) and its target.
pub struct Worker {
    target: Target,
    client: Option<Client>,
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << attempt.min(5))).min(Duration::from_secs(2))
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("target", &self.target)
            .field("connected", &self.client.is_some())
            .finish()
    }
}

impl Worker {
    /// A worker for `target`, not connected yet.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            client: None,
        }
    }

    /// Drops the connection (the next call opens a new one).
    pub fn disconnect(&mut self) {
        self.client = None;
    }

    fn error(&self, action: &'static str, source: postgres::Error) -> StoreError {
        StoreError::Postgres {
            action,
            target: self.target.redacted.clone(),
            source,
        }
    }

    /// The open connection, reconnecting (with bounded retries) when there is none or it closed.
    fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            let mut last = None;
            for attempt in 0..CONNECT_ATTEMPTS {
                if attempt > 0 {
                    std::thread::sleep(backoff(attempt - 1));
                }
                match self.target.config.connect(self.target.tls.clone()) {
                    Ok(mut c) => match c.batch_execute(SESSION) {
                        Ok(()) => {
                            self.client = Some(c);
                            break;
                        }
                        Err(e) => last = Some(e),
                    },
                    Err(e) => {
                        if let Some(reason) = self.target.tls.explain(&e) {
                            return Err(StoreError::PostgresTls {
                                target: self.target.redacted.clone(),
                                reason,
                            });
                        }
                        let fatal = e.as_db_error().is_some_and(|d| !transient_code(d.code()));
                        last = Some(e);
                        if fatal {
                            break;
                        }
                    }
                }
            }
            if self.client.is_none() {
                return Err(match last {
                    Some(e) => self.error("connect to", e),
                    None => StoreError::PostgresWorker {
                        target: self.target.redacted.clone(),
                    },
                });
            }
        }
        self.client
            .as_mut()
            .ok_or_else(|| StoreError::PostgresWorker {
                target: self.target.redacted.clone(),
            })
    }

    /// Runs `op`, reconnecting and retrying it as described in the module doc.
    pub fn run<T, F>(&mut self, action: &'static str, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut(&mut Client, Attempt) -> Result<T, CallError>,
    {
        let mut attempt = Attempt::First;
        let mut tries = 0;
        loop {
            tries += 1;
            let client = self.client()?;
            let e = match op(client, attempt) {
                Ok(v) => return Ok(v),
                Err(CallError::Store(e)) => return Err(e),
                Err(CallError::Db(e)) => e,
            };
            let broken = e.is_closed() || client.is_closed() || is_io(&e);
            let retry_code = e.code().is_some_and(transient_code);
            if broken {
                self.client = None;
                attempt = Attempt::MaybeCommitted;
            }
            if !(broken || retry_code) || tries >= CALL_ATTEMPTS {
                return Err(self.error(action, e));
            }
            std::thread::sleep(backoff(tries - 1));
        }
    }
}

/// The connection failed under the call (as opposed to a refused statement or a bad value).
fn is_io(e: &postgres::Error) -> bool {
    std::error::Error::source(e).is_some_and(|c| c.is::<std::io::Error>())
}

/// Server answers after which the same call may simply be tried again.
fn transient_code(code: &SqlState) -> bool {
    [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::TOO_MANY_CONNECTIONS,
    ]
    .contains(code)
        || code.code().starts_with("08")
}

/// An error's message with its cause (the client's own text for a database error is only "db
/// error"; the server's message is in the cause).
pub fn describe(e: &postgres::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}
