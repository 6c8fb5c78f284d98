//! Idempotency-Key records (table `idempotency_keys`). The protocol is in
//! `crate::alerts::idempotency`; these are its statements.

use uuid::Uuid;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyRow {
    pub fingerprint: Vec<u8>,
    pub status_code: Option<i16>,
    pub response_body: Option<Vec<u8>>,
    /// Seconds until the in-flight lease expires; `<= 0` once it has.
    pub lease_left_secs: f64,
}

/// A request taking a key: who (`owner`), for what (`fingerprint`), for how
/// long before a retry may take it over (`lease`).
#[derive(Debug, Clone, Copy)]
pub struct KeyClaim<'a> {
    pub tenant: Uuid,
    pub path: &'a str,
    pub key: &'a str,
    pub fingerprint: &'a [u8],
    pub owner: Uuid,
    pub lease: std::time::Duration,
}

/// Takes the key for a first request: a committed row with no response and a
/// lease. False when the key is already there.
pub async fn try_insert_key(
    db: impl sqlx::PgExecutor<'_>,
    claim: &KeyClaim<'_>,
) -> sqlx::Result<bool> {
    let inserted: Option<i32> = sqlx::query_scalar(
        "INSERT INTO idempotency_keys (tenant_id, path, key, fingerprint, owner, locked_until)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
         ON CONFLICT DO NOTHING
         RETURNING 1",
    )
    .bind(claim.tenant)
    .bind(claim.path)
    .bind(claim.key)
    .bind(claim.fingerprint)
    .bind(claim.owner)
    .bind(claim.lease.as_secs_f64())
    .fetch_optional(db)
    .await?;
    Ok(inserted.is_some())
}

pub async fn get_key(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    path: &str,
    key: &str,
) -> sqlx::Result<Option<KeyRow>> {
    sqlx::query_as(
        "SELECT fingerprint, status_code, response_body,
                COALESCE(EXTRACT(EPOCH FROM locked_until - now())::float8, 0) AS lease_left_secs
           FROM idempotency_keys WHERE tenant_id = $1 AND path = $2 AND key = $3",
    )
    .bind(tenant)
    .bind(path)
    .bind(key)
    .fetch_optional(db)
    .await
}

/// A first request that crashed (or gave up) leaves an unanswered row whose lease
/// expires; a retry with the same fingerprint takes it over.
pub async fn take_over_expired_key(
    db: impl sqlx::PgExecutor<'_>,
    claim: &KeyClaim<'_>,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE idempotency_keys
            SET owner = $5, locked_until = now() + make_interval(secs => $6)
          WHERE tenant_id = $1 AND path = $2 AND key = $3 AND fingerprint = $4
            AND status_code IS NULL AND (locked_until IS NULL OR locked_until <= now())",
    )
    .bind(claim.tenant)
    .bind(claim.path)
    .bind(claim.key)
    .bind(claim.fingerprint)
    .bind(claim.owner)
    .bind(claim.lease.as_secs_f64())
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Saves the response in the caller's transaction (the one holding the
/// request's writes). False when this request no longer owns the key: its lease
/// expired and a retry took over, so this transaction must roll back.
pub async fn save_response(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    path: &str,
    key: &str,
    owner: Uuid,
    status_code: u16,
    body: &[u8],
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE idempotency_keys
            SET status_code = $5, response_body = $6, completed_at = now(), locked_until = NULL
          WHERE tenant_id = $1 AND path = $2 AND key = $3 AND owner = $4 AND status_code IS NULL",
    )
    .bind(tenant)
    .bind(path)
    .bind(key)
    .bind(owner)
    .bind(status_code as i16)
    .bind(body)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Gives the key back when the request failed without a response worth
/// replaying, so the client may retry at once.
pub async fn release_key(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    path: &str,
    key: &str,
    owner: Uuid,
) -> sqlx::Result<()> {
    sqlx::query(
        "DELETE FROM idempotency_keys
          WHERE tenant_id = $1 AND path = $2 AND key = $3 AND owner = $4 AND status_code IS NULL",
    )
    .bind(tenant)
    .bind(path)
    .bind(key)
    .bind(owner)
    .execute(db)
    .await?;
    Ok(())
}

/// Deletes up to `batch` keys older than `retention` that are answered or
/// abandoned (`idempotency_keys_age`). Returns how many went.
pub async fn purge_keys(
    db: impl sqlx::PgExecutor<'_>,
    retention: std::time::Duration,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM idempotency_keys k USING (
             SELECT tenant_id, path, key FROM idempotency_keys
              WHERE created_at < now() - make_interval(secs => $1)
                AND (status_code IS NOT NULL OR locked_until IS NULL OR locked_until < now())
              ORDER BY created_at LIMIT $2) old
          WHERE k.tenant_id = old.tenant_id AND k.path = old.path AND k.key = old.key",
    )
    .bind(retention.as_secs_f64())
    .bind(batch)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
