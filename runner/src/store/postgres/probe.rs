//! Whether the PostgreSQL store can be reached now (for `/readyz`): a `SELECT 1` on a connection
//! of its own (never behind a stuck call of the pool), on a plain thread (the sync client cannot
//! run inside tokio), with short connect, TCP and statement timeouts. The answer is cached for
//! [`FRESH`], so a storm of checks costs one query a second; a check waits at most
//! [`ANSWER_WAIT`] for a new answer and counts silence as unreachable.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use postgres::Client;

use super::tls_connect::RustlsConnect;

use super::target::Target;
use super::worker::describe;
use crate::store::StoreError;

/// How long an answer is reused.
pub const FRESH: Duration = Duration::from_secs(1);
/// How long a check waits for the probe's answer.
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// Connect, TCP and statement timeout of the probe's connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

struct State {
    /// The last answer and when it came.
    last: Option<(Instant, Result<(), String>)>,
    /// Answers so far (a waiting check watches it change).
    answers: u64,
    /// A check asked for a new answer.
    wanted: bool,
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The readiness probe of one store.
pub struct Probe {
    shared: Arc<Shared>,
    target: String,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Probe").field(&self.target).finish()
    }
}

impl Probe {
    /// Starts the probe's thread for `target` (it connects on the first check).
    pub fn start(target: &Target) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                last: None,
                answers: 0,
                wanted: false,
                closed: false,
            }),
            changed: Condvar::new(),
        });
        let mut config = target.config.clone();
        config
            .connect_timeout(PROBE_TIMEOUT)
            .tcp_user_timeout(PROBE_TIMEOUT);
        let thread_shared = shared.clone();
        let tls = target.tls.clone();
        std::thread::Builder::new()
            .name("ralph-postgres-probe".into())
            .spawn(move || run(&thread_shared, &config, &tls))
            .map_err(|source| StoreError::Io {
                action: "start the PostgreSQL probe thread for",
                path: target.redacted.clone().into(),
                source,
            })?;
        Ok(Self {
            shared,
            target: target.redacted.clone(),
        })
    }

    /// `Ok` when the store answered a `SELECT 1` within the last [`FRESH`] or answers one now
    /// within [`ANSWER_WAIT`].
    pub fn check(&self) -> Result<(), StoreError> {
        let unreachable = |message: String| StoreError::PostgresUnreachable {
            target: self.target.clone(),
            message,
        };
        let mut st = self.shared.lock();
        if let Some((at, answer)) = &st.last
            && at.elapsed() < FRESH
        {
            return answer.clone().map_err(unreachable);
        }
        let seen = st.answers;
        st.wanted = true;
        self.shared.changed.notify_all();
        let deadline = Instant::now() + ANSWER_WAIT;
        while st.answers == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(unreachable(format!(
                    "no answer to `SELECT 1` within {ANSWER_WAIT:?}"
                )));
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        match &st.last {
            Some((_, answer)) => answer.clone().map_err(unreachable),
            None => Err(unreachable("no answer".into())),
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
    }
}

/// The probe's thread: answers each request with one `SELECT 1`, reconnecting as needed.
fn run(shared: &Shared, config: &postgres::Config, tls: &RustlsConnect) {
    let mut client: Option<Client> = None;
    loop {
        {
            let mut st = shared.lock();
            while !st.wanted && !st.closed {
                st = shared.changed.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.closed {
                return;
            }
            st.wanted = false;
        }
        let answer = once(&mut client, config, tls);
        if answer.is_err() {
            client = None;
        }
        let mut st = shared.lock();
        st.last = Some((Instant::now(), answer));
        st.answers = st.answers.wrapping_add(1);
        shared.changed.notify_all();
    }
}

fn once(
    client: &mut Option<Client>,
    config: &postgres::Config,
    tls: &RustlsConnect,
) -> Result<(), String> {
    if client.as_ref().is_none_or(Client::is_closed) {
        let mut c = config
            .connect(tls.clone())
            .map_err(|e| tls.explain(&e).unwrap_or_else(|| describe(&e)))?;
        c.batch_execute(&format!(
            "SET statement_timeout = '{}ms'",
            PROBE_TIMEOUT.as_millis()
        ))
        .map_err(|e| describe(&e))?;
        *client = Some(c);
    }
    match client {
        Some(c) => c
            .simple_query("SELECT 1")
            .map(|_| ())
            .map_err(|e| describe(&e)),
        None => Err("no connection".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_db::TestDatabase;

    #[test]
    fn a_store_that_refuses_connections_is_unreachable_and_named_without_its_password() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let target = Target::parse(&format!("postgres://u:s3cret@127.0.0.1:{port}/d")).unwrap();
        let probe = Probe::start(&target).unwrap();
        let e = probe.check().unwrap_err();
        assert!(matches!(e, StoreError::PostgresUnreachable { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "failed to reach the PostgreSQL store `postgres://u:***@127.0.0.1:{port}/d`: "
            )) && !text.contains("s3cret"),
            "{text}"
        );
    }

    #[test]
    fn a_live_store_is_reachable_and_the_answer_is_reused() {
        let Some(db) = TestDatabase::create("probe_live") else {
            return;
        };
        let probe = Probe::start(&Target::parse(&db.url).unwrap()).unwrap();
        probe.check().unwrap();
        let answers = probe.shared.lock().answers;
        probe.check().unwrap();
        let again = probe.shared.lock();
        // A second check within FRESH reuses the answer (unless the first one is already old).
        let fresh = again
            .last
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < FRESH);
        assert!(!fresh || again.answers == answers, "{}", again.answers);
    }
}
