//! An attempt's `round_finished` event, decided from what its conclusion found: how it ended,
//! what the sandbox reported, its usage. Pure (no journal, no file): [`JobRun`]'s
//! `conclude_attempt` gathers the facts and journals what this returns.
//!
//! [`JobRun`]: super::job_run::JobRun

use std::collections::BTreeMap;

use ralph_sandbox::ExecReport;

use super::EngineError;
use super::round::AttemptEnd;
use crate::job::RoundFailure;
use crate::store::{AttemptResult, EventKind};
use crate::usage::RoundUsage;
use crate::util::text::bounded;

/// What an attempt's conclusion found.
pub(super) struct Concluded<'a> {
    /// Round.
    pub round: u32,
    /// Attempt.
    pub attempt: u32,
    /// How it ended.
    pub end: &'a AttemptEnd,
    /// The sandbox's report of its process, when it ran.
    pub exec: Option<&'a ExecReport>,
    /// Wall-clock time.
    pub duration_ms: u64,
    /// Tokens used.
    pub usage: RoundUsage,
    /// Requests the agent retried, by reason.
    pub agent_retries: BTreeMap<String, u64>,
}

/// Longest message a failed attempt's result carries.
const MESSAGE_CAP: usize = 2048;

/// The attempt's result as the journal keeps it.
fn result(end: &AttemptEnd) -> Result<AttemptResult, EngineError> {
    Ok(match end {
        AttemptEnd::Reported(r) => AttemptResult::Reported {
            report: serde_json::to_value(r).map_err(|e| EngineError::Internal {
                message: e.to_string(),
            })?,
        },
        AttemptEnd::Exited => AttemptResult::Exited,
        AttemptEnd::Failed(reason, message) => AttemptResult::Failed {
            reason: *reason,
            message: message.clone(),
        },
        AttemptEnd::CannotRun(message) => AttemptResult::Failed {
            reason: RoundFailure::ExecFailed,
            message: bounded(message, MESSAGE_CAP),
        },
        AttemptEnd::Cancelled => AttemptResult::Cancelled,
        AttemptEnd::Deadline => AttemptResult::DeadlineReached,
        AttemptEnd::BudgetSpent => AttemptResult::BudgetSpent,
        AttemptEnd::SandboxFailed(e) => AttemptResult::SandboxFailed {
            message: bounded(&e.to_string(), MESSAGE_CAP),
            reason: e.reason_label().to_owned(),
        },
        AttemptEnd::DiskFull(_) => AttemptResult::Interrupted,
    })
}

/// The `round_finished` event of the attempt `c` describes.
pub(super) fn round_finished(c: Concluded<'_>) -> Result<EventKind, EngineError> {
    let exec = c.exec.map(|e| &e.outcome);
    Ok(EventKind::RoundFinished {
        round: c.round,
        attempt: c.attempt,
        result: result(c.end)?,
        exit: exec.map(|o| o.termination),
        ended_by: exec.map(|o| o.ended_by),
        duration_ms: c.duration_ms,
        usage: c.usage,
        resources: exec.and_then(|o| o.resources),
        sandbox_violations: exec
            .map(|o| o.violations.iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
        sandbox_setup_ms: exec
            .and_then(|o| o.setup)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        agent_retries: c.agent_retries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_sandbox::SandboxError;

    fn finished(end: &AttemptEnd) -> EventKind {
        round_finished(Concluded {
            round: 3,
            attempt: 2,
            end,
            exec: None,
            duration_ms: 7,
            usage: RoundUsage::default(),
            agent_retries: BTreeMap::new(),
        })
        .unwrap()
    }

    #[test]
    fn each_end_is_journalled_as_its_result_with_messages_bounded() {
        let long = "x".repeat(10_000);
        let cases = [
            (AttemptEnd::Exited, AttemptResult::Exited),
            (AttemptEnd::Cancelled, AttemptResult::Cancelled),
            (AttemptEnd::Deadline, AttemptResult::DeadlineReached),
            (AttemptEnd::BudgetSpent, AttemptResult::BudgetSpent),
            (
                AttemptEnd::DiskFull("full".into()),
                AttemptResult::Interrupted,
            ),
        ];
        for (end, want) in cases {
            let EventKind::RoundFinished {
                result,
                round,
                attempt,
                exit,
                ..
            } = finished(&end)
            else {
                panic!("not round_finished");
            };
            assert_eq!((result, round, attempt, exit), (want, 3, 2, None));
        }
        let EventKind::RoundFinished { result, .. } = finished(&AttemptEnd::CannotRun(long)) else {
            panic!("not round_finished");
        };
        let AttemptResult::Failed { reason, message } = result else {
            panic!("{result:?}");
        };
        assert_eq!(reason, RoundFailure::ExecFailed);
        assert!(message.len() <= MESSAGE_CAP + 8, "{}", message.len());
        let e = SandboxError::invalid("network", "no");
        let EventKind::RoundFinished { result, .. } = finished(&AttemptEnd::SandboxFailed(e))
        else {
            panic!("not round_finished");
        };
        assert!(
            matches!(result, AttemptResult::SandboxFailed { .. }),
            "{result:?}"
        );
    }
}
