//! Delivery rules: "send the email in 15 minutes, unless the in-app item has
//! been read by then" (ARCHITECTURE.md, "Delayed channels"). An alert may
//! carry them per channel (`delivery`), and an event type may have them as
//! its default (`PUT /v1/event-types/{event_type}/delivery`); the alert's own
//! rule for a channel wins. Parsed here once; the claim decides them
//! (`deliveries::fallback`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;
use tidings_core::{Channel, EventType, Unless};
use uuid::Uuid;

use crate::{db::PrimaryPool, store::delivery_rules as store};

/// The longest delay: a delayed delivery is open work the outbox reads on
/// every claim of its tenant, so it is kept to what the rule is for
/// (an email after the user had a chance to see the bell), not scheduling.
pub const MAX_DELAY_SECS: u32 = 7 * 24 * 3600;

/// Why rules are not valid; the text names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRules(pub String);

/// One channel's rule: wait `delay_secs` after the alert, then send only if
/// the in-app item is not `unless` (read, or seen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRule {
    pub delay_secs: u32,
    pub unless: Unless,
}

impl ChannelRule {
    /// A rule from its fields as sent: `delay` is a whole number and a unit,
    /// `30s`, `15m`, `2h` or `1d` (at least a second, at most
    /// [`MAX_DELAY_SECS`]); `unless` is `read` or `seen`. `field` names the
    /// rule in the error (`delivery.email`).
    pub fn parse(field: &str, delay: &str, unless: &str) -> Result<ChannelRule, InvalidRules> {
        let delay_secs = parse_delay(delay)
            .ok_or_else(|| InvalidRules(format!(
                "{field}.delay must be a whole number of s, m, h or d (e.g. 15m), between 1s and 7d; got {delay:?}"
            )))?;
        let unless = Unless::parse(unless).ok_or_else(|| {
            InvalidRules(format!(
                "{field}.unless must be read or seen; got {unless:?}"
            ))
        })?;
        Ok(ChannelRule { delay_secs, unless })
    }

    /// The delay as written back (the largest unit that divides it).
    pub fn delay_text(&self) -> String {
        let s = self.delay_secs;
        for (unit, secs) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
            if s.is_multiple_of(secs) {
                return format!("{}{unit}", s / secs);
            }
        }
        format!("{s}s")
    }
}

fn parse_delay(text: &str) -> Option<u32> {
    let unit = text.chars().last()?;
    let number = &text[..text.len() - unit.len_utf8()];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) || number.len() > 7 {
        return None;
    }
    let n: u32 = number.parse().ok()?;
    let secs = n.checked_mul(match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return None,
    })?;
    (1..=MAX_DELAY_SECS).contains(&secs).then_some(secs)
}

/// The rules of the channels that can wait. In-app has none: it is
/// delivered at once, and is what the others wait on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRules {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<ChannelRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<ChannelRule>,
}

impl DeliveryRules {
    pub fn is_empty(&self) -> bool {
        self.email.is_none() && self.webhook.is_none()
    }

    pub fn for_channel(&self, channel: Channel) -> Option<ChannelRule> {
        match channel {
            Channel::Email => self.email,
            Channel::Webhook => self.webhook,
            Channel::InApp => None,
        }
    }

    /// These rules, each channel without one taking `defaults`'.
    pub fn over(self, defaults: DeliveryRules) -> DeliveryRules {
        DeliveryRules {
            email: self.email.or(defaults.email),
            webhook: self.webhook.or(defaults.webhook),
        }
    }

    /// As stored (`alerts.delivery`, `event_type_delivery.rules`).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Rules as stored; what this binary cannot read counts as none.
    pub fn from_stored(value: Option<Value>) -> DeliveryRules {
        value
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    }
}

/// Whether the schema has delivery rules (migration 0026). False only in a
/// test build standing in for the version before it
/// (`test_hooks::WITHOUT_LAST_MIGRATION`, the rolling upgrade test).
pub fn in_schema() -> bool {
    !crate::db::stands_in_for_previous_version()
}

/// The rules a new alert applies: its own, each channel without one taking
/// its event type's default (read only when the alert has an in-app item to
/// wait on); none at all for a critical category, which never waits.
pub async fn rules_for_alert(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &EventType,
    own: DeliveryRules,
    channels: &[Channel],
    category: Option<&tidings_core::Category>,
) -> sqlx::Result<DeliveryRules> {
    if !in_schema() || category.is_some_and(|c| c.critical) || !channels.contains(&Channel::InApp) {
        return Ok(DeliveryRules::default());
    }
    let defaults = event_type_rules(conn, tenant, event_type).await?;
    Ok(own.over(DeliveryRules {
        email: defaults
            .email
            .filter(|_| channels.contains(&Channel::Email)),
        webhook: defaults
            .webhook
            .filter(|_| channels.contains(&Channel::Webhook)),
    }))
}

