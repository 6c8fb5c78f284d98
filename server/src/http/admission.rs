//! Around every API request, before its body is read: the slot in which the
//! credential check keeps what the request was admitted with
//! (`crate::tenants::limits`), held until the handler has answered; the rate buckets
//! of a credential sent in a header, drawn before anything else
//! (`auth::admit_before_body`), so a request over its rate is refused
//! without reading its body; the pause before a refusal is answered
//! (`limits::Limits::hold_refusal`); and the `RateLimit` /
//! `RateLimit-Policy` headers of the buckets a request drew on, on whatever
//! it answered.

use poem::{
    http::HeaderValue, Endpoint, IntoResponse, Middleware, PathPattern, Request, Response, Result,
};

use crate::{
    app::state::AppState,
    http::auth,
    http::error::{problem_from_poem_error, ratelimit_headers, ApiError},
    tenants::limits,
};

/// The route label (`observe`) of a request refused before its route was
/// matched: one series for all of them, whatever their paths.
const REFUSED_BEFORE_ROUTING: &str = "(refused before routing)";

pub struct Admission {
    /// The state, held here rather than taken from each request: a clone of
    /// it per request was a dozen reference counts moved on every request.
    pub state: AppState,
}

impl<E: Endpoint> Middleware<E> for Admission {
    type Output = AdmissionEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        AdmissionEndpoint {
            inner,
            state: self.state.clone(),
        }
    }
}

pub struct AdmissionEndpoint<E> {
    inner: E,
    state: AppState,
}

impl<E: Endpoint> Endpoint for AdmissionEndpoint<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> Result<Self::Output> {
        let state = &self.state;
        let (answer, held) = limits::hold_during(async {
            auth::admit_before_body(&mut req, state).await?;
            self.inner.call(req).await
        })
        .await;
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
                match route {
                    Some(route) => resp.set_data(route),
                    None if held.refused.is_some() => {
                        resp.set_data(PathPattern(REFUSED_BEFORE_ROUTING.into()))
                    }
                    None => {}
                }
                resp
            }
        };
        for (name, value) in ratelimit_headers(&held.quotas) {
            if let Ok(value) = HeaderValue::from_str(&value) {
                resp.headers_mut().insert(name, value);
            }
        }
        state.limits.hold_refusal(&held).await;
        // `held` (and so the pool-share permit) goes here, after the answer.
        Ok(resp)
    }
}
