//! What every handler and worker shares. Cheap to clone.

use std::sync::Arc;

use sqlx::PgPool;

pub use crate::config::Settings;
use crate::{auth::AuthCache, cache::Caches};

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub settings: Arc<Settings>,
    pub auth_cache: Arc<AuthCache>,
    pub caches: Arc<Caches>,
}

impl AppState {
    pub fn new(pool: PgPool, settings: Settings) -> Self {
        AppState {
            pool,
            settings: Arc::new(settings),
            auth_cache: Arc::new(AuthCache::default()),
            caches: Arc::new(Caches::default()),
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
