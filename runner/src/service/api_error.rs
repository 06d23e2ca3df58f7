//! The API's one error type: what every `/v1` handler returns on failure, rendered as
//! `{"error":{"code":…,"message":…,"field":…,"rule":…}}` with its HTTP status, and how the
//! store's and the engine's errors map to it (a full state disk is 507).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::api::MAX_BODY;
use crate::engine::EngineError;
use crate::store::StoreError;
use crate::util::text::bounded;

/// An API error.
#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    pub(super) message: String,
    pub(super) field: Option<String>,
    pub(super) rule: Option<Box<str>>,
    /// Whether the connection is closed after the answer (the rest of the request is not read).
    pub(super) close: bool,
    /// The jobs an ambiguous id prefix matches.
    pub(super) candidates: Option<Box<[String]>>,
    /// The scope a refused call needs.
    pub(super) scope: Option<super::scope::Scope>,
    /// Seconds until a rate-limited call may be tried again (`Retry-After`; at most a minute).
    pub(super) retry_after: Option<u16>,
    /// The entry of a refused upload (its path in the tar stream).
    pub(super) entry: Option<Box<str>>,
}

/// The JSON error shape of every error answer.
pub fn error_body(code: &str, message: &str) -> String {
    json!({"error": {"code": code, "message": bounded(message, 4096)}}).to_string()
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            rule: None,
            close: false,
            candidates: None,
            scope: None,
            retry_after: None,
            entry: None,
        }
    }

    /// A call outside the token's scopes: 403 naming the scope it needs.
    pub(super) fn needs_scope(token: &str, scope: super::scope::Scope) -> Self {
        let mut e = Self::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("this call needs the `{scope}` scope, which token `{token}` does not have"),
        );
        e.scope = Some(scope);
        e
    }

    /// A call over a rate limit: 429 with `Retry-After`.
    pub(super) fn rate_limited(message: String, wait: std::time::Duration) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message);
        e.retry_after = Some(wait.as_secs_f64().ceil().clamp(1.0, 3600.0) as u16);
        e
    }

    pub(super) fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    /// Names the configuration (or upload) rule the call broke.
    pub(super) fn rule(mut self, r: impl Into<String>) -> Self {
        self.rule = Some(r.into().into_boxed_str());
        self
    }

    /// Names the entry of a refused upload.
    pub(super) fn entry(mut self, e: impl Into<String>) -> Self {
        self.entry = Some(e.into().into_boxed_str());
        self
    }

    pub(super) fn too_large() -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is over {MAX_BODY} bytes"),
        )
        .closing()
    }

    pub(super) fn field(mut self, f: impl Into<String>) -> Self {
        self.field = Some(f.into());
        self
    }

    pub(super) fn not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no job matches `{id}`"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut err = json!({"code": self.code, "message": bounded(&self.message, 4096)});
        if let Some(f) = self.field {
            err["field"] = json!(f);
        }
        if let Some(r) = self.rule {
            err["rule"] = json!(r);
        }
        if let Some(e) = self.entry {
            err["entry"] = json!(bounded(&e, 4096));
        }
        if let Some(c) = self.candidates.filter(|c| !c.is_empty()) {
            err["candidates"] = json!(c);
        }
        if let Some(s) = self.scope {
            err["scope"] = json!(s.as_str());
        }
        let mut resp = (self.status, axum::Json(json!({ "error": err }))).into_response();
        resp.extensions_mut().insert(super::refusal_log::Refused {
            code: self.code,
            message: self.message,
        });
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.close {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NoSuchJob { id } => ApiError::not_found(&id),
            bad @ StoreError::InvalidIdPrefix { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", bad.to_string())
            }
            StoreError::AmbiguousId { prefix, candidates } => {
                let mut e = ApiError::new(
                    StatusCode::CONFLICT,
                    "ambiguous_id",
                    format!(
                        "the job id prefix `{prefix}` matches several jobs: {}",
                        candidates.join(", ")
                    ),
                );
                e.candidates = Some(candidates.into_boxed_slice());
                e
            }
            // Another runner sharing the store changed the job meanwhile.
            conflict @ StoreError::Conflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", conflict.to_string())
            }
            full if full.is_disk_full() => ApiError::disk_full(&full.to_string()),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                other.to_string(),
            ),
        }
    }
}

impl ApiError {
    /// 500: a path was refused because the state store could not say which of the trees it
    /// knows holds a symlink on the way (`refusal` names the link and the store's error): the
    /// server's fault, not the request's.
    pub fn trees_unknown(refusal: &str) -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!(
                "{refusal} (the server's fault, not the request's: submit it again once the server's state store answers)"
            ),
        )
    }

    /// 507: the state store cannot write for lack of room (`why`).
    pub fn disk_full(why: &str) -> Self {
        ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "disk_full",
            format!(
                "the service cannot store the job: its state dir's disk is full ({why}); free space on the server, then submit again"
            ),
        )
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Store(s) => s.into(),
            EngineError::Spec(s) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", s.message).field(s.field)
            }
            EngineError::Config { message } => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
            }
            EngineError::Conflict { message } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", message)
            }
            EngineError::NotRunnable { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            full if full.is_disk_full() => ApiError::disk_full(&full.to_string()),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                other.to_string(),
            ),
        }
    }
}
