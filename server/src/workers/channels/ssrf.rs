//! Which addresses a webhook may reach. A tenant chooses the URL, so without a
//! guard a webhook is a request forgery tool against our own network: the cloud
//! metadata service (169.254.169.254), the database, internal admin pages.
//!
//! The check runs on resolved addresses, inside the HTTP client's DNS resolver
//! ([`GuardedResolver`]), so the address that was checked is the address that
//! is connected to: a name that resolves to a public address for a check and to
//! 127.0.0.1 for the connection (DNS rebinding) gains nothing. URLs with IP
//! literals never reach a resolver and are checked by [`check_url`], at
//! delivery and when an endpoint is created (so a refused URL is a 4xx to
//! the tenant, not a dead delivery later).
//!
//! **IPv6 spellings of IPv4 addresses.** An IPv4-mapped address
//! (`::ffff:a.b.c.d`) is that IPv4 address: the kernel connects to it, so it
//! is classed by it, and the resolver hands the client the IPv4 address
//! itself. Every other spelling (NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`,
//! 6to4 `2002::/16`, SIIT `::ffff:0:0/96`, IPv4-compatible `::/96`) is an
//! IPv6 address: connecting to it goes to a translator or relay, off this
//! host, which then reaches its IPv4 address in *its* network. So such an
//! address is only as good as its embedded IPv4 address is public: one
//! whose embedded address is loopback, private or special (or cannot be
//! read) is [`AddressClass::Translated`], refused under every policy, since
//! no policy means "whatever a translator's 127.0.0.1 is".

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

pub use crate::app::config::AllowPrivate;

/// The class of an address, from the guard's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    Loopback,
    Private,
    /// Link-local, unspecified, multicast, broadcast, documentation, reserved,
    /// and IPv6 transition prefixes whose IPv4 target cannot be read from the
    /// address: never a legitimate webhook receiver.
    Special,
    /// A cloud provider's instance metadata or control service: credentials
    /// live there. Refused by every policy but `all`, even `private`, although
    /// some of them sit in private ranges (fd00:ec2::254, 100.100.100.200).
    Metadata,
    /// An IPv6 translation or relay spelling (NAT64, 6to4, SIIT,
    /// IPv4-compatible) of an IPv4 address that is not public, or whose IPv4
    /// address cannot be read: it routes off this host to a translator.
    /// Refused by every policy, `all` included.
    Translated,
}

impl AddressClass {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => classify_v4(v4),
            IpAddr::V6(v6) => classify_v6(v6),
        }
    }

    fn name(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::Special => "link-local/reserved",
            AddressClass::Metadata => "cloud metadata",
            AddressClass::Translated => "IPv6-translated non-public",
        }
    }
}

/// Instance metadata and control services of the common clouds. Most are
/// link-local (and so `Special` anyway); they are listed so that every
/// spelling (IPv4-mapped, NAT64, 6to4) lands in the same class.
const METADATA_V4: [Ipv4Addr; 6] = [
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task metadata
    Ipv4Addr::new(169, 254, 169, 123), // AWS time sync
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud (in CGNAT space)
    Ipv4Addr::new(168, 63, 129, 16),   // Azure WireServer (a public address)
    Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud (legacy)
];
const METADATA_V6: [Ipv6Addr; 3] = [
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254), // AWS IMDS over IPv6
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0023), // AWS DNS/NTP over IPv6
    Ipv6Addr::new(0xfd20, 0x0ce, 0, 0, 0, 0, 0, 0x0254),  // GCP metadata over IPv6
];

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if METADATA_V4.contains(&ip) {
        AddressClass::Metadata
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        AddressClass::Private
    } else if ip.is_unspecified()
        || a == 0
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240
    {
        AddressClass::Special
    } else {
        AddressClass::Public
    }
}

