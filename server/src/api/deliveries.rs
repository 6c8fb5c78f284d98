//! Operators' view of the outbox: list deliveries by status, re-queue one.

use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Path, Query},
    payload::Json,
    ApiResponse, Enum, Object, OpenApi,
};
use uuid::Uuid;

use super::ApiTags;
use crate::{
    alerts::{self, RetryRefusal},
    auth::ApiKeyAuth,
    error::{ApiError, ApiResult},
    state::AppState,
    store::alerts::{self as alert_store, DeliveryRow},
};

pub struct DeliveriesApi {
    pub state: AppState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum DeliveryStatus {
    Pending,
    Sending,
    Sent,
    Retrying,
    Dead,
    Skipped,
}

impl DeliveryStatus {
    fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Sending => "sending",
            DeliveryStatus::Sent => "sent",
            DeliveryStatus::Retrying => "retrying",
            DeliveryStatus::Dead => "dead",
            DeliveryStatus::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Object)]
pub struct DeliveryOut {
    pub id: i64,
    pub alert_id: Uuid,
    pub recipient_id: String,
    /// `in_app`, `email` or `webhook`.
    pub channel: String,
    /// The notification key: the receiver's idempotency id (webhook-id).
    pub key: String,
    /// Webhook deliveries: the target endpoint.
    pub endpoint_id: Option<Uuid>,
    /// `pending`, `sending`, `sent`, `retrying`, `dead` or `skipped`.
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl From<DeliveryRow> for DeliveryOut {
    fn from(r: DeliveryRow) -> Self {
        DeliveryOut {
            id: r.id,
            alert_id: r.alert_id,
            recipient_id: r.recipient_id,
            channel: r.channel,
            key: r.notification_key,
            endpoint_id: r.endpoint_id,
            status: r.status,
            attempts: r.attempts,
            last_error: r.last_error,
            next_attempt_at: r.next_attempt_at,
            sent_at: r.sent_at,
            created_at: r.created_at,
        }
    }
}

#[derive(Debug, Object)]
pub struct DeliveryPage {
    pub data: Vec<DeliveryOut>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

#[derive(ApiResponse)]
pub enum DeliveryPageResponse {
    #[oai(status = 200)]
    Ok(Json<DeliveryPage>),
}

#[derive(ApiResponse)]
pub enum DeliveryResponse {
    #[oai(status = 200)]
    Ok(Json<DeliveryOut>),
}

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 100;

#[OpenApi(tag = "ApiTags::Deliveries")]
impl DeliveriesApi {
    /// Deliveries in id order, optionally of one status (e.g. `dead`).
    #[oai(
        path = "/v1/deliveries",
        method = "get",
        operation_id = "deliveries.list"
    )]
    async fn list(
        &self,
        auth: ApiKeyAuth,
        status: Query<Option<DeliveryStatus>>,
        /// `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
        /// 1–100, default 50.
        limit: Query<Option<u32>>,
    ) -> ApiResult<DeliveryPageResponse> {
        let limit = limit.0.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::bad_request(
                "invalid_limit",
                format!("limit must be 1..={MAX_LIMIT}"),
            ));
        }
        let after = match cursor.0.as_deref() {
            None => None,
            Some(c) => Some(c.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
                ApiError::bad_request("invalid_cursor", "cursor is not one this API issued")
            })?),
        };
        let rows = alert_store::list_deliveries(
            &self.state.pool,
            auth.0.tenant_id,
            status.0.map(DeliveryStatus::as_str),
            after,
            i64::from(limit),
        )
        .await?;
        let next_cursor = (rows.len() == limit as usize)
            .then(|| rows.last().map(|r| r.id.to_string()))
            .flatten();
        Ok(DeliveryPageResponse::Ok(Json(DeliveryPage {
            data: rows.into_iter().map(Into::into).collect(),
            next_cursor,
        })))
    }

    /// Re-queue a `dead` or `retrying` delivery now, with a fresh attempt budget.
    /// A `pending` one is returned as is; `sending` is 409 (a worker holds it);
    /// `sent` and `skipped` are 409 (nothing to retry).
    #[oai(
        path = "/v1/deliveries/:id/retry",
        method = "post",
        operation_id = "deliveries.retry"
    )]
    async fn retry(&self, auth: ApiKeyAuth, id: Path<i64>) -> ApiResult<DeliveryResponse> {
        match alerts::retry_delivery(&self.state.pool, auth.0.tenant_id, *id).await? {
            Ok(row) => Ok(DeliveryResponse::Ok(Json(row.into()))),
            Err(RetryRefusal::NotFound) => Err(ApiError::not_found(
                "delivery_not_found",
                "no such delivery",
            )),
            Err(RetryRefusal::Sending(secs)) => Err(ApiError::Conflict {
                code: "delivery_in_flight",
                detail: "a worker is delivering this right now".into(),
                retry_after_secs: Some(secs),
            }),
            Err(RetryRefusal::Final(status)) => Err(ApiError::Conflict {
                code: "delivery_not_retryable",
                detail: format!("the delivery is {status}; there is nothing to retry"),
                retry_after_secs: None,
            }),
        }
    }
}
