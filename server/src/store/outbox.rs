//! The outbox's SQL: claim a batch (`CLAIM_SQL`), record its results
//! (`COMPLETE_SQL`: a sent delivery moves to `deliveries_sent`). Nothing else
//! in the worker touches the database.
//!
//! "Due" is one predicate for fresh work, retries and expired leases alike —
//! `status IN (pending, retrying, sending) AND next_attempt_at <= now()` on
//! the partial index `deliveries_claimable`, led by the tenant (which is what
//! makes the per-tenant claim cheap) — plus "no live lease": `claimed_until`
//! is NULL or past, read from the row.
//!
//! The claim sets `attempts` and `claimed_until` only, columns no index and no
//! index predicate reads, so on a page with room (fillfactor 50, migration
//! 0015) it is a HOT update that writes no index entry. A claimed row keeps
//! its status and its place in `deliveries_claimable`; the lease is what makes
//! it `sending` (`store::deliveries::STATUS_SQL`). Rows of versions before
//! migration 0015 may still be stored as `sending` with the lease in
//! `next_attempt_at`; both statements accept them.

use std::sync::LazyLock;

use sqlx::PgExecutor;
use tidings_core::Channel;
use uuid::Uuid;

use crate::deliveries::status::{
    DeliveryStatus, PENDING_SQL, RETRYING_SQL, SENDING_SQL, SENT_SQL, SKIPPED_SQL, UNFINISHED_SQL,
};

/// A delivery this worker now holds, with everything needed to send it.
/// Alert, endpoint and user columns are `None` when the row they come from is
/// gone (deleted after the alert was posted).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedDelivery {
    pub tenant_id: Uuid,
    pub id: i64,
    /// Attempts including this one; the guard of every completion.
    pub attempts: i32,
    #[sqlx(try_from = "String")]
    pub channel: Channel,
    pub notification_key: String,
    pub recipient_id: String,
    pub alert_id: Uuid,
    pub event_type: Option<String>,
    pub entity_id: Option<String>,
    pub subject: Option<String>,
    /// The jsonb text as PostgreSQL writes it, not decoded into a tree:
    /// the webhook body embeds it as it is.
    pub payload: Option<sqlx::types::Json<Box<serde_json::value::RawValue>>>,
    pub alert_created_at: Option<chrono::DateTime<chrono::Utc>>,
    pub endpoint_id: Option<Uuid>,
    pub endpoint_url: Option<String>,
    pub endpoint_secret: Option<String>,
    /// Only while the rotation's grace period lasts.
    pub endpoint_previous_secret: Option<String>,
    pub recipient_email: Option<String>,
    /// The alert's category when it is not critical, for the email's
    /// unsubscribe headers: not read by the claim, filled in by the worker
    /// (`store::preferences::list_alert_categories`) only when unsubscribe
    /// links are on.
    #[sqlx(skip)]
    pub list_category: Option<String>,
    /// A delayed delivery's condition (migration 0026): sent only if the
    /// in-app item at (`item_tx`, `item_id`) is not read (or seen), decided
    /// right after the claim (`deliveries::fallback`). Absent from the
    /// claim of a test build standing in for the version before it.
    #[sqlx(default)]
    pub unless_mark: Option<String>,
    #[sqlx(default)]
    pub item_tx: Option<i64>,
    #[sqlx(default)]
    pub item_id: Option<i64>,
    /// The row version the claim wrote (its ctid, as text): the
    /// completion's way to the row without an index ([`COMPLETE_SQL`]).
    /// Absent from claims that do not return it (the bench's past versions).
    #[sqlx(default)]
    pub version: Option<String>,
}

/// The claim's SQL for batches of `batch`, as the worker runs it (and
/// bench/sql/outbox_claim.sql, for 100). [`claim_deliveries`] says how it
/// shares a batch: the CTEs `open_tenants`, `active`, `share` and `picked`
/// find the due deliveries and lock them (`FOR UPDATE SKIP LOCKED`); the
/// UPDATE takes them, attempt + 1 and the lease, a HOT update, returning what
/// delivery needs. Parameters: `$1` lease in ms, `$2` channels.
///
/// The batch is written into the text, not bound: with `LIMIT $n` a generic
/// plan cannot know the limit and estimates a tenth of the table, which costs
/// it a hash join over all of `deliveries`; PostgreSQL then keeps planning
/// the statement afresh at every call (about as much CPU as executing it).
/// With the number in the text the generic plan is the custom one and is
/// kept after the fifth call. A worker's batch never changes, so each
/// process prepares one statement.
pub fn claim_sql(batch: u32) -> String {
    claim_sql_returning(batch, ", d.unless_mark, d.item_tx, d.item_id")
}

