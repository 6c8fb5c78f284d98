//! Each tenant's visibility horizon (ARCHITECTURE.md, invariant 11): the
//! position below which that tenant's feed is final.
//!
//! **The protocol.** Every transaction that writes feed rows (`events`,
//! `inbox_items`) takes the tenant's feed lock, a *shared* transaction-level
//! advisory lock, as its first statement, before it has a transaction id
//! ([`lock_feed_writes`]). Shared locks never wait for one another, so writers
//! do not serialise; the lock only makes them visible in `pg_locks`.
//!
//! **The horizon.** [`read_feed_horizons`] reads, in one statement, its own
//! snapshot's xmax `X` and, from one `pg_locks` read, every holder of a feed
//! lock with its transaction id. A tenant's horizon is the smallest id of its
//! lock holders, or `X` when it has none (or when all of them are newer).
//! Readers serve rows with `tx` below a horizon computed by a statement that
//! *ended before their own statement began*. Why that is enough (the proof
//! ARCHITECTURE.md keeps): a writer W of the tenant with id `w` below the
//! horizon got `w` before that statement's snapshot (`w < X`, and xmax is one
//! past the newest *completed* id, which was assigned after `w`), so W held
//! the lock from before its id until it ended. Had W still been running when
//! `pg_locks` was read, the horizon would be at most `w`; so it had ended, and
//! every later snapshot sees its rows or none of them.
//!
//! One gap is closed conservatively: PostgreSQL records a transaction's id in
//! its process slot a moment before it takes the lock on that id, so a holder
//! can show no id in `pg_locks` although it has one. For a tenant with such a
//! holder the horizon is also bounded by the smallest id that was running at
//! the snapshot (`pg_snapshot_xip`) and has no lock any more: every id such a
//! holder could have below `X` is in that set. Holders that truly have no id
//! yet get one at or above `X` and need no bound.

use std::collections::HashMap;

use sqlx::PgExecutor;
use tidings_core::stable_lock_key;
use uuid::Uuid;

/// The advisory lock key of a tenant's feed writes (shared by every writer).
pub fn feed_write_lock_key(tenant: Uuid) -> i64 {
    stable_lock_key(&["feed-writes", &tenant.to_string()])
}

/// Takes the tenant's feed lock, shared, until the caller's transaction ends.
/// Must be the transaction's first statement (see the module's protocol).
pub async fn lock_feed_writes(db: impl PgExecutor<'_>, tenant: Uuid) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
        .bind(feed_write_lock_key(tenant))
        .execute(db)
        .await?;
    Ok(())
}

/// Every tenant's horizon at one moment: `xmax` for all, lower for tenants
/// with feed writes in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedHorizons {
    /// One past the newest transaction id completed at the snapshot.
    pub xmax: i64,
    /// Lock key → the lowest id its holders may write under.
    held: HashMap<i64, i64>,
}

impl FeedHorizons {
    /// Every tenant at `xmax`: no feed write in flight (for tests).
    #[cfg(test)]
    pub fn at(xmax: i64) -> Self {
        FeedHorizons {
            xmax,
            held: HashMap::new(),
        }
    }

    /// The tenant's horizon: rows with `tx` below it are final.
    pub fn of(&self, tenant: Uuid) -> i64 {
        self.of_key(feed_write_lock_key(tenant))
    }

    /// The horizon of the tenant whose feed lock key is `key`.
    pub fn of_key(&self, key: i64) -> i64 {
        self.held
            .get(&key)
            .map_or(self.xmax, |&bound| bound.min(self.xmax))
    }
}

/// Lock rows carry 32-bit transaction ids; positions are 64-bit (`xid8`).
/// Every running id lies within 2^31 of the snapshot's xmax, so it widens to
/// the one 64-bit id in that window.
const HORIZONS_SQL: &str = "
WITH snap AS MATERIALIZED (
    SELECT s, pg_snapshot_xmax(s)::text::bigint AS xmax FROM pg_current_snapshot() AS s
),
locks AS MATERIALIZED (
    SELECT locktype, database, classid, objid, objsubid, transactionid, virtualtransaction, mode, granted
    FROM pg_locks
    WHERE locktype IN ('advisory', 'transactionid')
),
running AS MATERIALIZED (
    SELECT l.virtualtransaction AS vxid,
           CASE WHEN w.x > snap.xmax + 2147483648 THEN w.x - 4294967296
                WHEN w.x < snap.xmax - 2147483648 THEN w.x + 4294967296
                ELSE w.x END AS xid
    FROM locks l CROSS JOIN snap
    CROSS JOIN LATERAL (
        SELECT snap.xmax - snap.xmax % 4294967296 + l.transactionid::text::bigint AS x
    ) w
    WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
),
holders AS (
    SELECT (l.classid::bigint << 32) | l.objid::bigint AS lock_key,
           (SELECT min(r.xid) FROM running r WHERE r.vxid = l.virtualtransaction) AS xid
    FROM locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
),
vanished AS (
    SELECT min(x::text::bigint) AS xid
    FROM snap CROSS JOIN LATERAL pg_snapshot_xip(snap.s) AS x
    WHERE x::text::bigint NOT IN (SELECT xid FROM running)
),
bounds AS (
    SELECT lock_key,
           least(min(xid), CASE WHEN bool_or(xid IS NULL) THEN (SELECT xid FROM vanished) END) AS bound
    FROM holders
    GROUP BY lock_key
)
SELECT (SELECT xmax FROM snap) AS xmax,
       coalesce(array_agg(lock_key) FILTER (WHERE bound IS NOT NULL), '{}') AS keys,
       coalesce(array_agg(bound) FILTER (WHERE bound IS NOT NULL), '{}') AS bounds
FROM bounds";

/// Every tenant's horizon, from one statement (one snapshot, one `pg_locks`
/// read). Serve with it only statements that begin after this one ended.
pub async fn read_feed_horizons(db: impl PgExecutor<'_>) -> sqlx::Result<FeedHorizons> {
    let (xmax, keys, bounds): (i64, Vec<i64>, Vec<i64>) =
        sqlx::query_as(HORIZONS_SQL).fetch_one(db).await?;
    Ok(FeedHorizons {
        xmax,
        held: keys.into_iter().zip(bounds).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_without_writers_in_flight_has_the_snapshots_xmax() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let horizons = FeedHorizons {
            xmax: 100,
            held: HashMap::from([(feed_write_lock_key(a), 90), (feed_write_lock_key(b), 120)]),
        };
        assert_eq!(horizons.of(a), 90);
        assert_eq!(horizons.of(b), 100, "a newer holder does not raise it");
        assert_eq!(horizons.of(Uuid::from_u128(3)), 100);
    }
}
