//! The loop's orderings (SPEC §3), driven through the sandbox seam ([`ralph_sandbox::Sandbox`])
//! by the scripted fake ([`FakeRounds`]) against a real SQLite journal: retries, the budget before every
//! attempt, the job deadline during an attempt and a backoff, cancel during a backoff, verify
//! only after a complete report, max_rounds, and the outcome invariant checked before the
//! outcome is journalled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::fake_sandbox::{CallKind, FakeRounds, RoundScript, Script, stub_programs};
use super::{Cancel, Engine, RunnerEnv, Sandboxes};
use crate::job::{AgentSpec, FinishReason, JobResult, JobSpec, Outcome};
use crate::store::{Event, EventKind, JobView, Observer, RunnerInfo, Store};
use crate::util::units::HumanDuration;

/// A job of this long would only end in time through the path under test.
const LONG: Duration = Duration::from_secs(600);
/// What "at once" means on a busy machine (far below [`LONG`]).
const PROMPTLY: Duration = Duration::from_secs(60);

pub(super) struct Harness {
    _dir: tempfile::TempDir,
    pub(super) engine: Engine,
    pub(super) fake: FakeRounds,
    pub(super) spec: JobSpec,
    /// The fake world's programs (first on the runner's `PATH`).
    bin: std::path::PathBuf,
}

pub(super) fn cont() -> serde_json::Value {
    json!({"status":"continue","summary":"did a thing","evidence":[],"nextSteps":["more"],"blocker":""})
}

pub(super) fn complete() -> serde_json::Value {
    json!({"status":"complete","summary":"done","evidence":["tests pass"],"nextSteps":[],"blocker":""})
}

impl Harness {
    pub(super) fn new(agent: Vec<Script>, verify: Vec<Script>) -> Self {
        Self::with(agent, verify, Vec::new(), Vec::new())
    }

