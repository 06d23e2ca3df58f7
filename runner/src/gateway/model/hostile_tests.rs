//! Regression tests of issue 25 (the red team's findings with the real key): each sends the
//! hostile request through the real gateway to a recording upstream that logs the request line
//! byte for byte, and asserts the effect: nothing reached it, or exactly the canonical request;
//! the budget counted what was forwarded; the bounds held.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::gateway::sink::{Api, Refusal};
use crate::gateway::testkit::{DEADLINE, RAW_USAGE_IN, RAW_USAGE_OUT, RawUpstream, RecordingSink};

pub(super) struct Gw {
    pub addr: std::net::SocketAddr,
    pub sink: Arc<RecordingSink>,
    pub budget: Arc<TokenBudget>,
    stop: CancellationToken,
}

impl Drop for Gw {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A gateway for `family` in front of `up` (`/v1` for OpenAI, no path for Anthropic).
pub(super) async fn gateway(
    up: &RawUpstream,
    family: ApiFamily,
    limits: ModelLimits,
    budget: TokenBudget,
    shared: Option<Arc<BytePool>>,
) -> Gw {
    let path = if family == ApiFamily::OpenAi {
        "/v1"
    } else {
        ""
    };
    let budget = Arc::new(budget);
    let mut cfg = ModelGatewayConfig::new(
        Upstream {
            url: format!("http://{}{path}", up.addr),
            api: family,
            key: Secret::new("sk-real-key"),
        },
        limits,
        Arc::clone(&budget),
    )
    .unwrap();
    if let Some(p) = shared {
        cfg = cfg.with_shared_pool(p);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = Arc::new(RecordingSink::default());
    let stop = CancellationToken::new();
    let sink_dyn: Arc<dyn crate::gateway::GatewaySink> = sink.clone();
    tokio::spawn(serve_model(listener, Arc::new(cfg), sink_dyn, stop.clone()));
    Gw {
        addr,
        sink,
        budget,
        stop,
    }
}

/// Sends `method target` with `body` as raw bytes (nothing re-spelt on the way) and returns the
/// status and the body of the answer.
pub(super) async fn raw(
    addr: std::net::SocketAddr,
    method: &str,
    target: &str,
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer placeholder\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    // A refusal may come (and the connection close) before the body is sent.
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let mut chunk = [0u8; 16384];
    let read = async {
        // A reset after the answer (unread body bytes) ends the read like EOF.
        while let Ok(n) = s.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("no answer");
    parse_answer(&out)
}

fn parse_answer(out: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn openai_limits() -> ModelLimits {
    ModelLimits::default()
}

#[tokio::test]
async fn red_team_backslash_and_dot_paths_never_reach_the_upstream() {
    let up = RawUpstream::start().await;
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        openai_limits(),
        TokenBudget::new(None, 0),
        None,
    )
    .await;
    for target in [
        "/v1/models/..\\files",
        "/v1/models/..\\..\\v1\\organization\\admin_api_keys",
        "/v1/models/%2e%2e/files",
        "/v1/models/%2E%2E%2Ffiles",
        "/v1/models/..%5cfiles",
        "/v1/models/../files",
        "/v1/models/./../files",
        "/v1//files",
        "/v1/Models",
        "/v1/models.",
        "/v1/models;/../files",
        "/v1/files",
        "/v1/organization/admin_api_keys",
        "/v1/responses/resp_1",
        "http://api.openai.com/v1/files",
    ] {
        let (status, body) = raw(gw.addr, "GET", target, b"").await;
        assert!(
            [400, 403, 404].contains(&status),
            "{target}: {status} {body}"
        );
        assert!(body.contains("\"error\""), "{target}: {body}");
    }
    assert!(
        up.requests().is_empty(),
        "reached the upstream: {:?}",
        up.requests()
    );
    let refused = gw.sink.requests(15).await;
    assert!(refused.iter().all(|r| r.refusal.is_some()), "{refused:?}");
    // What is canonical reaches it byte for byte, with the real key.
    let (status, _) = raw(gw.addr, "GET", "/v1/models/ft:gpt-4o-mini:org::abc1", b"").await;
    assert_eq!(status, 200);
    let seen = up.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].target, "/v1/models/ft:gpt-4o-mini:org::abc1");
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-real-key"));
}

#[tokio::test]
async fn deleting_a_model_and_listing_stored_completions_are_refused() {
    let up = RawUpstream::start().await;
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        openai_limits(),
        TokenBudget::new(None, 0),
        None,
    )
    .await;
    let (status, body) = raw(gw.addr, "DELETE", "/v1/models/ft:gpt-4o:org::x1", b"").await;
    assert_eq!(status, 405, "{body}");
    assert!(body.contains("ralph_method_not_allowed"), "{body}");
    let (status, _) = raw(gw.addr, "GET", "/v1/chat/completions?limit=100", b"").await;
    assert_eq!(status, 405);
    for q in ["limit=100", "after=x", "order=desc", "trace=1"] {
        let (status, body) = raw(
            gw.addr,
            "POST",
            &format!("/v1/chat/completions?{q}"),
            br#"{"model":"m"}"#,
        )
        .await;
        assert_eq!(status, 400, "{q}: {body}");
        assert!(body.contains("ralph_query_not_allowed"), "{body}");
    }
    for (m, t) in [
        ("DELETE", "/v1/responses"),
        ("PUT", "/v1/responses"),
        ("HEAD", "/v1/models"),
    ] {
        let (status, _) = raw(gw.addr, m, t, b"").await;
        assert_eq!(status, 405, "{m} {t}");
    }
    assert!(up.requests().is_empty(), "{:?}", up.requests());
}

