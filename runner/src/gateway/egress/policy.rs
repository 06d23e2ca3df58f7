//! The egress decision: is `host:port` allowed, and to which addresses may the proxy connect.
//! The decision is made on the name the client asked for. An IP-literal entry is that address,
//! explicitly. A name is resolved by the proxy itself, and each address is classified
//! ([`super::addresses`], with this host's own addresses read now, [`super::host`]): only the
//! addresses the entry's [`Reach`](super::addresses::Reach) permits are kept, in the resolver's
//! order; when none is left the request is refused, naming the address and its class.

use std::net::{IpAddr, SocketAddr};

use super::EgressConfig;
use super::addresses::{AddressClass, classify};
use super::allow::{AllowHost, normalize_host};

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
    /// The decision could not be made (the name did not resolve, this host's addresses could
    /// not be listed): answered 502.
    Failed {
        /// The plain-text body.
        body: String,
        /// The short reason for the sink.
        reason: String,
    },
}

/// The addresses of a name, judged: the ones to try, in order, and the ones left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    /// Permitted, in the resolver's order.
    pub kept: Vec<SocketAddr>,
    /// Left out (each address once), with their class.
    pub skipped: Vec<(IpAddr, AddressClass)>,
}

/// An allowed destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// Addresses to try, in order.
    pub addrs: Vec<SocketAddr>,
    /// The entry that allowed it (and the addresses left out), for the sink.
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

/// The entry allowing `host:port`: one with `=private` if several match.
fn entry_for<'a>(allow: &'a [AllowHost], host: &str, port: u16) -> Option<&'a AllowHost> {
    let mut found = allow.iter().filter(|a| a.matches(host, port));
    let first = found.next()?;
    Some(if first.private {
        first
    } else {
        found.find(|a| a.private).unwrap_or(first)
    })
}

/// Decides on `host:port` (as the client named it) and resolves it.
pub async fn decide(cfg: &EgressConfig, host: &str, port: u16) -> Result<Allowed, Refusal> {
    let host = normalize_host(host);
    let Some(entry) = entry_for(&cfg.allow, &host, port) else {
        return Err(not_allowed(&host, port));
    };
    let reason = format!("allowed by {entry}");
    if let Some(ip) = entry.literal() {
        return Ok(Allowed {
            addrs: vec![SocketAddr::new(ip, port)],
            reason,
        });
    }
    let resolved = cfg
        .resolver
        .resolve(&host, port)
        .await
        .map_err(|e| Refusal::Failed {
            body: format!(
                "ralph egress proxy: failed to resolve {}: {e}\n",
                host_port(&host, port)
            ),
            reason: "name not resolved".to_owned(),
        })?;
    let own = cfg.host.addresses().map_err(|e| Refusal::Failed {
        body: format!(
            "ralph egress proxy: failed to list this host's addresses to check {}: {e}\n",
            host_port(&host, port)
        ),
        reason: format!("failed to list this host's addresses: {e}"),
    })?;
    judge(entry, &host, port, resolved, &own).map(|j| Allowed {
        addrs: j.kept,
        reason: if j.skipped.is_empty() {
            reason
        } else {
            format!("{reason} (skipped {})", list(&j.skipped))
        },
    })
}

