//! Minting user tokens for tenants that prefer not to sign JWTs themselves.

use chrono::{DateTime, Utc};
use poem_openapi::{payload::Json, ApiResponse, Object, OpenApi};
use tidings_core::UserId;

use super::ApiTags;
use crate::{
    auth::ApiKeyAuth,
    credentials,
    error::{ApiError, ApiResult},
    state::AppState,
    store,
};

pub struct UserTokensApi {
    pub state: AppState,
}

/// Longest lifetime a minted token may have: a day. Front ends refresh through
/// their own backend.
pub const MAX_TTL_SECONDS: u32 = 86_400;

#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct UserTokenIn {
    /// The user the token speaks for (1–255 bytes).
    pub user_id: String,
    /// Lifetime in seconds, 1–86400 (default 3600).
    pub ttl_seconds: Option<u32>,
}

#[derive(Debug, Object)]
pub struct UserTokenOut {
    /// HS256 JWT with claims `sub`, `tid`, `exp`.
    pub token: String,
    pub user_id: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum UserTokenCreated {
    #[oai(status = 201)]
    Created(Json<UserTokenOut>),
}

#[OpenApi(tag = "ApiTags::Auth")]
impl UserTokensApi {
    /// Mint a user token (the same JWT a tenant's backend can sign itself).
    #[oai(
        path = "/v1/user-tokens",
        method = "post",
        operation_id = "user-token.create"
    )]
    async fn create(
        &self,
        auth: ApiKeyAuth,
        body: Json<UserTokenIn>,
    ) -> ApiResult<UserTokenCreated> {
        let UserTokenIn {
            user_id,
            ttl_seconds,
        } = body.0;
        let user = UserId::parse(user_id)?;
        let ttl = ttl_seconds.unwrap_or(3600);
        if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
            return Err(ApiError::bad_request(
                "invalid_ttl",
                format!("ttl_seconds must be 1..={MAX_TTL_SECONDS}"),
            ));
        }
        let tenant_id = auth.0.tenant_id;
        let secret = store::tenants::find_signing_secret(&self.state.pool, tenant_id)
            .await?
            .ok_or_else(|| ApiError::unauthorized("tenant no longer exists"))?;
        let expires_at = Utc::now() + chrono::Duration::seconds(i64::from(ttl));
        let token =
            credentials::mint_user_token(&secret, tenant_id, &user, expires_at.timestamp())?;
        Ok(UserTokenCreated::Created(Json(UserTokenOut {
            token,
            user_id: user.into_string(),
            expires_at,
        })))
    }
}
