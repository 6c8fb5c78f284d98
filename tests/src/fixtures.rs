//! Setups several test files share, made of API calls only.

use serde_json::json;
use sqlx::PgPool;

use crate::{client::TenantApi, AppOptions, TestApp, TestDb, TestTenant};

/// Puts `user` with this email address (or none), named after its id.
pub async fn user_with_email(api: &TenantApi<'_>, user: &str, email: Option<&str>) {
    api.put_user(user, &json!({"email": email, "display_name": user}))
        .expect(200)
        .await;
}

/// A server on a fresh database with one tenant: how most tests begin.
pub struct TenantFixture {
    pub app: TestApp,
    pub db: TestDb,
    /// For [`crate::sql`].
    pub pool: PgPool,
    pub tenant: TestTenant,
}

impl TenantFixture {
    pub async fn spawn() -> TenantFixture {
        TenantFixture::spawn_with(AppOptions::default()).await
    }

    pub async fn spawn_with(opts: AppOptions) -> TenantFixture {
        let (app, db) = TestApp::spawn_with(opts).await.expect("spawn");
        let pool = db.pool().await.expect("pool");
        let tenant = app.create_tenant().await;
        TenantFixture {
            app,
            db,
            pool,
            tenant,
        }
    }

    /// The server-to-server API with the tenant's key.
    pub fn api(&self) -> TenantApi<'_> {
        self.app.tenant(&self.tenant)
    }

    /// A one-hour token for `user` of the tenant.
    pub async fn token(&self, user: &str) -> String {
        self.app.user_token(&self.tenant, user).await
    }
}