/// The pure part of the decision on a name: keeps the resolved addresses `entry` permits (in
/// order), with the ones left out; refuses when none is left. `own` are this host's addresses.
pub fn judge(
    entry: &AllowHost,
    host: &str,
    port: u16,
    resolved: Vec<SocketAddr>,
    own: &[IpAddr],
) -> Result<Judged, Refusal> {
    let reach = entry.reach();
    let mut kept = Vec::new();
    let mut skipped: Vec<(IpAddr, AddressClass)> = Vec::new();
    for a in resolved {
        let class = classify(a.ip(), own);
        if reach.permits(class) {
            kept.push(a);
        } else if !skipped.iter().any(|(ip, _)| *ip == a.ip()) {
            skipped.push((a.ip(), class));
        }
    }
    if !kept.is_empty() {
        return Ok(Judged { kept, skipped });
    }
    let Some(&(first, _)) = skipped.first() else {
        return Err(Refusal::Failed {
            body: format!(
                "ralph egress proxy: {} resolves to no address\n",
                host_port(host, port)
            ),
            reason: "name resolves to no address".to_owned(),
        });
    };
    let private = skipped
        .iter()
        .find(|(_, c)| *c == AddressClass::Private && !entry.private);
    let hint = if let Some((ip, _)) = private {
        format!(
            "if {host} is an internal host, let it resolve to private addresses with \
             `--allow-host {}`, or allow the address itself with `--allow-host {}`",
            entry.with_private(),
            host_port(&ip.to_string(), port)
        )
    } else {
        format!(
            "to reach it on purpose, allow the address itself: `--allow-host {}`",
            host_port(&first.to_string(), port)
        )
    };
    let reason = format!("resolves to {}", list(&skipped));
    Err(Refusal::Denied {
        body: format!(
            "ralph egress proxy: {} {reason}; refused ({hint})\n",
            host_port(host, port)
        ),
        reason,
    })
}

