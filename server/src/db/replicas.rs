//! Reads from hot standbys: the one place that decides whether a statement
//! runs on a standby or on the primary (ARCHITECTURE.md, "Reads from hot
//! standbys"). Services hand it a read; store functions stay executor-generic
//! and never know where they run.
//!
//! - **Rotation.** Standbys take reads in turn while healthy: reachable, still
//!   in recovery (a promoted standby is out: it no longer follows the primary)
//!   and at most `max_lag` behind. A background check every `check_interval`
//!   decides; a read that fails on a standby takes it out at once and is run
//!   again on the primary, so a standby that stops costs no request.
//! - **Read-your-writes.** A write answers with the primary's WAL position after
//!   its commit (a consistency token). A read that carries one — or whose user
//!   wrote through this instance — runs on a standby only once it has replayed
//!   that far, waiting up to `wait`; else on the primary.
//! - **Never-skip, per tenant.** A feed statement on a standby serves below
//!   the tenant's horizon read on the primary (`store::horizon`), as on the
//!   primary, but only below a horizon the standby has provably replayed: each
//!   reading carries the primary's WAL insert position read after it
//!   ([`HorizonReading`]), and a standby serves with the newest reading at or
//!   below the replay position it reported, on the same connection, before
//!   the feed statement began. So what a standby serves is final too
//!   (ARCHITECTURE.md, invariant 2), and another tenant's open write or a
//!   foreign session's xid holds back nothing (invariant 11); the proof is in
//!   docs/design/replicas.md, "Never-skip on a standby". A standby whose
//!   newest usable reading is older than `max_horizon_age` leaves rotation
//!   like one that lags.

use std::{
    collections::VecDeque,
    future::Future,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, RwLock,
    },
    time::{Duration, Instant},
};

use sqlx::{postgres::PgPoolOptions, PgPool};
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use crate::store::replication::{BadLsn, Lsn};
use crate::{
    app::config::ReplicaArgs,
    app::shutdown::Shutdown,
    db::{PrimaryPool, ReadConnection},
    store::horizon::{self as horizon_store, FeedHorizons},
    store::replication as store,
};

/// The name of the header that carries a consistency token, both ways.
pub const CONSISTENCY_HEADER: &str = "Tidings-Consistency-Token";

/// How many users' last write positions an instance remembers, and for how
/// long: past that, a standby has long replayed them.
const REMEMBERED_WRITERS: u64 = 100_000;
const REMEMBER_FOR: Duration = Duration::from_secs(60);

/// How often a read waiting for a standby to catch up asks again.
const CATCH_UP_POLL: Duration = Duration::from_millis(2);

/// Horizon readings kept for standbys are at least this far apart (the
/// newest always kept): a standby behind the newest serves with one at most
/// this much older than the best it could use, and the log stays short
/// (`max_horizon_age` / this, a few hundred at most) whatever the read rate.
const KEPT_READINGS_SPACING: Duration = Duration::from_millis(10);
const MAX_KEPT_READINGS: usize = 1_000;

/// Every tenant's horizon as one statement on the primary read it, and, with
/// standbys, the primary's WAL insert position read by a statement that began
/// after that one ended. Every feed write below these horizons had ended
/// before the horizons were read, so its commit (or abort) record lies below
/// `wal`: a standby that has replayed `wal` may serve with these horizons
/// (docs/design/replicas.md, "Never-skip on a standby").
#[derive(Debug)]
pub struct HorizonReading {
    /// When the horizon statement was sent.
    pub started: Instant,
    pub horizons: Arc<FeedHorizons>,
    /// `None` without standbys, or for a reading made by a path that does
    /// not stamp it (the stream's tick): usable on the primary only.
    pub wal: Option<Lsn>,
}

impl HorizonReading {
    /// The tenant's horizon in this reading.
    pub fn of(&self, tenant: Uuid) -> i64 {
        self.horizons.of(tenant)
    }
}

