//! Per-token rate limits (`[tokens.NAME] requests_per_minute`, `jobs_per_minute`): a token
//! bucket per token and kind, full at start, refilled evenly over the minute. Over it, the call
//! is answered `429` with `Retry-After` (whole seconds until enough has refilled).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Every API call.
    Requests,
    /// Each job submitted.
    Jobs,
}

impl Kind {
    /// The configuration key that sets it.
    pub fn key(self) -> &'static str {
        match self {
            Kind::Requests => "requests_per_minute",
            Kind::Jobs => "jobs_per_minute",
        }
    }
}

#[derive(Debug)]
struct Bucket {
    level: f64,
    at: Instant,
}

/// The buckets of every token.
#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<(String, Kind), Bucket>>,
}

impl RateLimiter {
    /// Takes `n` from `token`'s bucket of `kind` allowing `per_minute`; `Err(wait)` when there
    /// is not enough (nothing is taken).
    pub fn take(&self, token: &str, kind: Kind, per_minute: u32, n: u32) -> Result<(), Duration> {
        let cap = f64::from(per_minute);
        let rate = cap / 60.0;
        let now = Instant::now();
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        let b = buckets.entry((token.to_owned(), kind)).or_insert(Bucket {
            level: cap,
            at: now,
        });
        b.level = (b.level + now.duration_since(b.at).as_secs_f64() * rate).min(cap);
        b.at = now;
        let want = f64::from(n);
        if want <= b.level {
            b.level -= want;
            return Ok(());
        }
        // More than the bucket holds can never pass: the wait is a full minute.
        let missing = (want.min(cap) - b.level).max(0.0);
        Err(Duration::from_secs_f64((missing / rate).max(1.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_empties_then_says_how_long_to_wait() {
        let r = RateLimiter::default();
        for _ in 0..3 {
            assert!(r.take("ci", Kind::Requests, 3, 1).is_ok());
        }
        let wait = r.take("ci", Kind::Requests, 3, 1).unwrap_err();
        assert!(
            wait > Duration::from_secs(10) && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        // Another token, another kind: their own buckets.
        assert!(r.take("people", Kind::Requests, 3, 1).is_ok());
        assert!(r.take("ci", Kind::Jobs, 3, 2).is_ok());
        assert!(r.take("ci", Kind::Jobs, 3, 2).is_err());
    }
}
