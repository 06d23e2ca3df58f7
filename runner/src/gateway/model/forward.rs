//! The gateway's one handler: admission (the canonical target, the allow-table, the query, the
//! budget, the free rate, the body's bytes, its judgement), then the credential swap, the
//! upstream request built from the judged parts, and the streamed response.
//!
//! ```text
//! request ─▶ upgrade? 426 ─▶ target canonical? 400/404 ─▶ route? 403/405/400 ─▶ budget? 400
//!   ─▶ free rate? 429 ─▶ bytes (gateway, process)? 503 ─▶ body read? 413/408 ─▶ judged? 400
//!   ─▶ URL from the canonical parts ─▶ upstream ─▶ tee (usage read, counted) ─▶ agent
//! ```

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::body::{Judged, judge};
use super::bounds::FreeRate;
use super::config::ModelGatewayConfig;
use super::headers::{agent_response_headers, is_upgrade, set_json_body, upstream_request_headers};
use super::replies::{budget_spent, gateway_error};
use super::routes::{BodyRule, Cost, Route, RouteError, lookup};
use super::target::{Target, TargetError, parse};
use super::tee::{Recorder, tee};
use crate::gateway::sink::{Api, GatewaySink, ModelRequest, Refusal};
use crate::usage::{UNKNOWN_MODEL, UsageTotals};
use crate::util::text::bounded;

/// State shared by the gateway's requests.
#[derive(Debug)]
pub struct Shared {
    pub(crate) cfg: Arc<ModelGatewayConfig>,
    pub(crate) sink: Arc<dyn GatewaySink>,
    pub(crate) stop: CancellationToken,
    pub(crate) free: FreeRate,
}

/// A request the gateway answers itself.
struct Refused {
    api: Api,
    reason: Refusal,
    status: StatusCode,
    code: &'static str,
    message: String,
    /// A ready answer (the budget's), else one is made from `code` and `message`.
    response: Option<Response>,
}

fn refused(
    api: Api,
    reason: Refusal,
    status: StatusCode,
    code: &'static str,
    message: String,
) -> Refused {
    Refused {
        api,
        reason,
        status,
        code,
        message,
        response: None,
    }
}

/// A request admitted: what will be forwarded, and the bytes it holds until it is sent.
struct Admitted {
    route: &'static Route,
    target: Target,
    judged: Judged,
    held: Vec<OwnedSemaphorePermit>,
}

impl Shared {
    /// Reports a refusal and makes its answer.
    fn refuse(&self, r: Refused, started: Instant) -> Response {
        self.sink.model_request(&ModelRequest {
            api: r.api,
            model: UNKNOWN_MODEL.to_owned(),
            status: r.status.as_u16(),
            usage: UsageTotals::default(),
            duration: started.elapsed(),
            streamed: false,
            error: Some(r.message.clone()),
            refusal: Some(r.reason),
        });
        let mut resp = r
            .response
            .unwrap_or_else(|| gateway_error(self.cfg.upstream.api, r.status, r.code, &r.message));
        if matches!(
            r.reason,
            Refusal::Busy | Refusal::Rate | Refusal::Connections
        ) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }

    /// Reports a request that was let through but got no upstream answer.
    fn failed(
        &self,
        api: Api,
        model: Option<String>,
        status: StatusCode,
        code: &str,
        message: String,
        started: Instant,
    ) -> Response {
        self.sink.model_request(&ModelRequest {
            api,
            model: model.unwrap_or_else(|| UNKNOWN_MODEL.to_owned()),
            status: status.as_u16(),
            usage: UsageTotals::default(),
            duration: started.elapsed(),
            streamed: false,
            error: Some(message.clone()),
            refusal: None,
        });
        gateway_error(self.cfg.upstream.api, status, code, &message)
    }
}

/// Handles one agent request.
pub async fn handle(State(st): State<Arc<Shared>>, req: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    match admit(&st, &parts, body).await {
        Ok(a) => forward(&st, &parts, a, started).await,
        Err(r) => st.refuse(r, started),
    }
}

