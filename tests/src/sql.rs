//! Every SQL statement the integration tests run. Test files hold none: they
//! set up through the API ([`crate::client`]) and come here only where SQL is
//! the point, for one of three reasons, named on each function:
//!
//! - **look**: read what no operation shows (row counts behind an answer, a
//!   column the API never returns, a hash that must not contain the key), so a
//!   test can prove what was *stored*, not only what was answered;
//! - **hold**: keep a lock or a transaction open from outside the server, to
//!   put a request or a reader in the race the test is about;
//! - **stage**: put a row in a state no caller can reach in test time (a
//!   delivery the workers gave up on hours later, a rotated secret's grace
//!   ended, a migration record lost).
//!
//! Each test has its own database, so statements without a tenant filter see
//! that test's rows only.

use std::{collections::HashMap, time::Duration};

use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};
use tidings_server::store::deliveries::STATUS_SQL;

use crate::{admin_url, TestTenant};

/// Every delivery wherever it is stored: `deliveries`, and `deliveries_sent`
/// (the sent ones the outbox's completion moved out, migration 0022), as one
/// relation named `deliveries` with the same columns.
const ALL_DELIVERIES: &str = "(SELECT tenant_id, id, notification_key, alert_id, recipient_id, \
     channel, endpoint_id, status, attempts, next_attempt_at, claimed_until, last_error, sent_at, \
     created_at FROM deliveries
   UNION ALL
   SELECT tenant_id, id, notification_key, alert_id, recipient_id, channel, endpoint_id, status, \
     attempts, next_attempt_at, claimed_until, last_error, sent_at, created_at \
     FROM deliveries_sent) AS deliveries";

/// Rows to count.
#[derive(Debug, Clone, Copy)]
pub enum Rows {
    Tenants,
    Alerts,
    Notifications,
    /// Every delivery, in `deliveries` or moved to `deliveries_sent`.
    Deliveries,
    /// The sent deliveries the outbox's completion moved to `deliveries_sent`.
    MovedSentDeliveries,
    /// Webhook deliveries written with no endpoint (skipped at write time).
    WebhookDeliveriesWithoutEndpoint,
    InboxItems,
    InboxMessages,
    /// NATS messages recorded as rejected, with their reason.
    RejectedInboxMessages,
    IdempotencyKeys,
    Events,
    Memberships,
    ItemReads,
}

impl Rows {
    /// (table, condition)
    fn source(self) -> (&'static str, &'static str) {
        match self {
            Rows::Tenants => ("tenants", "true"),
            Rows::Alerts => ("alerts", "true"),
            Rows::Notifications => ("notifications", "true"),
            Rows::Deliveries => (ALL_DELIVERIES, "true"),
            Rows::MovedSentDeliveries => ("deliveries_sent", "true"),
            Rows::WebhookDeliveriesWithoutEndpoint => {
                ("deliveries", "channel = 'webhook' AND endpoint_id IS NULL")
            }
            Rows::InboxItems => ("inbox_items", "true"),
            Rows::InboxMessages => ("inbox_messages", "true"),
            Rows::RejectedInboxMessages => (
                "inbox_messages",
                "outcome = 'rejected' AND error IS NOT NULL",
            ),
            Rows::IdempotencyKeys => ("idempotency_keys", "true"),
            Rows::Events => ("events", "true"),
            Rows::Memberships => ("memberships", "true"),
            Rows::ItemReads => ("item_reads", "true"),
        }
    }
}

/// Look: how many `rows` the test's database holds.
pub async fn count(pool: &PgPool, rows: Rows) -> i64 {
    let (table, condition) = rows.source();
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE {condition}"))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("counting {rows:?}: {e}"))
}

/// Look: how many `rows` belong to `tenant`.
pub async fn count_for(pool: &PgPool, rows: Rows, tenant: &TestTenant) -> i64 {
    let (table, condition) = rows.source();
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {table} WHERE {condition} AND tenant_id = $1"
    ))
    .bind(tenant.uuid())
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("counting {rows:?}: {e}"))
}

