//! Deliveries (the outbox, table `deliveries`): written in the alert's
//! transaction (ARCHITECTURE.md, invariant 6), read and re-queued by
//! operators. The workers' claim and completion are in `store::outbox`; the
//! completion moves a sent delivery to `deliveries_sent` (migration 0022), so
//! every reader of sent deliveries here reads both tables. In-app deliveries,
//! written `sent`, stay in `deliveries`.

use std::sync::LazyLock;

use chrono::{DateTime, NaiveTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use tidings_core::Channel;
use uuid::Uuid;

use super::notify::{notify, NotifyChannel};
use crate::deliveries::status::{
    DeliveryStatus, PENDING_SQL, QUEUED_SQL, SENDING_SQL, SENT_SQL, UNFINISHED_SQL,
};

/// Column-wise rows for `insert_deliveries`.
#[derive(Debug, Default)]
pub struct DeliveryColumns {
    pub keys: Vec<String>,
    pub recipients: Vec<String>,
    pub channels: Vec<&'static str>,
    pub endpoint_ids: Vec<Option<Uuid>>,
    pub statuses: Vec<DeliveryStatus>,
    pub errors: Vec<Option<String>>,
}

impl DeliveryColumns {
    pub fn push(
        &mut self,
        key: &str,
        recipient: &str,
        channel: Channel,
        endpoint: Option<Uuid>,
        status: DeliveryStatus,
        error: Option<&str>,
    ) {
        self.keys.push(key.to_owned());
        self.recipients.push(recipient.to_owned());
        self.channels.push(channel.as_str());
        self.endpoint_ids.push(endpoint);
        self.statuses.push(status);
        self.errors.push(error.map(str::to_owned));
    }
}

/// Outbox entries, written in the alert's transaction. `sent` rows (in-app,
/// delivered by this very transaction) get their `sent_at`.
///
/// A plain insert, no ON CONFLICT: rows are written only for the keys this
/// transaction's `insert_notifications` created, whose primary key is the
/// one-per-key guarantee (invariant 4), so there is nothing to conflict with
/// (and a speculative insertion would cost each row a second WAL record).
/// One alert's rows take consecutive ids: neighbours in every index.
/// The statement: [`insert_deliveries_sql`].
pub async fn insert_deliveries(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    rows: &DeliveryColumns,
) -> sqlx::Result<u64> {
    if rows.keys.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query(insert_deliveries_sql())
        .bind(tenant)
        .bind(alert_id)
        .bind(&rows.keys)
        .bind(&rows.recipients)
        .bind(&rows.channels)
        .bind(&rows.endpoint_ids)
        .bind(&rows.statuses)
        .bind(&rows.errors)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}

static INSERT_DELIVERIES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO deliveries
             (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id, status,
              last_error, sent_at)
         SELECT $1, k, $2, r, c, e, s, err, CASE WHEN s = {SENT_SQL} THEN now() END
           FROM unnest($3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::text[])
                AS t(k, r, c, e, s, err)"
    )
});

static INSERT_DELIVERIES_WITH_TEMPLATE_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO deliveries
             (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id, status,
              last_error, sent_at, template_version_id)
         SELECT $1, k, $2, r, c, e, s, err, CASE WHEN s = {SENT_SQL} THEN now() END,
                CASE WHEN c = 'email' THEN $9::int8 END
           FROM unnest($3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::text[])
                AS t(k, r, c, e, s, err)"
    )
});

/// The statement of [`insert_deliveries`] (and of bench/sql/alert_ingest.sql).
pub fn insert_deliveries_sql() -> &'static str {
    &INSERT_DELIVERIES_SQL
}

