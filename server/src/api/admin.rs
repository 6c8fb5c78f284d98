//! Operator endpoints: tenants and their API keys.

use chrono::{DateTime, Utc};
use poem_openapi::{param::Path, payload::Json, ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::{
    auth::AdminAuth,
    error::{ApiError, ApiResult},
    state::AppState,
    tenants::{self, TenantError},
};

pub struct AdminApi {
    pub state: AppState,
}

#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct TenantIn {
    /// A display name, 1–255 bytes.
    pub name: String,
}

/// A new tenant and its credentials. `api_key` is shown only once.
#[derive(Debug, Object)]
pub struct TenantCreatedOut {
    pub tenant_id: Uuid,
    pub name: String,
    pub api_key_id: Uuid,
    /// Server-to-server credential (`Authorization: Bearer tdk_…`). Stored only as a hash.
    pub api_key: String,
    /// HS256 key (its UTF-8 bytes) for signing user tokens with claims `sub`, `tid`, `exp`.
    pub signing_secret: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Object)]
pub struct ApiKeyOut {
    pub api_key_id: Uuid,
    /// Shown only once.
    pub api_key: String,
}

#[derive(ApiResponse)]
pub enum TenantCreated {
    #[oai(status = 201)]
    Created(Json<TenantCreatedOut>),
}

#[derive(ApiResponse)]
pub enum KeyCreated {
    #[oai(status = 201)]
    Created(Json<ApiKeyOut>),
}

#[derive(ApiResponse)]
pub enum KeyRevoked {
    #[oai(status = 204)]
    Revoked,
}

#[OpenApi(tag = "ApiTags::Admin")]
impl AdminApi {
    /// Create a tenant with its first API key and its user-token signing secret.
    #[oai(
        path = "/v1/admin/tenants",
        method = "post",
        operation_id = "admin.tenant.create"
    )]
    async fn create_tenant(
        &self,
        _auth: AdminAuth,
        body: Json<TenantIn>,
    ) -> ApiResult<TenantCreated> {
        let t = tenants::create_tenant(&self.state.pool, &self.state.secrets, &body.name)
            .await
            .map_err(tenant_problem)?;
        Ok(TenantCreated::Created(Json(TenantCreatedOut {
            tenant_id: t.tenant_id,
            name: t.name,
            api_key_id: t.api_key_id,
            api_key: t.api_key,
            signing_secret: t.signing_secret,
            created_at: t.created_at,
        })))
    }

    /// Issue another API key (rotation). Earlier keys stay valid until revoked.
    #[oai(
        path = "/v1/admin/tenants/:tenant_id/keys",
        method = "post",
        operation_id = "admin.key.create"
    )]
    async fn create_key(&self, _auth: AdminAuth, tenant_id: Path<Uuid>) -> ApiResult<KeyCreated> {
        let (api_key_id, api_key) = tenants::issue_api_key(&self.state.pool, tenant_id.0)
            .await
            .map_err(tenant_problem)?;
        Ok(KeyCreated::Created(Json(ApiKeyOut {
            api_key_id,
            api_key,
        })))
    }

    /// Revoke an API key. Takes effect at once on this instance and within seconds on others.
    #[oai(
        path = "/v1/admin/tenants/:tenant_id/keys/:key_id",
        method = "delete",
        operation_id = "admin.key.revoke"
    )]
    async fn revoke_key(
        &self,
        _auth: AdminAuth,
        tenant_id: Path<Uuid>,
        key_id: Path<Uuid>,
    ) -> ApiResult<KeyRevoked> {
        if tenants::revoke_api_key(&self.state, tenant_id.0, key_id.0).await? {
            Ok(KeyRevoked::Revoked)
        } else {
            Err(ApiError::not_found(
                "api_key_not_found",
                "no such unrevoked key for this tenant",
            ))
        }
    }
}

fn tenant_problem(err: TenantError) -> ApiError {
    match err {
        TenantError::InvalidName(invalid) => invalid.into(),
        TenantError::NotFound => ApiError::not_found("tenant_not_found", err.to_string()),
        TenantError::Db(db) => db.into(),
    }
}
