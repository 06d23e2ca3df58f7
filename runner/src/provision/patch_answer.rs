//! What `GET /v1/jobs/{id}/patch` and `ralph diff JOB` answer for a job (SPEC §11), decided
//! in one place from its journal's view and what is on disk: the patch (a `partial` one too,
//! flagged), or the truth about why there is none — not a provisioned job, not ended yet, the
//! patch could not be built (and why), it was removed with the job's artifacts, it is on the
//! host that ran the job, the job ended before its result was written, its workspace was never
//! provisioned.

use std::path::Path;

use super::patch_status::{PatchState, PatchStatus, skipped_list};
use crate::store::{JobState, JobView};

/// The answer for a job's patch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatchAnswer {
    /// The patch file is there: send it. `status` says what it holds (`None` for a journal
    /// older than the patch states).
    Patch {
        /// What the patch holds.
        status: Option<PatchStatus>,
    },
    /// There is no patch, and why (`404 no_patch`; `ralph diff` exits 64).
    NoPatch(String),
    /// The patch could not be built, and why (`404 patch_failed`; `ralph diff` exits 70).
    Failed(String),
}

/// The answer for the patch of job `view`, whose `result.patch` would be `path` (in the job
/// directory `job_dir`) on this host, `this_host`.
pub fn answer(view: &JobView, path: &Path, job_dir: &Path, this_host: &str) -> PatchAnswer {
    let id = &view.id;
    if view.spec.source.is_none() {
        return PatchAnswer::NoPatch(format!(
            "job `{id}` ran in an existing workspace: only a provisioned job (`repo` or `upload`) has a patch"
        ));
    }
    let finished = view.state == JobState::Finished;
    let status = view.patch.as_ref();
    if let (true, Some(s)) = (finished, status) {
        if s.state == PatchState::Failed {
            return PatchAnswer::Failed(failed_message(id, s));
        }
    }
    if path.is_file() {
        return PatchAnswer::Patch {
            status: status.cloned(),
        };
    }
    if !finished {
        return PatchAnswer::NoPatch(format!(
            "job `{id}` is {}: its result.patch is written when it ends",
            view.state.as_str()
        ));
    }
    match status {
        Some(s) => {
            if let Some(m) = crate::engine::prune::pruned_marker(job_dir) {
                return PatchAnswer::NoPatch(format!(
                    "job `{id}`: its result.patch ({} file(s)) was removed with its artifacts at {} (retention)",
                    s.files, m.pruned_at
                ));
            }
            if let Some(host) = view
                .runner
                .as_ref()
                .map(|r| r.host.as_str())
                .filter(|h| *h != this_host)
            {
                return PatchAnswer::NoPatch(format!(
                    "job `{id}`: its result.patch ({} file(s)) is on the host `{host}` that ran it, not on `{this_host}`",
                    s.files
                ));
            }
            PatchAnswer::NoPatch(format!(
                "job `{id}`: its result.patch ({} file(s)) was written but `{}` is gone",
                s.files,
                path.display()
            ))
        }
        None if view.base_commit.is_none() => PatchAnswer::NoPatch(format!(
            "job `{id}` has no result.patch: its workspace was never provisioned{}",
            ended(view)
        )),
        None => PatchAnswer::NoPatch(format!(
            "job `{id}` has no result.patch: it ended before its result was written{}",
            ended(view)
        )),
    }
}

/// ` (error, provision_failed: …)`: how the job ended, when it did.
fn ended(view: &JobView) -> String {
    view.finish.as_ref().map_or_else(String::new, |f| {
        format!(" ({}, {}: {})", f.outcome, f.reason.as_str(), f.message)
    })
}

/// `job `ID`: the result patch could not be built (out_of_memory): …`.
fn failed_message(id: &str, s: &PatchStatus) -> String {
    format!(
        "job `{id}`: the result patch could not be built{}: {}",
        s.failure
            .map_or_else(String::new, |f| format!(" ({})", f.as_str())),
        s.error.as_deref().unwrap_or("no reason was recorded")
    )
}

/// The warning for a partial patch (stderr of `ralph diff`): which paths are not in it.
pub fn partial_warning(id: &str, s: &PatchStatus) -> Option<String> {
    (s.state == PatchState::Partial).then(|| {
        format!(
            "job `{id}`: the result patch is partial: {} path(s) were left out (the rest of the work is in it): {}",
            s.skipped_total,
            skipped_list(&s.skipped, s.skipped_total)
        )
    })
}
