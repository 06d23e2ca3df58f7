//! The engine runs jobs: it owns the state store, the sandboxes ([`Sandboxes`]) and the
//! runner's view of its environment, and drives each job through [`job_run`]'s fixed
//! orchestration. A job runs only while it holds its workspace's lock ([`workspace_lock`]: one
//! job per workspace on a host), which its caller takes before the job starts.
//!
//! One round, end to end:
//!
//! ```text
//! write in/prompt.md, in/handoff.json ─▶ journal round_started ─▶ spawn (sandbox helper)
//!   ─▶ journal round_spawned ─▶ wait (timeout / cancel kill the tree)
//!   ─▶ read out/report.json or the last JSON line of stdout ─▶ validate (SPEC §2)
//!   ─▶ read out/usage.jsonl ─▶ [journal workspace_sanitized] ─▶ journal round_finished
//!   ─▶ next round / retry / verify / finish
//! ```
//!
//! Before round 1, once per job: the set-up command ([`setup`], SPEC §12); set-up and verify
//! run as runner steps ([`runner_step`]) with the rounds' sandbox and egress, never more.

mod accept;
mod artifacts;
mod caches;
mod cancel;
mod cancel_watch;
mod change_watch;
pub(crate) mod close;
mod command_check;
pub mod env;
mod execute;
#[cfg(test)]
mod fake_sandbox;
mod fanout;
mod job_run;
mod judge;
#[cfg(test)]
mod loop_tests;
mod next_run;
#[cfg(test)]
mod next_run_tests;
pub mod orphans;
mod path_check;
mod preset_check;
pub mod prompt;
mod provisioned;
mod provisioned_upload;
pub mod prune;
#[cfg(test)]
mod resume_tests;
mod round;
mod round_finished;
pub mod round_gateway;
mod runner_step;
mod sandboxes;
mod sanitized;
pub mod scratch_sweep;
mod setup;
#[cfg(test)]
mod setup_tests;
#[cfg(test)]
mod stall_tests;
pub mod stdout_report;
mod toolchains;
mod undrained;
pub mod upstream;
mod verify;
pub mod workspace_lock;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use artifacts::{AttemptDirs, job_dir};
pub use cancel::Cancel;
pub use command_check::command_visible;
pub use env::RunnerEnv;
pub use job_run::backoff;
pub use sandboxes::Sandboxes;
pub use workspace_lock::{Holder, WorkspaceLock, WorkspaceLockError};

use crate::agent::Agent;
use crate::job::resolve::WritableTrees;
use crate::job::{Ceilings, JobId, JobResult, JobSpec};
use crate::store::{JobState, Journal, Observer, RunnerInfo, Store, StoreError};

/// A failure of the engine itself (not of the job, which has an outcome for that).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The job request is invalid.
    #[error(transparent)]
    Spec(#[from] crate::job::SpecError),
    /// The job cannot run with this configuration.
    #[error("{message}")]
    Config {
        /// What is wrong.
        message: String,
    },
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A filesystem operation failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A result broke an outcome invariant.
    #[error(transparent)]
    Invariant(#[from] crate::job::outcome::InvariantViolation),
    /// The job is not in a state this call can handle.
    #[error("job `{id}` is {state}, not queued or running")]
    NotRunnable {
        /// Job id.
        id: String,
        /// Its state.
        state: &'static str,
    },
    /// The job's state does not allow the operation.
    #[error("{message}")]
    Conflict {
        /// Why.
        message: String,
    },
    /// Anything else that should not happen.
    #[error("internal error: {message}")]
    Internal {
        /// What happened.
        message: String,
    },
}

impl EngineError {
    /// Whether the disk of the state directory or the store is full (the journal or an artifact
    /// could not be written for lack of room): the job is closed `interrupted` instead of left
    /// running ([`crate::store::reserve`]).
    pub fn is_disk_full(&self) -> bool {
        match self {
            EngineError::Store(e) => e.is_disk_full(),
            EngineError::Io { source, .. } => crate::store::reserve::is_no_space(source),
            _ => false,
        }
    }

    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        EngineError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }
}

