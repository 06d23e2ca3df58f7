//! The runner host's own addresses, which no allowed name may lead to: every address on every
//! interface of the network namespace the proxy connects from (`getifaddrs`), read again for
//! each decision so an interface that appears later (a `docker0` bridge created after the start,
//! a VPN coming up) is covered. A trait so unit tests can give fixed lists.

use std::fmt::Debug;
use std::io;
use std::net::IpAddr;

/// Lists the addresses of this host.
pub trait HostAddresses: Debug + Send + Sync + 'static {
    /// Every address on every interface, now.
    fn addresses(&self) -> io::Result<Vec<IpAddr>>;
}

/// The interfaces' addresses as `getifaddrs(3)` reports them.
#[derive(Clone, Copy, Debug, Default)]
pub struct InterfaceAddresses;

impl HostAddresses for InterfaceAddresses {
    fn addresses(&self) -> io::Result<Vec<IpAddr>> {
        let found = nix::ifaddrs::getifaddrs().map_err(io::Error::from)?;
        let mut out = Vec::new();
        for ifa in found {
            // The interface's address, and its subnet's broadcast address (local too: the
            // kernel answers it). A point-to-point peer is another host, not this one.
            for a in [ifa.address, ifa.broadcast].into_iter().flatten() {
                let ip = if let Some(v4) = a.as_sockaddr_in() {
                    IpAddr::V4(v4.ip())
                } else if let Some(v6) = a.as_sockaddr_in6() {
                    IpAddr::V6(v6.ip())
                } else {
                    continue;
                };
                if !out.contains(&ip) {
                    out.push(ip);
                }
            }
        }
        Ok(out)
    }
}

/// A fixed list (tests), or a list that changes between calls.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct FixedHostAddresses(pub std::sync::Mutex<Vec<IpAddr>>);

#[cfg(test)]
impl FixedHostAddresses {
    /// The list `addrs`.
    pub fn of(addrs: &[&str]) -> Self {
        Self(std::sync::Mutex::new(
            addrs.iter().map(|a| a.parse().unwrap()).collect(),
        ))
    }
}

#[cfg(test)]
impl HostAddresses for FixedHostAddresses {
    fn addresses(&self) -> io::Result<Vec<IpAddr>> {
        Ok(self.0.lock().unwrap().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interfaces_include_loopback() {
        let addrs = InterfaceAddresses.addresses().unwrap();
        assert!(
            addrs.contains(&"127.0.0.1".parse().unwrap()),
            "getifaddrs lists 127.0.0.1 on lo: {addrs:?}"
        );
    }
}
