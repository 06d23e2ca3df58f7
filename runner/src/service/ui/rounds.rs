//! A job's rounds as the job page shows them, read from its journal: each round's attempts (a
//! retried attempt stays visible), the report of each (its fields as text, never markup), how
//! long it took, its tokens, why it failed, and the verify run after it. Pure: events in, rows
//! out; every text field is made safe with [`super::text`] here, so the templates only escape.

use serde_json::Value;

use super::text;
use crate::store::{AttemptResult, Event, EventKind};

/// One round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// 1-based.
    pub round: u32,
    /// Its attempts, in order.
    pub attempts: Vec<Attempt>,
    /// The verify run after it, if one ran.
    pub verify: Option<Verify>,
}

/// One attempt of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// 1-based within the round.
    pub attempt: u32,
    /// `running`, the report's status, or what ended it (`failed: no-report`, `cancelled`, …).
    pub status: String,
    /// Wall time, shown (`1.2 s`), when it ended.
    pub duration: Option<String>,
    /// Tokens in and out, when it ended.
    pub tokens: Option<String>,
    /// Its report, when it gave a valid one.
    pub report: Option<ReportView>,
    /// Why it failed, when it did.
    pub failure: Option<String>,
    /// Whether it was retried.
    pub retried: bool,
    /// Whether it is still running.
    pub running: bool,
}

/// A report's fields, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportView {
    /// Its status.
    pub status: String,
    /// Its summary (multi-line).
    pub summary: String,
    /// Its evidence, one item each.
    pub evidence: Vec<String>,
    /// Its next steps.
    pub next_steps: Vec<String>,
    /// Its blocker (empty unless blocked).
    pub blocker: String,
}

/// A verify run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verify {
    /// `None` while it runs.
    pub passed: Option<bool>,
    /// The command.
    pub command: String,
    /// How it ended (`exit status 1`).
    pub exit: String,
    /// The tail of its output.
    pub output_tail: String,
    /// Wall time, shown.
    pub duration: Option<String>,
}

/// The set-up step, when the job has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The command.
    pub command: String,
    /// `None` while it runs.
    pub passed: Option<bool>,
    /// The tail of its output.
    pub output_tail: String,
    /// Wall time, shown.
    pub duration: Option<String>,
}

/// A duration in milliseconds as a person reads it.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 120_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| match x.as_str() {
                    Some(s) => text::block(s),
                    None => text::block(&x.to_string()),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn report_view(report: &Value) -> ReportView {
    let s = |k: &str| report.get(k).and_then(Value::as_str).unwrap_or_default();
    ReportView {
        status: text::line(s("status")),
        summary: text::block(s("summary")),
        evidence: strings(report.get("evidence")),
        next_steps: strings(report.get("nextSteps")),
        blocker: text::block(s("blocker")),
    }
}

fn round_mut(rounds: &mut Vec<Round>, round: u32) -> &mut Round {
    let at = match rounds.iter().position(|r| r.round == round) {
        Some(i) => i,
        None => {
            rounds.push(Round {
                round,
                attempts: Vec::new(),
                verify: None,
            });
            rounds.len() - 1
        }
    };
    &mut rounds[at]
}

fn attempt_mut(rounds: &mut Vec<Round>, round: u32, attempt: u32) -> &mut Attempt {
    let r = round_mut(rounds, round);
    let at = match r.attempts.iter().position(|a| a.attempt == attempt) {
        Some(i) => i,
        None => {
            r.attempts.push(Attempt {
                attempt,
                status: "running".into(),
                duration: None,
                tokens: None,
                report: None,
                failure: None,
                retried: false,
                running: true,
            });
            r.attempts.len() - 1
        }
    };
    &mut r.attempts[at]
}

