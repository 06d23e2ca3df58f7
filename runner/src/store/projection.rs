//! A job's state as a fold over its journal. [`JobView::apply`] is the only place that decides
//! what an event means; it also refuses events that make no sense in the current state, so a
//! corrupt or hand-edited journal is detected rather than believed.

use ralph_sandbox::Termination;
use ralph_sandbox::outcome::git::Sanitized;
use serde::Serialize;

use super::event::{AttemptResult, Event, EventKind, RunnerInfo};
use crate::job::{FinishReason, JobSpec, Outcome, RoundFailure};
use crate::provision::patch_status::{PatchState, PatchStatus};
use crate::report::{self, Report};
use crate::usage::UsageTotals;

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Accepted, not yet taken by a runner.
    Queued,
    /// A runner is working on it.
    Running,
    /// It has an outcome.
    Finished,
}

impl JobState {
    /// Every state, in a job's order.
    pub const ALL: [JobState; 3] = [JobState::Queued, JobState::Running, JobState::Finished];

    /// The state of a name (`queued`, `running`, `finished`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The state's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Finished => "finished",
        }
    }
}

/// Where a job's set-up step is (SPEC §12). Only a set-up that passed is never run again: one
/// that failed, or never finished (its runner died), runs again when the job is resumed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SetupState {
    /// Not run yet (or the job has no set-up).
    #[default]
    NotRun,
    /// Started and not finished.
    Running,
    /// Exited 0: the job's rounds may start; a resumed job does not run it again.
    Passed,
    /// Ended otherwise (the job ended `error`, `setup_failed`, or by a cancel or deadline).
    Failed,
    /// Started and never finished (the runner died, or the job was closed meanwhile).
    Interrupted,
}

impl SetupState {
    /// Whether nothing was run (left out of a serialized view).
    pub fn is_not_run(&self) -> bool {
        *self == SetupState::NotRun
    }
}

/// The runner's note about a failed verify, carried into the next round's prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyNote {
    /// The round whose complete report was not verified.
    pub round: u32,
    /// The verify command.
    pub command: String,
    /// How it ended.
    pub exit: Option<Termination>,
    /// Bounded tail of its output.
    pub output_tail: String,
}

/// What the sandbox made safe in git repositories after an attempt or verify run, carried into
/// the next attempt's prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GitNote {
    /// The round.
    pub round: u32,
    /// The attempt; `None` for the verify run after the round.
    pub attempt: Option<u32>,
    /// The first few repositories.
    pub repositories: Vec<Sanitized>,
    /// How many more there were.
    pub more: u32,
    /// What could not be checked, if anything.
    pub unchecked: Option<String>,
}

/// Repositories named per note, at most.
pub const GIT_NOTE_REPOS: usize = 8;

/// Notes kept for the next attempt, at most (the latest ones).
const GIT_NOTES: usize = 4;

/// How a finished job ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finish {
    /// Outcome.
    pub outcome: Outcome,
    /// Why.
    pub reason: FinishReason,
    /// Bounded explanation.
    pub message: String,
    /// A task's exit code.
    pub exit_code: Option<i32>,
}

