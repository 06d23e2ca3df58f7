//! How a job ends: exactly one [`Outcome`] with a machine-readable [`FinishReason`], and the
//! [`JobResult`] handed to callers, whose invariants (SPEC §3) are checked before it leaves the
//! runner.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::spec::JobKind;
use crate::report::{Report, Status};
use crate::usage::UsageTotals;

/// The terminal outcome of a job (SPEC §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// A round reported complete (and `verify`, if set, passed); a task exited 0.
    Complete,
    /// A round reported blocked.
    Blocked,
    /// Rounds, tokens or the job deadline ran out.
    BudgetLimited,
    /// A round produced no valid report after its retries.
    RoundFailed,
    /// A task job's command failed.
    Failed,
    /// Cancelled by a user or a signal.
    Cancelled,
    /// The runner died mid-round (set on recovery).
    Interrupted,
    /// Infrastructure failure.
    Error,
}

impl Outcome {
    /// The outcome of a name (`complete`, `budget-limited`, …).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == name)
    }

    /// Every outcome.
    pub const ALL: [Outcome; 8] = [
        Outcome::Complete,
        Outcome::Blocked,
        Outcome::BudgetLimited,
        Outcome::RoundFailed,
        Outcome::Failed,
        Outcome::Cancelled,
        Outcome::Interrupted,
        Outcome::Error,
    ];

    /// The outcome's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::Blocked => "blocked",
            Outcome::BudgetLimited => "budget-limited",
            Outcome::RoundFailed => "round-failed",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Interrupted => "interrupted",
            Outcome::Error => "error",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one round attempt produced no valid report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundFailure {
    /// The process ended without a report.
    NoReport,
    /// The report broke the contract.
    InvalidReport,
    /// The round timeout passed.
    Timeout,
    /// A signal killed the agent process and it left no report.
    Crashed,
    /// The agent command could not be executed.
    ExecFailed,
    /// The agent CLI reported that its own run failed (a preset saw `is_error`, `turn.failed`).
    AgentError,
    /// The round left something in the workspace that the sandbox's rules forbid (a symlink
    /// where a protected path should be, a `.git/commondir`); it was undone, and whatever the
    /// round reported is not trusted.
    WorkspaceTampered,
    /// The round filled its report directory (a bounded tmpfs, see `docs/agents.md`): no free
    /// bytes or entries were left at its end; whatever it reported is not trusted.
    ReportDirFull,
}

impl RoundFailure {
    /// Every failure reason (for metric labels).
    pub const ALL: [RoundFailure; 8] = [
        RoundFailure::NoReport,
        RoundFailure::InvalidReport,
        RoundFailure::Timeout,
        RoundFailure::Crashed,
        RoundFailure::ExecFailed,
        RoundFailure::AgentError,
        RoundFailure::WorkspaceTampered,
        RoundFailure::ReportDirFull,
    ];

    /// The reason's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            RoundFailure::NoReport => "no_report",
            RoundFailure::InvalidReport => "invalid_report",
            RoundFailure::Timeout => "timeout",
            RoundFailure::Crashed => "crashed",
            RoundFailure::ExecFailed => "exec_failed",
            RoundFailure::AgentError => "agent_error",
            RoundFailure::WorkspaceTampered => "workspace_tampered",
            RoundFailure::ReportDirFull => "report_dir_full",
        }
    }
}

impl std::fmt::Display for RoundFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The machine-readable reason behind an outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The worker's report decided it (complete without verify, or blocked).
    Reported,
    /// Complete, and the runner's verify command passed.
    Verified,
    /// `max_rounds` rounds were started.
    MaxRounds,
    /// The token budget ran out.
    MaxTokens,
    /// The job deadline passed.
    JobTimeout,
    /// The last `max_stalled_rounds` rounds each changed nothing in the workspace.
    Stalled,
    /// A round failed after its retries.
    RoundFailed,
    /// A task's command exited (its status decides).
    TaskExit,
    /// A user or signal cancelled the job.
    CancelRequested,
    /// The runner died mid-round.
    RunnerDied,
    /// The disk of the runner's state directory (or its store) is full: the job was closed
    /// (`interrupted`) rather than run on without room for its journal and artifacts.
    DiskFull,
    /// The requested sandbox could not be enforced.
    SandboxUnavailable,
    /// The job's request cannot run as given (e.g. a protected path that is a symlink); the
    /// message says how to fix it.
    Configuration,
    /// The runner could not provision the job's workspace (a clone or an upload failed).
    ProvisionFailed,
    /// The job's set-up command failed (SPEC §3, §12): no round was started.
    SetupFailed,
    /// Something broke in the runner or host.
    InternalError,
}

impl FinishReason {
    /// The reason's name.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Reported => "reported",
            FinishReason::Verified => "verified",
            FinishReason::MaxRounds => "max_rounds",
            FinishReason::MaxTokens => "max_tokens",
            FinishReason::JobTimeout => "job_timeout",
            FinishReason::Stalled => "stalled",
            FinishReason::RoundFailed => "round_failed",
            FinishReason::TaskExit => "task_exit",
            FinishReason::CancelRequested => "cancel_requested",
            FinishReason::RunnerDied => "runner_died",
            FinishReason::DiskFull => "disk_full",
            FinishReason::SandboxUnavailable => "sandbox_unavailable",
            FinishReason::Configuration => "configuration",
            FinishReason::ProvisionFailed => "provision_failed",
            FinishReason::SetupFailed => "setup_failed",
            FinishReason::InternalError => "internal_error",
        }
    }
}

