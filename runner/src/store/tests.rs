//! Store tests against real databases: each scenario runs on a SQLite file in a temporary
//! directory and on a throwaway PostgreSQL database ([`super::test_db`]; skipped with a message
//! when no server is reachable, a failure under `CI`).

use std::sync::Arc;

use serde_json::json;

use super::test_db::TestDatabase;
use super::*;
use crate::job::{AgentSpec, FinishReason, JobSpec, Outcome, RoundFailure};
use crate::usage::RoundUsage;

/// A database for one test.
enum Db {
    Sqlite(tempfile::TempDir),
    Postgres(TestDatabase),
}

impl Db {
    fn sqlite() -> Self {
        Db::Sqlite(tempfile::tempdir().unwrap())
    }

    fn postgres(label: &str) -> Option<Self> {
        TestDatabase::create(label).map(Db::Postgres)
    }

    /// A new store on this database (each one its own connection).
    fn store(&self) -> Store {
        match self {
            Db::Sqlite(dir) => Store::open_sqlite(dir.path()).unwrap(),
            Db::Postgres(db) => Store::open_postgres(&db.url).unwrap(),
        }
    }

    /// Runs raw SQL outside the store; the database's error message on failure.
    fn exec(&self, sql: &str) -> Result<(), String> {
        match self {
            Db::Sqlite(dir) => rusqlite::Connection::open(dir.path().join(sqlite::DB_FILE))
                .unwrap()
                .execute_batch(sql)
                .map_err(|e| e.to_string()),
            Db::Postgres(db) => db.client().batch_execute(sql).map_err(|e| {
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |d| d.message().to_owned())
            }),
        }
    }

    fn drop_append_only_trigger(&self) {
        match self {
            Db::Sqlite(_) => self.exec("DROP TRIGGER events_append_only_update"),
            Db::Postgres(_) => self.exec("DROP TRIGGER events_append_only ON events"),
        }
        .unwrap();
    }
}

/// Runs `scenario` once per backend: `NAME::sqlite` and `NAME::postgres`.
macro_rules! on_both_backends {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn sqlite() {
                super::$scenario(&super::Db::sqlite());
            }
            #[test]
            fn postgres() {
                if let Some(db) = super::Db::postgres(stringify!($scenario)) {
                    super::$scenario(&db);
                }
            }
        }
    )*};
}

on_both_backends!(
    journal_round_trip_and_projection,
    out_of_order_events_are_refused_and_not_stored,
    events_are_append_only_in_the_database,
    a_concurrent_writer_is_detected,
    a_tampered_report_is_rejected_when_read_back,
    listing_is_newest_first_filtered_and_paged,
    listings_filter_by_submitter,
    the_queue_is_priority_then_age_and_counts_by_state,
    a_claim_journals_job_started_and_skips,
    concurrent_claims_take_each_job_exactly_once,
    the_queue_passes_over_busy_workspaces,
    a_claim_takes_only_a_queued_job,
    concurrent_claims_of_one_job_have_one_winner,
    a_running_job_folds_in_a_foreign_cancel_request,
    cancel_requests_are_found_after_a_sequence_number,
    a_newer_schema_is_refused,
    writable_trees_are_the_distinct_workspaces_and_write_dirs,
    a_journals_times_never_go_backwards,
    a_runner_journals_again_the_writes_the_store_lost,
    a_runner_does_not_repair_over_another_runners_write,
    id_prefixes_resolve_to_one_job,
    names_and_labels_filter_listings,
    an_upgraded_store_knows_its_old_jobs_trees_and_labels,
);

/// Makes the store forget a job's events after `keep`, as a database crash does with commits it
/// had acknowledged but not flushed (or a failover to a replica that lagged).
fn lose_events_after(db: &Db, id: &str, keep: u64) {
    match db {
        Db::Sqlite(_) => db.exec("DROP TRIGGER events_append_only_delete").unwrap(),
        Db::Postgres(_) => db
            .exec("DROP TRIGGER events_append_only ON events")
            .unwrap(),
    }
    db.exec(&format!(
        "DELETE FROM events WHERE job_id = '{id}' AND seq > {keep};
         UPDATE jobs SET last_seq = {keep} WHERE id = '{id}';"
    ))
    .unwrap();
}

