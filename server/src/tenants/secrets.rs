//! Secrets at rest: tenants' signing secrets and webhook endpoints' secrets
//! are stored sealed with an AEAD (XChaCha20-Poly1305, RustCrypto's
//! `chacha20poly1305`), so a database dump or a replica does not hand out the
//! keys that sign user tokens and webhooks.
//!
//! **The stored form** is an envelope, `tdenc:v2:<key id>:<base64url(nonce ‖
//! ciphertext ‖ tag)>`. The nonce is 24 random bytes (XChaCha's nonce is wide
//! enough for random nonces to never repeat in practice). The associated data
//! is the secret's [`Binding`]: its purpose (`signing_secret`,
//! `webhook_secret`), its tenant and, for a webhook secret, its endpoint. So a
//! ciphertext copied to another column, another tenant's row or another
//! endpoint's does not open: whoever can write the table cannot hand tenant
//! A tenant B's signing secret (and so B's tokens to A), nor one endpoint
//! another's.
//!
//! **Unbound values.** Envelopes `tdenc:v1:` (associated data: the purpose
//! only) and plaintext (rows written before sealing existed) are *unbound*.
//! The versioned envelope was chosen over re-sealing v1 in place: a v1
//! envelope cannot say which row it was sealed for, so only its version tells
//! the two apart. Start-up seals every unbound value bound to the row it is
//! found in (`crate::tenants::seal_at_start`) and then records that it did
//! (`secrets_bound`, migration 0025); from then on an unbound value is never
//! opened ([`SecretKeys::open`] refuses it; start-up leaves it, refused, and
//! logs it): nothing legitimate writes one any more, so one that appears was
//! put there, perhaps copied from an old backup.
//!
//! **The key** comes from `TIDINGS_SECRET_KEY`: `<key id>:<base64 of 32 bytes>`,
//! or several separated by commas. The first seals; all open, which is how a
//! key is rotated: put the new key first, keep the old one after it, restart
//! (every instance), and [`SecretKeys::needs_reseal`] makes start-up re-seal
//! every row under the new key; then drop the old key. Without the setting,
//! the key is kept in the data directory (`<data dir>/secret-key`, created on
//! first start with mode 0600): right for the embedded default and one box;
//! replicas on several machines must share one `TIDINGS_SECRET_KEY`.
//!
//! A leaf: it imports nothing of the server.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context;
use base64::{
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
    Engine,
};
use chacha20poly1305::{
    aead::{Aead, KeyInit, Payload},
    XChaCha20Poly1305, XNonce,
};
use rand::RngCore;

const ENVELOPE_PREFIX: &str = "tdenc:v2:";
/// Envelopes whose associated data is the purpose alone (unbound).
const UNBOUND_ENVELOPE_PREFIX: &str = "tdenc:v1:";
const NONCE_BYTES: usize = 24;
const KEY_BYTES: usize = 32;
/// The file that keeps the key when `TIDINGS_SECRET_KEY` is not set.
pub const KEY_FILE: &str = "secret-key";

/// What a sealed value is for; the associated data of its envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    SigningSecret,
    WebhookSecret,
}

impl Purpose {
    /// The associated data of an unbound (v1) envelope.
    fn unbound_associated_data(self) -> &'static [u8] {
        match self {
            Purpose::SigningSecret => b"tidings:signing_secret",
            Purpose::WebhookSecret => b"tidings:webhook_secret",
        }
    }
}

/// The row a sealed value belongs to: the associated data of its envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    purpose: Purpose,
    tenant: uuid::Uuid,
    endpoint: Option<uuid::Uuid>,
}

impl Binding {
    /// A tenant's signing secret (current or previous).
    pub fn signing_secret(tenant: uuid::Uuid) -> Self {
        Binding {
            purpose: Purpose::SigningSecret,
            tenant,
            endpoint: None,
        }
    }

    /// A webhook endpoint's secret (current or previous).
    pub fn webhook_secret(tenant: uuid::Uuid, endpoint: uuid::Uuid) -> Self {
        Binding {
            purpose: Purpose::WebhookSecret,
            tenant,
            endpoint: Some(endpoint),
        }
    }

    pub fn purpose(&self) -> Purpose {
        self.purpose
    }

