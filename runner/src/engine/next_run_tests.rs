//! When the engine announces a run ahead ([`ralph_sandbox::Sandbox::prepare`]), driven by the
//! scripted fake against a real SQLite journal: once when the job starts, then only after a run
//! that another one follows (the next round, a retry, the verify, the round after a failed
//! verify, the first round after the set-up), each before that next run; never after a job's
//! last run, and one announced for a run that does not come (a cancel during a backoff) is
//! discarded when the job ends ([`ralph_sandbox::Sandbox::discard`]), so a runner keeps no
//! helper started for nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::fake_sandbox::{CallKind, RoundScript, Script, Step};
use super::loop_tests::{CancelAfterAttempt, Harness, complete, cont};
use crate::job::{JobKind, Outcome, SetupSpec};
use crate::util::units::HumanDuration;

use CallKind::{Agent, Setup, Verify};
use Step::{Discard as D, Prepare as P, Run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_announces_each_run_that_follows_and_none_after_its_last() {
    let mut h = Harness::new(
        vec![Script::report(cont()), Script::report(complete())],
        vec![Script::exit(0)],
    );
    h.spec.verify = Some("check".into());
    let (_, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::Complete);
    assert_eq!(
        h.fake.steps(),
        vec![P, Run(Agent), P, Run(Agent), P, Run(Verify)],
        "nothing announced after the verify that ended the job"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_round_job_announces_its_round_only() {
    for report in [cont(), complete()] {
        let mut h = Harness::new(vec![Script::report(report.clone())], vec![]);
        h.spec.max_rounds = 1;
        h.run().await;
        assert_eq!(h.fake.steps(), vec![P, Run(Agent)], "{report}");
    }
    // A blocked round ends the job whatever rounds are left.
    let blocked = serde_json::json!({"status":"blocked","summary":"stuck","evidence":[],"nextSteps":[],"blocker":"no key"});
    let h = Harness::new(vec![Script::report(blocked)], vec![]);
    h.run().await;
    assert_eq!(h.fake.steps(), vec![P, Run(Agent)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_announced_while_retries_are_left() {
    let mut h = Harness::new(vec![Script::exit(3); 3], vec![]);
    h.spec.round_retries = 2;
    let (_, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::RoundFailed);
    assert_eq!(
        h.fake.steps(),
        vec![P, Run(Agent), P, Run(Agent), P, Run(Agent)],
        "the last attempt's failure ends the job: nothing after it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_verify_announces_the_next_round_while_rounds_are_left() {
    let mut h = Harness::new(
        vec![Script::report(complete()), Script::report(complete())],
        vec![Script::exit(1), Script::exit(1)],
    );
    h.spec.verify = Some("check".into());
    h.spec.max_rounds = 2;
    let (_, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::BudgetLimited);
    assert_eq!(
        h.fake.steps(),
        vec![P, Run(Agent), P, Run(Verify), P, Run(Agent), P, Run(Verify)],
        "the last round's failed verify ends the job: nothing after it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_that_passed_announces_the_first_round_and_one_that_failed_nothing() {
    let mut h = Harness::with(
        vec![Script::report(complete())],
        vec![],
        vec![Script::exit(0)],
        Vec::new(),
    );
    h.spec.setup = Some(SetupSpec::new("make deps"));
    h.run().await;
    assert_eq!(h.fake.steps(), vec![P, Run(Setup), P, Run(Agent)]);

    let mut h = Harness::with(
        vec![Script::report(complete())],
        vec![],
        vec![Script::exit(2)],
        Vec::new(),
    );
    h.spec.setup = Some(SetupSpec::new("make deps"));
    let (_, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::Error);
    assert_eq!(h.fake.steps(), vec![P, Run(Setup)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_announces_its_verify_after_a_clean_exit_only() {
    for (exit, steps) in [
        (0, vec![P, Run(Agent), P, Run(Verify)]),
        (1, vec![P, Run(Agent)]),
    ] {
        let mut h = Harness::new(vec![Script::exit(exit)], vec![Script::exit(0)]);
        h.spec.kind = JobKind::Task;
        h.spec.verify = Some("check".into());
        h.run().await;
        assert_eq!(h.fake.steps(), steps, "task exit {exit}");
    }
    let mut h = Harness::new(vec![Script::exit(0)], vec![]);
    h.spec.kind = JobKind::Task;
    h.run().await;
    assert_eq!(h.fake.steps(), vec![P, Run(Agent)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_announced_names_the_jobs_kill_grace() {
    let mut h = Harness::new(vec![Script::report(cont()), Script::report(cont())], vec![]);
    h.spec.kill_grace = HumanDuration(Duration::from_millis(1500));
    h.spec.max_rounds = 2;
    h.run().await;
    assert_eq!(h.fake.steps(), vec![P, Run(Agent), P, Run(Agent)]);
    assert_eq!(
        h.fake.prepared_graces(),
        vec![Duration::from_millis(1500); 2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_announced_that_never_comes_is_discarded_when_the_job_ends() {
    // A failed attempt with a retry left: the retry is announced, then a cancel during the
    // backoff ends the job before it.
    let mut h = Harness::new(vec![Script::exit(3), Script::report(complete())], vec![]);
    h.spec.round_retries = 1;
    h.spec.retry_backoff = HumanDuration(Duration::from_secs(60));
    let cancel = crate::engine::Cancel::new();
    let (_, r) = h
        .run_with(
            cancel.clone(),
            vec![std::sync::Arc::new(CancelAfterAttempt(cancel))],
        )
        .await;
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(h.fake.steps(), vec![P, Run(Agent), P, D]);
}
