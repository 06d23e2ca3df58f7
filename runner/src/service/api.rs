//! The HTTP/JSON API, versioned under `/v1` (documented in docs/api.md).
//!
//! ```text
//! POST /v1/jobs                         a job file (TOML or JSON): one or many jobs → 201
//! GET  /v1/jobs?state=&outcome=&limit=&before=&name=&label=K=V   newest first, paged by `before`
//! GET  /v1/jobs/{id}                    the job and its result ({id}: an id or a unique prefix)
//! GET  /v1/jobs/{id}/events?after=N&follow=true  journal events as NDJSON
//! GET  /v1/jobs/{id}/rounds/{round}/logs?attempt=&stream=stdout|stderr|verify&follow=true
//! GET  /v1/jobs/{id}/patch              a provisioned job's result.patch (text/x-diff)
//! POST /v1/jobs/{id}/cancel  POST /v1/jobs/{id}/resume
//! POST /v1/uploads                      a tar stream (streamed, not read whole) → 201 {upload}
//! GET  /healthz  /readyz  /metrics
//! ```
//! Every `/v1` call needs `Authorization: Bearer <token>`. Errors are JSON:
//! `{"error":{"code":…,"message":…,"field":…,"rule":…}}` — axum's own refusals (unknown route,
//! method not allowed, …) too ([`json_errors`]); a refused upload's also names the `entry`. A
//! body is read whole before its handler runs, within the size limit and the body read timeout,
//! and only as JSON (or a TOML job file) — except an upload's, streamed into its unpack.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Service;
use super::admission::{Asked, Refusal, admit};
use super::auth;
use super::path_admission::admit_paths_as_written;
use crate::engine::CancelRequest;
use crate::job::request::{Format, parse_job_file};
use crate::job::{JobSpec, Outcome};
use crate::store::journal::blocking;
use crate::store::{Event, EventKind, JobFilter, JobState, JobView};

pub use super::api_error::ApiError;
use super::api_error::error_body;

/// Largest request body.
pub const MAX_BODY: usize = 1 << 20;
/// Most jobs in one request.
pub const MAX_BATCH: usize = 1000;

pub(super) type Svc = State<Arc<Service>>;

/// How long a followed event stream waits for a broadcast before it reads the store.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// The API router.
pub fn router(svc: Arc<Service>) -> Router {
    let v1 = Router::new()
        .route("/jobs", post(create_jobs).get(list_jobs))
        .route("/jobs/{id}", get(get_job))
        .route("/jobs/{id}/events", get(job_events))
        .route("/jobs/{id}/rounds/{round}/logs", get(round_logs))
        .route("/jobs/{id}/patch", get(super::provisioned::job_patch))
        .route("/jobs/{id}/artifacts", get(super::results::job_artifacts))
        .route("/limits", get(limits))
        .route("/jobs/{id}/cancel", post(cancel_job))
        .route("/jobs/{id}/resume", post(resume_job))
        .route("/uploads", post(super::uploads::create_upload))
        .merge(super::token_api::routes())
        .merge(super::batches::routes())
        // Behind the token check too: an unknown call needs `admin` (fail-closed), then 404.
        .fallback(no_endpoint)
        .layer(middleware::from_fn_with_state(svc.clone(), read_body))
        .layer(middleware::from_fn_with_state(svc.clone(), require_token));
    let metrics = Router::new()
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(svc.clone(), metrics_auth));
    Router::new()
        .nest("/v1", v1)
        .merge(metrics)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .merge(super::ui::routes())
        .fallback(no_endpoint)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(super::refusal_log::log_refusals))
        .with_state(svc)
}

/// The answer to a path no route serves.
async fn no_endpoint() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint (the API is under /v1)",
    )
}

