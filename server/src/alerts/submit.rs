//! Submitting an alert: one transaction per alert (ARCHITECTURE.md,
//! invariants 4, 6, 7), from either front door.
//!
//! [`create_alert`] is shared by `POST /v1/alerts` ([`submit`]) and the NATS
//! inbox ([`submit_from_inbox`]), so both produce exactly the same rows for
//! the same request. A full replay (every key already notified) writes
//! nothing and answers with the alert that first created those keys; a
//! partial replay creates a new alert holding only the new keys.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use sqlx::{PgConnection, Postgres, Transaction};
use tidings_core::{
    decide, stable_lock_key, Channel, EntityId, EventType, FanoutThresholds, Position, SendKind,
    Strategy, TeamId, UserId,
};
use uuid::Uuid;

use crate::deliveries::status::DeliveryStatus;

use super::{
    delivery::{self, DeliveryRules},
    plan::{self, DigestSource, NotificationStatus},
    preferences::{self, PreferencesError},
    request::{AlertRequest, Audience},
};
use crate::{
    alerts::idempotency::{
        self, Begin, IdempotencyError, IdempotencyRequest, Lease, SavedResponse,
    },
    app::config::AlertsConfig,
    db::PrimaryPool,
    feed::horizon,
    store::{
        self, alerts as alert_store, deliveries as delivery_store,
        inbox::{self, InboxOutcome},
        teams as team_store, tenants as tenant_store,
    },
    stream::Hub,
};

#[derive(Debug, Clone)]
pub struct NotificationOutcome {
    pub recipient_id: UserId,
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

impl AlertCreated {
    /// Every notification existed already: nothing was written.
    pub fn is_full_replay(&self) -> bool {
        !self.deliveries.is_empty()
            && self
                .deliveries
                .iter()
                .all(|d| d.status == NotificationStatus::Duplicate)
    }
}

/// What one fan-out writes about: the alert's shared fields.
pub(super) struct FanoutTarget<'a> {
    pub tenant: Uuid,
    pub alert_id: Uuid,
    pub event_type: &'a EventType,
    pub entity_id: &'a EntityId,
    pub subject: Option<&'a str>,
    pub payload: &'a serde_json::Value,
    pub channels: &'a [Channel],
    /// The category the alert is sent under: its preferences apply.
    pub category: Option<&'a tidings_core::Category>,
    /// The delivery rules the alert was accepted with (`alerts::delivery`).
    pub rules: DeliveryRules,
}

