//! What the gateway reports to its caller: one [`ModelRequest`] per model-gateway request, one
//! [`EgressDecision`] per egress-proxy request, and the moment the token budget is crossed.

use std::time::Duration;

use crate::usage::UsageTotals;

/// The model API a request spoke, from the route of the gateway's allow-table it matched
/// ([`crate::gateway::model::routes`]): it says how the response's usage is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI Responses (`POST …/responses`).
    Responses,
    /// OpenAI Chat Completions (`POST …/chat/completions`).
    Chat,
    /// OpenAI legacy Completions (`POST …/completions`).
    Completions,
    /// OpenAI Embeddings (`POST …/embeddings`): only prompt tokens.
    Embeddings,
    /// Anthropic Messages (`POST …/v1/messages`).
    Messages,
    /// Anything else: the free routes (model lists, token counting) and every refused request
    /// that matched no route. No usage is read.
    Other,
}

impl Api {
    /// Every value, in label order.
    pub const ALL: [Api; 6] = [
        Api::Responses,
        Api::Chat,
        Api::Completions,
        Api::Embeddings,
        Api::Messages,
        Api::Other,
    ];

    /// The metric/journal label: `responses`, `chat`, `completions`, `embeddings`, `messages`
    /// or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Responses => "responses",
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Embeddings => "embeddings",
            Api::Messages => "messages",
            Api::Other => "other",
        }
    }
}

/// Why the gateway answered a request itself instead of forwarding it: a closed set, the
/// `reason` label of `ralph_model_refusals_total` and the `refusal` of a `model_request` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// 400: the request target is not in canonical form (`\`, `%xx`, `//`, dot segments, a
    /// case variant, non-ASCII, `;`, an absolute-form target, a malformed query).
    NotCanonical,
    /// 404: the path is not under the upstream URL's path.
    NotFound,
    /// 403: no route of the allow-table has this path.
    Endpoint,
    /// 405: the path is a route, the method is not.
    Method,
    /// 400: a query parameter the route does not allow.
    Query,
    /// 400: the body is not what the route takes (not a JSON object serde_json parses, a
    /// `stream` that is not a boolean, a field that would hide usage).
    Body,
    /// 413: the body is over the limit.
    TooLarge,
    /// 408: the body did not arrive in time.
    BodyTimeout,
    /// 426: a protocol upgrade (WebSocket).
    Upgrade,
    /// 400: the token budget is spent.
    Budget,
    /// 429: too many requests to the free routes.
    Rate,
    /// 503: the bytes the gateway may hold for request bodies are taken.
    Busy,
    /// 503: the round has as many connections open as the gateway takes.
    Connections,
}

impl Refusal {
    /// Every value, in label order.
    pub const ALL: [Refusal; 13] = [
        Refusal::NotCanonical,
        Refusal::NotFound,
        Refusal::Endpoint,
        Refusal::Method,
        Refusal::Query,
        Refusal::Body,
        Refusal::TooLarge,
        Refusal::BodyTimeout,
        Refusal::Upgrade,
        Refusal::Budget,
        Refusal::Rate,
        Refusal::Busy,
        Refusal::Connections,
    ];

    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotCanonical => "not_canonical",
            Refusal::NotFound => "not_found",
            Refusal::Endpoint => "endpoint",
            Refusal::Method => "method",
            Refusal::Query => "query",
            Refusal::Body => "body",
            Refusal::TooLarge => "too_large",
            Refusal::BodyTimeout => "body_timeout",
            Refusal::Upgrade => "upgrade",
            Refusal::Budget => "budget",
            Refusal::Rate => "rate",
            Refusal::Busy => "busy",
            Refusal::Connections => "connections",
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
    /// Set when the gateway refused the request itself: nothing reached the upstream.
    pub refusal: Option<Refusal>,
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

/// Refusals of one gateway counted together instead of journalled one by one (see
/// [`crate::gateway::model::refusals::RefusalLog`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefusalSummary {
    /// How many refusals, in all.
    pub count: u64,
    /// By API, status and reason.
    pub by: Vec<RefusalCount>,
}

/// One line of a [`RefusalSummary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusalCount {
    /// The API of the route, `Other` when none matched.
    pub api: Api,
    /// The status the agent got.
    pub status: u16,
    /// Why.
    pub reason: Refusal,
    /// How many.
    pub count: u64,
}