/// A database that loses acknowledged writes of a running job (issue 17: the host's next write
/// failed its sequence check, was taken for another runner's change, and the job was dropped,
/// left `running`): the runner tells its own lost writes from another's, journals them again
/// with their original times, and goes on.
fn a_runner_journals_again_the_writes_the_store_lost(db: &Db) {
    let store = Arc::new(db.store());
    let id = store.submit(&spec()).unwrap();
    assert!(store.claim(&id, &runner()).unwrap());
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    j.record(started(1, 1)).unwrap();
    j.record(EventKind::RoundSpawned {
        round: 1,
        attempt: 1,
        pid: Some(42),
    })
    .unwrap();
    let before = store.events(&id).unwrap();
    assert_eq!(before.len(), 4);
    lose_events_after(db, &id, 2);
    assert_eq!(store.events(&id).unwrap().len(), 2);

    let last = j
        .record(finished(1, 1, AttemptResult::Reported { report: report() }))
        .unwrap();
    assert_eq!(last.seq, 5);
    let after = store.events(&id).unwrap();
    assert_eq!(after.len(), 5, "{after:#?}");
    assert_eq!(
        &after[..4],
        &before[..],
        "the lost events come back as they were"
    );
    assert_eq!(after[4], last);
    let view = store.load(&id).unwrap();
    assert_eq!(view.seq, 5);
    assert_eq!(&view, j.view());
    let times: Vec<&str> = after.iter().map(|e| e.at.as_str()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

/// Hostile twin: when the journal lost our writes *and* another runner wrote after what is left
/// (it closed the job), the journal is theirs: nothing of ours is written over it.
fn a_runner_does_not_repair_over_another_runners_write(db: &Db) {
    let store = Arc::new(db.store());
    let id = store.submit(&spec()).unwrap();
    assert!(store.claim(&id, &runner()).unwrap());
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    j.record(started(1, 1)).unwrap();
    j.record(EventKind::RoundSpawned {
        round: 1,
        attempt: 1,
        pid: Some(42),
    })
    .unwrap();
    lose_events_after(db, &id, 2);
    let other = Arc::new(db.store());
    let mut theirs = Journal::open(other, &id, vec![]).unwrap();
    theirs
        .record(EventKind::Interrupted {
            message: "its runner's lease lapsed".into(),
        })
        .unwrap();
    let stored = store.events(&id).unwrap();

    let err = j
        .record(finished(1, 1, AttemptResult::Reported { report: report() }))
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(
        store.events(&id).unwrap(),
        stored,
        "the journal was written over"
    );
}

/// A journal's times follow its order: a claim takes its time when it writes (not before its
/// wait for the connection) and no event is dated before the one it follows, even when that one
/// was written by a host whose clock is ahead of this one's.
fn a_journals_times_never_go_backwards(db: &Db) {
    let store = Arc::new(db.store());
    let me = runner();
    let id = store.submit(&spec()).unwrap();
    let ahead = "2999-01-01T00:00:00.000Z";
    db.exec(&format!(
        "UPDATE jobs SET updated_at = '{ahead}' WHERE id = '{id}'"
    ))
    .unwrap();
    assert!(store.claim(&id, &me).unwrap());
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    j.record(EventKind::CancelRequested { by: "t".into() })
        .unwrap();
    let events = store.events(&id).unwrap();
    let times: Vec<&str> = events.iter().map(|e| e.at.as_str()).collect();
    assert_eq!(
        times[1], ahead,
        "the claim is dated before the event it follows"
    );
    assert_eq!(
        times[2], ahead,
        "an event is dated before the one it follows"
    );
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

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

/// How the service takes work, without the workspace locks: the next queued job not in
/// `skip`, claimed; a job another claimer took meanwhile is passed over.
fn claim_next(
    store: &Store,
    me: &RunnerInfo,
    skip: &[String],
) -> Result<Option<String>, StoreError> {
    let mut passed = skip.to_vec();
    while let Some(job) = store.next_queued(&passed, &[])? {
        if store.claim(&job.id, me)? {
            return Ok(Some(job.id));
        }
        passed.push(job.id);
    }
    Ok(None)
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

fn cancelled() -> EventKind {
    EventKind::JobFinished {
        outcome: Outcome::Cancelled,
        reason: FinishReason::CancelRequested,
        message: String::new(),
        exit_code: None,
        ran_ms: None,
    }
}

fn journal_round_trip_and_projection(db: &Db) {
    let store = Arc::new(db.store());
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
    j.record(cancelled()).unwrap();
    // A finished job cannot finish twice, and sequence numbers are dense.
    assert!(matches!(
        j.record(cancelled()),
        Err(StoreError::Projection(_))
    ));
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
    // The listing columns follow the journal.
    let listed = store.list(&JobFilter {
        limit: 10,
        ..Default::default()
    });
    let listed = listed.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].state.as_str(),
            listed[0].outcome.as_deref(),
            listed[0].rounds
        ),
        ("finished", Some("cancelled"), 1)
    );
    assert!(matches!(
        store.events("no-such-job"),
        Err(StoreError::NoSuchJob { .. })
    ));
}

fn out_of_order_events_are_refused_and_not_stored(db: &Db) {
    let store = Arc::new(db.store());
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

fn events_are_append_only_in_the_database(db: &Db) {
    let store = db.store();
    let id = store.submit(&spec()).unwrap();
    let upd = db
        .exec(&format!(
            "UPDATE events SET data = '{{}}' WHERE job_id = '{id}'"
        ))
        .unwrap_err();
    assert!(upd.contains("append-only"), "{upd}");
    let del = db
        .exec(&format!("DELETE FROM events WHERE job_id = '{id}'"))
        .unwrap_err();
    assert!(del.contains("append-only"), "{del}");
    if let Db::Postgres(_) = db {
        let trunc = db.exec("TRUNCATE events").unwrap_err();
        assert!(trunc.contains("append-only"), "{trunc}");
        let spec = db
            .exec(&format!("UPDATE jobs SET spec = '{{}}' WHERE id = '{id}'"))
            .unwrap_err();
        assert!(spec.contains("immutable"), "{spec}");
    }
    assert_eq!(store.events(&id).unwrap().len(), 1);
}

fn a_concurrent_writer_is_detected(db: &Db) {
    let store = Arc::new(db.store());
    let id = store.submit(&spec()).unwrap();
    let mut a = Journal::open(store.clone(), &id, vec![]).unwrap();
    let mut b = Journal::open(store.clone(), &id, vec![]).unwrap();
    a.record(EventKind::CancelRequested { by: "a".into() })
        .unwrap();
    let err = b
        .record(EventKind::CancelRequested { by: "b".into() })
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    // Through a second connection too (another process or host).
    let other = Arc::new(db.store());
    let mut c = Journal::open(other, &id, vec![]).unwrap();
    a.record(cancelled()).unwrap();
    let err = c.record(cancelled()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                expected: 2,
                found: 3,
                ..
            }
        ),
        "{err}"
    );
}

