//! Prometheus metrics (SPEC §7). The loop and the service never touch the registry: the
//! journal's events are turned into typed [`MetricEvent`]s ([`from_journal`]), and only
//! [`Metrics::record`] updates the registry. Where they go: `/metrics` of `ralph serve`, the
//! node-exporter textfile of `ralph run --metrics-textfile` ([`textfile`], merged so counters
//! keep counting across runs), and a Pushgateway ([`push`]).
//!
//! Naming rules (also in `docs/metrics.md`): prefix `ralph_`; base units in names (`_seconds`,
//! `_bytes`); `_total` only on counters; label values from closed sets, pre-initialised to 0
//! where the set is known (`model` is the one open label, capped at [`MAX_MODELS`] values);
//! never a job id, path or free text in a label.

pub mod event;
pub mod exposition;
pub mod from_journal;
pub mod names;
pub mod push;
pub mod registry;
pub mod textfile;

pub use event::{MetricEvent, RoundOutcome, SetupResult, VerifyResult};
pub use from_journal::MetricsObserver;
pub use registry::{MAX_MODELS, Metrics};

/// A failure around metrics. None of them fails a job: callers warn and go on.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A metric could not be registered (a programming error caught by the tests).
    #[error("failed to register metric `{name}`: {source}")]
    Register {
        /// The metric.
        name: &'static str,
        /// The library's error.
        source: prometheus::Error,
    },
    /// The exposition could not be encoded.
    #[error("failed to encode metrics: {0}")]
    Encode(prometheus::Error),
    /// An existing textfile could not be read as metrics.
    #[error("failed to parse `{path}` line {line}: {message}")]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// 1-based line.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// A file operation failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The push to the Pushgateway failed.
    #[error("failed to push metrics to `{url}`: {message}")]
    Push {
        /// Where.
        url: String,
        /// Why.
        message: String,
    },
}

/// Shared by the tests of this module's files.
#[cfg(test)]
pub(crate) mod test_support {
    use std::time::Duration;

    use prometheus::proto::MetricFamily;
    use ralph_sandbox::BackendKind;

    use super::{MetricEvent, Metrics, RoundOutcome};
    use crate::usage::UsageTotals;

    /// The metrics of one run: a complete round and `tokens` input tokens of `model`.
    pub(crate) fn one_run(model: &str, tokens: u64) -> Vec<MetricFamily> {
        let m = Metrics::new(false).unwrap();
        m.record(&MetricEvent::RoundFinished {
            outcome: RoundOutcome::Complete,
            backend: BackendKind::Native,
            duration: Duration::from_secs(2),
            handoff_bytes: Some(200),
            setup: None,
        });
        m.record(&MetricEvent::Tokens {
            model: model.into(),
            usage: UsageTotals {
                input_tokens: tokens,
                ..UsageTotals::default()
            },
        });
        m.set_jobs(0, 1);
        m.gather()
    }
}
