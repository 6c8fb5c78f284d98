//! What every handler and worker shares. Cheap to clone.

use std::sync::Arc;

use sqlx::PgPool;

pub use crate::config::Settings;
use crate::{
    auth::AuthCache,
    cache::Caches,
    horizon::Horizons,
    stream::{Hub, HubLimits},
};

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub settings: Arc<Settings>,
    pub auth_cache: Arc<AuthCache>,
    pub caches: Arc<Caches>,
    /// The newest per-tenant feed horizons, shared by every reader.
    pub horizons: Arc<Horizons>,
    /// This instance's live streams.
    pub stream: Arc<Hub>,
}

impl AppState {
    pub fn new(pool: PgPool, settings: Settings) -> Self {
        let limits = HubLimits {
            max_connections: settings.stream.stream_max_connections,
            max_per_user: settings.stream.max_per_user(),
            buffer: settings.stream.buffer(),
        };
        AppState {
            pool,
            settings: Arc::new(settings),
            auth_cache: Arc::new(AuthCache::default()),
            caches: Arc::new(Caches::default()),
            horizons: Arc::new(Horizons::default()),
            stream: Arc::new(Hub::new(limits)),
        }
    }

    /// A state whose pool never connects: enough to build the OpenAPI document.
    pub fn offline() -> Self {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://offline.invalid/tidings")
            .expect("a constant URL parses");
        AppState::new(pool, Settings::default())
    }
}
