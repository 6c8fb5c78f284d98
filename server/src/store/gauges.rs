//! The queries behind the sampled gauges (`crate::workers::gauges`): read-only, one
//! statement each, no tenant (they describe the whole service).

use super::deliveries::STATUS_SQL;
use crate::deliveries::status::{DeliveryStatus, DEAD_SQL, UNFINISHED_SQL};

/// Deliveries not yet final, per channel and status, with the age of the
/// oldest. Reads the claim's partial index (`deliveries_claimable`), so it
/// costs what the backlog is, not what the table is.
#[derive(Debug, sqlx::FromRow)]
pub struct BacklogRow {
    pub channel: String,
    pub status: DeliveryStatus,
    pub deliveries: i64,
    pub oldest_secs: f64,
}

pub async fn read_outbox_backlog(db: impl sqlx::PgExecutor<'_>) -> sqlx::Result<Vec<BacklogRow>> {
    sqlx::query_as(&format!(
        "SELECT channel, {status} AS status, count(*) AS deliveries,
                extract(epoch FROM now() - min(created_at))::float8 AS oldest_secs
           FROM deliveries
          WHERE status IN {UNFINISHED_SQL}
          GROUP BY 1, 2",
        status = *STATUS_SQL
    ))
    .fetch_all(db)
    .await
}

/// Dead deliveries stored, per channel (the `deliveries_dead` partial index).
pub async fn count_dead_deliveries(
    db: impl sqlx::PgExecutor<'_>,
) -> sqlx::Result<Vec<(String, i64)>> {
    sqlx::query_as(&format!(
        "SELECT channel, count(*) FROM deliveries WHERE status = {DEAD_SQL} GROUP BY channel"
    ))
    .fetch_all(db)
    .await
}

/// Seconds since the oldest transaction that holds back the feed horizon
/// began: running transactions with an xid (in any database of the cluster)
/// and prepared transactions. Zero when there is none. Seeing other roles'
/// sessions needs `pg_read_all_stats` (or superuser); without it the value
/// covers this role's sessions only.
pub async fn read_horizon_lag(db: impl sqlx::PgExecutor<'_>) -> sqlx::Result<f64> {
    sqlx::query_scalar(
        "SELECT coalesce(extract(epoch FROM now() - min(started)), 0)::float8
           FROM (SELECT xact_start AS started FROM pg_stat_activity
                  WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
                 UNION ALL
                 SELECT prepared FROM pg_prepared_xacts) holders",
    )
    .fetch_one(db)
    .await
}