/// The projection of a job's journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobView {
    /// Job id.
    pub id: String,
    /// Sequence number of the last applied event.
    pub seq: u64,
    /// The immutable request.
    pub spec: JobSpec,
    /// When it was submitted.
    pub submitted_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// Life-cycle state.
    pub state: JobState,
    /// The runner that took it last.
    pub runner: Option<RunnerInfo>,
    /// Rounds started (attempts of one round count once).
    pub rounds_started: u32,
    /// Attempts started in all.
    pub attempts: u32,
    /// Attempts that were retried.
    pub retries: u32,
    /// The attempt started and not yet finished, as (round, attempt).
    pub open_attempt: Option<(u32, u32)>,
    /// The last valid report.
    pub last_report: Option<Report>,
    /// The round that produced it.
    pub last_report_round: Option<u32>,
    /// Token totals.
    pub usage: UsageTotals,
    /// Result of the verify of the last report, if one ran.
    pub verified: Option<bool>,
    /// A failed verify still to be told to the next round.
    pub verify_note: Option<VerifyNote>,
    /// Git repositories made safe since the last attempt started, to be told to the next one.
    pub git_notes: Vec<GitNote>,
    /// The last attempt's failure, if it failed.
    pub last_failure: Option<(RoundFailure, String)>,
    /// Where the job's set-up step is.
    #[serde(skip_serializing_if = "SetupState::is_not_run")]
    pub setup: SetupState,
    /// Set once a cancel was requested.
    pub cancel_requested: bool,
    /// Who asked for the last cancel (`token:NAME` for an API token, else a signal's name).
    pub cancelled_by: Option<String>,
    /// The API token that asked for the last resume.
    pub resumed_by: Option<String>,
    /// How it ended.
    pub finish: Option<Finish>,
    /// When the current (or last) run started.
    pub run_started_at: Option<String>,
    /// Wall-clock time spent in finished runs (a resumed job's deadline continues from here).
    pub elapsed_ms: u64,
    /// How often the job was resumed.
    pub resumes: u32,
    /// A fan-out job's attempts (SPEC §13), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fanout: Vec<FanoutAttempt>,
    /// The caps the last resume raised (SPEC §3; already in `spec`).
    #[serde(skip_serializing_if = "crate::job::RaisedCaps::is_empty")]
    pub raised_caps: crate::job::RaisedCaps,
    /// The base commit of a provisioned workspace (SPEC §11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
    /// What became of its `result.patch` (the last `result_written`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<PatchStatus>,
    /// The runner that provisioned the workspace: a resumed job goes on only where that
    /// workspace is (SPEC §11).
    #[serde(skip)]
    pub provisioned_by: Option<RunnerInfo>,
}

/// An event that cannot follow the job's current state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("journal of job `{job}` is inconsistent at event {seq} ({event}): {problem}")]
pub struct ProjectionError {
    /// Job id.
    pub job: String,
    /// The event's sequence number.
    pub seq: u64,
    /// The event's type.
    pub event: &'static str,
    /// What is wrong.
    pub problem: String,
}

impl JobView {
    /// Whether a verify run may follow `round`: a loop job's round that reported, or a task
    /// job's one round once it ended (its verify decides, report or not: SPEC §3).
    fn verifiable(&self, round: u32) -> bool {
        self.last_report_round == Some(round)
            || (self.spec.kind == crate::job::JobKind::Task
                && self.rounds_started == round
                && self.open_attempt.is_none())
    }

    /// Folds a whole journal.
    pub fn project(events: &[Event]) -> Result<JobView, ProjectionError> {
        let first = events.first().ok_or_else(|| ProjectionError {
            job: String::new(),
            seq: 0,
            event: "none",
            problem: "the journal is empty".into(),
        })?;
        let mut view = JobView::submitted(first)?;
        for ev in &events[1..] {
            view.apply(ev)?;
        }
        Ok(view)
    }

    /// The view right after the `job_submitted` event.
    pub fn submitted(ev: &Event) -> Result<JobView, ProjectionError> {
        let EventKind::JobSubmitted { spec } = &ev.kind else {
            return Err(problem(ev, "the first event must be job_submitted"));
        };
        if ev.seq != 1 {
            return Err(problem(ev, "job_submitted must have sequence number 1"));
        }
        Ok(JobView {
            id: ev.job_id.clone(),
            seq: 1,
            spec: (**spec).clone(),
            submitted_at: ev.at.clone(),
            updated_at: ev.at.clone(),
            state: JobState::Queued,
            runner: None,
            rounds_started: 0,
            attempts: 0,
            retries: 0,
            open_attempt: None,
            last_report: None,
            last_report_round: None,
            usage: UsageTotals::default(),
            verified: None,
            verify_note: None,
            git_notes: Vec::new(),
            last_failure: None,
            setup: SetupState::NotRun,
            cancel_requested: false,
            cancelled_by: None,
            resumed_by: None,
            finish: None,
            run_started_at: None,
            elapsed_ms: 0,
            resumes: 0,
            raised_caps: crate::job::RaisedCaps::default(),
            fanout: Vec::new(),
            base_commit: None,
            patch: None,
            provisioned_by: None,
        })
    }

