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

    /// The delay as written back.
    pub fn delay_text(&self) -> String {
        duration_text(self.delay_secs)
    }
}

/// A duration as written back: the largest unit that divides it.
fn duration_text(s: u32) -> String {
    for (unit, secs) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if s.is_multiple_of(secs) {
            return format!("{}{unit}", s / secs);
        }
    }
    format!("{s}s")
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

/// The most items a digest email lists (it states the total count of all).
pub const MAX_DIGEST_ITEMS: u32 = 500;

/// An email digest: the recipient's emails of the event type (and `key`)
/// collected from the first one for `window_secs` into one email, listing at
/// most `max_items` of those still not `unless` at the flush
/// (`deliveries::digests`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestRule {
    pub window_secs: u32,
    pub max_items: u32,
    /// `None`: every item collected is listed, read or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unless: Option<Unless>,
    /// A template over the alert (`{{ payload.project }}`) whose output
    /// splits the event type's digests: one per distinct value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A sliding window: each item moves the end to `window` after it, but
    /// never past `max_wait` after the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_secs: Option<u32>,
    /// Digest only if a second item arrives within this long of the first:
    /// a lone item is flushed then, as an email of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_within_secs: Option<u32>,
    /// The first item's email goes at once; the window collects the rest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub send_first: bool,
}

/// How an open digest's end moves when an item joins it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowEnd {
    /// `window` after the first item (a lone first item may be due sooner:
    /// `second_within`).
    Fixed { window_secs: u32 },
    /// `window` after the newest item, at most `max_wait` after the first.
    Sliding {
        window_secs: u32,
        max_wait_secs: u32,
    },
    /// Set when the digest opens (a daily or weekly digest), never moved.
    Set,
}

impl DigestRule {
    /// A digest rule from its fields as sent; `field` names it in the error
    /// (`delivery.email.digest`).
    pub fn parse(
        field: &str,
        window: &str,
        max_items: Option<u32>,
        unless: Option<&str>,
        key: Option<&str>,
    ) -> Result<DigestRule, InvalidRules> {
        let window_secs = parse_delay(window).ok_or_else(|| {
            InvalidRules(format!(
                "{field}.window must be a whole number of s, m, h or d (e.g. 1h), between 1s and 7d; got {window:?}"
            ))
        })?;
        let max_items = max_items.unwrap_or(50);
        if !(1..=MAX_DIGEST_ITEMS).contains(&max_items) {
            return Err(InvalidRules(format!(
                "{field}.max_items must be between 1 and {MAX_DIGEST_ITEMS}; got {max_items}"
            )));
        }
        let unless = unless
            .map(|u| {
                Unless::parse(u).ok_or_else(|| {
                    InvalidRules(format!("{field}.unless must be read or seen; got {u:?}"))
                })
            })
            .transpose()?;
        if let Some(key) = key {
            crate::alerts::templates::engine::check(
                crate::alerts::templates::engine::Part::Subject,
                key,
            )
            .map_err(|err| InvalidRules(format!("{field}.key is not a valid template: {err}")))?;
        }
        Ok(DigestRule {
            window_secs,
            max_items,
            unless,
            key: key.map(str::to_owned),
            max_wait_secs: None,
            second_within_secs: None,
            send_first: false,
        })
    }

    /// The rule with its options: `max_wait` (a sliding window, at least
    /// `window`), `second_within` (at most `window`) or `send_first` (not
    /// with `second_within`: one sends the first item, the other holds it).
    pub fn with_options(
        mut self,
        field: &str,
        max_wait: Option<&str>,
        second_within: Option<&str>,
        send_first: bool,
    ) -> Result<DigestRule, InvalidRules> {
        let duration = |name: &str, text: &str| {
            parse_delay(text).ok_or_else(|| {
                InvalidRules(format!(
                    "{field}.{name} must be a whole number of s, m, h or d (e.g. 1h), between 1s and 7d; got {text:?}"
                ))
            })
        };
        if let Some(text) = max_wait {
            let secs = duration("max_wait", text)?;
            if secs < self.window_secs {
                return Err(InvalidRules(format!(
                    "{field}.max_wait must be at least {field}.window"
                )));
            }
            self.max_wait_secs = Some(secs);
        }
        if let Some(text) = second_within {
            let secs = duration("second_within", text)?;
            if secs > self.window_secs {
                return Err(InvalidRules(format!(
                    "{field}.second_within must be at most {field}.window"
                )));
            }
            if send_first {
                return Err(InvalidRules(format!(
                    "{field}.send_first and {field}.second_within exclude each other: one sends the first item at once, the other holds it"
                )));
            }
            self.second_within_secs = Some(secs);
        }
        self.send_first = send_first;
        Ok(self)
    }

