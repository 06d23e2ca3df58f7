//! Every host of a fleet answers for every job (SPEC §11), end to end: two `ralph serve` on one
//! PostgreSQL database with their own state directories, each running some of a batch of
//! `repo` jobs. `ralph diff`, `ralph logs --round` and `ralph show` give the same bytes through
//! either host; each host provisions under its own state directory only; after a `kill -9` of
//! one host its results come through the survivor (from the shared store), and what the store
//! does not keep is answered with the host that holds it. An upload job submitted to one host
//! is never taken by the other, and `submit --upload` judges the server's ceilings before it
//! uploads anything.
//!
//! The database comes from `RALPH_TEST_DATABASE_URL` (see tests/it/postgres_service.rs).

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::fix_project::{fixer, write_failing_project};
use common::git_server::{GitServer, git};
use common::server::Server;
use common::test_db::TestDatabase;
use common::{ralph_bin, wait_until};
use ralph_runner::store::{EventKind, Store};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(180);
const JOBS: usize = 6;

fn fleet_server(url: &str, extra: &str) -> Server {
    Server::with_database(&format!("max_concurrent_jobs = 1\n{extra}"), url)
}

/// The state directory of the runner that took job `id` (from its `job_started`).
fn runner_dir(store: &Store, id: &str) -> PathBuf {
    store
        .events(id)
        .unwrap()
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::JobStarted { runner } => runner.state_dir.clone(),
            _ => None,
        })
        .expect("a job_started with the runner's state dir")
}

/// `ralph ARGS` against server `s`: (exit code, stdout bytes, stderr).
fn client(s: &Server, args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = std::process::Command::new(ralph_bin())
        .args(args)
        .env("RALPH_SERVER", s.url())
        .env("RALPH_TOKEN", s.token())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(s: &Server, args: &[&str]) -> Vec<u8> {
    let (code, out, err) = client(s, args);
    assert_eq!(
        code,
        0,
        "ralph {args:?} through {}: {err}",
        s.state.display()
    );
    out
}

#[test]
fn results_come_through_either_host_and_each_provisions_under_its_own_state_dir() {
    let Some(db) = TestDatabase::create("fleet_results") else {
        return;
    };
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let limits = format!(
        "[limits]\nallowed_repos = [\"git://127.0.0.1:{}/\"]\n",
        g.port
    );
    let a = fleet_server(&db.url, &limits);
    let mut b = fleet_server(&db.url, &limits);
    // Slow enough that both hosts take some of the batch; each round says which it is.
    let agent = fixer(&a, "echo \"fixing round $RALPH_ROUND\"\nsleep 1\n");
    let jobs: Vec<Value> = (0..JOBS)
        .map(|_| {
            json!({
                "objective": "make the tests pass",
                "repo": g.url("proj.git"),
                "ref": "main",
                "agent_cmd": agent.display().to_string(),
                "read": [a.agents],
            })
        })
        .collect();
    let (code, created) = a.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": jobs }).to_string()),
    );
    assert_eq!(code, 201, "{created}");
    let ids: Vec<String> = created["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    for id in &ids {
        let j = a.wait_finished(id, LIMIT);
        assert_eq!(
            j["outcome"],
            "complete",
            "{j}\n{}\n{}",
            a.log_text(),
            b.log_text()
        );
    }
    let store = Store::open_postgres(&db.url).unwrap();
    let mut ran_on = BTreeSet::new();
    for id in &ids {
        let dir = runner_dir(&store, id);
        ran_on.insert(dir.clone());
        // Provisioned under the state dir of the host that ran it, nothing under the other's.
        let other = if dir == a.state { &b.state } else { &a.state };
        assert!(dir == a.state || dir == b.state, "{}", dir.display());
        assert!(
            !other.join("workspaces").join(id).exists(),
            "job {id} ran under {} but has a workspace under {}",
            dir.display(),
            other.display()
        );
        assert!(dir.join("workspaces").join(id).exists(), "job {id}");
        let prov = a.events_of(id, "workspace_provisioned");
        assert_eq!(prov.len(), 1, "{prov:?}");
    }
    assert_eq!(
        ran_on.len(),
        2,
        "both hosts should have run some of the batch: {ran_on:?}"
    );
    // The same bytes through either host.
    let mut patches = Vec::new();
    for id in &ids {
        let pa = ok(&a, &["diff", id]);
        assert!(!pa.is_empty(), "job {id}: empty patch");
        assert_eq!(pa, ok(&b, &["diff", id]), "job {id}: diff differs");
        let la = ok(&a, &["logs", id, "--round", "1", "--raw"]);
        assert!(
            String::from_utf8_lossy(&la).contains("fixing round 1"),
            "{}",
            String::from_utf8_lossy(&la)
        );
        assert_eq!(la, ok(&b, &["logs", id, "--round", "1", "--raw"]));
        assert_eq!(ok(&a, &["show", id]), ok(&b, &["show", id]));
        assert_eq!(
            ok(&a, &["show", id, "--json"]),
            ok(&b, &["show", id, "--json"])
        );
        let (_, arts_a) = a.api("GET", &format!("/v1/jobs/{id}/artifacts"), None);
        let (_, arts_b) = b.api("GET", &format!("/v1/jobs/{id}/artifacts"), None);
        assert_eq!(arts_a, arts_b);
        let files: Vec<&str> = arts_a["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap())
            .collect();
        assert!(files.contains(&"result.patch"), "{arts_a}");
        patches.push(pa);
    }

    // Mid-batch: one slow job on each host, each in its first round.
    let slow = a.agent("slow.sh", "echo \"slow round $RALPH_ROUND\"\nsleep 60\n");
    let slow_jobs: Vec<Value> = (0..2)
        .map(|_| {
            json!({
                "objective": "take your time",
                "repo": g.url("proj.git"),
                "ref": "main",
                "agent_cmd": slow.display().to_string(),
                "read": [a.agents],
            })
        })
        .collect();
    let (code, created) = a.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": slow_jobs }).to_string()),
    );
    assert_eq!(code, 201, "{created}");
    let slow_ids: Vec<String> = created["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    wait_until("both slow jobs are in round 1", LIMIT, || {
        slow_ids
            .iter()
            .all(|id| store.load(id).is_ok_and(|v| v.open_attempt.is_some()))
    });
    let slow_on_b = slow_ids
        .iter()
        .find(|id| runner_dir(&store, id) == b.state)
        .expect("one slow job on each host")
        .clone();

    // kill -9 of host B: its results come through A from the shared store.
    b.kill9();
    // Its running job's log is on B's disk only: A names B, it never says there is none.
    let (code, _, err) = client(&a, &["logs", &slow_on_b, "--round", "1"]);
    assert_ne!(code, 0);
    assert!(err.contains(&b.state.display().to_string()), "{err}");
    let (code, _, err) = client(&a, &["diff", &slow_on_b]);
    assert_ne!(code, 0);
    assert!(!err.contains("never provisioned"), "{err}");
    let on_b: Vec<&String> = ids
        .iter()
        .filter(|id| runner_dir(&store, id) == b.state)
        .collect();
    for (id, patch) in ids.iter().zip(&patches) {
        assert_eq!(&ok(&a, &["diff", id]), patch, "job {id} after B died");
    }
    // What the store does not have (here: dropped by hand) is answered with its holder.
    let gone = on_b[0];
    store.drop_job_files(gone).unwrap();
    for args in [vec!["diff", gone], vec!["logs", gone, "--round", "1"]] {
        let (code, _, err) = client(&a, &args);
        assert_ne!(code, 0, "{args:?}");
        assert!(
            err.contains(&b.state.display().to_string()) && !err.contains("never provisioned"),
            "{args:?}: {err}"
        );
    }
}