    /// Applies the next event.
    pub fn apply(&mut self, ev: &Event) -> Result<(), ProjectionError> {
        if ev.job_id != self.id {
            return Err(problem(ev, "event of another job"));
        }
        if ev.seq != self.seq + 1 {
            return Err(problem(
                ev,
                &format!("expected sequence number {}", self.seq + 1),
            ));
        }
        let running = |v: &JobView| -> Result<(), ProjectionError> {
            if v.state == JobState::Running {
                Ok(())
            } else {
                Err(problem(ev, "the job is not running"))
            }
        };
        match &ev.kind {
            EventKind::JobSubmitted { .. } => {
                return Err(problem(ev, "job_submitted can only come first"));
            }
            EventKind::JobStarted { runner } => {
                if self.state != JobState::Queued {
                    return Err(problem(ev, "the job is not queued"));
                }
                self.state = JobState::Running;
                self.runner = Some(runner.clone());
                self.run_started_at = Some(ev.at.clone());
                // A provisioned workspace not made yet is made under the state directory of
                // the host that runs the job, whichever host accepted it (SPEC §11).
                if let (Some(_), None, Some(dir)) =
                    (&self.spec.source, &self.base_commit, &runner.state_dir)
                {
                    self.spec.workspace = crate::provision::workspaces_dir(dir).join(&self.id);
                }
            }
            EventKind::RoundStarted { round, attempt, .. } => {
                running(self)?;
                if self.open_attempt.is_some() {
                    return Err(problem(ev, "another attempt is still open"));
                }
                let fresh_round = *round == self.rounds_started + 1 && *attempt == 1;
                let retry = *round == self.rounds_started && *attempt > 1;
                if !(fresh_round || retry) {
                    return Err(problem(
                        ev,
                        &format!("round {round} attempt {attempt} is out of order"),
                    ));
                }
                if *round > self.spec.max_rounds {
                    return Err(problem(ev, "round beyond max_rounds"));
                }
                // No round starts before the job's set-up passed (SPEC §3).
                if self.spec.setup.is_some() && self.setup != SetupState::Passed {
                    return Err(problem(ev, "a round started before the set-up passed"));
                }
                self.rounds_started = self.rounds_started.max(*round);
                self.attempts += 1;
                self.open_attempt = Some((*round, *attempt));
                // The attempt's prompt (written before this event) carried them.
                self.git_notes.clear();
            }
            EventKind::RoundSpawned { round, attempt, .. } => {
                if self.open_attempt != Some((*round, *attempt)) {
                    return Err(problem(ev, "no such open attempt"));
                }
            }
            EventKind::RoundFinished {
                round,
                attempt,
                result,
                usage,
                ..
            } => {
                if self.open_attempt != Some((*round, *attempt)) {
                    return Err(problem(ev, "no such open attempt"));
                }
                self.open_attempt = None;
                self.usage.add(&usage.total());
                self.last_failure = None;
                match result {
                    AttemptResult::Reported { report } => {
                        let r = report::decode_value(report, self.spec.handoff_cap)
                            .map_err(|e| problem(ev, &format!("stored report is invalid: {e}")))?;
                        self.last_report = Some(r);
                        self.last_report_round = Some(*round);
                        self.verified = None;
                        if self.verify_note.as_ref().is_some_and(|n| n.round < *round) {
                            self.verify_note = None;
                        }
                    }
                    AttemptResult::Failed { reason, message } => {
                        self.last_failure = Some((*reason, message.clone()));
                    }
                    AttemptResult::Exited
                    | AttemptResult::SandboxFailed { .. }
                    | AttemptResult::Cancelled
                    | AttemptResult::DeadlineReached
                    | AttemptResult::BudgetSpent
                    | AttemptResult::Interrupted => {}
                }
            }
            EventKind::WorkspaceSanitized {
                round,
                attempt,
                repositories,
                counts,
                unchecked,
            } => {
                match attempt {
                    Some(a) if self.open_attempt != Some((*round, *a)) => {
                        return Err(problem(ev, "no such open attempt"));
                    }
                    // Round 0: the set-up run.
                    None if *round == 0 && self.setup == SetupState::Running => {}
                    None if !self.verifiable(*round) => {
                        return Err(problem(ev, "verify of a round without a report"));
                    }
                    _ => {}
                }
                let shown: Vec<Sanitized> =
                    repositories.iter().take(GIT_NOTE_REPOS).cloned().collect();
                let more = counts
                    .total()
                    .saturating_sub(u32::try_from(shown.len()).unwrap_or(u32::MAX));
                if self.git_notes.len() >= GIT_NOTES {
                    self.git_notes.remove(0);
                }
                self.git_notes.push(GitNote {
                    round: *round,
                    attempt: *attempt,
                    repositories: shown,
                    more,
                    unchecked: unchecked.clone(),
                });
            }
            EventKind::UsageSkipped { .. }
            | EventKind::ModelRequest { .. }
            | EventKind::ModelRefusals { .. }
            | EventKind::Egress { .. }
            | EventKind::UsageMismatch { .. } => {}
            EventKind::RoundRetried { round, attempt, .. } => {
                if self.open_attempt.is_some()
                    || self.rounds_started != *round
                    || self.last_failure.is_none()
                {
                    return Err(problem(
                        ev,
                        &format!("round {round} attempt {attempt} did not just fail"),
                    ));
                }
                self.retries += 1;
            }
            EventKind::SetupStarted { .. } => {
                running(self)?;
                if self.spec.setup.is_none() {
                    return Err(problem(ev, "the job has no set-up"));
                }
                if self.open_attempt.is_some() || self.rounds_started > 0 {
                    return Err(problem(ev, "a set-up after a round started"));
                }
                match self.setup {
                    SetupState::Passed => {
                        return Err(problem(ev, "the set-up already passed"));
                    }
                    SetupState::Running => {
                        return Err(problem(ev, "the set-up is already running"));
                    }
                    SetupState::NotRun | SetupState::Failed | SetupState::Interrupted => {}
                }
                self.setup = SetupState::Running;
            }
            EventKind::SetupFinished { passed, .. } => {
                if self.setup != SetupState::Running {
                    return Err(problem(ev, "no set-up is running"));
                }
                self.setup = if *passed {
                    SetupState::Passed
                } else {
                    SetupState::Failed
                };
            }
            EventKind::VerifyStarted { round } => {
                running(self)?;
                if !self.verifiable(*round) {
                    return Err(problem(ev, "verify of a round without a report"));
                }
            }
            EventKind::VerifyFinished {
                round,
                passed,
                command,
                exit,
                output_tail,
                ..
            } => {
                if !self.verifiable(*round) {
                    return Err(problem(ev, "verify of a round without a report"));
                }
                self.verified = Some(*passed);
                self.verify_note = if *passed {
                    None
                } else {
                    Some(VerifyNote {
                        round: *round,
                        command: command.clone(),
                        exit: *exit,
                        output_tail: output_tail.clone(),
                    })
                };
            }
            EventKind::CancelRequested { by } => {
                self.cancel_requested = true;
                self.cancelled_by = Some(by.clone());
            }
            EventKind::Interrupted { .. } => {
                if self.setup == SetupState::Running {
                    self.setup = SetupState::Interrupted;
                }
            }
            EventKind::ToolchainGranted { .. }
            | EventKind::CacheLookup { .. }
            | EventKind::CacheSaved { .. } => {}
            EventKind::WorkspaceProvisioned { commit, .. } => {
                if self.state != JobState::Running {
                    return Err(problem(
                        ev,
                        "a workspace is provisioned only for a running job",
                    ));
                }
                self.base_commit = Some(commit.clone());
                self.provisioned_by = self.runner.clone();
            }
            EventKind::ResultWritten {
                bytes,
                files,
                pushed,
                error,
                patch,
                failure,
                skipped,
                skipped_total,
                ..
            } => {
                if self.state != JobState::Running {
                    return Err(problem(ev, "a result is written only by a running job"));
                }
                // An older journal has no state: a failed patch was an error and no file.
                let state = patch.unwrap_or(if error.is_some() && *bytes == 0 && *files == 0 {
                    PatchState::Failed
                } else {
                    PatchState::Written
                });
                self.patch = Some(PatchStatus {
                    state,
                    files: *files,
                    bytes: *bytes,
                    skipped: skipped.clone(),
                    skipped_total: (*skipped_total).max(skipped.len() as u64),
                    failure: *failure,
                    error: error.clone(),
                    pushed: pushed.clone(),
                });
            }
            // A delivery of the job's end (SPEC §13) changes nothing about the job: it is
            // journalled for the record (and counted), in any state (a resumed job may already
            // run again when a retry of its earlier end is recorded).
            EventKind::Notified { .. } => {}
            EventKind::AttemptsStarted { attempts } => {
                if self.state != JobState::Running || !self.fanout.is_empty() {
                    return Err(problem(ev, "attempts start once, in a running job"));
                }
                self.fanout = attempts
                    .iter()
                    .map(|a| FanoutAttempt {
                        job: a.job.clone(),
                        index: a.index,
                        layout: a.layout.clone(),
                        files: a.files,
                        bytes: a.bytes,
                        copy_ms: a.copy_ms,
                        ..FanoutAttempt::default()
                    })
                    .collect();
            }
            EventKind::AttemptFinished {
                job,
                outcome,
                reason,
                message,
                rounds,
                verified,
                report,
                usage,
                ..
            } => {
                let cap = self.spec.handoff_cap;
                let Some(a) = self.fanout.iter_mut().find(|a| &a.job == job) else {
                    return Err(problem(ev, "no such attempt"));
                };
                a.outcome = Some(*outcome);
                a.reason = Some(*reason);
                a.message = Some(message.clone());
                a.rounds = *rounds;
                a.verified = *verified;
                a.tokens = usage.budget_tokens();
                a.report = match report {
                    Some(r) => Some(
                        report::decode_value(r, cap)
                            .map_err(|e| problem(ev, &format!("stored report is invalid: {e}")))?,
                    ),
                    None => None,
                };
                self.usage.add(usage);
            }
            EventKind::AttemptChosen {
                job, won, applied, ..
            } => {
                let Some(a) = self.fanout.iter_mut().find(|a| &a.job == job) else {
                    return Err(problem(ev, "no such attempt"));
                };
                a.chosen = true;
                a.won = *won;
                a.applied = applied.clone();
                // The job's result is the chosen attempt's.
                self.rounds_started = a.rounds;
                self.verified = a.verified;
                self.last_report = a.report.clone();
            }
            EventKind::Resumed { by, caps, .. } => {
                if self.state != JobState::Finished {
                    return Err(problem(ev, "only a finished job can be resumed"));
                }
                caps.apply(&mut self.spec);
                self.raised_caps = caps.clone();
                self.state = JobState::Queued;
                self.finish = None;
                self.cancel_requested = false;
                self.cancelled_by = None;
                self.resumed_by = by.clone();
                self.runner = None;
                self.resumes += 1;
            }
            EventKind::JobFinished {
                outcome,
                reason,
                message,
                exit_code,
                ran_ms,
            } => {
                if self.state == JobState::Finished {
                    return Err(problem(ev, "the job already finished"));
                }
                if self.open_attempt.is_some() {
                    return Err(problem(ev, "an attempt is still open"));
                }
                // A set-up the job was closed in (a disk full, its runner gone) never finished.
                if self.setup == SetupState::Running {
                    self.setup = SetupState::Interrupted;
                }
                self.state = JobState::Finished;
                let ran = match (ran_ms, &self.run_started_at) {
                    (Some(ms), _) => *ms,
                    (None, Some(start)) => millis_between(start, &ev.at),
                    (None, None) => 0,
                };
                self.elapsed_ms = self.elapsed_ms.saturating_add(ran);
                self.finish = Some(Finish {
                    outcome: *outcome,
                    reason: *reason,
                    message: message.clone(),
                    exit_code: *exit_code,
                });
            }
        }
        self.seq = ev.seq;
        self.updated_at = ev.at.clone();
        Ok(())
    }

