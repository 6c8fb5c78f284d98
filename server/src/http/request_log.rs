//! What the request log (`http::observe`) prints of a request: its URI with
//! the values of secret query parameters replaced, since a stream ticket
//! (`?ticket=`) is a credential and is never logged; and the client's
//! address, taken from forwarding headers only when the peer is a trusted
//! proxy.

use std::{borrow::Cow, net::IpAddr};

use poem::http::HeaderMap;

use crate::app::config::TrustedProxies;

/// Query parameters whose values are credentials, lowercase.
const SECRET_PARAMS: &[&str] = &["ticket"];

/// The path and query of `uri` with secret parameters' values redacted.
///
/// A parameter's name is compared as the query parser that authenticates
/// reads it, percent-decoded (`%74icket` is `ticket`), and without regard to
/// case, so that no spelling the server might accept slips into the log.
pub(crate) fn loggable(uri: &poem::http::Uri) -> Cow<'_, str> {
    let Some(query) = uri.query() else {
        return Cow::Borrowed(uri.path());
    };
    let redacted: Vec<Cow<'_, str>> = query
        .split('&')
        .map(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            if is_secret(name) {
                Cow::Owned(format!("{name}=<redacted>"))
            } else {
                Cow::Borrowed(pair)
            }
        })
        .collect();
    Cow::Owned(format!("{}?{}", uri.path(), redacted.join("&")))
}

fn is_secret(raw_name: &str) -> bool {
    let decoded: String = url::form_urlencoded::parse(raw_name.as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_default();
    SECRET_PARAMS
        .iter()
        .any(|secret| decoded.trim().eq_ignore_ascii_case(secret))
}

/// The client's address for the log. `X-Forwarded-For` and `X-Real-IP` are
/// anyone's to write, so they are read only when the peer is one of
/// `trusted` (TIDINGS_TRUSTED_PROXIES): then the client is the right-most
/// address of `X-Forwarded-For` that is not itself a trusted proxy (each
/// proxy appends the address it received from, so what lies left of the
/// first untrusted hop may be forged), else `X-Real-IP`, else the peer.
pub(crate) fn client_addr(
    peer: Option<IpAddr>,
    headers: &HeaderMap,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    let peer = peer?;
    if !trusted.contains(peer) {
        return Some(peer);
    }
    let forwarded = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|hop| hop.trim().parse::<IpAddr>().ok())
        .collect::<Vec<_>>();
    for hop in forwarded.iter().rev() {
        match hop {
            Some(addr) if trusted.contains(*addr) => continue,
            Some(addr) => return Some(*addr),
            // An unparsable hop: nothing left of it can be trusted.
            None => return Some(peer),
        }
    }
    headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or(Some(peer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_are_redacted_and_other_parameters_kept() {
        let uri: poem::http::Uri = "/v1/feed/stream?after=abc&ticket=tds_secret&x=1"
            .parse()
            .expect("uri");
        assert_eq!(
            loggable(&uri),
            "/v1/feed/stream?after=abc&ticket=<redacted>&x=1"
        );
        let plain: poem::http::Uri = "/v1/feed".parse().expect("uri");
        assert_eq!(loggable(&plain), "/v1/feed");
    }

    #[test]
    fn tickets_are_redacted_however_their_name_is_spelled() {
        for name in [
            "%74icket",
            "TICKET",
            "Ticket",
            "%54%49%43%4B%45%54",
            "t%69cket",
        ] {
            let uri: poem::http::Uri = format!("/v1/feed/stream?{name}=tds_secret&x=1")
                .parse()
                .expect("uri");
            let shown = loggable(&uri);
            assert!(!shown.contains("tds_secret"), "{name}: {shown}");
            assert!(shown.ends_with("&x=1"), "{shown}");
        }
        let uri: poem::http::Uri = "/v1/feed?tickets=1&xticket=2".parse().expect("uri");
        assert_eq!(loggable(&uri), "/v1/feed?tickets=1&xticket=2");
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().expect("header value"));
        }
        map
    }

    #[test]
    fn forwarding_headers_count_only_from_a_trusted_proxy() {
        let peer: IpAddr = "10.0.0.5".parse().unwrap();
        let forged = headers(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-real-ip", "198.51.100.7"),
        ]);
        let nobody = TrustedProxies::default();
        assert_eq!(client_addr(Some(peer), &forged, &nobody), Some(peer));

        let proxies = TrustedProxies::parse(&["10.0.0.0/8".into()]).unwrap();
        assert_eq!(
            client_addr(Some(peer), &forged, &proxies),
            Some("203.0.113.9".parse().unwrap())
        );
        // A client's own X-Forwarded-For is left of what the proxy appended.
        let chained = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.0.0.7")]);
        assert_eq!(
            client_addr(Some(peer), &chained, &proxies),
            Some("203.0.113.9".parse().unwrap())
        );
        let real_ip = headers(&[("x-real-ip", "198.51.100.7")]);
        assert_eq!(
            client_addr(Some(peer), &real_ip, &proxies),
            Some("198.51.100.7".parse().unwrap())
        );
        let garbage = headers(&[("x-forwarded-for", "1.2.3.4, not-an-address")]);
        assert_eq!(client_addr(Some(peer), &garbage, &proxies), Some(peer));
    }
}
