//! The model gateway against a hostile round (issue 25, found by a red team with the real key):
//! an `--agent-cmd` script inside a real round sends what the red team sent, by raw sockets from
//! Python (so nothing re-spells the request on the way), and each test asserts the effect on the
//! host: the scripted upstream's request log, the job's token count and outcome, the journal's
//! size, the runner's memory.

use crate::common;

use std::time::{Duration, Instant};

use common::model_server::{Api, ModelServer, Options, SIDE_TOKENS, Turn, Usage};
use common::*;
use serde_json::Value;

const KEY: &str = "sk-hostile-e2e-4d1c";
const KEY_ENV: &str = "RALPH_HOSTILE_KEY";

/// Python helpers the agents use: `send(method, target, body=b"", headers="")` returns the
/// status of the gateway's answer, over a fresh connection, bytes exactly as given.
const PY_PRELUDE: &str = r#"
import os, socket, sys, threading, time
from urllib.parse import urlsplit
u = urlsplit(os.environ["RALPH_GATEWAY_URL"])
HOST, PORT = u.hostname, u.port
def send(method, target, body=b"", headers=""):
    s = socket.create_connection((HOST, PORT))
    head = f"{method} {target} HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n{headers}\r\n"
    try:
        s.sendall(head.encode("latin-1") + body)
    except OSError:
        pass
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError:
        pass
    s.close()
    try:
        return int(out.split(b" ")[1])
    except Exception:
        return 0
def report():
    with open(os.environ["RALPH_REPORT_FILE"], "w") as f:
        f.write('{"status":"complete","summary":"sent","evidence":["statuses.txt"],"nextSteps":[],"blocker":""}')
"#;

fn python_agent(f: &Fixture, name: &str, body: &str) -> std::path::PathBuf {
    f.agent(
        name,
        &format!("exec python3 - <<'PY'\n{PY_PRELUDE}\n{body}\nPY"),
    )
}

fn run_with(f: &Fixture, agent: &std::path::Path, server: &ModelServer) -> Ralph {
    f.run(agent)
        .args(["--upstream", &format!("{}/v1", server.url())])
        .args(["--api-key-env", KEY_ENV])
        .args(["--round-retries", "0", "--max-rounds", "1"])
        .env(KEY_ENV, KEY)
}

fn events_of(f: &Fixture, job: &str, kind: &str) -> Vec<Value> {
    f.events(job)
        .into_iter()
        .filter(|(t, _)| t == kind)
        .map(|(_, v)| v)
        .collect()
}

#[test]
fn red_team_paths_methods_and_bodies_from_a_round_never_reach_the_upstream() {
    let f = Fixture::new();
    let server = ModelServer::start(Api::Chat, vec![Turn::text("hi", Usage::new(1, 0, 1, 0))]);
    let agent = python_agent(
        &f,
        "hostile.sh",
        r#"
cases = [
    ("GET", "/v1/models/..\\files", b""),
    ("GET", "/v1/models/..\\..\\v1\\organization\\admin_api_keys", b""),
    ("GET", "/v1/models/%2e%2e/files", b""),
    ("GET", "/v1/files", b""),
    ("DELETE", "/v1/models/ft:gpt-4o-mini:org::abc123", b""),
    ("GET", "/v1/chat/completions?limit=100", b""),
    ("POST", "/v1/chat/completions?limit=100", b'{"model":"m"}'),
    ("POST", "/v1\\chat\\completions", b'{"model":"m","stream":true}'),
    ("POST", "/v1/chat/completions", b'{"model":"m","stream":true,"messages":[{"role":"user","content":"\\ud800"}]}'),
    ("POST", "/v1/chat/completions", b'{"model":"m","stream":"true","messages":[]}'),
]
with open("statuses.txt", "w") as out:
    for m, t, b in cases:
        out.write(f"{send(m, t, b)} {m} {t}\n")
report()
"#,
    );
    let out = run_with(&f, &agent, &server).output();
    out.expect_code(0);
    let statuses = f.read_ws("statuses.txt");
    let lines: Vec<&str> = statuses.lines().collect();
    assert_eq!(lines.len(), 10, "{statuses}");
    for l in &lines {
        let code: u16 = l.split(' ').next().unwrap().parse().unwrap();
        assert!((400..=405).contains(&code), "{l}");
    }
    assert_eq!(
        server.request_count(),
        0,
        "reached the upstream:\n{}",
        server.summary()
    );
    let j = out.json();
    assert_eq!(j["usage"]["input_tokens"], 0);
    let refused = events_of(&f, &out.job_id(), "model_request");
    assert_eq!(refused.len(), 10, "{refused:?}");
    assert!(
        refused.iter().all(|r| r["refusal"].is_string()),
        "{refused:?}"
    );
}

