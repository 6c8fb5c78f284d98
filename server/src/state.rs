//! What every handler and worker shares. Cheap to clone.

use std::sync::Arc;

use sqlx::PgPool;

pub use crate::config::Settings;
use crate::{auth::AuthCache, cache::Caches, secrets::SecretKeys};

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub settings: Arc<Settings>,
    pub auth_cache: Arc<AuthCache>,
    pub caches: Arc<Caches>,
    /// The key for secrets at rest (`crate::secrets`).
    pub secrets: Arc<SecretKeys>,
}

impl AppState {
    pub fn new(pool: PgPool, settings: Settings, secrets: SecretKeys) -> Self {
        AppState {
            pool,
            settings: Arc::new(settings),
            auth_cache: Arc::new(AuthCache::default()),
            caches: Arc::new(Caches::default()),
            secrets: Arc::new(secrets),
        }
    }

    /// A state whose pool never connects: enough to build the OpenAPI document.
    pub fn offline() -> Self {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://offline.invalid/tidings")
            .expect("a constant URL parses");
        // A throwaway key: this state never reads or writes a secret.
        let secrets = SecretKeys::parse(&SecretKeys::generate_spec("offline"))
            .expect("a generated key parses");
        AppState::new(pool, Settings::default(), secrets)
    }
}
