//! The deliveries: each is its own task on the service's runtime, so a slow or dead receiver
//! holds only its own task (never a job, a round or another delivery). At most
//! [`MAX_IN_FLIGHT`] requests are open at once and [`MAX_PENDING`] deliveries wait or retry;
//! one more is given up at once (journalled). Each attempt is journalled as `notified` on the
//! job's journal (the metrics count those events), its result one of delivered, retrying or
//! gave up. A delivery lost with its runner (a crash during the retries) is not sent again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use reqwest::Url;

use super::backoff;
use super::config::Notify;
use super::{DeliveryResult, Receiver};
use crate::store::{EventKind, Journal, Observer, Store, StoreError};

/// Requests open at once.
pub const MAX_IN_FLIGHT: usize = 32;
/// Deliveries waiting or retrying at once.
pub const MAX_PENDING: usize = 10_000;
/// Longest error text journalled.
const MAX_ERROR: usize = 300;
/// Tries to journal an attempt when another writer of the job got there first.
const JOURNAL_TRIES: u32 = 5;

/// Sends the deliveries of one service.
pub struct Notifier {
    notify: Notify,
    store: Arc<Store>,
    observers: Vec<Arc<dyn Observer>>,
    http: reqwest::Client,
    handle: tokio::runtime::Handle,
    pending: AtomicUsize,
    in_flight: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("notify", &self.notify)
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Why the notifier could not be made.
#[derive(Debug, thiserror::Error)]
pub enum NotifierError {
    /// Not on a tokio runtime.
    #[error("webhooks need the service's runtime")]
    NoRuntime,
    /// The HTTP client could not be built.
    #[error("the webhook client: {0}")]
    Client(String),
}

impl Notifier {
    /// A notifier for `notify`, journalling its attempts in `store` (heard by `observers`).
    /// Called on the service's runtime.
    pub fn new(
        notify: Notify,
        store: Arc<Store>,
        observers: Vec<Arc<dyn Observer>>,
    ) -> Result<Arc<Notifier>, NotifierError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| NotifierError::NoRuntime)?;
        let http = reqwest::Client::builder()
            .timeout(notify.timeout)
            .connect_timeout(notify.timeout)
            // A redirect would take the signed body somewhere the allow-list never judged.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("ralph/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| NotifierError::Client(e.to_string()))?;
        Ok(Arc::new(Notifier {
            notify,
            store,
            observers,
            http,
            handle,
            pending: AtomicUsize::new(0),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        }))
    }

    /// The service-wide receiver, if one is configured.
    pub fn service_url(&self) -> Option<&Url> {
        self.notify.url.as_ref()
    }

    /// Deliveries waiting or retrying now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Starts the delivery of `body` (the job's result JSON) to `url`; returns at once.
    pub fn enqueue(self: &Arc<Self>, job_id: &str, receiver: Receiver, url: Url, body: Vec<u8>) {
        let delivery = uuid::Uuid::now_v7().to_string();
        let job = job_id.to_owned();
        if self.pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            let given_up = Journalled {
                job,
                delivery,
                receiver,
                url,
                attempt: 1,
                got: Attempt {
                    status: None,
                    error: Some(format!(
                        "{MAX_PENDING} deliveries are already pending: given up at once"
                    )),
                },
                result: DeliveryResult::GaveUp,
            };
            let parts = self.clone_parts();
            self.handle.spawn_blocking(move || parts.record(given_up));
            return;
        }
        let me = self.clone();
        self.handle.spawn(async move {
            me.deliver(&job, &delivery, receiver, &url, body).await;
            me.pending.fetch_sub(1, Ordering::AcqRel);
        });
    }

    async fn deliver(
        &self,
        job: &str,
        delivery: &str,
        receiver: Receiver,
        url: &Url,
        body: Vec<u8>,
    ) {
        let signature = super::sign::signature(&self.notify.secret, &body);
        let body = bytes::Bytes::from(body);
        let started = Instant::now();
        let mut attempt = 1u32;
        loop {
            let got = {
                let _permit = self.in_flight.acquire().await;
                self.post(url, &body, &signature, delivery, attempt).await
            };
            let delivered = got.status.is_some_and(|s| (200..300).contains(&s));
            let pause = if delivered {
                None
            } else {
                backoff::next_pause(
                    attempt,
                    started.elapsed(),
                    self.notify.retry_for,
                    backoff::random_unit(),
                )
            };
            let result = match (delivered, pause) {
                (true, _) => DeliveryResult::Delivered,
                (false, Some(_)) => DeliveryResult::Retrying,
                (false, None) => DeliveryResult::GaveUp,
            };
            let (job_id, delivery_id, to) = (job.to_owned(), delivery.to_owned(), url.clone());
            let store_side = Journalled {
                job: job_id,
                delivery: delivery_id,
                receiver,
                url: to,
                attempt,
                got,
                result,
            };
            let me = self.clone_parts();
            // The store call blocks: off the runtime's workers.
            let _ = tokio::task::spawn_blocking(move || me.record(store_side)).await;
            match pause {
                Some(p) => tokio::time::sleep(p).await,
                None => return,
            }
            attempt = attempt.saturating_add(1);
        }
    }

    async fn post(
        &self,
        url: &Url,
        body: &bytes::Bytes,
        signature: &str,
        delivery: &str,
        attempt: u32,
    ) -> Attempt {
        let sent = self
            .http
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-Ralph-Signature", signature)
            .header("X-Ralph-Delivery", delivery)
            .header("X-Ralph-Event", "job_finished")
            .header("X-Ralph-Attempt", attempt.to_string())
            .body(body.clone())
            .send()
            .await;
        match sent {
            Ok(r) => Attempt {
                status: Some(r.status().as_u16()),
                error: None,
            },
            // Without the URL: its path or query may hold a secret.
            Err(e) => Attempt {
                status: None,
                error: Some(bounded(&error_chain(&e.without_url()))),
            },
        }
    }

    fn clone_parts(&self) -> JournalParts {
        JournalParts {
            store: self.store.clone(),
            observers: self.observers.clone(),
        }
    }
}

