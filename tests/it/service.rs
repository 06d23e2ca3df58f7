//! `ralph serve` end to end, driven only through the CLI client and HTTP: batches, concurrency,
//! cancel, authentication, admission rules, malformed requests, drain on SIGTERM and resume.

use crate::common;

use std::time::Duration;

use common::server::{Server, job};
use common::{
    complete_report, continue_report, wait_for_file, wait_for_processes, wait_until_gone,
};
use serde_json::{Value, json};

fn post_jobs(s: &Server, jobs: Vec<Value>) -> (u16, Value) {
    s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": jobs }).to_string()),
    )
}

#[test]
fn a_batch_of_50_jobs_runs_with_at_most_4_at_once() {
    let s = Server::new("max_concurrent_jobs = 4\n");
    let agent = s.agent(
        "nap.sh",
        &format!(
            "sleep 0.3\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("napped")
        ),
    );
    // One job file, 50 jobs, through the CLI.
    let mut toml = String::new();
    for i in 0..50 {
        let ws = s.workspace(&format!("ws{i}"));
        toml.push_str(&format!(
            "[[job]]\nobjective = \"job {i}\"\nworkspace = \"{}\"\nagent_cmd = \"{}\"\nread = [\"{}\"]\n\n",
            ws.display(),
            agent.display(),
            s.agents.display()
        ));
    }
    let file = s.dir.path().join("batch.toml");
    std::fs::write(&file, toml).unwrap();
    let out = s.ralph(&["submit", file.to_str().unwrap()]);
    out.expect_code(0);
    let ids: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
    assert_eq!(ids.len(), 50);
    for id in &ids {
        assert_eq!(
            s.wait_finished(id, Duration::from_secs(120))["outcome"],
            "complete"
        );
    }
    // The journal says when each job ran: never more than 4 at once, and 4 were reached.
    let mut edges: Vec<(String, i32)> = Vec::new();
    for id in &ids {
        for e in s.events(id) {
            match e["type"].as_str().unwrap() {
                "job_started" => edges.push((e["at"].as_str().unwrap().to_owned(), 1)),
                "job_finished" => edges.push((e["at"].as_str().unwrap().to_owned(), -1)),
                _ => {}
            }
        }
    }
    edges.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut max) = (0, 0);
    for (_, d) in edges {
        now += d;
        max = max.max(now);
    }
    assert!(max <= 4, "{max} jobs ran at once");
    assert_eq!(max, 4, "the concurrency limit was never reached");
}

#[test]
fn cancelling_a_running_job_leaves_no_process() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let agent = s.agent(
        "hang.sh",
        "touch started\n( trap '' TERM; exec sleep 94411 ) &\nexec sleep 94412",
    );
    let (code, created) = post_jobs(&s, vec![job(&ws, &agent, json!({}))]);
    assert_eq!(code, 201, "{created}");
    let id = created["jobs"][0]["id"].as_str().unwrap().to_owned();
    wait_for_file(&ws.join("started"), Duration::from_secs(20));
    // Both processes of the round run before the cancel (the file comes first).
    wait_for_processes(&["94411", "94412"], Duration::from_secs(30));
    s.ralph(&["cancel", &id]).expect_code(0);
    let out = s.ralph(&["wait", &id]);
    out.expect_code(130);
    wait_until_gone(
        "9441",
        Duration::from_secs(30),
        "processes of the cancelled round survived",
    );
    let types: Vec<String> = s
        .events(&id)
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        types.ends_with(&[
            "cancel_requested".into(),
            "round_finished".into(),
            "job_finished".into()
        ]),
        "{types:?}"
    );
}

#[test]
fn requests_without_the_right_token_get_401() {
    let s = Server::new("");
    let (code, body) = s.raw("GET", "/v1/jobs", None, None, None).unwrap();
    assert_eq!(code, 401);
    assert!(body.contains("\"unauthorized\""), "{body}");
    let (code, _) = s
        .raw(
            "GET",
            "/v1/jobs",
            Some("wrong-token-wrong-token"),
            None,
            None,
        )
        .unwrap();
    assert_eq!(code, 401);
    let (code, _) = s
        .raw("POST", "/v1/jobs", Some("x"), Some("{}"), None)
        .unwrap();
    assert_eq!(code, 401);
    // The CLI says so, with the usage exit code.
    let out = std::process::Command::new(common::ralph_bin())
        .args(["jobs", "--server", &s.url()])
        .env("RALPH_TOKEN", "not-the-token-at-all")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the token"));
    // Health and readiness need no token.
    assert_eq!(s.raw("GET", "/healthz", None, None, None).unwrap().0, 200);
    assert_eq!(s.raw("GET", "/readyz", None, None, None).unwrap().0, 200);
}