/// Of `readings`, the newest one a standby that has replayed `replayed` may
/// serve with: stamped at or below `replayed`, begun no earlier than
/// `not_before` (read-your-writes: after the request began) and not older
/// than `max_age` at `now`.
fn newest_usable<'a>(
    readings: impl Iterator<Item = &'a Arc<HorizonReading>>,
    replayed: Lsn,
    not_before: Option<Instant>,
    max_age: Duration,
    now: Instant,
) -> Option<&'a Arc<HorizonReading>> {
    readings
        .filter(|r| r.wal.is_some_and(|wal| wal <= replayed))
        .filter(|r| not_before.is_none_or(|t| r.started >= t))
        .filter(|r| now.saturating_duration_since(r.started) <= max_age)
        .max_by_key(|r| r.started)
}

/// Adds `reading` to `kept` (ordered by start), thinning the newest readings
/// to one per [`KEPT_READINGS_SPACING`] and dropping those older than
/// `max_age` (they can no longer be served with).
fn keep_reading(
    kept: &mut VecDeque<Arc<HorizonReading>>,
    reading: Arc<HorizonReading>,
    max_age: Duration,
    now: Instant,
) {
    let at = kept.partition_point(|r| r.started <= reading.started);
    kept.insert(at, reading);
    let n = kept.len();
    if n >= 3 && kept[n - 2].started.duration_since(kept[n - 3].started) < KEPT_READINGS_SPACING {
        kept.remove(n - 2);
    }
    while kept.len() > 1
        && (kept.len() > MAX_KEPT_READINGS
            || kept
                .front()
                .is_some_and(|r| now.saturating_duration_since(r.started) > max_age))
    {
        kept.pop_front();
    }
}

/// A standby's state as the last check (or a failed read) saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Not checked yet: out of rotation.
    Starting,
    /// In rotation.
    Up {
        lag: Duration,
        horizon_age: Duration,
    },
    /// Replaying, but its replay lag or the age of the newest horizon it can
    /// serve with (`None`: none that is kept) is over its bound: out of
    /// rotation.
    Lagging {
        lag: Duration,
        horizon_age: Option<Duration>,
    },
    /// Not a standby any more: out of rotation until it is one again.
    Promoted,
    /// Unreachable or failing: out of rotation.
    Down { error: String },
}

impl Health {
    pub fn in_rotation(&self) -> bool {
        matches!(self, Health::Up { .. })
    }

    pub fn label(&self) -> &'static str {
        match self {
            Health::Starting => "starting",
            Health::Up { .. } => "up",
            Health::Lagging { .. } => "lagging",
            Health::Promoted => "promoted",
            Health::Down { .. } => "down",
        }
    }
}

struct Standby {
    /// host:port, for people (never the password).
    name: String,
    pool: PgPool,
    health: RwLock<Health>,
    /// The replay position of the last check, for read-your-writes without a
    /// round trip when it is already far enough.
    replayed: AtomicU64,
}

impl Standby {
    fn health(&self) -> Health {
        self.health.read().expect("health lock").clone()
    }

    fn set(&self, health: Health) {
        let mut current = self.health.write().expect("health lock");
        if current.label() != health.label() {
            tracing::info!(standby = %self.name, from = current.label(), to = health.label(), "standby health changed");
        }
        *current = health;
    }
}

/// What one standby looks like from this instance, for `/readyz`.
#[derive(Debug, Clone)]
pub struct StandbyStatus {
    pub name: String,
    pub health: Health,
    pub replayed: Lsn,
}

/// How reads were routed since start, for `/readyz` and the benchmark.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadCounts {
    /// Served by a standby.
    pub standby: u64,
    /// Served by the primary because no standby was in rotation.
    pub primary_no_standby: u64,
    /// Served by a standby after waiting for it to replay a token.
    pub waited: u64,
    /// Served by the primary because no standby caught up within the wait.
    pub primary_behind: u64,
    /// Served by the primary after failing on a standby.
    pub primary_after_error: u64,
    /// Served by the primary because the standby had replayed no horizon
    /// reading recent enough to serve with.
    pub primary_horizon_old: u64,
}

