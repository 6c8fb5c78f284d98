//! In-process caches, kept coherent across instances by PostgreSQL LISTEN/NOTIFY.
//!
//! What is cached: each user's teams with their join positions, read by every
//! feed request (the feed query then needs no join against `memberships`).
//! Every membership change sends `NOTIFY tidings_cache` in its own transaction;
//! every instance listens and drops the user's entry when the change commits.
//!
//! **Architecture invariant:** a cached entry is only trusted while this
//! instance's LISTEN connection is up. While it is down (or not yet up) reads go
//! to the database, and when it comes back everything cached is dropped, since
//! notifications sent in between are lost.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use moka::future::Cache;
use sqlx::{postgres::PgListener, PgPool};
use uuid::Uuid;

use crate::{
    shutdown::Shutdown,
    store::teams::{self, Membership},
};

/// The NOTIFY channel every instance listens on.
pub const CHANNEL: &str = "tidings_cache";

const MEMBERSHIPS_PREFIX: &str = "memberships:";

/// A backstop only: invalidation is by notification.
const MEMBERSHIPS_TTL: Duration = Duration::from_secs(300);
const MEMBERSHIPS_CAPACITY: u64 = 100_000;

/// The NOTIFY payload telling every instance that a user's teams changed. A
/// tenant id is a UUID (no `:`), so the user id after it may contain anything.
pub fn memberships_notice(tenant_id: Uuid, user_id: &str) -> String {
    format!("{MEMBERSHIPS_PREFIX}{tenant_id}:{user_id}")
}

fn parse_memberships_notice(payload: &str) -> Option<(Uuid, String)> {
    let rest = payload.strip_prefix(MEMBERSHIPS_PREFIX)?;
    let (tenant, user) = rest.split_once(':')?;
    Some((tenant.parse().ok()?, user.to_string()))
}

pub struct Caches {
    pub memberships: MembershipCache,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            memberships: MembershipCache::new(),
        }
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

    /// The user's teams, from the cache when it can be trusted.
    pub async fn get(
        &self,
        pool: &PgPool,
        tenant_id: Uuid,
        user_id: &str,
    ) -> Result<Arc<[Membership]>, sqlx::Error> {
        let key = (tenant_id, user_id.to_string());
        let trusted = self.listening.load(Ordering::SeqCst);
        if trusted {
            if let Some(hit) = self.entries.get(&key).await {
                return Ok(hit);
            }
        }
        let started = self.generation.load(Ordering::SeqCst);
        let loaded: Arc<[Membership]> = teams::list_memberships_of_user(pool, tenant_id, user_id)
            .await?
            .into();
        if trusted {
            self.entries.insert(key.clone(), loaded.clone()).await;
            // An invalidation may have raced with the load (its change committed
            // after our read); it bumped the generation before invalidating, so
            // either it removed our entry or we see the bump here.
            if self.generation.load(Ordering::SeqCst) != started {
                self.entries.invalidate(&key).await;
            }
        }
        Ok(loaded)
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

/// Listens for invalidations until shutdown, reconnecting with a short pause
/// after any error.
pub async fn run_listener(pool: PgPool, caches: Arc<Caches>, mut shutdown: Shutdown) {
    loop {
        let session = listen_once(&pool, &caches);
        tokio::select! {
            _ = shutdown.wait() => break,
            result = session => {
                caches.memberships.set_listening(false);
                if let Err(err) = result {
                    tracing::warn!(error = %err, "cache invalidation listener lost its connection; reconnecting");
                }
            }
        }
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    caches.memberships.set_listening(false);
}

/// One LISTEN session: returns when the connection fails.
async fn listen_once(pool: &PgPool, caches: &Caches) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // A lost connection ends this session (and a fresh one clears the cache);
    // no need for sqlx to reconnect this one first.
    listener.eager_reconnect(false);
    listener.listen(CHANNEL).await?;
    // Anything cached before this point may have missed a notification.
    caches.memberships.set_listening(true);
    tracing::info!(channel = CHANNEL, "cache invalidation listener up");
    loop {
        match listener.try_recv().await? {
            Some(notification) => match parse_memberships_notice(notification.payload()) {
                Some((tenant_id, user_id)) => {
                    caches.memberships.invalidate(tenant_id, &user_id).await
                }
                None => tracing::warn!(
                    payload = notification.payload(),
                    "unknown cache notification"
                ),
            },
            // The connection dropped; notifications may have been lost.
            None => return Err(sqlx::Error::Protocol("LISTEN connection closed".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_round_trip_whatever_the_user_id() {
        let tenant = Uuid::now_v7();
        for user in ["u1", "a:b:c", "ünïcödé", " "] {
            let notice = memberships_notice(tenant, user);
            assert_eq!(
                parse_memberships_notice(&notice),
                Some((tenant, user.to_string()))
            );
        }
        assert_eq!(parse_memberships_notice("other:x"), None);
        assert_eq!(parse_memberships_notice("memberships:not-a-uuid:u"), None);
    }

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
