//! The state store: per-job append-only journals (SPEC §8) and their projections.
//!
//! - [`event`]: the event types.
//! - [`projection`]: a job's state as a fold of its events.
//! - [`journal`]: appending events while a job runs.
//! - [`lease`]: this process's runner lease on PostgreSQL.
//! - [`hold`]: the run hold of a running job (file lock or lease) and its heartbeat.
//! - [`sqlite`]: the embedded SQLite backend (the default: a file in the state directory).
//! - [`postgres`]: the PostgreSQL backend (several runner hosts sharing one queue).
//! - [`reserve`]: the state directory's reserve, freed when a full disk would wedge the journal.
//!
//! [`Store`] dispatches to one of them; both keep the same tables and the same semantics
//! (append-only events, optimistic sequence check, atomic claim of a queued job).

pub mod event;
pub mod hold;
pub mod id_prefix;
pub mod job_files;
pub mod journal;
pub mod lease;
pub mod postgres;
pub mod projection;
pub mod reserve;
pub mod sqlite;
pub mod sqlite_new;
pub mod trees;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use event::{AttemptResult, Durability, Event, EventKind, RefusalCount, RunnerInfo};
pub use id_prefix::{MAX_CANDIDATES, MIN_ID_PREFIX};
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
    /// A PostgreSQL operation failed (after the connection's retries).
    #[error(
        "failed to {action} the PostgreSQL store `{target}`: {}",
        postgres::worker::describe(source)
    )]
    Postgres {
        /// What was being done.
        action: &'static str,
        /// The connection string, password redacted.
        target: String,
        /// The client's error.
        source: ::postgres::Error,
    },
    /// The connection string of the PostgreSQL store cannot be used.
    #[error("failed to use the connection string of the PostgreSQL store `{target}`: {source}")]
    PostgresTarget {
        /// The connection string, password redacted.
        target: String,
        /// Why.
        source: postgres::target::TargetError,
    },
    /// The TLS session with the PostgreSQL server could not be set up.
    #[error("failed to connect to the PostgreSQL store `{target}` over TLS: {reason}")]
    PostgresTls {
        /// The connection string, password redacted.
        target: String,
        /// Why, in `database_url`'s terms (`sslmode`, `sslrootcert`).
        reason: String,
    },
    /// The thread that owns the PostgreSQL connection is gone.
    #[error("the PostgreSQL connection thread of `{target}` stopped")]
    PostgresWorker {
        /// The connection string, password redacted.
        target: String,
    },
    /// Every connection of the PostgreSQL pool stayed busy for as long as a call may wait.
    #[error(
        "failed to {action} the PostgreSQL store `{target}`: no free connection within {waited:?} (pool of {size} connection(s))"
    )]
    PostgresPoolWait {
        /// What was to be done.
        action: &'static str,
        /// The connection string, password redacted.
        target: String,
        /// The pool's connections.
        size: usize,
        /// How long the call waited.
        waited: std::time::Duration,
    },
    /// The readiness probe could not reach the PostgreSQL store.
    #[error("failed to reach the PostgreSQL store `{target}`: {message}")]
    PostgresUnreachable {
        /// The connection string, password redacted.
        target: String,
        /// Why (the client's error, or that the probe did not answer in time).
        message: String,
    },
    /// The database was written by a newer `ralph`.
    #[error(
        "the state store `{location}` has schema version {found}, written by a newer ralph; this one supports up to {supported}: run that newer ralph (a store is never migrated down; see Upgrades in docs/operations.md)"
    )]
    NewerSchema {
        /// The database file or the redacted connection string.
        location: String,
        /// Its version.
        found: i64,
        /// Ours.
        supported: i64,
    },
    /// A state directory whose path is not UTF-8: SQLite names its database by text, and the
    /// rounds' files under it are named to the agent as text.
    #[error(
        "the state directory {path:?} is not UTF-8: SQLite and the rounds (RALPH_REPORT_FILE, HOME) name its files as text; use a state directory whose path is text"
    )]
    StateDirNotText {
        /// The state directory.
        path: PathBuf,
    },
    /// A reader was pointed at a state directory that holds no store.
    #[error(
        "failed to open the state store: `{path}` does not exist (expected a state directory written by `ralph run --state-dir`)"
    )]
    NoStore {
        /// The database file looked for.
        path: PathBuf,
    },
    /// A job id (or prefix) that cannot be one.
    #[error("failed to resolve the job id `{prefix}`: {expected}")]
    InvalidIdPrefix {
        /// What was given (escaped).
        prefix: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A prefix that matches several jobs.
    #[error("the job id prefix `{prefix}` matches several jobs: {}", candidates.join(", "))]
    AmbiguousId {
        /// The prefix.
        prefix: String,
        /// Some of the jobs it matches (at most [`MAX_CANDIDATES`]).
        candidates: Vec<String>,
    },
    /// No job has this id.
    #[error("no job matches `{id}`")]
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
    /// A run hold could not be taken or read.
    #[error(transparent)]
    Hold(Box<hold::HoldError>),
}

