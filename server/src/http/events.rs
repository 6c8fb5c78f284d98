//! Activity events (API key): written once per team, read by every member's feed.

use chrono::{DateTime, Utc};
use poem_openapi::{param::Header, payload::Json, ApiResponse, Object, OpenApi};
use tidings_core::{EntityId, EventType, KeyError, TeamId, UserId};

use super::ApiTags;
use crate::{
    alerts::idempotency,
    alerts::payload::{Payload, PayloadError},
    app::state::AppState,
    feed::events::{self, EventsError, NewEvent, Posted, StoredEvent, MAX_BATCH},
    http::auth::ApiKeyAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
};

pub struct EventsApi {
    pub state: AppState,
}

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
    fn from(stored: StoredEvent) -> Self {
        let e = stored.event;
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
    Created(
        Json<EventCreatedOut>,
        /// The post's consistency token, when reads may be served by hot
        /// standbys: a front end that sends it back in the header of the same
        /// name on `GET /v1/feed` reads a feed that holds these events.
        #[oai(header = "Tidings-Consistency-Token")]
        Option<String>,
    ),
    /// A retry: this idempotency key already stored this same event.
    #[oai(status = 200)]
    Replayed(
        Json<EventCreatedOut>,
        /// The post's consistency token, when reads may be served by hot
        /// standbys: a front end that sends it back in the header of the same
        /// name on `GET /v1/feed` reads a feed that holds these events.
        #[oai(header = "Tidings-Consistency-Token")]
        Option<String>,
    ),
}

#[derive(ApiResponse)]
pub enum CreateBatchResponse {
    /// At least one event was stored.
    #[oai(status = 201)]
    Created(
        Json<EventBatchOut>,
        /// The post's consistency token, when reads may be served by hot
        /// standbys: a front end that sends it back in the header of the same
        /// name on `GET /v1/feed` reads a feed that holds these events.
        #[oai(header = "Tidings-Consistency-Token")]
        Option<String>,
    ),
    /// Every event was a retry of an earlier one (by idempotency key).
    #[oai(status = 200)]
    Replayed(
        Json<EventBatchOut>,
        /// The post's consistency token, when reads may be served by hot
        /// standbys: a front end that sends it back in the header of the same
        /// name on `GET /v1/feed` reads a feed that holds these events.
        #[oai(header = "Tidings-Consistency-Token")]
        Option<String>,
    ),
}

