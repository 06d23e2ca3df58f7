//! The documented exit codes of `ralph` (SPEC §3), each expected failure mapped by an exhaustive
//! match: adding an outcome or reason without deciding its code does not compile.

use ralph_runner::job::{FinishReason, JobResult, Outcome};

/// An exit code of `ralph run`, `ralph wait` and the other commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: the job completed.
    Complete,
    /// 1: a round reported blocked.
    Blocked,
    /// 2: rounds, tokens or the job deadline ran out.
    BudgetLimited,
    /// 3: a round produced no valid report after its retries.
    RoundFailed,
    /// 4: a task job's command failed.
    TaskFailed,
    /// 5: the job's set-up command failed (no round was started).
    SetupFailed,
    /// 64: usage or configuration error.
    Usage,
    /// 69: the requested isolation cannot be enforced on this host.
    SandboxUnavailable,
    /// 70: internal error.
    Internal,
    /// 75: the runner died mid-round (set on recovery).
    Interrupted,
    /// 124: `ralph sandbox exec` timed out.
    Timeout,
    /// 130: cancelled.
    Cancelled,
    /// The sandboxed command's own exit status (`ralph sandbox exec`).
    Raw(u8),
}

impl Exit {
    /// The numeric code.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Complete => 0,
            Exit::Blocked => 1,
            Exit::BudgetLimited => 2,
            Exit::RoundFailed => 3,
            Exit::TaskFailed => 4,
            Exit::SetupFailed => 5,
            Exit::Usage => 64,
            Exit::SandboxUnavailable => 69,
            Exit::Internal => 70,
            Exit::Interrupted => 75,
            Exit::Timeout => 124,
            Exit::Cancelled => 130,
            Exit::Raw(code) => code,
        }
    }

    /// The code's name in machine-readable errors (`--json`).
    pub const fn name(self) -> &'static str {
        match self {
            Exit::Complete => "complete",
            Exit::Blocked => "blocked",
            Exit::BudgetLimited => "budget_limited",
            Exit::RoundFailed => "round_failed",
            Exit::TaskFailed => "task_failed",
            Exit::SetupFailed => "setup_failed",
            Exit::Usage => "usage",
            Exit::SandboxUnavailable => "sandbox_unavailable",
            Exit::Internal => "internal",
            Exit::Interrupted => "interrupted",
            Exit::Timeout => "timeout",
            Exit::Cancelled => "cancelled",
            Exit::Raw(_) => "command_status",
        }
    }

    /// The exit code for a finished job.
    pub fn for_result(r: &JobResult) -> Exit {
        Exit::for_outcome(r.outcome, r.reason)
    }

    /// The exit code for an outcome and its reason.
    pub fn for_outcome(outcome: Outcome, reason: FinishReason) -> Exit {
        match outcome {
            Outcome::Complete => Exit::Complete,
            Outcome::Blocked => Exit::Blocked,
            Outcome::BudgetLimited => Exit::BudgetLimited,
            Outcome::RoundFailed => Exit::RoundFailed,
            Outcome::Failed => Exit::TaskFailed,
            Outcome::Cancelled => Exit::Cancelled,
            Outcome::Interrupted => Exit::Interrupted,
            Outcome::Error => match reason {
                FinishReason::SandboxUnavailable => Exit::SandboxUnavailable,
                FinishReason::SetupFailed => Exit::SetupFailed,
                FinishReason::Configuration | FinishReason::ProvisionFailed => Exit::Usage,
                FinishReason::Reported
                | FinishReason::Verified
                | FinishReason::MaxRounds
                | FinishReason::MaxTokens
                | FinishReason::JobTimeout
                | FinishReason::Stalled
                | FinishReason::RoundFailed
                | FinishReason::TaskExit
                | FinishReason::CancelRequested
                | FinishReason::RunnerDied
                | FinishReason::DiskFull
                | FinishReason::InternalError => Exit::Internal,
            },
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_spec() {
        let table = [
            (Exit::Complete, 0),
            (Exit::Blocked, 1),
            (Exit::BudgetLimited, 2),
            (Exit::RoundFailed, 3),
            (Exit::TaskFailed, 4),
            (Exit::SetupFailed, 5),
            (Exit::Usage, 64),
            (Exit::SandboxUnavailable, 69),
            (Exit::Internal, 70),
            (Exit::Interrupted, 75),
            (Exit::Timeout, 124),
            (Exit::Cancelled, 130),
        ];
        for (e, c) in table {
            assert_eq!(e.code(), c, "{e:?}");
        }
        // SPEC §3: a failed set-up is exit 5.
        assert_eq!(
            Exit::for_outcome(Outcome::Error, FinishReason::SetupFailed),
            Exit::SetupFailed
        );
    }
}
