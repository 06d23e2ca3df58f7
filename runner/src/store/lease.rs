//! This process's runner lease on a PostgreSQL store ([`super::postgres::lease`]), renewed by a
//! thread every third of `lease_timeout` while it lives; ended on drop (a clean exit).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::event::RunnerInfo;
use super::{Store, StoreError};

/// The default `lease_timeout`: a host silent this long has its running jobs closed.
pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_secs(60);

/// A live runner lease; `None` from [`Store::start_lease`] on SQLite (file holds need none).
#[derive(Debug)]
pub struct LeaseGuard {
    id: String,
    store: Weak<Store>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LeaseGuard {
    /// Creates the lease of `runner` in `store` and starts renewing it.
    pub(super) fn start(
        store: &Arc<Store>,
        pg: &super::postgres::PgStore,
        runner: &RunnerInfo,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let id = format!(
            "{}:{}:{}:{}",
            runner.host,
            runner.pid,
            runner.start_ticks,
            uuid::Uuid::now_v7().simple()
        );
        pg.create_lease(&id, runner, timeout)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (weak, st, lease, who) = (
            Arc::downgrade(store),
            stop.clone(),
            id.clone(),
            runner.clone(),
        );
        let every = (timeout / 3).max(Duration::from_millis(100));
        let thread = std::thread::Builder::new()
            .name("ralph-lease".into())
            .spawn(move || {
                let mut last = Instant::now();
                while !st.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                    if last.elapsed() < every {
                        continue;
                    }
                    last = Instant::now();
                    let Some(store) = weak.upgrade() else { return };
                    let renewed = store.renew_lease(&lease, timeout);
                    if let Ok(false) = renewed {
                        // Gone (ended by hand?): make it again, the jobs still name it.
                        let _ = store.recreate_lease(&lease, &who, timeout);
                    }
                }
            })
            .ok();
        Ok(Self {
            id,
            store: Arc::downgrade(store),
            stop,
            thread,
        })
    }

    /// The lease id (what `jobs.lease_id` names).
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(store) = self.store.upgrade() {
            let _ = store.end_lease(&self.id);
        }
    }
}
