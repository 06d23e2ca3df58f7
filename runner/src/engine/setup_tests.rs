//! The set-up step and the runner steps' network (SPEC §3, §12), driven through the sandbox
//! seam ([`ralph_sandbox::Sandbox`]) by the scripted fake against a real SQLite journal: a failed
//! set-up ends the job `error`/`setup_failed` before any round; a set-up that passed is never
//! run again, one that never finished is; `--setup-env` reaches the set-up only; set-up and
//! verify get the rounds' egress proxy (never the model gateway) and git's runner-written
//! system configuration.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::fake_sandbox::{CallKind, RoundScript, Script};
use super::loop_tests::{Harness, complete};
use super::{Cancel, round_gateway::EGRESS_PORT};
use crate::job::{FinishReason, JobKind, Outcome, SetupSpec};
use crate::store::{EventKind, Journal};
use crate::util::units::HumanDuration;

const SECRET: &str = "s3cr3t-registry-token-7f1c";

fn with_setup(h: &mut Harness, command: &str) {
    h.spec.setup = Some(SetupSpec::new(command));
}

fn env_of(call: &super::fake_sandbox::Call, name: &str) -> Option<String> {
    call.env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_setup_ends_the_job_setup_failed_and_starts_no_round() {
    let mut h = Harness::with(
        vec![Script::report(complete())],
        vec![],
        vec![Script {
            stdout: "Collecting pkg\nERROR: No matching distribution found for pkg\n".into(),
            ..Script::exit(1)
        }],
        Vec::new(),
    );
    with_setup(&mut h, "pip install pkg");
    let (id, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Error, FinishReason::SetupFailed),
        "{r:?}"
    );
    assert_eq!(r.rounds, 0);
    assert!(
        r.message
            .contains("`pip install pkg` failed (exit status 1)"),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("No matching distribution"),
        "{}",
        r.message
    );
    assert!(r.message.contains("no round was started"), "{}", r.message);
    assert_eq!(
        h.fake.kinds(),
        vec![CallKind::Setup],
        "nothing ran after it"
    );
    assert_eq!(h.count(&id, "round_started"), 0);
    let finished: Vec<_> = h
        .events(&id)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::SetupFinished {
                passed,
                exit,
                output_tail,
                ..
            } => Some((passed, exit, output_tail)),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 1);
    assert!(!finished[0].0);
    assert_eq!(
        finished[0].1,
        Some(ralph_sandbox::Termination::Exited { code: 1 })
    );
    assert!(finished[0].2.contains("No matching distribution"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_the_shell_cannot_run_is_a_configuration_error() {
    let mut h = Harness::with(vec![], vec![], vec![Script::exit(127)], Vec::new());
    with_setup(&mut h, "no-such-installer --all");
    let (_, r) = h.run().await;
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Error, FinishReason::Configuration)
    );
    assert!(
        r.message.starts_with(
            "the set-up command `no-such-installer --all` cannot run in the sandbox (exit 127"
        ),
        "{}",
        r.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_over_its_timeout_fails_the_job_saying_so() {
    let mut h = Harness::with(
        vec![],
        vec![],
        vec![Script::exit(0).taking(Duration::from_secs(600))],
        Vec::new(),
    );
    let mut setup = SetupSpec::new("npm ci");
    setup.timeout = HumanDuration(Duration::from_millis(200));
    h.spec.setup = Some(setup);
    let (_, r) = h.run().await;
    assert_eq!(r.reason, FinishReason::SetupFailed, "{r:?}");
    assert!(
        r.message.contains("timed out after its --setup-timeout of"),
        "{}",
        r.message
    );
    assert_eq!(h.fake.calls()[0].timeout, Some(Duration::from_millis(200)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_the_setup_ends_the_job_cancelled_without_a_round() {
    let mut h = Harness::with(
        vec![Script::report(complete())],
        vec![],
        vec![Script::exit(0).taking(Duration::from_secs(600))],
        Vec::new(),
    );
    with_setup(&mut h, "cargo fetch");
    let cancel = Cancel::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.cancel("test");
    });
    let (id, r) = h.run_with(cancel, Vec::new()).await;
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(h.count(&id, "round_started"), 0);
    assert_eq!(h.count(&id, "cancel_requested"), 1);
}

/// Issue 26: a resumed job whose set-up passed does not run it again (judged from the
/// journal), while its rounds go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_that_passed_is_not_run_again_on_resume() {
    let mut h = Harness::with(
        vec![Script::exit(3), Script::report(complete())],
        vec![],
        vec![Script::exit(0), Script::exit(1)],
        Vec::new(),
    );
    with_setup(&mut h, "npm ci");
    h.spec.round_retries = 0;
    let (id, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::RoundFailed);
    h.engine.resume(&id).unwrap();
    let r = h.resume_run(&id, Cancel::new(), Vec::new()).await;
    assert_eq!(r.outcome, Outcome::Complete, "{r:?}");
    assert_eq!(
        h.fake.kinds(),
        vec![CallKind::Setup, CallKind::Agent, CallKind::Agent]
    );
    assert_eq!(h.count(&id, "setup_started"), 1);
    assert_eq!(h.count(&id, "setup_finished"), 1);
}

/// Issue 26: a job whose runner died during the set-up (no `setup_finished`) runs it again
/// when resumed, then its rounds; so does one whose set-up failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_that_never_finished_or_failed_runs_again_on_resume() {
    let mut h = Harness::with(
        vec![Script::report(complete())],
        vec![],
        vec![Script::exit(1), Script::exit(0)],
        Vec::new(),
    );
    with_setup(&mut h, "npm ci");
    // A job whose runner died during its set-up, as recovery closes it.
    let id = h.engine.submit_started(&h.spec).unwrap();
    let mut j = Journal::open(h.engine.store().clone(), &id, Vec::new()).unwrap();
    j.record(EventKind::SetupStarted {
        command: "npm ci".into(),
    })
    .unwrap();
    j.record(EventKind::Interrupted {
        message: "the runner died".into(),
    })
    .unwrap();
    j.record(EventKind::JobFinished {
        outcome: Outcome::Interrupted,
        reason: FinishReason::RunnerDied,
        message: "died".into(),
        exit_code: None,
        ran_ms: None,
    })
    .unwrap();
    drop(j);
    h.engine.resume(&id).unwrap();
    let r = h.resume_run(&id, Cancel::new(), Vec::new()).await;
    assert_eq!(r.reason, FinishReason::SetupFailed, "{r:?}");
    h.engine.resume(&id).unwrap();
    let r = h.resume_run(&id, Cancel::new(), Vec::new()).await;
    assert_eq!(r.outcome, Outcome::Complete, "{r:?}");
    assert_eq!(
        h.fake.kinds(),
        vec![CallKind::Setup, CallKind::Setup, CallKind::Agent]
    );
    assert_eq!(h.count(&id, "setup_started"), 3);
}

/// Issue 26: `--setup-env` values reach the set-up and nothing else: no round, no verify,
/// no journal event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_env_value_reaches_the_setup_only() {
    let mut h = Harness::with(
        vec![Script::report(complete())],
        vec![Script::exit(0)],
        vec![Script::exit(0)],
        vec![
            ("REGISTRY_TOKEN".to_owned(), SECRET.to_owned()),
            ("VISIBLE".to_owned(), "to-all".to_owned()),
        ],
    );
    let mut setup = SetupSpec::new("npm ci");
    setup.env = vec!["REGISTRY_TOKEN".into()];
    h.spec.setup = Some(setup);
    h.spec.env = vec!["VISIBLE".into()];
    h.spec.verify = Some("npm test".into());
    let (id, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::Complete, "{r:?}");
    let calls = h.fake.calls();
    assert_eq!(
        calls.iter().map(|c| c.kind).collect::<Vec<_>>(),
        vec![CallKind::Setup, CallKind::Agent, CallKind::Verify]
    );
    assert_eq!(env_of(&calls[0], "REGISTRY_TOKEN").as_deref(), Some(SECRET));
    for c in &calls {
        assert_eq!(
            env_of(c, "VISIBLE").as_deref(),
            Some("to-all"),
            "{:?}",
            c.kind
        );
        if c.kind != CallKind::Setup {
            assert!(
                c.env
                    .iter()
                    .all(|(k, v)| k != "REGISTRY_TOKEN" && !v.contains(SECRET)),
                "{:?}: {:?}",
                c.kind,
                c.env
            );
            assert!(!c.stdin.contains(SECRET));
        }
    }
    let journal = serde_json::to_string(&h.events(&id)).unwrap();
    assert!(!journal.contains(SECRET), "{journal}");
    assert!(
        journal.contains("REGISTRY_TOKEN"),
        "the name is in the spec"
    );
}