impl StoreError {
    /// Whether the disk under the store (or the state directory) is full: SQLite's
    /// `SQLITE_FULL` ("database or disk is full"), `ENOSPC`/`EDQUOT` on a file, PostgreSQL's
    /// `disk_full` (53100). Freeing room may help ([`reserve`]).
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Sqlite { source, .. } => {
                source.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
            }
            StoreError::Io { source, .. } => reserve::is_no_space(source),
            StoreError::Postgres { source, .. } => source
                .code()
                .is_some_and(|c| *c == ::postgres::error::SqlState::DISK_FULL),
            _ => false,
        }
    }

    /// Whether the store could not be reached (PostgreSQL: no connection could be made or kept,
    /// the server is starting or shutting down, or no pooled connection came free in time) — as
    /// opposed to an answer. Waiting may help.
    pub fn is_unreachable(&self) -> bool {
        match self {
            StoreError::PostgresWorker { .. }
            | StoreError::PostgresUnreachable { .. }
            | StoreError::PostgresPoolWait { .. } => true,
            StoreError::Postgres { source, .. } => {
                source.is_closed()
                    || std::error::Error::source(source).is_some_and(|c| c.is::<std::io::Error>())
                    || source.code().is_some_and(|c| {
                        let c = c.code();
                        c.starts_with("08") || c.starts_with("57P")
                    })
                    || {
                        // The client's own texts for a failed or timed-out connect.
                        let text = source.to_string();
                        text.starts_with("error connecting to server")
                            || text.starts_with("timeout waiting for server")
                    }
            }
            _ => false,
        }
    }
}

impl From<hold::HoldError> for StoreError {
    fn from(e: hold::HoldError) -> Self {
        match e {
            hold::HoldError::Store(s) => *s,
            other => StoreError::Hold(Box::new(other)),
        }
    }
}

/// A state directory whose path is not UTF-8 is refused before anything is made in it
/// ([`StoreError::StateDirNotText`]): the rounds' files under it are named to them as text, and
/// SQLite names its database by text.
pub(crate) fn state_dir_is_text(state_dir: &Path) -> Result<(), StoreError> {
    match state_dir.to_str() {
        Some(_) => Ok(()),
        None => Err(StoreError::StateDirNotText {
            path: state_dir.to_owned(),
        }),
    }
}

/// The state store: the API the runner and the service use, over one of the backends.
#[derive(Debug)]
pub struct Store {
    backend: Backend,
    /// The state directory's reserve against a full disk (SQLite only; see [`reserve`]).
    reserve: reserve::Reserve,
}

#[derive(Debug)]
enum Backend {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

/// Calls the same method on whichever backend is in use.
macro_rules! dispatch {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match &$self.backend {
            Backend::Sqlite(b) => b.$method($($arg),*),
            Backend::Postgres(b) => b.$method($($arg),*),
        }
    };
}

impl Store {
    /// Opens the embedded SQLite store in `state_dir`.
    pub fn open_sqlite(state_dir: &Path) -> Result<Self, StoreError> {
        let store = Self {
            backend: Backend::Sqlite(sqlite::SqliteStore::open(state_dir)?),
            reserve: reserve::Reserve::in_dir(state_dir),
        };
        // Made where there is room for it (never the last free blocks); a disk without that room
        // is judged before each round ([`crate::engine`]).
        store.reserve.replenish(state_dir);
        Ok(store)
    }

    /// Connects to the PostgreSQL store at `url` (creating its schema if needed), with the
    /// default pool ([`postgres::pool::PoolOptions::default`]).
    pub fn open_postgres(url: &str) -> Result<Self, StoreError> {
        Self::open_postgres_with(url, postgres::pool::PoolOptions::default())
    }

