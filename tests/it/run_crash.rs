//! Durability of running jobs (SPEC §8, §3), end to end: a `ralph run` killed with SIGKILL in
//! the middle of a round has its job closed as `interrupted` — with the round's real duration,
//! nothing re-run — by the next `ralph run` or by a `ralph serve` on the same state dir (which
//! clients talk to), while a live `ralph run`'s job is never closed by either; a second
//! `ralph serve` on the state dir is refused naming the holder; `ralph resume` continues and the
//! job deadline does not count the downtime. With PostgreSQL, a host killed for good has its
//! job closed by a surviving host within about `lease_timeout`, without a restart.

use crate::common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::server::{Server, executions, job};
use common::test_db::TestDatabase;
use common::{Fixture, Ralph};
use ralph_runner::store::{JobState, Store};
use serde_json::{Value, json};

/// Round 1 logs its execution, then hangs (it is killed with its runner); later rounds complete.
const AGENT: &str = r#"echo "$RALPH_ROUND $RALPH_ATTEMPT" >> "$RALPH_WORKSPACE/executions"
if [ "$RALPH_ROUND" = 1 ]; then touch "$RALPH_WORKSPACE/hanging"; exec sleep 600; fi
echo '{"status":"complete","summary":"done","evidence":["e"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE""#;

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn events(state: &Path, url: Option<&str>, id: &str) -> Vec<Value> {
    let store = Store::open(state, url).unwrap();
    store
        .events(id)
        .unwrap()
        .into_iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

fn the_running_job(state: &Path, url: Option<&str>) -> Option<String> {
    let store = Store::open(state, url).unwrap();
    store
        .job_ids_in_state(JobState::Running)
        .unwrap()
        .into_iter()
        .next()
}

/// The monotonic time the open attempt has run, from the job's hold file heartbeat.
fn attempt_ms(state: &Path, id: &str) -> u64 {
    let path = state.join("jobs").join(id).join("run.hold");
    let beat: Value = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    beat["attempt"][2].as_u64().unwrap_or(0)
}

/// Starts a `ralph run` whose round 1 hangs; returns it and its job id once the agent really
/// runs (its file, then `round_spawned` in the journal).
fn hanging_run(run: Ralph, ws: &Path, state: &Path, url: Option<&str>) -> (Child, String) {
    let mut child = run.spawn();
    let hanging = ws.join("hanging");
    wait_until("the agent runs", Duration::from_secs(60), || {
        assert!(child.try_wait().unwrap().is_none(), "ralph run exited");
        hanging.exists()
    });
    let id = the_running_job(state, url).expect("a running job");
    wait_until(
        "round_spawned is journalled",
        Duration::from_secs(30),
        || {
            events(state, url, &id)
                .iter()
                .any(|e| e["type"] == "round_spawned")
        },
    );
    (child, id)
}

fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The journal of a job closed because its runner died: one `interrupted`, the round closed
/// `interrupted` with a real duration, the job finished `interrupted` saying nothing was re-run.
fn assert_closed_interrupted(ev: &[Value], id: &str, min_round_ms: u64) {
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types.iter().filter(|t| **t == "interrupted").count(),
        1,
        "{types:?}"
    );
    let round = ev
        .iter()
        .rfind(|e| e["type"] == "round_finished")
        .expect("the round is closed");
    assert_eq!(round["result"]["kind"], "interrupted", "{round}");
    let ms = round["duration_ms"].as_u64().unwrap();
    assert!(ms >= min_round_ms, "round duration {ms} ms: {round}");
    let fin = ev.last().unwrap();
    assert_eq!(fin["type"], "job_finished", "{fin}");
    assert_eq!(fin["outcome"], "interrupted", "{fin}");
    let msg = fin["message"].as_str().unwrap();
    assert!(msg.contains("nothing was re-run"), "{msg}");
    assert!(
        msg.contains(&format!("`ralph resume {id}` continues")),
        "{msg}"
    );
    assert!(fin["ran_ms"].as_u64().unwrap() >= ms, "{fin}");
    // One death, one account: the `interrupted` entry says where the runner died in the same
    // words as the job's end (issue 27: not "stopped while the job ran", then "between rounds").
    let said = ev
        .iter()
        .find(|e| e["type"] == "interrupted")
        .and_then(|e| e["message"].as_str())
        .unwrap();
    let at = msg
        .split(" died ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap_or_else(|| panic!("{msg}"));
    assert!(said.contains(&format!(" died {at};")), "{said} / {msg}");
}

#[test]
fn a_killed_run_is_closed_as_interrupted_by_the_next_run_and_nothing_is_re_run() {
    let f = Fixture::new();
    let agent = f.agent("hang.sh", AGENT);
    let (mut child, id) = hanging_run(
        f.run(&agent).args(["--max-rounds", "3"]),
        &f.ws,
        &f.state,
        None,
    );
    // The heartbeat has seen the attempt run for a while.
    wait_until(
        "the heartbeat counts the attempt",
        Duration::from_secs(30),
        || attempt_ms(&f.state, &id) >= 1000,
    );
    kill9(&mut child);
    assert_eq!(
        events(&f.state, None, &id).last().unwrap()["type"],
        "round_spawned",
        "nothing closes the job by itself"
    );
    // The next `ralph run` on the state dir closes it first, then runs its own job.
    std::fs::remove_file(f.ws.join("hanging")).unwrap();
    let done = f.agent(
        "done.sh",
        r#"echo '{"status":"complete","summary":"done","evidence":["e"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE""#,
    );
    let out = f.run(&done).output();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains(&id), "{}", out.stderr);
    assert_closed_interrupted(&events(&f.state, None, &id), &id, 1000);
    assert_eq!(executions(&f.ws).get(&(1, 1)), Some(&1), "round 1 ran once");
    assert_eq!(executions(&f.ws).len(), 1, "nothing was re-run");
}

