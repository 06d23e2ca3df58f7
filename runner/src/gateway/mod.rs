//! The per-job model gateway and egress proxy (SPEC §9): the only ways out of a round's private
//! network namespace. This module owns the two servers, their configuration types and the
//! events they report; it does not create listeners, namespaces or journal entries (the engine
//! hands it bound [`tokio::net::TcpListener`]s and a [`GatewaySink`]).
//!
//! ```text
//!   sandbox (private netns)                 runner (host side)
//!  ┌──────────────────────────┐
//!  │ agent CLI                │  HTTP   ┌──────────────────────┐  HTTPS + real key
//!  │  base URL =              ├────────►│ model gateway        ├──────────────────► upstream
//!  │  http://127.0.0.1:P/v1   │         │  strips placeholder, │                   model API
//!  │  key = placeholder       │◄────────┤  tees SSE for usage, │◄─── SSE chunks ───
//!  │                          │ stream  │  enforces --max-tokens│
//!  │                          │         └──────────┬───────────┘
//!  │ curl/pip/git             │ HTTP(S)_PROXY      │ GatewaySink: model_request,
//!  │  via http://127.0.0.1:E  ├────────►┌──────────┴───────────┐  budget_crossed, egress
//!  │                          │         │ egress proxy         ├──► allowed HOST:PORT only
//!  └──────────────────────────┘         │  CONNECT / absolute- │    (name checked, resolved
//!                                       │  form GET; 403 else  │     by the proxy)
//!                                       └──────────────────────┘
//! ```
//!
//! - [`model`]: [`serve_model`], [`ModelGatewayConfig`], [`Upstream`], [`TokenBudget`].
//! - [`egress`]: [`serve_egress`], [`EgressConfig`], [`AllowHost`], [`proxy_env`].
//! - [`sink`]: [`GatewaySink`] and the events it receives.

pub mod egress;
pub mod model;
pub mod sink;

#[cfg(test)]
mod testkit;

pub use egress::{AllowHost, EgressConfig, Resolve, SystemResolver, proxy_env, serve_egress};
pub use model::{
    ApiFamily, BytePool, ModelGatewayConfig, ModelLimits, PROCESS_BUFFERED_BYTES, Secret,
    TokenBudget, Upstream, serve_model,
};
pub use sink::{
    Api, EgressDecision, GatewaySink, ModelRequest, Refusal, RefusalCount, RefusalSummary,
};

/// Errors of the gateway's configuration and servers.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// An `--allow-host` entry could not be parsed.
    #[error("failed to parse allow-host entry `{input}`: expected {expected}")]
    AllowHost {
        /// The entry as given.
        input: String,
        /// What was expected instead.
        expected: &'static str,
    },
    /// The upstream URL is not usable.
    #[error("failed to use upstream url `{url}`: {reason}")]
    UpstreamUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("failed to build the http client for upstream `{url}`: {source}")]
    Client {
        /// The upstream URL.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// A server failed.
    #[error("failed to serve the {what} on {addr}: {source}")]
    Serve {
        /// `model gateway` or `egress proxy`.
        what: &'static str,
        /// The listener's address (or `unknown`).
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}
