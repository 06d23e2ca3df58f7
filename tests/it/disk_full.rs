//! A full state disk (issue 27, item 3), asserted on the host with a small tmpfs for the state
//! directory and the workspaces. A round that prints 40 MB onto a full disk is never left
//! blocked on its pipe: the capture drains it (dropping the rest with a marker), the job closes
//! `interrupted` (reason `disk_full`) within a minute, nothing is left `running`, `ralph doctor`
//! says the disk has no room for a round, and once space is freed the next job completes. `ralph serve` on a full store answers `/readyz` not
//! ready and a submission 507 (`ralph submit` exits 70), logs the disk at a bounded rate,
//! keeps a queued job queued, and starts it once space is back. (Report-dir floods and a round
//! that fills the disk through its workspace: `tests/it/state_bounds.rs`.)
//!
//! The cases mount a tmpfs and need root; elsewhere they skip, saying why. The docker case also
//! needs a Docker engine and the image `ralph-agent-base:latest` (it skips without them unless
//! `CI` is set).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::docker::{IMAGE, ready};
use common::server::{Server, job};
use common::small_disk::SmallDisk;
use common::{Output, Ralph, complete_report, continue_report, journal, wait_until};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);

/// `ralph run` of `agent` on `ws` with the state in `state`.
fn run(
    ws: &Path,
    state: &Path,
    agents: &Path,
    agent: &Path,
    rounds: &str,
    backend: &[&str],
) -> Output {
    Ralph::new()
        .args([
            "run",
            "--objective",
            "print a lot",
            "--json",
            "--retry-backoff",
            "10ms",
            "--kill-grace",
            "1s",
            "--round-timeout",
            "10m",
            "--max-rounds",
            rounds,
        ])
        .arg("--workspace")
        .arg(ws)
        .arg("--state-dir")
        .arg(state)
        .arg("--read")
        .arg(agents)
        .arg("--agent-cmd")
        .arg(agent.display().to_string())
        .args(backend)
        .output()
}

