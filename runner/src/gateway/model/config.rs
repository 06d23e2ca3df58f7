//! The model gateway's configuration: the upstream (URL, API family, key), the limits and the
//! token budget; and the base URL the agent is given.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;

use super::bounds::BytePool;
use super::budget::TokenBudget;
use crate::gateway::GatewayError;

/// Which credential style the upstream expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiFamily {
    /// `Authorization: Bearer KEY` (OpenAI, and what vLLM, Ollama, LiteLLM, OpenRouter accept).
    OpenAi,
    /// `x-api-key: KEY` (Anthropic).
    Anthropic,
}

/// A credential. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a key.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The key itself; only for the upstream request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The upstream model API.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// Base URL, e.g. `https://api.openai.com/v1`, `https://api.anthropic.com` or
    /// `http://127.0.0.1:8000/v1`. Its path is the prefix every agent request must carry.
    pub url: String,
    /// Decides how the key is sent.
    pub api: ApiFamily,
    /// The key.
    pub key: Secret,
}

/// Limits of the model gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelLimits {
    /// Largest request body accepted (413 beyond).
    pub max_request_body: usize,
    /// Bytes the gateway holds for request bodies at once; a body takes twice its length (it
    /// is held as read and as rebuilt), waits up to `body_wait` for them, else gets 503.
    pub buffered_bytes: usize,
    /// How long a body waits for its bytes.
    pub body_wait: Duration,
    /// From the request's headers to the end of its body (408 beyond).
    pub body_timeout: Duration,
    /// Connections open at once; one more gets 503 and is closed.
    pub max_connections: usize,
    /// Free requests (model lists, token counts) in a burst, then `free_per_second`; 429 beyond.
    pub free_burst: u32,
    /// Free requests per second once the burst is spent.
    pub free_per_second: u32,
    /// TCP (and TLS) connect timeout to the upstream.
    pub connect_timeout: Duration,
    /// From sending the request to the upstream's response headers (504 beyond).
    pub response_header_timeout: Duration,
    /// Longest silence between two chunks of a response body; the response is cut beyond.
    pub idle_timeout: Duration,
}

/// The largest request body: 8 MiB. Measured with the real CLIs (`codex_check`, `claude_check`
/// print it): a first codex 0.169 request is ~39 KiB, claude 2.1.328's ~49 KiB (system prompt
/// and its tools); a context window of 200k tokens is ~1 MiB of JSON. 8 MiB leaves room for a few
/// images while keeping what 32 connections can make the runner hold small (see
/// `buffered_bytes`). The APIs' own limits are higher (32 MB for Anthropic Messages); a round
/// that needs more is not an agent's normal traffic.
pub const MAX_REQUEST_BODY: usize = 8 << 20;

/// Bytes of request bodies one gateway holds at once: two bodies of the largest size (each
/// counted twice, as read and as rebuilt), or many small ones.
pub const BUFFERED_BYTES: usize = 4 * MAX_REQUEST_BODY;

/// Bytes of request bodies all the gateways of one process hold at once (`ralph serve` runs
/// every job's gateway): four rounds at their own bound.
pub const PROCESS_BUFFERED_BYTES: usize = 4 * BUFFERED_BYTES;

