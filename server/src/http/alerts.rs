//! `POST /v1/alerts` and `GET /v1/alerts/{alert_id}`.

use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Header, Path, Query},
    payload::Json,
    ApiResponse, Enum, Object, OpenApi,
};
use tidings_core::Channel;
use uuid::Uuid;

use super::{deliveries::DeliveryOut, event_types::DeliveryRulesIn, ApiTags, ChannelName};
use crate::{
    alerts::idempotency::{
        self, Fingerprint, IdempotencyError, IdempotencyKey, IdempotencyRequest, SavedResponse,
    },
    alerts::{
        self, AlertCreated, AlertRequest, InvalidAlert, NotificationStatus, SubmitError, Submitted,
    },
    app::state::AppState,
    http::auth::ApiKeyAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
    store::paging::PageRequest,
};

pub struct AlertsApi {
    pub state: AppState,
}

pub const PATH: &str = "/v1/alerts";

// The body of `POST /v1/alerts`, and of a NATS alert message (plus
// `tenant_id`): both front doors read this one type and parse it into an
// `AlertRequest` the same way. (A plain comment: doc comments become the
// OpenAPI description.)
#[derive(Debug, Clone, Object, serde::Serialize, serde::Deserialize)]
#[oai(deny_unknown_fields)]
#[serde(deny_unknown_fields)]
pub struct AlertIn {
    /// E.g. `invoice.overdue` (1–255 bytes).
    pub event_type: String,
    /// The thing the alert is about, e.g. the invoice id (1–255 bytes).
    pub entity_id: String,
    /// At most 1,000 user ids; duplicates are ignored. Exactly one of
    /// `recipients` and `team_id`.
    pub recipients: Option<Vec<String>>,
    /// Every member of this team (memberships). Teams larger than the inline
    /// limit are expanded in the background.
    pub team_id: Option<String>,
    /// Non-empty; duplicates are ignored.
    pub channels: Vec<ChannelName>,
    /// Email subject and in-app title (at most 1,000 bytes, no control characters).
    pub subject: Option<String>,
    /// A JSON object of at most 16 KiB, delivered as is.
    pub payload: serde_json::Value,
    /// The category the alert belongs to (`PUT /v1/categories/{key}`), which
    /// must exist. Omitted: the category of its event type, if any. The
    /// recipients' preferences for it apply, and emails of a non-critical
    /// category carry a one-click unsubscribe link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Per channel, wait and deliver only if the in-app item is still
    /// unread: `{"email": {"delay": "15m", "unless": "read"}}`. A channel not
    /// named takes its event type's default
    /// (`PUT /v1/event-types/{event_type}/delivery`). Needs `in_app` among the
    /// channels; ignored for a critical category, which never waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryRulesIn>,
}

impl AlertIn {
    pub fn into_request(self) -> Result<AlertRequest, InvalidAlert> {
        let channels: Vec<Channel> = self.channels.iter().map(|&c| c.into()).collect();
        AlertRequest::parse(
            self.event_type,
            self.entity_id,
            self.recipients,
            self.team_id,
            &channels,
            self.subject,
            self.payload,
        )?
        .with_category(self.category)?
        .with_delivery(match &self.delivery {
            Some(rules) => rules.parse()?,
            None => Default::default(),
        })
    }

    /// What an Idempotency-Key on this body guards: the body as sent (before
    /// deduplication), absent fields as null.
    fn fingerprint(&self) -> ApiResult<Fingerprint> {
        let body = serde_json::to_value(self).map_err(anyhow::Error::from)?;
        Ok(Fingerprint::of_request("POST", PATH, &body))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, serde::Serialize, serde::Deserialize)]
#[oai(rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum NotificationStatusOut {
    /// New: queued for delivery (in-app: already in the feed).
    Created,
    /// This (tenant, event type, entity, recipient, channel) was notified before.
    Duplicate,
    /// New, but there is nothing to deliver to (no email address, no endpoint).
    Skipped,
}

#[derive(Debug, Clone, Object, serde::Serialize, serde::Deserialize)]
pub struct NotificationOut {
    pub recipient_id: String,
    pub channel: ChannelName,
    /// The notification key (64 hex characters): the `webhook-id` receivers see.
    pub key: String,
    /// The same key in readable form, for people.
    pub readable_key: String,
    pub status: NotificationStatusOut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, serde::Serialize, serde::Deserialize)]
#[oai(rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum ExpansionOut {
    /// Named recipients: nothing to expand.
    None,
    /// A team expanded within this request: `deliveries` lists every member.
    Inline,
    /// A large team expanded by a background worker: `deliveries` is empty;
    /// follow progress with `GET /v1/alerts/{alert_id}`.
    Background,
}

#[derive(Debug, Clone, Object, serde::Serialize, serde::Deserialize)]
pub struct AlertCreatedOut {
    /// The new alert; when every notification was a duplicate, the alert that
    /// first created them (nothing new is stored).
    pub alert_id: Uuid,
    /// One entry per recipient and channel.
    pub deliveries: Vec<NotificationOut>,
    pub expansion: ExpansionOut,
}

