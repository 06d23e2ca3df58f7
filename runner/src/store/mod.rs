//! The state store: per-job append-only journals (SPEC §8) and their projections.
//!
//! - [`event`]: the event types.
//! - [`projection`]: a job's state as a fold of its events.
//! - [`journal`]: appending events while a job runs.
//! - [`sqlite`]: the embedded SQLite backend.

pub mod event;
pub mod journal;
pub mod projection;
pub mod sqlite;

use std::path::{Path, PathBuf};

pub use event::{AttemptResult, Event, EventKind, RunnerInfo};
pub use journal::{Journal, Observer};
pub use projection::{JobState, JobView, ProjectionError};

use crate::job::{JobId, JobSpec, new_job_id};

/// A failure of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A database operation failed.
    #[error("failed to {action} the state store `{path}`: {source}")]
    Sqlite {
        /// What was being done.
        action: &'static str,
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// A filesystem operation failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The database was written by a newer `ralph`.
    #[error(
        "the state store `{path}` has schema version {found}; this ralph supports up to {supported}"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// Its version.
        found: i64,
        /// Ours.
        supported: i64,
    },
    /// No job has this id.
    #[error("no job with id `{id}`")]
    NoSuchJob {
        /// The id.
        id: String,
    },
    /// Someone else appended to the journal meanwhile.
    #[error(
        "the journal of job `{id}` changed concurrently (expected last event {expected}, found {found})"
    )]
    Conflict {
        /// Job id.
        id: String,
        /// The sequence number we expected to follow.
        expected: u64,
        /// The one found.
        found: i64,
    },
    /// A stored event could not be decoded.
    #[error("failed to decode event {seq} of job `{id}`: {message}")]
    Decode {
        /// Job id.
        id: String,
        /// Sequence number.
        seq: u64,
        /// The decoder's message.
        message: String,
    },
    /// An event could not be encoded.
    #[error("failed to encode an event: {0}")]
    Encode(serde_json::Error),
    /// The journal does not make sense.
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// A thread panicked while holding the database.
    #[error("the state store lock is poisoned")]
    Poisoned,
}

/// The state store (SQLite today; the API is what the runner and service use).
#[derive(Debug)]
pub struct Store {
    backend: sqlite::SqliteStore,
}

impl Store {
    /// Opens the embedded SQLite store in `state_dir`.
    pub fn open_sqlite(state_dir: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            backend: sqlite::SqliteStore::open(state_dir)?,
        })
    }

    /// Accepts a new job: journals `job_submitted` and returns its id.
    pub fn submit(&self, spec: &JobSpec) -> Result<JobId, StoreError> {
        self.submit_with_priority(spec, 0)
    }

    /// Accepts a new job with a queue priority (higher runs first).
    pub fn submit_with_priority(&self, spec: &JobSpec, priority: i32) -> Result<JobId, StoreError> {
        let id = new_job_id();
        let event = Event {
            job_id: id.clone(),
            seq: 1,
            at: now_rfc3339(),
            kind: EventKind::JobSubmitted {
                spec: Box::new(spec.clone()),
            },
        };
        let view = JobView::submitted(&event)?;
        self.backend.insert_job(&event, &view, priority)?;
        Ok(id)
    }

    /// Appends an event (see [`Journal::record`], which is how callers should append).
    pub fn append(&self, event: &Event, after: &JobView) -> Result<(), StoreError> {
        self.backend.append(event, after)
    }

    /// The journal of a job.
    pub fn events(&self, job_id: &str) -> Result<Vec<Event>, StoreError> {
        self.backend.events(job_id)
    }

    /// The projection of a job's journal.
    pub fn load(&self, job_id: &str) -> Result<JobView, StoreError> {
        Ok(JobView::project(&self.events(job_id)?)?)
    }

    /// Ids of jobs in `state`, oldest first.
    pub fn job_ids_in_state(&self, state: JobState) -> Result<Vec<String>, StoreError> {
        self.backend.job_ids_in_state(state.as_str())
    }

    /// How many jobs are in `state`.
    pub fn count_in_state(&self, state: JobState) -> Result<u64, StoreError> {
        self.backend.count_in_state(state.as_str())
    }

    /// Jobs matching `filter`, newest first.
    pub fn list(&self, filter: &JobFilter) -> Result<Vec<JobSummary>, StoreError> {
        self.backend.list(filter)
    }

    /// The next queued job to run (priority, then age), skipping `skip`.
    pub fn next_queued(&self, skip: &[String]) -> Result<Option<String>, StoreError> {
        self.backend.next_queued(skip)
    }

    /// Where the data lives (for messages).
    pub fn location(&self) -> &Path {
        self.backend.path()
    }
}

/// Which jobs to list.
#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this outcome.
    pub outcome: Option<crate::job::Outcome>,
    /// Only jobs older than this id (paging: pass the last id of the previous page).
    pub before: Option<String>,
    /// At most this many.
    pub limit: usize,
}

/// One line of a job listing.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct JobSummary {
    /// Job id.
    pub id: String,
    /// loop or task.
    pub kind: String,
    /// queued, running or finished.
    pub state: String,
    /// The outcome, once finished.
    pub outcome: Option<String>,
    /// Rounds started.
    pub rounds: u32,
    /// Queue priority.
    pub priority: i32,
    /// Submission time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
}

/// The current time as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests;
