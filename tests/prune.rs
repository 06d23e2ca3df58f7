//! Artifact retention (issue 12, item 8): `ralph prune --older-than DUR` removes the artifacts
//! of jobs that finished more than DUR ago and nothing else (not a running job's, not a
//! symlink's target, not the journal); `ralph show` and `ralph logs --round` then say "pruned";
//! `--dry-run` removes nothing; `retention` in `ralph serve` prunes on its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::server::{Server, job};
use common::{Output, Ralph, complete_report, wait_for_file, wait_until};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);

fn run_in(s: &Server, ws: &Path, agent: &Path) -> Ralph {
    Ralph::new()
        .args([
            "run",
            "--objective",
            "test objective",
            "--json",
            "--kill-grace",
            "1s",
        ])
        .arg("--workspace")
        .arg(ws)
        .arg("--state-dir")
        .arg(&s.state)
        .arg("--read")
        .arg(&s.agents)
        .args(["--mode", "workspace-write", "--max-rounds", "1"])
        .arg("--agent-cmd")
        .arg(agent.display().to_string())
}

fn prune(s: &Server, args: &[&str]) -> Value {
    let out: Output = Ralph::new()
        .arg("prune")
        .args(args)
        .arg("--state-dir")
        .arg(&s.state)
        .arg("--json")
        .output();
    out.expect_code(0);
    out.json()
}

fn pruned_ids(r: &Value) -> Vec<String> {
    r["pruned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn prune_removes_only_finished_artifacts_and_keeps_the_journal() {
    let s = Server::new("");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), "precious").unwrap();
    // The round plants links to outside the state directory in its own artifacts.
    let planter = s.agent(
        "plant.sh",
        &format!(
            "out=$(dirname \"$RALPH_REPORT_FILE\")\nln -s {o}/keep \"$out/file-link\"\nln -s {o} \"$out/dir-link\"\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done"),
            o = outside.path().display()
        ),
    );
    let ws1 = s.workspace("w1");
    let done = run_in(&s, &ws1, &planter).output();
    done.expect_code(0);
    let id = done.job_id();
    let job_dir = s.state.join("jobs").join(&id);
    let out_dir = job_dir.join("rounds/1/1/out");
    assert!(out_dir.join("file-link").symlink_metadata().is_ok());

    // A job in progress on the same state directory.
    let gated = s.agent(
        "gated.sh",
        &format!(
            "echo \"$RALPH_JOB_ID\" > \"$RALPH_WORKSPACE/id.tmp\" && mv \"$RALPH_WORKSPACE/id.tmp\" \"$RALPH_WORKSPACE/started\"\ni=0; while [ ! -e \"$RALPH_WORKSPACE/release\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let ws2 = s.workspace("w2");
    let mut running = run_in(&s, &ws2, &gated).spawn();
    wait_for_file(&ws2.join("started"), LIMIT);
    let running_id = std::fs::read_to_string(ws2.join("started"))
        .unwrap()
        .trim()
        .to_owned();
    let running_dir = s.state.join("jobs").join(&running_id).join("rounds/1/1");

    // Hostile first: a job younger than --older-than stays; a dry run removes nothing.
    assert_eq!(
        pruned_ids(&prune(&s, &["--older-than", "1h"])),
        Vec::<String>::new()
    );
    let dry = prune(&s, &["--older-than", "0s", "--dry-run"]);
    assert_eq!(pruned_ids(&dry), vec![id.clone()], "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert!(dry["files"].as_u64().unwrap() > 0, "{dry}");
    assert!(
        out_dir.join("report.json").exists(),
        "a dry run removed files"
    );

    let r = prune(&s, &["--older-than", "0s"]);
    assert_eq!(pruned_ids(&r), vec![id.clone()], "{r}");
    assert!(r["bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(!job_dir.join("rounds").exists(), "the artifacts remain");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep")).unwrap(),
        "precious",
        "a link's target was touched"
    );
    assert!(
        running_dir.exists(),
        "a running job's artifacts were removed"
    );
    // The journal keeps every event.
    let events = s.events(&id);
    assert!(
        events.iter().any(|e| e["type"] == "job_finished"),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e["type"] == "round_finished"),
        "{events:?}"
    );
    // The text form says what it removed; a second prune finds nothing left.
    let again = Ralph::new()
        .args(["prune", "--older-than", "0s", "--state-dir"])
        .arg(&s.state)
        .output();
    again.expect_code(0);
    assert!(
        again.stdout.contains("removed the artifacts of 0 job(s)"),
        "{again:?}"
    );

    // The client says pruned.
    let show = s.ralph(&["show", &id]);
    assert_eq!(show.code, 0, "{show:?}");
    assert!(show.stdout.contains("artifacts: pruned at"), "{show:?}");
    let logs = s.ralph(&["logs", &id, "--round", "1"]);
    assert_eq!(logs.code, 64, "{logs:?}");
    assert!(logs.stderr.contains("were pruned"), "{logs:?}");
    let journal = s.ralph(&["logs", &id]);
    assert_eq!(journal.code, 0, "{journal:?}");
    assert!(!journal.stdout.trim().is_empty(), "{journal:?}");

    std::fs::write(ws2.join("release"), "").unwrap();
    let status = running.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(running_dir.join("out/report.json").exists());
}

#[test]
fn serve_retention_prunes_finished_jobs() {
    let s = Server::new("retention = \"1s\"\n");
    let agent = s.agent(
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let ws = s.workspace("w1");
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &agent, json!({"max_rounds": 1}))] }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
    let rounds = s.state.join("jobs").join(&id).join("rounds");
    wait_until("retention prunes the job", LIMIT, || !rounds.exists());
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert!(j["artifacts_pruned"]["pruned_at"].is_string(), "{j}");
    wait_until("the prune is logged", LIMIT, || {
        s.log_text()
            .lines()
            .any(|l| l.contains("artifacts pruned (retention)") && l.contains(&id))
    });
    assert!(s.events(&id).iter().any(|e| e["type"] == "job_finished"));
}
