//! Background team expansion: a team alert larger than the inline limit is
//! written in batches, each in its own transaction that also advances the
//! job's cursor, so a crash loses at most the batch in flight, which is then
//! redone (the unique key of `notifications` keeps one delivery per key).
//! Any number of processes may run this; jobs are claimed with SKIP LOCKED.
//! Woken by `NotifyChannel::Expansion`, with polling as the fallback when a
//! notification is missed or the listener is down.

use std::time::Duration;

use tidings_core::{Channel, EntityId, EventType, UserId};

use super::submit::{entity_lock_key, fan_out, rows_per_recipient, FanoutLimits, FanoutTarget};
use crate::{
    app::shutdown::Shutdown,
    app::state::AppState,
    db::listen,
    db::PrimaryPool,
    store::{
        alerts as alert_store, horizon as horizon_store, notify::NotifyChannel, teams as team_store,
    },
};

const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How many tenants' feed locks a batch takes before it claims a job: enough
/// that jobs other workers hold do not leave it idle, few enough that it holds
/// back only tenants that are expanding anyway.
const EXPANSION_TENANTS_PER_CLAIM: i64 = 8;

/// Expands one batch of an open expansion — a team's members, or an alert's
/// named recipients too many to write inline — in its own transaction that
/// also advances the job's cursor. Returns false when there was no work.
/// Tenants take turns, one batch each (`store::alerts::list_expansion_tenants`),
/// and a batch writes at most `limits.batch_deliveries` delivery rows.
///
/// A batch writes in-app feed items, so its transaction takes the tenant's
/// feed lock before it has a transaction id (`crate::feed::horizon`); claiming a job
/// locks its row and so takes an id. Hence the tenants whose turn it is
/// are looked up first, without locking, their feed locks taken, and only a
/// job of one of those tenants claimed.
pub async fn expand_next_batch(pool: &PrimaryPool, limits: &FanoutLimits) -> sqlx::Result<bool> {
    let tenants = alert_store::list_expansion_tenants(pool, EXPANSION_TENANTS_PER_CLAIM).await?;
    if tenants.is_empty() {
        return Ok(false);
    }
    let mut tx = pool.begin().await?;
    for &tenant in &tenants {
        horizon_store::lock_feed_writes(&mut *tx, tenant).await?;
    }
    let Some(job) = alert_store::claim_expansion(&mut *tx, &tenants).await? else {
        return Ok(false);
    };
    let invalid = |e: tidings_core::KeyError| sqlx::Error::Decode(Box::new(e));
    let event_type = EventType::parse(job.event_type).map_err(invalid)?;
    let entity_id = EntityId::parse(job.entity_id).map_err(invalid)?;
    alert_store::lock_alert_entity(
        &mut tx,
        entity_lock_key(job.tenant_id, &event_type, &entity_id),
    )
    .await?;
    let channels: Vec<Channel> = job.channels.iter().filter_map(|c| c.parse().ok()).collect();
    let per_recipient = rows_per_recipient(&mut tx, job.tenant_id, &event_type, &channels).await?;
    let batch = limits.batch_recipients(per_recipient) as i64;
    let after = job.after_user_id.as_deref();
    let members: Vec<UserId> = match (&job.team_id, &job.recipients) {
        (Some(team), _) => team_store::list_members(&mut *tx, job.tenant_id, team, after, batch)
            .await?
            .into_iter()
            .map(|m| m.user_id)
            .collect(),
        // Stored sorted: the cursor is the last one written.
        (None, recipients) => recipients
            .iter()
            .flatten()
            .filter(|r| after.is_none_or(|a| r.as_str() > a))
            .take(batch as usize)
            .map(|r| UserId::parse(r.as_str()).map_err(invalid))
            .collect::<Result<_, _>>()?,
    };
    let category =
        super::preferences::category_of_stored_alert(&mut tx, job.tenant_id, job.alert_id).await?;
    let target = FanoutTarget {
        tenant: job.tenant_id,
        alert_id: job.alert_id,
        event_type: &event_type,
        entity_id: &entity_id,
        subject: job.subject.as_deref(),
        payload: &job.payload,
        channels: &channels,
        category: category.as_ref(),
        rules: super::delivery::rules_of_stored_alert(&mut tx, job.tenant_id, job.alert_id).await?,
    };
    fan_out(&mut tx, &target, &members).await?;
    let done = (members.len() as i64) < batch;
    alert_store::advance_expansion(
        &mut *tx,
        job.tenant_id,
        job.alert_id,
        members.last().map(|m| m.as_str()),
        members.len() as i64,
        done,
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// The expansion worker `serve` runs: batches until there is no work, then
/// waits for a notification, the poll interval or shutdown.
pub async fn run(state: AppState, mut shutdown: Shutdown) {
    let limits = FanoutLimits::from_config(&state.settings.alerts);
    let (waker, mut woken) = listen::spawn_waker(
        state.listen_pool.clone(),
        NotifyChannel::Expansion,
        shutdown.clone(),
    );
    while !shutdown.is_requested() {
        // Notifications from now on wake the wait below, even those that
        // arrive while this batch runs.
        woken.borrow_and_update();
        match expand_next_batch(&state.pool, &limits).await {
            Ok(true) => continue,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(error = %err, "team expansion batch failed; will retry");
            }
        }
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
            changed = woken.changed() => {
                // The waker stopped (shutting down): the poll interval remains.
                if changed.is_err() && shutdown.sleep(POLL_INTERVAL).await {
                    break;
                }
            }
        }
    }
    waker.await.ok();
}
