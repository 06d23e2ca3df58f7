//! What a resolved address is, as pure data: [`AddressClass`] of an IP (fixed ranges, IPv6 forms
//! that embed an IPv4 address, and the runner host's own addresses), and [`Reach`], what an
//! `--allow-host` entry may lead to. The proxy connects through a name only to addresses its
//! entry's reach permits; an IP-literal entry is explicit and is not classified at all.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The kind of an address, from the least to the most sensitive: the maximum of several
/// classifications (an IPv6 address and the IPv4 address it embeds) is the one that counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressClass {
    /// Anything not listed below (the internet).
    Public,
    /// Private and shared ranges: 10/8, 172.16/12, 192.168/16, 100.64/10 (CGNAT), 198.18/15
    /// (benchmarking), fc00::/7 (ULA), fec0::/10 (site-local), 64:ff9b:1::/48 (local NAT64).
    Private,
    /// An address on one of the runner host's own interfaces.
    ThisHost,
    /// Reserved ranges no name should lead to: 0/8, 240/4, 100::/64 (discard).
    Reserved,
    /// 255.255.255.255.
    Broadcast,
    /// 224/4, ff00::/8.
    Multicast,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// A cloud provider's instance-metadata service (169.254.169.254, 100.100.100.200,
    /// fd00:ec2::254, fd20:ce::254, ...), whatever range it is in.
    Metadata,
    /// 127/8, ::1.
    Loopback,
    /// 0.0.0.0, :: (connecting to it reaches this host).
    Unspecified,
}

impl AddressClass {
    /// How a refusal names the class: "resolves to 10.0.0.5, a private address".
    pub fn describe(self) -> &'static str {
        match self {
            AddressClass::Public => "a public address",
            AddressClass::Private => "a private address",
            AddressClass::ThisHost => "an address of this host",
            AddressClass::Reserved => "a reserved address",
            AddressClass::Broadcast => "a broadcast address",
            AddressClass::Multicast => "a multicast address",
            AddressClass::LinkLocal => "a link-local address",
            AddressClass::Metadata => "a cloud metadata address",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Unspecified => "the unspecified address",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// What the addresses of a name entry may be. An IP-literal entry has no reach: it is that
/// address, whatever its class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// `localhost`: loopback only.
    Loopback,
    /// A name: public addresses only.
    Public,
    /// A name with `=private`: public and private addresses, never this host's own, loopback,
    /// link-local, metadata or the other special ones.
    Private,
}

impl Reach {
    /// True when an entry of this reach may lead to an address of `class`.
    pub fn permits(self, class: AddressClass) -> bool {
        match self {
            Reach::Loopback => class == AddressClass::Loopback,
            Reach::Public => class == AddressClass::Public,
            Reach::Private => matches!(class, AddressClass::Public | AddressClass::Private),
        }
    }
}

/// Instance-metadata services reached without a name (AWS, GCP, Azure, OpenStack, Oracle:
/// 169.254.169.254; AWS ECS tasks: 169.254.170.2; Alibaba: 100.100.100.200; Oracle Cloud
/// Classic: 192.0.0.192).
const METADATA_V4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
];

/// IPv6 instance-metadata services (AWS IMDS, GCP).
const METADATA_V6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254),
    Ipv6Addr::new(0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254),
];

/// The class of `ip` from its ranges alone (not knowing this host's addresses).
pub fn fixed_class(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => embedded_v4(v6)
            .into_iter()
            .map(v4_class)
            .fold(v6_class(v6), AddressClass::max),
    }
}