/// "172.17.0.1, an address of this host; 10.0.0.5, a private address".
fn list(addrs: &[(IpAddr, AddressClass)]) -> String {
    addrs
        .iter()
        .map(|(ip, class)| format!("{ip}, {class}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(entry: &str, resolved: &[&str], own: &[&str]) -> Result<(Vec<String>, String), String> {
        let entry: AllowHost = entry.parse().unwrap();
        let resolved = resolved
            .iter()
            .map(|a| SocketAddr::new(a.parse().unwrap(), 443))
            .collect();
        let own: Vec<IpAddr> = own.iter().map(|a| a.parse().unwrap()).collect();
        match judge(&entry, &entry.host, 443, resolved, &own) {
            Ok(j) => Ok((
                j.kept.iter().map(|a| a.ip().to_string()).collect(),
                list(&j.skipped),
            )),
            Err(Refusal::Denied { body, reason }) => Err(format!("{reason} | {body}")),
            Err(Refusal::Failed { body, .. }) => Err(body),
        }
    }

    const OWN: [&str; 4] = ["127.0.0.1", "192.0.2.2", "172.17.0.1", "fd00::2"];

    #[test]
    fn a_name_never_leads_to_this_hosts_own_addresses() {
        for entry in ["pypi.example.org", "pypi.example.org=private"] {
            for own in ["192.0.2.2", "172.17.0.1", "fd00::2", "::ffff:192.0.2.2"] {
                let e = run(entry, &[own], &OWN).unwrap_err();
                assert!(e.contains("an address of this host"), "{entry} {own}: {e}");
                assert!(
                    e.contains("allow the address itself") && e.contains("--allow-host "),
                    "{e}"
                );
            }
        }
        let e = run("pypi.example.org", &["172.17.0.1"], &OWN).unwrap_err();
        assert!(
            e.starts_with("resolves to 172.17.0.1, an address of this host |"),
            "{e}"
        );
        assert!(
            e.contains("`--allow-host 172.17.0.1:443`"),
            "the hint names the literal entry: {e}"
        );
    }

    #[test]
    fn a_name_without_opt_in_never_leads_to_a_private_address() {
        for addr in [
            "10.0.0.5",
            "172.16.1.1",
            "192.168.1.1",
            "100.64.0.1",
            "198.18.0.1",
            "fd00::5",
            "fec0::1",
            "::ffff:10.0.0.5",
            "64:ff9b::10.0.0.5",
            "2002:0a00:0005::1",
        ] {
            let e = run("pypi.corp", &[addr], &OWN).unwrap_err();
            assert!(e.contains("a private address"), "{addr}: {e}");
            assert!(e.contains("`--allow-host pypi.corp=private`"), "{e}");
            let (kept, _) = run("pypi.corp=private", &[addr], &OWN).unwrap();
            assert_eq!(kept, [addr.parse::<IpAddr>().unwrap().to_string()]);
        }
    }

    #[test]
    fn even_an_opted_in_name_never_leads_to_loopback_link_local_or_metadata() {
        for (addr, class) in [
            ("127.0.0.1", "a loopback address"),
            ("127.0.0.2", "a loopback address"),
            ("::1", "a loopback address"),
            ("::ffff:127.0.0.1", "a loopback address"),
            ("169.254.1.1", "a link-local address"),
            ("fe80::1", "a link-local address"),
            ("169.254.169.254", "a cloud metadata address"),
            ("fd00:ec2::254", "a cloud metadata address"),
            ("100.100.100.200", "a cloud metadata address"),
            ("0.0.0.0", "the unspecified address"),
            ("::", "the unspecified address"),
            ("0.1.2.3", "a reserved address"),
            ("240.0.0.1", "a reserved address"),
            ("224.0.0.1", "a multicast address"),
            ("255.255.255.255", "a broadcast address"),
        ] {
            for entry in ["any.example", "any.example=private"] {
                let e = run(entry, &[addr], &OWN).unwrap_err();
                assert!(e.contains(class), "{entry} {addr}: {e}");
                assert!(!e.contains("=private`"), "no opt-in suggested: {e}");
            }
        }
    }

    #[test]
    fn mixed_answers_keep_only_the_permitted_addresses() {
        let (kept, skipped) = run(
            "pypi.example.org",
            &["172.17.0.1", "93.184.216.34", "10.0.0.5", "2606:4700::1"],
            &OWN,
        )
        .unwrap();
        assert_eq!(kept, ["93.184.216.34", "2606:4700::1"]);
        assert_eq!(
            skipped,
            "172.17.0.1, an address of this host; 10.0.0.5, a private address"
        );
        let e = run("pypi.example.org", &["172.17.0.1", "10.0.0.5"], &OWN).unwrap_err();
        assert!(
            e.starts_with(
                "resolves to 172.17.0.1, an address of this host; 10.0.0.5, a private address |"
            ),
            "{e}"
        );
        // The opt-in hint names the private address, not this host's.
        assert!(
            e.contains("`--allow-host pypi.example.org=private`, or allow the address itself with `--allow-host 10.0.0.5:443`"),
            "{e}"
        );
        let (kept, _) = run("pypi.corp=private", &["172.17.0.1", "10.0.0.5"], &OWN).unwrap();
        assert_eq!(kept, ["10.0.0.5"]);
    }

    #[test]
    fn localhost_leads_to_loopback_only() {
        let (kept, _) = run("localhost", &["127.0.0.1", "::1"], &OWN).unwrap();
        assert_eq!(kept, ["127.0.0.1", "::1"]);
        for addr in ["192.0.2.2", "10.0.0.5", "93.184.216.34"] {
            assert!(run("localhost", &[addr], &OWN).is_err(), "{addr}");
        }
    }

    #[test]
    fn a_public_address_is_reached_through_any_name() {
        for entry in ["pypi.org", "pypi.org=private"] {
            let (kept, skipped) = run(entry, &["93.184.216.34", "192.0.2.3"], &OWN).unwrap();
            assert_eq!(kept, ["93.184.216.34", "192.0.2.3"]);
            assert_eq!(skipped, "");
        }
    }

    #[test]
    fn an_empty_answer_is_a_failure_not_a_refusal() {
        assert!(
            run("pypi.org", &[], &OWN)
                .unwrap_err()
                .contains("resolves to no address")
        );
    }

    #[test]
    fn the_private_entry_wins_when_several_match() {
        let allow: Vec<AllowHost> = ["pypi.corp", "pypi.corp:443=private", "pypi.corp:80"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert!(entry_for(&allow, "pypi.corp", 443).unwrap().private);
        assert!(!entry_for(&allow, "pypi.corp", 80).unwrap().private);
        assert!(entry_for(&allow, "pypi.corp", 8080).is_none());
    }
}
