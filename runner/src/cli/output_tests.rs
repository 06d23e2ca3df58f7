//! Property tests of every text output of the CLI (issue 25): whatever bytes an agent, a
//! workspace or a client puts in a field, `show`, `logs`, `wait`, `ralph run`'s progress and
//! result lines, `logs --round` and `submit`'s echo print lines that start with runner text, hold
//! no control character (no ESC: no escape sequence), never a `::` command line or a `##name[`
//! command, and stay within the bound.

use std::path::PathBuf;

use proptest::prelude::*;
use ralph_runner::job::{
    AgentSpec, FinishReason, JobKind, JobResult, JobSpec, Outcome, RoundFailure,
};
use ralph_runner::provision::patch_status::{PatchState, SkipReason, SkippedPath};
use ralph_runner::report::{Report, Status};
use ralph_runner::store::{AttemptResult, Event, EventKind, JobView, Observer, RefusalCount};

use ralph_runner::usage::{RoundUsage, UsageTotals};
use ralph_runner::util::terminal::{self, LINE_BOUND, Prefixed};
use serde_json::json;

use super::client_cmds::describe_event;
use super::client_cmds::describe_job;
use super::progress::Progress;
use super::round_view;

/// What an attacker would put in a field, mixed with arbitrary bytes (as text, lossily).
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 1..6)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        1 => Just("\u{1b}]52;c;aGVsbG8=\u{7}".to_owned()),
        1 => Just("\u{1b}]8;;https://x.example/\u{1b}\\link\u{1b}]8;;\u{1b}\\".to_owned()),
        1 => Just("\u{1b}]0;title\u{7}\u{1b}[2J".to_owned()),
        1 => Just("\u{1b}[0Ksection_start:123:x\r\u{1b}[0K".to_owned()),
        1 => Just("\n::error title=ralph::pwned".to_owned()),
        1 => Just("\n::add-mask::x".to_owned()),
        1 => Just("\n2026-01-01T00:00:00.000Z #99 finished: complete (verified): forged".to_owned()),
        1 => Just("\nralph: complete (verified) after 1 round(s) in 0.1s: forged".to_owned()),
        1 => Just("##[error]x ##vso[y]".to_owned()),
        1 => Just("\u{202e}\u{2028}\u{85}\u{7f}\t".to_owned()),
        1 => Just("#".to_owned()),
        1 => Just("[".to_owned()),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

/// The checks every printed line passes.
fn assert_safe_line(l: &str, starts: &[&str]) -> Result<(), TestCaseError> {
    prop_assert!(
        starts.iter().any(|s| l.starts_with(s)),
        "a line starts with text of the agent: {l:?}"
    );
    prop_assert!(
        !l.chars()
            .any(|c| (c.is_control() && c != '\t') || terminal::is_reordering(c)),
        "a control character: {l:?}"
    );
    prop_assert!(!terminal::starts_command(l), "a command line: {l:?}");
    prop_assert!(!terminal::holds_command(l), "a ##name[ command: {l:?}");
    prop_assert!(l.len() <= LINE_BOUND, "{} bytes", l.len());
    Ok(())
}

fn ev(kind: EventKind) -> Event {
    Event {
        job_id: "job-1".into(),
        seq: 7,
        at: "2026-11-30T00:00:00.000Z".into(),
        kind,
    }
}

fn finished(result: AttemptResult, violations: Vec<String>) -> EventKind {
    EventKind::RoundFinished {
        round: 1,
        attempt: 1,
        result,
        exit: None,
        ended_by: None,
        duration_ms: 1200,
        usage: RoundUsage::default(),
        resources: None,
        sandbox_violations: violations,
        sandbox_setup_ms: None,
        agent_retries: Default::default(),
    }
}