#[test]
fn each_server_limit_is_refused_with_its_rule_named() {
    let s = Server::new(
        "[limits]\nread_roots = []\nmax_rounds = 100\nmax_memory = \"1G\"\nmax_pids = 100\nmax_round_timeout = \"10m\"\nallow_network_full = false\nallowed_env = [\"OK_VAR\"]\n",
    );
    let ws = s.workspace("ws");
    let agent = s.agent("a.sh", "true");
    let outside = tempfile::tempdir().unwrap();
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"workspace": outside.path()}),
            "limits.workspace_roots",
            "job[0].workspace",
        ),
        (
            json!({"mode": "full-access"}),
            "limits.max_mode",
            "job[0].mode",
        ),
        (
            json!({"max_rounds": 101}),
            "limits.max_rounds",
            "job[0].max_rounds",
        ),
        (
            json!({"memory": "2G"}),
            "limits.max_memory",
            "job[0].memory",
        ),
        (json!({"pids": 101}), "limits.max_pids", "job[0].pids"),
        (
            json!({"round_timeout": "11m"}),
            "limits.max_round_timeout",
            "job[0].round_timeout",
        ),
        (
            json!({"network": "full"}),
            "limits.allow_network_full",
            "job[0].network",
        ),
        (
            json!({"env": ["SECRET_VAR"]}),
            "limits.allowed_env",
            "job[0].env",
        ),
        (
            json!({"read": ["/etc"]}),
            "limits.read_roots",
            "job[0].read",
        ),
    ];
    for (extra, rule, field) in cases {
        let (code, body) = post_jobs(&s, vec![job(&ws, &agent, extra.clone())]);
        assert_eq!(code, 403, "{extra}: {body}");
        assert_eq!(body["error"]["code"], "refused");
        assert_eq!(body["error"]["rule"], rule, "{extra}: {body}");
        assert_eq!(body["error"]["field"], field, "{extra}: {body}");
    }
    // A batch is all or nothing: one refused job queues none.
    let (code, body) = post_jobs(
        &s,
        vec![
            job(&ws, &agent, json!({})),
            job(&ws, &agent, json!({"mode": "full-access"})),
        ],
    );
    assert_eq!(code, 403);
    assert_eq!(body["error"]["field"], "job[1].mode");
    let (_, list) = s.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0);
    // Within the limits it is accepted, and unset limits take the ceilings.
    let (code, body) = post_jobs(&s, vec![job(&ws, &agent, json!({"kind": "task"}))]);
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap();
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_eq!(j["spec"]["sandbox"]["memory"], 1 << 30);
    assert_eq!(j["spec"]["sandbox"]["pids"], 100);
    // The CLI shows the rule too.
    let out = s.ralph(&[
        "submit",
        "--objective",
        "x",
        "--agent-cmd",
        "true",
        "--workspace",
        ws.to_str().unwrap(),
        "--mode",
        "full-access",
    ]);
    out.expect_code(64);
    assert!(
        out.stderr.contains("limits.max_mode") && out.stderr.contains("job[0].mode"),
        "{}",
        out.stderr
    );
}

