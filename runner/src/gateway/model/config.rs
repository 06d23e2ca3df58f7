//! The model gateway's configuration: the upstream (URL, API family, key), the limits and the
//! token budget; and the base URL the agent is given.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;

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
    /// TCP (and TLS) connect timeout to the upstream.
    pub connect_timeout: Duration,
    /// From sending the request to the upstream's response headers (504 beyond).
    pub response_header_timeout: Duration,
    /// Longest silence between two chunks of a response body; the response is cut beyond.
    pub idle_timeout: Duration,
}

impl Default for ModelLimits {
    fn default() -> Self {
        Self {
            max_request_body: 32 << 20,
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
    /// Scheme, host and port of the upstream (`https://api.openai.com`).
    pub(crate) origin: String,
    /// The upstream URL's path without a trailing slash (`/v1`, or empty).
    pub(crate) prefix: String,
    /// The upstream host, named in errors.
    pub(crate) host: String,
    pub(crate) limits: ModelLimits,
    pub(crate) budget: Arc<TokenBudget>,
    pub(crate) client: reqwest::Client,
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
        let origin = match url.port() {
            Some(p) => format!("{}://{}:{p}", url.scheme(), bracketed(&host)),
            None => format!("{}://{}", url.scheme(), bracketed(&host)),
        };
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
        Ok(Self {
            upstream,
            origin,
            prefix,
            host,
            limits,
            budget,
            client,
        })
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

    /// True when `path` is under the upstream's path prefix.
    /// Whether `path` (under the prefix) is a model endpoint the gateway forwards. The key
    /// opens the whole account: files, fine-tuning, batches, organisation and admin endpoints
    /// would let a round upload the workspace or spend elsewhere, so only what agents use to
    /// talk to a model passes (SPEC §9: the model API and nothing else).
    pub(crate) fn model_endpoint(&self, path: &str) -> bool {
        let rest = path.strip_prefix(self.prefix.as_str()).unwrap_or(path);
        let segs: Vec<&str> = rest.trim_matches('/').split('/').collect();
        matches!(
            segs.as_slice(),
            ["responses"]
                | ["responses", _]
                | ["responses", _, "cancel" | "input_items"]
                | ["chat", "completions"]
                | ["completions"]
                | ["embeddings"]
                | ["models"]
                | ["models", _]
                | ["messages"]
                | ["messages", "count_tokens"]
                | ["v1", "messages"]
                | ["v1", "messages", "count_tokens"]
                | ["v1", "models"]
                | ["v1", "models", _]
        )
    }

    pub(crate) fn routes(&self, path: &str) -> bool {
        self.prefix.is_empty()
            || path == self.prefix
            || path
                .strip_prefix(self.prefix.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }
}

fn bracketed(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
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
        assert_eq!(c.origin, "https://api.openai.com");
        assert!(c.routes("/v1/responses"));
        assert!(!c.routes("/v10/responses"));
        assert!(!c.routes("/responses"));
        let a = cfg("https://api.anthropic.com").unwrap();
        assert_eq!(a.agent_base_url(1), "http://127.0.0.2:1");
        assert!(a.routes("/v1/messages"));
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
