//! The outermost middleware: every request gets its id (`X-Request-Id`,
//! accepted or made up, and echoed), a log span carrying it, one log line
//! and one latency sample (by route template) when it is answered, and every
//! error turned into a problem body while the id is still known, so the
//! problem's `instance` names the request.

use std::{sync::Arc, time::Instant};

use poem::{
    http::HeaderValue, Endpoint, IntoResponse, Middleware, PathPattern, Request, Response, Result,
};
use tracing::Instrument;

use crate::{
    app::{config::TrustedProxies, instruments},
    http::error::problem_from_poem_error,
    http::request_id::RequestId,
    http::request_log::client_addr,
};

pub struct Observe {
    /// Peers whose forwarding headers name the client; `None`: no peer's do.
    pub trusted_proxies: Option<Arc<TrustedProxies>>,
}

impl<E: Endpoint> Middleware<E> for Observe {
    type Output = ObserveEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        ObserveEndpoint {
            inner,
            trusted_proxies: self.trusted_proxies.clone(),
        }
    }
}

pub struct ObserveEndpoint<E> {
    inner: E,
    trusted_proxies: Option<Arc<TrustedProxies>>,
}

impl<E: Endpoint> Endpoint for ObserveEndpoint<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> Result<Self::Output> {
        let id = RequestId::from_header(
            req.headers()
                .get(crate::http::request_id::HEADER)
                .and_then(|v| v.to_str().ok()),
        );
        let span = tracing::info_span!(
            "request",
            request_id = %id,
            method = %req.method(),
            uri = %super::request_log::loggable(req.original_uri()),
            remote_addr = tracing::field::Empty,
        );
        // The span's fields are formatted only when it is enabled; the
        // client's address is looked up only then too.
        if !span.is_disabled() {
            let peer = req.remote_addr().as_socket_addr().map(|a| a.ip());
            let client = match self.trusted_proxies.as_ref() {
                Some(trusted) => client_addr(peer, req.headers(), trusted),
                None => peer,
            };
            let remote_addr = client
                .map(|addr| addr.to_string())
                .unwrap_or_else(|| req.remote_addr().to_string());
            span.record("remote_addr", tracing::field::display(&remote_addr));
        }
        let header = HeaderValue::from_str(id.as_str()).ok();
        let method = req.method().clone();
        let answered = id
            .scope(async move {
                let started = Instant::now();
                let (mut resp, route) = match self.inner.call(req).await {
                    Ok(resp) => {
                        let resp = resp.into_response();
                        let route = resp.data::<PathPattern>().cloned();
                        (resp, route)
                    }
                    Err(err) => {
                        let route = err.data::<PathPattern>().cloned();
                        (problem_from_poem_error(err).await, route)
                    }
                };
                // No route matched: poem reports the enclosing nest's pattern
                // (empty or `/`), which names nothing.
                let route = match route.as_ref().map(|p| p.0.as_ref()) {
                    Some(pattern) if pattern.len() > 1 => pattern,
                    _ => "unmatched",
                };
                let (status, elapsed) = (resp.status().as_u16(), started.elapsed());
                instruments::http_request(method.as_str(), route, status, elapsed);
                tracing::info!(status, route, duration = ?elapsed, "response");
                if let Some(header) = header {
                    resp.headers_mut()
                        .insert(crate::http::request_id::HEADER, header);
                }
                resp
            })
            .instrument(span)
            .await;
        Ok(answered)
    }
}