#[test]
fn completions_and_embeddings_count_against_max_tokens_and_end_budget_limited() {
    let f = Fixture::new();
    let server = ModelServer::start(Api::Chat, vec![Turn::text("hi", Usage::new(1, 0, 1, 0))]);
    // The red team's loop: 6 requests to each, 12,000 tokens at the upstream's count.
    let agent = python_agent(
        &f,
        "spend.sh",
        r#"
body = b'{"model":"m","prompt":"x","input":"x"}'
with open("statuses.txt", "w") as out:
    for i in range(6):
        for path in ("/v1/completions", "/v1/embeddings"):
            st = send("POST", path, body)
            out.write(f"{st} {path}\n")
            out.flush()
report()
"#,
    );
    let out = run_with(&f, &agent, &server)
        .args(["--max-tokens", "2500"])
        .output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(j["outcome"], "budget-limited", "{j}");
    assert_eq!(j["reason"], "max_tokens");
    let reached = server.request_count() as u64;
    assert_eq!(reached, 3, "{}", server.summary());
    let total = j["usage"]["input_tokens"].as_u64().unwrap()
        + j["usage"]["output_tokens"].as_u64().unwrap();
    assert_eq!(total, reached * SIDE_TOKENS, "{j}");
    let apis: Vec<String> = events_of(&f, &out.job_id(), "model_request")
        .iter()
        .filter(|r| r["status"] == 200)
        .map(|r| r["api"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(apis, vec!["completions", "embeddings", "completions"]);
}

#[test]
fn twenty_thousand_pipelined_refusals_on_one_connection_make_a_bounded_journal() {
    let f = Fixture::new();
    let server = ModelServer::start(Api::Chat, vec![Turn::text("hi", Usage::new(1, 0, 1, 0))]);
    let agent = python_agent(
        &f,
        "pipeline.sh",
        r#"
N = 20000
s = socket.create_connection((HOST, PORT))
got = {"n": 0}
MARK = b"HTTP/1.1 403"
def reader():
    tail = b""
    while got["n"] < N:
        d = s.recv(1 << 20)
        if not d:
            break
        data = tail + d
        got["n"] += data.count(MARK)
        cut = data.rfind(MARK)
        rest = data[cut + len(MARK):] if cut >= 0 else data
        tail = rest[-(len(MARK) - 1):]
t = threading.Thread(target=reader)
t.start()
s.sendall(b"GET /v1/files HTTP/1.1\r\nhost: gw\r\n\r\n" * N)
t.join(120)
with open("statuses.txt", "w") as out:
    out.write(str(got["n"]))
report()
"#,
    );
    let prom = f.root.path().join("m.prom");
    let out = run_with(&f, &agent, &server)
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(0);
    assert_eq!(
        f.read_ws("statuses.txt"),
        "20000",
        "every request was answered 403"
    );
    assert_eq!(server.request_count(), 0);
    let job = out.job_id();
    let single = events_of(&f, &job, "model_request");
    let summaries = events_of(&f, &job, "model_refusals");
    let events = f.events(&job).len();
    assert!(
        single.len() + summaries.len() <= 64,
        "{} model_request + {} model_refusals events",
        single.len(),
        summaries.len()
    );
    assert!(events < 100, "{events} journal events");
    let counted: u64 = single.len() as u64
        + summaries
            .iter()
            .map(|s| s["count"].as_u64().unwrap())
            .sum::<u64>();
    assert_eq!(counted, 20_000, "every refusal is counted");
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.lines()
            .any(|l| l == "ralph_model_refusals_total{reason=\"endpoint\"} 20000"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("ralph_model_requests_total{")
                && l.contains("status=\"403\"")
                && l.ends_with(" 20000")),
        "{text}"
    );
    // The journal and artifacts, not counting the runner's own files of every state dir whose
    // size has nothing to do with the job: its fixed disk reserve (`store::reserve`, 8 MiB
    // preallocated) and the socket scans' kept listings (`socket-listings`: the size of the
    // host's toolchains, 2.4 MB on the CI machines).
    let size_of = |name: &str| std::fs::metadata(f.state.join(name)).map_or(0, |m| m.len());
    let fixed = size_of(ralph_runner::store::reserve::RESERVE_FILE)
        + size_of(ralph_sandbox::sockets::LISTINGS_FILE);
    let size: u64 = walk_size(&f.state) - fixed;
    assert!(
        size < 2 << 20,
        "the state dir is {size} bytes besides its reserve and kept listings"
    );
}

fn walk_size(dir: &std::path::Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        n += if m.is_dir() {
            walk_size(&e.path())
        } else {
            m.len()
        };
    }
    n
}

