//! Credentials. Tenant and user always come from here, never from a request body
//! (ARCHITECTURE.md, invariant 9).
//!
//! Three kinds, all `Authorization: Bearer …`:
//! - **API key** (`tdk_…`): a tenant's backend. Stored only as a SHA-256 hash.
//! - **User token**: an HS256 JWT with claims `sub` (user id), `tid` (tenant id),
//!   `iat` and `exp` (both required; `exp - iat` at most
//!   `TIDINGS_USER_TOKEN_MAX_LIFETIME_SECS`, default a day) and optionally `nbf`
//!   (honoured), signed with the tenant's signing secret (the HMAC key is the UTF-8
//!   bytes of the secret string), so a tenant's backend can mint it without calling us.
//!   An unknown tenant and a wrong signature are one answer. The header's `kid`
//!   names the secret; during a rotation's overlap the previous secret verifies
//!   too. Tokens whose `iat` is before the user's revocation cutoff are refused.
//! - **Admin token**: the operator's, from `TIDINGS_ADMIN_TOKEN`.
//!
//! A credential that is invalid for every kind is 401; a valid credential of the
//! wrong kind for the endpoint is 403.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use poem::{
    web::headers::{authorization::Bearer as AuthBearer, Authorization, HeaderMapExt},
    PathPattern, Request,
};
use poem_openapi::{
    auth::{ApiKey, Bearer},
    SecurityScheme,
};
use tidings_core::UserId;
use uuid::Uuid;

use crate::{
    app::state::AppState,
    http::error::ApiError,
    store,
    tenants::credentials::{
        hash_api_key, revocation_cutoff_second, CredentialTerm, API_KEY_PREFIX,
    },
    tenants::limits::RequestClass,
    tenants::secrets::{Binding, SecretError},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantCtx {
    pub tenant_id: Uuid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCtx {
    pub tenant_id: Uuid,
    pub user_id: UserId,
    /// The token's own life (a ticket's: the token's that bought it).
    pub term: CredentialTerm,
}

/// Server-to-server calls: `Authorization: Bearer tdk_…`.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", checker = "check_api_key")]
pub struct ApiKeyAuth(pub TenantCtx);

/// Front ends: `Authorization: Bearer <HS256 JWT {sub, tid, exp}>`.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "JWT", checker = "check_user_token")]
pub struct UserTokenAuth(pub UserCtx);

/// Browsers' `EventSource`, which cannot send headers: `?ticket=<ticket>`
/// from `POST /v1/feed/stream-tickets`. Single use, valid for a minute.
#[derive(SecurityScheme)]
#[oai(
    ty = "api_key",
    key_in = "query",
    key_name = "ticket",
    checker = "check_stream_ticket"
)]
pub struct StreamTicketAuth(pub UserCtx);

/// The live stream: a user token, or a stream ticket.
#[derive(SecurityScheme)]
pub enum StreamAuth {
    UserToken(UserTokenAuth),
    Ticket(StreamTicketAuth),
}

impl StreamAuth {
    pub fn user(self) -> UserCtx {
        match self {
            StreamAuth::UserToken(auth) => auth.0,
            StreamAuth::Ticket(auth) => auth.0,
        }
    }
}

/// Operators: `Authorization: Bearer <TIDINGS_ADMIN_TOKEN>`.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", checker = "check_admin_token")]
pub struct AdminAuth(pub ());

/// What a bearer string turned out to be.
#[derive(Clone)]
enum Credential {
    ApiKey(TenantCtx),
    UserToken(UserCtx),
    Admin,
}

fn state_of(req: &Request) -> poem::Result<&AppState> {
    req.data::<Arc<AppState>>().map(|s| &**s).ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!("AppState missing from request data")).into()
    })
}