/// The error code of an answer that axum (or hyper) made, from its status.
fn code_of(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 422 => "invalid_request",
        401 => "unauthorized",
        403 => "refused",
        429 => "rate_limited",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        409 => "conflict",
        410 => "pruned",
        413 => "too_large",
        415 => "unsupported_media_type",
        503 => "unavailable",
        507 => "disk_full",
        500..=599 => "internal",
        _ => "error",
    }
}

/// Puts every error answer that is not JSON yet (axum's rejections: 404, 405, 413, a body that
/// does not parse, …) into the API's JSON error shape, its text as the message. `/readyz`
/// answers in text by design.
async fn json_errors(req: Request, next: Next) -> Response {
    // `/readyz` answers in text by design; the dashboard's errors are pages.
    let path = req.uri().path();
    let readyz = path == "/readyz" || path == "/ui" || path.starts_with("/ui/");
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| media_type(ct) == "application/json");
    if readyz || is_json || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    } else {
        text
    };
    let body = error_body(code_of(status), &message);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

/// The media type of a `Content-Type` value, without its parameters, in lower case.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Reads a request's body whole before its handler runs: refused with 415 unless it is JSON (or
/// a TOML job file, `application/toml`), with 413 over [`MAX_BODY`], and with 408 when it does not
/// arrive within the body read timeout (the connection is then closed). A request without a
/// body, and an upload, pass as they are.
async fn read_body(State(svc): Svc, req: Request, next: Next) -> Result<Response, ApiError> {
    use axum::body::HttpBody;
    if req.body().is_end_stream() || is_upload(&req) {
        return Ok(next.run(req).await);
    }
    if req.body().size_hint().lower() > DRAIN_MAX as u64 {
        return Err(ApiError::too_large());
    }
    let limit = svc.config().body_read_timeout.0;
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| media_type(v.to_str().unwrap_or("?")));
    match ct.as_deref() {
        Some("application/json" | "application/toml") => {}
        other => {
            let other = other.map(str::to_owned);
            // Read (and dropped) first, so that the client can read the answer.
            let _ = tokio::time::timeout(limit, collect_body(req.into_body())).await;
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "a body must be sent with `Content-Type: application/json` (or `application/toml` for a job file), not {}",
                    other.map_or_else(|| "without one".to_owned(), |t| format!("`{t}`"))
                ),
            )
            .field("Content-Type")
            .closing());
        }
    }
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(limit, collect_body(body)).await {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the body did not arrive within the server's `body_read_timeout` ({})",
                    crate::util::units::HumanDuration(limit)
                ),
            )
            .closing());
        }
        Ok(Err(None)) => return Err(ApiError::too_large()),
        Ok(Err(Some(e))) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("failed to read the body: {e}"),
            )
            .closing());
        }
        Ok(Ok(bytes)) => bytes,
    };
    Ok(next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await)
}

/// Whether the request is an upload, whose body is streamed into its unpack
/// ([`super::uploads`]) instead of being read whole here.
fn is_upload(req: &Request) -> bool {
    let path = req.uri().path();
    req.method() == axum::http::Method::POST
        && path.strip_prefix("/v1").unwrap_or(path) == "/uploads"
}

/// Authenticates the caller, checks the call's scope and the token's request rate, and hands
/// the caller ([`super::tokens::Caller`]) to the handler.
async fn require_token(
    State(svc): Svc,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(auth::bearer);
    match given.map(|t| svc.tokens().verify(t)) {
        Some(Some(caller)) => {
            let needed = super::scope::needed(req.method(), req.uri().path());
            if !super::scope::allows(&caller.scopes, needed) {
                return Err(ApiError::needs_scope(&caller.name, needed));
            }
            svc.check_rate(&caller.name, super::rate_limit::Kind::Requests, 1)?;
            req.extensions_mut().insert(caller);
            Ok(next.run(req).await)
        }
        Some(None) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "wrong bearer token",
        )),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing `Authorization: Bearer <token>` header",
        )),
    }
}