    /// The outcome, once finished.
    pub fn outcome(&self) -> Option<Outcome> {
        self.finish.as_ref().map(|f| f.outcome)
    }
}

/// Milliseconds from `a` to `b` (RFC 3339); 0 when unreadable or negative.
fn millis_between(a: &str, b: &str) -> u64 {
    match (humantime::parse_rfc3339(a), humantime::parse_rfc3339(b)) {
        (Ok(a), Ok(b)) => b
            .duration_since(a)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
        _ => 0,
    }
}

/// One attempt of a fan-out job, as the journal tells it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FanoutAttempt {
    /// The attempt's job.
    pub job: String,
    /// 1-based.
    pub index: u32,
    /// `overlay` or `copy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// Files copied for it.
    pub files: u64,
    /// Bytes copied for it.
    pub bytes: u64,
    /// How long its copy took.
    pub copy_ms: u64,
    /// Its outcome, once it ended.
    pub outcome: Option<Outcome>,
    /// Why.
    pub reason: Option<FinishReason>,
    /// Its message.
    pub message: Option<String>,
    /// Rounds it started.
    pub rounds: u32,
    /// Whether its last verify passed.
    pub verified: Option<bool>,
    /// Its tokens.
    pub tokens: u64,
    /// Its last valid report.
    #[serde(skip)]
    pub report: Option<Report>,
    /// Its result is the job's.
    pub chosen: bool,
    /// It passed its verify first.
    pub won: bool,
    /// Its changes as applied to the job's workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<super::event::AppliedChanges>,
}