/// Admits a request of a known tenant (and user) under its limits
/// (`crate::tenants::limits`): the class comes from the matched route, so every
/// endpoint of a credential kind is covered without a line in its handler.
async fn admit(
    req: &Request,
    state: &AppState,
    tenant_id: Uuid,
    user: Option<&UserId>,
) -> Result<(), ApiError> {
    let route = req
        .data::<PathPattern>()
        .map(|p| p.0.as_ref())
        .unwrap_or_default();
    let class = RequestClass::of(req.method().as_str(), route, user.is_some());
    state
        .limits
        .admit(&state.pool, tenant_id, user.map(UserId::as_str), class)
        .await
        .map_err(ApiError::from)
}

/// A bearer credential identified before routing, kept on the request so its
/// checker does not verify it a second time.
#[derive(Clone)]
struct Identified {
    token: String,
    credential: Credential,
}

/// Draws on the rate buckets of a request whose credential comes in the
/// `Authorization` header, before its body is read or its route matched
/// (`http::admission`): a request over its tenant's rate is refused having
/// cost a cached credential check and a bucket, never a body read or a parse.
/// The class comes from the path, which for every metered route is its
/// template (their only parameter-free prefixes decide). A credential that
/// does not identify, the admin token and stream tickets are left to their
/// checkers. The buckets are drawn once: the checker's `admit` takes only the
/// pool share then.
pub async fn admit_before_body(req: &mut Request, state: &AppState) -> Result<(), ApiError> {
    let Some(bearer) = req.headers().typed_get::<Authorization<AuthBearer>>() else {
        return Ok(());
    };
    let token = bearer.token().to_owned();
    let Ok(credential) = identify(state, &token).await else {
        return Ok(());
    };
    let (tenant_id, user) = match &credential {
        Credential::ApiKey(tenant) => (tenant.tenant_id, None),
        Credential::UserToken(user) => (user.tenant_id, Some(user.user_id.clone())),
        Credential::Admin => return Ok(()),
    };
    let class = RequestClass::of(req.method().as_str(), req.uri().path(), user.is_some());
    req.set_data(Identified { token, credential });
    state
        .limits
        .take_tokens(
            &state.pool,
            tenant_id,
            user.as_ref().map(UserId::as_str),
            class,
        )
        .await
        .map_err(ApiError::from)
}

/// `identify`, or what `admit_before_body` found for the same token.
async fn identify_once(
    req: &Request,
    state: &AppState,
    token: &str,
) -> Result<Credential, ApiError> {
    match req.data::<Identified>() {
        Some(known) if known.token == token => Ok(known.credential.clone()),
        _ => identify(state, token).await,
    }
}

async fn check_api_key(req: &Request, bearer: Bearer) -> poem::Result<TenantCtx> {
    let state = state_of(req)?;
    match identify_once(req, state, &bearer.token).await? {
        Credential::ApiKey(tenant) => {
            admit(req, state, tenant.tenant_id, None).await?;
            Ok(tenant)
        }
        Credential::UserToken(_) => {
            Err(ApiError::forbidden("this endpoint takes an API key, not a user token").into())
        }
        Credential::Admin => Err(ApiError::forbidden(
            "this endpoint takes a tenant API key, not the admin token",
        )
        .into()),
    }
}

async fn check_user_token(req: &Request, bearer: Bearer) -> poem::Result<UserCtx> {
    let state = state_of(req)?;
    match identify_once(req, state, &bearer.token).await? {
        Credential::UserToken(user) => {
            admit(req, state, user.tenant_id, Some(&user.user_id)).await?;
            Ok(user)
        }
        Credential::ApiKey(_) | Credential::Admin => {
            Err(ApiError::forbidden("this endpoint takes a user token, not an API key").into())
        }
    }
}

