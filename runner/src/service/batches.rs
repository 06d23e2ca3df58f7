//! Batches (SPEC §13): a submission of several jobs carries one batch id on each job.
//! `GET /v1/batches/{id}` sums the batch up (counts per state and outcome, tokens, wall time,
//! the slowest jobs and those that did not complete); `POST /v1/batches/{id}/retry` submits a
//! new job, in the same batch and with `retry_of`, for each job that ended with one of the
//! outcomes asked (default: all but `complete`). Only the latest job of each lineage (a job and
//! its retries) counts and is retried, so retrying twice never runs one failure twice.
//!
//! A retry is a new submission by the caller: its paths are resolved again (a link a round
//! planted meanwhile refuses it, as at submission), it is judged by the caller's limits and its
//! rate, and a provisioned job gets a fresh workspace from the same source.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Service;
use super::admission::{Asked, admit};
use super::api::{ApiError, Svc, real_root, refused};
use crate::job::{JobSpec, Outcome};
use crate::store::journal::blocking;
use crate::store::{JobFilter, JobState, JobView};

/// Most jobs one batch summary or retry reads.
pub const MAX_BATCH_JOBS: usize = 100_000;
/// How many of the slowest jobs a summary names.
const SLOWEST: usize = 5;
/// How many jobs that did not complete a summary lists.
const NOT_COMPLETE: usize = 100;

/// The batch routes (under `/v1`).
pub fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/batches/{id}", get(show))
        .route("/batches/{id}/retry", post(retry))
}

/// A batch's jobs as read from the store: each with its priority.
struct Member {
    view: JobView,
    priority: i32,
}

/// Every job of `batch`, oldest first; 404 when it has none.
fn members(svc: &Service, batch: &str) -> Result<Vec<Member>, ApiError> {
    let store = svc.engine().store();
    let mut out = Vec::new();
    let mut before = None;
    loop {
        let page = store.list(&JobFilter {
            before: before.clone(),
            limit: 1000,
            batch: Some(batch.to_owned()),
            ..JobFilter::default()
        })?;
        let full = page.len() == 1000;
        before = page.last().map(|j| j.id.clone());
        for j in page {
            out.push(Member {
                view: store.load(&j.id)?,
                priority: j.priority,
            });
        }
        if !full || out.len() >= MAX_BATCH_JOBS {
            break;
        }
    }
    if out.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no batch `{batch}` (a batch id is printed by `ralph submit` of several jobs)"),
        ));
    }
    out.reverse();
    Ok(out)
}

/// The ids that a later job of the batch retries.
fn superseded(members: &[Member]) -> HashSet<String> {
    members
        .iter()
        .filter_map(|m| m.view.spec.retry_of.clone())
        .collect()
}

fn millis(at: &str) -> Option<u128> {
    humantime::parse_rfc3339(at)
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis())
}

fn line(m: &Member) -> Value {
    let v = &m.view;
    let f = v.finish.as_ref();
    json!({
        "id": v.id,
        "name": v.spec.name,
        "state": v.state.as_str(),
        "outcome": f.map(|f| f.outcome),
        "reason": f.map(|f| f.reason),
        "message": f.map(|f| f.message.clone()),
        "rounds": v.rounds_started,
        "tokens": v.usage.budget_tokens(),
        "elapsed_ms": v.elapsed_ms,
        "retry_of": v.spec.retry_of,
    })
}

