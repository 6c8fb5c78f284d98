//! What the request log (`api::observe`) prints of a URI: the values of
//! secret query parameters replaced, since a stream ticket (`?ticket=`) is a
//! credential and is never logged.

use std::borrow::Cow;

/// Query parameters whose values are credentials.
const SECRET_PARAMS: &[&str] = &["ticket"];

/// The path and query of `uri` with secret parameters' values redacted.
pub(crate) fn loggable(uri: &poem::http::Uri) -> Cow<'_, str> {
    let Some(query) = uri.query() else {
        return Cow::Borrowed(uri.path());
    };
    let redacted: Vec<Cow<'_, str>> = query
        .split('&')
        .map(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            if SECRET_PARAMS.contains(&name) {
                Cow::Owned(format!("{name}=<redacted>"))
            } else {
                Cow::Borrowed(pair)
            }
        })
        .collect();
    Cow::Owned(format!("{}?{}", uri.path(), redacted.join("&")))
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
}
