//! The fixed orchestration of one job (SPEC §3): the Ralph loop for loop jobs, a single run
//! for task jobs, and the one place where a job's outcome is decided and journalled.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ralph_sandbox::ErrorClass;

use super::Engine;
use super::EngineError;
use super::cancel::Cancel;
use super::round::{AttemptEnd, ReportPolicy};
use super::verify::VerifyEnd;
use crate::agent::Agent;
use crate::job::{FinishReason, JobKind, JobResult, JobSpec, Outcome, RoundFailure};
use crate::report::{Report, Status};
use crate::store::{EventKind, JobState, JobView, Journal, StoreError};

/// Whether the job goes on (`Continue`, with what the step produced) or a step ended it
/// (`Break`: the job is closed).
type Flow<T = ()> = std::ops::ControlFlow<(), T>;

/// A step that closed the job: `Break` once `finish` is recorded.
fn ended<T>(finish: Result<(), EngineError>) -> Result<Flow<T>, EngineError> {
    finish.map(|()| Flow::Break(()))
}

/// Longest pause between retries.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// A job being run by this process.
pub(super) struct JobRun<'e> {
    pub(super) engine: &'e Engine,
    pub(super) journal: Journal,
    pub(super) spec: JobSpec,
    pub(super) agent: Agent,
    pub(super) job_dir: PathBuf,
    pub(super) cancel: Cancel,
    pub(super) deadline: Option<Instant>,
    pub(super) started: Instant,
    /// What the agent preset carries between rounds (cumulative usage baselines).
    pub(super) carry: crate::agent::output::Carry,
    /// The job's model upstream with its key, resolved before round 1 (SPEC §9).
    pub(super) upstream: Option<super::upstream::ResolvedUpstream>,
    /// What its rounds and verify are granted of the runner's toolchains (SPEC §12).
    pub(super) toolchain: crate::toolchain::ToolchainGrant,
    /// Its caches, resolved before the set-up (SPEC §12).
    pub(super) caches: Vec<crate::cache::CacheEntry>,
    /// The observers given to this run that hear its attempts' journals too (SPEC §13).
    pub(super) attempt_observers: Vec<std::sync::Arc<dyn crate::store::Observer>>,
    /// A run was announced ([`super::next_run`]) and has not started: discarded if this run of
    /// the job ends first.
    pub(super) announced: bool,
}

impl Drop for JobRun<'_> {
    fn drop(&mut self) {
        // However the job's run ends (an error, a cancel or the deadline after a forecast that
        // another run follows included), nothing announced for it stays started: an idle runner
        // keeps no helper. (A job that ends by `finish` has discarded it before `job_finished`.)
        self.discard_announced();
    }
}

/// The delay before retry number `attempt` (1-based): base · 2^(attempt-1), capped.
pub fn backoff(base: Duration, attempt: u32) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    base.checked_mul(factor)
        .unwrap_or(MAX_BACKOFF)
        .min(MAX_BACKOFF)
}

impl<'e> JobRun<'e> {
    pub(super) fn new(engine: &'e Engine, journal: Journal, agent: Agent, cancel: Cancel) -> Self {
        let spec = journal.view().spec.clone();
        let job_dir = super::artifacts::job_dir(&engine.state_dir, &journal.view().id);
        let started = Instant::now();
        // A resumed job's deadline continues from the time its earlier runs used.
        let used = std::time::Duration::from_millis(journal.view().elapsed_ms);
        let deadline = spec.job_timeout.map(|t| started + t.0.saturating_sub(used));
        Self {
            engine,
            journal,
            spec,
            agent,
            job_dir,
            cancel,
            deadline,
            started,
            carry: Default::default(),
            upstream: None,
            toolchain: Default::default(),
            caches: Vec::new(),
            attempt_observers: Vec::new(),
            announced: false,
        }
    }