#[test]
fn malformed_requests_get_400_naming_the_field() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let post = |body: &str, ct: &str| {
        let (code, text) = s
            .raw("POST", "/v1/jobs", Some(&s.token()), Some(body), Some(ct))
            .unwrap();
        (code, serde_json::from_str::<Value>(&text).unwrap())
    };
    let (code, body) = post("{\"job\": [", "application/json");
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (code, body) = post("[[job]\nobjective = ", "application/toml");
    assert_eq!(code, 400, "{body}");
    let (code, body) = post(
        &format!(
            "[[job]]\nobjective = \"x\"\nagent_cmd = \"true\"\nworkspace = \"{}\"\nmax_round = 3\n",
            ws.display()
        ),
        "application/toml",
    );
    assert_eq!(code, 400);
    assert_eq!(body["error"]["field"], "max_round", "{body}");
    let (code, body) = post(
        &json!({"job": [{"objective": "x", "agent_cmd": "true", "workspace": ws, "maxRounds": 3}]})
            .to_string(),
        "application/json",
    );
    assert_eq!(code, 400);
    assert_eq!(body["error"]["field"], "maxRounds", "{body}");
    let (code, body) = post(&json!({"jobs": []}).to_string(), "application/json");
    assert_eq!((code, body["error"]["field"].as_str()), (400, Some("jobs")));
    let (code, body) = post(&json!({"job": [{"objective": "x", "agent_cmd": "true", "workspace": ws, "round_timeout": "soon"}]}).to_string(), "application/json");
    assert_eq!(code, 400);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("soon"),
        "{body}"
    );
    let (code, body) = post(&json!({"job": [{"objective": "x", "agent_cmd": "true", "workspace": ws, "max_rounds": 0}]}).to_string(), "application/json");
    assert_eq!(
        (code, body["error"]["field"].as_str()),
        (400, Some("job[0].max_rounds")),
        "{body}"
    );
    let (code, body) = post(
        &json!({"job": [{"objective": "x", "agent_cmd": "true", "workspace": "relative/ws"}]})
            .to_string(),
        "application/json",
    );
    assert_eq!(
        (code, body["error"]["field"].as_str()),
        (400, Some("job[0].workspace")),
        "{body}"
    );
    let (code, body) = post(
        &json!({"job": [{"objective_file": "/etc/shadow", "agent_cmd": "true", "workspace": ws}]})
            .to_string(),
        "application/json",
    );
    assert_eq!(
        (code, body["error"]["field"].as_str()),
        (400, Some("job[0].objective_file")),
        "{body}"
    );
    // Too large a body.
    let big = "x".repeat(2 << 20);
    let (code, _) = s
        .raw("POST", "/v1/jobs", Some(&s.token()), Some(&big), None)
        .unwrap();
    assert_eq!(code, 413);
    // A job file with an unknown key, through the CLI, is refused before it is sent.
    let file = s.dir.path().join("bad.toml");
    std::fs::write(&file, "[[job]]\nobjectiv = \"x\"\n").unwrap();
    let out = s.ralph(&["submit", file.to_str().unwrap()]);
    out.expect_code(64);
    assert!(out.stderr.contains("objectiv"), "{}", out.stderr);
}

