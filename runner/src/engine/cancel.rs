//! Cancellation of a job, with who asked (journalled as `cancel_requested`). Two levels: a drain
//! (finish the running round, start no other) and a cancel (stop the round's tree now).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// A cancel switch shared between whoever may cancel (signals, the API) and the running job.
#[derive(Clone, Debug, Default)]
pub struct Cancel {
    token: CancellationToken,
    by: Arc<Mutex<Option<String>>>,
    draining: Arc<AtomicBool>,
}

impl Cancel {
    /// A fresh, untriggered switch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels; the first canceller's name is kept (it replaces the name of a drain: a job
    /// stopped because a drain's grace passed says so, not just that a drain began).
    pub fn cancel(&self, by: &str) {
        if let Ok(mut slot) = self.by.lock() {
            if slot.is_none() || !self.token.is_cancelled() {
                *slot = Some(by.to_owned());
            }
            self.token.cancel();
            return;
        }
        self.token.cancel();
    }

    /// Asks the job to stop before its next round (the running round goes on).
    pub fn drain(&self, by: &str) {
        if let Ok(mut slot) = self.by.lock() {
            if slot.is_none() {
                *slot = Some(by.to_owned());
            }
        }
        self.draining.store(true, Ordering::SeqCst);
    }

    /// True once a drain or a cancel was asked for.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst) || self.is_cancelled()
    }

    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Who cancelled.
    pub fn by(&self) -> String {
        self.by
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or_else(|| "unknown".to_owned())
    }

    /// The underlying token (handed to sandbox runs).
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Resolves when cancelled.
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }
}