/// The entries of the state dir's scratch marks.
fn marks(state: &Path) -> Vec<String> {
    let mut m: Vec<String> = std::fs::read_dir(state.join("scratch-marks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    m.sort();
    m
}

#[test]
fn a_killed_runs_scratch_is_swept_by_the_next_run_which_looks_only_at_marked_jobs() {
    let f = Fixture::new();
    let done = f.agent(
        "done.sh",
        r#"echo '{"status":"complete","summary":"done","evidence":["e"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE""#,
    );
    // Finished jobs leave no mark.
    for _ in 0..2 {
        let out = f.run(&done).output();
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(marks(&f.state).is_empty(), "{:?}", marks(&f.state));
    }
    // A running job is marked, with its private scratch.
    let agent = f.agent("hang.sh", AGENT);
    let (mut child, id) = hanging_run(f.run(&agent), &f.ws, &f.state, None);
    assert_eq!(marks(&f.state), vec![id.clone()]);
    let attempt = f.state.join("jobs").join(&id).join("rounds/1/1");
    std::fs::write(attempt.join("home/left-by-the-agent"), "x").unwrap();
    kill9(&mut child);
    assert!(attempt.join("home/left-by-the-agent").exists());
    assert!(attempt.join("tmp").is_dir());
    // Scratch of a job nobody marked (a state directory's marks are the sweep's only list).
    let unmarked = f.state.join("jobs/not-a-marked-job/rounds/1/1/home");
    std::fs::create_dir_all(&unmarked).unwrap();

    // The next run closes the killed job, sweeps its scratch and unmarks it.
    std::fs::remove_file(f.ws.join("hanging")).unwrap();
    let out = f.run(&done).output();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        !attempt.join("home").exists(),
        "the killed run's HOME stayed"
    );
    assert!(
        !attempt.join("tmp").exists(),
        "the killed run's TMPDIR stayed"
    );
    assert!(
        attempt.join("stdout.log").exists(),
        "artifacts are not scratch"
    );
    assert!(marks(&f.state).is_empty(), "{:?}", marks(&f.state));
    assert!(unmarked.is_dir(), "an unmarked job was walked");
}

#[test]
fn a_live_run_is_left_alone_a_second_serve_is_refused_and_resume_does_not_count_the_downtime() {
    let mut s = Server::new("");
    let ws = s.workspace("w1");
    let agent = s.agent("hang.sh", AGENT);
    // The service is down while the `ralph run` starts, and comes up beside it.
    s.kill9();
    let run = Ralph::new()
        .args([
            "run",
            "--objective",
            "o",
            "--json",
            "--max-rounds",
            "3",
            "--job-timeout",
            "12s",
            "--kill-grace",
            "1s",
            "--mode",
            common::TEST_MODE,
        ])
        .arg("--workspace")
        .arg(&ws)
        .arg("--state-dir")
        .arg(&s.state)
        .arg("--read")
        .arg(&s.agents)
        .arg("--agent-cmd")
        .arg(agent.display().to_string());
    let (mut child, id) = hanging_run(run, &ws, &s.state, None);
    s.start();
    // Hostile first: the service's start-up and its periodic watch, and client commands, leave
    // the live run's job alone (the heartbeat runs on past a watch period).
    let at_start = attempt_ms(&s.state, &id);
    wait_until(
        "the attempt runs past the watch",
        Duration::from_secs(30),
        || attempt_ms(&s.state, &id) >= at_start + 2500,
    );
    let out = s.ralph(&["jobs", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_eq!(j["state"], "running", "{j}\n{}", s.log_text());
    assert!(
        !events(&s.state, None, &id)
            .iter()
            .any(|e| e["type"] == "interrupted"),
        "a live run's job was closed"
    );
    // A second `ralph serve` on the state dir is refused, naming the holder.
    let holder = s.child.as_ref().unwrap().id();
    let second = Ralph::new()
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&s.config)
        .output();
    assert_eq!(second.code, 64, "{}", second.stderr);
    assert!(
        second.stderr.contains(&format!("pid {holder}")) && second.stderr.contains("serve"),
        "{}",
        second.stderr
    );
    // The host goes down: the service, then the run, both killed; it stays down for longer
    // than the whole job timeout.
    s.kill9();
    let used = attempt_ms(&s.state, &id);
    kill9(&mut child);
    let killed = Instant::now();
    assert!(
        used < 12_000,
        "the run hit its deadline before the kill: {used} ms"
    );
    wait_until(
        "the downtime exceeds the job timeout",
        Duration::from_secs(30),
        || killed.elapsed() >= Duration::from_secs(13),
    );
    // The service comes back and closes the job; the time it ran is the run's own.
    s.start();
    let j = s.wait_finished(&id, Duration::from_secs(30));
    assert_eq!(j["outcome"], "interrupted", "{j}");
    let ev = events(&s.state, None, &id);
    assert_closed_interrupted(&ev, &id, used.saturating_sub(1500).max(1));
    let ran = ev.last().unwrap()["ran_ms"].as_u64().unwrap();
    assert!(ran < 12_000, "the downtime was counted: {ran} ms");
    // `ralph resume` continues, and the deadline leaves it time for its next round.
    let out = s.ralph(&["resume", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = s.wait_finished(&id, Duration::from_secs(60));
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    let runs = executions(&ws);
    assert_eq!(runs.get(&(1, 1)), Some(&1), "{runs:?}");
    assert_eq!(runs.get(&(2, 1)), Some(&1), "{runs:?}");
    assert_eq!(runs.len(), 2, "{runs:?}");
}

#[test]
fn postgres_a_killed_host_has_its_job_closed_by_a_surviving_host() {
    let Some(db) = TestDatabase::create("lease_lapse") else {
        return;
    };
    let extra = "lease_timeout = \"2s\"\nmax_concurrent_jobs = 1\n";
    let mut a = Server::with_database(extra, &db.url);
    let mut b = Server::with_database(extra, &db.url);
    // Only `a` takes work at first: `b` is stopped until the job runs on `a`.
    b.kill9();
    let ws = a.workspace("w");
    let agent = a.agent("hang.sh", AGENT);
    let (code, created) = a.api(
        "POST",
        "/v1/jobs",
        Some(&json!({"job": [job(&ws, &agent, json!({"max_rounds": 2}))]}).to_string()),
    );
    assert_eq!(code, 201, "{created}");
    let id = created["jobs"][0]["id"].as_str().unwrap().to_owned();
    let url = Some(db.url.as_str());
    wait_until("the agent runs on a", Duration::from_secs(60), || {
        ws.join("hanging").exists()
            && events(&a.state, url, &id)
                .iter()
                .any(|e| e["type"] == "round_spawned")
    });
    b.start();
    // Hostile first: while `a` lives, `b` leaves its job alone for several lease periods.
    let store = Store::open_postgres(&db.url).unwrap();
    let start = Instant::now();
    wait_until(
        "several lease periods pass",
        Duration::from_secs(30),
        || {
            let v = store.load(&id).unwrap();
            assert_eq!(v.state, JobState::Running, "closed while its host lives");
            start.elapsed() >= Duration::from_secs(5)
        },
    );
    // `a` dies for good; `b` closes the job within about lease_timeout, without restarting.
    a.kill9();
    let killed = Instant::now();
    let j = b.wait_finished(&id, Duration::from_secs(30));
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(j["outcome"], "interrupted", "{j}");
    assert_closed_interrupted(&events(&b.state, url, &id), &id, 1000);
    assert_eq!(executions(&ws).len(), 1, "nothing was re-run");
    assert_eq!(store.count_in_state(JobState::Running).unwrap(), 0);
}