fn v4_from(high: u16, low: u16) -> Ipv4Addr {
    let [a, b] = high.to_be_bytes();
    let [c, d] = low.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if METADATA_V6.contains(&ip) {
        return AddressClass::Metadata;
    }
    let seg = ip.segments();
    // IPv4-mapped ::ffff:a.b.c.d is the IPv4 address itself (the kernel
    // connects to it; `GuardedResolver` hands over the IPv4 address).
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    // Prefixes that carry an IPv4 address reach it through a translator or
    // relay, off this host: classed by it when it is public (or metadata),
    // else `Translated`:
    // - SIIT's IPv4-translated ::ffff:0:a.b.c.d (RFC 6052/7915);
    // - NAT64's well-known prefix 64:ff9b::a.b.c.d (RFC 6052);
    // - IPv4-compatible ::a.b.c.d (deprecated, RFC 4291), but :: and ::1;
    // - 6to4 2002:a.b.c.d::/48 (RFC 3056): the relay forwards to a.b.c.d.
    let embedded = if seg[0..6] == [0, 0, 0, 0, 0xffff, 0]
        || seg[0..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || (seg[0..6] == [0, 0, 0, 0, 0, 0] && seg[6] != 0)
    {
        Some(v4_from(seg[6], seg[7]))
    } else if seg[0] == 0x2002 {
        Some(v4_from(seg[1], seg[2]))
    } else {
        None
    };
    if let Some(v4) = embedded {
        return match classify_v4(v4) {
            class @ (AddressClass::Public | AddressClass::Metadata) => class,
            _ => AddressClass::Translated,
        };
    }
    // NAT64's local-use prefix 64:ff9b:1::/48 (RFC 8215): where the IPv4
    // address sits depends on the operator's prefix length, so it cannot be
    // read, and it is never this host.
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1 {
        return AddressClass::Translated;
    }
    // Refused, because the target cannot be read reliably from the address:
    // Teredo 2001::/32 (RFC 4380; the client address is obfuscated and the
    // server is a relay), and the discard-only prefix 100::/64 (RFC 6666).
    if (seg[0] == 0x2001 && seg[1] == 0) || seg[0..4] == [0x100, 0, 0, 0] {
        return AddressClass::Special;
    }
    if ip.is_loopback() {
        AddressClass::Loopback
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        AddressClass::Private
    } else if ip.is_unspecified()
        || ip.is_multicast()
        || (seg[0] & 0xffc0) == 0xfe80 // link-local
        || (seg[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (seg[0] == 0x2001 && seg[1] == 0x0db8)
    // documentation
    {
        AddressClass::Special
    } else {
        AddressClass::Public
    }
}

impl AllowPrivate {
    pub fn permits(self, ip: IpAddr) -> bool {
        match AddressClass::of(ip) {
            AddressClass::Public => true,
            AddressClass::Loopback => self >= AllowPrivate::Loopback,
            AddressClass::Private => self >= AllowPrivate::Private,
            AddressClass::Special | AddressClass::Metadata => self == AllowPrivate::All,
            AddressClass::Translated => false,
        }
    }
}

/// A URL the guard refuses. Permanent: retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("webhook URL is not a valid http(s) URL: {0}")]
    BadUrl(String),
    /// The message names the host (the tenant's own) and the class, never
    /// the resolved address: it is shown to the tenant (`last_error`), and
    /// which addresses our resolver sees is our network's business. The
    /// address is kept in `ip` for the operator's log.
    #[error("webhook URL host {host} resolves to a {class} address, which is not allowed (TIDINGS_WEBHOOK_ALLOW_PRIVATE)")]
    Address {
        host: String,
        ip: IpAddr,
        class: &'static str,
    },
}

fn class_name(ip: IpAddr) -> &'static str {
    AddressClass::of(ip).name()
}

/// Checks what can be checked without DNS: scheme, host, and IP-literal hosts.
pub fn check_url(raw: &str, policy: AllowPrivate) -> Result<url::Url, Refused> {
    let url = url::Url::parse(raw).map_err(|e| Refused::BadUrl(format!("{raw}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Refused::BadUrl(format!(
            "{raw}: scheme {} is not http or https",
            url.scheme()
        )));
    }
    let ip = match url.host() {
        None => return Err(Refused::BadUrl(format!("{raw}: no host"))),
        Some(url::Host::Domain(_)) => return Ok(url),
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
    };
    if policy.permits(ip) {
        Ok(url)
    } else {
        Err(Refused::Address {
            host: ip.to_string(),
            ip,
            class: class_name(ip),
        })
    }
}

