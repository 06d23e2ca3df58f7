//! History without a server: `ralph jobs/show/logs/wait --state-dir DIR` read the store a
//! `ralph run --state-dir DIR` wrote (and change nothing in it); unique id prefixes on the CLI
//! and the API; job names and labels (set, validated, shown, filtered); `wait --timeout`.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::server::Server;
use common::{Fixture, Output, complete_report, ralph_bin, wait_until};
use serde_json::{Value, json};

/// `ralph ARGS` with no server configured at all.
fn local(args: &[&str]) -> Output {
    let out = Command::new(ralph_bin())
        .args(args)
        .env_remove("RALPH_SERVER")
        .env_remove("RALPH_TOKEN")
        .env_remove("RALPH_TOKEN_FILE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every path under `dir` with its size, mode and modification time.
fn snapshot(dir: &Path) -> BTreeMap<String, (u64, u32, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert(
                e.path().display().to_string(),
                (m.len(), m.mode(), m.mtime(), m.mtime_nsec()),
            );
        }
    }
    out
}

fn common_prefix(a: &str, b: &str) -> String {
    a.chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect()
}

fn finishing_agent(f: &Fixture) -> std::path::PathBuf {
    f.agent(
        "done.sh",
        &format!(
            "echo round-output-marker\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("all done")
        ),
    )
}

