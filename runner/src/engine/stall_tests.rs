//! `--max-stalled-rounds` (SPEC §3) through the scripted fake against a real journal: a loop whose
//! rounds stop changing the workspace ends `budget-limited`/`stalled` after exactly K unchanged
//! rounds; one that changes something every round is never stopped; a complete report that
//! verify accepts still completes. (The runner's own placeholders are left out of the digest:
//! `change_watch`'s unit tests.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::fake_sandbox::{RoundScript, Script};
use super::loop_tests::{Harness, complete, cont};
use crate::job::{FinishReason, Outcome};

fn stalling(agent: Vec<Script>, verify: Vec<Script>, k: u32, max_rounds: u32) -> Harness {
    let mut h = Harness::new(agent, verify);
    h.spec.max_stalled_rounds = k;
    h.spec.max_rounds = max_rounds;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_that_stops_changing_files_ends_stalled_after_exactly_k_rounds() {
    // Rounds 1 and 2 change a file, rounds 3.. change nothing: with K = 3 the loop ends after
    // round 5, the third unchanged one.
    let agent = vec![
        Script::report(cont()).writing("notes.txt", "one\n"),
        Script::report(cont()).writing("notes.txt", "two\n"),
        Script::report(cont()),
        // The same bytes written again are no change.
        Script::report(cont()).writing("notes.txt", "two\n"),
        Script::report(cont()),
        Script::report(cont()),
    ];
    let h = stalling(agent, Vec::new(), 3, 10);
    let (id, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::BudgetLimited, FinishReason::Stalled),
        "{r:?}"
    );
    assert_eq!(r.rounds, 5);
    assert!(
        r.message.contains("the last 3 round(s) changed nothing")
            && r.message.contains("--max-stalled-rounds 3"),
        "{}",
        r.message
    );
    assert_eq!(h.count(&id, "round_started"), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_that_changes_a_file_every_round_is_never_stopped() {
    let agent = (1..=6)
        .map(|n| Script::report(cont()).writing("counter", &n.to_string()))
        .collect();
    let h = stalling(agent, Vec::new(), 1, 6);
    let (_, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::BudgetLimited, FinishReason::MaxRounds),
        "{r:?}"
    );
    assert_eq!(r.rounds, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_by_default_and_a_verified_completion_still_completes() {
    // K = 0: unchanged rounds run to the round budget.
    let h = stalling(vec![Script::report(cont()); 4], Vec::new(), 0, 4);
    let (_, r) = h.run().await;
    assert_eq!(r.reason, FinishReason::MaxRounds, "{r:?}");
    // An unchanged round whose complete report verify accepts completes (K = 1).
    let mut h = stalling(
        vec![Script::report(complete())],
        vec![Script::exit(0)],
        1,
        4,
    );
    h.spec.verify = Some("true".into());
    let (_, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Complete, FinishReason::Verified),
        "{r:?}"
    );
    // One whose verify fails is a stalled round like any other.
    let mut h = stalling(
        vec![Script::report(complete()); 3],
        vec![Script::exit(1); 3],
        2,
        5,
    );
    h.spec.verify = Some("false".into());
    let (_, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason, r.rounds),
        (Outcome::BudgetLimited, FinishReason::Stalled, 2),
        "{r:?}"
    );
}

#[test]
fn a_task_or_more_than_max_rounds_is_refused_naming_the_field() {
    let mut h = Harness::new(Vec::new(), Vec::new());
    h.spec.max_stalled_rounds = 21;
    let e = h.spec.validate(&Default::default()).unwrap_err();
    assert_eq!(e.field, "max_stalled_rounds");
    assert!(
        e.message.contains("more than max_rounds (20)"),
        "{}",
        e.message
    );
    h.spec.max_stalled_rounds = 2;
    h.spec.kind = crate::job::JobKind::Task;
    let e = h.spec.validate(&Default::default()).unwrap_err();
    assert_eq!(e.field, "max_stalled_rounds");
}
