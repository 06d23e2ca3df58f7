//! The one writer of `job_finished` (SPEC §3, §8). Every route that ends a job — the loop's own
//! outcome ([`super::job_run`]), a full state disk, a cancel before the start
//! ([`super::Engine::cancel_queued`]), a dead runner found by a start-up or the orphan watch
//! ([`super::orphans`]), a job the service could not run — ends it through [`close_job`]: an
//! attempt still open is closed as interrupted, the result the end makes is checked
//! ([`JobResult::check`]: one that breaks an invariant is journalled as `error`
//! (`internal_error`) naming the invariant, never as the outcome it claimed), and then
//! `job_finished` is journalled with a bounded message.

use std::path::Path;

use crate::job::{FinishReason, JobResult, Outcome};
use crate::store::journal::Journal;
use crate::store::{AttemptResult, EventKind, StoreError};
use crate::util::text::{RESULT_TEXT_BOUND, bounded};

/// How a job ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ending {
    /// The outcome asked for.
    pub outcome: Outcome,
    /// Its reason.
    pub reason: FinishReason,
    /// The explanation (bounded here).
    pub message: String,
    /// A task's exit status.
    pub exit_code: Option<i32>,
    /// How long the job ran, when known.
    pub ran_ms: Option<u64>,
    /// How long the attempt still open (if any) ran, when known (0 otherwise).
    pub open_attempt_ms: u64,
}

impl Ending {
    /// An ending with no exit status, run time or open attempt's time.
    pub fn new(outcome: Outcome, reason: FinishReason, message: impl Into<String>) -> Self {
        Self {
            outcome,
            reason,
            message: message.into(),
            exit_code: None,
            ran_ms: None,
            open_attempt_ms: 0,
        }
    }
}

/// Closes the job of `journal` as `end` says (module doc); `artifacts` is where its files are
/// (for the checked result). Returns the outcome and reason journalled (an `error` when the
/// asked-for end broke an invariant).
pub(crate) fn close_job(
    journal: &mut Journal,
    end: Ending,
    artifacts: &Path,
) -> Result<(Outcome, FinishReason), StoreError> {
    if let Some((round, attempt)) = journal.view().open_attempt {
        journal.record(EventKind::RoundFinished {
            round,
            attempt,
            result: AttemptResult::Interrupted,
            exit: None,
            ended_by: None,
            duration_ms: end.open_attempt_ms,
            usage: Default::default(),
            resources: None,
            sandbox_violations: Vec::new(),
            sandbox_setup_ms: None,
            agent_retries: Default::default(),
        })?;
    }
    let (outcome, reason, message) = checked(journal, &end, artifacts);
    journal.record(EventKind::JobFinished {
        outcome,
        reason,
        message,
        exit_code: end.exit_code,
        ran_ms: end.ran_ms,
    })?;
    // The protected files' kept copies serve the job's next run, and a finished job has none.
    let _ = std::fs::remove_dir_all(artifacts.join(super::artifacts::PROTECTED_COPIES));
    Ok((outcome, reason))
}

/// The end to journal: `end` when the result it makes keeps the invariants, else `error`
/// naming the broken one and what was asked for.
fn checked(journal: &Journal, end: &Ending, artifacts: &Path) -> (Outcome, FinishReason, String) {
    let message = bounded(&end.message, RESULT_TEXT_BOUND);
    let v = journal.view();
    let result = JobResult {
        job_id: v.id.clone(),
        kind: v.spec.kind,
        outcome: end.outcome,
        reason: end.reason,
        message: message.clone(),
        rounds: v.rounds_started,
        max_rounds: v.spec.max_rounds,
        retries: v.retries,
        verified: v.verified,
        report: v.last_report.clone(),
        resumed: v.resumes > 0,
        usage: v.usage,
        exit_code: end.exit_code,
        artifacts: artifacts.to_path_buf(),
        duration_ms: end.ran_ms.unwrap_or(0),
    };
    match result.check() {
        Ok(()) => (end.outcome, end.reason, message),
        Err(broken) => (
            Outcome::Error,
            FinishReason::InternalError,
            bounded(
                &format!(
                    "{broken} (the runner refused to end the job as `{}` ({}): {message})",
                    end.outcome,
                    end.reason.as_str()
                ),
                RESULT_TEXT_BOUND,
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::engine::loop_tests::Harness;

    fn started(h: &Harness) -> (String, Journal) {
        let id = h.engine.submit_started(&h.spec).unwrap();
        let j = Journal::open(h.engine.store().clone(), &id, Vec::new()).unwrap();
        (id, j)
    }

    fn types(h: &Harness, id: &str) -> Vec<String> {
        h.engine
            .store()
            .events(id)
            .unwrap()
            .iter()
            .map(|e| e.kind.name().to_owned())
            .collect()
    }

    #[test]
    fn an_open_attempt_is_closed_interrupted_before_the_job_ends() {
        let h = Harness::new(Vec::new(), Vec::new());
        let (id, mut j) = started(&h);
        j.record(EventKind::RoundStarted {
            round: 1,
            attempt: 1,
            dir: "/x".into(),
        })
        .unwrap();
        let end = Ending {
            ran_ms: Some(900),
            open_attempt_ms: 42,
            ..Ending::new(Outcome::Interrupted, FinishReason::RunnerDied, "died")
        };
        let got = close_job(&mut j, end, Path::new("/a")).unwrap();
        assert_eq!(got, (Outcome::Interrupted, FinishReason::RunnerDied));
        let t = types(&h, &id);
        assert_eq!(&t[t.len() - 2..], ["round_finished", "job_finished"]);
        let events = h.engine.store().events(&id).unwrap();
        match &events[events.len() - 2].kind {
            EventKind::RoundFinished {
                result,
                duration_ms,
                ..
            } => {
                assert_eq!(*result, AttemptResult::Interrupted);
                assert_eq!(*duration_ms, 42);
            }
            other => panic!("{other:?}"),
        }
        assert!(j.view().open_attempt.is_none());
    }

    #[test]
    fn an_end_that_breaks_an_invariant_is_journalled_as_an_error_naming_it() {
        let h = Harness::new(Vec::new(), Vec::new());
        let (id, mut j) = started(&h);
        // Complete without any report.
        let got = close_job(
            &mut j,
            Ending::new(Outcome::Complete, FinishReason::Reported, "claimed"),
            Path::new("/a"),
        )
        .unwrap();
        assert_eq!(got, (Outcome::Error, FinishReason::InternalError));
        let f = h.engine.store().load(&id).unwrap().finish.unwrap();
        assert_eq!(f.outcome, Outcome::Error);
        assert!(
            f.message.contains("complete without a complete report")
                && f.message.contains("`complete`")
                && f.message.contains("claimed"),
            "{}",
            f.message
        );
    }

    #[test]
    fn the_message_is_bounded() {
        let h = Harness::new(Vec::new(), Vec::new());
        let (id, mut j) = started(&h);
        let long = "x".repeat(RESULT_TEXT_BOUND * 2);
        close_job(
            &mut j,
            Ending::new(Outcome::Cancelled, FinishReason::CancelRequested, long),
            Path::new("/a"),
        )
        .unwrap();
        let f = h.engine.store().load(&id).unwrap().finish.unwrap();
        assert!(f.message.len() <= RESULT_TEXT_BOUND, "{}", f.message.len());
    }
}
