//! The Markdown summary of a job (for `$GITHUB_STEP_SUMMARY`, a merge request note): the
//! outcome in one line, the set-up (with a failed one's output tail), a table of rounds, the verify runs with the tail of each failed one's
//! output, the token totals, and the last report. Agent-written text is escaped (a cell cannot
//! leave its table, a block its fence); a command or a quoted name is a code span (shown as it
//! is), never backslash-escaped text.

use crate::job::JobResult;
use crate::store::Event;

use super::text::{markdown_block, markdown_code, markdown_inline_code};

/// How much of one cell or block the summary keeps.
const CELL_CAP: usize = 300;
const BLOCK_CAP: usize = 4096;
/// The failed verify runs whose output is shown (the last ones; the JUnit report has all).
const OUTPUT_BLOCKS: usize = 3;

/// The summary of `result`, from its journal `events`.
pub fn render(result: &JobResult, events: &[Event]) -> String {
    let (attempts, verifies) = super::steps(events);
    let mut s = format!(
        "## ralph: {} after {} of {} round(s)\n\n{}\n\n",
        result.outcome.as_str(),
        result.rounds,
        result.max_rounds,
        line(&format!(
            "{} ({}): {}",
            result.outcome.as_str(),
            result.reason.as_str(),
            result.message
        ))
    );
    s.push_str(&format!(
        "Job {}, {} s, verified: {}.\n\n",
        markdown_code(&bound(&result.job_id), false),
        result.duration_ms / 1000,
        match result.verified {
            Some(true) => "yes",
            Some(false) => "no (the last verify failed)",
            None => "not verified",
        }
    ));
    for setup in super::setups(events) {
        s.push_str(&format!(
            "Set-up {}: {} ({:.1} s).\n\n",
            markdown_code(&bound(&setup.command), false),
            if setup.passed {
                "passed".to_owned()
            } else {
                line(&format!("failed: {}", setup.how()))
            },
            setup.duration_ms as f64 / 1000.0
        ));
        if !setup.passed {
            s.push_str(&output_block(&setup));
        }
    }
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
        s.push_str("| Verify after round | Command | Result | Seconds |\n|---:|---|---|---:|\n");
        for v in &verifies {
            s.push_str(&format!(
                "| {} | {} | {} | {:.1} |\n",
                v.round,
                markdown_code(&bound(&v.command), true),
                if v.passed {
                    "passed".to_owned()
                } else {
                    cell(&format!("failed: {}", v.how()))
                },
                v.duration_ms as f64 / 1000.0
            ));
        }
        s.push('\n');
        let failed: Vec<&super::Verify> = verifies.iter().filter(|v| !v.passed).collect();
        let skip = failed.len().saturating_sub(OUTPUT_BLOCKS);
        if skip > 0 {
            s.push_str(&format!(
                "The output of {skip} earlier failed verify run(s) is in the JUnit report and \
                 the job's artifacts (`rounds/N/verify/output.log`).\n\n"
            ));
        }
        for v in &failed[skip..] {
            s.push_str(&output_block(v));
        }
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

/// A failed verify's (or set-up's: round 0) last lines, in a fence of their own.
fn output_block(v: &super::Verify) -> String {
    let (tail, before) = super::last_lines(&v.output_tail, super::VERIFY_TAIL_LINES);
    let which = if before > 0 {
        format!("its last {} lines", super::VERIFY_TAIL_LINES)
    } else {
        "its output".to_owned()
    };
    let (what, log) = if v.round == 0 {
        (
            "The set-up".to_owned(),
            "rounds/0/setup/output.log".to_owned(),
        )
    } else {
        (
            format!("The verify after round {}", v.round),
            format!("rounds/{}/verify/output.log", v.round),
        )
    };
    if tail.trim().is_empty() {
        return format!("{what} ({}) printed nothing.\n\n", line(&v.how()));
    }
    format!(
        "{what} failed ({}); {which} (`{log}`):\n\n{}\n",
        line(&v.how()),
        markdown_block(&crate::util::text::bounded_tail(tail, BLOCK_CAP))
    )
}

fn bound(text: &str) -> String {
    crate::util::text::bounded(text, CELL_CAP)
}

/// A table cell: text escaped, its backtick-quoted parts as code spans.
fn cell(text: &str) -> String {
    markdown_inline_code(&bound(text), true)
}

/// A paragraph line: text escaped as in a cell, its code spans as they are (a paragraph of one
/// line followed by a blank one is never a table).
fn line(text: &str) -> String {
    markdown_inline_code(&bound(text), false)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::job::{FinishReason, JobKind, JobResult, Outcome};
    use crate::store::{Event, EventKind};
    use crate::usage::UsageTotals;

    fn result(message: &str) -> JobResult {
        JobResult {
            job_id: "j-1".into(),
            kind: JobKind::Loop,
            outcome: Outcome::Complete,
            reason: FinishReason::Verified,
            message: message.into(),
            rounds: 2,
            max_rounds: 2,
            retries: 0,
            verified: Some(true),
            report: None,
            resumed: false,
            usage: UsageTotals::default(),
            exit_code: None,
            artifacts: PathBuf::from("/state/jobs/j-1"),
            duration_ms: 1000,
        }
    }

    fn verify(round: u32, passed: bool, tail: &str) -> Event {
        Event {
            job_id: "j-1".into(),
            seq: u64::from(round),
            at: "2026-01-01T00:00:00.000Z".into(),
            kind: EventKind::VerifyFinished {
                round,
                passed,
                command: "pytest -q tests | tee log".into(),
                exit: Some(ralph_sandbox::Termination::Exited {
                    code: i32::from(!passed),
                }),
                ended_by: Some(ralph_sandbox::EndedBy::Exit),
                output_tail: tail.into(),
                duration_ms: 2500,
            },
        }
    }

    #[test]
    fn the_verify_command_is_a_code_span_and_a_failed_verify_shows_its_tail() {
        let tail: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let tail = format!("{tail}```\n# forged heading\nE   assert 1 == 2\n");
        let md = super::render(
            &result("worker reported completion; verified by `pytest -q tests | tee log`"),
            &[verify(1, false, &tail), verify(2, true, "ok\n")],
        );
        // Issue 26: no backslash-escaped backticks; the command is code.
        assert!(
            md.contains("verified by `pytest -q tests | tee log`\n"),
            "{md}"
        );
        assert!(!md.contains("\\`"), "{md}");
        assert!(md.contains("Job `j-1`,"), "{md}");
        assert!(
            md.contains("| 1 | `pytest -q tests \\| tee log` | failed: exit status 1 | 2.5 |"),
            "{md}"
        );
        assert!(md.contains("| 2 | `pytest -q tests \\| tee log` | passed | 2.5 |"));
        // The last 20 lines, in a fence longer than the backtick run inside.
        assert!(
            md.contains("The verify after round 1 failed (exit status 1); its last 20 lines"),
            "{md}"
        );
        let start = md.find("````text\n").expect(&md);
        let block = &md[start..];
        let end = block.find("\n````\n").expect(&md);
        let body = &block["````text\n".len()..end];
        assert_eq!(body.lines().count(), 20, "{body}");
        assert!(body.starts_with("line 14\n") && body.ends_with("E   assert 1 == 2"));
        assert!(!md[..start].contains("# forged"), "{md}");
    }

    /// Issue 26: a failed set-up is in the summary (the command as code, how it ended, its
    /// output's tail in a fence) and in the JUnit report (a `set-up` testcase whose failure
    /// message ends with the output's last line).
    #[test]
    fn a_failed_setup_shows_in_the_summary_and_the_junit_report() {
        let at = |seq, kind| Event {
            job_id: "j-1".into(),
            seq,
            at: "2026-01-01T00:00:00.000Z".into(),
            kind,
        };
        let events = [
            at(
                1,
                EventKind::SetupStarted {
                    command: "npm ci | tee log".into(),
                },
            ),
            at(
                2,
                EventKind::SetupFinished {
                    passed: false,
                    exit: Some(ralph_sandbox::Termination::Exited { code: 1 }),
                    ended_by: Some(ralph_sandbox::EndedBy::Exit),
                    output_tail: "npm ERR! code E404\nnpm ERR! 404 Not Found - pkg\n".into(),
                    duration_ms: 2500,
                },
            ),
        ];
        let mut r = result("the set-up command failed");
        r.outcome = Outcome::Error;
        r.reason = FinishReason::SetupFailed;
        r.rounds = 0;
        let md = super::render(&r, &events);
        assert!(
            md.contains("Set-up `npm ci | tee log`: failed: exit status 1 (2.5 s)."),
            "{md}"
        );
        assert!(
            md.contains(
                "The set-up failed (exit status 1); its output (`rounds/0/setup/output.log`)"
            ),
            "{md}"
        );
        assert!(
            md.contains("```text\nnpm ERR! code E404\nnpm ERR! 404 Not Found - pkg\n```"),
            "{md}"
        );
        let xml = crate::ci::junit::render(&r, &events);
        assert!(
            xml.contains("<testcase classname=\"ralph.setup\" name=\"set-up\" time=\"2.500\">"),
            "{xml}"
        );
        assert!(
            xml.contains("<failure type=\"setup_failed\" message=\"`npm ci | tee log` failed: exit status 1: npm ERR! 404 Not Found - pkg\">"),
            "{xml}"
        );
        assert!(xml.contains("tests=\"1\" failures=\"1\""), "{xml}");
    }

    #[test]
    fn only_the_last_failed_verifies_show_output() {
        let events: Vec<Event> = (1..=5).map(|r| verify(r, false, "boom\n")).collect();
        let md = super::render(&result("x"), &events);
        assert_eq!(md.matches("```text\nboom\n```").count(), 3, "{md}");
        assert!(
            md.contains("The output of 2 earlier failed verify run(s)"),
            "{md}"
        );
        assert!(!md.contains("after round 2 failed"), "{md}");
        assert!(md.contains("after round 5 failed"), "{md}");
    }
}
