//! A running `tidings serve` on a fresh database, and the credentials tests use.

use std::{process::Command, time::Duration};

use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};

use crate::{process::tidings_bin, TestDb, TidingsProcess};

/// The admin token every test server runs with.
pub const ADMIN_TOKEN: &str = "test-admin-token-of-at-least-32-bytes";

/// The `/metrics` token every test server runs with (`TIDINGS_METRICS_TOKEN`),
/// so the API listener serves `/metrics` behind it; [`TestApp::scrape`].
pub const METRICS_TOKEN: &str = "test-metrics-token-of-at-least-32-bytes";

/// Seconds since the Unix epoch, the clock of a user token's `iat`, `nbf`
/// and `exp`.
pub fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A user token signed by hand with `secret` (HS256, no `kid`), carrying
/// `claims` as given: for tokens the API would not mint.
pub fn jwt(secret: &str, claims: Value) -> String {
    jwt_with_kid(secret, None, claims)
}

/// [`jwt`] with the header's `kid` (which signing secret verifies it).
pub fn jwt_with_kid(secret: &str, kid: Option<&str>, claims: Value) -> String {
    let header = Header {
        kid: kid.map(str::to_owned),
        ..Header::default()
    };
    encode(
        &header,
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("encodable claims")
}

/// A tenant created through the admin API, with its credentials.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct TestTenant {
    #[serde(rename = "tenant_id")]
    pub id: String,
    pub api_key: String,
    pub api_key_id: String,
    pub signing_secret: String,
}

impl TestTenant {
    /// The tenant id as the server's library types want it.
    pub fn uuid(&self) -> uuid::Uuid {
        self.id.parse().expect("tenant id is a UUID")
    }
}

/// How to start `tidings serve`: extra arguments and environment on top of the
/// defaults.
#[derive(Default, Clone)]
pub struct AppOptions {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// When true, DATABASE_URL is not passed (the embedded default).
    pub no_database_url: bool,
    /// Working directory of the process (the embedded default's `./.tidings` is
    /// relative to it); the test's own when `None`.
    pub cwd: Option<std::path::PathBuf>,
}

impl AppOptions {
    /// Options that only add environment variables.
    pub fn env<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        AppOptions {
            env: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ..Default::default()
        }
    }
}

/// A running `tidings serve`, reached over HTTP through [`crate::client`].
/// Killed (SIGKILL) on drop unless its process is stopped first.
pub struct TestApp {
    pub(crate) base: String,
    pub(crate) http: reqwest::Client,
    pub process: TidingsProcess,
}

impl TestApp {
    /// A fresh database and a server on it.
    pub async fn spawn() -> anyhow::Result<(TestApp, TestDb)> {
        TestApp::spawn_with(AppOptions::default()).await
    }

    /// A fresh database and a server on it, started with `opts`.
    pub async fn spawn_with(opts: AppOptions) -> anyhow::Result<(TestApp, TestDb)> {
        let db = TestDb::create().await?;
        let app = TestApp::spawn_on(&db.url, opts).await?;
        Ok((app, db))
    }

    /// A server on an existing database (a second instance, a restart, a
    /// private cluster).
    pub async fn spawn_on(database_url: &str, opts: AppOptions) -> anyhow::Result<TestApp> {
        let mut cmd = Command::new(tidings_bin());
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(&opts.args);
        cmd.env_remove("DATABASE_URL")
            .env_remove("TIDINGS_DATA_DIR");
        if let Some(dir) = &opts.cwd {
            cmd.current_dir(dir);
        }
        if !opts.no_database_url {
            cmd.env("DATABASE_URL", database_url);
        }
        cmd.env("TIDINGS_ADMIN_TOKEN", ADMIN_TOKEN);
        // Tests go at their own pace, much faster than one client would: rate
        // limits are off unless a test turns them on (tests/tests/limits.rs).
        cmd.env("TIDINGS_RATE_LIMITS", "false");
        cmd.env("TIDINGS_METRICS_TOKEN", METRICS_TOKEN);
        cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
        let (process, base) = TidingsProcess::start(cmd, "tidings listening on ").await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(TestApp {
            base,
            http,
            process,
        })
    }

    /// `http://127.0.0.1:PORT`, for clients of its own (concurrent readers).
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The address of `path` on this server (for requests the typed client
    /// cannot make, such as reading a stream as it arrives).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The Prometheus text of `GET /metrics`, scraped with [`METRICS_TOKEN`].
    pub async fn scrape(&self) -> String {
        self.raw(reqwest::Method::GET, "/metrics")
            .bearer(METRICS_TOKEN)
            .reply(200)
            .await
            .text
    }

    /// Creates a tenant through `POST /v1/admin/tenants`.
    pub async fn create_tenant(&self) -> TestTenant {
        self.admin()
            .create_tenant(&json!({"name": "test tenant"}))
            .expect(201)
            .await
    }

    /// Mints a one-hour user token through `POST /v1/user-tokens`.
    pub async fn user_token(&self, tenant: &TestTenant, user_id: &str) -> String {
        let minted = self
            .tenant(tenant)
            .create_user_token(&json!({"user_id": user_id, "ttl_seconds": 3600}))
            .expect(201)
            .await;
        minted["token"].as_str().expect("token").to_string()
    }
}
