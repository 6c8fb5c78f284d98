//! What every handler and worker shares. Cheap to clone.

use std::sync::Arc;

pub use crate::app::config::Settings;
use crate::{
    db::replicas::Replicas,
    db::PrimaryPool,
    feed::cache::Caches,
    feed::horizon::Horizons,
    http::auth::AuthCache,
    stream::{Hub, HubLimits},
    tenants::limits::Limits,
    tenants::secrets::SecretKeys,
};

#[derive(Clone)]
pub struct AppState {
    /// The primary (directly or through a pooler): writes and current reads.
    pub pool: PrimaryPool,
    /// Sessions for LISTEN: `TIDINGS_DATABASE_LISTEN_URL`, else `pool`.
    pub listen_pool: sqlx::PgPool,
    /// Where reads that tolerate replay lag go (`crate::db::replicas`).
    pub replicas: Arc<Replicas>,
    pub settings: Arc<Settings>,
    pub auth_cache: Arc<AuthCache>,
    pub caches: Arc<Caches>,
    /// The key for secrets at rest (`crate::tenants::secrets`).
    pub secrets: Arc<SecretKeys>,
    /// The newest per-tenant feed horizons, shared by every reader.
    pub horizons: Arc<Horizons>,
    /// This instance's live streams.
    pub stream: Arc<Hub>,
    /// Rate limits and pool shares per tenant (this instance's buckets).
    pub limits: Arc<Limits>,
}

impl AppState {
    /// A state on one database: LISTEN on the pool's sessions, no standbys.
    pub fn new(pool: PrimaryPool, settings: Settings, secrets: SecretKeys) -> Self {
        let limits = HubLimits {
            max_connections: settings.stream.stream_max_connections,
            max_per_user: settings.stream.max_per_user(),
            buffer: settings.stream.buffer(),
        };
        let tenant_limits = Arc::new(Limits::new(&settings.limits, settings.db_max_connections));
        AppState {
            limits: tenant_limits,
            listen_pool: pool.sessions().clone(),
            replicas: Arc::new(Replicas::primary_only(pool.clone())),
            pool,
            settings: Arc::new(settings),
            auth_cache: Arc::new(AuthCache::default()),
            caches: Arc::new(Caches::default()),
            secrets: Arc::new(secrets),
            horizons: Arc::new(Horizons::default()),
            stream: Arc::new(Hub::new(limits)),
        }
    }

    pub fn with_replicas(mut self, replicas: Replicas) -> Self {
        self.replicas = Arc::new(replicas);
        self
    }

    /// A state whose pool never connects: enough to build the OpenAPI document.
    pub fn offline() -> Self {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://offline.invalid/tidings")
            .expect("a constant URL parses");
        // A throwaway key: this state never reads or writes a secret.
        let secrets = SecretKeys::parse(&SecretKeys::generate_spec("offline"))
            .expect("a generated key parses");
        AppState::new(PrimaryPool::direct(pool), Settings::default(), secrets)
    }
}
