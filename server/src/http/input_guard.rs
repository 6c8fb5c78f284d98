//! Input every route refuses the same way, checked once before any handler
//! runs (so no handler can forget it):
//! - a JSON body with U+0000 anywhere (keys, strings, nested): 422
//!   `nul_character` naming the field (`crate::http::json_nul`). PostgreSQL cannot
//!   store it, so it would otherwise fail a statement with a 500;
//! - an `Idempotency-Key` header that is not 1..=255 printable ASCII
//!   characters (non-ASCII, invisible, over-long, or given twice): 400
//!   `invalid_idempotency_key`. Header values that are not visible ASCII are
//!   dropped by the typed header extractor, so without this check such a key
//!   was silently ignored and two different bodies were both accepted.
//!
//! It runs inside `body_limit`, which has already read the body into memory.

use poem::{Body, Endpoint, Middleware, Request, Result};

use crate::{
    alerts::idempotency::{self, IdempotencyKey},
    http::error::{ApiError, ProblemCode},
    http::json_nul,
};

pub struct InputGuard;

impl<E: Endpoint> Middleware<E> for InputGuard {
    type Output = InputGuardEndpoint<E>;

    fn transform(&self, inner: E) -> Self::Output {
        InputGuardEndpoint { inner }
    }
}

pub struct InputGuardEndpoint<E> {
    inner: E,
}

impl<E: Endpoint> Endpoint for InputGuardEndpoint<E> {
    type Output = E::Output;

    async fn call(&self, mut req: Request) -> Result<Self::Output> {
        check_idempotency_header(&req)?;
        let body = req.take_body();
        if !body.is_empty() {
            let bytes = body.into_bytes().await.map_err(|err| {
                poem::Error::from(ApiError::bad_request(
                    ProblemCode::UnreadableBody,
                    err.to_string(),
                ))
            })?;
            if let Some(nul) = json_nul::find_nul(&bytes) {
                return Err(
                    ApiError::unprocessable(ProblemCode::NulCharacter, nul.to_string()).into(),
                );
            }
            req.set_body(Body::from_bytes(bytes));
        }
        self.inner.call(req).await
    }
}

fn check_idempotency_header(req: &Request) -> Result<(), ApiError> {
    let mut values = req.headers().get_all(idempotency::HEADER).iter();
    let Some(first) = values.next() else {
        return Ok(());
    };
    let invalid =
        |detail: String| ApiError::bad_request(ProblemCode::InvalidIdempotencyKey, detail);
    if values.next().is_some() {
        return Err(invalid(format!(
            "{} was given more than once",
            idempotency::HEADER
        )));
    }
    let text = first
        .to_str()
        .map_err(|_| invalid(idempotency::InvalidKey.to_string()))?;
    IdempotencyKey::parse(text).map_err(|e| invalid(e.to_string()))?;
    Ok(())
}