impl Default for ModelLimits {
    fn default() -> Self {
        Self {
            max_request_body: MAX_REQUEST_BODY,
            buffered_bytes: BUFFERED_BYTES,
            body_wait: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            // An agent CLI keeps a few (sub-agents a few more): 32 is far beyond what they use.
            max_connections: 32,
            // No CLI lists models in a loop: a burst for start-up, then one a second.
            free_burst: 60,
            free_per_second: 1,
            connect_timeout: Duration::from_secs(10),
            response_header_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// Everything [`crate::gateway::serve_model`] needs. Build with [`ModelGatewayConfig::new`].
#[derive(Debug)]
pub struct ModelGatewayConfig {
    pub(crate) upstream: Upstream,
    /// The upstream URL's path without a trailing slash (`/v1`, or empty).
    pub(crate) prefix: String,
    /// The upstream host, named in errors.
    pub(crate) host: String,
    pub(crate) limits: ModelLimits,
    pub(crate) budget: Arc<TokenBudget>,
    pub(crate) client: reqwest::Client,
    /// This gateway's bytes for request bodies.
    pub(crate) pool: Arc<BytePool>,
    /// The process's bytes for request bodies, shared by every gateway of a service.
    pub(crate) shared_pool: Option<Arc<BytePool>>,
    /// The origin parsed, for building each upstream URL.
    pub(crate) origin_url: Url,
}

impl ModelGatewayConfig {
    /// Checks the upstream URL (http or https, a host, no query, fragment or credentials) and
    /// builds the gateway's one HTTP client (rustls, no proxy from the environment).
    pub fn new(
        upstream: Upstream,
        limits: ModelLimits,
        budget: Arc<TokenBudget>,
    ) -> Result<Self, GatewayError> {
        let bad = |reason: &str| GatewayError::UpstreamUrl {
            url: upstream.url.clone(),
            reason: reason.to_owned(),
        };
        let url = Url::parse(&upstream.url).map_err(|e| bad(&e.to_string()))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(bad("expected an http:// or https:// url"));
        }
        let Some(host) = url.host_str().map(str::to_owned) else {
            return Err(bad("expected a host"));
        };
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("expected no query and no fragment"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("expected no credentials in the url (use the key)"));
        }
        let prefix = url.path().trim_end_matches('/').to_owned();
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(limits.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| GatewayError::Client {
                url: upstream.url.clone(),
                source,
            })?;
        let mut origin_url = url.clone();
        origin_url.set_path("/");
        Ok(Self {
            upstream,
            prefix,
            host,
            pool: BytePool::new(limits.buffered_bytes),
            shared_pool: None,
            origin_url,
            limits,
            budget,
            client,
        })
    }

    /// Request bodies also take their bytes from `pool`, shared with other gateways (the
    /// process's bound under `ralph serve`).
    pub fn with_shared_pool(mut self, pool: Arc<BytePool>) -> Self {
        self.shared_pool = Some(pool);
        self
    }

    /// The upstream URL of a canonical `path` and `query`, built from parts; `None` when the
    /// `url` crate would spell it otherwise than given (it never does for a canonical target:
    /// this is the check that what is forwarded is byte for byte what was judged).
    pub(crate) fn upstream_url(&self, path: &str, query: Option<&str>) -> Option<Url> {
        let mut url = self.origin_url.clone();
        url.set_path(path);
        url.set_query(query);
        (url.path() == path && url.query() == query).then_some(url)
    }

    /// The base URL to give the agent when the gateway listens on port `port` of the round's
    /// gateway address (`127.0.0.2`, [`ralph_sandbox::spec::GATEWAY_HOST`]):
    /// `http://127.0.0.2:PORT` followed by the upstream URL's path (`…/v1` for OpenAI, nothing
    /// for Anthropic).
    pub fn agent_base_url(&self, port: u16) -> String {
        self.base_url_at(std::net::SocketAddr::from((
            ralph_sandbox::spec::GATEWAY_HOST,
            port,
        )))
    }

    /// The base URL of the gateway served on `addr` (a listener of the host's, in tests and
    /// checks): `http://ADDR` followed by the upstream URL's path.
    pub fn base_url_at(&self, addr: std::net::SocketAddr) -> String {
        format!("http://{addr}{}", self.prefix)
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The limits.
    pub fn limits(&self) -> &ModelLimits {
        &self.limits
    }

    /// The shared token budget.
    pub fn budget(&self) -> &Arc<TokenBudget> {
        &self.budget
    }

    /// The upstream's path prefix (`/v1`, or empty).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(url: &str) -> Result<ModelGatewayConfig, GatewayError> {
        ModelGatewayConfig::new(
            Upstream {
                url: url.to_owned(),
                api: ApiFamily::OpenAi,
                key: Secret::new("sk-real"),
            },
            ModelLimits::default(),
            Arc::new(TokenBudget::new(None, 0)),
        )
    }

    #[test]
    fn base_url_keeps_the_upstream_path_and_routes_only_under_it() {
        let c = cfg("https://api.openai.com/v1/").unwrap();
        assert_eq!(c.agent_base_url(4000), "http://127.0.0.2:4000/v1");
        assert_eq!(c.origin_url.as_str(), "https://api.openai.com/");
        assert_eq!(c.prefix(), "/v1");
        assert_eq!(
            c.upstream_url("/v1/responses", None).unwrap().as_str(),
            "https://api.openai.com/v1/responses"
        );
        assert_eq!(
            c.upstream_url("/v1/messages", Some("beta=true"))
                .unwrap()
                .as_str(),
            "https://api.openai.com/v1/messages?beta=true"
        );
        // What the `url` crate would re-spell is never sent.
        for p in [
            "/v1/models/..\\files",
            "/v1/a/../b",
            "/v1/%2e%2e/x",
            "/v1/a b",
        ] {
            assert!(c.upstream_url(p, None).is_none(), "{p}");
        }
        let a = cfg("https://api.anthropic.com").unwrap();
        assert_eq!(a.agent_base_url(1), "http://127.0.0.2:1");
        assert_eq!(a.prefix(), "");
        assert!(!format!("{:?}", a).contains("sk-real"));
    }

    #[test]
    fn bad_upstream_urls_are_refused_with_the_url() {
        for u in [
            "ftp://x/v1",
            "not a url",
            "https://h/v1?x=1",
            "https://u:p@h/v1",
        ] {
            let e = cfg(u).unwrap_err().to_string();
            assert!(e.contains(u), "{e}");
        }
    }
}
