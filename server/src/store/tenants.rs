//! Tenants and their API keys.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

pub async fn insert_tenant(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    name: &str,
    signing_secret: &str,
) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO tenants (id, name, signing_secret) VALUES ($1, $2, $3) RETURNING created_at",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(signing_secret)
    .fetch_one(db)
    .await
}

pub async fn insert_api_key(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    key_hash: &[u8],
) -> Result<Uuid, sqlx::Error> {
    let id = Uuid::now_v7();
    sqlx::query("INSERT INTO api_keys (tenant_id, id, key_hash) VALUES ($1, $2, $3)")
        .bind(tenant_id)
        .bind(id)
        .bind(key_hash)
        .execute(db)
        .await?;
    Ok(id)
}

pub async fn tenant_exists(db: impl PgExecutor<'_>, tenant_id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)")
        .bind(tenant_id)
        .fetch_one(db)
        .await
}

/// Revokes a key and returns its hash; `None` when the tenant has no such
/// unrevoked key.
pub async fn revoke_api_key(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    key_id: Uuid,
) -> Result<Option<Vec<u8>>, sqlx::Error> {
    sqlx::query_scalar(
        "UPDATE api_keys SET revoked_at = now()
         WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL
         RETURNING key_hash",
    )
    .bind(tenant_id)
    .bind(key_id)
    .fetch_optional(db)
    .await
}

pub async fn find_tenant_by_key_hash(
    db: impl PgExecutor<'_>,
    key_hash: &[u8],
) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar("SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL")
        .bind(key_hash)
        .fetch_optional(db)
        .await
}

/// A tenant's signing secrets as stored (sealed: `crate::tenants::secrets`): the
/// current one, and the previous one while its overlap lasts.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SigningKeyRow {
    pub signing_key_id: String,
    pub signing_secret: String,
    pub previous_signing_key_id: Option<String>,
    pub previous_signing_secret: Option<String>,
    pub previous_signing_expires_at: Option<DateTime<Utc>>,
}

const SIGNING_KEY_COLUMNS: &str = "signing_key_id, signing_secret,
    CASE WHEN previous_signing_expires_at > now() THEN previous_signing_key_id END
        AS previous_signing_key_id,
    CASE WHEN previous_signing_expires_at > now() THEN previous_signing_secret END
        AS previous_signing_secret,
    CASE WHEN previous_signing_expires_at > now() THEN previous_signing_expires_at END
        AS previous_signing_expires_at";

pub async fn find_signing_keys(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
) -> Result<Option<SigningKeyRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {SIGNING_KEY_COLUMNS} FROM tenants WHERE id = $1"
    ))
    .bind(tenant_id)
    .fetch_optional(db)
    .await
}

/// The current secret becomes the previous one, verifying for `overlap`; a
/// previous secret still in its overlap is dropped (one rotation at a time).
pub async fn rotate_signing_secret(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    new_key_id: &str,
    new_sealed_secret: &str,
    overlap: std::time::Duration,
) -> Result<Option<SigningKeyRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE tenants
            SET previous_signing_key_id = signing_key_id,
                previous_signing_secret = signing_secret,
                previous_signing_expires_at = now() + make_interval(secs => $4),
                signing_key_id = $2,
                signing_secret = $3
          WHERE id = $1
          RETURNING {SIGNING_KEY_COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(new_key_id)
    .bind(new_sealed_secret)
    .bind(overlap.as_secs_f64())
    .fetch_optional(db)
    .await
}

/// When (tenant, user)'s tokens start to count: tokens issued before it are
/// revoked. `None`: never revoked.
pub async fn find_user_token_cutoff(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT not_before FROM user_token_cutoffs WHERE tenant_id = $1 AND user_id = $2",
    )
    .bind(tenant_id)
    .bind(user_id)
    .fetch_optional(db)
    .await
}

/// Revokes every token of (tenant, user) issued until now. The cutoff only
/// moves forward, so a late, concurrent call cannot shorten a revocation.
pub async fn raise_user_token_cutoff(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO user_token_cutoffs (tenant_id, user_id, not_before) VALUES ($1, $2, now())
         ON CONFLICT (tenant_id, user_id) DO UPDATE
            SET not_before = GREATEST(user_token_cutoffs.not_before, EXCLUDED.not_before)
         RETURNING not_before",
    )
    .bind(tenant_id)
    .bind(user_id)
    .fetch_one(db)
    .await
}

/// Every tenant's stored signing secrets, for sealing at start-up.
pub async fn list_signing_secrets(
    db: impl PgExecutor<'_>,
) -> Result<Vec<(Uuid, String, Option<String>)>, sqlx::Error> {
    sqlx::query_as("SELECT id, signing_secret, previous_signing_secret FROM tenants ORDER BY id")
        .fetch_all(db)
        .await
}

/// Replaces a tenant's stored secrets if they are still `old`: a concurrent
/// rotation (or another instance sealing the same row) wins.
pub async fn replace_signing_secrets(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    old: (&str, Option<&str>),
    new: (&str, Option<&str>),
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE tenants SET signing_secret = $4, previous_signing_secret = $5
          WHERE id = $1 AND signing_secret = $2
            AND previous_signing_secret IS NOT DISTINCT FROM $3",
    )
    .bind(tenant_id)
    .bind(old.0)
    .bind(old.1)
    .bind(new.0)
    .bind(new.1)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}
