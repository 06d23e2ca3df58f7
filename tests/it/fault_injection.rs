//! The fleet under faults (issue 17, SPEC §8): two `ralph serve` hosts on a throwaway PostgreSQL
//! cluster of the test's own (see `common::pg_cluster`), with the database crashed
//! (`pg_ctl stop -m immediate`) at each event boundary of a job's rounds, hosts SIGKILLed at
//! random moments, and both restarted. After the faults every job must end in exactly one state
//! (an `interrupted` one is resumed until it completes), no round may run twice or unjournalled,
//! nothing may stay `running` once the hosts are up and the lease timeout has passed, every
//! journal keeps the ordering property, and no agent process or per-attempt `home/`/`tmp/` is
//! left. A cancel through the other host is timed until the round's process is gone.
//!
//! Each check counts what it finds before failing, and the test prints the figures
//! (`docs/operations.md`, "Chaos figures"). Seeds: `RALPH_CHAOS_SEED`.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::chaos::{
    Rng, execution_violations, finish_violations, leftover_private_dirs, order_violations,
};
use common::pg_cluster::PgCluster;
use common::processes_with;
use common::server::{Server, job};
use ralph_runner::store::{JobState, Store};
use serde_json::{Value, json};

/// The hosts' lease: a host silent this long has its jobs closed by the other one.
const LEASE: Duration = Duration::from_secs(3);
/// A running job whose journal does not move for this long, with both hosts up and the lease
/// timeout passed, is stuck.
const STUCK_AFTER: Duration = Duration::from_secs(20);

/// The tests share the machine's two cores: one fleet at a time keeps the timings meaningful.
static ONE_FLEET: Mutex<()> = Mutex::new(());

/// Two hosts on one cluster.
struct Fleet {
    hosts: [Server; 2],
    db: PgCluster,
    store: Store,
}

impl Fleet {
    fn start(test: &str) -> Option<Self> {
        let db = PgCluster::start(test)?;
        let extra = format!(
            "max_concurrent_jobs = 3\nlease_timeout = \"{}s\"\n[limits]\nallowed_images = [\"{}\"]\n",
            LEASE.as_secs(),
            common::docker::IMAGE
        );
        let hosts = [
            Server::with_database(&extra, &db.url),
            Server::with_database(&extra, &db.url),
        ];
        let store = Store::open_postgres(&db.url).unwrap();
        Some(Self { hosts, db, store })
    }

    fn pid(&self, h: usize) -> u32 {
        self.hosts[h].child.as_ref().map_or(0, |c| c.id())
    }

    /// The host running `id` now, if it is one of ours.
    fn holder(&self, id: &str) -> Option<usize> {
        let pid = self.store.load(id).ok()?.runner?.pid;
        (0..2).find(|h| self.pid(*h) == pid)
    }

    /// The journal of `id` as JSON, or `None` while the database is unreachable.
    fn events(&self, id: &str) -> Option<Vec<Value>> {
        self.store.events(id).ok().map(|es| {
            es.into_iter()
                .map(|e| serde_json::to_value(e).unwrap())
                .collect()
        })
    }

    /// Crashes the database and starts it again after `down`.
    fn crash_db(&mut self, down: Duration) {
        self.db.crash();
        std::thread::sleep(down);
        self.db.restart();
    }

    fn kill_host(&mut self, h: usize) {
        self.hosts[h].kill9();
        self.hosts[h].start();
    }

