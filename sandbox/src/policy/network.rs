//! What each network setting lets the command open, as data: the socket families `socket(2)` and
//! `socketpair(2)` accept (everything else is refused with EPERM by the native filter). The
//! network namespace decides where a socket can lead; this table decides which kinds exist.
//!
//! - `none`: AF_UNIX only. The private namespace has a loopback, but no IP socket can be made.
//! - `gateway`: AF_UNIX, AF_INET and AF_INET6. The namespace still has only `lo`, so an IP socket
//!   reaches loopback inside the sandbox (a test server the command starts) and the runner's
//!   gateway listeners bound there; nothing else. AF_NETLINK, AF_PACKET, AF_VSOCK and every
//!   other family stay refused (no route or interface changes, no raw frames, no host vsock).
//! - `full`: the host's network; no family rule.

use serde::{Deserialize, Serialize};

use crate::mode::Network;

/// A socket address family a network setting may allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SocketFamily {
    /// `AF_UNIX`.
    Unix,
    /// `AF_INET`.
    Inet,
    /// `AF_INET6`.
    Inet6,
}

impl SocketFamily {
    /// The family's number (`socket(2)`'s first argument).
    pub const fn number(self) -> i32 {
        match self {
            SocketFamily::Unix => libc::AF_UNIX,
            SocketFamily::Inet => libc::AF_INET,
            SocketFamily::Inet6 => libc::AF_INET6,
        }
    }

    /// The family's C name.
    pub const fn name(self) -> &'static str {
        match self {
            SocketFamily::Unix => "AF_UNIX",
            SocketFamily::Inet => "AF_INET",
            SocketFamily::Inet6 => "AF_INET6",
        }
    }
}

const UNIX_ONLY: &[SocketFamily] = &[SocketFamily::Unix];
const LOOPBACK_IP: &[SocketFamily] = &[SocketFamily::Unix, SocketFamily::Inet, SocketFamily::Inet6];

/// The socket families `network` allows; `None`: any.
pub const fn socket_families(network: Network) -> Option<&'static [SocketFamily]> {
    match network {
        Network::None => Some(UNIX_ONLY),
        Network::Gateway => Some(LOOPBACK_IP),
        Network::Full => None,
    }
}

/// `AF_UNIX, AF_INET` for reports.
pub fn family_names(families: &[SocketFamily]) -> String {
    families
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_allows_what_its_namespace_can_hold() {
        assert_eq!(socket_families(Network::None), Some(UNIX_ONLY));
        let gw = socket_families(Network::Gateway).unwrap();
        assert!(gw.contains(&SocketFamily::Inet) && gw.contains(&SocketFamily::Inet6));
        assert_eq!(family_names(gw), "AF_UNIX, AF_INET, AF_INET6");
        assert_eq!(socket_families(Network::Full), None);
        // Only settings that keep the private namespace restrict families.
        for n in Network::ALL {
            assert_eq!(socket_families(n).is_some(), n.private_namespace(), "{n}");
        }
    }
}