/// Writes notifications for `recipients` × channels and, for the new ones
/// only, what [`plan::plan_fanout`] decides. Every insert is one statement
/// over arrays, in key order.
pub(super) async fn fan_out(
    conn: &mut PgConnection,
    target: &FanoutTarget<'_>,
    recipients: &[UserId],
) -> sqlx::Result<Vec<NotificationOutcome>> {
    // Ids were parsed on entry, so deriving cannot fail here; a failure would
    // be a bug, reported as an internal error.
    let notifications = plan::notifications(
        target.tenant,
        target.event_type,
        target.entity_id,
        recipients,
        target.channels,
    )
    .map_err(|e| sqlx::Error::Protocol(format!("notification key: {e}")))?;
    let outcomes = |statuses: &[NotificationStatus]| {
        notifications
            .iter()
            .zip(statuses)
            .map(|(n, &status)| NotificationOutcome {
                recipient_id: n.recipient_id.clone(),
                channel: n.channel,
                key: n.key.clone(),
                readable_key: n.readable_key.clone(),
                status,
            })
            .collect::<Vec<_>>()
    };
    if notifications.is_empty() {
        return Ok(Vec::new());
    }
    let mut columns = alert_store::NotificationColumns::default();
    for i in plan::key_order(&notifications) {
        let n = &notifications[i];
        columns.keys.push(n.key.clone());
        columns.readable_keys.push(n.readable_key.clone());
        columns.recipients.push(n.recipient_id.to_string());
        columns.channels.push(n.channel.as_str());
    }
    let new_keys: HashSet<String> = alert_store::insert_notifications(
        &mut *conn,
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
        return Ok(outcomes(&vec![
            NotificationStatus::Duplicate;
            notifications.len()
        ]));
    }

    let wanted = plan::new_recipients_on(&notifications, &new_keys, Channel::Email);
    let with_email: HashSet<UserId> = if wanted.is_empty() {
        HashSet::new()
    } else {
        store::users::list_users_with_email(&mut *conn, target.tenant, &wanted)
            .await?
            .into_iter()
            .collect()
    };
    let endpoints =
        if plan::new_recipients_on(&notifications, &new_keys, Channel::Webhook).is_empty() {
            Vec::new()
        } else {
            store::webhook_endpoints::list_subscribed_endpoint_ids(
                &mut *conn,
                target.tenant,
                target.event_type,
            )
            .await?
        };

    let mut new_recipients: Vec<UserId> = notifications
        .iter()
        .filter(|n| new_keys.contains(&n.key))
        .map(|n| n.recipient_id.clone())
        .collect();
    new_recipients.dedup();
    let settings = preferences::settings_for_fanout(
        &mut *conn,
        target.tenant,
        target.event_type,
        target.category,
        &new_recipients,
        target.channels,
    )
    .await?;
    let plan = plan::plan_fanout(
        &notifications,
        &new_keys,
        &with_email,
        &endpoints,
        &settings,
        &target.rules,
    );
    let mut deliveries = delivery_store::DeliveryColumns::default();
    for d in &plan.deliveries {
        deliveries.push(
            &d.key,
            &d.recipient_id,
            d.channel,
            d.endpoint_id,
            d.status,
            d.reason,
        );
    }
    // The email template published now is the one these emails are
    // rendered with, whatever is published when they are sent.
    let email_template = if plan
        .deliveries
        .iter()
        .any(|d| d.channel == Channel::Email && d.status == DeliveryStatus::Pending)
    {
        crate::alerts::templates::published_version_id(
            &mut *conn,
            target.tenant,
            target.event_type,
            Channel::Email,
        )
        .await?
    } else {
        None
    };
    let (inbox_recipients, inbox_keys): (Vec<String>, Vec<String>) = plan
        .inbox_items
        .iter()
        .map(|(r, k)| (r.to_string(), k.clone()))
        .unzip();
    let common = alert_store::InboxItemCommon {
        alert_id: target.alert_id,
        event_type: target.event_type,
        entity_id: target.entity_id,
        subject: target.subject,
        payload: target.payload,
    };
    let digested = plan.deliveries.iter().any(|d| d.digest.is_some());
    // Recipients whose collected email was queued after all (the first item
    // of a `send_first` digest).
    let mut released: Vec<String> = Vec::new();
    if digested || plan.deliveries.iter().any(|d| d.wait.is_some()) {
        // Delayed and digested deliveries follow the in-app item's position,
        // so the items are written first.
        let positions: HashMap<String, (i64, i64)> =
            alert_store::insert_inbox_items_returning_positions(
                &mut *conn,
                target.tenant,
                &common,
                &inbox_recipients,
                &inbox_keys,
            )
            .await?
            .into_iter()
            .map(|(recipient, tx, id)| (recipient, (tx, id)))
            .collect();
        let mut waits = delivery_store::WaitColumns::default();
        for d in &plan.deliveries {
            let item = d
                .wait
                .and_then(|_| positions.get(d.recipient_id.as_str()).copied());
            waits.delay_secs.push(
                d.wait
                    .map(|w| i32::try_from(w.delay_secs).unwrap_or(i32::MAX)),
            );
            waits.unless.push(d.wait.map(|w| w.unless.as_str()));
            waits.item_tx.push(item.map(|(tx, _)| tx));
            waits.item_id.push(item.map(|(_, id)| id));
        }
        delivery_store::insert_waiting_deliveries(
            &mut *conn,
            target.tenant,
            target.alert_id,
            &deliveries,
            &waits,
            email_template,
        )
        .await?;
        if digested {
            let items: Vec<(String, Position, DigestSource)> = plan
                .deliveries
                .iter()
                .filter_map(|d| {
                    let source = d.digest?;
                    let (tx, id) = positions.get(d.recipient_id.as_str()).copied()?;
                    Some((d.recipient_id.to_string(), Position::new(tx, id), source))
                })
                .collect();
            let collect = crate::deliveries::digests::Collect {
                tenant: target.tenant,
                alert_id: target.alert_id,
                event_type: target.event_type,
                payload: target.payload,
                rule: target.rules.email_digest.as_ref(),
                category: target.category.map(|c| c.key.as_str()),
            };
            released = crate::deliveries::digests::append(&mut *conn, &collect, items).await?;
        }
    } else {
        match email_template {
            None => {
                delivery_store::insert_deliveries(
                    &mut *conn,
                    target.tenant,
                    target.alert_id,
                    &deliveries,
                )
                .await?
            }
            Some(version) => {
                delivery_store::insert_deliveries_with_email_template(
                    &mut *conn,
                    target.tenant,
                    target.alert_id,
                    &deliveries,
                    version,
                )
                .await?
            }
        };
        alert_store::insert_inbox_items(
            &mut *conn,
            target.tenant,
            &common,
            &inbox_recipients,
            &inbox_keys,
        )
        .await?;
    }
    let wake_outbox = plan.wake_outbox || !released.is_empty();
    if wake_outbox && !target.category.is_some_and(|c| c.critical) {
        let mut queued: Vec<&str> = plan
            .deliveries
            .iter()
            .filter(|d| d.status == DeliveryStatus::Pending && d.channel != Channel::InApp)
            .map(|d| d.recipient_id.as_str())
            .chain(released.iter().map(String::as_str))
            .collect();
        queued.sort_unstable();
        queued.dedup();
        crate::alerts::quiet_hours::hold_new_deliveries(
            &mut *conn,
            target.tenant,
            target.alert_id,
            &queued,
        )
        .await?;
    }
    if wake_outbox {
        delivery_store::notify_outbox(&mut *conn, target.tenant).await?;
    }
    Ok(outcomes(&plan.statuses))
}

