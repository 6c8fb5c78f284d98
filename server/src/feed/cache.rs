//! In-process caches, kept coherent across instances by PostgreSQL LISTEN/NOTIFY.
//!
//! What is cached: each user's teams with their join positions, read by every
//! feed request (the feed query then needs no join against `memberships`).
//! Every membership change notifies `NotifyChannel::Cache` in its own
//! transaction; every instance listens and drops the user's entry when the
//! change commits.
//!
//! **Architecture invariant:** a cached entry is only trusted while this
//! instance's LISTEN connection is up. While it is down (or not yet up) reads go
//! to the database, and when it comes back everything cached is dropped, since
//! notifications sent in between are lost.
//!
//! Also each user's last badge walk ([`CountsBases`]), which needs no
//! invalidation: the feed statement checks it in its own snapshot and walks
//! from scratch when anything it depended on changed. A user's teams are
//! loaded with the base stored in the database for them
//! (`store::feed::stored_base`), which stands in for a walk this instance has
//! not seen; a read that walked far stores its base back in the background.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, OnceLock,
    },
    time::Duration,
};

use moka::future::Cache;
use sqlx::PgPool;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::{
    app::instruments::{self, CacheLookup},
    app::shutdown::Shutdown,
    db::listen::{Event, Subscription},
    db::PrimaryPool,
    store::{
        feed::{stored_base, CountsBase},
        notify::{CredentialsChanged, MembershipsChanged, NotifyChannel},
        teams::Membership,
    },
};

/// A backstop only: invalidation is by notification.
const MEMBERSHIPS_TTL: Duration = Duration::from_secs(300);
const MEMBERSHIPS_CAPACITY: u64 = 100_000;

pub struct Caches {
    pub memberships: MembershipCache,
    pub counts: CountsBases,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            memberships: MembershipCache::new(),
            counts: CountsBases::new(),
        }
    }
}

/// Memory only: an entry is never wrong, at worst useless (the statement then
/// walks from the floors and leaves a new one).
const COUNTS_TTL: Duration = Duration::from_secs(300);
const COUNTS_CAPACITY: u64 = 100_000;

/// Per user, what the user's last feed statement on this instance counted
/// ([`CountsBase`]) and the teams it ran with, for the next statement to
/// carry over (`store::feed`, the counts' base). The statement checks the
/// base against its own snapshot, so nothing here is invalidated: a mark or
/// an item read on another instance, a purge, a standby behind the base all
/// make that statement walk from the floors.
pub struct CountsBases {
    entries: Cache<(Uuid, String), CountedWith>,
    /// The queue of bases to store in the database ([`CountsBases::store`]),
    /// drained by one writer task per instance, started by the first base.
    storing: OnceLock<mpsc::Sender<stored_base::Stored>>,
}

/// Bases waiting to be stored, per instance: one more is dropped, not
/// queued, so a burst of long walks (one tenant's or many) never grows
/// memory or queues work on the primary; a dropped base costs a later first
/// read a walk.
const STORING_QUEUE: usize = 4096;
/// Bases per statement of the writer: it takes what has queued, up to this.
const STORING_BATCH: usize = 256;

/// The writer of queued bases: each statement stores what has queued (up to
/// [`STORING_BATCH`]; a user's latest base only), until the queue closes.
async fn store_bases(pool: PrimaryPool, mut waiting: mpsc::Receiver<stored_base::Stored>) {
    let mut batch = Vec::with_capacity(STORING_BATCH);
    while waiting.recv_many(&mut batch, STORING_BATCH).await > 0 {
        let mut latest: HashMap<(Uuid, String), stored_base::Stored> = HashMap::new();
        for base in batch.drain(..) {
            latest.insert((base.tenant_id, base.user_id.clone()), base);
        }
        let bases: Vec<stored_base::Stored> = latest.into_values().collect();
        let n = bases.len() as u64;
        match stored_base::save(&pool, &bases).await {
            Ok(()) => instruments::counts_base_stored(instruments::BaseStore::Stored, n),
            Err(error) => {
                instruments::counts_base_stored(instruments::BaseStore::Failed, n);
                tracing::debug!(%error, "storing counts bases failed");
            }
        }
    }
}

/// A base and the teams it was counted with.
type CountedWith = (Arc<[Membership]>, CountsBase);

impl CountsBases {
    fn new() -> Self {
        CountsBases {
            entries: Cache::builder()
                .max_capacity(COUNTS_CAPACITY)
                .time_to_live(COUNTS_TTL)
                .build(),
            storing: OnceLock::new(),
        }
    }

    /// Queues the user's base to be stored in the database, for any
    /// instance's next first read of the user; dropped when
    /// [`STORING_QUEUE`] bases are waiting.
    pub fn store(
        &self,
        pool: &PrimaryPool,
        tenant_id: Uuid,
        user_id: &str,
        teams: &[Membership],
        base: CountsBase,
    ) {
        let queue = self.storing.get_or_init(|| {
            let (queue, waiting) = mpsc::channel(STORING_QUEUE);
            tokio::spawn(store_bases(pool.clone(), waiting));
            queue
        });
        let base = stored_base::Stored {
            tenant_id,
            user_id: user_id.to_string(),
            teams_key: stored_base::teams_key(teams),
            base,
        };
        if queue.try_send(base).is_err() {
            instruments::counts_base_stored(instruments::BaseStore::Dropped, 1);
        }
    }

