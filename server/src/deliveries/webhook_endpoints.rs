//! The webhook endpoints service: creation under the per-tenant cap, and the
//! paged list. The other operations are one statement each, called by the
//! handler directly (`store::webhook_endpoints`).

use tidings_core::stable_lock_key;
use uuid::Uuid;

pub use crate::store::webhook_endpoints::EndpointRow;
use crate::{
    db::PrimaryPool,
    store::paging::{Page, PageRequest},
    store::{self, webhook_endpoints as endpoint_store},
};

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 100;

/// A validated endpoint, its secret already sealed (bound to `id`).
pub struct NewEndpoint<'a> {
    pub id: Uuid,
    pub url: &'a str,
    pub description: Option<&'a str>,
    pub event_types: Option<&'a [String]>,
    pub sealed_secret: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum CreateEndpointError {
    #[error(
        "the tenant has {max} webhook endpoints, the most TIDINGS_MAX_WEBHOOK_ENDPOINTS allows; \
         delete one first"
    )]
    TooMany { max: u32 },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Creates an endpoint unless the tenant has `max` already. Creations of one
/// tenant take turns on an advisory lock, so two at once cannot both pass the
/// count; nothing else waits on it.
pub async fn create(
    pool: &PrimaryPool,
    tenant: Uuid,
    endpoint: NewEndpoint<'_>,
    max: u32,
) -> Result<EndpointRow, CreateEndpointError> {
    let mut tx = pool.begin().await?;
    store::lock_xact(
        &mut *tx,
        stable_lock_key(&["webhook-endpoints", &tenant.to_string()]),
    )
    .await?;
    if endpoint_store::count_endpoints(&mut *tx, tenant).await? >= i64::from(max) {
        return Err(CreateEndpointError::TooMany { max });
    }
    let row = endpoint_store::insert_endpoint(
        &mut *tx,
        tenant,
        endpoint.id,
        endpoint.url,
        endpoint.description,
        endpoint.event_types,
        endpoint.sealed_secret,
    )
    .await?;
    tx.commit().await?;
    Ok(row)
}

/// One page of the tenant's endpoints, in creation order.
pub async fn list(
    pool: &PrimaryPool,
    tenant: Uuid,
    page: &PageRequest<Uuid>,
) -> sqlx::Result<Page<EndpointRow>> {
    let rows = endpoint_store::list_endpoints(pool, tenant, page.after, page.fetch_limit()).await?;
    Ok(page.page(rows, |row| &row.id))
}
