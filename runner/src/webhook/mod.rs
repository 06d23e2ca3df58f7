//! Completion webhooks (SPEC §13): when a job ends, the service POSTs its result JSON to the
//! configured `[notify] url` and to the job's own `notify_url` (allowed by
//! `limits.allowed_notify`), signed with HMAC-SHA256 of the body (`X-Ralph-Signature`), retried
//! with backoff and jitter for a bounded time, every attempt journalled (`notified`) and counted
//! (`ralph_notifications_total{result}`). Deliveries run beside the jobs and never delay one.
//!
//! - [`config`]: the `[notify]` table, validated once.
//! - [`target`]: which URLs may be named, checked on the parsed URL.
//! - [`sign`]: the signature.
//! - [`backoff`]: the retry schedule, as pure data.
//! - [`deliver`]: the delivery tasks (the service's journal observer starts them).

pub mod backoff;
pub mod config;
pub mod deliver;
pub mod sign;
pub mod target;

use serde::{Deserialize, Serialize};

pub use config::NotifyConfig;
pub use deliver::Notifier;

/// How one delivery attempt ended (`notified.result`, `ralph_notifications_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryResult {
    /// The receiver answered 2xx: the delivery is over.
    Delivered,
    /// A non-2xx answer, or none: it will be tried again.
    Retrying,
    /// A non-2xx answer, or none, and the retry time is over (or too many are pending): the
    /// delivery is abandoned.
    GaveUp,
}

impl DeliveryResult {
    /// Every value, for pre-initialisation.
    pub const ALL: [DeliveryResult; 3] = [
        DeliveryResult::Delivered,
        DeliveryResult::Retrying,
        DeliveryResult::GaveUp,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryResult::Delivered => "delivered",
            DeliveryResult::Retrying => "retrying",
            DeliveryResult::GaveUp => "gave_up",
        }
    }
}

/// Whose URL a delivery goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Receiver {
    /// The service's `[notify] url`.
    Service,
    /// The job's `notify_url`.
    Job,
}
