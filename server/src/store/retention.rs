//! The retention purge's statements. Each deletes at most one batch, in its
//! own short statement (autocommit), so no purge holds locks or an xid for
//! longer than a batch takes: the feed horizon moves on between batches.
//!
//! The oldest rows are found by walking an existing index in id order
//! (`LIMIT batch`), then filtered by age: ids grow with time, so this reads
//! one batch of index entries whether or not anything is old enough, without
//! a new age index on the hot tables.

use uuid::Uuid;

use crate::deliveries::status::DeliveryStatus;

/// What one delivery batch removed.
#[derive(Debug, Default, Clone, Copy, sqlx::FromRow)]
pub struct DeliveriesPurged {
    pub deliveries: i64,
    pub notifications: i64,
    pub alerts: i64,
}

/// Where final deliveries are kept: `deliveries` (skipped, dead, and in-app
/// rows written `sent`; sent rows of versions before migration 0022) and
/// `deliveries_sent` (what the outbox's completion moved there).
#[derive(Debug, Clone, Copy)]
pub enum DeliveryTable {
    Deliveries,
    Sent,
}

impl DeliveryTable {
    pub const fn name(self) -> &'static str {
        match self {
            DeliveryTable::Deliveries => "deliveries",
            DeliveryTable::Sent => "deliveries_sent",
        }
    }
}

/// Deletes up to `batch` of the tenant's oldest deliveries in `status` (a
/// final one: sent, skipped or dead) stored in `table` (`deliveries_sent`
/// holds `sent` only) created more than `older_than_secs` ago;
/// with them the notifications none of whose deliveries remain, and the alerts
/// none of whose notifications remain (and that no expansion is still
/// writing). Walks, in id order, the primary key for `sent` (most rows) and
/// `deliveries_unsent (tenant_id, status, id)` for the others: the status is
/// a literal of the statement (a closed set), so the planner matches the
/// partial index.
///
/// Every modifying part sees the statement's snapshot, so "what remains"
/// excludes what this statement deletes, explicitly. A delivery re-queued
/// between the scan and the delete is kept: the status is checked again on
/// the row being deleted.
pub async fn purge_deliveries(
    db: impl sqlx::PgExecutor<'_>,
    table: DeliveryTable,
    tenant: Uuid,
    status: DeliveryStatus,
    older_than_secs: f64,
    batch: i64,
) -> sqlx::Result<DeliveriesPurged> {
    sqlx::query_as(&format!(
        "WITH oldest AS (
             SELECT tenant_id, id, created_at FROM {table}
              WHERE tenant_id = $1 AND status = {status}
              ORDER BY id LIMIT $3
         ),
         gone AS (
             DELETE FROM {table} d USING oldest o
              WHERE d.tenant_id = o.tenant_id AND d.id = o.id AND d.status = {status}
                AND o.created_at < now() - make_interval(secs => $2)
             RETURNING d.tenant_id, d.id, d.alert_id, d.recipient_id, d.channel
         ),
         -- A delivery's notification is found by the natural key, the primary
         -- key (migration 0019): the alert's (event type, entity) and the
         -- delivery's (recipient, channel). Its other deliveries (one per
         -- endpoint) by its natural key within the alert, (alert, recipient,
         -- channel): deliveries_by_alert_recipient and its twin on
         -- deliveries_sent. No index holds the digest. The ids of the two
         -- tables are one sequence's, so `gone` excludes by id in both.
         gone_notifications AS (
             DELETE FROM notifications n
              USING (SELECT DISTINCT g.tenant_id, g.alert_id, a.event_type, a.entity_id,
                                     g.recipient_id, g.channel
                       FROM gone g
                       JOIN alerts a ON a.tenant_id = g.tenant_id AND a.id = g.alert_id) g
              WHERE n.tenant_id = g.tenant_id AND n.event_type = g.event_type
                AND n.entity_id = g.entity_id AND n.recipient_id = g.recipient_id
                AND n.channel = g.channel AND n.alert_id = g.alert_id
                AND NOT EXISTS (SELECT 1 FROM deliveries d
                                 WHERE d.tenant_id = n.tenant_id AND d.alert_id = n.alert_id
                                   AND d.recipient_id = n.recipient_id AND d.channel = n.channel
                                   AND d.id NOT IN (SELECT id FROM gone))
                AND NOT EXISTS (SELECT 1 FROM deliveries_sent d
                                 WHERE d.tenant_id = n.tenant_id AND d.alert_id = n.alert_id
                                   AND d.recipient_id = n.recipient_id AND d.channel = n.channel
                                   AND d.id NOT IN (SELECT id FROM gone))
             RETURNING n.tenant_id, n.key, n.alert_id
         ),
         -- An alert's notifications share its (event type, entity): a prefix
         -- of the primary key (no index by alert since migration 0020).
         gone_alerts AS (
             DELETE FROM alerts a
              USING (SELECT DISTINCT tenant_id, alert_id FROM gone_notifications) g
              WHERE a.tenant_id = g.tenant_id AND a.id = g.alert_id
                AND NOT EXISTS (SELECT 1 FROM notifications n
                                 WHERE n.tenant_id = a.tenant_id AND n.event_type = a.event_type
                                   AND n.entity_id = a.entity_id AND n.alert_id = a.id
                                   AND n.key NOT IN (SELECT key FROM gone_notifications))
                AND NOT EXISTS (SELECT 1 FROM alert_expansions x
                                 WHERE x.tenant_id = a.tenant_id AND x.alert_id = a.id AND NOT x.done)
             RETURNING a.id
         )
         SELECT (SELECT count(*) FROM gone) AS deliveries,
                (SELECT count(*) FROM gone_notifications) AS notifications,
                (SELECT count(*) FROM gone_alerts) AS alerts",
        status = status.as_sql(),
        table = table.name()
    ))
    .bind(tenant)
    .bind(older_than_secs)
    .bind(batch)
    .fetch_one(db)
    .await
}

