//! The dashboard (SPEC §13): read-only pages under `/ui`, served by `ralph serve` from the
//! binary (templates compiled in with askama, which escapes every value it writes; the style
//! sheet and the one script embedded), behind the API's tokens.
//!
//! ```text
//! GET  /ui/login  POST /ui/login  POST /ui/logout    a token in, a session cookie out
//! GET  /ui/jobs?state=&outcome=&label=K=V&name=&submitted_by=&before=   the queue, newest first
//! GET  /ui/jobs/{id}                  a job: rounds, reports, verify runs, tokens, patch
//! GET  /ui/jobs/{id}/patch            the patch, as an attachment
//! GET  /ui/jobs/{id}/rounds/{n}/logs?attempt=&stream=   a captured log, as an attachment
//! GET  /ui/jobs/{id}/rounds/{n}/live?attempt=&stream=   a running round's log (server-sent events)
//! POST /ui/jobs/{id}/cancel  /resume  (the `cancel` scope and the session's CSRF value)
//! GET  /ui/batches/{id}  GET /ui/health  GET /ui/static/{ralph.css,live.js,favicon.svg}
//! ```
//!
//! - [`session`]: the browser sessions; [`signin`]: who is asking (a session cookie or
//!   `Authorization: Bearer`), the login and logout.
//! - [`pages`]: the queue, a job, a batch, the host's health; [`rounds`]: a job's rounds from
//!   its journal; [`diff`]: a patch's lines, classified for highlighting.
//! - [`live`]: a running round's log as server-sent events; [`files`]: downloads;
//!   [`actions`]: cancel and resume.
//! - [`text`]: agent text made safe to show (no control character reaches the page).
//!
//! Agent text is hostile: askama escapes it into HTML; control characters (terminal escapes)
//! are shown escaped (`\x1b`); nothing an agent wrote becomes a link or an attribute that runs;
//! every answer carries a `Content-Security-Policy` that allows no inline script or style.

pub mod actions;
pub mod diff;
pub mod error;
pub mod files;
pub mod live;
pub mod pages;
pub mod rounds;
pub mod session;
pub mod signin;
pub mod text;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::Service;

/// The policy every `/ui` answer carries: only this origin's script, style and connections; no
/// inline script or style, no frames, no plugins, forms only to this origin.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("static/ralph.css");
const LIVE_JS: &str = include_str!("static/live.js");
const FAVICON: &str = include_str!("static/favicon.svg");

/// The dashboard's routes (merged into the API's router, outside `/v1`).
pub fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/jobs") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/jobs") }))
        .route("/ui/login", get(signin::form).post(signin::login))
        .route("/ui/logout", post(signin::logout))
        .route("/ui/jobs", get(pages::jobs))
        .route("/ui/jobs/{id}", get(pages::job))
        .route("/ui/jobs/{id}/patch", get(files::patch))
        .route("/ui/jobs/{id}/rounds/{round}/logs", get(files::log))
        .route("/ui/jobs/{id}/rounds/{round}/live", get(live::stream))
        .route("/ui/jobs/{id}/cancel", post(actions::cancel))
        .route("/ui/jobs/{id}/resume", post(actions::resume))
        .route("/ui/batches/{id}", get(pages::batch))
        .route("/ui/health", get(pages::health))
        .route(
            "/ui/static/ralph.css",
            get(|| async { asset(CSS, "text/css") }),
        )
        .route(
            "/ui/static/live.js",
            get(|| async { asset(LIVE_JS, "text/javascript") }),
        )
        .route(
            "/ui/static/favicon.svg",
            get(|| async { asset(FAVICON, "image/svg+xml") }),
        )
        .layer(middleware::from_fn(headers))
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, format!("{kind}; charset=utf-8")),
            (header::CACHE_CONTROL, "max-age=300".to_owned()),
        ],
        body,
    )
        .into_response()
}

/// The headers of every `/ui` answer: the policy, no sniffing, no framing, a referrer only to
/// this origin, no caching of pages (they show private data; the assets say otherwise), and the
/// time the server took until the answer's head (`Server-Timing: app;dur=MS`, shown by a
/// browser's developer tools and read by `bench/ui_queue.sh`). `same-origin`, not `no-referrer`:
/// under `no-referrer` a browser sends `Origin: null` with the pages' own form posts, which the
/// origin check (rightly) refuses.
async fn headers(req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let mut resp = next.run(req).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("app;dur={ms:.2}")) {
        h.insert("server-timing", v);
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}
