//! Where `ralph jobs/show/logs/wait` read jobs from: a server's API (`--server`/`RALPH_SERVER`),
//! or a local store read directly (`--state-dir DIR`, as `ralph run --state-dir DIR` wrote it;
//! opened read-only, nothing in DIR is created or changed). Each command is written once
//! against [`JobSource`]; both give the same JSON shapes (the API's). A job id may be a unique
//! prefix of one (at least 4 characters): the local store resolves it, a server does the same.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use ralph_runner::client::Client;
use ralph_runner::engine::{AttemptDirs, job_dir};
use ralph_runner::job::Outcome;
use ralph_runner::service::api::job_json;
use ralph_runner::store::{Event, EventKind, JobFilter, JobState, Store, StoreError};
use serde_json::{Value, json};

use super::CliError;
use super::client_cmds::{ServerArgs, client_error, runtime};

/// How often a local journal is read again while following it.
const POLL: Duration = Duration::from_millis(200);

/// `--state-dir` or a server.
#[derive(Args, Debug)]
pub struct SourceArgs {
    /// Read the local store in DIR (`ralph run --state-dir DIR`) instead of a server.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// A source of jobs.
pub enum JobSource {
    /// A server's API.
    Remote {
        /// The client.
        client: Client,
        /// The runtime its calls run on.
        rt: tokio::runtime::Runtime,
    },
    /// A local store, read-only.
    Local {
        /// The store.
        store: Store,
        /// Its state directory (the artifacts are under it).
        state_dir: PathBuf,
    },
}

/// The filters of a listing.
#[derive(Debug, Default)]
pub struct ListRequest {
    /// queued, running or finished.
    pub state: Option<String>,
    /// An outcome.
    pub outcome: Option<String>,
    /// At most this many.
    pub limit: usize,
    /// Older than this id.
    pub before: Option<String>,
    /// This name.
    pub name: Option<String>,
    /// All of these labels.
    pub labels: Vec<(String, String)>,
    /// This batch.
    pub batch: Option<String>,
}

/// How following a job ended.
pub enum Followed {
    /// Its journal ended with `job_finished`.
    Finished,
    /// The deadline came first.
    TimedOut,
}

fn store_error(e: StoreError) -> CliError {
    match e {
        StoreError::NoSuchJob { .. }
        | StoreError::InvalidIdPrefix { .. }
        | StoreError::AmbiguousId { .. }
        | StoreError::NoStore { .. }
        | StoreError::StateDirNotText { .. }
        | StoreError::NewerSchema { .. } => CliError::usage(e.to_string()),
        other => CliError::internal(other.to_string()),
    }
}

/// Whether a journal is over: its last `job_finished` is not followed by `resumed`.
fn finished(events: &[Event]) -> bool {
    ralph_runner::store::event::last_end_or_resume(events)
        .is_some_and(|e| matches!(e.kind, EventKind::JobFinished { .. }))
}

impl SourceArgs {
    /// Opens the source the flags name.
    pub fn open(&self) -> Result<JobSource, CliError> {
        match &self.state_dir {
            Some(dir) => {
                if self.server.server.is_some() {
                    return Err(CliError::usage(
                        "give --state-dir (a local store) or --server/RALPH_SERVER (a server), not both",
                    ));
                }
                let store = Store::open_sqlite_read_only(dir).map_err(store_error)?;
                Ok(JobSource::Local {
                    store,
                    state_dir: dir.clone(),
                })
            }
            None => Ok(JobSource::Remote {
                client: self.server.client()?,
                rt: runtime()?,
            }),
        }
    }
}

impl JobSource {
    /// The jobs matching `q`, as `{"jobs": [...], "next": ...}`.
    pub fn list(&self, q: &ListRequest) -> Result<Value, CliError> {
        match self {
            JobSource::Remote { client, rt } => {
                let mut query = vec![("limit", q.limit.to_string())];
                for (k, v) in [
                    ("state", &q.state),
                    ("outcome", &q.outcome),
                    ("before", &q.before),
                    ("name", &q.name),
                    ("batch", &q.batch),
                ] {
                    if let Some(v) = v {
                        query.push((k, v.clone()));
                    }
                }
                for (k, v) in &q.labels {
                    query.push(("label", format!("{k}={v}")));
                }
                rt.block_on(client.list(&query)).map_err(client_error)
            }
            JobSource::Local { store, .. } => {
                let state = match q.state.as_deref() {
                    None => None,
                    Some(other) => Some(JobState::from_name(other).ok_or_else(|| {
                        CliError::usage(format!(
                            "--state: `{other}` is not queued, running or finished"
                        ))
                    })?),
                };
                let outcome = match q.outcome.as_deref() {
                    None => None,
                    Some(o) => Some(Outcome::from_name(o).ok_or_else(|| {
                        CliError::usage(format!("--outcome: `{o}` is not an outcome"))
                    })?),
                };
                let limit = q.limit.clamp(1, 1000);
                let filter = JobFilter {
                    state,
                    outcome,
                    before: q.before.clone(),
                    limit,
                    name: q.name.clone(),
                    labels: q.labels.iter().cloned().collect(),
                    batch: q.batch.clone(),
                    submitted_by: None,
                };
                let jobs = store.list(&filter).map_err(store_error)?;
                let next = (jobs.len() == limit)
                    .then(|| jobs.last().map(|j| j.id.clone()))
                    .flatten();
                Ok(json!({ "jobs": jobs, "next": next }))
            }
        }
    }

