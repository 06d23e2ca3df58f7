//! The egress proxy's request handling: `CONNECT host:port` tunnels and absolute-form HTTP
//! requests (`GET http://host:port/path`), each decided by [`super::policy::decide`] and
//! reported to the sink; everything else is refused.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::EgressConfig;
use super::allow::normalize_host;
use super::policy::{Refusal, decide, host_port};
use crate::gateway::sink::{EgressDecision, GatewaySink};

/// The proxy's response body.
pub type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// What a proxy connection shares.
#[derive(Debug)]
pub struct ProxyState {
    pub(crate) cfg: Arc<EgressConfig>,
    pub(crate) sink: Arc<dyn GatewaySink>,
    pub(crate) stop: tokio_util::sync::CancellationToken,
}

const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .copied()
        .chain(listed.iter().map(String::as_str))
    {
        headers.remove(name);
    }
}

impl ProxyState {
    fn report(&self, host: &str, port: u16, method: &Method, allowed: bool, reason: String) {
        self.sink.egress(&EgressDecision {
            host: normalize_host(host),
            port,
            method: method.as_str().to_owned(),
            allowed,
            reason,
        });
    }

    /// Decides and reports; the refusal response when refused.
    async fn admit(
        &self,
        host: &str,
        port: u16,
        method: &Method,
    ) -> Result<Vec<SocketAddr>, Response<ProxyBody>> {
        match decide(&self.cfg, host, port).await {
            Ok(a) => {
                self.report(host, port, method, true, a.reason);
                Ok(a.addrs)
            }
            Err(Refusal::Denied { body, reason }) => {
                self.report(host, port, method, false, reason);
                Err(text(StatusCode::FORBIDDEN, body))
            }
            Err(Refusal::Failed { body, reason }) => {
                self.report(host, port, method, false, reason);
                Err(text(StatusCode::BAD_GATEWAY, body))
            }
        }
    }

    async fn connect(
        &self,
        host: &str,
        port: u16,
        addrs: &[SocketAddr],
    ) -> Result<TcpStream, Response<ProxyBody>> {
        let mut last = String::from("no address");
        for addr in addrs {
            match tokio::time::timeout(self.cfg.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    // A tunnel relays small writes as they come (TLS records, SSE events):
                    // Nagle would hold each behind the peer's delayed ACK.
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: timed out"),
            }
        }
        Err(text(
            StatusCode::BAD_GATEWAY,
            format!(
                "ralph egress proxy: failed to connect to {} ({last})\n",
                host_port(&normalize_host(host), port)
            ),
        ))
    }
}

/// Handles one request on a proxy connection.
pub async fn handle(
    st: Arc<ProxyState>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    Ok(if req.method() == Method::CONNECT {
        connect(st, req).await
    } else {
        forward(st, req).await
    })
}

async fn connect(st: Arc<ProxyState>, req: Request<Incoming>) -> Response<ProxyBody> {
    let Some((host, port)) = req
        .uri()
        .authority()
        .and_then(|a| Some((a.host().to_owned(), a.port_u16()?)))
    else {
        return text(
            StatusCode::BAD_REQUEST,
            "ralph egress proxy: CONNECT needs HOST:PORT\n".to_owned(),
        );
    };
    let addrs = match st.admit(&host, port, req.method()).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    let mut target = match st.connect(&host, port, &addrs).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let stop = st.stop.clone();
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let mut client = TokioIo::new(upgraded);
        tokio::select! {
            () = stop.cancelled() => {}
            _ = tokio::io::copy_bidirectional(&mut client, &mut target) => {}
        }
    });
    text(StatusCode::OK, String::new())
}

async fn forward(st: Arc<ProxyState>, req: Request<Incoming>) -> Response<ProxyBody> {
    let uri = req.uri().clone();
    if uri.scheme_str() != Some("http") {
        let msg = if uri.scheme_str() == Some("https") {
            "ralph egress proxy: use CONNECT for https:// targets\n"
        } else {
            "ralph egress proxy: this is a forward proxy; send absolute-form requests \
             (GET http://host/path) or CONNECT host:port\n"
        };
        return text(StatusCode::BAD_REQUEST, msg.to_owned());
    }
    let Some(authority) = uri.authority().cloned() else {
        return text(
            StatusCode::BAD_REQUEST,
            "ralph egress proxy: the request target names no host\n".to_owned(),
        );
    };
    let host = normalize_host(authority.host());
    let port = authority.port_u16().unwrap_or(80);
    if let Some(h) = req.headers().get(header::HOST) {
        let agrees = h
            .to_str()
            .ok()
            .and_then(|v| v.parse::<hyper::http::uri::Authority>().ok())
            .is_some_and(|a| {
                normalize_host(a.host()) == host && a.port_u16().unwrap_or(80) == port
            });
        if !agrees {
            let shown = String::from_utf8_lossy(h.as_bytes()).into_owned();
            st.report(
                &host,
                port,
                req.method(),
                false,
                format!("Host header `{shown}` does not match the request target"),
            );
            return text(
                StatusCode::FORBIDDEN,
                format!(
                    "ralph egress proxy: the Host header `{shown}` does not match the request \
                     target {}\n",
                    host_port(&host, port)
                ),
            );
        }
    }
    let addrs = match st.admit(&host, port, req.method()).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    let stream = match st.connect(&host, port, &addrs).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let bad_gateway = |e: hyper::Error| {
        text(
            StatusCode::BAD_GATEWAY,
            format!(
                "ralph egress proxy: failed to talk to {}: {e}\n",
                host_port(&host, port)
            ),
        )
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(x) => x,
        Err(e) => return bad_gateway(e),
    };
    let stop = st.stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            _ = conn => {}
        }
    });
    let (mut parts, body) = req.into_parts();
    let origin_form = uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    parts.uri = origin_form;
    strip_hop_by_hop(&mut parts.headers);
    if let Ok(v) = HeaderValue::from_str(authority.as_str()) {
        parts.headers.insert(header::HOST, v);
    }
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => bad_gateway(e),
    }
}