/// The claim without the columns of migration 0026, for a test build
/// standing in for the version before it (`test_hooks::WITHOUT_LAST_MIGRATION`).
#[cfg(feature = "test-hooks")]
pub fn claim_sql_before_delayed_channels(batch: u32) -> String {
    claim_sql_returning(batch, "")
}

fn claim_sql_returning(batch: u32, delayed: &str) -> String {
    let batch = batch.max(1);
    format!(
        r#"
        WITH RECURSIVE open_tenants AS (
            -- The tenants with open work, one index probe each (a skip scan:
            -- the first tenant, then the first one after it, ...).
            (SELECT d.tenant_id FROM deliveries d
             WHERE d.status IN {UNFINISHED_SQL}
             ORDER BY d.tenant_id LIMIT 1)
            UNION ALL
            SELECT (SELECT d.tenant_id FROM deliveries d
                    WHERE d.status IN {UNFINISHED_SQL}
                      AND d.tenant_id > o.tenant_id
                    ORDER BY d.tenant_id LIMIT 1)
            FROM open_tenants o
            WHERE o.tenant_id IS NOT NULL
        ),
        active AS MATERIALIZED (
            -- One ordered index probe per such tenant (LIMIT 1 with ORDER BY
            -- keeps the planner on deliveries_claimable whatever its
            -- statistics say): its oldest due delivery, if it has one.
            SELECT o.tenant_id, oldest.next_attempt_at AS oldest_due
            FROM open_tenants o
            CROSS JOIN LATERAL (
                SELECT d.next_attempt_at
                FROM deliveries d
                WHERE d.tenant_id = o.tenant_id
                  AND d.status IN {UNFINISHED_SQL}
                  AND d.next_attempt_at <= now()
                  AND (d.claimed_until IS NULL OR d.claimed_until <= now())
                  AND d.channel = ANY($2)
                ORDER BY d.next_attempt_at
                LIMIT 1
            ) oldest
        ),
        share AS (
            SELECT GREATEST(1, CEIL({batch}::float8 / GREATEST(count(*), 1)))::int AS per_tenant FROM active
        ),
        picked AS (
            -- ctid: the version this statement locked, so that the UPDATE
            -- below reaches it by a TID scan instead of a second descent of
            -- the primary key. A row updated after this statement's snapshot
            -- and locked in its newer version (EvalPlanQual) is not visible
            -- to that scan: it stays unclaimed until the next claim.
            SELECT due.ctid, due.tenant_id, due.id, due.alert_id, due.endpoint_id, due.recipient_id, due.channel
            FROM (SELECT tenant_id FROM active ORDER BY oldest_due LIMIT {batch}) served
            CROSS JOIN share
            CROSS JOIN LATERAL (
                SELECT d.ctid, d.tenant_id, d.id, d.alert_id, d.endpoint_id, d.recipient_id, d.channel
                FROM deliveries d
                WHERE d.tenant_id = served.tenant_id
                  AND d.status IN {UNFINISHED_SQL}
                  AND d.next_attempt_at <= now()
                  AND (d.claimed_until IS NULL OR d.claimed_until <= now())
                  AND d.channel = ANY($2)
                ORDER BY d.next_attempt_at
                LIMIT share.per_tenant
                FOR UPDATE SKIP LOCKED
            ) due
            LIMIT {batch}
        )
        UPDATE deliveries d
        SET attempts = d.attempts + 1,
            claimed_until = now() + $1 * interval '1 millisecond'
        FROM picked p
        LEFT JOIN alerts a
               ON a.tenant_id = p.tenant_id AND a.id = p.alert_id
        -- OFFSET 0 keeps each lookup a subquery of its own, so that its
        -- channel test runs before the index probe (a one-time filter) and a
        -- webhook costs no probe of users, an email none of the endpoints.
        LEFT JOIN LATERAL (
            SELECT e.id, e.url, e.secret,
                   CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret END AS previous_secret
            FROM webhook_endpoints e
            WHERE p.channel = 'webhook' AND e.tenant_id = p.tenant_id AND e.id = p.endpoint_id
            OFFSET 0
        ) e ON true
        LEFT JOIN LATERAL (
            SELECT u.email FROM users u
            WHERE p.channel = 'email' AND u.tenant_id = p.tenant_id AND u.user_id = p.recipient_id
            OFFSET 0
        ) u ON true
        WHERE d.ctid = p.ctid AND d.tenant_id = p.tenant_id AND d.id = p.id
        RETURNING d.tenant_id, d.id, d.attempts, d.channel, d.notification_key, d.recipient_id, d.alert_id,
                  a.event_type, a.entity_id, a.subject, a.payload, a.created_at AS alert_created_at,
                  e.id AS endpoint_id, e.url AS endpoint_url, e.secret AS endpoint_secret,
                  e.previous_secret AS endpoint_previous_secret,
                  u.email AS recipient_email, d.ctid::text AS version{delayed}
"#
    )
    .trim()
    .to_owned()
}

