//! Crash safety of `ralph serve` (SPEC §8): the server is SIGKILLed at random moments while rounds
//! run, then restarted. Every job must still be there, every open round closed as `interrupted`
//! (never re-run), no process of a killed round alive, and `ralph resume` must finish each job with
//! its remaining round budget. Agents log every execution in their workspace, so the test counts
//! rounds that ran without a journal record (lost) and rounds that ran twice (duplicated): both
//! must be zero.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::processes_with;
use common::server::{Server, executions, job, started_attempts};
use serde_json::{Value, json};

const KILLS: usize = 20;
const JOBS_PER_KILL: usize = 3;
const MAX_ROUNDS: u32 = 6;

/// xorshift64: random kill moments, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn wait_no_agents(limit: Duration) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let left: Vec<i32> = processes_with("crash-agent.sh")
            .into_iter()
            .chain(processes_with("0.0777"))
            .collect();
        if left.is_empty() || start.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn kill_9_at_random_moments_loses_and_duplicates_nothing() {
    let seed = std::env::var("RALPH_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("RALPH_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let mut s = Server::new("max_concurrent_jobs = 3\n");
    // Each execution is logged first thing (before any work), then the round takes a while.
    let agent = s.agent(
        "crash-agent.sh",
        r#"echo "$RALPH_ROUND $RALPH_ATTEMPT $$" >> "$RALPH_WORKSPACE/executions"
sleep 0.0777
if [ "$RALPH_ROUND" -ge 6 ]; then
  echo '{"status":"complete","summary":"six","evidence":["round 6"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE"
else
  echo '{"status":"continue","summary":"more","evidence":[],"nextSteps":["next"],"blocker":""}' > "$RALPH_REPORT_FILE"
fi"#,
    );
    let (mut lost, mut duplicated, mut survivors) = (0usize, 0usize, 0usize);
    let mut interrupted: BTreeSet<String> = BTreeSet::new();
    let mut completed_after_resume = 0usize;
    let mut all: Vec<(String, std::path::PathBuf)> = Vec::new();
    for kill in 0..KILLS {
        let mut batch = Vec::new();
        for j in 0..JOBS_PER_KILL {
            let ws = s.workspace(&format!("k{kill}-j{j}"));
            batch.push((
                ws.clone(),
                job(
                    &ws,
                    &agent,
                    json!({"max_rounds": MAX_ROUNDS, "round_retries": 0}),
                ),
            ));
        }
        let (code, created) = s.api(
            "POST",
            "/v1/jobs",
            Some(
                &json!({"job": batch.iter().map(|(_, j)| j.clone()).collect::<Vec<_>>()})
                    .to_string(),
            ),
        );
        assert_eq!(code, 201, "{created}");
        for (i, c) in created["jobs"].as_array().unwrap().iter().enumerate() {
            all.push((c["id"].as_str().unwrap().to_owned(), batch[i].0.clone()));
        }
        // Kill at a random moment: before, during or between rounds.
        std::thread::sleep(Duration::from_millis(rng.next() % 900));
        s.kill9();
        // The helpers see their runner die and stop their trees.
        let left = wait_no_agents(Duration::from_secs(30));
        survivors += left.len();
        s.start();
        // Recovery: nothing is running, no round is open.
        for (id, _) in &all {
            let events = s.events(id);
            let open: BTreeSet<(u64, u64)> = {
                let mut o = BTreeSet::new();
                for e in &events {
                    let key = (
                        e["round"].as_u64().unwrap_or(0),
                        e["attempt"].as_u64().unwrap_or(0),
                    );
                    match e["type"].as_str().unwrap() {
                        "round_started" => {
                            o.insert(key);
                        }
                        "round_finished" => {
                            o.remove(&key);
                        }
                        _ => {}
                    }
                }
                o
            };
            // The restarted server may already be running a job again (queued or resumed ones):
            // only a job that is finished must have no open round.
            let last = events.last().unwrap();
            if last["type"] == "job_finished" {
                assert!(
                    open.is_empty(),
                    "job {id} finished with open rounds {open:?}"
                );
            }
        }
        for (id, _) in &all {
            let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
            if j["outcome"] == "interrupted" {
                interrupted.insert(id.clone());
                let events = s.events(id);
                assert!(
                    events.iter().any(|e| e["type"] == "interrupted"),
                    "{id}: no interrupted event"
                );
            }
        }
    }
    // Finish everything: resume whatever was interrupted until every job completes.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut pending = 0;
        for (id, _) in &all {
            let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
            match (j["state"].as_str(), j["outcome"].as_str()) {
                (Some("finished"), Some("complete")) => {}
                (Some("finished"), Some("interrupted")) if j["rounds"] == MAX_ROUNDS => {
                    // Interrupted in its last round: the budget is used; resume says so.
                    let (code, body) = s.api("POST", &format!("/v1/jobs/{id}/resume"), None);
                    assert_eq!(code, 409, "{body}");
                    assert!(
                        body["error"]["message"]
                            .as_str()
                            .unwrap()
                            .contains("no rounds left"),
                        "{body}"
                    );
                }
                (Some("finished"), Some("interrupted")) => {
                    let (code, body) = s.api("POST", &format!("/v1/jobs/{id}/resume"), None);
                    assert_eq!(code, 202, "{body}");
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
            "jobs did not finish:\n{}",
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Count: every execution in the workspace log must have its round_started in the journal, no
    // (round, attempt) may have run twice, and each job used exactly its budget of round numbers.
    for (id, ws) in &all {
        let runs = executions(ws);
        let events: Vec<Value> = s.events(id);
        let started = started_attempts(&events);
        // The journal's order is its times' order, across kills, recoveries and resumes.
        let times: Vec<&str> = events.iter().map(|e| e["at"].as_str().unwrap()).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "{id}: event times go backwards: {times:?}"
        );
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
        let rounds: BTreeSet<u64> = runs.keys().map(|(r, _)| *r).collect();
        assert!(
            rounds.len() as u64 <= u64::from(MAX_ROUNDS),
            "{id}: {rounds:?}"
        );
        let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!(
            j["rounds"], MAX_ROUNDS,
            "{id} did not end at its budget: {j}"
        );
        if j["outcome"] == "complete" {
            completed_after_resume +=
                usize::from(s.events(id).iter().any(|e| e["type"] == "resumed"));
            assert!(
                rounds.contains(&u64::from(MAX_ROUNDS)),
                "{id}: round 6 never ran"
            );
        }
    }
    println!(
        "kills: {KILLS}, jobs: {}, jobs interrupted at least once: {}, completed after resume: {completed_after_resume}, lost: {lost}, duplicated: {duplicated}, surviving processes: {survivors}",
        all.len(),
        interrupted.len()
    );
    assert_eq!(
        survivors, 0,
        "processes of killed rounds survived the runner"
    );
    assert!(
        !interrupted.is_empty(),
        "no kill landed while a job ran (seed {seed})"
    );
    assert!(
        completed_after_resume > 0,
        "no interrupted job was finished by resume (seed {seed})"
    );
    assert_eq!((lost, duplicated), (0, 0), "seed {seed}");
}