fn a_tampered_report_is_rejected_when_read_back(db: &Db) {
    let store = Arc::new(db.store());
    let id = store.submit(&spec()).unwrap();
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    j.record(EventKind::JobStarted { runner: runner() })
        .unwrap();
    j.record(started(1, 1)).unwrap();
    j.record(finished(1, 1, AttemptResult::Reported { report: report() }))
        .unwrap();
    // Someone with database access edits the stored report past the contract.
    db.drop_append_only_trigger();
    db.exec(&format!(
        "UPDATE events SET data = replace(data, '\"blocker\":\"\"', '\"blocker\":\"\",\"extra\":1') WHERE job_id = '{id}' AND seq = 4"
    ))
    .unwrap();
    let err = store.load(&id).unwrap_err();
    assert!(
        err.to_string().contains("stored report is invalid"),
        "{err}"
    );
    assert!(err.to_string().contains("extra"), "{err}");
}

/// Submits `n` jobs one after the other (ids and submission times increase).
fn submit_n(store: &Store, n: usize, priority: i32) -> Vec<String> {
    (0..n)
        .map(|_| {
            let id = store.submit_with_priority(&spec(), priority).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
            id
        })
        .collect()
}

fn listings_filter_by_submitter(db: &Db) {
    let store = db.store();
    let mut ids = Vec::new();
    for who in [Some("alice"), None, Some("bob"), Some("alice")] {
        let mut s = spec();
        s.submitted_by = who.map(str::to_owned);
        ids.push(store.submit(&s).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let by = |who: &str| -> Vec<String> {
        store
            .list(&JobFilter {
                limit: 100,
                submitted_by: Some(who.to_owned()),
                ..Default::default()
            })
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    assert_eq!(by("alice"), vec![ids[3].clone(), ids[0].clone()]);
    assert_eq!(by("bob"), vec![ids[2].clone()]);
    assert!(by("carol").is_empty());
    let all = store
        .list(&JobFilter {
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(all[1].submitted_by.as_deref(), Some("bob"));
    assert_eq!(all[2].submitted_by, None);
}

fn listing_is_newest_first_filtered_and_paged(db: &Db) {
    let store = Arc::new(db.store());
    let ids = submit_n(&store, 5, 0);
    // Finish two of them (cancelled before they started).
    for id in &ids[1..3] {
        let mut j = Journal::open(store.clone(), id, vec![]).unwrap();
        j.record(EventKind::CancelRequested { by: "t".into() })
            .unwrap();
        j.record(cancelled()).unwrap();
    }
    let page = |before: Option<&str>, limit, state, outcome| -> Vec<String> {
        store
            .list(&JobFilter {
                state,
                outcome,
                before: before.map(str::to_owned),
                limit,
                ..Default::default()
            })
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(page(None, 100, None, None), newest_first);
    // Paging: each page starts after the last id of the previous one.
    let first = page(None, 2, None, None);
    let second = page(Some(&first[1]), 2, None, None);
    let third = page(Some(&second[1]), 2, None, None);
    assert_eq!(
        [first, second, third.clone()].concat(),
        newest_first,
        "pages"
    );
    assert_eq!(third.len(), 1);
    assert_eq!(
        page(None, 100, Some(JobState::Finished), None),
        vec![ids[2].clone(), ids[1].clone()]
    );
    assert_eq!(
        page(None, 100, Some(JobState::Queued), None),
        vec![ids[4].clone(), ids[3].clone(), ids[0].clone()]
    );
    assert_eq!(
        page(None, 100, None, Some(Outcome::Cancelled)),
        vec![ids[2].clone(), ids[1].clone()]
    );
    assert!(page(None, 100, None, Some(Outcome::Complete)).is_empty());
    let summary = &store
        .list(&JobFilter {
            limit: 1,
            ..Default::default()
        })
        .unwrap()[0];
    assert_eq!(
        (
            summary.kind.as_str(),
            summary.state.as_str(),
            summary.priority
        ),
        ("loop", "queued", 0)
    );
    assert!(summary.created_at.ends_with('Z'), "{summary:?}");
}

fn the_queue_is_priority_then_age_and_counts_by_state(db: &Db) {
    let store = Arc::new(db.store());
    let low = submit_n(&store, 2, 0);
    let high = submit_n(&store, 2, 5);
    assert_eq!(
        store.next_queued(&[], &[]).unwrap().map(|q| q.id),
        Some(high[0].clone())
    );
    assert_eq!(
        store
            .next_queued(&[high[0].clone()], &[])
            .unwrap()
            .map(|q| q.id),
        Some(high[1].clone())
    );
    assert_eq!(
        store.next_queued(&high, &[]).unwrap().map(|q| q.id),
        Some(low[0].clone()),
        "older first within a priority"
    );
    assert_eq!(
        store
            .next_queued(&[high.clone(), low.clone()].concat(), &[])
            .unwrap()
            .map(|q| q.id),
        None
    );
    assert_eq!(store.count_in_state(JobState::Queued).unwrap(), 4);
    assert_eq!(store.count_in_state(JobState::Running).unwrap(), 0);
    let mut j = Journal::open(store.clone(), &low[1], vec![]).unwrap();
    j.record(EventKind::JobStarted { runner: runner() })
        .unwrap();
    assert_eq!(store.count_in_state(JobState::Running).unwrap(), 1);
    assert_eq!(
        store.job_ids_in_state(JobState::Queued).unwrap(),
        vec![low[0].clone(), high[0].clone(), high[1].clone()],
        "oldest first"
    );
    assert_eq!(
        store.job_ids_in_state(JobState::Running).unwrap(),
        vec![low[1].clone()]
    );
    assert!(
        store
            .job_ids_in_state(JobState::Finished)
            .unwrap()
            .is_empty()
    );
}

fn a_claim_journals_job_started_and_skips(db: &Db) {
    let store = Arc::new(db.store());
    let low = submit_n(&store, 1, 0);
    let high = submit_n(&store, 2, 3);
    let me = runner();
    assert_eq!(
        claim_next(&store, &me, &[high[0].clone()]).unwrap(),
        Some(high[1].clone())
    );
    assert_eq!(claim_next(&store, &me, &[]).unwrap(), Some(high[0].clone()));
    let view = store.load(&high[1]).unwrap();
    assert_eq!(
        (view.state, view.seq, view.runner.as_ref()),
        (JobState::Running, 2, Some(&me))
    );
    let listed = store
        .list(&JobFilter {
            state: Some(JobState::Running),
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(listed.len(), 2);
    // The runner goes on appending after the claim's event.
    let mut j = Journal::open(store.clone(), &high[1], vec![]).unwrap();
    j.record(started(1, 1)).unwrap();
    assert_eq!(claim_next(&store, &me, &low).unwrap(), None);
    assert_eq!(claim_next(&store, &me, &[]).unwrap(), Some(low[0].clone()));
    assert_eq!(claim_next(&store, &me, &[]).unwrap(), None);
    assert_eq!(store.count_in_state(JobState::Queued).unwrap(), 0);
    // A resumed job is claimed again.
    let mut j = Journal::open(store.clone(), &low[0], vec![]).unwrap();
    j.record(cancelled()).unwrap();
    j.record(EventKind::Resumed {
        message: "again".into(),
        by: None,
        caps: Default::default(),
    })
    .unwrap();
    assert_eq!(claim_next(&store, &me, &[]).unwrap(), Some(low[0].clone()));
    assert_eq!(store.load(&low[0]).unwrap().state, JobState::Running);
}

fn concurrent_claims_take_each_job_exactly_once(db: &Db) {
    const JOBS: usize = 60;
    const CLAIMERS: usize = 6;
    let store = db.store();
    let ids = submit_n(&store, JOBS, 0);
    // Each claimer has its own store (connection), as separate runner processes would.
    let claimed: Vec<Vec<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLAIMERS)
            .map(|i| {
                let store = db.store();
                s.spawn(move || {
                    let mut me = runner();
                    me.pid += u32::try_from(i).unwrap();
                    let mut mine = Vec::new();
                    while let Some(id) = claim_next(&store, &me, &[]).unwrap() {
                        mine.push(id);
                        // A runner does something with its job before it claims again.
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<String> = claimed.concat();
    all.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(all, want, "every job claimed exactly once");
    for id in &ids {
        let events = store.events(id).unwrap();
        let starts = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::JobStarted { .. }))
            .count();
        assert_eq!((events.len(), starts), (2, 1), "{id}");
    }
    assert!(
        claimed.iter().filter(|c| !c.is_empty()).count() > 1,
        "only one claimer got work: {:?}",
        claimed.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

fn the_queue_passes_over_busy_workspaces(db: &Db) {
    let store = db.store();
    let on = |ws: &str, priority: i32| {
        let mut spec = spec();
        spec.workspace = ws.into();
        let id = store.submit_with_priority(&spec, priority).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        id
    };
    let a1 = on("/tmp/a", 0);
    let _a2 = on("/tmp/a", 0);
    let nested = on("/tmp/a/b", 0);
    let b = on("/tmp/b", 0);
    let a_high = on("/tmp/a", 9);
    let next = |skip: &[String], busy: &[&str]| {
        let busy: Vec<std::path::PathBuf> = busy.iter().map(Into::into).collect();
        store.next_queued(skip, &busy).unwrap()
    };
    assert_eq!(
        next(&[], &[]),
        Some(QueuedJob {
            id: a_high.clone(),
            workspace: "/tmp/a".into(),
            provisioned: false,
            upload: None,
        })
    );
    // Every job of a busy workspace is passed over, whatever its priority; a workspace inside
    // it is another workspace.
    assert_eq!(
        next(&[], &["/tmp/a"]),
        Some(QueuedJob {
            id: nested.clone(),
            workspace: "/tmp/a/b".into(),
            provisioned: false,
            upload: None,
        })
    );
    assert_eq!(
        next(&[], &["/tmp/a", "/tmp/a/b"]).map(|q| q.id),
        Some(b.clone())
    );
    assert_eq!(next(&[], &["/tmp/a", "/tmp/a/b", "/tmp/b"]), None);
    assert_eq!(
        next(std::slice::from_ref(&a_high), &["/tmp/b"]).map(|q| q.id),
        Some(a1)
    );
}

fn a_claim_takes_only_a_queued_job(db: &Db) {
    let store = Arc::new(db.store());
    let me = runner();
    let ids = submit_n(&store, 2, 0);
    assert!(
        store.claim(&ids[1], &me).unwrap(),
        "any queued job, not only the first"
    );
    assert!(!store.claim(&ids[1], &me).unwrap(), "a running job");
    let view = store.load(&ids[1]).unwrap();
    assert_eq!(
        (view.state, view.seq, view.runner.as_ref()),
        (JobState::Running, 2, Some(&me))
    );
    assert_eq!(
        store.next_queued(&[], &[]).unwrap().map(|q| q.id),
        Some(ids[0].clone())
    );
    let mut j = Journal::open(store.clone(), &ids[0], vec![]).unwrap();
    j.record(EventKind::CancelRequested { by: "t".into() })
        .unwrap();
    j.record(cancelled()).unwrap();
    assert!(!store.claim(&ids[0], &me).unwrap(), "a finished job");
    assert!(!store.claim("no-such-job", &me).unwrap());
    j.record(EventKind::Resumed {
        message: "again".into(),
        by: None,
        caps: Default::default(),
    })
    .unwrap();
    assert!(store.claim(&ids[0], &me).unwrap(), "a resumed job");
    assert_eq!(store.events(&ids[0]).unwrap().len(), 5);
}

fn concurrent_claims_of_one_job_have_one_winner(db: &Db) {
    const CLAIMERS: usize = 6;
    let store = db.store();
    for _ in 0..5 {
        let id = store.submit(&spec()).unwrap();
        let barrier = std::sync::Barrier::new(CLAIMERS);
        let won: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..CLAIMERS)
                .map(|i| {
                    let (store, id, barrier) = (db.store(), &id, &barrier);
                    s.spawn(move || {
                        let mut me = runner();
                        me.pid += u32::try_from(i).unwrap();
                        barrier.wait();
                        usize::from(store.claim(id, &me).unwrap())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(won, 1, "{id}");
        let starts = store
            .events(&id)
            .unwrap()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::JobStarted { .. }))
            .count();
        assert_eq!(starts, 1, "{id}");
    }
}

fn a_running_job_folds_in_a_foreign_cancel_request(db: &Db) {
    let store = Arc::new(db.store());
    let id = store.submit(&spec()).unwrap();
    let me = runner();
    assert_eq!(claim_next(&store, &me, &[]).unwrap(), Some(id.clone()));
    let mut runner_side = Journal::open(store.clone(), &id, vec![]).unwrap();
    runner_side.record(started(1, 1)).unwrap();
    // Another host's API journals a cancel request through its own connection.
    let api_side = Arc::new(db.store());
    let mut api = Journal::open(api_side, &id, vec![]).unwrap();
    api.record(EventKind::CancelRequested { by: "api".into() })
        .unwrap();
    // The runner's next event lands after it, and its view now knows of the request.
    runner_side
        .record(finished(1, 1, AttemptResult::Cancelled))
        .unwrap();
    assert!(runner_side.view().cancel_requested);
    // Its own cancel request is not journalled twice.
    let again = runner_side
        .record(EventKind::CancelRequested {
            by: "runner".into(),
        })
        .unwrap();
    assert!(matches!(&again.kind, EventKind::CancelRequested { by } if by == "runner"));
    runner_side.record(cancelled()).unwrap();
    let types: Vec<&str> = store
        .events(&id)
        .unwrap()
        .iter()
        .map(|e| e.kind.name())
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        types,
        [
            "job_submitted",
            "job_started",
            "round_started",
            "cancel_requested",
            "round_finished",
            "cancel_requested",
            "job_finished"
        ]
    );
    // Any other concurrent change stays a conflict.
    let id2 = store.submit(&spec()).unwrap();
    claim_next(&store, &me, &[]).unwrap();
    let mut a = Journal::open(store.clone(), &id2, vec![]).unwrap();
    let mut b = Journal::open(store.clone(), &id2, vec![]).unwrap();
    a.record(started(1, 1)).unwrap();
    assert!(matches!(
        b.record(started(1, 1)),
        Err(StoreError::Conflict { .. })
    ));
}

fn cancel_requests_are_found_after_a_sequence_number(db: &Db) {
    let store = Arc::new(db.store());
    let id = store.submit(&spec()).unwrap();
    assert_eq!(store.cancel_requested_after(&id, 0).unwrap(), None);
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    j.record(EventKind::CancelRequested { by: "api".into() })
        .unwrap();
    assert_eq!(
        store.cancel_requested_after(&id, 0).unwrap().as_deref(),
        Some("api")
    );
    assert_eq!(store.cancel_requested_after(&id, 2).unwrap(), None);
    assert_eq!(store.cancel_requested_after("nope", 0).unwrap(), None);
}

fn a_newer_schema_is_refused(db: &Db) {
    drop(db.store());
    match db {
        Db::Sqlite(_) => db.exec("PRAGMA user_version = 99").unwrap(),
        Db::Postgres(_) => db.exec("UPDATE ralph_schema SET version = 99").unwrap(),
    }
    let err = match db {
        Db::Sqlite(dir) => Store::open_sqlite(dir.path()).unwrap_err(),
        Db::Postgres(t) => Store::open_postgres(&t.url).unwrap_err(),
    };
    let ours = match db {
        Db::Sqlite(_) => super::sqlite::SCHEMA_VERSION,
        Db::Postgres(_) => i64::from(super::postgres::schema::SCHEMA_VERSION),
    };
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                supported,
                ..
            } if supported == ours
        ),
        "{err}"
    );
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

#[test]
fn the_postgres_store_reconnects_after_its_connection_is_killed() {
    let Some(db) = TestDatabase::create("reconnect") else {
        return;
    };
    let store = Arc::new(Store::open_postgres(&db.url).unwrap());
    let id = store.submit(&spec()).unwrap();
    let kill = || {
        let mut admin = db.client();
        let killed: i64 = admin
            .query_one(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(killed >= 1);
    };
    kill();
    // Reads and appends work again on a new connection.
    assert_eq!(store.events(&id).unwrap().len(), 1);
    kill();
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    kill();
    j.record(EventKind::CancelRequested { by: "t".into() })
        .unwrap();
    kill();
    assert_eq!(
        claim_next(&store, &runner(), &[]).unwrap(),
        Some(id.clone())
    );
    assert_eq!(claim_next(&store, &runner(), &[]).unwrap(), None);
    let view = store.load(&id).unwrap();
    assert_eq!((view.seq, view.state), (3, JobState::Running));
}

#[test]
fn postgres_errors_name_the_target_without_its_password() {
    let Some(db) = TestDatabase::create("password") else {
        return;
    };
    // A wrong password for the test role on the test server.
    let url = db
        .url
        .replacen("://", "://ralph_test:not-the-password-x1@", 1);
    let url = match url.split_once("@") {
        Some((head, tail)) => match tail.split_once('@') {
            Some((_, host)) => format!("{head}@{host}"),
            None => url.clone(),
        },
        None => url.clone(),
    };
    let err = Store::open_postgres(&url).unwrap_err().to_string();
    assert!(!err.contains("not-the-password-x1"), "{err}");
    assert!(err.contains("ralph_test:***@"), "{err}");
    assert!(
        err.starts_with("failed to connect to the PostgreSQL store"),
        "{err}"
    );
    // Nothing listens on port 1: a clear error after the bounded retries.
    let err = Store::open_postgres("postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=1")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("u:***@127.0.0.1:1") && !err.contains("hunter2"),
        "{err}"
    );
}

fn writable_trees_are_the_distinct_workspaces_and_write_dirs(db: &Db) {
    let store = db.store();
    assert!(store.writable_trees().unwrap().is_empty());
    let mut a = spec();
    a.workspace = "/srv/ws1".into();
    a.sandbox.write = vec!["/var/cache/a".into(), "/var/cache/b".into()];
    let mut b = spec();
    b.workspace = "/srv/ws1".into();
    b.sandbox.write = vec!["/var/cache/a".into()];
    let mut c = spec();
    c.workspace = "/srv/ws2".into();
    // A read-only job's rounds write nowhere: its workspace is not a writable tree.
    let mut ro = spec();
    ro.workspace = "/srv/readonly".into();
    ro.sandbox.mode = ralph_sandbox::Mode::ReadOnly;
    for s in [&a, &b, &c, &ro] {
        store.submit(s).unwrap();
    }
    store.submit_started(&c, &runner()).unwrap();
    let trees: Vec<String> = store
        .writable_trees()
        .unwrap()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        trees,
        ["/srv/ws1", "/srv/ws2", "/var/cache/a", "/var/cache/b"],
        "{trees:?}"
    );
    // Asked about by path (a walk's directory and its ancestors): exactly the trees among them;
    // a prefix, a parent or a read-only job's workspace is none.
    let asked = |paths: &[&str]| -> Vec<String> {
        let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
        let mut got = store.writable_trees_among(&paths).unwrap();
        got.sort();
        got
    };
    assert_eq!(
        asked(&["/srv/ws1/src/x", "/srv/ws1/src", "/srv/ws1", "/srv", "/"]),
        ["/srv/ws1"]
    );
    assert_eq!(
        asked(&["/var/cache/a/b", "/var/cache/a", "/var/cache", "/var"]),
        ["/var/cache/a"]
    );
    assert!(asked(&["/srv/ws", "/srv/ws10", "/srv/readonly", "/srv"]).is_empty());
    assert!(asked(&[]).is_empty());
    assert_eq!(asked(&["/srv/ws2", "/srv/ws1", "/var/cache/b"]).len(), 3);
}

#[test]
fn a_version_1_postgres_database_is_upgraded_to_leases_in_place() {
    let Some(db) = TestDatabase::create("upgrade_v1") else {
        return;
    };
    let mut c = db.client();
    c.batch_execute(include_str!("postgres/schema.sql"))
        .unwrap();
    c.batch_execute(
        "CREATE TABLE ralph_schema (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), version integer NOT NULL);
         INSERT INTO ralph_schema (version) VALUES (1);",
    )
    .unwrap();
    let store = Store::open_postgres(&db.url).unwrap();
    let id = store.submit(&spec()).unwrap();
    assert_eq!(store.load(&id).unwrap().state, JobState::Queued);
    let version: i32 = c
        .query_one("SELECT version FROM ralph_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, super::postgres::schema::SCHEMA_VERSION);
    let lease: Option<String> = c
        .query_one("SELECT lease_id FROM jobs WHERE id = $1", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(lease, None);
    c.batch_execute("SELECT id, expires_at FROM runner_leases")
        .unwrap();
}

#[test]
fn a_job_whose_lease_expired_is_taken_over_once_and_a_live_one_is_left_alone() {
    let Some(db) = TestDatabase::create("lease_takeover") else {
        return;
    };
    let me = RunnerInfo::current("serve");
    // Host a: a lease that will lapse, and a job running under it.
    let a = Arc::new(Store::open_postgres(&db.url).unwrap());
    let _lease_a = a
        .start_lease(&me, std::time::Duration::from_secs(3600))
        .unwrap()
        .unwrap();
    let id = a.submit(&spec()).unwrap();
    assert!(a.claim(&id, &me).unwrap());
    // Two survivors with live leases.
    let b = Arc::new(Store::open_postgres(&db.url).unwrap());
    let _lease_b = b
        .start_lease(&me, std::time::Duration::from_secs(3600))
        .unwrap()
        .unwrap();
    let c = Arc::new(Store::open_postgres(&db.url).unwrap());
    let _lease_c = c
        .start_lease(&me, std::time::Duration::from_secs(3600))
        .unwrap()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Hostile first: a live lease holds the job.
    assert!(matches!(
        b.probe_hold(dir.path(), &id).unwrap(),
        super::hold::Probe::Held { .. }
    ));
    // The lease lapses (by the database's clock).
    let n = db
        .client()
        .execute(
            "UPDATE runner_leases SET expires_at = now() - interval '1 second'
             WHERE id = (SELECT lease_id FROM jobs WHERE id = $1)",
            &[&id],
        )
        .unwrap();
    assert_eq!(n, 1);
    let first = b.probe_hold(dir.path(), &id).unwrap();
    assert!(
        matches!(first, super::hold::Probe::Free { .. }),
        "{first:?}"
    );
    // The second survivor finds it held by the first (which took it over).
    assert!(matches!(
        c.probe_hold(dir.path(), &id).unwrap(),
        super::hold::Probe::Held { .. }
    ));
}

/// A job this process stopped running while the store says its lease holds it (a store outage
/// outlasted the journal's patience, so the job could not be closed): the process's own orphan
/// watch finds it free and closes it; a job it still holds is left alone.
#[test]
fn a_job_this_process_gave_up_is_free_to_close_and_a_held_one_is_not() {
    let Some(db) = TestDatabase::create("gave_up") else {
        return;
    };
    let me = RunnerInfo::current("serve");
    let store = Arc::new(Store::open_postgres(&db.url).unwrap());
    let _lease = store
        .start_lease(&me, std::time::Duration::from_secs(3600))
        .unwrap()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let id = store.submit(&spec()).unwrap();
    let hold = store.hold_job(dir.path(), &id, &me).unwrap();
    assert!(store.claim(&id, &me).unwrap());
    let probe = store.probe_hold(dir.path(), &id).unwrap();
    assert!(
        matches!(probe, super::hold::Probe::Held { .. }),
        "{probe:?}"
    );
    drop(hold);
    let probe = store.probe_hold(dir.path(), &id).unwrap();
    match probe {
        super::hold::Probe::Free { who, .. } => assert!(who.contains("gave the job up"), "{who}"),
        other => panic!("the given-up job is not free: {other:?}"),
    }
}

fn id_prefixes_resolve_to_one_job(db: &Db) {
    let store = Arc::new(db.store());
    let ids = [
        "0190aaaa-0000-7000-8000-000000000001",
        "0190aaaa-0000-7000-8000-000000000002",
        "0190abcd-0000-7000-8000-000000000003",
    ];
    for id in ids {
        store
            .submit_started_as(id.into(), &spec(), &runner())
            .unwrap();
    }
    // Hostile first: patterns, short or foreign prefixes never reach a query.
    for bad in [
        "0190%",
        "0190_",
        "%",
        "019",
        "0190aaaa' OR 1=1",
        "0190\u{0}",
    ] {
        let e = store.resolve_id(bad).unwrap_err();
        assert!(
            matches!(e, StoreError::InvalidIdPrefix { .. }),
            "{bad}: {e}"
        );
    }
    match store.resolve_id("0190aaaa").unwrap_err() {
        StoreError::AmbiguousId { prefix, candidates } => {
            assert_eq!(prefix, "0190aaaa");
            assert_eq!(candidates, ids[..2].to_vec());
        }
        other => panic!("{other}"),
    }
    assert!(matches!(
        store.resolve_id("0190ffff").unwrap_err(),
        StoreError::NoSuchJob { .. }
    ));
    assert_eq!(store.resolve_id("0190ab").unwrap(), ids[2]);
    assert_eq!(store.resolve_id("0190ABCD").unwrap(), ids[2]);
    assert_eq!(store.resolve_id(ids[1]).unwrap(), ids[1]);
    assert_eq!(
        store
            .resolve_id("0190aaaa-0000-7000-8000-000000000001")
            .unwrap(),
        ids[0]
    );
}

fn names_and_labels_filter_listings(db: &Db) {
    let store = db.store();
    let mut infra = spec();
    infra.name = Some("nightly".into());
    infra.labels = [
        ("team".into(), "infra".into()),
        ("ticket".into(), "T-12".into()),
    ]
    .into();
    let mut ops = spec();
    ops.labels = [("team".into(), "ops".into())].into();
    let a = store.submit(&infra).unwrap();
    let b = store.submit(&ops).unwrap();
    let c = store.submit(&spec()).unwrap();
    let list = |name: Option<&str>, labels: &[(&str, &str)]| -> Vec<String> {
        listed(
            &store,
            JobFilter {
                name: name.map(str::to_owned),
                ..Default::default()
            },
            labels,
        )
    };
    assert_eq!(
        list(None, &[("team", "infra"), ("ticket", "x")]),
        Vec::<String>::new()
    );
    assert_eq!(list(None, &[("team", "infra%")]), Vec::<String>::new());
    assert_eq!(
        list(None, &[("team", "infra"), ("ticket", "T-12")]),
        vec![a.clone()]
    );
    assert_eq!(list(None, &[("team", "ops")]), vec![b.clone()]);
    assert_eq!(list(Some("nightly"), &[]), vec![a.clone()]);
    assert_eq!(list(Some("nightl"), &[]), Vec::<String>::new());
    let mut every = list(None, &[]);
    every.sort();
    let mut expected = vec![a.clone(), b, c];
    expected.sort();
    assert_eq!(every, expected);
    let all = store
        .list(&JobFilter {
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    let first = all.iter().find(|j| j.id == a).unwrap();
    assert_eq!(first.name.as_deref(), Some("nightly"));
    assert_eq!(first.labels["ticket"], "T-12");
    assert!(all.iter().all(|j| j.id == a || j.name.is_none()));
}

/// A store written before the writable trees and the labels had their own tables (SQLite
/// version 1, PostgreSQL version 4): the upgrade fills them from the jobs already there, and
/// the trigger keeps them for the jobs after.
fn an_upgraded_store_knows_its_old_jobs_trees_and_labels(db: &Db) {
    let store = db.store();
    let mut old = spec();
    old.workspace = "/srv/old".into();
    old.sandbox.write = vec!["/var/cache/old".into()];
    old.labels = [("team".into(), "infra".into())].into();
    let a = store.submit(&old).unwrap();
    drop(store);
    match db {
        Db::Sqlite(_) => db.exec(
            "DROP TRIGGER jobs_indexed; DROP TABLE job_labels; DROP TABLE writable_trees;
             PRAGMA user_version = 1;",
        ),
        Db::Postgres(_) => db.exec(
            "DROP TRIGGER jobs_indexed ON jobs; DROP TABLE job_labels; DROP TABLE writable_trees;
             UPDATE ralph_schema SET version = 4;",
        ),
    }
    .unwrap();
    let store = db.store();
    let mut new = spec();
    new.workspace = "/srv/new".into();
    new.labels = [("team".into(), "infra".into()), ("k".into(), "v".into())].into();
    let b = store.submit(&new).unwrap();
    let trees: Vec<String> = store
        .writable_trees()
        .unwrap()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(trees, ["/srv/new", "/srv/old", "/var/cache/old"]);
    let by = |state: Option<JobState>, labels: &[(&str, &str)]| -> Vec<String> {
        listed(
            &store,
            JobFilter {
                state,
                ..Default::default()
            },
            labels,
        )
    };
    let mut both = by(Some(JobState::Queued), &[("team", "infra")]);
    both.sort();
    let mut expected = vec![a, b.clone()];
    expected.sort();
    assert_eq!(both, expected);
    assert_eq!(by(None, &[("team", "infra"), ("k", "v")]), vec![b]);
    assert!(by(Some(JobState::Running), &[("team", "infra")]).is_empty());
}

/// The ids `filter` lists (at most 10) with `labels` added to it.
fn listed(store: &Store, filter: JobFilter, labels: &[(&str, &str)]) -> Vec<String> {
    store
        .list(&JobFilter {
            limit: 10,
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..filter
        })
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect()
}
