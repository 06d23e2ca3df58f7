//! `--allow-host HOST[:PORT]` entries: parsing and matching.
//!
//! `HOST` is a DNS name (matched exactly, case-insensitively, a trailing dot ignored; no
//! wildcards), an IPv4 address, or an IPv6 address in brackets (`[::1]:8080`). Without a port an
//! entry allows the web ports **80 and 443** only (what `curl`, `pip` and `git` over HTTPS use);
//! any other port must be named.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use crate::gateway::GatewayError;

/// Ports an entry without a port allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// One allowed destination.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AllowHost {
    /// Lowercase name or IP literal (IPv6 without brackets).
    pub host: String,
    /// The one port allowed; `None`: 80 and 443.
    pub port: Option<u16>,
}

const EXPECTED: &str = "HOST or HOST:PORT (a DNS name, an IPv4 address or a bracketed IPv6 \
                        address such as [::1]:443; port 1-65535)";

impl FromStr for AllowHost {
    type Err = GatewayError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |expected: &'static str| GatewayError::AllowHost {
            input: input.to_owned(),
            expected,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err(EXPECTED));
        }
        if s.contains("://") || s.contains('/') {
            return Err(err("a host name, not a URL (HOST or HOST:PORT)"));
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let Some((inside, after)) = rest.split_once(']') else {
                return Err(err("a closing `]` after the IPv6 address"));
            };
            let ip: Ipv6Addr = inside
                .parse()
                .map_err(|_| err("an IPv6 address inside the brackets"))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| err(EXPECTED))?),
            };
            (ip.to_string(), port)
        } else {
            match s.matches(':').count() {
                0 => (s.to_owned(), None),
                1 => {
                    let (h, p) = s.split_once(':').ok_or_else(|| err(EXPECTED))?;
                    (h.to_owned(), Some(p))
                }
                _ => return Err(err("an IPv6 address in brackets, e.g. [::1]:443")),
            }
        };
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => Some(n),
                _ => return Err(err("a port between 1 and 65535 after `:`")),
            },
        };
        let host = normalize_host(&host);
        if host.parse::<IpAddr>().is_err() && !valid_dns_name(&host) {
            return Err(err(
                "a DNS name of letters, digits, `-` and `.` (labels of 1-63 characters)",
            ));
        }
        Ok(AllowHost { host, port })
    }
}

impl fmt::Display for AllowHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(p) => write!(f, "{host}:{p}"),
            None => f.write_str(&host),
        }
    }
}

impl AllowHost {
    /// True when this entry allows `host:port` (`host` already normalised).
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.host == host
            && match self.port {
                Some(p) => p == port,
                None => DEFAULT_PORTS.contains(&port),
            }
    }

    /// True when the entry names an IP literal or `localhost`: then loopback and link-local
    /// addresses are what was asked for, not a rebinding.
    pub fn names_local_on_purpose(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok()
    }
}

/// Lowercase, brackets and one trailing dot removed.
pub fn normalize_host(host: &str) -> String {
    let h = host.trim();
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    let h = h.strip_suffix('.').unwrap_or(h);
    let lower = h.to_ascii_lowercase();
    match lower.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => lower,
    }
}

fn valid_dns_name(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_with_and_without_ports() {
        let a: AllowHost = "PyPI.org.".parse().unwrap();
        assert_eq!((a.host.as_str(), a.port), ("pypi.org", None));
        assert!(a.matches("pypi.org", 443) && a.matches("pypi.org", 80));
        assert!(!a.matches("pypi.org", 8080));
        let b: AllowHost = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(b.port, Some(8080));
        assert!(b.names_local_on_purpose());
        let c: AllowHost = "[::1]:443".parse().unwrap();
        assert_eq!(c.host, "::1");
        assert_eq!(c.to_string(), "[::1]:443");
        let d: AllowHost = "[2001:db8::1]".parse().unwrap();
        assert_eq!(d.port, None);
    }

    #[test]
    fn bad_entries_name_the_input_and_what_was_expected() {
        for (input, hint) in [
            ("", "HOST or HOST:PORT"),
            ("https://x.org", "not a URL"),
            ("::1", "brackets"),
            ("x.org:0", "port between"),
            ("x.org:http", "port between"),
            ("[::1", "closing"),
            ("[nope]:1", "IPv6 address inside"),
            ("bad host", "DNS name"),
        ] {
            let e = input.parse::<AllowHost>().unwrap_err().to_string();
            assert!(e.contains(&format!("`{input}`")) && e.contains(hint), "{e}");
        }
    }
}
