//! Alerts, their notifications (one per key, ARCHITECTURE.md, invariant 4),
//! in-app inbox items and team expansion jobs. Deliveries: `store::deliveries`.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::notify::{notify, NotifyChannel};

/// Serialises fan-outs of one (tenant, event type, entity) — an optimisation
/// only (ARCHITECTURE.md, invariant 7): the unique key of `notifications` is the
/// guarantee. A loser of the try does not skip its work: it waits for the
/// winner's transaction to end, then inserts, and ON CONFLICT sorts out what the
/// winner committed (or, if the winner rolled back, the loser writes it all).
/// Returns true when it had to wait. Two statements: the caller's
/// transaction's connection. The wait is bounded by the session's
/// `lock_timeout`: past it the statement fails with `LOCK_NOT_AVAILABLE`
/// (`store::is_lock_timeout`) and the transaction is aborted.
pub async fn lock_alert_entity(conn: &mut PgConnection, lock_key: i64) -> sqlx::Result<bool> {
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(lock_key)
        .fetch_one(&mut *conn)
        .await?;
    if !got {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key)
            .execute(&mut *conn)
            .await?;
    }
    Ok(!got)
}

/// Column-wise rows for `insert_notifications` (one element per notification).
#[derive(Debug, Default)]
pub struct NotificationColumns {
    pub keys: Vec<String>,
    pub readable_keys: Vec<String>,
    pub recipients: Vec<String>,
    pub channels: Vec<&'static str>,
}

/// Inserts every notification in one statement and returns the keys that are
/// new. A key missing from the result already existed: a duplicate, never an
/// error (invariant 4). The unique key is the natural one (migration 0019);
/// ON CONFLICT names none, so the statement also runs on a schema before 0019,
/// where the digest is the key (the same rows conflict: invariant 5).
pub async fn insert_notifications(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    event_type: &str,
    entity_id: &str,
    rows: &NotificationColumns,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "INSERT INTO notifications
             (tenant_id, key, readable_key, alert_id, event_type, entity_id, recipient_id, channel)
         SELECT $1, k, rk, $2, $3, $4, r, c
           FROM unnest($5::text[], $6::text[], $7::text[], $8::text[]) AS t(k, rk, r, c)
         ON CONFLICT DO NOTHING
         RETURNING key",
    )
    .bind(tenant)
    .bind(alert_id)
    .bind(event_type)
    .bind(entity_id)
    .bind(&rows.keys)
    .bind(&rows.readable_keys)
    .bind(&rows.recipients)
    .bind(&rows.channels)
    .fetch_all(db)
    .await
}

/// The fields every in-app item of one alert shares.
pub struct InboxItemCommon<'a> {
    pub alert_id: Uuid,
    pub event_type: &'a str,
    pub entity_id: &'a str,
    pub subject: Option<&'a str>,
    pub payload: &'a serde_json::Value,
}

/// In-app alerts as feed items; `id` and `tx` take their defaults (the feed's
/// position scheme, invariant 2). A plain insert: items are written only for
/// the keys this transaction's `insert_notifications` created (invariant 4),
/// and inbox_items has no unique key of its own since migration 0019.
pub async fn insert_inbox_items(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    common: &InboxItemCommon<'_>,
    recipients: &[String],
    keys: &[String],
) -> sqlx::Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO inbox_items
             (tenant_id, recipient_id, notification_key, alert_id, type, entity_id, subject, payload)
         SELECT $1, r, k, $2, $3, $4, $5, $6
           FROM unnest($7::text[], $8::text[]) AS t(r, k)",
    )
    .bind(tenant)
    .bind(common.alert_id)
    .bind(common.event_type)
    .bind(common.entity_id)
    .bind(common.subject)
    .bind(common.payload)
    .bind(recipients)
    .bind(keys)
    .execute(db)
    .await?;
    Ok(())
}