/// Everything the gateway decides before anything reaches the upstream.
async fn admit(st: &Shared, parts: &Parts, body: Body) -> Result<Admitted, Refused> {
    let cfg = &st.cfg;
    let shown = || bounded(&parts.uri.to_string().escape_debug().to_string(), 256);
    if is_upgrade(&parts.headers) {
        return Err(refused(
            Api::Other,
            Refusal::Upgrade,
            StatusCode::UPGRADE_REQUIRED,
            "ralph_upgrade_unsupported",
            "ralph gateway: protocol upgrades (websocket) are not supported; use HTTP".to_owned(),
        ));
    }
    let target = parse(&parts.uri, &cfg.prefix).map_err(|e| match e {
        TargetError::NotCanonical { .. } => refused(
            Api::Other,
            Refusal::NotCanonical,
            StatusCode::BAD_REQUEST,
            "ralph_target_not_canonical",
            format!("ralph gateway: `{}`: {e}", shown()),
        ),
        TargetError::NotUnderPrefix { .. } => refused(
            Api::Other,
            Refusal::NotFound,
            StatusCode::NOT_FOUND,
            "ralph_not_found",
            format!(
                "ralph gateway: path `{}` is not under the upstream path `{}`",
                shown(),
                cfg.prefix
            ),
        ),
    })?;
    let route = lookup(
        cfg.upstream.api,
        &parts.method,
        &target.segments,
        &target.query,
    )
    .map_err(|e| match e {
        RouteError::NotAllowed => refused(
            Api::Other,
            Refusal::Endpoint,
            StatusCode::FORBIDDEN,
            "ralph_endpoint_not_allowed",
            format!(
                "ralph gateway: `{} {}` is not a model endpoint the gateway forwards (see `ralph` docs: the model gateway's allow-table)",
                parts.method,
                shown()
            ),
        ),
        RouteError::CaseVariant => refused(
            Api::Other,
            Refusal::NotCanonical,
            StatusCode::BAD_REQUEST,
            "ralph_target_not_canonical",
            format!(
                "ralph gateway: `{}`: the request target is not in canonical form: a route's path in another letter case",
                shown()
            ),
        ),
        RouteError::Method { allowed } => refused(
            Api::Other,
            Refusal::Method,
            StatusCode::METHOD_NOT_ALLOWED,
            "ralph_method_not_allowed",
            format!(
                "ralph gateway: `{}` takes {} only, not {}",
                shown(),
                allowed.join(", "),
                parts.method
            ),
        ),
        RouteError::Query { name } => refused(
            Api::Other,
            Refusal::Query,
            StatusCode::BAD_REQUEST,
            "ralph_query_not_allowed",
            format!(
                "ralph gateway: `{}`: query parameter `{name}` (or its value) is not taken on this route",
                shown()
            ),
        ),
    })?;
    let api = route.api;
    if let Some((used, max)) = cfg.budget.spent() {
        if let Some((u, m)) = cfg.budget.take_crossing() {
            st.sink.budget_crossed(u, m);
        }
        let mut r = refused(
            api,
            Refusal::Budget,
            StatusCode::BAD_REQUEST,
            super::replies::BUDGET_CODE,
            super::replies::budget_message(used, max),
        );
        r.response = Some(budget_spent(cfg.upstream.api, used, max));
        return Err(r);
    }
    if route.cost == Cost::Free && !st.free.take() {
        return Err(refused(
            api,
            Refusal::Rate,
            StatusCode::TOO_MANY_REQUESTS,
            "ralph_rate_limited",
            format!(
                "ralph gateway: too many requests to routes that cost no tokens (at most {} in a burst, then {} a second)",
                cfg.limits.free_burst, cfg.limits.free_per_second
            ),
        ));
    }
    let (bytes, held) = read_body(st, parts, route, body).await?;
    let judged = judge(route.body, &bytes).map_err(|e| {
        refused(
            api,
            Refusal::Body,
            StatusCode::BAD_REQUEST,
            "ralph_bad_request_body",
            format!("ralph gateway: {e}"),
        )
    })?;
    Ok(Admitted {
        route,
        target,
        judged,
        held,
    })
}