/// Writes results (the six arrays of [`ResultColumns`]), each only if it is
/// still this claim's ([`complete_deliveries`] says why): a `sent` delivery
/// moves to `deliveries_sent` (`sent`: a DELETE that returns the row, `moved`:
/// its INSERT), every other outcome updates it in place (`other`). Answers
/// the count of rows written.
///
/// Each row is reached by ctid (`r.at`), found without a plan's choice of
/// index: first at the version the claim wrote (`r.version`, a TID scan,
/// taken only if that version is still live and still this key's), else by
/// its key alone (a row updated since the claim). A lookup by key is exposed
/// to stale statistics: with a table whose statistics say "empty" (vacuumed
/// empty, no ANALYZE since, as with autovacuum off or held back) the planner
/// finds any index that starts with `tenant_id` as cheap as the primary key,
/// and each lookup then read every entry of the tenant, dead ones included.
/// Matching on the key beside the guard's `status IN (…)` had the same
/// fault through `deliveries_unsent` (bench/findings/outbox.md, "Dead rows
/// and stale statistics").
/// A row updated after this statement's snapshot is rechecked by its guards
/// in its newest version (the TID scan's recheck does not compare ctids).
static COMPLETE_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
        WITH r AS MATERIALIZED (
            SELECT r.*,
                   COALESCE(
                       (SELECT d.ctid FROM deliveries d
                        WHERE d.ctid = r.version AND d.tenant_id = r.tenant_id AND d.id = r.id),
                       (SELECT d.ctid FROM deliveries d WHERE d.tenant_id = r.tenant_id AND d.id = r.id)
                   ) AS at
            FROM UNNEST($1::uuid[], $2::int8[], $3::int4[], $4::text[], $5::int8[], $6::text[],
                        $7::text[]::tid[])
                AS r(tenant_id, id, attempts, outcome, delay_ms, error, version)
        ),
        sent AS (
            DELETE FROM deliveries d USING r
            WHERE r.outcome = {SENT_SQL}
              AND d.ctid = r.at AND d.tenant_id = r.tenant_id AND d.id = r.id
              AND d.attempts = r.attempts AND d.claimed_until IS NOT NULL
              AND d.status IN {UNFINISHED_SQL}
            RETURNING d.*
        ),
        moved AS (
            INSERT INTO deliveries_sent (tenant_id, id, notification_key, alert_id, recipient_id, channel,
                                         endpoint_id, status, attempts, next_attempt_at, claimed_until,
                                         last_error, sent_at, created_at, template_version_id,
                                         unless_mark, item_tx, item_id, decided_mark_tx, decided_mark_id,
                                         decided_at)
            SELECT tenant_id, id, notification_key, alert_id, recipient_id, channel, endpoint_id, {SENT_SQL},
                   attempts, next_attempt_at, NULL, last_error, now(), created_at, template_version_id,
                   unless_mark, item_tx, item_id, decided_mark_tx, decided_mark_id, decided_at
            FROM sent
            RETURNING 1
        ),
        other AS (
        UPDATE deliveries d
        SET status = CASE WHEN r.outcome <> 'release' THEN r.outcome
                          WHEN d.status <> {SENDING_SQL} THEN d.status
                          WHEN d.attempts > 1 THEN {RETRYING_SQL}
                          ELSE {PENDING_SQL}
                     END,
            attempts = CASE WHEN r.outcome = 'release' THEN d.attempts - 1 ELSE d.attempts END,
            next_attempt_at = CASE WHEN r.outcome = {RETRYING_SQL}
                                   THEN now() + r.delay_ms * interval '1 millisecond'
                                   WHEN d.status = {SENDING_SQL} THEN now()
                                   ELSE d.next_attempt_at END,
            last_error = COALESCE(r.error, d.last_error),
            claimed_until = NULL
        FROM r
        WHERE r.outcome <> {SENT_SQL}
          AND d.ctid = r.at AND d.tenant_id = r.tenant_id AND d.id = r.id
          AND d.attempts = r.attempts AND d.claimed_until IS NOT NULL
          AND d.status IN {UNFINISHED_SQL}
        RETURNING 1
        )
        SELECT (SELECT count(*) FROM moved) + (SELECT count(*) FROM other)
