//! The Idempotency-Key header, reusable by any POST.
//!
//! Protocol:
//! 1. `begin` inserts the key with the request's fingerprint and a lease, in its
//!    own committed statement. A concurrent duplicate therefore sees the row at
//!    once and gets 409 with Retry-After, instead of queueing on the unique index.
//! 2. The handler's writes and `Lease::save` (the response) commit in ONE
//!    transaction: either the effect and its saved response exist, or neither.
//!    `save` is guarded by the lease's owner id, so if a slow first request lost
//!    its lease to a retry, its transaction rolls back rather than answer twice.
//! 3. A request that fails without a response worth keeping (validation
//!    problems never get here; internal errors do) releases the key, so the
//!    client can retry at once. A request that dies leaves the lease to expire.
//!
//! The same key with another fingerprint is 422; a stored response is replayed
//! with `Idempotency-Replayed: true`. Keys are scoped per (tenant, path) and
//! purged by `purge_expired_keys` after the retention period.

use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    error::{ApiError, ApiResult},
    store::idempotency as store,
};

pub const HEADER: &str = "Idempotency-Key";
pub const REPLAYED_HEADER: &str = "Idempotency-Replayed";
pub const MAX_KEY_LEN: usize = 255;

/// Checks the header value: 1..=255 printable ASCII characters.
pub fn parse_key(value: &str) -> ApiResult<String> {
    if value.is_empty()
        || value.len() > MAX_KEY_LEN
        || !value.bytes().all(|b| (0x20..=0x7e).contains(&b))
    {
        return Err(ApiError::bad_request(
            "invalid_idempotency_key",
            format!("{HEADER} must be 1 to {MAX_KEY_LEN} printable ASCII characters"),
        ));
    }
    Ok(value.to_owned())
}

/// SHA-256 over method, path and the canonical JSON of the body (object keys
/// sorted — serde_json's map is ordered — and no insignificant whitespace), each
/// length-prefixed so that no two inputs share an encoding.
pub fn fingerprint(method: &str, path: &str, body: &serde_json::Value) -> Vec<u8> {
    let canonical = serde_json::to_vec(body).unwrap_or_default();
    let mut hasher = Sha256::new();
    for part in [method.as_bytes(), path.as_bytes(), &canonical] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().to_vec()
}

/// What a handler hands to `begin`.
#[derive(Debug, Clone)]
pub struct IdempotencyRequest {
    pub key: String,
    pub path: String,
    pub fingerprint: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct SavedResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

pub enum Begin {
    /// This request owns the key: do the work, then `save` in the same transaction.
    Proceed(Lease),
    /// An identical request was answered before: send this again.
    Replay(SavedResponse),
}

#[derive(Debug)]
pub struct Lease {
    tenant: Uuid,
    path: String,
    key: String,
    owner: Uuid,
}

pub async fn begin(
    pool: &sqlx::PgPool,
    tenant: Uuid,
    request: IdempotencyRequest,
    lease: std::time::Duration,
) -> ApiResult<Begin> {
    let owner = Uuid::new_v4();
    let IdempotencyRequest {
        key,
        path,
        fingerprint,
    } = request;
    // Two rounds: the row may vanish between our insert and our read (released
    // by a failed first request, or purged); then we simply try again.
    for _ in 0..2 {
        if store::try_insert_key(pool, tenant, &path, &key, &fingerprint, owner, lease).await? {
            return Ok(Begin::Proceed(Lease {
                tenant,
                path,
                key,
                owner,
            }));
        }
        let Some(row) = store::get_key(pool, tenant, &path, &key).await? else {
            continue;
        };
        if row.fingerprint != fingerprint {
            return Err(ApiError::unprocessable(
                "idempotency_key_reused",
                format!("this {HEADER} was used with a different request"),
            ));
        }
        if let (Some(status), Some(body)) = (row.status_code, row.response_body) {
            return Ok(Begin::Replay(SavedResponse {
                status: status as u16,
                body,
            }));
        }
        if row.lease_left_secs > 0.0 {
            return Err(in_flight());
        }
        if store::take_over_expired_key(pool, tenant, &path, &key, &fingerprint, owner, lease)
            .await?
        {
            return Ok(Begin::Proceed(Lease {
                tenant,
                path,
                key,
                owner,
            }));
        }
    }
    Err(in_flight())
}

fn in_flight() -> ApiError {
    ApiError::Conflict {
        code: "idempotency_key_in_flight",
        detail: format!("a request with this {HEADER} is still being processed"),
        retry_after_secs: Some(1),
    }
}

impl Lease {
    /// Stores the response in the transaction that holds the request's writes.
    pub async fn save(&self, conn: &mut PgConnection, status: u16, body: &[u8]) -> ApiResult<()> {
        if store::save_response(
            conn,
            self.tenant,
            &self.path,
            &self.key,
            self.owner,
            status,
            body,
        )
        .await?
        {
            Ok(())
        } else {
            // Our lease expired and a retry owns the key now: roll back.
            Err(in_flight())
        }
    }

    /// Best effort: if it fails, the lease simply expires.
    pub async fn release(self, pool: &sqlx::PgPool) {
        if let Err(err) =
            store::release_key(pool, self.tenant, &self.path, &self.key, self.owner).await
        {
            tracing::warn!(error = %err, "releasing an idempotency key failed; it will expire");
        }
    }
}

/// Periodic purge (spawned by `workers::spawn_all`).
pub async fn purge_expired_keys(
    pool: &sqlx::PgPool,
    retention: std::time::Duration,
) -> sqlx::Result<u64> {
    store::purge_keys(pool, retention).await
}

/// Purges Idempotency-Keys past their retention, periodically.
pub async fn run_purge(state: crate::state::AppState, mut shutdown: crate::shutdown::Shutdown) {
    let config = &state.settings.alerts;
    let retention = config.idempotency_retention();
    let interval = config.idempotency_purge_interval();
    loop {
        match purge_expired_keys(&state.pool, retention).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(purged = n, "purged expired idempotency keys"),
            Err(err) => tracing::warn!(error = %err, "purging idempotency keys failed"),
        }
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_must_be_short_printable_ascii() {
        assert!(parse_key("abc-123_XYZ").is_ok());
        assert!(parse_key(&"k".repeat(255)).is_ok());
        assert!(parse_key(&"k".repeat(256)).is_err());
        assert!(parse_key("").is_err());
        assert!(parse_key("tab\there").is_err());
        assert!(parse_key("é").is_err());
    }

    #[test]
    fn fingerprints_ignore_key_order_but_not_content_method_or_path() {
        let a = json!({"x": 1, "y": [1, 2]});
        let b: serde_json::Value = serde_json::from_str(r#"{ "y": [1,2], "x": 1 }"#).expect("json");
        assert_eq!(
            fingerprint("POST", "/v1/alerts", &a),
            fingerprint("POST", "/v1/alerts", &b)
        );
        assert_ne!(
            fingerprint("POST", "/v1/alerts", &a),
            fingerprint("POST", "/v1/alerts", &json!({"x": 2, "y": [1, 2]}))
        );
        assert_ne!(
            fingerprint("POST", "/v1/alerts", &a),
            fingerprint("PUT", "/v1/alerts", &a)
        );
        assert_ne!(
            fingerprint("POST", "/v1/alerts", &a),
            fingerprint("POST", "/v1/other", &a)
        );
    }
}
