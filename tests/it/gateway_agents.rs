//! The model gateway end to end (SPEC §9) with the real `codex` and `claude` CLIs (installed by
//! `.ci/setup`, pinned) against the scripted model server on the host's loopback: each round
//! runs a tool call that edits the workspace and ends with a valid report and a passing verify.
//! The round never holds the key (environment, files, `/proc`), cannot reach the server
//! directly, every upstream request carries the real key, the job's tokens are the server's
//! usage, and a budget crossed after the first request stops the round before a second one
//! reaches the server.
//!
//! Each case runs on both backends (SPEC §5: `--network gateway` holds on docker as natively):
//! `native_*` and `docker_*` (the container's loopback-only namespace, the listeners made by
//! ralph's container init). `.ci/run` runs the native ones again as an unprivileged runner.

use crate::common;

use std::path::{Path, PathBuf};

use common::agent_clis::{AgentCli, require_agent_cli};
use common::model_server::{Api, ModelServer, Turn, Usage};
use common::*;
use serde_json::{Value, json};

/// The key the runner holds; it must never be seen inside a round.
const KEY: &str = "sk-e2e-SECRET-7f3a9c";
/// The runner-side variable holding it.
const KEY_ENV: &str = "RALPH_E2E_MODEL_KEY";

/// A directory holding `name` → the CLI's binary, to put on the runner's PATH.
fn bin_dir(f: &Fixture, name: &str, cli: &AgentCli) -> PathBuf {
    let bin = f.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&cli.bin, bin.join(name)).unwrap();
    bin
}

fn report(status: &str, summary: &str) -> String {
    json!({"status": status, "summary": summary, "evidence": ["done.txt written"],
           "nextSteps": [], "blocker": ""})
    .to_string()
}

/// The tool call that looks for the key everywhere a round can look, and tries the server's
/// port directly; it writes what it found into the workspace.
fn snoop(port: u16) -> String {
    format!(
        "env > seen-env.txt; \
         for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat \"$f\" 2>/dev/null; echo; done > seen-proc.txt; \
         k1='{k1}'; k2='{k2}'; grep -rls \"$k1$k2\" \"$HOME\" \"$TMPDIR\" /tmp . 2>/dev/null | grep -v '^./seen-' > seen-files.txt; \
         if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo CONNECTED; else echo REFUSED; fi > direct.txt; \
         echo fixed > done.txt",
        // The key in two halves: the command line itself must not hold it.
        k1 = &KEY[..8],
        k2 = &KEY[8..],
    )
}

/// The backend a case runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sb {
    Native,
    Docker,
}

impl Sb {
    fn name(self) -> &'static str {
        match self {
            Sb::Native => "native",
            Sb::Docker => "docker",
        }
    }
}

/// `native_NAME` and `docker_NAME` tests for each case `fn NAME(sb: Sb)` (docker: skipped only
/// where the docker tests may skip, with no engine and `CI` unset).
macro_rules! both_backends {
    ($($case:ident => $native:ident, $docker:ident;)*) => {
        $(
            #[test]
            fn $native() {
                $case(Sb::Native);
            }
            #[test]
            fn $docker() {
                if common::docker::ready(stringify!($docker)) {
                    $case(Sb::Docker);
                }
            }
        )*
    };
}

both_backends! {
    codex_through_the_gateway =>
        native_codex_through_the_gateway_edits_the_workspace_without_holding_the_key,
        docker_codex_through_the_gateway_edits_the_workspace_without_holding_the_key;
    claude_through_the_gateway =>
        native_claude_through_the_gateway_edits_the_workspace_without_holding_the_key,
        docker_claude_through_the_gateway_edits_the_workspace_without_holding_the_key;
    codex_budget =>
        native_a_budget_crossed_by_the_first_request_stops_the_round_before_a_second_reaches_the_server,
        docker_a_budget_crossed_by_the_first_request_stops_the_round_before_a_second_reaches_the_server;
    claude_budget =>
        native_a_budget_crossed_by_claude_s_first_request_stops_the_round_too,
        docker_a_budget_crossed_by_claude_s_first_request_stops_the_round_too;
    wire_counts =>
        native_the_wire_counts_and_a_different_count_from_the_agent_is_journalled,
        docker_the_wire_counts_and_a_different_count_from_the_agent_is_journalled;
    presets_beside_a_mirror =>
        native_the_presets_reach_the_gateway_beside_an_allowed_loopback_mirror,
        docker_the_presets_reach_the_gateway_beside_an_allowed_loopback_mirror;
}