/// The advisory lock of one (tenant, event type, entity): ARCHITECTURE.md,
/// invariant 7. Public so that a test holding it from outside uses the
/// server's own key.
pub fn entity_lock_key(tenant: Uuid, event_type: &EventType, entity_id: &EntityId) -> i64 {
    stable_lock_key(&[&tenant.to_string(), event_type, entity_id])
}

/// How large an alert may be, and how much of it one transaction writes
/// (`AlertsConfig`; ARCHITECTURE.md, "Bounded work per request").
#[derive(Debug, Clone, Copy)]
pub struct FanoutLimits {
    /// Largest team written inline, and members per background batch.
    pub thresholds: FanoutThresholds,
    /// Most delivery rows one transaction writes: inline, or one batch.
    pub batch_deliveries: u64,
    /// Most delivery rows one alert writes.
    pub max_deliveries: u64,
}

impl FanoutLimits {
    pub fn from_config(config: &AlertsConfig) -> Self {
        FanoutLimits {
            thresholds: config.thresholds(),
            batch_deliveries: config.alert_batch_deliveries.max(1),
            max_deliveries: config.alert_max_deliveries,
        }
    }

    /// Recipients one background batch takes: the configured batch, fewer
    /// when each recipient writes several rows, at least one.
    pub(super) fn batch_recipients(&self, rows_per_recipient: u64) -> u64 {
        (self.batch_deliveries / rows_per_recipient.max(1))
            .clamp(1, self.thresholds.batch_size.max(1))
    }
}

/// The most delivery rows one recipient of this alert can get: one per
/// channel, and on the webhook channel one per subscribed endpoint (a
/// skipped row when there is none). An upper bound of what the plan writes:
/// duplicates write nothing.
pub(super) async fn rows_per_recipient(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &EventType,
    channels: &[Channel],
) -> sqlx::Result<u64> {
    let mut rows = 0;
    for channel in channels {
        rows += match channel {
            Channel::Webhook => store::webhook_endpoints::list_subscribed_endpoint_ids(
                &mut *conn, tenant, event_type,
            )
            .await?
            .len()
            .max(1) as u64,
            _ => 1,
        };
    }
    Ok(rows)
}

/// The messages of the two refusals, shared by [`CreateError`] and
/// [`SubmitError`].
const ENTITY_BUSY: &str =
    "another alert of this event type and entity is being written; retry shortly";

fn too_large(rows: u64, max: u64) -> String {
    format!(
        "this alert would write up to {rows} deliveries, more than the {max} \
         TIDINGS_ALERT_MAX_DELIVERIES allows (recipients or team members × channels, \
         one per webhook endpoint)"
    )
}

