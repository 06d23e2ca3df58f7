//! Taking a job into the queue: journals its `job_submitted` and tells the engine's observers,
//! so what counts a submission (`ralph_jobs_submitted_total`) hears it from the journal, as it
//! hears every other fact.

use super::Engine;
use crate::job::{JobId, JobSpec};
use crate::store::StoreError;

impl Engine {
    /// Journals `spec` as a queued job with `priority` (its id `id`, else a new one) and tells
    /// the observers. The caller has admitted it ([`Engine::check`], or the service's admission).
    pub fn accept(
        &self,
        id: Option<JobId>,
        spec: &JobSpec,
        priority: i32,
    ) -> Result<JobId, StoreError> {
        let id = id.unwrap_or_else(crate::job::new_job_id);
        let (view, event) = self.store().submit_event(id.clone(), spec, priority)?;
        for o in &self.observers {
            o.on_event(&view, &event);
        }
        Ok(id)
    }
}