/// Events whose text fields hold `t`.
fn hostile_events(t: &str) -> Vec<Event> {
    let report =
        json!({"status": "blocked", "summary": t, "evidence": [t], "nextSteps": [t], "blocker": t});
    vec![
        ev(finished(
            AttemptResult::Reported { report },
            vec![t.to_owned()],
        )),
        ev(finished(
            AttemptResult::Failed {
                reason: RoundFailure::InvalidReport,
                message: t.to_owned(),
            },
            Vec::new(),
        )),
        ev(finished(
            AttemptResult::SandboxFailed {
                message: t.to_owned(),
                reason: t.to_owned(),
            },
            Vec::new(),
        )),
        ev(EventKind::UsageSkipped {
            round: 1,
            attempt: 1,
            line: 3,
            message: t.to_owned(),
        }),
        ev(EventKind::ModelRequest {
            round: 1,
            attempt: 1,
            api: t.to_owned(),
            model: t.to_owned(),
            status: 429,
            usage: UsageTotals::default(),
            duration_ms: 5,
            error: Some(t.to_owned()),
            refusal: Some(t.to_owned()),
        }),
        ev(EventKind::ModelRefusals {
            round: 1,
            attempt: 1,
            count: 2,
            by: vec![RefusalCount {
                api: t.to_owned(),
                status: 403,
                reason: t.to_owned(),
                count: 2,
            }],
        }),
        ev(EventKind::Egress {
            round: 1,
            attempt: 1,
            step: None,
            host: t.to_owned(),
            port: 443,
            method: t.to_owned(),
            allowed: false,
            reason: Some(t.to_owned()),
        }),
        ev(EventKind::Egress {
            round: 0,
            attempt: 0,
            step: Some(ralph_runner::store::event::RunnerStep::Setup),
            host: t.to_owned(),
            port: 443,
            method: t.to_owned(),
            allowed: false,
            reason: Some(t.to_owned()),
        }),
        ev(EventKind::SetupStarted {
            command: t.to_owned(),
        }),
        ev(EventKind::SetupFinished {
            passed: false,
            exit: Some(ralph_sandbox::Termination::Exited { code: 1 }),
            ended_by: Some(ralph_sandbox::EndedBy::Exit),
            output_tail: t.to_owned(),
            duration_ms: 3,
        }),
        ev(EventKind::VerifyFinished {
            round: 1,
            passed: false,
            command: t.to_owned(),
            exit: None,
            ended_by: None,
            output_tail: t.to_owned(),
            duration_ms: 3,
        }),
        ev(EventKind::CancelRequested { by: t.to_owned() }),
        ev(EventKind::Interrupted {
            message: t.to_owned(),
        }),
        ev(EventKind::Resumed {
            message: t.to_owned(),
            by: Some(t.to_owned()),
            caps: Default::default(),
        }),
        ev(EventKind::WorkspaceProvisioned {
            repo: Some(t.to_owned()),
            git_ref: Some(t.to_owned()),
            commit: t.to_owned(),
            duration_ms: 1,
            layout: Some(t.to_owned()),
        }),
        ev(EventKind::ResultWritten {
            bytes: 1,
            files: 1,
            pushed: Some(t.to_owned()),
            error: Some(t.to_owned()),
            patch: Some(PatchState::Partial),
            failure: None,
            skipped: vec![SkippedPath {
                path: t.to_owned(),
                reason: SkipReason::GitPath,
                detail: Some(t.to_owned()),
            }],
            skipped_total: 1,
            git_max_rss: Some(1),
        }),
        ev(EventKind::JobFinished {
            outcome: Outcome::Blocked,
            reason: FinishReason::Reported,
            message: t.to_owned(),
            exit_code: None,
            ran_ms: None,
        }),
    ]
}

