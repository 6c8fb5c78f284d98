//! Idempotency: one fingerprint, one rule, two ways a key is recorded.
//!
//! **The rule.** A request carries a key and is fingerprinted
//! ([`Fingerprint`], canonical JSON). The first request with a key does the
//! work and records the key, its fingerprint and what it produced, in the same
//! transaction as the work. A later request with the same key and the same
//! fingerprint gets that result again and changes nothing; with another
//! fingerprint it is refused ([`KeyReused`], 422 `idempotency_key_reused`).
//!
//! **Where a key is recorded** depends on what it guards; both use this
//! module's fingerprint and rule:
//! - the `Idempotency-Key` header (any POST; today `POST /v1/alerts`): a row
//!   in `idempotency_keys` holding the saved response, with the lease protocol
//!   below, kept for the retention period;
//! - an event's `idempotency_key` body field: the event row itself
//!   (`events.idempotency_key` and `request_fingerprint`, unique per tenant),
//!   kept as long as the event. The event is its own saved response, and a
//!   concurrent duplicate waits for the first to commit (the unique index)
//!   rather than getting a 409: a batch of a thousand events holds many keys
//!   at once, and producers retry whole batches. See `crate::feed::events`.
//!
//! **The header's lease protocol:**
//! 1. [`begin`] inserts the key with the request's fingerprint and a lease, in
//!    its own committed statement. A concurrent duplicate therefore sees the
//!    row at once and gets 409 with Retry-After, instead of queueing on the
//!    unique index.
//! 2. The request's writes and [`Lease::save`] (the response) commit in ONE
//!    transaction: either the effect and its saved response exist, or neither.
//!    `save` is guarded by the lease's owner id, so if a slow first request
//!    lost its lease to a retry, its transaction rolls back rather than answer
//!    twice.
//! 3. A request that fails without a response worth keeping (validation
//!    problems never get here; internal errors do) releases the key, so the
//!    client can retry at once. A request that dies leaves the lease to expire.
//!
//! Keys are scoped per (tenant, path) and purged by [`run_purge`] after the
//! retention period. Nothing here knows HTTP: the saved response is what the
//! handler rendered, stored as given.

mod fingerprint;

use std::time::Duration;

use sqlx::PgConnection;
use uuid::Uuid;

pub use fingerprint::{canonical_json, Fingerprint};

use crate::{
    app::shutdown::Shutdown, app::state::AppState, db::PrimaryPool, store::idempotency as store,
};

pub const HEADER: &str = "Idempotency-Key";
pub const REPLAYED_HEADER: &str = "Idempotency-Replayed";
pub const MAX_KEY_LEN: usize = 255;

/// The key was used before with a different request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this idempotency key was used with a different request")]
pub struct KeyReused;

