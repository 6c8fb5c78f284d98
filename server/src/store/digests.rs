//! Digests (migration 0028): open ones collecting items, the flush's claim,
//! decision and result (`deliveries::digests`).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::outbox::Completion;

/// The items one alert adds to its recipients' open digests.
pub struct Append<'a> {
    pub tenant: Uuid,
    pub alert_id: Uuid,
    pub event_type: &'a str,
    pub digest_key: &'a str,
    /// A digest this opens is due this long from now, unless `flush_at`
    /// gives its recipient's end.
    pub first_due_secs: i32,
    /// How a digest's end moves when an item joins it: `fixed` (to
    /// `window_secs` after the first item, never earlier), `sliding` (to
    /// `window_secs` after this item, at most `max_wait_secs` after the
    /// first) or `set` (never).
    pub end_mode: &'a str,
    pub window_secs: i32,
    pub max_wait_secs: i32,
    /// A digest this opens does not take the first item: its email goes at once.
    pub send_first: bool,
    pub max_items: i32,
    pub unless: Option<&'a str>,
    /// One per recipient (each at most once), with its in-app item.
    pub recipients: Vec<String>,
    pub item_tx: Vec<i64>,
    pub item_id: Vec<i64>,
    pub flush_at: Vec<Option<DateTime<Utc>>>,
}

/// Appends each recipient's item to its open digest of this key, opening
/// one when there is none, and answers the recipients for whom it opened
/// one without the item (`send_first`). One statement. An open digest that
/// a flush has locked is waited for; once the flush commits it is no
/// longer open, and the item opens the next one: every item lands in
/// exactly one digest. Recipients are taken in order, so two alerts
/// appending for the same users lock their rows in one order.
pub async fn append_items(
    db: impl PgExecutor<'_>,
    append: &Append<'_>,
) -> sqlx::Result<Vec<String>> {
    if append.recipients.is_empty() {
        return Ok(Vec::new());
    }
    const END: &str = "CASE $12
             WHEN 'fixed' THEN GREATEST(d.flush_at, d.window_start + make_interval(secs => $13))
             WHEN 'sliding' THEN GREATEST(d.flush_at, LEAST(now() + make_interval(secs => $13),
                                                        d.window_start + make_interval(secs => $14)))
             ELSE d.flush_at END";
    sqlx::query_scalar(&format!(
        "WITH opened AS (
             INSERT INTO digests AS d (tenant_id, recipient_id, channel, digest_key, event_type,
                                       flush_at, next_attempt_at, max_items, unless_mark, item_count)
             SELECT $1, x.r, 'email', $2, $3, COALESCE(x.f, now() + make_interval(secs => $4)),
                    COALESCE(x.f, now() + make_interval(secs => $4)), $5, $6,
                    CASE WHEN $15 THEN 0 ELSE 1 END
               FROM unnest($7::text[], $11::timestamptz[]) AS x(r, f)
              ORDER BY x.r
             ON CONFLICT (tenant_id, recipient_id, channel, digest_key) WHERE status = 'open'
             DO UPDATE SET item_count = d.item_count + 1, flush_at = {END}, next_attempt_at = {END}
             RETURNING d.recipient_id, d.id, (d.xmax = 0) AS fresh
         ),
         items AS (
             INSERT INTO digest_items (tenant_id, digest_id, item_tx, item_id, alert_id)
             SELECT $1, o.id, x.tx, x.iid, $8
               FROM opened o
               JOIN unnest($7::text[], $9::bigint[], $10::bigint[]) AS x(r, tx, iid)
                 ON x.r = o.recipient_id
              WHERE NOT (o.fresh AND $15)
             ON CONFLICT DO NOTHING
         )
         SELECT recipient_id FROM opened WHERE fresh AND $15"
    ))
    .bind(append.tenant)
    .bind(append.digest_key)
    .bind(append.event_type)
    .bind(f64::from(append.first_due_secs))
    .bind(append.max_items)
    .bind(append.unless)
    .bind(&append.recipients)
    .bind(append.alert_id)
    .bind(&append.item_tx)
    .bind(&append.item_id)
    .bind(&append.flush_at)
    .bind(append.end_mode)
    .bind(f64::from(append.window_secs))
    .bind(f64::from(append.max_wait_secs))
    .bind(append.send_first)
    .fetch_all(db)
    .await
}

