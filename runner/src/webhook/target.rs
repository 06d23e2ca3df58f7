//! Which URLs a delivery may go to: `http`/`https` with a host and no credentials in the URL,
//! judged after parsing (so `..`, `%2e%2e`, a `user@` or a port cannot slip past a prefix), and
//! a job's own `notify_url` only under one of `limits.allowed_notify` at a path boundary.

use reqwest::Url;

/// Why a URL cannot be a receiver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Not a URL at all.
    #[error("`{url}` is not a URL: {why}")]
    Unparsable {
        /// The text given.
        url: String,
        /// The parser's reason.
        why: String,
    },
    /// A scheme other than http and https.
    #[error("`{url}`: only http and https URLs are allowed")]
    Scheme {
        /// The text given.
        url: String,
    },
    /// A user name or password in the URL.
    #[error("`{url}`: credentials in the URL are not allowed (the body is signed instead)")]
    Credentials {
        /// The text given.
        url: String,
    },
}

/// Parses a receiver's URL.
pub fn parse(url: &str) -> Result<Url, TargetError> {
    let parsed = Url::parse(url).map_err(|e| TargetError::Unparsable {
        url: url.to_owned(),
        why: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(TargetError::Scheme {
            url: url.to_owned(),
        });
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(TargetError::Credentials {
            url: url.to_owned(),
        });
    }
    Ok(parsed)
}

/// Whether `url` (parsed) lies under one of `prefixes`: the normalized URL starts with the
/// prefix, and the prefix ends with `/` or the URL goes on with `/`, `?` or nothing (so
/// `https://h/hooks` does not let `https://h/hooks-evil` or `https://h.evil` in).
pub fn allowed(url: &Url, prefixes: &[String]) -> bool {
    let text = url.as_str();
    prefixes.iter().any(|p| {
        !p.is_empty()
            && text.strip_prefix(p.as_str()).is_some_and(|rest| {
                rest.is_empty() || p.ends_with('/') || rest.starts_with(['/', '?'])
            })
    })
}

/// Where a delivery went, for the journal and the log: scheme, host and port only (a URL's
/// path or query often holds a secret, as in chat webhooks).
pub fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ok(url: &str, prefixes: &[&str]) -> bool {
        let p: Vec<String> = prefixes.iter().map(|s| (*s).to_owned()).collect();
        allowed(&parse(url).unwrap(), &p)
    }

    #[test]
    fn prefixes_match_the_parsed_url_at_a_boundary() {
        let hooks = ["https://h.example/hooks"];
        assert!(ok("https://h.example/hooks", &hooks));
        assert!(ok("https://h.example/hooks/a?b=1", &hooks));
        assert!(ok("https://h.example/hooks?b=1", &hooks));
        assert!(!ok("https://h.example/hooks-evil", &hooks));
        assert!(!ok("https://h.example.evil/hooks", &hooks));
        assert!(!ok("https://h.example:8443/hooks", &hooks));
        assert!(!ok("https://h.example/hooks/../admin", &hooks));
        assert!(!ok("https://h.example/hooks/%2e%2e/admin", &hooks));
        assert!(!ok("http://h.example/hooks", &hooks));
        assert!(!ok("https://h.example/hooks", &[]));
        assert!(!ok("https://h.example/hooks", &[""]));
        assert!(ok("http://127.0.0.1:9000/x", &["http://127.0.0.1:9000/"]));
        // Host names are normalized before the comparison.
        assert!(ok("https://H.EXAMPLE/hooks", &hooks));
    }

    #[test]
    fn only_http_urls_without_credentials_are_receivers() {
        assert!(matches!(
            parse("file:///etc/passwd"),
            Err(TargetError::Scheme { .. })
        ));
        assert!(matches!(
            parse("unix:/run/x"),
            Err(TargetError::Scheme { .. })
        ));
        assert!(matches!(
            parse("not a url"),
            Err(TargetError::Unparsable { .. })
        ));
        assert!(matches!(
            parse("https://u:p@h.example/"),
            Err(TargetError::Credentials { .. })
        ));
        assert_eq!(
            origin(&parse("https://h.example:8443/secret/path?k=v").unwrap()),
            "https://h.example:8443"
        );
    }
}