/// [`insert_inbox_items`], answering each item's recipient and feed
/// position, for the delayed deliveries that follow them.
pub async fn insert_inbox_items_returning_positions(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    common: &InboxItemCommon<'_>,
    recipients: &[String],
    keys: &[String],
) -> sqlx::Result<Vec<(String, i64, i64)>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "INSERT INTO inbox_items
             (tenant_id, recipient_id, notification_key, alert_id, type, entity_id, subject, payload)
         SELECT $1, r, k, $2, $3, $4, $5, $6
           FROM unnest($7::text[], $8::text[]) AS t(r, k)
         RETURNING recipient_id, tx, id",
    )
    .bind(tenant)
    .bind(common.alert_id)
    .bind(common.event_type)
    .bind(common.entity_id)
    .bind(common.subject)
    .bind(common.payload)
    .bind(recipients)
    .bind(keys)
    .fetch_all(db)
    .await
}

/// Wakes the team expansion workers when the surrounding transaction commits.
pub async fn notify_expansion(db: impl PgExecutor<'_>, tenant: Uuid) -> sqlx::Result<()> {
    notify(db, NotifyChannel::Expansion, &tenant.to_string()).await
}

pub struct NewAlertRow<'a> {
    pub id: Uuid,
    pub event_type: &'a str,
    pub entity_id: &'a str,
    pub subject: Option<&'a str>,
    pub payload: &'a serde_json::Value,
    pub channels: &'a [&'a str],
    pub team_id: Option<&'a str>,
    /// The category the alert is sent under (migration 0024).
    pub category: Option<&'a str>,
    /// The alert's own delivery rules (migration 0026), as stored.
    pub delivery: Option<&'a serde_json::Value>,
}

/// Writes the alert row. Without a category or delivery rules, the statement
/// names neither column, so it also runs on a schema before migration 0024.
pub async fn insert_alert(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert: &NewAlertRow<'_>,
) -> sqlx::Result<()> {
    let sql = match (alert.category, alert.delivery) {
        (_, Some(_)) => {
            "INSERT INTO alerts (tenant_id, id, event_type, entity_id, subject, payload, channels, team_id,
                                 category, delivery)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        }
        (None, None) => {
            "INSERT INTO alerts (tenant_id, id, event_type, entity_id, subject, payload, channels, team_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        }
        (Some(_), None) => {
            "INSERT INTO alerts (tenant_id, id, event_type, entity_id, subject, payload, channels, team_id,
                                 category)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        }
    };
    let mut query = sqlx::query(sql)
        .bind(tenant)
        .bind(alert.id)
        .bind(alert.event_type)
        .bind(alert.entity_id)
        .bind(alert.subject)
        .bind(alert.payload)
        .bind(alert.channels)
        .bind(alert.team_id);
    if alert.category.is_some() || alert.delivery.is_some() {
        query = query.bind(alert.category);
    }
    if let Some(delivery) = alert.delivery {
        query = query.bind(delivery);
    }
    query.execute(db).await?;
    Ok(())
}

/// The alert that first created any of the notifications (`recipients[i]`,
/// `channels[i]`) of (event type, entity): what a full replay answers with.
/// Found by the natural key (the primary key since migration 0019).
pub async fn find_original_alert_id(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    event_type: &str,
    entity_id: &str,
    recipients: &[String],
    channels: &[&str],
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(
        "SELECT n.alert_id FROM notifications n
           JOIN unnest($4::text[], $5::text[]) AS t(r, c)
             ON n.recipient_id = t.r AND n.channel = t.c
          WHERE n.tenant_id = $1 AND n.event_type = $2 AND n.entity_id = $3
          ORDER BY n.created_at, n.alert_id LIMIT 1",
    )
    .bind(tenant)
    .bind(event_type)
    .bind(entity_id)
    .bind(recipients)
    .bind(channels)
    .fetch_optional(db)
    .await
}

/// A background expansion job over a team's members, or (`team_id` `None`)
/// over named recipients, sorted: the job's cursor walks them in that order.
pub async fn insert_expansion(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    team_id: Option<&str>,
    recipients: Option<&[String]>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO alert_expansions (tenant_id, alert_id, team_id, recipients)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(tenant)
    .bind(alert_id)
    .bind(team_id)
    .bind(recipients)
    .execute(db)
    .await?;
    Ok(())
}

