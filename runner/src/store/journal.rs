//! A job's journal as seen by the code that runs it: the current projection plus `record`,
//! which appends an event durably, advances the projection, and tells the observers.
//!
//! While a job runs, the only event another process may add to its journal is
//! `cancel_requested` (e.g. the API of another host sharing the store): `record` folds such
//! events into its projection and appends after them. Any other concurrent change is a
//! [`StoreError::Conflict`].
//!
//! A journal keeps every event it knows (read at open, appended, folded in), so that when an
//! append finds the stored journal *shorter* than its own — the database lost writes it had
//! acknowledged (a crash with unflushed commits, a failover to a replica that lagged) — it can
//! tell its own lost writes from another runner's: the stored journal is then a prefix of the
//! one it knows, and the lost tail is journalled again, with its original times, before the new
//! event. A stored journal that differs from the known one is another runner's change.
//!
//! A store that cannot be reached ([`StoreError::is_unreachable`]) is waited for, with backoff,
//! up to [`OUTAGE_PATIENCE`]: a database restart does not end a round whose result is in hand.
//!
//! A write that finds the disk full ([`StoreError::is_disk_full`]) frees the state directory's
//! reserve ([`super::reserve`]) and is tried once more: the event that would have been lost (a
//! round's end, the job's close) is journalled in the freed room, and the disk stays marked full
//! ([`Store::disk_full`]) so the runner closes the job instead of starting another round. A
//! write that still finds no room is tried again, with backoff, up to [`DISK_FULL_PATIENCE`]
//! (room may come back: another job's files removed); then it fails, and the runner closes the
//! job `interrupted` (reason `disk_full`) where it can. The patience is spent once per journal
//! until a write succeeds, so the closing writes are not delayed again.

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

    /// Whether the journals of a fan-out job's attempts (SPEC §13) are heard too, when this
    /// observer is given to one run of that job (counters are; a job's progress display is
    /// not: the attempts' rounds are not its rounds).
    fn hears_attempts(&self) -> bool {
        false
    }
}

/// The writable journal of one job.
pub struct Journal {
    store: Arc<Store>,
    view: JobView,
    /// The whole journal as this process knows it (`view` is its projection).
    known: Vec<Event>,
    observers: Vec<Arc<dyn Observer>>,
    /// When a write first found the disk full, until one succeeds again.
    disk_full_since: Option<std::time::Instant>,
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
    /// [`Journal::open`] for a running job: waits out an unreachable store ([`patiently`]).
    pub fn open_patiently(
        store: Arc<Store>,
        job_id: &str,
        observers: Vec<Arc<dyn Observer>>,
    ) -> Result<Self, StoreError> {
        patiently(|| Self::open(store.clone(), job_id, observers.clone()))
    }

    /// Opens the journal of `job_id` (its projection is rebuilt from the stored events).
    pub fn open(
        store: Arc<Store>,
        job_id: &str,
        observers: Vec<Arc<dyn Observer>>,
    ) -> Result<Self, StoreError> {
        let known = store.events(job_id)?;
        let view = JobView::project(&known)?;
        Ok(Self {
            store,
            view,
            known,
            observers,
            disk_full_since: None,
        })
    }

    /// The current projection.
    pub fn view(&self) -> &JobView {
        &self.view
    }

