//! The dashboard's failures, each answered with a page (or, for a browser not signed in, a
//! redirect to the login form), never with the API's JSON.

use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};

use crate::service::api_error::ApiError;

/// Why a dashboard request failed.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// No session and no bearer token: the login form, then back to `next`.
    #[error("sign in to see this page")]
    SignIn {
        /// The page asked for (a path under `/ui`).
        next: String,
    },
    /// A wrong bearer token, or a session that ended.
    #[error("{0}")]
    Unauthorized(String),
    /// Signed in, but not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// Nothing there.
    #[error("{0}")]
    NotFound(String),
    /// A request the page cannot take (a malformed filter, form or id).
    #[error("{0}")]
    BadRequest(String),
    /// What the API said (its status and message).
    #[error("{message}")]
    Api {
        /// Its status.
        status: StatusCode,
        /// Its message.
        message: String,
    },
    /// A template failed to render.
    #[error("failed to render the page: {0}")]
    Render(String),
}

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        UiError::Api {
            status: e.status,
            message: e.message,
        }
    }
}

impl From<askama::Error> for UiError {
    fn from(e: askama::Error) -> Self {
        UiError::Render(e.to_string())
    }
}

impl From<crate::store::StoreError> for UiError {
    fn from(e: crate::store::StoreError) -> Self {
        UiError::from(ApiError::from(e))
    }
}

impl UiError {
    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        match self {
            UiError::SignIn { .. } => StatusCode::SEE_OTHER,
            UiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            UiError::Forbidden(_) => StatusCode::FORBIDDEN,
            UiError::NotFound(_) => StatusCode::NOT_FOUND,
            UiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            UiError::Api { status, .. } => *status,
            UiError::Render(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

#[derive(Template)]
#[template(path = "ui/error.html")]
struct ErrorPage<'a> {
    status: u16,
    title: &'a str,
    message: String,
    chrome: super::pages::Chrome,
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        if let UiError::SignIn { next } = &self {
            let to = format!(
                "/ui/login?{}",
                serde_urlencoded::to_string([("next", next.as_str())]).unwrap_or_default()
            );
            return Redirect::to(&to).into_response();
        }
        let status = self.status();
        let page = ErrorPage {
            status: status.as_u16(),
            title: status.canonical_reason().unwrap_or("Error"),
            message: super::text::line(&self.to_string()),
            chrome: super::pages::Chrome::default(),
        };
        match page.render() {
            Ok(html) => (status, Html(html)).into_response(),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("failed to render the error page: {e}"),
            )
                .into_response(),
        }
    }
}