#[derive(Default)]
struct Counters {
    standby: AtomicU64,
    primary_no_standby: AtomicU64,
    waited: AtomicU64,
    primary_behind: AtomicU64,
    primary_after_error: AtomicU64,
    primary_horizon_old: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The primary and its standbys. With no standbys every read goes to the
/// primary and nothing else happens.
pub struct Replicas {
    primary: PrimaryPool,
    standbys: Vec<Standby>,
    next: AtomicUsize,
    wait: Duration,
    max_lag: Duration,
    max_horizon_age: Duration,
    check_interval: Duration,
    /// Each user's last write through this instance (tenant, user) → position.
    written: moka::future::Cache<(Uuid, String), Lsn>,
    /// Recent stamped horizon readings, oldest first (only with standbys).
    readings: Mutex<VecDeque<Arc<HorizonReading>>>,
    counters: Counters,
}

impl Replicas {
    /// Only the primary.
    pub fn primary_only(primary: PrimaryPool) -> Self {
        Replicas::new(primary, Vec::new(), &ReplicaArgs::default())
    }

    /// The standbys of `args`, connected lazily: a standby that is down at
    /// start-up is only out of rotation. Their sessions get the primary's
    /// statement and lock timeouts.
    pub fn connect(
        primary: PrimaryPool,
        args: &ReplicaArgs,
        max_connections: u32,
        timeouts: crate::app::config::SessionTimeouts,
    ) -> anyhow::Result<Self> {
        let mut standbys = Vec::new();
        for url in args.database_replica_urls.iter().filter(|u| !u.is_empty()) {
            let options: sqlx::postgres::PgConnectOptions = url
                .parse()
                .map_err(|e| anyhow::anyhow!("TIDINGS_DATABASE_REPLICA_URLS: {e}"))?;
            let name = format!("{}:{}", options.get_host(), options.get_port());
            let pool = crate::db::with_session_timeouts(PgPoolOptions::new(), timeouts)
                .max_connections(max_connections)
                // A standby that does not answer quickly is skipped for the
                // primary; it must not hold a request for long.
                .acquire_timeout(Duration::from_secs(1))
                .connect_lazy_with(options);
            standbys.push((name, pool));
        }
        Ok(Replicas::new(primary, standbys, args))
    }

    fn new(primary: PrimaryPool, standbys: Vec<(String, PgPool)>, args: &ReplicaArgs) -> Self {
        Replicas {
            primary,
            standbys: standbys
                .into_iter()
                .map(|(name, pool)| Standby {
                    name,
                    pool,
                    health: RwLock::new(Health::Starting),
                    replayed: AtomicU64::new(0),
                })
                .collect(),
            next: AtomicUsize::new(0),
            wait: args.wait(),
            max_lag: args.max_lag(),
            max_horizon_age: args.max_horizon_age(),
            check_interval: args.check_interval(),
            written: moka::future::Cache::builder()
                .max_capacity(REMEMBERED_WRITERS)
                .time_to_live(REMEMBER_FOR)
                .build(),
            readings: Mutex::new(VecDeque::new()),
            counters: Counters::default(),
        }
    }

    pub fn has_standbys(&self) -> bool {
        !self.standbys.is_empty()
    }

    /// After a write by `user` committed: its consistency token, remembered for
    /// the user's next reads on this instance. `None` without standbys (every
    /// read is on the primary, which has it already).
    pub async fn written_by(
        &self,
        tenant_id: Uuid,
        user: &str,
    ) -> Result<Option<Lsn>, sqlx::Error> {
        if !self.has_standbys() {
            return Ok(None);
        }
        let lsn = store::read_wal_insert_lsn(&self.primary).await?;
        self.remember(tenant_id, user, lsn).await;
        Ok(Some(lsn))
    }

    /// After a write not tied to one user (an event, a membership change): its
    /// consistency token.
    pub async fn written(&self) -> Result<Option<Lsn>, sqlx::Error> {
        if !self.has_standbys() {
            return Ok(None);
        }
        Ok(Some(store::read_wal_insert_lsn(&self.primary).await?))
    }

