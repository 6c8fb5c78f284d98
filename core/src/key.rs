//! Notification keys: one notification per (tenant, event type, entity,
//! recipient, channel) — ARCHITECTURE.md, invariants 4 and 5 — and stable
//! advisory lock keys (invariant 7).
//!
//! A key has two faces. [`NotificationKey::readable`] is for people (logs,
//! support, the API): `v1:` followed by the five parts separated by `:`, each
//! part percent-escaped so that it contains no `:`. [`NotificationKey::digest_hex`]
//! is for the database: SHA-256 over the length-prefixed encoding in
//! `crate::encoding`, 64 lowercase hex characters, fixed width whatever the
//! parts. Both are injective: different parts never give the same key.
//!
//! Ids are compared as bytes. We deliberately do not Unicode-normalise: the
//! tenant's system owns its ids, and `"é"` (one code point) and `"é"` (two)
//! may well be different users there.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::encoding::{tagged_digest, to_hex, TAG_LOCK_KEY, TAG_NOTIFICATION_KEY};
use crate::id::{validate_id, EntityId, EventType, KeyError, UserId};

/// Prefix of every readable key of the current encoding. A future encoding
/// gets a new prefix, so old and new keys can never be confused.
const READABLE_PREFIX: &str = "v1:";

/// A delivery channel. Part of the key: one event may correctly become both an
/// in-app notification and an email.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    InApp,
    Email,
    Webhook,
}

impl Channel {
    pub const ALL: [Channel; 3] = [Channel::InApp, Channel::Email, Channel::Webhook];

    /// The wire and database name. Frozen: it is hashed into keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::InApp => "in_app",
            Channel::Email => "email",
            Channel::Webhook => "webhook",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// For columns read as text (`#[sqlx(try_from = "String")]` in the server).
impl TryFrom<String> for Channel {
    type Error = KeyError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl FromStr for Channel {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Channel::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| KeyError::UnknownChannel(s.to_owned()))
    }
}

/// How the key's parts are named in errors (pinned by `core/golden.json`).
const TENANT_FIELD: &str = "tenant";
const RECIPIENT_FIELD: &str = "recipient_id";

/// The idempotency key of one notification. Valid by construction: the only
/// ways to get one are [`NotificationKey::derive`] and parsing a readable key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NotificationKey {
    tenant: String,
    event_type: String,
    entity_id: String,
    recipient_id: String,
    channel: Channel,
    readable: String,
}

impl NotificationKey {
    /// From unchecked strings (the WebAssembly API, readable keys): each part
    /// is parsed into its id type, in order, so the first bad one is named.
    pub fn derive(
        tenant: &str,
        event_type: &str,
        entity_id: &str,
        recipient_id: &str,
        channel: Channel,
    ) -> Result<Self, KeyError> {
        validate_id(TENANT_FIELD, tenant)?;
        let event_type = EventType::parse(event_type)?;
        let entity_id = EntityId::parse(entity_id)?;
        let recipient = UserId::parse_as(RECIPIENT_FIELD, recipient_id)?;
        Self::new(tenant, &event_type, &entity_id, &recipient, channel)
    }

    /// From ids parsed on entry; only the tenant is checked here.
    pub fn new(
        tenant: &str,
        event_type: &EventType,
        entity_id: &EntityId,
        recipient: &UserId,
        channel: Channel,
    ) -> Result<Self, KeyError> {
        validate_id(TENANT_FIELD, tenant)?;
        let ids = [
            tenant,
            event_type.as_str(),
            entity_id.as_str(),
            recipient.as_str(),
        ];
        let mut readable = String::from(READABLE_PREFIX);
        for value in ids {
            escape_into(&mut readable, value);
            readable.push(':');
        }
        readable.push_str(channel.as_str());
        Ok(NotificationKey {
            tenant: tenant.to_owned(),
            event_type: event_type.to_string(),
            entity_id: entity_id.to_string(),
            recipient_id: recipient.to_string(),
            channel,
            readable,
        })
    }

    /// `v1:{tenant}:{event_type}:{entity_id}:{recipient_id}:{channel}` with
    /// `%` written `%25` and `:` written `%3A` inside the parts.
    pub fn readable(&self) -> &str {
        &self.readable
    }

    /// SHA-256 of the tagged, length-prefixed encoding of the five parts.
    pub fn digest(&self) -> [u8; 32] {
        tagged_digest(
            TAG_NOTIFICATION_KEY,
            [
                self.tenant.as_bytes(),
                self.event_type.as_bytes(),
                self.entity_id.as_bytes(),
                self.recipient_id.as_bytes(),
                self.channel.as_str().as_bytes(),
            ],
        )
    }

    /// The database key: 64 lowercase hex characters.
    pub fn digest_hex(&self) -> String {
        to_hex(&self.digest())
    }

