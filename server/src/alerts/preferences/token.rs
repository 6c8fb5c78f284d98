//! The one-click unsubscribe token (RFC 8058): `/u/{token}` alone names
//! the tenant, the user, the category and the channel, and proves the
//! server wrote it, so verifying needs no database row.
//!
//! The token is base64url of `tenant (16 bytes) ‖ channel (1 byte) ‖ user
//! (u16 length, bytes) ‖ category (u16 length, bytes) ‖ HMAC-SHA256 of all
//! that, first 16 bytes`. The MAC key is derived from `TIDINGS_SECRET_KEY`
//! (`SecretKeys::derive`, label [`LABEL`]): tokens of the active key are
//! written, tokens of every listed key verify, so a rotation keeps links in
//! mailboxes working while the old key stays listed. Changing any byte
//! (another tenant, user or category) breaks the MAC.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tidings_core::{Channel, UserId};
use uuid::Uuid;

use crate::tenants::secrets::SecretKeys;

pub const LABEL: &str = "unsubscribe-token:v1";
const MAC_BYTES: usize = 16;
/// Longer than any token of valid ids: refused before decoding.
const MAX_TOKEN_CHARS: usize = 1024;

/// What a token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    pub tenant: Uuid,
    pub user: UserId,
    pub category: String,
    pub channel: Channel,
}

/// Signs and verifies tokens.
pub struct TokenKeys {
    /// The active key first.
    keys: Vec<[u8; 32]>,
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKeys")
            .field("keys", &self.keys.len())
            .finish()
    }
}

fn channel_byte(channel: Channel) -> u8 {
    match channel {
        Channel::InApp => 0,
        Channel::Email => 1,
        Channel::Webhook => 2,
    }
}

fn mac(key: &[u8; 32], body: &[u8]) -> [u8; MAC_BYTES] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(body);
    let full = mac.finalize().into_bytes();
    let mut out = [0u8; MAC_BYTES];
    out.copy_from_slice(&full[..MAC_BYTES]);
    out
}

fn push_part(body: &mut Vec<u8>, part: &str) {
    let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
    body.extend_from_slice(&len.to_be_bytes());
    body.extend_from_slice(&part.as_bytes()[..usize::from(len)]);
}

fn take_part<'b>(body: &mut &'b [u8]) -> Option<&'b str> {
    let (len, rest) = body.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*len));
    let (part, rest) = (rest.get(..len)?, rest.get(len..)?);
    *body = rest;
    std::str::from_utf8(part).ok()
}

impl TokenKeys {
    pub fn new(secrets: &SecretKeys) -> Self {
        TokenKeys {
            keys: secrets.derive(LABEL),
        }
    }

    pub fn sign(&self, what: &Unsubscribe) -> String {
        let mut body = Vec::with_capacity(64);
        body.extend_from_slice(what.tenant.as_bytes());
        body.push(channel_byte(what.channel));
        push_part(&mut body, what.user.as_str());
        push_part(&mut body, &what.category);
        let tag = mac(&self.keys[0], &body);
        body.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(body)
    }

    /// What `token` names, if this server wrote it; `None` for anything
    /// forged, truncated, altered or signed with a key no longer listed.
    pub fn verify(&self, token: &str) -> Option<Unsubscribe> {
        if token.len() > MAX_TOKEN_CHARS {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        let split = bytes.len().checked_sub(MAC_BYTES)?;
        let (body, tag) = bytes.split_at(split);
        let genuine = self.keys.iter().any(|key| {
            // Constant-time comparison: `verify_truncated_left` checks the
            // leading bytes of the tag, which is what the token carries.
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
            mac.update(body);
            mac.verify_truncated_left(tag).is_ok()
        });
        if !genuine {
            return None;
        }
        let (tenant, mut rest) = body.split_first_chunk::<16>()?;
        let (&channel, tail) = rest.split_first()?;
        rest = tail;
        let channel = Channel::ALL
            .into_iter()
            .find(|c| channel_byte(*c) == channel)?;
        let user = UserId::parse(take_part(&mut rest)?).ok()?;
        let category = take_part(&mut rest)?.to_owned();
        if !rest.is_empty() {
            return None;
        }
        Some(Unsubscribe {
            tenant: Uuid::from_bytes(*tenant),
            user,
            category,
            channel,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> TokenKeys {
        TokenKeys::new(&SecretKeys::parse(&SecretKeys::generate_spec("k")).expect("spec"))
    }

    fn sample() -> Unsubscribe {
        Unsubscribe {
            tenant: Uuid::now_v7(),
            user: UserId::parse("ann").expect("valid"),
            category: "billing".into(),
            channel: Channel::Email,
        }
    }

    #[test]
    fn a_token_names_what_it_was_signed_for_and_nothing_else() {
        let k = keys();
        let what = sample();
        let token = k.sign(&what);
        assert_eq!(k.verify(&token), Some(what.clone()));
        assert!(
            token.len() < 100,
            "short enough for a header: {}",
            token.len()
        );
        // Truncated, extended, altered, or another server's.
        assert_eq!(k.verify(&token[..token.len() - 1]), None);
        assert_eq!(k.verify(&token[..10]), None);
        assert_eq!(k.verify(&format!("{token}A")), None);
        assert_eq!(k.verify(""), None);
        assert_eq!(keys().verify(&token), None);
        let mut bytes = URL_SAFE_NO_PAD.decode(&token).expect("base64");
        for i in 0..bytes.len() {
            bytes[i] ^= 1;
            assert_eq!(k.verify(&URL_SAFE_NO_PAD.encode(&bytes)), None, "byte {i}");
            bytes[i] ^= 1;
        }
        // Another tenant's token for the same user and category differs.
        let other = Unsubscribe {
            tenant: Uuid::now_v7(),
            ..what
        };
        assert_ne!(k.sign(&other), token);
    }

    #[test]
    fn tokens_of_a_listed_old_key_still_verify() {
        let old_spec = SecretKeys::generate_spec("old");
        let old = TokenKeys::new(&SecretKeys::parse(&old_spec).expect("spec"));
        let token = old.sign(&sample());
        let both = SecretKeys::parse(&format!("{},{old_spec}", SecretKeys::generate_spec("new")))
            .expect("spec");
        assert_eq!(
            TokenKeys::new(&both).verify(&token),
            Some(sample_like(&token, &old))
        );
    }

    fn sample_like(token: &str, keys: &TokenKeys) -> Unsubscribe {
        keys.verify(token).expect("verifies with its own key")
    }
}
