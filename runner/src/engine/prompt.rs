//! The runner-owned prompt (SPEC §4). The template is `prompt.md` next to this file; only the
//! runner fills it, and values are inserted in one pass (an objective containing `{round}` stays
//! literal).

use std::path::Path;

use crate::store::projection::VerifyNote;
use crate::util::text::bounded_tail;

const TEMPLATE: &str = include_str!("prompt.md");

/// Everything the prompt states.
#[derive(Debug)]
pub struct PromptInput<'a> {
    /// The immutable objective.
    pub objective: &'a str,
    /// 1-based round.
    pub round: u32,
    /// Round budget.
    pub max_rounds: u32,
    /// 1-based attempt of this round.
    pub attempt: u32,
    /// Workspace path as the agent sees it.
    pub workspace: &'a Path,
    /// The previous valid report as compact JSON, if any.
    pub handoff: Option<&'a str>,
    /// Where to write the report.
    pub report_file: &'a Path,
    /// Where to append usage lines.
    pub usage_file: &'a Path,
    /// The handoff cap.
    pub cap: usize,
    /// The verify command, if the runner will verify completion.
    pub verify: Option<&'a str>,
    /// A failed verify to tell about.
    pub verify_note: Option<&'a VerifyNote>,
    /// Why the previous attempt of this round failed.
    pub retry_note: Option<&'a str>,
}

/// Renders the prompt.
pub fn render(input: &PromptInput<'_>) -> String {
    let attempt_line = if input.attempt > 1 {
        format!(
            " This is attempt {} of this round: the previous attempt produced no valid report.",
            input.attempt
        )
    } else {
        String::new()
    };
    let handoff = match input.handoff {
        Some(json) => format!("```json\n{json}\n```"),
        None => "(none: this is the first round)".to_owned(),
    };
    let verify_sentence = match input.verify {
        Some(cmd) => format!(
            "after a `complete` report the runner runs `{cmd}` itself, and only its success completes the job."
        ),
        None => {
            "the runner records a `complete` report as the worker's claim of completion.".to_owned()
        }
    };
    let mut notes = Vec::new();
    if let Some(n) = input.verify_note {
        let exit = n
            .exit
            .map_or_else(|| "did not finish".to_owned(), |e| e.to_string());
        notes.push(format!(
            "- Round {} reported completion, but the runner's verify command failed.\n  Command: `{}`\n  Result: {}\n  Output (tail):\n\n```\n{}\n```",
            n.round,
            n.command,
            exit,
            bounded_tail(&n.output_tail, 4096)
        ));
    }
    if let Some(r) = input.retry_note {
        notes.push(format!("- The previous attempt of this round failed: {r}"));
    }
    let notes = if notes.is_empty() {
        "(none)".to_owned()
    } else {
        notes.join("\n")
    };
    fill(
        TEMPLATE,
        &[
            ("objective", input.objective.to_owned()),
            ("round", input.round.to_string()),
            ("max_rounds", input.max_rounds.to_string()),
            ("attempt_line", attempt_line),
            ("workspace", input.workspace.display().to_string()),
            ("verify_sentence", verify_sentence),
            ("handoff", handoff),
            ("notes", notes),
            ("report_file", input.report_file.display().to_string()),
            ("usage_file", input.usage_file.display().to_string()),
            ("cap", input.cap.to_string()),
        ],
    )
}

/// Replaces `{name}` for the given names in one pass; other braces stay as they are.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(template.len() + 1024);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(after.len());
        let replaced = after[name_len..].starts_with('}')
            && values
                .iter()
                .find(|(k, _)| *k == &after[..name_len])
                .map(|(_, v)| out.push_str(v))
                .is_some();
        if replaced {
            rest = &after[name_len + 1..];
        } else {
            out.push('{');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>() -> PromptInput<'a> {
        PromptInput {
            objective: "Fix {round} and {\"json\":1}",
            round: 2,
            max_rounds: 5,
            attempt: 1,
            workspace: Path::new("/ws"),
            handoff: Some("{\"status\":\"continue\"}"),
            report_file: Path::new("/r/out/report.json"),
            usage_file: Path::new("/r/out/usage.jsonl"),
            cap: 16384,
            verify: Some("make test"),
            verify_note: None,
            retry_note: None,
        }
    }

    #[test]
    fn states_everything_the_spec_requires() {
        let p = render(&input());
        for needle in [
            "fresh worker",
            "no prior conversation",
            "Do not start another Ralph loop",
            "Fix {round} and {\"json\":1}",
            "round 2 of at most 5",
            "long-term memory and the source of truth",
            "Inspect it before acting, and verify after changing",
            "Confirm what it says against the workspace",
            "/r/out/report.json",
            "16384 bytes",
            "runs `make test` itself",
            "{\"status\":\"continue\"}",
        ] {
            assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
        }
        assert!(!p.contains("{objective}"));
    }

    #[test]
    fn carries_runner_notes() {
        let note = VerifyNote {
            round: 1,
            command: "make test".into(),
            exit: Some(ralph_sandbox::Termination::Exited { code: 2 }),
            output_tail: "FAILED: test_slug".into(),
        };
        let mut i = input();
        i.verify_note = Some(&note);
        i.retry_note = Some("invalid_report: missing key");
        i.attempt = 2;
        let p = render(&i);
        assert!(p.contains("verify command failed"));
        assert!(p.contains("exit status 2"));
        assert!(p.contains("FAILED: test_slug"));
        assert!(p.contains("invalid_report: missing key"));
        assert!(p.contains("attempt 2 of this round"));
    }

    #[test]
    fn first_round_has_no_handoff() {
        let mut i = input();
        i.handoff = None;
        assert!(render(&i).contains("(none: this is the first round)"));
    }
}
