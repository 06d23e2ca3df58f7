//! `--allow-host HOST[:PORT][=private]` entries: parsing and matching.
//!
//! `HOST` is a DNS name (matched exactly, case-insensitively, a trailing dot ignored; no
//! wildcards), an IPv4 address, or an IPv6 address in brackets (`[::1]:8080`). Without a port an
//! entry allows the web ports **80 and 443** only (what `curl`, `pip` and `git` over HTTPS use);
//! any other port must be named.
//!
//! What the entry may lead to ([`AllowHost::reach`]): an IP literal is exactly that address; a
//! name only public addresses, or also private ones when the entry ends in `=private` (an
//! internal registry, `pypi.corp:443=private`); `localhost` loopback only.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use super::addresses::Reach;
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
    /// `=private`: the name may resolve to private addresses (10/8, 172.16/12, 192.168/16,
    /// 100.64/10, fc00::/7, ...); never to this host's own or the other special ones.
    pub private: bool,
}

/// The suffix of an entry whose name may resolve to private addresses.
pub const PRIVATE_SUFFIX: &str = "=private";

const EXPECTED: &str = "HOST or HOST:PORT, optionally followed by `=private` (a DNS name, an \
                        IPv4 address or a bracketed IPv6 address such as [::1]:443; port 1-65535)";

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
        let (s, private) = match s.rsplit_once('=') {
            None => (s, false),
            Some((entry, opt)) if opt.trim().eq_ignore_ascii_case("private") => {
                (entry.trim_end(), true)
            }
            Some(_) => {
                return Err(err(
                    "`=private` as the only option after `=` (HOST[:PORT]=private)",
                ));
            }
        };
        if s.is_empty() {
            return Err(err(EXPECTED));
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
        let literal = host.parse::<IpAddr>().is_ok();
        if !literal && !valid_dns_name(&host) {
            return Err(err(
                "a DNS name of letters, digits, `-` and `.` (labels of 1-63 characters)",
            ));
        }
        if private && literal {
            return Err(err(
                "`=private` after a DNS name only: an IP address is allowed as it is, whatever \
                 its range (drop `=private`)",
            ));
        }
        if private && host == "localhost" {
            return Err(err(
                "`=private` after a DNS name other than `localhost` (which reaches loopback \
                 only; drop `=private`)",
            ));
        }
        Ok(AllowHost {
            host,
            port,
            private,
        })
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
            Some(p) => write!(f, "{host}:{p}")?,
            None => f.write_str(&host)?,
        }
        if self.private {
            f.write_str(PRIVATE_SUFFIX)?;
        }
        Ok(())
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

    /// The address an IP-literal entry names: explicit, reached whatever its class (loopback,
    /// this host's own, private).
    pub fn literal(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// What the addresses of a name entry may be: `localhost` names loopback on purpose, a name
    /// with `=private` public and private addresses, any other name public ones only. (An
    /// IP-literal entry is not resolved: see [`AllowHost::literal`].)
    pub fn reach(&self) -> Reach {
        if self.host == "localhost" {
            Reach::Loopback
        } else if self.private {
            Reach::Private
        } else {
            Reach::Public
        }
    }

    /// This entry with `=private`: what a refusal suggests for a name that resolved to a
    /// private address.
    pub fn with_private(&self) -> AllowHost {
        AllowHost {
            private: true,
            ..self.clone()
        }
    }

    /// True when this entry opens everything `asked` opens (the service's admission): the
    /// same host, every port of `asked`, and `=private` only if this entry has it.
    pub fn covers(&self, asked: &AllowHost) -> bool {
        let ports = |p: Option<u16>| p.map_or_else(|| DEFAULT_PORTS.to_vec(), |p| vec![p]);
        self.host == asked.host
            && (self.private || !asked.private)
            && ports(asked.port)
                .iter()
                .all(|p| ports(self.port).contains(p))
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
        assert_eq!(b.literal(), Some("127.0.0.1".parse().unwrap()));
        assert!(!b.private);
        assert_eq!(a.literal(), None);
        assert_eq!(a.reach(), Reach::Public);
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
            ("pypi.corp=privat", "`=private` as the only option"),
            ("pypi.corp:443=", "`=private` as the only option"),
            ("pypi.corp=private=private", "DNS name"),
            ("=private", "HOST or HOST:PORT"),
            ("10.1.2.3:3141=private", "an IP address is allowed as it is"),
            ("[fd00::5]:443=private", "an IP address is allowed as it is"),
            ("localhost:8080=private", "loopback only"),
            ("https://pypi.corp=private", "not a URL"),
        ] {
            let e = input.parse::<AllowHost>().unwrap_err().to_string();
            assert!(e.contains(&format!("`{input}`")) && e.contains(hint), "{e}");
        }
    }

    #[test]
    fn private_opt_in_parses_and_prints_back() {
        for (input, host, port, shown) in [
            ("pypi.corp=private", "pypi.corp", None, "pypi.corp=private"),
            (
                "PyPI.Corp.:3141=Private",
                "pypi.corp",
                Some(3141),
                "pypi.corp:3141=private",
            ),
            (
                " pypi.corp:443 = private ",
                "pypi.corp",
                Some(443),
                "pypi.corp:443=private",
            ),
        ] {
            let a: AllowHost = input.parse().unwrap();
            assert_eq!((a.host.as_str(), a.port, a.private), (host, port, true));
            assert_eq!(a.reach(), Reach::Private);
            assert_eq!(a.to_string(), shown);
            assert_eq!(a.to_string().parse::<AllowHost>().unwrap(), a);
        }
        let l: AllowHost = "localhost:8080".parse().unwrap();
        assert_eq!(l.reach(), Reach::Loopback);
        let n: AllowHost = "pypi.corp".parse().unwrap();
        assert_eq!(n.with_private().to_string(), "pypi.corp=private");
    }

    #[test]
    fn an_entry_covers_another_only_with_its_ports_and_its_opt_in() {
        let e = |s: &str| s.parse::<AllowHost>().unwrap();
        assert!(e("pypi.corp").covers(&e("pypi.corp:443")));
        assert!(e("pypi.corp=private").covers(&e("pypi.corp")));
        assert!(e("pypi.corp=private").covers(&e("pypi.corp:80=private")));
        assert!(!e("pypi.corp").covers(&e("pypi.corp=private")));
        assert!(!e("pypi.corp:443").covers(&e("pypi.corp")));
        assert!(!e("pypi.corp:443=private").covers(&e("pypi.corp:3141=private")));
        assert!(!e("pypi.org=private").covers(&e("pypi.corp")));
    }
}
