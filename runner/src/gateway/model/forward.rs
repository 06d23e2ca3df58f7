//! The gateway's one handler: route check, budget check, body limit, request rewrite (usage
//! asked for on streamed Chat), credential swap, forwarding, and the streamed response.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::config::ModelGatewayConfig;
use super::headers::{agent_response_headers, is_upgrade, upstream_request_headers};
use super::replies::{budget_spent, gateway_error};
use super::tee::{Recorder, tee};
use crate::gateway::sink::{Api, GatewaySink, ModelRequest};
use crate::usage::{UNKNOWN_MODEL, UsageTotals};
use crate::util::text::bounded;

/// State shared by the gateway's requests.
#[derive(Debug)]
pub struct Shared {
    pub(crate) cfg: Arc<ModelGatewayConfig>,
    pub(crate) sink: Arc<dyn GatewaySink>,
    pub(crate) stop: CancellationToken,
}

/// The request body as forwarded, and the model it names.
fn prepare_body(api: Api, body: Bytes) -> (Bytes, Option<String>) {
    let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
        return (body, None);
    };
    let model = v.get("model").and_then(Value::as_str).map(str::to_owned);
    let streams = v.get("stream").and_then(Value::as_bool) == Some(true);
    if api == Api::Chat && streams {
        if let Some(obj) = v.as_object_mut() {
            let opts = obj.entry("stream_options").or_insert_with(|| json!({}));
            if !opts.is_object() {
                *opts = json!({});
            }
            if let Some(o) = opts.as_object_mut() {
                o.insert("include_usage".to_owned(), Value::Bool(true));
            }
            if let Ok(rewritten) = serde_json::to_vec(&v) {
                return (Bytes::from(rewritten), model);
            }
        }
    }
    (body, model)
}

/// Handles one agent request.
pub async fn handle(State(st): State<Arc<Shared>>, req: Request) -> Response {
    let started = Instant::now();
    let cfg = &st.cfg;
    let family = cfg.upstream.api;
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let api = Api::from_path(&path);
    let local = |status: StatusCode, resp: Response, model: Option<String>, error: String| {
        st.sink.model_request(&ModelRequest {
            api,
            model: model.unwrap_or_else(|| UNKNOWN_MODEL.to_owned()),
            status: status.as_u16(),
            usage: UsageTotals::default(),
            duration: started.elapsed(),
            streamed: false,
            error: Some(error),
        });
        resp
    };
    let refuse = |status: StatusCode, code: &str, message: String| {
        let resp = gateway_error(family, status, code, &message);
        local(status, resp, None, message)
    };

    if is_upgrade(&parts.headers) {
        return refuse(
            StatusCode::UPGRADE_REQUIRED,
            "ralph_upgrade_unsupported",
            "ralph gateway: protocol upgrades (websocket) are not supported; use HTTP".to_owned(),
        );
    }
    if !cfg.routes(&path) {
        return refuse(
            StatusCode::NOT_FOUND,
            "ralph_not_found",
            format!(
                "ralph gateway: path `{}` is not under the upstream path `{}`",
                bounded(&path, 512),
                cfg.prefix
            ),
        );
    }
    if !cfg.model_endpoint(&path) {
        return refuse(
            StatusCode::FORBIDDEN,
            "ralph_endpoint_not_allowed",
            format!(
                "ralph gateway: `{}` is not a model endpoint; only responses, chat/completions, completions, embeddings, messages and models are forwarded",
                bounded(&path, 512)
            ),
        );
    }
    if let Some((used, max)) = cfg.budget.spent() {
        if let Some((u, m)) = cfg.budget.take_crossing() {
            st.sink.budget_crossed(u, m);
        }
        return local(
            StatusCode::BAD_REQUEST,
            budget_spent(family, used, max),
            None,
            super::replies::budget_message(used, max),
        );
    }
    let limit = cfg.limits.max_request_body;
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "ralph_request_too_large",
            format!("ralph gateway: the request body is over {limit} bytes"),
        )
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large();
    }
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "ralph_bad_request",
                format!("ralph gateway: failed to read the request body: {e}"),
            );
        }
    };
    let (body, model_hint) = prepare_body(api, bytes);
    let headers = match upstream_request_headers(&parts.headers, family, &cfg.upstream.key) {
        Ok(h) => h,
        Err(e) => return refuse(StatusCode::BAD_GATEWAY, "ralph_upstream_key", e),
    };
    let target = parts
        .uri
        .path_and_query()
        .map_or(path.as_str(), |pq| pq.as_str());
    let url = format!("{}{target}", cfg.origin);
    let request = cfg
        .client
        .request(parts.method.clone(), url)
        .headers(headers)
        .body(body);
    let sent = tokio::select! {
        () = st.stop.cancelled() => None,
        r = tokio::time::timeout(cfg.limits.response_header_timeout, request.send()) => Some(r),
    };
    let Some(sent) = sent else {
        let message = "ralph gateway: the gateway stopped before the upstream answered".to_owned();
        let resp = gateway_error(
            family,
            StatusCode::SERVICE_UNAVAILABLE,
            "ralph_gateway_stopped",
            &message,
        );
        return local(StatusCode::SERVICE_UNAVAILABLE, resp, model_hint, message);
    };
    let upstream = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let message = format!(
                "ralph gateway: failed to reach the upstream {}: {}",
                cfg.host,
                error_chain(&e)
            );
            let resp = gateway_error(
                family,
                StatusCode::BAD_GATEWAY,
                "ralph_upstream_unreachable",
                &message,
            );
            return local(StatusCode::BAD_GATEWAY, resp, model_hint, message);
        }
        Err(_) => {
            let message = format!(
                "ralph gateway: the upstream {} sent no response headers within {}s",
                cfg.host,
                cfg.limits.response_header_timeout.as_secs()
            );
            let resp = gateway_error(
                family,
                StatusCode::GATEWAY_TIMEOUT,
                "ralph_upstream_timeout",
                &message,
            );
            return local(StatusCode::GATEWAY_TIMEOUT, resp, model_hint, message);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_chat_asks_for_usage_and_other_bodies_pass_untouched() {
        let (b, m) = prepare_body(
            Api::Chat,
            Bytes::from_static(br#"{"model":"m1","stream":true,"stream_options":{"x":1}}"#),
        );
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["stream_options"]["x"], 1);
        assert_eq!(m.as_deref(), Some("m1"));
        let raw = Bytes::from_static(br#"{"model":"m2", "stream":true}"#);
        let (b, _) = prepare_body(Api::Responses, raw.clone());
        assert_eq!(b, raw);
        let (b, m) = prepare_body(Api::Chat, Bytes::from_static(b"not json"));
        assert_eq!((b.as_ref(), m), (&b"not json"[..], None));
    }
}