    /// Inverse of [`readable`](Self::readable). Strict: only the exact string
    /// `readable` produces is accepted (no other escapes, no lowercase `%3a`),
    /// so one key has one readable form.
    pub fn parse_readable(s: &str) -> Result<(String, String, String, String, Channel), KeyError> {
        let rest = s
            .strip_prefix(READABLE_PREFIX)
            .ok_or(KeyError::UnknownVersion)?;
        let pieces: Vec<&str> = rest.split(':').collect();
        let [tenant, event_type, entity_id, recipient_id, channel] = pieces[..] else {
            return Err(KeyError::WrongPartCount {
                found: pieces.len(),
            });
        };
        let part = |field: &'static str, escaped: &str| {
            let value = unescape(field, escaped)?;
            validate_id(field, &value)?;
            Ok::<String, KeyError>(value)
        };
        Ok((
            part("tenant", tenant)?,
            part("event_type", event_type)?,
            part("entity_id", entity_id)?,
            part("recipient_id", recipient_id)?,
            channel.parse()?,
        ))
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    pub fn event_type(&self) -> &str {
        &self.event_type
    }
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }
    pub fn recipient_id(&self) -> &str {
        &self.recipient_id
    }
    pub fn channel(&self) -> Channel {
        self.channel
    }
}

impl fmt::Display for NotificationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.readable)
    }
}

impl FromStr for NotificationKey {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (tenant, event_type, entity_id, recipient_id, channel) = Self::parse_readable(s)?;
        Self::derive(&tenant, &event_type, &entity_id, &recipient_id, channel)
    }
}

impl Serialize for NotificationKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.readable)
    }
}

impl<'de> Deserialize<'de> for NotificationKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            other => out.push(other),
        }
    }
}

