//! Tenants and their API keys.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

pub struct NewTenant {
    pub tenant_id: Uuid,
    pub name: String,
    pub signing_secret: String,
    pub api_key_id: Uuid,
    pub created_at: DateTime<Utc>,
}

/// Creates a tenant with its first API key, in one transaction.
pub async fn create_tenant(
    pool: &PgPool,
    name: &str,
    signing_secret: &str,
    api_key_hash: &[u8],
) -> Result<NewTenant, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let tenant_id = Uuid::now_v7();
    let created_at: DateTime<Utc> = sqlx::query_scalar(
        "INSERT INTO tenants (id, name, signing_secret) VALUES ($1, $2, $3) RETURNING created_at",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(signing_secret)
    .fetch_one(&mut *tx)
    .await?;
    let api_key_id = insert_api_key(&mut *tx, tenant_id, api_key_hash).await?;
    tx.commit().await?;
    Ok(NewTenant {
        tenant_id,
        name: name.to_string(),
        signing_secret: signing_secret.to_string(),
        api_key_id,
        created_at,
    })
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

/// Revokes a key; false when the tenant has no such unrevoked key.
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
