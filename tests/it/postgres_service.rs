//! Several `ralph serve` runners sharing one queue in PostgreSQL (SPEC §8), end to end: two
//! servers (two state dirs, two ports, one database) take work from one batch, every round runs
//! exactly once (counted from the journal and from marker files the agent writes), a server
//! killed with SIGKILL and restarted closes only its own open rounds, a cancel through one server
//! stops a job running on the other, and recovery leaves other hosts' running jobs alone.
//!
//! The database comes from `RALPH_TEST_DATABASE_URL` (default: what `.ci/setup` creates); each
//! test makes its own database and drops it. Without PostgreSQL the tests say why and skip,
//! except under `CI`, where that is a failure.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::server::{Server, executions, job, started_attempts};
use common::test_db::TestDatabase;
use common::{complete_report, continue_report, processes_with};
use ralph_runner::job::{AgentSpec, JobSpec};
use ralph_runner::store::{EventKind, JobState, RunnerInfo, Store};
use serde_json::{Value, json};

const JOBS: usize = 40;
const MAX_ROUNDS: u64 = 4;
/// The agent reports completion from this round on (a job interrupted in it still has a round
/// left after `resume`).
const COMPLETE_AT: u64 = 3;

fn pid_of(s: &Server) -> u32 {
    s.child.as_ref().unwrap().id()
}

/// Ids of running jobs and the pid of the runner that claimed each.
fn running_by_pid(store: &Store) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for id in store.job_ids_in_state(JobState::Running).unwrap() {
        if let Ok(v) = store.load(&id) {
            if v.state == JobState::Running {
                if let Some(r) = v.runner {
                    out.insert(id, r.pid);
                }
            }
        }
    }
    out
}