    /// Connects to the PostgreSQL store at `url` with a pool of `pool.size` connections.
    pub fn open_postgres_with(
        url: &str,
        pool: postgres::pool::PoolOptions,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            backend: Backend::Postgres(postgres::PgStore::open(url, pool)?),
            reserve: reserve::Reserve::none(),
        })
    }

    /// PostgreSQL at `database_url` when one is given, else SQLite in `state_dir`.
    pub fn open(state_dir: &Path, database_url: Option<&str>) -> Result<Self, StoreError> {
        Self::open_with(
            state_dir,
            database_url,
            postgres::pool::PoolOptions::default(),
        )
    }

    /// [`Store::open`] with the PostgreSQL pool's size and wait bound (unused on SQLite).
    pub fn open_with(
        state_dir: &Path,
        database_url: Option<&str>,
        pool: postgres::pool::PoolOptions,
    ) -> Result<Self, StoreError> {
        match database_url {
            Some(url) => Self::open_postgres_with(url, pool),
            None => Self::open_sqlite(state_dir),
        }
    }

    /// Whether the store can be reached now: a cheap probe on PostgreSQL (cached for a second,
    /// never behind a stuck call); always `Ok` on SQLite (a local file).
    pub fn reachable(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(pg) => pg.reachable(),
        }
    }

    /// Opens the SQLite store in `state_dir` for reading only: nothing is created, configured or
    /// migrated; a state directory without a store is [`StoreError::NoStore`].
    pub fn open_sqlite_read_only(state_dir: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            backend: Backend::Sqlite(sqlite::SqliteStore::open_read_only(state_dir)?),
            reserve: reserve::Reserve::none(),
        })
    }

    /// The one job whose id starts with `prefix` (a whole id, or at least
    /// [`MIN_ID_PREFIX`] characters of one): none is [`StoreError::NoSuchJob`], several
    /// [`StoreError::AmbiguousId`]. Only hex digits and `-` are accepted (ids are UUIDv7 text),
    /// so a prefix cannot carry a pattern. One indexed range query.
    pub fn resolve_id(&self, prefix: &str) -> Result<JobId, StoreError> {
        let prefix = id_prefix::check(prefix)?;
        let mut found = dispatch!(self.ids_with_prefix(&prefix, MAX_CANDIDATES + 1))?;
        match found.len() {
            0 => Err(StoreError::NoSuchJob { id: prefix }),
            1 => Ok(found.remove(0)),
            _ => {
                found.truncate(MAX_CANDIDATES);
                Err(StoreError::AmbiguousId {
                    prefix,
                    candidates: found,
                })
            }
        }
    }

    /// Accepts a new job: journals `job_submitted` and returns its id.
    pub fn submit(&self, spec: &JobSpec) -> Result<JobId, StoreError> {
        self.submit_with_priority(spec, 0)
    }

    /// Accepts a new job with a queue priority (higher runs first).
    pub fn submit_with_priority(&self, spec: &JobSpec, priority: i32) -> Result<JobId, StoreError> {
        self.submit_as(new_job_id(), spec, priority)
    }

    /// [`Store::submit_with_priority`] with the id chosen by the caller (a provisioned job's
    /// workspace is named after it).
    pub fn submit_as(&self, id: JobId, spec: &JobSpec, priority: i32) -> Result<JobId, StoreError> {
        self.submit_event(id.clone(), spec, priority)?;
        Ok(id)
    }

    /// [`Store::submit_as`], returning the journalled `job_submitted` and the projection after
    /// it (for the observers: [`crate::engine::Engine::submit`]).
    pub fn submit_event(
        &self,
        id: JobId,
        spec: &JobSpec,
        priority: i32,
    ) -> Result<(JobView, Event), StoreError> {
        let event = Event {
            job_id: id.clone(),
            seq: 1,
            at: now_rfc3339(),
            kind: EventKind::JobSubmitted {
                spec: Box::new(spec.clone()),
            },
        };
        let view = JobView::submitted(&event)?;
        let durability = event.kind.durability();
        dispatch!(self.insert_job(std::slice::from_ref(&event), &view, priority, durability))?;
        Ok((view, event))
    }

    /// Accepts a new job already started by `runner` (`ralph run`): journals `job_submitted`
    /// and `job_started` in one transaction, so no service sharing the store can claim it.
    pub fn submit_started(&self, spec: &JobSpec, runner: &RunnerInfo) -> Result<JobId, StoreError> {
        self.submit_started_as(new_job_id(), spec, runner)
    }

    /// [`Store::submit_started`] with the id chosen by the caller (who took its run hold
    /// first: the job is never seen running without one).
    ///
    /// Committed with [`Durability::Deferred`]: nobody was told of this job yet (no client
    /// holds its id, unlike a submission's answer), and the runner that started it journals an
    /// immediate event before anything irreversible happens (the first round's or set-up's
    /// start, the provisioned workspace, the job's end), whose flush carries this commit to
    /// the disk with it. A process crash loses nothing (the commit is made); a power loss before
    /// that first flush loses a job that never ran anything. The flush it saves (and, on
    /// SQLite, the state directory's own on a new connection's first one) was on the path of
    /// every `ralph run` before its first round (issue 30); the round's start flushes while the
    /// sandbox is set up.
    pub fn submit_started_as(
        &self,
        id: JobId,
        spec: &JobSpec,
        runner: &RunnerInfo,
    ) -> Result<JobId, StoreError> {
        let at = now_rfc3339();
        let submitted = Event {
            job_id: id.clone(),
            seq: 1,
            at: at.clone(),
            kind: EventKind::JobSubmitted {
                spec: Box::new(spec.clone()),
            },
        };
        let started = Event {
            job_id: id.clone(),
            seq: 2,
            at,
            kind: EventKind::JobStarted {
                runner: runner.clone(),
            },
        };
        let mut view = JobView::submitted(&submitted)?;
        view.apply(&started)?;
        dispatch!(self.insert_job(&[submitted, started], &view, 0, Durability::Deferred))?;
        Ok(id)
    }

    /// Appends an event (see [`Journal::record`], which is how callers should append).
    pub fn append(&self, event: &Event, after: &JobView) -> Result<(), StoreError> {
        dispatch!(self.append(event, after))
    }

    /// Claims the job `job_id` for `runner` if it is still queued: journals its `job_started`
    /// and makes it running, atomically, so no two runners sharing the store start the same
    /// job. Returns whether it was claimed. The service finds the job with
    /// [`Store::next_queued`] and locks its workspace before it claims it.
    pub fn claim(&self, job_id: &str, runner: &RunnerInfo) -> Result<bool, StoreError> {
        let started = EventKind::JobStarted {
            runner: runner.clone(),
        };
        dispatch!(self.claim(job_id, &started))
    }

    /// The journal of a job.
    pub fn events(&self, job_id: &str) -> Result<Vec<Event>, StoreError> {
        dispatch!(self.events(job_id))
    }

    /// Who asked to cancel `job_id` in an event after `after_seq`, if anyone did (how a runner
    /// hears of a cancel journalled by another process, e.g. another host's API).
    pub fn cancel_requested_after(
        &self,
        job_id: &str,
        after_seq: u64,
    ) -> Result<Option<String>, StoreError> {
        dispatch!(self.cancel_requested_after(job_id, after_seq))
    }

    /// The projection of a job's journal.
    pub fn load(&self, job_id: &str) -> Result<JobView, StoreError> {
        Ok(JobView::project(&self.events(job_id)?)?)
    }

    /// Ids of jobs in `state`, oldest first.
    pub fn job_ids_in_state(&self, state: JobState) -> Result<Vec<String>, StoreError> {
        dispatch!(self.job_ids_in_state(state.as_str()))
    }

    /// How many jobs are in `state`.
    pub fn count_in_state(&self, state: JobState) -> Result<u64, StoreError> {
        dispatch!(self.count_in_state(state.as_str()))
    }

    /// Jobs matching `filter`, newest first.
    pub fn list(&self, filter: &JobFilter) -> Result<Vec<JobSummary>, StoreError> {
        dispatch!(self.list(filter))
    }

    /// The next queued job to run (priority, then age) that is not in `skip` and whose
    /// workspace (as its request names it) is not in `busy`.
    pub fn next_queued(
        &self,
        skip: &[String],
        busy: &[PathBuf],
    ) -> Result<Option<QueuedJob>, StoreError> {
        dispatch!(self.next_queued(skip, busy))
    }

    /// Every workspace and `write` directory of the jobs in this store whose rounds could write
    /// there (any mode but `read-only`), each once, in no particular order: the trees where a
    /// round may have left a symlink ([`crate::job::resolve::WritableTrees`]). Paths are as
    /// stored: resolved when the job was made. One query over the stored specs.
    pub fn writable_trees(&self) -> Result<Vec<PathBuf>, StoreError> {
        let mut trees: Vec<PathBuf> = dispatch!(self.writable_trees())?
            .into_iter()
            .map(PathBuf::from)
            .collect();
        trees.sort();
        trees.dedup();
        Ok(trees)
    }

    /// Which of `paths` (real absolute paths) are the workspace or a `write` directory of a job
    /// of this store whose rounds could write there: [`Store::writable_trees`] asked about a few
    /// paths, by the table's key, instead of read whole ([`crate::job::tree_lookup`]).
    pub fn writable_trees_among(&self, paths: &[String]) -> Result<Vec<String>, StoreError> {
        dispatch!(self.writable_trees_among(paths))
    }

    /// Whether this store keeps the jobs' result files for every host ([`job_files`]):
    /// PostgreSQL (a fleet) does; SQLite (one host, its files on its disk) does not.
    pub fn keeps_job_files(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// Keeps `files` of job `job_id` ([`job_files::collect`]); nothing on SQLite.
    pub fn put_job_files(
        &self,
        job_id: &str,
        files: Vec<job_files::JobFile>,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(pg) => pg.put_job_files(job_id, files),
        }
    }

    /// The kept file `name` of job `job_id`, if the store has it (never on SQLite).
    pub fn job_file(
        &self,
        job_id: &str,
        name: &str,
    ) -> Result<Option<job_files::JobFile>, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(pg) => pg.job_file(job_id, name),
        }
    }

    /// The kept files of job `job_id`, without their data (empty on SQLite).
    pub fn job_file_list(&self, job_id: &str) -> Result<Vec<job_files::JobFile>, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(Vec::new()),
            Backend::Postgres(pg) => pg.job_file_list(job_id),
        }
    }

    /// Forgets the kept files of job `job_id` (its artifacts were pruned); nothing on SQLite.
    pub fn drop_job_files(&self, job_id: &str) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(pg) => pg.drop_job_files(job_id),
        }
    }

    /// Where the data lives, for messages: the database file, or the connection string with
    /// its password redacted.
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Sqlite(b) => b.path().display().to_string(),
            Backend::Postgres(b) => b.target().to_owned(),
        }
    }

    /// Starts this process's runner lease (PostgreSQL; `None` on SQLite, whose holds are file
    /// locks): the jobs it starts from now on name it, and a heartbeat renews it every third of
    /// `timeout`.
    pub fn start_lease(
        self: &Arc<Self>,
        runner: &RunnerInfo,
        timeout: std::time::Duration,
    ) -> Result<Option<lease::LeaseGuard>, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(pg) => lease::LeaseGuard::start(self, pg, runner, timeout).map(Some),
        }
    }

    /// The fleet's runner leases (PostgreSQL); empty on SQLite, whose one host holds none.
    pub fn leases(&self) -> Result<Vec<postgres::lease::LeaseRow>, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(Vec::new()),
            Backend::Postgres(pg) => pg.leases(),
        }
    }

    pub(crate) fn renew_lease(
        &self,
        id: &str,
        timeout: std::time::Duration,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(true),
            Backend::Postgres(pg) => pg.renew_lease(id, timeout),
        }
    }

    pub(crate) fn recreate_lease(
        &self,
        id: &str,
        runner: &RunnerInfo,
        timeout: std::time::Duration,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(pg) => pg.create_lease(id, runner, timeout),
        }
    }

    pub(crate) fn end_lease(&self, id: &str) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(pg) => pg.end_lease(id),
        }
    }

    /// Takes the run hold of `job_id` for `runner` before it is journalled running (SQLite: its
    /// file lock in `state_dir`; PostgreSQL: the job will name this process's lease, which must
    /// have been started). A live holder is [`hold::HoldError::Busy`].
    pub fn hold_job(
        self: &Arc<Self>,
        state_dir: &Path,
        job_id: &str,
        runner: &RunnerInfo,
    ) -> Result<hold::RunHold, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(hold::RunHold::try_file(state_dir, job_id, runner)?),
            Backend::Postgres(_) => Ok(hold::RunHold::lease(self, state_dir, job_id, runner)),
        }
    }

    /// Whether the running job `job_id` is held by a live runner; one that is not is taken
    /// ([`hold::Probe::Free`]) for the caller to close.
    pub fn probe_hold(&self, state_dir: &Path, job_id: &str) -> Result<hold::Probe, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(hold::probe_file(state_dir, job_id)?),
            Backend::Postgres(pg) => pg.probe_lease(job_id),
        }
    }

    /// Notes whether this process holds the running job `job_id` (PostgreSQL; a file hold is
    /// its own record).
    pub(crate) fn note_held(&self, job_id: &str, held: bool) {
        if let Backend::Postgres(pg) = &self.backend {
            pg.note_held(job_id, held);
        }
    }

    /// Stores a running job's heartbeat (PostgreSQL; the file hold keeps its own).
    pub(crate) fn write_heartbeat(
        &self,
        job_id: &str,
        beat: &hold::Heartbeat,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(pg) => pg.write_heartbeat(job_id, beat),
        }
    }

    /// The disk under the state directory (or the store) is full (`why`): frees the reserve so
    /// the writes that close what runs fit ([`reserve`]). Returns whether it freed room.
    pub fn release_reserve(&self, why: &str) -> bool {
        self.reserve.release(why)
    }

    /// Why the state disk was found full, while it is marked so ([`reserve::Reserve::full`]).
    pub fn disk_full(&self) -> Option<String> {
        self.reserve.full()
    }

    /// Makes the reserve again where the disk of `state_dir` has room; then the disk is no
    /// longer marked full. Returns whether it has the room.
    pub fn replenish_reserve(&self, state_dir: &Path) -> bool {
        self.reserve.replenish(state_dir)
    }

    /// Whether the disk of `state_dir` has room for more work: its reserve in place (made
    /// again here where it is missing and fits) and the margin free besides, as a round needs to
    /// start ([`reserve`]). `Err` says why not, in words.
    pub fn room(&self, state_dir: &Path) -> Result<(), String> {
        if self.replenish_reserve(state_dir) {
            return Ok(());
        }
        Err(self.disk_full().unwrap_or_else(|| {
            let free = reserve::free_bytes(state_dir).map_or_else(
                |e| format!("an unknown amount ({e})"),
                |b| format!("{b} bytes"),
            );
            format!(
                "`{}` has {free} free, less than its reserve of {} MiB and {} MiB to spare",
                state_dir.display(),
                reserve::RESERVE_BYTES >> 20,
                reserve::REPLENISH_MARGIN >> 20
            )
        }))
    }

    /// Whether this is the SQLite backend.
    pub fn is_sqlite(&self) -> bool {
        matches!(self.backend, Backend::Sqlite(_))
    }

    /// The SQLite database file, when that is the backend.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Sqlite(b) => Some(b.path()),
            Backend::Postgres(_) => None,
        }
    }
}