/// A table of feed items, positioned by `(tenant_id, id)`.
#[derive(Debug, Clone, Copy)]
pub enum FeedTable {
    Events,
    InboxItems,
}

impl FeedTable {
    pub const fn name(self) -> &'static str {
        match self {
            FeedTable::Events => "events",
            FeedTable::InboxItems => "inbox_items",
        }
    }
}

/// Deletes up to `batch` of the tenant's oldest feed items (by id, the
/// primary key) created more than `older_than_secs` ago. A batch that deleted
/// anything bumps the tenant's `feed_purges` in the same statement: badge
/// counts carried over from an earlier statement (`store::feed`, the counts'
/// base) may include what it deleted, and are trusted only under the same
/// counter.
pub async fn purge_feed_items(
    db: impl sqlx::PgExecutor<'_>,
    table: FeedTable,
    tenant: Uuid,
    older_than_secs: f64,
    batch: i64,
) -> sqlx::Result<u64> {
    // The table name is one of two constants, never input.
    let sql = format!(
        "WITH oldest AS (
             SELECT tenant_id, id, created_at FROM {table}
              WHERE tenant_id = $1 ORDER BY id LIMIT $3
         ),
         gone AS (
             DELETE FROM {table} t USING oldest o
              WHERE t.tenant_id = o.tenant_id AND t.id = o.id
                AND o.created_at < now() - make_interval(secs => $2)
             RETURNING 1
         ),
         bumped AS (
             UPDATE tenants SET feed_purges = feed_purges + 1
              WHERE id = $1 AND EXISTS (SELECT 1 FROM gone)
         )
         SELECT count(*) FROM gone",
        table = table.name()
    );
    let deleted: i64 = sqlx::query_scalar(&sql)
        .bind(tenant)
        .bind(older_than_secs)
        .bind(batch)
        .fetch_one(db)
        .await?;
    Ok(deleted as u64)
}

/// Every tenant with the seconds its feed is kept: its own setting, else
/// `default_secs`; tenants that keep everything are left out.
pub async fn list_feed_retention(
    db: impl sqlx::PgExecutor<'_>,
    default_secs: Option<f64>,
) -> sqlx::Result<Vec<(Uuid, f64)>> {
    sqlx::query_as(
        "SELECT id, coalesce(feed_retention_secs::float8, $1) FROM tenants
          WHERE coalesce(feed_retention_secs::float8, $1) IS NOT NULL",
    )
    .bind(default_secs)
    .fetch_all(db)
    .await
}

pub async fn list_tenant_ids(db: impl sqlx::PgExecutor<'_>) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar("SELECT id FROM tenants")
        .fetch_all(db)
        .await
}

/// Sets how long the tenant's feed is kept (`None`: the server's default).
/// False when there is no such tenant.
pub async fn set_feed_retention(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    secs: Option<i64>,
) -> sqlx::Result<bool> {
    let done = sqlx::query("UPDATE tenants SET feed_retention_secs = $2 WHERE id = $1")
        .bind(tenant)
        .bind(secs)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Deletes up to `batch` NATS inbox records received more than
/// `older_than_secs` ago (`inbox_messages_age`).
pub async fn purge_inbox_messages(
    db: impl sqlx::PgExecutor<'_>,
    older_than_secs: f64,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM inbox_messages WHERE message_id IN (
             SELECT message_id FROM inbox_messages
              WHERE received_at < now() - make_interval(secs => $1)
              ORDER BY received_at LIMIT $2)",
    )
    .bind(older_than_secs)
    .bind(batch)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes up to `batch` one-by-one reads at or below their user's read
/// watermark: the watermark already says they are read. Moving the
/// watermark deletes them too (`store::feed`); this sweeps what a race left.
pub async fn purge_item_reads(db: impl sqlx::PgExecutor<'_>, batch: i64) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM item_reads r USING (
             SELECT r.tenant_id, r.user_id, r.item_id
               FROM item_reads r
               JOIN feed_state s ON s.tenant_id = r.tenant_id AND s.user_id = r.user_id
              WHERE (r.tx, r.item_id) <= (s.read_tx, s.read_id)
              LIMIT $1) old
          WHERE r.tenant_id = old.tenant_id AND r.user_id = old.user_id AND r.item_id = old.item_id",
    )
    .bind(batch)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes up to `batch` of a tenant's finished digests (with their items)
/// in `statuses`, finished more than `older_than_secs` ago.
pub async fn purge_digests(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    statuses: &[&str],
    older_than_secs: f64,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "DELETE FROM digests WHERE tenant_id = $1 AND id IN (
             SELECT id FROM digests
              WHERE tenant_id = $1 AND status = ANY($2)
                AND COALESCE(sent_at, decided_at, flush_at) < now() - make_interval(secs => $3)
              LIMIT $4)",
    )
    .bind(tenant)
    .bind(statuses)
    .bind(older_than_secs)
    .bind(batch)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
