//! The upload branch of a provisioned job's workspace (SPEC §11): before round 1 the job's
//! workspace gets its own copy of the upload it names and the copy is committed as the base in
//! the runner's repository ([`crate::provision::upload`]), journalled as
//! `workspace_provisioned` (no repository, no ref). The result is then written like a
//! repository job's (never pushed).

use std::path::Path;
use std::time::Instant;

use super::job_run::JobRun;
use crate::job::{FinishReason, WorkspaceSource};
use crate::provision::{self, upload};
use crate::store::EventKind;
use crate::util::text::{RESULT_TEXT_BOUND, bounded};

/// Whether a resumed provisioned job still has the workspace it was given: a clone's `.git`,
/// or, for an upload (which may have no `.git`), the runner's repository beside it.
pub(super) fn kept(source: &WorkspaceSource, workspace: &Path) -> bool {
    match source {
        WorkspaceSource::Repo { .. } => workspace.join(".git").exists(),
        WorkspaceSource::Upload { .. } => {
            workspace.is_dir() && provision::private_git_dir(workspace).is_dir()
        }
    }
}

impl JobRun<'_> {
    /// Copies the job's upload into its workspace and journals the base commit (blocking work
    /// on a blocking thread).
    pub(super) async fn provision_upload(&mut self) -> Result<(), (FinishReason, String)> {
        let Some(WorkspaceSource::Upload { upload: id }) = self.spec.source.clone() else {
            return Err((
                FinishReason::InternalError,
                "failed to provision the workspace: the job names no upload".into(),
            ));
        };
        let started = Instant::now();
        let state_dir = self.engine.state_dir.clone();
        let workspace = self.spec.workspace.clone();
        let upload_id = id.clone();
        let made = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&workspace).map_err(|e| {
                upload::UploadError::from(provision::ProvisionError::io(
                    "create the workspace",
                    &workspace,
                    e,
                ))
            })?;
            upload::provision_upload(&state_dir, &workspace, &upload_id)
        })
        .await
        .map_err(|e| (FinishReason::InternalError, e.to_string()))?;
        let commit = made.map_err(|e| {
            (
                FinishReason::ProvisionFailed,
                bounded(
                    &format!("failed to copy the upload `{id}` into a fresh workspace: {e}"),
                    RESULT_TEXT_BOUND,
                ),
            )
        })?;
        self.journal
            .record(EventKind::WorkspaceProvisioned {
                repo: None,
                git_ref: None,
                commit,
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                // The upload's tree copied into a workspace of its own.
                layout: Some("copy".to_owned()),
            })
            .map_err(|e| (FinishReason::InternalError, e.to_string()))?;
        Ok(())
    }
}
