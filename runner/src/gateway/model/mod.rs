//! The model gateway (SPEC §9): an HTTP/1.1 server on a listener the engine hands over, which
//! forwards the agent's requests to one upstream model API with the real key, streams the
//! responses back untouched, reads their token usage, and enforces the job's token budget.
//!
//! - [`config`]: [`Upstream`], [`ApiFamily`], [`Secret`], [`ModelLimits`],
//!   [`ModelGatewayConfig`] (and [`ModelGatewayConfig::agent_base_url`]).
//! - [`target`]: the request target in canonical form (or refused). [`routes`]: the
//!   allow-table, (method, path) pairs per API family. [`body`]: the request body judged and
//!   rebuilt. [`bounds`]: bytes, connections and free requests a round may take.
//! - [`budget`]: the shared [`TokenBudget`]. [`headers`]: what headers cross, and the key.
//! - [`forward`]: the handler. [`tee`]: the streamed response and the per-request report.
//! - [`sse`], [`json_scan`], [`wire_usage`]: usage read from the wire. [`replies`]: the
//!   gateway's own answers. [`refusals`]: refusals journalled at a bounded rate.
//!
//! Rules: the gateway decides on one canonical form of each request and forwards exactly that.
//! A target not already canonical gets 400, one outside the upstream URL's path 404, a path not
//! in the allow-table 403, a route's path with another method 405, a query parameter the route
//! does not take 400; a protocol upgrade (codex may try a WebSocket) gets 426, on which codex
//! 0.169 falls back to HTTP POST at once (on a 404 it retried the WebSocket 7 times with backoff
//! first, ~6 s; checked with the real CLI by `codex_check`); once the budget is spent every
//! request gets 400 in the API's error shape; a body over the limit 413, one that is not the
//! JSON object its route takes 400; with the gateway's bytes taken 503; an unreachable upstream
//! 502, one silent past the header timeout 504. Everything else — status, headers, body — is
//! the upstream's. Each request is reported to the sink once, when its response has ended.

pub mod body;
pub mod bounds;
pub mod budget;
pub mod config;
pub mod forward;
pub mod headers;
pub mod json_scan;
pub mod refusals;
pub mod replies;
pub mod routes;
pub mod sse;
pub mod target;
pub mod tee;
pub mod wire_usage;

#[cfg(test)]
mod claude_check;
#[cfg(test)]
mod codex_check;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use bounds::BytePool;
pub use budget::TokenBudget;
pub use config::{
    ApiFamily, ModelGatewayConfig, ModelLimits, PROCESS_BUFFERED_BYTES, Secret, Upstream,
};

use super::GatewayError;
use super::sink::{Api, GatewaySink, ModelRequest, Refusal};
use crate::usage::{UNKNOWN_MODEL, UsageTotals};
use bounds::{CappedListener, FreeRate};
use forward::{Shared, handle};

/// Serves the model gateway on `listener` until `stop` is cancelled. Open responses are cut
/// (and reported) when `stop` fires; the function returns once the connections have closed.
pub async fn serve_model(
    listener: TcpListener,
    cfg: Arc<ModelGatewayConfig>,
    sink: Arc<dyn GatewaySink>,
    stop: CancellationToken,
) -> Result<(), GatewayError> {
    let addr = listener
        .local_addr()
        .map_or_else(|_| "unknown".to_owned(), |a| a.to_string());
    let limits = cfg.limits;
    let shared = Arc::new(Shared {
        cfg,
        sink: Arc::clone(&sink),
        stop: stop.clone(),
        free: FreeRate::new(limits.free_burst, f64::from(limits.free_per_second)),
    });
    let app = Router::new().fallback(handle).with_state(shared);
    // TCP_NODELAY on every agent connection (set by the listener): a streamed response is
    // written event by event, and with Nagle's algorithm each small write after the first waits
    // for the agent's (delayed, ~40 ms) ACK. Measured by bench/gateway_overhead.sh: +42 ms per
    // SSE response without it.
    let max = limits.max_connections;
    let listener = CappedListener::new(
        listener,
        max,
        Box::new(move || {
            sink.model_request(&ModelRequest {
                api: Api::Other,
                model: UNKNOWN_MODEL.to_owned(),
                status: 503,
                usage: UsageTotals::default(),
                duration: Duration::ZERO,
                streamed: false,
                error: Some(format!(
                    "ralph gateway: a connection over the {max} this round may keep open was closed"
                )),
                refusal: Some(Refusal::Connections),
            });
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
        .map_err(|source| GatewayError::Serve {
            what: "model gateway",
            addr,
            source,
        })
}
