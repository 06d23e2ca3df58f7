//! The response tee: passes the upstream's body to the agent chunk by chunk (never buffered
//! whole) while reading usage from it, cuts it after the idle timeout or when the gateway stops,
//! and reports the request exactly once when the body ends, fails or is dropped by the client.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::budget::TokenBudget;
use super::sse::SseParser;
use super::wire_usage::WireUsage;
use crate::gateway::sink::{Api, GatewaySink, ModelRequest};
use crate::usage::UNKNOWN_MODEL;

/// Largest non-streamed response body kept to read its `usage` (the body itself always passes).
pub const MAX_JSON_BODY: usize = 16 << 20;

/// Collects one response's usage and reports the request when it ends.
pub struct Recorder {
    api: Api,
    model_hint: Option<String>,
    status: u16,
    started: Instant,
    streamed: bool,
    parser: SseParser,
    wire: WireUsage,
    body: Option<Vec<u8>>,
    sink: Arc<dyn GatewaySink>,
    budget: Arc<TokenBudget>,
    done: bool,
    expected: Option<u64>,
    received: u64,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("api", &self.api)
            .field("status", &self.status)
            .field("streamed", &self.streamed)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder for a response of `status`; `streamed` when it is `text/event-stream`.
    pub fn new(
        api: Api,
        model_hint: Option<String>,
        status: u16,
        started: Instant,
        streamed: bool,
        sink: Arc<dyn GatewaySink>,
        budget: Arc<TokenBudget>,
    ) -> Self {
        Self {
            api,
            model_hint,
            status,
            started,
            streamed,
            parser: SseParser::default(),
            wire: WireUsage::default(),
            body: (!streamed && api != Api::Other).then(Vec::new),
            sink,
            budget,
            done: false,
            expected: None,
            received: 0,
        }
    }

    /// The body's length when known (`content-length`, or 0 for HEAD, 204 and 304): the
    /// request is reported as soon as that many bytes passed, as the server stops reading the
    /// body there.
    pub fn expect_len(mut self, len: Option<u64>) -> Self {
        self.expected = len;
        self
    }

    /// True when the whole announced body has passed.
    pub fn is_complete(&self) -> bool {
        self.expected.is_some_and(|e| self.received >= e)
    }

    fn chunk(&mut self, bytes: &[u8]) {
        self.received = self.received.saturating_add(bytes.len() as u64);
        if self.streamed {
            let (api, wire) = (self.api, &mut self.wire);
            self.parser
                .feed(bytes, |data| wire.observe_event(api, data));
        } else if let Some(body) = &mut self.body {
            if body.len() + bytes.len() > MAX_JSON_BODY {
                self.body = None;
            } else {
                body.extend_from_slice(bytes);
            }
        }
    }

    /// Ends the request (once): reads what is left, counts the tokens against the budget, tells
    /// the sink.
    pub fn finish(&mut self, error: Option<String>) {
        if self.done {
            return;
        }
        self.done = true;
        if self.streamed {
            let (api, wire) = (self.api, &mut self.wire);
            self.parser.finish(|data| wire.observe_event(api, data));
        } else if let Some(body) = self.body.take() {
            self.wire.observe_body(self.api, &body);
        }
        let usage = self.wire.usage;
        self.budget.add(usage.budget_tokens());
        let model = self
            .wire
            .model
            .take()
            .or_else(|| self.model_hint.take())
            .unwrap_or_else(|| UNKNOWN_MODEL.to_owned());
        self.sink.model_request(&ModelRequest {
            api: self.api,
            model,
            status: self.status,
            usage,
            duration: self.started.elapsed(),
            streamed: self.streamed,
            error,
        });
        if let Some((used, max)) = self.budget.take_crossing() {
            self.sink.budget_crossed(used, max);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.finish(Some(
            "the response was dropped before its end (client gone)".to_owned(),
        ));
    }
}

type Inner = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// Wraps the upstream body: the agent gets every chunk as it arrives.
pub fn tee(
    inner: impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
    recorder: Recorder,
    idle: Duration,
    stop: CancellationToken,
) -> Body {
    let mut recorder = recorder;
    if recorder.is_complete() {
        recorder.finish(None);
    }
    let inner: Inner = Box::pin(inner);
    let state = Some((inner, recorder, stop));
    let stream = futures_util::stream::unfold(state, move |state| async move {
        let (mut inner, mut rec, stop) = state?;
        let next = tokio::select! {
            () = stop.cancelled() => Err("the model gateway stopped".to_owned()),
            r = tokio::time::timeout(idle, inner.next()) => match r {
                Err(_) => Err(format!(
                    "failed to read the upstream response: no data for {}s",
                    idle.as_secs()
                )),
                Ok(None) => Ok(None),
                Ok(Some(Ok(b))) => Ok(Some(b)),
                Ok(Some(Err(e))) => Err(format!("failed to read the upstream response: {e}")),
            },
        };
        match next {
            Ok(Some(b)) => {
                rec.chunk(&b);
                if rec.is_complete() {
                    rec.finish(None);
                }
                Some((Ok(b), Some((inner, rec, stop))))
            }
            Ok(None) => {
                rec.finish(None);
                None
            }
            Err(msg) => {
                rec.finish(Some(msg.clone()));
                Some((Err(io::Error::other(msg)), None))
            }
        }
    });
    Body::from_stream(stream)
}