/// Queues again the emails of `alert_id` to `recipients` that a digest
/// left out (`send_first`: the first item's email goes at once). Answers
/// how many.
pub async fn release_collected_emails(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
    recipients: &[String],
    collected_reason: &str,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE deliveries
            SET status = 'pending', last_error = NULL, next_attempt_at = now()
          WHERE tenant_id = $1 AND alert_id = $2 AND channel = 'email'
            AND recipient_id = ANY($3) AND status = 'skipped' AND last_error = $4",
    )
    .bind(tenant)
    .bind(alert_id)
    .bind(recipients)
    .bind(collected_reason)
    .execute(db)
    .await
    .map(|r| r.rows_affected())
}

/// A digest a flush worker holds the lease of.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedDigest {
    pub tenant_id: Uuid,
    pub id: i64,
    /// Attempts including this one: the guard of the decision and the result.
    pub attempts: i32,
    /// `open` (to decide) or `decided` (to send).
    pub status: String,
    pub recipient_id: String,
    pub event_type: String,
}

/// Leases up to `batch` due digests (open ones whose window ended, decided
/// ones due to be sent), at most an equal share of the batch per tenant with
/// due digests, so one tenant's flood of digests delays another's by one
/// share per claim at most. One statement, committed at once.
pub async fn claim_digests(
    db: impl PgExecutor<'_>,
    batch: u32,
    lease_ms: u64,
) -> sqlx::Result<Vec<ClaimedDigest>> {
    let batch = i64::from(batch.max(1));
    sqlx::query_as(
        "WITH RECURSIVE open_tenants AS (
             (SELECT d.tenant_id FROM digests d
               WHERE d.status IN ('open', 'decided')
               ORDER BY d.tenant_id LIMIT 1)
             UNION ALL
             SELECT (SELECT d.tenant_id FROM digests d
                      WHERE d.status IN ('open', 'decided') AND d.tenant_id > o.tenant_id
                      ORDER BY d.tenant_id LIMIT 1)
               FROM open_tenants o
              WHERE o.tenant_id IS NOT NULL
         ),
         tenants AS MATERIALIZED (
             SELECT tenant_id FROM open_tenants WHERE tenant_id IS NOT NULL
         ),
         share AS (
             SELECT GREATEST(1, CEIL($1::float8 / GREATEST(count(*), 1)))::int AS per_tenant FROM tenants
         ),
         picked AS (
             SELECT due.tenant_id, due.id
               FROM tenants t
              CROSS JOIN share
              CROSS JOIN LATERAL (
                  SELECT d.tenant_id, d.id FROM digests d
                   WHERE d.tenant_id = t.tenant_id
                     AND d.status IN ('open', 'decided')
                     AND d.next_attempt_at <= now()
                     AND (d.claimed_until IS NULL OR d.claimed_until <= now())
                   ORDER BY d.next_attempt_at
                   LIMIT share.per_tenant
                   FOR UPDATE SKIP LOCKED
              ) due
              LIMIT $1
         )
         UPDATE digests d
            SET attempts = d.attempts + 1,
                claimed_until = now() + make_interval(secs => $2 / 1000.0)
           FROM picked
          WHERE d.tenant_id = picked.tenant_id AND d.id = picked.id
         RETURNING d.tenant_id, d.id, d.attempts, d.status, d.recipient_id, d.event_type",
    )
    .bind(batch)
    .bind(i64::try_from(lease_ms).unwrap_or(i64::MAX) as f64)
    .fetch_all(db)
    .await
}

/// An open digest locked for its decision.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OpenDigest {
    pub unless_mark: Option<String>,
    pub max_items: i32,
}

/// Locks an open digest for its decision, if this claim still holds it
/// (`attempts`): a flush that lost its lease decides nothing.
pub async fn lock_open_digest(
    conn: &mut PgConnection,
    tenant: Uuid,
    id: i64,
    attempts: i32,
) -> sqlx::Result<Option<OpenDigest>> {
    sqlx::query_as(
        "SELECT unless_mark, max_items FROM digests
          WHERE tenant_id = $1 AND id = $2 AND attempts = $3 AND status = 'open'
          FOR UPDATE",
    )
    .bind(tenant)
    .bind(id)
    .bind(attempts)
    .fetch_optional(&mut *conn)
    .await
}