    /// The store this journal writes to.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
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
    /// is not journalled twice: the folded one is returned). Writes of ours that the store lost
    /// are journalled again first; an unreachable store is waited for (module doc).
    pub fn record(&mut self, kind: EventKind) -> Result<Event, StoreError> {
        let mut reconciled = 0;
        let mut outage: Option<Outage> = None;
        let mut freed = false;
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
                    self.disk_full_since = None;
                    self.view = next;
                    self.known.push(event.clone());
                    for o in &self.observers {
                        o.on_event(&self.view, &event);
                    }
                    return Ok(event);
                }
                Err(e) if e.is_unreachable() => {
                    outage.get_or_insert_with(Outage::new).wait(e)?;
                }
                Err(e) if e.is_disk_full() => {
                    // First the reserve's room; then a bounded wait for room to come back.
                    if !freed && self.store.release_reserve(&e.to_string()) {
                        freed = true;
                        continue;
                    }
                    freed = true;
                    let since = *self
                        .disk_full_since
                        .get_or_insert_with(std::time::Instant::now);
                    let waited = since.elapsed();
                    if waited >= DISK_FULL_PATIENCE {
                        return Err(e);
                    }
                    let pause = DISK_FULL_BACKOFF.min(DISK_FULL_PATIENCE - waited);
                    blocking(|| std::thread::sleep(pause));
                }
                Err(conflict @ StoreError::Conflict { .. }) => {
                    if reconciled >= MAX_RECONCILES || self.view.state != JobState::Running {
                        return Err(conflict);
                    }
                    reconciled += 1;
                    match self.reconcile()? {
                        Reconciled::Foreign => return Err(conflict),
                        Reconciled::Repaired => {}
                        Reconciled::Folded(folded) => {
                            if matches!(kind, EventKind::CancelRequested { .. }) {
                                return Ok(*folded);
                            }
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Compares the stored journal with the known one after a failed append: folds in newer
    /// foreign cancel requests, journals again our own writes the store lost, or says the
    /// journal is another runner's now.
    fn reconcile(&mut self) -> Result<Reconciled, StoreError> {
        let stored = blocking(|| self.store.events(&self.view.id))?;
        let common = stored
            .iter()
            .zip(&self.known)
            .take_while(|(s, k)| s == k)
            .count();
        if common == self.known.len() && stored.len() > common {
            return Ok(match self.fold_foreign_cancels(&stored[common..])? {
                Some(folded) => Reconciled::Folded(Box::new(folded)),
                None => Reconciled::Foreign,
            });
        }
        if common != stored.len() || common >= self.known.len() {
            return Ok(Reconciled::Foreign);
        }
        // The stored journal is a strict prefix of ours: the store lost our last writes.
        let lost: Vec<Event> = self.known[common..].to_vec();
        let mut view = JobView::project(&stored)?;
        for event in &lost {
            view.apply(event)?;
            match blocking(|| self.store.append(event, &view)) {
                Ok(()) => {}
                // Another runner wrote meanwhile: the job is not ours to repair.
                Err(StoreError::Conflict { .. }) => return Ok(Reconciled::Foreign),
                Err(e) => return Err(e),
            }
        }
        debug_assert_eq!(view, self.view);
        eprintln!(
            "ralph: job {}: the store had lost {} event(s) it acknowledged (seq {}..={}); journalled them again",
            self.view.id,
            lost.len(),
            common + 1,
            self.known.len()
        );
        Ok(Reconciled::Repaired)
    }

    /// Folds in `newer`, the events appended by others after all we know, if they are all
    /// cancel requests; returns the last of them (`None`, changing nothing, otherwise).
    fn fold_foreign_cancels(&mut self, newer: &[Event]) -> Result<Option<Event>, StoreError> {
        if newer.is_empty()
            || !newer
                .iter()
                .all(|e| matches!(e.kind, EventKind::CancelRequested { .. }))
        {
            return Ok(None);
        }
        let mut view = self.view.clone();
        for e in newer {
            view.apply(e)?;
        }
        for e in newer {
            self.view.apply(e)?;
            self.known.push(e.clone());
            for o in &self.observers {
                o.on_event(&self.view, e);
            }
        }
        debug_assert_eq!(view, self.view);
        Ok(newer.last().cloned())
    }
}

/// What a failed append found in the stored journal.
enum Reconciled {
    /// Others' cancel requests, now folded in (the last one).
    Folded(Box<Event>),
    /// Our own lost writes, now journalled again.
    Repaired,
    /// Another runner's change: the job is no longer ours to journal.
    Foreign,
}

/// How long `record` keeps trying an event that finds the disk full (after the reserve was
/// freed) before it gives up: room that comes back within it loses nothing; a disk that stays
/// full has its job closed within it.
pub const DISK_FULL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The pause between two tries of an event that found the disk full.
const DISK_FULL_BACKOFF: std::time::Duration = std::time::Duration::from_millis(500);

/// How long `record` waits for an unreachable store before it gives up. A job given up on is
/// closed as `interrupted` once the store is back (by this process's orphan watch: its lease
/// no longer covers a job it stopped running).
pub const OUTAGE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs a store call of a running job, waiting out an unreachable store (with backoff, up to
/// [`OUTAGE_PATIENCE`]) as `record` does: a database restart between two events must not end
/// the job as an error. Answers (conflicts, refusals) come back at once.
pub fn patiently<T>(mut f: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    let mut outage: Option<Outage> = None;
    loop {
        match blocking(&mut f) {
            Err(e) if e.is_unreachable() => outage.get_or_insert_with(Outage::new).wait(e)?,
            other => return other,
        }
    }
}

/// One outage seen by one `record`: when it began, and the backoff.
struct Outage {
    began: std::time::Instant,
    tries: u32,
}

impl Outage {
    fn new() -> Self {
        Self {
            began: std::time::Instant::now(),
            tries: 0,
        }
    }

    /// Sleeps before the next try, or gives `e` back once the patience is spent.
    fn wait(&mut self, e: StoreError) -> Result<(), StoreError> {
        if self.began.elapsed() >= OUTAGE_PATIENCE {
            return Err(e);
        }
        if self.tries == 0 {
            eprintln!("ralph: the store is unreachable; waiting up to {OUTAGE_PATIENCE:?}: {e}");
        }
        self.tries += 1;
        let pause = std::time::Duration::from_millis(200u64 << self.tries.min(4));
        blocking(|| std::thread::sleep(pause));
        Ok(())
    }
}

/// How often one `record` reconciles with the stored journal (folds in foreign cancel
/// requests, repairs lost writes) before giving up with the conflict.
const MAX_RECONCILES: usize = 8;
