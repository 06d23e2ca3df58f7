//! Why an agent CLI retried one of its own API requests, as a bounded label for
//! `ralph_agent_request_retries_total{reason}`.

/// Every reason label, in the order they are pre-initialised.
pub const RETRY_REASONS: [&str; 6] = [
    "rate_limit",
    "overloaded",
    "server_error",
    "timeout",
    "network",
    "other",
];

/// Classifies a retry from an HTTP status (when the CLI gives one) and its error text.
pub fn classify(status: Option<u64>, text: &str) -> &'static str {
    match status {
        Some(429) => return "rate_limit",
        Some(529) => return "overloaded",
        Some(408) => return "timeout",
        Some(s) if (500..600).contains(&s) => return "server_error",
        _ => {}
    }
    let t = text.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
    if has(&["429", "rate limit", "rate_limit", "too many requests"]) {
        "rate_limit"
    } else if has(&["overloaded", "529"]) {
        "overloaded"
    } else if has(&["timeout", "timed out"]) {
        "timeout"
    } else if has(&[
        "500",
        "502",
        "503",
        "504",
        "server error",
        "server_error",
        "internal error",
    ]) {
        "server_error"
    } else if has(&["disconnect", "connection", "network", "stream", "reconnect"]) {
        "network"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_win_over_text() {
        assert_eq!(classify(Some(429), "whatever"), "rate_limit");
        assert_eq!(classify(Some(529), ""), "overloaded");
        assert_eq!(classify(Some(503), ""), "server_error");
        assert_eq!(classify(Some(408), ""), "timeout");
    }

    #[test]
    fn text_is_classified_conservatively() {
        assert_eq!(
            classify(
                None,
                "Reconnecting... 2/5 (stream disconnected before completion)"
            ),
            "network"
        );
        assert_eq!(
            classify(
                None,
                "exceeded retry limit, last status: 429 Too Many Requests"
            ),
            "rate_limit"
        );
        assert_eq!(classify(None, "Overloaded"), "overloaded");
        assert_eq!(classify(None, "something odd"), "other");
        for r in RETRY_REASONS {
            assert!(!r.is_empty());
        }
    }
}