/// Claims the next queued job for `runner`, the way a server takes work (without locking its
/// workspace).
fn claim_next(store: &Store, runner: &RunnerInfo) -> Option<String> {
    let job = store.next_queued(&[], &[]).unwrap()?;
    assert!(store.claim(&job.id, runner).unwrap(), "{job:?}");
    Some(job.id)
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn two_servers_share_one_queue_and_run_every_round_exactly_once() {
    let Some(db) = TestDatabase::create("two_servers") else {
        return;
    };
    let a = Server::with_database("max_concurrent_jobs = 2\n", &db.url);
    let mut b = Server::with_database("max_concurrent_jobs = 2\n", &db.url);
    // Each execution is logged first thing, then the round takes a while.
    let agent = a.agent(
        "shared-queue-agent.sh",
        &format!(
            r#"echo "$RALPH_ROUND $RALPH_ATTEMPT $$" >> "$RALPH_WORKSPACE/executions"
sleep 0.3
if [ "$RALPH_ROUND" -ge {COMPLETE_AT} ]; then
  echo '{}' > "$RALPH_REPORT_FILE"
else
  echo '{}' > "$RALPH_REPORT_FILE"
fi"#,
            complete_report("done"),
            continue_report("more")
        ),
    );
    let mut batch = Vec::new();
    let mut workspaces = Vec::new();
    for i in 0..JOBS {
        let ws = a.workspace(&format!("job{i}"));
        batch.push(job(
            &ws,
            &agent,
            json!({"max_rounds": MAX_ROUNDS, "round_retries": 0}),
        ));
        workspaces.push(ws);
    }
    let (code, created) = a.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": batch }).to_string()),
    );
    assert_eq!(code, 201, "{created}");
    let ids: Vec<String> = created["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), JOBS);

    // Once some jobs are done, both servers run jobs and one of B's has an open round: kill B.
    let store = Store::open_postgres(&db.url).unwrap();
    let (pid_a, pid_b) = (pid_of(&a), pid_of(&b));
    let mut snapshot = BTreeMap::new();
    wait_until("both servers run jobs", Duration::from_secs(120), || {
        // Let the two share the queue for a while first.
        if store.count_in_state(JobState::Finished).unwrap() < 8 {
            return false;
        }
        snapshot = running_by_pid(&store);
        let b_open = snapshot.iter().any(|(id, pid)| {
            *pid == pid_b
                && store
                    .load(id)
                    .is_ok_and(|v| v.open_attempt.is_some() && v.state == JobState::Running)
        });
        b_open && snapshot.values().any(|p| *p == pid_a)
    });
    b.kill9();
    let snapshot = running_by_pid(&store);
    let on_b: BTreeSet<String> = snapshot
        .iter()
        .filter(|(_, p)| **p == pid_b)
        .map(|(id, _)| id.clone())
        .collect();
    let on_a: BTreeSet<String> = snapshot
        .iter()
        .filter(|(_, p)| **p == pid_a)
        .map(|(id, _)| id.clone())
        .collect();
    assert!(!on_b.is_empty(), "B ran nothing when it was killed");
    assert!(
        snapshot.values().all(|p| *p == pid_a || *p == pid_b),
        "{snapshot:?}"
    );
    b.start();
    // B's recovery closed its own jobs as interrupted, with their open rounds.
    for id in &on_b {
        let view = store.load(id).unwrap();
        assert_eq!(
            view.outcome().map(|o| o.as_str()),
            Some("interrupted"),
            "{id}: {view:?}"
        );
        assert!(view.open_attempt.is_none());
        let events = store.events(id).unwrap();
        assert!(
            events
                .iter()
                .any(|e| matches!(e.kind, EventKind::Interrupted { .. }))
        );
    }
    // A's running jobs were not touched by B's recovery.
    for id in &on_a {
        let events = store.events(id).unwrap();
        assert!(
            !events
                .iter()
                .any(|e| matches!(e.kind, EventKind::Interrupted { .. })),
            "B's recovery interrupted A's job {id}"
        );
    }

    // Resume what was interrupted (through either server) until every job completes.
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut resumed = 0;
    loop {
        let mut pending = 0;
        for (i, id) in ids.iter().enumerate() {
            let server = if i % 2 == 0 { &a } else { &b };
            let (_, j) = server.api("GET", &format!("/v1/jobs/{id}"), None);
            match (j["state"].as_str(), j["outcome"].as_str()) {
                (Some("finished"), Some("complete")) => {}
                (Some("finished"), Some("interrupted")) => {
                    let (code, body) = server.api("POST", &format!("/v1/jobs/{id}/resume"), None);
                    assert_eq!(code, 202, "{body}");
                    resumed += 1;
                    pending += 1;
                }
                (Some("finished"), other) => panic!("job {id} ended {other:?}: {j}"),
                _ => pending += 1,
            }
        }
        if pending == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs did not finish\nA:\n{}\nB:\n{}",
            a.log_text(),
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        resumed,
        on_b.len(),
        "exactly B's interrupted jobs were resumed"
    );

    // Count every execution against the journal.
    let (mut lost, mut duplicated, mut unjournalled_starts) = (0usize, 0usize, 0usize);
    let mut by_runner: BTreeMap<u32, usize> = BTreeMap::new();
    let mut edges: BTreeMap<u32, Vec<(String, i32)>> = BTreeMap::new();
    for (id, ws) in ids.iter().zip(&workspaces) {
        let runs = executions(ws);
        let events: Vec<Value> = a.events(id);
        let started = started_attempts(&events);
        let reported: BTreeSet<(u64, u64)> = events
            .iter()
            .filter(|e| e["type"] == "round_finished" && e["result"]["kind"] == "reported")
            .map(|e| (e["round"].as_u64().unwrap(), e["attempt"].as_u64().unwrap()))
            .collect();
        for (key, n) in &runs {
            if *n > 1 {
                duplicated += n - 1;
                println!("job {id}: round {key:?} ran {n} times");
            }
            if !started.contains(key) {
                lost += 1;
                println!("job {id}: round {key:?} ran without a journal record");
            }
        }
        // Every round that reported did run, exactly once.
        for key in &reported {
            assert_eq!(runs.get(key), Some(&1), "{id}: round {key:?}");
        }
        let starts: Vec<(String, u32)> = events
            .iter()
            .filter(|e| e["type"] == "job_started")
            .map(|e| {
                (
                    e["at"].as_str().unwrap().to_owned(),
                    u32::try_from(e["runner"]["pid"].as_u64().unwrap()).unwrap(),
                )
            })
            .collect();
        let resumes = events.iter().filter(|e| e["type"] == "resumed").count();
        if starts.len() != 1 + resumes {
            unjournalled_starts += 1;
        }
        let finishes: Vec<String> = events
            .iter()
            .filter(|e| e["type"] == "job_finished")
            .map(|e| e["at"].as_str().unwrap().to_owned())
            .collect();
        for ((at, pid), end) in starts.iter().zip(&finishes) {
            *by_runner.entry(*pid).or_default() += 1;
            let e = edges.entry(*pid).or_default();
            e.push((at.clone(), 1));
            e.push((end.clone(), -1));
        }
        let view = store.load(id).unwrap();
        assert_eq!(view.outcome().map(|o| o.as_str()), Some("complete"), "{id}");
        let rounds: BTreeSet<u64> = runs.keys().map(|(r, _)| *r).collect();
        assert!(rounds.len() as u64 <= MAX_ROUNDS, "{id}: {rounds:?}");
        // The job ran up to the round that completes it. A round may be missing from the
        // execution log only when B died between journalling its start and the agent's first
        // line: then the journal shows it started and never reported, and the resumed job
        // goes on with the next round.
        let last = *rounds.last().unwrap();
        assert!(last >= COMPLETE_AT, "{id}: {rounds:?}");
        for r in 1..=last {
            if rounds.contains(&r) {
                continue;
            }
            assert!(
                started.iter().any(|(sr, _)| *sr == r) && !reported.iter().any(|(rr, _)| *rr == r),
                "{id}: round {r} never ran and was not an interrupted start: {rounds:?} {events:?}"
            );
        }
    }
    // No runner ever ran more than its 2 jobs at once.
    for (pid, mut e) in edges {
        e.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.cmp(&y.1)));
        let (mut now, mut max) = (0, 0);
        for (_, d) in e {
            now += d;
            max = max.max(now);
        }
        assert!(max <= 2, "runner {pid} ran {max} jobs at once");
    }
    let pid_b_new = pid_of(&b);
    println!(
        "jobs: {JOBS}; runs started by A (pid {pid_a}): {}, by B before the kill (pid {pid_b}): {}, by B after restart (pid {pid_b_new}): {}; interrupted by the kill and resumed: {resumed}; lost: {lost}, duplicated: {duplicated}",
        by_runner.get(&pid_a).copied().unwrap_or(0),
        by_runner.get(&pid_b).copied().unwrap_or(0),
        by_runner.get(&pid_b_new).copied().unwrap_or(0),
    );
    assert!(
        by_runner.get(&pid_a).is_some_and(|n| *n > 0)
            && by_runner.get(&pid_b).is_some_and(|n| *n > 0),
        "both servers must take work: {by_runner:?}"
    );
    assert_eq!(
        by_runner.values().sum::<usize>(),
        JOBS + resumed,
        "every run of a job has one job_started: {by_runner:?}"
    );
    assert_eq!(unjournalled_starts, 0);
    assert_eq!((lost, duplicated), (0, 0));
}

