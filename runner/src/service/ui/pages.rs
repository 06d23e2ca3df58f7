//! The dashboard's pages: the queue with its filters and paging, a job, a batch, the host's
//! health. Each handler reads the store (the same calls as the API), makes every text field
//! safe ([`super::text`]) into a page struct, and renders its template.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use super::error::UiError;
use super::rounds::{self, Round, Setup};
use super::signin::{Viewer, viewer};
use super::{diff, text};
use crate::job::Outcome;
use crate::service::Service;
use crate::service::scope::Scope;
use crate::store::journal::blocking;
use crate::store::{JobFilter, JobState, JobSummary};

/// What every page shows around its content: who is signed in, and the session's CSRF value
/// for the logout form.
#[derive(Debug, Clone, Default)]
pub struct Chrome {
    /// The token's name, when signed in.
    pub who: Option<String>,
    /// The session's CSRF value (a browser session only).
    pub csrf: Option<String>,
}

/// Jobs per page of the queue.
pub const PAGE: usize = 50;

fn render<T: Template>(status: StatusCode, page: &T) -> Result<Response, UiError> {
    Ok((status, Html(page.render()?)).into_response())
}

/// The path and query of a request, for the login redirect.
fn here(path: &str, raw: Option<&str>) -> String {
    match raw {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_owned(),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsQuery {
    state: Option<String>,
    outcome: Option<String>,
    name: Option<String>,
    submitted_by: Option<String>,
    batch: Option<String>,
    before: Option<String>,
}

/// An option of a filter's select.
#[derive(Debug)]
struct Opt {
    value: String,
    selected: bool,
}

fn options<'a>(values: impl Iterator<Item = &'a str>, chosen: &str) -> Vec<Opt> {
    std::iter::once("")
        .chain(values)
        .map(|v| Opt {
            value: v.to_owned(),
            selected: v == chosen,
        })
        .collect()
}

/// One row of the queue.
#[derive(Debug)]
struct Row {
    id: String,
    short: String,
    name: String,
    state: String,
    outcome: String,
    labels: String,
    rounds: u32,
    submitted_by: String,
    created_at: String,
}

impl Row {
    fn of(j: &JobSummary) -> Self {
        Row {
            short: j.id.chars().take(13).collect(),
            id: j.id.clone(),
            name: text::line(j.name.as_deref().unwrap_or("")),
            state: j.state.clone(),
            outcome: j.outcome.clone().unwrap_or_default(),
            labels: text::line(
                &j.labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            rounds: j.rounds,
            submitted_by: text::line(j.submitted_by.as_deref().unwrap_or("")),
            created_at: j.created_at.clone(),
        }
    }
}

#[derive(Template)]
#[template(path = "ui/jobs.html")]
struct JobsPage {
    chrome: Chrome,
    rows: Vec<Row>,
    error: Option<String>,
    state_opts: Vec<Opt>,
    outcome_opts: Vec<Opt>,
    label: String,
    name: String,
    submitted_by: String,
    next: Option<String>,
    first: Option<String>,
    queued: u64,
    running: u64,
}

/// The filters of a query string, empty values dropped (a form sends every field).
fn filters(raw: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(raw)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .collect()
}

/// `GET /ui/jobs`: the queue and recent jobs, newest first, filtered and paged.
pub(super) async fn jobs(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, UiError> {
    let v = viewer(&svc, &headers, &here("/ui/jobs", raw.as_deref()))?;
    let pairs = filters(raw.as_deref().unwrap_or(""));
    let label = pairs
        .iter()
        .find(|(k, _)| k == "label")
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    let mut page = JobsPage {
        chrome: v.chrome(),
        rows: Vec::new(),
        error: None,
        state_opts: options(JobState::ALL.iter().map(|s| s.as_str()), ""),
        outcome_opts: options(Outcome::ALL.iter().map(|o| o.as_str()), ""),
        label: text::line(&label),
        name: String::new(),
        submitted_by: String::new(),
        next: None,
        first: None,
        queued: 0,
        running: 0,
    };
    let cleaned = serde_urlencoded::to_string(&pairs).unwrap_or_default();
    let parsed = crate::service::list_query::parse::<JobsQuery>(&cleaned);
    let (q, labels) = match parsed {
        Ok(x) => x,
        Err(e) => {
            page.error = Some(text::line(&e.message));
            return render(StatusCode::BAD_REQUEST, &page);
        }
    };
    page.state_opts = options(
        JobState::ALL.iter().map(|s| s.as_str()),
        q.state.as_deref().unwrap_or(""),
    );
    page.outcome_opts = options(
        Outcome::ALL.iter().map(|o| o.as_str()),
        q.outcome.as_deref().unwrap_or(""),
    );
    page.name = text::line(q.name.as_deref().unwrap_or(""));
    page.submitted_by = text::line(q.submitted_by.as_deref().unwrap_or(""));
    let state = match q.state.as_deref() {
        None => None,
        Some(other) => match JobState::from_name(other) {
            Some(state) => Some(state),
            None => {
                page.error = Some(format!(
                    "state: `{}` is not queued, running or finished",
                    text::line(other)
                ));
                return render(StatusCode::BAD_REQUEST, &page);
            }
        },
    };
    let outcome = match q.outcome.as_deref() {
        None => None,
        Some(o) => match Outcome::from_name(o) {
            Some(x) => Some(x),
            None => {
                page.error = Some(format!("outcome: `{}` is not an outcome", text::line(o)));
                return render(StatusCode::BAD_REQUEST, &page);
            }
        },
    };
    let filter = JobFilter {
        state,
        outcome,
        before: q.before.clone(),
        limit: PAGE,
        name: q.name.clone(),
        labels,
        batch: q.batch.clone(),
        submitted_by: q.submitted_by.clone(),
    };
    let store = svc.engine().store();
    let (jobs, queued, running) = blocking(|| {
        Ok::<_, crate::store::StoreError>((
            store.list(&filter)?,
            store.count_in_state(JobState::Queued)?,
            store.count_in_state(JobState::Running)?,
        ))
    })?;
    page.queued = queued;
    page.running = running;
    page.rows = jobs.iter().map(Row::of).collect();
    let keep: Vec<(String, String)> = pairs.into_iter().filter(|(k, _)| k != "before").collect();
    if jobs.len() == PAGE
        && let Some(last) = jobs.last()
    {
        let mut next = keep.clone();
        next.push(("before".into(), last.id.clone()));
        page.next = Some(format!(
            "/ui/jobs?{}",
            serde_urlencoded::to_string(&next).unwrap_or_default()
        ));
    }
    if q.before.is_some() {
        page.first = Some(format!(
            "/ui/jobs?{}",
            serde_urlencoded::to_string(&keep).unwrap_or_default()
        ));
    }
    render(StatusCode::OK, &page)
}

/// A job's summary line: a label and its value.
#[derive(Debug)]
struct Field {
    id: &'static str,
    label: &'static str,
    value: String,
}

/// One attempt of a fan-out job (its own job, linked).
#[derive(Debug)]
struct FanRow {
    index: u32,
    job: String,
    outcome: String,
    rounds: u32,
    tokens: u64,
    verified: String,
    chosen: bool,
}

/// A captured log to download.
#[derive(Debug)]
struct Artifact {
    href: String,
    label: String,
}

#[derive(Template)]
#[template(path = "ui/job.html")]
struct JobPage {
    chrome: Chrome,
    id: String,
    title: String,
    fields: Vec<Field>,
    objective: String,
    message: String,
    rounds: Vec<Round>,
    setup: Option<Setup>,
    live: Option<String>,
    patch: Option<Vec<diff::Line>>,
    patch_more: usize,
    patch_note: Option<String>,
    artifacts: Vec<Artifact>,
    may_cancel: bool,
    may_resume: bool,
    batch: Option<String>,
    fanout: Vec<FanRow>,
    attempt_of: Option<(String, u32)>,
}

/// How much of a patch the page reads to show it.
const PATCH_SHOWN: usize = 1 << 20;

/// `GET /ui/jobs/{id}`.
pub(super) async fn job(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let v: Viewer = viewer(&svc, &headers, &format!("/ui/jobs/{id}"))?;
    let id = crate::service::api::resolve(&svc, &id)?;
    let store = svc.engine().store();
    let (view, events) =
        blocking(|| Ok::<_, crate::store::StoreError>((store.load(&id)?, store.events(&id)?)))?;
    let (rounds, setup) = rounds::of(&events);
    let f = view.finish.as_ref();
    let usage = &view.usage;
    let mut fields = vec![
        Field {
            id: "job-state",
            label: "State",
            value: view.state.as_str().to_owned(),
        },
        Field {
            id: "job-outcome",
            label: "Outcome",
            value: f.map(|f| f.outcome.as_str().to_owned()).unwrap_or_default(),
        },
        Field {
            id: "job-rounds",
            label: "Rounds",
            value: format!("{} of {}", view.rounds_started, view.spec.max_rounds),
        },
        Field {
            id: "job-retries",
            label: "Retries",
            value: view.retries.to_string(),
        },
        Field {
            id: "job-tokens",
            label: "Tokens",
            value: format!(
                "{} in ({} cached) / {} out",
                usage.input_tokens, usage.cached_input_tokens, usage.output_tokens
            ),
        },
        Field {
            id: "job-verified",
            label: "Verified",
            value: match view.verified {
                Some(true) => "passed".into(),
                Some(false) => "failed".into(),
                None => "not run".into(),
            },
        },
        Field {
            id: "job-submitted-by",
            label: "Submitted by",
            value: text::line(view.spec.submitted_by.as_deref().unwrap_or("")),
        },
        Field {
            id: "job-submitted-at",
            label: "Submitted",
            value: view.submitted_at.clone(),
        },
        Field {
            id: "job-updated-at",
            label: "Updated",
            value: view.updated_at.clone(),
        },
        Field {
            id: "job-labels",
            label: "Labels",
            value: text::line(
                &view
                    .spec
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        },
    ];
    if let Some(r) = &view.runner {
        fields.push(Field {
            id: "job-host",
            label: "Host",
            value: text::line(&r.host),
        });
    }
    let live = match (view.state, view.open_attempt) {
        (JobState::Running, Some((round, attempt))) => Some(format!(
            "/ui/jobs/{id}/rounds/{round}/live?attempt={attempt}"
        )),
        _ => None,
    };
    // The patch, read like the API's answer (another host's comes from the store).
    let (mut patch, mut patch_more, mut patch_note) = (None, 0, None);
    if view.patch.is_some() {
        let resp = crate::service::provisioned::job_patch(State(svc.clone()), Path(id.clone()))
            .await
            .map_err(UiError::from);
        match resp {
            Ok(r) if r.status() == StatusCode::OK => {
                match axum::body::to_bytes(r.into_body(), PATCH_SHOWN).await {
                    Ok(bytes) => {
                        let (lines, more) = diff::lines(&bytes);
                        patch = Some(lines);
                        patch_more = more;
                    }
                    Err(_) => {
                        patch_note =
                            Some("The patch is too large to show here: download it.".into())
                    }
                }
            }
            Ok(r) => patch_note = Some(format!("No patch to show ({}).", r.status())),
            Err(e) => patch_note = Some(text::line(&e.to_string())),
        }
    }
    let mut artifacts = Vec::new();
    if setup.is_some() {
        artifacts.push(Artifact {
            href: format!("/ui/jobs/{id}/rounds/0/logs?stream=setup"),
            label: "set-up output".into(),
        });
    }
    for r in &rounds {
        for a in &r.attempts {
            for stream in ["stdout", "stderr"] {
                artifacts.push(Artifact {
                    href: format!(
                        "/ui/jobs/{id}/rounds/{}/logs?attempt={}&stream={stream}",
                        r.round, a.attempt
                    ),
                    label: format!("round {} attempt {} {stream}", r.round, a.attempt),
                });
            }
        }
        if r.verify.is_some() {
            artifacts.push(Artifact {
                href: format!("/ui/jobs/{id}/rounds/{}/logs?stream=verify", r.round),
                label: format!("round {} verify output", r.round),
            });
        }
    }
    let finished = view.state == JobState::Finished;
    let outcome = f.map(|f| f.outcome);
    let page = JobPage {
        chrome: v.chrome(),
        title: text::line(view.spec.name.as_deref().unwrap_or(&id)),
        id: id.clone(),
        fields,
        objective: text::block(&view.spec.objective),
        message: f.map(|f| text::block(&f.message)).unwrap_or_default(),
        rounds,
        setup,
        live,
        patch,
        patch_more,
        patch_note,
        artifacts,
        may_cancel: v.may(Scope::Cancel) && !finished,
        may_resume: v.may(Scope::Cancel) && finished && outcome != Some(Outcome::Complete),
        batch: view.spec.batch.clone(),
        fanout: view
            .fanout
            .iter()
            .map(|a| FanRow {
                index: a.index,
                job: a.job.clone(),
                outcome: a.outcome.map(|o| o.as_str().to_owned()).unwrap_or_default(),
                rounds: a.rounds,
                tokens: a.tokens,
                verified: match a.verified {
                    Some(true) => "passed".into(),
                    Some(false) => "failed".into(),
                    None => String::new(),
                },
                chosen: a.chosen,
            })
            .collect(),
        attempt_of: view
            .spec
            .attempt_of
            .as_ref()
            .map(|a| (a.job.clone(), a.index)),
    };
    render(StatusCode::OK, &page)
}

#[derive(Template)]
#[template(path = "ui/batch.html")]
struct BatchPage {
    chrome: Chrome,
    id: String,
    counts: Vec<(String, String)>,
    not_complete: Vec<Row>,
}

/// `GET /ui/batches/{id}`: a batch's counts and its jobs that did not complete.
pub(super) async fn batch(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let v = viewer(&svc, &headers, &format!("/ui/batches/{id}"))?;
    let axum::Json(b) = crate::service::batches::show(State(svc.clone()), Path(id.clone())).await?;
    let n = |k: &str| b.get(k).map(Value::to_string).unwrap_or_default();
    let mut counts = vec![
        ("jobs".to_owned(), n("jobs")),
        ("retried".to_owned(), n("retried")),
        ("tokens".to_owned(), n("tokens")),
        (
            "wall time".to_owned(),
            rounds::duration(b.get("wall_ms").and_then(Value::as_u64).unwrap_or(0)),
        ),
    ];
    for key in ["states", "outcomes"] {
        if let Some(m) = b.get(key).and_then(Value::as_object) {
            counts.extend(m.iter().map(|(k, v)| (text::line(k), v.to_string())));
        }
    }
    let not_complete = b
        .get("not_complete")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|j| {
                    let s = |k: &str| j.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                    let id = s("id");
                    Row {
                        short: id.chars().take(13).collect(),
                        id,
                        name: text::line(&s("name")),
                        state: text::line(&s("state")),
                        outcome: text::line(&s("outcome")),
                        labels: String::new(),
                        rounds: j
                            .get("rounds")
                            .and_then(Value::as_u64)
                            .and_then(|r| u32::try_from(r).ok())
                            .unwrap_or(0),
                        submitted_by: String::new(),
                        created_at: String::new(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let page = BatchPage {
        chrome: v.chrome(),
        id: text::line(&id),
        counts,
        not_complete,
    };
    render(StatusCode::OK, &page)
}

/// One host of the fleet.
#[derive(Debug)]
struct HostRow {
    host: String,
    pid: u32,
    role: String,
    expires_at: String,
    live: bool,
    running: u64,
}

#[derive(Template)]
#[template(path = "ui/health.html")]
struct HealthPage {
    chrome: Chrome,
    ready: String,
    fields: Vec<(String, String)>,
    hosts: Vec<HostRow>,
    fleet: bool,
}

/// `GET /ui/health`: this host's readiness and the fleet's hosts with their leases.
pub(super) async fn health(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let v = viewer(&svc, &headers, "/ui/health")?;
    let store = svc.engine().store();
    let reachable = blocking(|| store.reachable());
    let room = svc.state_room();
    let ready = if !svc.is_ready() {
        "not ready (starting)".to_owned()
    } else if svc.is_draining() {
        "draining".to_owned()
    } else if let Err(e) = &reachable {
        format!(
            "not ready: the store is unreachable: {}",
            text::line(&e.to_string())
        )
    } else if let Err(why) = &room {
        format!("not ready: the state disk is full: {}", text::line(why))
    } else {
        "ready".to_owned()
    };
    let (queued, running, leases) = blocking(|| {
        Ok::<_, crate::store::StoreError>((
            store.count_in_state(JobState::Queued)?,
            store.count_in_state(JobState::Running)?,
            store.leases()?,
        ))
    })
    .unwrap_or_default();
    let config = svc.config();
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fields = vec![
        ("host".to_owned(), text::line(&host)),
        ("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
        ("store".to_owned(), text::line(&store.location())),
        ("queued jobs".to_owned(), queued.to_string()),
        ("running jobs".to_owned(), running.to_string()),
        (
            "running here".to_owned(),
            format!(
                "{} of {}",
                svc.running.lock().map(|r| r.len()).unwrap_or(0),
                config.max_concurrent_jobs
            ),
        ),
        (
            "signed-in browsers".to_owned(),
            svc.sessions.len().to_string(),
        ),
    ];
    let fleet = !store.is_sqlite();
    let hosts = if fleet {
        leases
            .into_iter()
            .map(|l| HostRow {
                host: text::line(&l.host),
                pid: l.pid,
                role: text::line(&l.role),
                expires_at: l.expires_at,
                live: l.live,
                running: l.running,
            })
            .collect()
    } else {
        vec![HostRow {
            host: text::line(&host),
            pid: std::process::id(),
            role: "serve".into(),
            expires_at: String::new(),
            live: true,
            running,
        }]
    };
    let page = HealthPage {
        chrome: v.chrome(),
        ready,
        fields,
        hosts,
        fleet,
    };
    render(StatusCode::OK, &page)
}