/// The class of `ip`, `own` being the runner host's addresses: [`fixed_class`], or
/// [`AddressClass::ThisHost`] when `ip` (or the IPv4 address it embeds) is one of `own` and no
/// more sensitive class applies.
pub fn classify(ip: IpAddr, own: &[IpAddr]) -> AddressClass {
    let is_own = |a: IpAddr| own.iter().any(|o| canonical(*o) == canonical(a));
    let mine = match ip {
        IpAddr::V4(_) => is_own(ip),
        IpAddr::V6(v6) => {
            is_own(ip) || embedded_v4(v6).into_iter().any(|v4| is_own(IpAddr::V4(v4)))
        }
    };
    let fixed = fixed_class(ip);
    if mine {
        fixed.max(AddressClass::ThisHost)
    } else {
        fixed
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// IPv4 ranges (network, prefix length, class), the more specific first: 0.0.0.0 inside 0/8,
/// the broadcast address inside 240/4; the metadata addresses ([`METADATA_V4`]) before all.
/// Anything else is public.
const V4_RANGES: [([u8; 4], u32, AddressClass); 12] = [
    ([0, 0, 0, 0], 32, AddressClass::Unspecified),
    ([255, 255, 255, 255], 32, AddressClass::Broadcast),
    ([127, 0, 0, 0], 8, AddressClass::Loopback),
    ([169, 254, 0, 0], 16, AddressClass::LinkLocal),
    ([224, 0, 0, 0], 4, AddressClass::Multicast),
    ([0, 0, 0, 0], 8, AddressClass::Reserved),
    ([240, 0, 0, 0], 4, AddressClass::Reserved),
    ([10, 0, 0, 0], 8, AddressClass::Private),
    ([172, 16, 0, 0], 12, AddressClass::Private),
    ([192, 168, 0, 0], 16, AddressClass::Private),
    ([100, 64, 0, 0], 10, AddressClass::Private),
    ([198, 18, 0, 0], 15, AddressClass::Private),
];

/// IPv6 ranges, as [`V4_RANGES`]; metadata ([`METADATA_V6`]) first. IPv6 forms embedding an
/// IPv4 address are classified by that address too ([`embedded_v4`]).
const V6_RANGES: [(Ipv6Addr, u32, AddressClass); 8] = [
    (Ipv6Addr::UNSPECIFIED, 128, AddressClass::Unspecified),
    (Ipv6Addr::LOCALHOST, 128, AddressClass::Loopback),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        AddressClass::LinkLocal,
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        AddressClass::Multicast,
    ),
    (
        Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0),
        64,
        AddressClass::Reserved,
    ),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        AddressClass::Private,
    ),
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        AddressClass::Private,
    ),
    (
        Ipv6Addr::new(0x0064, 0xff9b, 0x0001, 0, 0, 0, 0, 0),
        48,
        AddressClass::Private,
    ),
];

fn mask(bits: u32, len: u32) -> u128 {
    u128::MAX.checked_shl(bits - len).unwrap_or(0) & (u128::MAX >> (128 - bits))
}

fn v4_class(ip: Ipv4Addr) -> AddressClass {
    if METADATA_V4.contains(&ip) {
        return AddressClass::Metadata;
    }
    let ip = u128::from(u32::from(ip));
    V4_RANGES
        .iter()
        .find(|(net, len, _)| {
            let m = mask(32, *len);
            ip & m == u128::from(u32::from(Ipv4Addr::from(*net))) & m
        })
        .map_or(AddressClass::Public, |(_, _, class)| *class)
}

fn v6_class(ip: Ipv6Addr) -> AddressClass {
    if METADATA_V6.contains(&ip) {
        return AddressClass::Metadata;
    }
    let ip = u128::from(ip);
    V6_RANGES
        .iter()
        .find(|(net, len, _)| {
            let m = mask(128, *len);
            ip & m == u128::from(*net) & m
        })
        .map_or(AddressClass::Public, |(_, _, class)| *class)
}