async fn check_stream_ticket(req: &Request, key: ApiKey) -> poem::Result<UserCtx> {
    let state = state_of(req)?;
    let invalid = || ApiError::unauthorized("unknown, used or expired stream ticket");
    let ticket = crate::stream::take_ticket(state, &key.key)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(invalid)?;
    let user_id = UserId::parse(ticket.user_id).map_err(|_| invalid())?;
    let tenant_id = ticket.tenant_id;
    // A ticket is as good as the token that bought it, now: a revocation or
    // a retired signing secret since it was minted ends it too.
    check_term_still_good(state, tenant_id, &user_id, &ticket.term).await?;
    admit(req, state, tenant_id, Some(&user_id)).await?;
    Ok(UserCtx {
        tenant_id,
        user_id,
        term: ticket.term,
    })
}

/// Whether a credential checked earlier (a ticket's token) would still be
/// accepted: not expired, not issued before the user's revocation cutoff,
/// and signed by a secret that still verifies.
async fn check_term_still_good(
    state: &AppState,
    tenant_id: Uuid,
    user_id: &UserId,
    term: &CredentialTerm,
) -> Result<(), ApiError> {
    let ended = |why: &str| ApiError::unauthorized(format!("stream ticket no longer valid: {why}"));
    if term.expires_at <= chrono::Utc::now().timestamp() {
        return Err(ended("its token expired"));
    }
    if issued_before_revocation(state, tenant_id, user_id, term.issued_at).await? {
        return Err(ended("the user's tokens were revoked after it was minted"));
    }
    let keys = signing_keys(state, tenant_id)
        .await?
        .ok_or_else(|| ended("no such tenant"))?;
    let key_still_verifies = term
        .signing_key_id
        .as_deref()
        .is_some_and(|id| keys.secrets().any(|(k, _)| k == id));
    if !key_still_verifies {
        return Err(ended("its token's signing secret was rotated out"));
    }
    Ok(())
}

async fn check_admin_token(req: &Request, bearer: Bearer) -> poem::Result<()> {
    match identify_once(req, state_of(req)?, &bearer.token).await? {
        Credential::Admin => Ok(()),
        _ => Err(ApiError::forbidden("this endpoint takes the admin token").into()),
    }
}

async fn identify(state: &AppState, token: &str) -> Result<Credential, ApiError> {
    if constant_time_eq(token.as_bytes(), state.settings.admin_token.as_bytes()) {
        return Ok(Credential::Admin);
    }
    if token.starts_with(API_KEY_PREFIX) {
        let tenant_id = tenant_for_api_key(state, token)
            .await?
            .ok_or_else(|| ApiError::unauthorized("unknown or revoked API key"))?;
        return Ok(Credential::ApiKey(TenantCtx { tenant_id }));
    }
    if token.split('.').count() == 3 {
        return verify_user_token(state, token)
            .await
            .map(Credential::UserToken);
    }
    Err(ApiError::unauthorized(
        "unrecognised credential: expected an API key or a user token",
    ))
}

/// Credential lookups (API keys, signing secrets, unknown tenants, users'
/// revocation cutoffs) are cached briefly: a revocation or rotation reaches the
/// instance that handled it at once and every other instance within
/// `API_KEY_CACHE_TTL`.
pub const API_KEY_CACHE_TTL: Duration = Duration::from_secs(5);

async fn tenant_for_api_key(state: &AppState, key: &str) -> Result<Option<Uuid>, ApiError> {
    let hash = hash_api_key(key);
    if let Some(hit) = state.auth_cache.api_keys.get(&hash).await {
        return Ok(hit);
    }
    let found = store::tenants::find_tenant_by_key_hash(&state.pool, &hash).await?;
    state.auth_cache.api_keys.insert(hash, found).await;
    Ok(found)
}

/// The claims a user token must carry to be checked.
#[derive(serde::Deserialize)]
struct CheckedClaims {
    sub: String,
    iat: i64,
    exp: i64,
}

/// Allowed clock difference between the tenant's backend and us, in seconds.
const CLOCK_LEEWAY_SECS: u64 = 5;

