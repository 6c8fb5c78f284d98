//! Activity events: one row per event whatever the size of its team (DESIGN.md
//! invariant 1). Feeds find them through memberships at read time.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{Acquire, PgExecutor, Postgres};
use tidings_core::Position;
use uuid::Uuid;

/// A validated event, ready to store.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub team_id: String,
    pub event_type: String,
    pub actor_id: Option<String>,
    pub object_id: Option<String>,
    /// A JSON object (checked by the caller; the table checks it again).
    pub payload: serde_json::Value,
    /// The producer's idempotency key and the fingerprint of the request's
    /// canonical form.
    pub idempotency: Option<(String, [u8; 32])>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub id: i64,
    pub position: Position,
    pub created_at: DateTime<Utc>,
    /// True when an earlier request with the same idempotency key stored it.
    pub replayed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum InsertEventsError {
    #[error("idempotency key {key:?} was already used for a different event")]
    KeyReused { key: String },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Stores `events` in one transaction, so they share one `tx` and become visible
/// together. An event whose idempotency key is already taken is not stored again:
/// with the same fingerprint the original is returned (`replayed`), with another
/// the whole call fails with [`InsertEventsError::KeyReused`] and stores nothing.
/// Results are in input order.
pub async fn insert_events<'c>(
    db: impl Acquire<'c, Database = Postgres>,
    tenant_id: Uuid,
    events: &[NewEvent],
) -> Result<Vec<StoredEvent>, InsertEventsError> {
    let mut tx = db.begin().await?;
    // Ids are taken up front so each result maps to its input without relying on
    // the order of RETURNING.
    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT nextval('feed_item_id_seq') FROM generate_series(1, $1)")
            .bind(events.len() as i64)
            .fetch_all(&mut *tx)
            .await?;
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
    .bind(&ids)
    .bind(column(|e| Some(e.team_id.clone())))
    .bind(column(|e| Some(e.event_type.clone())))
    .bind(column(|e| e.actor_id.clone()))
    .bind(column(|e| e.object_id.clone()))
    .bind(events.iter().map(|e| e.payload.clone()).collect::<Vec<_>>())
    .bind(column(|e| e.idempotency.as_ref().map(|(k, _)| k.clone())))
    .bind(
        events
            .iter()
            .map(|e| e.idempotency.as_ref().map(|(_, f)| f.to_vec()))
            .collect::<Vec<_>>(),
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut by_id: HashMap<i64, (i64, DateTime<Utc>)> = inserted
        .into_iter()
        .map(|(id, txid, at)| (id, (txid, at)))
        .collect();

    // Whatever was not inserted lost on its idempotency key: to an earlier
    // request, a concurrent one (ON CONFLICT waited for it to commit), or an
    // earlier entry of this same batch.
    let conflicted: Vec<String> = events
        .iter()
        .zip(&ids)
        .filter(|(_, id)| !by_id.contains_key(id))
        .filter_map(|(e, _)| e.idempotency.as_ref().map(|(k, _)| k.clone()))
        .collect();
    let existing: HashMap<String, (i64, i64, DateTime<Utc>, Vec<u8>)> = if conflicted.is_empty() {
        HashMap::new()
    } else {
        find_events_by_keys(&mut *tx, tenant_id, &conflicted).await?
    };

    let mut out = Vec::with_capacity(events.len());
    for (event, id) in events.iter().zip(&ids) {
        if let Some((txid, created_at)) = by_id.remove(id) {
            out.push(StoredEvent {
                id: *id,
                position: Position::new(txid, *id),
                created_at,
                replayed: false,
            });
            continue;
        }
        let (key, fingerprint) = event.idempotency.as_ref().ok_or_else(|| {
            sqlx::Error::Protocol("an event without a key was not inserted".into())
        })?;
        let (orig_id, orig_tx, created_at, orig_fingerprint) = existing
            .get(key)
            .ok_or_else(|| sqlx::Error::Protocol("conflicting idempotency key vanished".into()))?;
        if orig_fingerprint.as_slice() != fingerprint.as_slice() {
            return Err(InsertEventsError::KeyReused { key: key.clone() });
        }
        out.push(StoredEvent {
            id: *orig_id,
            position: Position::new(*orig_tx, *orig_id),
            created_at: *created_at,
            replayed: true,
        });
    }
    tx.commit().await?;
    Ok(out)
}

type KeyedEvent = (i64, i64, DateTime<Utc>, Vec<u8>);

async fn find_events_by_keys(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    keys: &[String],
) -> Result<HashMap<String, KeyedEvent>, sqlx::Error> {
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
            let event = (r.id, r.tx, r.created_at, r.request_fingerprint);
            (r.idempotency_key, event)
        })
        .collect())
}