/// An unfinished expansion job, with what fan-out needs from its alert.
#[derive(Debug, sqlx::FromRow)]
pub struct ExpansionJob {
    pub tenant_id: Uuid,
    pub alert_id: Uuid,
    /// `None`: the job walks `recipients` instead (migration 0016).
    pub team_id: Option<String>,
    pub recipients: Option<Vec<String>>,
    pub after_user_id: Option<String>,
    pub event_type: String,
    pub entity_id: String,
    pub subject: Option<String>,
    pub payload: serde_json::Value,
    pub channels: Vec<String>,
}

/// Locks an open job nobody else holds, for the rest of the caller's (short,
/// database-only) transaction: of the first tenant in `tenants` that has one
/// (their order is the fairness rule, [`list_expansion_tenants`]), its oldest.
/// Other workers skip it.
pub async fn claim_expansion(
    db: impl PgExecutor<'_>,
    tenants: &[Uuid],
) -> sqlx::Result<Option<ExpansionJob>> {
    sqlx::query_as(
        "SELECT e.tenant_id, e.alert_id, e.team_id, e.recipients, e.after_user_id,
                a.event_type, a.entity_id, a.subject, a.payload, a.channels
           FROM alert_expansions e
           JOIN alerts a ON a.tenant_id = e.tenant_id AND a.id = e.alert_id
          WHERE NOT e.done AND e.tenant_id = ANY($1)
          ORDER BY array_position($1, e.tenant_id), e.created_at
          LIMIT 1
          FOR UPDATE OF e SKIP LOCKED",
    )
    .bind(tenants)
    .fetch_optional(db)
    .await
}

/// The tenants with open expansion jobs (at most `limit`), read without
/// locking anything, in turn order: the tenant whose latest batch is oldest
/// first. A batch moves its job's `updated_at` to now, so a tenant served a
/// moment ago goes to the back, behind every tenant that has waited longer
/// (a new job's `updated_at` is its creation): round robin, one batch per
/// tenant per turn, however large a tenant's backlog. (Oldest job first, as
/// before, made one tenant's backlog delay every other tenant's alerts until
/// it was done.)
pub async fn list_expansion_tenants(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT tenant_id FROM (
             SELECT tenant_id, max(updated_at) AS served FROM alert_expansions
             WHERE NOT done GROUP BY tenant_id
         ) t ORDER BY served LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Moves the job's cursor in the batch's own transaction: commit both or neither.
pub async fn advance_expansion(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    after_user_id: Option<&str>,
    processed: i64,
    done: bool,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE alert_expansions
            SET after_user_id = COALESCE($3, after_user_id), expanded = expanded + $4, done = $5,
                updated_at = now()
          WHERE tenant_id = $1 AND alert_id = $2",
    )
    .bind(tenant)
    .bind(alert_id)
    .bind(after_user_id)
    .bind(processed)
    .bind(done)
    .execute(db)
    .await?;
    Ok(())
}

#[derive(Debug, sqlx::FromRow)]
pub struct AlertRow {
    pub id: Uuid,
    pub event_type: String,
    pub entity_id: String,
    pub subject: Option<String>,
    pub payload: serde_json::Value,
    pub channels: Vec<String>,
    pub team_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// NULL: no background expansion; otherwise whether it has finished.
    pub expansion_done: Option<bool>,
    pub expanded: Option<i64>,
}

pub async fn get_alert(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
) -> sqlx::Result<Option<AlertRow>> {
    sqlx::query_as(
        "SELECT a.id, a.event_type, a.entity_id, a.subject, a.payload, a.channels, a.team_id,
                a.created_at, e.done AS expansion_done, e.expanded
           FROM alerts a
           LEFT JOIN alert_expansions e ON e.tenant_id = a.tenant_id AND e.alert_id = a.id
          WHERE a.tenant_id = $1 AND a.id = $2",
    )
    .bind(tenant)
    .bind(alert_id)
    .fetch_optional(db)
    .await
}