    /// How the window's end moves.
    pub fn window_end(&self) -> WindowEnd {
        match self.max_wait_secs {
            Some(max_wait_secs) => WindowEnd::Sliding {
                window_secs: self.window_secs,
                max_wait_secs,
            },
            None => WindowEnd::Fixed {
                window_secs: self.window_secs,
            },
        }
    }

    /// How long after the first item a digest this rule opens is due.
    pub fn first_due_secs(&self) -> u32 {
        self.second_within_secs.unwrap_or(self.window_secs)
    }

    pub fn window_text(&self) -> String {
        duration_text(self.window_secs)
    }

    pub fn max_wait_text(&self) -> Option<String> {
        self.max_wait_secs.map(duration_text)
    }

    pub fn second_within_text(&self) -> Option<String> {
        self.second_within_secs.map(duration_text)
    }

    /// The digest key of an alert of `event_type` with `payload`: the event
    /// type, then `/` and the rule's key rendered over the alert. A key that
    /// fails to render (a field the payload lacks is empty, not an error)
    /// falls back to the event type alone: the email is digested all the same.
    pub fn digest_key(&self, event_type: &str, payload: &Value) -> String {
        let Some(key) = &self.key else {
            return event_type.to_owned();
        };
        let context = minijinja::Value::from(minijinja::value::Serde(serde_json::json!({
            "payload": payload,
            "event_type": event_type,
        })));
        match crate::alerts::templates::engine::render(
            crate::alerts::templates::engine::Part::Subject,
            key,
            &context,
        ) {
            Ok(rendered) => format!("{event_type}/{}", rendered.output.trim()),
            Err(_) => event_type.to_owned(),
        }
    }
}

/// The rules of the channels that can wait. In-app has none: it is
/// delivered at once, and is what the others wait on. Email is delayed or
/// digested, not both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRules {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<ChannelRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<ChannelRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email_digest: Option<DigestRule>,
}

impl DeliveryRules {
    pub fn is_empty(&self) -> bool {
        self.email.is_none() && self.webhook.is_none() && self.email_digest.is_none()
    }

    pub fn for_channel(&self, channel: Channel) -> Option<ChannelRule> {
        match channel {
            Channel::Email => self.email,
            Channel::Webhook => self.webhook,
            Channel::InApp => None,
        }
    }

    /// These rules, each channel without one taking `defaults`'. An email
    /// rule of either kind (delay or digest) is the email's rule.
    pub fn over(self, defaults: DeliveryRules) -> DeliveryRules {
        let own_email = self.email.is_some() || self.email_digest.is_some();
        DeliveryRules {
            email: if own_email {
                self.email
            } else {
                defaults.email
            },
            email_digest: if own_email {
                self.email_digest
            } else {
                defaults.email_digest
            },
            webhook: self.webhook.or(defaults.webhook),
        }
    }