/// VmHWM (peak resident set) of `pid` in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn near_cap_bodies_on_24_connections_keep_the_runner_s_memory_bounded() {
    let f = Fixture::new();
    let server = ModelServer::start_with(
        Api::Chat,
        vec![Turn::text("hi", Usage::new(1, 0, 1, 0))],
        Options {
            repeat_last: true,
            ..Options::default()
        },
    );
    // Phase 1, the red team's: 24 connections each sending 31 MiB of a declared 32 MiB body.
    // Phase 2: 24 connections each sending a whole body just under the cap (8 MiB).
    let agent = python_agent(
        &f,
        "flood.sh",
        r#"
def flood(declared, sent, out):
    prefix, suffix = b'{"model":"m","messages":[],"pad":"', b'"}'
    body = prefix + b"x" * (sent - len(prefix) - len(suffix)) + suffix
    results = []
    def one():
        s = socket.create_connection((HOST, PORT))
        head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-length: {declared}\r\nconnection: close\r\n\r\n"
        try:
            s.sendall(head.encode())
            s.sendall(body)
        except OSError:
            pass
        data = b""
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
        except OSError:
            pass
        try:
            results.append(int(data.split(b" ")[1]))
        except Exception:
            results.append(0)
    ts = [threading.Thread(target=one) for _ in range(24)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    out.write(" ".join(str(r) for r in sorted(results)) + "\n")
with open("statuses.txt", "w") as out:
    flood(32 << 20, 31 << 20, out)
    cap = 8 << 20
    flood(cap - 1, cap - 1, out)
open("sent.txt", "w").write("sent")
for _ in range(600):
    if os.path.exists("go.txt"):
        break
    time.sleep(0.1)
report()
"#,
    );
    let mut child = run_with(&f, &agent, &server).spawn();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut peak = 0;
    while !f.ws.join("sent.txt").exists() {
        assert!(
            Instant::now() < deadline,
            "the round never finished sending (peak RSS so far {} MiB)",
            peak >> 20
        );
        if let Ok(None) = child.try_wait() {
            peak = peak.max(peak_rss(pid));
        } else {
            panic!("ralph run ended before the round finished sending");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    peak = peak.max(peak_rss(pid));
    std::fs::write(f.ws.join("go.txt"), "go").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let statuses = f.read_ws("statuses.txt");
    let mut phases = statuses.lines();
    let first = phases.next().unwrap();
    assert!(first.split(' ').all(|s| s == "413"), "phase 1: {first}");
    let second: Vec<u16> = phases
        .next()
        .unwrap()
        .split(' ')
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(second.len(), 24);
    assert!(
        second.iter().all(|s| *s == 200 || *s == 503),
        "phase 2: {second:?}"
    );
    let ok = second.iter().filter(|s| **s == 200).count();
    assert!(ok >= 1, "phase 2: {second:?}");
    assert_eq!(server.request_count(), ok, "{}", server.summary());
    // The bound: the process's pool (2 bodies of 8 MiB, each held as read and as rebuilt) plus
    // the runner's own ~40 MiB; 200 MiB leaves room for allocator slack, and is far under the
    // 770 MiB the red team measured.
    assert!(
        peak < 200 << 20,
        "the runner's peak RSS was {} MiB",
        peak >> 20
    );
    eprintln!("peak RSS of ralph run: {} MiB", peak >> 20);
}

#[test]
fn under_ralph_serve_a_hostile_round_is_metered_and_its_refusals_are_bounded() {
    use common::server::{Server, job};
    let model = ModelServer::start(Api::Chat, vec![Turn::text("hi", Usage::new(1, 0, 1, 0))]);
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("mock.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let s = Server::new(&format!(
        "[gateway.upstreams.mock]\nurl = \"{}/v1\"\napi = \"openai\"\nkey_file = \"{}\"\n\n[limits]\nallowed_upstreams = [\"mock\"]\n",
        model.url(),
        key_file.display()
    ));
    let ws = s.workspace("ws");
    let agent = s.agent(
        "hostile.sh",
        &format!(
            "exec python3 - <<'PY'\n{PY_PRELUDE}\n{}\nPY",
            r#"
N = 2000
s = socket.create_connection((HOST, PORT))
s.sendall(b"GET /v1/models/..\\files HTTP/1.1\r\nhost: gw\r\n\r\n" * N)
got = b""
while got.count(b"HTTP/1.1 400") < N:
    d = s.recv(1 << 20)
    if not d:
        break
    got += d
s.close()
open("refused.txt", "w").write(str(got.count(b"HTTP/1.1 400")))
body = b'{"model":"m","prompt":"x","input":"x"}'
for i in range(6):
    for path in ("/v1/completions", "/v1/embeddings"):
        send("POST", path, body)
report()
"#
        ),
    );
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(
            &serde_json::json!({"job": [job(&ws, &agent, serde_json::json!({
                "upstream": "mock", "max_tokens": 2500, "max_rounds": 1, "round_retries": 0
            }))]})
            .to_string(),
        ),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    let j = s.wait_finished(&id, Duration::from_secs(120));
    assert_eq!(j["outcome"], "budget-limited", "{j}");
    assert_eq!(
        std::fs::read_to_string(ws.join("refused.txt")).unwrap(),
        "2000"
    );
    assert_eq!(model.request_count(), 3, "{}", model.summary());
    assert_eq!(
        j["usage"]["input_tokens"].as_u64().unwrap()
            + j["usage"]["output_tokens"].as_u64().unwrap(),
        3 * SIDE_TOKENS,
        "{j}"
    );
    let single = s.events_of(&id, "model_request");
    let summaries = s.events_of(&id, "model_refusals");
    assert!(
        single.len() + summaries.len() <= 48,
        "{} + {}",
        single.len(),
        summaries.len()
    );
    let refused: u64 = single
        .iter()
        .filter(|e| e["refusal"] == "not_canonical")
        .count() as u64
        + summaries
            .iter()
            .flat_map(|s| s["by"].as_array().unwrap().clone())
            .filter(|c| c["reason"] == "not_canonical")
            .map(|c| c["count"].as_u64().unwrap())
            .sum::<u64>();
    assert_eq!(refused, 2000);
}