/// Holds a leased open digest until `until` (its recipient's quiet hours
/// end): the lease is given back and the attempt not counted.
pub async fn postpone_open_digest(
    conn: &mut PgConnection,
    tenant: Uuid,
    id: i64,
    until: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE digests
            SET next_attempt_at = $3, claimed_until = NULL, attempts = attempts - 1
          WHERE tenant_id = $1 AND id = $2 AND status = 'open'",
    )
    .bind(tenant)
    .bind(id)
    .bind(until)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A digest's items: (item tx, item id), in no order.
pub async fn list_digest_items(
    conn: &mut PgConnection,
    tenant: Uuid,
    id: i64,
) -> sqlx::Result<Vec<(i64, i64)>> {
    sqlx::query_as(
        "SELECT item_tx, item_id FROM digest_items WHERE tenant_id = $1 AND digest_id = $2",
    )
    .bind(tenant)
    .bind(id)
    .fetch_all(&mut *conn)
    .await
}

/// What a flush decided.
pub struct Decision<'a> {
    /// `decided` (an email to send), `empty` or `skipped`.
    pub status: &'a str,
    pub mark: Option<(i64, i64)>,
    pub reason: Option<&'a str>,
    /// The items the email holds (empty unless `decided`).
    pub included_tx: Vec<i64>,
    pub included_id: Vec<i64>,
}

/// Records a decision: the digest's new status, the watermark it was
/// decided against, and which items the email holds. A `decided` digest is
/// due to be sent at once, by the lease this claim holds.
pub async fn record_decision(
    conn: &mut PgConnection,
    tenant: Uuid,
    id: i64,
    decision: &Decision<'_>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE digest_items i
            SET included = (i.item_tx, i.item_id) IN (SELECT * FROM unnest($3::bigint[], $4::bigint[]))
          WHERE i.tenant_id = $1 AND i.digest_id = $2",
    )
    .bind(tenant)
    .bind(id)
    .bind(&decision.included_tx)
    .bind(&decision.included_id)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE digests
            SET status = $3, decided_at = now(), decided_mark_tx = $4, decided_mark_id = $5,
                sent_count = $6, reason = $7, next_attempt_at = now(),
                claimed_until = CASE WHEN $3 = 'decided' THEN claimed_until END
          WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant)
    .bind(id)
    .bind(decision.status)
    .bind(decision.mark.map(|m| m.0))
    .bind(decision.mark.map(|m| m.1))
    .bind(i32::try_from(decision.included_tx.len()).unwrap_or(i32::MAX))
    .bind(decision.reason)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// One item of a decided digest, as its email lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DigestLine {
    pub event_type: Option<String>,
    pub entity_id: Option<String>,
    pub subject: Option<String>,
    pub payload: Option<serde_json::Value>,
}

/// A decided digest's recipient address, how many items its email holds,
/// and how many it lists.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DigestSummary {
    pub address: Option<String>,
    pub total: i64,
    pub max_items: i32,
}

pub async fn find_digest_summary(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: i64,
) -> sqlx::Result<DigestSummary> {
    sqlx::query_as(
        "SELECT u.email AS address,
                (SELECT count(*) FROM digest_items i
                  WHERE i.tenant_id = d.tenant_id AND i.digest_id = d.id AND i.included) AS total,
                d.max_items
           FROM digests d
           LEFT JOIN users u ON u.tenant_id = d.tenant_id AND u.user_id = d.recipient_id
          WHERE d.tenant_id = $1 AND d.id = $2",
    )
    .bind(tenant)
    .bind(id)
    .fetch_one(db)
    .await
}

/// The first `limit` items a decided digest's email holds, newest first.
pub async fn list_digest_lines(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: i64,
    limit: i32,
) -> sqlx::Result<Vec<DigestLine>> {
    sqlx::query_as(
        "SELECT a.event_type, a.entity_id, a.subject, a.payload
           FROM digest_items i
           LEFT JOIN alerts a ON a.tenant_id = i.tenant_id AND a.id = i.alert_id
          WHERE i.tenant_id = $1 AND i.digest_id = $2 AND i.included
          ORDER BY i.item_tx DESC, i.item_id DESC
          LIMIT $3",
    )
    .bind(tenant)
    .bind(id)
    .bind(i64::from(limit))
    .fetch_all(db)
    .await
}

