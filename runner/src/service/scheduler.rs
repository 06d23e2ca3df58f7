//! Which queued job the service starts next: at most `max_concurrent_jobs` at once, and one job
//! at a time per workspace on this host (SPEC §5).
//!
//! A pass over the queue, every 2 s and whenever a job is queued or ends:
//!
//! ```text
//! next_queued(skip: running ids + passed over, busy: workspaces of running jobs + found held)
//!   ├─ provisioned: its workspace is this host's `<state-dir>/workspaces/<id>`; an upload this
//!   │  host does not have, or a resumed job another host provisioned, is passed over (SPEC §11)
//!   └─ WorkspaceLock::try_acquire(its workspace), then the job's run hold (store::hold)
//!        ├─ held by another process ─▶ workspace added to `busy`; the job stays queued
//!        └─ locked ─▶ claim(id) (journals job_started iff still queued)
//!                       ├─ claimed ─▶ launch: Engine::run holds the lock to the job's end
//!                       └─ not queued any more (cancelled, another host took it) ─▶ unlock, pass over
//! ```
//!
//! The lock is taken before the claim and held across it: from the moment the workspace is
//! found free until the job ends nothing else on this host can take it, so a job is never
//! journalled `job_started` and then found blocked (a `ralph run` arriving in between is the one
//! refused). Claiming first and locking after would leave, on a lost race, a started job that
//! cannot run; probing the lock and releasing it before the claim would leave the same window.
//! Workspaces of this service's own running jobs are skipped by the queue query without a probe
//! (their lock would refuse anyway: each job has its own open file description), and a workspace
//! found held is skipped for the rest of the pass, so jobs of other workspaces start behind a
//! blocked one (no head-of-line blocking) and each blocked workspace costs one probe per pass.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Service, changed_by_another_runner};
use crate::engine::{Cancel, Holder, WorkspaceLock, WorkspaceLockError};
use crate::store::QueuedJob;
use crate::store::hold::RunHold;
use crate::store::journal::blocking;

/// A job this service runs.
#[derive(Debug)]
pub(super) struct RunningJob {
    /// Its cancel switch.
    pub(super) cancel: Cancel,
    /// Its workspace (held by its lock while it runs).
    pub(super) workspace: PathBuf,
    /// The slots of `max_concurrent_jobs` it takes: its attempts (SPEC §13), else 1.
    pub(super) slots: usize,
}

impl Service {
    fn running_workspaces(&self) -> Vec<PathBuf> {
        self.running
            .lock()
            .map(|m| m.values().map(|r| r.workspace.clone()).collect())
            .unwrap_or_default()
    }

