//! Hears cancel requests that other processes journal for a job this process runs (the API of
//! another host sharing the PostgreSQL store, or `ralph serve` beside a `ralph run` on the same
//! state directory): the journal is polled through the store about once a second while the job
//! runs, and a request found triggers the job's [`Cancel`], as a local cancel would.

use std::sync::Arc;
use std::time::Duration;

use super::cancel::Cancel;
use crate::store::journal::blocking;
use crate::store::{EventKind, Store, StoreError};

/// How often the journal is polled.
pub const POLL: Duration = Duration::from_secs(1);

/// Polls while alive; stops when dropped.
#[derive(Debug)]
pub struct CancelWatch {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The sequence number after which cancel requests concern the current run of a job: its last
/// `resumed` event (a request before it was answered by the earlier run), or 0.
pub fn run_epoch(store: &Store, job_id: &str) -> Result<u64, StoreError> {
    Ok(store
        .events(job_id)?
        .iter()
        .rev()
        .find(|e| matches!(e.kind, EventKind::Resumed { .. }))
        .map_or(0, |e| e.seq))
}

impl CancelWatch {
    /// Checks once now (a request may already be journalled), then watches from a task of the
    /// current runtime.
    pub fn start(
        store: Arc<Store>,
        job_id: String,
        since: u64,
        cancel: Cancel,
    ) -> Result<Self, StoreError> {
        if let Some(by) = blocking(|| store.cancel_requested_after(&job_id, since))? {
            cancel.cancel(&by);
        }
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(POLL).await;
                if cancel.is_cancelled() {
                    return;
                }
                // A failed poll (the database is briefly away) is tried again next time.
                if let Ok(Some(by)) = blocking(|| store.cancel_requested_after(&job_id, since)) {
                    cancel.cancel(&by);
                    return;
                }
            }
        });
        Ok(Self { task })
    }
}
