//! Which addresses a webhook may reach. A tenant chooses the URL, so without a
//! guard a webhook is a request forgery tool against our own network: the cloud
//! metadata service (169.254.169.254), the database, internal admin pages.
//!
//! The check runs on resolved addresses, inside the HTTP client's DNS resolver
//! ([`GuardedResolver`]), so the address that was checked is the address that
//! is connected to: a name that resolves to a public address for a check and to
//! 127.0.0.1 for the connection (DNS rebinding) gains nothing. URLs with IP
//! literals never reach a resolver and are checked by [`check_url`].

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

pub use crate::config::AllowPrivate;

/// The class of an address, from the guard's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    Loopback,
    Private,
    /// Link-local, unspecified, multicast, broadcast, documentation, reserved:
    /// never a legitimate webhook receiver.
    Special,
}

impl AddressClass {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => classify_v4(v4),
            IpAddr::V6(v6) => classify_v6(v6),
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if ip.is_loopback() {
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

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) reach the IPv4 address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let seg = ip.segments();
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
        let [a, b] = seg[6].to_be_bytes();
        let [c, d] = seg[7].to_be_bytes();
        return classify_v4(Ipv4Addr::new(a, b, c, d));
    }
    if ip.is_loopback() {
        AddressClass::Loopback
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        AddressClass::Private
    } else if ip.is_unspecified()
        || ip.is_multicast()
        || (seg[0] & 0xffc0) == 0xfe80 // link-local
        || (seg[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
        || seg[0..6] == [0, 0, 0, 0, 0, 0]
    // IPv4-compatible (deprecated)
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
            AddressClass::Special => self == AllowPrivate::All,
        }
    }
}

/// A URL the guard refuses. Permanent: retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("webhook URL is not a valid http(s) URL: {0}")]
    BadUrl(String),
    #[error("webhook URL {host} resolves to {ip}, a {class} address, which is not allowed (TIDINGS_WEBHOOK_ALLOW_PRIVATE)")]
    Address {
        host: String,
        ip: IpAddr,
        class: &'static str,
    },
}

fn class_name(ip: IpAddr) -> &'static str {
    match AddressClass::of(ip) {
        AddressClass::Public => "public",
        AddressClass::Loopback => "loopback",
        AddressClass::Private => "private",
        AddressClass::Special => "link-local/reserved",
    }
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
            ("64:ff9b::10.0.0.1", AddressClass::Private),
            ("169.254.169.254", AddressClass::Special),
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
