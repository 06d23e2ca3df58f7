//! The service's periodic close of orphaned jobs ([`crate::engine::orphans`]): a `ralph run`
//! killed beside the service (SQLite), or a host whose lease lapsed (PostgreSQL), has its
//! running jobs closed as `interrupted` without anyone restarting. Every `lease_timeout / 2`
//! on PostgreSQL, every [`SQLITE_EVERY`] on SQLite (a few `flock` probes). Every
//! [`SWEEP_EVERY`] it also sweeps killed runs' private scratch from the state directory.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Service;
use crate::store::journal::blocking;

/// How often a SQLite store's running jobs are probed.
const SQLITE_EVERY: Duration = Duration::from_secs(2);

/// How often this host's state directory is swept of killed runs' private scratch
/// ([`crate::engine::scratch_sweep`]): a job killed here and closed by another host, or by this
/// one after its restart while the job ran elsewhere, leaves it.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

impl Service {
    /// Closes orphaned jobs until the service drains.
    pub(super) async fn watch_orphans(self: Arc<Self>) {
        let mut swept = std::time::Instant::now();
        loop {
            let every = if self.engine.store().is_sqlite() {
                SQLITE_EVERY
            } else {
                (self.config().lease_timeout.0 / 2).max(Duration::from_millis(200))
            };
            tokio::time::sleep(every).await;
            if self.draining.load(Ordering::SeqCst) {
                return;
            }
            match blocking(|| self.engine.close_orphans()) {
                Ok(r) if !r.interrupted.is_empty() => {
                    for id in &r.interrupted {
                        tracing::warn!(job_id = %id, "job {id}: closed as interrupted (its runner died)");
                    }
                    tracing::warn!(
                        interrupted = r.interrupted.len(),
                        jobs = %r.interrupted.join(","),
                        "closed {} job(s) whose runner died as interrupted: {}",
                        r.interrupted.len(),
                        r.interrupted.join(", ")
                    );
                    self.wake();
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(error = %e, "failed to close the jobs of dead runners: {e}")
                }
            }
            if swept.elapsed() >= SWEEP_EVERY {
                swept = std::time::Instant::now();
                let r = blocking(|| self.engine.sweep_scratch());
                if !r.removed.is_empty() {
                    tracing::info!(
                        removed = r.removed.len(),
                        "removed {} leftover private dir(s) of killed runs",
                        r.removed.len()
                    );
                }
            }
        }
    }
}
