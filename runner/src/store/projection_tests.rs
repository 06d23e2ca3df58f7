//! The projection of `workspace_sanitized`: accepted only inside the attempt or verify run it
//! belongs to, carried to the next attempt's prompt exactly once, bounded.

use ralph_sandbox::outcome::git::{Change, Counts, RepoKind, Sanitized, Surface};
use serde_json::json;

use super::*;
use crate::job::{AgentSpec, JobSpec};
use crate::usage::RoundUsage;

fn ev(seq: u64, kind: EventKind) -> Event {
    Event {
        job_id: "j".into(),
        seq,
        at: "2026-11-30T00:00:00.000Z".into(),
        kind,
    }
}

fn repo(rel: &str) -> Sanitized {
    Sanitized {
        tree: "/ws".into(),
        rel: rel.into(),
        kind: RepoKind::GitDir,
        change: Change::New,
        replaced: vec![Surface::Config, Surface::Hooks],
        dropped: vec!["core.fsmonitor".into()],
        originals: Some("/state/sanitized/1".into()),
        notes: Vec::new(),
    }
}

fn sanitized(round: u32, attempt: Option<u32>, n: usize) -> EventKind {
    EventKind::WorkspaceSanitized {
        round,
        attempt,
        repositories: (0..n).map(|i| repo(&format!("r{i}/.git"))).collect(),
        counts: Counts {
            new: u32::try_from(n).unwrap(),
            ..Counts::default()
        },
        unchecked: None,
    }
}

fn finished(round: u32, attempt: u32, report: bool) -> EventKind {
    EventKind::RoundFinished {
        round,
        attempt,
        result: if report {
            AttemptResult::Reported {
                report: json!({"status":"complete","summary":"s","evidence":["e"],"nextSteps":[],"blocker":""}),
            }
        } else {
            AttemptResult::Failed {
                reason: crate::job::RoundFailure::NoReport,
                message: "m".into(),
            }
        },
        exit: None,
        ended_by: None,
        duration_ms: 1,
        usage: RoundUsage::default(),
        resources: None,
        sandbox_violations: Vec::new(),
        sandbox_setup_ms: None,
        agent_retries: Default::default(),
    }
}

fn started(round: u32, attempt: u32) -> EventKind {
    EventKind::RoundStarted {
        round,
        attempt,
        dir: "/tmp/x".into(),
    }
}

/// A running job with round 1 attempt 1 open.
fn running() -> JobView {
    let spec = JobSpec::new(
        "objective",
        "/ws",
        AgentSpec::Command {
            command: "true".into(),
        },
    );
    let mut v = JobView::project(&[
        ev(
            1,
            EventKind::JobSubmitted {
                spec: Box::new(spec),
            },
        ),
        ev(
            2,
            EventKind::JobStarted {
                runner: RunnerInfo::current("test"),
            },
        ),
    ])
    .unwrap();
    v.apply(&ev(3, started(1, 1))).unwrap();
    v
}

#[test]
fn a_note_is_carried_to_the_next_attempt_once() {
    let mut v = running();
    v.apply(&ev(4, sanitized(1, Some(1), 12))).unwrap();
    v.apply(&ev(5, finished(1, 1, false))).unwrap();
    assert_eq!(v.git_notes.len(), 1);
    let n = &v.git_notes[0];
    assert_eq!((n.round, n.attempt), (1, Some(1)));
    assert_eq!(n.repositories.len(), GIT_NOTE_REPOS);
    assert_eq!(n.more, 12 - u32::try_from(GIT_NOTE_REPOS).unwrap());
    // The retry's prompt is written from this view; once it started, the note is told.
    v.apply(&ev(
        6,
        EventKind::RoundRetried {
            round: 1,
            attempt: 1,
            reason: crate::job::RoundFailure::NoReport,
            backoff_ms: 1,
        },
    ))
    .unwrap();
    v.apply(&ev(7, started(1, 2))).unwrap();
    assert!(v.git_notes.is_empty());
    // A verify run's note: after the round's report.
    v.apply(&ev(8, finished(1, 2, true))).unwrap();
    v.apply(&ev(9, EventKind::VerifyStarted { round: 1 }))
        .unwrap();
    v.apply(&ev(10, sanitized(1, None, 1))).unwrap();
    assert_eq!(v.git_notes[0].attempt, None);
}