async fn verify_user_token(state: &AppState, token: &str) -> Result<UserCtx, ApiError> {
    let bad = |why: &str| ApiError::unauthorized(format!("invalid user token: {why}"));
    // The tenant (and so the key) is named inside the token; read it unverified,
    // then verify the signature with that tenant's secret. A token claiming another
    // tenant fails the signature check.
    let payload = token.split('.').nth(1).ok_or_else(|| bad("malformed"))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| bad("malformed"))?;
    let unverified: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| bad("malformed"))?;
    // jsonwebtoken checks `nbf` only when it is a number and ignores any
    // other value, so a token with `"nbf": "2099-01-01"` would be valid at
    // once: a claim we cannot check is refused, not skipped.
    if unverified
        .get("nbf")
        .is_some_and(|nbf| nbf.as_i64().is_none() && nbf.as_u64().is_none())
    {
        return Err(bad("nbf must be a whole number of seconds"));
    }
    let tenant_id = unverified["tid"]
        .as_str()
        .and_then(|t| Uuid::parse_str(t).ok())
        .ok_or_else(|| bad("missing or malformed tid"))?;
    // An unknown tenant and a wrong signature get the same answer: telling
    // them apart would let anyone enumerate tenant ids.
    let not_verified = || bad("signature does not verify");
    let keys = signing_keys(state, tenant_id)
        .await?
        .ok_or_else(not_verified)?;
    let kid = jsonwebtoken::decode_header(token)
        .map_err(|_| bad("malformed"))?
        .kid;
    // A token names its secret by `kid`; one without (signed before rotation
    // existed, or by a backend that does not set it) may use either secret
    // of the overlap.
    let candidates: Vec<(&str, &str)> = keys
        .secrets()
        .filter(|(id, _)| kid.as_deref().is_none_or(|k| k == *id))
        .collect();

    let mut validation = Validation::new(Algorithm::HS256);
    validation.set_required_spec_claims(&["exp", "sub"]);
    validation.validate_nbf = true;
    validation.leeway = CLOCK_LEEWAY_SECS;
    let mut outcome = Err(not_verified());
    let mut verified_by = None;
    for (key_id, secret) in candidates {
        outcome = jsonwebtoken::decode::<CheckedClaims>(
            token,
            &DecodingKey::from_secret(secret.as_bytes()),
            &validation,
        )
        .map_err(|err| match err.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => bad("expired"),
            jsonwebtoken::errors::ErrorKind::ImmatureSignature => bad("not valid yet (nbf)"),
            jsonwebtoken::errors::ErrorKind::InvalidSignature => not_verified(),
            jsonwebtoken::errors::ErrorKind::Json(_) => {
                bad("claims sub, tid, iat and exp are required")
            }
            _ => bad("malformed"),
        });
        if outcome.is_ok() {
            verified_by = Some(key_id.to_owned());
            break;
        }
    }
    let claims = outcome?.claims;
    check_lifetime(
        claims.iat,
        claims.exp,
        chrono::Utc::now().timestamp(),
        state.settings.auth.user_token_max_lifetime_secs,
    )
    .map_err(|why| bad(&why))?;
    let user_id = UserId::parse_as("sub", claims.sub).map_err(|e| bad(&e.to_string()))?;
    if issued_before_revocation(state, tenant_id, &user_id, claims.iat).await? {
        return Err(bad(
            "revoked (issued before the user's tokens were revoked)",
        ));
    }
    Ok(UserCtx {
        tenant_id,
        user_id,
        term: CredentialTerm {
            issued_at: claims.iat,
            expires_at: claims.exp,
            signing_key_id: verified_by,
        },
    })
}

/// Whether a credential of (tenant, user) issued at `issued_at` (seconds)
/// was revoked: issued before the user's revocation cutoff.
async fn issued_before_revocation(
    state: &AppState,
    tenant_id: Uuid,
    user_id: &UserId,
    issued_at: i64,
) -> Result<bool, ApiError> {
    let cutoff = user_token_cutoff(state, tenant_id, user_id).await?;
    Ok(cutoff.is_some_and(|cutoff| issued_at < cutoff))
}

