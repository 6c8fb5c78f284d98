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

use std::{borrow::Borrow, fmt, ops::Deref};

use serde::{Deserialize, Serialize};

use crate::key::{validate_id, KeyError};

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
