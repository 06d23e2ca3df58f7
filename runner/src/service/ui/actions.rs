//! The dashboard's two actions, cancel and resume: the API's calls
//! ([`crate::service::api::cancel_job`], [`crate::service::api::resume_job`]: the same rules,
//! `cancel_own_only` included), behind the `cancel` scope, the session's CSRF value and a same
//! origin. A refusal is a page that says why; success goes back to the job's page.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::error::UiError;
use super::signin::{check_form, viewer};
use crate::service::Service;
use crate::service::scope::Scope;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
}

/// What the form asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Cancel,
    Resume,
}

async fn act(
    svc: Arc<Service>,
    headers: HeaderMap,
    id: String,
    body: Bytes,
    action: Action,
) -> Result<Response, UiError> {
    let v = viewer(&svc, &headers, &format!("/ui/jobs/{id}"))?;
    let form: ActionForm = serde_urlencoded::from_bytes(&body)
        .map_err(|e| UiError::BadRequest(format!("the form could not be read: {e}")))?;
    check_form(&headers, Some(&v), &form.csrf)?;
    if !v.may(Scope::Cancel) {
        return Err(UiError::Forbidden(format!(
            "token `{}` lacks the `cancel` scope: it may look, not cancel or resume",
            super::text::line(&v.caller.name)
        )));
    }
    let id = crate::service::api::resolve(&svc, &id)?;
    let caller = Extension(v.caller.clone());
    match action {
        Action::Cancel => {
            let _answer =
                crate::service::api::cancel_job(State(svc), caller, Path(id.clone())).await?;
        }
        Action::Resume => {
            let _answer =
                crate::service::api::resume_job(State(svc), caller, Path(id.clone()), Bytes::new())
                    .await?;
        }
    }
    Ok(Redirect::to(&format!("/ui/jobs/{id}")).into_response())
}

/// `POST /ui/jobs/{id}/cancel`.
pub(super) async fn cancel(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, UiError> {
    act(svc, headers, id, body, Action::Cancel).await
}

/// `POST /ui/jobs/{id}/resume`.
pub(super) async fn resume(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, UiError> {
    act(svc, headers, id, body, Action::Resume).await
}