#[test]
fn a_cancel_through_one_server_stops_a_job_running_on_the_other() {
    let Some(db) = TestDatabase::create("remote_cancel") else {
        return;
    };
    let a = Server::with_database("max_concurrent_jobs = 1\n", &db.url);
    let b = Server::with_database("max_concurrent_jobs = 1\n", &db.url);
    let ws = a.workspace("ws");
    let agent = a.agent(
        "remote-hang.sh",
        "touch \"$RALPH_WORKSPACE/started\"\nexec sleep 301.25",
    );
    let (code, created) = a.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &agent, json!({}))] }).to_string()),
    );
    assert_eq!(code, 201, "{created}");
    let id = created["jobs"][0]["id"].as_str().unwrap().to_owned();
    common::wait_for_file(&ws.join("started"), Duration::from_secs(30));
    let view = Store::open_postgres(&db.url).unwrap().load(&id).unwrap();
    let runner_pid = view.runner.unwrap().pid;
    let (_runner, other) = if runner_pid == pid_of(&a) {
        (&a, &b)
    } else {
        assert_eq!(runner_pid, pid_of(&b));
        (&b, &a)
    };
    // `ralph wait` through the other server follows the job's journal from the shared store.
    let waiter = {
        let (url, token, id) = (other.url(), other.token(), id.clone());
        std::thread::spawn(move || {
            std::process::Command::new(common::ralph_bin())
                .args(["wait", &id])
                .env("RALPH_SERVER", url)
                .env("RALPH_TOKEN", token)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let (code, body) = other.api("POST", &format!("/v1/jobs/{id}/cancel"), None);
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["cancel"], "requested", "{body}");
    let asked = Instant::now();
    let j = other.wait_finished(&id, Duration::from_secs(30));
    assert_eq!(j["outcome"], "cancelled", "{j}");
    println!("cancelled on the other server after {:?}", asked.elapsed());
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the runner took {:?} to notice",
        asked.elapsed()
    );
    let waited = waiter.join().unwrap();
    assert_eq!(
        waited.status.code(),
        Some(130),
        "ralph wait: {}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let events = other.events(&id);
    let cancels: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "cancel_requested")
        .collect();
    assert_eq!(cancels.len(), 1, "{events:?}");
    assert_eq!(cancels[0]["by"], "token:admin");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "round_finished" && e["result"]["kind"] == "cancelled"),
        "{events:?}"
    );
    wait_until("no agent process is left", Duration::from_secs(10), || {
        processes_with("301.25").is_empty()
    });
    // Nothing left to cancel.
    let (code, body) = other.api("POST", &format!("/v1/jobs/{id}/cancel"), None);
    assert_eq!(code, 409, "{body}");
}

