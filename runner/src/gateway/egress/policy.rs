//! The egress decision: is `host:port` allowed, and to which addresses may the proxy connect.
//! The decision is made on the name the client asked for; the addresses come from the proxy's
//! own resolution, filtered by the DNS-rebinding guard ([`super::resolve::is_internal`]) unless
//! the entry names an IP literal or `localhost`.

use std::net::{IpAddr, SocketAddr};

use super::EgressConfig;
use super::allow::normalize_host;
use super::resolve::is_internal;

/// Why a destination was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Policy: answered 403 with this body.
    Denied {
        /// The plain-text body.
        body: String,
        /// The short reason for the sink.
        reason: String,
    },
    /// The name could not be resolved: answered 502.
    Unresolved(String),
}

/// An allowed destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// Addresses to try, in order.
    pub addrs: Vec<SocketAddr>,
    /// The entry that allowed it, for the sink.
    pub reason: String,
}

/// Formats `host:port` with IPv6 in brackets.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The 403 for a destination outside the allowed hosts.
pub fn not_allowed(host: &str, port: u16) -> Refusal {
    Refusal::Denied {
        body: format!(
            "ralph egress proxy: {} is not in the job's allowed hosts (--allow-host)\n",
            host_port(host, port)
        ),
        reason: "not in the allowed hosts".to_owned(),
    }
}

/// Decides on `host:port` (as the client named it) and resolves it.
pub async fn decide(cfg: &EgressConfig, host: &str, port: u16) -> Result<Allowed, Refusal> {
    let host = normalize_host(host);
    let Some(entry) = cfg.allow.iter().find(|a| a.matches(&host, port)) else {
        return Err(not_allowed(&host, port));
    };
    let reason = format!("allowed by {entry}");
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Allowed {
            addrs: vec![SocketAddr::new(ip, port)],
            reason,
        });
    }
    let resolved = cfg.resolver.resolve(&host, port).await.map_err(|e| {
        Refusal::Unresolved(format!(
            "ralph egress proxy: failed to resolve {}: {e}\n",
            host_port(&host, port)
        ))
    })?;
    let addrs: Vec<SocketAddr> = if entry.names_local_on_purpose() {
        resolved
    } else {
        resolved
            .into_iter()
            .filter(|a| !is_internal(a.ip()))
            .collect()
    };
    if addrs.is_empty() {
        return Err(Refusal::Denied {
            body: format!(
                "ralph egress proxy: {} resolves only to loopback or link-local addresses; \
                 refused (allow the address itself to reach it)\n",
                host_port(&host, port)
            ),
            reason: "resolves to a loopback or link-local address".to_owned(),
        });
    }
    Ok(Allowed { addrs, reason })
}
