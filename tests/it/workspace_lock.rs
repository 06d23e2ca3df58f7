//! One job at a time per workspace on a host (SPEC §5), end to end: a second `ralph run` on a
//! busy workspace is refused (64) naming the job that holds it and leaves no job behind; a
//! `kill -9`ed run holds nothing; `ralph serve` never runs two jobs on one workspace at once,
//! does not hold other workspaces' jobs up behind a blocked one, and keeps a job (a resumed one
//! too) queued while a `ralph run` (another process) holds its workspace.
//!
//! Agents that must hold a workspace wait for a `release` file the test writes (bounded), so
//! every ordering below is made by the test, never by a sleep.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::server::{Server, job};
use common::{Fixture, Ralph, complete_report, processes_with, wait_for_file};
use ralph_runner::store::{JobFilter, JobState, Store};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// An agent that marks the workspace as in use by a round (`mkdir in-round`; finding it there
/// already is an overlap, recorded in `overlap`), writes `<name>.started` with its job id (whole:
/// renamed into place),
/// waits (at most three minutes, longer than any wait of the tests) for `release` when `gated`,
/// and reports completion.
fn holder_body(name: &str, gated: bool) -> String {
    let gate = if gated {
        "i=0; while [ ! -e release ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done\n"
    } else {
        "sleep 0.3\n"
    };
    format!(
        "cd \"$RALPH_WORKSPACE\"\nmkdir in-round 2>/dev/null || echo \"$RALPH_JOB_ID\" >> overlap\necho \"$RALPH_JOB_ID\" > {name}.tmp && mv {name}.tmp {name}.started\n{gate}rmdir in-round\necho '{}' > \"$RALPH_REPORT_FILE\"",
        complete_report("done")
    )
}

fn job_id_in(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_owned()
}