    /// One job (by id or unique prefix), as the API shows it.
    pub fn job(&self, id: &str) -> Result<Value, CliError> {
        match self {
            JobSource::Remote { client, rt } => rt.block_on(client.job(id)).map_err(client_error),
            JobSource::Local { store, state_dir } => {
                let id = store.resolve_id(id).map_err(store_error)?;
                let view = store.load(&id).map_err(store_error)?;
                Ok(job_json(&view, &job_dir(state_dir, &id)))
            }
        }
    }

    /// A round's captured output (`stream`: stdout, stderr or verify), as captured.
    pub fn round_log(
        &self,
        id: &str,
        round: u32,
        attempt: u32,
        stream: &str,
    ) -> Result<Vec<u8>, CliError> {
        match self {
            JobSource::Remote { client, rt } => rt
                .block_on(client.logs(id, round, attempt, stream))
                .map_err(client_error),
            JobSource::Local { store, state_dir } => {
                let id = store.resolve_id(id).map_err(store_error)?;
                let dir = job_dir(state_dir, &id);
                let path = local_log(&dir, round, attempt, stream)?;
                std::fs::read(&path).map_err(|e| {
                    CliError::usage(format!(
                        "job `{id}` has no such log (round {round}): `{}`: {e}",
                        path.display()
                    ))
                })
            }
        }
    }

    /// Gives `each` a round's log as it grows until that attempt (or the round's verify) has
    /// ended.
    pub fn follow_round_log(
        &self,
        id: &str,
        round: u32,
        attempt: u32,
        stream: &str,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<(), CliError> {
        match self {
            JobSource::Remote { client, rt } => rt
                .block_on(super::follow::round_logs(
                    client, id, round, attempt, stream, each,
                ))
                .map_err(client_error),
            JobSource::Local { store, state_dir } => {
                let id = store.resolve_id(id).map_err(store_error)?;
                let path = local_log(&job_dir(state_dir, &id), round, attempt, stream)?;
                let verify = stream == "verify";
                let setup = stream == "setup";
                let mut offset = 0u64;
                loop {
                    // The journal first: once the attempt has ended, its log is complete.
                    let events = store.events(&id).map_err(store_error)?;
                    let ended = events.iter().any(|e| match &e.kind {
                        EventKind::RoundFinished {
                            round: r,
                            attempt: a,
                            ..
                        } => !verify && !setup && *r == round && *a == attempt,
                        EventKind::VerifyFinished { round: r, .. } => verify && *r == round,
                        EventKind::SetupFinished { .. } => setup,
                        _ => false,
                    });
                    let done = finished(&events);
                    offset += read_from(&path, offset, each)?;
                    if ended {
                        return Ok(());
                    }
                    if done {
                        return Err(CliError::usage(if setup {
                            format!("job `{id}` ended without running its set-up")
                        } else {
                            format!(
                                "job `{id}` ended without {} round {round} (attempt {attempt})",
                                if verify { "verifying" } else { "starting" }
                            )
                        }));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            }
        }
    }

    /// Gives `each` the job's journal; with `follow`, until the job finishes or `deadline`.
    pub fn events(
        &self,
        id: &str,
        follow: bool,
        deadline: Option<Instant>,
        mut each: impl FnMut(Event),
    ) -> Result<Followed, CliError> {
        match self {
            JobSource::Remote { client, rt } => {
                let call = client.events(id, 0, follow, &mut each);
                match deadline {
                    None => rt.block_on(call).map_err(client_error)?,
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        match rt.block_on(async { tokio::time::timeout(left, call).await }) {
                            Ok(r) => r.map_err(client_error)?,
                            Err(_) => return Ok(Followed::TimedOut),
                        }
                    }
                }
                Ok(Followed::Finished)
            }
            JobSource::Local { store, .. } => {
                let id = store.resolve_id(id).map_err(store_error)?;
                let mut last = 0;
                loop {
                    let events = store.events(&id).map_err(store_error)?;
                    let done = finished(&events);
                    let seen = last;
                    for ev in events.into_iter().filter(|e| e.seq > seen) {
                        last = ev.seq;
                        each(ev);
                    }
                    if !follow || done {
                        return Ok(Followed::Finished);
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(Followed::TimedOut);
                    }
                    std::thread::sleep(POLL);
                }
            }
        }
    }
}

fn local_log(job_dir: &Path, round: u32, attempt: u32, stream: &str) -> Result<PathBuf, CliError> {
    let dirs = AttemptDirs::new(job_dir, round, attempt);
    match stream {
        "verify" => Ok(AttemptDirs::verify(job_dir, round).output_log()),
        "setup" => Ok(AttemptDirs::setup(job_dir).output_log()),
        "stdout" => Ok(dirs.stdout_log()),
        "stderr" => Ok(dirs.stderr_log()),
        other => Err(CliError::usage(format!(
            "--stream: `{other}` is not stdout, stderr, verify or setup"
        ))),
    }
}

/// Gives `each` what `path` holds past `offset` (nothing when it does not exist yet); returns
/// how many bytes that was.
fn read_from(path: &Path, offset: u64, each: &mut dyn FnMut(&[u8])) -> Result<u64, CliError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            return Err(CliError::usage(format!(
                "failed to read `{}`: {e}",
                path.display()
            )));
        }
    };
    let mut buf = Vec::new();
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_to_end(&mut buf))
        .map_err(|e| CliError::usage(format!("failed to read `{}`: {e}", path.display())))?;
    if !buf.is_empty() {
        each(&buf);
    }
    Ok(buf.len() as u64)
}