/// Issue 26 (a user's report: `npm ci` in verify failed with `EAI_AGAIN`): with
/// `--allow-host`, set-up and verify run in the private namespace with the egress proxy and
/// its variables, as the rounds do, and never the model gateway; with no host allowed they have
/// no network. Both get git's runner-written system configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_and_verify_get_the_rounds_egress_proxy_and_nothing_more() {
    let mut h = Harness::with(
        vec![Script::report(complete())],
        vec![Script::exit(0)],
        vec![Script::exit(0)],
        Vec::new(),
    );
    with_setup(&mut h, "npm ci");
    h.spec.verify = Some("npm test".into());
    h.spec.model_access.allow_hosts = vec!["127.0.0.1:3141".into()];
    let (_, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::Complete, "{r:?}");
    for c in h.fake.calls() {
        assert_eq!(
            c.network,
            Some(ralph_sandbox::Network::Gateway),
            "{:?}",
            c.kind
        );
        assert_eq!(c.gateway_ports, vec![EGRESS_PORT], "{:?}", c.kind);
        let proxy = env_of(&c, "HTTPS_PROXY").unwrap_or_default();
        assert_eq!(
            proxy,
            format!("http://127.0.0.2:{EGRESS_PORT}"),
            "{:?}",
            c.kind
        );
        assert_eq!(
            env_of(&c, "NO_PROXY").as_deref(),
            Some("127.0.0.2,localhost,::1")
        );
        assert!(env_of(&c, "RALPH_GATEWAY_URL").is_none(), "{:?}", c.kind);
        let git = env_of(&c, "GIT_CONFIG_SYSTEM").expect("git's system config");
        let text = std::fs::read_to_string(&git).unwrap();
        assert!(text.contains("[safe]\n\tdirectory = *\n"), "{text}");
    }

    // No host allowed, no model: set-up and verify have no network at all.
    let mut h = Harness::with(
        vec![Script::report(complete())],
        vec![Script::exit(0)],
        vec![Script::exit(0)],
        Vec::new(),
    );
    with_setup(&mut h, "make deps");
    h.spec.verify = Some("make test".into());
    let (_, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::Complete, "{r:?}");
    for c in h.fake.calls() {
        assert_eq!(
            c.network,
            Some(ralph_sandbox::Network::None),
            "{:?}",
            c.kind
        );
        assert!(c.gateway_ports.is_empty());
        assert!(env_of(&c, "HTTPS_PROXY").is_none());
    }
}