/// How often a cancel request is tried again when the job changes under it.
const CANCEL_TRIES: usize = 8;

/// What [`Engine::request_cancel`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelRequest {
    /// The job was queued: it is now finished as cancelled.
    Cancelled,
    /// The job runs: the request is journalled, and its runner stops it.
    Requested,
    /// The job had already finished; nothing to cancel.
    NotActive {
        /// Its outcome.
        state: &'static str,
    },
}

/// Runs jobs.
pub struct Engine {
    store: Arc<Store>,
    /// What starts the agent, set-up and verify processes (a test's fake in its tests).
    sandboxes: Sandboxes,
    state_dir: PathBuf,
    runner: RunnerInfo,
    env: RunnerEnv,
    ceilings: Ceilings,
    observers: Vec<Arc<dyn Observer>>,
    pub(crate) agent_user: Option<String>,
    upstreams: upstream::Upstreams,
    /// The runner's side of provisioned workspaces (credentials, push).
    provision: crate::provision::ProvisionConfig,
    /// The bytes of request bodies all the model gateways of this process may hold at once
    /// (`ralph serve` runs every job's gateway in the service).
    gateway_pool: Arc<crate::gateway::BytePool>,
    /// The bytes this host's caches may hold (SPEC §12, `cache_budget`).
    cache_budget: u64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("state_dir", &self.state_dir)
            .field("runner", &self.runner)
            .field("observers", &self.observers.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine over `store` (in `state_dir`), running rounds in `sandboxes`.
    pub fn new(
        store: Arc<Store>,
        sandboxes: Sandboxes,
        state_dir: PathBuf,
        runner: RunnerInfo,
        env: RunnerEnv,
    ) -> Self {
        Self {
            store,
            sandboxes,
            state_dir,
            runner,
            env,
            ceilings: Ceilings::default(),
            observers: Vec::new(),
            agent_user: None,
            upstreams: upstream::Upstreams::Local,
            provision: crate::provision::ProvisionConfig::default(),
            gateway_pool: crate::gateway::BytePool::new(crate::gateway::PROCESS_BUFFERED_BYTES),
            cache_budget: crate::cache::DEFAULT_BUDGET,
        }
    }

    /// The bytes this host's caches may hold (default [`crate::cache::DEFAULT_BUDGET`]): the
    /// least recently used go first after a set-up keeps one.
    pub fn with_cache_budget(mut self, bytes: u64) -> Self {
        self.cache_budget = bytes;
        self
    }

    /// The runner's side of provisioned workspaces (SPEC §11).
    pub fn with_provision(mut self, provision: crate::provision::ProvisionConfig) -> Self {
        self.provision = provision;
        self
    }

    /// How jobs find their model upstream (default: [`upstream::Upstreams::Local`], as
    /// `ralph run` does).
    pub fn with_upstreams(mut self, upstreams: upstream::Upstreams) -> Self {
        self.upstreams = upstreams;
        self
    }

    /// The user a root runner's rounds run as when the workspace is root's (`None`: the
    /// sandbox's default, see `ralph_sandbox::identity`).
    pub fn with_agent_user(mut self, agent_user: Option<String>) -> Self {
        self.agent_user = agent_user;
        self
    }

    /// Observers that hear every event this engine journals (metrics, live followers), on top
    /// of the ones a single [`Engine::run`] adds.
    pub fn with_observers(mut self, observers: Vec<Arc<dyn Observer>>) -> Self {
        self.observers = observers;
        self
    }

    /// The engine-wide observers.
    pub fn observers(&self) -> Vec<Arc<dyn Observer>> {
        self.observers.clone()
    }

    /// Replaces the deployment ceilings.
    pub fn with_ceilings(mut self, ceilings: Ceilings) -> Self {
        self.ceilings = ceilings;
        self
    }

    /// The state store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Validates and journals a new job.
    pub fn submit(&self, spec: &JobSpec) -> Result<JobId, EngineError> {
        self.submit_with_priority(spec, 0)
    }

    /// Validates and journals a new job as started by this runner (`ralph run`): it is never in
    /// the queue, so no service sharing the store can take it.
    pub fn submit_started(&self, spec: &JobSpec) -> Result<JobId, EngineError> {
        self.check(spec)?;
        Ok(self.store.submit_started(spec, &self.runner)?)
    }

    /// [`Engine::submit_started`] under the job's run hold, taken before the job is journalled
    /// ([`crate::store::hold`]): it is never seen running without a holder. Keep the hold until
    /// the run ends and pass its observer to [`Engine::run`].
    pub fn submit_started_held(
        &self,
        spec: &JobSpec,
    ) -> Result<(JobId, crate::store::hold::RunHold), EngineError> {
        self.check(spec)?;
        let id = crate::job::new_job_id();
        let hold = self.hold_job(&id)?;
        let id = self.store.submit_started_as(id, spec, &self.runner)?;
        Ok((id, hold))
    }

    /// Takes the run hold of `job_id` for this runner (before it claims the job).
    pub fn hold_job(&self, job_id: &str) -> Result<crate::store::hold::RunHold, StoreError> {
        self.store.hold_job(&self.state_dir, job_id, &self.runner)
    }

    /// Removes the private scratch that killed runs left in this state directory
    /// ([`scratch_sweep`]).
    pub fn sweep_scratch(&self) -> scratch_sweep::SweepReport {
        sweep_attempts(&self.store, &self.state_dir);
        scratch_sweep::sweep(&self.state_dir)
    }

    /// Closes as `interrupted` every running job of the store whose runner is gone
    /// ([`orphans`]).
    pub fn close_orphans(&self) -> Result<orphans::OrphanReport, StoreError> {
        orphans::close_orphans(&self.store, &self.state_dir, &self.runner, &self.observers)
    }

    /// Validates and journals a new job with a queue priority.
    pub fn submit_with_priority(
        &self,
        spec: &JobSpec,
        priority: i32,
    ) -> Result<JobId, EngineError> {
        self.check(spec)?;
        Ok(self.accept(None, spec, priority)?)
    }

    /// The writable trees this engine knows of: the workspaces and `write` directories of the
    /// jobs in its store ([`Store::writable_trees`]). A new job's paths are resolved against
    /// these ([`crate::job::request::JobRequest::into_spec`]), and so are a job's before each of
    /// its rounds.
    ///
    /// The store's trees are looked up when a walk meets a symlink, without waiting out an
    /// outage: a failed lookup refuses the link and is told by
    /// [`WritableTrees::lookup_failure`] (the store's fault, not the request's).
    pub fn writable_trees(&self) -> WritableTrees {
        crate::store::trees::writable_trees(&self.store, crate::store::trees::Patience::None)
    }

    /// Checks a job request against the ceilings, the agent presets and the environment.
    pub fn check(&self, spec: &JobSpec) -> Result<(), EngineError> {
        spec.validate(&self.ceilings)?;
        let agent = Agent::resolve(&spec.agent).map_err(|e| EngineError::Config {
            message: e.to_string(),
        })?;
        if let Some(p) = agent.preset() {
            p.check(spec)
                .map_err(|message| EngineError::Config { message })?;
        }
        let named = spec.env.iter().map(|n| ("--env", n));
        let for_setup = spec
            .setup
            .iter()
            .flat_map(|s| &s.env)
            .map(|n| ("--setup-env", n));
        for (flag, name) in named.chain(for_setup) {
            if let Some(e) = self.env.cannot_pass(flag, name) {
                return Err(EngineError::Config {
                    message: e.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Takes the workspace lock a job needs to run ([`WorkspaceLock`]); when another job or
    /// process holds it, the error names the holder, as a job of this engine's store where it
    /// is one. Reads the store only then (blocking).
    pub fn lock_workspace(&self, workspace: &Path) -> Result<WorkspaceLock, WorkspaceLockError> {
        WorkspaceLock::try_acquire(workspace).map_err(|e| e.in_store(&self.store))
    }

    /// Runs a queued job to its end, holding `workspace`, the lock of its workspace, until
    /// then. `cancel` stops it (the round's tree is killed).
    pub async fn run(
        &self,
        job_id: &str,
        workspace: WorkspaceLock,
        cancel: Cancel,
        observers: Vec<Arc<dyn Observer>>,
    ) -> Result<JobResult, EngineError> {
        let mut all = self.observers.clone();
        let attempt_observers: Vec<Arc<dyn Observer>> = observers
            .iter()
            .filter(|o| o.hears_attempts())
            .cloned()
            .collect();
        all.extend(observers);
        let journal = Journal::open_patiently(self.store.clone(), job_id, all)?;
        let view = journal.view();
        if view.state == JobState::Finished {
            return Err(EngineError::NotRunnable {
                id: job_id.to_owned(),
                state: view.state.as_str(),
            });
        }
        if workspace.path() != view.spec.workspace {
            return Err(EngineError::Internal {
                message: format!(
                    "job `{job_id}` runs in `{}` but the lock held is that of `{}`",
                    view.spec.workspace.display(),
                    workspace.path().display()
                ),
            });
        }
        let agent = Agent::resolve(&view.spec.agent).map_err(|e| EngineError::Config {
            message: e.to_string(),
        })?;
        let since = cancel_watch::run_epoch(&self.store, job_id)?;
        let _watch = cancel_watch::CancelWatch::start(
            self.store.clone(),
            job_id.to_owned(),
            since,
            cancel.clone(),
        )?;
        let mut run = job_run::JobRun::new(self, journal, agent, cancel);
        run.attempt_observers = attempt_observers;
        let result = run.run().await;
        drop(workspace);
        // Room came back (a job's files pruned, the disk grown): the reserve is made again.
        let _ = crate::store::journal::blocking(|| self.store.replenish_reserve(&self.state_dir));
        result
    }

    /// Re-arms a finished job (interrupted, cancelled, error, round-failed) with its remaining
    /// budget and its last valid report; it goes back to the queue.
    pub fn resume(&self, job_id: &str) -> Result<(), EngineError> {
        self.resume_by(job_id, None, &crate::job::RaisedCaps::default())
    }

    /// [`Engine::resume`], journalling who asked (an API token's name) and the caps raised
    /// (SPEC §3: a `budget-limited` job is re-armed only with the cap it ran out of raised;
    /// each must exceed what the job has used and stay within this engine's ceilings).
    pub fn resume_by(
        &self,
        job_id: &str,
        by: Option<&str>,
        caps: &crate::job::RaisedCaps,
    ) -> Result<(), EngineError> {
        let mut journal = Journal::open(self.store.clone(), job_id, self.observers.clone())?;
        let view = journal.view();
        if let Some(why) = crate::store::projection::resume_refusal(view, caps) {
            return Err(EngineError::Conflict { message: why });
        }
        let used = crate::job::caps::Used {
            rounds: view.rounds_started,
            tokens: view.usage.budget_tokens(),
            ran_ms: view.elapsed_ms,
        };
        caps.check(used, &self.ceilings)
            .map_err(EngineError::Spec)?;
        let mut spec = view.spec.clone();
        caps.apply(&mut spec);
        let raised = if caps.is_empty() {
            String::new()
        } else {
            format!(" and raised caps ({})", caps.describe())
        };
        let message = format!(
            "re-armed after `{}` with {} of {} rounds left{raised}",
            view.outcome().map_or("?", |o| o.as_str()),
            spec.max_rounds - view.rounds_started,
            spec.max_rounds
        );
        journal.record(crate::store::EventKind::Resumed {
            message,
            by: by.map(str::to_owned),
            caps: caps.clone(),
        })?;
        Ok(())
    }

    /// Asks a job to stop, wherever it runs: a queued job is cancelled at once; for a job that
    /// runs, `cancel_requested` is journalled and its runner (this process or another one
    /// sharing the store) stops it when it sees the request. A job running in this process is
    /// better cancelled through its [`Cancel`] (no polling delay).
    pub fn request_cancel(&self, job_id: &str, by: &str) -> Result<CancelRequest, EngineError> {
        for _ in 0..CANCEL_TRIES {
            match self.cancel_queued(job_id, by) {
                Ok(true) => return Ok(CancelRequest::Cancelled),
                Ok(false) => {}
                Err(EngineError::Store(StoreError::Conflict { .. })) => continue,
                Err(e) => return Err(e),
            }
            let mut journal = Journal::open(self.store.clone(), job_id, self.observers.clone())?;
            match journal.view().state {
                JobState::Queued => continue,
                JobState::Finished => {
                    return Ok(CancelRequest::NotActive {
                        state: journal.view().outcome().map_or("finished", |o| o.as_str()),
                    });
                }
                JobState::Running if journal.view().cancel_requested => {
                    return Ok(CancelRequest::Requested);
                }
                JobState::Running => {
                    match journal
                        .record(crate::store::EventKind::CancelRequested { by: by.to_owned() })
                    {
                        Ok(_) => return Ok(CancelRequest::Requested),
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Err(EngineError::Conflict {
            message: format!(
                "job `{job_id}` kept changing while it was being cancelled; try again"
            ),
        })
    }

    /// Cancels a job that has not started: journals the request and the outcome. Returns
    /// `false` when the job is not queued (a running job is cancelled through its [`Cancel`]).
    pub fn cancel_queued(&self, job_id: &str, by: &str) -> Result<bool, EngineError> {
        let mut journal = Journal::open(self.store.clone(), job_id, self.observers.clone())?;
        if journal.view().state != JobState::Queued {
            return Ok(false);
        }
        journal.record(crate::store::EventKind::CancelRequested { by: by.to_owned() })?;
        close::close_job(
            &mut journal,
            close::Ending::new(
                crate::job::Outcome::Cancelled,
                crate::job::FinishReason::CancelRequested,
                format!("cancelled by {by} before it started"),
            ),
            &self.job_dir(job_id),
        )?;
        Ok(true)
    }

    /// The runner identity this engine journals.
    pub fn runner(&self) -> &RunnerInfo {
        &self.runner
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Runs every process in `sandbox` instead (tests drive the loop with a fake,
    /// `ralph_sandbox::testing`).
    #[cfg(test)]
    pub(crate) fn with_sandbox(mut self, sandbox: Arc<dyn ralph_sandbox::Sandbox>) -> Self {
        self.sandboxes = self.sandboxes.replaced_by(sandbox);
        self
    }

    /// The sandboxes.
    pub fn sandboxes(&self) -> &Sandboxes {
        &self.sandboxes
    }

    /// Where a job's artifacts are.
    pub fn job_dir(&self, job_id: &str) -> PathBuf {
        artifacts::job_dir(&self.state_dir, job_id)
    }
}

/// Removes the attempts' workspaces (overlays unmounted, copies deleted) of fan-out jobs no
/// longer running: what a killed runner left (SPEC §13). Run after the dead runners' jobs were
/// closed; returns how many.
pub fn sweep_attempts(store: &Store, state_dir: &Path) -> usize {
    fanout::layout::sweep(state_dir, |job| {
        store
            .load(job)
            .is_ok_and(|v| v.state == crate::store::JobState::Running)
    })
}
