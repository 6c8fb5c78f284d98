//! Standard Webhooks endpoints (table `webhook_endpoints`).

use chrono::{DateTime, Utc};
use uuid::Uuid;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EndpointRow {
    pub id: Uuid,
    pub url: String,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub secret: String,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

const COLUMNS: &str =
    "id, url, description, event_types, secret, previous_secret_expires_at, created_at";

pub async fn insert_endpoint(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
    url: &str,
    description: Option<&str>,
    event_types: Option<&[String]>,
    secret: &str,
) -> sqlx::Result<EndpointRow> {
    sqlx::query_as(&format!(
        "INSERT INTO webhook_endpoints (tenant_id, id, url, description, event_types, secret)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {COLUMNS}"
    ))
    .bind(tenant)
    .bind(id)
    .bind(url)
    .bind(description)
    .bind(event_types)
    .bind(secret)
    .fetch_one(db)
    .await
}

/// Endpoints in id order (UUIDv7: creation order) after `after`, at most `limit`.
pub async fn list_endpoints(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    after: Option<Uuid>,
    limit: i64,
) -> sqlx::Result<Vec<EndpointRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM webhook_endpoints
          WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id > $2)
          ORDER BY id LIMIT $3"
    ))
    .bind(tenant)
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await
}

pub async fn count_endpoints(db: impl sqlx::PgExecutor<'_>, tenant: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1")
        .bind(tenant)
        .fetch_one(db)
        .await
}

pub async fn get_endpoint(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
) -> sqlx::Result<Option<EndpointRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(db)
    .await
}

pub async fn delete_endpoint(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .execute(db)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// The current secret becomes the previous one, valid for `grace`; a previous
/// secret still in its grace period is dropped (only one rotation overlaps).
pub async fn rotate_endpoint_secret(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
    new_secret: &str,
    grace: std::time::Duration,
) -> sqlx::Result<Option<EndpointRow>> {
    sqlx::query_as(&format!(
        "UPDATE webhook_endpoints
            SET previous_secret = secret,
                previous_secret_expires_at = now() + make_interval(secs => $4),
                secret = $3
          WHERE tenant_id = $1 AND id = $2
          RETURNING {COLUMNS}"
    ))
    .bind(tenant)
    .bind(id)
    .bind(new_secret)
    .bind(grace.as_secs_f64())
    .fetch_optional(db)
    .await
}

/// Endpoints that receive `event_type`: those with no filter and those listing it.
pub async fn list_subscribed_endpoint_ids(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    event_type: &str,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM webhook_endpoints
         WHERE tenant_id = $1 AND (event_types IS NULL OR $2 = ANY(event_types))
         ORDER BY id",
    )
    .bind(tenant)
    .bind(event_type)
    .fetch_all(db)
    .await
}

/// Every endpoint's stored secrets, for sealing at start-up.
pub async fn list_endpoint_secrets(
    db: impl sqlx::PgExecutor<'_>,
) -> sqlx::Result<Vec<(Uuid, Uuid, String, Option<String>)>> {
    sqlx::query_as(
        "SELECT tenant_id, id, secret, previous_secret FROM webhook_endpoints
         ORDER BY tenant_id, id",
    )
    .fetch_all(db)
    .await
}

/// Replaces an endpoint's stored secrets if they are still `old` (a
/// concurrent rotation, or another instance sealing the same row, wins).
pub async fn replace_endpoint_secrets(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
    old: (&str, Option<&str>),
    new: (&str, Option<&str>),
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE webhook_endpoints SET secret = $5, previous_secret = $6
          WHERE tenant_id = $1 AND id = $2 AND secret = $3
            AND previous_secret IS NOT DISTINCT FROM $4",
    )
    .bind(tenant)
    .bind(id)
    .bind(old.0)
    .bind(old.1)
    .bind(new.0)
    .bind(new.1)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}
