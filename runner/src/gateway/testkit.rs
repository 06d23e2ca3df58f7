//! Test support shared by the gateway's tests: a recording [`GatewaySink`] whose events can be
//! awaited with a deadline.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use super::sink::{EgressDecision, GatewaySink, ModelRequest};

/// How long a test waits for a condition.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Records every event.
#[derive(Debug, Default)]
pub struct RecordingSink {
    pub requests: Mutex<Vec<ModelRequest>>,
    pub egress: Mutex<Vec<EgressDecision>>,
    pub crossed: Mutex<Vec<(u64, u64)>>,
    changed: Notify,
}

impl RecordingSink {
    /// Waits until `cond` holds for the sink (checked after every event), or panics.
    pub async fn wait_for(&self, what: &str, cond: impl Fn(&RecordingSink) -> bool) {
        let waiting = async {
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if cond(self) {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(DEADLINE, waiting).await.is_err() {
            panic!("timed out waiting for {what}: {self:?}");
        }
    }

    /// Waits for `n` model requests and returns them.
    pub async fn requests(&self, n: usize) -> Vec<ModelRequest> {
        self.wait_for("model requests", |s| s.requests.lock().unwrap().len() >= n)
            .await;
        self.requests.lock().unwrap().clone()
    }
}

impl GatewaySink for RecordingSink {
    fn model_request(&self, r: &ModelRequest) {
        self.requests.lock().unwrap().push(r.clone());
        self.changed.notify_waiters();
    }
    fn egress(&self, e: &EgressDecision) {
        self.egress.lock().unwrap().push(e.clone());
        self.changed.notify_waiters();
    }
    fn budget_crossed(&self, used: u64, max: u64) {
        self.crossed.lock().unwrap().push((used, max));
        self.changed.notify_waiters();
    }
}

/// One request as the recording upstream read it off the wire: the request line's bytes
/// exactly, so a test can tell what the upstream's own parser would see.
#[derive(Clone, Debug)]
pub struct RawRequest {
    /// The method.
    pub method: String,
    /// The request target exactly as sent (`/v1/responses?x=1`).
    pub target: String,
    /// Header lines (name lower-cased, value as sent).
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked when it was chunked).
    pub body: Vec<u8>,
}

impl RawRequest {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Tokens every answer of the recording upstream reports: 7 in, 3 out.
pub const RAW_USAGE_IN: u64 = 7;
/// See [`RAW_USAGE_IN`].
pub const RAW_USAGE_OUT: u64 = 3;

/// A model API on loopback that records each request's raw bytes and answers each one with
/// [`RAW_USAGE_IN`] + [`RAW_USAGE_OUT`] tokens in the shape of the path's API (streamed when
/// the body asks for it), then closes the connection.
#[derive(Debug)]
pub struct RawUpstream {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// What it received.
    pub seen: std::sync::Arc<Mutex<Vec<RawRequest>>>,
}

impl RawUpstream {
    /// Starts one on `127.0.0.1:0`.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: std::sync::Arc<Mutex<Vec<RawRequest>>> = std::sync::Arc::default();
        let s2 = std::sync::Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let seen = std::sync::Arc::clone(&s2);
                tokio::spawn(async move {
                    let _ = serve_raw(stream, seen).await;
                });
            }
        });
        Self { addr, seen }
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<RawRequest> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve_raw(
    mut stream: tokio::net::TcpStream,
    seen: std::sync::Arc<Mutex<Vec<RawRequest>>>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut parts = line.splitn(3, ' ');
    let method = parts.next().unwrap_or("").to_owned();
    let target = parts.next().unwrap_or("").to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = buf[head_end + 4..].to_vec();
    let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        while body.len() < len {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        while !body.ends_with(b"0\r\n\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body = dechunk(&body);
    }
    let streamed = serde_json::from_slice::<serde_json::Value>(&body)
        .is_ok_and(|v| v["stream"] == serde_json::Value::Bool(true));
    let (ctype, reply) = raw_reply(&target, streamed);
    seen.lock().unwrap().push(RawRequest {
        method,
        target,
        headers,
        body,
    });
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reply.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
        if n == 0 || b.len() < i + 2 + n {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + n]);
        b = &b[(i + 4 + n).min(b.len())..];
    }
    out
}

/// The answer of the recording upstream to `target`.
fn raw_reply(target: &str, streamed: bool) -> (&'static str, String) {
    use serde_json::json;
    let path = target.split('?').next().unwrap_or("");
    let (i, o) = (RAW_USAGE_IN, RAW_USAGE_OUT);
    let sse = |events: Vec<serde_json::Value>| {
        let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        ("text/event-stream", body)
    };
    let openai = json!({"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o});
    if path.ends_with("/responses") {
        let usage = json!({"input_tokens": i, "output_tokens": o});
        if streamed {
            return sse(vec![json!({"type": "response.completed",
                "response": {"model": "m", "usage": usage}})]);
        }
        return (
            "application/json",
            json!({"model": "m", "usage": usage}).to_string(),
        );
    }
    if path.ends_with("/embeddings") {
        let usage = json!({"prompt_tokens": i + o, "total_tokens": i + o});
        return (
            "application/json",
            json!({"data": [{"embedding": [0.5, -0.25]}], "model": "e", "usage": usage})
                .to_string(),
        );
    }
    if path.ends_with("/completions") {
        if streamed {
            return sse(vec![
                json!({"choices": [{"text": "x"}], "usage": null}),
                json!({"choices": [], "usage": openai}),
            ]);
        }
        return (
            "application/json",
            json!({"model": "m", "usage": openai}).to_string(),
        );
    }
    if path.ends_with("/messages") {
        if streamed {
            return sse(vec![
                json!({"type": "message_start", "message": {"model": "c",
                    "usage": {"input_tokens": i, "output_tokens": 1}}}),
                json!({"type": "message_delta", "usage": {"output_tokens": o}}),
            ]);
        }
        return (
            "application/json",
            json!({"model": "c", "usage": {"input_tokens": i, "output_tokens": o}}).to_string(),
        );
    }
    (
        "application/json",
        json!({"data": [], "input_tokens": 1}).to_string(),
    )
}
