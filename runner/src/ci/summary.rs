//! The Markdown summary of a job (for `$GITHUB_STEP_SUMMARY`, a merge request note): the
//! outcome in one line, a table of rounds, the verify runs, the token totals, and the last
//! report. Agent-written text is escaped (a cell cannot leave its table, a block its fence).

use crate::job::JobResult;
use crate::store::Event;

use super::text::{markdown_block, markdown_inline};

/// How much of one cell or block the summary keeps.
const CELL_CAP: usize = 300;
const BLOCK_CAP: usize = 4096;

/// The summary of `result`, from its journal `events`.
pub fn render(result: &JobResult, events: &[Event]) -> String {
    let (attempts, verifies) = super::steps(events);
    let mut s = format!(
        "## ralph: {} after {} of {} round(s)\n\n{}\n\n",
        result.outcome.as_str(),
        result.rounds,
        result.max_rounds,
        cell(&format!(
            "{} ({}): {}",
            result.outcome.as_str(),
            result.reason.as_str(),
            result.message
        ))
    );
    s.push_str(&format!(
        "Job `{}`, {} s, verified: {}.\n\n",
        cell(&result.job_id),
        result.duration_ms / 1000,
        match result.verified {
            Some(true) => "yes",
            Some(false) => "no (the last verify failed)",
            None => "not verified",
        }
    ));
    if !attempts.is_empty() {
        s.push_str("| Round | Attempt | Result | Seconds |\n|---:|---:|---|---:|\n");
        for a in &attempts {
            let (what, _) = super::describe(&a.result);
            s.push_str(&format!(
                "| {} | {} | {} | {:.1} |\n",
                a.round,
                a.attempt,
                cell(&what),
                a.duration_ms as f64 / 1000.0
            ));
        }
        s.push('\n');
    }
    if !verifies.is_empty() {
        s.push_str("| Verify after round | Command | Result |\n|---:|---|---|\n");
        for v in &verifies {
            s.push_str(&format!(
                "| {} | {} | {} |\n",
                v.round,
                cell(&v.command),
                if v.passed { "passed" } else { "failed" }
            ));
        }
        s.push('\n');
    }
    let u = &result.usage;
    s.push_str(&format!(
        "Tokens: {} input ({} cached), {} output ({} reasoning).\n\n",
        u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens
    ));
    if let Some(report) = &result.report {
        let text = crate::util::terminal::json(report, true);
        s.push_str("Last report:\n\n");
        s.push_str(&markdown_block(&crate::util::text::bounded(
            &text, BLOCK_CAP,
        )));
    }
    s
}

fn cell(text: &str) -> String {
    markdown_inline(&crate::util::text::bounded(text, CELL_CAP))
}
