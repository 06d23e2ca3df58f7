//! `ralph run --pushgateway URL`: pushes the run's metrics to a Prometheus Pushgateway at the
//! end of the job. A failed push is a warning, never a failed job.
//!
//! Grouping: `URL` alone pushes to `URL/metrics/job/ralph/instance/<hostname>`; a URL that
//! already has a `/metrics/job/<name>[/<label>/<value>...]` path is used as given, so a
//! pipeline can add its own grouping labels. The push is a `PUT`: it replaces the group, so the
//! group holds the last run's counts (query them with `max_over_time` / `last_over_time`, or
//! use `--metrics-textfile` for counters that keep counting across runs).

use std::time::Duration;

use super::MetricsError;

/// How long a push may take.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The push URL for `base`, with the default grouping unless `base` has its own.
pub fn group_url(base: &str, host: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(base).map_err(|e| format!("`{base}` is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("`{base}`: expected an http:// or https:// URL"));
    }
    if parsed.path().contains("/metrics/job/") {
        return Ok(base.to_owned());
    }
    let host = if host.is_empty() { "unknown" } else { host };
    let mut url = parsed;
    url.path_segments_mut()
        .map_err(|()| format!("`{base}` cannot take a path"))?
        .pop_if_empty()
        .extend(["metrics", "job", "ralph", "instance", host]);
    Ok(url.to_string())
}

/// Pushes the text exposition `body` to `url` (a group URL from [`group_url`]).
pub async fn push(url: &str, body: String) -> Result<(), MetricsError> {
    let err = |message: String| MetricsError::Push {
        url: url.to_owned(),
        message,
    };
    let client = reqwest::Client::builder()
        .timeout(PUSH_TIMEOUT)
        .build()
        .map_err(|e| err(e.to_string()))?;
    let resp = client
        .put(url)
        .header(reqwest::header::CONTENT_TYPE, "text/plain; version=0.0.4")
        .body(body)
        .send()
        .await
        .map_err(|e| err(e.to_string()))?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return Err(err(format!(
            "the gateway answered {status}: {}",
            crate::util::text::bounded(text.trim(), 512)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_grouping_is_job_and_instance() {
        assert_eq!(
            group_url("http://pgw:9091", "ci-7").unwrap(),
            "http://pgw:9091/metrics/job/ralph/instance/ci-7"
        );
        assert_eq!(
            group_url("http://pgw:9091/", "ci-7").unwrap(),
            "http://pgw:9091/metrics/job/ralph/instance/ci-7"
        );
        assert_eq!(
            group_url("http://pgw:9091/metrics/job/nightly/branch/main", "h").unwrap(),
            "http://pgw:9091/metrics/job/nightly/branch/main"
        );
        assert!(group_url("pgw:9091", "h").is_err());
        assert!(group_url("ftp://pgw", "h").is_err());
    }
}
