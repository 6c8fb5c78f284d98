//! One log line per request, like `poem::middleware::Tracing`, but with the
//! values of secret query parameters replaced: a stream ticket
//! (`?ticket=`) is a credential and is never logged.

use std::{borrow::Cow, time::Instant};

use poem::{Endpoint, IntoResponse, Middleware, Request, Response, Result};
use tracing::Instrument;

/// Query parameters whose values are credentials.
const SECRET_PARAMS: &[&str] = &["ticket"];

pub struct RequestLog;

impl<E: Endpoint> Middleware<E> for RequestLog {
    type Output = RequestLogEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        RequestLogEndpoint { inner }
    }
}

pub struct RequestLogEndpoint<E> {
    inner: E,
}

/// The path and query of `uri` with secret parameters' values redacted.
fn loggable(uri: &poem::http::Uri) -> Cow<'_, str> {
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

impl<E: Endpoint> Endpoint for RequestLogEndpoint<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> Result<Response> {
        let span = tracing::info_span!(
            "request",
            remote_addr = %req.remote_addr(),
            version = ?req.version(),
            method = %req.method(),
            uri = %loggable(req.original_uri()),
        );
        async move {
            let started = Instant::now();
            let res = self.inner.call(req).await;
            let duration = started.elapsed();
            match res {
                Ok(resp) => {
                    let resp = resp.into_response();
                    tracing::info!(status = %resp.status(), ?duration, "response");
                    Ok(resp)
                }
                Err(err) => {
                    tracing::info!(status = %err.status(), error = %err, ?duration, "error");
                    Err(err)
                }
            }
        }
        .instrument(span)
        .await
    }
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
