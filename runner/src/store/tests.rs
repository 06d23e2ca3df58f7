//! Store tests against a real SQLite file in a temporary directory.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::job::{AgentSpec, FinishReason, JobSpec, Outcome, RoundFailure};
use crate::usage::RoundUsage;

fn spec() -> JobSpec {
    JobSpec::new(
        "objective",
        "/tmp/ws",
        AgentSpec::Command {
            command: "true".into(),
        },
    )
}

fn runner() -> RunnerInfo {
    RunnerInfo::current("test")
}

fn finished(round: u32, attempt: u32, result: AttemptResult) -> EventKind {
    EventKind::RoundFinished {
        round,
        attempt,
        result,
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

fn report() -> serde_json::Value {
    json!({"status":"continue","summary":"s","evidence":[],"nextSteps":["n"],"blocker":""})
}

#[test]
fn journal_round_trip_and_projection() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_sqlite(dir.path()).unwrap());
    let id = store.submit(&spec()).unwrap();
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    j.record(EventKind::JobStarted { runner: runner() })
        .unwrap();
    j.record(started(1, 1)).unwrap();
    j.record(finished(
        1,
        1,
        AttemptResult::Failed {
            reason: RoundFailure::NoReport,
            message: "m".into(),
        },
    ))
    .unwrap();
    j.record(EventKind::RoundRetried {
        round: 1,
        attempt: 1,
        reason: RoundFailure::NoReport,
        backoff_ms: 0,
    })
    .unwrap();
    j.record(started(1, 2)).unwrap();
    j.record(finished(1, 2, AttemptResult::Reported { report: report() }))
        .unwrap();
    let fin = || EventKind::JobFinished {
        outcome: Outcome::Cancelled,
        reason: FinishReason::CancelRequested,
        message: String::new(),
        exit_code: None,
    };
    j.record(fin()).unwrap();
    // A finished job cannot finish twice, and sequence numbers are dense.
    assert!(matches!(j.record(fin()), Err(StoreError::Projection(_))));
    let events = store.events(&id).unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
    let view = store.load(&id).unwrap();
    assert_eq!(&view, j.view());
    assert_eq!(
        (view.rounds_started, view.attempts, view.retries),
        (1, 2, 1)
    );
    assert_eq!(view.last_report.as_ref().unwrap().summary, "s");
}

#[test]
fn out_of_order_events_are_refused_and_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_sqlite(dir.path()).unwrap());
    let id = store.submit(&spec()).unwrap();
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    // Not started yet: no round may begin.
    assert!(matches!(
        j.record(started(1, 1)),
        Err(StoreError::Projection(_))
    ));
    j.record(EventKind::JobStarted { runner: runner() })
        .unwrap();
    assert!(matches!(
        j.record(started(2, 1)),
        Err(StoreError::Projection(_))
    ));
    assert!(matches!(
        j.record(finished(1, 1, AttemptResult::Cancelled)),
        Err(StoreError::Projection(_))
    ));
    assert_eq!(store.events(&id).unwrap().len(), 2);
}

#[test]
fn events_are_append_only_in_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(dir.path()).unwrap();
    let id = store.submit(&spec()).unwrap();
    let conn = rusqlite::Connection::open(store.location()).unwrap();
    let upd = conn
        .execute("UPDATE events SET data = '{}' WHERE job_id = ?1", [&id])
        .unwrap_err();
    assert!(upd.to_string().contains("append-only"), "{upd}");
    let del = conn
        .execute("DELETE FROM events WHERE job_id = ?1", [&id])
        .unwrap_err();
    assert!(del.to_string().contains("append-only"), "{del}");
}

#[test]
fn a_concurrent_writer_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_sqlite(dir.path()).unwrap());
    let id = store.submit(&spec()).unwrap();
    let mut a = Journal::open(store.clone(), &id, vec![]).unwrap();
    let mut b = Journal::open(store.clone(), &id, vec![]).unwrap();
    a.record(EventKind::CancelRequested { by: "a".into() })
        .unwrap();
    let err = b
        .record(EventKind::CancelRequested { by: "b".into() })
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
}

#[test]
fn a_tampered_report_is_rejected_when_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_sqlite(dir.path()).unwrap());
    let id = store.submit(&spec()).unwrap();
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    j.record(EventKind::JobStarted { runner: runner() })
        .unwrap();
    j.record(started(1, 1)).unwrap();
    j.record(finished(1, 1, AttemptResult::Reported { report: report() }))
        .unwrap();
    // Someone with database access edits the stored report past the contract.
    let conn = rusqlite::Connection::open(store.location()).unwrap();
    conn.execute_batch("DROP TRIGGER events_append_only_update")
        .unwrap();
    conn.execute("UPDATE events SET data = replace(data, '\"blocker\":\"\"', '\"blocker\":\"\",\"extra\":1') WHERE job_id = ?1 AND seq = 4", [&id])
        .unwrap();
    let err = store.load(&id).unwrap_err();
    assert!(
        err.to_string().contains("stored report is invalid"),
        "{err}"
    );
    assert!(err.to_string().contains("extra"), "{err}");
}

#[test]
fn the_database_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    Store::open_sqlite(&state).unwrap();
    assert_eq!(
        std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o700
    );
}
