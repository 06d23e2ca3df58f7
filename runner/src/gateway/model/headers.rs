//! Header rules of the model gateway: what of the agent's request reaches the upstream (no
//! credentials, no hop-by-hop headers, no `accept-encoding` so the gateway can read usage from
//! an uncompressed body), the key added per [`ApiFamily`], and what of the upstream's response
//! reaches the agent.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use super::config::{ApiFamily, Secret};

/// Credentials the round may carry (only a placeholder): never forwarded.
const CREDENTIALS: [&str; 5] = [
    "authorization",
    "x-api-key",
    "api-key",
    "proxy-authorization",
    "cookie",
];

/// Hop-by-hop headers (RFC 9110 §7.6.1) plus those the gateway sets itself.
const HOP_BY_HOP: [&str; 11] = [
    "connection",
    "expect",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// Headers that would make the upstream (or a proxy before it) read another request than the one
/// judged: method and URL overrides, and the body's encoding and type (the gateway sends the body
/// it rebuilt, as JSON: [`set_json_body`]).
const REINTERPRET: [&str; 8] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-method",
    "x-original-url",
    "x-rewrite-url",
    "content-encoding",
    "content-type",
];

fn connection_listed(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The headers to send upstream for `incoming`, with the key added.
pub fn upstream_request_headers(
    incoming: &HeaderMap,
    family: ApiFamily,
    key: &Secret,
) -> Result<HeaderMap, String> {
    let listed = connection_listed(incoming);
    let mut out = HeaderMap::new();
    for (name, value) in incoming {
        let n = name.as_str();
        if CREDENTIALS.contains(&n)
            || HOP_BY_HOP.contains(&n)
            || REINTERPRET.contains(&n)
            || n == "accept-encoding"
            || listed.iter().any(|l| l == n)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    // A keyless upstream (a local server): nothing is added, and the agent's placeholder
    // was dropped above.
    if key.expose().is_empty() {
        return Ok(out);
    }
    let (name, value) = match family {
        ApiFamily::OpenAi => (
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", key.expose())),
        ),
        ApiFamily::Anthropic => (
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_str(key.expose()),
        ),
    };
    let mut value =
        value.map_err(|_| "failed to use the upstream key: not a valid header value".to_owned())?;
    value.set_sensitive(true);
    out.insert(name, value);
    Ok(out)
}

/// Marks a rebuilt JSON body as such.
pub fn set_json_body(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
}

/// The upstream's response headers for the agent (hop-by-hop ones dropped; `content-length`
/// kept, as the body is passed through byte for byte).
pub fn agent_response_headers(upstream: &HeaderMap) -> HeaderMap {
    let listed = connection_listed(upstream);
    let mut out = HeaderMap::new();
    for (name, value) in upstream {
        let n = name.as_str();
        if (HOP_BY_HOP.contains(&n) && n != "content-length") || listed.iter().any(|l| l == n) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// True when the request asks for a protocol upgrade (codex tries a WebSocket first).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_hop_by_hop_are_dropped_and_the_key_added() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer placeholder"),
            ("x-api-key", "placeholder"),
            ("cookie", "a=b"),
            ("connection", "keep-alive, x-foo"),
            ("x-foo", "1"),
            ("accept-encoding", "gzip"),
            ("x-http-method-override", "DELETE"),
            ("x-original-url", "/v1/files"),
            ("content-encoding", "gzip"),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ] {
            h.append(k, HeaderValue::from_static(v));
        }
        let out = upstream_request_headers(&h, ApiFamily::Anthropic, &Secret::new("k1")).unwrap();
        assert_eq!(out["x-api-key"], "k1");
        assert!(out.get("authorization").is_none());
        assert!(out.get("cookie").is_none() && out.get("x-foo").is_none());
        assert!(out.get("accept-encoding").is_none());
        for h in [
            "x-http-method-override",
            "x-original-url",
            "content-encoding",
            "content-type",
        ] {
            assert!(out.get(h).is_none(), "{h} forwarded");
        }
        assert_eq!(out["anthropic-version"], "2023-06-01");
        let o = upstream_request_headers(&h, ApiFamily::OpenAi, &Secret::new("k2")).unwrap();
        assert_eq!(o["authorization"], "Bearer k2");
        assert!(o.get("x-api-key").is_none());
    }
}