/// Look: the tenant's alert rows that break invariant 4 or their tie to
/// their notification: (natural keys with more than one notification,
/// deliveries and in-app items without a notification of the same alert,
/// recipient, channel and key, notifications whose (event type, entity)
/// differs from their alert's, which the retention purge relies on).
pub async fn alert_rows_astray(pool: &PgPool, tenant: &TestTenant) -> (i64, i64, i64, i64) {
    sqlx::query_as(&format!(
        "SELECT
           (SELECT count(*) FROM (SELECT 1 FROM notifications WHERE tenant_id = $1
                                   GROUP BY event_type, entity_id, recipient_id, channel
                                  HAVING count(*) > 1) k),
           (SELECT count(*) FROM {ALL_DELIVERIES} WHERE deliveries.tenant_id = $1 AND NOT EXISTS (
                SELECT 1 FROM notifications n
                 WHERE n.tenant_id = deliveries.tenant_id AND n.alert_id = deliveries.alert_id
                   AND n.recipient_id = deliveries.recipient_id AND n.channel = deliveries.channel
                   AND n.key = deliveries.notification_key)),
           (SELECT count(*) FROM inbox_items i WHERE i.tenant_id = $1 AND NOT EXISTS (
                SELECT 1 FROM notifications n
                 WHERE n.tenant_id = i.tenant_id AND n.alert_id = i.alert_id
                   AND n.recipient_id = i.recipient_id AND n.channel = 'in_app'
                   AND n.key = i.notification_key)),
           (SELECT count(*) FROM notifications n JOIN alerts a
                ON a.tenant_id = n.tenant_id AND a.id = n.alert_id
             WHERE n.tenant_id = $1
               AND (a.event_type <> n.event_type OR a.entity_id <> n.entity_id))",
    ))
    .bind(tenant.uuid())
    .fetch_one(pool)
    .await
    .expect("alert rows astray")
}

/// Polls [`count`] every 100 ms until it is `want`; panics after 15 s.
pub async fn wait_for_count(pool: &PgPool, rows: Rows, want: i64) {
    let mut got = -1;
    for _ in 0..150 {
        got = count(pool, rows).await;
        if got == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{rows:?}: wanted {want}, got {got}");
}

/// Look: distinct (recipient, channel) pairs among `tenant`'s notifications.
pub async fn distinct_notified_pairs(pool: &PgPool, tenant: &TestTenant) -> i64 {
    sqlx::query_scalar(
        "SELECT count(DISTINCT (recipient_id, channel)) FROM notifications WHERE tenant_id = $1",
    )
    .bind(tenant.uuid())
    .fetch_one(pool)
    .await
    .expect("distinct pairs")
}

/// Look: `tenant`'s deliveries as (channel, status, count), ordered.
pub async fn deliveries_by_channel_and_status(
    pool: &PgPool,
    tenant: &TestTenant,
) -> Vec<(String, String, i64)> {
    sqlx::query_as(&format!(
        "SELECT channel, {status}, count(*) FROM {ALL_DELIVERIES} WHERE tenant_id = $1 GROUP BY 1, 2 ORDER BY 1, 2",
        status = *STATUS_SQL,
    ))
    .bind(tenant.uuid())
    .fetch_all(pool)
    .await
    .expect("deliveries by channel and status")
}

/// Look: `tenant`'s deliveries addressed to one webhook endpoint.
pub async fn deliveries_to_endpoint(pool: &PgPool, tenant: &TestTenant, endpoint_id: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {ALL_DELIVERIES} WHERE tenant_id = $1 AND endpoint_id = $2::uuid",
    ))
    .bind(tenant.uuid())
    .bind(endpoint_id)
    .fetch_one(pool)
    .await
    .expect("deliveries to endpoint")
}

/// Look: (recipient, channel, reason) of `tenant`'s skipped deliveries; the
/// reason is stored, never answered.
pub async fn skipped_reasons(
    pool: &PgPool,
    tenant: &TestTenant,
) -> Vec<(String, String, Option<String>)> {
    sqlx::query_as(
        "SELECT recipient_id, channel, last_error FROM deliveries WHERE tenant_id = $1 AND status = 'skipped'
          ORDER BY 1, 2",
    )
    .bind(tenant.uuid())
    .fetch_all(pool)
    .await
    .expect("skipped reasons")
}

/// Look: a webhook endpoint's previous secret and the hours left of its
/// grace, which the API never shows.
pub async fn previous_secret(pool: &PgPool, endpoint_id: &str) -> (Option<String>, f64) {
    sqlx::query_as(
        "SELECT previous_secret, EXTRACT(EPOCH FROM previous_secret_expires_at - now())::float8 / 3600
           FROM webhook_endpoints WHERE id = $1::uuid",
    )
    .bind(endpoint_id)
    .fetch_one(pool)
    .await
    .expect("previous secret")
}

