//! The run hold (SPEC §8): whoever runs a job holds it for the whole run, so that a job whose
//! runner died can be told from one whose runner lives, and closed as `interrupted`.
//!
//! - SQLite: `flock(LOCK_EX | LOCK_NB)` on `jobs/<id>/run.hold` in the state directory, taken
//!   before the job is journalled running (`ralph run` before `job_started`, `ralph serve` before
//!   its claim) and released by the kernel however the runner ends (no pid to judge, works across
//!   pid namespaces). The file is never removed (no inode race between lockers).
//! - PostgreSQL: the runner's lease ([`super::postgres::lease`]); the job row names it.
//!
//! Both carry a [`Heartbeat`], rewritten every [`BEAT`]: the *monotonic* time this run has
//! run so far and that of its open round attempt. Recovery closes a job from the last one, so
//! neither the runner's downtime nor a wall-clock jump counts as time the job ran.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::event::{Event, EventKind, RunnerInfo};
use super::journal::Observer;
use super::projection::JobView;

/// How often a heartbeat is written.
pub const BEAT: Duration = Duration::from_secs(1);

/// The hold file of a job, inside its directory of artifacts.
pub const HOLD_FILE: &str = "run.hold";

/// What a running job's hold says about the run (the last heartbeat).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The runner's pid.
    pub pid: u32,
    /// `run` or `serve`.
    pub role: String,
    /// The runner's host.
    pub host: String,
    /// Monotonic milliseconds this run has run so far.
    pub ran_ms: u64,
    /// The open round attempt, if any: (round, attempt, its monotonic milliseconds so far).
    pub attempt: Option<(u32, u32, u64)>,
}