/// The first second whose tokens count for (tenant, user), if their tokens
/// were ever revoked ([`revocation_cutoff_second`]).
async fn user_token_cutoff(
    state: &AppState,
    tenant_id: Uuid,
    user_id: &UserId,
) -> Result<Option<i64>, ApiError> {
    let cache = &state.auth_cache;
    let cache_key = (tenant_id, user_id.as_str().to_owned());
    if let Some(hit) = cache.user_cutoffs.get(&cache_key).await {
        return Ok(hit);
    }
    let started = cache.cutoffs_generation.load(Ordering::SeqCst);
    let found = store::tenants::find_user_token_cutoff(&state.pool, tenant_id, user_id.as_str())
        .await?
        .map(revocation_cutoff_second);
    cache.user_cutoffs.insert(cache_key.clone(), found).await;
    if cache.cutoffs_generation.load(Ordering::SeqCst) != started {
        cache.user_cutoffs.invalidate(&cache_key).await;
    }
    Ok(found)
}

/// A token may live at most `max_lifetime` seconds (`exp - iat`), and may not
/// claim to be issued in the future: without both, a tenant's backend (or
/// whoever holds its secret) could mint a token that never expires.
fn check_lifetime(iat: i64, exp: i64, now: i64, max_lifetime: u64) -> Result<(), String> {
    if iat > now.saturating_add(CLOCK_LEEWAY_SECS as i64) {
        return Err("issued in the future (iat)".into());
    }
    let lifetime = i128::from(exp) - i128::from(iat);
    if lifetime > i128::from(max_lifetime) {
        return Err(format!(
            "lifetime exp - iat is {lifetime} s; the limit is {max_lifetime} s"
        ));
    }
    Ok(())
}

/// A tenant's signing secrets, opened: the current one and, during a
/// rotation's overlap, the previous one.
pub struct SigningKeys {
    pub current: (String, String),
    pub previous: Option<(String, String)>,
}

impl SigningKeys {
    /// (key id, secret) pairs, current first.
    fn secrets(&self) -> impl Iterator<Item = (&str, &str)> {
        std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .map(|(id, secret)| (id.as_str(), secret.as_str()))
    }
}

/// A tenant's signing secrets, opened with the key for secrets at rest;
/// `None`: no such tenant. A current secret that does not open (sealed for
/// another row, unbound, or under a key this process lacks) is a 500 here,
/// where a token is minted with it.
pub async fn load_signing_keys(
    state: &AppState,
    tenant_id: Uuid,
) -> Result<Option<SigningKeys>, ApiError> {
    read_signing_keys(state, tenant_id)
        .await?
        .map(|opened| opened.map_err(|e| ApiError::Internal(anyhow::Error::new(e))))
        .transpose()
}

/// [`load_signing_keys`], with a current secret that does not open as its
/// own answer. A previous secret that does not open is logged and left out.
async fn read_signing_keys(
    state: &AppState,
    tenant_id: Uuid,
) -> Result<Option<Result<SigningKeys, SecretError>>, ApiError> {
    let Some(row) = store::tenants::find_signing_keys(&state.pool, tenant_id).await? else {
        return Ok(None);
    };
    let binding = Binding::signing_secret(tenant_id);
    let current = match state.secrets.open(&binding, &row.signing_secret) {
        Ok(secret) => secret,
        Err(err) => return Ok(Some(Err(err))),
    };
    let previous = match (row.previous_signing_key_id, row.previous_signing_secret) {
        (Some(id), Some(secret)) => match state.secrets.open(&binding, &secret) {
            Ok(secret) => Some((id, secret)),
            Err(err) => {
                tracing::error!(tenant = %tenant_id, error = %err, "a previous signing secret does not open; it verifies nothing");
                None
            }
        },
        _ => None,
    };
    Ok(Some(Ok(SigningKeys {
        current: (row.signing_key_id, current),
        previous,
    })))
}

