//! The token endpoints (scope `admin`), behind `ralph token`:
//!
//! ```text
//! GET    /v1/tokens           the tokens: name, scopes, source (generated, config, created)
//! POST   /v1/tokens           {"name": N, "scopes": [...]} → 201 {"name", "scopes", "token"}
//! DELETE /v1/tokens/{name}    revokes a created token
//! ```

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Service;
use super::api::ApiError;
use super::scope::Scope;
use super::tokens::TokensError;

/// The routes, under `/v1`.
pub fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/tokens", get(list).post(create))
        .route("/tokens/{name}", delete(revoke))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    scopes: Vec<Scope>,
}

fn api_error(e: TokensError) -> ApiError {
    match e {
        TokensError::Unknown(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
        TokensError::Refused(_) => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
        TokensError::File { .. } => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        }
    }
}

async fn list(State(svc): State<Arc<Service>>) -> axum::Json<Value> {
    axum::Json(json!({ "tokens": svc.tokens().list() }))
}

async fn create(
    State(svc): State<Arc<Service>>,
    body: Bytes,
) -> Result<(StatusCode, axum::Json<Value>), ApiError> {
    let b: CreateBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("failed to read the token request: {e} (expected {{\"name\": …, \"scopes\": [\"read\", \"submit\", \"cancel\", \"admin\"]}})"),
        )
    })?;
    let token = svc.tokens().create(&b.name, &b.scopes).map_err(api_error)?;
    let scopes = b
        .scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(",");
    tracing::info!(token = %b.name, scopes = %scopes, "token `{}` created with scopes {scopes}", b.name);
    let listed = svc.tokens().list().into_iter().find(|t| t.name == b.name);
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({
            "name": b.name,
            "scopes": listed.map(|t| t.scopes).unwrap_or(b.scopes),
            "token": token,
        })),
    ))
}

async fn revoke(
    State(svc): State<Arc<Service>>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    svc.tokens().revoke(&name).map_err(api_error)?;
    tracing::info!(token = %name, "token `{name}` revoked");
    Ok(axum::Json(json!({ "name": name, "revoked": true })))
}
