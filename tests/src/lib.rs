//! Test harness: each test gets a fresh, migrated PostgreSQL database and a real
//! `tidings serve` process on a free port, and talks to it over HTTP.
//!
//! The database server comes from `TIDINGS_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); `scripts/test` makes sure one runs.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context};
use sqlx::{postgres::PgPoolOptions, Connection, PgConnection, PgPool};

/// The PostgreSQL server tests create their databases on.
pub fn admin_url() -> String {
    std::env::var("TIDINGS_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// The `tidings` binary of this build: `TIDINGS_BIN`, or `target/<profile>/tidings`
/// next to the test executable (`target/<profile>/deps/…`).
pub fn tidings_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("TIDINGS_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let bin = profile_dir.join("tidings");
    assert!(
        bin.exists(),
        "{} is missing: build it first with `cargo build -p tidings-server` (scripts/test does)",
        bin.display()
    );
    bin
}

/// A database of its own for one test; dropped (with FORCE) when the value drops.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn create() -> anyhow::Result<Self> {
        let admin = admin_url();
        let name = format!("tidings_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(&admin)
            .await
            .context("connecting to the test PostgreSQL")?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        conn.close().await.ok();
        let url = replace_database(&admin, &name);
        Ok(TestDb { name, url })
    }

    pub async fn pool(&self) -> anyhow::Result<PgPool> {
        Ok(PgPoolOptions::new()
            .max_connections(8)
            .connect(&self.url)
            .await?)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = admin_url();
        let name = self.name.clone();
        // Drop runs inside the test's runtime; use a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&admin).await.ok()?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

fn replace_database(url: &str, db: &str) -> String {
    let mut parsed = url::Url::parse(url).expect("valid database URL");
    parsed.set_path(&format!("/{db}"));
    parsed.to_string()
}

/// The admin token every test server runs with.
pub const ADMIN_TOKEN: &str = "test-admin-token";

/// A tenant created through the admin API, with its credentials.
#[derive(Debug, Clone)]
pub struct TestTenant {
    pub id: String,
    pub api_key: String,
    pub api_key_id: String,
    pub signing_secret: String,
}

/// A running `tidings serve`. Killed (SIGKILL) on drop unless stopped first.
pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    process: TidingsProcess,
}

/// How to start the binary: extra arguments and environment on top of the defaults.
#[derive(Default, Clone)]
pub struct AppOptions {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// When false, DATABASE_URL is not passed (the embedded default).
    pub no_database_url: bool,
    /// Working directory of the process (the embedded default's `./.tidings` is
    /// relative to it); the test's own when `None`.
    pub cwd: Option<PathBuf>,
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
        cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
        let (process, base) = TidingsProcess::start(cmd, "tidings listening on ").await?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(TestApp {
            base,
            client,
            process,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Creates a tenant through `POST /v1/admin/tenants`.
    pub async fn create_tenant(&self) -> TestTenant {
        let resp = self
            .client
            .post(self.url("/v1/admin/tenants"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&serde_json::json!({"name": "test tenant"}))
            .send()
            .await
            .expect("create tenant");
        assert_eq!(
            resp.status(),
            201,
            "create tenant: {}",
            resp.text().await.unwrap_or_default()
        );
        let body: serde_json::Value = resp.json().await.expect("tenant JSON");
        let field = |k: &str| {
            body[k]
                .as_str()
                .unwrap_or_else(|| panic!("tenant response lacks {k}: {body}"))
                .to_string()
        };
        TestTenant {
            id: field("tenant_id"),
            api_key: field("api_key"),
            api_key_id: field("api_key_id"),
            signing_secret: field("signing_secret"),
        }
    }

    /// Mints a one-hour user token through `POST /v1/user-tokens`.
    pub async fn user_token(&self, tenant: &TestTenant, user_id: &str) -> String {
        let resp = self
            .client
            .post(self.url("/v1/user-tokens"))
            .bearer_auth(&tenant.api_key)
            .json(&serde_json::json!({"user_id": user_id, "ttl_seconds": 3600}))
            .send()
            .await
            .expect("mint user token");
        assert_eq!(
            resp.status(),
            201,
            "mint user token: {}",
            resp.text().await.unwrap_or_default()
        );
        let body: serde_json::Value = resp.json().await.expect("token JSON");
        body["token"].as_str().expect("token").to_string()
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// What the server logged so far (for assertion messages).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// SIGTERM, then wait for a clean exit; returns the exit status.
    pub async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        self.process.terminate().await
    }

    /// SIGKILL: a crash, with no chance to clean up.
    pub fn kill(&mut self) {
        self.process.kill()
    }
}

/// A `tidings` child process with its stderr in a log file. Killed (SIGKILL)
/// on drop unless stopped first.
struct TidingsProcess {
    child: Option<Child>,
    stderr_log: PathBuf,
}

impl TidingsProcess {
    /// Starts `cmd` and waits (up to 60 s) for the stdout line that begins with
    /// `announcement`; returns the rest of that line.
    async fn start(mut cmd: Command, announcement: &'static str) -> anyhow::Result<(Self, String)> {
        let stderr_log = std::env::temp_dir().join(format!(
            "tidings-test-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_log)?);
        let mut child = cmd.spawn().context("spawning tidings")?;
        let stdout = child.stdout.take().context("stdout")?;
        // Read the announcement on a blocking thread with a deadline.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(rest) = line.strip_prefix(announcement) {
                    let _ = tx.send(rest.to_string());
                    break;
                }
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let waited =
            tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60))).await?;
        let mut process = TidingsProcess {
            child: Some(child),
            stderr_log,
        };
        match waited {
            Ok(rest) => Ok((process, rest)),
            Err(_) => {
                process.kill();
                bail!(
                    "tidings did not print {announcement:?} within 60 s; its log:\n{}",
                    process.log()
                );
            }
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        tokio::task::spawn_blocking(move || child.wait())
            .await?
            .context("waiting for tidings")
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TidingsProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.stderr_log);
    }
}

/// Asserts a response is an RFC 9457 problem with the given status and returns its body.
pub async fn expect_problem(resp: reqwest::Response, status: u16) -> serde_json::Value {
    let got = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(got, status, "expected {status}, got {got}: {body}");
    assert!(
        content_type.starts_with("application/problem+json"),
        "expected a problem body, got content-type {content_type:?}: {body}"
    );
    let json: serde_json::Value = serde_json::from_str(&body).expect("problem body is JSON");
    assert_eq!(json["status"], status, "problem status field: {json}");
    assert!(
        json["type"].as_str().is_some_and(|t| !t.is_empty()),
        "problem type: {json}"
    );
    assert!(json["title"].as_str().is_some(), "problem title: {json}");
    assert!(json["code"].as_str().is_some(), "problem code: {json}");
    json
}

/// A running `tidings worker` (the outbox workers alone). Killed (SIGKILL) on
/// drop unless stopped first.
pub struct TestWorker {
    process: TidingsProcess,
}

impl TestWorker {
    /// Starts `tidings worker` on `database_url` with extra environment and
    /// waits until it announces itself (migrations applied, loops running).
    pub async fn spawn(database_url: &str, env: &[(String, String)]) -> anyhow::Result<TestWorker> {
        let mut cmd = Command::new(tidings_bin());
        cmd.arg("worker").env("DATABASE_URL", database_url);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let (process, _) = TidingsProcess::start(cmd, "tidings worker running").await?;
        Ok(TestWorker { process })
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// What the worker logged so far (for assertion messages).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// SIGTERM, then wait for a clean exit; returns the exit status.
    pub async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        self.process.terminate().await
    }

    /// SIGKILL: a crash, with no chance to record anything.
    pub fn kill(&mut self) {
        self.process.kill()
    }
}
