//! Activity events (API key): written once per team, read by every member's feed.

use chrono::{DateTime, Utc};
use poem_openapi::{payload::Json, ApiResponse, Object, OpenApi};
use sha2::{Digest, Sha256};

use super::ApiTags;
use crate::{
    auth::ApiKeyAuth,
    error::{ApiError, ApiResult},
    state::AppState,
    store::{
        self,
        events::{InsertEventsError, NewEvent, StoredEvent},
    },
};

pub struct EventsApi {
    pub state: AppState,
}

/// Largest accepted `payload`, measured as compact serialized JSON.
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;
/// Most events in one batch.
pub const MAX_BATCH: usize = 1000;

/// An activity event for a team ("alice commented on the design doc").
#[derive(Debug, Clone, Object)]
#[oai(deny_unknown_fields, example)]
pub struct EventIn {
    /// The team whose members see the event (1–255 bytes, no control characters).
    pub team_id: String,
    /// Event type, e.g. `comment.created` (1–255 bytes, no control characters).
    #[oai(rename = "type")]
    pub event_type: String,
    /// Who did it.
    pub actor_id: Option<String>,
    /// What it was done to.
    pub object_id: Option<String>,
    /// Anything the front end needs to render the event: a JSON object of at
    /// most 16 KiB (compact serialization).
    pub payload: serde_json::Value,
    /// Retrying with the same key and the same body answers 200 with the
    /// original event; the same key with a different body is refused (422).
    /// Keys are per tenant and never expire.
    pub idempotency_key: Option<String>,
}

impl poem_openapi::types::Example for EventIn {
    fn example() -> Self {
        EventIn {
            team_id: "design".into(),
            event_type: "comment.created".into(),
            actor_id: Some("alice".into()),
            object_id: Some("doc-42".into()),
            payload: serde_json::json!({"text": "Looks good to me", "doc_title": "Q3 plan"}),
            idempotency_key: Some("comment-9f2c".into()),
        }
    }
}

/// Up to 1,000 events stored in one transaction: all or none, visible together.
#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct EventBatchIn {
    pub events: Vec<EventIn>,
}

/// A stored event.
#[derive(Debug, Object)]
#[oai(example)]
pub struct EventCreatedOut {
    pub id: i64,
    /// The event's feed position. Feeds serve it once every transaction that
    /// started writing before it has ended, usually at once; a reader never
    /// sees it out of order.
    pub cursor: String,
    pub created_at: DateTime<Utc>,
}

