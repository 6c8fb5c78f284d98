//! The tenants service: creating tenants and issuing and revoking their
//! credentials. The admin API and `tidings tenant create` share it.

use sqlx::PgPool;
use tidings_core::KeyError;
use uuid::Uuid;

use crate::{credentials, state::AppState, store::tenants as store};

/// A new tenant's credentials. The API key is shown only here: we keep its hash.
#[derive(Debug, serde::Serialize)]
pub struct IssuedTenant {
    pub tenant_id: Uuid,
    pub name: String,
    pub api_key_id: Uuid,
    pub api_key: String,
    pub signing_secret: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// The display name breaks the id rules (empty, too long, control characters).
    #[error(transparent)]
    InvalidName(#[from] KeyError),
    #[error("no such tenant")]
    NotFound,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Creates a tenant with its first API key, in one transaction.
pub async fn create_tenant(pool: &PgPool, name: &str) -> Result<IssuedTenant, TenantError> {
    tidings_core::validate_id("name", name)?;
    let api_key = credentials::new_api_key();
    let signing_secret = credentials::new_signing_secret();
    let tenant_id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    let created_at = store::insert_tenant(&mut *tx, tenant_id, name, &signing_secret).await?;
    let api_key_id =
        store::insert_api_key(&mut *tx, tenant_id, &credentials::hash_api_key(&api_key)).await?;
    tx.commit().await?;
    Ok(IssuedTenant {
        tenant_id,
        name: name.to_owned(),
        api_key_id,
        api_key,
        signing_secret,
        created_at,
    })
}

/// A further API key for a tenant; earlier keys stay valid until revoked.
pub async fn issue_api_key(pool: &PgPool, tenant_id: Uuid) -> Result<(Uuid, String), TenantError> {
    if !store::tenant_exists(pool, tenant_id).await? {
        return Err(TenantError::NotFound);
    }
    let api_key = credentials::new_api_key();
    let id = store::insert_api_key(pool, tenant_id, &credentials::hash_api_key(&api_key)).await?;
    Ok((id, api_key))
}

/// Revokes a key: at once on this instance (its credential cache forgets
/// the key), within `crate::auth::API_KEY_CACHE_TTL` on the others. False when the
/// tenant has no such unrevoked key.
pub async fn revoke_api_key(state: &AppState, tenant_id: Uuid, key_id: Uuid) -> sqlx::Result<bool> {
    let Some(hash) = store::revoke_api_key(&state.pool, tenant_id, key_id).await? else {
        return Ok(false);
    };
    state.auth_cache.api_keys.invalidate(&hash).await;
    Ok(true)
}
