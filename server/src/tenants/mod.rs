//! The tenants service: creating tenants and issuing and revoking their
//! credentials. The admin API and `tidings tenant create` share it. Signing
//! secrets are stored sealed (`crate::tenants::secrets`); start-up seals what is not.

pub mod credentials;
pub mod limits;
pub mod secrets;

use std::time::Duration;

use anyhow::Context;
use tidings_core::KeyError;
use uuid::Uuid;

use crate::{
    app::config::{defaults, DatabaseArgs},
    app::state::AppState,
    db::PrimaryPool,
    store::{
        self,
        notify::{notify, CredentialsChanged, NotifyChannel},
        tenants as tenant_store,
    },
    tenants::secrets::{Binding, SecretKeys},
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
    let tenant_id = Uuid::now_v7();
    let sealed = keys.seal(&Binding::signing_secret(tenant_id), &signing_secret);
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
/// the key), within `crate::http::auth::API_KEY_CACHE_TTL` on the others. False when the
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
/// at once, and every instance's (and its streams: a stream whose token's
/// secret stopped verifying ends) when the notice sent in the same
/// transaction arrives; within `crate::http::auth::API_KEY_CACHE_TTL` at the
/// latest.
pub async fn rotate_signing_secret(
    state: &AppState,
    tenant_id: Uuid,
    overlap: Duration,
) -> Result<RotatedSigningSecret, TenantError> {
    let signing_secret = credentials::new_signing_secret();
    let key_id = credentials::new_signing_key_id();
    let sealed = state
        .secrets
        .seal(&Binding::signing_secret(tenant_id), &signing_secret);
    let mut tx = state.pool.begin().await?;
    let row = tenant_store::rotate_signing_secret(&mut *tx, tenant_id, &key_id, &sealed, overlap)
        .await?
        .ok_or(TenantError::NotFound)?;
    let notice = CredentialsChanged::SigningSecretRotated { tenant_id };
    notify(&mut *tx, NotifyChannel::Cache, &notice.payload()).await?;
    tx.commit().await?;
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
/// cutoff. Reaches this instance at once, and every instance (and its
/// streams opened with a revoked token, or a ticket bought with one: they
/// end) when the notice sent in the same transaction arrives; within
/// `crate::http::auth::API_KEY_CACHE_TTL` at the latest.
pub async fn revoke_user_tokens(
    state: &AppState,
    tenant_id: Uuid,
    user_id: &tidings_core::UserId,
) -> sqlx::Result<chrono::DateTime<chrono::Utc>> {
    let mut tx = state.pool.begin().await?;
    let cutoff =
        tenant_store::raise_user_token_cutoff(&mut *tx, tenant_id, user_id.as_str()).await?;
    let notice = CredentialsChanged::UserTokensRevoked {
        tenant_id,
        user_id: user_id.as_str().to_owned(),
    };
    notify(&mut *tx, NotifyChannel::Cache, &notice.payload()).await?;
    tx.commit().await?;
    state
        .auth_cache
        .forget_revocation(tenant_id, user_id.as_str())
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

/// Seals every stored secret that is unbound (plaintext, a v1 envelope) or
/// sealed with an older key, bound to the row it is in. Every command that
/// opens the database runs it, so rows written before sealing (or binding)
/// existed are sealed at the first start; that start then records that every
/// secret is bound, and later starts refuse an unbound value instead of
/// sealing it (`crate::tenants::secrets`, "Unbound values").
pub async fn seal_at_start(pool: &PrimaryPool, keys: &SecretKeys) -> anyhow::Result<()> {
    let sealed = seal_stored_secrets(pool, keys)
        .await
        .context("sealing stored secrets (TIDINGS_SECRET_KEY)")?;
    if sealed.changed > 0 {
        tracing::info!(
            sealed = sealed.changed,
            "sealed stored secrets with the current key"
        );
    }
    if sealed.refused > 0 {
        tracing::error!(
            refused = sealed.refused,
            "stored secrets not bound to their row appeared after every secret was bound: \
             refused (tokens or webhooks of those rows fail); rotate those secrets"
        );
    }
    Ok(())
}

/// What [`seal_stored_secrets`] did: rows changed, and unbound values
/// refused (left as they are, never opened).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    pub changed: usize,
    pub refused: usize,
}

/// Seals (or re-seals under the current key) every stored signing and
/// webhook secret that needs it, bound to its row. Unbound values are
/// sealed only until a start has bound every secret once (`secrets_bound`);
/// after, they are refused.
pub async fn seal_stored_secrets(pool: &PrimaryPool, keys: &SecretKeys) -> anyhow::Result<Sealed> {
    let bound = store::secrets::every_secret_bound(pool).await?;
    let unbound_allowed = bound != Some(true);
    let mut sealed = Sealed::default();
    // The new stored value of one secret, or `None` to leave it as it is.
    let mut reseal = |binding: &Binding, stored: &str| -> anyhow::Result<Option<String>> {
        if !keys.needs_reseal(stored) {
            return Ok(None);
        }
        let plain = if keys.is_bound(stored) {
            keys.open(binding, stored)?
        } else if unbound_allowed {
            keys.open_unbound(binding.purpose(), stored)?
        } else {
            sealed.refused += 1;
            return Ok(None);
        };
        Ok(Some(keys.seal(binding, &plain)))
    };
    let mut rows = Vec::new();
    for (tenant, current, previous) in tenant_store::list_signing_secrets(pool).await? {
        rows.push((
            Binding::signing_secret(tenant),
            tenant,
            None,
            current,
            previous,
        ));
    }
    for (tenant, id, current, previous) in
        store::webhook_endpoints::list_endpoint_secrets(pool).await?
    {
        rows.push((
            Binding::webhook_secret(tenant, id),
            tenant,
            Some(id),
            current,
            previous,
        ));
    }
    for (binding, tenant, endpoint, current, previous) in rows {
        let new_current = reseal(&binding, &current)?;
        let new_previous = match previous.as_deref() {
            Some(p) => reseal(&binding, p)?,
            None => None,
        };
        if new_current.is_none() && new_previous.is_none() {
            continue;
        }
        let new_current = new_current.unwrap_or_else(|| current.clone());
        let new_previous = new_previous.or_else(|| previous.clone());
        let old = (current.as_str(), previous.as_deref());
        let new = (new_current.as_str(), new_previous.as_deref());
        let replaced = match endpoint {
            None => tenant_store::replace_signing_secrets(pool, tenant, old, new).await?,
            Some(id) => {
                store::webhook_endpoints::replace_endpoint_secrets(pool, tenant, id, old, new)
                    .await?
            }
        };
        if replaced {
            sealed.changed += 1;
        }
    }
    if bound == Some(false) {
        store::secrets::record_every_secret_bound(pool).await?;
    }
    Ok(sealed)
}
