//! The service's side of completion webhooks (SPEC §13): a journal observer that, on each
//! `job_finished` this host records (a round loop's end, a cancel, a failure, recovery's
//! interrupted jobs), starts one delivery per receiver — the service's `[notify] url` and the
//! job's own `notify_url` — of the job's result JSON, the object `GET /v1/jobs/{id}` and
//! `ralph wait --json` give. It returns at once; the deliveries run on their own.

use std::path::PathBuf;
use std::sync::Arc;

use crate::store::{Event, EventKind, JobView, Observer};
use crate::webhook::{Notifier, Receiver};

/// Starts the deliveries of each job end.
#[derive(Debug)]
pub struct NotifyObserver {
    notifier: Arc<Notifier>,
    state_dir: PathBuf,
}

impl NotifyObserver {
    /// An observer sending through `notifier`; artifacts paths are under `state_dir`.
    pub fn new(notifier: Arc<Notifier>, state_dir: PathBuf) -> Self {
        NotifyObserver {
            notifier,
            state_dir,
        }
    }
}

/// The body of a delivery: the job's result JSON, with `job_id` as `ralph run --json` names it.
pub fn body(view: &JobView, state_dir: &std::path::Path) -> Vec<u8> {
    let dir = view
        .runner
        .as_ref()
        .and_then(|r| r.state_dir.as_deref())
        .unwrap_or(state_dir);
    let mut j = super::api::job_json(view, &crate::engine::job_dir(dir, &view.id));
    j["job_id"] = serde_json::Value::String(view.id.clone());
    serde_json::to_vec(&j).unwrap_or_default()
}

impl Observer for NotifyObserver {
    fn on_event(&self, view: &JobView, event: &Event) {
        if !matches!(event.kind, EventKind::JobFinished { .. }) {
            return;
        }
        let mut targets = Vec::new();
        if let Some(u) = self.notifier.service_url() {
            targets.push((Receiver::Service, u.clone()));
        }
        // Admission checked it against `limits.allowed_notify`; a URL that no longer parses
        // (an older journal) is skipped.
        if let Some(u) = view
            .spec
            .notify_url
            .as_deref()
            .and_then(|u| crate::webhook::target::parse(u).ok())
        {
            targets.push((Receiver::Job, u));
        }
        if targets.is_empty() {
            return;
        }
        let body = body(view, &self.state_dir);
        for (receiver, url) in targets {
            self.notifier.enqueue(&view.id, receiver, url, body.clone());
        }
    }
}
