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

pub async fn find_signing_secret(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT signing_secret FROM tenants WHERE id = $1")
        .bind(tenant_id)
        .fetch_optional(db)
        .await
}
