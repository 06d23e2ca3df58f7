//! A job's results through any host of a fleet (SPEC §11): where a job's files are not on this
//! host's disk (another host of the PostgreSQL store ran it), its patch, round logs and
//! artifacts list are answered from the files the store keeps ([`crate::store::job_files`]);
//! what the store does not have is answered with the host that holds it (its name and state
//! directory), never as missing.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::Service;
use super::api::{ApiError, Svc, resolve};
use crate::store::job_files::JobFile;
use crate::store::journal::blocking;
use crate::store::{EventKind, JobView, RunnerInfo};

/// The header of a log answered from the store that keeps only its head: the log's full size.
pub const TRUNCATED_HEADER: &str = "x-ralph-truncated";

/// The runner whose disk holds round `round` of job `id` (the runner of the run that started
/// it), or the job's last runner when `round` is `None` or unknown.
pub fn holder(svc: &Service, view: &JobView, round: Option<u32>) -> Option<RunnerInfo> {
    if let Some(round) = round
        && let Ok(events) = svc.engine().store().events(&view.id)
    {
        let mut runner = None;
        for e in &events {
            match &e.kind {
                EventKind::JobStarted { runner: r } => runner = Some(r.clone()),
                EventKind::RoundStarted { round: k, .. } if *k == round => return runner,
                _ => {}
            }
        }
    }
    view.runner.clone()
}

/// Whether `holder` keeps its files somewhere else than this host: `false` when unknown (a
/// journal older than the state directory in [`RunnerInfo`]).
pub fn elsewhere(svc: &Service, holder: &RunnerInfo) -> bool {
    holder.same_place(svc.engine().runner()) == Some(false)
}

/// `NAME` of job `id` as the store keeps it, when it keeps any of it.
pub fn kept(svc: &Service, id: &str, name: &str) -> Result<Option<JobFile>, ApiError> {
    if !svc.engine().store().keeps_job_files() {
        return Ok(None);
    }
    Ok(svc
        .engine()
        .store()
        .job_file(id, name)?
        .filter(|f| f.data.is_some()))
}

/// The answer for `what` of job `id` that is on the disk of `holder`, not here nor in the store.
pub fn held_elsewhere(svc: &Service, view: &JobView, what: &str, holder: &RunnerInfo) -> ApiError {
    let here = svc.engine().runner();
    let id = &view.id;
    let kept = if !svc.engine().store().keeps_job_files() {
        ""
    } else if view.state == crate::store::JobState::Finished {
        " and the shared store does not keep it (too large, or that host stopped before the job ended)"
    } else {
        " while the job runs (the shared store keeps it once the job ends)"
    };
    ApiError::new(
        StatusCode::NOT_FOUND,
        "on_another_host",
        format!(
            "job `{id}`: {what} is on the disk of the host that ran it, {}, not on this one, {}{kept}; ask that host (`--server`)",
            holder.place(),
            here.place()
        ),
    )
}

/// `GET /v1/jobs/{id}/artifacts`: the files of the job's artifact directory, on whichever
/// host it is: `host` and `dir` say where; each file's `bytes`, and `kept` when this host can
/// answer for it (on its disk, or kept by the shared store: a log perhaps only its head).
pub async fn job_artifacts(
    State(svc): Svc,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let id = resolve(&svc, &id)?;
    let view = blocking(|| svc.engine().store().load(&id))?;
    let holder = view.runner.clone();
    let here = holder.as_ref().is_none_or(|h| !elsewhere(&svc, h));
    let files: Vec<JobFile> = if here && !svc.engine().store().keeps_job_files() {
        let dir = svc.engine().job_dir(&id);
        blocking(|| Ok::<_, crate::store::StoreError>(crate::store::job_files::list(&dir)))?
    } else {
        blocking(|| svc.engine().store().job_file_list(&id))?
    };
    let dir = holder
        .as_ref()
        .and_then(|h| h.state_dir.as_ref())
        .map_or_else(
            || svc.engine().job_dir(&id),
            |d| crate::engine::job_dir(d, &id),
        );
    Ok(axum::Json(json!({
        "id": id,
        "host": holder.as_ref().map(|h| h.host.clone()),
        "dir": dir,
        "files": files.iter().map(|f| json!({
            "path": f.name,
            "bytes": f.bytes,
            "kept": f.data.is_some(),
        })).collect::<Vec<_>>(),
    })))
}
