//! The tenants service: creating tenants and issuing and revoking their
//! credentials. The admin API and `tidings tenant create` share it. Signing
//! secrets are stored sealed (`crate::secrets`); start-up seals what is not.

use std::time::Duration;

use anyhow::Context;
use tidings_core::KeyError;
use uuid::Uuid;

use crate::{
    config::{defaults, DatabaseArgs},
    credentials,
    db::PrimaryPool,
    secrets::{Purpose, SecretKeys},
    state::AppState,
    store::{self, tenants as tenant_store},
};

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
pub async fn create_tenant(
    pool: &PrimaryPool,
    keys: &SecretKeys,
    name: &str,
) -> Result<IssuedTenant, TenantError> {
    tidings_core::validate_id("name", name)?;
    let api_key = credentials::new_api_key();
    let signing_secret = credentials::new_signing_secret();
    let sealed = keys.seal(Purpose::SigningSecret, &signing_secret);
    let tenant_id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    let created_at = tenant_store::insert_tenant(&mut *tx, tenant_id, name, &sealed).await?;
    let api_key_id =
        tenant_store::insert_api_key(&mut *tx, tenant_id, &credentials::hash_api_key(&api_key))
            .await?;
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
pub async fn issue_api_key(
    pool: &PrimaryPool,
    tenant_id: Uuid,
) -> Result<(Uuid, String), TenantError> {
    if !tenant_store::tenant_exists(pool, tenant_id).await? {
        return Err(TenantError::NotFound);
    }
    let api_key = credentials::new_api_key();
    let id =
        tenant_store::insert_api_key(pool, tenant_id, &credentials::hash_api_key(&api_key)).await?;
    Ok((id, api_key))
}

/// Revokes a key: at once on this instance (its credential cache forgets
/// the key), within `crate::auth::API_KEY_CACHE_TTL` on the others. False when the
/// tenant has no such unrevoked key.
pub async fn revoke_api_key(state: &AppState, tenant_id: Uuid, key_id: Uuid) -> sqlx::Result<bool> {
    let Some(hash) = tenant_store::revoke_api_key(&state.pool, tenant_id, key_id).await? else {
        return Ok(false);
    };
    state.auth_cache.api_keys.invalidate(&hash).await;
    Ok(true)
}

/// A tenant's new signing secret, shown once.
#[derive(Debug)]
pub struct RotatedSigningSecret {
    pub key_id: String,
    pub signing_secret: String,
    pub previous_key_id: Option<String>,
    pub previous_expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Issues a new signing secret under a new key id. Tokens signed with the
/// previous secret keep verifying for `overlap` (the previous one before it,
/// if still overlapping, stops now). Reaches this instance's credential cache
/// at once and the others' within `crate::auth::API_KEY_CACHE_TTL`.
pub async fn rotate_signing_secret(
    state: &AppState,
    tenant_id: Uuid,
    overlap: Duration,
) -> Result<RotatedSigningSecret, TenantError> {
    let signing_secret = credentials::new_signing_secret();
    let key_id = credentials::new_signing_key_id();
    let sealed = state.secrets.seal(Purpose::SigningSecret, &signing_secret);
    let row =
        tenant_store::rotate_signing_secret(&state.pool, tenant_id, &key_id, &sealed, overlap)
            .await?
            .ok_or(TenantError::NotFound)?;
    state
        .auth_cache
        .signing_secrets
        .invalidate(&tenant_id)
        .await;
    Ok(RotatedSigningSecret {
        key_id,
        signing_secret,
        previous_key_id: row.previous_signing_key_id,
        previous_expires_at: row.previous_signing_expires_at,
    })
}

/// Revokes every user token of (tenant, user) issued until now; returns the
/// cutoff. Reaches this instance at once and the others within
/// `crate::auth::API_KEY_CACHE_TTL`.
pub async fn revoke_user_tokens(
    state: &AppState,
    tenant_id: Uuid,
    user_id: &tidings_core::UserId,
) -> sqlx::Result<chrono::DateTime<chrono::Utc>> {
    let cutoff =
        tenant_store::raise_user_token_cutoff(&state.pool, tenant_id, user_id.as_str()).await?;
    state
        .auth_cache
        .user_cutoffs
        .invalidate(&(tenant_id, user_id.as_str().to_owned()))
        .await;
    Ok(cutoff)
}

/// The key for secrets at rest: `TIDINGS_SECRET_KEY`, or the one kept in
/// the data directory. Loaded before the database is opened, so a bad key
/// fails the start at once.
pub fn load_secret_keys(args: &DatabaseArgs) -> anyhow::Result<SecretKeys> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| defaults::DATA_DIR.into());
    SecretKeys::load(args.secret_key.as_deref(), &data_dir)
}

/// [`load_secret_keys`], then [`seal_at_start`].
pub async fn open_secret_keys(
    pool: &PrimaryPool,
    args: &DatabaseArgs,
) -> anyhow::Result<SecretKeys> {
    let keys = load_secret_keys(args)?;
    seal_at_start(pool, &keys).await?;
    Ok(keys)
}

/// Seals every stored secret that is plaintext or sealed with an older key.
/// Every command that opens the database runs it, so rows written before
/// encryption at rest existed are sealed at the first start.
pub async fn seal_at_start(pool: &PrimaryPool, keys: &SecretKeys) -> anyhow::Result<()> {
    let sealed = seal_stored_secrets(pool, keys)
        .await
        .context("sealing stored secrets (TIDINGS_SECRET_KEY)")?;
    if sealed > 0 {
        tracing::info!(sealed, "sealed stored secrets with the current key");
    }
    Ok(())
}

/// Seals (or re-seals under the current key) every stored signing and
/// webhook secret that needs it; returns how many rows changed.
pub async fn seal_stored_secrets(pool: &PrimaryPool, keys: &SecretKeys) -> anyhow::Result<usize> {
    let mut changed = 0;
    let reseal = |purpose: Purpose, stored: &str| -> anyhow::Result<String> {
        if keys.needs_reseal(stored) {
            Ok(keys.seal(purpose, &keys.open(purpose, stored)?))
        } else {
            Ok(stored.to_owned())
        }
    };
    for (tenant, current, previous) in tenant_store::list_signing_secrets(pool).await? {
        if !keys.needs_reseal(&current)
            && !previous.as_deref().is_some_and(|p| keys.needs_reseal(p))
        {
            continue;
        }
        let new_current = reseal(Purpose::SigningSecret, &current)?;
        let new_previous = previous
            .as_deref()
            .map(|p| reseal(Purpose::SigningSecret, p))
            .transpose()?;
        if tenant_store::replace_signing_secrets(
            pool,
            tenant,
            (&current, previous.as_deref()),
            (&new_current, new_previous.as_deref()),
        )
        .await?
        {
            changed += 1;
        }
    }
    for (tenant, id, current, previous) in
        store::webhook_endpoints::list_endpoint_secrets(pool).await?
    {
        if !keys.needs_reseal(&current)
            && !previous.as_deref().is_some_and(|p| keys.needs_reseal(p))
        {
            continue;
        }
        let new_current = reseal(Purpose::WebhookSecret, &current)?;
        let new_previous = previous
            .as_deref()
            .map(|p| reseal(Purpose::WebhookSecret, p))
            .transpose()?;
        if store::webhook_endpoints::replace_endpoint_secrets(
            pool,
            tenant,
            id,
            (&current, previous.as_deref()),
            (&new_current, new_previous.as_deref()),
        )
        .await?
        {
            changed += 1;
        }
    }
    Ok(changed)
}
