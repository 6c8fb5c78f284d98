//! Credentials themselves: API keys (random, stored only as a SHA-256 hash),
//! signing secrets, and user tokens (HS256 JWTs with claims `sub`, `tid`,
//! `exp`). The tenants service issues them; `crate::http::auth` checks them on
//! every request.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub const API_KEY_PREFIX: &str = "tdk_";

/// The claims of a user token. `iat` and `exp` are required; `nbf` is
/// honoured when present (`crate::http::auth` checks them).
#[derive(Debug, Serialize, Deserialize)]
pub struct UserClaims {
    pub sub: String,
    pub tid: String,
    pub iat: i64,
    pub exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
}

/// What a checked user token said about its own life, which a stream opened
/// with it keeps (directly, or through the stream ticket it bought): the
/// stream ends when the token would no longer be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialTerm {
    /// `iat`, in Unix seconds: a revocation of the user's tokens after it
    /// ends the stream.
    pub issued_at: i64,
    /// `exp`, in Unix seconds: the stream ends then at the latest.
    pub expires_at: i64,
    /// The id of the signing secret the token verified with: the stream ends
    /// when that secret stops verifying. `None` (a ticket minted before
    /// tickets kept it): any rotation of the tenant's secret ends it.
    pub signing_key_id: Option<String>,
}

/// A revocation instant as the first second whose tokens count: rounded up,
/// so a token issued in the same second as the revocation is revoked too
/// (`iat` has whole seconds).
pub fn revocation_cutoff_second(at: chrono::DateTime<chrono::Utc>) -> i64 {
    at.timestamp() + i64::from(at.timestamp_subsec_nanos() > 0)
}

/// Mints a user token exactly as a tenant's backend would, naming the
/// signing secret by its key id (`kid` in the header).
pub fn mint_user_token(
    secret: &str,
    key_id: &str,
    tenant_id: Uuid,
    user_id: &str,
    iat: i64,
    exp: i64,
) -> anyhow::Result<String> {
    let claims = UserClaims {
        sub: user_id.to_string(),
        tid: tenant_id.to_string(),
        iat,
        exp,
        nbf: None,
    };
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(key_id.to_owned());
    Ok(jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )?)
}

pub fn new_api_key() -> String {
    format!("{API_KEY_PREFIX}{}", random_token(32))
}

pub fn new_signing_secret() -> String {
    random_token(32)
}

/// A signing secret's key id (`kid`): short, random, URL-safe. Tenants
/// created before rotation existed have `k0`.
pub fn new_signing_key_id() -> String {
    format!("k{}", random_token(6))
}

pub fn random_token(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut buf);
    URL_SAFE_NO_PAD.encode(buf)
}

pub fn hash_api_key(key: &str) -> Vec<u8> {
    Sha256::digest(key.as_bytes()).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_are_prefixed_random_and_hash_to_32_bytes() {
        let (a, b) = (new_api_key(), new_api_key());
        assert!(a.starts_with(API_KEY_PREFIX));
        assert_ne!(a, b);
        assert_eq!(hash_api_key(&a).len(), 32);
    }
}
