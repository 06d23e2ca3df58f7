//! A job's journal as seen by the code that runs it: the current projection plus `record`,
//! which appends an event durably, advances the projection, and tells the observers.
//!
//! While a job runs, the only event another process may add to its journal is
//! `cancel_requested` (e.g. the API of another host sharing the store): `record` folds such
//! events into its projection and appends after them. Any other concurrent change is a
//! [`StoreError::Conflict`].

use std::sync::Arc;

use super::event::{Event, EventKind};
use super::projection::{JobState, JobView};
use super::{Store, StoreError, now_after};

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

    /// Tells the observers of an event journalled without them (the `job_started` of a claim);
    /// `view` is the projection right after it.
    pub fn announce(&self, view: &JobView, event: &Event) {
        for o in &self.observers {
            o.on_event(view, event);
        }
    }

    /// Appends `kind` durably and advances the projection. A `cancel_requested` that another
    /// process journalled meanwhile is folded in first (and a cancel request of ours after it
    /// is not journalled twice: the folded one is returned).
    pub fn record(&mut self, kind: EventKind) -> Result<Event, StoreError> {
        let mut folds = 0;
        loop {
            let event = Event {
                job_id: self.view.id.clone(),
                seq: self.view.seq + 1,
                at: now_after(&self.view.updated_at),
                kind: kind.clone(),
            };
            let mut next = self.view.clone();
            next.apply(&event)?;
            match blocking(|| self.store.append(&event, &next)) {
                Ok(()) => {
                    self.view = next;
                    for o in &self.observers {
                        o.on_event(&self.view, &event);
                    }
                    return Ok(event);
                }
                Err(conflict @ StoreError::Conflict { .. }) => {
                    if folds >= MAX_FOLDS || self.view.state != JobState::Running {
                        return Err(conflict);
                    }
                    folds += 1;
                    let Some(folded) = self.fold_foreign_cancels()? else {
                        return Err(conflict);
                    };
                    if matches!(kind, EventKind::CancelRequested { .. }) {
                        return Ok(folded);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Folds in the events appended by others since our last one, if they are all cancel
    /// requests; returns the last of them (`None`, changing nothing, otherwise).
    fn fold_foreign_cancels(&mut self) -> Result<Option<Event>, StoreError> {
        let seq = self.view.seq;
        let newer: Vec<Event> = blocking(|| self.store.events(&self.view.id))?
            .into_iter()
            .filter(|e| e.seq > seq)
            .collect();
        if newer.is_empty()
            || !newer
                .iter()
                .all(|e| matches!(e.kind, EventKind::CancelRequested { .. }))
        {
            return Ok(None);
        }
        let mut view = self.view.clone();
        for e in &newer {
            view.apply(e)?;
        }
        for e in &newer {
            self.view.apply(e)?;
            for o in &self.observers {
                o.on_event(&self.view, e);
            }
        }
        debug_assert_eq!(view, self.view);
        Ok(newer.last().cloned())
    }
}

/// How often one `record` folds in foreign cancel requests before giving up with the conflict.
const MAX_FOLDS: usize = 8;