/// The final result of a job, as printed by `ralph run --json` and returned by the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobResult {
    /// The job id.
    pub job_id: String,
    /// Loop or task.
    pub kind: JobKind,
    /// The outcome.
    pub outcome: Outcome,
    /// Why.
    pub reason: FinishReason,
    /// A bounded human explanation.
    pub message: String,
    /// Rounds started.
    pub rounds: u32,
    /// The round budget.
    pub max_rounds: u32,
    /// Round attempts that were retried.
    pub retries: u32,
    /// `Some(true)` when a verify command passed for the final report, `Some(false)` when the
    /// last verify failed, `None` when no verify ran.
    pub verified: Option<bool>,
    /// The last valid report, or null.
    pub report: Option<Report>,
    /// Whether the job was resumed at least once (its later rounds may follow rounds that all
    /// failed, so a later round-failed may carry no report).
    #[serde(skip)]
    pub resumed: bool,
    /// Token totals.
    pub usage: UsageTotals,
    /// A task's exit status.
    pub exit_code: Option<i32>,
    /// Where the round artifacts are.
    pub artifacts: PathBuf,
    /// Wall-clock time of the job in this run, in milliseconds.
    pub duration_ms: u64,
}

/// A result that breaks an outcome invariant: a runner bug, never shown as a success.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("job result breaks an invariant: {0}")]
pub struct InvariantViolation(pub &'static str);

impl JobResult {
    /// Checks the invariants of SPEC §3 (the seed's defensive decode of the terminal result).
    pub fn check(&self) -> Result<(), InvariantViolation> {
        let status = self.report.as_ref().map(|r| r.status);
        let fail = |m| Err(InvariantViolation(m));
        if self.rounds > self.max_rounds {
            return fail("more rounds started than max_rounds");
        }
        match (self.kind, self.outcome) {
            (JobKind::Loop, Outcome::Complete) => {
                if status != Some(Status::Complete) {
                    return fail("complete without a complete report");
                }
                if self.reason == FinishReason::Verified && self.verified != Some(true) {
                    return fail("verified completion without a passing verify");
                }
                if !matches!(self.reason, FinishReason::Verified | FinishReason::Reported) {
                    return fail("complete with a reason other than reported/verified");
                }
            }
            (JobKind::Loop, Outcome::Blocked) => {
                if status != Some(Status::Blocked) {
                    return fail("blocked without a blocked report");
                }
            }
            (JobKind::Loop, Outcome::BudgetLimited) => {
                if self.reason == FinishReason::MaxRounds && self.rounds != self.max_rounds {
                    return fail("budget-limited by rounds before max_rounds rounds were started");
                }
                if !matches!(
                    self.reason,
                    FinishReason::MaxRounds
                        | FinishReason::MaxTokens
                        | FinishReason::JobTimeout
                        | FinishReason::Stalled
                ) {
                    return fail("budget-limited with a reason that is not a budget");
                }
                if matches!(status, Some(Status::Blocked)) {
                    return fail("budget-limited carrying a blocked report");
                }
            }
            (JobKind::Loop, Outcome::RoundFailed) => {
                if self.rounds == 1 && self.report.is_some() {
                    return fail("round-failed in round 1 carrying a previous report");
                }
                // Without a resume, a later round follows rounds that all reported; a resumed job
                // may follow a run whose rounds all failed (SPEC §3: "or none").
                if self.rounds > 1 && self.report.is_none() && !self.resumed {
                    return fail("round-failed in a later round without the last valid report");
                }
            }
            (JobKind::Loop, Outcome::Failed) => return fail("a loop job cannot end as failed"),
            // A task ends by its exit status, or by its token budget crossed mid-run (SPEC §3).
            (JobKind::Task, Outcome::BudgetLimited) => {
                if self.reason != FinishReason::MaxTokens {
                    return fail("a budget-limited task must be limited by its token budget");
                }
            }
            (JobKind::Task, Outcome::Blocked | Outcome::RoundFailed) => {
                return fail("a task job ends by its exit status");
            }
            (JobKind::Task, Outcome::Complete) => {
                if self.exit_code != Some(0) {
                    return fail("a complete task must have exited 0");
                }
            }
            (_, Outcome::Failed | Outcome::Cancelled | Outcome::Interrupted | Outcome::Error) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_failed(rounds: u32, resumed: bool) -> JobResult {
        JobResult {
            job_id: "j".into(),
            kind: JobKind::Loop,
            outcome: Outcome::RoundFailed,
            reason: FinishReason::RoundFailed,
            message: "round failed".into(),
            rounds,
            max_rounds: 5,
            retries: 0,
            verified: None,
            report: None,
            resumed,
            usage: UsageTotals::default(),
            exit_code: None,
            artifacts: PathBuf::from("/tmp"),
            duration_ms: 0,
        }
    }

    #[test]
    fn a_later_round_failed_without_a_report_is_a_bug_unless_the_job_was_resumed() {
        assert!(round_failed(2, false).check().is_err());
        // Resumed after a run whose only round failed: no round ever reported.
        assert_eq!(round_failed(2, true).check(), Ok(()));
        assert_eq!(round_failed(1, false).check(), Ok(()));
    }
}