/// Why a job cannot be resumed with the raised `caps` (none: as it is), if it cannot. A
/// `budget-limited` job is resumed only with the cap it ran out of raised (one that stalled
/// needs none). A cap given is not checked here but by [`crate::job::RaisedCaps::check`], which
/// the caller runs next: it must exceed what the job used.
pub fn resume_refusal(view: &JobView, caps: &crate::job::RaisedCaps) -> Option<String> {
    let Some(finish) = &view.finish else {
        return Some(format!(
            "job `{}` is {}, not finished",
            view.id,
            view.state.as_str()
        ));
    };
    match finish.outcome {
        Outcome::Interrupted | Outcome::Cancelled | Outcome::Error | Outcome::RoundFailed => {}
        Outcome::BudgetLimited => {
            let (raised, flag, used) = match finish.reason {
                FinishReason::MaxRounds => (
                    caps.max_rounds.is_some(),
                    "--max-rounds",
                    format!("the {} round(s) it started", view.rounds_started),
                ),
                FinishReason::MaxTokens => (
                    caps.max_tokens.is_some(),
                    "--max-tokens",
                    format!("the {} token(s) it used", view.usage.budget_tokens()),
                ),
                FinishReason::JobTimeout => (
                    caps.job_timeout.is_some(),
                    "--job-timeout",
                    "the time it ran".to_owned(),
                ),
                _ => (true, "", String::new()),
            };
            if !raised {
                return Some(format!(
                    "job `{}` ended budget-limited ({}): resume it with {flag} above {used}",
                    view.id,
                    finish.reason.as_str()
                ));
            }
        }
        Outcome::Complete | Outcome::Blocked | Outcome::Failed => {
            return Some(format!(
                "job `{}` ended {}: only interrupted, cancelled, error, round-failed and budget-limited jobs can be resumed",
                view.id, finish.outcome
            ));
        }
    }
    if let Some(of) = &view.spec.attempt_of {
        return Some(format!(
            "job `{}` is attempt {} of fan-out job `{}`: an attempt is not resumed on its own",
            view.id, of.index, of.job
        ));
    }
    if view.spec.attempts > 1 && !view.fanout.is_empty() {
        return Some(format!(
            "job `{}` ran {} attempts, whose copies are gone: submit it again",
            view.id, view.spec.attempts
        ));
    }
    let mut spec = view.spec.clone();
    caps.apply(&mut spec);
    if view.spec.kind == crate::job::JobKind::Task
        && view.rounds_started > 0
        && finish.outcome != Outcome::Error
    {
        return Some(format!(
            "job `{}` is a task that already ran; a task runs once",
            view.id
        ));
    }
    // A cap the resume raises is checked against what the job used by `RaisedCaps::check`.
    if caps.max_rounds.is_none() && view.rounds_started >= spec.max_rounds {
        return Some(format!(
            "job `{}` has no rounds left ({} of {} used)",
            view.id, view.rounds_started, spec.max_rounds
        ));
    }
    if let (None, Some(max)) = (caps.max_tokens, spec.max_tokens) {
        if view.usage.budget_tokens() >= max {
            return Some(format!(
                "job `{}` has no tokens left ({} of {max} used)",
                view.id,
                view.usage.budget_tokens()
            ));
        }
    }
    if let (None, Some(t)) = (caps.job_timeout, spec.job_timeout) {
        if u128::from(view.elapsed_ms) >= t.0.as_millis() {
            return Some(format!(
                "job `{}` has no time left (its job timeout of {t} is used up)",
                view.id
            ));
        }
    }
    None
}

fn problem(ev: &Event, what: &str) -> ProjectionError {
    ProjectionError {
        job: ev.job_id.clone(),
        seq: ev.seq,
        event: ev.kind.name(),
        problem: what.to_owned(),
    }
}

#[cfg(test)]
#[path = "projection_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "projection_setup_tests.rs"]
mod setup_tests;

#[cfg(test)]
#[path = "projection_fleet_tests.rs"]
mod fleet_tests;
