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
//! - **Never-skip.** A feed statement's horizon is its own snapshot's xmin,
//!   which on a standby is the primary's oldest running xid as of replay, so
//!   what a standby serves is final too (ARCHITECTURE.md, invariant 2).

use std::{
    collections::VecDeque,
    future::Future,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, RwLock,
    },
    time::{Duration, Instant},
};

use sqlx::{postgres::PgPoolOptions, PgPool};
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use crate::store::replication::{BadLsn, Lsn};
use crate::{
    config::ReplicaArgs,
    db::{PrimaryPool, ReadConnection},
    shutdown::Shutdown,
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

/// A standby's state as the last check (or a failed read) saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Not checked yet: out of rotation.
    Starting,
    /// In rotation.
    Up { lag: Duration },
    /// Replaying, but further behind than the bound: out of rotation.
    Lagging { lag: Duration },
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
}

#[derive(Default)]
struct Counters {
    standby: AtomicU64,
    primary_no_standby: AtomicU64,
    waited: AtomicU64,
    primary_behind: AtomicU64,
    primary_after_error: AtomicU64,
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
    check_interval: Duration,
    /// Each user's last write through this instance (tenant, user) → position.
    written: moka::future::Cache<(Uuid, String), Lsn>,
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
        timeouts: crate::config::SessionTimeouts,
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
            check_interval: args.check_interval(),
            written: moka::future::Cache::builder()
                .max_capacity(REMEMBERED_WRITERS)
                .time_to_live(REMEMBER_FOR)
                .build(),
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

    /// Runs a read whose staleness is harmless (within the replay lag) for
    /// `user`: on a standby in rotation that has replayed `token` and the
    /// user's last write through this instance, else on the primary. A read
    /// that fails on a standby runs again on the primary.
    pub async fn read<T, F, Fut>(
        &self,
        reader: Option<(Uuid, &str)>,
        token: Option<Lsn>,
        mut run: F,
    ) -> Result<T, sqlx::Error>
    where
        F: FnMut(ReadConnection) -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let remembered = match reader {
            Some((tenant, user)) => self.written.get(&(tenant, user.to_string())).await,
            None => None,
        };
        let needed = token.max(remembered);
        if let Some(standby) = self.pick() {
            match self.on_standby(standby, needed).await {
                Ok(Some(conn)) => match run(conn).await {
                    Ok(value) => {
                        bump(&self.counters.standby);
                        return Ok(value);
                    }
                    Err(err) => self.failed(standby, &err),
                },
                Ok(None) => bump(&self.counters.primary_behind),
                Err(err) => self.failed(standby, &err),
            }
        } else {
            bump(&self.counters.primary_no_standby);
        }
        run(self.primary.acquire_for_reads().await?).await
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

    /// A connection to `standby` once it has replayed `needed` (waiting up to
    /// the bound); `None` when it has not by then.
    async fn on_standby(
        &self,
        standby: &Standby,
        needed: Option<Lsn>,
    ) -> Result<Option<ReadConnection>, sqlx::Error> {
        let mut conn = ReadConnection::from(standby.pool.acquire().await?);
        let Some(needed) = needed else {
            return Ok(Some(conn));
        };
        if Lsn(standby.replayed.load(Ordering::Relaxed)) >= needed {
            return Ok(Some(conn));
        }
        let deadline = Instant::now() + self.wait;
        loop {
            match store::read_replay_lsn(&mut *conn).await? {
                Some(replayed) if replayed >= needed => {
                    standby.replayed.fetch_max(replayed.0, Ordering::Relaxed);
                    bump(&self.counters.waited);
                    return Ok(Some(conn));
                }
                Some(_) if Instant::now() < deadline => tokio::time::sleep(CATCH_UP_POLL).await,
                Some(_) => return Ok(None),
                None => {
                    standby.set(Health::Promoted);
                    return Ok(None);
                }
            }
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
        }
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
                            if lag > self.max_lag {
                                Health::Lagging { lag }
                            } else {
                                Health::Up { lag }
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
