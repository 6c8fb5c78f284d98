//! The retention purge: a background worker (spawned by `workers::spawn_all`)
//! that deletes, every `TIDINGS_RETENTION_INTERVAL_SECS`, what is past its
//! retention — final deliveries (in `deliveries` and `deliveries_sent`) with
//! their notifications and alerts, feed items
//! of tenants that keep their feed for a limited time, the NATS inbox's message
//! ids, and one-by-one reads under the read watermark. (Idempotency keys have
//! their own purge, `idempotency::run_purge`, with the same batching.)
//!
//! Batches, not partitions: each statement deletes at most
//! `TIDINGS_RETENTION_BATCH` rows found through an existing index, and the
//! worker pauses between statements, so it holds an xid (and row locks) only
//! for one batch and the feed horizon never waits on it for long. Batches work
//! on every table as it is; partitions by time would make dropping a day cheap
//! but need every key and index reshaped. The settings and their defaults:
//! [`RetentionConfig`](crate::app::config::RetentionConfig).

use std::{future::Future, time::Instant};

use crate::{
    app::config::RetentionConfig,
    app::instruments,
    app::shutdown::Shutdown,
    app::state::AppState,
    db::PrimaryPool,
    deliveries::status::DeliveryStatus,
    store::retention::{self as store, DeliveryTable, FeedTable},
};

pub async fn run(state: AppState, mut shutdown: Shutdown) {
    let config = state.settings.retention.clone();
    let Some(interval) = config.interval() else {
        tracing::info!("retention purge off in this process (TIDINGS_RETENTION_INTERVAL_SECS=0)");
        return;
    };
    loop {
        if let Err(err) = purge_once(&state.pool, &config, &mut shutdown).await {
            tracing::warn!(error = %err, "retention purge failed; trying again next round");
        }
        if shutdown.sleep(interval).await {
            break;
        }
    }
}

/// One round: every table, batch after batch, until nothing is left to purge
/// or shutdown is requested.
pub async fn purge_once(
    pool: &PrimaryPool,
    config: &RetentionConfig,
    shutdown: &mut Shutdown,
) -> sqlx::Result<()> {
    let batch = config.retention_batch;
    let mut purge = Purge { config, shutdown };
    for tenant in store::list_tenant_ids(pool).await? {
        // Sent deliveries are in two tables: moved by the outbox's
        // completion, or written `sent` (in-app) where they stay.
        for (table, status, keep) in [
            (
                DeliveryTable::Sent,
                DeliveryStatus::Sent,
                config.retention_delivered_secs,
            ),
            (
                DeliveryTable::Deliveries,
                DeliveryStatus::Sent,
                config.retention_delivered_secs,
            ),
            (
                DeliveryTable::Deliveries,
                DeliveryStatus::Skipped,
                config.retention_delivered_secs,
            ),
            (
                DeliveryTable::Deliveries,
                DeliveryStatus::Dead,
                config.retention_dead_secs,
            ),
        ] {
            let done = purge
                .batches(table.name(), || async move {
                    let gone =
                        store::purge_deliveries(pool, table, tenant, status, keep as f64, batch)
                            .await?;
                    instruments::retention_rows("notifications", gone.notifications as u64);
                    instruments::retention_rows("alerts", gone.alerts as u64);
                    Ok(gone.deliveries as u64)
                })
                .await?;
            if !done {
                return Ok(());
            }
        }
        if !crate::deliveries::digests::in_schema() {
            continue;
        }
        for (statuses, keep) in [
            (
                &["sent", "empty", "skipped"][..],
                config.retention_delivered_secs,
            ),
            (&["dead"][..], config.retention_dead_secs),
        ] {
            let done = purge
                .batches("digests", || {
                    store::purge_digests(pool, tenant, statuses, keep as f64, batch)
                })
                .await?;
            if !done {
                return Ok(());
            }
        }
    }
    let default_feed = config.retention_feed_secs.map(|s| s as f64);
    for (tenant, keep) in store::list_feed_retention(pool, default_feed).await? {
        for table in [FeedTable::Events, FeedTable::InboxItems] {
            let done = purge
                .batches(table.name(), || {
                    store::purge_feed_items(pool, table, tenant, keep, batch)
                })
                .await?;
            if !done {
                return Ok(());
            }
        }
    }
    let keep = config.retention_inbox_messages_secs as f64;
    if !purge
        .batches("inbox_messages", || {
            store::purge_inbox_messages(pool, keep, batch)
        })
        .await?
    {
        return Ok(());
    }
    purge
        .batches("item_reads", || store::purge_item_reads(pool, batch))
        .await?;
    Ok(())
}

struct Purge<'a> {
    config: &'a RetentionConfig,
    shutdown: &'a mut Shutdown,
}

impl Purge<'_> {
    /// Runs `batch` until it deletes less than a full batch, pausing between
    /// batches. False when shutdown interrupted it.
    async fn batches<F, Fut>(&mut self, table: &'static str, mut batch: F) -> sqlx::Result<bool>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = sqlx::Result<u64>>,
    {
        loop {
            let started = Instant::now();
            let deleted = batch().await?;
            instruments::retention_batch(table, deleted, started);
            if deleted < self.config.retention_batch as u64 {
                return Ok(true);
            }
            if self.shutdown.sleep(self.config.pause()).await {
                return Ok(false);
            }
        }
    }
}