"#
    )
});

/// The completion of the version before migration 0022: every outcome,
/// `sent` included, updates the row in place. Run only by a test build
/// standing in for that version (`test_hooks::WITHOUT_LAST_MIGRATION`, the
/// rolling upgrade test); bench/sql/outbox_complete_v2.sql keeps it as the
/// same-run "before" of the move.
#[cfg(feature = "test-hooks")]
static COMPLETE_IN_PLACE_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
        UPDATE deliveries d
        SET status = CASE WHEN r.outcome <> 'release' THEN r.outcome
                          WHEN d.status <> {SENDING_SQL} THEN d.status
                          WHEN d.attempts > 1 THEN {RETRYING_SQL}
                          ELSE {PENDING_SQL}
                     END,
            attempts = CASE WHEN r.outcome = 'release' THEN d.attempts - 1 ELSE d.attempts END,
            sent_at = CASE WHEN r.outcome = {SENT_SQL} THEN now() ELSE d.sent_at END,
            next_attempt_at = CASE WHEN r.outcome = {RETRYING_SQL}
                                   THEN now() + r.delay_ms * interval '1 millisecond'
                                   WHEN d.status = {SENDING_SQL} THEN now()
                                   ELSE d.next_attempt_at END,
            last_error = COALESCE(r.error, d.last_error),
            claimed_until = NULL
        FROM UNNEST($1::uuid[], $2::int8[], $3::int4[], $4::text[], $5::int8[], $6::text[])
             AS r(tenant_id, id, attempts, outcome, delay_ms, error)
        WHERE d.tenant_id = r.tenant_id AND d.id = r.id
          AND d.attempts = r.attempts AND d.claimed_until IS NOT NULL
          AND d.status IN {UNFINISHED_SQL}
"#
    )
});

/// The completion's SQL, for measurements (bench/sql/outbox_complete.sql).
pub fn complete_sql() -> &'static str {
    COMPLETE_SQL.trim()
}

/// Claims up to `batch` due deliveries on `channels`, fairly across tenants, in
/// one statement; the claim is committed when it returns (autocommit), so no
/// lock is held while delivering.
///
/// Fairness: the tenants with due work get an equal share of the batch
/// (`ceil(batch / tenants)` each), so a tenant with a backlog of 100,000 takes
/// at most its share while another's 10 go out in the same batch. With more
/// such tenants than the batch has rows, the ones whose oldest due delivery
/// has waited longest go first: nobody starves, as a tenant's oldest row only
/// moves up while others are served. The tenants probed are those with open
/// work, found by skipping through `deliveries_claimable` one tenant at a time
/// (two index probes per such tenant), not every row of `tenants`: the cost of
/// a claim follows the tenants that have something to send, not all there are.
/// A batch can come back under-full when some tenants have less than their
/// share; the worker claims again at once whenever a batch was not empty, so
/// nothing waits for the poll interval because of it.
///
/// The endpoint and the user are read only for the channel that needs them
/// (a webhook's endpoint, an email's address): each lookup sits behind its
/// channel test, which PostgreSQL evaluates before probing the index.
pub async fn claim_deliveries(
    db: impl PgExecutor<'_>,
    batch: u32,
    lease_ms: u64,
    channels: &[Channel],
) -> sqlx::Result<Vec<ClaimedDelivery>> {
    claim_with(db, &claim_sql(batch), lease_ms, channels).await
}