/// The `at` of the first event of `kind` in a journal (RFC 3339 UTC, fixed width: ordered as
/// strings).
fn at_of(events: &[Value], kind: &str) -> String {
    events
        .iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"))["at"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn json_events(store: &Store, id: &str) -> Vec<Value> {
    store
        .events(id)
        .unwrap()
        .into_iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

#[test]
fn a_second_ralph_run_on_a_busy_workspace_exits_64_naming_the_job_and_leaves_no_job() {
    let f = Fixture::new();
    let first = f.agent("first.sh", &holder_body("first", true));
    let second = f.agent("second.sh", &holder_body("second", false));
    let child = f.run(&first).spawn();
    wait_for_file(&f.ws.join("first.started"), LIMIT);
    let first_id = job_id_in(&f.ws.join("first.started"));

    let out = f.run(&second).output();
    out.expect_code(64);
    assert!(
        out.stderr.contains(&format!(
            "failed to lock the workspace `{}`: it is in use by job `{first_id}` (`ralph run`, pid {})",
            f.ws.display(),
            child.id()
        )),
        "{}",
        out.stderr
    );
    // A usage error prints no result (with --json, only the error object).
    common::assert_no_result(&out);
    assert!(!f.ws.join("second.started").exists(), "a round ran");

    std::fs::write(f.ws.join("release"), "").unwrap();
    let done = child.wait_with_output().unwrap();
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let result: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(result["job_id"], first_id.as_str());
    assert_eq!(result["outcome"], "complete");

    // The refused run journalled nothing: the store holds the first job only, finished.
    let store = Store::open_sqlite(&f.state).unwrap();
    let jobs = store
        .list(&JobFilter {
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        [first_id.as_str()]
    );
    assert!(
        store
            .job_ids_in_state(JobState::Running)
            .unwrap()
            .is_empty()
    );
    assert!(!f.ws.join("overlap").exists());

    // The workspace is free again.
    f.run(&second).output().expect_code(0);
    assert!(f.ws.join("second.started").exists());
}

#[test]
fn a_killed_ralph_run_leaves_the_workspace_free() {
    let f = Fixture::new();
    let hang = f.agent(
        "hang.sh",
        "echo \"$RALPH_JOB_ID\" > \"$RALPH_WORKSPACE/hang.started\"\nexec sleep 94731",
    );
    let mut child = f.run(&hang).spawn();
    wait_for_file(&f.ws.join("hang.started"), LIMIT);
    child.kill().unwrap(); // SIGKILL: no clean-up code of the runner runs.
    child.wait().unwrap();

    let next = f.agent("next.sh", &holder_body("next", false));
    let out = f.run(&next).output();
    out.expect_code(0);
    assert_eq!(out.json()["outcome"], "complete");
    assert!(f.ws.join("next.started").exists());
    wait_until(
        "the killed run's round is gone",
        Duration::from_secs(30),
        || processes_with("94731").is_empty(),
    );
}

fn post_jobs(s: &Server, jobs: Vec<Value>) -> Vec<String> {
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": jobs }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

fn state_of(s: &Server, id: &str) -> String {
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    j["state"].as_str().unwrap().to_owned()
}

#[test]
fn the_service_runs_one_job_per_workspace_and_others_pass_a_blocked_one() {
    // Room for all three: only the workspace rule can keep one back.
    let s = Server::new("max_concurrent_jobs = 3\n");
    let shared = s.workspace("shared");
    let other = s.workspace("other");
    let gated = s.agent("gated.sh", &holder_body("a", true));
    let quick_b = s.agent("quick-b.sh", &holder_body("b", false));
    let quick_c = s.agent("quick-c.sh", &holder_body("c", false));
    // In queue order: A and B on the shared workspace, then C on another one.
    let ids = post_jobs(
        &s,
        vec![
            job(&shared, &gated, json!({"max_rounds": 1, "priority": 2})),
            job(&shared, &quick_b, json!({"max_rounds": 1, "priority": 1})),
            job(&other, &quick_c, json!({"max_rounds": 1, "priority": 0})),
        ],
    );
    let (a, b, c) = (&ids[0], &ids[1], &ids[2]);
    wait_for_file(&shared.join("a.started"), LIMIT);
    // C, queued behind the blocked B, runs to its end while A holds the shared workspace.
    assert_eq!(
        s.wait_finished(c, LIMIT)["outcome"],
        "complete",
        "{}",
        s.log_text()
    );
    assert_eq!(state_of(&s, a), "running");
    assert_eq!(state_of(&s, b), "queued");
    let b_events = s.events(b);
    assert_eq!(b_events.len(), 1, "B was claimed: {b_events:?}");
    assert!(!shared.join("b.started").exists());

    std::fs::write(shared.join("release"), "").unwrap();
    for id in [a, b] {
        assert_eq!(
            s.wait_finished(id, LIMIT)["outcome"],
            "complete",
            "{}",
            s.log_text()
        );
    }
    // Never both on the shared workspace: B started after A finished, by the journals and by
    // the rounds' own marker.
    let (a_events, b_events, c_events) = (s.events(a), s.events(b), s.events(c));
    let a_finished = at_of(&a_events, "job_finished");
    assert!(
        at_of(&b_events, "job_started") >= a_finished,
        "A: {a_events:?}\nB: {b_events:?}"
    );
    assert!(at_of(&c_events, "job_finished") <= a_finished);
    assert!(
        !shared.join("overlap").exists(),
        "two rounds in the shared workspace at once: {}",
        std::fs::read_to_string(shared.join("overlap")).unwrap_or_default()
    );
}

/// `ralph run` on `ws` with the server's agents readable, journalled in its own state dir.
fn foreground_run(s: &Server, ws: &Path, state: &Path, agent: &Path) -> Ralph {
    Ralph::new()
        .args([
            "run",
            "--objective",
            "foreground",
            "--json",
            "--max-rounds",
            "1",
        ])
        .arg("--workspace")
        .arg(ws)
        .arg("--state-dir")
        .arg(state)
        .arg("--read")
        .arg(&s.agents)
        .args(["--mode", common::TEST_MODE])
        .arg("--agent-cmd")
        .arg(agent)
}

#[test]
fn a_service_job_waits_while_a_ralph_run_holds_its_workspace() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let run_state = s.dir.path().join("run-state");
    let gated = s.agent("gated.sh", &holder_body("run", true));
    let quick = s.agent("quick.sh", &holder_body("served", false));
    let child = foreground_run(&s, &ws, &run_state, &gated).spawn();
    wait_for_file(&ws.join("run.started"), LIMIT);
    let run_id = job_id_in(&ws.join("run.started"));

    let ids = post_jobs(&s, vec![job(&ws, &quick, json!({"max_rounds": 1}))]);
    let id = &ids[0];
    // The scheduler tried the workspace, found it held by the `ralph run` process (another
    // store: named by pid and command line), and left the job queued.
    let waits = format!(
        "job {id}: waits in the queue: the workspace `{}` is in use by pid {} (`",
        ws.display(),
        child.id()
    );
    wait_until("the service logs the wait", LIMIT, || {
        s.log_text().contains(&waits)
    });
    assert_eq!(state_of(&s, id), "queued");
    assert_eq!(s.events(id).len(), 1);
    assert!(!ws.join("served.started").exists());

    std::fs::write(ws.join("release"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        s.wait_finished(id, LIMIT)["outcome"],
        "complete",
        "{}",
        s.log_text()
    );
    let run_store = Store::open_sqlite(&run_state).unwrap();
    assert!(
        at_of(&s.events(id), "job_started")
            >= at_of(&json_events(&run_store, &run_id), "job_finished")
    );
    assert!(!ws.join("overlap").exists());
    assert_eq!(
        s.log_text().matches(&waits).count(),
        1,
        "the wait is logged once: {}",
        s.log_text()
    );
}

#[test]
fn a_ralph_run_on_a_workspace_a_service_job_holds_names_that_job() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let gated = s.agent("gated.sh", &holder_body("served", true));
    let quick = s.agent("quick.sh", &holder_body("run", false));
    let ids = post_jobs(&s, vec![job(&ws, &gated, json!({"max_rounds": 1}))]);
    let id = &ids[0];
    wait_for_file(&ws.join("served.started"), LIMIT);
    // Journalled in the server's own store: the holder is named as its job.
    let state: PathBuf = s.state.clone();
    let out = foreground_run(&s, &ws, &state, &quick).output();
    out.expect_code(64);
    assert!(
        out.stderr.contains(&format!(
            "it is in use by job `{id}` (`ralph serve`, pid {})",
            s.child.as_ref().unwrap().id()
        )),
        "{}",
        out.stderr
    );
    assert!(!ws.join("run.started").exists());
    std::fs::write(ws.join("release"), "").unwrap();
    assert_eq!(s.wait_finished(id, LIMIT)["outcome"], "complete");
    let store = Store::open_sqlite(&s.state).unwrap();
    assert_eq!(
        store
            .list(&JobFilter {
                limit: 10,
                ..Default::default()
            })
            .unwrap()
            .len(),
        1,
        "the refused run left no job"
    );
}

#[test]
fn a_resumed_job_waits_for_its_workspace_too() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let other = s.workspace("other");
    let run_state = s.dir.path().join("run-state");
    let gated = s.agent("gated.sh", &holder_body("run", true));
    let quick = s.agent("quick.sh", &holder_body("served", false));
    let child = foreground_run(&s, &ws, &run_state, &gated).spawn();
    wait_for_file(&ws.join("run.started"), LIMIT);
    let run_id = job_id_in(&ws.join("run.started"));
    let id = post_jobs(&s, vec![job(&ws, &quick, json!({"max_rounds": 1}))]).remove(0);
    wait_until("the service logs the wait", LIMIT, || {
        s.log_text()
            .contains(&format!("job {id}: waits in the queue"))
    });
    // Cancelled while it waits, then resumed: back in the queue, under the same rule.
    let (code, body) = s.api("POST", &format!("/v1/jobs/{id}/cancel"), None);
    assert_eq!(
        (code, body["outcome"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    s.ralph(&["resume", &id]).expect_code(0);
    // A job queued after it, on another workspace, starts and ends: the pass that started it
    // took the resumed job first (older) and left it queued.
    let later = post_jobs(&s, vec![job(&other, &quick, json!({"max_rounds": 1}))]).remove(0);
    assert_eq!(s.wait_finished(&later, LIMIT)["outcome"], "complete");
    assert_eq!(state_of(&s, &id), "queued");
    let types: Vec<String> = s
        .events(&id)
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types,
        [
            "job_submitted",
            "cancel_requested",
            "job_finished",
            "resumed"
        ]
    );

    std::fs::write(ws.join("release"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        s.wait_finished(&id, LIMIT)["outcome"],
        "complete",
        "{}",
        s.log_text()
    );
    let run_store = Store::open_sqlite(&run_state).unwrap();
    assert!(
        at_of(&s.events(&id), "job_started")
            >= at_of(&json_events(&run_store, &run_id), "job_finished")
    );
    assert!(!ws.join("overlap").exists());
}