/// A failure to take or read a hold.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// The hold file could not be opened or created.
    #[error("failed to open the run hold `{path}`: {source}")]
    Open {
        /// The hold file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `flock` failed for another reason than the lock being held.
    #[error("failed to lock the run hold `{path}`: {source}")]
    Lock {
        /// The hold file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another live process holds it.
    #[error("failed to take {what}: it is held by {holder}")]
    Busy {
        /// What (`job ID`, `the state directory DIR`).
        what: String,
        /// Who holds it.
        holder: String,
    },
    /// The lease store failed.
    #[error(transparent)]
    Store(#[from] Box<super::StoreError>),
}

/// The path of the hold file of `job_id` in `state_dir`.
pub fn hold_path(state_dir: &Path, job_id: &str) -> PathBuf {
    state_dir.join("jobs").join(job_id).join(HOLD_FILE)
}

/// The run's clocks and where its heartbeat goes.
#[derive(Debug)]
pub(crate) struct Beat {
    started: Instant,
    runner: RunnerInfo,
    attempt: Mutex<Option<(u32, u32, Instant)>>,
}

impl Beat {
    pub(crate) fn new(runner: &RunnerInfo) -> Self {
        Self {
            started: Instant::now(),
            runner: runner.clone(),
            attempt: Mutex::new(None),
        }
    }

    pub(crate) fn now(&self) -> Heartbeat {
        let attempt = self
            .attempt
            .lock()
            .ok()
            .and_then(|a| *a)
            .map(|(r, a, at)| (r, a, millis(at.elapsed())));
        Heartbeat {
            pid: self.runner.pid,
            role: self.runner.role.clone(),
            host: self.runner.host.clone(),
            ran_ms: millis(self.started.elapsed()),
            attempt,
        }
    }

    /// Follows the open attempt; returns whether it changed.
    fn follow(&self, event: &Event) -> bool {
        let Ok(mut a) = self.attempt.lock() else {
            return false;
        };
        match &event.kind {
            EventKind::RoundStarted { round, attempt, .. } => {
                *a = Some((*round, *attempt, Instant::now()));
                true
            }
            EventKind::RoundFinished { .. } => {
                *a = None;
                true
            }
            _ => false,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Where heartbeats are written.
pub(crate) trait Sink: Send + Sync {
    fn write(&self, beat: &Heartbeat);
}

/// A job held by this process for its run; released on drop (the kernel or the lease's expiry
/// release it when the process dies).
pub struct RunHold {
    beat: Arc<Beat>,
    sink: Arc<dyn Sink>,
    /// Dropped to stop the heartbeat thread.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// PostgreSQL: the job's hold file in this state directory, locked too, so that this state
    /// directory's sweeps of private attempt dirs leave a live job alone (SQLite: the sink's).
    _file: Option<File>,
}

impl std::fmt::Debug for RunHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHold")
            .field("beat", &self.beat)
            .finish_non_exhaustive()
    }
}

impl RunHold {
    pub(crate) fn start(beat: Beat, sink: Arc<dyn Sink>) -> Self {
        let beat = Arc::new(beat);
        sink.write(&beat.now());
        // The thread waits on the channel, not on a sleep: dropping the sender wakes it at
        // once, so a job's end never waits out a tick (a 100 ms sleep here added up to 100 ms to
        // every job's wall time, and blocked the thread that dropped the hold as long).
        let (stop, stopped) = mpsc::channel::<()>();
        let (b, s) = (beat.clone(), sink.clone());
        let thread = std::thread::Builder::new()
            .name("ralph-hold".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(BEAT) {
                    s.write(&b.now());
                }
            })
            .ok();
        Self {
            beat,
            sink,
            stop: Some(stop),
            thread,
            _file: None,
        }
    }

    /// Takes the file hold of `job_id` in `state_dir` (SQLite) for `runner`, without waiting:
    /// [`HoldError::Busy`] names the live holder.
    pub fn try_file(
        state_dir: &Path,
        job_id: &str,
        runner: &RunnerInfo,
    ) -> Result<Self, HoldError> {
        let path = hold_path(state_dir, job_id);
        let file = match try_lock(&path, true)? {
            Locked::Yes(f) => f,
            Locked::Held(holder) => {
                return Err(HoldError::Busy {
                    what: format!("job `{job_id}`"),
                    holder: holder.to_string(),
                });
            }
            Locked::Missing => {
                return Err(HoldError::Open {
                    path,
                    source: std::io::ErrorKind::NotFound.into(),
                });
            }
        };
        let sink = Arc::new(FileSink {
            file: Mutex::new(file),
        });
        Ok(Self::start(Beat::new(runner), sink))
    }

    /// The hold of a job on a PostgreSQL `store` whose lease this process holds: its heartbeat
    /// goes to the job's row.
    pub(crate) fn lease(
        store: &Arc<super::Store>,
        state_dir: &Path,
        job_id: &str,
        runner: &RunnerInfo,
    ) -> Self {
        store.note_held(job_id, true);
        let sink = Arc::new(LeaseSink {
            store: Arc::downgrade(store),
            job_id: job_id.to_owned(),
        });
        let mut hold = Self::start(Beat::new(runner), sink);
        // Best effort: without it, a sweep could only miss this job's scratch (never run twice).
        if let Ok(Locked::Yes(f)) = try_lock(&hold_path(state_dir, job_id), true) {
            hold._file = Some(f);
        }
        hold
    }

    /// The observer that follows the job's round attempts (pass it to the engine's run).
    pub fn observer(&self) -> Arc<dyn Observer> {
        Arc::new(HoldObserver {
            beat: self.beat.clone(),
            sink: self.sink.clone(),
        })
    }

    /// Monotonic milliseconds since the hold was taken.
    pub fn ran_ms(&self) -> u64 {
        self.beat.now().ran_ms
    }
}

impl Drop for RunHold {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct HoldObserver {
    beat: Arc<Beat>,
    sink: Arc<dyn Sink>,
}

impl Observer for HoldObserver {
    fn on_event(&self, _view: &JobView, event: &Event) {
        if self.beat.follow(event) {
            self.sink.write(&self.beat.now());
        }
    }
}

/// The job row of a PostgreSQL store. While it lives the store counts the job as held by this
/// process.
struct LeaseSink {
    store: std::sync::Weak<super::Store>,
    job_id: String,
}

impl Drop for LeaseSink {
    fn drop(&mut self) {
        if let Some(store) = self.store.upgrade() {
            store.note_held(&self.job_id, false);
        }
    }
}

impl Sink for LeaseSink {
    fn write(&self, beat: &Heartbeat) {
        if let Some(store) = self.store.upgrade() {
            // Best effort: a missed heartbeat leaves the previous one.
            let _ = store.write_heartbeat(&self.job_id, beat);
        }
    }
}

/// The locked hold file; the heartbeat is rewritten in place.
struct FileSink {
    file: Mutex<File>,
}

impl Sink for FileSink {
    fn write(&self, beat: &Heartbeat) {
        let Ok(text) = serde_json::to_vec(beat) else {
            return;
        };
        let Ok(mut f) = self.file.lock() else {
            return;
        };
        // Best effort: a heartbeat that cannot be written leaves the previous one.
        let _ = f
            .rewind()
            .and_then(|()| f.set_len(0))
            .and_then(|()| f.write_all(&text));
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        if let Ok(f) = self.file.lock() {
            // SAFETY: the descriptor is open until the file drops after this.
            unsafe {
                libc::flock(f.as_raw_fd(), libc::LOCK_UN);
            }
        }
    }
}

enum Locked {
    Yes(File),
    Held(crate::util::flock_holder::Holder),
    Missing,
}

fn try_lock(path: &Path, create: bool) -> Result<Locked, HoldError> {
    if create && let Some(dir) = path.parent() {
        super::sqlite::create_private_dir(dir).map_err(|e| HoldError::Open {
            path: path.to_owned(),
            source: std::io::Error::other(e.to_string()),
        })?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Locked::Missing);
        }
        Err(source) => {
            return Err(HoldError::Open {
                path: path.to_owned(),
                source,
            });
        }
    };
    // SAFETY: `file` is an open descriptor owned by this function; flock only reads it.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(Locked::Yes(file));
    }
    let source = std::io::Error::last_os_error();
    if source.raw_os_error() != Some(libc::EWOULDBLOCK) {
        return Err(HoldError::Lock {
            path: path.to_owned(),
            source,
        });
    }
    Ok(Locked::Held(crate::util::flock_holder::holder_of(&file)))
}

