//! The built-in agent end to end (SPEC §10): `ralph run --agent builtin` against the scripted
//! Chat Completions server on the host's loopback, through the runner's gateway. A multi-step
//! round reads the failing test, edits the code, runs the tests and reports, to a verified
//! `complete`; on a streaming server and on one that only answers JSON. A
//! malformed tool call is answered with an error the model sees; a 429 then a 503 are retried
//! and counted; a model that never stops calling tools fails the round at `--agent-max-steps`;
//! the key never enters the round, and a local server gets none unless the job names one.

use crate::common;

use std::path::{Path, PathBuf};

use common::model_server::{Api, ModelServer, Options, RecordedRequest, Turn, Usage};
use common::*;
use serde_json::{Value, json};

/// The key the runner holds; it must never be seen inside a round.
const KEY: &str = "sk-builtin-SECRET-41c9e2";
/// The runner-side variable holding it.
const KEY_ENV: &str = "RALPH_E2E_BUILTIN_KEY";

/// A project whose test fails: `add` subtracts.
fn failing_project(f: &Fixture) {
    std::fs::write(f.ws.join("calc.sh"), "add() { echo $(( $1 - $2 )); }\n").unwrap();
    std::fs::write(
        f.ws.join("test.sh"),
        ". ./calc.sh\nif [ \"$(add 2 3)\" = 5 ]; then echo PASS; else echo \"FAIL: add 2 3 = $(add 2 3)\"; exit 1; fi\n",
    )
    .unwrap();
}

fn report(status: &str, summary: &str) -> String {
    json!({"status": status, "summary": summary, "evidence": ["sh test.sh prints PASS"],
           "nextSteps": [], "blocker": ""})
    .to_string()
}

fn u(input: u64, output: u64) -> Usage {
    Usage::new(input, 0, output, 0)
}

