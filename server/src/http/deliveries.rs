//! Operators' view of the outbox: list deliveries by status, re-queue one.

use chrono::{DateTime, Utc};
use poem_openapi::{
    param::{Path, Query},
    payload::Json,
    ApiResponse, Object, OpenApi,
};
use tidings_core::Position;
use uuid::Uuid;

use super::{ApiTags, ChannelName};
use crate::{
    app::state::AppState,
    deliveries::{self, DeliveryRow, DeliveryStatus, RequeueError},
    http::auth::ApiKeyAuth,
    http::error::{ApiError, ApiResult, ProblemCode},
    store::paging::PageRequest,
};

pub struct DeliveriesApi {
    pub state: AppState,
}

#[derive(Debug, Object)]
pub struct DeliveryOut {
    pub id: i64,
    pub alert_id: Uuid,
    pub recipient_id: String,
    pub channel: ChannelName,
    /// The notification key: the receiver's idempotency id (webhook-id).
    pub key: String,
    /// Webhook deliveries: the target endpoint.
    pub endpoint_id: Option<Uuid>,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Present when the delivery waited for the in-app item to be read (or
    /// seen): what it waited on and what its last decision saw.
    pub condition: Option<DeliveryConditionOut>,
}

/// A delayed delivery's condition and its decision. It is sent only if its
/// in-app item is above the watermark when the decision is made and was not
/// read one by one; skipped with `last_error` `read` or `seen` otherwise.
#[derive(Debug, Object)]
pub struct DeliveryConditionOut {
    /// `read` or `seen`.
    pub unless: String,
    /// The feed cursor of the in-app item it follows; absent when the
    /// recipient got none (nothing to read: the delay alone applied).
    pub item: Option<String>,
    /// The watermark the last decision saw, as a feed cursor (the read
    /// watermark, or for `seen` the later of seen and read); absent until
    /// decided.
    pub decided_watermark: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl From<DeliveryRow> for DeliveryOut {
    fn from(r: DeliveryRow) -> Self {
        DeliveryOut {
            id: r.id,
            alert_id: r.alert_id,
            recipient_id: r.recipient_id,
            channel: r.channel.into(),
            key: r.notification_key,
            endpoint_id: r.endpoint_id,
            status: r.status,
            attempts: r.attempts,
            last_error: r.last_error,
            next_attempt_at: r.next_attempt_at,
            sent_at: r.sent_at,
            created_at: r.created_at,
            condition: r.unless_mark.map(|unless| {
                let cursor =
                    |tx: Option<i64>, id: Option<i64>| Some(Position::new(tx?, id?).to_cursor());
                DeliveryConditionOut {
                    unless,
                    item: cursor(r.item_tx, r.item_id),
                    decided_watermark: cursor(r.decided_mark_tx, r.decided_mark_id),
                    decided_at: r.decided_at,
                }
            }),
        }
    }
}

#[derive(Debug, Object)]
pub struct DeliveryPage {
    pub data: Vec<DeliveryOut>,
    /// Pass as `cursor` for the next page; absent when there is none (a page
    /// has a cursor exactly when more deliveries follow).
    pub next_cursor: Option<String>,
}

#[derive(ApiResponse)]
pub enum DeliveryPageResponse {
    #[oai(status = 200)]
    Ok(Json<DeliveryPage>),
}

/// A digest: a recipient's emails of one event type (and key) collected over
/// a window into one email (`delivery.email.digest`).
#[derive(Debug, Object)]
pub struct DigestOut {
    pub id: i64,
    /// The event type, then `/` and the rule's key when it has one.
    pub key: String,
    /// `open` (collecting), `decided` (to be sent), `sent`, `empty` (every
    /// item was read or seen before the flush: no email), `skipped` (the
    /// recipient turned email off, or has no address) or `dead`.
    pub status: String,
    pub window_start: DateTime<Utc>,
    /// When the window ends and the digest is flushed.
    pub flush_at: DateTime<Utc>,
    /// Items collected.
    pub items: i32,
    /// Items the email holds: those still unread (unseen) at the flush.
    pub sent_items: Option<i32>,
    /// `read` or `seen`, when items read (seen) before the flush are left out.
    pub unless: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    /// The watermark the flush decided against, as a feed cursor.
    pub decided_watermark: Option<String>,
    /// Why no email (`read`, `seen`, a preference, no address), or the last
    /// sending error.
    pub reason: Option<String>,
    pub sent_at: Option<DateTime<Utc>>,
    pub attempts: i32,
    /// The email's Message-ID: the same on every attempt.
    pub message_id: String,
}

#[derive(Debug, Object)]
pub struct DigestPage {
    pub data: Vec<DigestOut>,
    /// Pass as `cursor` for the next page; absent when there is none.
    pub next_cursor: Option<String>,
}

#[derive(ApiResponse)]
pub enum DigestPageResponse {
    #[oai(status = 200)]
    Ok(Json<DigestPage>),
}

#[derive(ApiResponse)]
pub enum DeliveryResponse {
    #[oai(status = 200)]
    Ok(Json<DeliveryOut>),
}

#[OpenApi(tag = "ApiTags::Deliveries")]
impl DeliveriesApi {
    /// List deliveries.
    ///
    /// In id order, a page at a time, optionally of one status (for example
    /// `dead`, to find what needs a look).
    #[oai(
        path = "/v1/deliveries",
        method = "get",
        operation_id = "deliveries.list"
    )]
    async fn list(
        &self,
        auth: ApiKeyAuth,
        /// Only deliveries in this status.
        status: Query<Option<DeliveryStatus>>,
        /// `next_cursor` of the previous page (opaque).
        cursor: Query<Option<String>>,
        /// 1–100, default 50.
        limit: Query<Option<u32>>,
    ) -> ApiResult<DeliveryPageResponse> {
        let page = PageRequest::parse(
            cursor.0.as_deref(),
            limit.0,
            deliveries::DEFAULT_LIMIT,
            deliveries::MAX_LIMIT,
        )?;
        let page = deliveries::list(&self.state.pool, auth.0.tenant_id, status.0, &page).await?;
        let page = page.map(DeliveryOut::from);
        Ok(DeliveryPageResponse::Ok(Json(DeliveryPage {
            data: page.items,
            next_cursor: page.next_cursor,
        })))
    }