#[test]
fn recovery_leaves_running_jobs_of_other_hosts_alone() {
    let Some(db) = TestDatabase::create("recovery_hosts") else {
        return;
    };
    let store = Store::open_postgres(&db.url).unwrap();
    let spec = JobSpec::new(
        "objective",
        "/tmp",
        AgentSpec::Command {
            command: "true".into(),
        },
    );
    // One job claimed by a runner on another host, one by a dead runner on this host.
    let mut elsewhere = RunnerInfo::current("serve");
    elsewhere.host = format!("{}-elsewhere", elsewhere.host);
    let remote = store.submit(&spec).unwrap();
    assert_eq!(claim_next(&store, &elsewhere), Some(remote.clone()));
    let mut dead = RunnerInfo::current("serve");
    dead.pid = 0x3fff_fff0;
    dead.start_ticks = 1;
    let local = store.submit(&spec).unwrap();
    assert_eq!(claim_next(&store, &dead), Some(local.clone()));
    // A server starting on the shared store recovers.
    let s = Server::with_database("", &db.url);
    let remote_view = store.load(&remote).unwrap();
    assert_eq!(remote_view.state, JobState::Running);
    assert_eq!(remote_view.runner.as_ref(), Some(&elsewhere));
    assert_eq!(remote_view.seq, 2, "nothing was journalled for it");
    let local_view = store.load(&local).unwrap();
    assert_eq!(
        local_view.outcome().map(|o| o.as_str()),
        Some("interrupted")
    );
    assert!(
        s.log_text().contains("1 job(s) interrupted"),
        "{}",
        s.log_text()
    );
    // The server does not run the other host's job either; a cancel of it is journalled for
    // its runner to see.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(store.load(&remote).unwrap().seq, 2);
    let (code, body) = s.api("POST", &format!("/v1/jobs/{remote}/cancel"), None);
    assert_eq!(code, 202, "{body}");
    let view = store.load(&remote).unwrap();
    assert!(view.cancel_requested && view.state == JobState::Running);
}

#[test]
fn ralph_run_journals_into_the_shared_store_and_a_server_cancels_it() {
    let Some(db) = TestDatabase::create("ralph_run") else {
        return;
    };
    let s = Server::with_database("max_concurrent_jobs = 2\n", &db.url);
    let f = common::Fixture::new();
    // A job run in the foreground: journalled in PostgreSQL, never taken by the server.
    let agent = f.agent(
        "two-rounds.sh",
        &format!(
            "sleep 0.2\nif [ \"$RALPH_ROUND\" -ge 2 ]; then echo '{}' > \"$RALPH_REPORT_FILE\"; else echo '{}' > \"$RALPH_REPORT_FILE\"; fi",
            complete_report("done"),
            continue_report("more")
        ),
    );
    let out = f
        .run(&agent)
        .args(["--max-rounds", "3"])
        .env("RALPH_DATABASE_URL", &db.url)
        .output();
    out.expect_code(0);
    let result = out.json();
    let id = result["job_id"].as_str().unwrap().to_owned();
    assert!(
        std::path::Path::new(result["artifacts"].as_str().unwrap()).starts_with(&f.state),
        "{result}"
    );
    let events = s.events(&id);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "job_started")
        .collect();
    assert_eq!(starts.len(), 1, "{events:?}");
    assert_eq!(starts[0]["runner"]["role"], "run");
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_eq!(
        (j["outcome"].as_str(), j["rounds"].as_u64()),
        (Some("complete"), Some(2))
    );
    assert!(!std::path::Path::new(&f.state).join("ralph.db").exists());

    // A foreground job cancelled through the server's API.
    let hang = f.agent(
        "fg-hang.sh",
        "touch \"$RALPH_WORKSPACE/fg-started\"\nexec sleep 302.75",
    );
    let child = f.run(&hang).arg("--database-url").arg(&db.url).spawn();
    common::wait_for_file(&f.ws.join("fg-started"), Duration::from_secs(30));
    let store = Store::open_postgres(&db.url).unwrap();
    let running = store.job_ids_in_state(JobState::Running).unwrap();
    assert_eq!(running.len(), 1, "{running:?}");
    let (code, body) = s.api("POST", &format!("/v1/jobs/{}/cancel", running[0]), None);
    assert_eq!(code, 202, "{body}");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("no agent process is left", Duration::from_secs(10), || {
        processes_with("302.75").is_empty()
    });
    let view = store.load(&running[0]).unwrap();
    assert_eq!(view.outcome().map(|o| o.as_str()), Some("cancelled"));
}

