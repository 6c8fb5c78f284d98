//! Around every API request: the slot in which the credential check keeps
//! what the request was admitted with (`crate::limits`), held until the
//! handler has answered, and the `RateLimit` / `RateLimit-Policy` headers of
//! the buckets it drew on, on whatever it answered.

use poem::{
    http::HeaderValue, Endpoint, IntoResponse, Middleware, PathPattern, Request, Response, Result,
};

use crate::{
    error::{problem_from_poem_error, ratelimit_headers, ApiError},
    limits,
};

pub struct Admission;

impl<E: Endpoint> Middleware<E> for Admission {
    type Output = AdmissionEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        AdmissionEndpoint { inner }
    }
}

pub struct AdmissionEndpoint<E> {
    inner: E,
}

impl<E: Endpoint> Endpoint for AdmissionEndpoint<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> Result<Self::Output> {
        let (answer, held) = limits::hold_during(self.inner.call(req)).await;
        let mut resp = match answer {
            Ok(resp) => resp.into_response(),
            // A refusal answers, whatever error a later scheme of a choice
            // of credentials raised (`limits::Held::refused`).
            Err(err) => {
                let route = err.data::<PathPattern>().cloned();
                let mut resp = match held.refused.clone() {
                    Some(refusal) => ApiError::from(refusal).into_response(),
                    None => problem_from_poem_error(err).await,
                };
                // The request's metrics label (`observe`) comes from here.
                if let Some(route) = route {
                    resp.set_data(route);
                }
                resp
            }
        };
        for (name, value) in ratelimit_headers(&held.quotas) {
            if let Ok(value) = HeaderValue::from_str(&value) {
                resp.headers_mut().insert(name, value);
            }
        }
        // `held` (and so the pool-share permit) goes here, after the answer.
        Ok(resp)
    }
}
