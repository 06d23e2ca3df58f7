//! The real `codex` and `claude` CLIs (installed by `.ci/setup`, pinned versions) against the
//! scripted model server, with no ralph involved: each runs one shell tool call in a temporary
//! directory, then answers; the test checks the file it wrote, what it sent the server (the key
//! on every request, the tool output on the second) and the usage its JSON output reports.

use crate::common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::agent_clis::require_agent_cli;
use common::model_server::{Api, ModelServer, Turn, Usage};
use serde_json::{Value, json};

/// How long one CLI run may take on a busy 2-core machine.
const DEADLINE: Duration = Duration::from_secs(180);

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` with `stdin` as input; kills it past [`DEADLINE`].
fn run(mut cmd: Command, stdin: &str) -> Run {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    writer.join().unwrap();
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    };
    assert!(
        status.is_some(),
        "timed out after {DEADLINE:?}\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    run
}

/// A command with a clean environment: only `PATH`, and `HOME` in the test's temp dir.
fn clean_command(bin: &Path, home: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("TMPDIR", home)
        .current_dir(cwd);
    cmd
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The script both CLIs run: a shell call writing `done.txt`, then a final message.
fn script(reasoning: u64) -> Vec<Turn> {
    vec![
        Turn::shell(
            "echo fixed > done.txt",
            Usage::new(1200, 1000, 40, reasoning),
        ),
        Turn::text(
            "Done: wrote done.txt.",
            Usage::new(1500, 1100, 20, reasoning / 2),
        ),
    ]
}

/// The script's usage summed over its turns.
fn script_total(script: &[Turn]) -> Usage {
    script.iter().fold(Usage::default(), |t, turn| {
        let u = turn.usage;
        Usage::new(
            t.input + u.input,
            t.cached + u.cached,
            t.output + u.output,
            t.reasoning + u.reasoning,
        )
    })
}

/// A temporary HOME and an empty working directory.
fn dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = (tmp.path().join("home"), tmp.path().join("ws"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    (tmp, home, ws)
}

#[test]
fn codex_runs_a_tool_call_against_the_scripted_server() {
    let Some(cli) = require_agent_cli("codex") else {
        return;
    };
    let script = script(16);
    let total = script_total(&script);
    let server = ModelServer::start(Api::Responses, script);
    let (_tmp, home, ws) = dirs();
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    // Any variable name works as the provider's env_key; OPENAI_API_KEY is not set at all.
    let key = "sk-test-codex-0123";
    let mut cmd = clean_command(&cli.bin, &home, &ws);
    cmd.env("CODEX_HOME", &codex_home)
        .env("RALPH_TEST_MODEL_KEY", key)
        .args(["exec", "--json", "--skip-git-repo-check"])
        .args(["-c", "model_provider=mock"])
        .args(["-c", "model_providers.mock.name=\"mock\""])
        .arg("-c")
        .arg(format!(
            "model_providers.mock.base_url=\"{}/v1\"",
            server.url()
        ))
        .args([
            "-c",
            "model_providers.mock.env_key=\"RALPH_TEST_MODEL_KEY\"",
        ])
        .args(["-c", "model_providers.mock.wire_api=\"responses\""])
        // No traffic but the model's: no analytics (ab.chatgpt.com), no curated plugin sync
        // (github.com, api.github.com, chatgpt.com).
        .args(["-c", "analytics.enabled=false"])
        .args(["-c", "features.plugins=false"])
        .args([
            "-m",
            "gpt-5",
            "--dangerously-bypass-approvals-and-sandbox",
            "-",
        ]);
    let out = run(cmd, "Write the word fixed into done.txt.");
    let ctx = format!(
        "requests:\n{}stdout:\n{}\nstderr:\n{}",
        server.summary(),
        out.stdout,
        out.stderr
    );
    assert_eq!(out.code, Some(0), "codex failed\n{ctx}");
    assert_eq!(
        std::fs::read_to_string(ws.join("done.txt")).unwrap(),
        "fixed\n",
        "{ctx}"
    );

    // Exactly one POST /v1/responses per turn (a custom provider: no WebSocket attempt, no
    // side requests), each with the key from the env_key variable.
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{ctx}");
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/v1/responses"),
            "{ctx}"
        );
        assert_eq!(r.turn, Some(i), "{ctx}");
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {key}").as_str())
        );
        assert_eq!(r.body["stream"], json!(true));
        assert_eq!(r.body["model"], json!("gpt-5"));
    }
    let output = requests[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .unwrap_or_else(|| panic!("no function_call_output in the second request\n{ctx}"));
    assert_eq!(output["call_id"], json!("call_0"));

    // The --json stream: the command ran, and turn.completed sums the turns' usage.
    let events = json_lines(&out.stdout);
    assert!(events.iter().any(|e| e["type"] == "item.completed"
        && e["item"]["type"] == "command_execution"
        && e["item"]["exit_code"] == 0));
    let done = events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap_or_else(|| panic!("no turn.completed\n{ctx}"));
    let u = &done["usage"];
    assert_eq!(u["input_tokens"], json!(total.input), "{ctx}");
    assert_eq!(u["cached_input_tokens"], json!(total.cached), "{ctx}");
    assert_eq!(u["output_tokens"], json!(total.output), "{ctx}");
    assert_eq!(
        u["reasoning_output_tokens"],
        json!(total.reasoning),
        "{ctx}"
    );
}

#[test]
fn claude_runs_a_tool_call_against_the_scripted_server() {
    let Some(cli) = require_agent_cli("claude") else {
        return;
    };
    let script = script(0);
    let total = script_total(&script);
    let server = ModelServer::start(Api::Messages, script);
    let (_tmp, home, ws) = dirs();
    let key = "sk-ant-test-claude-0123";
    let mut cmd = clean_command(&cli.bin, &home, &ws);
    cmd.env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", key)
        // claude refuses --dangerously-skip-permissions as root unless told it is sandboxed.
        .env("IS_SANDBOX", "1")
        // No `HEAD /api/hello` probe, no lookups of api.anthropic.com.
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .args(["-p", "--output-format", "stream-json", "--verbose"])
        .args([
            "--dangerously-skip-permissions",
            "--model",
            "claude-sonnet-4-5",
        ]);
    let out = run(cmd, "Write the word fixed into done.txt.");
    let ctx = format!(
        "requests:\n{}stdout:\n{}\nstderr:\n{}",
        server.summary(),
        out.stdout,
        out.stderr
    );
    assert_eq!(out.code, Some(0), "claude failed\n{ctx}");
    assert_eq!(
        std::fs::read_to_string(ws.join("done.txt")).unwrap(),
        "fixed\n",
        "{ctx}"
    );

    // Exactly one streamed POST /v1/messages?beta=true per turn, each with the key.
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{ctx}");
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/v1/messages"),
            "{ctx}"
        );
        assert_eq!(r.query, "beta=true");
        assert_eq!(r.turn, Some(i), "{ctx}");
        assert_eq!(r.header("x-api-key"), Some(key));
        assert_eq!(r.header("authorization"), None);
        assert_eq!(r.body["stream"], json!(true));
        assert_eq!(r.body["model"], json!("claude-sonnet-4-5"));
    }
    let last = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    let result = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result in the second request\n{ctx}"));
    assert_eq!(result["tool_use_id"], json!("toolu_0"));

    // The final `result` line: the text and the summed usage (Messages' input_tokens is the
    // uncached part, so the total input is input_tokens + cache_read_input_tokens).
    let events = json_lines(&out.stdout);
    let done = events
        .iter()
        .find(|e| e["type"] == "result")
        .unwrap_or_else(|| panic!("no result line\n{ctx}"));
    assert_eq!(done["result"], json!("Done: wrote done.txt."));
    let u = &done["usage"];
    let uncached = u["input_tokens"].as_u64().unwrap();
    let cached = u["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(
        (
            uncached + cached,
            cached,
            u["output_tokens"].as_u64().unwrap()
        ),
        (total.input, total.cached, total.output),
        "{ctx}"
    );
}
