//! The projection of the set-up step (SPEC §3, §12): no round before the set-up passed, a
//! set-up only before round 1 and never again once it passed, one that never finished runs again.

use super::*;
use crate::job::{AgentSpec, FinishReason, JobSpec, Outcome, SetupSpec};

fn ev(seq: u64, kind: EventKind) -> Event {
    Event {
        job_id: "j".into(),
        seq,
        at: "2026-11-30T00:00:00.000Z".into(),
        kind,
    }
}

/// A running job with a set-up.
fn running() -> JobView {
    let mut spec = JobSpec::new(
        "o",
        "/ws",
        AgentSpec::Command {
            command: "a".into(),
        },
    );
    spec.setup = Some(SetupSpec::new("npm ci"));
    let mut v = JobView::submitted(&ev(
        1,
        EventKind::JobSubmitted {
            spec: Box::new(spec),
        },
    ))
    .unwrap();
    v.apply(&ev(
        2,
        EventKind::JobStarted {
            runner: RunnerInfo::current("test"),
        },
    ))
    .unwrap();
    v
}

fn next(v: &mut JobView, kind: EventKind) -> Result<(), ProjectionError> {
    let seq = v.seq + 1;
    v.apply(&ev(seq, kind))
}

fn round_started() -> EventKind {
    EventKind::RoundStarted {
        round: 1,
        attempt: 1,
        dir: "/x".into(),
    }
}

fn setup_started() -> EventKind {
    EventKind::SetupStarted {
        command: "npm ci".into(),
    }
}

fn setup_finished(passed: bool) -> EventKind {
    EventKind::SetupFinished {
        passed,
        exit: None,
        ended_by: None,
        output_tail: String::new(),
        duration_ms: 1,
    }
}

#[test]
fn no_round_starts_before_the_setup_passed() {
    let mut v = running();
    let e = next(&mut v, round_started()).unwrap_err();
    assert!(e.problem.contains("before the set-up passed"), "{e}");
    next(&mut v, setup_started()).unwrap();
    assert_eq!(v.setup, SetupState::Running);
    assert!(next(&mut v, round_started()).is_err());
    next(&mut v, setup_finished(false)).unwrap();
    assert_eq!(v.setup, SetupState::Failed);
    assert!(next(&mut v, round_started()).is_err());
    next(&mut v, setup_started()).unwrap();
    next(&mut v, setup_finished(true)).unwrap();
    assert_eq!(v.setup, SetupState::Passed);
    next(&mut v, round_started()).unwrap();
}

#[test]
fn a_setup_that_passed_never_runs_again_and_none_runs_after_a_round() {
    let mut v = running();
    next(&mut v, setup_started()).unwrap();
    let e = next(&mut v, setup_started()).unwrap_err();
    assert!(e.problem.contains("already running"), "{e}");
    next(&mut v, setup_finished(true)).unwrap();
    let e = next(&mut v, setup_started()).unwrap_err();
    assert!(e.problem.contains("already passed"), "{e}");
    assert!(
        next(&mut v, setup_finished(true)).is_err(),
        "none is running"
    );
    next(&mut v, round_started()).unwrap();
}

#[test]
fn a_setup_its_job_was_closed_in_is_interrupted_and_runs_again() {
    let mut v = running();
    next(&mut v, setup_started()).unwrap();
    next(
        &mut v,
        EventKind::WorkspaceSanitized {
            round: 0,
            attempt: None,
            repositories: Vec::new(),
            counts: Default::default(),
            unchecked: None,
        },
    )
    .unwrap();
    next(
        &mut v,
        EventKind::JobFinished {
            outcome: Outcome::Interrupted,
            reason: FinishReason::RunnerDied,
            message: "died".into(),
            exit_code: None,
            ran_ms: None,
        },
    )
    .unwrap();
    assert_eq!(v.setup, SetupState::Interrupted);
    next(
        &mut v,
        EventKind::Resumed {
            message: "again".into(),
            by: None,
            caps: Default::default(),
        },
    )
    .unwrap();
    next(
        &mut v,
        EventKind::JobStarted {
            runner: RunnerInfo::current("test"),
        },
    )
    .unwrap();
    next(&mut v, setup_started()).unwrap();
}

#[test]
fn a_job_without_a_setup_has_none_to_start() {
    let mut spec = running().spec;
    spec.setup = None;
    let mut v = JobView::submitted(&ev(
        1,
        EventKind::JobSubmitted {
            spec: Box::new(spec),
        },
    ))
    .unwrap();
    v.apply(&ev(
        2,
        EventKind::JobStarted {
            runner: RunnerInfo::current("test"),
        },
    ))
    .unwrap();
    assert!(next(&mut v, setup_started()).is_err());
    next(&mut v, round_started()).unwrap();
}
