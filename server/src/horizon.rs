//! Per-tenant visibility horizons (ARCHITECTURE.md, invariant 11; the
//! statement and its proof: `store::horizon`).
//!
//! Writers: every transaction that writes feed rows begins with
//! [`begin_feed_write`]. Readers: [`Horizons::fresh`] answers horizons read
//! by a statement that began after the call, so a feed read sees every write
//! that committed before the request (read your writes) while concurrent
//! readers share one statement: at most one horizon statement per instance is
//! in flight, whatever the number of requests.

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

pub use crate::store::horizon::FeedHorizons;
use crate::{db::PrimaryPool, store::horizon as store};

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

struct Reading {
    /// When the statement that read it was sent.
    started: Instant,
    horizons: Arc<FeedHorizons>,
}

/// The newest horizons read on this instance, and the turn to read them.
#[derive(Default)]
pub struct Horizons {
    latest: Mutex<Option<Reading>>,
    /// Held while a horizon statement runs: the next caller in line reuses
    /// its answer when it began after that caller asked.
    turn: tokio::sync::Mutex<()>,
}

impl Horizons {
    /// Horizons read by a statement that began after this call.
    pub async fn fresh(&self, pool: &PrimaryPool) -> sqlx::Result<Arc<FeedHorizons>> {
        let asked = Instant::now();
        let _turn = self.turn.lock().await;
        if let Some(horizons) = self.read_since(asked) {
            return Ok(horizons);
        }
        let started = Instant::now();
        let horizons = Arc::new(store::read_feed_horizons(pool).await?);
        self.publish(started, horizons.clone());
        Ok(horizons)
    }

    /// Records horizons read elsewhere (the stream's tick), for `fresh` to reuse.
    pub fn publish(&self, started: Instant, horizons: Arc<FeedHorizons>) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if latest.as_ref().is_none_or(|r| r.started < started) {
            *latest = Some(Reading { started, horizons });
        }
    }

    fn read_since(&self, asked: Instant) -> Option<Arc<FeedHorizons>> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest
            .as_ref()
            .filter(|r| r.started >= asked)
            .map(|r| r.horizons.clone())
    }
}