#[OpenApi(tag = "ApiTags::Events")]
impl EventsApi {
    /// Post an activity event to a team.
    ///
    /// Stored once, however many members the team has; each member's feed finds
    /// it at read time. The answer's `cursor` is the event's feed position.
    /// The idempotency key may come in the body's `idempotency_key` or in the
    /// `Idempotency-Key` header, with the same meaning.
    #[oai(path = "/v1/events", method = "post", operation_id = "events.create")]
    async fn create(
        &self,
        auth: ApiKeyAuth,
        /// The event's idempotency key, as the body's `idempotency_key` (when
        /// both are given they must be equal): a retry with it answers 200
        /// with the original event.
        #[oai(name = "Idempotency-Key")]
        idempotency_key: Header<Option<String>>,
        body: Json<EventIn>,
    ) -> ApiResult<CreateEventResponse> {
        let mut event = body.0;
        if let Some(header) = idempotency_key.0 {
            match &event.idempotency_key {
                Some(field) if *field != header => {
                    return Err(ApiError::unprocessable(
                        ProblemCode::ConflictingIdempotencyKeys,
                        format!(
                            "the {} header and the body's idempotency_key differ",
                            idempotency::HEADER
                        ),
                    ))
                }
                _ => event.idempotency_key = Some(header),
            }
        }
        let event = parse_event(event, None)?;
        let mut posted = insert(&self.state, auth, &[event]).await?;
        let token = posted.token.map(|t| t.to_string());
        let stored = posted
            .events
            .pop()
            .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("insert returned no event")))?;
        Ok(if stored.replayed {
            CreateEventResponse::Replayed(Json(stored.into()), token)
        } else {
            CreateEventResponse::Created(Json(stored.into()), token)
        })
    }

    /// Post up to 1,000 events in one transaction.
    ///
    /// All are stored or none; they share one transaction and so become visible
    /// to feeds together. Idempotency keys work per event (each event's
    /// `idempotency_key`; an `Idempotency-Key` header is refused with 422); one
    /// key reused with a different body fails the whole batch (422).
    #[oai(
        path = "/v1/events/batch",
        method = "post",
        operation_id = "events.create_batch"
    )]
    async fn create_batch(
        &self,
        auth: ApiKeyAuth,
        request: &poem::Request,
        body: Json<EventBatchIn>,
    ) -> ApiResult<CreateBatchResponse> {
        // One header cannot guard many events, and ignoring it would let a
        // sender believe its retries were safe.
        if request.headers().contains_key(idempotency::HEADER) {
            return Err(ApiError::unprocessable(
                ProblemCode::IdempotencyKeyOnBatch,
                format!(
                    "a batch takes no {} header: give each event its own idempotency_key",
                    idempotency::HEADER
                ),
            ));
        }
        let count = body.events.len();
        if count == 0 || count > MAX_BATCH {
            return Err(ApiError::unprocessable(
                ProblemCode::InvalidBatchSize,
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
        let posted = insert(&self.state, auth, &events).await?;
        let token = posted.token.map(|t| t.to_string());
        let all_replayed = posted.events.iter().all(|e| e.replayed);
        let out = Json(EventBatchOut {
            events: posted
                .events
                .into_iter()
                .map(EventCreatedOut::from)
                .collect(),
        });
        Ok(if all_replayed {
            CreateBatchResponse::Replayed(out, token)
        } else {
            CreateBatchResponse::Created(out, token)
        })
    }
}

async fn insert(state: &AppState, auth: ApiKeyAuth, events: &[NewEvent]) -> ApiResult<Posted> {
    events::post_events(state, auth.0.tenant_id, events)
        .await
        .map_err(|err| match err {
            EventsError::KeyReused { .. } => {
                ApiError::unprocessable(ProblemCode::IdempotencyKeyReused, err.to_string())
            }
            EventsError::Db(db) => db.into(),
        })
}

/// Checks one event and computes its fingerprint. `index` names the event in a
/// batch, so the problem says which one is wrong.
fn parse_event(event: EventIn, index: Option<usize>) -> Result<NewEvent, ApiError> {
    let at = |field: &str| match index {
        Some(i) => format!("events[{i}].{field}"),
        None => field.to_string(),
    };
    let bad_id = |field: &str, err: KeyError| {
        ApiError::bad_request(ProblemCode::InvalidId, format!("{}: {err}", at(field)))
    };
    let team_id = TeamId::parse(event.team_id).map_err(|e| bad_id("team_id", e))?;
    let event_type =
        EventType::parse_as("type", event.event_type).map_err(|e| bad_id("type", e))?;
    let actor_id = event
        .actor_id
        .map(|a| UserId::parse_as("actor_id", a))
        .transpose()
        .map_err(|e| bad_id("actor_id", e))?;
    let object_id = event
        .object_id
        .map(|o| EntityId::parse_as("object_id", o))
        .transpose()
        .map_err(|e| bad_id("object_id", e))?;
    if let Some(key) = &event.idempotency_key {
        tidings_core::validate_id("idempotency_key", key)
            .map_err(|e| bad_id("idempotency_key", e))?;
    }
    let payload = Payload::parse(event.payload).map_err(|err| {
        let code = match err {
            PayloadError::NotAnObject => ProblemCode::InvalidPayload,
            PayloadError::TooLarge { .. } => ProblemCode::PayloadTooLarge,
        };
        ApiError::unprocessable(code, format!("{} {err}", at("payload")))
    })?;
    let idempotency = event.idempotency_key.map(|key| {
        let fingerprint = events::fingerprint(
            &team_id,
            &event_type,
            actor_id.as_ref(),
            object_id.as_ref(),
            &payload,
        );
        (key, fingerprint.to_bytes())
    });
    Ok(NewEvent {
        team_id,
        event_type,
        actor_id,
        object_id,
        payload: payload.into_json(),
        idempotency,
    })
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

    fn fingerprint_of(e: EventIn) -> [u8; 32] {
        parse_event(e, None)
            .expect("valid")
            .idempotency
            .expect("the example has a key")
            .1
    }

    #[test]
    fn fingerprint_ignores_key_order_but_not_content() {
        let a = json(r#"{"a": 1, "b": {"x": [1, 2], "y": null}}"#);
        let b = json(r#"{"b": {"y": null, "x": [1, 2]}, "a": 1}"#);
        let c = json(r#"{"b": {"y": null, "x": [2, 1]}, "a": 1}"#);
        assert_eq!(fingerprint_of(event(a.clone())), fingerprint_of(event(b)));
        assert_ne!(fingerprint_of(event(a.clone())), fingerprint_of(event(c)));
        let mut other_team = event(a.clone());
        other_team.team_id = "other".into();
        assert_ne!(fingerprint_of(event(a)), fingerprint_of(other_team));
    }

    #[test]
    fn an_absent_field_differs_from_one_spelled_null() {
        let mut absent = event(serde_json::json!({}));
        absent.actor_id = None;
        let mut named_null = absent.clone();
        named_null.actor_id = Some("null".into());
        assert_ne!(fingerprint_of(absent), fingerprint_of(named_null));
    }

    /// The fingerprint stored for an event before `crate::alerts::idempotency`
    /// existed, computed by the function it replaced: a retry across the
    /// upgrade must replay, not fail with 422.
    #[test]
    fn an_event_fingerprint_is_the_one_stored_before() {
        let e = EventIn {
            team_id: "design".into(),
            event_type: "comment.created".into(),
            actor_id: Some("alice".into()),
            object_id: None,
            payload: json(r#"{"z": [1, 2.5, {"b": null, "a": "é\"\n"}], "a": true, "m": -3}"#),
            idempotency_key: Some("k".into()),
        };
        assert_eq!(
            hex::encode(fingerprint_of(e)),
            "3a7e7d67e467353ea8039f8677b0a89900c54455517f30795e3e655b92d33653"
        );
    }

    #[test]
    fn problems_name_the_event_of_a_batch_and_the_field() {
        let mut bad = event(serde_json::json!([1]));
        let err = parse_event(bad.clone(), Some(3)).unwrap_err();
        assert_eq!(err.code(), ProblemCode::InvalidPayload);
        assert_eq!(err.to_string(), "events[3].payload must be a JSON object");
        bad.team_id = String::new();
        let err = parse_event(bad, None).unwrap_err();
        assert_eq!(err.code(), ProblemCode::InvalidId);
        assert_eq!(err.to_string(), "team_id: team_id must not be empty");
    }
}