/// Signing secrets by tenant, cached like API keys (a rotation reaches other
/// instances within `API_KEY_CACHE_TTL`), with misses cached as briefly, so a
/// flood of tokens naming made-up tenants costs no query each.
async fn signing_keys(
    state: &AppState,
    tenant_id: Uuid,
) -> Result<Option<Arc<SigningKeys>>, ApiError> {
    if let Some(hit) = state.auth_cache.signing_secrets.get(&tenant_id).await {
        return Ok(Some(hit));
    }
    if state
        .auth_cache
        .unknown_tenants
        .get(&tenant_id)
        .await
        .is_some()
    {
        return Ok(None);
    }
    match read_signing_keys(state, tenant_id).await? {
        // Nothing verifies against a secret that does not open: tokens get
        // the answer a wrong signature gets, and the operator the log.
        Some(Err(err)) => {
            tracing::error!(tenant = %tenant_id, error = %err, "the tenant's signing secret does not open; its tokens are refused");
            Ok(None)
        }
        Some(Ok(keys)) => {
            let keys = Arc::new(keys);
            state
                .auth_cache
                .signing_secrets
                .insert(tenant_id, keys.clone())
                .await;
            Ok(Some(keys))
        }
        None => {
            state.auth_cache.unknown_tenants.insert(tenant_id, ()).await;
            Ok(None)
        }
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() || a.is_empty() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Caches for credential checks, so a request does not pay a database round trip
/// to authenticate.
pub struct AuthCache {
    pub api_keys: moka::future::Cache<Vec<u8>, Option<Uuid>>,
    pub signing_secrets: moka::future::Cache<Uuid, Arc<SigningKeys>>,
    /// Per (tenant, user): the revocation cutoff in seconds, if any.
    user_cutoffs: moka::future::Cache<(Uuid, String), Option<i64>>,
    /// Bumped before every revocation is forgotten. A read that saw another
    /// generation when it started may have read the database before the
    /// revocation committed, so it drops what it just cached.
    cutoffs_generation: AtomicU64,
    /// Tenant ids user tokens named that do not exist, for `API_KEY_CACHE_TTL`.
    pub unknown_tenants: moka::future::Cache<Uuid, ()>,
}

impl AuthCache {
    /// Forgets what this instance cached of (tenant, user)'s revocation, so
    /// that the next check reads it: after a revocation here, or its notice
    /// from another instance.
    pub async fn forget_revocation(&self, tenant_id: Uuid, user_id: &str) {
        self.cutoffs_generation.fetch_add(1, Ordering::SeqCst);
        self.user_cutoffs
            .invalidate(&(tenant_id, user_id.to_owned()))
            .await;
    }
}

impl Default for AuthCache {
    fn default() -> Self {
        AuthCache {
            api_keys: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(API_KEY_CACHE_TTL)
                .build(),
            signing_secrets: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(API_KEY_CACHE_TTL)
                .build(),
            user_cutoffs: moka::future::Cache::builder()
                .max_capacity(1_000_000)
                .time_to_live(API_KEY_CACHE_TTL)
                .build(),
            cutoffs_generation: AtomicU64::new(0),
            unknown_tenants: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(API_KEY_CACHE_TTL)
                .build(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_needs_equal_non_empty_inputs() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b""));
    }

    #[test]
    fn token_lifetime_is_capped_and_iat_may_not_be_in_the_future() {
        const DAY: u64 = 86_400;
        let now: i64 = 1_000_000;
        let day = DAY as i64;
        assert!(check_lifetime(now, now + day, now, DAY).is_ok());
        assert!(check_lifetime(now - 10, now + day - 10, now, DAY).is_ok());
        assert!(check_lifetime(now, now + day + 1, now, DAY).is_err());
        assert!(
            check_lifetime(now, 253_402_300_799, now, DAY).is_err(),
            "year 9999"
        );
        assert!(check_lifetime(now + 3600, now + 7200, now, DAY).is_err());
        assert!(check_lifetime(i64::MIN, i64::MAX, now, DAY).is_err());
    }
}