async fn metrics_auth(State(svc): Svc, req: Request, next: Next) -> Result<Response, ApiError> {
    if svc.config().metrics_require_auth {
        return require_token(State(svc), req, next).await;
    }
    Ok(next.run(req).await)
}

/// `GET /v1/limits`: the ceilings a submission by this token is judged against (SPEC §11), so
/// that a client never sends a default above them (before an upload, say).
async fn limits(
    State(svc): Svc,
    axum::Extension(caller): axum::Extension<super::tokens::Caller>,
) -> axum::Json<Value> {
    let config = svc.config();
    let l = config.limits_for(&caller.name);
    axum::Json(json!({
        "max_rounds": l.max_rounds,
        "max_handoff_cap": l.max_handoff_cap.0,
        "max_mode": l.max_mode,
        "max_round_timeout_secs": l.max_round_timeout.map(|d| d.0.as_secs()),
        "max_job_timeout_secs": l.max_job_timeout.map(|d| d.0.as_secs()),
        "max_upload_bytes": l.max_upload_bytes.0,
        "max_upload_files": l.max_upload_files,
    }))
}

/// 200 when recovered, listening, not draining, the store answers (a probe of its own,
/// cached for a second: never behind a stuck call) and the state disk has room for its writes
/// ([`super::disk_room`]); 503 with the reason otherwise.
async fn readyz(State(svc): Svc) -> (StatusCode, String) {
    if !svc.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into());
    }
    if let Err(e) = crate::store::journal::blocking(|| svc.engine().store().reachable()) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: the store is unreachable: {e}\n"),
        );
    }
    match svc.state_room() {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: the store cannot write: the state dir's disk is full: {why}\n"),
        ),
    }
}

async fn metrics(State(svc): Svc) -> Response {
    match crate::store::journal::blocking(|| svc.metrics()) {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to collect metrics: {e}\n"),
        )
            .into_response(),
    }
}

/// How much of a body over [`MAX_BODY`] is read (and dropped) before the 413, so that a client
/// still writing it can read the answer instead of a reset.
const DRAIN_MAX: usize = 8 * MAX_BODY;

/// Reads `body` whole. `Err(None)`: it is over [`MAX_BODY`] (the rest was read and dropped, up
/// to [`DRAIN_MAX`]); `Err(Some(why))`: it could not be read.
async fn collect_body(mut body: Body) -> Result<Bytes, Option<String>> {
    use http_body_util::BodyExt;
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Some(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen <= MAX_BODY {
                buf.extend_from_slice(&data);
            } else if seen > DRAIN_MAX {
                break;
            }
        }
    }
    if seen > MAX_BODY {
        return Err(None);
    }
    Ok(buf.freeze())
}

/// The job file format of a request, from its content type (`read_body` let only JSON and TOML
/// through).
fn format_of(headers: &HeaderMap) -> Format {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if media_type(ct) == "application/toml" {
        Format::Toml
    } else {
        Format::Json
    }
}

/// Whether the service takes new jobs now (a submission, a batch's retry): not while it drains
/// (it would queue what it will not run), nor while its state disk has no room to journal a job
/// to its end (SPEC §8).
pub(super) fn accepting_jobs(svc: &Service) -> Result<(), ApiError> {
    if svc.is_draining() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "the service is draining (stopping): submit again once it is back",
        ));
    }
    svc.state_room().map_err(|why| ApiError::disk_full(&why))
}

/// An optional JSON body (`what` names it in errors): absent or blank is `T::default()`; a
/// malformed one is 400 naming the field at fault.
pub(super) fn optional_body<T: serde::de::DeserializeOwned + Default>(
    body: &Bytes,
    what: &str,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let err = ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!("{what}: {}", e.inner()),
        );
        if field.is_empty() || field == "." {
            err
        } else {
            err.field(field)
        }
    })
}