/// [`insert_deliveries`] for an alert whose event type has a published email
/// template: its email rows record `template_version` (migration 0023), the
/// version they are rendered with when sent. A separate statement, so that
/// alerts without a template run the one above unchanged.
pub async fn insert_deliveries_with_email_template(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    rows: &DeliveryColumns,
    template_version: i64,
) -> sqlx::Result<u64> {
    if rows.keys.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query(&INSERT_DELIVERIES_WITH_TEMPLATE_SQL)
        .bind(tenant)
        .bind(alert_id)
        .bind(&rows.keys)
        .bind(&rows.recipients)
        .bind(&rows.channels)
        .bind(&rows.endpoint_ids)
        .bind(&rows.statuses)
        .bind(&rows.errors)
        .bind(template_version)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}

/// Column-wise waits of delayed deliveries, one entry per row of the
/// [`DeliveryColumns`] they go with (NULL: the row does not wait).
#[derive(Debug, Default)]
pub struct WaitColumns {
    pub delay_secs: Vec<Option<i32>>,
    pub unless: Vec<Option<&'static str>>,
    pub item_tx: Vec<Option<i64>>,
    pub item_id: Vec<Option<i64>>,
}

/// [`insert_deliveries`] for a fan-out with delayed deliveries (migration
/// 0026): a waiting row is due at the transaction's start plus its delay and
/// records what it waits on and the position of the in-app item it follows
/// (written by the same transaction, before it). `template_version` as in
/// [`insert_deliveries_with_email_template`], NULL for none. A statement of
/// its own, so that fan-outs without delays run the ones above unchanged.
pub async fn insert_waiting_deliveries(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    rows: &DeliveryColumns,
    waits: &WaitColumns,
    template_version: Option<i64>,
) -> sqlx::Result<u64> {
    if rows.keys.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query(&INSERT_WAITING_DELIVERIES_SQL)
        .bind(tenant)
        .bind(alert_id)
        .bind(&rows.keys)
        .bind(&rows.recipients)
        .bind(&rows.channels)
        .bind(&rows.endpoint_ids)
        .bind(&rows.statuses)
        .bind(&rows.errors)
        .bind(template_version)
        .bind(&waits.delay_secs)
        .bind(&waits.unless)
        .bind(&waits.item_tx)
        .bind(&waits.item_id)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}

static INSERT_WAITING_DELIVERIES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO deliveries
             (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id, status,
              last_error, sent_at, template_version_id, next_attempt_at, unless_mark, item_tx, item_id)
         SELECT $1, k, $2, r, c, e, s, err, CASE WHEN s = {SENT_SQL} THEN now() END,
                CASE WHEN c = 'email' THEN $9::int8 END,
                now() + COALESCE(delay, 0) * interval '1 second', unless, itx, iid
           FROM unnest($3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::text[],
                       $10::int4[], $11::text[], $12::int8[], $13::int8[])
                AS t(k, r, c, e, s, err, delay, unless, itx, iid)"
    )
});

/// A queued email or webhook delivery of an alert to a user with quiet hours.
#[derive(Debug, sqlx::FromRow)]
pub struct QuietHoursCandidate {
    pub id: i64,
    /// Its `next_attempt_at` as written.
    pub due: DateTime<Utc>,
    pub quiet_start: NaiveTime,
    pub quiet_end: NaiveTime,
    pub timezone: Option<String>,
}

/// The pending email and webhook deliveries of `alert_id` to those of
/// `recipients` who have quiet hours. Starts from the partial index of users
/// with quiet hours, so a tenant without any pays one probe of it.
pub async fn quiet_hours_candidates(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    recipients: &[&str],
) -> sqlx::Result<Vec<QuietHoursCandidate>> {
    sqlx::query_as(&QUIET_HOURS_CANDIDATES_SQL)
        .bind(tenant)
        .bind(alert_id)
        .bind(recipients)
        .fetch_all(db)
        .await
}

static QUIET_HOURS_CANDIDATES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT d.id, d.next_attempt_at AS due, u.quiet_start, u.quiet_end, u.timezone
           FROM users u
           JOIN deliveries d ON d.tenant_id = u.tenant_id AND d.alert_id = $2
                            AND d.recipient_id = u.user_id
          WHERE u.tenant_id = $1 AND u.user_id = ANY($3) AND u.quiet_start IS NOT NULL
            AND d.channel IN ('email', 'webhook') AND d.status = {PENDING_SQL}"
    )
});