/// The IPv4 addresses an IPv6 address leads to by its form: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), NAT64
/// (`64:ff9b::a.b.c.d`), 6to4 (`2002:AABB:CCDD::`) and Teredo (`2001:0:SERVER::CLIENT`, the
/// server and the obfuscated client).
pub fn embedded_v4(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    let low32 = v4(s[6], s[7]);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => vec![low32],
        // `::` and `::1` are the IPv6 unspecified and loopback addresses, not compatible forms.
        [0, 0, 0, 0, 0, 0, _, _] if u128::from(ip) > 1 => vec![low32],
        [0, 0, 0, 0, 0xffff, 0, _, _] => vec![low32],
        [0x0064, 0xff9b, 0, 0, 0, 0, _, _] => vec![low32],
        [0x2002, hi, lo, ..] => vec![v4(hi, lo)],
        [0x2001, 0, hi, lo, ..] => vec![v4(hi, lo), v4(!s[6], !s[7])],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::AddressClass::*;
    use super::*;

    fn class(a: &str) -> AddressClass {
        fixed_class(a.parse().unwrap())
    }

    #[test]
    fn every_special_ipv4_range_is_classified() {
        for (a, want) in [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Reserved),
            ("0.255.255.255", Reserved),
            ("10.0.0.0", Private),
            ("10.255.255.255", Private),
            ("100.63.255.255", Public),
            ("100.64.0.1", Private),
            ("100.127.255.255", Private),
            ("100.128.0.0", Public),
            ("100.100.100.200", Metadata),
            ("127.0.0.1", Loopback),
            ("127.255.1.2", Loopback),
            ("169.254.0.1", LinkLocal),
            ("169.254.169.254", Metadata),
            ("169.254.170.2", Metadata),
            ("172.15.255.255", Public),
            ("172.16.0.1", Private),
            ("172.17.0.1", Private),
            ("172.31.255.255", Private),
            ("172.32.0.0", Public),
            ("192.168.1.1", Private),
            ("192.169.0.1", Public),
            ("192.0.0.192", Metadata),
            ("198.17.255.255", Public),
            ("198.18.0.1", Private),
            ("198.19.255.255", Private),
            ("198.20.0.0", Public),
            ("224.0.0.1", Multicast),
            ("239.255.255.255", Multicast),
            ("240.0.0.1", Reserved),
            ("255.255.255.254", Reserved),
            ("255.255.255.255", Broadcast),
            ("93.184.216.34", Public),
            ("8.8.8.8", Public),
            ("192.0.2.2", Public),
        ] {
            assert_eq!(class(a), want, "{a}");
        }
    }

    #[test]
    fn every_special_ipv6_range_is_classified() {
        for (a, want) in [
            ("::", Unspecified),
            ("::1", Loopback),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fec0::1", Private),
            ("feff::1", Private),
            ("fc00::1", Private),
            ("fd00::5", Private),
            ("fd00:ec2::254", Metadata),
            ("fd20:ce::254", Metadata),
            ("ff02::1", Multicast),
            ("100::1", Reserved),
            ("64:ff9b:1::1", Private),
            ("2001:db8::1", Public),
            ("2606:4700::1111", Public),
        ] {
            assert_eq!(class(a), want, "{a}");
        }
    }

    #[test]
    fn ipv6_forms_embedding_ipv4_are_classified_as_the_ipv4_address() {
        for (a, want) in [
            // IPv4-mapped.
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:10.1.2.3", Private),
            ("::ffff:169.254.169.254", Metadata),
            ("::ffff:172.17.0.1", Private),
            ("::ffff:8.8.8.8", Public),
            // IPv4-compatible (deprecated, still routed by some stacks).
            ("::127.0.0.1", Loopback),
            ("::10.0.0.5", Private),
            ("::0.0.0.2", Reserved),
            // IPv4-translated.
            ("::ffff:0:192.168.1.1", Private),
            // NAT64 well-known prefix.
            ("64:ff9b::10.0.0.5", Private),
            ("64:ff9b::169.254.169.254", Metadata),
            ("64:ff9b::127.0.0.1", Loopback),
            ("64:ff9b::8.8.8.8", Public),
            // 6to4: 2002:AABB:CCDD::/48 is AA.BB.CC.DD.
            ("2002:0a00:0005::1", Private),
            ("2002:7f00:0001::", Loopback),
            ("2002:a9fe:a9fe::1", Metadata),
            ("2002:0808:0808::1", Public),
            // Teredo: server 65.54.227.120 (public); client obfuscated in the last 32 bits.
            ("2001:0:4136:e378:8000:63bf:f5ff:fffa", Private), // client !f5ff:fffa = 10.0.0.5
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", Loopback), // client 127.0.0.1
            ("2001:0:0a00:0005:8000:63bf:f7f7:f7f7", Private), // server 10.0.0.5
            ("2001:0:4136:e378:8000:63bf:3fcb:fd7f", Public),  // client 192.52.2.128
        ] {
            assert_eq!(class(a), want, "{a}");
        }
    }

    #[test]
    fn the_hosts_own_addresses_are_this_host_unless_more_sensitive() {
        let own: Vec<IpAddr> = ["127.0.0.1", "192.0.2.2", "172.17.0.1", "fd00::2", "::1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let c = |a: &str| classify(a.parse().unwrap(), &own);
        assert_eq!(c("192.0.2.2"), ThisHost);
        assert_eq!(c("172.17.0.1"), ThisHost);
        assert_eq!(c("fd00::2"), ThisHost);
        assert_eq!(c("::ffff:192.0.2.2"), ThisHost);
        assert_eq!(c("64:ff9b::192.0.2.2"), ThisHost);
        assert_eq!(c("2002:c000:0202::1"), ThisHost);
        assert_eq!(c("127.0.0.1"), Loopback);
        assert_eq!(c("::1"), Loopback);
        assert_eq!(c("192.0.2.3"), Public);
        assert_eq!(c("172.17.0.2"), Private);
        // An own address given in mapped form is the same address.
        let mapped: Vec<IpAddr> = vec!["::ffff:10.0.0.5".parse().unwrap()];
        assert_eq!(classify("10.0.0.5".parse().unwrap(), &mapped), ThisHost);
    }

    #[test]
    fn each_reach_permits_only_its_classes() {
        let all = [
            Public,
            Private,
            ThisHost,
            Reserved,
            Broadcast,
            Multicast,
            LinkLocal,
            Metadata,
            Loopback,
            Unspecified,
        ];
        let permitted = |r: Reach| {
            all.into_iter()
                .filter(|c| r.permits(*c))
                .collect::<Vec<_>>()
        };
        assert_eq!(permitted(Reach::Public), [Public]);
        assert_eq!(permitted(Reach::Private), [Public, Private]);
        assert_eq!(permitted(Reach::Loopback), [Loopback]);
    }
}
