//! The request target in canonical form: the one spelling of a request the gateway judges and
//! forwards. The target is parsed once; what is not already canonical is refused, never
//! normalised, because the upstream (and the `url` crate that reqwest parses with, which follows
//! WHATWG: `\` is `/`, dot segments resolved, `%2e` decoded) would read a normalisable spelling
//! as another path than the one judged (`models/..\files` → `/v1/files`).
//!
//! Canonical: an origin-form target; the path is `/`-separated segments of ASCII letters,
//! digits and `-._~:`, none empty, none `.`/`..`, none ending in `.`; no `%`, `\`, `;`, no
//! non-ASCII or control byte. The query is absent or `name=value` pairs of the same bytes (no
//! `:`) joined by `&`, each name once. (A fragment never reaches the handler: the `http` crate
//! drops it while parsing, so it is never forwarded either.)

use axum::http::Uri;

/// The longest path taken (real model paths are under 100 bytes).
pub const MAX_PATH: usize = 512;
/// The longest query taken.
pub const MAX_QUERY: usize = 256;

/// A canonical request target, split at the upstream's path prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The whole path as received and forwarded, e.g. `/v1/models/gpt-5`.
    pub path: String,
    /// The segments after the prefix: `["models", "gpt-5"]`.
    pub segments: Vec<String>,
    /// The query's pairs in order (empty: no query).
    pub query: Vec<(String, String)>,
}

impl Target {
    /// The query as forwarded (`None`: no query).
    pub fn query_string(&self) -> Option<String> {
        (!self.query.is_empty()).then(|| {
            self.query
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("&")
        })
    }
}

/// Why a target was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Not canonical; `what` says which rule.
    #[error("the request target is not in canonical form: {what}")]
    NotCanonical {
        /// The rule broken, e.g. "a `\\` in the path".
        what: String,
    },
    /// Canonical, but not under the upstream's path.
    #[error("path `{path}` is not under the upstream path `{prefix}`")]
    NotUnderPrefix {
        /// The path.
        path: String,
        /// The upstream's path.
        prefix: String,
    },
}

fn refuse(what: impl Into<String>) -> TargetError {
    TargetError::NotCanonical { what: what.into() }
}

/// True for the bytes a canonical path segment is made of.
fn segment_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':')
}

/// True for the bytes of a canonical query name or value.
fn query_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Names a byte for a message without echoing a control byte.
fn describe(b: u8) -> String {
    match b {
        b'\\' => "a `\\`".to_owned(),
        b'%' => "a percent-encoded byte (`%`)".to_owned(),
        b';' => "a `;` parameter".to_owned(),
        0x80..=0xff => "a non-ASCII byte".to_owned(),
        b if b.is_ascii_control() => format!("control byte 0x{b:02x}"),
        b => format!("`{}`", char::from(b)),
    }
}

/// Parses `uri` (as hyper read the request line) against the upstream path `prefix` (`/v1`,
/// or empty).
pub fn parse(uri: &Uri, prefix: &str) -> Result<Target, TargetError> {
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(refuse("an absolute-form target (expected a path)"));
    }
    let path = uri.path();
    if path.len() > MAX_PATH {
        return Err(refuse(format!("a path over {MAX_PATH} bytes")));
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(refuse("a path that does not start with `/`"));
    };
    let mut segments = Vec::new();
    for seg in rest.split('/') {
        if seg.is_empty() {
            return Err(refuse("an empty path segment (`//` or a trailing `/`)"));
        }
        if let Some(b) = seg.bytes().find(|b| !segment_byte(*b)) {
            return Err(refuse(format!("{} in the path", describe(b))));
        }
        if seg == "." || seg == ".." {
            return Err(refuse(format!("a `{seg}` segment in the path")));
        }
        if seg.ends_with('.') {
            return Err(refuse("a path segment ending in `.`"));
        }
        segments.push(seg.to_owned());
    }
    let query = match uri.query() {
        None => Vec::new(),
        Some(q) => parse_query(q)?,
    };
    let prefix_segs: Vec<&str> = prefix.split('/').filter(|s| !s.is_empty()).collect();
    let under = segments.len() > prefix_segs.len()
        && segments.iter().zip(&prefix_segs).all(|(a, b)| a == b);
    if !under {
        return Err(TargetError::NotUnderPrefix {
            path: path.to_owned(),
            prefix: prefix.to_owned(),
        });
    }
    Ok(Target {
        path: path.to_owned(),
        segments: segments.split_off(prefix_segs.len()),
        query,
    })
}

