//! The fan-out plan: which rows an alert writes, decided by pure functions.
//!
//! An alert asks for one notification per recipient and channel
//! ([`notifications`]). The database says which of their keys are new (the
//! unique key of `notifications` decides; ARCHITECTURE.md, invariant 4).
//! [`plan_fanout`] then says, for the new keys only, which delivery rows and
//! in-app feed items to write and with what status; a key that existed is a
//! duplicate and gets nothing. `submit` runs the statements around it.
//!
//! **To change what an alert writes** (a new channel, a new skip reason,
//! another status), change [`plan_fanout`] and its table test below; the
//! statements that write a plan are in `submit::fan_out`.

use std::collections::{HashMap, HashSet};

use tidings_core::{
    Channel, EntityId, EventType, KeyError, Level, NotificationKey, Resolution, Setting, UserId,
};
use uuid::Uuid;

use crate::{
    alerts::delivery::{ChannelRule, DeliveryRules},
    deliveries::DeliveryStatus,
};

pub const NO_EMAIL: &str = "recipient has no email address";
pub const NO_ENDPOINT: &str = "no webhook endpoint is subscribed to this event type";
/// The reason of an email collected into a digest: the alert's own email
/// is not sent; the digest's is (`deliveries::digests`).
pub const DIGESTED: &str = "collected into a digest";

/// The recipients' resolved preference settings, per (recipient, channel):
/// only those that are not `on` need be present
/// (`alerts::preferences::settings_for_fanout`).
pub type Settings = HashMap<(UserId, Channel), Resolution>;

/// The skip reason of a delivery a preference turned off, naming the level
/// that decided, so `GET /v1/alerts/{id}` says why nothing was sent.
pub fn preference_reason(level: Level) -> &'static str {
    match level {
        Level::Locked => "preference: off by a locked tenant default",
        Level::UserEventType => "preference: off by the recipient's setting for this event type",
        Level::UserCategory => "preference: off by the recipient's setting for this category",
        Level::UserGlobal => "preference: off by the recipient's global setting",
        Level::TenantEventType => "preference: off by the tenant default for this event type",
        Level::TenantCategory => "preference: off by the tenant default for this category",
        Level::TenantGlobal => "preference: off by the tenant's global default",
        Level::CategoryDefault => "preference: off by the category's default",
        // Neither turns a channel off (critical is `on`, so is the fallback).
        Level::Critical | Level::Fallback => "preference",
    }
}

/// One notification an alert asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub recipient_id: UserId,
    pub channel: Channel,
    /// `NotificationKey::digest_hex`: the database key and the webhook-id.
    pub key: String,
    pub readable_key: String,
}

/// What became of one notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationStatus {
    /// New, with at least one delivery queued (or, in-app, done).
    Created,
    /// The key existed already: nothing written (invariant 4).
    Duplicate,
    /// New, but nothing to deliver (no email address, no webhook endpoint,
    /// or the recipient's preferences turned the channel off).
    Skipped,
}

/// One row of `deliveries` to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedDelivery {
    pub key: String,
    pub recipient_id: UserId,
    pub channel: Channel,
    pub endpoint_id: Option<Uuid>,
    pub status: DeliveryStatus,
    /// Why a `skipped` delivery is skipped.
    pub reason: Option<&'static str>,
    /// A `pending` delivery that waits: due after the delay, sent only if
    /// the recipient's in-app item of this alert is not read (or seen) by
    /// then (`deliveries::fallback`).
    pub wait: Option<ChannelRule>,
    /// Collected into the recipient's open digest (`status` is `skipped`
    /// with reason [`DIGESTED`]): which one.
    pub digest: Option<DigestSource>,
}

/// Which digest a collected email goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestSource {
    /// The alert's (or its event type's) `delivery.email.digest`.
    Rule,
    /// The recipient's `daily` or `weekly` email preference, which wins
    /// over the sender's rule.
    Periodic(Period),
}

/// A recipient's digest period (`daily`, `weekly`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    Daily,
    Weekly,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Daily => "daily",
            Period::Weekly => "weekly",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// One per notification, in the order given.
    pub statuses: Vec<NotificationStatus>,
    /// In key order, like every insert of a fan-out.
    pub deliveries: Vec<PlannedDelivery>,
    /// In-app feed items `(recipient, key)`, in key order.
    pub inbox_items: Vec<(UserId, String)>,
    /// Some delivery is `pending`: wake the outbox workers.
    pub wake_outbox: bool,
}