fn gateway_run(f: &Fixture, sb: Sb, preset: &str, cli: &AgentCli, upstream: &str) -> Ralph {
    let bin = bin_dir(f, preset, cli);
    Ralph::new()
        .args(["run", "--objective", "write done.txt", "--json"])
        .args(["--backend", sb.name()])
        .args(["--agent", preset, "--upstream", upstream])
        .args(["--api-key-env", KEY_ENV, "--mode", TEST_MODE])
        .args(["--round-retries", "0", "--retry-backoff", "10ms"])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .arg("--read")
        .arg(&bin)
        .arg("--read")
        .arg(&cli.read_dir)
        .env(
            "PATH",
            &format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        )
        .env(KEY_ENV, KEY)
}

fn files_with_key(dir: &Path) -> Vec<PathBuf> {
    files_containing(dir, KEY)
}

/// What every gateway round must show on the host.
fn assert_key_stayed_outside(f: &Fixture, server: &ModelServer, auth_header: &str, auth: &str) {
    let ctx = server.summary();
    let env = f.read_ws("seen-env.txt");
    assert!(!env.is_empty(), "the tool call ran\n{ctx}");
    assert!(
        !env.contains(KEY),
        "the key is in the round's environment:\n{env}"
    );
    assert!(
        env.contains("ralph-gateway-placeholder"),
        "the CLI saw the placeholder:\n{env}"
    );
    assert!(env.contains("RALPH_GATEWAY_URL=http://127.0.0.2:"), "{env}");
    let proc = f.read_ws("seen-proc.txt");
    assert!(!proc.is_empty());
    assert!(!proc.contains(KEY), "the key is in /proc inside the round");
    assert_eq!(
        f.read_ws("seen-files.txt").trim(),
        "",
        "files holding the key"
    );
    assert_eq!(
        f.read_ws("direct.txt").trim(),
        "REFUSED",
        "the round reached the model server's port directly"
    );
    // Nothing the runner wrote for the job holds the key either (journal, artifacts, logs).
    assert_eq!(files_with_key(&f.state), Vec::<PathBuf>::new());
    assert_eq!(files_with_key(&f.ws), Vec::<PathBuf>::new());
    // Every request that reached the server carried the real key, and only it.
    let requests = server.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        if r.method != "POST" {
            continue;
        }
        assert_eq!(r.header(auth_header), Some(auth), "{ctx}");
        for (name, value) in &r.headers {
            assert!(
                !value.contains("ralph-gateway-placeholder"),
                "the placeholder reached the upstream in `{name}`"
            );
        }
    }
}

/// The usage the server reported: the script's usage of each turn it answered (a turn past
/// the script's end repeats its last text turn).
fn served_usage(server: &ModelServer, script: &[Turn]) -> Usage {
    let served: Vec<Turn> = server
        .turn_requests()
        .iter()
        .filter_map(|r| r.turn)
        .map(|i| script[i.min(script.len() - 1)].clone())
        .collect();
    usage_of(&served)
}

fn usage_of(turns: &[Turn]) -> Usage {
    turns.iter().fold(Usage::default(), |t, turn| {
        let u = turn.usage;
        Usage::new(
            t.input + u.input,
            t.cached + u.cached,
            t.output + u.output,
            t.reasoning + u.reasoning,
        )
    })
}

