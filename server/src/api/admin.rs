//! Operator endpoints: tenants and their API keys.

use chrono::{DateTime, Utc};
use poem_openapi::{param::Path, payload::Json, ApiResponse, Object, OpenApi};
use uuid::Uuid;

use super::ApiTags;
use crate::{
    auth::AdminAuth,
    error::{ApiError, ApiResult},
    state::AppState,
    store,
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

/// How long a tenant's feed is kept.
#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct FeedRetentionIn {
    /// Seconds the tenant's events and in-app feed items are kept (at least 1);
    /// `null` or absent: the server's `TIDINGS_RETENTION_FEED_SECS` (unset there:
    /// forever). A feed cursor older than this pages to the end of the feed.
    pub feed_retention_secs: Option<i64>,
}

#[derive(Debug, Object)]
pub struct FeedRetentionOut {
    pub tenant_id: Uuid,
    /// The tenant's own setting; `null`: the server's default.
    pub feed_retention_secs: Option<i64>,
}

#[derive(ApiResponse)]
pub enum FeedRetentionSet {
    #[oai(status = 200)]
    Set(Json<FeedRetentionOut>),
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

    /// Set how long this tenant's feed (events and in-app items) is kept; the
    /// retention purge deletes older items within its next rounds.
    #[oai(
        path = "/v1/admin/tenants/:tenant_id/retention",
        method = "put",
        operation_id = "admin.tenant.retention"
    )]
    async fn set_feed_retention(
        &self,
        _auth: AdminAuth,
        tenant_id: Path<Uuid>,
        body: Json<FeedRetentionIn>,
    ) -> ApiResult<FeedRetentionSet> {
        let secs = Self::feed_retention_in_range(body.feed_retention_secs)?;
        if !store::retention::set_feed_retention(&self.state.pool, tenant_id.0, secs).await? {
            return Err(ApiError::not_found("tenant_not_found", "no such tenant"));
        }
        Ok(FeedRetentionSet::Set(Json(FeedRetentionOut {
            tenant_id: tenant_id.0,
            feed_retention_secs: secs,
        })))
    }
}

impl AdminApi {
    fn feed_retention_in_range(secs: Option<i64>) -> ApiResult<Option<i64>> {
        match secs {
            Some(s) if s < 1 => Err(ApiError::bad_request(
                "invalid_retention",
                "feed_retention_secs must be at least 1, or null for the server's default",
            )),
            other => Ok(other),
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
