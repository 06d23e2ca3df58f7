//! What the gateway reports to its caller: one [`ModelRequest`] per model-gateway request, one
//! [`EgressDecision`] per egress-proxy request, and the moment the token budget is crossed.

use std::time::Duration;

use crate::usage::UsageTotals;

/// The model API a request spoke, detected from the request path's suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI Responses (`…/responses`).
    Responses,
    /// OpenAI Chat Completions (`…/chat/completions`).
    Chat,
    /// Anthropic Messages (`…/messages`).
    Messages,
    /// Anything else (model lists, token counting, …): forwarded, no usage read.
    Other,
}

impl Api {
    /// Detects the API from a request path.
    pub fn from_path(path: &str) -> Api {
        let path = path.trim_end_matches('/');
        if path.ends_with("/responses") {
            Api::Responses
        } else if path.ends_with("/chat/completions") {
            Api::Chat
        } else if path.ends_with("/messages") {
            Api::Messages
        } else {
            Api::Other
        }
    }

    /// The metric/journal label: `responses`, `chat`, `messages` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Responses => "responses",
            Api::Chat => "chat",
            Api::Messages => "messages",
            Api::Other => "other",
        }
    }
}

/// One request through the model gateway, reported once its response has fully ended (or
/// failed, or was cut by the client, the idle timeout or the gateway's stop).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRequest {
    /// The API spoken.
    pub api: Api,
    /// The model (from the response, else the request body's `model`, else `unknown`).
    pub model: String,
    /// The HTTP status returned to the agent.
    pub status: u16,
    /// Tokens read from the response (zero when it carried none).
    pub usage: UsageTotals,
    /// From the request's arrival to the end of its response.
    pub duration: Duration,
    /// True when the response was an SSE stream.
    pub streamed: bool,
    /// Why the request failed or the response was cut (`None` when it ended normally, whatever
    /// its status).
    pub error: Option<String>,
}

/// One decision of the egress proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressDecision {
    /// The host the client asked for (lowercase, no brackets).
    pub host: String,
    /// The port the client asked for.
    pub port: u16,
    /// `CONNECT`, `GET`, `POST`, …
    pub method: String,
    /// True when the request was let through.
    pub allowed: bool,
    /// Why (e.g. `allowed by example.com:443`, `not in the allowed hosts`).
    pub reason: String,
}

/// Receives the gateway's events; implemented by the caller (journal, metrics, round control).
/// Called from the servers' tasks: implementations must be quick and must not block.
pub trait GatewaySink: Send + Sync + 'static {
    /// A model request ended.
    fn model_request(&self, r: &ModelRequest);
    /// The egress proxy decided on a request.
    fn egress(&self, e: &EgressDecision);
    /// The token budget was reached (`used >= max`); called once per [`crate::gateway::TokenBudget`].
    fn budget_crossed(&self, used: u64, max: u64);
}

impl std::fmt::Debug for dyn GatewaySink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GatewaySink")
    }
}