/// [`claim_deliveries`] as the version before migration 0026 ran it, for a
/// test build standing in for that version.
#[cfg(feature = "test-hooks")]
pub async fn claim_deliveries_before_delayed_channels(
    db: impl PgExecutor<'_>,
    batch: u32,
    lease_ms: u64,
    channels: &[Channel],
) -> sqlx::Result<Vec<ClaimedDelivery>> {
    claim_with(
        db,
        &claim_sql_before_delayed_channels(batch),
        lease_ms,
        channels,
    )
    .await
}

async fn claim_with(
    db: impl PgExecutor<'_>,
    sql: &str,
    lease_ms: u64,
    channels: &[Channel],
) -> sqlx::Result<Vec<ClaimedDelivery>> {
    let channels: Vec<&str> = channels.iter().map(|c| c.as_str()).collect();
    sqlx::query_as(sql)
        .bind(i64::try_from(lease_ms).unwrap_or(i64::MAX))
        .bind(&channels)
        .fetch_all(db)
        .await
}

/// What became of one claimed delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    Sent,
    /// Failed; try again after the delay.
    Retry {
        after_ms: u64,
        error: String,
    },
    /// Failed for good (permanent error, or out of attempts).
    Dead {
        error: String,
    },
    /// Nothing to deliver to (no email address, endpoint deleted).
    Skipped {
        reason: String,
    },
    /// Not attempted (shutdown, or too little lease left to finish in time):
    /// due again at once, and the attempt is not counted.
    Release,
}

#[derive(Debug, Clone)]
pub struct CompletedDelivery {
    pub tenant_id: Uuid,
    pub id: i64,
    /// The attempt number the claim returned: the guard.
    pub attempts: i32,
    /// The claim's [`ClaimedDelivery::version`]: where the completion looks
    /// for the row first. None, or a version the row has left, and it is
    /// found by its key.
    pub version: Option<String>,
    pub completion: Completion,
}

/// Results as the statements take them: one array per column.
#[derive(Debug, Default)]
struct ResultColumns {
    tenant_ids: Vec<Uuid>,
    ids: Vec<i64>,
    attempts: Vec<i32>,
    outcomes: Vec<&'static str>,
    delays: Vec<Option<i64>>,
    errors: Vec<Option<String>>,
    versions: Vec<Option<String>>,
}

impl ResultColumns {
    fn of(done: &[CompletedDelivery]) -> ResultColumns {
        let mut c = ResultColumns::default();
        for d in done {
            c.tenant_ids.push(d.tenant_id);
            c.ids.push(d.id);
            c.attempts.push(d.attempts);
            c.versions.push(d.version.clone());
            let (outcome, delay, error) = match &d.completion {
                Completion::Sent => (DeliveryStatus::Sent.as_str(), None, None),
                Completion::Retry { after_ms, error } => (
                    DeliveryStatus::Retrying.as_str(),
                    Some(i64::try_from(*after_ms).unwrap_or(i64::MAX)),
                    Some(error.clone()),
                ),
                Completion::Dead { error } => {
                    (DeliveryStatus::Dead.as_str(), None, Some(error.clone()))
                }
                Completion::Skipped { reason } => {
                    (DeliveryStatus::Skipped.as_str(), None, Some(reason.clone()))
                }
                // Not a status: the statement turns it back into pending/retrying.
                Completion::Release => ("release", None, None),
            };
            c.outcomes.push(outcome);
            c.delays.push(delay);
            c.errors.push(error);
        }
        c
    }
}