#[tokio::test]
async fn completions_and_embeddings_are_metered_and_the_budget_stops_them() {
    let up = RawUpstream::start().await;
    let per = RAW_USAGE_IN + RAW_USAGE_OUT;
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        openai_limits(),
        TokenBudget::new(Some(2 * per + 5), 0),
        None,
    )
    .await;
    let mut statuses = Vec::new();
    for i in 0..6 {
        let target = if i % 2 == 0 {
            "/v1/completions"
        } else {
            "/v1/embeddings"
        };
        let (status, _) = raw(gw.addr, "POST", target, br#"{"model":"m","input":"x"}"#).await;
        statuses.push(status);
        // Each answer is counted before the next request is judged.
        gw.sink
            .wait_for("the request's report", |s| {
                s.requests.lock().unwrap().len() > i
            })
            .await;
    }
    assert_eq!(statuses, vec![200, 200, 200, 400, 400, 400]);
    assert_eq!(
        up.requests().len(),
        3,
        "requests beyond the budget forwarded"
    );
    assert_eq!(gw.budget.used(), 3 * per);
    let reqs = gw.sink.requests(6).await;
    assert_eq!(reqs[0].api, Api::Completions);
    assert_eq!(reqs[1].api, Api::Embeddings);
    assert_eq!(reqs[1].usage.input_tokens, per);
    assert_eq!(reqs[3].refusal, Some(Refusal::Budget));
    assert_eq!(gw.sink.crossed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_lone_surrogate_or_a_string_stream_is_refused_and_never_forwarded() {
    let up = RawUpstream::start().await;
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        openai_limits(),
        TokenBudget::new(Some(1000), 0),
        None,
    )
    .await;
    for (body, names) in [
        (
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"\ud800"}]}"#,
            "hex escape",
        ),
        (r#"{"model":"m","stream":"true","messages":[]}"#, "`stream`"),
        (r#"{"model":"m","stream":1}"#, "`stream`"),
        (r#"{"model":"m","stream":false,"stream":true}"#, "twice"),
        ("[]", "JSON object"),
        ("", "not valid JSON"),
    ] {
        let (status, resp) = raw(gw.addr, "POST", "/v1/chat/completions", body.as_bytes()).await;
        assert_eq!(status, 400, "{body}: {resp}");
        assert!(resp.contains(names), "{body}: {resp}");
        assert!(resp.contains("ralph_bad_request_body"), "{resp}");
    }
    let (status, _) = raw(
        gw.addr,
        "POST",
        "/v1/responses",
        br#"{"model":"m","background":true}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert!(up.requests().is_empty(), "{:?}", up.requests());
}

#[tokio::test]
async fn streamed_chat_and_completions_are_rebuilt_with_include_usage_and_counted() {
    let up = RawUpstream::start().await;
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        openai_limits(),
        TokenBudget::new(None, 0),
        None,
    )
    .await;
    for target in ["/v1/chat/completions", "/v1/completions"] {
        let (status, _) = raw(
            gw.addr,
            "POST",
            target,
            br#"{"model":"m", "str\u0065am": true, "stream_options": {"include_usage": false}}"#,
        )
        .await;
        assert_eq!(status, 200);
    }
    let seen = up.requests();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(
            std::str::from_utf8(&s.body).unwrap(),
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#
        );
        assert_eq!(s.header("content-length"), Some("67"));
    }
    gw.sink.requests(2).await;
    assert_eq!(gw.budget.used(), 2 * (RAW_USAGE_IN + RAW_USAGE_OUT));
}

#[tokio::test]
async fn claude_s_beta_query_passes_and_nothing_else_does() {
    let up = RawUpstream::start().await;
    let gw = gateway(
        &up,
        ApiFamily::Anthropic,
        openai_limits(),
        TokenBudget::new(None, 0),
        None,
    )
    .await;
    let (status, _) = raw(
        gw.addr,
        "POST",
        "/v1/messages?beta=true",
        br#"{"model":"c","stream":true}"#,
    )
    .await;
    assert_eq!(status, 200);
    for t in [
        "/v1/messages?beta=true&x=1",
        "/v1/messages?beta=1",
        "/v1/messages/batches",
        "/api/hello",
    ] {
        let (status, _) = raw(gw.addr, "POST", t, b"{}").await;
        assert!([400, 403].contains(&status), "{t}: {status}");
    }
    let seen = up.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/v1/messages?beta=true");
    assert_eq!(seen[0].header("x-api-key"), Some("sk-real-key"));
    let reqs = gw.sink.requests(5).await;
    assert_eq!(reqs[0].usage.budget_tokens(), RAW_USAGE_IN + RAW_USAGE_OUT);
}

