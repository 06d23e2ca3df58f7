//! A job's journal as seen by the code that runs it: the current projection plus `record`,
//! which appends an event durably, advances the projection, and tells the observers.

use std::sync::Arc;

use super::event::{Event, EventKind};
use super::projection::JobView;
use super::{Store, StoreError, now_rfc3339};

/// Runs a short blocking store call from async code without stalling a multi-threaded runtime's
/// other tasks (`block_in_place`); on a current-thread runtime, or outside one, it just runs.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Something that wants to hear about every journalled event (progress display, metrics).
pub trait Observer: Send + Sync {
    /// Called after `event` is durable; `view` is the projection including it.
    fn on_event(&self, view: &JobView, event: &Event);
}

/// The writable journal of one job.
pub struct Journal {
    store: Arc<Store>,
    view: JobView,
    observers: Vec<Arc<dyn Observer>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("job", &self.view.id)
            .field("seq", &self.view.seq)
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Opens the journal of `job_id` (its projection is rebuilt from the stored events).
    pub fn open(
        store: Arc<Store>,
        job_id: &str,
        observers: Vec<Arc<dyn Observer>>,
    ) -> Result<Self, StoreError> {
        let view = store.load(job_id)?;
        Ok(Self {
            store,
            view,
            observers,
        })
    }

    /// The current projection.
    pub fn view(&self) -> &JobView {
        &self.view
    }

    /// Appends `kind` durably and advances the projection.
    pub fn record(&mut self, kind: EventKind) -> Result<Event, StoreError> {
        let event = Event {
            job_id: self.view.id.clone(),
            seq: self.view.seq + 1,
            at: now_rfc3339(),
            kind,
        };
        let mut next = self.view.clone();
        next.apply(&event)?;
        blocking(|| self.store.append(&event, &next))?;
        self.view = next;
        for o in &self.observers {
            o.on_event(&self.view, &event);
        }
        Ok(event)
    }
}