    /// `tidings:v2:` ‖ the v1 purpose tag ‖ the tenant's 16 bytes ‖ the
    /// endpoint's 16 bytes (zeros for none): fixed widths, so no two
    /// bindings share an encoding.
    fn associated_data(&self) -> Vec<u8> {
        let mut ad = b"tidings:v2:".to_vec();
        ad.extend_from_slice(self.purpose.unbound_associated_data());
        ad.extend_from_slice(self.tenant.as_bytes());
        ad.extend_from_slice(self.endpoint.unwrap_or(uuid::Uuid::nil()).as_bytes());
        ad
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Sealed under a key id this process was not given.
    #[error("a stored secret is sealed with key id {0:?}, which TIDINGS_SECRET_KEY does not hold")]
    UnknownKey(String),
    /// Tampered with, truncated, or sealed for another purpose or row.
    #[error("a stored secret does not open with its key (corrupted, not this key, or sealed for another row)")]
    Corrupt,
    /// Plaintext or a v1 envelope, which only the start-up seal opens.
    #[error("a stored secret is not bound to its row (plaintext or an old envelope); start-up seals those only until every secret has been bound once")]
    Unbound,
}

/// The keys of this process: the first seals, all open.
pub struct SecretKeys {
    keys: Vec<(String, XChaCha20Poly1305)>,
    /// The key material, in the same order, for [`SecretKeys::derive`].
    material: Vec<[u8; KEY_BYTES]>,
}

/// Never prints key material.
impl std::fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("SecretKeys").field("key_ids", &ids).finish()
    }
}

impl SecretKeys {
    /// Parses `TIDINGS_SECRET_KEY`. Errors never contain the key material.
    pub fn parse(spec: &str) -> anyhow::Result<Self> {
        let mut keys = Vec::new();
        let mut materials = Vec::new();
        for (n, entry) in spec.split(',').map(str::trim).enumerate() {
            let (id, material) = entry.split_once(':').with_context(|| {
                format!(
                    "TIDINGS_SECRET_KEY entry {} is not <key id>:<base64 key>",
                    n + 1
                )
            })?;
            anyhow::ensure!(
                !id.is_empty()
                    && id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "TIDINGS_SECRET_KEY entry {}: the key id must be letters, digits, - or _",
                n + 1
            );
            let bytes = STANDARD
                .decode(material)
                .or_else(|_| URL_SAFE_NO_PAD.decode(material))
                .ok()
                .filter(|b| b.len() == KEY_BYTES)
                .with_context(|| {
                    format!(
                        "TIDINGS_SECRET_KEY entry {} ({id}): the key must be base64 of {KEY_BYTES} bytes \
                         (e.g. `openssl rand -base64 32`)",
                        n + 1
                    )
                })?;
            anyhow::ensure!(
                !keys.iter().any(|(k, _)| k == id),
                "TIDINGS_SECRET_KEY names key id {id} twice"
            );
            let cipher = XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| {
                anyhow::anyhow!("TIDINGS_SECRET_KEY entry {}: bad key length", n + 1)
            })?;
            keys.push((id.to_string(), cipher));
            let mut raw = [0u8; KEY_BYTES];
            raw.copy_from_slice(&bytes);
            materials.push(raw);
        }
        Ok(SecretKeys {
            keys,
            material: materials,
        })
    }

    /// A fresh `TIDINGS_SECRET_KEY` value with one key, id `key_id`.
    pub fn generate_spec(key_id: &str) -> String {
        let mut key = [0u8; KEY_BYTES];
        rand::thread_rng().fill_bytes(&mut key);
        format!("{key_id}:{}", STANDARD.encode(key))
    }

    /// The key of `TIDINGS_SECRET_KEY` when given, else the one kept in
    /// `data_dir` (created on first use).
    pub fn load(spec: Option<&str>, data_dir: &Path) -> anyhow::Result<Self> {
        match spec.map(str::trim).filter(|s| !s.is_empty()) {
            Some(spec) => SecretKeys::parse(spec),
            None => SecretKeys::parse(&kept_key(data_dir)?),
        }
    }

    /// Keys for another use than sealing, one per key of
    /// `TIDINGS_SECRET_KEY` in its order (the first is the active one):
    /// HMAC-SHA256 of `label` under each key, so a key derived for one
    /// purpose says nothing of the key or of another purpose's.
    pub fn derive(&self, label: &str) -> Vec<[u8; 32]> {
        use hmac::{Hmac, Mac};
        self.material
            .iter()
            .map(|key| {
                let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key)
                    .expect("HMAC takes a key of any length");
                mac.update(b"tidings:derive:");
                mac.update(label.as_bytes());
                mac.finalize().into_bytes().into()
            })
            .collect()
    }

    fn active(&self) -> (&str, &XChaCha20Poly1305) {
        let (id, cipher) = &self.keys[0];
        (id, cipher)
    }

    /// The envelope of `plaintext`, bound to its row.
    pub fn seal(&self, binding: &Binding, plaintext: &str) -> String {
        let (id, cipher) = self.active();
        let aad = binding.associated_data();
        let mut nonce = [0u8; NONCE_BYTES];
        rand::thread_rng().fill_bytes(&mut nonce);
        let sealed = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &aad,
                },
            )
            .expect("XChaCha20-Poly1305 encrypts any message shorter than 256 GiB");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!("{ENVELOPE_PREFIX}{id}:{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The plaintext of a value sealed for `binding`'s row; an unbound value
    /// (plaintext, a v1 envelope) is refused.
    pub fn open(&self, binding: &Binding, stored: &str) -> Result<String, SecretError> {
        let rest = stored
            .strip_prefix(ENVELOPE_PREFIX)
            .ok_or(SecretError::Unbound)?;
        self.decrypt(rest, &binding.associated_data())
    }

    /// The plaintext of an unbound value: a v1 envelope, or plaintext as
    /// is. Only start-up's seal calls it, before every secret has been
    /// bound once.
    pub fn open_unbound(&self, purpose: Purpose, stored: &str) -> Result<String, SecretError> {
        match stored.strip_prefix(UNBOUND_ENVELOPE_PREFIX) {
            Some(rest) => self.decrypt(rest, purpose.unbound_associated_data()),
            None if stored.starts_with(ENVELOPE_PREFIX) => Err(SecretError::Corrupt),
            None => Ok(stored.to_owned()),
        }
    }

    /// Whether a stored value is sealed bound to a row (any key).
    pub fn is_bound(&self, stored: &str) -> bool {
        stored.starts_with(ENVELOPE_PREFIX)
    }

    fn decrypt(&self, rest: &str, aad: &[u8]) -> Result<String, SecretError> {
        let (id, body) = rest.split_once(':').ok_or(SecretError::Corrupt)?;
        let cipher = self
            .keys
            .iter()
            .find(|(k, _)| k == id)
            .map(|(_, c)| c)
            .ok_or_else(|| SecretError::UnknownKey(id.to_owned()))?;
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| SecretError::Corrupt)?;
        if bytes.len() < NONCE_BYTES {
            return Err(SecretError::Corrupt);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let plain = cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad })
            .map_err(|_| SecretError::Corrupt)?;
        String::from_utf8(plain).map_err(|_| SecretError::Corrupt)
    }

    /// Whether a stored value should be sealed again: unbound, or sealed
    /// with a key that is not the active one.
    pub fn needs_reseal(&self, stored: &str) -> bool {
        match stored.strip_prefix(ENVELOPE_PREFIX) {
            None => true,
            Some(rest) => rest.split_once(':').map(|(id, _)| id) != Some(self.active().0),
        }
    }
}