fn unescape(field: &'static str, escaped: &str) -> Result<String, KeyError> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        if let Some(tail) = after.strip_prefix("%25") {
            out.push('%');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("%3A") {
            out.push(':');
            rest = tail;
        } else {
            return Err(KeyError::BadEscape { field });
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Stable 64-bit key for `pg_try_advisory_xact_lock`: the first 8 bytes,
/// big-endian, of SHA-256 over the length-prefixed encoding of `parts` under
/// its own domain tag.
///
/// Not `std::hash::Hasher`: `DefaultHasher` is seeded per process and its
/// algorithm may change between Rust releases, so two replicas would disagree
/// about which lock guards what. 64 bits also keeps accidental collisions
/// (which would only serialise unrelated work, never break correctness —
/// invariant 7) at about one in 4·10⁹ among 100 000 concurrent keys.
pub fn stable_lock_key(parts: &[&str]) -> i64 {
    let digest = tagged_digest(TAG_LOCK_KEY, parts.iter().map(|p| p.as_bytes()));
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(t: &str, e: &str, n: &str, r: &str, c: Channel) -> NotificationKey {
        NotificationKey::derive(t, e, n, r, c).expect("valid parts")
    }

    #[test]
    fn channel_names_round_trip_and_unknown_ones_are_rejected() {
        for c in Channel::ALL {
            assert_eq!(c.as_str().parse::<Channel>(), Ok(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        assert_eq!(
            "push".parse::<Channel>(),
            Err(KeyError::UnknownChannel("push".into()))
        );
        assert!("InApp".parse::<Channel>().is_err());
    }

    #[test]
    fn channel_serialises_as_snake_case() {
        assert_eq!(
            serde_json::to_string(&Channel::InApp).expect("serialise"),
            "\"in_app\""
        );
        assert_eq!(
            serde_json::from_str::<Channel>("\"webhook\"").expect("deserialise"),
            Channel::Webhook
        );
    }

    #[test]
    fn error_messages_name_the_field() {
        let err = NotificationKey::derive("t", "", "e", "r", Channel::Email);
        assert_eq!(
            err.map_err(|e| e.to_string()),
            Err("event_type must not be empty".to_string())
        );
    }

    #[test]
    fn the_classic_colon_collision_does_not_collide() {
        let a = key("t", "a:b", "c", "r", Channel::Email);
        let b = key("t", "a", "b:c", "r", Channel::Email);
        assert_ne!(a.readable(), b.readable());
        assert_ne!(a.digest(), b.digest());
    }

    #[test]
    fn readable_escapes_separator_and_escape_character() {
        let k = key("acme", "invoice:overdue", "50%", "u1", Channel::InApp);
        assert_eq!(k.readable(), "v1:acme:invoice%3Aoverdue:50%25:u1:in_app");
    }

    #[test]
    fn the_channel_is_part_of_the_key() {
        let a = key("t", "e", "n", "r", Channel::Email);
        let b = key("t", "e", "n", "r", Channel::InApp);
        assert_ne!(a.digest_hex(), b.digest_hex());
    }

    #[test]
    fn digest_hex_is_64_lowercase_hex_characters() {
        let hex = key("t", "e", "n", "r", Channel::Webhook).digest_hex();
        assert_eq!(hex.len(), 64);
        assert!(hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }

    #[test]
    fn parse_readable_rejects_what_readable_never_produces() {
        let cases = [
            ("v2:t:e:n:r:email", KeyError::UnknownVersion),
            ("t:e:n:r:email", KeyError::UnknownVersion),
            ("v1:t:e:n:email", KeyError::WrongPartCount { found: 4 }),
            ("v1:t:e:n:r:s:email", KeyError::WrongPartCount { found: 6 }),
            (
                "v1:t:e%3a:n:r:email",
                KeyError::BadEscape {
                    field: "event_type",
                },
            ),
            (
                "v1:t:e:n%:r:email",
                KeyError::BadEscape { field: "entity_id" },
            ),
            (
                "v1:t:e:n:r%2:email",
                KeyError::BadEscape {
                    field: "recipient_id",
                },
            ),
            ("v1::e:n:r:email", KeyError::Empty { field: "tenant" }),
            ("v1:t:e:n:r:sms", KeyError::UnknownChannel("sms".into())),
        ];
        for (input, expected) in cases {
            assert_eq!(
                NotificationKey::parse_readable(input),
                Err(expected),
                "{input}"
            );
        }
    }

    #[test]
    fn keys_serialise_as_their_readable_form() {
        let k = key("t", "e:1", "n", "r", Channel::Email);
        let json = serde_json::to_string(&k).expect("serialise");
        assert_eq!(json, "\"v1:t:e%3A1:n:r:email\"");
        let back: NotificationKey = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, k);
    }

    #[test]
    fn lock_keys_are_injective_over_part_boundaries() {
        assert_ne!(
            stable_lock_key(&["a:b", "c"]),
            stable_lock_key(&["a", "b:c"])
        );
        assert_ne!(stable_lock_key(&["ab"]), stable_lock_key(&["a", "b"]));
        assert_ne!(stable_lock_key(&[]), stable_lock_key(&[""]));
        assert_eq!(stable_lock_key(&["x", "y"]), stable_lock_key(&["x", "y"]));
    }

    /// Ids drawn to hit the escape machinery often: separators, escape
    /// characters, things that look like escapes, and arbitrary Unicode.
    fn id() -> impl Strategy<Value = String> {
        let tricky = prop_oneof![
            Just(":".to_string()),
            Just("%".to_string()),
            Just("%3A".to_string()),
            Just("%25".to_string()),
            Just("v1:".to_string()),
            Just("😀".to_string()),
            "[a-c]{1,2}",
            "\\PC{1,3}",
        ];
        proptest::collection::vec(tricky, 1..5)
            .prop_map(|pieces| pieces.concat())
            .prop_filter("valid id", |s| validate_id("x", s).is_ok())
    }

    fn channel() -> impl Strategy<Value = Channel> {
        prop_oneof![
            Just(Channel::InApp),
            Just(Channel::Email),
            Just(Channel::Webhook)
        ]
    }

    type Parts = (String, String, String, String, Channel);

    fn parts() -> impl Strategy<Value = Parts> {
        (id(), id(), id(), id(), channel())
    }

    fn derive(p: &Parts) -> NotificationKey {
        key(&p.0, &p.1, &p.2, &p.3, p.4)
    }

    proptest! {
        #[test]
        fn readable_parses_back_to_the_parts(p in parts()) {
            let k = derive(&p);
            prop_assert_eq!(NotificationKey::parse_readable(k.readable()), Ok(p));
            prop_assert_eq!(k.readable().parse::<NotificationKey>(), Ok(k.clone()));
        }

        #[test]
        fn distinct_parts_give_distinct_keys(a in parts(), b in parts()) {
            prop_assume!(a != b);
            let (ka, kb) = (derive(&a), derive(&b));
            prop_assert_ne!(ka.readable(), kb.readable());
            prop_assert_ne!(ka.digest(), kb.digest());
        }

        #[test]
        fn moving_text_across_a_boundary_changes_the_key(
            left in id(), right in id(), cut in 0usize..8, rest in parts()
        ) {
            // Re-split `left + right` at another char boundary: same
            // concatenation, different parts — the case naive joining loses.
            let joined = format!("{left}{right}");
            let boundaries: Vec<usize> = joined.char_indices().map(|(i, _)| i).skip(1).collect();
            prop_assume!(!boundaries.is_empty());
            let at = boundaries[cut % boundaries.len()];
            let (l2, r2) = joined.split_at(at);
            prop_assume!(l2 != left);
            let a = key(&rest.0, &left, &right, &rest.3, rest.4);
            let b = key(&rest.0, l2, r2, &rest.3, rest.4);
            prop_assert_ne!(a.readable(), b.readable());
            prop_assert_ne!(a.digest(), b.digest());
        }

        #[test]
        fn lock_keys_differ_for_different_part_lists(
            a in proptest::collection::vec("\\PC{0,4}", 0..4),
            b in proptest::collection::vec("\\PC{0,4}", 0..4),
        ) {
            prop_assume!(a != b);
            let ra: Vec<&str> = a.iter().map(String::as_str).collect();
            let rb: Vec<&str> = b.iter().map(String::as_str).collect();
            prop_assert_ne!(stable_lock_key(&ra), stable_lock_key(&rb));
        }

        #[test]
        fn parse_readable_never_panics_and_only_accepts_canonical_forms(s in "\\PC{0,40}") {
            if let Ok(p) = NotificationKey::parse_readable(&s) {
                let k = derive(&p);
                prop_assert_eq!(k.readable(), s.as_str());
            }
        }
    }
}