/// Why an alert was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Another alert of the same (event type, entity) held the entity's lock
    /// for longer than `lock_timeout`. The transaction is aborted: nothing
    /// was written.
    #[error("{ENTITY_BUSY}")]
    EntityBusy(#[source] sqlx::Error),
    /// The alert would write more delivery rows than one alert may; nothing
    /// was written.
    #[error("{}", too_large(*rows, *max))]
    TooLarge { rows: u64, max: u64 },
    /// The alert names a category the tenant does not have; nothing was
    /// written.
    #[error("{0}")]
    UnknownCategory(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl From<PreferencesError> for CreateError {
    fn from(err: PreferencesError) -> Self {
        match err {
            PreferencesError::Db(db) => CreateError::Db(db),
            other => CreateError::UnknownCategory(other.to_string()),
        }
    }
}

/// Creates one alert inside the caller's transaction (commit is the caller's),
/// which began with `horizon::begin_feed_write` for the tenant: it may write
/// in-app feed items. The wait for the entity's lock is bounded (the
/// session's `lock_timeout`), so a hot entity costs a waiting request its
/// connection for that long at most.
pub(super) async fn create_alert(
    conn: &mut PgConnection,
    tenant: Uuid,
    alert: &AlertRequest,
    limits: &FanoutLimits,
) -> Result<AlertCreated, CreateError> {
    alert_store::lock_alert_entity(
        &mut *conn,
        entity_lock_key(tenant, &alert.event_type, &alert.entity_id),
    )
    .await
    .map_err(|err| {
        if store::is_lock_timeout(&err) {
            CreateError::EntityBusy(err)
        } else {
            CreateError::Db(err)
        }
    })?;
    let category = preferences::category_for_alert(
        &mut *conn,
        tenant,
        alert.category.as_deref(),
        &alert.event_type,
    )
    .await?;
    let rules = delivery::rules_for_alert(
        &mut *conn,
        tenant,
        &alert.event_type,
        alert.delivery.clone(),
        &alert.channels,
        category.as_ref(),
    )
    .await?;
    let stored_rules = (!rules.is_empty()).then(|| rules.to_json());
    let alert_id = Uuid::now_v7();
    let channel_names: Vec<&str> = alert.channels.iter().map(|c| c.as_str()).collect();
    let row = alert_store::NewAlertRow {
        id: alert_id,
        event_type: &alert.event_type,
        entity_id: &alert.entity_id,
        subject: alert.subject.as_deref(),
        payload: alert.payload.as_json(),
        channels: &channel_names,
        team_id: alert.team().map(TeamId::as_str),
        category: category.as_ref().map(|c| c.key.as_str()),
        delivery: stored_rules.as_ref(),
    };
    // Sized before anything is written: an alert past the cap stores nothing,
    // and one past the inline bound is handed to the background batches.
    let per_recipient =
        rows_per_recipient(&mut *conn, tenant, &alert.event_type, &alert.channels).await?;
    let (audience, inline) = match &alert.audience {
        Audience::Recipients(r) => (r.len() as u64, true),
        Audience::Team(team) => {
            let size = team_store::count_members(&mut *conn, tenant, team).await?;
            let decision = decide(
                SendKind::TransactionalAlert,
                size.max(0) as u64,
                None,
                &limits.thresholds,
            );
            tracing::debug!(%alert_id, %team, size, reason = %decision.reason, "team fan-out");
            // Alerts never store once (each recipient needs its own key and
            // delivery state), so anything but inline goes to the background.
            let inline = matches!(decision.strategy, Strategy::WriteInline);
            (size.max(0) as u64, inline)
        }
    };
    let rows = audience.saturating_mul(per_recipient);
    if rows > limits.max_deliveries {
        return Err(CreateError::TooLarge {
            rows,
            max: limits.max_deliveries,
        });
    }
    if !inline || rows > limits.batch_deliveries {
        let recipients = match &alert.audience {
            Audience::Recipients(r) => {
                let mut sorted: Vec<String> = r.iter().map(|u| u.to_string()).collect();
                sorted.sort();
                Some(sorted)
            }
            Audience::Team(_) => None,
        };
        tracing::debug!(%alert_id, rows, "fan-out in background batches");
        alert_store::insert_alert(&mut *conn, tenant, &row).await?;
        alert_store::insert_expansion(
            &mut *conn,
            tenant,
            alert_id,
            alert.team().map(TeamId::as_str),
            recipients.as_deref(),
        )
        .await?;
        alert_store::notify_expansion(&mut *conn, tenant).await?;
        return Ok(AlertCreated {
            alert_id,
            deliveries: Vec::new(),
            background_expansion: true,
        });
    }
    let recipients = match &alert.audience {
        Audience::Recipients(r) => r.clone(),
        Audience::Team(team) => team_store::list_members(&mut *conn, tenant, team, None, i64::MAX)
            .await?
            .into_iter()
            .map(|m| m.user_id)
            .collect(),
    };
    let target = FanoutTarget {
        tenant,
        alert_id,
        event_type: &alert.event_type,
        entity_id: &alert.entity_id,
        subject: alert.subject.as_deref(),
        payload: alert.payload.as_json(),
        channels: &alert.channels,
        category: category.as_ref(),
        rules,
    };
    let mut created = AlertCreated {
        alert_id,
        deliveries: fan_out(conn, &target, &recipients).await?,
        background_expansion: false,
    };
    let original = if created.is_full_replay() {
        let (recipients, channels): (Vec<String>, Vec<&str>) = created
            .deliveries
            .iter()
            .map(|d| (d.recipient_id.to_string(), d.channel.as_str()))
            .unzip();
        alert_store::find_original_alert_id(
            &mut *conn,
            tenant,
            &alert.event_type,
            &alert.entity_id,
            &recipients,
            &channels,
        )
        .await?
    } else {
        None
    };
    match original {
        Some(original) => created.alert_id = original,
        None => alert_store::insert_alert(&mut *conn, tenant, &row).await?,
    }
    Ok(created)
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Idempotency(#[from] IdempotencyError),
    /// See [`CreateError::EntityBusy`]; the Idempotency-Key's lease was released.
    #[error("{ENTITY_BUSY}")]
    EntityBusy,
    /// See [`CreateError::TooLarge`]; the Idempotency-Key's lease was released.
    #[error("{}", too_large(*rows, *max))]
    TooLarge { rows: u64, max: u64 },
    /// See [`CreateError::UnknownCategory`]; the Idempotency-Key's lease was
    /// released.
    #[error("{0}")]
    UnknownCategory(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl From<CreateError> for SubmitError {
    fn from(err: CreateError) -> Self {
        match err {
            CreateError::EntityBusy(_) => SubmitError::EntityBusy,
            CreateError::TooLarge { rows, max } => SubmitError::TooLarge { rows, max },
            CreateError::UnknownCategory(detail) => SubmitError::UnknownCategory(detail),
            CreateError::Db(db) => SubmitError::Db(db),
        }
    }
}

/// Either the result of this request, not yet committed, or the saved
/// response of an earlier identical request.
pub enum Submitted {
    Fresh(Box<PendingAlert>),
    Replayed(SavedResponse),
}

/// An alert written in a transaction that is still open. The caller renders
/// its response from [`created`](Self::created) and hands it to
/// [`commit`](Self::commit), which stores it with the alert when the request
/// has an Idempotency-Key: the service stores what it is given and knows
/// nothing of HTTP. Dropped without `commit`, everything rolls back and the
/// key's lease expires.
pub struct PendingAlert {
    pool: PrimaryPool,
    /// Woken once the alert commits, so its in-app items reach this
    /// instance's streams without waiting for the tick.
    stream: Arc<Hub>,
    tenant: Uuid,
    tx: Transaction<'static, Postgres>,
    lease: Option<Lease>,
    created: AlertCreated,
}

impl PendingAlert {
    pub fn created(&self) -> &AlertCreated {
        &self.created
    }

    pub async fn commit(self, response: SavedResponse) -> Result<AlertCreated, SubmitError> {
        let PendingAlert {
            pool,
            stream,
            tenant,
            mut tx,
            lease,
            created,
        } = self;
        let committed = async {
            if let Some(lease) = &lease {
                lease.save(&mut tx, &response).await?;
            }
            tx.commit().await?;
            Ok::<_, SubmitError>(())
        }
        .await;
        if let Err(err) = committed {
            if let Some(lease) = lease {
                lease.release(&pool).await;
            }
            return Err(err);
        }
        stream.wake_for(tenant);
        Ok(created)
    }
}

/// `POST /v1/alerts`: with an Idempotency-Key, an identical earlier request's
/// saved response is returned instead; otherwise the alert is written in a
/// transaction the caller commits (see [`PendingAlert`]), so the alert and the
/// saved response commit together (`crate::alerts::idempotency`).
pub async fn submit(
    pool: &PrimaryPool,
    stream: &Arc<Hub>,
    config: &AlertsConfig,
    tenant: Uuid,
    idempotency: Option<IdempotencyRequest>,
    alert: &AlertRequest,
) -> Result<Submitted, SubmitError> {
    let lease = match idempotency {
        None => None,
        Some(request) => {
            match idempotency::begin(pool, tenant, request, config.idempotency_lease()).await? {
                Begin::Replay(saved) => return Ok(Submitted::Replayed(saved)),
                Begin::Proceed(lease) => Some(lease),
            }
        }
    };
    let attempt = async {
        let mut tx = horizon::begin_feed_write(pool, tenant).await?;
        let limits = FanoutLimits::from_config(config);
        let created = create_alert(&mut tx, tenant, alert, &limits).await?;
        Ok::<_, CreateError>((tx, created))
    }
    .await;
    match attempt {
        Ok((tx, created)) => Ok(Submitted::Fresh(Box::new(PendingAlert {
            pool: pool.clone(),
            stream: stream.clone(),
            tenant,
            tx,
            lease,
            created,
        }))),
        Err(err) => {
            if let Some(lease) = lease {
                lease.release(pool).await;
            }
            Err(err.into())
        }
    }
}

/// What the inbox made of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    Created,
    AlreadySeen,
    Rejected,
}

/// The NATS inbox (ARCHITECTURE.md, invariant 8): ONE transaction records the
/// (tenant, message id) and creates the alert; a message id the tenant sent
/// before changes nothing. A message for a tenant that does not exist is
/// rejected (logged only: there is no tenant to record it under).
pub async fn submit_from_inbox(
    pool: &PrimaryPool,
    limits: &FanoutLimits,
    message_id: &str,
    tenant: Uuid,
    alert: &AlertRequest,
) -> sqlx::Result<Handled> {
    if !tenant_store::tenant_exists(pool, tenant).await? {
        tracing::warn!(%message_id, %tenant, "rejecting a message for an unknown tenant");
        return Ok(Handled::Rejected);
    }
    let mut tx = horizon::begin_feed_write(pool, tenant).await?;
    if !inbox::insert_message(&mut *tx, tenant, message_id, InboxOutcome::Created, None).await? {
        return Ok(Handled::AlreadySeen);
    }
    // A busy entity is an error like any other here: the message is
    // redelivered and tries again. One too large never fits: it is recorded
    // as rejected, as an invalid message is.
    let created = match create_alert(&mut tx, tenant, alert, limits).await {
        Ok(created) => created,
        Err(refused @ (CreateError::TooLarge { .. } | CreateError::UnknownCategory(_))) => {
            drop(tx);
            return reject_inbox_message(pool, tenant, message_id, &refused.to_string()).await;
        }
        Err(CreateError::EntityBusy(db) | CreateError::Db(db)) => return Err(db),
    };
    let outcome = if created.is_full_replay() {
        InboxOutcome::Duplicate
    } else {
        InboxOutcome::Created
    };
    inbox::set_message_alert(&mut *tx, tenant, message_id, created.alert_id, outcome).await?;
    tx.commit().await?;
    tracing::info!(%message_id, alert_id = %created.alert_id, outcome = outcome.as_str(), "inbox message processed");
    Ok(Handled::Created)
}

/// Records a message that can never become an alert (not JSON, invalid), so
/// an operator can find it. A tenant that does not exist (the row's foreign
/// key) is only logged.
pub async fn reject_inbox_message(
    pool: &PrimaryPool,
    tenant: Uuid,
    message_id: &str,
    reason: &str,
) -> sqlx::Result<Handled> {
    tracing::warn!(%message_id, %tenant, reason, "rejecting poison message");
    if tenant_store::tenant_exists(pool, tenant).await? {
        inbox::insert_message(
            pool,
            tenant,
            message_id,
            InboxOutcome::Rejected,
            Some(reason),
        )
        .await?;
    }
    Ok(Handled::Rejected)
}