/// Reads the body into bytes taken from the gateway's (and the process's) pool first.
async fn read_body(
    st: &Shared,
    parts: &Parts,
    route: &Route,
    body: Body,
) -> Result<(bytes::Bytes, Vec<OwnedSemaphorePermit>), Refused> {
    let cfg = &st.cfg;
    let api = route.api;
    let limit = cfg.limits.max_request_body;
    let declared = match parts.headers.get(header::CONTENT_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    refused(
                        api,
                        Refusal::Body,
                        StatusCode::BAD_REQUEST,
                        "ralph_bad_request_body",
                        "ralph gateway: the content-length is not a number".to_owned(),
                    )
                })?,
        ),
    };
    let chunked = parts.headers.contains_key(header::TRANSFER_ENCODING);
    if route.body == BodyRule::Empty {
        if declared.unwrap_or(0) > 0 || chunked {
            return Err(refused(
                api,
                Refusal::Body,
                StatusCode::BAD_REQUEST,
                "ralph_bad_request_body",
                format!("ralph gateway: `{} …` takes no body", parts.method),
            ));
        }
        return Ok((bytes::Bytes::new(), Vec::new()));
    }
    let too_large = || {
        refused(
            api,
            Refusal::TooLarge,
            StatusCode::PAYLOAD_TOO_LARGE,
            "ralph_request_too_large",
            format!("ralph gateway: the request body is over {limit} bytes"),
        )
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    // The body is held as read and as rebuilt: twice its length (the limit's when unknown).
    let want = declared
        .map_or(limit, |n| n as usize)
        .saturating_mul(2)
        .max(1);
    let busy = |which: &str| {
        refused(
            api,
            Refusal::Busy,
            StatusCode::SERVICE_UNAVAILABLE,
            "ralph_gateway_busy",
            format!("ralph gateway: {which} holds as many request bytes as it may; retry shortly"),
        )
    };
    let wait = cfg.limits.body_wait;
    let mut held = Vec::new();
    held.push(
        cfg.pool
            .take(want, wait)
            .await
            .ok_or_else(|| busy("this round's gateway"))?,
    );
    if let Some(shared) = &cfg.shared_pool {
        held.push(
            shared
                .take(want, wait)
                .await
                .ok_or_else(|| busy("the runner"))?,
        );
    }
    let read = tokio::time::timeout(cfg.limits.body_timeout, Limited::new(body, limit).collect());
    let bytes = match read.await {
        Err(_) => {
            return Err(refused(
                api,
                Refusal::BodyTimeout,
                StatusCode::REQUEST_TIMEOUT,
                "ralph_request_timeout",
                format!(
                    "ralph gateway: the request body did not arrive within {}s",
                    cfg.limits.body_timeout.as_secs()
                ),
            ));
        }
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => return Err(too_large()),
        Ok(Err(e)) => {
            return Err(refused(
                api,
                Refusal::Body,
                StatusCode::BAD_REQUEST,
                "ralph_bad_request_body",
                format!("ralph gateway: failed to read the request body: {e}"),
            ));
        }
    };
    Ok((bytes, held))
}

/// Sends the admitted request upstream and streams the answer back.
async fn forward(st: &Shared, parts: &Parts, a: Admitted, started: Instant) -> Response {
    let cfg = &st.cfg;
    let family = cfg.upstream.api;
    let api = a.route.api;
    let model_hint = a.judged.model.clone();
    let headers = match upstream_request_headers(&parts.headers, family, &cfg.upstream.key) {
        Ok(mut h) => {
            if matches!(a.route.body, BodyRule::Json { .. }) {
                set_json_body(&mut h);
            }
            h
        }
        Err(e) => {
            return st.failed(
                api,
                model_hint,
                StatusCode::BAD_GATEWAY,
                "ralph_upstream_key",
                e,
                started,
            );
        }
    };
    let query = a.target.query_string();
    let Some(url) = cfg.upstream_url(&a.target.path, query.as_deref()) else {
        return st.refuse(
            refused(
                api,
                Refusal::NotCanonical,
                StatusCode::BAD_REQUEST,
                "ralph_target_not_canonical",
                "ralph gateway: the request target would not reach the upstream as judged"
                    .to_owned(),
            ),
            started,
        );
    };
    let request = cfg
        .client
        .request(parts.method.clone(), url)
        .headers(headers)
        .body(a.judged.body);
    let sent = tokio::select! {
        () = st.stop.cancelled() => None,
        r = tokio::time::timeout(cfg.limits.response_header_timeout, request.send()) => Some(r),
    };
    // The body is out: its bytes go back to the pools.
    drop(a.held);
    let Some(sent) = sent else {
        return st.failed(
            api,
            model_hint,
            StatusCode::SERVICE_UNAVAILABLE,
            "ralph_gateway_stopped",
            "ralph gateway: the gateway stopped before the upstream answered".to_owned(),
            started,
        );
    };
    let upstream = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let message = format!(
                "ralph gateway: failed to reach the upstream {}: {}",
                cfg.host,
                error_chain(&e)
            );
            return st.failed(
                api,
                model_hint,
                StatusCode::BAD_GATEWAY,
                "ralph_upstream_unreachable",
                message,
                started,
            );
        }
        Err(_) => {
            let message = format!(
                "ralph gateway: the upstream {} sent no response headers within {}s",
                cfg.host,
                cfg.limits.response_header_timeout.as_secs()
            );
            return st.failed(
                api,
                model_hint,
                StatusCode::GATEWAY_TIMEOUT,
                "ralph_upstream_timeout",
                message,
                started,
            );
        }
    };
    let status = upstream.status();
    let resp_headers = agent_response_headers(upstream.headers());
    let streamed = resp_headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
    let expected = if parts.method == axum::http::Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Some(0)
    } else {
        upstream.content_length()
    };
    let recorder = Recorder::new(
        api,
        model_hint,
        status.as_u16(),
        started,
        streamed,
        Arc::clone(&st.sink),
        Arc::clone(&cfg.budget),
    )
    .expect_len(expected);
    let body: Body = tee(
        upstream.bytes_stream(),
        recorder,
        cfg.limits.idle_timeout,
        st.stop.clone(),
        a.route.cost == Cost::Metered,
    );
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = resp_headers;
    resp
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    bounded(&out, 1024)
}