impl poem_openapi::types::Example for EventCreatedOut {
    fn example() -> Self {
        EventCreatedOut {
            id: 1_306,
            cursor: tidings_core::Position::new(7_415, 1_306).to_cursor(),
            created_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }
}

impl From<StoredEvent> for EventCreatedOut {
    fn from(e: StoredEvent) -> Self {
        EventCreatedOut {
            id: e.id,
            cursor: e.position.to_cursor(),
            created_at: e.created_at,
        }
    }
}

#[derive(Debug, Object)]
pub struct EventBatchOut {
    /// In the order of the request.
    pub events: Vec<EventCreatedOut>,
}

#[derive(ApiResponse)]
pub enum CreateEventResponse {
    /// Stored.
    #[oai(status = 201)]
    Created(Json<EventCreatedOut>),
    /// A retry: this idempotency key already stored this same event.
    #[oai(status = 200)]
    Replayed(Json<EventCreatedOut>),
}

#[derive(ApiResponse)]
pub enum CreateBatchResponse {
    /// At least one event was stored.
    #[oai(status = 201)]
    Created(Json<EventBatchOut>),
    /// Every event was a retry of an earlier one (by idempotency key).
    #[oai(status = 200)]
    Replayed(Json<EventBatchOut>),
}

#[OpenApi(tag = "ApiTags::Events")]
impl EventsApi {
    /// Post an activity event to a team.
    ///
    /// Stored once, however many members the team has; each member's feed finds
    /// it at read time. The answer's `cursor` is the event's feed position.
    #[oai(path = "/v1/events", method = "post", operation_id = "events.create")]
    async fn create(
        &self,
        auth: ApiKeyAuth,
        body: Json<EventIn>,
    ) -> ApiResult<CreateEventResponse> {
        let event = parse_event(body.0, None)?;
        let mut stored = insert(&self.state, auth, &[event]).await?;
        let stored = stored
            .pop()
            .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("insert returned no event")))?;
        Ok(if stored.replayed {
            CreateEventResponse::Replayed(Json(stored.into()))
        } else {
            CreateEventResponse::Created(Json(stored.into()))
        })
    }

    /// Post up to 1,000 events in one transaction.
    ///
    /// All are stored or none; they share one transaction and so become visible
    /// to feeds together. Idempotency keys work per event; one key reused with a
    /// different body fails the whole batch (422).
    #[oai(
        path = "/v1/events/batch",
        method = "post",
        operation_id = "events.create_batch"
    )]
    async fn create_batch(
        &self,
        auth: ApiKeyAuth,
        body: Json<EventBatchIn>,
    ) -> ApiResult<CreateBatchResponse> {
        let count = body.events.len();
        if count == 0 || count > MAX_BATCH {
            return Err(ApiError::unprocessable(
                "invalid_batch_size",
                format!("a batch holds 1..={MAX_BATCH} events; got {count}"),
            ));
        }
        let events = body
            .0
            .events
            .into_iter()
            .enumerate()
            .map(|(i, e)| parse_event(e, Some(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let stored = insert(&self.state, auth, &events).await?;
        let all_replayed = stored.iter().all(|e| e.replayed);
        let out = Json(EventBatchOut {
            events: stored.into_iter().map(EventCreatedOut::from).collect(),
        });
        Ok(if all_replayed {
            CreateBatchResponse::Replayed(out)
        } else {
            CreateBatchResponse::Created(out)
        })
    }
}

async fn insert(
    state: &AppState,
    auth: ApiKeyAuth,
    events: &[NewEvent],
) -> ApiResult<Vec<StoredEvent>> {
    store::events::insert_events(&state.pool, auth.0.tenant_id, events)
        .await
        .map_err(|err| match err {
            InsertEventsError::KeyReused { key } => ApiError::unprocessable(
                "idempotency_key_reused",
                format!("idempotency_key {key:?} was already used with a different event"),
            ),
            InsertEventsError::Db(db) => db.into(),
        })
}

/// Checks one event and computes its fingerprint. `index` names the event in a
/// batch, so the problem says which one is wrong.
fn parse_event(event: EventIn, index: Option<usize>) -> Result<NewEvent, ApiError> {
    let at = |field: &str| match index {
        Some(i) => format!("events[{i}].{field}"),
        None => field.to_string(),
    };
    let check = |field: &'static str, value: &str| {
        tidings_core::validate_id(field, value)
            .map_err(|err| ApiError::bad_request("invalid_id", format!("{}: {err}", at(field))))
    };
    check("team_id", &event.team_id)?;
    check("type", &event.event_type)?;
    if let Some(actor) = &event.actor_id {
        check("actor_id", actor)?;
    }
    if let Some(object) = &event.object_id {
        check("object_id", object)?;
    }
    if let Some(key) = &event.idempotency_key {
        check("idempotency_key", key)?;
    }
    if !event.payload.is_object() {
        return Err(ApiError::unprocessable(
            "invalid_payload",
            format!("{} must be a JSON object", at("payload")),
        ));
    }
    let size = serde_json::to_vec(&event.payload)
        .map_err(|err| ApiError::Internal(err.into()))?
        .len();
    if size > MAX_PAYLOAD_BYTES {
        return Err(ApiError::unprocessable(
            "payload_too_large",
            format!(
                "{} is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}",
                at("payload")
            ),
        ));
    }
    let idempotency = event
        .idempotency_key
        .clone()
        .map(|key| (key, fingerprint(&event)));
    Ok(NewEvent {
        team_id: event.team_id,
        event_type: event.event_type,
        actor_id: event.actor_id,
        object_id: event.object_id,
        payload: event.payload,
        idempotency,
    })
}

/// SHA-256 of the event's canonical form: the fields in a fixed order, absent
/// ones as null, object keys sorted at every depth. So a retry that serializes
/// the same event differently (key order, whitespace) still matches, and any
/// change of content does not.
fn fingerprint(event: &EventIn) -> [u8; 32] {
    let mut canonical = String::new();
    let fields = serde_json::json!([
        event.team_id,
        event.event_type,
        event.actor_id,
        event.object_id,
        event.payload,
    ]);
    write_canonical(&fields, &mut canonical);
    Sha256::digest(canonical.as_bytes()).into()
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload: serde_json::Value) -> EventIn {
        EventIn {
            payload,
            ..<EventIn as poem_openapi::types::Example>::example()
        }
    }

    fn json(text: &str) -> serde_json::Value {
        serde_json::from_str(text).expect("test JSON")
    }

    #[test]
    fn fingerprint_ignores_key_order_but_not_content() {
        let a = json(r#"{"a": 1, "b": {"x": [1, 2], "y": null}}"#);
        let b = json(r#"{"b": {"y": null, "x": [1, 2]}, "a": 1}"#);
        let c = json(r#"{"b": {"y": null, "x": [2, 1]}, "a": 1}"#);
        assert_eq!(fingerprint(&event(a.clone())), fingerprint(&event(b)));
        assert_ne!(fingerprint(&event(a.clone())), fingerprint(&event(c)));
        let mut other_team = event(a.clone());
        other_team.team_id = "other".into();
        assert_ne!(fingerprint(&event(a)), fingerprint(&other_team));
    }

    #[test]
    fn an_absent_field_differs_from_one_spelled_null() {
        let mut absent = event(serde_json::json!({}));
        absent.actor_id = None;
        let mut named_null = absent.clone();
        named_null.actor_id = Some("null".into());
        assert_ne!(fingerprint(&absent), fingerprint(&named_null));
    }

    #[test]
    fn payloads_must_be_small_objects() {
        assert!(parse_event(event(serde_json::json!([1])), None).is_err());
        assert!(parse_event(event(serde_json::json!("text")), None).is_err());
        let big = "x".repeat(MAX_PAYLOAD_BYTES);
        assert!(parse_event(event(serde_json::json!({ "t": big })), None).is_err());
        let fits = "x".repeat(MAX_PAYLOAD_BYTES - r#"{"t":""}"#.len());
        assert!(parse_event(event(serde_json::json!({ "t": fits })), None).is_ok());
    }
}
