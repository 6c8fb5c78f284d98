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

// Shared with the bench (bench/src/main.rs), whose PostgreSQL takes a port
// of its checkout's own the same way.
#[path = "checkout_port.rs"]
mod checkout_port;
pub use checkout_port::checkout_port;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster")
}

/// Runs `scripts/cluster ARGS`; its stdout, or an error with all it printed.
async fn run_script(args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = Command::new(script());
    cmd.args(args);
    let output = tokio::task::spawn_blocking(move || cmd.output())
        .await?
        .context("running scripts/cluster")?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "scripts/cluster {args:?} failed:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(stdout)
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
        let port = self.port.to_string();
        let mut all = args.to_vec();
        all.extend(["--name", self.name, "--port", &port]);
        run_script(&all).await.map(drop)
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

/// The highly available topology of `scripts/cluster --ha` (three PostgreSQL
/// nodes under Patroni, etcd, HAProxy in front of the primary) on ports of
/// this checkout's own, for the failover tests, which kill its nodes. `up`
/// restarts what a test killed; `scripts/test` stops it after its run.
pub struct HaCluster;

/// What `scripts/cluster up|status --ha` prints on its last line.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct HaTopology {
    pub database_url: String,
    pub nodes: Vec<HaNode>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct HaNode {
    pub name: String,
    /// `primary`, `sync_standby`, `async_standby` or `down`.
    pub role: String,
    pub port: u16,
    /// The postmaster.
    pub pid: Option<u32>,
    /// Its Patroni, which would restart a postmaster killed alone.
    pub patroni_pid: Option<u32>,
}

impl HaTopology {
    /// The node in `role`, if one is.
    pub fn node(&self, role: &str) -> Option<&HaNode> {
        self.nodes.iter().find(|n| n.role == role)
    }

    /// The maintenance database, through HAProxy (wherever the primary is).
    pub fn admin_url(&self) -> String {
        replace_database(&self.database_url, "postgres")
    }
}

impl HaCluster {
    pub const NAME: &'static str = "test-ha";

    /// P..P+8 (scripts/ha): a port of this checkout's own, apart from the
    /// other clusters' (`TIDINGS_TEST_HA_PORT` overrides it).
    pub fn port() -> u16 {
        std::env::var("TIDINGS_TEST_HA_PORT")
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| checkout_port(concat!(env!("CARGO_MANIFEST_DIR"), "/ha")))
    }

    /// Starts (or repairs) the topology and waits until it has a primary and
    /// a synchronous standby.
    pub async fn up() -> HaTopology {
        HaCluster::run("up").await.expect("scripts/cluster up --ha")
    }

    /// The current roles, as Patroni reports them.
    pub async fn status() -> HaTopology {
        HaCluster::run("status")
            .await
            .expect("scripts/cluster status --ha")
    }

    async fn run(command: &'static str) -> anyhow::Result<HaTopology> {
        let port = HaCluster::port().to_string();
        let stdout =
            run_script(&[command, "--ha", "--name", HaCluster::NAME, "--port", &port]).await?;
        let last = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last).with_context(|| format!("the topology line: {last:?}"))
    }
}
