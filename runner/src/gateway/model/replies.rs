//! Responses the gateway makes itself, shaped like the upstream API's errors so the CLI shows
//! them: the spent budget (400, which CLIs do not retry), paths outside the upstream (404),
//! refused upgrades (426), oversized bodies (413), an unreachable upstream (502, naming it).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::config::ApiFamily;

/// The `code` of the OpenAI-shaped budget error.
pub const BUDGET_CODE: &str = "ralph_token_budget_exhausted";

/// The message of a refused request once the budget is spent.
pub fn budget_message(used: u64, max: u64) -> String {
    format!("ralph: the job's token budget is spent ({used} of {max} tokens)")
}

/// An error body in the API family's shape.
pub fn error_body(family: ApiFamily, kind: &str, code: &str, message: &str) -> Value {
    match family {
        ApiFamily::OpenAi => json!({
            "error": {"message": message, "type": kind, "code": code}
        }),
        ApiFamily::Anthropic => json!({
            "type": "error",
            "error": {"type": kind, "message": message}
        }),
    }
}

/// A JSON response.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The refusal once the budget is spent.
pub fn budget_spent(family: ApiFamily, used: u64, max: u64) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        &error_body(
            family,
            "invalid_request_error",
            BUDGET_CODE,
            &budget_message(used, max),
        ),
    )
}

/// A gateway error of `status` in the family's shape.
pub fn gateway_error(family: ApiFamily, status: StatusCode, code: &str, message: &str) -> Response {
    let kind = if status.is_server_error() {
        "api_error"
    } else {
        "invalid_request_error"
    };
    json_response(status, &error_body(family, kind, code, message))
}