fn model_requests(f: &Fixture, job: &str) -> Vec<Value> {
    f.events_of(job, "model_request")
}

fn codex_through_the_gateway(sb: Sb) {
    let Some(cli) = require_agent_cli("codex") else {
        return;
    };
    let f = Fixture::new();
    let probe = ModelServer::start(Api::Responses, vec![]);
    let script = vec![
        Turn::shell(&snoop(probe.port()), Usage::new(1200, 1000, 40, 16)),
        Turn::text(
            &report("complete", "wrote done.txt"),
            Usage::new(1500, 1100, 20, 8),
        ),
    ];
    let server = ModelServer::start(Api::Responses, script.clone());
    let prom = f.root.path().join("codex.prom");
    let out = gateway_run(&f, sb, "codex", &cli, &format!("{}/v1", server.url()))
        .args(["--model", "gpt-5", "--verify", "grep -qx fixed done.txt"])
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{}", server.summary());
    assert_eq!(j["verified"], true);
    assert_eq!(f.read_ws("done.txt"), "fixed\n");
    assert_eq!(
        probe.request_count(),
        0,
        "the direct attempt reached nothing"
    );
    assert_key_stayed_outside(&f, &server, "authorization", &format!("Bearer {KEY}"));
    assert_eq!(server.turn_requests().len(), 2);
    // The job's tokens are the server's usage.
    let total = served_usage(&server, &script);
    assert_eq!(j["usage"]["input_tokens"], total.input);
    assert_eq!(j["usage"]["cached_input_tokens"], total.cached);
    assert_eq!(j["usage"]["output_tokens"], total.output);
    assert_eq!(j["usage"]["reasoning_tokens"], total.reasoning);
    let reqs = model_requests(&f, &out.job_id());
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert!(
        reqs.iter()
            .all(|r| r["api"] == "responses" && r["status"] == 200)
    );
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("ralph_model_requests_total{")
                && l.contains("api=\"responses\"")
                && l.contains("status=\"200\"")
                && l.ends_with(" 2")),
        "{text}"
    );
}

fn claude_through_the_gateway(sb: Sb) {
    let Some(cli) = require_agent_cli("claude") else {
        return;
    };
    let f = Fixture::new();
    let probe = ModelServer::start(Api::Messages, vec![]);
    let script = vec![
        Turn::shell(&snoop(probe.port()), Usage::new(900, 0, 30, 0)),
        Turn::text(
            &report("complete", "wrote done.txt"),
            Usage::new(1000, 0, 25, 0),
        ),
    ];
    let server = ModelServer::start(Api::Messages, script.clone());
    let out = gateway_run(&f, sb, "claude", &cli, &server.url())
        .args([
            "--model",
            "claude-sonnet-4-5",
            "--verify",
            "grep -qx fixed done.txt",
        ])
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{}", server.summary());
    assert_eq!(f.read_ws("done.txt"), "fixed\n");
    assert_eq!(probe.request_count(), 0);
    assert_key_stayed_outside(&f, &server, "x-api-key", KEY);
    let total = served_usage(&server, &script);
    assert_eq!(j["usage"]["input_tokens"], total.input);
    assert_eq!(j["usage"]["output_tokens"], total.output);
    let reqs = model_requests(&f, &out.job_id());
    assert!(
        reqs.iter()
            .any(|r| r["api"] == "messages" && r["status"] == 200)
    );
}

fn codex_budget(sb: Sb) {
    budget_crossed_by_the_first_request(sb, "codex", Api::Responses, "/v1");
}

fn claude_budget(sb: Sb) {
    budget_crossed_by_the_first_request(sb, "claude", Api::Messages, "");
}