/// The rounds of a journal, in order, and its set-up step.
pub fn of(events: &[Event]) -> (Vec<Round>, Option<Setup>) {
    let mut rounds: Vec<Round> = Vec::new();
    let mut setup: Option<Setup> = None;
    for e in events {
        match &e.kind {
            EventKind::RoundStarted { round, attempt, .. } => {
                attempt_mut(&mut rounds, *round, *attempt);
            }
            EventKind::RoundFinished {
                round,
                attempt,
                result,
                exit,
                duration_ms,
                usage,
                ..
            } => {
                let a = attempt_mut(&mut rounds, *round, *attempt);
                a.running = false;
                a.duration = Some(duration(*duration_ms));
                let t = usage.total();
                a.tokens = Some(format!("{} in / {} out", t.input_tokens, t.output_tokens));
                let (status, failure) = match result {
                    AttemptResult::Reported { report } => {
                        a.report = Some(report_view(report));
                        (
                            text::line(
                                report
                                    .get("status")
                                    .and_then(Value::as_str)
                                    .unwrap_or("reported"),
                            ),
                            None,
                        )
                    }
                    AttemptResult::Failed { reason, message } => {
                        (format!("failed: {reason}"), Some(text::block(message)))
                    }
                    AttemptResult::Exited => (
                        exit.map_or_else(|| "exited".into(), |x| x.to_string()),
                        None,
                    ),
                    AttemptResult::SandboxFailed { message, reason } => (
                        format!("sandbox failed: {}", text::line(reason)),
                        Some(text::block(message)),
                    ),
                    AttemptResult::Cancelled => ("cancelled".into(), None),
                    AttemptResult::DeadlineReached => ("deadline reached".into(), None),
                    AttemptResult::BudgetSpent => ("budget spent".into(), None),
                    AttemptResult::Interrupted => (
                        "interrupted".into(),
                        Some("the runner stopped while it ran".into()),
                    ),
                };
                a.status = status;
                a.failure = failure;
            }
            EventKind::RoundRetried { round, attempt, .. } => {
                attempt_mut(&mut rounds, *round, *attempt).retried = true;
            }
            EventKind::VerifyStarted { round } => {
                round_mut(&mut rounds, *round).verify = Some(Verify {
                    passed: None,
                    command: String::new(),
                    exit: String::new(),
                    output_tail: String::new(),
                    duration: None,
                });
            }
            EventKind::VerifyFinished {
                round,
                passed,
                command,
                exit,
                output_tail,
                duration_ms,
                ..
            } => {
                round_mut(&mut rounds, *round).verify = Some(Verify {
                    passed: Some(*passed),
                    command: text::line(command),
                    exit: exit.map_or_else(|| "did not run".into(), |x| x.to_string()),
                    output_tail: text::block(output_tail),
                    duration: Some(duration(*duration_ms)),
                });
            }
            EventKind::SetupStarted { command } => {
                setup = Some(Setup {
                    command: text::line(command),
                    passed: None,
                    output_tail: String::new(),
                    duration: None,
                });
            }
            EventKind::SetupFinished {
                passed,
                output_tail,
                duration_ms,
                ..
            } => {
                let command = setup.take().map(|s| s.command).unwrap_or_default();
                setup = Some(Setup {
                    command,
                    passed: Some(*passed),
                    output_tail: text::block(output_tail),
                    duration: Some(duration(*duration_ms)),
                });
            }
            // The run closed: nothing is running any more.
            EventKind::JobFinished { .. } | EventKind::Interrupted { .. } => {
                for a in rounds.iter_mut().flat_map(|r| r.attempts.iter_mut()) {
                    if a.running {
                        a.running = false;
                        a.status = "interrupted".into();
                    }
                }
            }
            _ => {}
        }
    }
    rounds.sort_by_key(|r| r.round);
    (rounds, setup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::RoundUsage;

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            job_id: "j".into(),
            seq,
            at: "2026-12-06T00:00:00.000Z".into(),
            kind,
        }
    }

    fn finished(round: u32, attempt: u32, result: AttemptResult) -> EventKind {
        EventKind::RoundFinished {
            round,
            attempt,
            result,
            exit: None,
            ended_by: None,
            duration_ms: 1500,
            usage: RoundUsage::default(),
            resources: None,
            sandbox_violations: Vec::new(),
            sandbox_setup_ms: None,
            agent_retries: Default::default(),
        }
    }

    #[test]
    fn rounds_attempts_reports_and_verify_from_the_journal() {
        let report = serde_json::json!({
            "status": "complete",
            "summary": "<script>x</script>\n\u{1b}]52;c;aGk=\u{7}",
            "evidence": ["a", "\u{1b}[2J"],
            "nextSteps": [],
            "blocker": ""
        });
        let events = vec![
            ev(
                1,
                EventKind::RoundStarted {
                    round: 1,
                    attempt: 1,
                    dir: "/d".into(),
                },
            ),
            ev(
                2,
                finished(
                    1,
                    1,
                    AttemptResult::Failed {
                        reason: crate::job::RoundFailure::NoReport,
                        message: "no report".into(),
                    },
                ),
            ),
            ev(
                3,
                EventKind::RoundRetried {
                    round: 1,
                    attempt: 1,
                    reason: crate::job::RoundFailure::NoReport,
                    backoff_ms: 0,
                },
            ),
            ev(
                4,
                EventKind::RoundStarted {
                    round: 1,
                    attempt: 2,
                    dir: "/d".into(),
                },
            ),
            ev(5, finished(1, 2, AttemptResult::Reported { report })),
            ev(6, EventKind::VerifyStarted { round: 1 }),
            ev(
                7,
                EventKind::VerifyFinished {
                    round: 1,
                    passed: false,
                    command: "make test".into(),
                    exit: Some(ralph_sandbox::Termination::Exited { code: 1 }),
                    ended_by: None,
                    output_tail: "FAILED\n".into(),
                    duration_ms: 20,
                },
            ),
            ev(
                8,
                EventKind::RoundStarted {
                    round: 2,
                    attempt: 1,
                    dir: "/d".into(),
                },
            ),
        ];
        let (rounds, setup) = of(&events);
        assert!(setup.is_none());
        assert_eq!(rounds.len(), 2);
        let r1 = &rounds[0];
        assert_eq!(r1.attempts.len(), 2);
        assert!(r1.attempts[0].retried);
        assert_eq!(r1.attempts[0].status, "failed: no_report");
        let rep = r1.attempts[1].report.as_ref().unwrap();
        assert_eq!(rep.status, "complete");
        assert!(
            rep.summary
                .starts_with("<script>x</script>\n\\x1b]52;c;aGk=\\x07")
        );
        assert_eq!(rep.evidence[1], "\\x1b[2J");
        assert_eq!(r1.attempts[1].duration.as_deref(), Some("1.5 s"));
        let v = r1.verify.as_ref().unwrap();
        assert_eq!(v.passed, Some(false));
        assert_eq!(v.exit, "exit status 1");
        assert!(rounds[1].attempts[0].running);
    }
}