    async fn remember(&self, tenant_id: Uuid, user: &str, lsn: Lsn) {
        // Never move a remembered position back (concurrent writes answer in any order).
        self.written
            .entry((tenant_id, user.to_string()))
            .and_upsert_with(|old| async move { old.map_or(lsn, |old| old.into_value().max(lsn)) })
            .await;
    }

    /// Every tenant's horizon, read on the primary now, and with standbys
    /// the WAL position after it (a second statement, begun after the first
    /// ended: a column of the same statement could be evaluated before its
    /// lock read). Kept for reads on standbys and their health.
    pub async fn read_horizons(&self) -> sqlx::Result<Arc<HorizonReading>> {
        let started = Instant::now();
        let horizons = Arc::new(horizon_store::read_feed_horizons(&self.primary).await?);
        if !self.has_standbys() {
            return Ok(Arc::new(HorizonReading {
                started,
                horizons,
                wal: None,
            }));
        }
        let wal = store::read_wal_insert_lsn(&self.primary).await?;
        let reading = Arc::new(HorizonReading {
            started,
            horizons,
            wal: Some(wal),
        });
        let mut kept = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        keep_reading(
            &mut kept,
            reading.clone(),
            self.max_horizon_age,
            Instant::now(),
        );
        Ok(reading)
    }

    /// The newest kept reading (or `fresh`) a standby that has replayed
    /// `replayed` may serve with (see [`newest_usable`]).
    fn usable_reading(
        &self,
        fresh: &Arc<HorizonReading>,
        replayed: Lsn,
        not_before: Option<Instant>,
    ) -> Option<Arc<HorizonReading>> {
        let kept = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        newest_usable(
            kept.iter().chain([fresh]),
            replayed,
            not_before,
            self.max_horizon_age,
            Instant::now(),
        )
        .cloned()
    }

    /// Runs a feed read of `reader` (tenant, user) whose staleness is
    /// harmless (within the replay lag) on a standby in rotation, else on the
    /// primary; `run` gets the connection and the tenant's horizon to serve
    /// below there. `fresh` is a reading begun after the request did
    /// (`feed::horizon::Horizons::fresh`): the primary serves with it, and so
    /// does a standby when the read carries `token` or the user wrote through
    /// this instance (read-your-writes), once it has replayed both. Otherwise
    /// a standby serves with the newest reading it has replayed, if one is
    /// recent enough. A read that fails on a standby runs again on the primary.
    pub async fn read<T, F, Fut>(
        &self,
        reader: (Uuid, &str),
        token: Option<Lsn>,
        fresh: &Arc<HorizonReading>,
        mut run: F,
    ) -> Result<T, sqlx::Error>
    where
        F: FnMut(ReadConnection, i64) -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let (tenant, user) = reader;
        let remembered = self.written.get(&(tenant, user.to_string())).await;
        // Read-your-writes: the write lies below a horizon read after it
        // committed, `fresh`, once the standby has replayed that reading too.
        let needed = token
            .max(remembered)
            .map(|lsn| fresh.wal.map_or(lsn, |wal| wal.max(lsn)));
        let not_before = needed.map(|_| fresh.started);
        if let Some(standby) = self.pick() {
            match self.on_standby(standby, needed).await {
                Ok(Some((conn, replayed))) => {
                    match self.usable_reading(fresh, replayed, not_before) {
                        Some(reading) => match run(conn, reading.of(tenant)).await {
                            Ok(value) => {
                                bump(&self.counters.standby);
                                return Ok(value);
                            }
                            Err(err) => self.failed(standby, &err),
                        },
                        None => bump(&self.counters.primary_horizon_old),
                    }
                }
                Ok(None) => bump(&self.counters.primary_behind),
                Err(err) => self.failed(standby, &err),
            }
        } else {
            bump(&self.counters.primary_no_standby);
        }
        run(self.primary.acquire_for_reads().await?, fresh.of(tenant)).await
    }

