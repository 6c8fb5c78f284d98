//! Ids parsed once. A [`TeamId`], [`UserId`], [`EventType`] or [`EntityId`]
//! is a string that passed [`validate_id`]: code that holds one never checks
//! it again, and a function that takes one cannot be handed an unchecked
//! string. The server parses request fields into these at the edge; the
//! notification key ([`crate::NotificationKey`]) and the WebAssembly API
//! derive keys from them.
//!
//! Each type names its field in errors (`team_id must not be empty`);
//! [`TeamId::parse_as`] and friends name another field instead, for ids that
//! arrive under other names (`recipients[]`, `actor_id`, a batch's
//! `events[3].team_id` is named by the caller around the error).
//!
//! The rules live here too: [`validate_id`] (with [`MAX_ID_BYTES`] and
//! [`is_format_character`]) checks every id the core takes, typed or not
//! (the tenant of a key is a plain string).

use std::{borrow::Borrow, fmt, ops::Deref};

use serde::{Deserialize, Serialize};

/// Longest id accepted, in bytes of UTF-8. Generous for UUIDs, ULIDs, emails
/// and URNs, and small enough to index.
pub const MAX_ID_BYTES: usize = 255;

/// Why an id, a channel or a readable key was rejected. `field` names the part
/// (`"tenant"`, `"event_type"`, …) so the message can go straight to a client.
///
/// One error for all the text the core parses, so that callers (the server's
/// handlers, the WebAssembly API) map one type. It is defined here, beside the
/// id rules that raise most of it, so that the ids depend on nothing in
/// [`crate::key`]; the last four variants are the key's (channel names and
/// readable keys).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is {len} bytes long; the limit is 255 bytes")]
    TooLong { field: &'static str, len: usize },
    #[error("{field} must not contain control characters")]
    ControlCharacter { field: &'static str },
    #[error(
        "{field} must not contain Unicode format characters (bidi controls, zero-width characters)"
    )]
    FormatCharacter { field: &'static str },
    #[error("unknown channel {0:?}; expected one of in_app, email, webhook")]
    UnknownChannel(String),
    #[error("readable key must start with \"v1:\"")]
    UnknownVersion,
    #[error("readable key has {found} parts; expected 5 separated by ':'")]
    WrongPartCount { found: usize },
    #[error("{field} has an invalid escape; only %25 and %3A are allowed")]
    BadEscape { field: &'static str },
}

/// Checks an id (tenant, team, user, event type, entity, recipient, …):
/// 1..=255 bytes of UTF-8, no control characters (`char::is_control`) and no
/// format characters ([`is_format_character`]): both make logs, readable keys
/// and admin screens lie about what an id holds (`"adm\u{200B}in"` looks like
/// `"admin"`; a right-to-left override reverses what follows it).
pub fn validate_id(field: &'static str, value: &str) -> Result<(), KeyError> {
    if value.is_empty() {
        return Err(KeyError::Empty { field });
    }
    if value.len() > MAX_ID_BYTES {
        return Err(KeyError::TooLong {
            field,
            len: value.len(),
        });
    }
    if value.chars().any(char::is_control) {
        return Err(KeyError::ControlCharacter { field });
    }
    if value.chars().any(is_format_character) {
        return Err(KeyError::FormatCharacter { field });
    }
    Ok(())
}

/// Unicode general category Cf ("format"), as of Unicode 15.1: soft hyphen,
/// bidi embeddings, overrides, isolates and marks, zero-width space, joiner
/// and non-joiner, word joiner, invisible operators, the byte-order mark,
/// interlinear annotation marks and tags. The standard library has no
/// category lookup and the list is short and stable, so it is written out
/// rather than pulled in as a dependency (the core stays dependency-light for
/// its WebAssembly build).
///
/// Zero-width joiner (U+200D) is among them, so emoji ZWJ sequences such as
/// "👩\u{200D}💻" are not valid ids: an id is a machine identifier, and a
/// character that renders as nothing cannot be told apart by a person.
pub fn is_format_character(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The field name errors use unless the caller names another.
            pub const FIELD: &'static str = $field;

            /// Checks `value` (see [`validate_id`]), naming it by [`Self::FIELD`].
            pub fn parse(value: impl Into<String>) -> Result<Self, KeyError> {
                Self::parse_as(Self::FIELD, value)
            }

            /// Checks `value`, naming it `field` in the error.
            pub fn parse_as(field: &'static str, value: impl Into<String>) -> Result<Self, KeyError> {
                let value = value.into();
                validate_id(field, &value)?;
                Ok($name(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = KeyError;
            fn try_from(value: String) -> Result<Self, KeyError> {
                Self::parse(value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                Self::parse(String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
            }
        }
    };
}

id_type!(
    /// A team: the audience of activity events and of team alerts.
    TeamId,
    "team_id"
);
id_type!(
    /// A user of the tenant's system: member, recipient, actor, token subject.
    UserId,
    "user_id"
);
id_type!(
    /// What happened, e.g. `invoice.overdue`.
    EventType,
    "event_type"
);
id_type!(
    /// The thing an alert (or an event's object) is about, e.g. an invoice id.
    EntityId,
    "entity_id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_must_be_nonempty_short_and_free_of_control_characters() {
        assert_eq!(
            validate_id("tenant", ""),
            Err(KeyError::Empty { field: "tenant" })
        );
        assert_eq!(
            validate_id("user", &"a".repeat(256)),
            Err(KeyError::TooLong {
                field: "user",
                len: 256
            })
        );
        assert_eq!(validate_id("user", &"a".repeat(255)), Ok(()));
        // 64 four-byte emoji = 256 bytes: the limit is in bytes, not chars.
        assert!(validate_id("user", &"😀".repeat(64)).is_err());
        assert_eq!(
            validate_id("entity_id", "a\nb"),
            Err(KeyError::ControlCharacter { field: "entity_id" })
        );
        assert!(validate_id("entity_id", "a\u{85}b").is_err());
        assert_eq!(validate_id("entity_id", "a b:c%d/é"), Ok(()));
    }

    #[test]
    fn ids_must_be_free_of_format_characters() {
        for sneaky in [
            "adm\u{200B}in",      // zero-width space
            "\u{202E}nimda",      // right-to-left override
            "a\u{2066}b\u{2069}", // bidi isolate
            "\u{FEFF}bom",        // byte-order mark
            "soft\u{00AD}hyphen", // soft hyphen
            "👩\u{200D}💻",       // zero-width joiner
            "tag\u{E0041}",       // tag character
        ] {
            assert_eq!(
                validate_id("user_id", sneaky),
                Err(KeyError::FormatCharacter { field: "user_id" }),
                "{sneaky:?}"
            );
        }
        // Visible look-alikes and combining marks are ordinary characters.
        for fine in ["e\u{301}", "❤\u{FE0F}", "مرحبا", "🇫🇷"] {
            assert_eq!(validate_id("user_id", fine), Ok(()), "{fine:?}");
        }
    }

    #[test]
    fn parsing_checks_once_and_names_the_field() {
        assert_eq!(TeamId::parse("design").expect("valid").as_str(), "design");
        assert_eq!(
            TeamId::parse("").unwrap_err().to_string(),
            "team_id must not be empty"
        );
        assert_eq!(
            UserId::parse_as("recipients[]", "a\nb")
                .unwrap_err()
                .to_string(),
            "recipients[] must not contain control characters"
        );
        assert!(EventType::parse("x".repeat(256)).is_err());
        assert!(EntityId::parse("x".repeat(255)).is_ok());
    }

    #[test]
    fn serde_is_the_plain_string_and_deserialising_validates() {
        let id = UserId::parse("ann").expect("valid");
        assert_eq!(serde_json::to_string(&id).expect("serialise"), "\"ann\"");
        assert_eq!(
            serde_json::from_str::<UserId>("\"ann\"").expect("deserialise"),
            id
        );
        assert!(serde_json::from_str::<UserId>("\"\"").is_err());
    }
}
