//! An alert request, parsed once: every id checked, lists deduplicated,
//! limits enforced. Both front doors (HTTP and the NATS inbox) parse into
//! [`AlertRequest`], so both produce the same rows for the same request.

use std::collections::HashSet;

use tidings_core::{Channel, EntityId, EventType, KeyError, TeamId, UserId};

use crate::alerts::{delivery::DeliveryRules, payload::Payload};

pub const MAX_RECIPIENTS: usize = 1000;
pub const MAX_SUBJECT_BYTES: usize = 1000;

/// Why a request is not a valid alert; the text names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAlert(String);

impl From<KeyError> for InvalidAlert {
    fn from(err: KeyError) -> Self {
        InvalidAlert(err.to_string())
    }
}

impl From<crate::alerts::delivery::InvalidRules> for InvalidAlert {
    fn from(err: crate::alerts::delivery::InvalidRules) -> Self {
        InvalidAlert(err.0)
    }
}

fn invalid(detail: impl Into<String>) -> InvalidAlert {
    InvalidAlert(detail.into())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Deduplicated, in the order first given.
    Recipients(Vec<UserId>),
    Team(TeamId),
}

/// A valid alert request.
#[derive(Debug, Clone)]
pub struct AlertRequest {
    pub event_type: EventType,
    pub entity_id: EntityId,
    pub audience: Audience,
    /// Deduplicated, non-empty.
    pub channels: Vec<Channel>,
    /// Email subject and in-app title: at most 1,000 bytes, no control characters.
    pub subject: Option<String>,
    pub payload: Payload,
    /// The category the alert names (an id like the others); `None`: its
    /// event type's, if it has one (`alerts::preferences`).
    pub category: Option<String>,
    /// The alert's own delivery rules; a channel without one takes its event
    /// type's default (`alerts::delivery`).
    pub delivery: DeliveryRules,
}

impl AlertRequest {
    /// The request, naming `category` when given.
    pub fn with_category(mut self, category: Option<String>) -> Result<Self, InvalidAlert> {
        if let Some(key) = &category {
            tidings_core::validate_id("category", key)?;
        }
        self.category = category;
        Ok(self)
    }

    /// The request with its own delivery rules. A rule is for a channel the
    /// alert has, and waits on the in-app item, so the alert must have
    /// `in_app` too.
    pub fn with_delivery(mut self, rules: DeliveryRules) -> Result<Self, InvalidAlert> {
        for channel in [Channel::Email, Channel::Webhook] {
            if rules.for_channel(channel).is_none() && rules.digest_for(channel).is_none() {
                continue;
            }
            if !self.channels.contains(&channel) {
                return Err(invalid(format!(
                    "delivery.{channel} is given but {channel} is not one of the channels"
                )));
            }
            if !self.channels.contains(&Channel::InApp) {
                return Err(invalid(format!(
                    "delivery.{channel} waits on the in-app item: channels must include in_app"
                )));
            }
        }
        self.delivery = rules;
        Ok(self)
    }

    /// Checks the fields of a request as it arrived (the HTTP body or a NATS
    /// message), in this order, and reports the first problem.
    pub fn parse(
        event_type: String,
        entity_id: String,
        recipients: Option<Vec<String>>,
        team_id: Option<String>,
        channels: &[Channel],
        subject: Option<String>,
        payload: serde_json::Value,
    ) -> Result<Self, InvalidAlert> {
        let event_type = EventType::parse(event_type)?;
        let entity_id = EntityId::parse(entity_id)?;
        let audience = match (recipients, team_id) {
            (Some(recipients), None) => {
                if recipients.is_empty() {
                    return Err(invalid("recipients must not be empty"));
                }
                let recipients = recipients
                    .into_iter()
                    .map(|r| UserId::parse_as("recipients[]", r))
                    .collect::<Result<Vec<_>, _>>()?;
                let unique = dedup(recipients);
                if unique.len() > MAX_RECIPIENTS {
                    return Err(invalid(format!(
                        "{} distinct recipients; the limit is {MAX_RECIPIENTS} (use team_id for larger audiences)",
                        unique.len()
                    )));
                }
                Audience::Recipients(unique)
            }
            (None, Some(team)) => Audience::Team(TeamId::parse(team)?),
            _ => return Err(invalid("exactly one of recipients and team_id is required")),
        };
        if channels.is_empty() {
            return Err(invalid("channels must not be empty"));
        }
        let channels = dedup(channels.to_vec());
        if let Some(subject) = &subject {
            if subject.len() > MAX_SUBJECT_BYTES {
                return Err(invalid(format!(
                    "subject is longer than {MAX_SUBJECT_BYTES} bytes"
                )));
            }
            // A line break in a subject would become a header injection in email.
            if subject.chars().any(char::is_control) {
                return Err(invalid("subject must not contain control characters"));
            }
        }
        let payload = Payload::parse(payload).map_err(|e| invalid(format!("payload {e}")))?;
        Ok(AlertRequest {
            event_type,
            entity_id,
            audience,
            channels,
            subject,
            payload,
            category: None,
            delivery: DeliveryRules::default(),
        })
    }

