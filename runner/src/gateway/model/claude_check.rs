//! An opt-in check with the real Claude Code CLI (FIELD-NOTES "Real agent CLIs, offline"):
//! `ANTHROPIC_BASE_URL` set to the gateway, a placeholder key; the upstream must see the real
//! key as `x-api-key` and the streamed Messages usage must be read. Run with
//! `RALPH_TEST_CLAUDE=/path/to/node_modules/.bin/claude cargo test -p ralph --lib claude_check
//! -- --ignored`.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::gateway::sink::Api;
use crate::gateway::testkit::RecordingSink;

/// Path, `x-api-key` and body length of a request the mock upstream saw.
type SeenRequest = (String, Option<String>, usize);

fn reply(streamed: bool) -> Response {
    let usage = json!({"input_tokens": 20, "cache_read_input_tokens": 300,
                       "cache_creation_input_tokens": 4, "output_tokens": 1});
    let message = json!({"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-mock-1", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": usage});
    if !streamed {
        let mut m = message;
        m["content"] = json!([{"type": "text", "text": "done"}]);
        m["stop_reason"] = json!("end_turn");
        let mut r = Response::new(Body::from(m.to_string()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return r;
    }
    let events = [
        json!({"type": "message_start", "message": message}),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": "done"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": 6}}),
        json!({"type": "message_stop"}),
    ];
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
    let Ok(claude) = std::env::var("RALPH_TEST_CLAUDE") else {
        panic!("set RALPH_TEST_CLAUDE to the claude CLI");
    };
    let seen: Arc<Mutex<Vec<SeenRequest>>> = Arc::default();
    let s2 = Arc::clone(&seen);
    let app = Router::new().fallback(move |req: Request| {
        let seen = Arc::clone(&s2);
        async move {
            let key = req
                .headers()
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let uri = req.uri().to_string();
            let body = axum::body::to_bytes(req.into_body(), usize::MAX)
                .await
                .unwrap_or_default();
            // The body's size: what `ModelLimits::max_request_body` is measured against.
            seen.lock().unwrap().push((uri, key, body.len()));
            let streamed =
                serde_json::from_slice::<Value>(&body).is_ok_and(|v| v["stream"] == json!(true));
            reply(streamed)
        }
    });
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = up.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(up, app).await });

    let cfg = ModelGatewayConfig::new(
        Upstream {
            url: format!("http://{up_addr}"),
            api: ApiFamily::Anthropic,
            key: Secret::new("sk-ant-real"),
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
    let mut cmd = tokio::process::Command::new(claude);
    cmd.args(["-p", "say done", "--output-format", "json"])
        .current_dir(home.path())
        .env("HOME", home.path())
        .env("ANTHROPIC_BASE_URL", &base)
        .env("ANTHROPIC_API_KEY", "ralph-placeholder")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("claude did not finish")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reqs = sink.requests.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    eprintln!(
        "claude stdout:\n{stdout}\nstderr:\n{stderr}\nsink: {reqs:#?}\nupstream saw: {seen:#?}"
    );
    stop.cancel();
    (out, reqs, seen)
}

#[tokio::test]
#[ignore = "needs the real claude CLI in RALPH_TEST_CLAUDE"]
async fn real_claude_code_talks_through_the_gateway() {
    let (out, reqs, seen) = run(false).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "claude failed");
    assert!(stdout.contains("done"), "{stdout}");
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|(_, k, _)| k.as_deref() == Some("sk-ant-real"))
    );
    let largest = seen.iter().map(|s| s.2).max().unwrap_or(0);
    eprintln!("claude: largest request body {largest} bytes");
    assert!(largest < ModelLimits::default().max_request_body / 16);
    let streamed: Vec<_> = reqs
        .iter()
        .filter(|r| r.api == Api::Messages && r.streamed && r.status == 200)
        .collect();
    assert!(!streamed.is_empty(), "{reqs:#?}");
    assert_eq!(streamed[0].usage.input_tokens, 324);
    assert_eq!(streamed[0].usage.cached_input_tokens, 300);
    assert_eq!(streamed[0].usage.output_tokens, 6);
}

#[tokio::test]
#[ignore = "needs the real claude CLI in RALPH_TEST_CLAUDE"]
async fn real_claude_shows_the_spent_budget_and_gives_up() {
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
    // Claude Code 2.1.328 re-sends a refused request a few times within ~0.3 s (6 observed:
    // 3 with its first tool set, 3 with the full one) before it gives up and shows the message;
    // with 402 `billing_error` it sent one. Bounded either way, and none reaches the upstream.
    let refused = reqs.iter().filter(|r| r.status == 400).count();
    assert!((1..=8).contains(&refused), "{refused} refusals: {reqs:#?}");
}
