//! The production-shaped topology of `scripts/cluster` for tests: a primary,
//! two hot standbys and PgBouncer, started once and shared (tests start their
//! own `tidings` processes on it, each on a database of its own).
//!
//! Two clusters, so that breaking one never disturbs the other's tests:
//! [`Cluster::shared`] (never broken on purpose) on `TIDINGS_TEST_CLUSTER_PORT`
//! (default: a port of this checkout, `base_port`) to +3, and
//! [`Cluster::for_failures`] (standbys stopped, paused and promoted, then
//! repaired by `scripts/cluster up`) on +4 to +7. `scripts/test` stops both
//! after its run.

use std::{path::PathBuf, process::Command, time::Duration};

use anyhow::{bail, Context};
use sqlx::{Connection, PgConnection};

use crate::{db::replace_database, TestDb};

pub struct Cluster {
    name: &'static str,
    port: u16,
}

/// `TIDINGS_TEST_CLUSTER_PORT`, or a port of this checkout's own: clusters are
/// found by port, so two checkouts on one machine (a clone beside a CI run)
/// must not share one, or one would stop the other's standbys. Below 32768,
/// outside Linux's ephemeral range (scripts/cluster, `--port`).
fn base_port() -> u16 {
    std::env::var("TIDINGS_TEST_CLUSTER_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| checkout_port(env!("CARGO_MANIFEST_DIR")))
}

/// 20000–31999 in steps of 8 (two clusters of four ports), from the path.
fn checkout_port(path: &str) -> u16 {
    // FNV-1a: stable across builds and Rust versions, unlike `DefaultHasher`.
    let hash = path.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    20000 + (hash % 1500) as u16 * 8
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster")
}

impl Cluster {
    /// The cluster read tests share; up (or repaired) when this returns.
    pub async fn shared() -> Cluster {
        Cluster::up("test-cluster", base_port()).await
    }

    /// The cluster failure tests break and repair; up when this returns.
    pub async fn for_failures() -> Cluster {
        Cluster::up("test-failover", base_port() + 4).await
    }

    async fn up(name: &'static str, port: u16) -> Cluster {
        let cluster = Cluster { name, port };
        cluster
            .run(&["up", "--instances", "0", "--workers", "0"])
            .await
            .expect("scripts/cluster up");
        cluster
    }

    /// Runs `scripts/cluster ARGS` on this cluster; fails with its output.
    pub async fn run(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut cmd = Command::new(script());
        cmd.args(args)
            .args(["--name", self.name, "--port", &self.port.to_string()]);
        let output = tokio::task::spawn_blocking(move || cmd.output())
            .await?
            .context("running scripts/cluster")?;
        if !output.status.success() {
            bail!(
                "scripts/cluster {args:?} failed:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    fn url(port: u16, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/{database}")
    }

    /// The primary's maintenance database.
    pub fn primary_admin(&self) -> String {
        Cluster::url(self.port, "postgres")
    }

    /// Standby `i` (0 or 1) serving `database`.
    pub fn standby(&self, i: usize, database: &str) -> String {
        Cluster::url(self.port + 1 + i as u16, database)
    }

    /// Both standbys, as `TIDINGS_DATABASE_REPLICA_URLS` takes them.
    pub fn replica_urls(&self, database: &str) -> String {
        format!(
            "{},{}",
            self.standby(0, database),
            self.standby(1, database)
        )
    }

    /// PgBouncer (transaction pooling) in front of the primary.
    pub fn pooler(&self, database: &str) -> String {
        Cluster::url(self.port + 3, database)
    }

    /// A fresh database on the primary, once both standbys have replayed its
    /// creation.
    pub async fn database(&self) -> TestDb {
        let db = TestDb::create_on(&self.primary_admin())
            .await
            .expect("database on the cluster");
        self.until_replayed().await;
        db
    }

    /// Waits until every running standby has replayed everything the primary
    /// wrote before this call.
    pub async fn until_replayed(&self) {
        let mut primary = PgConnection::connect(&self.primary_admin())
            .await
            .expect("primary");
        let target: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(&mut primary)
            .await
            .expect("primary position");
        for i in 0..2 {
            let url = replace_database(&self.standby(i, "postgres"), "postgres");
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let replayed: Option<bool> = match PgConnection::connect(&url).await {
                    Ok(mut conn) => {
                        sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn")
                            .bind(&target)
                            .fetch_one(&mut conn)
                            .await
                            .ok()
                            .flatten()
                    }
                    Err(_) => None,
                };
                if replayed == Some(true) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "standby {i} of {} did not replay {target} within 30 s",
                    self.name
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
