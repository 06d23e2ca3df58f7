//! `ralph resume` of a `budget-limited` job with raised caps (SPEC §3), through the scripted fake
//! against a real journal: re-armed only with the cap it ran out of raised, each cap above what
//! the job used and within the ceiling; the `resumed` event records the caps, the projection
//! applies them, the next round's prompt says so, and the job runs on to its outcome.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::Cancel;
use super::fake_sandbox::{RoundScript, Script};
use super::loop_tests::{Harness, complete, cont};
use crate::job::{FinishReason, Outcome, RaisedCaps};
use crate::store::EventKind;

fn caps(rounds: Option<u32>, tokens: Option<u64>) -> RaisedCaps {
    RaisedCaps {
        max_rounds: rounds,
        max_tokens: tokens,
        job_timeout: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_out_of_rounds_runs_on_with_a_raised_round_budget() {
    let mut h = Harness::new(
        vec![
            Script::report(cont()),
            Script::report(cont()),
            Script::report(cont()),
            Script::report(complete()),
        ],
        Vec::new(),
    );
    h.spec.max_rounds = 2;
    let (id, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::BudgetLimited, FinishReason::MaxRounds)
    );
    // Without the cap it ran out of, or with one not above what it used: refused, named.
    let e = h.engine.resume(&id).unwrap_err().to_string();
    assert!(e.contains("--max-rounds above the 2 round(s)"), "{e}");
    let e = h
        .engine
        .resume_by(&id, None, &caps(Some(2), None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_rounds") && e.contains("not above"), "{e}");
    let e = h
        .engine
        .resume_by(&id, None, &caps(Some(10_000), None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ceiling"), "{e}");
    // Raised: it runs rounds 3 and 4 and completes.
    h.engine
        .resume_by(&id, Some("ops"), &caps(Some(4), None))
        .unwrap();
    let r = h.resume_run(&id, Cancel::new(), Vec::new()).await;
    assert_eq!(
        (r.outcome, r.reason, r.rounds, r.max_rounds),
        (Outcome::Complete, FinishReason::Reported, 4, 4),
        "{r:?}"
    );
    // The journal shows both budgets: the submitted one and the raised one.
    let events = h.events(&id);
    let submitted = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::JobSubmitted { spec } => Some(spec.max_rounds),
            _ => None,
        })
        .unwrap();
    assert_eq!(submitted, 2);
    let raised: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Resumed { caps, message, by } => {
                Some((caps.clone(), message.clone(), by.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(raised.len(), 1);
    assert_eq!(raised[0].0, caps(Some(4), None));
    assert!(
        raised[0].1.contains("raised caps (max_rounds 4)"),
        "{}",
        raised[0].1
    );
    assert_eq!(raised[0].2.as_deref(), Some("ops"));
    // The next round was told.
    let prompts = h.fake.calls();
    let third = prompts
        .iter()
        .find(|c| c.round == Some(3))
        .expect("round 3 ran");
    assert!(
        third
            .stdin
            .contains("resumed with its budget raised (max_rounds 4)"),
        "{}",
        third.stdin
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_out_of_tokens_runs_on_with_a_raised_token_budget() {
    let mut h = Harness::new(
        vec![
            Script::report(cont()).spending(150),
            Script::report(complete()).spending(10),
        ],
        Vec::new(),
    );
    h.spec.max_tokens = Some(100);
    let (id, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::BudgetLimited, FinishReason::MaxTokens),
        "{r:?}"
    );
    // Raising the rounds does not re-arm a job that ran out of tokens.
    let e = h
        .engine
        .resume_by(&id, None, &caps(Some(30), None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--max-tokens above the 150 token(s)"), "{e}");
    h.engine
        .resume_by(&id, None, &caps(None, Some(1000)))
        .unwrap();
    let r = h.resume_run(&id, Cancel::new(), Vec::new()).await;
    assert_eq!(r.outcome, Outcome::Complete, "{r:?}");
    assert_eq!(r.usage.budget_tokens(), 160);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_job_is_resumed_as_it_is_and_others_are_refused() {
    let mut h = Harness::new(vec![Script::report(cont()); 4], Vec::new());
    h.spec.max_stalled_rounds = 1;
    h.spec.max_rounds = 4;
    let (id, r) = h.run().await;
    assert_eq!(r.reason, FinishReason::Stalled, "{r:?}");
    h.engine.resume(&id).unwrap();
    let r = h.resume_run(&id, Cancel::new(), Vec::new()).await;
    assert_eq!((r.reason, r.rounds), (FinishReason::Stalled, 2), "{r:?}");
    // A completed job is never re-armed, caps or not.
    let mut h = Harness::new(vec![Script::report(complete())], Vec::new());
    h.spec.max_rounds = 2;
    let (id, _) = h.run().await;
    let e = h
        .engine
        .resume_by(&id, None, &caps(Some(5), None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ended complete"), "{e}");
}