    pub fn team(&self) -> Option<&TeamId> {
        match &self.audience {
            Audience::Team(team) => Some(team),
            Audience::Recipients(_) => None,
        }
    }
}

/// Keeps the first of equal items, in order.
fn dedup<T: Clone + Eq + std::hash::Hash>(items: Vec<T>) -> Vec<T> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::payload::MAX_PAYLOAD_BYTES;
    use serde_json::json;

    struct Fields {
        recipients: Option<Vec<String>>,
        team_id: Option<String>,
        channels: Vec<Channel>,
        subject: Option<String>,
        payload: serde_json::Value,
    }

    fn base() -> Fields {
        Fields {
            recipients: Some(vec!["a".into(), "b".into(), "a".into()]),
            team_id: None,
            channels: vec![Channel::Email, Channel::InApp, Channel::Email],
            subject: None,
            payload: json!({"amount": 3}),
        }
    }

    fn parse(f: Fields) -> Result<AlertRequest, InvalidAlert> {
        AlertRequest::parse(
            "invoice.overdue".into(),
            "inv-1".into(),
            f.recipients,
            f.team_id,
            &f.channels,
            f.subject,
            f.payload,
        )
    }

    fn user(id: &str) -> UserId {
        UserId::parse(id).expect("valid")
    }

    #[test]
    fn recipients_and_channels_are_deduplicated_in_order() {
        let alert = parse(base()).expect("valid");
        assert_eq!(
            alert.audience,
            Audience::Recipients(vec![user("a"), user("b")])
        );
        assert_eq!(alert.channels, vec![Channel::Email, Channel::InApp]);
    }

    #[test]
    fn exactly_one_audience_is_required() {
        let both = Fields {
            team_id: Some("t".into()),
            ..base()
        };
        assert!(parse(both).is_err());
        let neither = Fields {
            recipients: None,
            ..base()
        };
        assert!(parse(neither).is_err());
        let team = Fields {
            recipients: None,
            team_id: Some("t".into()),
            ..base()
        };
        assert_eq!(
            parse(team).expect("valid").audience,
            Audience::Team(TeamId::parse("t").expect("valid"))
        );
    }

    #[test]
    fn limits_are_enforced_and_named() {
        let ids = |n: usize| Some((0..n).map(|i| format!("u{i}")).collect::<Vec<_>>());
        assert_eq!(
            parse(Fields {
                recipients: ids(1001),
                ..base()
            })
            .unwrap_err()
            .to_string(),
            "1001 distinct recipients; the limit is 1000 (use team_id for larger audiences)"
        );
        assert!(parse(Fields {
            recipients: ids(1000),
            ..base()
        })
        .is_ok());
        let cases = [
            (
                Fields {
                    payload: json!({"x": "y".repeat(MAX_PAYLOAD_BYTES)}),
                    ..base()
                },
                "payload is 16392 bytes; the limit is 16384",
            ),
            (
                Fields {
                    payload: json!([1]),
                    ..base()
                },
                "payload must be a JSON object",
            ),
            (
                Fields {
                    channels: vec![],
                    ..base()
                },
                "channels must not be empty",
            ),
            (
                Fields {
                    recipients: Some(vec![]),
                    ..base()
                },
                "recipients must not be empty",
            ),
            (
                Fields {
                    recipients: Some(vec!["ok".into(), String::new()]),
                    ..base()
                },
                "recipients[] must not be empty",
            ),
            (
                Fields {
                    subject: Some("hi\r\nBcc: x@y".into()),
                    ..base()
                },
                "subject must not contain control characters",
            ),
        ];
        for (fields, problem) in cases {
            assert_eq!(parse(fields).unwrap_err().to_string(), problem);
        }
    }
}