async fn create_jobs(
    State(svc): Svc,
    axum::Extension(caller): axum::Extension<super::tokens::Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, axum::Json<Value>), ApiError> {
    accepting_jobs(&svc)?;
    let text = std::str::from_utf8(&body).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the body is not UTF-8",
        )
    })?;
    let requests = parse_job_file(text, format_of(&headers)).map_err(|e| {
        let mut err = ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.message);
        err.field = e.field;
        err
    })?;
    if requests.len() > MAX_BATCH {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_jobs",
            format!(
                "{} jobs in one request; at most {MAX_BATCH}",
                requests.len()
            ),
        )
        .field("job"));
    }
    // A batch naming an upload keeps the uploads' sweep away until its jobs are queued.
    let _uploads_gate = if requests.iter().any(|r| r.upload.is_some()) {
        Some(svc.uploads_gate.lock().await)
    } else {
        None
    };
    let limits = svc.config().limits_for(&caller.name).clone();
    // Where a round may have left a symlink: everything under the workspace roots, and the
    // workspaces and `write` directories of the jobs in the store (and of this batch).
    let mut known = svc.engine().writable_trees();
    known.extend(limits.workspace_roots.iter().map(|r| real_root(r)));
    // All or nothing: every job is checked before any is queued.
    let mut specs: Vec<(JobSpec, i32, Option<super::provisioned::Planned>)> = Vec::new();
    for (i, req) in requests.into_iter().enumerate() {
        let at = |f: &str| format!("job[{i}].{f}");
        if req.objective_file.is_some() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                "the server does not read files for you: send the text as `objective`",
            )
            .field(at("objective_file")));
        }
        if let Some(w) = req.workspace.as_ref().filter(|w| !w.is_absolute()) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                format!("`{}` must be an absolute path", w.display()),
            )
            .field(at("workspace")));
        }
        let source = req.source().map_err(|e| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", e.message).field(at(e.field))
        })?;
        super::uploads::check_source(&svc, source.as_ref(), &at)?;
        if req.workspace.is_none() && source.is_none() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                "a workspace is required (`workspace`, or `repo` for a workspace the runner clones)",
            )
            .field(at("workspace")));
        }
        // The roots are judged on the paths as written, before any is looked up: outside them,
        // an existing path and a missing one get the same answer.
        admit_paths_as_written(&req, &limits).map_err(|r| refused(r, &at))?;
        let asked = Asked::of(&req);
        // A provisioned job's workspace is the runner's: `<state-dir>/workspaces/<job-id>`,
        // made once the whole batch is admitted.
        let provisioned = match &source {
            Some(_) => Some(super::provisioned::plan(&svc)?),
            None => None,
        };
        let (mut spec, prio) = req
            .into_spec_at(
                std::path::Path::new("/"),
                &known,
                provisioned.as_ref().map(|p| p.root.as_path()),
            )
            .map_err(|e| match known.lookup_failure() {
                Some(_) => ApiError::trees_unknown(&e.message),
                None => ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", e.message)
                    .field(at(e.field)),
            })?;
        if let Some(p) = &provisioned {
            spec.workspace = p.workspace.clone();
        }
        admit(&mut spec, &limits, &asked).map_err(|r| refused(r, &at))?;
        let max = svc.config().max_concurrent_jobs;
        if usize::try_from(spec.attempts).unwrap_or(usize::MAX) > max {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                format!(
                    "{} attempts run at once, more than this server's max_concurrent_jobs ({max})",
                    spec.attempts
                ),
            )
            .field(at("attempts")));
        }
        spec.submitted_by = Some(caller.name.clone());
        svc.engine().check(&spec).map_err(|e| {
            let mut err = ApiError::from(e);
            err.field = err.field.map(|f| at(&f));
            err
        })?;
        if spec.sandbox.mode != ralph_sandbox::Mode::ReadOnly {
            known.extend(
                std::iter::once(spec.workspace.clone()).chain(spec.sandbox.write.iter().cloned()),
            );
        }
        specs.push((spec, prio, provisioned));
    }
    let n = u32::try_from(specs.len()).unwrap_or(u32::MAX);
    svc.check_rate(&caller.name, super::rate_limit::Kind::Jobs, n)?;
    // A submission of several jobs is a batch (SPEC §13): one id on each.
    let batch = (specs.len() > 1).then(|| uuid::Uuid::now_v7().to_string());
    for (spec, _, _) in &mut specs {
        spec.batch.clone_from(&batch);
    }
    let mut jobs = Vec::new();
    for (spec, prio, provisioned) in &specs {
        let id = match provisioned {
            Some(p) => {
                // Its workspace is made by the host that takes it (the scheduler).
                blocking(|| svc.engine().accept(Some(p.id.clone()), spec, *prio))?
            }
            None => blocking(|| svc.engine().accept(None, spec, *prio))?,
        };
        jobs.push(json!({"id": id, "state": "queued"}));
    }
    svc.wake();
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({ "jobs": jobs, "batch": batch })),
    ))
}