fn render(created: &AlertCreated, team: bool) -> AlertCreatedOut {
    AlertCreatedOut {
        alert_id: created.alert_id,
        deliveries: created
            .deliveries
            .iter()
            .map(|d| NotificationOut {
                recipient_id: d.recipient_id.to_string(),
                channel: d.channel.into(),
                key: d.key.clone(),
                readable_key: d.readable_key.clone(),
                status: match d.status {
                    NotificationStatus::Created => NotificationStatusOut::Created,
                    NotificationStatus::Duplicate => NotificationStatusOut::Duplicate,
                    NotificationStatus::Skipped => NotificationStatusOut::Skipped,
                },
            })
            .collect(),
        expansion: match (team, created.background_expansion) {
            (_, true) => ExpansionOut::Background,
            (true, false) => ExpansionOut::Inline,
            (false, false) => ExpansionOut::None,
        },
    }
}

#[derive(ApiResponse)]
pub enum AlertAccepted {
    /// Accepted: notifications are written; deliveries proceed in the background.
    #[oai(status = 202)]
    Accepted(
        Json<AlertCreatedOut>,
        /// `true` when this is the stored response of an earlier request with the
        /// same Idempotency-Key.
        #[oai(header = "Idempotency-Replayed")]
        Option<String>,
    ),
}

#[derive(Debug, Object)]
pub struct ExpansionStatusOut {
    pub done: bool,
    /// Members expanded so far.
    pub expanded: i64,
}

#[derive(Debug, Object)]
pub struct AlertOut {
    pub id: Uuid,
    pub event_type: String,
    pub entity_id: String,
    pub subject: Option<String>,
    pub payload: serde_json::Value,
    pub channels: Vec<ChannelName>,
    pub team_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Present for team alerts expanded in the background.
    pub expansion: Option<ExpansionStatusOut>,
    /// One page of the deliveries this alert created (a webhook notification
    /// has one per subscribed endpoint), ordered by recipient, channel and id.
    pub deliveries: Vec<DeliveryOut>,
    /// Pass as `cursor` for the next page of deliveries; absent when there is
    /// none (a page has a cursor exactly when more deliveries follow).
    pub next_cursor: Option<String>,
}

#[derive(ApiResponse)]
pub enum AlertResponse {
    #[oai(status = 200)]
    Ok(Json<AlertOut>),
}

#[OpenApi(tag = "ApiTags::Alerts")]
impl AlertsApi {
    /// Post a transactional alert.
    ///
    /// Each (event type, entity, recipient, channel) is notified at most once,
    /// however often this is retried; with an `Idempotency-Key` a retry also gets
    /// the first response back. Recipients' preferences and the category decide
    /// which channels are written; `delivery` delays a channel and can skip it
    /// when the in-app item was read first. 202: the deliveries are queued.
    #[oai(path = "/v1/alerts", method = "post", operation_id = "alerts.create")]
    async fn create(
        &self,
        auth: ApiKeyAuth,
        /// Optional, at most 255 printable ASCII characters, scoped to this tenant
        /// and path and kept for at least 24 hours.
        #[oai(name = "Idempotency-Key")]
        idempotency_key: Header<Option<String>>,
        body: Json<AlertIn>,
    ) -> ApiResult<AlertAccepted> {
        let idempotency = match idempotency_key.0.as_deref() {
            None => None,
            Some(raw) => Some(IdempotencyRequest {
                key: IdempotencyKey::parse(raw).map_err(|e| {
                    ApiError::bad_request(ProblemCode::InvalidIdempotencyKey, e.to_string())
                })?,
                path: PATH.to_owned(),
                fingerprint: body.fingerprint()?,
            }),
        };
        let alert = body.0.into_request().map_err(invalid_alert)?;
        let team = alert.team().is_some();
        let submitted = alerts::submit::submit(
            &self.state.pool,
            &self.state.stream,
            &self.state.settings.alerts,
            auth.0.tenant_id,
            idempotency,
            &alert,
        )
        .await
        .map_err(submit_problem)?;
        match submitted {
            Submitted::Fresh(pending) => {
                let out = render(pending.created(), team);
                let response = SavedResponse {
                    status: 202,
                    body: serde_json::to_vec(&out).map_err(anyhow::Error::from)?,
                };
                pending.commit(response).await.map_err(submit_problem)?;
                Ok(AlertAccepted::Accepted(Json(out), None))
            }
            Submitted::Replayed(saved) => {
                let out: AlertCreatedOut = serde_json::from_slice(&saved.body).map_err(|e| {
                    ApiError::Internal(anyhow::anyhow!("stored response unreadable: {e}"))
                })?;
                Ok(AlertAccepted::Accepted(Json(out), Some("true".to_owned())))
            }
        }
    }