fn parse_query(q: &str) -> Result<Vec<(String, String)>, TargetError> {
    if q.is_empty() {
        return Err(refuse("a `?` with no query after it"));
    }
    if q.len() > MAX_QUERY {
        return Err(refuse(format!("a query over {MAX_QUERY} bytes")));
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in q.split('&') {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(refuse("a query parameter without `=value`"));
        };
        if k.is_empty() || v.is_empty() {
            return Err(refuse("an empty query name or value"));
        }
        if let Some(b) = k.bytes().chain(v.bytes()).find(|b| !query_byte(*b)) {
            return Err(refuse(format!("{} in the query", describe(b))));
        }
        if out.iter().any(|(n, _)| n == k) {
            return Err(refuse(format!("query parameter `{k}` given twice")));
        }
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(target: &str, prefix: &str) -> Result<Target, TargetError> {
        parse(&target.parse::<Uri>().unwrap(), prefix)
    }

    #[test]
    fn canonical_targets_split_at_the_prefix() {
        let t = p("/v1/models/ft:gpt-4o:org::abc1", "/v1").unwrap();
        assert_eq!(t.segments, vec!["models", "ft:gpt-4o:org::abc1"]);
        assert_eq!(t.path, "/v1/models/ft:gpt-4o:org::abc1");
        assert_eq!(t.query_string(), None);
        let t = p("/v1/messages?beta=true", "").unwrap();
        assert_eq!(t.segments, vec!["v1", "messages"]);
        assert_eq!(t.query_string().as_deref(), Some("beta=true"));
        let t = p("/api/v1/chat/completions", "/api/v1").unwrap();
        assert_eq!(t.segments, vec!["chat", "completions"]);
    }

    #[test]
    fn every_non_canonical_spelling_is_refused_naming_the_rule() {
        for (target, rule) in [
            ("/v1/models/..%5Cfiles", "percent"),
            ("/v1/models/%2e%2e/files", "percent"),
            ("/v1/models/%41", "percent"),
            ("/v1/models/..\\files", "`\\`"),
            ("/v1/models/..", "`..` segment"),
            ("/v1/./responses", "`.` segment"),
            ("/v1//responses", "empty path segment"),
            ("/v1/responses/", "empty path segment"),
            ("/v1/responses.", "ending in `.`"),
            ("/v1/responses;x=1", "`;`"),
            ("/v1/r\u{e9}sponses", "non-ASCII"),
            ("/v1/responses?", "no query"),
            ("/v1/responses?a", "without `=value`"),
            ("/v1/responses?a=1&a=2", "twice"),
            ("/v1/responses?a=%31", "percent"),
            ("/v1/responses?a=", "empty"),
            ("http://evil/v1/responses", "absolute-form"),
            ("/v1/a\"b", "`\"`"),
        ] {
            let e = p(target, "/v1").unwrap_err().to_string();
            assert!(e.contains(rule), "{target}: {e}");
            assert!(
                e.starts_with("the request target is not in canonical form"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_canonical_path_outside_the_prefix_is_not_under_it() {
        for t in ["/v10/responses", "/responses", "/v1"] {
            assert!(
                matches!(p(t, "/v1"), Err(TargetError::NotUnderPrefix { .. })),
                "{t}"
            );
        }
    }
}
