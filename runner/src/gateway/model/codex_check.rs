//! An opt-in check with the real `codex` CLI (SPEC §9, FIELD-NOTES "Real agent CLIs,
//! offline"): codex may first try a WebSocket, which the gateway answers 426; it must fall back
//! to `POST …/responses` (SSE) through the gateway. Run with
//! `RALPH_TEST_CODEX=/path/to/codex cargo test -p ralph --lib codex -- --ignored`
//! (`RALPH_TEST_CODEX_CONFIG='a=1;b=2'` adds `-c` overrides).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::gateway::sink::Api;
use crate::gateway::testkit::RecordingSink;

/// Method, URI, `authorization` and body length of a request the mock upstream saw.
type SeenRequest = (String, String, Option<String>, usize);

fn sse(events: &[serde_json::Value]) -> Response {
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect();
    let mut r = Response::new(Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r
}

/// Runs the CLI through a gateway (with a spent budget when `spent`); prints and returns what
/// happened.
async fn run(
    spent: bool,
) -> (
    std::process::Output,
    Vec<crate::gateway::ModelRequest>,
    Vec<SeenRequest>,
) {
    let Ok(codex) = std::env::var("RALPH_TEST_CODEX") else {
        panic!("set RALPH_TEST_CODEX to the codex binary");
    };
    let seen: Arc<Mutex<Vec<SeenRequest>>> = Arc::default();
    let s2 = Arc::clone(&seen);
    let app = Router::new().fallback(move |req: Request| {
        let seen = Arc::clone(&s2);
        async move {
            let auth = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let (method, uri) = (req.method().to_string(), req.uri().to_string());
            // The body's size: what `ModelLimits::max_request_body` is measured against.
            let len = axum::body::to_bytes(req.into_body(), usize::MAX)
                .await
                .map_or(0, |b| b.len());
            seen.lock().unwrap().push((method, uri, auth, len));
            sse(&[
                json!({"type": "response.created", "response": {"id": "resp_1"}}),
                json!({"type": "response.output_item.done", "output_index": 0,
                       "item": {"type": "message", "role": "assistant", "id": "msg_1",
                                "content": [{"type": "output_text", "text": "done"}]}}),
                json!({"type": "response.completed", "response": {"id": "resp_1",
                       "usage": {"input_tokens": 321, "input_tokens_details": {"cached_tokens": 0},
                                 "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 0},
                                 "total_tokens": 333}}}),
            ])
        }
    });
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = up.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(up, app).await });

    let cfg = ModelGatewayConfig::new(
        Upstream {
            url: format!("http://{up_addr}/v1"),
            api: ApiFamily::OpenAi,
            key: Secret::new("sk-real"),
        },
        ModelLimits::default(),
        Arc::new(if spent {
            TokenBudget::new(Some(10), 1234)
        } else {
            TokenBudget::new(None, 0)
        }),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = cfg.base_url_at(listener.local_addr().unwrap());
    let sink = Arc::new(RecordingSink::default());
    let stop = CancellationToken::new();
    let sink_dyn: Arc<dyn crate::gateway::GatewaySink> = sink.clone();
    tokio::spawn(serve_model(listener, Arc::new(cfg), sink_dyn, stop.clone()));

    let home = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(codex);
    cmd.args([
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-c",
        "model_provider=mock",
    ])
    .args(["-c", "model_providers.mock.name=\"mock\""])
    .arg("-c")
    .arg(format!("model_providers.mock.base_url=\"{base}\""))
    .args(["-c", "model_providers.mock.env_key=\"OPENAI_API_KEY\""])
    .args(["-c", "model_providers.mock.wire_api=\"responses\""])
    .args(["-m", "gpt-5", "say done"]);
    // Extra `-c` overrides, `;`-separated (e.g. to make codex try its WebSocket transport).
    for extra in std::env::var("RALPH_TEST_CODEX_CONFIG")
        .unwrap_or_default()
        .split(';')
        .filter(|s| !s.is_empty())
    {
        cmd.arg("-c").arg(extra);
    }
    cmd.current_dir(home.path())
        .env("HOME", home.path())
        .env("CODEX_HOME", home.path())
        .env("OPENAI_API_KEY", "ralph-placeholder")
        .env_remove("OPENAI_BASE_URL")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("codex did not finish")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reqs = sink.requests.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    eprintln!(
        "codex stdout:\n{stdout}\nstderr:\n{stderr}\nsink: {reqs:#?}\nupstream saw: {seen:#?}"
    );
    stop.cancel();
    (out, reqs, seen)
}

#[tokio::test]
#[ignore = "needs the real codex CLI in RALPH_TEST_CODEX"]
async fn real_codex_falls_back_to_http_through_the_gateway() {
    let (out, reqs, seen) = run(false).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "codex failed");
    assert!(stdout.contains("turn.completed"), "{stdout}");
    let posted: Vec<_> = reqs
        .iter()
        .filter(|r| r.api == Api::Responses && r.status == 200)
        .collect();
    assert!(!posted.is_empty());
    assert_eq!(posted[0].usage.input_tokens, 321);
    // A WebSocket attempt (only made when the provider allows it) is answered 426 once and
    // codex falls back at once instead of retrying the upgrade.
    assert!(
        reqs.iter().filter(|r| r.status == 426).count() <= 1,
        "{reqs:#?}"
    );
    assert!(reqs.iter().all(|r| r.status == 200 || r.status == 426));
    assert!(
        seen.iter()
            .all(|(_, _, a, _)| a.as_deref() == Some("Bearer sk-real"))
    );
    let largest = seen.iter().map(|s| s.3).max().unwrap_or(0);
    eprintln!("codex: largest request body {largest} bytes");
    assert!(largest < ModelLimits::default().max_request_body / 16);
}

#[tokio::test]
#[ignore = "needs the real codex CLI in RALPH_TEST_CODEX"]
async fn real_codex_shows_the_spent_budget_without_retrying() {
    let (out, reqs, seen) = run(true).await;
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(seen.is_empty(), "the upstream was reached: {seen:?}");
    assert!(all.contains("token budget is spent"), "{all}");
    assert!(
        reqs.iter().all(|r| r.status == 400 || r.status == 426),
        "{reqs:#?}"
    );
    assert_eq!(
        reqs.iter().filter(|r| r.status == 400).count(),
        1,
        "the refusal was retried: {reqs:#?}"
    );
}