    /// The digest a channel's deliveries go to, if any.
    pub fn digest_for(&self, channel: Channel) -> Option<&DigestRule> {
        match channel {
            Channel::Email => self.email_digest.as_ref(),
            _ => None,
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
    let has_email = channels.contains(&Channel::Email);
    Ok(own.over(DeliveryRules {
        email: defaults.email.filter(|_| has_email),
        email_digest: defaults.email_digest.filter(|_| has_email),
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
    fn a_digest_rule_checks_its_fields_and_renders_its_key() {
        let rule = DigestRule::parse(
            "delivery.email.digest",
            "1h",
            Some(20),
            None,
            Some("{{ payload.project }}"),
        )
        .expect("valid");
        assert_eq!(
            (rule.window_secs, rule.max_items, rule.unless),
            (3_600, 20, None)
        );
        assert_eq!(
            rule.digest_key("comment.created", &serde_json::json!({"project": "apollo"})),
            "comment.created/apollo"
        );
        assert_eq!(rule.window_text(), "1h");
        let plain = DigestRule::parse("d", "15m", None, Some("seen"), None).expect("valid");
        assert_eq!((plain.max_items, plain.unless), (50, Some(Unless::Seen)));
        assert_eq!(plain.digest_key("x", &serde_json::json!({})), "x");
        for (window, max, unless, key, field) in [
            ("soon", None, None, None, "d.window "),
            ("8d", None, None, None, "d.window "),
            ("1h", Some(0), None, None, "d.max_items "),
            ("1h", Some(501), None, None, "d.max_items "),
            ("1h", None, Some("opened"), None, "d.unless "),
            ("1h", None, None, Some("{{ payload.x | nope }}"), "d.key "),
        ] {
            let err = DigestRule::parse("d", window, max, unless, key).unwrap_err();
            assert!(err.0.starts_with(field), "{err}");
        }
    }

    #[test]
    fn digest_options_check_each_other() {
        let rule = || DigestRule::parse("d", "10m", None, None, None).expect("valid");
        let sliding = rule()
            .with_options("d", Some("1h"), None, false)
            .expect("valid");
        assert_eq!(
            sliding.window_end(),
            WindowEnd::Sliding {
                window_secs: 600,
                max_wait_secs: 3_600
            }
        );
        let lone = rule()
            .with_options("d", None, Some("2m"), false)
            .expect("valid");
        assert_eq!(
            (lone.first_due_secs(), lone.window_end()),
            (120, WindowEnd::Fixed { window_secs: 600 })
        );
        assert_eq!(rule().first_due_secs(), 600);
        assert!(
            rule()
                .with_options("d", None, None, true)
                .expect("valid")
                .send_first
        );
        for (max_wait, second, first, field) in [
            (Some("5m"), None, false, "d.max_wait must be at least"),
            (Some("soon"), None, false, "d.max_wait must be a whole"),
            (None, Some("11m"), false, "d.second_within must be at most"),
            (None, Some("1m"), true, "d.send_first and d.second_within"),
        ] {
            let err = rule()
                .with_options("d", max_wait, second, first)
                .unwrap_err();
            assert!(err.0.starts_with(field), "{err}");
        }
        assert_eq!(
            DeliveryRules::from_stored(Some(
                DeliveryRules {
                    email_digest: Some(sliding.clone()),
                    ..DeliveryRules::default()
                }
                .to_json()
            ))
            .email_digest,
            Some(sliding)
        );
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
            ..DeliveryRules::default()
        };
        let defaults = DeliveryRules {
            email: Some(rule(900, Unless::Read)),
            webhook: Some(rule(3_600, Unless::Read)),
            ..DeliveryRules::default()
        };
        let effective = own.over(defaults.clone());
        assert_eq!(effective.email, Some(rule(60, Unless::Seen)));
        assert_eq!(effective.webhook, Some(rule(3_600, Unless::Read)));
        assert_eq!(effective.for_channel(Channel::InApp), None);
        assert_eq!(
            DeliveryRules::from_stored(Some(effective.to_json())),
            effective
        );
        // A digest set by the alert replaces the event type's delayed email.
        let digest = DigestRule::parse("d", "1h", None, Some("read"), None).expect("valid");
        let own_digest = DeliveryRules {
            email_digest: Some(digest.clone()),
            ..DeliveryRules::default()
        };
        let effective = own_digest.over(defaults.clone());
        assert_eq!(effective.email, None);
        assert_eq!(effective.email_digest, Some(digest.clone()));
        assert_eq!(
            DeliveryRules::from_stored(Some(effective.to_json())),
            effective
        );
        assert_eq!(rule(90, Unless::Read).delay_text(), "90s");
        assert_eq!(rule(5_400, Unless::Read).delay_text(), "90m");
        assert_eq!(rule(172_800, Unless::Read).delay_text(), "2d");
    }
}