/// How long [`ExclusiveFile::try_acquire`] waits for a lock whose recorded holder is dead.
pub const DEAD_HOLDER_WAIT: Duration = Duration::from_secs(2);

/// Whether the lock's holder may be gone: the process `/proc/locks` names is (the lock is then
/// held through a copy of its descriptor in a child that has not reached its `execve` yet), or
/// `/proc/locks` names none at all — the lock was let go between the failed `flock` and the
/// read of `/proc/locks` (that child's `execve`), or its holder's pid is not visible here. The
/// last case, a runner in another pid namespace, is only refused [`DEAD_HOLDER_WAIT`] later.
fn holder_gone(holder: &crate::util::flock_holder::Holder) -> bool {
    match holder {
        crate::util::flock_holder::Holder::Process { pid, .. } => {
            !Path::new(&format!("/proc/{pid}")).exists()
        }
        crate::util::flock_holder::Holder::Unknown => true,
        crate::util::flock_holder::Holder::Job { .. } => false,
    }
}

/// What a running job's file hold says.
#[derive(Debug)]
pub enum Probe {
    /// A live runner holds it.
    Held {
        /// Who.
        holder: String,
    },
    /// Nobody holds it: its runner is gone (SQLite: the lock is held by the caller while this
    /// lives, so two recoverers close the job once; PostgreSQL: its lease expired).
    Free {
        /// Who held it last.
        who: String,
        /// The last heartbeat, if one was written.
        last: Option<Heartbeat>,
        /// The file lock (SQLite).
        guard: Option<File>,
    },
    /// The job is not running any more.
    Gone,
    /// The job never had a hold file (journalled by an older ralph): judge by its runner info.
    Missing,
}

/// Probes the file hold of `job_id`, taking it when it is free.
pub fn probe_file(state_dir: &Path, job_id: &str) -> Result<Probe, HoldError> {
    let path = hold_path(state_dir, job_id);
    Ok(match try_lock(&path, false)? {
        Locked::Held(holder) => Probe::Held {
            holder: holder.to_string(),
        },
        Locked::Missing => Probe::Missing,
        Locked::Yes(file) => {
            let last = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let who = last.as_ref().map_or_else(
                || "an unknown runner".to_owned(),
                |h: &Heartbeat| format!("`ralph {}` (pid {} on {})", h.role, h.pid, h.host),
            );
            Probe::Free {
                who,
                last,
                guard: Some(file),
            }
        }
    })
}

/// A process-wide exclusive lock file (the serve lock of a SQLite state directory); released
/// when dropped or when the process dies.
#[derive(Debug)]
pub struct ExclusiveFile {
    _file: File,
    path: PathBuf,
}

impl ExclusiveFile {
    /// Takes `path`'s lock, writing the holder's pid into it; [`HoldError::Busy`] names the
    /// holder (pid and command line) when another process has it.
    ///
    /// A lock whose recorded holder is dead is waited for, at most [`DEAD_HOLDER_WAIT`]: a
    /// process the holder had just started keeps a copy of the lock's descriptor until its
    /// `execve` closes it (close-on-exec), so a runner started right after the last one was
    /// killed can find the lock held for that moment by nobody it could name.
    pub fn try_acquire(path: &Path, what: &str) -> Result<Self, HoldError> {
        let deadline = Instant::now() + DEAD_HOLDER_WAIT;
        let locked = loop {
            match try_lock(path, true)? {
                Locked::Held(holder) if holder_gone(&holder) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other,
            }
        };
        match locked {
            Locked::Yes(mut f) => {
                let _ = f
                    .set_len(0)
                    .and_then(|()| writeln!(f, "{}", std::process::id()));
                Ok(Self {
                    _file: f,
                    path: path.to_owned(),
                })
            }
            Locked::Held(holder) => Err(HoldError::Busy {
                what: what.to_owned(),
                holder: holder.to_string(),
            }),
            Locked::Missing => Err(HoldError::Open {
                path: path.to_owned(),
                source: std::io::ErrorKind::NotFound.into(),
            }),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests;
