//! The pool of PostgreSQL connections: a bounded number of plain threads, each owning one sync
//! client ([`Worker`]), take calls from one shared queue, so independent calls (the API, the
//! scheduler, the journals of running jobs) run concurrently and one slow call (a cancel waiting
//! on a row lock, a reconnect) holds up only its own connection.
//!
//! Threads rather than an async pool over `tokio-postgres`: the sync `postgres` client drives its
//! own tokio runtime and panics when called from inside another one (`ralph run` and `ralph
//! serve` run the store from tokio tasks), every call of the store is a closure over a sync
//! `Client` (with its retry and `MaybeCommitted` logic in [`Worker::run`]), and the `Store`
//! facade is sync; a thread per connection keeps all of that as it is, needs no new dependency,
//! and bounds the connections a host opens just the same.
//!
//! Nothing waits unboundedly: a call that finds no free connection within the pool's `wait`
//! fails with [`StoreError::PostgresPoolWait`] (and is taken out of the queue, so it never runs
//! later); a call that got a connection is bounded by the connect timeout, the bounded retries
//! and the session's `statement_timeout` and `lock_timeout` ([`super::worker::SESSION`]).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::time::Duration;

use postgres::Client;

use super::target::Target;
use super::worker::{Attempt, CallError, Worker};
use crate::store::StoreError;

/// Connections per store unless configured (`postgres_pool_size`).
pub const DEFAULT_POOL_SIZE: usize = 4;
/// How long a call may wait for a free connection unless configured (`postgres_pool_wait`).
pub const DEFAULT_POOL_WAIT: Duration = Duration::from_secs(10);

/// The size of the pool and how long a call waits for one of its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolOptions {
    /// Connections (threads); at least 1.
    pub size: usize,
    /// How long a call waits for a free connection before it fails.
    pub wait: Duration,
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            size: DEFAULT_POOL_SIZE,
            wait: DEFAULT_POOL_WAIT,
        }
    }
}

type Job = Box<dyn FnOnce(&mut Worker) + Send>;

/// The calls waiting for a connection, each with its number (to take it back on a timeout).
struct Queue {
    jobs: VecDeque<(u64, Job)>,
    next: u64,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The handle callers use: queues calls for the pool's threads.
pub struct Connection {
    shared: Arc<Shared>,
    target: String,
    options: PoolOptions,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("target", &self.target)
            .field("options", &self.options)
            .finish()
    }
}

impl Connection {
    /// Starts the pool's threads for `target` (each connects on its first call).
    pub fn start(target: Target, options: PoolOptions) -> Result<Self, StoreError> {
        let options = PoolOptions {
            size: options.size.max(1),
            ..options
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                next: 0,
                closed: false,
            }),
            ready: Condvar::new(),
        });
        let redacted = target.redacted.clone();
        let pool = Self {
            shared: shared.clone(),
            target: redacted.clone(),
            options,
        };
        for i in 0..options.size {
            let shared = shared.clone();
            let mut worker = Worker::new(target.clone());
            std::thread::Builder::new()
                .name(format!("ralph-postgres-{i}"))
                .spawn(move || serve(&shared, &mut worker))
                .map_err(|source| StoreError::Io {
                    action: "start a PostgreSQL connection thread for",
                    path: redacted.clone().into(),
                    source,
                })?;
        }
        Ok(pool)
    }

    /// The redacted connection string.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Runs `op` on a free connection of the pool, retrying it as [`Worker::run`] does.
    /// `action` completes "failed to … the PostgreSQL store".
    pub fn call<T, F>(&self, action: &'static str, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&mut Client, Attempt) -> Result<T, CallError> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |w: &mut Worker| {
            let _ = reply.send(w.run(action, op));
        });
        let gone = || StoreError::PostgresWorker {
            target: self.target.clone(),
        };
        let number = {
            let mut q = self.shared.lock();
            if q.closed {
                return Err(gone());
            }
            let number = q.next;
            q.next = q.next.wrapping_add(1);
            q.jobs.push_back((number, job));
            number
        };
        self.shared.ready.notify_one();
        match answer.recv_timeout(self.options.wait) {
            Ok(result) => return result,
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(gone()),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        // Still queued: take it back, it never runs. Taken: a connection runs it, wait for it.
        {
            let mut q = self.shared.lock();
            if let Some(at) = q.jobs.iter().position(|(n, _)| *n == number) {
                q.jobs.remove(at);
                return Err(StoreError::PostgresPoolWait {
                    action,
                    target: self.target.clone(),
                    size: self.options.size,
                    waited: self.options.wait,
                });
            }
        }
        answer.recv().map_err(|_| gone())?
    }
}

