//! The built-in agent's requests to the Chat Completions endpoint (through the runner's model
//! gateway): streaming or not, whichever the server answers with; retries with backoff on 429,
//! 5xx and network errors, each one announced as an event line so the runner counts it.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::wire::{Message, Reply, StreamAssembler, WireError, parse_reply, tool_schemas};
use crate::util::text::bounded;

/// A failed request, after its retries.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The server refused the request (not retryable), or the gateway did.
    #[error("the model server refused the request with HTTP {status}: {body}")]
    Refused {
        /// The status.
        status: u16,
        /// The start of its body.
        body: String,
    },
    /// Still failing after every retry.
    #[error("the model request failed after {retries} retries: {last}")]
    GaveUp {
        /// Retries made.
        retries: u32,
        /// The last failure.
        last: String,
    },
    /// The response is not a chat completion.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Where and how to ask.
#[derive(Debug, Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    url: String,
    model: String,
    stream: bool,
    /// Retries of one request.
    pub max_retries: u32,
    /// The first backoff, doubled each retry (a server's `Retry-After` wins, up to a minute).
    pub backoff: Duration,
}

/// One retry, for the event line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// The retry's number (1-based).
    pub attempt: u32,
    /// The status, when there was a response.
    pub status: Option<u16>,
    /// The `ralph_agent_request_retries_total` reason.
    pub reason: &'static str,
}

impl ChatClient {
    /// A client of `base_url` (e.g. `$RALPH_GATEWAY_URL/v1`), asking for `model`.
    pub fn new(base_url: &str, model: &str, stream: bool) -> Result<Self, ChatError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(600))
            // The gateway is on loopback: a proxy variable of the round must not reroute it.
            .no_proxy()
            .build()
            .map_err(|e| ChatError::GaveUp {
                retries: 0,
                last: format!("failed to build the HTTP client: {e}"),
            })?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            stream,
            max_retries: 5,
            backoff: Duration::from_secs(1),
        })
    }

    fn body(&self, messages: &[Message]) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "tools": tool_schemas(),
            "tool_choice": "auto",
            "parallel_tool_calls": true,
        });
        if self.stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    /// One step: sends the conversation, returns the reply. `on_retry` hears each retry.
    pub async fn complete(
        &self,
        messages: &[Message],
        mut on_retry: impl FnMut(&Retry),
    ) -> Result<Reply, ChatError> {
        let body = self.body(messages);
        let mut attempt = 0u32;
        loop {
            let (failure, status, wait) = match self.once(&body).await {
                Ok(reply) => return Ok(reply),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retryable {
                    message,
                    status,
                    retry_after,
                }) => (message, status, retry_after),
            };
            if attempt >= self.max_retries {
                return Err(ChatError::GaveUp {
                    retries: attempt,
                    last: failure,
                });
            }
            attempt += 1;
            on_retry(&Retry {
                attempt,
                status,
                reason: crate::agent::retry::classify(status.map(u64::from), &failure),
            });
            let backoff = self.backoff.saturating_mul(1 << (attempt - 1).min(6));
            let wait = wait.unwrap_or(backoff).min(Duration::from_secs(60));
            tokio::time::sleep(wait).await;
        }
    }

    async fn once(&self, body: &Value) -> Result<Reply, Failure> {
        let resp = match self.http.post(&self.url).json(body).send().await {
            Ok(r) => r,
            Err(e) => {
                return Err(Failure::Retryable {
                    message: format!("network: {e}"),
                    status: None,
                    retry_after: None,
                });
            }
        };
        let status = resp.status().as_u16();
        if !resp.status().is_success() {
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let text = resp.text().await.unwrap_or_default();
            // The gateway's own refusals (budget spent, endpoint refused) are final.
            let gateway_refusal = text.contains("\"ralph_");
            let retryable = matches!(status, 408 | 429) || (500..600).contains(&status);
            let body = bounded(&text, 2000);
            return Err(if retryable && !gateway_refusal {
                Failure::Retryable {
                    message: format!("HTTP {status}: {body}"),
                    status: Some(status),
                    retry_after,
                }
            } else {
                Failure::Fatal(ChatError::Refused { status, body })
            });
        }
        let sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if sse {
            read_stream(resp).await
        } else {
            let bytes = resp.bytes().await.map_err(|e| Failure::Retryable {
                message: format!("network while reading the response: {e}"),
                status: None,
                retry_after: None,
            })?;
            parse_reply(&bytes).map_err(|e| Failure::Fatal(e.into()))
        }
    }
}

enum Failure {
    Retryable {
        message: String,
        status: Option<u16>,
        retry_after: Option<Duration>,
    },
    Fatal(ChatError),
}

/// Largest SSE line kept (a chunk bigger than this is a broken server).
const MAX_LINE: usize = 4 << 20;

async fn read_stream(resp: reqwest::Response) -> Result<Reply, Failure> {
    let mut asm = StreamAssembler::default();
    let mut stream = resp.bytes_stream();
    let mut line: Vec<u8> = Vec::new();
    let cut = |e: String| Failure::Retryable {
        message: e,
        status: None,
        retry_after: None,
    };
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| cut(format!("network: the stream broke: {e}")))?;
        for &b in chunk.iter() {
            if b != b'\n' {
                line.push(b);
                if line.len() > MAX_LINE {
                    return Err(Failure::Fatal(ChatError::Wire(WireError {
                        reason: format!("a stream line is longer than {MAX_LINE} bytes"),
                    })));
                }
                continue;
            }
            let text = String::from_utf8_lossy(&line).into_owned();
            line.clear();
            if let Some(data) = text.trim_end_matches('\r').strip_prefix("data:")
                && asm
                    .feed(data)
                    .map_err(|e| Failure::Fatal(ChatError::Wire(e)))?
            {
                return asm.finish().map_err(|e| Failure::Fatal(e.into()));
            }
        }
    }
    asm.finish()
        .map_err(|e| cut(format!("network: {}", e.reason)))
}
