//! `POST /v1/alerts` and `GET /v1/alerts/{alert_id}`.

use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Header, Path},
    payload::Json,
    ApiResponse, Enum, Object, OpenApi,
};
use tidings_core::Channel;
use uuid::Uuid;

use super::{deliveries::DeliveryOut, ApiTags, ChannelName};
use crate::{
    alerts::{self, AlertCreated, AlertInput, NewAlert, NotificationStatus, Submitted},
    auth::ApiKeyAuth,
    error::{ApiError, ApiResult},
    idempotency::{Fingerprint, IdempotencyKey, IdempotencyRequest},
    state::AppState,
    store::{alerts as alert_store, deliveries as delivery_store},
};

pub struct AlertsApi {
    pub state: AppState,
}

pub const PATH: &str = "/v1/alerts";

#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
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
}

impl From<&AlertIn> for AlertInput {
    fn from(a: &AlertIn) -> Self {
        AlertInput {
            event_type: a.event_type.clone(),
            entity_id: a.entity_id.clone(),
            recipients: a.recipients.clone(),
            team_id: a.team_id.clone(),
            channels: a
                .channels
                .iter()
                .map(|&c| Channel::from(c).as_str().to_owned())
                .collect(),
            subject: a.subject.clone(),
            payload: a.payload.clone(),
        }
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
                recipient_id: d.recipient_id.clone(),
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
    pub channels: Vec<String>,
    pub team_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Present for team alerts expanded in the background.
    pub expansion: Option<ExpansionStatusOut>,
    /// Every delivery this alert created (a webhook notification has one per
    /// subscribed endpoint).
    pub deliveries: Vec<DeliveryOut>,
}

#[derive(ApiResponse)]
pub enum AlertResponse {
    #[oai(status = 200)]
    Ok(Json<AlertOut>),
}

#[OpenApi(tag = "ApiTags::Alerts")]
impl AlertsApi {
    /// Post a transactional alert. Each (event type, entity, recipient, channel)
    /// is notified at most once, however often this is retried; with an
    /// `Idempotency-Key` a retry also gets the first response back.
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
        let input = AlertInput::from(&body.0);
        let idempotency = match idempotency_key.0.as_deref() {
            None => None,
            Some(raw) => Some(IdempotencyRequest {
                key: IdempotencyKey::parse(raw)
                    .map_err(|e| ApiError::bad_request("invalid_idempotency_key", e.to_string()))?,
                path: PATH.to_owned(),
                fingerprint: Fingerprint::of_request(
                    "POST",
                    PATH,
                    &serde_json::to_value(&input).map_err(anyhow::Error::from)?,
                ),
            }),
        };
        let team = input.team_id.is_some();
        let alert = NewAlert::parse(input)?;
        let submitted = alerts::submit_alert(
            &self.state.pool,
            &self.state.settings.alerts,
            auth.0.tenant_id,
            idempotency,
            &alert,
            |created| serde_json::to_vec(&render(created, team)).unwrap_or_default(),
        )
        .await?;
        match submitted {
            Submitted::Fresh(created) => {
                Ok(AlertAccepted::Accepted(Json(render(&created, team)), None))
            }
            Submitted::Replayed(saved) => {
                let out: AlertCreatedOut = serde_json::from_slice(&saved.body).map_err(|e| {
                    ApiError::Internal(anyhow::anyhow!("stored response unreadable: {e}"))
                })?;
                Ok(AlertAccepted::Accepted(Json(out), Some("true".to_owned())))
            }
        }
    }

    /// An alert with every delivery and its status.
    #[oai(
        path = "/v1/alerts/:alert_id",
        method = "get",
        operation_id = "alerts.get"
    )]
    async fn get(&self, auth: ApiKeyAuth, alert_id: Path<Uuid>) -> ApiResult<AlertResponse> {
        let tenant = auth.0.tenant_id;
        let alert = alert_store::get_alert(&self.state.pool, tenant, *alert_id)
            .await?
            .ok_or_else(|| ApiError::not_found("alert_not_found", "no such alert"))?;
        let deliveries =
            delivery_store::list_alert_deliveries(&self.state.pool, tenant, *alert_id).await?;
        Ok(AlertResponse::Ok(Json(AlertOut {
            id: alert.id,
            event_type: alert.event_type,
            entity_id: alert.entity_id,
            subject: alert.subject,
            payload: alert.payload,
            channels: alert.channels,
            team_id: alert.team_id,
            created_at: alert.created_at,
            expansion: alert.expansion_done.map(|done| ExpansionStatusOut {
                done,
                expanded: alert.expanded.unwrap_or(0),
            }),
            deliveries: deliveries.into_iter().map(Into::into).collect(),
        })))
    }
}