#[tokio::test]
async fn connections_over_the_cap_get_503_and_are_counted() {
    let up = RawUpstream::start().await;
    let limits = ModelLimits {
        max_connections: 2,
        ..ModelLimits::default()
    };
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        limits,
        TokenBudget::new(None, 0),
        None,
    )
    .await;
    let _a = TcpStream::connect(gw.addr).await.unwrap();
    let _b = TcpStream::connect(gw.addr).await.unwrap();
    let (status, body) = raw(gw.addr, "GET", "/v1/models", b"").await;
    assert_eq!(status, 503, "{body}");
    let reqs = gw.sink.requests(1).await;
    assert_eq!(reqs[0].refusal, Some(Refusal::Connections));
    drop((_a, _b));
    // Slots come back when the connections close.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (status, _) = raw(gw.addr, "GET", "/v1/models", b"").await;
        if status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no slot came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn bodies_wait_for_the_gateway_s_bytes_and_the_process_s_or_get_503() {
    let up = RawUpstream::start().await;
    let limits = ModelLimits {
        max_request_body: 1000,
        buffered_bytes: 2000,
        body_wait: Duration::from_millis(200),
        ..ModelLimits::default()
    };
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        limits,
        TokenBudget::new(None, 0),
        None,
    )
    .await;
    // A body that declares 1000 bytes and sends none holds 2000 bytes of the pool…
    let mut holder = TcpStream::connect(gw.addr).await.unwrap();
    holder
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-length: 1000\r\n\r\n",
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let body = br#"{"model":"m"}"#;
    loop {
        // …so another waits, then gets 503 with retry-after.
        let (status, resp) = raw(gw.addr, "POST", "/v1/chat/completions", body).await;
        if status == 503 {
            assert!(resp.contains("ralph_gateway_busy"), "{resp}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never busy: {status}"
        );
    }
    drop(holder);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while raw(gw.addr, "POST", "/v1/chat/completions", body).await.0 != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "bytes never came back"
        );
    }
    // The process's pool bounds two gateways together.
    let shared = BytePool::new(2000);
    let limits = ModelLimits {
        max_request_body: 1000,
        body_wait: Duration::from_millis(200),
        ..ModelLimits::default()
    };
    let g1 = gateway(
        &up,
        ApiFamily::OpenAi,
        limits,
        TokenBudget::new(None, 0),
        Some(Arc::clone(&shared)),
    )
    .await;
    let g2 = gateway(
        &up,
        ApiFamily::OpenAi,
        limits,
        TokenBudget::new(None, 0),
        Some(Arc::clone(&shared)),
    )
    .await;
    let mut holder = TcpStream::connect(g1.addr).await.unwrap();
    holder
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-length: 1000\r\n\r\n",
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while shared.available() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the process pool was not taken"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, resp) = raw(g2.addr, "POST", "/v1/chat/completions", body).await;
    assert_eq!(status, 503, "{resp}");
    assert!(resp.contains("the runner"), "{resp}");
    drop(holder);
}

#[tokio::test]
async fn oversized_declared_bodies_are_refused_before_a_byte_is_read() {
    let up = RawUpstream::start().await;
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        ModelLimits::default(),
        TokenBudget::new(None, 0),
        None,
    )
    .await;
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(
        format!(
            "POST /v1/responses HTTP/1.1\r\nhost: gw\r\ncontent-length: {}\r\n\r\n",
            32 << 20
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = vec![0u8; 4096];
    let n = tokio::time::timeout(DEADLINE, s.read(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(parse_answer(&out[..n]).0, 413);
    let reqs = gw.sink.requests(1).await;
    assert_eq!(reqs[0].refusal, Some(Refusal::TooLarge));
    assert!(up.requests().is_empty());
}

#[tokio::test]
async fn the_free_routes_are_rate_limited() {
    let up = RawUpstream::start().await;
    let limits = ModelLimits {
        free_burst: 3,
        free_per_second: 0,
        ..ModelLimits::default()
    };
    let gw = gateway(
        &up,
        ApiFamily::OpenAi,
        limits,
        TokenBudget::new(None, 0),
        None,
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(raw(gw.addr, "GET", "/v1/models", b"").await.0);
    }
    assert_eq!(statuses, vec![200, 200, 200, 429, 429]);
    assert_eq!(up.requests().len(), 3);
    // Metered routes are not rate limited (the budget bounds them).
    assert_eq!(
        raw(gw.addr, "POST", "/v1/responses", br#"{"model":"m"}"#)
            .await
            .0,
        200
    );
}