/// The answer to a job the limits refuse, its key named by `at`.
pub(super) fn refused(r: Refusal, at: &dyn Fn(&str) -> String) -> ApiError {
    let mut err = ApiError::new(StatusCode::FORBIDDEN, "refused", r.to_string()).field(at(r.field));
    err.rule = Some(format!("limits.{}", r.rule).into_boxed_str());
    err
}

/// A configured workspace root as a real path (the administrator's, so its own symlinks are
/// followed); as written when it cannot be resolved (then nothing can be under it).
pub(super) fn real_root(root: &std::path::Path) -> std::path::PathBuf {
    std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    outcome: Option<String>,
    limit: Option<usize>,
    before: Option<String>,
    name: Option<String>,
    batch: Option<String>,
    submitted_by: Option<String>,
}

async fn list_jobs(
    State(svc): Svc,
    RawQuery(raw): RawQuery,
) -> Result<axum::Json<Value>, ApiError> {
    let (q, labels) =
        super::list_query::parse::<ListQuery>(raw.as_deref().unwrap_or("")).map_err(|e| {
            let mut err = ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.message);
            err.field = e.field;
            err
        })?;
    let state = match q.state.as_deref() {
        None => None,
        Some(other) => Some(JobState::from_name(other).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                format!("`{other}` is not queued, running or finished"),
            )
            .field("state")
        })?),
    };
    let outcome = match q.outcome.as_deref() {
        None => None,
        Some(o) => Some(Outcome::from_name(o).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                format!("`{o}` is not an outcome"),
            )
            .field("outcome")
        })?),
    };
    let limit = q.limit.unwrap_or(50).clamp(1, 1000);
    let filter = JobFilter {
        state,
        outcome,
        before: q.before,
        limit,
        name: q.name,
        labels,
        batch: q.batch,
        submitted_by: q.submitted_by,
    };
    let jobs = blocking(|| svc.engine().store().list(&filter))?;
    let next = (jobs.len() == limit)
        .then(|| jobs.last().map(|j| j.id.clone()))
        .flatten();
    Ok(axum::Json(json!({ "jobs": jobs, "next": next })))
}

/// The API's view of one job.
pub fn job_json(view: &JobView, artifacts: &std::path::Path) -> Value {
    let f = view.finish.as_ref();
    json!({
        "id": view.id,
        "state": view.state.as_str(),
        "outcome": f.map(|f| f.outcome),
        "reason": f.map(|f| f.reason),
        "message": f.map(|f| f.message.clone()),
        "exit_code": f.and_then(|f| f.exit_code),
        "kind": view.spec.kind,
        "rounds": view.rounds_started,
        "max_rounds": view.spec.max_rounds,
        "retries": view.retries,
        "verified": view.verified,
        "setup": view.spec.setup.as_ref().map(|_| view.setup),
        "report": view.last_report,
        "usage": view.usage,
        "created_at": view.submitted_at,
        "updated_at": view.updated_at,
        "artifacts": artifacts,
        "name": view.spec.name,
        "labels": view.spec.labels,
        "submitted_by": view.spec.submitted_by,
        "batch": view.spec.batch,
        "attempts": view.fanout,
        "attempt_of": view.spec.attempt_of,
        "retry_of": view.spec.retry_of,
        "cancelled_by": view.cancelled_by.as_deref().map(|b| b.strip_prefix("token:").unwrap_or(b)),
        "resumed_by": view.resumed_by,
        "spec": view.spec,
        "base_commit": view.base_commit,
        "patch": view.patch,
    })
}