/// The HTTP client's DNS resolver: resolves with the system resolver and keeps
/// only permitted addresses; when none is left, fails with [`Refused`], which
/// the webhook sender finds in the error chain and treats as permanent.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    pub policy: AllowPrivate,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut first_refused = None;
            let mut allowed = Vec::new();
            for addr in resolved {
                // An IPv4-mapped answer is connected to as the IPv4 address
                // it names, the one that was checked.
                let addr = match addr.ip() {
                    IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                        Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
                        None => addr,
                    },
                    IpAddr::V4(_) => addr,
                };
                if policy.permits(addr.ip()) {
                    allowed.push(addr);
                } else if first_refused.is_none() {
                    first_refused = Some(addr.ip());
                }
            }
            if allowed.is_empty() {
                let err: Box<dyn std::error::Error + Send + Sync> = match first_refused {
                    Some(ip) => Box::new(Refused::Address {
                        host,
                        ip,
                        class: class_name(ip),
                    }),
                    None => format!("{host} resolves to no address").into(),
                };
                return Err(err);
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

impl GuardedResolver {
    pub fn shared(policy: AllowPrivate) -> Arc<Self> {
        Arc::new(GuardedResolver { policy })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn classes_of_well_known_addresses() {
        for (addr, class) in [
            ("8.8.8.8", AddressClass::Public),
            ("2606:4700::1111", AddressClass::Public),
            ("127.0.0.1", AddressClass::Loopback),
            ("127.8.9.10", AddressClass::Loopback),
            ("::1", AddressClass::Loopback),
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("10.1.2.3", AddressClass::Private),
            ("172.16.0.1", AddressClass::Private),
            ("192.168.1.1", AddressClass::Private),
            ("100.64.0.1", AddressClass::Private),
            ("fd12::1", AddressClass::Private),
            ("169.254.169.254", AddressClass::Metadata),
            ("169.254.1.1", AddressClass::Special),
            ("fe80::1", AddressClass::Special),
            ("0.0.0.0", AddressClass::Special),
            ("::", AddressClass::Special),
            ("224.0.0.1", AddressClass::Special),
            ("ff02::1", AddressClass::Special),
            ("255.255.255.255", AddressClass::Special),
            ("240.0.0.1", AddressClass::Special),
        ] {
            assert_eq!(AddressClass::of(ip(addr)), class, "{addr}");
        }
    }

    #[test]
    fn transition_prefixes_are_classed_by_their_ipv4_or_refused() {
        for (addr, class) in [
            // IPv4-mapped ::ffff:0:0/96: the IPv4 address itself
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("::ffff:10.0.0.1", AddressClass::Private),
            // SIIT ::ffff:0:0:0/96
            ("::ffff:0:127.0.0.1", AddressClass::Translated),
            ("::ffff:0:10.0.0.1", AddressClass::Translated),
            ("::ffff:0:8.8.8.8", AddressClass::Public),
            // NAT64 64:ff9b::/96
            ("64:ff9b::127.0.0.1", AddressClass::Translated),
            ("64:ff9b::10.0.0.1", AddressClass::Translated),
            ("64:ff9b::169.254.1.1", AddressClass::Translated),
            ("64:ff9b::169.254.169.254", AddressClass::Metadata),
            ("64:ff9b::8.8.8.8", AddressClass::Public),
            // IPv4-compatible ::/96
            ("::127.0.0.1", AddressClass::Translated),
            ("::10.0.0.1", AddressClass::Translated),
            // 6to4 2002::/16: 2002:7f00:1:: is 127.0.0.1's
            ("2002:7f00:1::1", AddressClass::Translated),
            ("2002:a00:1::", AddressClass::Translated),
            ("2002:a9fe:a9fe::1", AddressClass::Metadata),
            ("2002:808:808::1", AddressClass::Public),
            // NAT64 local-use 64:ff9b:1::/48: unreadable, never this host
            ("64:ff9b:1::7f00:1", AddressClass::Translated),
            ("64:ff9b:1:7f00:1::", AddressClass::Translated),
            ("64:ff9b:1:ffff::", AddressClass::Translated),
            // refused outright
            (
                "2001:0:4136:e378:8000:63bf:80ff:fffe",
                AddressClass::Special,
            ),
            ("2001::1", AddressClass::Special),
            ("100::1", AddressClass::Special),
            ("100::ffff:ffff:ffff:ffff", AddressClass::Special),
        ] {
            assert_eq!(AddressClass::of(ip(addr)), class, "{addr}");
        }
    }

    #[test]
    fn metadata_addresses_are_refused_by_every_policy_but_all() {
        for addr in [
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "100.100.100.200",
            "64:ff9b::100.100.100.200",
            "fd00:ec2::254",
            "fd20:ce::254",
            "168.63.129.16",
            "169.254.170.2",
        ] {
            assert_eq!(AddressClass::of(ip(addr)), AddressClass::Metadata, "{addr}");
            for policy in [
                AllowPrivate::None,
                AllowPrivate::Loopback,
                AllowPrivate::Private,
            ] {
                assert!(!policy.permits(ip(addr)), "{policy:?} permits {addr}");
            }
            assert!(AllowPrivate::All.permits(ip(addr)), "{addr}");
        }
        // Neighbours of metadata addresses keep their ordinary class.
        assert!(AllowPrivate::Private.permits(ip("100.100.100.201")));
        assert!(AllowPrivate::Private.permits(ip("fd00:ec2::1")));
    }

    #[test]
    fn a_refusal_names_the_host_and_class_but_not_the_resolved_address() {
        let refused = check_url("http://[::ffff:127.0.0.1]:9/x", AllowPrivate::None)
            .expect_err("loopback is refused");
        let text = refused.to_string();
        assert!(
            text.contains("loopback") && text.contains("not allowed"),
            "{text}"
        );
        let Refused::Address { ip: kept, .. } = refused else {
            panic!("an address refusal")
        };
        assert_eq!(kept, ip("::ffff:127.0.0.1"));
        let by_name = Refused::Address {
            host: "hooks.example".into(),
            ip: ip("10.1.2.3"),
            class: "private",
        }
        .to_string();
        assert!(!by_name.contains("10.1.2.3"), "{by_name}");
    }

    /// The translated spellings of this host and of private networks reach
    /// a translator's network, never ours: no policy lets them through, at
    /// endpoint creation (`check_url`) or in the resolver.
    #[test]
    fn translated_spellings_of_loopback_and_private_addresses_are_refused_by_every_policy() {
        for addr in [
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::7f00:1",
            "64:ff9b:1:7f00:1::",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "::ffff:0:7f00:1",
            "::7f00:1",
        ] {
            for policy in [
                AllowPrivate::None,
                AllowPrivate::Loopback,
                AllowPrivate::Private,
                AllowPrivate::All,
            ] {
                assert!(!policy.permits(ip(addr)), "{policy:?} permits {addr}");
                let url = format!("http://[{addr}]:9/hook");
                let refused = check_url(&url, policy).expect_err(&url);
                assert!(
                    matches!(refused, Refused::Address { class, .. } if class == "IPv6-translated non-public"),
                    "{refused}"
                );
            }
        }
        // The public IPv4 behind a translator stays reachable.
        assert!(AllowPrivate::None.permits(ip("64:ff9b::8.8.8.8")));
        assert!(AllowPrivate::None.permits(ip("2002:808:808::1")));
    }

    #[test]
    fn each_policy_widens_the_previous_one() {
        assert!(!AllowPrivate::None.permits(ip("127.0.0.1")));
        assert!(AllowPrivate::Loopback.permits(ip("127.0.0.1")));
        assert!(!AllowPrivate::Loopback.permits(ip("10.0.0.1")));
        assert!(AllowPrivate::Private.permits(ip("10.0.0.1")));
        assert!(!AllowPrivate::Private.permits(ip("169.254.169.254")));
        assert!(AllowPrivate::All.permits(ip("169.254.169.254")));
        assert!(AllowPrivate::None.permits(ip("93.184.216.34")));
    }

    #[test]
    fn ip_literal_urls_are_checked_without_dns() {
        assert!(check_url("http://127.0.0.1:9/x", AllowPrivate::None).is_err());
        assert!(check_url("http://[::1]:9/x", AllowPrivate::None).is_err());
        assert!(check_url("http://127.0.0.1:9/x", AllowPrivate::Loopback).is_ok());
        assert!(check_url("ftp://example.com/", AllowPrivate::All).is_err());
        assert!(check_url("not a url", AllowPrivate::All).is_err());
        assert!(check_url("https://example.com/hook", AllowPrivate::None).is_ok());
    }
}
