//! CORS for the origins in `TIDINGS_CORS_ORIGINS` (default: none).
//!
//! Not poem's `Cors`: with an empty list it allows every origin, and it
//! answers a foreign origin's plain request with 403. Here a foreign origin
//! gets the response it would get anyway, without CORS headers (the browser
//! then withholds it), and an allowed origin gets them on every response,
//! problem bodies included (this middleware wraps the problem mapping).

use poem::{
    http::{header, HeaderValue, Method, StatusCode},
    Endpoint, IntoResponse, Middleware, Request, Response, Result,
};

/// What a preflight allows, besides the simple headers: the credential, a
/// JSON body, the stream's resume cursor, a write's idempotency key, and the
/// consistency token a browser app forwards from a mark to its next read.
const ALLOW_HEADERS: &str =
    "Authorization, Content-Type, Last-Event-ID, Idempotency-Key, Tidings-Consistency-Token";
/// PATCH: preferences (the element's settings panel changes them from the page).
const ALLOW_METHODS: &str = "GET, POST, PUT, PATCH, DELETE";
/// Headers a script may read besides the simple ones: when to retry and
/// where a created resource is, the rate limits (to slow down before a 429),
/// whether a write was a replay, the token that makes the next read reflect a
/// write, and the request id to quote when reporting a problem.
const EXPOSE_HEADERS: &str = "Retry-After, Location, RateLimit, RateLimit-Policy, \
     Idempotency-Replayed, Tidings-Consistency-Token, X-Request-Id";

pub struct Cors {
    origins: Vec<HeaderValue>,
    max_age_secs: u64,
}

impl Cors {
    pub fn new(origins: &[String], max_age_secs: u64) -> Self {
        Cors {
            origins: origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect(),
            max_age_secs,
        }
    }
}

impl<E: Endpoint> Middleware<E> for Cors {
    type Output = CorsEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        CorsEndpoint {
            inner,
            origins: self.origins.clone(),
            max_age: HeaderValue::from(self.max_age_secs),
        }
    }
}

pub struct CorsEndpoint<E> {
    inner: E,
    origins: Vec<HeaderValue>,
    max_age: HeaderValue,
}

impl<E: Endpoint> Endpoint for CorsEndpoint<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> Result<Response> {
        let allowed = req
            .headers()
            .get(header::ORIGIN)
            .filter(|origin| self.origins.contains(origin))
            .cloned();
        let preflight = req.method() == Method::OPTIONS
            && req
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        let mut resp = match (&allowed, preflight) {
            (Some(_), true) => {
                let mut resp = StatusCode::NO_CONTENT.into_response();
                let h = resp.headers_mut();
                h.insert(
                    header::ACCESS_CONTROL_ALLOW_METHODS,
                    HeaderValue::from_static(ALLOW_METHODS),
                );
                h.insert(
                    header::ACCESS_CONTROL_ALLOW_HEADERS,
                    HeaderValue::from_static(ALLOW_HEADERS),
                );
                h.insert(header::ACCESS_CONTROL_MAX_AGE, self.max_age.clone());
                resp
            }
            _ => self.inner.get_response(req).await,
        };
        let h = resp.headers_mut();
        h.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = allowed {
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            h.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSE_HEADERS),
            );
        }
        Ok(resp)
    }
}