/// Reads `<data_dir>/secret-key`, creating it (0600) on first use. Two
/// processes starting at once agree: the file appears atomically (written
/// aside, then hard-linked into place, which fails if it exists).
fn kept_key(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(KEY_FILE);
    if let Ok(text) = std::fs::read_to_string(&path) {
        return Ok(text.trim().to_owned());
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let aside: PathBuf = data_dir.join(format!(".{KEY_FILE}.{}", std::process::id()));
    {
        let mut file = open_private(&aside)?;
        file.write_all(SecretKeys::generate_spec("k1").as_bytes())?;
        file.sync_all()?;
    }
    let linked = std::fs::hard_link(&aside, &path);
    let _ = std::fs::remove_file(&aside);
    match linked {
        Ok(()) => tracing::warn!(
            path = %path.display(),
            "TIDINGS_SECRET_KEY is not set: generated a key for secrets at rest and kept it here; \
             back it up with the database, and give replicas the same TIDINGS_SECRET_KEY"
        ),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err).with_context(|| format!("keeping {}", path.display())),
    }
    Ok(std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_owned())
}

fn open_private(path: &Path) -> anyhow::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn keys(spec: &str) -> SecretKeys {
        SecretKeys::parse(spec).expect("valid spec")
    }

    fn signing() -> Binding {
        Binding::signing_secret(Uuid::now_v7())
    }

    /// A v1 envelope, as the version before bound envelopes sealed it.
    fn seal_unbound(keys: &SecretKeys, purpose: Purpose, plaintext: &str) -> String {
        let (id, cipher) = keys.active();
        let nonce = [7u8; NONCE_BYTES];
        let sealed = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: purpose.unbound_associated_data(),
                },
            )
            .expect("encrypts");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!(
            "{UNBOUND_ENVELOPE_PREFIX}{id}:{}",
            URL_SAFE_NO_PAD.encode(bytes)
        )
    }

    #[test]
    fn sealed_secrets_open_only_with_their_key_and_purpose() {
        let k = keys(&SecretKeys::generate_spec("a"));
        let tenant = Uuid::now_v7();
        let binding = Binding::signing_secret(tenant);
        let sealed = k.seal(&binding, "s3cret");
        assert!(sealed.starts_with("tdenc:v2:a:"), "{sealed}");
        assert!(!sealed.contains("s3cret"));
        assert_ne!(sealed, k.seal(&binding, "s3cret"), "random nonces");
        assert_eq!(k.open(&binding, &sealed).as_deref(), Ok("s3cret"));
        assert_eq!(
            k.open(&Binding::webhook_secret(tenant, Uuid::nil()), &sealed),
            Err(SecretError::Corrupt)
        );
        let other = keys(&SecretKeys::generate_spec("a"));
        assert_eq!(other.open(&binding, &sealed), Err(SecretError::Corrupt));
        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).expect("ascii");
        assert_eq!(k.open(&binding, &tampered), Err(SecretError::Corrupt));
        assert!(k.needs_reseal("plain"));
        assert!(!k.needs_reseal(&sealed));
    }

    #[test]
    fn a_sealed_secret_opens_only_in_the_row_it_was_sealed_for() {
        let k = keys(&SecretKeys::generate_spec("a"));
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let (e1, e2) = (Uuid::now_v7(), Uuid::now_v7());
        let bs = k.seal(&Binding::signing_secret(b), "b's secret");
        assert_eq!(
            k.open(&Binding::signing_secret(a), &bs),
            Err(SecretError::Corrupt),
            "b's signing secret copied into a's row"
        );
        let e1s = k.seal(&Binding::webhook_secret(a, e1), "whsec_1");
        assert_eq!(
            k.open(&Binding::webhook_secret(a, e2), &e1s),
            Err(SecretError::Corrupt),
            "one endpoint's secret copied to another's"
        );
        assert_eq!(
            k.open(&Binding::webhook_secret(b, e1), &e1s),
            Err(SecretError::Corrupt),
            "the same endpoint id under another tenant"
        );
        assert_eq!(
            k.open(&Binding::webhook_secret(a, e1), &e1s).as_deref(),
            Ok("whsec_1")
        );
    }

    #[test]
    fn unbound_values_open_only_through_the_start_up_seal() {
        let k = keys(&SecretKeys::generate_spec("a"));
        let binding = signing();
        let v1 = seal_unbound(&k, Purpose::SigningSecret, "old");
        for unbound in ["plain", v1.as_str()] {
            assert_eq!(k.open(&binding, unbound), Err(SecretError::Unbound));
            assert!(!k.is_bound(unbound));
            assert!(k.needs_reseal(unbound));
        }
        assert_eq!(
            k.open_unbound(Purpose::SigningSecret, "plain").as_deref(),
            Ok("plain")
        );
        assert_eq!(
            k.open_unbound(Purpose::SigningSecret, &v1).as_deref(),
            Ok("old")
        );
        assert_eq!(
            k.open_unbound(Purpose::WebhookSecret, &v1),
            Err(SecretError::Corrupt)
        );
        let bound = k.seal(&binding, "old");
        assert!(k.is_bound(&bound));
        assert_eq!(
            k.open_unbound(Purpose::SigningSecret, &bound),
            Err(SecretError::Corrupt),
            "a bound envelope is never read as plaintext"
        );
    }

    #[test]
    fn rotation_opens_old_envelopes_and_reseals_them_with_the_new_key() {
        let old_spec = SecretKeys::generate_spec("old");
        let old = keys(&old_spec);
        let binding = Binding::webhook_secret(Uuid::now_v7(), Uuid::now_v7());
        let sealed_old = old.seal(&binding, "whsec_x");
        let both = keys(&format!("{},{old_spec}", SecretKeys::generate_spec("new")));
        assert_eq!(both.open(&binding, &sealed_old).as_deref(), Ok("whsec_x"));
        assert!(both.needs_reseal(&sealed_old));
        assert!(both.seal(&binding, "y").starts_with("tdenc:v2:new:"));
        let new_only = keys(&SecretKeys::generate_spec("new"));
        assert_eq!(
            new_only.open(&binding, &sealed_old),
            Err(SecretError::UnknownKey("old".into()))
        );
    }

    #[test]
    fn bad_key_specs_are_refused_without_echoing_the_key() {
        for spec in ["", "nokeyid", "a:c2hvcnQ=", "a b:AAAA", "a:!!!"] {
            let err = SecretKeys::parse(spec).expect_err(spec).to_string();
            assert!(!err.contains("c2hvcnQ"), "{err}");
        }
        let one = SecretKeys::generate_spec("a");
        assert!(
            SecretKeys::parse(&format!("{one},{one}")).is_err(),
            "duplicate id"
        );
    }

    #[test]
    fn the_kept_key_is_created_once_and_reused() {
        let dir = std::env::temp_dir().join(format!("tidings-secret-key-{}", Uuid::new_v4()));
        let first = SecretKeys::load(None, &dir).expect("created");
        let binding = signing();
        let sealed = first.seal(&binding, "s");
        let second = SecretKeys::load(None, &dir).expect("reused");
        assert_eq!(second.open(&binding, &sealed).as_deref(), Ok("s"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(KEY_FILE))
                .expect("kept")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
