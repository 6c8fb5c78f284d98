//! The deliveries service: the outbox as operators see it — deliveries listed
//! by status, and the re-queue of one that failed. The workers that drain the
//! outbox are `crate::workers::outbox`; the SQL is `store::deliveries`.

pub mod digests;
pub mod fallback;
pub mod webhook_endpoints;

pub mod status;

use uuid::Uuid;

pub use self::status::DeliveryStatus;
pub use crate::store::deliveries::DeliveryRow;
use crate::{
    db::PrimaryPool,
    store::deliveries as store,
    store::paging::{Page, PageRequest},
};

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 100;

/// One page of the tenant's deliveries in id order, optionally of one status.
pub async fn list(
    pool: &PrimaryPool,
    tenant: Uuid,
    status: Option<DeliveryStatus>,
    page: &PageRequest<i64>,
) -> sqlx::Result<Page<DeliveryRow>> {
    let rows = store::list_deliveries(pool, tenant, status, page.after, page.fetch_limit()).await?;
    Ok(page.page(rows, |row| &row.id))
}

/// Why an operator's re-queue was refused.
#[derive(Debug, thiserror::Error)]
pub enum RequeueError {
    #[error("no such delivery")]
    NotFound,
    /// A worker holds it; its lease ends within `retry_after_secs`.
    #[error("a worker is delivering this right now")]
    InFlight { retry_after_secs: u64 },
    /// `sent` or `skipped`: there is nothing to retry.
    #[error("the delivery is {0}; there is nothing to retry")]
    Final(DeliveryStatus),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// `dead` and `retrying` go back to `pending`, due now, with a fresh attempt
/// budget (so the whole retry schedule applies again; the old last_error
/// stays for reference until the next attempt). `pending` is already queued
/// and is returned unchanged. `sending` is refused until the worker's lease
/// ends: that is when asking again can succeed.
pub async fn requeue(
    pool: &PrimaryPool,
    tenant: Uuid,
    id: i64,
) -> Result<DeliveryRow, RequeueError> {
    let mut tx = pool.begin().await?;
    let locked = store::lock_delivery(&mut tx, tenant, id)
        .await?
        .ok_or(RequeueError::NotFound)?;
    let row = match locked.delivery.status {
        DeliveryStatus::Dead | DeliveryStatus::Retrying => {
            let row = store::requeue_delivery(&mut *tx, tenant, id).await?;
            store::notify_outbox(&mut *tx, tenant).await?;
            row
        }
        DeliveryStatus::Pending => locked.delivery,
        DeliveryStatus::Sending => {
            return Err(RequeueError::InFlight {
                retry_after_secs: retry_after_secs(locked.lease_left_secs),
            })
        }
        status @ (DeliveryStatus::Sent | DeliveryStatus::Skipped) => {
            return Err(RequeueError::Final(status))
        }
    };
    tx.commit().await?;
    Ok(row)
}

/// Whole seconds until a lease ends, at least 1 (a lease that has just
/// expired is about to be claimed again by a worker).
fn retry_after_secs(lease_left_secs: Option<f64>) -> u64 {
    match lease_left_secs {
        Some(left) if left.is_finite() && left > 1.0 => left.ceil() as u64,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::retry_after_secs;

    #[test]
    fn retry_after_is_the_rest_of_the_lease_rounded_up_and_at_least_one_second() {
        assert_eq!(retry_after_secs(Some(59.2)), 60);
        assert_eq!(retry_after_secs(Some(3.0)), 3);
        assert_eq!(retry_after_secs(Some(0.3)), 1);
        assert_eq!(retry_after_secs(Some(-4.0)), 1);
        assert_eq!(retry_after_secs(None), 1);
    }
}
