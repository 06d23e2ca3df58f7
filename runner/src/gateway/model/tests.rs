//! End-to-end tests of the model gateway against mock upstreams on loopback.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::gateway::sink::Api;
use crate::gateway::testkit::{DEADLINE, RecordingSink};
use crate::usage::UsageTotals;

#[derive(Clone, Debug)]
struct Seen {
    uri: String,
    headers: HeaderMap,
    body: Bytes,
}

type Reply = Arc<dyn Fn(&Seen) -> Response + Send + Sync>;

struct Mock {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Mock {
    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
    fn last(&self) -> Seen {
        self.seen.lock().unwrap().last().cloned().unwrap()
    }
}

async fn mock(reply: Reply) -> Mock {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let s2 = Arc::clone(&seen);
    let app = Router::new().fallback(move |req: Request| {
        let seen = Arc::clone(&s2);
        let reply = Arc::clone(&reply);
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let s = Seen {
                uri: parts.uri.to_string(),
                headers: parts.headers,
                body,
            };
            let r = reply(&s);
            seen.lock().unwrap().push(s);
            r
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Mock { addr, seen }
}

fn json_reply(status: u16, body: Value) -> Response {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn sse_reply(events: &[Value]) -> Response {
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    let mut r = Response::new(Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r
}

struct Gw {
    base: String,
    sink: Arc<RecordingSink>,
    stop: CancellationToken,
    client: reqwest::Client,
}

impl Drop for Gw {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn gateway_with(url: String, api: ApiFamily, limits: ModelLimits, budget: TokenBudget) -> Gw {
    let cfg = ModelGatewayConfig::new(
        Upstream {
            url,
            api,
            key: Secret::new("sk-real-key"),
        },
        limits,
        Arc::new(budget),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = cfg.base_url_at(listener.local_addr().unwrap());
    let sink = Arc::new(RecordingSink::default());
    let stop = CancellationToken::new();
    let sink_dyn: Arc<dyn crate::gateway::GatewaySink> = sink.clone();
    tokio::spawn(serve_model(listener, Arc::new(cfg), sink_dyn, stop.clone()));
    Gw {
        base,
        sink,
        stop,
        client: reqwest::Client::builder().no_proxy().build().unwrap(),
    }
}

async fn gateway(mock: &Mock, path: &str, api: ApiFamily) -> Gw {
    gateway_with(
        format!("http://{}{path}", mock.addr),
        api,
        ModelLimits::default(),
        TokenBudget::new(None, 0),
    )
    .await
}

fn responses_usage_json() -> Value {
    json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 30},
           "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 7}})
}

const RESPONSES_USAGE: UsageTotals = UsageTotals {
    input_tokens: 100,
    cached_input_tokens: 30,
    output_tokens: 20,
    reasoning_tokens: 7,
    cache_write_input_tokens: 0,
};

#[tokio::test]
async fn openai_upstream_sees_the_real_key_only_and_non_streamed_usage_is_read() {
    let m = mock(Arc::new(|_s: &Seen| {
        json_reply(
            200,
            json!({"model": "gpt-5-2025", "usage": responses_usage_json()}),
        )
    }))
    .await;
    let gw = gateway(&m, "/v1", ApiFamily::OpenAi).await;
    let resp = gw
        .client
        .post(format!("{}/responses", gw.base))
        .header("authorization", "Bearer ralph-placeholder")
        .header("x-api-key", "ralph-placeholder")
        .header("api-key", "ralph-placeholder")
        .header("cookie", "session=1")
        .header("openai-beta", "responses=v1")
        .json(&json!({"model": "gpt-5", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = m.last();
    assert_eq!(seen.uri, "/v1/responses");
    assert_eq!(seen.headers["authorization"], "Bearer sk-real-key");
    for h in ["x-api-key", "api-key", "cookie"] {
        assert!(seen.headers.get(h).is_none(), "{h} forwarded");
    }
    assert_eq!(seen.headers["openai-beta"], "responses=v1");
    assert_eq!(seen.headers["host"], m.addr.to_string().as_str());
    let body = resp.text().await.unwrap();
    assert!(body.contains("gpt-5-2025"));
    let reqs = gw.sink.requests(1).await;
    assert_eq!(reqs[0].api, Api::Responses);
    assert_eq!(reqs[0].model, "gpt-5-2025");
    assert_eq!(reqs[0].usage, RESPONSES_USAGE);
    assert!(!reqs[0].streamed);
    assert_eq!(reqs[0].error, None);
}

#[tokio::test]
async fn anthropic_upstream_gets_x_api_key_and_streamed_messages_usage_is_read() {
    let m = mock(Arc::new(|_s: &Seen| {
        sse_reply(&[
            json!({"type": "message_start", "message": {"model": "claude-sonnet-x",
                "usage": {"input_tokens": 12, "cache_read_input_tokens": 1000,
                          "cache_creation_input_tokens": 50, "output_tokens": 1}}}),
            json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}}),
            json!({"type": "message_delta", "usage": {"output_tokens": 77}}),
            json!({"type": "message_stop"}),
        ])
    }))
    .await;
    let gw = gateway(&m, "", ApiFamily::Anthropic).await;
    assert!(!gw.base.ends_with('/'));
    let resp = gw
        .client
        .post(format!("{}/v1/messages?beta=true", gw.base))
        .header("x-api-key", "ralph-placeholder")
        .header("authorization", "Bearer nope")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "x-1")
        .json(&json!({"model": "claude-sonnet", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("message_stop"));
    let seen = m.last();
    assert_eq!(seen.headers["x-api-key"], "sk-real-key");
    assert!(seen.headers.get("authorization").is_none());
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen.headers["anthropic-beta"], "x-1");
    let reqs = gw.sink.requests(1).await;
    assert_eq!(reqs[0].api, Api::Messages);
    assert_eq!(reqs[0].model, "claude-sonnet-x");
    assert!(reqs[0].streamed);
    assert_eq!(
        reqs[0].usage,
        UsageTotals {
            input_tokens: 1062,
            cached_input_tokens: 1000,
            output_tokens: 77,
            reasoning_tokens: 0,
            cache_write_input_tokens: 50,
        }
    );
}

#[tokio::test]
async fn sse_is_passed_through_before_the_upstream_finishes() {
    let go = Arc::new(Notify::new());
    let go2 = Arc::clone(&go);
    let m = mock(Arc::new(move |_s: &Seen| {
        let go = Arc::clone(&go2);
        let stream = futures_util::stream::unfold(0u8, move |step| {
            let go = Arc::clone(&go);
            async move {
                let ev = match step {
                    0 => json!({"type": "response.created", "response": {"model": "gpt-5"}}),
                    1 => {
                        go.notified().await;
                        json!({"type": "response.completed",
                               "response": {"model": "gpt-5", "usage": responses_usage_json()}})
                    }
                    _ => return None,
                };
                Some((
                    Ok::<_, std::io::Error>(Bytes::from(format!("data: {ev}\n\n"))),
                    step + 1,
                ))
            }
        });
        let mut r = Response::new(Body::from_stream(stream));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        r
    }))
    .await;
    let gw = gateway(&m, "/v1", ApiFamily::OpenAi).await;
    let mut resp = gw
        .client
        .post(format!("{}/responses", gw.base))
        .json(&json!({"model": "gpt-5", "stream": true}))
        .send()
        .await
        .unwrap();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("response.created") {
        let chunk = tokio::time::timeout(DEADLINE, resp.chunk())
            .await
            .expect("first event not passed through before the stream ended")
            .unwrap()
            .expect("stream ended before the first event");
        got.extend_from_slice(&chunk);
    }
    assert!(gw.sink.requests.lock().unwrap().is_empty());
    go.notify_one();
    while let Some(chunk) = tokio::time::timeout(DEADLINE, resp.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        got.extend_from_slice(&chunk);
    }
    assert!(String::from_utf8_lossy(&got).contains("response.completed"));
    let reqs = gw.sink.requests(1).await;
    assert_eq!(reqs[0].usage, RESPONSES_USAGE);
    assert!(reqs[0].streamed);
}

#[tokio::test]
async fn streamed_chat_gets_include_usage_and_its_usage_is_read() {
    let m = mock(Arc::new(|_s: &Seen| {
        sse_reply(&[
            json!({"model": "llama-3", "choices": [{"delta": {"content": "x"}}], "usage": null}),
            json!({"model": "llama-3", "choices": [], "usage": {"prompt_tokens": 40,
                "prompt_tokens_details": {"cached_tokens": 8}, "completion_tokens": 9,
                "completion_tokens_details": {"reasoning_tokens": 4}}}),
        ])
    }))
    .await;
    let gw = gateway(&m, "/v1", ApiFamily::OpenAi).await;
    let resp = gw
        .client
        .post(format!("{}/chat/completions", gw.base))
        .json(&json!({"model": "llama", "stream": true, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
    let sent: Value = serde_json::from_slice(&m.last().body).unwrap();
    assert_eq!(sent["stream_options"]["include_usage"], true);
    let reqs = gw.sink.requests(1).await;
    assert_eq!(reqs[0].api, Api::Chat);
    assert_eq!(reqs[0].model, "llama-3");
    assert_eq!(
        reqs[0].usage,
        UsageTotals {
            input_tokens: 40,
            cached_input_tokens: 8,
            output_tokens: 9,
            reasoning_tokens: 4,
            cache_write_input_tokens: 0,
        }
    );
}

#[tokio::test]
async fn streamed_responses_usage_is_read_from_response_completed() {
    let m = mock(Arc::new(|_s: &Seen| {
        sse_reply(&[
            json!({"type": "response.created", "response": {"model": "gpt-5"}}),
            json!({"type": "response.completed",
                   "response": {"model": "gpt-5-x", "usage": responses_usage_json()}}),
        ])
    }))
    .await;
    let gw = gateway(&m, "/v1", ApiFamily::OpenAi).await;
    let resp = gw
        .client
        .post(format!("{}/responses", gw.base))
        .json(&json!({"model": "gpt-5", "stream": true}))
        .send()
        .await
        .unwrap();
    resp.bytes().await.unwrap();
    let reqs = gw.sink.requests(1).await;
    assert_eq!(
        (reqs[0].model.as_str(), reqs[0].usage),
        ("gpt-5-x", RESPONSES_USAGE)
    );
}

#[tokio::test]
async fn error_statuses_headers_and_bodies_pass_through() {
    let m = mock(Arc::new(|s: &Seen| {
        if s.body.windows(7).any(|w| w == b"limited") {
            let mut r = json_reply(429, json!({"error": {"message": "slow down"}}));
            r.headers_mut()
                .insert("retry-after", HeaderValue::from_static("7"));
            r
        } else {
            let mut r = Response::new(Body::from("upstream overloaded, try later"));
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            r
        }
    }))
    .await;
    let gw = gateway(&m, "/v1", ApiFamily::OpenAi).await;
    let r = gw
        .client
        .post(format!("{}/responses", gw.base))
        .body(r#"{"case":"limited"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": {"message": "slow down"}})
    );
    let r = gw
        .client
        .post(format!("{}/responses", gw.base))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.text().await.unwrap(), "upstream overloaded, try later");
    let reqs = gw.sink.requests(2).await;
    let mut statuses: Vec<u16> = reqs.iter().map(|r| r.status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, vec![429, 503]);
}

#[tokio::test]
async fn the_budget_stops_forwarding_once_a_response_crosses_it() {
    let m = mock(Arc::new(|_s: &Seen| {
        json_reply(
            200,
            json!({"model": "gpt-5", "usage": responses_usage_json()}),
        )
    }))
    .await;
    let gw = gateway_with(
        format!("http://{}/v1", m.addr),
        ApiFamily::OpenAi,
        ModelLimits::default(),
        TokenBudget::new(Some(1000), 900),
    )
    .await;
    let first = gw
        .client
        .post(format!("{}/responses", gw.base))
        .json(&json!({"model": "gpt-5"}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    first.bytes().await.unwrap();
    gw.sink
        .wait_for("budget crossing", |s| !s.crossed.lock().unwrap().is_empty())
        .await;
    assert_eq!(*gw.sink.crossed.lock().unwrap(), vec![(1020, 1000)]);
    let second = gw
        .client
        .post(format!("{}/responses", gw.base))
        .json(&json!({"model": "gpt-5"}))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 400);
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["error"]["code"], "ralph_token_budget_exhausted");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(
        body["error"]["message"],
        "ralph: the job's token budget is spent (1020 of 1000 tokens)"
    );
    assert_eq!(m.count(), 1, "the refused request reached the upstream");
    assert_eq!(gw.sink.crossed.lock().unwrap().len(), 1);
    let reqs = gw.sink.requests(2).await;
    assert_eq!(reqs[1].status, 400);
}

#[tokio::test]
async fn anthropic_budget_refusal_is_in_the_messages_error_shape() {
    let m = mock(Arc::new(|_s: &Seen| json_reply(200, json!({})))).await;
    let gw = gateway_with(
        format!("http://{}", m.addr),
        ApiFamily::Anthropic,
        ModelLimits::default(),
        TokenBudget::new(Some(10), 1234),
    )
    .await;
    let r = gw
        .client
        .post(format!("{}/v1/messages", gw.base))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1234 of 10")
    );
    assert_eq!(m.count(), 0);
}

#[tokio::test]
async fn oversized_bodies_foreign_paths_and_upgrades_are_refused_locally() {
    let m = mock(Arc::new(|_s: &Seen| json_reply(200, json!({})))).await;
    let limits = ModelLimits {
        max_request_body: 1024,
        ..ModelLimits::default()
    };
    let gw = gateway_with(
        format!("http://{}/v1", m.addr),
        ApiFamily::OpenAi,
        limits,
        TokenBudget::new(None, 0),
    )
    .await;
    let r = gw
        .client
        .post(format!("{}/responses", gw.base))
        .body(vec![b'x'; 4096])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let root = gw.base.trim_end_matches("/v1");
    let r = gw
        .client
        .post(format!("{root}/other/responses"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/other/responses")
    );
    let r = gw
        .client
        .get(format!("{}/responses", gw.base))
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 426);
    // The key opens the whole account: only model endpoints are forwarded.
    for path in [
        "files",
        "fine_tuning/jobs",
        "batches",
        "organization/users",
        "responses/x/y/z",
    ] {
        let r = gw
            .client
            .post(format!("{}/{path}", gw.base))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            body["error"]["code"], "ralph_endpoint_not_allowed",
            "{path}"
        );
    }
    assert_eq!(m.count(), 0);
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_naming_it() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let gw = gateway_with(
        format!("http://{addr}/v1"),
        ApiFamily::OpenAi,
        ModelLimits::default(),
        TokenBudget::new(None, 0),
    )
    .await;
    let r = gw
        .client
        .post(format!("{}/responses", gw.base))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1"),
        "{body}"
    );
    let reqs = gw.sink.requests(1).await;
    assert_eq!(reqs[0].status, 502);
    assert!(reqs[0].error.is_some());
}

#[tokio::test]
async fn stop_cuts_an_open_stream_reports_it_and_ends_the_server() {
    let never = Arc::new(Notify::new());
    let n2 = Arc::clone(&never);
    let m = mock(Arc::new(move |_s: &Seen| {
        let never = Arc::clone(&n2);
        let stream = futures_util::stream::unfold(0u8, move |step| {
            let never = Arc::clone(&never);
            async move {
                if step > 0 {
                    never.notified().await;
                }
                Some((
                    Ok::<_, std::io::Error>(Bytes::from_static(b"data: {\"type\":\"x\"}\n\n")),
                    step + 1,
                ))
            }
        });
        let mut r = Response::new(Body::from_stream(stream));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        r
    }))
    .await;
    let cfg = ModelGatewayConfig::new(
        Upstream {
            url: format!("http://{}/v1", m.addr),
            api: ApiFamily::OpenAi,
            key: Secret::new("k"),
        },
        ModelLimits::default(),
        Arc::new(TokenBudget::new(None, 0)),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = cfg.base_url_at(listener.local_addr().unwrap());
    let sink = Arc::new(RecordingSink::default());
    let stop = CancellationToken::new();
    let sink_dyn: Arc<dyn crate::gateway::GatewaySink> = sink.clone();
    let server = tokio::spawn(serve_model(listener, Arc::new(cfg), sink_dyn, stop.clone()));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut resp = client
        .post(format!("{base}/responses"))
        .body("{}")
        .send()
        .await
        .unwrap();
    let first = tokio::time::timeout(DEADLINE, resp.chunk())
        .await
        .unwrap()
        .unwrap();
    assert!(first.is_some());
    stop.cancel();
    let reqs = sink.requests(1).await;
    assert_eq!(reqs[0].error.as_deref(), Some("the model gateway stopped"));
    drop(resp);
    tokio::time::timeout(DEADLINE, server)
        .await
        .expect("serve_model did not return after stop")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn stop_answers_a_request_still_waiting_for_upstream_headers() {
    let never = Arc::new(Notify::new());
    let arrived = Arc::new(Notify::new());
    let (n2, a2) = (Arc::clone(&never), Arc::clone(&arrived));
    let app = Router::new().fallback(move || {
        let (never, arrived) = (Arc::clone(&n2), Arc::clone(&a2));
        async move {
            arrived.notify_one();
            never.notified().await;
            "late"
        }
    });
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = up.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(up, app).await });
    let gw = gateway_with(
        format!("http://{up_addr}/v1"),
        ApiFamily::OpenAi,
        ModelLimits::default(),
        TokenBudget::new(None, 0),
    )
    .await;
    let pending = gw
        .client
        .post(format!("{}/responses", gw.base))
        .body("{}")
        .send();
    let (resp, ()) = tokio::join!(pending, async {
        tokio::time::timeout(DEADLINE, arrived.notified())
            .await
            .unwrap();
        gw.stop.cancel();
    });
    assert_eq!(resp.unwrap().status(), 503);
    let reqs = gw.sink.requests(1).await;
    assert_eq!(reqs[0].status, 503);
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_stream_is_still_metered() {
    let go = Arc::new(Notify::new());
    let go2 = Arc::clone(&go);
    let m = mock(Arc::new(move |_s: &Seen| {
        let go = Arc::clone(&go2);
        let stream = futures_util::stream::unfold(0u8, move |step| {
            let go = Arc::clone(&go);
            async move {
                let ev = match step {
                    0 => json!({"type": "response.created", "response": {"model": "gpt-5"}}),
                    1 => {
                        go.notified().await;
                        json!({"type": "response.completed",
                               "response": {"model": "gpt-5", "usage": responses_usage_json()}})
                    }
                    _ => return None,
                };
                Some((
                    Ok::<_, std::io::Error>(Bytes::from(format!("data: {ev}\n\n"))),
                    step + 1,
                ))
            }
        });
        let mut r = Response::new(Body::from_stream(stream));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        r
    }))
    .await;
    let budget = Arc::new(TokenBudget::new(None, 0));
    let cfg = ModelGatewayConfig::new(
        Upstream {
            url: format!("http://{}/v1", m.addr),
            api: ApiFamily::OpenAi,
            key: Secret::new("k"),
        },
        ModelLimits::default(),
        Arc::clone(&budget),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = cfg.base_url_at(listener.local_addr().unwrap());
    let sink = Arc::new(RecordingSink::default());
    let stop = CancellationToken::new();
    let sink_dyn: Arc<dyn crate::gateway::GatewaySink> = sink.clone();
    tokio::spawn(serve_model(listener, Arc::new(cfg), sink_dyn, stop.clone()));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut resp = client
        .post(format!("{base}/responses"))
        .json(&json!({"model": "gpt-5", "stream": true}))
        .send()
        .await
        .unwrap();
    let first = tokio::time::timeout(DEADLINE, resp.chunk())
        .await
        .unwrap()
        .unwrap();
    assert!(first.is_some());
    // The agent leaves; the upstream goes on and ends with its usage.
    drop(resp);
    drop(client);
    go.notify_one();
    let reqs = sink.requests(1).await;
    assert_eq!(reqs[0].usage, RESPONSES_USAGE, "{reqs:?}");
    assert!(
        reqs[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("client left")
    );
    assert_eq!(budget.used(), RESPONSES_USAGE.budget_tokens());
    stop.cancel();
}