    /// Read an alert and its deliveries.
    ///
    /// The alert with a page of its deliveries: each one's status, attempts,
    /// last error, and for a skipped one the reason (a preference, or the item
    /// read or seen first, with the watermark the decision saw).
    #[oai(
        path = "/v1/alerts/:alert_id",
        method = "get",
        operation_id = "alerts.get"
    )]
    async fn get(
        &self,
        auth: ApiKeyAuth,
        /// The `alert_id` that `POST /v1/alerts` answered.
        alert_id: Path<Uuid>,
        /// `next_cursor` of the previous page (opaque).
        cursor: Query<Option<String>>,
        /// Deliveries per page: 1–1000, default 100.
        limit: Query<Option<u32>>,
    ) -> ApiResult<AlertResponse> {
        let page = PageRequest::parse(
            cursor.0.as_deref(),
            limit.0,
            alerts::DEFAULT_DELIVERY_LIMIT,
            alerts::MAX_DELIVERY_LIMIT,
        )?;
        let (alert, deliveries) = alerts::get(&self.state.pool, auth.0.tenant_id, *alert_id, &page)
            .await?
            .ok_or_else(|| ApiError::not_found(ProblemCode::AlertNotFound, "no such alert"))?;
        Ok(AlertResponse::Ok(Json(AlertOut {
            id: alert.id,
            event_type: alert.event_type,
            entity_id: alert.entity_id,
            subject: alert.subject,
            payload: alert.payload,
            // The column only ever holds the core's channel names.
            channels: alert
                .channels
                .iter()
                .filter_map(|c| c.parse::<Channel>().ok())
                .map(ChannelName::from)
                .collect(),
            team_id: alert.team_id,
            created_at: alert.created_at,
            expansion: alert.expansion_done.map(|done| ExpansionStatusOut {
                done,
                expanded: alert.expanded.unwrap_or(0),
            }),
            deliveries: deliveries.items.into_iter().map(Into::into).collect(),
            next_cursor: deliveries.next_cursor,
        })))
    }
}

fn invalid_alert(err: InvalidAlert) -> ApiError {
    ApiError::unprocessable(ProblemCode::InvalidAlert, err.to_string())
}

fn submit_problem(err: SubmitError) -> ApiError {
    match err {
        SubmitError::Idempotency(err) => idempotency_problem(err),
        // Nothing was written; the lock is held by another alert's short
        // transaction, so a second is plenty.
        busy @ SubmitError::EntityBusy => ApiError::Conflict {
            code: ProblemCode::EntityBusy,
            detail: busy.to_string(),
            retry_after_secs: Some(1),
        },
        too_large @ SubmitError::TooLarge { .. } => {
            ApiError::unprocessable(ProblemCode::AlertTooLarge, too_large.to_string())
        }
        unknown @ SubmitError::UnknownCategory(_) => {
            ApiError::unprocessable(ProblemCode::UnknownCategory, unknown.to_string())
        }
        SubmitError::Db(db) => db.into(),
    }
}

/// The problems of the Idempotency-Key header, for any endpoint that takes it.
pub(super) fn idempotency_problem(err: IdempotencyError) -> ApiError {
    match err {
        IdempotencyError::KeyReused(_) => ApiError::unprocessable(
            ProblemCode::IdempotencyKeyReused,
            format!(
                "this {} was used with a different request",
                idempotency::HEADER
            ),
        ),
        IdempotencyError::InFlight => ApiError::Conflict {
            code: ProblemCode::IdempotencyKeyInFlight,
            detail: err.to_string(),
            retry_after_secs: Some(idempotency::IN_FLIGHT_RETRY_AFTER_SECS),
        },
        IdempotencyError::Db(db) => db.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> AlertIn {
        AlertIn {
            event_type: "invoice.overdue".into(),
            entity_id: "inv-42".into(),
            recipients: Some(vec!["ann".into(), "bob".into(), "ann".into()]),
            team_id: None,
            channels: vec![ChannelName::Email, ChannelName::InApp, ChannelName::Webhook],
            subject: Some("Invoice overdue".into()),
            payload: serde_json::json!({"amount": 42, "currency": "EUR", "lines": [{"b": 1, "a": 2}]}),
            category: None,
            delivery: None,
        }
    }

    /// Fingerprints stored for Idempotency-Keys before `crate::alerts::idempotency`
    /// existed, computed by the code it replaced: a retry across the upgrade
    /// must replay, not fail with 422.
    #[test]
    fn alert_fingerprints_are_the_ones_stored_before() {
        let hex = |a: &AlertIn| hex::encode(a.fingerprint().expect("serialises").as_bytes());
        assert_eq!(
            hex(&body()),
            "22f704c60184bfafa5498385270d52ea57f241da5706ea234e22782ac71a1edd"
        );
        let team = AlertIn {
            recipients: None,
            team_id: Some("ops".into()),
            subject: None,
            ..body()
        };
        assert_eq!(
            hex(&team),
            "73f2c07b821dc3552ba319e0540465e5d40db9233c97c182d3f559b176c39972"
        );
    }

    #[test]
    fn the_nats_body_is_the_http_body() {
        let json = serde_json::to_value(body()).expect("serialises");
        let back: AlertIn = serde_json::from_value(json).expect("reads back");
        assert_eq!(back.fingerprint().ok(), body().fingerprint().ok());
        let mut unknown = serde_json::to_value(body()).expect("serialises");
        unknown["priority"] = serde_json::json!("high");
        assert!(serde_json::from_value::<AlertIn>(unknown).is_err());
    }
}
