//! The service's side of provisioned workspaces (SPEC §11): the workspace a `repo` job gets
//! (`<state-dir>/workspaces/<job-id>` of the host that runs it, made by its scheduler so that it
//! can lock it), `GET /v1/jobs/{id}/patch` (the patch, flagged when partial, or why there is none), and
//! the workspaces' lifecycle: removed once their job has been finished for `[provision]
//! workspace_retention`, or, oldest first, when all of them use more than `workspace_budget`
//! (the job's `result.patch` stays).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Service;
use super::api::{ApiError, Svc, resolve};
use crate::engine::WorkspaceLock;
use crate::provision::patch_answer::{self, PatchAnswer};
use crate::provision::{self, lifecycle};
use crate::store::JobState;
use crate::store::journal::blocking;

/// How often the workspaces' retention and budget are enforced.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// The workspace a provisioned job will have.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The job's id, chosen now.
    pub id: String,
    /// `<state-dir>/workspaces`.
    pub root: PathBuf,
    /// `<state-dir>/workspaces/<id>`.
    pub workspace: PathBuf,
}

fn internal(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}

/// Chooses a new job's id and workspace (the workspaces' directory is made if missing).
pub fn plan(svc: &Service) -> Result<Planned, ApiError> {
    let root = provision::workspaces_dir(svc.engine().state_dir());
    std::fs::create_dir_all(&root).map_err(|e| {
        internal(format!(
            "failed to create the workspaces directory `{}`: {e}",
            root.display()
        ))
    })?;
    let id = crate::job::new_job_id();
    Ok(Planned {
        workspace: root.join(&id),
        root,
        id,
    })
}

/// The header that says what a served patch holds: `written` or `partial`.
pub const PATCH_STATE_HEADER: &str = "x-ralph-patch";

/// The header that counts the paths a `partial` patch left out.
pub const PATCH_SKIPPED_HEADER: &str = "x-ralph-patch-skipped";

/// `GET /v1/jobs/{id}/patch`: the job's `result.patch` (with [`PATCH_STATE_HEADER`]), or why
/// there is none ([`patch_answer::answer`]).
pub async fn job_patch(State(svc): Svc, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = resolve(&svc, &id)?;
    let view = blocking(|| svc.engine().store().load(&id))?;
    let job_dir = svc.engine().job_dir(&id);
    let path = provision::patch_path(&job_dir);
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let status = match patch_answer::answer(&view, &path, &job_dir, &host) {
        PatchAnswer::NoPatch(message) => {
            // Written by another host of the fleet: the store keeps it, or names that host.
            if let (JobState::Finished, Some(status), Some(holder)) =
                (view.state, view.patch.clone(), view.runner.clone())
                && super::results::elsewhere(&svc, &holder)
            {
                let name = crate::store::job_files::PATCH_NAME;
                let id2 = id.clone();
                let kept = blocking(|| super::results::kept(&svc, &id2, name))?;
                return match kept.and_then(|f| f.data) {
                    Some(bytes) => Ok(patch_response(Some(&status), bytes)),
                    None => Err(super::results::held_elsewhere(
                        &svc,
                        &view,
                        &format!("its result.patch ({} file(s))", status.files),
                        &holder,
                    )),
                };
            }
            return Err(ApiError::new(StatusCode::NOT_FOUND, "no_patch", message));
        }
        PatchAnswer::Failed(message) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "patch_failed",
                message,
            ));
        }
        PatchAnswer::Patch { status } => status,
    };
    match tokio::fs::read(&path).await {
        Ok(bytes) => Ok(patch_response(status.as_ref(), bytes)),
        Err(e) => Err(internal(format!(
            "failed to read `{}`: {e}",
            path.display()
        ))),
    }
}

/// A patch answer: the bytes, what they hold ([`PATCH_STATE_HEADER`], [`PATCH_SKIPPED_HEADER`]).
fn patch_response(
    status: Option<&crate::provision::patch_status::PatchStatus>,
    bytes: Vec<u8>,
) -> Response {
    let state = status.map_or("written", |s| s.state.as_str());
    let skipped = status.map_or(0, |s| s.skipped_total);
    (
        [
            (
                header::CONTENT_TYPE,
                "text/x-diff; charset=utf-8".to_owned(),
            ),
            (
                HeaderName::from_static(PATCH_STATE_HEADER),
                state.to_owned(),
            ),
            (
                HeaderName::from_static(PATCH_SKIPPED_HEADER),
                skipped.to_string(),
            ),
        ],
        bytes,
    )
        .into_response()
}