    fn submit(&self, via: usize, jobs: Vec<Value>) -> Vec<String> {
        let (code, created) = self.hosts[via].api(
            "POST",
            "/v1/jobs",
            Some(&json!({ "job": jobs }).to_string()),
        );
        assert_eq!(code, 201, "{created}");
        created["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    }

    fn logs(&self) -> String {
        format!(
            "host A:\n{}\nhost B:\n{}",
            self.hosts[0].log_text(),
            self.hosts[1].log_text()
        )
    }
}

/// What happened to the jobs, for the figures and the final verdict.
#[derive(Default, Debug)]
struct Figures {
    jobs: usize,
    host_kills: usize,
    db_crashes: usize,
    resumed: usize,
    /// Jobs found `running` with a live holder and a journal that no longer moved.
    stuck: Vec<String>,
    /// Jobs left `interrupted` with no rounds to resume (their last round was cut by a fault).
    at_budget: usize,
    /// Jobs that ended other than `complete` (or `interrupted` at their round budget).
    other_outcomes: Vec<String>,
}

/// Drives `ids` to their end: resumes what was interrupted (through alternating hosts), and
/// when a job stays `running` without its journal moving for [`STUCK_AFTER`] with both hosts
/// up, records it as stuck and restarts its holder (whose recovery closes it as interrupted).
fn settle(fleet: &mut Fleet, ids: &[String], max_rounds: u64, f: &mut Figures, limit: Duration) {
    let start = Instant::now();
    let mut last_move: BTreeMap<String, (u64, Instant)> = BTreeMap::new();
    let mut done: BTreeMap<String, ()> = BTreeMap::new();
    let mut turn = 0usize;
    while done.len() < ids.len() {
        assert!(
            start.elapsed() < limit,
            "jobs did not settle within {limit:?}: {f:?}\n{}",
            fleet.logs()
        );
        for id in ids {
            if done.contains_key(id) {
                continue;
            }
            let Ok(view) = fleet.store.load(id) else {
                continue;
            };
            match view.state {
                JobState::Finished => {
                    last_move.remove(id);
                    match view.outcome().map(|o| o.as_str()) {
                        Some("complete") => {
                            done.insert(id.clone(), ());
                        }
                        Some("interrupted") => {
                            turn += 1;
                            let (code, body) = fleet.hosts[turn % 2].api(
                                "POST",
                                &format!("/v1/jobs/{id}/resume"),
                                None,
                            );
                            if code == 202 {
                                f.resumed += 1;
                            } else {
                                assert_eq!(code, 409, "{id}: {body}");
                                assert!(
                                    u64::from(view.rounds_started) >= max_rounds
                                        && body.to_string().contains("no rounds left"),
                                    "{id}: resume refused: {body}"
                                );
                                f.at_budget += 1;
                                done.insert(id.clone(), ());
                            }
                        }
                        other => {
                            f.other_outcomes.push(format!("{id}: {other:?}"));
                            done.insert(id.clone(), ());
                        }
                    }
                }
                JobState::Running => {
                    let e = last_move
                        .entry(id.clone())
                        .or_insert((view.seq, Instant::now()));
                    if e.0 != view.seq {
                        *e = (view.seq, Instant::now());
                    } else if e.1.elapsed() > STUCK_AFTER {
                        let holder = fleet.holder(id);
                        let events = fleet.events(id).unwrap_or_default();
                        let tail: Vec<String> = events
                            .iter()
                            .rev()
                            .take(4)
                            .rev()
                            .map(|e| format!("{}:{}", e["seq"], e["type"]))
                            .collect();
                        println!(
                            "STUCK {id}: running under host {holder:?} (pid {:?}) with no journal progress for {STUCK_AFTER:?}; journal tail {tail:?}",
                            view.runner.as_ref().map(|r| r.pid)
                        );
                        f.stuck.push(id.clone());
                        // Its holder's restart closes it (as interrupted) so the run can go on.
                        fleet.kill_host(holder.unwrap_or(0));
                        f.host_kills += 1;
                        last_move.remove(id);
                    }
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The checks over every job once the faults are over; returns the failures (with figures).
fn verify_all(
    fleet: &Fleet,
    jobs: &[(String, PathBuf)],
    markers: &[&str],
    f: &Figures,
) -> (Vec<String>, usize, usize) {
    let mut failures = Vec::new();
    let (mut lost, mut duplicated) = (0, 0);
    for (id, ws) in jobs {
        let events = fleet.events(id).unwrap();
        failures.extend(order_violations(id, &events));
        failures.extend(finish_violations(id, &events));
        let (l, d) = execution_violations(id, ws, &events);
        lost += l.len();
        duplicated += d.len();
        failures.extend(l);
        failures.extend(d);
    }
    // Nothing stays running, with both hosts up and the lease timeout passed.
    let running = fleet.store.job_ids_in_state(JobState::Running).unwrap();
    if !running.is_empty() {
        failures.push(format!("jobs still running: {running:?}"));
    }
    for id in &f.stuck {
        failures.push(format!(
            "{id} stayed running under a live host until that host was restarted"
        ));
    }
    for o in &f.other_outcomes {
        failures.push(format!("job ended neither complete nor interrupted: {o}"));
    }
    for m in markers {
        let left = processes_with(m);
        if !left.is_empty() {
            failures.push(format!("agent processes {m:?} left: {left:?}"));
        }
    }
    // A killed run's scratch is swept by its host (at start, and every 10 s while it serves):
    // wait for the sweep, with a deadline, before counting what is left.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    while std::time::Instant::now() < deadline
        && fleet
            .hosts
            .iter()
            .any(|h| !leftover_private_dirs(&h.state).is_empty())
    {
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    for h in &fleet.hosts {
        for dir in leftover_private_dirs(&h.state) {
            failures.push(format!(
                "private attempt dir left: {} (its round ended {})",
                dir.display(),
                how_attempt_ended(fleet, &dir)
            ));
        }
    }
    (failures, lost, duplicated)
}

/// How the attempt owning `<state>/jobs/<id>/rounds/<round>/<attempt>/{home,tmp}` ended, from
/// its `round_finished` (for the evidence of a leftover).
fn how_attempt_ended(fleet: &Fleet, dir: &std::path::Path) -> String {
    let parts: Vec<String> = dir
        .iter()
        .rev()
        .skip(1)
        .take(5)
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let [attempt, round, _, id, ..] = parts.as_slice() else {
        return "?".into();
    };
    let events = fleet.events(id).unwrap_or_default();
    events
        .iter()
        .find(|e| {
            e["type"] == "round_finished"
                && e["round"].as_u64().map(|r| r.to_string()).as_ref() == Some(round)
                && e["attempt"].as_u64().map(|a| a.to_string()).as_ref() == Some(attempt)
        })
        .map_or("without round_finished".into(), |e| {
            format!("{} ({})", e["result"]["kind"], e["result"]["message"])
        })
}

/// A point in a job's life at which the database is crashed: the first event of `kind` (of
/// `round`, when given) in the journal, or (kind `agent_running`) the moment the agent of round
/// 1 waits for its gate.
struct Boundary {
    kind: &'static str,
    round: Option<u64>,
    /// Whether round 1's agent may finish before the crash (else its gate opens after it).
    gate_first: bool,
}

const BOUNDARIES: &[Boundary] = &[
    Boundary {
        kind: "job_started",
        round: None,
        gate_first: false,
    },
    Boundary {
        kind: "round_started",
        round: Some(1),
        gate_first: false,
    },
    Boundary {
        kind: "round_spawned",
        round: Some(1),
        gate_first: false,
    },
    Boundary {
        kind: "agent_running",
        round: Some(1),
        gate_first: false,
    },
    Boundary {
        kind: "workspace_sanitized",
        round: Some(1),
        gate_first: true,
    },
    Boundary {
        kind: "round_finished",
        round: Some(1),
        gate_first: true,
    },
    Boundary {
        kind: "round_started",
        round: Some(2),
        gate_first: true,
    },
    Boundary {
        kind: "round_spawned",
        round: Some(2),
        gate_first: true,
    },
    Boundary {
        kind: "round_finished",
        round: Some(2),
        gate_first: true,
    },
    Boundary {
        kind: "verify_started",
        round: None,
        gate_first: true,
    },
    Boundary {
        kind: "verify_finished",
        round: None,
        gate_first: true,
    },
    Boundary {
        kind: "job_finished",
        round: None,
        gate_first: true,
    },
];

/// Round 1 waits for `gate-1` in its workspace; every round leaves a nested repository with a
/// hook-like alias for the git check to sanitize (`workspace_sanitized`); round 2 completes.
const GATE_AGENT: &str = r#"echo "$RALPH_ROUND $RALPH_ATTEMPT $$" >> "$RALPH_WORKSPACE/executions"
touch "$RALPH_WORKSPACE/running-$RALPH_ROUND"
i=0
while [ ! -e "$RALPH_WORKSPACE/gate-$RALPH_ROUND" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
git init -q "$RALPH_WORKSPACE/sub$RALPH_ROUND$RALPH_ATTEMPT" && git -C "$RALPH_WORKSPACE/sub$RALPH_ROUND$RALPH_ATTEMPT" config alias.x '!true'
if [ "$RALPH_ROUND" -ge 2 ]; then
  echo '{"status":"complete","summary":"two","evidence":["round 2"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE"
else
  echo '{"status":"continue","summary":"more","evidence":[],"nextSteps":["next"],"blocker":""}' > "$RALPH_REPORT_FILE"
fi"#;

#[test]
fn a_database_crash_at_each_event_boundary_loses_nothing_and_leaves_nothing_running() {
    let _one = ONE_FLEET.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut fleet) = Fleet::start("database_crash_boundaries") else {
        return;
    };
    let mut rng = Rng::from_env("RALPH_CHAOS_SEED");
    let began = Instant::now();
    let agent = fleet.hosts[0].agent("chaos-gate-agent.sh", GATE_AGENT);
    let mut f = Figures::default();
    let mut jobs = Vec::new();
    let mut missed = Vec::new();
    for (i, b) in BOUNDARIES.iter().enumerate() {
        let t0 = Instant::now();
        let ws = fleet.hosts[0].workspace(&format!("boundary{i}"));
        std::fs::write(ws.join("gate-2"), "").unwrap();
        if b.gate_first {
            std::fs::write(ws.join("gate-1"), "").unwrap();
        }
        let spec = job(
            &ws,
            &agent,
            json!({"max_rounds": 2, "round_retries": 0, "verify": "true"}),
        );
        let id = fleet.submit(0, vec![spec]).remove(0);
        f.jobs += 1;
        // Crash the moment the boundary is reached.
        let hit = Instant::now();
        let reached = loop {
            let reached = if b.kind == "agent_running" {
                ws.join("running-1").exists()
            } else {
                fleet.events(&id).unwrap_or_default().iter().any(|e| {
                    e["type"] == b.kind && b.round.is_none_or(|r| e["round"].as_u64() == Some(r))
                })
            };
            if reached || hit.elapsed() > Duration::from_secs(60) {
                break reached;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let down = Duration::from_millis(rng.range(100, 1500));
        let holder = fleet.holder(&id);
        fleet.crash_db(down);
        f.db_crashes += 1;
        if !reached {
            missed.push(format!("{}{:?}", b.kind, b.round));
        }
        std::fs::write(ws.join("gate-1"), "").unwrap();
        settle(
            &mut fleet,
            std::slice::from_ref(&id),
            2,
            &mut f,
            Duration::from_secs(120),
        );
        let events = fleet.events(&id).unwrap();
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        println!(
            "boundary {}{:?}: reached {reached}, host {holder:?}, down {down:?}, {:?}; journal {types:?}",
            b.kind,
            b.round,
            t0.elapsed()
        );
        jobs.push((id, ws));
    }
    let (mut failures, lost, duplicated) = verify_all(&fleet, &jobs, &["chaos-gate-agent.sh"], &f);
    for m in &missed {
        failures.push(format!("boundary {m} was never reached"));
    }
    println!(
        "CHAOS FIGURES (database crash at each boundary): jobs {}, database crashes {}, host restarts for stuck jobs {}, resumed {}, interrupted with no rounds left {}, lost {lost}, duplicated {duplicated}, stuck {}, other outcomes {}, took {:?}",
        f.jobs,
        f.db_crashes,
        f.host_kills,
        f.resumed,
        f.at_budget,
        f.stuck.len(),
        f.other_outcomes.len(),
        began.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} check(s) failed:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        fleet.logs()
    );
}

const KILL_JOBS: usize = 30;
/// Of which this many run on the docker backend (when the engine and image are there).
const DOCKER_JOBS: usize = 4;
const KILL_ROUNDS: u64 = 5;
const FAULTS: usize = 20;

/// Resumes the interrupted jobs of `ids` that have rounds left, so the faults keep hitting work.
fn resume_interrupted(fleet: &Fleet, ids: &[String], max_rounds: u64, f: &mut Figures) {
    for (i, id) in ids.iter().enumerate() {
        let Ok(view) = fleet.store.load(id) else {
            continue;
        };
        if view.outcome().map(|o| o.as_str()) == Some("interrupted")
            && u64::from(view.rounds_started) < max_rounds
        {
            let (code, _) = fleet.hosts[i % 2].api("POST", &format!("/v1/jobs/{id}/resume"), None);
            if code == 202 {
                f.resumed += 1;
            }
        }
    }
}

#[test]
fn host_kills_and_database_crashes_lose_duplicate_and_strand_nothing() {
    let _one = ONE_FLEET.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut fleet) = Fleet::start("host_kills") else {
        return;
    };
    let mut rng = Rng::from_env("RALPH_CHAOS_SEED");
    let began = Instant::now();
    let agent = fleet.hosts[0].agent(
        "chaos-kill-agent.sh",
        r#"echo "$RALPH_ROUND $RALPH_ATTEMPT $$" >> "$RALPH_WORKSPACE/executions"
sleep 0.3717
if [ "$RALPH_ROUND" -ge 5 ]; then
  echo '{"status":"complete","summary":"five","evidence":["round 5"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE"
else
  echo '{"status":"continue","summary":"more","evidence":[],"nextSteps":["next"],"blocker":""}' > "$RALPH_REPORT_FILE"
fi"#,
    );
    let mut f = Figures::default();
    let mut jobs: Vec<(String, PathBuf)> = Vec::new();
    let mut specs = Vec::new();
    let docker = common::docker::ready("host_kills (docker jobs)");
    for i in 0..KILL_JOBS {
        let ws = fleet.hosts[0].workspace(&format!("kill{i}"));
        let mut extra = json!({"max_rounds": KILL_ROUNDS, "round_retries": 0});
        if docker && i < DOCKER_JOBS {
            extra["backend"] = json!("docker");
            extra["image"] = json!(common::docker::IMAGE);
        }
        specs.push(job(&ws, &agent, extra));
        jobs.push((String::new(), ws));
    }
    for (slot, id) in jobs.iter_mut().zip(fleet.submit(0, specs)) {
        slot.0 = id;
    }
    f.jobs = jobs.len();
    let ids: Vec<String> = jobs.iter().map(|(id, _)| id.clone()).collect();
    let mut failures = Vec::new();
    for n in 0..FAULTS {
        std::thread::sleep(Duration::from_millis(rng.range(100, 1200)));
        let what = match rng.next() % 4 {
            3 => {
                // A host that stays down: the other one closes its jobs (lease or dead holder).
                let h = (rng.next() % 2) as usize;
                let dead = fleet.pid(h);
                fleet.hosts[h].kill9();
                f.host_kills += 1;
                let down = Instant::now();
                let orphaned = |fleet: &Fleet| {
                    fleet
                        .store
                        .job_ids_in_state(JobState::Running)
                        .unwrap_or_default()
                        .iter()
                        .filter(|id| {
                            fleet
                                .store
                                .load(id)
                                .is_ok_and(|v| v.runner.is_some_and(|r| r.pid == dead))
                        })
                        .count()
                };
                let closed = loop {
                    let left = orphaned(&fleet);
                    if left == 0 {
                        break Ok(down.elapsed());
                    }
                    if down.elapsed() > LEASE * 4 {
                        break Err(left);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                };
                if let Err(left) = closed {
                    failures.push(format!(
                        "fault {n}: {left} job(s) of dead host {h} still running after {:?}",
                        LEASE * 4
                    ));
                }
                fleet.hosts[h].start();
                format!(
                    "kill -9 host {} and keep it down until the other closes its jobs: {closed:?}",
                    ["A", "B"][h]
                )
            }
            h @ (0 | 1) => {
                fleet.kill_host(h as usize);
                f.host_kills += 1;
                format!("kill -9 host {}", ["A", "B"][h as usize])
            }
            _ => {
                let down = Duration::from_millis(rng.range(100, 1500));
                fleet.crash_db(down);
                f.db_crashes += 1;
                format!("database crash, down {down:?}")
            }
        };
        // After each fault: every journal keeps its order.
        for id in &ids {
            if let Some(events) = fleet.events(id) {
                failures.extend(order_violations(id, &events));
            }
        }
        resume_interrupted(&fleet, &ids, KILL_ROUNDS, &mut f);
        let finished = fleet.store.count_in_state(JobState::Finished).unwrap_or(0);
        println!("fault {n}: {what}; {finished} job(s) finished so far");
    }
    settle(
        &mut fleet,
        &ids,
        KILL_ROUNDS,
        &mut f,
        Duration::from_secs(240),
    );
    let (more, lost, duplicated) =
        verify_all(&fleet, &jobs, &["chaos-kill-agent.sh", "0.3717"], &f);
    failures.extend(more);
    // Nothing of ours left running in Docker.
    if docker {
        for (id, _) in jobs.iter().take(DOCKER_JOBS) {
            let left = common::docker::running_containers_with_label(
                ralph_sandbox::docker::labels::JOB,
                id,
            );
            if !left.is_empty() {
                failures.push(format!("{id}: containers still running: {left:?}"));
            }
        }
    }

    // A cancel through the other host: the time until the round's process is gone.
    let hang = fleet.hosts[0].agent(
        "chaos-hang-agent.sh",
        "touch \"$RALPH_WORKSPACE/started\"\nexec sleep 304.125",
    );
    let mut stops = Vec::new();
    for i in 0..5 {
        let ws = fleet.hosts[0].workspace(&format!("cancel{i}"));
        let id = fleet
            .submit(0, vec![job(&ws, &hang, json!({"max_rounds": 1}))])
            .remove(0);
        common::wait_for_file(&ws.join("started"), Duration::from_secs(60));
        common::wait_until("the round's process runs", Duration::from_secs(30), || {
            !processes_with("304.125").is_empty()
        });
        let holder = fleet.holder(&id).expect("one of our hosts runs the job");
        let asked = Instant::now();
        let (code, body) =
            fleet.hosts[1 - holder].api("POST", &format!("/v1/jobs/{id}/cancel"), None);
        assert_eq!(code, 202, "{body}");
        common::wait_until_gone("304.125", Duration::from_secs(30), "cancelled round");
        stops.push(asked.elapsed());
        let j = fleet.hosts[1 - holder].wait_finished(&id, Duration::from_secs(30));
        assert_eq!(j["outcome"], "cancelled", "{j}");
    }
    stops.sort();
    println!(
        "CHAOS FIGURES (host kills and database crashes): jobs {}, host kills {}, database crashes {}, resumed {}, interrupted with no rounds left {}, lost {lost}, duplicated {duplicated}, stuck {}, other outcomes {}; cancel through the other host, process gone after: median {:?}, max {:?}; took {:?}",
        f.jobs,
        f.host_kills,
        f.db_crashes,
        f.resumed,
        f.at_budget,
        f.stuck.len(),
        f.other_outcomes.len(),
        stops[stops.len() / 2],
        stops[stops.len() - 1],
        began.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} check(s) failed:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        fleet.logs()
    );
}
