//! The egress proxy (SPEC §9): the round's only way to the network besides the model gateway.
//! An HTTP/1.1 forward proxy on a listener the engine hands over, serving `CONNECT host:port`
//! tunnels and absolute-form HTTP requests to the `--allow-host` entries only.
//!
//! - [`allow`]: [`AllowHost`] entries (port default: 80 and 443; `=private`).
//! - [`resolve`]: the resolver. [`host`]: this host's own addresses (`getifaddrs`).
//! - [`addresses`]: what an address is, and what an entry may lead to.
//! - [`policy`]: the decision. [`proxy`]: the handling of one request.
//!
//! The decision is made on the name the client asked for (the CONNECT authority or the
//! absolute-form target, whose `Host` header must agree). An IP-literal entry is explicit: the
//! proxy connects to that address, whatever it is (a mirror on `127.0.0.1:3141`). A name is
//! resolved by the proxy itself, which connects only to the addresses the entry permits, so a
//! DNS answer cannot turn an allowed name into a way to the runner host or the network behind
//! it: a name leads to public addresses only; with `=private` to private ones too (10/8,
//! 172.16/12, 192.168/16, 100.64/10, 198.18/15, fc00::/7, fec0::/10, and IPv6 forms embedding
//! them); never, whatever the entry, to an address of this host (every interface, read at each
//! decision), loopback, link-local, cloud metadata, unspecified, reserved, multicast or
//! broadcast addresses (`localhost` alone leads to loopback). Refusals are 403 with a
//! plain-text body naming `HOST:PORT`, the address and its class, and the entry that would
//! allow it; every decision, allowed or not, goes to the sink.

pub mod addresses;
pub mod allow;
pub mod host;
pub mod policy;
pub mod proxy;
pub mod resolve;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use allow::AllowHost;
pub use host::{HostAddresses, InterfaceAddresses};
pub use resolve::{Resolve, SystemResolver};

use ralph_sandbox::spec::GATEWAY_HOST;

use super::GatewayError;
use super::sink::GatewaySink;
use proxy::{ProxyState, handle};

/// The egress proxy's configuration.
#[derive(Debug)]
pub struct EgressConfig {
    /// The allowed destinations.
    pub allow: Vec<AllowHost>,
    /// How names are resolved.
    pub resolver: Arc<dyn Resolve>,
    /// This host's own addresses, which no name may lead to.
    pub host: Arc<dyn HostAddresses>,
    /// TCP connect timeout to a destination.
    pub connect_timeout: Duration,
}

impl EgressConfig {
    /// The allowed destinations, the system resolver, the interfaces' addresses and a 10 s
    /// connect timeout.
    pub fn new(allow: Vec<AllowHost>) -> Self {
        Self {
            allow,
            resolver: Arc::new(SystemResolver),
            host: Arc::new(InterfaceAddresses),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// The round's own loopback names that `NO_PROXY` lists unless an `--allow-host` entry names
/// them: nothing of the runner host is reachable there anyway (the round's loopback is its own),
/// and a server the round starts itself (a test suite's) stays reachable for clients that honour
/// the proxy variables.
const ROUND_LOOPBACK: [&str; 3] = ["127.0.0.1", "localhost", "::1"];

/// The environment that sends a round's HTTP clients through the proxy on the gateway's address
/// ([`GATEWAY_HOST`]`:port`). `NO_PROXY` covers the gateway's address (the model gateway
/// there must not go through the proxy) and, of the round's own loopback names
/// ([`ROUND_LOOPBACK`]), those no entry of `allow` names: an allowed loopback host (a package
/// mirror on the runner host's `127.0.0.1:3141`) goes through the proxy, for every client.
/// Clients match `NO_PROXY` by host and ignore its ports (Python's requests, reqwest, npm,
/// curl), so the gateway has an address of its own rather than a port of `127.0.0.1`.
pub fn proxy_env(port: u16, allow: &[AllowHost]) -> Vec<(String, String)> {
    let url = format!("http://{GATEWAY_HOST}:{port}");
    let mut no = vec![GATEWAY_HOST.to_string()];
    no.extend(
        ROUND_LOOPBACK
            .iter()
            .filter(|name| !allow.iter().any(|a| a.host == **name))
            .map(|name| (*name).to_owned()),
    );
    let no = no.join(",");
    [
        ("HTTP_PROXY", url.clone()),
        ("HTTPS_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("https_proxy", url),
        ("NO_PROXY", no.clone()),
        ("no_proxy", no),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Serves the egress proxy on `listener` until `stop` is cancelled; open connections and
/// tunnels are closed then.
pub async fn serve_egress(
    listener: TcpListener,
    cfg: Arc<EgressConfig>,
    sink: Arc<dyn GatewaySink>,
    stop: CancellationToken,
) -> Result<(), GatewayError> {
    let addr = listener
        .local_addr()
        .map_or_else(|_| "unknown".to_owned(), |a| a.to_string());
    let state = Arc::new(ProxyState {
        cfg,
        sink,
        stop: stop.clone(),
    });
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    // As the model gateway: relayed bytes go out as they come, not after Nagle.
                    Ok((s, _)) => {
                        let _ = s.set_nodelay(true);
                        s
                    }
                    Err(e) if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted
                            | std::io::ErrorKind::ConnectionReset
                            | std::io::ErrorKind::Interrupted
                    ) => continue,
                    Err(source) => {
                        conns.abort_all();
                        return Err(GatewayError::Serve { what: "egress proxy", addr, source });
                    }
                };
                let state = Arc::clone(&state);
                conns.spawn(async move {
                    let service = service_fn(move |req| handle(Arc::clone(&state), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .preserve_header_case(true)
                        .title_case_headers(true)
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        }
    }
    conns.abort_all();
    Ok(())
}