/// Look: a tenant's signing secrets as stored (current, previous), which
/// must be sealed (`tdenc:` envelopes), never the secret itself.
pub async fn stored_signing_secrets(
    pool: &PgPool,
    tenant: &TestTenant,
) -> (String, Option<String>) {
    sqlx::query_as(
        "SELECT signing_secret, previous_signing_secret FROM tenants WHERE id = $1::uuid",
    )
    .bind(&tenant.id)
    .fetch_one(pool)
    .await
    .expect("stored signing secrets")
}

/// Look: a webhook endpoint's secret as stored.
pub async fn stored_endpoint_secret(pool: &PgPool, endpoint_id: &str) -> String {
    sqlx::query_scalar("SELECT secret FROM webhook_endpoints WHERE id = $1::uuid")
        .bind(endpoint_id)
        .fetch_one(pool)
        .await
        .expect("stored endpoint secret")
}

/// Stage: a tenant's signing secret and an endpoint's secret stored in
/// plaintext, as every row was before encryption at rest (migration 0010).
pub async fn stage_plaintext_secrets(
    pool: &PgPool,
    tenant: &TestTenant,
    endpoint_id: &str,
    webhook_secret: &str,
) {
    sqlx::query("UPDATE tenants SET signing_secret = $2 WHERE id = $1::uuid")
        .bind(&tenant.id)
        .bind(&tenant.signing_secret)
        .execute(pool)
        .await
        .expect("stage plaintext signing secret");
    sqlx::query("UPDATE webhook_endpoints SET secret = $2 WHERE id = $1::uuid")
        .bind(endpoint_id)
        .bind(webhook_secret)
        .execute(pool)
        .await
        .expect("stage plaintext endpoint secret");
}

/// Look: whether any stored API key hash contains `fragment` (it must not:
/// keys are stored only as hashes).
pub async fn api_key_hashes_containing(pool: &PgPool, fragment: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM api_keys WHERE encode(key_hash, 'escape') LIKE '%' || $1 || '%'",
    )
    .bind(fragment)
    .fetch_one(pool)
    .await
    .expect("api key hashes")
}

/// Look: every user's watermarks (seen tx, seen id, read tx, read id), by user.
pub async fn feed_marks(pool: &PgPool) -> Vec<(i64, i64, i64, i64)> {
    sqlx::query_as("SELECT seen_tx, seen_id, read_tx, read_id FROM feed_state ORDER BY user_id")
        .fetch_all(pool)
        .await
        .expect("marks")
}

/// Look: the feed position (id, writing transaction) of the in-app item an
/// alert wrote for notification `key`.
pub async fn inbox_item_position(pool: &PgPool, tenant: &TestTenant, key: &str) -> (i64, i64) {
    sqlx::query_as("SELECT id, tx FROM inbox_items WHERE tenant_id = $1 AND notification_key = $2")
        .bind(tenant.uuid())
        .bind(key)
        .fetch_one(pool)
        .await
        .expect("inbox item")
}

/// Look: ids of the deliveries on `channel`, in id order.
pub async fn delivery_ids(pool: &PgPool, channel: &str) -> Vec<i64> {
    sqlx::query_scalar(&format!(
        "SELECT id FROM {ALL_DELIVERIES} WHERE channel = $1 ORDER BY id"
    ))
    .bind(channel)
    .fetch_all(pool)
    .await
    .expect("delivery ids")
}

/// Look: a tenant's deliveries by status (polled while workers run; the API
/// would page through thousands of rows per poll).
pub async fn status_counts(pool: &PgPool, tenant: &TestTenant) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(&format!(
        "SELECT {status}, count(*) FROM {ALL_DELIVERIES} WHERE tenant_id = $1 GROUP BY 1",
        status = *STATUS_SQL,
    ))
    .bind(tenant.uuid())
    .fetch_all(pool)
    .await
    .expect("status counts")
    .into_iter()
    .collect()
}

#[derive(Debug, sqlx::FromRow)]
pub struct DeliveryRow {
    pub notification_key: String,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub sent_at_set: bool,
}