fn budget_crossed_by_the_first_request(sb: Sb, preset: &str, api: Api, path: &str) {
    let Some(cli) = require_agent_cli(preset) else {
        return;
    };
    let f = Fixture::new();
    // The first answer costs 5,000 tokens against a budget of 1,000; the CLI would go on to a
    // second request to report the tool's output.
    let script = vec![
        Turn::shell("echo one >> calls.txt", Usage::new(4000, 0, 1000, 0)),
        Turn::shell("echo two >> calls.txt", Usage::new(10, 0, 10, 0)),
        Turn::text(&report("complete", "never"), Usage::new(10, 0, 10, 0)),
    ];
    let server = ModelServer::start(api, script);
    let out = gateway_run(&f, sb, preset, &cli, &format!("{}{path}", server.url()))
        .args(["--max-tokens", "1000", "--round-retries", "2"])
        .output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(j["outcome"], "budget-limited");
    assert_eq!(j["reason"], "max_tokens");
    assert_eq!(
        server.turn_requests().len(),
        1,
        "a second request reached the server:\n{}",
        server.summary()
    );
    assert_eq!(j["usage"]["input_tokens"], 4000);
    assert!(!f.read_ws("calls.txt").contains("two"));
}

#[test]
fn a_preset_without_its_key_is_refused_before_round_one_with_the_fix() {
    let Some(cli) = require_agent_cli("codex") else {
        return;
    };
    let f = Fixture::new();
    let server = ModelServer::start(Api::Responses, vec![]);
    let bin = bin_dir(&f, "codex", &cli);
    let out = Ralph::new()
        .args(["run", "--objective", "x", "--json", "--agent", "codex"])
        .args(["--upstream", &format!("{}/v1", server.url())])
        .args(["--api-key-env", "RALPH_E2E_NO_SUCH_KEY"])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .arg("--read")
        .arg(&bin)
        .arg("--read")
        .arg(&cli.read_dir)
        .env("PATH", &format!("{}:/usr/bin:/bin", bin.display()))
        .output();
    out.expect_code(64);
    let msg = out.json()["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("RALPH_E2E_NO_SUCH_KEY"), "{msg}");
    assert_eq!(server.request_count(), 0);
    assert_eq!(out.json()["rounds"], 0);

    // The CLI hidden from the sandbox: the message names the --read that fixes it.
    let out = Ralph::new()
        .args(["run", "--objective", "x", "--json", "--agent", "codex"])
        .args(["--upstream", &format!("{}/v1", server.url())])
        .args(["--api-key-env", KEY_ENV])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .env("PATH", &format!("{}:/usr/bin:/bin", bin.display()))
        .env(KEY_ENV, KEY)
        .output();
    out.expect_code(64);
    let msg = out.json()["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("--read"), "{msg}");
    assert!(msg.contains("node_modules"), "{msg}");
}

fn wire_counts(sb: Sb) {
    let f = Fixture::new();
    let server = ModelServer::start(
        Api::Chat,
        vec![Turn::text("hi", Usage::new(700, 200, 50, 0))],
    );
    // A command agent on the gateway that claims far fewer tokens than it spent (Python's
    // urllib: the image of the docker tests has no curl).
    let agent = f.agent(
        "ask.sh",
        r#"python3 - > answer.txt <<'PY'
import json, os, urllib.request
body = json.dumps({"model": "m-wire", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
req = urllib.request.Request(os.environ["RALPH_GATEWAY_URL"] + "/chat/completions", data=body,
                             headers={"content-type": "application/json"})
print(urllib.request.urlopen(req, timeout=30).read().decode())
PY
echo '{"model":"m-wire","input_tokens":7,"output_tokens":1}' >> "$RALPH_USAGE_FILE"
echo '{"status":"complete","summary":"asked","evidence":["a"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE""#,
    );
    let out = f
        .run(&agent)
        .args(["--upstream", &format!("{}/v1", server.url())])
        .args(["--api-key-env", KEY_ENV, "--backend", sb.name()])
        .env(KEY_ENV, KEY)
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["usage"]["input_tokens"], 700, "{j}");
    assert_eq!(j["usage"]["output_tokens"], 50, "{j}");
    // The gateway asked for usage on the streamed Chat request.
    let body = &server.requests()[0].body;
    assert_eq!(body["stream_options"]["include_usage"], true, "{body}");
    let events = f.events(&out.job_id());
    let mismatch: Vec<_> = events
        .iter()
        .filter(|(t, _)| t == "usage_mismatch")
        .collect();
    assert_eq!(mismatch.len(), 1, "{events:?}");
    assert_eq!(mismatch[0].1["gateway"]["input_tokens"], 700);
    assert_eq!(mismatch[0].1["agent"]["input_tokens"], 7);
}

/// Issue 26: beside an allowed loopback mirror (`--allow-host 127.0.0.1:PORT`, a package index
/// on the runner host), `NO_PROXY` names only the gateway's own address (`127.0.0.2`): codex and
/// claude still reach the model gateway directly — no egress decision names it — and the round's
/// tool call reaches the mirror on the host's loopback through the egress proxy, with no
/// `--noproxy` of its own.
fn presets_beside_a_mirror(sb: Sb) {
    for (preset, api, model) in [
        ("codex", Api::Responses, "gpt-5"),
        ("claude", Api::Messages, "claude-sonnet-4-5"),
    ] {
        let Some(cli) = require_agent_cli(preset) else {
            return;
        };
        let f = Fixture::new();
        let mirror = ModelServer::start(Api::Chat, vec![]);
        // Natively with curl; the image of the docker tests has Python's urllib (no curl).
        let client = match sb {
            Sb::Native => format!(
                "curl -s -o /dev/null -w '%{{http_code}}' --max-time 20 http://127.0.0.1:{}/simple/",
                mirror.port()
            ),
            Sb::Docker => format!(
                "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:{}/simple/\", timeout=20).status)'",
                mirror.port()
            ),
        };
        let tool = format!(
            "{client} > mirror.txt; \
             env | grep -i '^no_proxy=' | LC_ALL=C sort > no-proxy.txt; echo fixed > done.txt"
        );
        let script = vec![
            Turn::shell(&tool, Usage::new(100, 0, 10, 0)),
            Turn::text(
                &report("complete", "asked the mirror"),
                Usage::new(120, 0, 10, 0),
            ),
        ];
        let server = ModelServer::start(api, script);
        let upstream = if preset == "codex" {
            format!("{}/v1", server.url())
        } else {
            server.url()
        };
        let out = gateway_run(&f, sb, preset, &cli, &upstream)
            .args(["--model", model, "--verify", "grep -qx fixed done.txt"])
            .args(["--allow-host", &format!("127.0.0.1:{}", mirror.port())])
            .output();
        out.expect_code(0);
        let j = out.json();
        assert_eq!(j["outcome"], "complete", "{preset}: {}", server.summary());
        assert_eq!(
            f.read_ws("no-proxy.txt"),
            "NO_PROXY=127.0.0.2,localhost,::1\nno_proxy=127.0.0.2,localhost,::1\n",
            "{preset}"
        );
        // The mirror answered the tool call (through the proxy: the round's own 127.0.0.1 is
        // empty), and saw it.
        assert_ne!(f.read_ws("mirror.txt"), "000", "{preset}");
        let paths: Vec<String> = mirror.requests().into_iter().map(|r| r.path).collect();
        assert_eq!(paths, ["/simple/"], "{preset}");
        // The model requests went to the gateway directly: the proxy decided about the mirror
        // only.
        let egress = f.events_of(&out.job_id(), "egress");
        assert!(
            !egress.is_empty()
                && egress.iter().all(|e| e["host"] == "127.0.0.1"
                    && e["port"] == mirror.port()
                    && e["allowed"] == true),
            "{preset}: {egress:?}"
        );
        assert!(
            server.turn_requests().len() >= 2,
            "{preset}: {}",
            server.summary()
        );
    }
}