/// The rules a background expansion batch of `alert_id` applies: those the
/// alert was accepted with.
pub async fn rules_of_stored_alert(
    conn: &mut PgConnection,
    tenant: Uuid,
    alert_id: Uuid,
) -> sqlx::Result<DeliveryRules> {
    if !in_schema() {
        return Ok(DeliveryRules::default());
    }
    Ok(DeliveryRules::from_stored(
        store::find_alert_rules(&mut *conn, tenant, alert_id).await?,
    ))
}

/// An event type's default rules; none when it has none.
pub async fn event_type_rules(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &EventType,
) -> sqlx::Result<DeliveryRules> {
    Ok(DeliveryRules::from_stored(
        store::find_event_type_rules(&mut *conn, tenant, event_type.as_str()).await?,
    ))
}

/// `GET /v1/event-types/{event_type}/delivery`: `None` when never set.
pub async fn get_event_type_rules(
    pool: &PrimaryPool,
    tenant: Uuid,
    event_type: &EventType,
) -> sqlx::Result<Option<DeliveryRules>> {
    Ok(
        store::find_event_type_rules(pool, tenant, event_type.as_str())
            .await?
            .map(|v| DeliveryRules::from_stored(Some(v))),
    )
}

/// `PUT /v1/event-types/{event_type}/delivery`: replaces the defaults. They
/// apply to alerts accepted from then on.
pub async fn put_event_type_rules(
    pool: &PrimaryPool,
    tenant: Uuid,
    event_type: &EventType,
    rules: &DeliveryRules,
) -> sqlx::Result<()> {
    store::upsert_event_type_rules(pool, tenant, event_type.as_str(), &rules.to_json()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_take_the_four_units_and_nothing_else() {
        assert_eq!(parse_delay("30s"), Some(30));
        assert_eq!(parse_delay("15m"), Some(900));
        assert_eq!(parse_delay("2h"), Some(7_200));
        assert_eq!(parse_delay("1d"), Some(86_400));
        assert_eq!(parse_delay("7d"), Some(MAX_DELAY_SECS));
        for bad in [
            "",
            "m",
            "15",
            "0s",
            "8d",
            "-1m",
            "+1m",
            "1.5h",
            "15 m",
            "15M",
            "1w",
            "15mm",
            "99999999s",
            "٣m",
        ] {
            assert_eq!(parse_delay(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_rule_names_its_bad_field() {
        assert_eq!(
            ChannelRule::parse("delivery.email", "15m", "read"),
            Ok(ChannelRule {
                delay_secs: 900,
                unless: Unless::Read
            })
        );
        let bad_delay = ChannelRule::parse("delivery.email", "soon", "read").unwrap_err();
        assert!(
            bad_delay.0.starts_with("delivery.email.delay "),
            "{bad_delay}"
        );
        let bad_unless = ChannelRule::parse("delivery.webhook", "1m", "opened").unwrap_err();
        assert!(
            bad_unless.0.starts_with("delivery.webhook.unless "),
            "{bad_unless}"
        );
    }

    #[test]
    fn the_alerts_own_rule_wins_per_channel_and_rules_round_trip() {
        let rule = |delay_secs, unless| ChannelRule { delay_secs, unless };
        let own = DeliveryRules {
            email: Some(rule(60, Unless::Seen)),
            webhook: None,
        };
        let defaults = DeliveryRules {
            email: Some(rule(900, Unless::Read)),
            webhook: Some(rule(3_600, Unless::Read)),
        };
        let effective = own.over(defaults);
        assert_eq!(effective.email, Some(rule(60, Unless::Seen)));
        assert_eq!(effective.webhook, Some(rule(3_600, Unless::Read)));
        assert_eq!(effective.for_channel(Channel::InApp), None);
        assert_eq!(
            DeliveryRules::from_stored(Some(effective.to_json())),
            effective
        );
        assert_eq!(rule(90, Unless::Read).delay_text(), "90s");
        assert_eq!(rule(5_400, Unless::Read).delay_text(), "90m");
        assert_eq!(rule(172_800, Unless::Read).delay_text(), "2d");
    }
}