/// A queued job, as the scheduler sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedJob {
    /// Job id.
    pub id: String,
    /// Its workspace (as the request names it: a provisioned one is made on the host that
    /// runs the job, [`crate::store::JobView`]).
    pub workspace: PathBuf,
    /// Whether the runner provisions its workspace (`repo` or `upload`).
    pub provisioned: bool,
    /// The upload it is made from, if any (only a host that has it may run it).
    pub upload: Option<String>,
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
    /// Only jobs with this name.
    pub name: Option<String>,
    /// Only jobs carrying all of these labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Only the jobs of this batch (SPEC §13).
    pub batch: Option<String>,
    /// Only the jobs submitted with this token (its name).
    pub submitted_by: Option<String>,
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
    /// The job's name.
    pub name: Option<String>,
    /// The job's labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The token it was submitted with.
    pub submitted_by: Option<String>,
}

/// The labels of a listed job from their stored JSON (none when absent or unreadable).
fn labels_of(json: Option<&str>) -> std::collections::BTreeMap<String, String> {
    json.and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default()
}

/// The current time as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The time of an event that follows one at `previous`: now, or `previous` when the clock says
/// earlier (a step back of the wall clock, or another host's clock ahead of this one's). A
/// journal's times never go backwards, so its order and its times agree. Both are RFC 3339 in
/// UTC with milliseconds (fixed width), so comparing the text compares the times.
pub fn now_after(previous: &str) -> String {
    let now = now_rfc3339();
    if previous.len() == now.len() && previous > now.as_str() {
        previous.to_owned()
    } else {
        now
    }
}

#[cfg(test)]
mod journal_disk_tests;
#[cfg(test)]
mod test_db;
#[cfg(test)]
mod tests;
