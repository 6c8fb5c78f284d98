//! The alert service: one transaction per alert (DESIGN invariants 4, 6, 7).
//!
//! `create_alert` is shared by `POST /v1/alerts` and the NATS inbox, so both
//! produce exactly the same rows for the same request. A full replay (every key
//! already notified) writes nothing and answers with the alert that first created
//! those keys; a partial replay creates a new alert holding only the new keys.

use std::collections::{HashMap, HashSet};

use sqlx::{PgConnection, PgPool};
use tidings_core::{
    decide, stable_lock_key, validate_id, Channel, FanoutThresholds, NotificationKey, SendKind,
    Strategy,
};
use uuid::Uuid;

use crate::{
    config::AlertsConfig,
    deliveries::DeliveryStatus,
    error::{ApiError, ApiResult},
    idempotency::{self, Begin, IdempotencyError, IdempotencyRequest, SavedResponse},
    store::{self, alerts as alert_store, deliveries as delivery_store},
};

pub const MAX_RECIPIENTS: usize = 1000;
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;
pub const MAX_SUBJECT_BYTES: usize = 1000;

/// An alert request as it arrives (HTTP body or NATS message), before validation.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AlertInput {
    pub event_type: String,
    pub entity_id: String,
    #[serde(default)]
    pub recipients: Option<Vec<String>>,
    #[serde(default)]
    pub team_id: Option<String>,
    pub channels: Vec<String>,
    #[serde(default)]
    pub subject: Option<String>,
    pub payload: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Deduplicated, in the order first given.
    Recipients(Vec<String>),
    Team(String),
}

/// A valid alert request: every id checked, lists deduplicated, limits enforced.
#[derive(Debug, Clone)]
pub struct NewAlert {
    pub event_type: String,
    pub entity_id: String,
    pub audience: Audience,
    pub channels: Vec<Channel>,
    pub subject: Option<String>,
    pub payload: serde_json::Value,
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::unprocessable("invalid_alert", detail)
}

fn dedup<T: Clone + Eq + std::hash::Hash>(items: &[T]) -> Vec<T> {
    let mut seen = HashSet::new();
    items
        .iter()
        .filter(|i| seen.insert((*i).clone()))
        .cloned()
        .collect()
}

