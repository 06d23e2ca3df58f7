//! What a round can do to the runner's state directory (issue 25, item 5), asserted on the
//! host. The round's report directory is bounded on both backends: a round that writes 200 MiB
//! and 10,000 files into `$(dirname $RALPH_REPORT_FILE)` fails with `report_dir_full` and the
//! state directory stays small (measured with a walk), while a normal report and usage file
//! still complete. A round that fills the state directory's disk never leaves its job `running`
//! at `round_spawned`: the job is closed `interrupted` (reason `disk_full`) and `ralph run`
//! exits 75; `ralph serve` closes the job the same way and keeps serving. (Deep trees and
//! prune: `tests/it/prune.rs`.)
//!
//! The docker cases need a Docker engine and the image `ralph-agent-base:latest`; without them
//! they skip, saying why, unless `CI` is set (then they fail). The full-disk cases mount a
//! small tmpfs for the state directory and the workspace, and need root.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::docker::{IMAGE, ready};
use common::server::{Server, job};
use common::small_disk::SmallDisk;
use common::{Fixture, Output, Ralph, complete_report, continue_report, journal};
use ralph_runner::store::reserve::RESERVE_BYTES;
use ralph_sandbox::beneath::tree::{Totals, measure};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;

const DOCKER: [&str; 4] = ["--backend", "docker", "--image", IMAGE];

/// Writes a valid report first, then 200 MiB and 10,000 files (and a link to `/`) into the
/// report directory, then marks the workspace.
fn flood_agent(f: &Fixture) -> PathBuf {
    f.agent(
        "flood.sh",
        &format!(
            r#"out=$(dirname "$RALPH_REPORT_FILE")
echo '{}' > "$RALPH_REPORT_FILE"
dd if=/dev/zero of="$out/big" bs=1M count=200 2>/dev/null
i=0
while [ $i -lt 10000 ]; do {{ true > "$out/f$i"; }} 2>/dev/null; i=$((i+1)); done
ln -s / "$out/root-link" 2>/dev/null
echo flooded > "$RALPH_WORKSPACE/flooded""#,
            complete_report("looks done")
        ),
    )
}

/// Everything below `p`, by a walk that follows no link.
fn size(p: &Path) -> Totals {
    measure(p).unwrap().unwrap_or_default()
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn flooding_the_report_dir_fails_the_round_and_keeps_the_state_dir_small(backend: &[&str]) {
    let f = Fixture::new();
    let agent = flood_agent(&f);
    let out = f
        .run(&agent)
        .args(["--max-rounds", "1", "--round-retries", "0"])
        .args(backend)
        .output();
    out.expect_code(3);
    let r = out.json();
    assert_eq!(r["outcome"], "round-failed", "{r}");
    let message = r["message"].as_str().unwrap();
    assert!(message.contains("report_dir_full"), "{message}");
    assert!(message.contains("report directory"), "{message}");
    assert_eq!(
        f.read_ws("flooded").trim(),
        "flooded",
        "the round ran to its end"
    );
    let id = out.job_id();
    let events = journal(&f.state, &id);
    let finished: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "round_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{events:?}");
    assert_eq!(finished[0]["result"]["kind"], "failed", "{events:?}");
    assert_eq!(
        finished[0]["result"]["reason"], "report_dir_full",
        "{events:?}"
    );
    assert_eq!(events.last().unwrap()["type"], "job_finished");

    // On the host: the state directory never received the flood.
    let job = size(&f.state.join("jobs").join(&id));
    assert!(
        job.bytes < 2 * MIB && job.files < 32,
        "the job's artifacts hold {job:?}"
    );
    let state = size(&f.state);
    assert!(
        state.bytes < RESERVE_BYTES + 4 * MIB,
        "the state directory holds {state:?}"
    );
    let out_dir = f.state.join("jobs").join(&id).join("rounds/1/1/out");
    assert_eq!(
        names_in(&out_dir),
        vec!["report.json"],
        "only the report came back"
    );
    assert!(
        out_dir
            .join("report.json")
            .symlink_metadata()
            .unwrap()
            .is_file()
    );
}

#[test]
fn native_flooding_the_report_dir_fails_report_dir_full_and_the_state_dir_stays_small() {
    flooding_the_report_dir_fails_the_round_and_keeps_the_state_dir_small(&[]);
}

#[test]
fn docker_flooding_the_report_dir_fails_report_dir_full_and_the_state_dir_stays_small() {
    if !ready("docker_flooding_the_report_dir_fails_report_dir_full_and_the_state_dir_stays_small")
    {
        return;
    }
    flooding_the_report_dir_fails_the_round_and_keeps_the_state_dir_small(&DOCKER);
}

fn a_report_and_usage_lines_still_complete(backend: &[&str]) {
    let f = Fixture::new();
    let agent = f.agent(
        "agent.sh",
        &format!(
            r#"echo '{{"model":"m","input_tokens":7,"output_tokens":3}}' >> "$RALPH_USAGE_FILE"
echo '{}' > "$RALPH_REPORT_FILE.tmp" && mv "$RALPH_REPORT_FILE.tmp" "$RALPH_REPORT_FILE""#,
            complete_report("done")
        ),
    );
    let out = f
        .run(&agent)
        .args(["--max-rounds", "1"])
        .args(backend)
        .output();
    out.expect_code(0);
    let r = out.json();
    assert_eq!(r["outcome"], "complete", "{r}");
    assert_eq!(r["usage"]["input_tokens"], 7, "{r}");
    assert_eq!(r["usage"]["output_tokens"], 3, "{r}");
    let out_dir = f
        .state
        .join("jobs")
        .join(out.job_id())
        .join("rounds/1/1/out");
    assert_eq!(names_in(&out_dir), vec!["report.json", "usage.jsonl"]);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["status"], "complete");
}

