//! The dashboard's downloads: a job's patch and a round's captured logs, answered as the API
//! answers them (from this host, or from the store for another host's job) but as attachments
//! (`Content-Disposition`), so a browser saves them and never renders them as a page.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use serde::Deserialize;

use super::error::UiError;
use super::signin::viewer;
use crate::service::Service;
use crate::service::api::{LogsQuery, round_logs};

/// Makes `resp` an attachment named `name`, shown to nothing as HTML.
fn attachment(mut resp: Response, name: &str) -> Response {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if !h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/x-diff") || ct.starts_with("text/plain"))
    {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
    }
    resp
}

/// A job id as a file name: its characters kept when plain, else `job`.
fn file_stem(id: &str) -> &str {
    if !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        id
    } else {
        "job"
    }
}

/// `GET /ui/jobs/{id}/patch`.
pub(super) async fn patch(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    viewer(&svc, &headers, &format!("/ui/jobs/{id}"))?;
    let id = crate::service::api::resolve(&svc, &id)?;
    let resp = crate::service::provisioned::job_patch(State(svc), Path(id.clone())).await?;
    Ok(attachment(resp, &format!("{}.patch", file_stem(&id))))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogQuery {
    attempt: Option<u32>,
    stream: Option<String>,
}

/// `GET /ui/jobs/{id}/rounds/{round}/logs?attempt=&stream=`.
pub(super) async fn log(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    Path((id, round)): Path<(String, u32)>,
    Query(q): Query<LogQuery>,
) -> Result<Response, UiError> {
    viewer(&svc, &headers, &format!("/ui/jobs/{id}"))?;
    let id = crate::service::api::resolve(&svc, &id)?;
    let stream = q.stream.clone().unwrap_or_else(|| "stdout".into());
    let name = format!(
        "{}-round{round}-{}{}.log",
        file_stem(&id),
        match stream.as_str() {
            "stdout" | "stderr" | "verify" | "setup" => stream.as_str(),
            _ => "log",
        },
        q.attempt
            .map(|a| format!("-attempt{a}"))
            .unwrap_or_default()
    );
    let resp = round_logs(
        State(svc),
        Path((id, round)),
        Ok(Query(LogsQuery {
            attempt: q.attempt,
            stream: q.stream,
            follow: None,
        })),
    )
    .await?;
    Ok(attachment(resp, &name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_plain() {
        assert_eq!(file_stem("0193-abc_d"), "0193-abc_d");
        assert_eq!(file_stem("a\"b"), "job");
        assert_eq!(file_stem("../x"), "job");
        assert_eq!(file_stem(""), "job");
    }
}