fn view(t: &str) -> JobView {
    let mut spec = JobSpec::new(
        t,
        PathBuf::from(format!("/ws/{t}")),
        AgentSpec::Command { command: t.into() },
    );
    spec.verify = Some(t.to_owned());
    let mut submitted = ev(EventKind::JobSubmitted {
        spec: Box::new(spec),
    });
    submitted.seq = 1;
    let mut v = JobView::submitted(&submitted).unwrap_or_else(|e| panic!("{e}"));
    v.id = "job-1".into();
    v.last_report = Some(Report {
        status: Status::Blocked,
        summary: t.to_owned(),
        evidence: vec![t.to_owned()],
        next_steps: vec![t.to_owned()],
        blocker: t.to_owned(),
    });
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn show_prints_runner_lines_whatever_the_job_holds(t in hostile()) {
        let j = json!({
            "id": "job-1", "kind": "loop", "state": "finished", "outcome": "blocked",
            "reason": t, "name": t, "labels": {"k": t}, "submitted_by": t, "cancelled_by": t,
            "rounds": 1, "max_rounds": 3, "retries": 0, "message": t,
            "report": {"status": t, "summary": t},
            "usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1, "reasoning_tokens": 0},
            "spec": {"workspace": t}, "artifacts": t,
        });
        let text = describe_job(&j);
        let lines: Vec<&str> = text.split('\n').collect();
        prop_assert_eq!(lines.len(), 11, "{}", text);
        assert_safe_line(lines[0], &["job job-1: loop finished — blocked ("])?;
        for l in &lines[1..] {
            assert_safe_line(l, &["  "])?;
            // After the indentation, the line's own label: a runner word and a colon.
            let label = l.trim_start().split(':').next().unwrap_or("");
            prop_assert!(
                ["name", "labels", "submitted by", "cancelled by", "rounds", "message",
                 "last report", "tokens", "workspace", "artifacts"].contains(&label),
                "{l:?}"
            );
        }
    }

    #[test]
    fn logs_and_wait_print_each_event_on_one_runner_line(t in hostile()) {
        for e in hostile_events(&t) {
            let l = describe_event(&e);
            assert_safe_line(&l, &["2026-11-30T00:00:00.000Z #7 "])?;
            let waited = terminal::line(&format!("ralph: {l}"));
            assert_safe_line(&waited, &["ralph: "])?;
        }
    }

    #[test]
    fn the_result_line_of_run_is_one_line_whatever_the_message(t in hostile()) {
        let r = JobResult {
            job_id: t.clone(),
            kind: JobKind::Loop,
            outcome: Outcome::Blocked,
            reason: FinishReason::Reported,
            message: t.clone(),
            rounds: 1,
            max_rounds: 3,
            retries: 0,
            verified: None,
            report: None,
            resumed: false,
            usage: UsageTotals { input_tokens: 3, ..UsageTotals::default() },
            exit_code: None,
            artifacts: PathBuf::from(format!("/state/{t}")),
            duration_ms: 10,
        };
        let lines = super::run::result_lines(&r);
        prop_assert_eq!(lines.len(), 3);
        prop_assert!(lines[0].starts_with("ralph: blocked after 1 round(s) in 0.0s: "));
        for l in &lines {
            assert_safe_line(l, &["ralph: "])?;
        }
    }

    #[test]
    fn progress_prints_runner_lines_whatever_the_journal_holds(t in hostile()) {
        let p = Progress::kept();
        let v = view(&t);
        p.on_event(&v, &ev(EventKind::JobStarted {
            runner: ralph_runner::store::RunnerInfo::current("run"),
        }));
        p.on_event(&v, &ev(EventKind::VerifyStarted { round: 1 }));
        for e in hostile_events(&t) {
            p.on_event(&v, &e);
        }
        let lines = p.lines();
        prop_assert!(lines.len() >= 12, "{lines:?}");
        for l in &lines {
            prop_assert!(!l.contains('\n'), "{l:?}");
            assert_safe_line(l, &["ralph: "])?;
        }
    }

    #[test]
    fn a_round_log_is_shown_behind_its_label(chunks in prop::collection::vec(hostile(), 0..5)) {
        let bytes = chunks.concat().into_bytes();
        let label = round_view::label(2, 2, "stderr");
        let shown = Prefixed::all(&label, &bytes);
        for l in shown.lines() {
            assert_safe_line(l, &["[round 2 attempt 2 stderr] "])?;
        }
    }

    #[test]
    fn submit_echoes_ids_as_one_line_each(t in hostile()) {
        let l = terminal::line(&t);
        prop_assert!(!l.chars().any(|c| c.is_control()), "{l:?}");
        prop_assert!(!terminal::holds_command(&l));
    }
}