/// The notifications of `recipients` × `channels`, in that order, with their
/// keys.
pub fn notifications(
    tenant: Uuid,
    event_type: &EventType,
    entity_id: &EntityId,
    recipients: &[UserId],
    channels: &[Channel],
) -> Result<Vec<Notification>, KeyError> {
    let tenant = tenant.to_string();
    let mut out = Vec::with_capacity(recipients.len() * channels.len());
    for recipient in recipients {
        for &channel in channels {
            let key = NotificationKey::new(&tenant, event_type, entity_id, recipient, channel)?;
            out.push(Notification {
                recipient_id: recipient.clone(),
                channel,
                key: key.digest_hex(),
                readable_key: key.readable().to_owned(),
            });
        }
    }
    Ok(out)
}

/// Indexes of `notifications` in natural-key order, (recipient, channel):
/// the order every insert of a fan-out takes, so two transactions inserting
/// overlapping keys (same tenant, event type, entity) take the index locks in
/// the same order and cannot deadlock. It is also, byte for byte, the order of
/// the primary key within one (tenant, event type, entity) (migration 0019),
/// so one alert's insert walks its leaves left to right.
pub fn key_order(notifications: &[Notification]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..notifications.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&notifications[a], &notifications[b]);
        (a.recipient_id.as_str(), a.channel.as_str())
            .cmp(&(b.recipient_id.as_str(), b.channel.as_str()))
    });
    order
}

/// The recipients of new notifications on `channel`: whose email addresses
/// (or which endpoints) the plan needs to know.
pub fn new_recipients_on(
    notifications: &[Notification],
    new_keys: &HashSet<String>,
    channel: Channel,
) -> Vec<UserId> {
    notifications
        .iter()
        .filter(|n| n.channel == channel && new_keys.contains(&n.key))
        .map(|n| n.recipient_id.clone())
        .collect()
}

