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