impl Drop for Connection {
    /// The threads finish the calls already queued, close their connections and end.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
    }
}

/// One pool thread: takes the oldest queued call and runs it on its connection, until the pool
/// is dropped.
fn serve(shared: &Shared, worker: &mut Worker) {
    loop {
        let job = {
            let mut q = shared.lock();
            loop {
                if let Some((_, job)) = q.jobs.pop_front() {
                    break job;
                }
                if q.closed {
                    return;
                }
                q = shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        // A call that panics (a bug) loses its answer (its caller gets `PostgresWorker`) and
        // this thread's connection, not the thread: the pool keeps its size.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(worker)));
        if ran.is_err() {
            worker.disconnect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_db::TestDatabase;

    fn pool(db: &TestDatabase, size: usize, wait: Duration) -> Connection {
        let target = Target::parse(&db.url).unwrap();
        Connection::start(target, PoolOptions { size, wait }).unwrap()
    }

    /// Runs a call on one of the pool's connections that holds it until the returned sender
    /// sends (or is dropped); returns once it runs, with a receiver that hears when it ended.
    fn hold(pool: &Connection) -> (mpsc::Sender<()>, mpsc::Receiver<()>) {
        let (release, held) = mpsc::channel::<()>();
        let (started, running) = mpsc::channel::<()>();
        let (reply, done) = mpsc::channel::<()>();
        let job: Job = Box::new(move |w: &mut Worker| {
            let _ = w.run("hold a connection of", move |client: &mut Client, _| {
                client.query_one("SELECT 1", &[])?;
                let _ = started.send(());
                let _ = held.recv();
                Ok(())
            });
            let _ = reply.send(());
        });
        {
            let mut q = pool.shared.lock();
            let n = q.next;
            q.next += 1;
            q.jobs.push_back((n, job));
        }
        pool.shared.ready.notify_one();
        running
            .recv_timeout(Duration::from_secs(60))
            .expect("the holding call started");
        (release, done)
    }

    #[test]
    fn a_call_that_finds_no_free_connection_fails_with_the_wait_error_and_never_runs() {
        let Some(db) = TestDatabase::create("pool_wait") else {
            return;
        };
        let wait = Duration::from_millis(300);
        let pool = pool(&db, 1, wait);
        let (release, done) = hold(&pool);
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let started = std::time::Instant::now();
        let e = pool
            .call("read events from", move |client, _| {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                client.query_one("SELECT 1", &[])?;
                Ok(())
            })
            .unwrap_err();
        assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
        assert!(
            matches!(e, StoreError::PostgresPoolWait { size: 1, .. }),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("failed to read events from the PostgreSQL store `")
                && text.contains(&crate::store::postgres::target::redact(&db.url))
                && text.contains("1 connection")
                && text.contains("300ms"),
            "{text}"
        );
        // The held connection is released: the timed-out call was taken out of the queue and
        // never runs; the next call gets the connection.
        release.send(()).unwrap();
        done.recv_timeout(Duration::from_secs(60)).unwrap();
        let n: i32 = pool
            .call("read from", |client, _| {
                Ok(client.query_one("SELECT 7", &[])?.try_get(0)?)
            })
            .unwrap();
        assert_eq!(n, 7);
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn a_call_that_panics_fails_alone_and_the_pool_keeps_its_connection_thread() {
        let Some(db) = TestDatabase::create("pool_panic") else {
            return;
        };
        let pool = pool(&db, 1, Duration::from_secs(60));
        let e = pool
            .call("read from", |_, _| -> Result<(), CallError> {
                panic!("a bug in a call")
            })
            .unwrap_err();
        assert!(matches!(e, StoreError::PostgresWorker { .. }), "{e:?}");
        let n: i32 = pool
            .call("read from", |client, _| {
                Ok(client.query_one("SELECT 5", &[])?.try_get(0)?)
            })
            .unwrap();
        assert_eq!(n, 5);
    }

    #[test]
    fn independent_calls_run_at_once_on_separate_connections() {
        let Some(db) = TestDatabase::create("pool_concurrent") else {
            return;
        };
        let pool = pool(&db, 2, Duration::from_secs(60));
        let (release, done) = hold(&pool);
        // With one connection held, another call still runs (it would wait 60 s otherwise,
        // and the held call waits for this one's answer only through the channel below).
        let n: i32 = pool
            .call("read from", |client, _| {
                Ok(client.query_one("SELECT 3", &[])?.try_get(0)?)
            })
            .unwrap();
        assert_eq!(n, 3);
        release.send(()).unwrap();
        done.recv_timeout(Duration::from_secs(60)).unwrap();
    }
}
