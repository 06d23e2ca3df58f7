//! The response tee: passes the upstream's body to the agent chunk by chunk (never buffered
//! whole) while reading usage from it, cuts it after the idle timeout or when the gateway stops,
//! and reports the request exactly once when the body ends or fails. A client that hangs up
//! does not stop the meter: the upstream goes on (and bills) after the agent left, so the rest
//! of a metered body is read to its end (bounded by the idle timeout and the gateway's stop)
//! and its usage counted.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::budget::TokenBudget;
use super::json_scan::TopLevelScan;
use super::sse::SseParser;
use super::wire_usage::WireUsage;
use crate::gateway::sink::{Api, GatewaySink, ModelRequest};
use crate::usage::UNKNOWN_MODEL;

/// The members of a non-streamed response the recorder reads.
const MEMBERS: &[&str] = &["model", "usage"];

/// Collects one response's usage and reports the request when it ends.
pub struct Recorder {
    api: Api,
    model_hint: Option<String>,
    status: u16,
    started: Instant,
    streamed: bool,
    parser: SseParser,
    wire: WireUsage,
    scan: Option<TopLevelScan>,
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
            scan: (!streamed && api != Api::Other).then(|| TopLevelScan::new(MEMBERS)),
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
        } else if let Some(scan) = &mut self.scan {
            scan.feed(bytes);
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
        } else if let Some(scan) = self.scan.take() {
            // The members found, as a small object of their own.
            let mut body = b"{".to_vec();
            for (i, (name, raw)) in scan.finish().into_iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(format!("\"{name}\":").as_bytes());
                body.extend_from_slice(&raw);
            }
            body.push(b'}');
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
            refusal: None,
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

/// The tee's state: the upstream's body and its recorder, until the body ends.
struct Tee {
    inner: Option<Inner>,
    rec: Option<Recorder>,
    idle: Duration,
    stop: CancellationToken,
    /// Read the rest of the body when the client leaves (a metered route).
    drain: bool,
}

impl Tee {
    /// The next chunk for the agent; `None` at the end (or after an error was returned).
    async fn next(&mut self) -> Option<io::Result<Bytes>> {
        let inner = self.inner.as_mut()?;
        let next = next_chunk(inner, self.idle, &self.stop).await;
        let rec = self.rec.as_mut()?;
        match next {
            Ok(Some(b)) => {
                rec.chunk(&b);
                if rec.is_complete() {
                    rec.finish(None);
                }
                Some(Ok(b))
            }
            Ok(None) => {
                rec.finish(None);
                self.inner = None;
                None
            }
            Err(msg) => {
                rec.finish(Some(msg.clone()));
                self.inner = None;
                Some(Err(io::Error::other(msg)))
            }
        }
    }
}

async fn next_chunk(
    inner: &mut Inner,
    idle: Duration,
    stop: &CancellationToken,
) -> Result<Option<Bytes>, String> {
    tokio::select! {
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
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        let (Some(mut inner), Some(mut rec)) = (self.inner.take(), self.rec.take()) else {
            return;
        };
        if rec.done || !self.drain {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (idle, stop) = (self.idle, self.stop.clone());
        rt.spawn(async move {
            loop {
                match next_chunk(&mut inner, idle, &stop).await {
                    Ok(Some(b)) => {
                        rec.chunk(&b);
                        if rec.is_complete() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(msg) => {
                        rec.finish(Some(format!("the client left; then {msg}")));
                        return;
                    }
                }
            }
            rec.finish(Some(
                "the client left before the end of the response (read to its end for usage)"
                    .to_owned(),
            ));
        });
    }
}

/// Wraps the upstream body: the agent gets every chunk as it arrives. With `drain`, a body the
/// agent stops reading is read to its end for its usage.
pub fn tee(
    inner: impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
    recorder: Recorder,
    idle: Duration,
    stop: CancellationToken,
    drain: bool,
) -> Body {
    let mut recorder = recorder;
    if recorder.is_complete() {
        recorder.finish(None);
    }
    let state = Tee {
        inner: Some(Box::pin(inner)),
        rec: Some(recorder),
        idle,
        stop,
        drain,
    };
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    });
    Body::from_stream(stream)
}