#[test]
fn local_history_reads_a_run_without_a_server_and_changes_nothing() {
    let f = Fixture::new();
    let state = f.state.display().to_string();
    // Hostile first: no store there, and a server given too.
    let missing = f.root.path().join("no-state");
    let out = local(&["jobs", "--state-dir", missing.to_str().unwrap()]);
    out.expect_code(64);
    assert!(out.stderr.contains("no-state/ralph.db"), "{}", out.stderr);
    assert!(!missing.exists(), "reading created the state dir");
    let agent = finishing_agent(&f);
    let run = f
        .run(&agent)
        .args([
            "--name",
            "nightly build",
            "--label",
            "team=infra",
            "--label",
            "ticket=T-12",
        ])
        .output();
    run.expect_code(0);
    let id = run.job_id();
    let out = local(&[
        "jobs",
        "--state-dir",
        &state,
        "--server",
        "http://127.0.0.1:1",
    ]);
    out.expect_code(64);
    assert!(out.stderr.contains("not both"), "{}", out.stderr);

    let env_server = Command::new(ralph_bin())
        .args(["show", "--state-dir", &state, &id])
        .env("RALPH_SERVER", "http://127.0.0.1:1")
        .output()
        .unwrap();
    assert_eq!(env_server.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&env_server.stderr).contains("--server/RALPH_SERVER"));

    let before = snapshot(&f.state);
    let prefix = &id[..8];

    let out = local(&["jobs", "--state-dir", &state]);
    out.expect_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("ID "), "{}", out.stdout);
    assert!(lines[0].ends_with("NAME"), "{}", out.stdout);
    assert!(lines[1].starts_with(&id), "{}", out.stdout);
    assert!(lines[1].contains(" finished "), "{}", out.stdout);
    assert!(lines[1].ends_with("nightly build"), "{}", out.stdout);
    assert_eq!(
        lines[0].find("NAME"),
        lines[1].find("nightly build"),
        "{}",
        out.stdout
    );

    let out = local(&[
        "jobs",
        "--state-dir",
        &state,
        "--json",
        "--label",
        "team=infra",
    ]);
    out.expect_code(0);
    let list = out.json();
    assert_eq!(list["jobs"][0]["id"], id.as_str());
    assert_eq!(list["jobs"][0]["name"], "nightly build");
    assert_eq!(
        list["jobs"][0]["labels"],
        json!({"team": "infra", "ticket": "T-12"})
    );
    let out = local(&[
        "jobs",
        "--state-dir",
        &state,
        "--json",
        "--label",
        "team=ops",
    ]);
    assert_eq!(out.json()["jobs"], json!([]));

    let out = local(&["show", "--state-dir", &state, prefix]);
    out.expect_code(0);
    assert!(
        out.stdout
            .starts_with(&format!("job {id}: loop finished — complete")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\n  name: nightly build"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\n  labels: team=infra, ticket=T-12"),
        "{}",
        out.stdout
    );
    let out = local(&["show", "--state-dir", &state, "--json", &id]);
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete");
    assert_eq!(j["name"], "nightly build");
    assert_eq!(j["labels"]["ticket"], "T-12");

    let out = local(&["logs", "--state-dir", &state, prefix]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("#1 submitted: loop job"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("finished: complete"), "{}", out.stdout);
    // The round's lines behind its label (issue 25); the captured bytes with --raw.
    let out = local(&["logs", "--state-dir", &state, prefix, "--round", "1"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "[round 1] round-output-marker\n");
    let out = local(&[
        "logs",
        "--state-dir",
        &state,
        prefix,
        "--round",
        "1",
        "--raw",
    ]);
    out.expect_code(0);
    assert_eq!(out.stdout, "round-output-marker\n");
    let out = local(&["logs", "--state-dir", &state, prefix, "--round", "7"]);
    out.expect_code(64);
    assert!(
        out.stderr.contains("no such log (round 7)"),
        "{}",
        out.stderr
    );

    let out = local(&["wait", "--state-dir", &state, prefix]);
    out.expect_code(0);
    let out = local(&["wait", "--state-dir", &state, "--json", prefix]);
    out.expect_code(0);
    assert_eq!(out.json()["name"], "nightly build");

    assert_eq!(snapshot(&f.state), before, "reading changed the state dir");
}

#[test]
fn ambiguous_and_pattern_prefixes_are_refused_locally() {
    let f = Fixture::new();
    let state = f.state.display().to_string();
    let agent = finishing_agent(&f);
    let a = f.run(&agent).output();
    a.expect_code(0);
    let b = f.run(&agent).output();
    b.expect_code(0);
    let (a, b) = (a.job_id(), b.job_id());
    // UUIDv7 ids begin with the time in milliseconds: two jobs minutes apart share 6+ chars.
    let shared = common_prefix(&a, &b);
    assert!(shared.len() >= 4, "{a} {b}");
    for cmd in ["show", "logs", "wait"] {
        let out = local(&[cmd, "--state-dir", &state, &shared[..4]]);
        out.expect_code(64);
        assert!(
            out.stderr.contains("matches several jobs"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains(&a) && out.stderr.contains(&b),
            "{}",
            out.stderr
        );
    }
    for bad in [
        "%",
        "0%",
        &format!("{}%", &shared[..4]),
        &format!("{}_", &shared[..4]),
    ] {
        let out = local(&["show", "--state-dir", &state, bad]);
        out.expect_code(64);
        assert!(
            out.stderr.contains("hex digits and `-` only"),
            "{}",
            out.stderr
        );
    }
    let out = local(&["show", "--state-dir", &state, &a[..3]]);
    out.expect_code(64);
    assert!(
        out.stderr.contains("at least 4 characters"),
        "{}",
        out.stderr
    );
    let out = local(&["show", "--state-dir", &state, "ffffffff"]);
    out.expect_code(64);
    assert!(
        out.stderr.contains("no job matches `ffffffff`"),
        "{}",
        out.stderr
    );
    // A unique prefix still resolves.
    let unique = &b[..shared.len() + 1];
    let out = local(&["show", "--state-dir", &state, "--json", unique]);
    out.expect_code(0);
    assert_eq!(out.json()["id"], b.as_str());
}

#[test]
fn bad_names_and_labels_are_refused_naming_the_key() {
    let f = Fixture::new();
    let agent = finishing_agent(&f);
    for (label, named) in [
        ("team=a\u{1b}[31mred", "`team`"),
        ("Team=infra", "`Team`"),
        ("a%b=1", "`a%b`"),
    ] {
        let out = f.run(&agent).args(["--label", label]).output();
        out.expect_code(64);
        assert!(out.stderr.contains(named), "{label}: {}", out.stderr);
        assert!(out.stderr.contains("--label"), "{label}: {}", out.stderr);
    }
    let out = f.run(&agent).args(["--name", "two\nlines"]).output();
    out.expect_code(64);
    assert!(out.stderr.contains("--name"), "{}", out.stderr);
    assert!(out.stderr.contains("control characters"), "{}", out.stderr);
    // Nothing was journalled.
    if f.state.join("ralph.db").exists() {
        let out = local(&["jobs", "--state-dir", f.state.to_str().unwrap(), "--json"]);
        assert_eq!(out.json()["jobs"], json!([]));
    }
}

#[test]
fn wait_timeout_exits_124_and_leaves_a_local_job_running() {
    let f = Fixture::new();
    let state = f.state.display().to_string();
    let go = f.ws.join("go");
    let agent = f.agent(
        "slow.sh",
        &format!(
            "while [ ! -f '{}' ]; do sleep 0.1; done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            go.display(),
            complete_report("went")
        ),
    );
    let mut run = f.run(&agent).spawn();
    let mut id = String::new();
    wait_until(
        "the run's job in the store",
        Duration::from_secs(60),
        || {
            if !f.state.join("ralph.db").exists() {
                return false;
            }
            let out = local(&[
                "jobs",
                "--state-dir",
                &state,
                "--json",
                "--state",
                "running",
            ]);
            match out.json()["jobs"][0]["id"].as_str() {
                Some(i) => {
                    id = i.to_owned();
                    true
                }
                None => false,
            }
        },
    );
    let started = Instant::now();
    let out = local(&["wait", "--state-dir", &state, &id[..13], "--timeout", "1s"]);
    out.expect_code(124);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        out.stderr.contains(&format!("job {id} is still running")),
        "{}",
        out.stderr
    );
    let out = local(&[
        "wait",
        "--state-dir",
        &state,
        &id,
        "--timeout",
        "1s",
        "--json",
    ]);
    out.expect_code(124);
    assert_eq!(out.json()["error"]["exit_code"], 124);
    // A wait without a timeout follows the run of the other process to its end.
    let waiter = Command::new(ralph_bin())
        .args(["wait", "--state-dir", &state, &id])
        .env_remove("RALPH_SERVER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(&go, "").unwrap();
    let waited = waiter.wait_with_output().unwrap();
    assert_eq!(
        waited.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    assert_eq!(run.wait().unwrap().code(), Some(0));
}

fn submit_file(s: &Server, name: &str, text: &str) -> Output {
    let p = s.root.join(name);
    std::fs::write(&p, text).unwrap();
    s.ralph(&["submit", p.to_str().unwrap()])
}

#[test]
fn names_labels_and_prefixes_through_a_server() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let gate = s.agents.join("go");
    let agent = s.agent(
        "gated.sh",
        &format!(
            "echo out-marker\nwhile [ ! -f '{}' ]; do sleep 0.1; done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            gate.display(),
            complete_report("ok")
        ),
    );
    // Hostile first: a bad label key in a job file names the key; nothing is queued.
    let bad = format!(
        "[[job]]\nobjective = \"x\"\nworkspace = \"{}\"\nagent_cmd = \"{}\"\nlabels = {{ \"Bad Key\" = \"1\" }}\n",
        ws.display(),
        agent.display()
    );
    let out = submit_file(&s, "bad.toml", &bad);
    out.expect_code(64);
    assert!(out.stderr.contains("`Bad Key`"), "{}", out.stderr);
    let (_, list) = s.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"], json!([]));

    let file = format!(
        "[[job]]\nobjective = \"x\"\nworkspace = \"{}\"\nagent_cmd = \"{}\"\nread = [\"{}\"]\nname = \"from-file\"\nlabels = {{ team = \"infra\", ticket = \"T-12\" }}\n",
        ws.display(),
        agent.display(),
        agent.parent().unwrap().display()
    );
    let out = submit_file(&s, "good.toml", &file);
    out.expect_code(0);
    let a = out.stdout.trim().to_owned();
    let ws2 = s.workspace("ws2");
    let out = s.ralph(&[
        "submit",
        "--objective",
        "y",
        "--workspace",
        ws2.to_str().unwrap(),
        "--agent-cmd",
        agent.to_str().unwrap(),
        "--read",
        agent.parent().unwrap().to_str().unwrap(),
        "--name",
        "from-flags",
        "--label",
        "team=ops",
    ]);
    out.expect_code(0);
    let b = out.stdout.trim().to_owned();

    // wait --timeout on a job that is still running: 124, and it goes on. (By a prefix unique
    // to `a`: ids are time-ordered, so two submissions can share their first 12 characters.)
    let unique_a = &a[..common_prefix(&a, &b).len().max(11) + 1];
    let started = Instant::now();
    let out = s.ralph(&["wait", unique_a, "--timeout", "1s"]);
    out.expect_code(124);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        out.stderr.contains(&format!("job {a} is still")),
        "{}",
        out.stderr
    );

    // Ambiguous prefixes: 409 naming both on the API, 64 on the CLI.
    let shared = common_prefix(&a, &b);
    assert!(shared.len() >= 4, "{a} {b}");
    let (code, e) = s.api("GET", &format!("/v1/jobs/{}", &shared[..4]), None);
    assert_eq!(code, 409, "{e}");
    assert_eq!(e["error"]["code"], "ambiguous_id");
    let mut cands: Vec<String> = serde_json::from_value(e["error"]["candidates"].clone()).unwrap();
    cands.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(cands, both);
    let out = s.ralph(&["show", &shared[..4]]);
    out.expect_code(64);
    assert!(
        out.stderr.contains(&a) && out.stderr.contains(&b),
        "{}",
        out.stderr
    );
    let (code, e) = s.api("GET", &format!("/v1/jobs/{}%25", &shared[..4]), None);
    assert_eq!(code, 404, "{e}");
    let (code, _) = s.api("GET", "/v1/jobs/ffffffff", None);
    assert_eq!(code, 404);

    std::fs::write(&gate, "").unwrap();
    let out = s.ralph(&["wait", &a[..shared.len() + 1]]);
    out.expect_code(0);
    s.wait_finished(&b, Duration::from_secs(120));

    // Filters.
    let (code, l) = s.api("GET", "/v1/jobs?label=team%3Dinfra&label=ticket=T-12", None);
    assert_eq!(code, 200, "{l}");
    let ids: Vec<&str> = l["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![a.as_str()]);
    let (_, l) = s.api("GET", "/v1/jobs?name=from-flags", None);
    assert_eq!(l["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(l["jobs"][0]["id"], b.as_str());
    let (code, _) = s.api("GET", "/v1/jobs?label=Bad=1", None);
    assert_eq!(code, 400);
    let out = s.ralph(&["jobs", "--json", "--label", "team=ops"]);
    out.expect_code(0);
    let l: Value = out.json();
    assert_eq!(l["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(l["jobs"][0]["name"], "from-flags");
    assert_eq!(l["jobs"][0]["labels"], json!({"team": "ops"}));

    // Prefixes on show and logs.
    let out = s.ralph(&["show", &b[..shared.len() + 1], "--json"]);
    out.expect_code(0);
    assert_eq!(out.json()["name"], "from-flags");
    let out = s.ralph(&["logs", &a[..shared.len() + 1], "--round", "1"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "[round 1] out-marker\n");
    let out = s.ralph(&["logs", &a[..shared.len() + 1], "--round", "1", "--raw"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "out-marker\n");
    let out = s.ralph(&["logs", &a[..shared.len() + 1]]);
    out.expect_code(0);
    assert!(out.stdout.contains("finished: complete"), "{}", out.stdout);
}

#[test]
fn a_local_round_log_is_followed_while_the_round_runs() {
    use std::io::Read;
    let f = Fixture::new();
    let state = f.state.display().to_string();
    let go = f.ws.join("go");
    let agent = f.agent(
        "chatty.sh",
        &format!(
            "echo first-line\nwhile [ ! -f '{}' ]; do sleep 0.1; done\necho after-go\necho '{}' > \"$RALPH_REPORT_FILE\"",
            go.display(),
            complete_report("went")
        ),
    );
    let mut run = f.run(&agent).spawn();
    let mut id = String::new();
    wait_until("the running job", Duration::from_secs(60), || {
        let out = local(&[
            "jobs",
            "--state-dir",
            &state,
            "--json",
            "--state",
            "running",
        ]);
        match out.json()["jobs"][0]["id"].as_str() {
            Some(i) => {
                id = i.to_owned();
                true
            }
            None => false,
        }
    });
    let mut follower = Command::new(ralph_bin())
        .args([
            "logs",
            "--state-dir",
            &state,
            &id[..13],
            "--round",
            "1",
            "--follow",
        ])
        .env_remove("RALPH_SERVER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // What the round wrote before `go` arrives while the round still waits.
    let mut stdout = follower.stdout.take().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("first-line") {
        assert!(Instant::now() < deadline, "no first line: {seen:?}");
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "the follow ended early: {seen:?}");
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follow ended while the round ran"
    );
    std::fs::write(&go, "").unwrap();
    stdout.read_to_end(&mut seen).unwrap();
    let status = follower.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let text = String::from_utf8_lossy(&seen);
    assert!(
        text.contains("first-line\n") && text.contains("after-go"),
        "{text}"
    );
    assert_eq!(run.wait().unwrap().code(), Some(0));
    // A round the job never started: the follow ends with the reason.
    let out = local(&[
        "logs",
        "--state-dir",
        &state,
        &id,
        "--round",
        "2",
        "--follow",
    ]);
    out.expect_code(64);
    assert!(out.stderr.contains("round 2"), "{}", out.stderr);
}
