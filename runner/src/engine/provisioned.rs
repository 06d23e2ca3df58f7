//! A provisioned job's workspace in the loop (SPEC §11): made before round 1 (a clone of the
//! job's `repo` at `ref`, or a copy of its upload ([`super::provisioned_upload`]), its base
//! commit journalled as `workspace_provisioned`; a resumed job keeps the workspace it has), and
//! its result written as `result.patch` (and pushed, when asked and allowed) before the job's
//! `job_finished`. A workspace that cannot be made ends the job as an `error`
//! (`provision_failed`) before any round.

use std::time::Instant;

use super::job_run::JobRun;
use super::provisioned_upload;
use crate::job::{FinishReason, WorkspaceSource};
use crate::provision::patch_status::PatchState;
use crate::provision::{self, clone, patch, push};
use crate::store::EventKind;
use crate::util::text::{RESULT_TEXT_BOUND, bounded};

impl JobRun<'_> {
    /// The mirror whose objects the rounds must be able to read (a repository job's).
    pub(super) fn shared_objects(&self) -> Option<std::path::PathBuf> {
        let url = self.spec.source.as_ref()?.repo()?;
        Some(provision::mirror::mirror_dir(&self.engine.state_dir, url).join("objects"))
    }

    /// The layers a round's walks may go through: only a repository job's workspace, which the
    /// runner made as an overlay of a base tree ([`provision::walk_seed::layers`]; a workspace
    /// the user named is never taken for one, whatever stands beside it).
    pub(super) fn layers(&self) -> Option<ralph_sandbox::spec::WorkspaceLayers> {
        self.spec.source.as_ref()?.repo()?;
        provision::walk_seed::layers(&self.spec.workspace)
    }

    /// Makes the workspace of a provisioned job that has none yet (blocking: git runs here).
    pub(super) async fn provision(&mut self) -> Result<(), (FinishReason, String)> {
        let Some(source) = self.spec.source.clone() else {
            return Ok(());
        };
        if self.journal.view().base_commit.is_some() {
            // Resumed: the workspace it had is the one it goes on with (a layered one mounted
            // again on its base tree and its own upper layer).
            let workspace = self.spec.workspace.clone();
            let remounted = tokio::task::spawn_blocking(move || {
                if provision::layered::is_layered(&workspace) {
                    provision::layered::mount(&workspace).map_err(|e| e.to_string())
                } else {
                    Ok(())
                }
            })
            .await
            .map_err(|e| (FinishReason::InternalError, e.to_string()))?;
            if let Err(e) = remounted {
                return Err((
                    FinishReason::ProvisionFailed,
                    bounded(
                        &format!("failed to reuse the workspace: {e}"),
                        RESULT_TEXT_BOUND,
                    ),
                ));
            }
            if !provisioned_upload::kept(&source, &self.spec.workspace) {
                return Err((
                    FinishReason::ProvisionFailed,
                    format!(
                        "failed to reuse the workspace `{}`: it was removed (workspace_retention); submit the job again",
                        self.spec.workspace.display()
                    ),
                ));
            }
            return Ok(());
        }
        let WorkspaceSource::Repo { repo, git_ref, .. } = source else {
            return self.provision_upload().await;
        };
        let state_dir = self.engine.state_dir.clone();
        let config = self.engine.provision.clone();
        let (url, r) = (repo.clone(), git_ref.clone());
        let listings = self.job_dir.join(super::artifacts::WALK_LISTINGS);
        self.make_workspace(
            format!("failed to clone `{repo}` into a fresh workspace"),
            (Some(repo), git_ref),
            move |workspace| {
                let made =
                    clone::provision_repo(&state_dir, &config, workspace, &url, r.as_deref())
                        .map_err(|e| e.to_string())?;
                // Round 1's walks start from the base tree's listings (provision/walk_seed.rs).
                if let Some(job_dir) = listings.parent()
                    && std::fs::create_dir_all(job_dir).is_ok()
                {
                    provision::walk_seed::seed(workspace, &listings);
                }
                Ok((made.commit, made.layout.as_str()))
            },
        )
        .await
    }

    /// Makes the job's fresh workspace with `make` on a blocking thread (it returns the base
    /// commit and the layout) and journals `workspace_provisioned` with `source` (repository,
    /// ref); a failure ends the job as `provision_failed`, its message after `what`.
    pub(super) async fn make_workspace(
        &mut self,
        what: String,
        source: (Option<String>, Option<String>),
        make: impl FnOnce(&std::path::Path) -> Result<(String, &'static str), String> + Send + 'static,
    ) -> Result<(), (FinishReason, String)> {
        let started = Instant::now();
        let workspace = self.spec.workspace.clone();
        let made = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&workspace).map_err(|e| {
                provision::ProvisionError::io("create the workspace", &workspace, e).to_string()
            })?;
            make(&workspace)
        })
        .await
        .map_err(|e| (FinishReason::InternalError, e.to_string()))?;
        let (commit, layout) = made.map_err(|e| {
            (
                FinishReason::ProvisionFailed,
                bounded(&format!("{what}: {e}"), RESULT_TEXT_BOUND),
            )
        })?;
        let (repo, git_ref) = source;
        self.journal
            .record(EventKind::WorkspaceProvisioned {
                repo,
                git_ref,
                commit,
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                layout: Some(layout.to_owned()),
            })
            .map_err(|e| (FinishReason::InternalError, e.to_string()))?;
        Ok(())
    }

    /// Writes `result.patch` (and pushes it where asked) for a provisioned job whose workspace
    /// was made; journals `result_written` with what the patch holds: `written`, `partial`
    /// (the paths left out, named) or `failed` (why). Failures are journalled, never fatal:
    /// the job's outcome is the rounds'.
    pub(super) fn write_result(&mut self) -> Result<(), super::EngineError> {
        let Some(source) = self.spec.source.clone() else {
            return Ok(());
        };
        let Some(base) = self.journal.view().base_commit.clone() else {
            return Ok(());
        };
        let to = provision::patch_path(&self.job_dir);
        if let Err(e) = std::fs::create_dir_all(&self.job_dir) {
            return Err(super::EngineError::io(
                "create the job directory",
                &self.job_dir,
                e,
            ));
        }
        // Staging a workspace runs git for a while: off this runtime thread's other tasks.
        let event = match crate::store::journal::blocking(|| {
            patch::write_patch(&self.spec.workspace, &base, &to)
        }) {
            Err(not) => {
                tracing::warn!(
                    job_id = %self.journal.view().id,
                    failure = not.failure.as_str(),
                    "job {}: the result patch could not be built: {}",
                    self.journal.view().id,
                    not.error
                );
                EventKind::ResultWritten {
                    bytes: 0,
                    files: 0,
                    pushed: None,
                    error: Some(bounded(&not.error.to_string(), RESULT_TEXT_BOUND)),
                    patch: Some(PatchState::Failed),
                    failure: Some(not.failure),
                    skipped: Vec::new(),
                    skipped_total: 0,
                    git_max_rss: Some(not.git_max_rss),
                }
            }
            Ok(written) => {
                let (pushed, error) = match (source.repo(), source.push()) {
                    (Some(url), Some(branch)) if written.files > 0 => {
                        let message = format!(
                            "ralph job {}\n\n{}",
                            self.journal.view().id,
                            bounded(&self.spec.objective, 2048)
                        );
                        match crate::store::journal::blocking(|| {
                            push::push_result(
                                &self.engine.provision,
                                &self.spec.workspace,
                                url,
                                &base,
                                &written.tree,
                                branch,
                                &message,
                            )
                        }) {
                            Ok(commit) => (Some(format!("{commit} to {branch}")), None),
                            Err(e) => (
                                None,
                                Some(bounded(
                                    &format!("failed to push to `{branch}`: {e}"),
                                    RESULT_TEXT_BOUND,
                                )),
                            ),
                        }
                    }
                    _ => (None, None),
                };
                let state = if written.skipped.is_empty() {
                    PatchState::Written
                } else {
                    PatchState::Partial
                };
                EventKind::ResultWritten {
                    bytes: written.bytes,
                    files: written.files,
                    pushed,
                    error,
                    patch: Some(state),
                    failure: None,
                    skipped_total: written.skipped.total,
                    skipped: written.skipped.listed,
                    git_max_rss: Some(written.git_max_rss),
                }
            }
        };
        self.journal.record(event)?;
        Ok(())
    }

    /// Unmounts a layered workspace once its result is written (before `job_finished`: a
    /// finished job's workspace is never mounted, so the retention sweep may remove it). What
    /// it changed stays in its upper layer for a resume.
    pub(super) fn release_workspace(&self) {
        if !provision::layered::is_layered(&self.spec.workspace) {
            return;
        }
        if let Err(e) =
            crate::store::journal::blocking(|| provision::layered::unmount(&self.spec.workspace))
        {
            tracing::warn!(job_id = %self.journal.view().id, error = %e, "workspaces: {e}");
        }
    }
}