/// Read the failing test and the code (two calls at once), run the tests, fix, run again,
/// report in a fenced block.
fn fixing_script() -> Vec<Turn> {
    vec![
        Turn::tool("read_file", json!({"path": "test.sh"}), u(300, 20)),
        Turn::calls(
            &[
                ("read_file", r#"{"path":"calc.sh"}"#),
                ("shell", r#"{"command":"sh test.sh"}"#),
            ],
            u(400, 30),
        ),
        Turn::tool(
            "edit_file",
            json!({"path": "calc.sh", "old": "$1 - $2", "new": "$1 + $2"}),
            u(500, 40),
        ),
        Turn::tool("shell", json!({"command": "sh test.sh"}), u(600, 10)),
        Turn::text(
            &format!(
                "The tests pass now.\n\n```json\n{}\n```\n",
                report("complete", "add adds")
            ),
            u(700, 50),
        ),
    ]
}

/// `ralph run --agent builtin` on the fixture against `server`.
fn builtin_run(f: &Fixture, server: &ModelServer) -> Ralph {
    Ralph::new()
        .args(["run", "--objective", "make sh test.sh pass", "--json"])
        .args(["--agent", "builtin", "--model", "scripted-model"])
        .arg("--upstream")
        .arg(format!("{}/v1", server.url()))
        .args(["--mode", TEST_MODE, "--max-rounds", "2"])
        .args(["--round-retries", "0", "--retry-backoff", "10ms"])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
}

/// The text of every `tool` message of a request, in order.
fn tool_results(r: &RecordedRequest) -> Vec<String> {
    r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The results the model saw for the calls of the previous step (the last tool messages).
fn last_results(r: &RecordedRequest) -> Vec<String> {
    let msgs = r.body["messages"].as_array().unwrap();
    let n = msgs
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .count();
    msgs[msgs.len() - n..]
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn served_usage(server: &ModelServer, script: &[Turn]) -> (u64, u64) {
    server
        .turn_requests()
        .iter()
        .filter_map(|r| r.turn)
        .map(|i| script[i.min(script.len() - 1)].usage)
        .fold((0, 0), |(i, o), u| (i + u.input, o + u.output))
}

/// What the fixing script's requests must show: the tool results fed back, in order.
fn assert_the_model_saw_its_tools_work(server: &ModelServer) {
    let ctx = server.summary();
    let reqs = server.turn_requests();
    assert_eq!(reqs.len(), 5, "{ctx}");
    let first = &reqs[0].body;
    assert_eq!(first["model"], "scripted-model");
    assert_eq!(first["messages"][0]["role"], "system");
    assert_eq!(first["messages"][1]["role"], "user");
    assert!(
        first["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("make sh test.sh pass"),
        "the runner's prompt is the user message"
    );
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shell", "read_file", "write_file", "edit_file"]);
    // Step 1's read_file: the test's text.
    assert!(last_results(&reqs[1])[0].contains("add 2 3"), "{ctx}");
    // Step 2's two calls, answered in the order they were made.
    let two = last_results(&reqs[2]);
    assert_eq!(two.len(), 2, "{two:?}");
    assert!(two[0].contains("$1 - $2"), "{two:?}");
    assert!(two[1].contains("FAIL: add 2 3 = -1"), "{two:?}");
    assert!(
        two[1].contains("exit status 1") || two[1].contains("exit 1"),
        "{two:?}"
    );
    // Step 4's shell: the tests pass.
    let four = last_results(&reqs[4]);
    assert!(four[0].contains("PASS"), "{four:?}");
    assert_eq!(tool_results(&reqs[4]).len(), 5);
}

#[test]
fn a_multi_step_round_fixes_the_code_to_a_verified_complete_on_a_streaming_server() {
    multi_step_round("native");
}

/// The same on docker: the agent is the container's init executable, the gateway's listeners
/// are made in the container's loopback-only namespace (SPEC §5).
#[test]
fn docker_a_multi_step_round_fixes_the_code_to_a_verified_complete_on_a_streaming_server() {
    if common::docker::ready(
        "docker_a_multi_step_round_fixes_the_code_to_a_verified_complete_on_a_streaming_server",
    ) {
        multi_step_round("docker");
    }
}

fn multi_step_round(backend: &str) {
    let f = Fixture::new();
    failing_project(&f);
    let script = fixing_script();
    let server = ModelServer::start(Api::Chat, script.clone());
    let prom = f.root.path().join("builtin.prom");
    let out = builtin_run(&f, &server)
        .args(["--backend", backend])
        .args(["--verify", "sh test.sh"])
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{}", server.summary());
    assert_eq!(j["verified"], true);
    assert_eq!(j["rounds"], 1);
    assert_eq!(f.read_ws("calc.sh"), "add() { echo $(( $1 + $2 )); }\n");
    assert_eq!(j["report"]["summary"], "add adds");
    assert_the_model_saw_its_tools_work(&server);
    // It asked for a stream, with usage.
    for r in server.turn_requests() {
        assert_eq!(r.body["stream"], true);
        assert_eq!(r.body["stream_options"]["include_usage"], true);
    }
    // The job's tokens are the server's count, read by the gateway.
    let (input, output) = served_usage(&server, &script);
    assert_eq!(j["usage"]["input_tokens"], input);
    assert_eq!(j["usage"]["output_tokens"], output);
    let reqs: Vec<Value> = f
        .events(&out.job_id())
        .into_iter()
        .filter(|(t, _)| t == "model_request")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(reqs.len(), 5, "{reqs:?}");
    assert!(reqs.iter().all(|r| r["status"] == 200), "{reqs:?}");
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("ralph_rounds_total{")
            && l.contains("outcome=\"complete\"")
            && l.ends_with(" 1")),
        "{text}"
    );
}

/// The tool call that looks for the key everywhere a round can look and tries the server's
/// port directly, writing what it found into the workspace.
fn snoop(port: u16) -> String {
    format!(
        "env > seen-env.txt; \
         for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat \"$f\" 2>/dev/null; echo; done > seen-proc.txt; \
         grep -rls \"{k1}\"\"{k2}\" \"$HOME\" \"$TMPDIR\" /tmp . 2>/dev/null | grep -v '^./seen-' > seen-files.txt; \
         if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo CONNECTED; else echo REFUSED; fi > direct.txt",
        // The key in two halves: the command line itself must not hold it.
        k1 = &KEY[..8],
        k2 = &KEY[8..],
    )
}

fn files_with_key(dir: &Path) -> Vec<PathBuf> {
    files_containing(dir, KEY)
}

#[test]
fn a_json_only_server_works_and_the_key_never_enters_the_round() {
    key_never_enters("native");
}

#[test]
fn docker_a_json_only_server_works_and_the_key_never_enters_the_round() {
    if common::docker::ready("docker_a_json_only_server_works_and_the_key_never_enters_the_round") {
        key_never_enters("docker");
    }
}

fn key_never_enters(backend: &str) {
    let f = Fixture::new();
    failing_project(&f);
    let probe = ModelServer::start(Api::Chat, vec![]);
    let mut script = vec![Turn::shell(&snoop(probe.port()), u(100, 10))];
    script.extend(fixing_script());
    let server = ModelServer::start_with(
        Api::Chat,
        script.clone(),
        Options {
            json_only: true,
            ..Options::default()
        },
    );
    let out = builtin_run(&f, &server)
        .args(["--backend", backend])
        .args(["--api-key-env", KEY_ENV, "--verify", "sh test.sh"])
        .env(KEY_ENV, KEY)
        .output();
    out.expect_code(0);
    let j = out.json();
    let ctx = server.summary();
    assert_eq!(j["outcome"], "complete", "{ctx}");
    assert_eq!(j["verified"], true);
    assert_eq!(server.turn_requests().len(), 6, "{ctx}");
    let (input, output) = served_usage(&server, &script);
    assert_eq!(j["usage"]["input_tokens"], input);
    assert_eq!(j["usage"]["output_tokens"], output);
    // The key: not in the round's environment, /proc, files; the server's port unreachable.
    let env = f.read_ws("seen-env.txt");
    assert!(env.contains("RALPH_GATEWAY_URL=http://127.0.0.2:"), "{env}");
    assert!(!env.contains(KEY), "the key is in the round's environment");
    let proc = f.read_ws("seen-proc.txt");
    assert!(!proc.is_empty());
    assert!(!proc.contains(KEY), "the key is in /proc inside the round");
    assert_eq!(
        f.read_ws("seen-files.txt").trim(),
        "",
        "files holding the key"
    );
    assert_eq!(f.read_ws("direct.txt").trim(), "REFUSED");
    assert_eq!(probe.request_count(), 0);
    assert_eq!(files_with_key(&f.state), Vec::<PathBuf>::new());
    assert_eq!(files_with_key(&f.ws), Vec::<PathBuf>::new());
    // Every request upstream carried the key, added by the gateway.
    for r in server.turn_requests() {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
}

#[test]
fn a_local_server_gets_no_credential_unless_the_job_names_one() {
    let f = Fixture::new();
    let server = ModelServer::start(
        Api::Chat,
        vec![Turn::text(&report("complete", "nothing to do"), u(10, 5))],
    );
    // The default variable is set on the runner: it must not go to a server it was not for.
    let out = builtin_run(&f, &server).env("OPENAI_API_KEY", KEY).output();
    out.expect_code(0);
    let reqs = server.turn_requests();
    assert_eq!(reqs.len(), 1, "{}", server.summary());
    assert_eq!(reqs[0].header("authorization"), None);
    assert!(
        reqs[0]
            .headers
            .iter()
            .all(|(_, v)| !v.contains(KEY) && !v.contains("placeholder")),
        "{:?}",
        reqs[0].headers
    );
}

#[test]
fn a_malformed_tool_call_is_answered_with_an_error_the_model_sees() {
    let f = Fixture::new();
    let script = vec![
        Turn::calls(
            &[
                ("edit_file", r#"{"path": "calc.sh", "old": "#),
                ("write_file", r#"{"path": 7}"#),
                ("launch_missiles", r#"{}"#),
                (
                    "write_file",
                    r#"{"path":"ok.txt","content":"still works\n"}"#,
                ),
            ],
            u(100, 10),
        ),
        Turn::text(&report("complete", "wrote ok.txt"), u(200, 10)),
    ];
    let server = ModelServer::start(Api::Chat, script);
    let out = builtin_run(&f, &server)
        .args(["--verify", "grep -qx 'still works' ok.txt"])
        .output();
    out.expect_code(0);
    assert_eq!(out.json()["outcome"], "complete", "{}", server.summary());
    let reqs = server.turn_requests();
    assert_eq!(reqs.len(), 2);
    let results = last_results(&reqs[1]);
    assert_eq!(results.len(), 4, "{results:?}");
    for (i, what) in [(0, "arguments"), (1, "path"), (2, "launch_missiles")] {
        assert!(
            results[i].starts_with("error:") && results[i].contains(what),
            "result {i}: {:?}",
            results[i]
        );
    }
    assert!(!results[3].starts_with("error:"), "{:?}", results[3]);
    assert_eq!(f.read_ws("ok.txt"), "still works\n");
}

#[test]
fn a_429_then_a_503_are_retried_and_counted() {
    let f = Fixture::new();
    let script = vec![
        Turn::status(429, Some(1)),
        Turn::status(503, None),
        Turn::text(&report("complete", "after two retries"), u(50, 5)),
    ];
    let server = ModelServer::start(Api::Chat, script);
    let prom = f.root.path().join("retries.prom");
    let out = builtin_run(&f, &server)
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{}", server.summary());
    assert_eq!(
        j["rounds"], 1,
        "the retries were the agent's, not new rounds"
    );
    assert_eq!(server.turn_requests().len(), 3);
    let text = std::fs::read_to_string(&prom).unwrap();
    for reason in ["rate_limit", "server_error"] {
        assert!(
            text.lines().any(|l| l
                == format!("ralph_agent_request_retries_total{{reason=\"{reason}\"}} 1")),
            "{reason}: {text}"
        );
    }
    // The gateway journalled all three requests, the refusals with their status.
    let statuses: Vec<Value> = f
        .events(&out.job_id())
        .into_iter()
        .filter(|(t, _)| t == "model_request")
        .map(|(_, v)| v["status"].clone())
        .collect();
    assert_eq!(statuses, [json!(429), json!(503), json!(200)]);
}

#[test]
fn a_model_that_never_stops_calling_tools_fails_the_round_at_the_step_bound() {
    let f = Fixture::new();
    let script = vec![Turn::tool(
        "shell",
        json!({"command": "echo again >> steps.txt"}),
        u(10, 1),
    )];
    let server = ModelServer::start_with(
        Api::Chat,
        script,
        Options {
            repeat_last: true,
            ..Options::default()
        },
    );
    let out = builtin_run(&f, &server)
        .args(["--agent-max-steps", "3", "--max-rounds", "1"])
        .output();
    let j = out.json();
    assert_ne!(j["outcome"], "complete");
    assert_eq!(server.turn_requests().len(), 3, "{}", server.summary());
    assert_eq!(f.read_ws("steps.txt"), "again\nagain\nagain\n");
    let finished: Vec<Value> = f
        .events(&out.job_id())
        .into_iter()
        .filter(|(t, _)| t == "round_finished")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(finished.len(), 1);
    let message = finished[0]["result"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("all 3 steps") && message.contains("--agent-max-steps"),
        "{}",
        finished[0]
    );
}

#[test]
fn the_agent_needs_a_model_and_the_gateway_before_round_1() {
    let f = Fixture::new();
    let server = ModelServer::start(Api::Chat, vec![]);
    let out = Ralph::new()
        .args(["run", "--objective", "x", "--json", "--agent", "builtin"])
        .arg("--upstream")
        .arg(format!("{}/v1", server.url()))
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .output();
    out.expect_code(64);
    assert!(out.stderr.contains("--model"), "{}", out.stderr);
    let out = Ralph::new()
        .args(["run", "--objective", "x", "--json", "--agent", "builtin"])
        .args(["--model", "m", "--network", "full"])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .output();
    out.expect_code(64);
    assert!(out.stderr.contains("--network gateway"), "{}", out.stderr);
    // The step bound is the built-in agent's only.
    let out = Ralph::new()
        .args(["run", "--objective", "x", "--json", "--agent-cmd", "true"])
        .args(["--agent-max-steps", "3"])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .output();
    out.expect_code(64);
    assert!(
        out.stderr.contains("--agent-max-steps") && out.stderr.contains("builtin"),
        "{}",
        out.stderr
    );
    assert_eq!(server.request_count(), 0);
}

#[test]
fn the_service_runs_it_against_a_keyless_local_upstream() {
    let script = fixing_script();
    let model = ModelServer::start(Api::Chat, script);
    let s = common::server::Server::new(&format!(
        "[gateway.upstreams.local]\nurl = \"{}/v1\"\napi = \"openai\"\nno_key = true\n\n[limits]\nallowed_upstreams = [\"local\"]\n",
        model.url()
    ));
    let ws = s.workspace("ws");
    std::fs::write(ws.join("calc.sh"), "add() { echo $(( $1 - $2 )); }\n").unwrap();
    std::fs::write(
        ws.join("test.sh"),
        ". ./calc.sh\nif [ \"$(add 2 3)\" = 5 ]; then echo PASS; else echo \"FAIL: add 2 3 = $(add 2 3)\"; exit 1; fi\n",
    )
    .unwrap();
    let job = json!({
        "objective": "make sh test.sh pass", "workspace": ws, "agent": "builtin",
        "model": "scripted-model", "upstream": "local", "agent_max_steps": 10,
        "verify": "sh test.sh", "retry_backoff": "10ms", "mode": TEST_MODE,
    });
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job] }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    let j = s.wait_finished(&id, std::time::Duration::from_secs(120));
    assert_eq!(j["outcome"], "complete", "{j}\n{}", model.summary());
    assert_eq!(j["verified"], true, "{j}");
    assert_eq!(
        std::fs::read_to_string(ws.join("calc.sh")).unwrap(),
        "add() { echo $(( $1 + $2 )); }\n"
    );
    assert_the_model_saw_its_tools_work(&model);
    for r in model.turn_requests() {
        assert_eq!(
            r.header("authorization"),
            None,
            "no_key sends no credential"
        );
    }
}