/// The one job a path's id (or unique id prefix) names.
pub(super) fn resolve(svc: &Service, given: &str) -> Result<String, ApiError> {
    Ok(blocking(|| svc.engine().store().resolve_id(given))?)
}

async fn get_job(State(svc): Svc, Path(id): Path<String>) -> Result<axum::Json<Value>, ApiError> {
    let id = resolve(&svc, &id)?;
    let view = blocking(|| svc.engine().store().load(&id))?;
    let dir = svc.engine().job_dir(&id);
    // The artifacts are on the host that ran the job: every host answers the same (SPEC §11).
    let artifacts = view
        .runner
        .as_ref()
        .and_then(|r| r.state_dir.as_ref())
        .map_or_else(|| dir.clone(), |d| crate::engine::job_dir(d, &id));
    let mut j = job_json(&view, &artifacts);
    // Retention removed its artifacts (the journal stays): say so and when.
    if let Some(m) = crate::engine::prune::pruned_marker(&dir) {
        j["artifacts_pruned"] = json!(m);
    }
    Ok(axum::Json(j))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<u64>,
    follow: Option<bool>,
}

async fn job_events(
    State(svc): Svc,
    Path(id): Path<String>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) =
        q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.body_text()))?;
    let follow = q.follow.unwrap_or(false);
    let id = resolve(&svc, &id)?;
    // Subscribe before reading the stored events, so nothing falls between the two.
    let rx = svc.subscribe();
    let stored = blocking(|| svc.engine().store().events(&id))?;
    let after = q.after.unwrap_or(0);
    let finished = stored
        .iter()
        .any(|e| matches!(e.kind, EventKind::JobFinished { .. }))
        && !follow_through_resume(&stored);
    let last = stored.last().map_or(0, |e| e.seq);
    // Only the last `job_finished` (not followed by `resumed`) ends a followed stream.
    let final_seq = if finished {
        stored
            .iter()
            .rev()
            .find(|e| matches!(e.kind, EventKind::JobFinished { .. }))
            .map(|e| e.seq)
    } else {
        None
    };
    let first: Vec<Event> = stored.into_iter().filter(|e| e.seq > after).collect();
    struct S {
        pending: std::collections::VecDeque<Event>,
        rx: tokio::sync::broadcast::Receiver<Event>,
        id: String,
        last: u64,
        done: bool,
        svc: Arc<Service>,
        stored_until: u64,
        final_seq: Option<u64>,
        polled: std::time::Instant,
    }
    // Not following: the stored events, then the end. Following a finished job: up to its final
    // `job_finished`. Following a live job: until a new `job_finished` arrives.
    let st = S {
        pending: first.into(),
        rx,
        id: id.clone(),
        last: last.max(after),
        done: !follow || (finished && final_seq.is_none_or(|f| f <= after)),
        svc: svc.clone(),
        stored_until: last,
        final_seq,
        polled: std::time::Instant::now(),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.pending.pop_front() {
                let mut line = serde_json::to_vec(&ev).unwrap_or_default();
                line.push(b'\n');
                if matches!(ev.kind, EventKind::JobFinished { .. })
                    && (ev.seq > st.stored_until || Some(ev.seq) == st.final_seq)
                {
                    st.done = true;
                }
                return Some((Ok::<_, std::io::Error>(Bytes::from(line)), st));
            }
            if st.done {
                return None;
            }
            // Events journalled by this process arrive through the broadcast; those of another
            // runner sharing the store (another host, or a `ralph run`) only in the store: after
            // a quiet second, or when the broadcast lagged, catch up from the store.
            let wait = FOLLOW_POLL.saturating_sub(st.polled.elapsed());
            match tokio::time::timeout(wait, st.rx.recv()).await {
                Ok(Ok(ev)) if ev.job_id == st.id && ev.seq > st.last => {
                    st.last = ev.seq;
                    st.pending.push_back(ev);
                }
                Ok(Ok(_)) => {}
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) | Err(_) => {
                    st.polled = std::time::Instant::now();
                    let (svc, id, last) = (st.svc.clone(), st.id.clone(), st.last);
                    if let Ok(events) = blocking(|| svc.engine().store().events(&id)) {
                        for ev in events.into_iter().filter(|e| e.seq > last) {
                            st.last = ev.seq;
                            st.pending.push_back(ev);
                        }
                    }
                }
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return None,
            }
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// A journal whose last event is `resumed` is not over even though it holds a `job_finished`.
fn follow_through_resume(events: &[Event]) -> bool {
    crate::store::event::last_end_or_resume(events)
        .is_some_and(|e| matches!(e.kind, EventKind::Resumed { .. }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogsQuery {
    pub(super) attempt: Option<u32>,
    pub(super) stream: Option<String>,
    pub(super) follow: Option<bool>,
}

pub(super) async fn round_logs(
    State(svc): Svc,
    Path((id, round)): Path<(String, u32)>,
    q: Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) =
        q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.body_text()))?;
    let id = resolve(&svc, &id)?;
    let view = blocking(|| svc.engine().store().load(&id))?;
    let job_dir = svc.engine().job_dir(&id);
    let attempt = q.attempt.unwrap_or(1);
    let target = match q.stream.as_deref() {
        Some("verify") => super::log_follow::Target::Verify { round },
        Some("setup") => super::log_follow::Target::Setup,
        _ => super::log_follow::Target::Attempt { round, attempt },
    };
    let path = match q.stream.as_deref().unwrap_or("stdout") {
        "verify" => crate::engine::AttemptDirs::verify(&job_dir, round).output_log(),
        "setup" => crate::engine::AttemptDirs::setup(&job_dir).output_log(),
        s @ ("stdout" | "stderr") => {
            let dirs = crate::engine::AttemptDirs::new(&job_dir, round, attempt);
            if s == "stdout" {
                dirs.stdout_log()
            } else {
                dirs.stderr_log()
            }
        }
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                format!("`{other}` is not stdout, stderr, verify or setup"),
            )
            .field("stream"));
        }
    };
    if let Some(m) = crate::engine::prune::pruned_marker(&job_dir) {
        return Err(ApiError::new(
            StatusCode::GONE,
            "pruned",
            format!(
                "the artifacts of job `{id}` were pruned at {} (retention); its journal remains: `ralph logs {id}`",
                m.pruned_at
            ),
        ));
    }
    // A round another host of the fleet ran (SPEC §11): the store keeps its log once the job
    // ended; until then, or when it does not, the answer names that host.
    let k = if matches!(q.stream.as_deref(), Some("setup")) {
        None
    } else {
        Some(round)
    };
    let holder =
        blocking(|| Ok::<_, crate::store::StoreError>(super::results::holder(&svc, &view, k)))?;
    if let Some(holder) = holder.filter(|h| super::results::elsewhere(&svc, h))
        && !path.is_file()
    {
        let name = path
            .strip_prefix(&job_dir)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let id2 = id.clone();
        let kept = if view.state == JobState::Finished {
            blocking(|| super::results::kept(&svc, &id2, &name))?
        } else {
            None
        };
        return match kept {
            Some(f) => {
                let truncated = f.truncated().then(|| f.bytes.to_string());
                let mut r = (
                    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                    f.data.unwrap_or_default(),
                )
                    .into_response();
                if let Some(full) = truncated
                    && let Ok(v) = full.parse()
                {
                    r.headers_mut().insert(super::results::TRUNCATED_HEADER, v);
                }
                Ok(r)
            }
            None => Err(super::results::held_elsewhere(
                &svc,
                &view,
                &format!("the log of round {round}"),
                &holder,
            )),
        };
    }
    if q.follow == Some(true) {
        return super::log_follow::follow(svc.clone(), id, target, path).await;
    }
    match tokio::fs::read(&path).await {
        Ok(bytes) => {
            Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], bytes).into_response())
        }
        Err(_) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("job `{id}` has no such log (round {round})"),
        )),
    }
}

