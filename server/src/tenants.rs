//! Creating tenants and issuing their credentials: shared by the admin API and
//! `tidings tenant create`.

use sqlx::PgPool;
use uuid::Uuid;

use crate::{auth, error::ApiError, store};

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

pub async fn create_tenant(pool: &PgPool, name: &str) -> Result<IssuedTenant, ApiError> {
    tidings_core::validate_id("name", name)?;
    let api_key = auth::new_api_key();
    let signing_secret = auth::new_signing_secret();
    let created =
        store::tenants::create_tenant(pool, name, &signing_secret, &auth::hash_api_key(&api_key))
            .await?;
    Ok(IssuedTenant {
        tenant_id: created.tenant_id,
        name: created.name,
        api_key_id: created.api_key_id,
        api_key,
        signing_secret: created.signing_secret,
        created_at: created.created_at,
    })
}

/// A further API key for a tenant; earlier keys stay valid until revoked.
pub async fn issue_api_key(pool: &PgPool, tenant_id: Uuid) -> Result<(Uuid, String), ApiError> {
    if !store::tenants::tenant_exists(pool, tenant_id).await? {
        return Err(ApiError::not_found("tenant_not_found", "no such tenant"));
    }
    let api_key = auth::new_api_key();
    let id = store::tenants::insert_api_key(pool, tenant_id, &auth::hash_api_key(&api_key)).await?;
    Ok((id, api_key))
}