    /// The user's base, if it was counted with exactly these teams.
    pub async fn get(
        &self,
        tenant_id: Uuid,
        user_id: &str,
        teams: &[Membership],
    ) -> Option<CountsBase> {
        let (counted_with, base) = self.entries.get(&(tenant_id, user_id.to_string())).await?;
        (*counted_with == *teams).then_some(base)
    }

    pub async fn put(
        &self,
        tenant_id: Uuid,
        user_id: &str,
        teams: Arc<[Membership]>,
        base: CountsBase,
    ) {
        self.entries
            .insert((tenant_id, user_id.to_string()), (teams, base))
            .await;
    }
}

pub struct MembershipCache {
    entries: Cache<(Uuid, String), Arc<[Membership]>>,
    /// Bumped before every invalidation. A load that saw another generation
    /// when it started may have read the database before the change committed,
    /// so it drops what it just inserted.
    generation: AtomicU64,
    /// True while the LISTEN connection is up.
    listening: AtomicBool,
}

impl MembershipCache {
    fn new() -> Self {
        MembershipCache {
            entries: Cache::builder()
                .max_capacity(MEMBERSHIPS_CAPACITY)
                .time_to_live(MEMBERSHIPS_TTL)
                .build(),
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(false),
        }
    }

    /// The user's teams, from the cache when it can be trusted; when they are
    /// loaded, with the counts base stored for them (none from the cache).
    pub async fn get(
        &self,
        pool: &PrimaryPool,
        tenant_id: Uuid,
        user_id: &str,
    ) -> Result<(Arc<[Membership]>, Option<CountsBase>), sqlx::Error> {
        let key = (tenant_id, user_id.to_string());
        let trusted = self.listening.load(Ordering::SeqCst);
        if trusted {
            if let Some(hit) = self.entries.get(&key).await {
                instruments::cache_lookup("memberships", CacheLookup::Hit);
                return Ok((hit, None));
            }
        }
        let lookup = if trusted {
            CacheLookup::Miss
        } else {
            CacheLookup::Bypass
        };
        instruments::cache_lookup("memberships", lookup);
        let started = self.generation.load(Ordering::SeqCst);
        let reader = stored_base::load_reader(pool, tenant_id, user_id).await?;
        let loaded: Arc<[Membership]> = reader.teams.into();
        if trusted {
            self.entries.insert(key.clone(), loaded.clone()).await;
            // An invalidation may have raced with the load (its change committed
            // after our read); it bumped the generation before invalidating, so
            // either it removed our entry or we see the bump here.
            if self.generation.load(Ordering::SeqCst) != started {
                self.entries.invalidate(&key).await;
            }
        }
        Ok((loaded, reader.stored_base))
    }

    pub async fn invalidate(&self, tenant_id: Uuid, user_id: &str) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries
            .invalidate(&(tenant_id, user_id.to_string()))
            .await;
    }

    fn invalidate_all(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries.invalidate_all();
    }

    fn set_listening(&self, up: bool) {
        self.listening.store(up, Ordering::SeqCst);
        self.invalidate_all();
    }
}

/// Listens for invalidations until shutdown. The cache is trusted from each
/// `Up` (which flushes it: notifications may have been missed before) to the
/// next `Down` (which flushes it again and bypasses it until the next `Up`).
pub async fn run_listener(pool: PgPool, caches: Arc<Caches>, shutdown: Shutdown) {
    let mut subscription = Subscription::new(pool, NotifyChannel::Cache, shutdown);
    while let Some(event) = subscription.next().await {
        match event {
            Event::Up => {
                caches.memberships.set_listening(true);
                tracing::info!("cache invalidation listener up");
            }
            Event::Down => caches.memberships.set_listening(false),
            Event::Notification(payload) => match MembershipsChanged::parse(&payload) {
                Some(changed) => {
                    caches
                        .memberships
                        .invalidate(changed.tenant_id, &changed.user_id)
                        .await
                }
                // Credential notices are the stream's and the auth caches'.
                None if CredentialsChanged::parse(&payload).is_some() => {}
                None => tracing::warn!(payload, "unknown cache notification"),
            },
        }
    }
    caches.memberships.set_listening(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_untrusted_cache_is_bypassed_and_a_reconnect_clears_it() {
        let cache = MembershipCache::new();
        let key = (Uuid::now_v7(), "u".to_string());
        cache
            .entries
            .insert(key.clone(), Arc::from(Vec::new()))
            .await;
        cache.set_listening(true);
        cache.entries.run_pending_tasks().await;
        assert!(cache.entries.get(&key).await.is_none());
    }
}
