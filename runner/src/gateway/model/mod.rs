//! The model gateway (SPEC §9): an HTTP/1.1 server on a listener the engine hands over, which
//! forwards the agent's requests to one upstream model API with the real key, streams the
//! responses back untouched, reads their token usage, and enforces the job's token budget.
//!
//! - [`config`]: [`Upstream`], [`ApiFamily`], [`Secret`], [`ModelLimits`],
//!   [`ModelGatewayConfig`] (and [`ModelGatewayConfig::agent_base_url`]).
//! - [`budget`]: the shared [`TokenBudget`].
//! - [`headers`]: what headers cross, and the key.
//! - [`forward`]: the handler. [`tee`]: the streamed response and the per-request report.
//! - [`sse`], [`wire_usage`]: usage read from the wire. [`replies`]: the gateway's own answers.
//!
//! Rules: a request whose path is not under the upstream URL's path gets 404; one asking for a
//! protocol upgrade (codex tries a WebSocket first) gets 426 Upgrade Required, on which codex
//! 0.169 falls back to HTTP POST at once (on a 404 it retried the WebSocket 7 times with backoff
//! first, ~6 s; checked with the real CLI by `codex_check`); once the budget is spent every request gets 400 in the API's error shape without
//! reaching the upstream; bodies over the limit get 413; an unreachable upstream 502, one
//! silent past the header timeout 504. Everything else — status, headers, body — is the
//! upstream's. Each request is reported to the sink once, when its response has ended.

pub mod budget;
pub mod config;
pub mod forward;
pub mod headers;
pub mod replies;
pub mod sse;
pub mod tee;
pub mod wire_usage;

#[cfg(test)]
mod claude_check;
#[cfg(test)]
mod codex_check;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::Router;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use budget::TokenBudget;
pub use config::{ApiFamily, ModelGatewayConfig, ModelLimits, Secret, Upstream};

use super::GatewayError;
use super::sink::GatewaySink;
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
    let shared = Arc::new(Shared {
        cfg,
        sink,
        stop: stop.clone(),
    });
    let app = Router::new().fallback(handle).with_state(shared);
    // TCP_NODELAY on every agent connection: a streamed response is written event by event, and
    // with Nagle's algorithm each small write after the first waits for the agent's (delayed,
    // ~40 ms) ACK. Measured by bench/gateway_overhead.sh: +42 ms per SSE response without it.
    let listener = listener.tap_io(|tcp| {
        // Best effort: a socket that refuses the option still works, only slower.
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
        .map_err(|source| GatewayError::Serve {
            what: "model gateway",
            addr,
            source,
        })
}