impl NewAlert {
    pub fn parse(input: AlertInput) -> ApiResult<NewAlert> {
        let id = |field: &'static str, v: &str| {
            validate_id(field, v).map_err(|e| invalid(e.to_string()))
        };
        id("event_type", &input.event_type)?;
        id("entity_id", &input.entity_id)?;
        let audience = match (input.recipients, input.team_id) {
            (Some(recipients), None) => {
                if recipients.is_empty() {
                    return Err(invalid("recipients must not be empty"));
                }
                for r in &recipients {
                    id("recipients[]", r)?;
                }
                let unique = dedup(&recipients);
                if unique.len() > MAX_RECIPIENTS {
                    return Err(invalid(format!(
                        "{} distinct recipients; the limit is {MAX_RECIPIENTS} (use team_id for larger audiences)",
                        unique.len()
                    )));
                }
                Audience::Recipients(unique)
            }
            (None, Some(team)) => {
                id("team_id", &team)?;
                Audience::Team(team)
            }
            _ => return Err(invalid("exactly one of recipients and team_id is required")),
        };
        if input.channels.is_empty() {
            return Err(invalid("channels must not be empty"));
        }
        let channels: Vec<Channel> = input
            .channels
            .iter()
            .map(|c| c.parse::<Channel>().map_err(|e| invalid(e.to_string())))
            .collect::<ApiResult<_>>()?;
        let channels = dedup(&channels);
        if let Some(subject) = &input.subject {
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
        if !input.payload.is_object() {
            return Err(invalid("payload must be a JSON object"));
        }
        let size = serde_json::to_vec(&input.payload)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > MAX_PAYLOAD_BYTES {
            return Err(invalid(format!(
                "payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}"
            )));
        }
        Ok(NewAlert {
            event_type: input.event_type,
            entity_id: input.entity_id,
            audience,
            channels,
            subject: input.subject,
            payload: input.payload,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationStatus {
    /// New, with at least one delivery queued (or, in-app, done).
    Created,
    /// The key existed already: nothing written (invariant 4).
    Duplicate,
    /// New, but nothing to deliver (no email address, no webhook endpoint).
    Skipped,
}

#[derive(Debug, Clone)]
pub struct NotificationOutcome {
    pub recipient_id: String,
    pub channel: Channel,
    /// `NotificationKey::digest_hex`: the database key and the webhook-id.
    pub key: String,
    pub readable_key: String,
    pub status: NotificationStatus,
}

#[derive(Debug, Clone)]
pub struct AlertCreated {
    pub alert_id: Uuid,
    /// Empty when the team is expanded in the background.
    pub deliveries: Vec<NotificationOutcome>,
    /// True when the team is expanded by the background worker.
    pub background_expansion: bool,
}

/// What one fan-out writes about: the alert's shared fields.
struct FanoutTarget<'a> {
    tenant: Uuid,
    alert_id: Uuid,
    event_type: &'a str,
    entity_id: &'a str,
    subject: Option<&'a str>,
    payload: &'a serde_json::Value,
    channels: &'a [Channel],
}

const NO_EMAIL: &str = "recipient has no email address";
const NO_ENDPOINT: &str = "no webhook endpoint is subscribed to this event type";

/// Writes notifications for `recipients` × channels, and for the new ones only
/// their deliveries and in-app items. Every insert is one statement over arrays.
async fn fan_out(
    conn: &mut PgConnection,
    target: &FanoutTarget<'_>,
    recipients: &[String],
) -> sqlx::Result<Vec<NotificationOutcome>> {
    let tenant_text = target.tenant.to_string();
    let mut outcomes = Vec::with_capacity(recipients.len() * target.channels.len());
    for recipient in recipients {
        for &channel in target.channels {
            // Ids were validated on entry, so deriving cannot fail here; a failure
            // would be a bug, reported as an internal error.
            let key = NotificationKey::derive(
                &tenant_text,
                target.event_type,
                target.entity_id,
                recipient,
                channel,
            )
            .map_err(|e| sqlx::Error::Protocol(format!("notification key: {e}")))?;
            outcomes.push(NotificationOutcome {
                recipient_id: recipient.clone(),
                channel,
                key: key.digest_hex(),
                readable_key: key.readable().to_owned(),
                status: NotificationStatus::Duplicate,
            });
        }
    }
    if outcomes.is_empty() {
        return Ok(outcomes);
    }
    // Insert in key order: two transactions inserting overlapping keys then take
    // the index locks in the same order and cannot deadlock.
    let mut order: Vec<usize> = (0..outcomes.len()).collect();
    order.sort_by(|&a, &b| outcomes[a].key.cmp(&outcomes[b].key));
    let mut columns = alert_store::NotificationColumns::default();
    for &i in &order {
        let o = &outcomes[i];
        columns.keys.push(o.key.clone());
        columns.readable_keys.push(o.readable_key.clone());
        columns.recipients.push(o.recipient_id.clone());
        columns.channels.push(o.channel.as_str().to_owned());
    }
    let new_keys: HashSet<String> = alert_store::insert_notifications(
        conn,
        target.tenant,
        target.alert_id,
        target.event_type,
        target.entity_id,
        &columns,
    )
    .await?
    .into_iter()
    .collect();
    if new_keys.is_empty() {
        return Ok(outcomes);
    }

    let new_recipients_on = |channel: Channel| -> Vec<String> {
        outcomes
            .iter()
            .filter(|o| o.channel == channel && new_keys.contains(&o.key))
            .map(|o| o.recipient_id.clone())
            .collect()
    };
    let emails: HashMap<String, String> = {
        let wanted = new_recipients_on(Channel::Email);
        if wanted.is_empty() {
            HashMap::new()
        } else {
            store::users::list_emails(&mut *conn, target.tenant, &wanted)
                .await?
                .into_iter()
                .collect()
        }
    };
    let endpoints = if new_recipients_on(Channel::Webhook).is_empty() {
        Vec::new()
    } else {
        store::webhook_endpoints::list_subscribed_endpoint_ids(
            &mut *conn,
            target.tenant,
            target.event_type,
        )
        .await?
    };

    let mut deliveries = delivery_store::DeliveryColumns::default();
    let (mut inbox_recipients, mut inbox_keys) = (Vec::new(), Vec::new());
    let mut any_pending = false;
    for &i in &order {
        let o = &mut outcomes[i];
        if !new_keys.contains(&o.key) {
            continue;
        }
        let channel = o.channel;
        o.status = NotificationStatus::Created;
        match o.channel {
            Channel::InApp => {
                // Delivered by this transaction: the feed item commits with it.
                deliveries.push(
                    &o.key,
                    &o.recipient_id,
                    channel,
                    None,
                    DeliveryStatus::Sent,
                    None,
                );
                inbox_recipients.push(o.recipient_id.clone());
                inbox_keys.push(o.key.clone());
            }
            Channel::Email if emails.contains_key(&o.recipient_id) => {
                deliveries.push(
                    &o.key,
                    &o.recipient_id,
                    channel,
                    None,
                    DeliveryStatus::Pending,
                    None,
                );
                any_pending = true;
            }
            Channel::Email => {
                deliveries.push(
                    &o.key,
                    &o.recipient_id,
                    channel,
                    None,
                    DeliveryStatus::Skipped,
                    Some(NO_EMAIL),
                );
                o.status = NotificationStatus::Skipped;
            }
            Channel::Webhook if endpoints.is_empty() => {
                deliveries.push(
                    &o.key,
                    &o.recipient_id,
                    channel,
                    None,
                    DeliveryStatus::Skipped,
                    Some(NO_ENDPOINT),
                );
                o.status = NotificationStatus::Skipped;
            }
            Channel::Webhook => {
                for &endpoint in &endpoints {
                    deliveries.push(
                        &o.key,
                        &o.recipient_id,
                        channel,
                        Some(endpoint),
                        DeliveryStatus::Pending,
                        None,
                    );
                }
                any_pending = true;
            }
        }
    }
    delivery_store::insert_deliveries(&mut *conn, target.tenant, target.alert_id, &deliveries)
        .await?;
    let common = alert_store::InboxItemCommon {
        alert_id: target.alert_id,
        event_type: target.event_type,
        entity_id: target.entity_id,
        subject: target.subject,
        payload: target.payload,
    };
    alert_store::insert_inbox_items(conn, target.tenant, &common, &inbox_recipients, &inbox_keys)
        .await?;
    if any_pending {
        delivery_store::notify_outbox(conn, target.tenant).await?;
    }
    Ok(outcomes)
}

fn entity_lock_key(tenant: Uuid, event_type: &str, entity_id: &str) -> i64 {
    stable_lock_key(&[&tenant.to_string(), event_type, entity_id])
}

/// Creates one alert inside the caller's transaction (commit is the caller's).
pub async fn create_alert(
    conn: &mut PgConnection,
    tenant: Uuid,
    alert: &NewAlert,
    thresholds: &FanoutThresholds,
) -> sqlx::Result<AlertCreated> {
    alert_store::lock_alert_entity(
        conn,
        entity_lock_key(tenant, &alert.event_type, &alert.entity_id),
    )
    .await?;
    let alert_id = Uuid::now_v7();
    let channel_names: Vec<String> = alert
        .channels
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    let row = alert_store::NewAlertRow {
        id: alert_id,
        event_type: &alert.event_type,
        entity_id: &alert.entity_id,
        subject: alert.subject.as_deref(),
        payload: &alert.payload,
        channels: &channel_names,
        team_id: match &alert.audience {
            Audience::Team(t) => Some(t.as_str()),
            Audience::Recipients(_) => None,
        },
    };
    let recipients = match &alert.audience {
        Audience::Recipients(r) => r.clone(),
        Audience::Team(team) => {
            let size = alert_store::count_team_members(conn, tenant, team).await?;
            let decision = decide(
                SendKind::TransactionalAlert,
                size.max(0) as u64,
                None,
                thresholds,
            );
            tracing::debug!(%alert_id, team, size, reason = %decision.reason, "team fan-out");
            match decision.strategy {
                Strategy::WriteInline => {
                    alert_store::list_team_members(conn, tenant, team, None, i64::MAX).await?
                }
                // Alerts never store once (each recipient needs its own key and
                // delivery state), so anything but inline goes to the background.
                Strategy::WriteInBatches { .. } | Strategy::StoreOnceReadTime => {
                    alert_store::insert_alert(conn, tenant, &row).await?;
                    alert_store::insert_expansion(conn, tenant, alert_id, team).await?;
                    alert_store::notify_expansion(conn, tenant).await?;
                    return Ok(AlertCreated {
                        alert_id,
                        deliveries: Vec::new(),
                        background_expansion: true,
                    });
                }
            }
        }
    };
    let target = FanoutTarget {
        tenant,
        alert_id,
        event_type: &alert.event_type,
        entity_id: &alert.entity_id,
        subject: alert.subject.as_deref(),
        payload: &alert.payload,
        channels: &alert.channels,
    };
    let deliveries = fan_out(conn, &target, &recipients).await?;
    let all_duplicates = !deliveries.is_empty()
        && deliveries
            .iter()
            .all(|d| d.status == NotificationStatus::Duplicate);
    let original = if all_duplicates {
        let keys: Vec<String> = deliveries.iter().map(|d| d.key.clone()).collect();
        alert_store::find_original_alert_id(conn, tenant, &keys).await?
    } else {
        None
    };
    let alert_id = match original {
        Some(original) => original,
        None => {
            alert_store::insert_alert(conn, tenant, &row).await?;
            alert_id
        }
    };
    Ok(AlertCreated {
        alert_id,
        deliveries,
        background_expansion: false,
    })
}

/// Either a fresh result or the saved response of an earlier identical request.
pub enum Submitted {
    Fresh(AlertCreated),
    Replayed(SavedResponse),
}

/// `POST /v1/alerts`: the alert and (with an Idempotency-Key) the saved response
/// commit in one transaction. `render` turns the result into the response body
/// that a replay will answer with.
pub async fn submit_alert(
    pool: &PgPool,
    config: &AlertsConfig,
    tenant: Uuid,
    idempotency: Option<IdempotencyRequest>,
    alert: &NewAlert,
    render: impl Fn(&AlertCreated) -> Vec<u8>,
) -> ApiResult<Submitted> {
    let lease = match idempotency {
        None => None,
        Some(request) => {
            match idempotency::begin(pool, tenant, request, config.idempotency_lease())
                .await
                .map_err(idempotency_problem)?
            {
                Begin::Replay(saved) => return Ok(Submitted::Replayed(saved)),
                Begin::Proceed(lease) => Some(lease),
            }
        }
    };
    let attempt = async {
        let mut tx = pool.begin().await?;
        let created = create_alert(&mut tx, tenant, alert, &config.thresholds()).await?;
        if let Some(lease) = &lease {
            let response = SavedResponse {
                status: 202,
                body: render(&created),
            };
            lease
                .save(&mut tx, &response)
                .await
                .map_err(idempotency_problem)?;
        }
        tx.commit().await?;
        Ok::<_, ApiError>(created)
    }
    .await;
    match attempt {
        Ok(created) => Ok(Submitted::Fresh(created)),
        Err(err) => {
            if let Some(lease) = lease {
                lease.release(pool).await;
            }
            Err(err)
        }
    }
}

fn idempotency_problem(err: IdempotencyError) -> ApiError {
    match err {
        IdempotencyError::KeyReused(_) => ApiError::unprocessable(
            "idempotency_key_reused",
            format!(
                "this {} was used with a different request",
                idempotency::HEADER
            ),
        ),
        IdempotencyError::InFlight => ApiError::Conflict {
            code: "idempotency_key_in_flight",
            detail: err.to_string(),
            retry_after_secs: Some(idempotency::IN_FLIGHT_RETRY_AFTER_SECS),
        },
        IdempotencyError::Db(db) => db.into(),
    }
}

/// Expands one batch of the oldest open team expansion, in its own transaction
/// that also advances the job's cursor. Returns false when there was no work.
pub async fn expand_next_batch(pool: &PgPool, thresholds: &FanoutThresholds) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let Some(job) = alert_store::claim_expansion(&mut tx).await? else {
        return Ok(false);
    };
    alert_store::lock_alert_entity(
        &mut tx,
        entity_lock_key(job.tenant_id, &job.event_type, &job.entity_id),
    )
    .await?;
    let batch = thresholds.batch_size.max(1) as i64;
    let members = alert_store::list_team_members(
        &mut tx,
        job.tenant_id,
        &job.team_id,
        job.after_user_id.as_deref(),
        batch,
    )
    .await?;
    let channels: Vec<Channel> = job.channels.iter().filter_map(|c| c.parse().ok()).collect();
    let target = FanoutTarget {
        tenant: job.tenant_id,
        alert_id: job.alert_id,
        event_type: &job.event_type,
        entity_id: &job.entity_id,
        subject: job.subject.as_deref(),
        payload: &job.payload,
        channels: &channels,
    };
    fan_out(&mut tx, &target, &members).await?;
    let done = (members.len() as i64) < batch;
    alert_store::advance_expansion(
        &mut tx,
        job.tenant_id,
        job.alert_id,
        members.last().map(String::as_str),
        members.len() as i64,
        done,
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(v: serde_json::Value) -> AlertInput {
        serde_json::from_value(v).expect("well-formed input")
    }

    fn base() -> serde_json::Value {
        json!({"event_type": "invoice.overdue", "entity_id": "inv-1", "recipients": ["a", "b", "a"],
               "channels": ["email", "in_app", "email"], "payload": {"amount": 3}})
    }

    #[test]
    fn recipients_and_channels_are_deduplicated_in_order() {
        let alert = NewAlert::parse(input(base())).expect("valid");
        assert_eq!(
            alert.audience,
            Audience::Recipients(vec!["a".into(), "b".into()])
        );
        assert_eq!(alert.channels, vec![Channel::Email, Channel::InApp]);
    }

    #[test]
    fn exactly_one_audience_is_required() {
        let mut both = base();
        both["team_id"] = json!("t");
        assert!(NewAlert::parse(input(both)).is_err());
        let mut neither = base();
        neither
            .as_object_mut()
            .expect("object")
            .remove("recipients");
        assert!(NewAlert::parse(input(neither)).is_err());
    }

    #[test]
    fn limits_are_enforced() {
        let mut many = base();
        many["recipients"] = json!((0..1001).map(|i| format!("u{i}")).collect::<Vec<_>>());
        assert!(NewAlert::parse(input(many)).is_err());
        let mut exactly = base();
        exactly["recipients"] = json!((0..1000).map(|i| format!("u{i}")).collect::<Vec<_>>());
        assert!(NewAlert::parse(input(exactly)).is_ok());
        let mut big = base();
        big["payload"] = json!({"x": "y".repeat(MAX_PAYLOAD_BYTES)});
        assert!(NewAlert::parse(input(big)).is_err());
        let mut not_object = base();
        not_object["payload"] = json!([1]);
        assert!(NewAlert::parse(input(not_object)).is_err());
        let mut no_channels = base();
        no_channels["channels"] = json!([]);
        assert!(NewAlert::parse(input(no_channels)).is_err());
        let mut bad_channel = base();
        bad_channel["channels"] = json!(["push"]);
        assert!(NewAlert::parse(input(bad_channel)).is_err());
        let mut header_injection = base();
        header_injection["subject"] = json!("hi\r\nBcc: x@y");
        assert!(NewAlert::parse(input(header_injection)).is_err());
    }
}