    /// Starts queued jobs while there is room, until the service drains.
    pub(super) async fn schedule(self: Arc<Self>) {
        loop {
            if self.draining.load(Ordering::SeqCst) {
                return;
            }
            self.start_queued();
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
    }

    /// One pass over the queue (see the module doc).
    fn start_queued(self: &Arc<Self>) {
        let max = self.config().max_concurrent_jobs;
        // Queued jobs wait while the state disk has no room: their claim would journal on it.
        if self.state_room().is_err() {
            return;
        }
        let mut passed: Vec<String> = Vec::new();
        let mut busy = self.running_workspaces();
        loop {
            let used = self.running_slots();
            if used >= max {
                return;
            }
            let mut skip = self.running_ids();
            skip.extend(passed.iter().cloned());
            let next = blocking(|| self.engine.store().next_queued(&skip, &busy));
            let mut job = match next {
                Ok(Some(job)) => job,
                Ok(None) => {
                    // Every queued job was seen: forget the waits of jobs no longer waiting.
                    if let Ok(mut w) = self.waiting.lock() {
                        w.retain(|id, _| passed.contains(id));
                    }
                    return;
                }
                Err(e) if e.is_disk_full() => {
                    self.log_disk_full(&e.to_string());
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %e, "failed to claim a job from the queue: {e}");
                    return;
                }
            };
            // A fan-out job's attempts run at once: it takes a slot for each (SPEC §13), and
            // waits while they are not free (it never waits on an idle host: admission keeps
            // `attempts` within `max_concurrent_jobs`).
            let slots = blocking(|| self.engine.store().load(&job.id)).map_or(1, |v| {
                usize::try_from(v.spec.attempts.max(1)).unwrap_or(usize::MAX)
            });
            if used > 0 && used + slots > max {
                passed.push(job.id);
                continue;
            }
            // A workspace this pass made for a job it then does not start is removed again
            // (another host took the job: none of its files may be here).
            let mut made = false;
            if job.provisioned {
                match blocking(|| self.local_workspace(&job)) {
                    Some((w, m)) => (job.workspace, made) = (w, m),
                    None => {
                        passed.push(job.id);
                        continue;
                    }
                }
            }
            let unmake = |workspace: &std::path::Path| {
                if made {
                    let _ = std::fs::remove_dir(workspace);
                }
            };
            let lock = match blocking(|| WorkspaceLock::try_acquire(&job.workspace)) {
                Err(WorkspaceLockError::Busy { holder, .. }) => {
                    self.note_waiting(&job, holder);
                    passed.push(job.id);
                    busy.push(job.workspace);
                    continue;
                }
                // Locked, or unusable (gone, not a directory, refused by the filesystem): such a
                // job is claimed and closed as an error rather than left queued for ever.
                other => other,
            };
            // The run hold before the claim: the job is never running without a holder.
            let hold = match blocking(|| self.engine.hold_job(&job.id)) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(job_id = %job.id, error = %e, "job {}: not started now: {e}", job.id);
                    drop(lock);
                    unmake(&job.workspace);
                    passed.push(job.id);
                    continue;
                }
            };
            // The claim journals `job_started` atomically: another runner sharing the store
            // never gets the same job.
            match blocking(|| self.engine.store().claim(&job.id, self.engine.runner())) {
                Ok(true) => {
                    if let Ok(mut w) = self.waiting.lock() {
                        w.remove(&job.id);
                    }
                    busy.push(job.workspace.clone());
                    self.clone().launch(slots, job, lock, hold);
                }
                Ok(false) => {
                    drop(lock);
                    unmake(&job.workspace);
                    passed.push(job.id);
                }
                Err(e) if e.is_disk_full() => {
                    self.log_disk_full(&e.to_string());
                    drop(lock);
                    unmake(&job.workspace);
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %e, "failed to claim a job from the queue: {e}");
                    drop(lock);
                    unmake(&job.workspace);
                    return;
                }
            }
        }
    }

    /// Where a provisioned job would run on this host (SPEC §11): `<this state dir>/workspaces/<id>`
    /// (made if missing), whichever host accepted it; `None` when it is not this host's to run:
    /// an upload this host does not have, or a resumed job whose workspace another host made.
    /// The second value says whether the directory was made now.
    fn local_workspace(&self, job: &QueuedJob) -> Option<(PathBuf, bool)> {
        let state_dir = self.engine.state_dir();
        if let Some(upload) = &job.upload
            && !crate::provision::upload::upload_dir(state_dir, upload).is_dir()
        {
            return None;
        }
        let view = self.engine.store().load(&job.id).ok()?;
        if view.base_commit.is_some() {
            let me = self.engine.runner();
            let elsewhere = view
                .provisioned_by
                .as_ref()
                .is_some_and(|by| by.same_place(me) == Some(false));
            return (!elsewhere).then(|| (view.spec.workspace.clone(), false));
        }
        let root = crate::provision::workspaces_dir(state_dir);
        let _ = std::fs::create_dir_all(&root);
        let workspace = root.join(&job.id);
        // Made here for the lock.
        let made = std::fs::create_dir(&workspace).is_ok();
        Some((workspace, made))
    }

    /// Logs a job's start: its workspace, backend, and whether it was resumed.
    fn log_start(&self, id: &str) {
        match blocking(|| self.engine.store().load(id)) {
            Ok(v) => tracing::info!(
                job_id = %id,
                kind = v.spec.kind.as_str(),
                workspace = %v.spec.workspace.display(),
                backend = %v.spec.sandbox.backend,
                resumed = v.resumes > 0,
                resumes = v.resumes,
                rounds_before = v.rounds_started,
                max_rounds = v.spec.max_rounds,
                "job started"
            ),
            Err(e) => tracing::info!(job_id = %id, error = %e, "job started"),
        }
    }

    /// Logs, once per holder, that `job` waits for its workspace.
    fn note_waiting(&self, job: &QueuedJob, holder: Holder) {
        let pid = match &holder {
            Holder::Job { pid, .. } | Holder::Process { pid, .. } => Some(*pid),
            Holder::Unknown => None,
        };
        let Ok(mut waiting) = self.waiting.lock() else {
            return;
        };
        if waiting.get(&job.id) == Some(&pid) {
            return;
        }
        waiting.insert(job.id.clone(), pid);
        drop(waiting);
        let holder = blocking(|| holder.in_store(self.engine.store(), &job.workspace));
        tracing::info!(
            job_id = %job.id,
            workspace = %job.workspace.display(),
            holder = %holder,
            "job {}: waits in the queue: the workspace `{}` is in use by {holder}",
            job.id,
            job.workspace.display()
        );
    }

    /// Runs a claimed job, holding its workspace lock until it ends; a job whose workspace
    /// could not be locked is closed as an error.
    fn launch(
        self: Arc<Self>,
        slots: usize,
        job: QueuedJob,
        lock: Result<WorkspaceLock, WorkspaceLockError>,
        hold: RunHold,
    ) {
        let cancel = Cancel::new();
        if let Ok(mut m) = self.running.lock() {
            m.insert(
                job.id.clone(),
                RunningJob {
                    cancel: cancel.clone(),
                    workspace: job.workspace,
                    slots,
                },
            );
        }
        let id = job.id;
        tokio::spawn(async move {
            match lock {
                Ok(lock) => self.run_job(&id, lock, cancel, &hold).await,
                Err(e) => {
                    tracing::error!(job_id = %id, error = %e, "job {id}: {e}");
                    self.fail_with_retries(&id, &e.to_string()).await;
                }
            }
            drop(hold);
            if let Ok(mut m) = self.running.lock() {
                m.remove(&id);
            }
            self.wake.notify_one();
        });
    }

    /// Runs a claimed job to its end; one the engine could not finish is closed as an error.
    async fn run_job(&self, id: &str, lock: WorkspaceLock, cancel: Cancel, hold: &RunHold) {
        self.log_start(id);
        match self
            .engine
            .run(id, lock, cancel, vec![hold.observer()])
            .await
        {
            Ok(r) => tracing::info!(
                job_id = %id,
                outcome = r.outcome.as_str(),
                reason = r.reason.as_str(),
                rounds = r.rounds,
                retries = r.retries,
                duration_ms = r.duration_ms,
                exit_code = r.exit_code,
                detail = %r.message,
                "job finished"
            ),
            Err(e) if changed_by_another_runner(&e) => tracing::warn!(
                job_id = %id,
                error = %e,
                "job {id}: left as it is, another runner changed its journal: {e}"
            ),
            Err(e) => {
                tracing::error!(job_id = %id, error = %e, "job {id}: {e}");
                self.fail_with_retries(id, &e.to_string()).await;
            }
        }
        // A provisioned workspace just became removable: the disk budget holds at once.
        if self.config().provision.workspace_budget.is_some() {
            crate::store::journal::blocking(|| self.sweep_workspaces());
        }
    }
}