/// Records results in one statement. Each row is written only if it is still
/// this claim's: leased (`claimed_until` set), not final, and the same attempt
/// number. A worker whose lease expired while it was delivering, and whose row
/// was claimed again (attempts + 1) or released by its new holder (lease
/// cleared), changes nothing: its `sent` moves nothing. Returns the rows
/// written.
///
/// A `sent` delivery leaves `deliveries` for `deliveries_sent` (migration
/// 0022): the delete writes no index entry and needs no room on the row's
/// page, the insert appends to a table filled full (its primary key and
/// `deliveries_sent_by_alert_recipient`: two B-tree insertions, as the
/// in-place update wrote). Retries, dead and skipped update in place and
/// leave the partial indexes when final; a release touches no indexed column
/// (HOT, like the claim).
pub async fn complete_deliveries(
    db: impl PgExecutor<'_>,
    done: &[CompletedDelivery],
) -> sqlx::Result<u64> {
    let r = ResultColumns::of(done);
    let written: i64 = sqlx::query_scalar(complete_sql())
        .bind(&r.tenant_ids)
        .bind(&r.ids)
        .bind(&r.attempts)
        .bind(&r.outcomes)
        .bind(&r.delays)
        .bind(&r.errors)
        .bind(&r.versions)
        .fetch_one(db)
        .await?;
    Ok(u64::try_from(written).unwrap_or(0))
}

/// [`complete_deliveries`] as the version before migration 0022 ran it
/// (`sent` updated in place), for a test build standing in for that version.
#[cfg(feature = "test-hooks")]
pub async fn complete_deliveries_in_place(
    db: impl PgExecutor<'_>,
    done: &[CompletedDelivery],
) -> sqlx::Result<u64> {
    let r = ResultColumns::of(done);
    let result = sqlx::query(COMPLETE_IN_PLACE_SQL.trim())
        .bind(&r.tenant_ids)
        .bind(&r.ids)
        .bind(&r.attempts)
        .bind(&r.outcomes)
        .bind(&r.delays)
        .bind(&r.errors)
        .execute(db)
        .await?;
    Ok(result.rows_affected())
}

/// What the claim decided about delayed deliveries it holds, one entry per
/// index: `skip_reasons[i]` NULL to send (the row keeps its lease and goes to
/// the sender), else `skipped` with that reason (the lease ends). Either way
/// the row records the watermark the decision saw and when; guarded like a
/// completion, by the attempt number the claim returned.
#[derive(Debug, Default)]
pub struct Decisions {
    pub tenant_ids: Vec<Uuid>,
    pub ids: Vec<i64>,
    pub attempts: Vec<i32>,
    pub skip_reasons: Vec<Option<String>>,
    /// The watermark the decision saw; NULL for a delivery that follows no
    /// in-app item (nothing to read: only its preferences were decided).
    pub mark_tx: Vec<Option<i64>>,
    pub mark_id: Vec<Option<i64>>,
}

static RECORD_DECISIONS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
        UPDATE deliveries d
        SET status = CASE WHEN r.reason IS NULL THEN d.status ELSE {SKIPPED_SQL} END,
            last_error = COALESCE(r.reason, d.last_error),
            claimed_until = CASE WHEN r.reason IS NULL THEN d.claimed_until END,
            decided_mark_tx = r.mark_tx,
            decided_mark_id = r.mark_id,
            decided_at = clock_timestamp()
        FROM UNNEST($1::uuid[], $2::int8[], $3::int4[], $4::text[], $5::int8[], $6::int8[])
             AS r(tenant_id, id, attempts, reason, mark_tx, mark_id)
        WHERE d.tenant_id = r.tenant_id AND d.id = r.id
          AND d.attempts = r.attempts AND d.claimed_until IS NOT NULL
          AND d.status IN {UNFINISHED_SQL}
"#
    )
});

/// Records [`Decisions`] in the decision's transaction; returns the rows written.
/// `decided_at` is the clock when the decision is written, after the share
/// locks were granted: no mark of those users can commit between the grant
/// and the decision's commit, so a mark that committed before `decided_at`
/// committed before the grant and was seen.
pub async fn record_decisions(db: impl PgExecutor<'_>, d: &Decisions) -> sqlx::Result<u64> {
    if d.ids.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query(RECORD_DECISIONS_SQL.trim())
        .bind(&d.tenant_ids)
        .bind(&d.ids)
        .bind(&d.attempts)
        .bind(&d.skip_reasons)
        .bind(&d.mark_tx)
        .bind(&d.mark_id)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}