/// Moves deliveries' `next_attempt_at` to the given instants (`ids` and
/// `due` side by side).
pub async fn delay_deliveries(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    ids: &[i64],
    due: &[DateTime<Utc>],
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE deliveries d SET next_attempt_at = v.due
           FROM unnest($2::int8[], $3::timestamptz[]) AS v(id, due)
          WHERE d.tenant_id = $1 AND d.id = v.id",
    )
    .bind(tenant)
    .bind(ids)
    .bind(due)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Wakes the outbox workers when the surrounding transaction commits.
pub async fn notify_outbox(db: impl PgExecutor<'_>, tenant: Uuid) -> sqlx::Result<()> {
    notify(db, NotifyChannel::Outbox, &tenant.to_string()).await
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeliveryRow {
    pub id: i64,
    pub alert_id: Uuid,
    pub recipient_id: String,
    #[sqlx(try_from = "String")]
    pub channel: Channel,
    pub notification_key: String,
    pub endpoint_id: Option<Uuid>,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// A delayed delivery's condition and item (migration 0026).
    pub unless_mark: Option<String>,
    pub item_tx: Option<i64>,
    pub item_id: Option<i64>,
    /// The watermark its last decision saw, and when it was made.
    pub decided_mark_tx: Option<i64>,
    pub decided_mark_id: Option<i64>,
    pub decided_at: Option<DateTime<Utc>>,
}

/// The status a delivery has, as operators, gauges and tests read it: the
/// stored `status` is the last recorded state, and a live lease makes a
/// `pending` or `retrying` row `sending` (the claim writes only the lease, so
/// that it is a HOT update: `store::outbox`, migration 0015). Rows claimed by a
/// version before 0015 are stored as `sending` and read as they are.
pub static STATUS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "CASE WHEN status IN {QUEUED_SQL} AND claimed_until > now() \
         THEN {SENDING_SQL} ELSE status END"
    )
});

/// The condition "has status `status`" (as [`STATUS_SQL`] reads it), with
/// the stored states as literals so that the planner can match the partial
/// indexes: `deliveries_unsent` for every state but `sent`, whose rows (the
/// bulk of the table) are walked through the primary key.
pub fn status_condition(status: DeliveryStatus) -> String {
    let literal = status.as_sql();
    match status {
        DeliveryStatus::Sent | DeliveryStatus::Dead | DeliveryStatus::Skipped => {
            format!("status = {literal}")
        }
        DeliveryStatus::Pending | DeliveryStatus::Retrying => {
            format!("status = {literal} AND (claimed_until IS NULL OR claimed_until <= now())")
        }
        DeliveryStatus::Sending => {
            format!("status IN {UNFINISHED_SQL} AND (status = {literal} OR claimed_until > now())")
        }
    }
}

static DELIVERY_COLUMNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "id, alert_id, recipient_id, channel, notification_key, endpoint_id, \
         {status} AS status, attempts, last_error, next_attempt_at, sent_at, created_at, \
         unless_mark, item_tx, item_id, decided_mark_tx, decided_mark_id, decided_at",
        status = *STATUS_SQL
    )
});

fn delivery_columns() -> &'static str {
    &DELIVERY_COLUMNS
}

