//! Background team expansion: a team alert larger than the inline limit is
//! written in batches, each in its own transaction that also advances the
//! job's cursor, so a crash loses at most the batch in flight, which is then
//! redone (the unique key of `notifications` keeps one delivery per key).
//! Any number of processes may run this; jobs are claimed with SKIP LOCKED.
//! Woken by `NotifyChannel::Expansion`, with polling as the fallback when a
//! notification is missed or the listener is down.

use std::time::Duration;

use sqlx::PgPool;
use tidings_core::{Channel, EntityId, EventType, FanoutThresholds, UserId};

use super::submit::{entity_lock_key, fan_out, FanoutTarget};
use crate::{
    listen,
    shutdown::Shutdown,
    state::AppState,
    store::{alerts as alert_store, notify::NotifyChannel, teams as team_store},
};

const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Expands one batch of the oldest open team expansion, in its own transaction
/// that also advances the job's cursor. Returns false when there was no work.
pub async fn expand_next_batch(pool: &PgPool, thresholds: &FanoutThresholds) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let Some(job) = alert_store::claim_expansion(&mut *tx).await? else {
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
    let batch = thresholds.batch_size.max(1) as i64;
    let members: Vec<UserId> = team_store::list_members(
        &mut *tx,
        job.tenant_id,
        &job.team_id,
        job.after_user_id.as_deref(),
        batch,
    )
    .await?
    .into_iter()
    .map(|m| m.user_id)
    .collect();
    let channels: Vec<Channel> = job.channels.iter().filter_map(|c| c.parse().ok()).collect();
    let target = FanoutTarget {
        tenant: job.tenant_id,
        alert_id: job.alert_id,
        event_type: &event_type,
        entity_id: &entity_id,
        subject: job.subject.as_deref(),
        payload: &job.payload,
        channels: &channels,
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
    let thresholds = state.settings.alerts.thresholds();
    let (waker, mut woken) = listen::spawn_waker(
        state.listen_pool.clone(),
        NotifyChannel::Expansion,
        shutdown.clone(),
    );
    while !shutdown.is_requested() {
        // Notifications from now on wake the wait below, even those that
        // arrive while this batch runs.
        woken.borrow_and_update();
        match expand_next_batch(&state.pool, &thresholds).await {
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
