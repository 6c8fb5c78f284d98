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
//!
//! The walk from a request to its rows is in ARCHITECTURE.md ("Where to
//! change what an alert writes").

pub mod expansion;
pub mod plan;
pub mod request;
pub mod submit;

use sqlx::PgPool;
use uuid::Uuid;

pub use plan::NotificationStatus;
pub use request::{AlertRequest, Audience, InvalidAlert};
pub use submit::{
    entity_lock_key, AlertCreated, NotificationOutcome, PendingAlert, SubmitError, Submitted,
};

use crate::store::{
    alerts::{self as alert_store, AlertRow},
    deliveries::{self as delivery_store, DeliveryRow},
};

/// An alert and every delivery it created; `None` when it is not this
/// tenant's.
pub async fn get(
    pool: &PgPool,
    tenant: Uuid,
    alert_id: Uuid,
) -> sqlx::Result<Option<(AlertRow, Vec<DeliveryRow>)>> {
    let Some(alert) = alert_store::get_alert(pool, tenant, alert_id).await? else {
        return Ok(None);
    };
    let deliveries = delivery_store::list_alert_deliveries(pool, tenant, alert_id).await?;
    Ok(Some((alert, deliveries)))
}