impl DeliveryRow {
    /// (status, attempts, whether `sent_at` is set)
    pub fn outcome(&self) -> (&str, i32, bool) {
        (self.status.as_str(), self.attempts, self.sent_at_set)
    }
}

/// Look: the delivery of notification `key` (one endpoint per key in the
/// tests that use it).
pub async fn delivery(pool: &PgPool, tenant: &TestTenant, key: &str) -> DeliveryRow {
    sqlx::query_as(&format!(
        "SELECT notification_key, {status} AS status, attempts, last_error,
                sent_at IS NOT NULL AS sent_at_set
         FROM {ALL_DELIVERIES} WHERE tenant_id = $1 AND notification_key = $2",
        status = *STATUS_SQL,
    ))
    .bind(tenant.uuid())
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("delivery row")
}

/// Hold: takes the advisory lock an alert for (tenant, event type, entity)
/// takes, in a transaction the caller keeps open; requests for that entity
/// wait until it rolls back.
pub async fn hold_alert_entity_lock(
    pool: &PgPool,
    tenant: &TestTenant,
    event_type: &str,
    entity_id: &str,
) -> Transaction<'static, Postgres> {
    let lock = tidings_server::alerts::entity_lock_key(
        tenant.uuid(),
        &tidings_core::EventType::parse(event_type).expect("event type"),
        &tidings_core::EntityId::parse(entity_id).expect("entity id"),
    );
    let mut blocker = pool.begin().await.expect("begin");
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(lock)
        .execute(&mut *blocker)
        .await
        .expect("advisory lock");
    blocker
}

/// Hold: takes `table`'s ACCESS EXCLUSIVE lock in a transaction the caller
/// keeps open: every statement of the server on that table waits for it.
pub async fn hold_table_lock(pool: &PgPool, table: &str) -> Transaction<'static, Postgres> {
    let mut blocker = pool.begin().await.expect("begin");
    sqlx::query(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .execute(&mut *blocker)
        .await
        .expect("table lock");
    blocker
}

/// Look: sessions of this database waiting for an advisory lock (requests
/// queued behind a held entity lock).
pub async fn advisory_lock_waiters(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks
          WHERE locktype = 'advisory' AND NOT granted
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(pool)
    .await
    .expect("pg_locks")
}

/// Hold: writes an event for `team` in a transaction that stays open until the
/// caller commits it; returns (transaction, id, tx). A writer that took its
/// transaction id first and commits last is what the API's own short
/// transactions cannot stage. Like every feed writer it first takes the
/// tenant's feed lock (the server's own statement).
pub async fn event_in_open_transaction(
    pool: &PgPool,
    tenant: &TestTenant,
    team: &str,
    kind: &str,
) -> (Transaction<'static, Postgres>, i64, i64) {
    let mut tx = pool.begin().await.expect("begin");
    tidings_server::store::horizon::lock_feed_writes(&mut *tx, tenant.uuid())
        .await
        .expect("feed lock");
    let (id, txid): (i64, i64) = sqlx::query_as(
        "INSERT INTO events (tenant_id, team_id, type, payload)
         VALUES ($1, $2, $3, '{}') RETURNING id, tx",
    )
    .bind(tenant.uuid())
    .bind(team)
    .bind(kind)
    .fetch_one(&mut *tx)
    .await
    .expect("insert event");
    (tx, id, txid)
}

/// Hold: a transaction with an id, open in another database of the cluster
/// (the test server's own maintenance database) until the connection drops;
/// returns the connection and the id.
pub async fn xid_held_in_another_database() -> (PgConnection, i64) {
    xid_held_on(&admin_url()).await
}

/// Hold: a transaction with an id (`BEGIN; SELECT pg_current_xact_id()`) on
/// the server and database of `url`, open until the connection drops;
/// returns the connection and the id.
pub async fn xid_held_on(url: &str) -> (PgConnection, i64) {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::query("BEGIN")
        .execute(&mut conn)
        .await
        .expect("begin");
    let xid: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
        .fetch_one(&mut conn)
        .await
        .expect("xid");
    (conn, xid)
}

/// Look: the migrations recorded as applied.
pub async fn applied_migrations(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await
        .expect("applied migrations")
}

