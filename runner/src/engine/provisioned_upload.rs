//! The upload branch of a provisioned job's workspace (SPEC §11): before round 1 the job's
//! workspace gets its own copy of the upload it names and the copy is committed as the base in
//! the runner's repository ([`crate::provision::upload`]), journalled as
//! `workspace_provisioned` (no repository, no ref). The result is then written like a
//! repository job's (never pushed).

use std::path::Path;

use super::job_run::JobRun;
use crate::job::{FinishReason, WorkspaceSource};
use crate::provision::{self, upload};

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
        let state_dir = self.engine.state_dir.clone();
        let upload_id = id.clone();
        self.make_workspace(
            format!("failed to copy the upload `{id}` into a fresh workspace"),
            (None, None),
            move |workspace| {
                upload::provision_upload(&state_dir, workspace, &upload_id)
                    // The upload's tree copied into a workspace of its own.
                    .map(|commit| (commit, "copy"))
                    .map_err(|e| e.to_string())
            },
        )
        .await
    }
}