/// With `limits.cancel_own_only`, a caller without `admin` may act only on the jobs it
/// submitted.
fn check_own(svc: &Service, caller: &super::tokens::Caller, id: &str) -> Result<(), ApiError> {
    if !svc.config().limits_for(&caller.name).cancel_own_only
        || caller.scopes.contains(&super::scope::Scope::Admin)
    {
        return Ok(());
    }
    let view = blocking(|| svc.engine().store().load(id))?;
    if view.spec.submitted_by.as_deref() == Some(caller.name.as_str()) {
        return Ok(());
    }
    let mut e = ApiError::new(
        StatusCode::FORBIDDEN,
        "refused",
        format!(
            "job `{id}` was submitted by {}, not by token `{}`: only its submitter (or an `admin` token) may cancel or resume it",
            view.spec
                .submitted_by
                .as_deref()
                .map_or_else(|| "no API token".to_owned(), |s| format!("token `{s}`")),
            caller.name
        ),
    );
    e.rule = Some("limits.cancel_own_only".into());
    Err(e)
}

pub(super) async fn cancel_job(
    State(svc): Svc,
    axum::Extension(caller): axum::Extension<super::tokens::Caller>,
    Path(id): Path<String>,
) -> Result<(StatusCode, axum::Json<Value>), ApiError> {
    let id = resolve(&svc, &id)?;
    check_own(&svc, &caller, &id)?;
    let by = format!("token:{}", caller.name);
    if let Some(c) = svc.running_cancel(&id) {
        c.cancel(&by);
        return Ok((
            StatusCode::ACCEPTED,
            axum::Json(json!({"id": id, "state": "running", "cancel": "requested"})),
        ));
    }
    // Queued: cancelled now. Running elsewhere (another runner sharing the store): the request
    // is journalled and that runner stops the job when it sees it.
    match blocking(|| svc.engine().request_cancel(&id, &by))? {
        CancelRequest::Cancelled => Ok((
            StatusCode::OK,
            axum::Json(json!({"id": id, "state": "finished", "outcome": "cancelled"})),
        )),
        CancelRequest::Requested => Ok((
            StatusCode::ACCEPTED,
            axum::Json(json!({"id": id, "state": "running", "cancel": "requested"})),
        )),
        CancelRequest::NotActive { state } => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("job `{id}` is {state}: nothing to cancel"),
        )),
    }
}

/// `POST /v1/jobs/{id}/resume`, with an optional JSON body of raised caps
/// (`{"max_rounds": N, "max_tokens": N, "job_timeout": "DUR"}`, SPEC §3).
pub(super) async fn resume_job(
    State(svc): Svc,
    axum::Extension(caller): axum::Extension<super::tokens::Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, axum::Json<Value>), ApiError> {
    let caps: crate::job::RaisedCaps = optional_body(&body, "the raised caps")?;
    let id = resolve(&svc, &id)?;
    check_own(&svc, &caller, &id)?;
    blocking(|| svc.engine().resume_by(&id, Some(&caller.name), &caps))?;
    svc.wake();
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({"id": id, "state": "queued"})),
    ))
}
