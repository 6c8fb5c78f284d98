//! The live stream's statements: the tail each instance reads once per tick,
//! and stream tickets (ARCHITECTURE.md, "The live stream").

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use tidings_core::Position;
use uuid::Uuid;

use super::feed::{FeedItem, Source};

/// What to read of one tenant: rows at or after `from`, with `tx` below
/// `below_tx` (the tenant's horizon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailRange {
    pub tenant_id: Uuid,
    pub from: Position,
    pub below_tx: i64,
}

/// A new feed row and whom it is for.
#[derive(Debug, Clone)]
pub struct TailRow {
    pub tenant_id: Uuid,
    /// The recipient of an in-app alert; events go to their team's members.
    pub recipient_id: Option<String>,
    pub item: FeedItem,
}

/// New rows of events and in-app alerts of the given tenants, in position
/// order, at most `limit`. One range over `(tx, id)` on each table
/// (`events_position`, `inbox_items_position`) serves every tenant.
const TAIL_SQL: &str = "
WITH ranges AS MATERIALIZED (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[])
        AS r (tenant_id, from_tx, from_id, below_tx)
),
span AS MATERIALIZED (
    SELECT min(from_tx) AS lo, max(below_tx) AS hi FROM ranges
)
SELECT * FROM (
    (SELECT e.id, e.tx, e.tenant_id, e.team_id, NULL::text AS recipient_id, e.type,
            e.actor_id, e.object_id, NULL::text AS subject, e.payload, e.created_at,
            'event'::text AS source
     FROM events e JOIN ranges r ON r.tenant_id = e.tenant_id
     WHERE e.tx >= (SELECT lo FROM span) AND e.tx < (SELECT hi FROM span)
       AND (e.tx, e.id) >= (r.from_tx, r.from_id) AND e.tx < r.below_tx
     ORDER BY e.tx, e.id
     LIMIT $5)
    UNION ALL
    (SELECT i.id, i.tx, i.tenant_id, NULL::text, i.recipient_id, i.type,
            NULL::text, i.entity_id, i.subject, i.payload, i.created_at,
            'alert'::text
     FROM inbox_items i JOIN ranges r ON r.tenant_id = i.tenant_id
     WHERE i.tx >= (SELECT lo FROM span) AND i.tx < (SELECT hi FROM span)
       AND (i.tx, i.id) >= (r.from_tx, r.from_id) AND i.tx < r.below_tx
     ORDER BY i.tx, i.id
     LIMIT $5)
) tail
ORDER BY tx, id
LIMIT $5";

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    tx: i64,
    tenant_id: Uuid,
    team_id: Option<String>,
    recipient_id: Option<String>,
    #[sqlx(rename = "type")]
    item_type: String,
    actor_id: Option<String>,
    object_id: Option<String>,
    subject: Option<String>,
    payload: serde_json::Value,
    created_at: DateTime<Utc>,
    source: String,
}

/// Reads the tail. The caller's horizons must come from a statement that
/// ended before this one began (`store::horizon`).
pub async fn read_tail(
    db: impl PgExecutor<'_>,
    ranges: &[TailRange],
    limit: i64,
) -> sqlx::Result<Vec<TailRow>> {
    let rows: Vec<Row> = sqlx::query_as(TAIL_SQL)
        .bind(ranges.iter().map(|r| r.tenant_id).collect::<Vec<_>>())
        .bind(ranges.iter().map(|r| r.from.tx).collect::<Vec<_>>())
        .bind(ranges.iter().map(|r| r.from.id).collect::<Vec<_>>())
        .bind(ranges.iter().map(|r| r.below_tx).collect::<Vec<_>>())
        .bind(limit)
        .fetch_all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let source = if r.source == "alert" {
                Source::Alert
            } else {
                Source::Event
            };
            TailRow {
                tenant_id: r.tenant_id,
                recipient_id: r.recipient_id,
                item: FeedItem {
                    position: Position::new(r.tx, r.id),
                    source,
                    team_id: r.team_id,
                    item_type: r.item_type,
                    actor_id: r.actor_id,
                    object_id: r.object_id,
                    subject: r.subject,
                    payload: r.payload,
                    created_at: r.created_at,
                    individually_read: false,
                },
            }
        })
        .collect())
}

/// Stores a ticket's hash for `ttl_secs`, and drops a few expired ones.
pub async fn insert_stream_ticket(
    db: impl PgExecutor<'_>,
    ticket_hash: &[u8],
    tenant_id: Uuid,
    user_id: &str,
    ttl_secs: i64,
    credential: &TicketCredential,
) -> sqlx::Result<DateTime<Utc>> {
    sqlx::query_scalar(
        "WITH purged AS (
             DELETE FROM stream_tickets WHERE ticket_hash IN (
                 SELECT ticket_hash FROM stream_tickets WHERE expires_at < now() LIMIT 100)
         )
         INSERT INTO stream_tickets (ticket_hash, tenant_id, user_id, expires_at,
                                     credential_issued_at, credential_expires_at, signing_key_id)
         VALUES ($1, $2, $3, now() + make_interval(secs => $4),
                 to_timestamp($5), to_timestamp($6), $7)
         RETURNING expires_at",
    )
    .bind(ticket_hash)
    .bind(tenant_id)
    .bind(user_id)
    .bind(ttl_secs as f64)
    .bind(credential.issued_at as f64)
    .bind(credential.expires_at as f64)
    .bind(credential.signing_key_id.as_deref())
    .fetch_one(db)
    .await
}

/// The credential a ticket was bought with (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketCredential {
    pub issued_at: i64,
    pub expires_at: i64,
    pub signing_key_id: Option<String>,
}

/// A ticket taken while valid: whose it is, when it was minted, and its
/// credential (`None` for a ticket minted before tickets kept it).
#[derive(Debug, Clone)]
pub struct TakenTicket {
    pub tenant_id: Uuid,
    pub user_id: String,
    pub minted_at: DateTime<Utc>,
    pub credential: Option<TicketCredential>,
}

/// Takes a ticket: it is deleted whatever its state, and returned only when
/// it had not expired. `ttl_secs` is how long tickets live (their minting
/// instant is their expiry less it).
pub async fn take_stream_ticket(
    db: impl PgExecutor<'_>,
    ticket_hash: &[u8],
    ttl_secs: i64,
) -> sqlx::Result<Option<TakenTicket>> {
    #[allow(clippy::type_complexity)]
    let row: Option<(
        Uuid,
        String,
        bool,
        DateTime<Utc>,
        Option<i64>,
        Option<i64>,
        Option<String>,
    )> = sqlx::query_as(
        "DELETE FROM stream_tickets WHERE ticket_hash = $1
         RETURNING tenant_id, user_id, expires_at > now(),
                   expires_at - make_interval(secs => $2),
                   floor(extract(epoch FROM credential_issued_at))::bigint,
                   floor(extract(epoch FROM credential_expires_at))::bigint,
                   signing_key_id",
    )
    .bind(ticket_hash)
    .bind(ttl_secs as f64)
    .fetch_optional(db)
    .await?;
    Ok(row.and_then(
        |(tenant_id, user_id, valid, minted_at, issued_at, expires_at, signing_key_id)| {
            valid.then(|| TakenTicket {
                tenant_id,
                user_id,
                minted_at,
                credential: issued_at.zip(expires_at).map(|(issued_at, expires_at)| {
                    TicketCredential {
                        issued_at,
                        expires_at,
                        signing_key_id,
                    }
                }),
            })
        },
    ))
}
