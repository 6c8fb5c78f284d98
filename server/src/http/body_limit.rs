//! Caps request bodies. poem's `SizeLimit` trusts Content-Length and refuses
//! requests without it; this reads the body (chunked or not) up to the limit and
//! answers 413 with a problem body past it, or 408 when the body has not all
//! arrived within the body timeout (a body trickled a byte at a time would
//! otherwise hold its connection and its task forever; `http_server` times
//! the rest of a connection's life).

use std::time::Duration;

use poem::{Body, Endpoint, Middleware, Request, Result};

use crate::http::error::{ApiError, ProblemCode};

pub struct BodyLimit {
    pub max_bytes: usize,
    pub timeout: Duration,
}

impl<E: Endpoint> Middleware<E> for BodyLimit {
    type Output = BodyLimitEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        BodyLimitEndpoint {
            inner,
            max_bytes: self.max_bytes,
            timeout: self.timeout,
        }
    }
}

pub struct BodyLimitEndpoint<E> {
    inner: E,
    max_bytes: usize,
    timeout: Duration,
}

impl<E: Endpoint> Endpoint for BodyLimitEndpoint<E> {
    type Output = E::Output;

    async fn call(&self, mut req: Request) -> Result<Self::Output> {
        let too_large = ApiError::PayloadTooLarge {
            limit: self.max_bytes,
        };
        let declared = req
            .headers()
            .get(poem::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > self.max_bytes as u64) {
            return Err(too_large.into());
        }
        let body = req.take_body();
        if !body.is_empty() {
            let read = tokio::time::timeout(self.timeout, body.into_bytes_limit(self.max_bytes));
            let bytes = read
                .await
                .map_err(|_| ApiError::BodyTimeout {
                    secs: self.timeout.as_secs(),
                })?
                .map_err(|err| match err {
                    poem::error::ReadBodyError::PayloadTooLarge => poem::Error::from(too_large),
                    other => poem::Error::from(ApiError::bad_request(
                        ProblemCode::UnreadableBody,
                        other.to_string(),
                    )),
                })?;
            req.set_body(Body::from_bytes(bytes));
        }
        self.inner.call(req).await
    }
}