/// A task job's set-up runs before its one run, as a loop job's before round 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_jobs_setup_runs_before_its_command() {
    let mut h = Harness::with(
        vec![Script::exit(0)],
        vec![],
        vec![Script::exit(0)],
        Vec::new(),
    );
    h.spec.kind = JobKind::Task;
    with_setup(&mut h, "pip install -r requirements.txt -t deps");
    let (_, r) = h.run().await;
    assert_eq!(r.outcome, Outcome::Complete, "{r:?}");
    assert_eq!(h.fake.kinds(), vec![CallKind::Setup, CallKind::Agent]);
}

/// The job deadline bounds the set-up: one that runs past it ends the job budget-limited
/// (`job_timeout`), a task job failed; no round starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_deadline_stops_a_setup() {
    for kind in [JobKind::Loop, JobKind::Task] {
        let mut h = Harness::with(
            vec![Script::report(complete())],
            vec![],
            vec![Script::exit(0).taking(Duration::from_secs(600))],
            Vec::new(),
        );
        h.spec.kind = kind;
        with_setup(&mut h, "npm ci");
        h.spec.job_timeout = Some(HumanDuration(Duration::from_millis(300)));
        let (id, r) = h.run().await;
        let want = match kind {
            JobKind::Loop => Outcome::BudgetLimited,
            JobKind::Task => Outcome::Failed,
        };
        assert_eq!(
            (r.outcome, r.reason),
            (want, FinishReason::JobTimeout),
            "{r:?}"
        );
        assert!(
            r.message.contains("before its set-up could finish"),
            "{}",
            r.message
        );
        assert_eq!(h.count(&id, "round_started"), 0);
        assert!(h.fake.calls()[0].timeout.unwrap() <= Duration::from_millis(300));
    }
}