/// Decides the rows of a fan-out. `new_keys`: the keys the database just
/// inserted; `with_email`: the new email recipients that have an address;
/// `endpoints`: the webhook endpoints subscribed to the event type;
/// `settings`: the recipients' preferences that are not `on`.
///
/// - a channel the recipient's preferences turned `off`: one `skipped`
///   delivery whose reason names the deciding level, and nothing else (no
///   feed item, no email). The notification's key is written all the same,
///   so a retry of the alert after an opt-out stays a duplicate;
/// - in-app: a delivery written `sent` and a feed item, in this transaction;
/// - email: `pending`, or `skipped` without an address;
/// - webhook: one `pending` delivery per endpoint, or `skipped` without one;
/// - a `pending` email or webhook delivery whose channel has a rule in
///   `rules` waits (`PlannedDelivery::wait`); the caller applies no rules for
///   a critical category, which never waits.
pub fn plan_fanout(
    notifications: &[Notification],
    new_keys: &HashSet<String>,
    with_email: &HashSet<UserId>,
    endpoints: &[Uuid],
    settings: &Settings,
    rules: &DeliveryRules,
) -> Plan {
    let mut plan = Plan {
        statuses: vec![NotificationStatus::Duplicate; notifications.len()],
        deliveries: Vec::new(),
        inbox_items: Vec::new(),
        wake_outbox: false,
    };
    let off_for = |n: &Notification| {
        if settings.is_empty() {
            None
        } else {
            settings
                .get(&(n.recipient_id.clone(), n.channel))
                .filter(|r| r.setting == Setting::Off)
        }
    };
    // Recipients who get a new in-app item: only they can have an email
    // collected into a digest, which lists their items. Computed only when
    // some email may be digested: most alerts have no digest at all.
    let may_digest = rules.email_digest.is_some()
        || settings
            .values()
            .any(|r| matches!(r.setting, Setting::Daily | Setting::Weekly));
    let with_item: HashSet<&UserId> = if may_digest {
        notifications
            .iter()
            .filter(|n| {
                n.channel == Channel::InApp && new_keys.contains(&n.key) && off_for(n).is_none()
            })
            .map(|n| &n.recipient_id)
            .collect()
    } else {
        HashSet::new()
    };
    for i in key_order(notifications) {
        let n = &notifications[i];
        if !new_keys.contains(&n.key) {
            continue;
        }
        let digest = if n.channel == Channel::Email && with_item.contains(&n.recipient_id) {
            let periodic = settings
                .get(&(n.recipient_id.clone(), Channel::Email))
                .and_then(|r| match r.setting {
                    Setting::Daily => Some(Period::Daily),
                    Setting::Weekly => Some(Period::Weekly),
                    _ => None,
                });
            match periodic {
                Some(period) => Some(DigestSource::Periodic(period)),
                None => rules.email_digest.as_ref().map(|_| DigestSource::Rule),
            }
        } else {
            None
        };
        let delivery = |endpoint_id, status, reason| PlannedDelivery {
            key: n.key.clone(),
            recipient_id: n.recipient_id.clone(),
            channel: n.channel,
            endpoint_id,
            status,
            reason,
            wait: if status == DeliveryStatus::Pending {
                rules.for_channel(n.channel)
            } else {
                None
            },
            digest: digest.filter(|_| reason == Some(DIGESTED)),
        };
        let off = off_for(n);
        let status = match n.channel {
            _ if off.is_some() => {
                let level = off.map_or(Level::Fallback, |r| r.level);
                plan.deliveries.push(delivery(
                    None,
                    DeliveryStatus::Skipped,
                    Some(preference_reason(level)),
                ));
                NotificationStatus::Skipped
            }
            Channel::InApp => {
                // Delivered by this transaction: the feed item commits with it.
                plan.deliveries
                    .push(delivery(None, DeliveryStatus::Sent, None));
                plan.inbox_items
                    .push((n.recipient_id.clone(), n.key.clone()));
                NotificationStatus::Created
            }
            Channel::Email if with_email.contains(&n.recipient_id) && digest.is_some() => {
                plan.deliveries
                    .push(delivery(None, DeliveryStatus::Skipped, Some(DIGESTED)));
                NotificationStatus::Created
            }
            Channel::Email if with_email.contains(&n.recipient_id) => {
                plan.deliveries
                    .push(delivery(None, DeliveryStatus::Pending, None));
                plan.wake_outbox = true;
                NotificationStatus::Created
            }
            Channel::Email => {
                plan.deliveries
                    .push(delivery(None, DeliveryStatus::Skipped, Some(NO_EMAIL)));
                NotificationStatus::Skipped
            }
            Channel::Webhook if endpoints.is_empty() => {
                plan.deliveries
                    .push(delivery(None, DeliveryStatus::Skipped, Some(NO_ENDPOINT)));
                NotificationStatus::Skipped
            }
            Channel::Webhook => {
                for &endpoint in endpoints {
                    plan.deliveries
                        .push(delivery(Some(endpoint), DeliveryStatus::Pending, None));
                }
                plan.wake_outbox = true;
                NotificationStatus::Created
            }
        };
        plan.statuses[i] = status;
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use NotificationStatus::{Created, Duplicate, Skipped};

    fn user(id: &str) -> UserId {
        UserId::parse(id).expect("valid")
    }

    fn notes(recipients: &[&str], channels: &[Channel]) -> Vec<Notification> {
        let recipients: Vec<UserId> = recipients.iter().map(|r| user(r)).collect();
        notifications(
            Uuid::nil(),
            &EventType::parse("invoice.overdue").expect("valid"),
            &EntityId::parse("inv-1").expect("valid"),
            &recipients,
            channels,
        )
        .expect("valid ids")
    }

    /// A delivery as `(recipient, channel, endpoint index, status)`, for
    /// tables that read like the rows.
    type Row = (&'static str, Channel, Option<usize>, DeliveryStatus);

    struct Case {
        name: &'static str,
        recipients: &'static [&'static str],
        channels: &'static [Channel],
        /// Recipients whose keys already exist.
        duplicates: &'static [(&'static str, Channel)],
        with_email: &'static [&'static str],
        endpoints: usize,
        /// (recipient, channel) turned off by preferences, and by what.
        off: &'static [(&'static str, Channel, Level)],
        statuses: &'static [NotificationStatus],
        rows: &'static [Row],
        inbox: &'static [&'static str],
        wake: bool,
    }

    use Channel::{Email, InApp, Webhook};
    use DeliveryStatus::{Pending, Sent, Skipped as SkippedRow};

    const CASES: &[Case] = &[
        Case {
            name: "in-app is sent with its feed item, and wakes nobody",
            recipients: &["ann", "bob"],
            channels: &[InApp],
            duplicates: &[],
            with_email: &[],
            endpoints: 0,
            off: &[],
            statuses: &[Created, Created],
            rows: &[("ann", InApp, None, Sent), ("bob", InApp, None, Sent)],
            inbox: &["ann", "bob"],
            wake: false,
        },
        Case {
            name: "email is pending with an address and skipped without",
            recipients: &["ann", "bob"],
            channels: &[Email],
            duplicates: &[],
            with_email: &["ann"],
            endpoints: 0,
            off: &[],
            statuses: &[Created, Skipped],
            rows: &[
                ("ann", Email, None, Pending),
                ("bob", Email, None, SkippedRow),
            ],
            inbox: &[],
            wake: true,
        },
        Case {
            name: "a webhook goes to every subscribed endpoint",
            recipients: &["ann"],
            channels: &[Webhook],
            duplicates: &[],
            with_email: &[],
            endpoints: 2,
            off: &[],
            statuses: &[Created],
            rows: &[
                ("ann", Webhook, Some(0), Pending),
                ("ann", Webhook, Some(1), Pending),
            ],
            inbox: &[],
            wake: true,
        },
        Case {
            name: "a webhook without endpoints is skipped",
            recipients: &["ann"],
            channels: &[Webhook],
            duplicates: &[],
            with_email: &[],
            endpoints: 0,
            off: &[],
            statuses: &[Skipped],
            rows: &[("ann", Webhook, None, SkippedRow)],
            inbox: &[],
            wake: false,
        },
        Case {
            name: "duplicates get nothing, the new keys of the same alert do",
            recipients: &["ann", "bob"],
            channels: &[InApp, Email],
            duplicates: &[("ann", InApp), ("ann", Email), ("bob", Email)],
            with_email: &["ann", "bob"],
            endpoints: 1,
            off: &[],
            statuses: &[Duplicate, Duplicate, Created, Duplicate],
            rows: &[("bob", InApp, None, Sent)],
            inbox: &["bob"],
            wake: false,
        },
        Case {
            name: "a full replay writes nothing",
            recipients: &["ann"],
            channels: &[InApp, Email, Webhook],
            duplicates: &[("ann", InApp), ("ann", Email), ("ann", Webhook)],
            with_email: &["ann"],
            endpoints: 1,
            off: &[],
            statuses: &[Duplicate, Duplicate, Duplicate],
            rows: &[],
            inbox: &[],
            wake: false,
        },
        Case {
            name: "a channel turned off is skipped, the others of the same recipient are not",
            recipients: &["ann", "bob"],
            channels: &[InApp, Email],
            duplicates: &[],
            with_email: &["ann", "bob"],
            endpoints: 0,
            off: &[("ann", Email, Level::UserCategory)],
            statuses: &[Created, Skipped, Created, Created],
            rows: &[
                ("ann", InApp, None, Sent),
                ("ann", Email, None, SkippedRow),
                ("bob", InApp, None, Sent),
                ("bob", Email, None, Pending),
            ],
            inbox: &["ann", "bob"],
            wake: true,
        },
        Case {
            name: "in-app turned off writes no feed item; webhook off writes one skipped row",
            recipients: &["ann"],
            channels: &[InApp, Webhook],
            duplicates: &[],
            with_email: &[],
            endpoints: 2,
            off: &[
                ("ann", InApp, Level::Locked),
                ("ann", Webhook, Level::TenantGlobal),
            ],
            statuses: &[Skipped, Skipped],
            rows: &[
                ("ann", InApp, None, SkippedRow),
                ("ann", Webhook, None, SkippedRow),
            ],
            inbox: &[],
            wake: false,
        },
        Case {
            name:
                "a duplicate stays a duplicate after an opt-out: nothing is resurrected or skipped",
            recipients: &["ann"],
            channels: &[Email],
            duplicates: &[("ann", Email)],
            with_email: &["ann"],
            endpoints: 0,
            off: &[("ann", Email, Level::UserGlobal)],
            statuses: &[Duplicate],
            rows: &[],
            inbox: &[],
            wake: false,
        },
    ];

    #[test]
    fn plans_follow_the_table() {
        let endpoint_ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        for case in CASES {
            let notes = notes(case.recipients, case.channels);
            let new_keys: HashSet<String> = notes
                .iter()
                .filter(|n| {
                    !case
                        .duplicates
                        .iter()
                        .any(|(r, c)| n.recipient_id.as_str() == *r && n.channel == *c)
                })
                .map(|n| n.key.clone())
                .collect();
            let with_email: HashSet<UserId> = case.with_email.iter().map(|r| user(r)).collect();
            let endpoints = &endpoint_ids[..case.endpoints];
            let settings: Settings = case
                .off
                .iter()
                .map(|&(r, c, level)| {
                    let off = Resolution {
                        setting: Setting::Off,
                        level,
                    };
                    ((user(r), c), off)
                })
                .collect();
            let plan = plan_fanout(
                &notes,
                &new_keys,
                &with_email,
                endpoints,
                &settings,
                &DeliveryRules::default(),
            );
            assert!(
                plan.deliveries.iter().all(|d| d.wait.is_none()),
                "{}",
                case.name
            );

            assert_eq!(plan.statuses, case.statuses, "{}", case.name);
            let mut rows: Vec<(String, Channel, Option<Uuid>, DeliveryStatus)> = plan
                .deliveries
                .iter()
                .map(|d| {
                    (
                        d.recipient_id.to_string(),
                        d.channel,
                        d.endpoint_id,
                        d.status,
                    )
                })
                .collect();
            let mut expected: Vec<_> = case
                .rows
                .iter()
                .map(|&(r, c, e, s)| (r.to_string(), c, e.map(|i| endpoint_ids[i]), s))
                .collect();
            rows.sort();
            expected.sort();
            assert_eq!(rows, expected, "{}", case.name);
            for d in &plan.deliveries {
                let turned_off = case
                    .off
                    .iter()
                    .find(|(r, c, _)| d.recipient_id.as_str() == *r && d.channel == *c);
                let want = match (d.channel, d.status, turned_off) {
                    (_, SkippedRow, Some(&(_, _, level))) => Some(preference_reason(level)),
                    (Email, SkippedRow, None) => Some(NO_EMAIL),
                    (Webhook, SkippedRow, None) => Some(NO_ENDPOINT),
                    _ => None,
                };
                assert_eq!(d.reason, want, "{}", case.name);
            }
            let mut inbox: Vec<String> = plan
                .inbox_items
                .iter()
                .map(|(r, _)| r.to_string())
                .collect();
            inbox.sort();
            assert_eq!(inbox, case.inbox, "{}", case.name);
            assert_eq!(plan.wake_outbox, case.wake, "{}", case.name);
        }
    }

    #[test]
    fn rows_come_in_natural_key_order_whatever_the_request_order() {
        let notes = notes(&["zed", "ann", "kim"], &[InApp, Email]);
        let new_keys: HashSet<String> = notes.iter().map(|n| n.key.clone()).collect();
        let everyone: HashSet<UserId> = ["zed", "ann", "kim"].iter().map(|r| user(r)).collect();
        let plan = plan_fanout(
            &notes,
            &new_keys,
            &everyone,
            &[],
            &Settings::new(),
            &DeliveryRules::default(),
        );
        let rows: Vec<(String, &str)> = plan
            .deliveries
            .iter()
            .map(|d| (d.recipient_id.to_string(), d.channel.as_str()))
            .collect();
        let mut sorted = rows.clone();
        sorted.sort();
        assert_eq!(rows, sorted);
        assert_eq!(rows.first(), Some(&("ann".to_string(), "email")));
        let inbox: Vec<String> = plan
            .inbox_items
            .iter()
            .map(|(r, _)| r.to_string())
            .collect();
        assert_eq!(inbox, ["ann", "kim", "zed"]);
    }

    #[test]
    fn keys_are_the_cores_and_differ_per_recipient_and_channel() {
        let notes = notes(&["ann", "bob"], &[InApp, Email]);
        let key = NotificationKey::derive(
            &Uuid::nil().to_string(),
            "invoice.overdue",
            "inv-1",
            "ann",
            Email,
        )
        .expect("valid");
        assert_eq!(notes[1].key, key.digest_hex());
        assert_eq!(notes[1].readable_key, key.readable());
        let unique: HashSet<&String> = notes.iter().map(|n| &n.key).collect();
        assert_eq!(unique.len(), 4);
    }

    #[test]
    fn only_pending_deliveries_of_a_channel_with_a_rule_wait() {
        let notes = notes(&["ann", "bob"], &[InApp, Email, Webhook]);
        let new_keys: HashSet<String> = notes.iter().map(|n| n.key.clone()).collect();
        let with_email: HashSet<UserId> = [user("ann")].into_iter().collect();
        let rule = ChannelRule {
            delay_secs: 900,
            unless: tidings_core::Unless::Read,
        };
        let rules = DeliveryRules {
            email: Some(rule),
            ..DeliveryRules::default()
        };
        let endpoint = Uuid::from_u128(7);
        let plan = plan_fanout(
            &notes,
            &new_keys,
            &with_email,
            &[endpoint],
            &Settings::new(),
            &rules,
        );
        let waiting: Vec<(String, Channel, DeliveryStatus, bool)> = plan
            .deliveries
            .iter()
            .map(|d| {
                (
                    d.recipient_id.to_string(),
                    d.channel,
                    d.status,
                    d.wait == Some(rule),
                )
            })
            .collect();
        assert_eq!(
            waiting,
            vec![
                ("ann".into(), Email, Pending, true),
                ("ann".into(), InApp, Sent, false),
                ("ann".into(), Webhook, Pending, false),
                ("bob".into(), Email, SkippedRow, false),
                ("bob".into(), InApp, Sent, false),
                ("bob".into(), Webhook, Pending, false),
            ]
        );
    }

    #[test]
    fn a_digested_email_is_skipped_as_collected_and_wakes_nobody() {
        let notes = notes(&["ann", "bob"], &[InApp, Email]);
        let new_keys: HashSet<String> = notes.iter().map(|n| n.key.clone()).collect();
        let with_email: HashSet<UserId> = [user("ann")].into_iter().collect();
        let rules = DeliveryRules {
            email_digest: Some(
                crate::alerts::delivery::DigestRule::parse("d", "1h", None, Some("read"), None)
                    .expect("valid"),
            ),
            ..DeliveryRules::default()
        };
        let plan = plan_fanout(
            &notes,
            &new_keys,
            &with_email,
            &[],
            &Settings::new(),
            &rules,
        );
        let rows: Vec<(String, Channel, DeliveryStatus, Option<&str>, bool)> = plan
            .deliveries
            .iter()
            .map(|d| {
                (
                    d.recipient_id.to_string(),
                    d.channel,
                    d.status,
                    d.reason,
                    d.digest == Some(DigestSource::Rule),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("ann".into(), Email, SkippedRow, Some(DIGESTED), true),
                ("ann".into(), InApp, Sent, None, false),
                ("bob".into(), Email, SkippedRow, Some(NO_EMAIL), false),
                ("bob".into(), InApp, Sent, None, false),
            ]
        );
        assert_eq!(plan.statuses, vec![Created, Created, Created, Skipped]);
        assert!(!plan.wake_outbox);
    }

    #[test]
    fn a_daily_preference_wins_over_the_rule_and_without_an_item_nothing_is_digested() {
        let notes = notes(&["ann", "bob", "cat"], &[InApp, Email]);
        let new_keys: HashSet<String> = notes.iter().map(|n| n.key.clone()).collect();
        let with_email: HashSet<UserId> = [user("ann"), user("bob"), user("cat")]
            .into_iter()
            .collect();
        let rules = DeliveryRules {
            email_digest: Some(
                crate::alerts::delivery::DigestRule::parse("d", "1h", None, Some("read"), None)
                    .expect("valid"),
            ),
            ..DeliveryRules::default()
        };
        let resolved = |setting| Resolution {
            setting,
            level: Level::UserCategory,
        };
        let settings: Settings = [
            ((user("ann"), Email), resolved(Setting::Daily)),
            ((user("bob"), Email), resolved(Setting::Weekly)),
            // Cat gets no in-app item: her email cannot list one, so it is
            // sent as it is rather than digested.
            ((user("cat"), InApp), resolved(Setting::Off)),
        ]
        .into_iter()
        .collect();
        let plan = plan_fanout(&notes, &new_keys, &with_email, &[], &settings, &rules);
        let emails: Vec<(String, DeliveryStatus, Option<DigestSource>)> = plan
            .deliveries
            .iter()
            .filter(|d| d.channel == Email)
            .map(|d| (d.recipient_id.to_string(), d.status, d.digest))
            .collect();
        assert_eq!(
            emails,
            vec![
                (
                    "ann".into(),
                    SkippedRow,
                    Some(DigestSource::Periodic(Period::Daily))
                ),
                (
                    "bob".into(),
                    SkippedRow,
                    Some(DigestSource::Periodic(Period::Weekly))
                ),
                ("cat".into(), Pending, None),
            ]
        );
        assert!(plan.wake_outbox);
    }
}