/// An alert's deliveries ordered by (recipient, channel, id), after the key
/// `after` (recipient, channel, id), at most `limit`: the order of the indexes
/// on (tenant, alert, recipient, channel) of both tables, so a page reads one
/// ordered scan of each, at most `limit` rows apiece, and merges them (ties are
/// one recipient's webhook endpoints). One statement, one snapshot: a delivery
/// moved meanwhile is seen in exactly one of the two.
pub async fn list_alert_deliveries(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    after: Option<(&str, &str, i64)>,
    limit: i64,
) -> sqlx::Result<Vec<DeliveryRow>> {
    let (recipient, channel, id) = after.unwrap_or(("", "", 0));
    let arm = |table: &str| {
        format!(
            "(SELECT {} FROM {table}
               WHERE tenant_id = $1 AND alert_id = $2
                 AND (recipient_id, channel) >= ($3, $4)
                 AND (recipient_id, channel, id) > ($3, $4, $5)
               ORDER BY recipient_id, channel, id LIMIT $6)",
            delivery_columns()
        )
    };
    sqlx::query_as(&format!(
        "SELECT * FROM ({} UNION ALL {}) d
          ORDER BY recipient_id, channel, id LIMIT $6",
        arm("deliveries"),
        arm("deliveries_sent")
    ))
    .bind(tenant)
    .bind(alert_id)
    .bind(recipient)
    .bind(channel)
    .bind(id)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Deliveries in id order after `after_id`, optionally of one status, at
/// most `limit`. One statement text per status (a closed set of literals,
/// never input), so each is planned with its partial index. `sent` and no
/// status read `deliveries_sent` too (its primary key, in id order, merged
/// with `deliveries`' scan); the other states are in `deliveries` only.
pub async fn list_deliveries(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    status: Option<DeliveryStatus>,
    after_id: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<DeliveryRow>> {
    let hot = format!(
        "(SELECT {} FROM deliveries
           WHERE tenant_id = $1 AND ({}) AND id > $2
           ORDER BY id LIMIT $3)",
        delivery_columns(),
        status.map_or_else(|| "true".to_owned(), status_condition)
    );
    let sql = match status {
        None | Some(DeliveryStatus::Sent) => format!(
            "SELECT * FROM ({hot} UNION ALL
                 (SELECT {} FROM deliveries_sent
                   WHERE tenant_id = $1 AND id > $2
                   ORDER BY id LIMIT $3)) d
              ORDER BY id LIMIT $3",
            delivery_columns()
        ),
        Some(_) => hot,
    };
    sqlx::query_as(&sql)
        .bind(tenant)
        .bind(after_id.unwrap_or(0))
        .bind(limit)
        .fetch_all(db)
        .await
}

/// A delivery locked for an operator's decision.
#[derive(Debug, sqlx::FromRow)]
pub struct LockedDelivery {
    #[sqlx(flatten)]
    pub delivery: DeliveryRow,
    /// Seconds until the lease of the worker holding it ends (by the
    /// database's clock); `None` when no lease was ever taken.
    pub lease_left_secs: Option<f64>,
}

/// Locks one delivery; `None` when it is not this tenant's. A delivery in
/// `deliveries_sent` is final (nothing writes it but retention), so it is
/// read without a lock. Two statements, in this order: a completion that
/// moves the row while the first waits for its lock commits the delete and
/// the insert together, and the second statement's snapshot, taken after
/// that, finds it moved.
pub async fn lock_delivery(
    conn: &mut PgConnection,
    tenant: Uuid,
    id: i64,
) -> sqlx::Result<Option<LockedDelivery>> {
    let hot: Option<LockedDelivery> = sqlx::query_as(&format!(
        "SELECT {},
                EXTRACT(EPOCH FROM claimed_until - now())::float8 AS lease_left_secs
           FROM deliveries WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
        delivery_columns()
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    if hot.is_some() {
        return Ok(hot);
    }
    sqlx::query_as(&format!(
        "SELECT {}, NULL::float8 AS lease_left_secs
           FROM deliveries_sent WHERE tenant_id = $1 AND id = $2",
        delivery_columns()
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
}

/// Operator re-queue: back to `pending`, due now, with a fresh attempt budget.
pub async fn requeue_delivery(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: i64,
) -> sqlx::Result<DeliveryRow> {
    sqlx::query_as(&format!(
        "UPDATE deliveries
            SET status = $3, attempts = 0, next_attempt_at = now(), claimed_until = NULL
          WHERE tenant_id = $1 AND id = $2
          RETURNING {}",
        delivery_columns()
    ))
    .bind(tenant)
    .bind(id)
    .bind(DeliveryStatus::Pending)
    .fetch_one(db)
    .await
}