    /// List a user's digests.
    ///
    /// In id order, a page at a time: what each digest collected, what its
    /// flush decided, against which watermark, and why no email was sent.
    #[oai(
        path = "/v1/users/:user_id/digests",
        method = "get",
        operation_id = "users.digests.list"
    )]
    async fn list_digests(
        &self,
        auth: ApiKeyAuth,
        /// The user, as the tenant names them.
        user_id: Path<String>,
        /// `next_cursor` of the previous page (opaque).
        cursor: Query<Option<String>>,
        /// 1–100, default 50.
        limit: Query<Option<u32>>,
    ) -> ApiResult<DigestPageResponse> {
        let user = tidings_core::UserId::parse(user_id.0)?;
        let page = PageRequest::parse(
            cursor.0.as_deref(),
            limit.0,
            deliveries::DEFAULT_LIMIT,
            deliveries::MAX_LIMIT,
        )?;
        let tenant = auth.0.tenant_id;
        let page = crate::deliveries::digests::list(&self.state.pool, tenant, &user, &page).await?;
        let page = page.map(|r| DigestOut {
            message_id: crate::deliveries::digests::message_id(tenant, r.id),
            id: r.id,
            key: r.digest_key,
            status: r.status,
            window_start: r.window_start,
            flush_at: r.flush_at,
            items: r.item_count,
            sent_items: r.sent_count,
            unless: r.unless_mark,
            decided_at: r.decided_at,
            decided_watermark: match (r.decided_mark_tx, r.decided_mark_id) {
                (Some(tx), Some(id)) => Some(Position::new(tx, id).to_cursor()),
                _ => None,
            },
            reason: r.reason,
            sent_at: r.sent_at,
            attempts: r.attempts,
        });
        Ok(DigestPageResponse::Ok(Json(DigestPage {
            data: page.items,
            next_cursor: page.next_cursor,
        })))
    }

    /// Retry a delivery now.
    ///
    /// Re-queues a `dead` or `retrying` delivery with a fresh attempt budget. A
    /// `pending` one is returned as is; `sending` is 409 (a worker holds it;
    /// `Retry-After` says when its lease ends); `sent` and `skipped` are 409
    /// (nothing to retry).
    #[oai(
        path = "/v1/deliveries/:id/retry",
        method = "post",
        operation_id = "deliveries.retry"
    )]
    async fn retry(
        &self,
        auth: ApiKeyAuth,
        /// The delivery's id.
        id: Path<i64>,
    ) -> ApiResult<DeliveryResponse> {
        match deliveries::requeue(&self.state.pool, auth.0.tenant_id, *id).await {
            Ok(row) => Ok(DeliveryResponse::Ok(Json(row.into()))),
            Err(err @ RequeueError::NotFound) => Err(ApiError::not_found(
                ProblemCode::DeliveryNotFound,
                err.to_string(),
            )),
            Err(err @ RequeueError::InFlight { retry_after_secs }) => Err(ApiError::Conflict {
                code: ProblemCode::DeliveryInFlight,
                detail: err.to_string(),
                retry_after_secs: Some(retry_after_secs),
            }),
            Err(err @ RequeueError::Final(_)) => Err(ApiError::Conflict {
                code: ProblemCode::DeliveryNotRetryable,
                detail: err.to_string(),
                retry_after_secs: None,
            }),
            Err(RequeueError::Db(db)) => Err(db.into()),
        }
    }
}