#[test]
fn native_a_report_and_usage_lines_still_complete() {
    a_report_and_usage_lines_still_complete(&[]);
}

#[test]
fn docker_a_report_and_usage_lines_still_complete() {
    if !ready("docker_a_report_and_usage_lines_still_complete") {
        return;
    }
    a_report_and_usage_lines_still_complete(&DOCKER);
}

/// Fills the disk through the workspace, then reports `continue` (the loop would go on).
const FILL: &str = r#"dd if=/dev/zero of="$RALPH_WORKSPACE/fill" bs=1M count=64 2>/dev/null"#;

/// The journal of a job whose disk filled: it is closed, its last events the round's end and
/// the job's (`interrupted`, `disk_full`), and no round started after the one that filled it.
fn assert_closed_for_a_full_disk(events: &[Value]) {
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let n = types.len();
    assert!(n >= 2, "{types:?}");
    assert_eq!(types[n - 1], "job_finished", "{types:?}");
    assert_eq!(types[n - 2], "round_finished", "{types:?}");
    let last = &events[n - 1];
    assert_eq!(last["outcome"], "interrupted", "{last}");
    assert_eq!(last["reason"], "disk_full", "{last}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("the state dir's disk is full"),
        "{last}"
    );
    assert_eq!(
        types.iter().filter(|t| **t == "round_started").count(),
        1,
        "{types:?}"
    );
}

fn a_full_state_disk_closes_the_job_interrupted(test: &str, backend: &[&str]) {
    let Some(disk) = SmallDisk::mount(test, "20m") else {
        return;
    };
    let f = Fixture::new();
    let agent = f.agent(
        "fill.sh",
        &format!(
            "{FILL}\necho '{}' > \"$RALPH_REPORT_FILE\"",
            continue_report("filled the disk")
        ),
    );
    let ws = disk.path.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let state = disk.path.join("state");
    let out: Output = Ralph::new()
        .args([
            "run",
            "--objective",
            "fill the disk",
            "--json",
            "--retry-backoff",
            "10ms",
            "--kill-grace",
            "1s",
            "--max-rounds",
            "5",
        ])
        .arg("--workspace")
        .arg(&ws)
        .arg("--state-dir")
        .arg(&state)
        .arg("--read")
        .arg(&f.agents)
        .arg("--agent-cmd")
        .arg(agent.display().to_string())
        .args(backend)
        .output();
    // Interrupted (SPEC §3): never 70 with the job left running.
    out.expect_code(75);
    let r = out.json();
    assert_eq!(r["outcome"], "interrupted", "{r}");
    assert_eq!(r["reason"], "disk_full", "{r}");
    // The round really filled the disk (all but the reserve the runner then gave up).
    assert!(
        ws.join("fill").metadata().unwrap().len() >= 4 * MIB,
        "the round did not fill the disk"
    );
    let id = out.job_id();
    let store = ralph_runner::store::Store::open_sqlite_read_only(&state).unwrap();
    let view = store.load(&id).unwrap();
    assert_eq!(
        view.state.as_str(),
        "finished",
        "the job is left {:?}",
        view.state
    );
    assert_closed_for_a_full_disk(&journal(&state, &id));
}

#[test]
fn native_a_full_state_disk_closes_the_job_interrupted_and_ralph_run_exits_75() {
    a_full_state_disk_closes_the_job_interrupted(
        "native_a_full_state_disk_closes_the_job_interrupted_and_ralph_run_exits_75",
        &[],
    );
}

#[test]
fn docker_a_full_state_disk_closes_the_job_interrupted_and_ralph_run_exits_75() {
    let test = "docker_a_full_state_disk_closes_the_job_interrupted_and_ralph_run_exits_75";
    if !ready(test) {
        return;
    }
    a_full_state_disk_closes_the_job_interrupted(test, &DOCKER);
}

#[test]
fn serve_a_full_state_disk_closes_the_job_and_the_service_keeps_serving() {
    let test = "serve_a_full_state_disk_closes_the_job_and_the_service_keeps_serving";
    let Some(disk) = SmallDisk::mount(test, "20m") else {
        return;
    };
    let s = Server::new_in("", &disk.path);
    let agent = s.agent(
        "fill.sh",
        &format!(
            "{FILL}\necho '{}' > \"$RALPH_REPORT_FILE\"",
            continue_report("filled the disk")
        ),
    );
    let ws = s.workspace("w1");
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &agent, json!({"max_rounds": 5}))] }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "interrupted", "{j}\n{}", s.log_text());
    assert_closed_for_a_full_disk(&journal(&s.state, &id));
    // The service lives and answers.
    let (health, _) = s.api("GET", "/healthz", None);
    assert_eq!(health, 200, "{}", s.log_text());

    // Room again: the next job runs to its end.
    std::fs::remove_file(ws.join("fill")).unwrap();
    let done = s.agent(
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let ws2 = s.workspace("w2");
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws2, &done, json!({"max_rounds": 1}))] }).to_string()),
    );
    assert_eq!(code, 201, "{body}\n{}", s.log_text());
    let id2 = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    let j2 = s.wait_finished(&id2, LIMIT);
    assert_eq!(j2["outcome"], "complete", "{j2}\n{}", s.log_text());
}
