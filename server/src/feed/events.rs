//! The events service: activity events stored once per team (ARCHITECTURE.md,
//! invariant 1), in batches of up to 1,000 that share one transaction and so
//! become visible to feeds together.
//!
//! Idempotency follows the one rule of `crate::alerts::idempotency`, with the key
//! recorded on the event row itself (why: see that module).

use std::collections::HashMap;

use tidings_core::{EntityId, EventType, TeamId, UserId};
use uuid::Uuid;

pub use crate::store::events::{EventRow, NewEvent};
use crate::{
    alerts::idempotency::Fingerprint, alerts::payload::Payload, app::state::AppState,
    db::replicas::Lsn, feed::horizon, store::events as store,
};

/// Most events in one batch.
pub const MAX_BATCH: usize = 1000;

/// A stored event, or the one an earlier request stored under the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredEvent {
    pub event: EventRow,
    /// True when an earlier request with the same idempotency key stored it.
    pub replayed: bool,
}

/// What a post stored, and its consistency token when reads may go to hot
/// standbys (ARCHITECTURE.md, "Reads from hot standbys").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// In input order.
    pub events: Vec<StoredEvent>,
    pub token: Option<Lsn>,
}

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("idempotency_key {key:?} was already used with a different event")]
    KeyReused { key: String },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The fingerprint an event's idempotency key guards: its fields in a fixed
/// order, absent ones as null, as canonical JSON (byte-identical to what is
/// stored in `events.request_fingerprint`).
pub fn fingerprint(
    team_id: &TeamId,
    event_type: &EventType,
    actor_id: Option<&UserId>,
    object_id: Option<&EntityId>,
    payload: &Payload,
) -> Fingerprint {
    Fingerprint::of_json(&serde_json::json!([
        team_id,
        event_type,
        actor_id,
        object_id,
        payload.as_json(),
    ]))
}

/// Stores `events` in one transaction. An event whose idempotency key is
/// already taken is not stored again: with the same fingerprint the original
/// is returned (`replayed`); with another the whole call fails with
/// [`EventsError::KeyReused`] and stores nothing. Results are in input order.
pub async fn post_events(
    state: &AppState,
    tenant_id: Uuid,
    events: &[NewEvent],
) -> Result<Posted, EventsError> {
    let mut tx = horizon::begin_feed_write(&state.pool, tenant_id).await?;
    let ids = store::reserve_feed_item_ids(&mut *tx, events.len()).await?;
    let mut inserted = store::insert_events(&mut *tx, tenant_id, &ids, events).await?;
    // Whatever was not inserted lost on its idempotency key: to an earlier
    // request, a concurrent one, or an earlier entry of this same batch.
    let conflicted: Vec<String> = events
        .iter()
        .zip(&ids)
        .filter(|(_, id)| !inserted.contains_key(id))
        .filter_map(|(e, _)| e.idempotency.as_ref().map(|(k, _)| k.clone()))
        .collect();
    let existing = if conflicted.is_empty() {
        HashMap::new()
    } else {
        store::find_events_by_keys(&mut *tx, tenant_id, &conflicted).await?
    };
    let mut out = Vec::with_capacity(events.len());
    for (event, id) in events.iter().zip(&ids) {
        if let Some(row) = inserted.remove(id) {
            out.push(StoredEvent {
                event: row,
                replayed: false,
            });
            continue;
        }
        let (key, fingerprint) = event.idempotency.as_ref().ok_or_else(|| {
            sqlx::Error::Protocol("an event without a key was not inserted".into())
        })?;
        let original = existing
            .get(key)
            .ok_or_else(|| sqlx::Error::Protocol("conflicting idempotency key vanished".into()))?;
        if original.fingerprint.as_slice() != fingerprint.as_slice() {
            // Dropping the transaction rolls back the whole batch.
            return Err(EventsError::KeyReused { key: key.clone() });
        }
        out.push(StoredEvent {
            event: original.event,
            replayed: true,
        });
    }
    tx.commit().await?;
    state.stream.wake_for(tenant_id);
    // Taken after the commit, so at or past it; a pure replay wrote nothing
    // (its original is as old as the sender's first try), and still gets one.
    let token = state.replicas.written().await?;
    Ok(Posted { events: out, token })
}