#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    #[error(transparent)]
    KeyReused(#[from] KeyReused),
    /// A request with this key is still being processed (or lost its lease
    /// to a retry while finishing); try again shortly.
    #[error("a request with this {HEADER} is still being processed")]
    InFlight,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Seconds a client should wait before retrying a request in flight.
pub const IN_FLIGHT_RETRY_AFTER_SECS: u64 = 1;

/// How long a release that failed for want of a primary is tried again: a
/// failover's length, well within the lease.
const RELEASE_RETRY_FOR: Duration = Duration::from_secs(45);

/// An `Idempotency-Key` header value: 1..=255 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{HEADER} must be 1 to {MAX_KEY_LEN} printable ASCII characters")]
pub struct InvalidKey;

impl IdempotencyKey {
    pub fn parse(value: &str) -> Result<Self, InvalidKey> {
        if value.is_empty()
            || value.len() > MAX_KEY_LEN
            || !value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        {
            return Err(InvalidKey);
        }
        Ok(IdempotencyKey(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A request under an `Idempotency-Key`: what [`begin`] records.
#[derive(Debug, Clone)]
pub struct IdempotencyRequest {
    pub key: IdempotencyKey,
    /// The scope of the key (the request path).
    pub path: String,
    pub fingerprint: Fingerprint,
}

/// A response as the handler rendered it; stored and replayed as given.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pool: &PrimaryPool,
    tenant: Uuid,
    request: IdempotencyRequest,
    lease: Duration,
) -> Result<Begin, IdempotencyError> {
    let owner = Uuid::new_v4();
    let IdempotencyRequest {
        key,
        path,
        fingerprint,
    } = request;
    let key = key.0;
    let claim = store::KeyClaim {
        tenant,
        path: &path,
        key: &key,
        fingerprint: fingerprint.as_bytes(),
        owner,
        lease,
    };
    let proceed = || {
        Begin::Proceed(Lease {
            tenant,
            path: path.clone(),
            key: key.clone(),
            owner,
        })
    };
    // A claim whose answer was lost with the primary may still have
    // committed (on the synchronous standby that took over): release it as
    // a failed request would, or the client's retry meets 409 for a lease.
    let unanswered = |err: sqlx::Error| async {
        if crate::store::is_unavailable(&err) {
            if let Begin::Proceed(lease) = proceed() {
                lease.release(pool).await;
            }
        }
        IdempotencyError::from(err)
    };
    // Two rounds: the row may vanish between our insert and our read (released
    // by a failed first request, or purged); then we simply try again.
    for _ in 0..2 {
        match store::try_insert_key(pool, &claim).await {
            Ok(true) => return Ok(proceed()),
            Ok(false) => {}
            Err(err) => return Err(unanswered(err).await),
        }
        let Some(row) = store::get_key(pool, tenant, &path, &key).await? else {
            continue;
        };
        if !fingerprint.matches(&row.fingerprint) {
            return Err(KeyReused.into());
        }
        if let (Some(status), Some(body)) = (row.status_code, row.response_body) {
            return Ok(Begin::Replay(SavedResponse {
                status: status as u16,
                body,
            }));
        }
        if row.lease_left_secs > 0.0 {
            return Err(IdempotencyError::InFlight);
        }
        match store::take_over_expired_key(pool, &claim).await {
            Ok(true) => return Ok(proceed()),
            Ok(false) => {}
            Err(err) => return Err(unanswered(err).await),
        }
    }
    Err(IdempotencyError::InFlight)
}

impl Lease {
    /// Stores the response in the transaction that holds the request's writes.
    pub async fn save(
        &self,
        conn: &mut PgConnection,
        response: &SavedResponse,
    ) -> Result<(), IdempotencyError> {
        if store::save_response(
            conn,
            self.tenant,
            &self.path,
            &self.key,
            self.owner,
            response.status,
            &response.body,
        )
        .await?
        {
            Ok(())
        } else {
            // Our lease expired and a retry owns the key now: roll back.
            Err(IdempotencyError::InFlight)
        }
    }

    /// Best effort: if it fails, the lease simply expires. When it failed
    /// because no primary answers (a failover: the key's row is on the new
    /// primary, the request's writes are not), it is tried again in the
    /// background for [`RELEASE_RETRY_FOR`], so that the client's retry finds
    /// the key free once a primary answers rather than a lease later. Only a
    /// key without a saved response is ever released, so a commit whose
    /// answer was lost keeps its response for the retry to replay.
    pub async fn release(self, pool: &PrimaryPool) {
        let Err(err) =
            store::release_key(pool, self.tenant, &self.path, &self.key, self.owner).await
        else {
            return;
        };
        if !crate::store::is_unavailable(&err) {
            tracing::warn!(error = %err, "releasing an idempotency key failed; it will expire");
            return;
        }
        let pool = pool.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let mut backoff = crate::workers::backoff::Backoff::default();
            while started.elapsed() < RELEASE_RETRY_FOR {
                tokio::time::sleep(backoff.next_pause()).await;
                let released =
                    store::release_key(&pool, self.tenant, &self.path, &self.key, self.owner).await;
                if released.is_ok() {
                    return;
                }
            }
            tracing::warn!(
                "releasing an idempotency key failed while no primary answered; it will expire"
            );
        });
    }
}

/// Purges `Idempotency-Key`s past their retention, periodically (spawned by
/// `workers::spawn_all`).
pub async fn run_purge(state: AppState, mut shutdown: Shutdown) {
    let config = &state.settings.alerts;
    let retention = config.idempotency_retention();
    let interval = config.idempotency_purge_interval();
    // Batched like the retention purge (`crate::workers::retention`), with its settings.
    let batch = state.settings.retention.retention_batch;
    let pause = state.settings.retention.pause();
    loop {
        let mut purged = 0;
        loop {
            let started = std::time::Instant::now();
            match store::purge_keys(&state.pool, retention, batch).await {
                Ok(n) => {
                    crate::app::instruments::retention_batch("idempotency_keys", n, started);
                    purged += n;
                    if n < batch as u64 || shutdown.sleep(pause).await {
                        break;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "purging idempotency keys failed");
                    break;
                }
            }
        }
        if purged > 0 {
            tracing::info!(purged, "purged expired idempotency keys");
        }
        if shutdown.sleep(interval).await {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_be_short_printable_ascii() {
        assert!(IdempotencyKey::parse("abc-123_XYZ").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(256)).is_err());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse("tab\there").is_err());
        assert!(IdempotencyKey::parse("é").is_err());
    }
}
