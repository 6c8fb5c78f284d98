//! What every handler and worker shares. Cheap to clone.

use std::sync::Arc;

use sqlx::PgPool;

use crate::{auth::AuthCache, cache::Caches};

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub settings: Arc<Settings>,
    pub auth_cache: Arc<AuthCache>,
    pub caches: Arc<Caches>,
}

/// Runtime settings derived from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    pub max_body_bytes: usize,
    pub outbox: crate::outbox::OutboxConfig,
    /// The operator's bearer token for /v1/admin.
    pub admin_token: String,
    /// Alerts, idempotency, webhook endpoints and the NATS inbox.
    pub alerts: crate::alerts::AlertsConfig,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_body_bytes: 64 * 1024,
            outbox: Default::default(),
            admin_token: String::new(),
            alerts: crate::alerts::AlertsConfig::default(),
        }
    }
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
