//! Logs the API's refusals: every 401 (no or a wrong token) and 403 (a rule refused the
//! request), and every other 4xx answer to a job submission, with the method, the path, the
//! peer address when known, the status and the reason — never the token nor the body. The
//! service's own failures (5xx but `/readyz`'s 503: a store that cannot write, an internal
//! error) are logged as errors at a bounded rate ([`super::disk_room::LOG_EVERY`]), with how many were not.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// The peer of a connection (`ip:port` for TCP; `unix` for the socket), set per connection by
/// the HTTP server.
#[derive(Clone, Debug)]
pub struct Peer(pub String);

/// Why the API refused a request (its error code and message), attached to the answer.
#[derive(Clone, Debug)]
pub struct Refused {
    /// The error code (`unauthorized`, `refused`, `invalid_field`, …).
    pub code: &'static str,
    /// The message the client got.
    pub message: String,
}

/// The middleware (outermost: it sees the final answer).
pub async fn log_refusals(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    // The path only: a query string is the client's and not needed to tell a refusal.
    let path = req.uri().path().to_owned();
    let peer = req.extensions().get::<Peer>().map(|p| p.0.clone());
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let submit = method == axum::http::Method::POST && path == "/v1/jobs";
    let refused = || {
        resp.extensions()
            .get::<Refused>()
            .map_or(("error", String::new()), |r| (r.code, r.message.clone()))
    };
    if status == 401 || status == 403 || (submit && (400..500).contains(&status)) {
        let (code, reason) = refused();
        tracing::warn!(
            status,
            code,
            method = %method,
            path = %path,
            peer = peer.as_deref().unwrap_or("unknown"),
            reason = %reason,
            "request refused"
        );
    } else if status >= 500 && path != "/readyz" {
        if let Some(quiet) = FAILURES.seen(super::disk_room::LOG_EVERY) {
            let (code, reason) = refused();
            tracing::error!(
                status,
                code,
                method = %method,
                path = %path,
                peer = peer.as_deref().unwrap_or("unknown"),
                reason = %reason,
                also_since_last_log = quiet,
                "request failed: {reason}"
            );
        }
    }
    resp
}

/// The bounded-rate log of the service's failed answers.
static FAILURES: super::disk_room::LogGate = super::disk_room::LogGate::new();
