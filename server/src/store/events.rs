//! Activity events: one row per event whatever the size of its team
//! (ARCHITECTURE.md, invariant 1). Feeds find them through memberships at
//! read time.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use tidings_core::{EntityId, EventType, Position, TeamId, UserId};
use uuid::Uuid;

/// A checked event, ready to store.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub team_id: TeamId,
    pub event_type: EventType,
    pub actor_id: Option<UserId>,
    pub object_id: Option<EntityId>,
    /// A JSON object (checked by the caller; the table checks it again).
    pub payload: serde_json::Value,
    /// The producer's idempotency key and the fingerprint of the event's
    /// canonical form.
    pub idempotency: Option<(String, [u8; 32])>,
}

/// Where a stored event sits in the feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRow {
    pub id: i64,
    pub position: Position,
    pub created_at: DateTime<Utc>,
}

/// An event found by its idempotency key, with the fingerprint it was stored
/// under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedEvent {
    pub event: EventRow,
    pub fingerprint: Vec<u8>,
}

/// `n` ids of the feed item sequence, taken up front so each result maps to
/// its input without relying on the order of RETURNING.
pub async fn reserve_feed_item_ids(db: impl PgExecutor<'_>, n: usize) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar("SELECT nextval('feed_item_id_seq') FROM generate_series(1, $1)")
        .bind(n as i64)
        .fetch_all(db)
        .await
}

/// Inserts `events` under `ids` (same order) in one statement and returns the
/// rows that were inserted, by id. An event whose idempotency key is taken is
/// not inserted: ON CONFLICT waits for a concurrent insert of the same key to
/// commit, so the winner is visible to [`find_events_by_keys`] afterwards.
pub async fn insert_events(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    ids: &[i64],
    events: &[NewEvent],
) -> sqlx::Result<HashMap<i64, EventRow>> {
    let column = |f: fn(&NewEvent) -> Option<String>| events.iter().map(f).collect::<Vec<_>>();
    let inserted: Vec<(i64, i64, DateTime<Utc>)> = sqlx::query_as(
        "INSERT INTO events (tenant_id, id, team_id, type, actor_id, object_id, payload,
                             idempotency_key, request_fingerprint)
         SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[],
                                  $7::jsonb[], $8::text[], $9::bytea[])
         ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
         RETURNING id, tx, created_at",
    )
    .bind(tenant_id)
    .bind(ids)
    .bind(column(|e| Some(e.team_id.to_string())))
    .bind(column(|e| Some(e.event_type.to_string())))
    .bind(column(|e| e.actor_id.as_ref().map(UserId::to_string)))
    .bind(column(|e| e.object_id.as_ref().map(EntityId::to_string)))
    .bind(events.iter().map(|e| e.payload.clone()).collect::<Vec<_>>())
    .bind(column(|e| e.idempotency.as_ref().map(|(k, _)| k.clone())))
    .bind(
        events
            .iter()
            .map(|e| e.idempotency.as_ref().map(|(_, f)| f.to_vec()))
            .collect::<Vec<_>>(),
    )
    .fetch_all(db)
    .await?;
    Ok(inserted
        .into_iter()
        .map(|(id, tx, created_at)| {
            let row = EventRow {
                id,
                position: Position::new(tx, id),
                created_at,
            };
            (id, row)
        })
        .collect())
}

/// The events holding `keys`, by key.
pub async fn find_events_by_keys(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    keys: &[String],
) -> sqlx::Result<HashMap<String, KeyedEvent>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        idempotency_key: String,
        id: i64,
        tx: i64,
        created_at: DateTime<Utc>,
        request_fingerprint: Vec<u8>,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT idempotency_key, id, tx, created_at, request_fingerprint FROM events
         WHERE tenant_id = $1 AND idempotency_key = ANY($2)",
    )
    .bind(tenant_id)
    .bind(keys)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let event = KeyedEvent {
                event: EventRow {
                    id: r.id,
                    position: Position::new(r.tx, r.id),
                    created_at: r.created_at,
                },
                fingerprint: r.request_fingerprint,
            };
            (r.idempotency_key, event)
        })
        .collect())
}