/// What one attempt got.
#[derive(Debug, Clone)]
struct Attempt {
    status: Option<u16>,
    error: Option<String>,
}

/// One attempt, to be journalled.
struct Journalled {
    job: String,
    delivery: String,
    receiver: Receiver,
    url: Url,
    attempt: u32,
    got: Attempt,
    result: DeliveryResult,
}

/// What journalling needs (sent to a blocking thread).
struct JournalParts {
    store: Arc<Store>,
    observers: Vec<Arc<dyn Observer>>,
}

impl JournalParts {
    fn record(self, j: Journalled) {
        let to = super::target::origin(&j.url);
        match j.result {
            DeliveryResult::Delivered => {
                tracing::info!(job_id = %j.job, delivery = %j.delivery, to = %to, attempt = j.attempt, status = j.got.status, "job {}: its end was delivered to {to} (attempt {})", j.job, j.attempt)
            }
            DeliveryResult::Retrying => {
                tracing::warn!(job_id = %j.job, delivery = %j.delivery, to = %to, attempt = j.attempt, status = j.got.status, error = j.got.error.as_deref(), "job {}: delivering its end to {to} failed (attempt {}): {}; trying again", j.job, j.attempt, failure(&j.got))
            }
            DeliveryResult::GaveUp => {
                tracing::warn!(job_id = %j.job, delivery = %j.delivery, to = %to, attempt = j.attempt, status = j.got.status, error = j.got.error.as_deref(), "job {}: delivering its end to {to} failed (attempt {}): {}; given up", j.job, j.attempt, failure(&j.got))
            }
        }
        let kind = EventKind::Notified {
            delivery: j.delivery.clone(),
            receiver: j.receiver,
            to,
            attempt: j.attempt,
            status: j.got.status,
            result: j.result,
            error: j.got.error.clone(),
        };
        for _ in 0..JOURNAL_TRIES {
            let recorded = Journal::open(self.store.clone(), &j.job, self.observers.clone())
                .and_then(|mut journal| journal.record(kind.clone()));
            match recorded {
                Ok(_) => return,
                // Another writer of the job appended meanwhile: read it again.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => {
                    tracing::warn!(job_id = %j.job, error = %e, "job {}: a webhook attempt could not be journalled: {e}", j.job);
                    return;
                }
            }
        }
    }
}

fn failure(a: &Attempt) -> String {
    match (a.status, &a.error) {
        (Some(s), _) => format!("HTTP {s}"),
        (None, Some(e)) => e.clone(),
        (None, None) => "no answer".to_owned(),
    }
}

/// An error with its causes, `: `-joined.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cur = s.source();
    }
    text
}

/// `text` cut to [`MAX_ERROR`] bytes at a character boundary, control characters replaced.
fn bounded(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.len() <= MAX_ERROR {
        return clean;
    }
    let mut end = MAX_ERROR;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &clean[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journalled_errors_are_bounded_single_lines() {
        let long = "é\n".repeat(400);
        let b = bounded(&long);
        assert!(b.len() <= MAX_ERROR + '…'.len_utf8());
        assert!(!b.contains('\n'));
        assert_eq!(bounded("refused\x1b[31m"), "refused [31m");
    }
}