/// Stage: deliveries the workers gave up on (ten failed attempts take hours).
pub async fn stage_dead_deliveries(pool: &PgPool, ids: &[i64]) {
    sqlx::query("UPDATE deliveries SET status = 'dead', attempts = 10, last_error = 'HTTP 500' WHERE id = ANY($1)")
        .bind(ids)
        .execute(pool)
        .await
        .expect("stage dead");
}

/// Stage: a delivery a worker claimed and is sending right now (as a claim
/// of a version before migration 0015 stored it, which this version reads
/// alike).
pub async fn stage_delivery_in_flight(pool: &PgPool, id: i64) {
    sqlx::query("UPDATE deliveries SET status = 'sending', attempts = 1, claimed_until = now() + interval '1 minute' WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await
        .expect("stage in flight");
}

/// Stage: ends the grace of an endpoint's rotated-out secret now instead of
/// in 24 hours.
pub async fn end_previous_secret_grace(pool: &PgPool, endpoint_id: &str) {
    let done = sqlx::query(
        "UPDATE webhook_endpoints SET previous_secret_expires_at = now() - interval '1 second'
          WHERE id = $1::uuid AND previous_secret IS NOT NULL",
    )
    .bind(endpoint_id)
    .execute(pool)
    .await
    .expect("end grace");
    assert_eq!(
        done.rows_affected(),
        1,
        "endpoint {endpoint_id} was not rotated"
    );
}

/// Stage: forgets the newest applied migration, so the binary knows more
/// migrations than the database has.
pub async fn forget_last_migration(pool: &PgPool) {
    sqlx::query(
        "DELETE FROM _sqlx_migrations WHERE version = (SELECT max(version) FROM _sqlx_migrations)",
    )
    .execute(pool)
    .await
    .expect("forget migration");
}

/// Look: waits until feeds serve what transaction `tx` wrote: until every
/// transaction that could still write below it has ended (the snapshot's
/// xmin passed it). xmin is cluster-wide, so other tests' open transactions
/// delay it too.
pub async fn until_served(tx: i64) {
    until_served_on(&admin_url(), tx).await
}

/// Look: [`until_served`] on the server of `url` (a private cluster's primary).
pub async fn until_served_on(url: &str, tx: i64) {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let xmin: i64 =
            sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
                .fetch_one(&mut conn)
                .await
                .expect("xmin");
        if xmin > tx {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "transaction {tx} not served after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Look: waits until feeds serve everything committed before this call.
pub async fn until_all_served() {
    until_all_served_on(&admin_url()).await
}

/// Look: [`until_all_served`] on the server of `url` (a private cluster's primary).
pub async fn until_all_served_on(url: &str) {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    let now: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
        .fetch_one(&mut conn)
        .await
        .expect("xid");
    until_served_on(url, now).await;
}

/// Stage: a hot standby (at `url`) that stops replaying, as one whose replay
/// falls behind would.
pub async fn pause_replay(url: &str) {
    standby_call(url, "SELECT pg_wal_replay_pause()").await
}

/// Stage: the paused standby at `url` replays again.
pub async fn resume_replay(url: &str) {
    standby_call(url, "SELECT pg_wal_replay_resume()").await
}

/// Stage: the standby at `url` is promoted: a primary of its own from now on.
pub async fn promote(url: &str) {
    standby_call(url, "SELECT pg_promote()").await
}

async fn standby_call(url: &str, statement: &str) {
    let mut conn = PgConnection::connect(url)
        .await
        .expect("connect to standby");
    sqlx::query(statement)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

/// Stage: a database from before secrets were bound to their rows, whose
/// next start binds them (`secrets_bound` removed).
pub async fn stage_secrets_never_bound(pool: &PgPool) {
    sqlx::query("DELETE FROM secrets_bound")
        .execute(pool)
        .await
        .expect("stage secrets never bound");
}

/// Stage: `from`'s stored signing secret copied into `to`'s row, as someone
/// who can write the table (but holds no key) could.
pub async fn copy_stored_signing_secret(pool: &PgPool, from: &TestTenant, to: &TestTenant) {
    sqlx::query(
        "UPDATE tenants SET signing_secret = (SELECT signing_secret FROM tenants WHERE id = $1::uuid)
          WHERE id = $2::uuid",
    )
    .bind(&from.id)
    .bind(&to.id)
    .execute(pool)
    .await
    .expect("copy a stored signing secret");
}
