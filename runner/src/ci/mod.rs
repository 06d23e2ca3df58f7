//! Reports for CI systems, built from a finished job's result and journal: a JUnit XML file
//! ([`junit`]: a testcase per round attempt and per verify, for test views) and a Markdown
//! summary ([`summary`]: for `$GITHUB_STEP_SUMMARY` and merge-request notes). Everything in them
//! that came from the agent or the workspace (reports, failure messages, verify output) is
//! escaped for its format and bounded: it can neither forge a testcase nor break the page; its
//! control characters are shown escaped ([`crate::util::terminal`]'s rule), never dropped.

pub mod junit;
pub mod summary;
mod text;

use crate::store::{AttemptResult, Event, EventKind};

/// One round attempt, as the journal tells it.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// Round.
    pub round: u32,
    /// Attempt within the round.
    pub attempt: u32,
    /// How it ended.
    pub result: AttemptResult,
    /// Wall-clock time.
    pub duration_ms: u64,
}

/// One verify run.
#[derive(Clone, Debug)]
pub struct Verify {
    /// The round whose report it checked.
    pub round: u32,
    /// Whether it exited 0.
    pub passed: bool,
    /// The command.
    pub command: String,
    /// Bounded tail of its output.
    pub output_tail: String,
    /// Wall-clock time.
    pub duration_ms: u64,
}

/// The attempts and verifies of a journal, in order.
pub fn steps(events: &[Event]) -> (Vec<Attempt>, Vec<Verify>) {
    let mut attempts = Vec::new();
    let mut verifies = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::RoundFinished {
                round,
                attempt,
                result,
                duration_ms,
                ..
            } => attempts.push(Attempt {
                round: *round,
                attempt: *attempt,
                result: result.clone(),
                duration_ms: *duration_ms,
            }),
            EventKind::VerifyFinished {
                round,
                passed,
                command,
                output_tail,
                duration_ms,
                ..
            } => verifies.push(Verify {
                round: *round,
                passed: *passed,
                command: command.clone(),
                output_tail: output_tail.clone(),
                duration_ms: *duration_ms,
            }),
            _ => {}
        }
    }
    (attempts, verifies)
}

/// What an attempt's result says, in a few words, and whether it counts as a failure.
pub fn describe(result: &AttemptResult) -> (String, bool) {
    match result {
        AttemptResult::Reported { report } => {
            let status = report
                .get("status")
                .and_then(|s| s.as_str())
                .unwrap_or("reported");
            (format!("reported {status}"), false)
        }
        AttemptResult::Failed { reason, message } => (format!("{reason}: {message}"), true),
        AttemptResult::Exited => ("exited (task)".to_owned(), false),
        AttemptResult::SandboxFailed { message, reason } => {
            (format!("sandbox unavailable ({reason}): {message}"), true)
        }
        AttemptResult::Cancelled => ("cancelled".to_owned(), true),
        AttemptResult::DeadlineReached => ("stopped at the job deadline".to_owned(), true),
        AttemptResult::BudgetSpent => ("stopped: the token budget was spent".to_owned(), true),
        AttemptResult::Interrupted => ("interrupted: its runner stopped".to_owned(), true),
    }
}