/// Records a decided digest's sending result, guarded by the attempt that
/// claimed it. `Release` (not attempted) leaves it due at once, the attempt
/// not counted.
pub async fn record_result(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: i64,
    attempts: i32,
    result: &Completion,
) -> sqlx::Result<bool> {
    let (status, after_ms, reason): (&str, i64, Option<&str>) = match result {
        Completion::Sent => ("sent", 0, None),
        Completion::Retry { after_ms, error } => (
            "decided",
            i64::try_from(*after_ms).unwrap_or(i64::MAX),
            Some(error.as_str()),
        ),
        Completion::Dead { error } => ("dead", 0, Some(error.as_str())),
        Completion::Skipped { reason } => ("skipped", 0, Some(reason.as_str())),
        Completion::Release => ("release", 0, None),
    };
    let done = sqlx::query(
        "UPDATE digests
            SET status = CASE WHEN $4 = 'release' THEN status ELSE $4 END,
                attempts = CASE WHEN $4 = 'release' THEN attempts - 1 ELSE attempts END,
                reason = CASE WHEN $4 = 'release' THEN reason ELSE $6 END,
                next_attempt_at = now() + make_interval(secs => $5 / 1000.0),
                sent_at = CASE WHEN $4 = 'sent' THEN now() END,
                claimed_until = NULL
          WHERE tenant_id = $1 AND id = $2 AND attempts = $3 AND status = 'decided'",
    )
    .bind(tenant)
    .bind(id)
    .bind(attempts)
    .bind(status)
    .bind(after_ms as f64)
    .bind(reason)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// A digest as its recipient's listing shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DigestRow {
    pub id: i64,
    pub digest_key: String,
    pub status: String,
    pub window_start: DateTime<Utc>,
    pub flush_at: DateTime<Utc>,
    pub item_count: i32,
    pub sent_count: Option<i32>,
    pub unless_mark: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_mark_tx: Option<i64>,
    pub decided_mark_id: Option<i64>,
    pub reason: Option<String>,
    pub sent_at: Option<DateTime<Utc>>,
    pub attempts: i32,
}

/// A recipient's digests in id order, after `after` (an id) when given.
pub async fn list_recipient_digests(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    recipient: &str,
    after: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<DigestRow>> {
    sqlx::query_as(
        "SELECT id, digest_key, status, window_start, flush_at, item_count, sent_count,
                unless_mark, decided_at, decided_mark_tx, decided_mark_id, reason, sent_at, attempts
           FROM digests
          WHERE tenant_id = $1 AND recipient_id = $2 AND id > COALESCE($3, 0)
          ORDER BY id
          LIMIT $4",
    )
    .bind(tenant)
    .bind(recipient)
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// A category's digest template (migration 0029), as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DigestTemplateRow {
    pub content: serde_json::Value,
    pub updated_at: DateTime<Utc>,
}

pub async fn upsert_digest_template(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    category: &str,
    content: &serde_json::Value,
) -> sqlx::Result<DigestTemplateRow> {
    sqlx::query_as(
        "INSERT INTO digest_templates (tenant_id, category, content) VALUES ($1, $2, $3)
         ON CONFLICT (tenant_id, category) DO UPDATE
             SET content = EXCLUDED.content, updated_at = now()
         RETURNING content, updated_at",
    )
    .bind(tenant)
    .bind(category)
    .bind(content)
    .fetch_one(db)
    .await
}

pub async fn find_digest_template(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    category: &str,
) -> sqlx::Result<Option<DigestTemplateRow>> {
    sqlx::query_as(
        "SELECT content, updated_at FROM digest_templates
          WHERE tenant_id = $1 AND category = $2",
    )
    .bind(tenant)
    .bind(category)
    .fetch_optional(db)
    .await
}

/// Answers whether there was one.
pub async fn delete_digest_template(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    category: &str,
) -> sqlx::Result<bool> {
    sqlx::query("DELETE FROM digest_templates WHERE tenant_id = $1 AND category = $2")
        .bind(tenant)
        .bind(category)
        .execute(db)
        .await
        .map(|r| r.rows_affected() == 1)
}