/// The summary of a batch's jobs (pure: the members as read).
fn summarize(batch: &str, members: &[Member]) -> Value {
    let gone = superseded(members);
    let current: Vec<&Member> = members
        .iter()
        .filter(|m| !gone.contains(&m.view.id))
        .collect();
    let mut states: BTreeMap<&str, u64> = [("queued", 0), ("running", 0), ("finished", 0)].into();
    let mut outcomes: BTreeMap<&str, u64> = BTreeMap::new();
    for m in &current {
        *states.entry(m.view.state.as_str()).or_default() += 1;
        if let Some(f) = &m.view.finish {
            *outcomes.entry(f.outcome.as_str()).or_default() += 1;
        }
    }
    // Every job's tokens count, the retried ones' too: they were spent.
    let tokens: u64 = members.iter().map(|m| m.view.usage.budget_tokens()).sum();
    let run_ms: u64 = members.iter().map(|m| m.view.elapsed_ms).sum();
    let first = members
        .iter()
        .filter_map(|m| millis(&m.view.submitted_at))
        .min();
    let all_finished = members.iter().all(|m| m.view.state == JobState::Finished);
    let last = if all_finished {
        members
            .iter()
            .filter_map(|m| millis(&m.view.updated_at))
            .max()
    } else {
        millis(&humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string())
    };
    let wall_ms = match (first, last) {
        (Some(a), Some(b)) => u64::try_from(b.saturating_sub(a)).unwrap_or(u64::MAX),
        _ => 0,
    };
    let mut slowest: Vec<&&Member> = current.iter().collect();
    slowest.sort_by_key(|m| std::cmp::Reverse(m.view.elapsed_ms));
    let not_complete: Vec<Value> = current
        .iter()
        .filter(|m| {
            m.view
                .finish
                .as_ref()
                .is_some_and(|f| f.outcome != Outcome::Complete)
        })
        .take(NOT_COMPLETE)
        .map(|m| line(m))
        .collect();
    json!({
        "batch": batch,
        "jobs": members.len(),
        "current": current.len(),
        "retried": gone.len(),
        "finished": all_finished,
        "states": states,
        "outcomes": outcomes,
        "tokens": tokens,
        "run_ms": run_ms,
        "wall_ms": wall_ms,
        "slowest": slowest.iter().take(SLOWEST).map(|m| line(m)).collect::<Vec<_>>(),
        "not_complete": not_complete,
    })
}

pub(super) async fn show(
    State(svc): Svc,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let members = blocking(|| members(&svc, &id))?;
    Ok(axum::Json(summarize(&id, &members)))
}

/// `POST /v1/batches/{id}/retry`'s body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    /// The outcomes to retry (default: every one but `complete`).
    #[serde(default)]
    outcome: Option<Vec<Outcome>>,
}

/// The outcomes a retry takes: those asked, or all but `complete`.
fn retried_outcomes(asked: Option<Vec<Outcome>>) -> Vec<Outcome> {
    asked.unwrap_or_else(|| {
        Outcome::ALL
            .into_iter()
            .filter(|o| *o != Outcome::Complete)
            .collect()
    })
}

async fn retry(
    State(svc): Svc,
    axum::Extension(caller): axum::Extension<super::tokens::Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, axum::Json<Value>), ApiError> {
    super::api::accepting_jobs(&svc)?;
    let asked: RetryBody = super::api::optional_body(&body, "the retry")?;
    let outcomes = retried_outcomes(asked.outcome);
    let members = blocking(|| members(&svc, &id))?;
    let gone = superseded(&members);
    let chosen: Vec<&Member> = members
        .iter()
        .filter(|m| !gone.contains(&m.view.id))
        .filter(|m| {
            m.view
                .finish
                .as_ref()
                .is_some_and(|f| outcomes.contains(&f.outcome))
        })
        .collect();
    let limits = svc.config().limits_for(&caller.name).clone();
    let mut known = svc.engine().writable_trees();
    known.extend(limits.workspace_roots.iter().map(|r| real_root(r)));
    // All or nothing, as a submission: every retry is judged before any is queued.
    let mut specs = Vec::new();
    for m in &chosen {
        let at = |f: &str| format!("{}.{f}", m.view.id);
        let (spec, planned) = retry_spec(&svc, &m.view, &known).map_err(|e| {
            let mut err = e;
            err.field = err.field.map(|f| at(&f));
            err
        })?;
        let mut spec = spec;
        // Its values were admitted once; now judged as given, by the caller's limits.
        let asked = Asked {
            round_timeout: true,
            job_timeout: true,
            default_rounds: false,
        };
        admit(&mut spec, &limits, &asked).map_err(|r| refused(r, &at))?;
        spec.submitted_by = Some(caller.name.clone());
        spec.batch = Some(id.clone());
        spec.retry_of = Some(m.view.id.clone());
        svc.engine().check(&spec).map_err(|e| {
            let mut err = ApiError::from(e);
            err.field = err.field.map(|f| at(&f));
            err
        })?;
        specs.push((spec, m.priority, planned));
    }
    let n = u32::try_from(specs.len()).unwrap_or(u32::MAX);
    if n > 0 {
        svc.check_rate(&caller.name, super::rate_limit::Kind::Jobs, n)?;
    }
    let mut jobs = Vec::new();
    for (spec, prio, planned) in &specs {
        let new = match planned {
            Some(p) => blocking(|| svc.engine().accept(Some(p.id.clone()), spec, *prio))?,
            None => blocking(|| svc.engine().accept(None, spec, *prio))?,
        };
        jobs.push(json!({"id": new, "state": "queued", "retry_of": spec.retry_of}));
    }
    if !jobs.is_empty() {
        svc.wake();
    }
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({
            "batch": id,
            "outcomes": outcomes,
            "jobs": jobs,
        })),
    ))
}

