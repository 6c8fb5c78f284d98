//! The alert service: transactional alerts, fan-out on write, one
//! notification per (tenant, event type, entity, recipient, channel), never
//! sent twice however often retried.
//!
//! - [`request`]: an alert request parsed once into domain types.
//! - [`plan`]: which rows a fan-out writes — pure functions and their table
//!   tests. **What an alert writes is decided here.**
//! - [`submit`]: the transaction around a plan, for both front doors (HTTP
//!   with its Idempotency-Key, and the NATS inbox).
//! - [`expansion`]: large teams, expanded in background batches.
//! - [`delivery`]: delivery rules (a channel delayed until the in-app item
//!   is read), per alert and per event type.
//! - [`quiet_hours`]: a user's nightly window that holds email and webhook
//!   deliveries until it ends.
//!
//! The walk from a request to its rows is in ARCHITECTURE.md ("Where to
//! change what an alert writes").

pub mod idempotency;
pub mod payload;

pub mod delivery;
pub mod expansion;
pub mod plan;
pub mod preferences;
pub mod quiet_hours;
pub mod request;
pub mod submit;
pub mod templates;

use uuid::Uuid;

pub use plan::NotificationStatus;
pub use request::{AlertRequest, Audience, InvalidAlert};
pub use submit::{
    entity_lock_key, AlertCreated, NotificationOutcome, PendingAlert, SubmitError, Submitted,
};

use crate::{
    db::PrimaryPool,
    store::paging::{AlertDeliveryKey, Page, PageRequest},
    store::{
        alerts::{self as alert_store, AlertRow},
        deliveries::{self as delivery_store, DeliveryRow},
    },
};

/// Deliveries per page of `GET /v1/alerts/{id}`.
pub const DEFAULT_DELIVERY_LIMIT: u32 = 100;
pub const MAX_DELIVERY_LIMIT: u32 = 1000;

/// An alert and one page of its deliveries, by recipient and channel; `None`
/// when it is not this tenant's.
pub async fn get(
    pool: &PrimaryPool,
    tenant: Uuid,
    alert_id: Uuid,
    page: &PageRequest<AlertDeliveryKey>,
) -> sqlx::Result<Option<(AlertRow, Page<DeliveryRow>)>> {
    let Some(alert) = alert_store::get_alert(pool, tenant, alert_id).await? else {
        return Ok(None);
    };
    let after = page
        .after
        .as_ref()
        .map(|k| (k.recipient_id.as_str(), k.channel.as_str(), k.id));
    let rows =
        delivery_store::list_alert_deliveries(pool, tenant, alert_id, after, page.fetch_limit())
            .await?
            .into_iter()
            .map(|row| {
                let key = AlertDeliveryKey {
                    recipient_id: row.recipient_id.clone(),
                    channel: row.channel.as_str().to_string(),
                    id: row.id,
                };
                (key, row)
            })
            .collect();
    let deliveries = page.page(rows, |(key, _)| key).map(|(_, row)| row);
    Ok(Some((alert, deliveries)))
}
