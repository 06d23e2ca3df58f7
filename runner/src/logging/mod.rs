//! The service's log (`ralph serve`): `tracing` events on stderr, as text or JSON lines, their
//! levels from `RUST_LOG` (default `info`). Other commands print their own progress and install
//! a subscriber only when `RUST_LOG` is set ([`init_if_asked`]).
//!
//! - Text ([`text`]): `2026-01-02T03:04:05.678Z INFO message key=value …`, one line per event;
//!   control characters in the message and fields are escaped, so untrusted text (a job's
//!   objective, a path) cannot start a line of its own.
//! - JSON: one object per line, `{"timestamp","level","message",…fields}`.

pub mod text;

use tracing_subscriber::EnvFilter;

/// How the log is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event, with a timestamp, the level and `key=value` fields.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// A log that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `RUST_LOG` is not a filter.
    #[error(
        "failed to parse RUST_LOG `{value}`: {message} (expected e.g. `info`, `warn` or `ralph_runner=debug`)"
    )]
    Filter {
        /// The variable's value.
        value: String,
        /// Why.
        message: String,
    },
    /// Another subscriber is installed already.
    #[error("failed to install the log: {message}")]
    Install {
        /// Why.
        message: String,
    },
}

/// The filter of `RUST_LOG`, or `default` when it is unset or empty.
fn filter(default: &str) -> Result<EnvFilter, LogError> {
    let value = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_owned());
    EnvFilter::builder()
        .parse(&value)
        .map_err(|e| LogError::Filter {
            message: e.to_string(),
            value,
        })
}

/// Installs the log on stderr in `format`, at `RUST_LOG`'s levels (default `info`).
pub fn init(format: LogFormat) -> Result<(), LogError> {
    let filter = filter("info")?;
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let result = match format {
        LogFormat::Text => {
            tracing::subscriber::set_global_default(builder.event_format(text::TextFormat).finish())
        }
        LogFormat::Json => tracing::subscriber::set_global_default(
            builder
                .json()
                .flatten_event(true)
                .with_target(false)
                .with_current_span(false)
                .with_span_list(false)
                .finish(),
        ),
    };
    result.map_err(|e| LogError::Install {
        message: e.to_string(),
    })
}

/// For commands with their own output (`ralph run`, …): a text log on stderr only when
/// `RUST_LOG` is set, so library events never mix into their output unasked.
pub fn init_if_asked() -> Result<(), LogError> {
    if std::env::var("RUST_LOG").is_ok_and(|v| !v.trim().is_empty()) {
        init(LogFormat::Text)
    } else {
        Ok(())
    }
}