    /// A harness whose set-up runs play `setup` and whose runner environment also has `env`.
    pub(super) fn with(
        agent: Vec<Script>,
        verify: Vec<Script>,
        setup: Vec<Script>,
        env: Vec<(String, String)>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let state = dir.path().join("state");
        let bin = dir.path().join("bin");
        for d in [&ws, &state, &bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        let ws = ws.canonicalize().unwrap();
        let state = state.canonicalize().unwrap();
        let bin = bin.canonicalize().unwrap();
        let store = Arc::new(Store::open_sqlite(&state).unwrap());
        let fake = FakeRounds::new(agent, verify, setup);
        let path = format!("{}:/usr/bin:/bin", bin.display());
        let env = RunnerEnv::from_pairs(std::iter::once(("PATH".to_owned(), path)).chain(env));
        let sandboxes = Sandboxes::new(
            "/proc/self/exe",
            ralph_sandbox::policy::PolicySet::lazy(None),
        );
        let engine = Engine::new(store, sandboxes, state, RunnerInfo::current("test"), env)
            .with_sandbox(fake.sandbox());
        stub_programs(&bin, ["agent"]);
        let mut spec = JobSpec::new(
            "objective",
            ws,
            AgentSpec::Command {
                command: "agent".into(),
            },
        );
        spec.retry_backoff = HumanDuration(Duration::ZERO);
        Self {
            _dir: dir,
            engine,
            fake,
            spec,
            bin,
        }
    }

    /// Stubs the programs the spec's commands start with (the fake world has every program).
    fn stub_programs(&self) {
        let s = &self.spec;
        let agent = match &s.agent {
            AgentSpec::Command { command } => Some(command.as_str()),
            AgentSpec::Preset { .. } => None,
        };
        let setup = s.setup.as_ref().map(|x| x.command.as_str());
        stub_programs(
            &self.bin,
            [agent, setup, s.verify.as_deref()].into_iter().flatten(),
        );
    }

    pub(super) async fn run_with(
        &self,
        cancel: Cancel,
        observers: Vec<Arc<dyn Observer>>,
    ) -> (String, JobResult) {
        self.stub_programs();
        let id = self.engine.submit_started(&self.spec).unwrap();
        (id.clone(), self.resume_run(&id, cancel, observers).await)
    }

    pub(super) async fn resume_run(
        &self,
        id: &str,
        cancel: Cancel,
        observers: Vec<Arc<dyn Observer>>,
    ) -> JobResult {
        self.stub_programs();
        let lock = self.engine.lock_workspace(&self.spec.workspace).unwrap();
        self.engine.run(id, lock, cancel, observers).await.unwrap()
    }

    pub(super) async fn run(&self) -> (String, JobResult) {
        self.run_with(Cancel::new(), Vec::new()).await
    }

    pub(super) fn events(&self, id: &str) -> Vec<Event> {
        self.engine.store().events(id).unwrap()
    }

    pub(super) fn count(&self, id: &str, name: &str) -> usize {
        self.events(id)
            .iter()
            .filter(|e| e.kind.name() == name)
            .count()
    }
}

/// Cancels the job as soon as an attempt has finished (so during the backoff that follows).
pub(super) struct CancelAfterAttempt(pub(super) Cancel);

impl Observer for CancelAfterAttempt {
    fn on_event(&self, _view: &JobView, event: &Event) {
        if matches!(event.kind, EventKind::RoundFinished { .. }) {
            self.0.cancel("test");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_counted_and_bounded_by_round_retries() {
    let mut h = Harness::new(
        vec![
            Script::exit(3),
            Script::exit(3),
            Script::exit(3),
            Script::report(cont()),
        ],
        vec![],
    );
    h.spec.round_retries = 2;
    let (id, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::RoundFailed);
    assert_eq!(r.retries, 2);
    assert_eq!(r.rounds, 1);
    let calls = h.fake.calls();
    assert_eq!(calls.len(), 3, "1 attempt + 2 retries, never a 4th");
    let attempts: Vec<_> = calls.iter().map(|c| (c.round, c.attempt)).collect();
    assert_eq!(
        attempts,
        vec![(Some(1), Some(1)), (Some(1), Some(2)), (Some(1), Some(3))]
    );
    assert_eq!(h.count(&id, "round_retried"), 2);
    assert!(r.message.contains("after 3 attempt(s)"), "{}", r.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_recovers_continues_the_loop() {
    let mut h = Harness::new(vec![Script::exit(3), Script::report(complete())], vec![]);
    h.spec.round_retries = 1;
    let (id, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::Complete);
    assert_eq!((r.rounds, r.retries), (1, 1));
    assert_eq!(h.count(&id, "round_retried"), 1);
    // The retry's prompt says why the first attempt failed.
    let calls = h.fake.calls();
    assert!(calls[1].stdin.contains("no_report"), "{}", calls[1].stdin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_is_checked_before_every_attempt_retries_included() {
    let mut h = Harness::new(vec![Script::exit(3).spending(600); 4], vec![]);
    h.spec.round_retries = 3;
    h.spec.max_tokens = Some(500);
    // A spent budget is known without waiting out the backoff.
    h.spec.retry_backoff = HumanDuration(LONG);
    let t0 = Instant::now();
    let (id, r) = h.run().await;
    assert!(t0.elapsed() < PROMPTLY, "{:?}", t0.elapsed());
    assert_eq!(r.outcome, Outcome::BudgetLimited);
    assert_eq!(r.reason, FinishReason::MaxTokens);
    assert_eq!(h.fake.calls().len(), 1, "no retry once the budget is spent");
    assert_eq!(r.retries, 0);
    assert_eq!(
        h.count(&id, "round_retried"),
        0,
        "no retry journalled that never started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_is_checked_before_the_next_round() {
    let mut h = Harness::new(vec![Script::report(cont()).spending(600); 3], vec![]);
    h.spec.max_tokens = Some(500);
    let (_, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::BudgetLimited, FinishReason::MaxTokens)
    );
    assert_eq!(h.fake.calls().len(), 1);
    assert_eq!(r.rounds, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_deadline_stops_an_attempt() {
    let mut h = Harness::new(vec![Script::report(cont()).taking(LONG)], vec![]);
    // Long enough that round 1 starts even on a busy machine.
    h.spec.job_timeout = Some(HumanDuration(Duration::from_secs(3)));
    let t0 = Instant::now();
    let (id, r) = h.run().await;
    assert!(t0.elapsed() < PROMPTLY, "{:?}", t0.elapsed());
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::BudgetLimited, FinishReason::JobTimeout)
    );
    let calls = h.fake.calls();
    assert_eq!(calls.len(), 1);
    let timeout = calls[0].timeout.unwrap();
    assert!(
        timeout <= Duration::from_secs(3),
        "the attempt was bounded by the deadline: {timeout:?}"
    );
    assert_eq!(h.count(&id, "round_retried"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_deadline_during_a_backoff_ends_the_job_without_a_retry() {
    let mut h = Harness::new(vec![Script::exit(3), Script::report(complete())], vec![]);
    h.spec.round_retries = 1;
    h.spec.retry_backoff = HumanDuration(LONG);
    h.spec.job_timeout = Some(HumanDuration(Duration::from_secs(3)));
    let t0 = Instant::now();
    let (id, r) = h.run().await;
    assert!(
        t0.elapsed() < PROMPTLY,
        "the backoff was cut by the deadline: {:?}",
        t0.elapsed()
    );
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::BudgetLimited, FinishReason::JobTimeout)
    );
    assert_eq!(h.fake.calls().len(), 1);
    assert_eq!(r.retries, 0);
    assert_eq!(h.count(&id, "round_retried"), 0, "the retry never started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_backoff_journals_no_retry() {
    let mut h = Harness::new(vec![Script::exit(3), Script::report(complete())], vec![]);
    h.spec.round_retries = 1;
    h.spec.retry_backoff = HumanDuration(LONG);
    let cancel = Cancel::new();
    let t0 = Instant::now();
    let (id, r) = h
        .run_with(cancel.clone(), vec![Arc::new(CancelAfterAttempt(cancel))])
        .await;
    assert!(t0.elapsed() < PROMPTLY, "{:?}", t0.elapsed());
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Cancelled, FinishReason::CancelRequested)
    );
    assert_eq!(h.fake.calls().len(), 1);
    assert_eq!(r.retries, 0);
    assert_eq!(h.count(&id, "round_retried"), 0, "the retry never started");
}

/// Cancels the job as soon as a round was spawned (so while its sandbox is being set up).
struct CancelAtSpawn(Cancel);

impl Observer for CancelAtSpawn {
    fn on_event(&self, _view: &JobView, event: &Event) {
        if matches!(event.kind, EventKind::RoundSpawned { .. }) {
            self.0.cancel("test");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_tears_down_the_sandbox_set_up_ends_the_job_cancelled() {
    let h = Harness::new(
        vec![Script::exit(0).taking(LONG).failing_on_cancel()],
        vec![],
    );
    let cancel = Cancel::new();
    let (id, r) = h
        .run_with(cancel.clone(), vec![Arc::new(CancelAtSpawn(cancel))])
        .await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Cancelled, FinishReason::CancelRequested),
        "{r:?}"
    );
    assert_eq!(h.count(&id, "cancel_requested"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_runs_only_after_a_complete_report() {
    let mut h = Harness::new(
        vec![
            Script::report(cont()),
            Script::exit(3),
            Script::report(complete()),
        ],
        vec![Script::exit(0)],
    );
    h.spec.round_retries = 1;
    h.spec.verify = Some("check".into());
    let (_, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Complete, FinishReason::Verified)
    );
    assert_eq!(
        h.fake.kinds(),
        vec![
            CallKind::Agent,
            CallKind::Agent,
            CallKind::Agent,
            CallKind::Verify
        ]
    );
    assert_eq!(r.verified, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_verify_continues_with_the_note() {
    let mut h = Harness::new(
        vec![Script::report(complete()), Script::report(complete())],
        vec![Script::exit(1), Script::exit(0)],
    );
    h.spec.verify = Some("check --all".into());
    let (_, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Complete, FinishReason::Verified)
    );
    assert_eq!(r.rounds, 2);
    let calls = h.fake.calls();
    let kinds: Vec<_> = calls.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        vec![
            CallKind::Agent,
            CallKind::Verify,
            CallKind::Agent,
            CallKind::Verify
        ]
    );
    assert!(!calls[0].stdin.contains("check --all` failed"));
    assert!(
        calls[2].stdin.contains("check --all") && calls[2].stdin.contains("exit"),
        "round 2's prompt carries the verify note: {}",
        calls[2].stdin
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verify_that_cannot_run_ends_the_job_as_a_configuration_error() {
    for code in [126, 127] {
        let mut h = Harness::new(
            vec![Script::report(complete()), Script::report(complete())],
            vec![Script::exit(code), Script::exit(0)],
        );
        h.spec.verify = Some("no-such-check".into());
        let (_, r) = h.run().await;
        assert_eq!(
            (r.outcome, r.reason),
            (Outcome::Error, FinishReason::Configuration)
        );
        assert_eq!(r.rounds, 1, "no round spent after it");
        assert_eq!(h.fake.kinds(), vec![CallKind::Agent, CallKind::Verify]);
        assert!(r.message.contains(&format!("exit {code}")), "{}", r.message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rounds_ends_budget_limited_with_exactly_max_rounds_started() {
    let mut h = Harness::new(vec![Script::report(cont()); 5], vec![]);
    h.spec.max_rounds = 3;
    let (_, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::BudgetLimited, FinishReason::MaxRounds)
    );
    assert_eq!(r.rounds, 3);
    assert_eq!(h.fake.calls().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_report_written_before_the_round_timeout_counts() {
    let mut h = Harness::new(vec![Script::report(complete()).taking(LONG)], vec![]);
    h.spec.round_timeout = Some(HumanDuration(Duration::from_millis(300)));
    let (id, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Complete, FinishReason::Reported)
    );
    let events = h.events(&id);
    let ended_by = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::RoundFinished { ended_by, .. } => Some(*ended_by),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        ended_by,
        Some(ralph_sandbox::outcome::EndedBy::Timeout),
        "the journal still says the timeout stopped it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_timeout_without_a_report_fails_the_attempt() {
    let mut h = Harness::new(vec![Script::exit(0).taking(LONG)], vec![]);
    h.spec.round_timeout = Some(HumanDuration(Duration::from_millis(300)));
    h.spec.round_retries = 0;
    let (_, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::RoundFailed);
    assert!(r.message.contains("timeout"), "{}", r.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_command_the_shell_cannot_run_is_a_configuration_error() {
    for code in [126, 127] {
        let mut h = Harness::new(vec![Script::exit(code); 3], vec![]);
        h.spec.round_retries = 2;
        h.spec.max_rounds = 5;
        let (id, r) = h.run().await;
        assert_eq!(
            (r.outcome, r.reason),
            (Outcome::Error, FinishReason::Configuration)
        );
        assert_eq!(h.fake.calls().len(), 1, "no retry, no further round");
        assert!(
            r.message.contains(&format!("exit {code}")) && r.message.contains("`agent`"),
            "{}",
            r.message
        );
        let failed = h.events(&id).into_iter().find_map(|e| match e.kind {
            EventKind::RoundFinished { result, .. } => Some(result),
            _ => None,
        });
        assert!(
            matches!(
                failed,
                Some(crate::store::AttemptResult::Failed {
                    reason: crate::job::RoundFailure::ExecFailed,
                    ..
                })
            ),
            "{failed:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_job_that_fails_again_after_a_round_one_failure_is_round_failed() {
    let mut h = Harness::new(vec![Script::exit(3), Script::exit(3)], vec![]);
    h.spec.round_retries = 0;
    let (id, first) = h.run().await;
    assert_eq!(first.outcome, Outcome::RoundFailed);
    assert!(first.report.is_none());
    h.engine.resume(&id).unwrap();
    let again = h.resume_run(&id, Cancel::new(), Vec::new()).await;
    assert_eq!(
        (again.outcome, again.reason),
        (Outcome::RoundFailed, FinishReason::RoundFailed)
    );
    assert_eq!(again.rounds, 2);
    assert!(again.report.is_none(), "no round ever reported");
    let finished = h.count(&id, "job_finished");
    assert_eq!(finished, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_breaks_an_invariant_is_never_journalled_as_the_outcome() {
    let h = Harness::new(vec![], vec![]);
    let id = h.engine.submit_started(&h.spec).unwrap();
    let journal = crate::store::Journal::open(h.engine.store().clone(), &id, Vec::new()).unwrap();
    let agent = crate::agent::Agent::Command("agent".into());
    let mut run = super::job_run::JobRun::new(&h.engine, journal, agent, Cancel::new());
    // A loop job "complete" with no report at all.
    run.finish(Outcome::Complete, FinishReason::Reported, "done", None)
        .unwrap();
    let finish = h
        .events(&id)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::JobFinished {
                outcome,
                reason,
                message,
                ..
            } => Some((outcome, reason, message)),
            _ => None,
        })
        .unwrap();
    assert_eq!(finish.0, Outcome::Error);
    assert_eq!(finish.1, FinishReason::InternalError);
    assert!(
        finish.2.contains("complete without a complete report"),
        "the broken invariant is named: {}",
        finish.2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undrained_capture_is_marked_and_named_in_the_failure() {
    let mut h = Harness::new(vec![Script::exit(1).undrained()], vec![]);
    h.spec.round_retries = 0;
    let (id, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::RoundFailed);
    assert!(
        r.message
            .contains("stdout reader did not finish within 5 s"),
        "{}",
        r.message
    );
    let log = super::artifacts::AttemptDirs::new(&h.engine.job_dir(&id), 1, 1).stdout_log();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.ends_with(ralph_sandbox::capture::UNDRAINED_MARKER),
        "{text:?}"
    );
}

/// Makes every later append fail (a store outage) once a round has been spawned.
struct OutageAfterSpawn(std::path::PathBuf);

impl Observer for OutageAfterSpawn {
    fn on_event(&self, _view: &crate::store::JobView, event: &Event) {
        if event.kind.name() == "round_spawned" {
            let db =
                rusqlite::Connection::open(self.0.join(crate::store::sqlite::DB_FILE)).unwrap();
            db.execute_batch(
                "CREATE TRIGGER outage BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'outage'); END;",
            )
            .unwrap();
        }
    }
}

#[tokio::test]
async fn a_store_outage_mid_round_leaves_no_private_scratch() {
    let h = Harness::new(vec![Script::report(cont())], vec![]);
    let id = h.engine.submit_started(&h.spec).unwrap();
    let state = h.engine.state_dir().to_path_buf();
    let lock = h.engine.lock_workspace(&h.spec.workspace).unwrap();
    let observers: Vec<Arc<dyn Observer>> = vec![Arc::new(OutageAfterSpawn(state.clone()))];
    let ended = h.engine.run(&id, lock, Cancel::new(), observers).await;
    assert!(ended.is_err(), "the outage did not reach the loop");
    let dirs = super::AttemptDirs::new(&super::job_dir(&state, &id), 1, 1);
    assert!(dirs.root.exists(), "the attempt never started");
    assert!(!dirs.home.exists(), "HOME survived the store error");
    assert!(!dirs.tmp.exists(), "TMPDIR survived the store error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_fills_its_report_dir_fails_with_report_dir_full_whatever_it_reported() {
    let h = Harness::new(
        vec![
            Script::report(complete()).filling_report_dir(),
            Script::report(complete()),
        ],
        vec![],
    );
    let (id, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::Complete, "{r:?}");
    assert_eq!(r.retries, 1, "the full round is a failed attempt, retried");
    let events = h.events(&id);
    let failed: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RoundFinished {
                result: crate::store::AttemptResult::Failed { reason, message },
                ..
            } => Some((*reason, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0].0, crate::job::RoundFailure::ReportDirFull);
    assert!(
        failed[0].1.contains("report directory") && failed[0].1.contains("REPORT_DIR_ENTRIES"),
        "{}",
        failed[0].1
    );
    assert!(
        events.iter().any(|e| matches!(
            e.kind,
            EventKind::RoundRetried {
                reason: crate::job::RoundFailure::ReportDirFull,
                ..
            }
        )),
        "{events:?}"
    );
}
