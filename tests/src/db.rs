//! A PostgreSQL database of its own for each test.

use anyhow::Context;
use sqlx::{postgres::PgPoolOptions, Connection, PgConnection, PgPool};

/// The PostgreSQL server tests create their databases on:
/// `TIDINGS_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`.
pub fn admin_url() -> String {
    std::env::var("TIDINGS_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// A database of its own for one test; dropped (with FORCE) when the value drops.
pub struct TestDb {
    pub name: String,
    pub url: String,
    /// The server's maintenance database, where it is created and dropped.
    admin: String,
}

impl TestDb {
    pub async fn create() -> anyhow::Result<Self> {
        TestDb::create_on(&admin_url()).await
    }

    /// A database of its own on the server of `admin` (a private cluster).
    pub async fn create_on(admin: &str) -> anyhow::Result<Self> {
        let admin = admin.to_string();
        let name = format!("tidings_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(&admin)
            .await
            .context("connecting to the test PostgreSQL")?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        conn.close().await.ok();
        let url = replace_database(&admin, &name);
        Ok(TestDb { name, url, admin })
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
        let admin = self.admin.clone();
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

/// `url` with its database replaced by `db`.
pub fn replace_database(url: &str, db: &str) -> String {
    let mut parsed = url::Url::parse(url).expect("valid database URL");
    parsed.set_path(&format!("/{db}"));
    parsed.to_string()
}