#[test]
fn cancel_and_resume_through_the_api() {
    let s = Server::new("max_concurrent_jobs = 1\n");
    let ws1 = s.workspace("ws1");
    let ws2 = s.workspace("ws2");
    let hang = s.agent("hang.sh", "touch started\nexec sleep 30");
    let count = s.agent(
        "count.sh",
        &format!(
            "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count\nif [ $n -ge 2 ]; then echo '{}' > \"$RALPH_REPORT_FILE\"; else echo '{}' > \"$RALPH_REPORT_FILE\"; fi",
            complete_report("two"),
            continue_report("one")
        ),
    );
    let (_, a) = post_jobs(&s, vec![job(&ws1, &hang, json!({}))]);
    let a = a["jobs"][0]["id"].as_str().unwrap().to_owned();
    wait_for_file(&ws1.join("started"), Duration::from_secs(20));
    // With one slot taken, the second job waits in the queue; cancelling it there is immediate.
    let (_, b) = post_jobs(&s, vec![job(&ws2, &count, json!({}))]);
    let b = b["jobs"][0]["id"].as_str().unwrap().to_owned();
    let (code, body) = s.api("POST", &format!("/v1/jobs/{b}/cancel"), None);
    assert_eq!(
        (code, body["outcome"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    let (code, _) = s.api("POST", &format!("/v1/jobs/{b}/cancel"), None);
    assert_eq!(code, 409, "a finished job cannot be cancelled");
    // The running one.
    let (code, _) = s.api("POST", &format!("/v1/jobs/{a}/cancel"), None);
    assert_eq!(code, 202);
    assert_eq!(
        s.wait_finished(&a, Duration::from_secs(20))["outcome"],
        "cancelled"
    );
    // Resume the never-started one: it runs with its whole budget.
    s.ralph(&["resume", &b]).expect_code(0);
    let out = s.ralph(&["wait", &b]);
    out.expect_code(0);
    let j = s.wait_finished(&b, Duration::from_secs(20));
    assert_eq!(j["rounds"], 2);
    // A complete job cannot be resumed.
    let (code, body) = s.api("POST", &format!("/v1/jobs/{b}/resume"), None);
    assert_eq!(code, 409, "{body}");
    let (code, _) = s.api("GET", "/v1/jobs/no-such-job", None);
    assert_eq!(code, 404);
    // Listing with filters.
    let (_, list) = s.api("GET", "/v1/jobs?outcome=cancelled", None);
    let ids: Vec<&str> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![a.as_str()]);
    let (code, _) = s.api("GET", "/v1/jobs?state=bogus", None);
    assert_eq!(code, 400);
}

#[test]
fn sigterm_drains_then_resume_continues_with_the_remaining_budget() {
    let mut s = Server::new("drain_grace = \"20s\"\n");
    let ws = s.workspace("ws");
    let agent = s.agent(
        "slow.sh",
        &format!("n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count\ntouch round-$n\nsleep 1\nif [ $n -ge 3 ]; then echo '{}' > \"$RALPH_REPORT_FILE\"; else echo '{}' > \"$RALPH_REPORT_FILE\"; fi", complete_report("three"), continue_report("more")),
    );
    let (_, c) = post_jobs(&s, vec![job(&ws, &agent, json!({"max_rounds": 5}))]);
    let id = c["jobs"][0]["id"].as_str().unwrap().to_owned();
    wait_for_file(&ws.join("round-1"), Duration::from_secs(20));
    let status = s.terminate();
    assert!(status.success(), "{status}\n{}", s.log_text());
    // The running round finished; no new one started; the job is cancelled, resumable.
    assert!(
        !ws.join("round-2").exists(),
        "a new round started during the drain"
    );
    let events = s.events(&id);
    let fin = events
        .iter()
        .rev()
        .find(|e| e["type"] == "job_finished")
        .unwrap();
    assert_eq!(fin["outcome"], "cancelled", "{fin}");
    assert!(
        fin["message"]
            .as_str()
            .unwrap()
            .contains("stopped between rounds"),
        "{fin}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "round_finished" && e["result"]["kind"] == "reported")
    );
    s.start();
    s.ralph(&["resume", &id]).expect_code(0);
    s.ralph(&["wait", &id]).expect_code(0);
    let j = s.wait_finished(&id, Duration::from_secs(30));
    assert_eq!(j["rounds"], 3, "rounds continue where they stopped: {j}");
    assert_eq!(
        std::fs::read_to_string(ws.join("count")).unwrap().trim(),
        "3"
    );
}

#[test]
fn submissions_while_draining_get_503_and_queue_nothing() {
    let mut s = Server::new("drain_grace = \"60s\"\n");
    let ws = s.workspace("ws");
    let ws2 = s.workspace("ws2");
    let agent = s.agent(
        "hold.sh",
        &format!(
            "touch started\nwhile [ ! -e release ]; do sleep 0.05; done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("released")
        ),
    );
    let (code, _) = post_jobs(&s, vec![job(&ws, &agent, json!({}))]);
    assert_eq!(code, 201);
    wait_for_file(&ws.join("started"), Duration::from_secs(30));
    let pid = s.child.as_ref().unwrap().id();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    // Wait until the service says it is draining (not ready), then submit.
    let start = std::time::Instant::now();
    loop {
        let (code, _) = s.api("GET", "/readyz", None);
        if code == 503 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never drained");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, body) = post_jobs(&s, vec![job(&ws2, &agent, json!({}))]);
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["error"]["code"], "draining", "{body}");
    std::fs::write(ws.join("release"), "").unwrap();
    let status = s.terminate();
    assert!(status.success(), "{status}\n{}", s.log_text());
    s.start();
    let (_, list) = s.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1, "{list}");
    assert!(!ws2.join("started").exists());
}

#[test]
fn a_nul_byte_in_a_command_is_refused_with_the_field_named() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let agent = s.agent("a.sh", "true");
    let (code, body) = post_jobs(
        &s,
        vec![job(&ws, &agent, json!({"verify": "make\u{0}test"}))],
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], "job[0].verify", "{body}");
}