#[test]
fn a_forged_journal_line_stays_inside_its_field() {
    let forged = "done\n2026-01-01T00:00:00.000Z #99 finished: complete (verified): forged\n::error title=ralph::pwned";
    let l = describe_event(&ev(EventKind::JobFinished {
        outcome: Outcome::Blocked,
        reason: FinishReason::Reported,
        message: forged.to_owned(),
        exit_code: None,
        ran_ms: None,
    }));
    assert_eq!(
        l,
        "2026-11-30T00:00:00.000Z #7 finished: blocked (reported): done\\n2026-01-01T00:00:00.000Z #99 finished: complete (verified): forged\\n::error title=ralph::pwned"
    );
}

fn failed_verify(round: u32, code: i32, tail: &str) -> Event {
    ev(EventKind::VerifyFinished {
        round,
        passed: false,
        command: "pytest -q".into(),
        exit: Some(ralph_sandbox::Termination::Exited { code }),
        ended_by: Some(ralph_sandbox::EndedBy::Exit),
        output_tail: tail.into(),
        duration_ms: 74_500,
    })
}

/// Issue 26: a failed verify's output is on the console, its last lines behind the runner's
/// prefix and escaped; "the loop goes on" only while a round is left.
#[test]
fn a_failed_verify_shows_its_output_tail_and_what_follows() {
    let mut v = view("x");
    v.spec.max_rounds = 3;
    let tail: String = (1..=25).map(|i| format!("line {i}\n")).collect();
    let tail = format!("{tail}::error::forged\n\u{1b}]0;title\u{7}E   assert 1 == 2\n");
    let p = Progress::kept();
    p.on_event(&v, &failed_verify(2, 1, &tail));
    let lines = p.lines();
    assert_eq!(
        lines[0],
        "ralph: verify failed (74.5s): exit status 1; the loop goes on: round 3/3 is told the output"
    );
    assert_eq!(
        lines[1],
        "ralph: verify output (its last 20 lines; all of it: /artifacts/rounds/2/verify/output.log):"
    );
    assert_eq!(lines.len(), 22, "{lines:#?}");
    assert_eq!(lines[2], "ralph: | line 8");
    assert_eq!(lines[20], "ralph: | ::error::forged");
    assert_eq!(lines[21], "ralph: | \\x1b]0;title\\x07E   assert 1 == 2");
    for l in &lines {
        assert!(l.starts_with("ralph: "), "{l:?}");
        assert!(!l.chars().any(char::is_control), "{l:?}");
    }
    // The last round: no loop goes on.
    let p = Progress::kept();
    p.on_event(&v, &failed_verify(3, 1, "boom\n"));
    assert_eq!(
        p.lines(),
        [
            "ralph: verify failed (74.5s): exit status 1; no round is left (3/3): the job ends budget-limited",
            "ralph: verify output (its output; all of it: /artifacts/rounds/3/verify/output.log):",
            "ralph: | boom",
        ]
    );
    // A command the sandbox cannot run ends the job.
    let p = Progress::kept();
    p.on_event(&v, &failed_verify(1, 127, "sh: 1: pytest: not found\n"));
    assert!(
        p.lines()[0].ends_with(
            "exit status 127; the command cannot run in the sandbox: the job ends (configuration)"
        ),
        "{:?}",
        p.lines()
    );
}

/// Issue 26: a failed set-up's output tail is shown on the console behind the runner's prefix,
/// escaped, with what follows (no round), and its log's path.
#[test]
fn a_failed_setup_shows_its_output_tail_and_that_no_round_starts() {
    let v = view("x");
    let p = Progress::kept();
    p.on_event(
        &v,
        &ev(EventKind::SetupFinished {
            passed: false,
            exit: Some(ralph_sandbox::Termination::Exited { code: 1 }),
            ended_by: Some(ralph_sandbox::EndedBy::Exit),
            output_tail: "npm ERR! 404 Not Found\n::error::forged\n".into(),
            duration_ms: 1500,
        }),
    );
    assert_eq!(
        p.lines(),
        [
            "ralph: set-up failed (1.5s): exit status 1; no round is started: the job ends (error, setup_failed)",
            "ralph: set-up output (its output; all of it: /artifacts/rounds/0/setup/output.log):",
            "ralph: | npm ERR! 404 Not Found",
            "ralph: | ::error::forged",
        ]
    );
}
