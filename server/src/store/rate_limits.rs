//! Tenants' own token-bucket rates (`tenant_rate_limits`, migration 0014).

use sqlx::{PgExecutor, Row};
use uuid::Uuid;

/// One bucket's rate as stored: the bucket's name, tokens per second, burst.
#[derive(Debug, Clone, PartialEq)]
pub struct RateRow {
    pub bucket: String,
    pub per_second: f64,
    pub burst: i32,
}

pub async fn list_tenant_rate_limits(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
) -> sqlx::Result<Vec<RateRow>> {
    let rows = sqlx::query(
        "SELECT bucket, per_second, burst FROM tenant_rate_limits
          WHERE tenant_id = $1 ORDER BY bucket",
    )
    .bind(tenant)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(RateRow {
                bucket: row.try_get("bucket")?,
                per_second: row.try_get("per_second")?,
                burst: row.try_get("burst")?,
            })
        })
        .collect()
}

/// Writes the given buckets' rates (one statement over arrays).
pub async fn upsert_tenant_rate_limits(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    rows: &[RateRow],
) -> sqlx::Result<()> {
    let buckets: Vec<&str> = rows.iter().map(|r| r.bucket.as_str()).collect();
    let rates: Vec<f64> = rows.iter().map(|r| r.per_second).collect();
    let bursts: Vec<i32> = rows.iter().map(|r| r.burst).collect();
    sqlx::query(
        "INSERT INTO tenant_rate_limits (tenant_id, bucket, per_second, burst)
         SELECT $1, b, r, s FROM unnest($2::text[], $3::float8[], $4::int[]) AS t (b, r, s)
         ON CONFLICT (tenant_id, bucket) DO UPDATE
            SET per_second = excluded.per_second, burst = excluded.burst, updated_at = now()",
    )
    .bind(tenant)
    .bind(&buckets)
    .bind(&rates)
    .bind(&bursts)
    .execute(db)
    .await?;
    Ok(())
}

/// Removes the tenant's rates of every bucket not in `keep`: those take the
/// server's defaults again.
pub async fn delete_other_tenant_rate_limits(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    keep: &[&str],
) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM tenant_rate_limits WHERE tenant_id = $1 AND bucket <> ALL($2)")
        .bind(tenant)
        .bind(keep)
        .execute(db)
        .await?;
    Ok(())
}

/// A tenant's own cap on its open streams per instance (`tenants`,
/// migration 0025); `None`: the server's share.
pub async fn find_tenant_max_open_streams(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar("SELECT max_open_streams FROM tenants WHERE id = $1")
        .bind(tenant)
        .fetch_optional(db)
        .await
        .map(Option::flatten)
}

pub async fn set_tenant_max_open_streams(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    max: Option<i32>,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE tenants SET max_open_streams = $2 WHERE id = $1")
        .bind(tenant)
        .bind(max)
        .execute(db)
        .await?;
    Ok(())
}