#[test]
fn a_journal_changed_by_another_runner_is_never_failed_by_the_service() {
    let Some(db) = TestDatabase::create("foreign_change") else {
        return;
    };
    let s = Server::with_database("", &db.url);
    let ws = s.workspace("ws");
    let agent = s.agent(
        "slow-complete.sh",
        &format!(
            "touch \"$RALPH_WORKSPACE/started\"\nwhile [ ! -f \"$RALPH_WORKSPACE/go\" ]; do sleep 0.05; done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let (code, created) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &agent, json!({}))] }).to_string()),
    );
    assert_eq!(code, 201, "{created}");
    let id = created["jobs"][0]["id"].as_str().unwrap().to_owned();
    common::wait_for_file(&ws.join("started"), Duration::from_secs(30));
    // Another runner (say, a misconfigured host) journals something other than a cancel
    // request while the round runs.
    // The service may append (its round's own events) between the other runner's read and
    // its write: that is a conflict for the other runner, which reads again and retries.
    let store = std::sync::Arc::new(Store::open_postgres(&db.url).unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let seq = loop {
        let mut other = ralph_runner::store::Journal::open(store.clone(), &id, vec![]).unwrap();
        match other.record(EventKind::Interrupted {
            message: "written by another runner".into(),
        }) {
            Ok(_) => break other.view().seq,
            Err(ralph_runner::store::StoreError::Conflict { .. }) if Instant::now() < deadline => {}
            Err(e) => panic!("the other runner's write: {e}"),
        }
    };
    // Only now does the round end, and the service find the foreign event on its next write.
    std::fs::write(ws.join("go"), "").unwrap();
    wait_until(
        "the service gives the job up",
        Duration::from_secs(30),
        || s.log_text().contains("another runner changed its journal"),
    );
    std::thread::sleep(Duration::from_millis(500));
    // The service appended nothing after the foreign event: no `error` outcome of its own.
    let view = store.load(&id).unwrap();
    assert_eq!(view.seq, seq, "{:?}", store.events(&id).unwrap());
    assert_eq!(view.state, JobState::Running);
    assert!(
        !s.log_text().contains("failed to close it"),
        "{}",
        s.log_text()
    );
}

/// A host whose lease lapsed (its renewals failed through a store outage) claims nothing until
/// its lease is live again: a job it claimed under the lapsed lease would be closed at once by
/// another host's sweep, as the chaos test's database crashes showed.
#[test]
fn a_host_whose_lease_lapsed_claims_nothing_until_it_is_live_again() {
    let Some(db) = TestDatabase::create("claim_lapsed_lease") else {
        return;
    };
    let store = std::sync::Arc::new(Store::open_postgres(&db.url).unwrap());
    let runner = RunnerInfo::current("serve");
    // Renewed every 20 s: the test's own changes of it stand meanwhile.
    let _lease = store
        .start_lease(&runner, Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let spec = JobSpec::new(
        "objective",
        "/tmp",
        AgentSpec::Command {
            command: "true".into(),
        },
    );
    let id = store.submit(&spec).unwrap();
    let mut admin = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    admin
        .execute(
            "UPDATE runner_leases SET expires_at = now() - interval '1 second'",
            &[],
        )
        .unwrap();
    assert!(!store.claim(&id, &runner).unwrap());
    let view = store.load(&id).unwrap();
    assert_eq!((view.state, view.seq), (JobState::Queued, 1));
    admin
        .execute(
            "UPDATE runner_leases SET expires_at = now() + interval '60 seconds'",
            &[],
        )
        .unwrap();
    assert!(store.claim(&id, &runner).unwrap());
    assert_eq!(store.load(&id).unwrap().state, JobState::Running);
}