/// An agent script in `dir`.
fn agent(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn native_a_round_printing_40_mb_onto_a_full_state_disk_ends_disk_full_and_the_next_job_completes()
{
    a_round_printing_40_mb_onto_a_full_state_disk(
        "native_a_round_printing_40_mb_onto_a_full_state_disk_ends_disk_full_and_the_next_job_completes",
        &[],
    );
}

#[test]
fn docker_a_round_printing_40_mb_onto_a_full_state_disk_ends_disk_full_and_the_next_job_completes()
{
    let test = "docker_a_round_printing_40_mb_onto_a_full_state_disk_ends_disk_full_and_the_next_job_completes";
    if !ready(test) {
        return;
    }
    a_round_printing_40_mb_onto_a_full_state_disk(test, &["--backend", "docker", "--image", IMAGE]);
}

fn a_round_printing_40_mb_onto_a_full_state_disk(test: &str, backend: &[&str]) {
    let Some(disk) = SmallDisk::mount(test, "20m") else {
        return;
    };
    let agents_dir = tempfile::tempdir().unwrap();
    let agents = agents_dir.path().canonicalize().unwrap();
    // 1 MiB of output (kept: the disk is filled only once the runner has written most of it,
    // seen in the disk's free space, which the workspace shares), then the disk filled through
    // the workspace, then 40 MB more (before the fix the runner stopped reading here and the
    // round hung to its timeout), then a report that the loop would go on.
    let printer = agent(
        &agents,
        "print.sh",
        &format!(
            r#"avail() {{ df -Pk "$RALPH_WORKSPACE" | awk 'NR == 2 {{ print $4 }}'; }}
before=$(avail)
head -c 1048576 /dev/zero | tr '\0' a
i=0
while [ "$(avail)" -gt $((before - 960)) ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
dd if=/dev/zero of="$RALPH_WORKSPACE/fill" bs=1M count=64 2>/dev/null
head -c 41943040 /dev/zero | tr '\0' b
echo '{}' > "$RALPH_REPORT_FILE""#,
            continue_report("printed it all")
        ),
    );
    let ws = disk.path.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let state = disk.path.join("state");

    let began = Instant::now();
    let out = run(&ws, &state, &agents, &printer, "5", backend);
    let took = began.elapsed();
    out.expect_code(75);
    assert!(took < Duration::from_secs(60), "the round took {took:?}");
    let r = out.json();
    assert_eq!(r["outcome"], "interrupted", "{r}");
    assert_eq!(r["reason"], "disk_full", "{r}");
    assert!(
        ws.join("fill").metadata().unwrap().len() >= 4 << 20,
        "the round did not fill the disk"
    );

    // On the host: nothing left running; the journal ends with the round and the job.
    let id = out.job_id();
    let store = ralph_runner::store::Store::open_sqlite_read_only(&state).unwrap();
    let view = store.load(&id).unwrap();
    assert_eq!(view.state.as_str(), "finished", "left {:?}", view.state);
    let events = journal(&state, &id);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let n = types.len();
    assert_eq!(
        &types[n - 2..],
        ["round_finished", "job_finished"],
        "{types:?}"
    );
    assert_eq!(events[n - 1]["reason"], "disk_full", "{}", events[n - 1]);
    assert_eq!(
        types.iter().filter(|t| **t == "round_started").count(),
        1,
        "{types:?}"
    );
    drop(store);

    // The capture kept its start and says where and why it dropped the rest.
    let log = state.join("jobs").join(&id).join("rounds/1/1/stdout.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.len() <= 8 << 20, "{} bytes", text.len());
    assert!(
        text.starts_with("aaaa"),
        "{:?}",
        &text[..40.min(text.len())]
    );
    let tail = &text[text.len().saturating_sub(400)..];
    assert!(tail.contains("[ralph: output dropped after"), "{tail:?}");
    assert!(tail.contains("No space left on device"), "{tail:?}");
    let body = &text[..text.find("\n[ralph: output dropped").unwrap()];
    assert!(
        body.bytes().all(|b| b == b'a'),
        "nothing past the drop was kept"
    );
    assert!(body.len() > 512 << 10, "{} bytes kept", body.len());

    // `ralph doctor` says the state dir's disk has no room for a round, then that it has.
    let doctor = || {
        let out = Ralph::new()
            .args(["doctor", "--json", "--state-dir"])
            .arg(&state)
            .output();
        out.json()["state_dir"].clone()
    };
    let d = doctor();
    assert_eq!(d["ok"], false, "{d}");
    assert!(
        d["status"]
            .as_str()
            .unwrap()
            .contains("a round needs to start"),
        "{d}"
    );

    // Space freed: the next job on the same state dir runs to its end.
    std::fs::remove_file(ws.join("fill")).unwrap();
    let d = doctor();
    assert_eq!(d["ok"], true, "{d}");
    let done = agent(
        &agents,
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let ws2 = disk.path.join("ws2");
    std::fs::create_dir(&ws2).unwrap();
    let next = run(&ws2, &state, &agents, &done, "1", backend);
    next.expect_code(0);
    assert_eq!(next.json()["outcome"], "complete");
}

/// Lines of the service's log that say the state disk is full.
fn disk_full_lines(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("the state dir's disk is full: submissions are refused"))
        .count()
}

#[test]
fn serve_on_a_full_store_is_not_ready_refuses_with_507_and_starts_queued_jobs_once_space_is_back() {
    let test = "serve_on_a_full_store_is_not_ready_refuses_with_507_and_starts_queued_jobs_once_space_is_back";
    let Some(disk) = SmallDisk::mount(test, "24m") else {
        return;
    };
    let s = Server::new_in("max_concurrent_jobs = 1\n", &disk.path);
    let (ready, _) = s.api("GET", "/readyz", None);
    assert_eq!(ready, 200, "{}", s.log_text());

    // A first job holds the only slot until the test removes its gate (a removal works on a
    // full disk); a second waits in the queue.
    let gate = s.root.join("hold");
    std::fs::write(&gate, "").unwrap();
    let hold = s.agent(
        "hold.sh",
        &format!(
            "while [ -e '{}' ]; do sleep 0.05; done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            gate.display(),
            complete_report("held")
        ),
    );
    let (w1, w2, w3, w4, w5) = (
        s.workspace("w1"),
        s.workspace("w2"),
        s.workspace("w3"),
        s.workspace("w4"),
        s.workspace("w5"),
    );
    let done = s.agent(
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let submit = |ws: &Path, agent: &Path| {
        let (code, body) = s.api(
            "POST",
            "/v1/jobs",
            Some(&json!({ "job": [job(ws, agent, json!({"max_rounds": 1}))] }).to_string()),
        );
        (code, body)
    };
    let (code, body) = submit(&w1, &hold);
    assert_eq!(code, 201, "{body}");
    let first = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    wait_until("the first job runs", LIMIT, || {
        s.api("GET", &format!("/v1/jobs/{first}"), None).1["state"] == "running"
    });
    let (code, body) = submit(&w2, &done);
    assert_eq!(code, 201, "{body}");
    let queued = body["jobs"][0]["id"].as_str().unwrap().to_owned();

    // The disk fills (the reserve the service made stays in place).
    let filler = disk.fill("filler");

    // Not ready, with the reason.
    wait_until("/readyz says not ready", LIMIT, || {
        s.api("GET", "/readyz", None).0 == 503
    });
    let (_, why) = s.api("GET", "/readyz", None);
    let why = why.to_string();
    assert!(why.contains("the store cannot write"), "{why}");
    assert!(why.contains("disk is full"), "{why}");

    // A submission: 507 with a clear message; the client exits 70 with it.
    let (code, body) = submit(&w3, &done);
    assert_eq!(code, 507, "{body}");
    assert_eq!(body["error"]["code"], "disk_full", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("disk is full") && message.contains("free space"),
        "{message}"
    );
    let client = s.ralph(&[
        "submit",
        "--objective",
        "x",
        "--workspace",
        w4.to_str().unwrap(),
        "--agent-cmd",
        done.to_str().unwrap(),
        "--read",
        s.agents.to_str().unwrap(),
    ]);
    assert_eq!(client.code, 70, "{client:?}");
    assert!(client.stderr.contains("disk is full"), "{client:?}");
    for _ in 0..10 {
        assert_eq!(submit(&w3, &done).0, 507);
        assert_eq!(s.api("GET", "/readyz", None).0, 503);
    }

    // The first job ends on the full disk; the queued one stays queued (its claim would journal
    // on a disk without room) for the scheduler's passes (every 2 s) meanwhile.
    std::fs::remove_file(&gate).unwrap();
    let j = s.wait_finished(&first, LIMIT);
    assert!(
        j["outcome"] == "complete" || j["outcome"] == "interrupted",
        "{j}\n{}",
        s.log_text()
    );
    let passes_begin = Instant::now();
    wait_until("three scheduler passes", LIMIT, || {
        passes_begin.elapsed() > Duration::from_secs(6)
    });
    let (_, q) = s.api("GET", &format!("/v1/jobs/{queued}"), None);
    assert_eq!(q["state"], "queued", "{q}\n{}", s.log_text());

    // The full disk was logged at a bounded rate, not once per check.
    let log = s.log_text();
    let lines = disk_full_lines(&log);
    assert!((1..=3).contains(&lines), "{lines} lines:\n{log}");
    assert!(
        !log.contains("failed to claim a job from the queue"),
        "{log}"
    );

    // Space again: ready, the queued job starts and completes, and submissions are taken.
    std::fs::remove_file(&filler).unwrap();
    wait_until("/readyz says ready", LIMIT, || {
        s.api("GET", "/readyz", None).0 == 200
    });
    let q = s.wait_finished(&queued, LIMIT);
    assert_eq!(q["outcome"], "complete", "{q}\n{}", s.log_text());
    let (code, body) = submit(&w5, &done);
    assert_eq!(code, 201, "{body}");
    let last = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.wait_finished(&last, LIMIT)["outcome"], "complete");
    assert!(s.log_text().contains("has room again"), "{}", s.log_text());
}