/// Issue 12, item 7: `ralph jobs | head -1` panicked on the closed pipe (exit 101, a panic
/// message on stderr). A reader that goes away ends every printing command quietly, the way it
/// ends `cat`: by SIGPIPE, nothing on stderr.
#[test]
fn a_closed_pipe_ends_a_printing_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let s = Server::new("");
    let agent = s.agent(
        "done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let ws = s.workspace("ws");
    let (code, body) = post_jobs(&s, vec![common::server::job(&ws, &agent, json!({}))]);
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    s.wait_finished(&id, std::time::Duration::from_secs(60));
    let cases: Vec<Vec<&str>> = vec![
        vec!["jobs"],
        vec!["jobs", "--json"],
        vec!["show", &id],
        vec!["logs", &id],
        vec!["agent", "list"],
        vec!["completions", "bash"],
        vec!["serve", "--print-default-config"],
    ];
    for args in cases {
        // A pipe whose reader is already gone: the first write fails with EPIPE.
        let (r, w) = nix::unistd::pipe().unwrap();
        drop(r);
        let out = std::process::Command::new(common::ralph_bin())
            .args(&args)
            .env("RALPH_SERVER", s.url())
            .env("RALPH_TOKEN", s.token())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::from(w))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?}, stderr: {stderr}",
            out.status
        );
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

