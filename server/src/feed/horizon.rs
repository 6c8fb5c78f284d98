//! Per-tenant visibility horizons (ARCHITECTURE.md, invariant 11; the
//! statement and its proof: `store::horizon`).
//!
//! Writers: every transaction that writes feed rows begins with
//! [`begin_feed_write`]. Readers: [`Horizons::fresh`] answers horizons read
//! by a statement that began after the call, so a feed read sees every write
//! that committed before the request (read your writes) while concurrent
//! readers share one statement: at most one horizon statement per instance is
//! in flight, whatever the number of requests. With standbys a reading also
//! carries the primary's WAL position after it: what a standby needs to have
//! replayed to serve below it (`db::replicas`).

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

pub use crate::db::replicas::HorizonReading;
pub use crate::store::horizon::FeedHorizons;
use crate::{
    db::{replicas::Replicas, PrimaryPool},
    store::horizon as store,
};

/// Begins a transaction that may write the tenant's feed rows: its first
/// statement takes the tenant's shared feed lock, before the transaction has
/// an id (the protocol of `store::horizon`).
pub async fn begin_feed_write(
    pool: &PrimaryPool,
    tenant: Uuid,
) -> sqlx::Result<Transaction<'static, Postgres>> {
    let mut tx = pool.begin().await?;
    store::lock_feed_writes(&mut *tx, tenant).await?;
    Ok(tx)
}

/// The newest horizons read on this instance, and the turn to read them.
#[derive(Default)]
pub struct Horizons {
    latest: Mutex<Option<Arc<HorizonReading>>>,
    /// Held while a horizon statement runs: the next caller in line reuses
    /// its answer when it began after that caller asked.
    turn: tokio::sync::Mutex<()>,
}

impl Horizons {
    /// Horizons read by a statement that began after this call; with
    /// standbys, stamped with the primary's WAL position after it, so that a
    /// standby that has replayed it may serve with it (`db::replicas`).
    pub async fn fresh(&self, replicas: &Replicas) -> sqlx::Result<Arc<HorizonReading>> {
        let asked = Instant::now();
        let stamped = replicas.has_standbys();
        let _turn = self.turn.lock().await;
        if let Some(reading) = self.read_since(asked, stamped) {
            return Ok(reading);
        }
        let reading = replicas.read_horizons().await?;
        self.keep(reading.clone());
        Ok(reading)
    }

    /// Records horizons read elsewhere (the stream's tick, on the primary,
    /// unstamped), for `fresh` to reuse.
    pub fn publish(&self, started: Instant, horizons: Arc<FeedHorizons>) {
        self.keep(Arc::new(HorizonReading {
            started,
            horizons,
            wal: None,
        }));
    }

    fn keep(&self, reading: Arc<HorizonReading>) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if latest.as_ref().is_none_or(|r| r.started < reading.started) {
            *latest = Some(reading);
        }
    }

    fn read_since(&self, asked: Instant, stamped: bool) -> Option<Arc<HorizonReading>> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest
            .as_ref()
            .filter(|r| r.started >= asked && (!stamped || r.wal.is_some()))
            .cloned()
    }
}