/// A finished provisioned job's workspace that still exists.
struct Kept {
    id: String,
    workspace: PathBuf,
    finished: SystemTime,
}

impl Service {
    /// Enforces the workspaces' retention and budget until the service drains.
    pub(super) async fn keep_workspaces(self: Arc<Self>) {
        loop {
            if self.draining.load(Ordering::SeqCst) {
                return;
            }
            let config = self.config().provision;
            if config.workspace_retention.is_some() || config.workspace_budget.is_some() {
                let svc = self.clone();
                let _ = tokio::task::spawn_blocking(move || svc.sweep_workspaces()).await;
            }
            // A short retention is enforced at a quarter of it (at least every second).
            let every = config.workspace_retention.map_or(SWEEP_EVERY, |r| {
                (r.0 / 4).clamp(Duration::from_secs(1), SWEEP_EVERY)
            });
            tokio::time::sleep(every).await;
        }
    }

    /// One pass of the workspaces' retention and budget (blocking).
    pub fn sweep_workspaces(&self) {
        let config = self.config().provision;
        let store = self.engine().store();
        let Ok(ids) = store.job_ids_in_state(JobState::Finished) else {
            return;
        };
        let mut kept: Vec<Kept> = Vec::new();
        // Only this host's workspaces: another host of the fleet (even one on this machine,
        // with its own state directory) keeps its own.
        let mine = provision::workspaces_dir(self.engine().state_dir());
        for id in ids {
            let Ok(view) = store.load(&id) else { continue };
            if view.spec.source.is_none()
                || !view.spec.workspace.starts_with(&mine)
                || !view.spec.workspace.exists()
            {
                continue;
            }
            let finished = humantime::parse_rfc3339(&view.updated_at).unwrap_or(SystemTime::now());
            kept.push(Kept {
                id,
                workspace: view.spec.workspace.clone(),
                finished,
            });
        }
        kept.sort_by_key(|k| k.finished);
        let now = SystemTime::now();
        let mut used: Option<u64> = config.workspace_budget.map(|_| {
            // The workspaces (their upper layers, clones, result repositories) and the base
            // trees they share.
            let state_dir = self.engine().state_dir();
            lifecycle::disk_usage(&provision::workspaces_dir(state_dir))
                + lifecycle::trees_usage(state_dir)
        });
        for k in kept {
            let expired = config
                .workspace_retention
                .is_some_and(|r| now.duration_since(k.finished).is_ok_and(|age| age >= r.0));
            let over = matches!((used, config.workspace_budget), (Some(u), Some(b)) if u > b.0);
            if !expired && !over {
                continue;
            }
            // A job resumed meanwhile holds its workspace: it stays.
            let Ok(lock) = WorkspaceLock::try_acquire(&k.workspace) else {
                continue;
            };
            if store
                .load(&k.id)
                .map(|v| v.state != JobState::Finished)
                .unwrap_or(true)
            {
                continue;
            }
            let size = lifecycle::workspace_usage(&k.workspace);
            match lifecycle::remove_workspace(&k.workspace) {
                Ok(()) => {
                    used = used.map(|u| u.saturating_sub(size));
                    tracing::info!(
                        job_id = %k.id,
                        bytes = size,
                        "job {}: provisioned workspace removed ({})",
                        k.id,
                        if expired { "workspace_retention" } else { "workspace_budget" }
                    );
                }
                Err(e) => tracing::warn!(job_id = %k.id, error = %e, "workspaces: {e}"),
            }
            drop(lock);
        }
        // Base trees no remaining workspace stands on.
        let state_dir = self.engine().state_dir();
        for tree in provision::base_tree::sweep(state_dir, &provision::workspaces_dir(state_dir)) {
            tracing::info!("workspaces: unused base tree `{}` removed", tree.display());
        }
    }
}