/// Issue 12, item 7: the ROUNDS column of `ralph jobs` did not line up (a JSON number ignores
/// the column width), and `ralph show` counted a task job's one run against a round budget.
#[test]
fn the_jobs_table_lines_up_and_a_task_is_shown_as_one_run() {
    let s = Server::new("");
    let agent = s.agent(
        "done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let ws = s.workspace("ws");
    let ws2 = s.workspace("ws2");
    let (code, body) = post_jobs(
        &s,
        vec![
            common::server::job(&ws, &agent, json!({})),
            common::server::job(&ws2, &agent, json!({"kind": "task"})),
        ],
    );
    assert_eq!(code, 201, "{body}");
    let ids: Vec<String> = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    for id in &ids {
        s.wait_finished(id, std::time::Duration::from_secs(60));
    }
    let out = s.ralph(&["jobs"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let header = lines[0];
    let end = header.find("ROUNDS").unwrap() + "ROUNDS".len();
    for row in &lines[1..] {
        assert_eq!(
            row.as_bytes().get(end - 1),
            Some(&b'1'),
            "the count ends where ROUNDS ends:\n{}",
            out.stdout
        );
        assert_eq!(row.as_bytes().get(end), Some(&b' '), "{}", out.stdout);
    }
    let show = s.ralph(&["show", &ids[1]]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(show.stdout.contains("runs: 1"), "{}", show.stdout);
    assert!(!show.stdout.contains(" of 20"), "{}", show.stdout);
}

/// SPEC §3 (issue 31): a `budget-limited` job is resumed with the cap it ran out of raised. Out
/// of tokens after round 2, `ralph resume` as it is and with a cap not above what it used are
/// refused (exit 64, the flag or field named); `--max-tokens 5000` re-arms it, round 3 is told
/// its budget was raised and completes, and the journal shows both budgets.
#[test]
fn a_budget_limited_job_resumed_with_a_raised_token_budget_completes() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let agent = s.agent(
        "spender.sh",
        &format!(
            r#"n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
cat > "prompt-$n"
echo '{{"model":"m1","input_tokens":400,"output_tokens":200}}' >> "$RALPH_USAGE_FILE"
if [ $n -ge 3 ]; then echo '{}' > "$RALPH_REPORT_FILE"; else echo '{}' > "$RALPH_REPORT_FILE"; fi"#,
            complete_report("three"),
            continue_report("more")
        ),
    );
    let (_, c) = post_jobs(
        &s,
        vec![job(
            &ws,
            &agent,
            json!({"max_tokens": 1000, "max_rounds": 10}),
        )],
    );
    let id = c["jobs"][0]["id"].as_str().unwrap().to_owned();
    let j = s.wait_finished(&id, Duration::from_secs(30));
    assert_eq!(
        (
            j["outcome"].as_str(),
            j["reason"].as_str(),
            j["rounds"].as_u64()
        ),
        (Some("budget-limited"), Some("max_tokens"), Some(2)),
        "{j}"
    );
    // As it is: refused, the flag named.
    let out = s.ralph(&["resume", &id]);
    out.expect_code(64);
    assert!(out.stderr.contains("--max-tokens above"), "{}", out.stderr);
    // Not above the 1200 tokens it used: refused, the cap named.
    let out = s.ralph(&["resume", &id, "--max-tokens", "1200"]);
    out.expect_code(64);
    assert!(
        out.stderr.contains("max_tokens") && out.stderr.contains("not above"),
        "{}",
        out.stderr
    );
    // A malformed body through the API: 400 naming the field; nothing recorded.
    let (code, body) = s.api(
        "POST",
        &format!("/v1/jobs/{id}/resume"),
        Some(r#"{"max_tokens": "lots"}"#),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], "max_tokens", "{body}");
    assert!(s.events_of(&id, "resumed").is_empty());
    // Raised: it runs round 3 and completes.
    s.ralph(&["resume", &id, "--max-tokens", "5000"])
        .expect_code(0);
    s.ralph(&["wait", &id]).expect_code(0);
    let j = s.wait_finished(&id, Duration::from_secs(30));
    assert_eq!(
        (j["outcome"].as_str(), j["rounds"].as_u64()),
        (Some("complete"), Some(3)),
        "{j}"
    );
    assert_eq!(j["spec"]["max_tokens"], 5000, "{j}");
    let prompt = std::fs::read_to_string(ws.join("prompt-3")).unwrap();
    assert!(
        prompt.contains("resumed with its budget raised (max_tokens 5000)"),
        "{prompt}"
    );
    // The journal shows both budgets: the submitted one and the raised one.
    let submitted = s.events_of(&id, "job_submitted");
    assert_eq!(submitted[0]["spec"]["max_tokens"], 1000, "{submitted:?}");
    let resumed = s.events_of(&id, "resumed");
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(
        resumed[0]["caps"],
        json!({"max_tokens": 5000}),
        "{resumed:?}"
    );
    // Complete now: no more resumes, raised caps or not.
    let (code, body) = s.api(
        "POST",
        &format!("/v1/jobs/{id}/resume"),
        Some(r#"{"max_tokens": 9000}"#),
    );
    assert_eq!(code, 409, "{body}");
}

/// SPEC §13 batches (issue 31): `ralph submit` of 20 jobs is one batch; 5 fail. `ralph batch
/// show` counts them (states, outcomes, tokens, wall time, the jobs that did not complete);
/// `ralph batch retry` submits exactly those 5 again as new jobs of the batch, each with
/// `retry_of`; they complete, the summary then counts the latest of each job, and a second retry
/// has nothing to do.
#[test]
fn a_batch_of_20_with_5_failures_is_retried_as_5_new_jobs() {
    let s = Server::new("max_concurrent_jobs = 4\n");
    // Fails (no report) on its first run in a workspace holding `flaky`, else completes; 100
    // tokens a run.
    let agent = s.agent(
        "flaky.sh",
        &format!(
            r#"n=$(cat runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > runs
echo '{{"model":"m1","input_tokens":60,"output_tokens":40}}' >> "$RALPH_USAGE_FILE"
if [ -e flaky ] && [ $n -eq 1 ]; then exit 1; fi
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("done")
        ),
    );
    let mut toml = String::new();
    let mut flaky = std::collections::BTreeSet::new();
    for i in 0..20 {
        let ws = s.workspace(&format!("ws{i}"));
        if i % 4 == 1 {
            std::fs::write(ws.join("flaky"), "").unwrap();
            flaky.insert(ws.clone());
        }
        toml.push_str(&format!(
            "[[job]]\nobjective = \"job {i}\"\nname = \"job-{i}\"\nworkspace = \"{}\"\nagent_cmd = \"{}\"\nread = [\"{}\"]\nround_retries = 0\nmax_rounds = 1\n\n",
            ws.display(),
            agent.display(),
            s.agents.display()
        ));
    }
    assert_eq!(flaky.len(), 5);
    let file = s.dir.path().join("batch.toml");
    std::fs::write(&file, toml).unwrap();
    let out = s.ralph(&["submit", file.to_str().unwrap()]);
    out.expect_code(0);
    let ids: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
    assert_eq!(ids.len(), 20, "stdout stays one id per line");
    let batch = out
        .stderr
        .split_whitespace()
        .nth(1)
        .map(|b| b.trim_end_matches(':').to_owned())
        .unwrap();
    let mut failed = std::collections::BTreeSet::new();
    for id in &ids {
        let j = s.wait_finished(id, Duration::from_secs(120));
        assert_eq!(j["batch"], batch.as_str(), "{j}");
        if j["outcome"] != "complete" {
            assert_eq!(j["outcome"], "round-failed", "{j}");
            failed.insert(id.clone());
        }
    }
    assert_eq!(failed.len(), 5);
    let show = s.ralph(&["batch", "show", &batch, "--json"]);
    show.expect_code(0);
    let b: Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(
        (b["jobs"].as_u64(), b["retried"].as_u64()),
        (Some(20), Some(0)),
        "{b}"
    );
    assert_eq!(b["states"]["finished"], 20, "{b}");
    assert_eq!(
        b["outcomes"],
        json!({"complete": 15, "round-failed": 5}),
        "{b}"
    );
    assert_eq!(b["tokens"], 2000, "{b}");
    assert!(b["wall_ms"].as_u64().unwrap() > 0, "{b}");
    assert_eq!(b["slowest"].as_array().unwrap().len(), 5, "{b}");
    let listed: std::collections::BTreeSet<String> = b["not_complete"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, failed);
    let text = s.ralph(&["batch", "show", &batch]);
    text.expect_code(0);
    assert!(text.stdout.contains("round-failed 5"), "{}", text.stdout);
    // The API's listing by batch.
    let (_, list) = s.api("GET", &format!("/v1/jobs?batch={batch}&limit=100"), None);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 20);
    // Retried: exactly the 5 failures, as new jobs of the batch.
    let out = s.ralph(&["batch", "retry", &batch]);
    out.expect_code(0);
    let retries: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
    assert_eq!(retries.len(), 5, "{}", out.stderr);
    let mut retried_of = std::collections::BTreeSet::new();
    for id in &retries {
        assert!(!ids.contains(id), "a retry is a new job");
        let j = s.wait_finished(id, Duration::from_secs(60));
        assert_eq!(
            (j["outcome"].as_str(), j["batch"].as_str()),
            (Some("complete"), Some(batch.as_str())),
            "{j}"
        );
        retried_of.insert(j["retry_of"].as_str().unwrap().to_owned());
    }
    assert_eq!(retried_of, failed);
    let b: Value =
        serde_json::from_str(&s.ralph(&["batch", "show", &batch, "--json"]).stdout).unwrap();
    assert_eq!(
        (b["jobs"].as_u64(), b["retried"].as_u64()),
        (Some(25), Some(5)),
        "{b}"
    );
    assert_eq!(b["outcomes"], json!({"complete": 20}), "{b}");
    assert_eq!(b["not_complete"], json!([]), "{b}");
    assert_eq!(b["tokens"], 2500, "every run's tokens count: {b}");
    // Nothing left to retry; an unknown batch is named.
    let out = s.ralph(&["batch", "retry", &batch]);
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "");
    let out = s.ralph(&["batch", "show", "no-such-batch"]);
    out.expect_code(64);
    assert!(
        out.stderr.contains("no batch `no-such-batch`"),
        "{}",
        out.stderr
    );
    // A single job is no batch.
    let ws = s.workspace("single");
    let (_, c) = post_jobs(&s, vec![job(&ws, &agent, json!({}))]);
    assert_eq!(c["batch"], Value::Null, "{c}");
}

/// A retry is a new submission: a link a round planted on another job's path since that job
/// was submitted (here one job writes `shared`, the other reads `shared/x`) refuses the retry,
/// nothing queued, as it would refuse the submission.
#[test]
fn a_retry_whose_read_path_a_round_replaced_with_a_link_is_refused() {
    let s = Server::new("");
    let (wa, wb) = (s.workspace("wa"), s.workspace("wb"));
    let shared = s.workspace("shared");
    std::fs::create_dir_all(shared.join("x")).unwrap();
    let plant = s.agent(
        "plant.sh",
        &format!(
            "rm -rf '{0}/x' && ln -s /etc '{0}/x'\nexit 1",
            shared.display()
        ),
    );
    let fail = s.agent("fail.sh", "exit 1");
    let once = json!({"round_retries": 0, "max_rounds": 1});
    let mut a = job(&wa, &plant, once.clone());
    a["write"] = json!([shared]);
    let mut b = job(&wb, &fail, once);
    b["read"] = json!([fail.parent().unwrap(), shared.join("x")]);
    let (code, c) = post_jobs(&s, vec![a, b]);
    assert_eq!(code, 201, "{c}");
    let batch = c["batch"].as_str().unwrap().to_owned();
    let reader = c["jobs"][1]["id"].as_str().unwrap().to_owned();
    // The reader fails either way: round-failed, or (if the link came first) its sandbox
    // refuses the planted link.
    for j in c["jobs"].as_array().unwrap() {
        let end = s.wait_finished(j["id"].as_str().unwrap(), Duration::from_secs(30));
        assert_ne!(end["outcome"], "complete", "{end}");
    }
    assert!(
        std::fs::symlink_metadata(shared.join("x"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let (code, body) = s.api("POST", &format!("/v1/batches/{batch}/retry"), None);
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], format!("{reader}.read"), "{body}");
    let (_, list) = s.api("GET", &format!("/v1/jobs?batch={batch}"), None);
    assert_eq!(
        list["jobs"].as_array().unwrap().len(),
        2,
        "nothing was queued: {list}"
    );
}

/// SPEC §13 fan-out through the service: a job with `attempts = 2` runs both on this host, takes
/// two slots of `max_concurrent_jobs`, and ends with the winner's changes in its workspace;
/// more attempts than the host runs at once are refused, the field named.
#[test]
fn a_fan_out_job_runs_its_attempts_here_and_takes_a_slot_each() {
    let s = Server::new("max_concurrent_jobs = 2\n");
    let ws = s.workspace("ws");
    let other = s.workspace("other");
    let agent = s.agent(
        "fan.sh",
        &format!(
            "case \"$PWD\" in *.1) echo one > ok ;; *) touch started-elsewhere; sleep 1; echo two > ok ;; esac\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let quick = s.agent(
        "quick.sh",
        &format!(
            "touch ran\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("ok")
        ),
    );
    let (code, body) = post_jobs(
        &s,
        vec![job(
            &ws,
            &agent,
            json!({"attempts": 3, "verify": "test -e ok"}),
        )],
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], "job[0].attempts", "{body}");
    let (code, c) = post_jobs(
        &s,
        vec![
            job(&ws, &agent, json!({"attempts": 2, "verify": "test -e ok"})),
            job(&other, &quick, json!({})),
        ],
    );
    assert_eq!(code, 201, "{c}");
    let fan = c["jobs"][0]["id"].as_str().unwrap().to_owned();
    let second = c["jobs"][1]["id"].as_str().unwrap().to_owned();
    let j = s.wait_finished(&fan, Duration::from_secs(60));
    assert_eq!(j["outcome"], "complete", "{j}");
    let attempts = j["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{j}");
    assert_eq!(
        attempts.iter().filter(|a| a["won"] == true).count(),
        1,
        "{j}"
    );
    let ok = std::fs::read_to_string(ws.join("ok")).unwrap();
    assert!(ok == "one\n" || ok == "two\n", "{ok}");
    assert!(
        !ws.join("started-elsewhere").exists(),
        "a loser's file reached the workspace"
    );
    // The two slots were the fan-out's: the other job started only after it ended.
    s.wait_finished(&second, Duration::from_secs(30));
    let fan_end = s.events_of(&fan, "job_finished").last().unwrap()["at"]
        .as_str()
        .unwrap()
        .to_owned();
    let second_start = s.events_of(&second, "job_started")[0]["at"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(second_start >= fan_end, "{second_start} < {fan_end}");
    // Each attempt is a job of its own, run by this host, naming the fan-out job.
    for a in attempts {
        let (_, aj) = s.api(
            "GET",
            &format!("/v1/jobs/{}", a["job"].as_str().unwrap()),
            None,
        );
        assert_eq!(aj["attempt_of"]["job"], fan.as_str(), "{aj}");
    }
}
