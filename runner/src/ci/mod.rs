//! Reports for CI systems, built from a finished job's result and journal: a JUnit XML file
//! ([`junit`]: a testcase for the set-up, per round attempt and per verify, for test views) and a Markdown
//! summary ([`summary`]: for `$GITHUB_STEP_SUMMARY` and merge-request notes). Everything in them
//! that came from the agent or the workspace (reports, failure messages, verify output) is
//! escaped for its format and bounded: it can neither forge a testcase nor break the page; its
//! control characters are shown escaped ([`crate::util::terminal`]'s rule), never dropped.

pub mod junit;
pub mod summary;
mod text;

use ralph_sandbox::EndedBy;
use ralph_sandbox::Termination;

use crate::store::{AttemptResult, Event, EventKind};

/// Lines of a verify's output shown with its verdict (console, summary, JUnit message).
pub const VERIFY_TAIL_LINES: usize = 20;

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

/// One verify run, or a set-up run (SPEC §12; [`setups`]: round 0, the command the job's).
#[derive(Clone, Debug)]
pub struct Verify {
    /// The round whose report it checked (0 for a set-up).
    pub round: u32,
    /// Whether it exited 0.
    pub passed: bool,
    /// The command.
    pub command: String,
    /// How it ended (`None`: it could not run; the tail says why).
    pub exit: Option<Termination>,
    /// Why it ended.
    pub ended_by: Option<EndedBy>,
    /// Bounded tail of its output.
    pub output_tail: String,
    /// Wall-clock time.
    pub duration_ms: u64,
}

impl Verify {
    /// How a failed run ended, in a few words: `exit status 1`, `timed out`, `could not run`.
    pub fn how(&self) -> String {
        verify_how(self.exit, self.ended_by)
    }
}

/// How a verify run ended, in a few words (see [`Verify::how`]).
pub fn verify_how(exit: Option<Termination>, ended_by: Option<EndedBy>) -> String {
    match (ended_by, exit) {
        (Some(EndedBy::Timeout), _) => "timed out".to_owned(),
        (Some(EndedBy::MemoryLimit), _) => "hit the memory limit".to_owned(),
        (Some(EndedBy::Cancel | EndedBy::RunnerGone), _) => "cancelled".to_owned(),
        (_, Some(t)) => t.to_string(),
        (_, None) => "could not run".to_owned(),
    }
}

/// The last `n` lines of `text` (a final newline ends the last line, it does not start one),
/// and how many lines came before them.
pub fn last_lines(text: &str, n: usize) -> (&str, usize) {
    let body = text.strip_suffix('\n').unwrap_or(text);
    if body.is_empty() {
        return ("", 0);
    }
    let total = body.split('\n').count();
    if total <= n {
        return (body, 0);
    }
    let mut start = body.len();
    for _ in 0..n {
        start = body[..start].rfind('\n').unwrap_or(0);
    }
    (&body[start + 1..], total - n)
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
                exit,
                ended_by,
                output_tail,
                duration_ms,
            } => verifies.push(Verify {
                round: *round,
                passed: *passed,
                command: command.clone(),
                exit: *exit,
                ended_by: *ended_by,
                output_tail: output_tail.clone(),
                duration_ms: *duration_ms,
            }),
            _ => {}
        }
    }
    (attempts, verifies)
}

/// The set-up runs of a journal, in order (a job resumed after a failed set-up has several),
/// each with the command of the `setup_started` before it.
pub fn setups(events: &[Event]) -> Vec<Verify> {
    let mut out = Vec::new();
    let mut command = String::new();
    for e in events {
        match &e.kind {
            EventKind::SetupStarted { command: c } => command.clone_from(c),
            EventKind::SetupFinished {
                passed,
                exit,
                ended_by,
                output_tail,
                duration_ms,
            } => out.push(Verify {
                round: 0,
                passed: *passed,
                command: command.clone(),
                exit: *exit,
                ended_by: *ended_by,
                output_tail: output_tail.clone(),
                duration_ms: *duration_ms,
            }),
            _ => {}
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_the_end_and_counts_the_rest() {
        assert_eq!(last_lines("", 3), ("", 0));
        assert_eq!(last_lines("a\n", 3), ("a", 0));
        assert_eq!(last_lines("a\nb\nc\nd\n", 2), ("c\nd", 2));
        assert_eq!(last_lines("a\nb\nc", 3), ("a\nb\nc", 0));
        assert_eq!(last_lines("\n\nx", 1), ("x", 2));
    }
}