    /// The next standby in rotation, round robin.
    fn pick(&self) -> Option<&Standby> {
        let n = self.standbys.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| &self.standbys[(start + i) % n])
            .find(|s| s.health().in_rotation())
    }

    /// A connection to `standby` and the position it had replayed, read on
    /// that connection (so before any statement the caller runs next), once
    /// that is at or past `needed` (waiting up to the bound); `None` when it
    /// is not by then.
    async fn on_standby(
        &self,
        standby: &Standby,
        needed: Option<Lsn>,
    ) -> Result<Option<(ReadConnection, Lsn)>, sqlx::Error> {
        let mut conn = ReadConnection::from(standby.pool.acquire().await?);
        let deadline = Instant::now() + self.wait;
        let mut waited = false;
        loop {
            let Some(replayed) = store::read_replay_lsn(&mut *conn).await? else {
                standby.set(Health::Promoted);
                return Ok(None);
            };
            standby.replayed.fetch_max(replayed.0, Ordering::Relaxed);
            if needed.is_none_or(|needed| replayed >= needed) {
                if waited {
                    bump(&self.counters.waited);
                }
                return Ok(Some((conn, replayed)));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            waited = true;
            tokio::time::sleep(CATCH_UP_POLL).await;
        }
    }

    /// A read failed on `standby`: out of rotation until the next check finds
    /// it healthy (the read runs again on the primary).
    fn failed(&self, standby: &Standby, err: &sqlx::Error) {
        tracing::warn!(standby = %standby.name, error = %err, "read failed on a standby; served by the primary");
        bump(&self.counters.primary_after_error);
        standby.set(Health::Down {
            error: err.to_string(),
        });
    }

    pub fn statuses(&self) -> Vec<StandbyStatus> {
        self.standbys
            .iter()
            .map(|s| StandbyStatus {
                name: s.name.clone(),
                health: s.health(),
                replayed: Lsn(s.replayed.load(Ordering::Relaxed)),
            })
            .collect()
    }

    pub fn counts(&self) -> ReadCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReadCounts {
            standby: get(&c.standby),
            primary_no_standby: get(&c.primary_no_standby),
            waited: get(&c.waited),
            primary_behind: get(&c.primary_behind),
            primary_after_error: get(&c.primary_after_error),
            primary_horizon_old: get(&c.primary_horizon_old),
        }
    }

    /// The age of the newest kept horizon reading a standby that has replayed
    /// `replayed` can serve with; `None` when it has replayed none of them.
    fn horizon_age(&self, replayed: Lsn) -> Option<Duration> {
        let kept = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        newest_usable(kept.iter(), replayed, None, Duration::MAX, now)
            .map(|r| now.saturating_duration_since(r.started))
    }

    /// Checks every standby each `check_interval` until shutdown (nothing to
    /// do without standbys).
    pub fn spawn_checks(self: &Arc<Self>, mut shutdown: Shutdown) -> Option<JoinHandle<()>> {
        if !self.has_standbys() {
            return None;
        }
        let replicas = self.clone();
        Some(tokio::spawn(async move {
            replicas.run_checks(&mut shutdown).await
        }))
    }

    async fn run_checks(&self, shutdown: &mut Shutdown) {
        // The primary's write position over the last stretch of time: a standby
        // that has replayed up to L lags by the age of the oldest sample past L.
        let mut samples: VecDeque<(Instant, Lsn)> = VecDeque::new();
        loop {
            let now = Instant::now();
            match store::read_wal_write_lsn(&self.primary).await {
                Ok(lsn) => {
                    if samples.back().is_none_or(|(_, last)| *last < lsn) {
                        samples.push_back((now, lsn));
                    }
                }
                Err(err) => tracing::debug!(error = %err, "primary position unknown"),
            }
            // A stamped horizon reading at least once a check, however few
            // reads come: a standby's horizon is then at most a check interval
            // plus its replay lag old.
            if let Err(err) = self.read_horizons().await {
                tracing::debug!(error = %err, "horizons unknown");
            }
            // Keep what can still tell a lag within twice the bound.
            while samples.len() > 1
                && samples
                    .get(1)
                    .is_some_and(|(at, _)| now.duration_since(*at) > self.max_lag * 2)
            {
                samples.pop_front();
            }
            let checks = self.standbys.iter().map(|standby| {
                let samples = &samples;
                async move {
                    let checked = tokio::time::timeout(
                        self.check_interval.max(Duration::from_secs(1)),
                        store::read_replay_lsn(&standby.pool),
                    )
                    .await;
                    let health = match checked {
                        Err(_) => Health::Down {
                            error: "no answer to the health check".into(),
                        },
                        Ok(Err(err)) => Health::Down {
                            error: err.to_string(),
                        },
                        Ok(Ok(None)) => Health::Promoted,
                        Ok(Ok(Some(replayed))) => {
                            standby.replayed.fetch_max(replayed.0, Ordering::Relaxed);
                            let lag = samples
                                .iter()
                                .find(|(_, lsn)| *lsn > replayed)
                                .map(|(at, _)| now.duration_since(*at))
                                .unwrap_or_default();
                            let horizon_age = self.horizon_age(replayed);
                            match horizon_age {
                                Some(horizon_age)
                                    if lag <= self.max_lag
                                        && horizon_age <= self.max_horizon_age =>
                                {
                                    Health::Up { lag, horizon_age }
                                }
                                _ => Health::Lagging { lag, horizon_age },
                            }
                        }
                    };
                    if let Health::Promoted = health {
                        // A promoted standby's positions are of another timeline.
                        standby.replayed.store(0, Ordering::Relaxed);
                    }
                    standby.set(health);
                }
            });
            futures::future::join_all(checks).await;
            if shutdown.sleep(self.check_interval).await {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(started: Instant, wal: Option<u64>) -> Arc<HorizonReading> {
        Arc::new(HorizonReading {
            started,
            horizons: Arc::new(FeedHorizons::at(100)),
            wal: wal.map(Lsn),
        })
    }

    #[test]
    fn a_standby_serves_with_the_newest_reading_it_has_replayed() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let old = reading(t0, Some(10));
        let newer = reading(t0 + ms(20), Some(30));
        let newest = reading(t0 + ms(40), Some(50));
        let unstamped = reading(t0 + ms(60), None);
        let all = [old.clone(), newer.clone(), newest.clone(), unstamped];
        let now = t0 + ms(100);
        let pick = |replayed, not_before, max_age| {
            newest_usable(all.iter(), Lsn(replayed), not_before, max_age, now).cloned()
        };
        let long = Duration::from_secs(10);
        assert!(pick(9, None, long).is_none(), "nothing replayed");
        assert!(Arc::ptr_eq(&pick(10, None, long).unwrap(), &old));
        assert!(Arc::ptr_eq(&pick(49, None, long).unwrap(), &newer));
        assert!(
            Arc::ptr_eq(&pick(1_000, None, long).unwrap(), &newest),
            "an unstamped reading is for the primary only"
        );
        assert!(
            pick(49, Some(t0 + ms(30)), long).is_none(),
            "read-your-writes takes only readings begun after the request"
        );
        assert!(
            pick(49, None, ms(79)).is_none(),
            "too old to serve with (80 ms)"
        );
    }

    #[test]
    fn kept_readings_are_thinned_ordered_and_bounded_in_age() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let max_age = ms(1_000);
        let mut kept = VecDeque::new();
        for i in 0..100u64 {
            let at = t0 + ms(i);
            keep_reading(&mut kept, reading(at, Some(i)), max_age, at);
        }
        // One per 10 ms, plus the newest.
        assert!(kept.len() <= 12, "{}", kept.len());
        assert_eq!(kept.back().unwrap().wal, Some(Lsn(99)));
        assert!(kept
            .iter()
            .zip(kept.iter().skip(1))
            .all(|(a, b)| a.started <= b.started));
        // Out of order: a reading that began earlier lands in its place.
        keep_reading(
            &mut kept,
            reading(t0 + ms(95), Some(95)),
            max_age,
            t0 + ms(100),
        );
        assert!(kept
            .iter()
            .zip(kept.iter().skip(1))
            .all(|(a, b)| a.started <= b.started));
        // Older than the bound: dropped, but never the last one.
        let late = t0 + ms(5_000);
        keep_reading(&mut kept, reading(late, Some(500)), max_age, late);
        assert_eq!(kept.len(), 1);
    }
}