/// The spec of a retry of `view`: its own, with a fresh workspace for a provisioned job, and
/// every path resolved again (refused when one no longer resolves to itself).
fn retry_spec(
    svc: &Service,
    view: &JobView,
    known: &crate::job::resolve::WritableTrees,
) -> Result<(JobSpec, Option<super::provisioned::Planned>), ApiError> {
    let mut spec = view.spec.clone();
    spec.submitted_by = None;
    let planned = match &spec.source {
        Some(source) => {
            super::uploads::check_source(svc, Some(source), &|f| f.to_owned())?;
            let p = super::provisioned::plan(svc)?;
            let old = spec.workspace.clone();
            let rebase = |paths: &mut Vec<PathBuf>| {
                for q in paths.iter_mut() {
                    if let Ok(rel) = q.strip_prefix(&old) {
                        *q = p.workspace.join(rel);
                    }
                }
            };
            rebase(&mut spec.sandbox.read);
            rebase(&mut spec.sandbox.write);
            rebase(&mut spec.sandbox.sockets);
            spec.workspace = p.workspace.clone();
            Some(p)
        }
        None => None,
    };
    recheck_paths(&spec, planned.as_ref(), known)?;
    Ok((spec, planned))
}

/// Resolves the spec's paths again as a submission would: each must still be itself (no link
/// a round planted on its way since the job was submitted).
fn recheck_paths(
    spec: &JobSpec,
    planned: Option<&super::provisioned::Planned>,
    known: &crate::job::resolve::WritableTrees,
) -> Result<(), ApiError> {
    let bad = |field: &str, message: String| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", message).field(field)
    };
    // A provisioned workspace does not exist yet: its root stands for it, as at submission;
    // paths inside it are the fresh workspace's and are left to the sandbox.
    let workspace: &FsPath = planned.map_or(spec.workspace.as_path(), |p| p.root.as_path());
    let inside = |q: &PathBuf| planned.is_some_and(|p| q.starts_with(&p.workspace));
    let outside = |v: &[PathBuf]| v.iter().filter(|q| !inside(q)).cloned().collect::<Vec<_>>();
    let (read, write, sockets) = (
        outside(&spec.sandbox.read),
        outside(&spec.sandbox.write),
        outside(&spec.sandbox.sockets),
    );
    let protect = if planned.is_some() {
        Vec::new()
    } else {
        spec.sandbox.protect.clone()
    };
    let got = crate::job::paths::resolve_paths(
        crate::job::paths::Requested {
            workspace,
            read: &read,
            write: &write,
            protect: &protect,
            sockets: &sockets,
        },
        FsPath::new("/"),
        known,
    )
    .map_err(|e| match known.lookup_failure() {
        Some(_) => ApiError::trees_unknown(&e.to_string()),
        None => bad(
            e.field,
            format!("{e}: the job cannot be retried as it was; submit it again"),
        ),
    })?;
    let changed = |field: &str, was: &[PathBuf], now: &[PathBuf]| match was
        .iter()
        .zip(now)
        .find(|(a, b)| a != b)
    {
        Some((a, b)) => Err(bad(
            field,
            format!(
                "`{}` now leads to `{}`: the job cannot be retried as it was; submit it again",
                a.display(),
                b.display()
            ),
        )),
        None => Ok(()),
    };
    if planned.is_none() {
        changed(
            "workspace",
            std::slice::from_ref(&spec.workspace),
            &[got.workspace],
        )?;
    }
    changed("read", &read, &got.read)?;
    changed("write", &write, &got.write)?;
    changed("socket", &sockets, &got.sockets)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_retry_takes_every_outcome_but_complete_unless_told() {
        let all = retried_outcomes(None);
        assert!(!all.contains(&Outcome::Complete));
        assert_eq!(all.len(), Outcome::ALL.len() - 1);
        assert_eq!(
            retried_outcomes(Some(vec![Outcome::RoundFailed])),
            vec![Outcome::RoundFailed]
        );
    }
}
