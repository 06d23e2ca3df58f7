//! The service's artifact retention (`retention` in the configuration): at start and then
//! every [`interval`] the artifacts of jobs finished more than `retention` ago are pruned from
//! this host's state directory ([`crate::engine::prune`]); each prune is logged.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Service;
use crate::store::journal::blocking;

/// How often a retention of `retention` is enforced: a quarter of it, between 1 s and 1 h.
pub fn interval(retention: Duration) -> Duration {
    (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

impl Service {
    /// Prunes finished jobs' artifacts while a retention is configured, until the service
    /// drains (a retention added by SIGHUP takes effect within a minute).
    pub(super) async fn keep_retention(self: Arc<Self>) {
        loop {
            if self.draining.load(Ordering::SeqCst) {
                return;
            }
            let Some(retention) = self.config().retention else {
                tokio::time::sleep(Duration::from_secs(60)).await;
                continue;
            };
            self.prune_once(retention.0);
            tokio::time::sleep(interval(retention.0)).await;
        }
    }

    fn prune_once(&self, retention: Duration) {
        let state_dir = self.config().state_dir;
        let store = self.engine.store();
        match blocking(|| crate::engine::prune::prune(store, &state_dir, retention, false)) {
            Ok(r) => {
                for j in &r.pruned {
                    tracing::info!(
                        job_id = %j.id,
                        files = j.files,
                        bytes = j.bytes,
                        finished_at = %j.finished_at,
                        "job {}: artifacts pruned (retention)",
                        j.id
                    );
                }
                for s in &r.skipped {
                    tracing::warn!(reason = %s, "retention: skipped {s}");
                }
                if !r.pruned.is_empty() {
                    tracing::info!(
                        jobs = r.pruned.len(),
                        files = r.files,
                        bytes = r.bytes,
                        retention = %crate::util::units::HumanDuration(retention),
                        "pruned the artifacts of {} job(s): {} file(s), {} bytes",
                        r.pruned.len(),
                        r.files,
                        r.bytes
                    );
                }
            }
            Err(e) => tracing::error!(error = %e, "retention: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_follows_the_retention_within_bounds() {
        assert_eq!(interval(Duration::from_secs(1)), Duration::from_secs(1));
        assert_eq!(interval(Duration::from_secs(60)), Duration::from_secs(15));
        assert_eq!(
            interval(Duration::from_secs(30 * 86_400)),
            Duration::from_secs(3600)
        );
    }
}
