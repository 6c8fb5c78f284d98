//! User tokens: minting them for tenants that prefer not to sign JWTs
//! themselves, rotating the tenant's signing secret, and revoking a user's
//! tokens.

use chrono::{DateTime, Utc};
use poem_openapi::{param::Path, payload::Json, ApiResponse, Object, OpenApi};
use tidings_core::UserId;

use super::ApiTags;
use crate::{
    app::state::AppState,
    http::auth::{self, ApiKeyAuth},
    http::error::{ApiError, ApiResult, ProblemCode},
    tenants::credentials,
    tenants::{self, TenantError},
};

pub struct UserTokensApi {
    pub state: AppState,
}

#[derive(Debug, Object)]
#[oai(deny_unknown_fields)]
pub struct UserTokenIn {
    /// The user the token speaks for (1–255 bytes).
    pub user_id: String,
    /// Lifetime in seconds, from 1 to the server's cap
    /// (`TIDINGS_USER_TOKEN_MAX_LIFETIME_SECS`, default 86400); default 3600.
    pub ttl_seconds: Option<u32>,
}

#[derive(Debug, Object)]
pub struct UserTokenOut {
    /// HS256 JWT with claims `sub`, `tid`, `iat`, `exp`; header `kid` names the
    /// signing secret.
    pub token: String,
    pub user_id: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum UserTokenCreated {
    #[oai(status = 201)]
    Created(Json<UserTokenOut>),
}

#[derive(Debug, Object)]
pub struct SigningSecretOut {
    /// The new HS256 secret for user tokens (shown once). Put `key_id` in the
    /// header's `kid` of tokens signed with it.
    pub signing_secret: String,
    pub key_id: String,
    /// The secret it replaces keeps verifying tokens until `previous_expires_at`.
    pub previous_key_id: Option<String>,
    pub previous_expires_at: Option<DateTime<Utc>>,
}

#[derive(ApiResponse)]
pub enum SigningSecretRotated {
    #[oai(status = 201)]
    Created(Json<SigningSecretOut>),
}

#[derive(Debug, Object)]
pub struct TokensRevokedOut {
    pub user_id: String,
    /// Tokens of this user issued (`iat`) before this instant (rounded up to a
    /// whole second) are refused from now on.
    pub not_before: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum TokensRevoked {
    #[oai(status = 200)]
    Ok(Json<TokensRevokedOut>),
}

#[OpenApi(tag = "ApiTags::Auth")]
impl UserTokensApi {
    /// Mint a user token.
    ///
    /// The same HS256 JWT (claims `sub`, `tid`, `iat`, `exp`) a tenant's
    /// backend can sign itself with the signing secret. Hand it to the user's
    /// front end: it reads the feed, marks and streams with it.
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
        let max_ttl = self.state.settings.auth.user_token_max_lifetime_secs;
        let ttl = ttl_seconds.unwrap_or(3600);
        if ttl == 0 || u64::from(ttl) > max_ttl {
            return Err(ApiError::bad_request(
                ProblemCode::InvalidTtl,
                format!("ttl_seconds must be 1..={max_ttl}"),
            ));
        }
        let tenant_id = auth.0.tenant_id;
        let keys = auth::load_signing_keys(&self.state, tenant_id)
            .await?
            .ok_or_else(|| ApiError::unauthorized("tenant no longer exists"))?;
        let (key_id, secret) = &keys.current;
        let issued_at = Utc::now();
        let expires_at = issued_at + chrono::Duration::seconds(i64::from(ttl));
        let token = credentials::mint_user_token(
            secret,
            key_id,
            tenant_id,
            &user,
            issued_at.timestamp(),
            expires_at.timestamp(),
        )?;
        Ok(UserTokenCreated::Created(Json(UserTokenOut {
            token,
            user_id: user.into_string(),
            expires_at,
        })))
    }

    /// Rotate the tenant's signing secret.
    ///
    /// The new one signs from now on (with its `kid`); the old one keeps
    /// verifying tokens for the configured overlap
    /// (`TIDINGS_SIGNING_ROTATION_OVERLAP_SECS`, default 24 h). A secret still in
    /// an earlier overlap stops verifying now, and streams opened with its tokens
    /// close.
    #[oai(
        path = "/v1/signing-secret/rotate",
        method = "post",
        operation_id = "signing-secret.rotate"
    )]
    async fn rotate_signing_secret(&self, auth: ApiKeyAuth) -> ApiResult<SigningSecretRotated> {
        let overlap =
            std::time::Duration::from_secs(self.state.settings.auth.signing_rotation_overlap_secs);
        let rotated = tenants::rotate_signing_secret(&self.state, auth.0.tenant_id, overlap)
            .await
            .map_err(|err| match err {
                TenantError::NotFound => ApiError::unauthorized("tenant no longer exists"),
                TenantError::Db(db) => db.into(),
                other => ApiError::Internal(other.into()),
            })?;
        Ok(SigningSecretRotated::Created(Json(SigningSecretOut {
            signing_secret: rotated.signing_secret,
            key_id: rotated.key_id,
            previous_key_id: rotated.previous_key_id,
            previous_expires_at: rotated.previous_expires_at,
        })))
    }

    /// Revoke every token of a user issued until now.
    ///
    /// For logout everywhere, a password change or a stolen device. Tokens
    /// issued later work; every instance refuses the old ones within 5 seconds
    /// and closes the streams they opened.
    #[oai(
        path = "/v1/users/:user_id/revoke-tokens",
        method = "post",
        operation_id = "user-token.revoke-all"
    )]
    async fn revoke_tokens(
        &self,
        auth: ApiKeyAuth,
        /// The user, as the tenant names them (1–255 bytes, no control characters).
        user_id: Path<String>,
    ) -> ApiResult<TokensRevoked> {
        let user = UserId::parse(user_id.0)?;
        let not_before = tenants::revoke_user_tokens(&self.state, auth.0.tenant_id, &user).await?;
        Ok(TokensRevoked::Ok(Json(TokensRevokedOut {
            user_id: user.into_string(),
            not_before,
        })))
    }
}