/// A git project at `dir` whose test fails.
fn project(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    write_failing_project(dir);
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "base"]);
}

#[test]
fn an_upload_job_runs_only_on_the_host_that_has_its_upload() {
    let Some(db) = TestDatabase::create("fleet_uploads") else {
        return;
    };
    let a = fleet_server(&db.url, "[limits]\nmax_rounds = 10\n");
    let b = fleet_server(&db.url, "[limits]\nmax_rounds = 10\n");
    let dir = a.dir.path().join("project");
    project(&dir);
    let agent = fixer(&a, "sleep 0.5\n");
    let agents = a.agents.to_str().unwrap().to_owned();
    let flags = ["--agent-cmd", agent.to_str().unwrap(), "--read", &agents];
    let uploads = |s: &Server| {
        std::fs::read_dir(s.state.join("uploads"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    // A ceiling is judged before anything is uploaded.
    let mut args = vec![
        "submit",
        "--upload",
        dir.to_str().unwrap(),
        "--objective",
        "x",
        "--max-rounds",
        "50",
    ];
    args.extend(flags);
    let (code, _, err) = client(&a, &args);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("ceiling of 10") && err.contains("nothing was uploaded"),
        "{err}"
    );
    assert_eq!(
        uploads(&a),
        0,
        "nothing may be uploaded for a refused submission"
    );
    // Without --max-rounds the server's default never exceeds its ceiling.
    let mut ids = Vec::new();
    for _ in 0..4 {
        let mut args = vec![
            "submit",
            "--upload",
            dir.to_str().unwrap(),
            "--objective",
            "fix",
        ];
        args.extend(flags);
        let out = ok(&a, &args);
        ids.push(String::from_utf8(out).unwrap().trim().to_owned());
    }
    let store = Store::open_postgres(&db.url).unwrap();
    for id in &ids {
        let j = a.wait_finished(id, LIMIT);
        assert_eq!(j["outcome"], "complete", "{j}\n{}", a.log_text());
        assert_eq!(j["max_rounds"], 10, "{j}");
        assert_eq!(
            runner_dir(&store, id),
            a.state,
            "job {id} ran on the host without its upload"
        );
    }
    // B saw them queued all along and never took one.
    wait_until("B's log is written", Duration::from_secs(5), || {
        b.log.exists()
    });
    assert!(!b.log_text().contains("job started"), "{}", b.log_text());
}