#[test]
fn a_note_outside_its_run_is_refused() {
    let mut v = running();
    let e = v.apply(&ev(4, sanitized(1, Some(2), 1))).unwrap_err();
    assert!(e.problem.contains("no such open attempt"), "{e}");
    let e = v.apply(&ev(4, sanitized(2, Some(1), 1))).unwrap_err();
    assert!(e.problem.contains("no such open attempt"), "{e}");
    // No report in round 1 yet: no verify to belong to.
    let e = v.apply(&ev(4, sanitized(1, None, 1))).unwrap_err();
    assert!(e.problem.contains("verify"), "{e}");
}

#[test]
fn notes_are_bounded() {
    let mut v = running();
    for seq in 4..14 {
        v.apply(&ev(seq, sanitized(1, Some(1), 1))).unwrap();
    }
    assert_eq!(v.git_notes.len(), GIT_NOTES);
}

fn at(seq: u64, at: &str, kind: EventKind) -> Event {
    Event {
        at: at.into(),
        ..ev(seq, kind)
    }
}

fn job_finished(ran_ms: Option<u64>) -> EventKind {
    EventKind::JobFinished {
        outcome: crate::job::Outcome::Interrupted,
        reason: crate::job::FinishReason::RunnerDied,
        message: "m".into(),
        exit_code: None,
        ran_ms,
    }
}

#[test]
fn the_time_a_job_ran_is_the_runners_monotonic_time_whatever_the_wall_clock_did() {
    let spec = JobSpec::new(
        "o",
        "/ws",
        AgentSpec::Command {
            command: "true".into(),
        },
    );
    let runner = RunnerInfo::current("test");
    let v = JobView::project(&[
        at(
            1,
            "2026-01-01T00:00:00.000Z",
            EventKind::JobSubmitted {
                spec: Box::new(spec),
            },
        ),
        at(
            2,
            "2026-01-01T00:00:00.000Z",
            EventKind::JobStarted {
                runner: runner.clone(),
            },
        ),
        // The wall clock jumps ten hours forward while the job runs (or the runner was down).
        at(3, "2026-01-01T10:00:00.000Z", job_finished(Some(5_000))),
        at(
            4,
            "2026-01-01T10:00:01.000Z",
            EventKind::Resumed {
                message: "r".into(),
                by: None,
                caps: Default::default(),
            },
        ),
        // ... and a year back.
        at(
            5,
            "2025-01-01T00:00:00.000Z",
            EventKind::JobStarted { runner },
        ),
        at(6, "2025-01-01T00:00:00.000Z", job_finished(Some(3_000))),
    ])
    .unwrap();
    assert_eq!(v.elapsed_ms, 8_000);
}

#[test]
fn an_older_journal_without_ran_ms_counts_the_time_between_its_events() {
    let spec = JobSpec::new(
        "o",
        "/ws",
        AgentSpec::Command {
            command: "true".into(),
        },
    );
    let old: EventKind = serde_json::from_value(json!({
        "type": "job_finished", "outcome": "interrupted", "reason": "runner_died",
        "message": "m", "exit_code": null
    }))
    .unwrap();
    let v = JobView::project(&[
        at(
            1,
            "2026-01-01T00:00:00.000Z",
            EventKind::JobSubmitted {
                spec: Box::new(spec),
            },
        ),
        at(
            2,
            "2026-01-01T00:00:00.000Z",
            EventKind::JobStarted {
                runner: RunnerInfo::current("test"),
            },
        ),
        at(3, "2026-01-01T00:00:07.000Z", old),
    ])
    .unwrap();
    assert_eq!(v.elapsed_ms, 7_000);
    // And a new one carries the field.
    let text = serde_json::to_value(job_finished(Some(42))).unwrap();
    assert_eq!(text["ran_ms"], 42);
}