    /// The timeout of the next process, and whether the job deadline (rather than the round
    /// timeout) is what bounds it.
    pub(super) fn attempt_timeout(&self) -> (Option<Duration>, bool) {
        let round = self.spec.round_timeout.map(|t| t.0);
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()));
        match (round, left) {
            (None, None) => (None, false),
            (Some(r), None) => (Some(r), false),
            (None, Some(l)) => (Some(l), true),
            (Some(r), Some(l)) => (Some(r.min(l)), l <= r),
        }
    }

    pub(super) fn deadline_passed(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Journals the cancel request once.
    pub(super) fn note_cancel(&mut self) -> Result<(), EngineError> {
        if !self.journal.view().cancel_requested {
            self.journal.record(EventKind::CancelRequested {
                by: self.cancel.by(),
            })?;
        }
        Ok(())
    }

    /// Runs the job to its end.
    pub(super) async fn run(mut self) -> Result<JobResult, EngineError> {
        // The first round's sandbox process starts while the job's start is recorded.
        self.announce();
        // A job the service claimed is already running under this runner (the claim journalled
        // its `job_started`); one that runs under another runner is not ours to touch.
        let view = self.journal.view();
        match view.state {
            JobState::Running if view.runner.as_ref() != Some(&self.engine.runner) => {
                return Err(EngineError::Conflict {
                    message: format!(
                        "job `{}` is running under another runner{}",
                        view.id,
                        view.runner.as_ref().map_or_else(String::new, |r| format!(
                            " (`ralph {}`, pid {} on {})",
                            r.role, r.pid, r.host
                        ))
                    ),
                });
            }
            JobState::Running => self.announce_start()?,
            JobState::Queued | JobState::Finished => {
                self.journal.record(EventKind::JobStarted {
                    runner: self.engine.runner.clone(),
                })?;
            }
        }
        // Marked for the scratch sweeps before any private scratch is made; unmarked when the
        // run ends with none left (dropped at the end of this function).
        let id = self.journal.view().id.clone();
        let _mark = match super::scratch_sweep::Mark::take(&self.engine.state_dir, &id) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(
                    job_id = %id,
                    error = %e,
                    "job {id}: failed to mark it for the scratch sweep (a killed run's private HOME and TMPDIR would stay): {e}"
                );
                None
            }
        };
        let checked = self.provision().await;
        let checked = match checked {
            Ok(()) => self.preflight(),
            Err(e) => Err(e),
        };
        let checked = match checked {
            Ok(()) => self.preflight_agent(),
            Err(e) => Err(e),
        };
        let checked = match checked {
            Ok(()) => self.resolve_caches(),
            Err(e) => Err(e),
        };
        let ran = match checked {
            // The set-up (SPEC §12) before anything else runs; no round if it did not pass.
            Ok(()) => match self.setup().await {
                Ok(super::setup::AfterSetup::Go) => match self.spec.kind {
                    JobKind::Loop if self.spec.attempts > 1 => self.run_fanout().await,
                    JobKind::Loop => self.run_loop().await,
                    JobKind::Task => self.run_task().await,
                },
                Ok(super::setup::AfterSetup::Finished) => Ok(()),
                Err(e) => Err(e),
            },
            Err((reason, message)) => self.finish(Outcome::Error, reason, &message, None),
        };
        match ran {
            Ok(()) => {}
            // A full disk never leaves the job running: closed in the reserve's room.
            Err(e) if e.is_disk_full() => self.close_disk_full(e)?,
            Err(e) => return Err(e),
        }
        self.result()
    }

    /// Why the state directory's disk has no room for another round, if so. A round starts
    /// only with the reserve in place (made again here when it is missing and there is room
    /// for it) and its margin free besides ([`crate::store::reserve`]): without them, a round
    /// that fills the disk would leave no room to record its end. A disk without that room is
    /// marked full, and the reserve freed for the writes that close the job.
    pub(super) fn state_disk_full(&self) -> Option<String> {
        let store = self.journal.store();
        let why = store.room(&self.engine.state_dir).err()?;
        store.release_reserve(&why);
        Some(why)
    }

    /// Ends the job `interrupted` because the state disk is full (`why`).
    pub(super) fn finish_disk_full(&mut self, why: &str) -> Result<(), EngineError> {
        let msg = disk_full_message(why, &self.journal.view().id);
        self.finish(Outcome::Interrupted, FinishReason::DiskFull, &msg, None)
    }

    /// A write failed for lack of room (`cause`) where the loop could not go on: the open
    /// round (if any) and the job are closed as interrupted in the reserve's room. When even
    /// that cannot be written, `cause` is returned (the next `ralph run` or `ralph serve` on the
    /// store closes the job, SPEC §8).
    fn close_disk_full(&mut self, cause: EngineError) -> Result<(), EngineError> {
        let why = cause.to_string();
        let store = self.journal.store().clone();
        store.release_reserve(&why);
        if self.journal.view().state == JobState::Finished {
            return Ok(());
        }
        self.release_workspace();
        self.discard_announced();
        let id = self.journal.view().id.clone();
        let end = super::close::Ending {
            ran_ms: Some(self.ran_ms()),
            ..super::close::Ending::new(
                Outcome::Interrupted,
                FinishReason::DiskFull,
                disk_full_message(&why, &id),
            )
        };
        let closed = super::close::close_job(&mut self.journal, end, &self.job_dir);
        match closed {
            Ok(_) => Ok(()),
            Err(_) => Err(cause),
        }
    }

    /// The `job_started` of a job claimed for this runner was journalled by the claim, before
    /// this run's observers (progress, metrics, followers) existed: they hear it now.
    fn announce_start(&self) -> Result<(), EngineError> {
        let id = &self.journal.view().id;
        let events = crate::store::journal::patiently(|| self.engine.store.events(id))?;
        if let Some(i) = events
            .iter()
            .rposition(|e| matches!(e.kind, EventKind::JobStarted { .. }))
        {
            let view = JobView::project(&events[..=i]).map_err(StoreError::from)?;
            self.journal.announce(&view, &events[i]);
        }
        Ok(())
    }

    /// Fails closed before any round when the sandbox or workspace cannot work.
    fn preflight(&self) -> Result<(), (FinishReason, String)> {
        if !self.spec.workspace.is_dir() {
            return Err((
                FinishReason::InternalError,
                format!(
                    "the workspace `{}` is not a directory",
                    self.spec.workspace.display()
                ),
            ));
        }
        let known = self.known_trees();
        self.paths_unchanged(&known)
            .map_err(|e| (finish_reason_of(e.class()), e.to_string()))?;
        let dirs = super::artifacts::AttemptDirs::new(&self.job_dir, 0, 0);
        let mut req = self.sandbox_request(&dirs, Vec::new(), Vec::new());
        // The rounds' own network (the gateway is refused up front where it cannot be had).
        req.network = Some(self.spec.network());
        self.engine
            .sandboxes
            .get(self.spec.sandbox.backend)
            .preflight(&req)
            .map_err(|e| (finish_reason_of(e.class()), e.to_string()))
    }

    /// Fails closed before any round when the agent cannot work (SPEC §6, §9): the preset's
    /// CLI, or the program the agent, set-up or verify command starts with, is not visible in the
    /// sandbox, the model upstream's key is missing, or the key would
    /// enter the sandbox. Each is a configuration error (exit 64) whose message says the fix.
    fn preflight_agent(&mut self) -> Result<(), (FinishReason, String)> {
        let config = |m: String| (FinishReason::Configuration, m);
        self.grant_toolchains()?;
        if let Some(p) = self.agent.preset() {
            p.check(&self.spec).map_err(config)?;
            if self.spec.sandbox.backend == ralph_sandbox::BackendKind::Native {
                super::preset_check::program_visible(
                    p,
                    &self.spec,
                    &self.engine.env,
                    &self.engine.sandboxes,
                )
                .map_err(config)?;
            }
        }
        // The agent's and the verify command's program, where the native sandbox's view is
        // known (a docker image has its own).
        if self.spec.sandbox.backend == ralph_sandbox::BackendKind::Native {
            let commands = [
                match &self.spec.agent {
                    crate::job::AgentSpec::Command { command } => {
                        Some(("the agent command", command))
                    }
                    crate::job::AgentSpec::Preset { .. } => None,
                },
                self.spec
                    .setup
                    .as_ref()
                    .map(|s| ("the set-up command", &s.command)),
                self.spec.verify.as_ref().map(|v| ("the verify command", v)),
            ];
            for (what, command) in commands.into_iter().flatten() {
                super::command_check::command_visible(
                    what,
                    command,
                    &self.spec,
                    &self.engine.env,
                    &self.engine.sandboxes,
                )
                .map_err(config)?;
            }
        }
        if self.spec.network() == ralph_sandbox::Network::Gateway {
            let upstream = self
                .engine
                .upstreams
                .resolve(&self.spec, &self.agent, &self.engine.env)
                .map_err(|e| config(e.message))?;
            if let Some(u) = upstream.as_ref().filter(|u| !u.key.is_empty()) {
                let holds_key =
                    |n: &&String| self.engine.env.get(n).is_some_and(|v| v.trim() == u.key);
                if let Some(name) = self.spec.env.iter().find(holds_key) {
                    return Err(config(format!(
                        "`--env {name}` would put the model API's key into the sandbox; the gateway adds it on the way out: drop `--env {name}`"
                    )));
                }
                // No step holds the model key, the set-up included.
                if let Some(name) = self.spec.setup.iter().flat_map(|s| &s.env).find(holds_key) {
                    return Err(config(format!(
                        "`--setup-env {name}` would put the model API's key into the set-up's sandbox; no step holds it: drop `--setup-env {name}`"
                    )));
                }
            }
            // The plan is built for real once, so a bad URL is found before round 1.
            super::round_gateway::GatewayPlan::new(
                &self.spec,
                upstream.as_ref(),
                0,
                &self.engine.gateway_pool,
            )
            .map_err(|e| config(e.message))?;
            self.upstream = upstream;
        }
        Ok(())
    }

    /// The loop job: a round after another until one of them ends the job.
    async fn run_loop(&mut self) -> Result<(), EngineError> {
        let mut stall = self.stall_watch();
        loop {
            if let Flow::Break(()) = self.end_before_round()? {
                return Ok(());
            }
            let round = self.journal.view().rounds_started + 1;
            let before = stall.as_mut().and_then(Stall::digest);
            let report = match self.round_report(round).await? {
                Flow::Continue(r) => r,
                Flow::Break(()) => return Ok(()),
            };
            if let Some(s) = stall.as_mut() {
                s.round_ended(before);
            }
            if let Flow::Break(()) = self.on_report(round, &report).await? {
                return Ok(());
            }
            if let Some(k) = stall.as_ref().and_then(Stall::stalled) {
                let msg = format!(
                    "the last {k} round(s) changed nothing in the workspace (--max-stalled-rounds {k})"
                );
                return self.finish(Outcome::BudgetLimited, FinishReason::Stalled, &msg, None);
            }
        }
    }

    /// Ends the job before its next round when the disk, a cancel, the budget, the rounds or
    /// the deadline say so.
    fn end_before_round(&mut self) -> Result<Flow, EngineError> {
        if let Some(why) = self.state_disk_full() {
            return ended(self.finish_disk_full(&why));
        }
        let view = self.journal.view();
        if self.cancel.is_draining() {
            return ended(self.finish_cancelled());
        }
        if self.budget_spent() {
            return ended(self.finish_budget());
        }
        if view.rounds_started >= self.spec.max_rounds {
            let msg = match view.verified {
                Some(false) => format!(
                    "all {} rounds used; the last round reported completion but the verify command failed",
                    self.spec.max_rounds
                ),
                _ => format!(
                    "all {} rounds used without completion",
                    self.spec.max_rounds
                ),
            };
            return ended(self.finish(Outcome::BudgetLimited, FinishReason::MaxRounds, &msg, None));
        }
        if self.deadline_passed() {
            return ended(self.finish_deadline());
        }
        Ok(Flow::Continue(()))
    }

    /// Runs round `round`, retried as the spec allows, to its report; the job ends instead
    /// when an attempt says so.
    async fn round_report(&mut self, round: u32) -> Result<Flow<Report>, EngineError> {
        let mut attempt = 1;
        let mut retry_note: Option<String> = None;
        loop {
            let a = self
                .attempt(
                    round,
                    attempt,
                    retry_note.as_deref(),
                    ReportPolicy::Required,
                )
                .await?;
            let (reason, message) = match a.end {
                AttemptEnd::Reported(r) => return Ok(Flow::Continue(r)),
                AttemptEnd::Exited => {
                    return Err(EngineError::Internal {
                        message: "a loop round ended without its required report".into(),
                    });
                }
                AttemptEnd::Failed(reason, message) => (reason, message),
                AttemptEnd::CannotRun(msg) => {
                    return ended(self.finish(
                        Outcome::Error,
                        FinishReason::Configuration,
                        &msg,
                        None,
                    ));
                }
                AttemptEnd::Cancelled => return ended(self.finish_cancel_requested(None)),
                AttemptEnd::Deadline => return ended(self.finish_deadline()),
                AttemptEnd::BudgetSpent => return ended(self.finish_budget()),
                AttemptEnd::SandboxFailed(e) => return ended(self.finish_sandbox_error(&e)),
                AttemptEnd::DiskFull(why) => return ended(self.finish_disk_full(&why)),
            };
            if attempt > self.spec.round_retries {
                let msg =
                    format!("round {round} failed after {attempt} attempt(s): {reason}: {message}");
                return ended(self.finish(
                    Outcome::RoundFailed,
                    FinishReason::RoundFailed,
                    &msg,
                    None,
                ));
            }
            if let Flow::Break(()) = self.pause_before_retry(round, attempt, reason).await? {
                return Ok(Flow::Break(()));
            }
            retry_note = Some(format!("{reason}: {message}"));
            attempt += 1;
        }
    }

    /// The backoff before attempt `attempt + 1` of round `round`, then the checks a retry
    /// passes before it is journalled; the job ends instead when one fails.
    async fn pause_before_retry(
        &mut self,
        round: u32,
        attempt: u32,
        reason: RoundFailure,
    ) -> Result<Flow, EngineError> {
        // A spent budget needs no backoff to be known.
        if self.budget_spent() {
            return ended(self.finish_budget());
        }
        let pause = backoff(self.spec.retry_backoff.0, attempt);
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = self.cancel.cancelled() => {}
            () = tokio::time::sleep(left.unwrap_or(pause)), if left.is_some() => {}
        }
        if self.cancel.is_draining() {
            return ended(self.finish_cancelled());
        }
        if self.deadline_passed() {
            return ended(self.finish_deadline());
        }
        // The budget holds for every attempt, retries included.
        if self.budget_spent() {
            return ended(self.finish_budget());
        }
        if let Some(why) = self.state_disk_full() {
            return ended(self.finish_disk_full(&why));
        }
        // Journalled only now that the retry really starts.
        self.journal.record(EventKind::RoundRetried {
            round,
            attempt,
            reason,
            backoff_ms: u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
        })?;
        Ok(Flow::Continue(()))
    }

    /// What the round's report does to the job: `continue` goes on, `blocked` ends it, and
    /// `complete` ends it once verified (a failed verify goes on).
    async fn on_report(&mut self, round: u32, report: &Report) -> Result<Flow, EngineError> {
        match report.status {
            Status::Continue => Ok(Flow::Continue(())),
            Status::Blocked => {
                let msg = format!("worker reported blocked: {}", report.blocker);
                ended(self.finish(Outcome::Blocked, FinishReason::Reported, &msg, None))
            }
            Status::Complete => {
                let Some(command) = self.spec.verify.clone() else {
                    let msg = "worker reported completion (not verified: no verify command)";
                    return ended(self.finish(
                        Outcome::Complete,
                        FinishReason::Reported,
                        msg,
                        None,
                    ));
                };
                match self.verify(round, &command).await? {
                    VerifyEnd::Passed => {
                        let msg = format!("worker reported completion; verified by `{command}`");
                        ended(self.finish(Outcome::Complete, FinishReason::Verified, &msg, None))
                    }
                    VerifyEnd::Failed => Ok(Flow::Continue(())),
                    VerifyEnd::Cancelled => ended(self.finish_cancel_requested(None)),
                    VerifyEnd::Deadline => ended(self.finish_deadline()),
                    VerifyEnd::SandboxFailed(e) => ended(self.finish_sandbox_error(&e)),
                    VerifyEnd::DiskFull(why) => ended(self.finish_disk_full(&why)),
                    VerifyEnd::CannotRun(msg) => {
                        ended(self.finish(Outcome::Error, FinishReason::Configuration, &msg, None))
                    }
                }
            }
        }
    }

    /// Ends the job as cancelled by whoever asked (`code`: a task's exit status, if it had
    /// one).
    fn finish_cancel_requested(&mut self, code: Option<i32>) -> Result<(), EngineError> {
        let msg = format!("cancelled by {}", self.cancel.by());
        self.finish(
            Outcome::Cancelled,
            FinishReason::CancelRequested,
            &msg,
            code,
        )
    }

    /// The change watch of `--max-stalled-rounds` (none when it is off).
    fn stall_watch(&self) -> Option<Stall> {
        let k = self.spec.max_stalled_rounds;
        if k == 0 {
            return None;
        }
        // The runner's placeholders: the mode's protected paths and the job's own.
        let mut placeholders: Vec<std::path::PathBuf> = self
            .engine
            .sandboxes
            .policies()
            .get(self.spec.sandbox.mode)
            .map(|p| p.protect.paths.clone())
            .unwrap_or_default();
        placeholders.extend(self.spec.sandbox.protect.iter().cloned());
        Some(Stall {
            limit: k,
            in_a_row: 0,
            watch: super::change_watch::ChangeWatch::new(self.spec.workspace.clone(), placeholders),
        })
    }

    async fn run_task(&mut self) -> Result<(), EngineError> {
        if let Some(why) = self.state_disk_full() {
            return self.finish_disk_full(&why);
        }
        if self.cancel.is_draining() {
            return self.finish_cancelled();
        }
        let a = self.attempt(1, 1, None, ReportPolicy::OptionalFile).await?;
        let code = a.exit.map(|t| t.shell_code());
        match a.end {
            AttemptEnd::Cancelled => self.finish_cancel_requested(code),
            AttemptEnd::Deadline => self.finish(
                Outcome::Failed,
                FinishReason::JobTimeout,
                "the job timeout passed; the task was killed",
                code,
            ),
            AttemptEnd::SandboxFailed(e) => self.finish_sandbox_error(&e),
            AttemptEnd::DiskFull(why) => self.finish_disk_full(&why),
            AttemptEnd::BudgetSpent => self.finish_budget(),
            AttemptEnd::CannotRun(msg) => {
                self.finish(Outcome::Error, FinishReason::Configuration, &msg, code)
            }
            AttemptEnd::Failed(reason, message) => self.finish(
                Outcome::Failed,
                FinishReason::TaskExit,
                &format!("{reason}: {message}"),
                code,
            ),
            AttemptEnd::Reported(_) | AttemptEnd::Exited => {
                let exit = a
                    .exit
                    .map_or_else(|| "did not run".to_owned(), |t| t.to_string());
                if code != Some(0) {
                    return self.finish(
                        Outcome::Failed,
                        FinishReason::TaskExit,
                        &format!("the task ended with {exit}"),
                        code,
                    );
                }
                let Some(command) = self.spec.verify.clone() else {
                    return self.finish(
                        Outcome::Complete,
                        FinishReason::TaskExit,
                        "the task exited 0",
                        code,
                    );
                };
                // The verify result decides a task's outcome, report or not (SPEC §3).
                match self.verify(1, &command).await? {
                    VerifyEnd::Passed => self.finish(
                        Outcome::Complete,
                        FinishReason::Verified,
                        &format!("the task exited 0; verified by `{command}`"),
                        code,
                    ),
                    VerifyEnd::Failed => self.finish(
                        Outcome::Failed,
                        FinishReason::TaskExit,
                        &format!("the task exited 0 but `{command}` failed"),
                        code,
                    ),
                    VerifyEnd::Cancelled => self.finish_cancel_requested(code),
                    VerifyEnd::Deadline => self.finish(
                        Outcome::Failed,
                        FinishReason::JobTimeout,
                        "the job timeout passed during verify",
                        code,
                    ),
                    VerifyEnd::SandboxFailed(e) => self.finish_sandbox_error(&e),
                    VerifyEnd::DiskFull(why) => self.finish_disk_full(&why),
                    VerifyEnd::CannotRun(msg) => {
                        self.finish(Outcome::Error, FinishReason::Configuration, &msg, code)
                    }
                }
            }
        }
    }

    /// Ends the job as cancelled, saying whether it was stopped mid-round or between rounds.
    pub(super) fn finish_cancelled(&mut self) -> Result<(), EngineError> {
        self.note_cancel()?;
        let by = self.cancel.by();
        let msg = if self.cancel.is_cancelled() {
            format!("cancelled by {by}")
        } else {
            format!(
                "stopped between rounds ({by}); `ralph resume {}` continues it",
                self.journal.view().id
            )
        };
        self.finish(
            Outcome::Cancelled,
            FinishReason::CancelRequested,
            &msg,
            None,
        )
    }

    fn finish_deadline(&mut self) -> Result<(), EngineError> {
        let t = self
            .spec
            .job_timeout
            .map_or_else(String::new, |t| format!(" of {t}"));
        self.finish(
            Outcome::BudgetLimited,
            FinishReason::JobTimeout,
            &format!("the job timeout{t} passed"),
            None,
        )
    }

    /// Whether the job's token budget is spent.
    fn budget_spent(&self) -> bool {
        self.spec
            .max_tokens
            .is_some_and(|max| self.journal.view().usage.budget_tokens() >= max)
    }

    fn finish_budget(&mut self) -> Result<(), EngineError> {
        let view = self.journal.view();
        let used = view.usage.budget_tokens();
        let max = self.spec.max_tokens.unwrap_or(0);
        let msg = format!(
            "token budget exhausted: {used} of {max} tokens used in {} round(s)",
            view.rounds_started
        );
        self.finish(Outcome::BudgetLimited, FinishReason::MaxTokens, &msg, None)
    }

    pub(super) fn finish_sandbox_error(
        &mut self,
        e: &ralph_sandbox::SandboxError,
    ) -> Result<(), EngineError> {
        // A helper that could not write its result on a full disk: the disk is why.
        if let Some(why) = self.state_disk_full() {
            return self.finish_disk_full(&format!("{why} ({e})"));
        }
        self.finish(
            Outcome::Error,
            finish_reason_of(e.class()),
            &e.to_string(),
            None,
        )
    }

    /// Journals the job's one outcome through [`super::close::close_job`], which checks the
    /// result it makes first (SPEC §3): a result that breaks an invariant is never journalled
    /// as the outcome; an `error` naming the broken invariant is, instead.
    pub(super) fn finish(
        &mut self,
        outcome: Outcome,
        reason: FinishReason,
        message: &str,
        exit_code: Option<i32>,
    ) -> Result<(), EngineError> {
        // Nothing announced stays started once the job is seen finished.
        self.discard_announced();
        // A provisioned workspace's result is written before the job is seen finished.
        self.write_result()?;
        self.release_workspace();
        self.keep_files_in_store();
        let end = super::close::Ending {
            exit_code,
            ran_ms: Some(self.ran_ms()),
            ..super::close::Ending::new(outcome, reason, message)
        };
        super::close::close_job(&mut self.journal, end, &self.job_dir)?;
        Ok(())
    }

    /// How long this run of the job has run.
    fn ran_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// On a shared store, copies the job's files (patch, reports, capped logs) into it before
    /// the job is seen finished, so that every host of the fleet answers for them (SPEC §11,
    /// [`crate::store::job_files`]). A failure is logged: the files stay on this host's disk,
    /// and the other hosts' answers name it.
    fn keep_files_in_store(&self) {
        let store = self.journal.store();
        if !store.keeps_job_files() {
            return;
        }
        let id = self.journal.view().id.clone();
        let files = crate::store::job_files::collect(&self.engine.job_dir(&id));
        if let Err(e) = store.put_job_files(&id, files) {
            tracing::warn!(job_id = %id, error = %e, "job {id}: its files were not kept in the shared store (they stay on this host's disk): {e}");
        }
    }

    /// The result object the job would have if it ended now as given.
    fn result_of(
        &self,
        outcome: Outcome,
        reason: FinishReason,
        message: &str,
        exit_code: Option<i32>,
    ) -> JobResult {
        let v = self.journal.view();
        JobResult {
            job_id: v.id.clone(),
            kind: v.spec.kind,
            outcome,
            reason,
            message: message.to_owned(),
            rounds: v.rounds_started,
            max_rounds: v.spec.max_rounds,
            retries: v.retries,
            verified: v.verified,
            report: v.last_report.clone(),
            resumed: v.resumes > 0,
            usage: v.usage,
            exit_code,
            artifacts: self.job_dir.clone(),
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The result object of the finished job; its invariants are checked again here.
    fn result(&self) -> Result<JobResult, EngineError> {
        let v = self.journal.view();
        let finish = v.finish.as_ref().ok_or_else(|| EngineError::Internal {
            message: "the job did not finish".into(),
        })?;
        let result = self.result_of(
            finish.outcome,
            finish.reason,
            &finish.message,
            finish.exit_code,
        );
        result.check()?;
        Ok(result)
    }
}

/// The message of a job closed because the state disk is full.
fn disk_full_message(why: &str, id: &str) -> String {
    format!(
        "the state dir's disk is full: {why}; the job was closed instead of running on without room for its journal; free space, then `ralph resume {id}` continues it"
    )
}

/// How a sandbox that could not be set up ends a job: the host cannot enforce it (69), the
/// request cannot run as given (64), or something broke (70).
fn finish_reason_of(class: ErrorClass) -> FinishReason {
    match class {
        ErrorClass::Unavailable => FinishReason::SandboxUnavailable,
        ErrorClass::Usage => FinishReason::Configuration,
        ErrorClass::Internal => FinishReason::InternalError,
    }
}

/// `--max-stalled-rounds`: rounds in a row that changed nothing in the workspace.
struct Stall {
    limit: u32,
    in_a_row: u32,
    watch: super::change_watch::ChangeWatch,
}

impl Stall {
    /// The workspace's digest now; `None` (counted as a change) when it cannot be read.
    fn digest(&mut self) -> Option<super::change_watch::TreeDigest> {
        match self.watch.digest() {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(
                    "the workspace could not be digested for --max-stalled-rounds (the round counts as a change): {e}"
                );
                None
            }
        }
    }

    /// A round ended; `before` is the digest at its start.
    fn round_ended(&mut self, before: Option<super::change_watch::TreeDigest>) {
        let unchanged = before.is_some() && self.digest() == before;
        self.in_a_row = if unchanged { self.in_a_row + 1 } else { 0 };
    }

    /// `Some(limit)` once the last `limit` rounds each changed nothing.
    fn stalled(&self) -> Option<u32> {
        (self.in_a_row >= self.limit).then_some(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let b = Duration::from_secs(2);
        assert_eq!(backoff(b, 1), Duration::from_secs(2));
        assert_eq!(backoff(b, 2), Duration::from_secs(4));
        assert_eq!(backoff(b, 3), Duration::from_secs(8));
        assert_eq!(backoff(b, 40), MAX_BACKOFF);
        assert_eq!(backoff(Duration::ZERO, 5), Duration::ZERO);
    }
}
