//! The benchmark's PostgreSQL: its own database on the bench server, facts about the
//! server for the report, pg_stat_statements and WAL positions for the workloads.

use std::collections::BTreeMap;

use anyhow::Context;
use serde::Serialize;
use sqlx::{postgres::PgPoolOptions, Connection, PgConnection, PgPool};

/// Settings that change what the figures mean; all go into the results JSON.
const REPORTED_SETTINGS: &[&str] = &[
    "shared_buffers",
    "effective_cache_size",
    "work_mem",
    "maintenance_work_mem",
    "synchronous_commit",
    "fsync",
    "wal_level",
    "max_wal_size",
    "checkpoint_timeout",
    "max_connections",
    "random_page_cost",
    "jit",
    "shared_preload_libraries",
    "autovacuum",
    "track_counts",
    "autovacuum_naptime",
    "autovacuum_max_workers",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_cost_delay",
];

#[derive(Debug, Clone)]
pub struct Target {
    pub admin_url: String,
    pub url: String,
    pub database: String,
    pub host: String,
    pub port: u16,
    pub user: String,
}

impl Target {
    /// `admin_url` points at any database of the server; the bench uses `database`.
    pub fn new(admin_url: &str, database: &str) -> anyhow::Result<Target> {
        let parsed = url::Url::parse(admin_url).context("parsing the bench PostgreSQL URL")?;
        let mut url = parsed.clone();
        url.set_path(&format!("/{database}"));
        Ok(Target {
            admin_url: admin_url.to_string(),
            url: url.to_string(),
            database: database.to_string(),
            host: parsed.host_str().unwrap_or("127.0.0.1").to_string(),
            port: parsed.port().unwrap_or(5432),
            user: if parsed.username().is_empty() {
                "postgres".into()
            } else {
                parsed.username().to_string()
            },
        })
    }

    /// Drops and recreates the bench database, with pg_stat_statements in it.
    pub async fn recreate(&self) -> anyhow::Result<()> {
        let mut admin = PgConnection::connect(&self.admin_url)
            .await
            .context("connecting to the bench PostgreSQL")?;
        require_autovacuum(&mut admin).await?;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.database
        ))
        .execute(&mut admin)
        .await?;
        sqlx::query(&format!("CREATE DATABASE {}", self.database))
            .execute(&mut admin)
            .await?;
        admin.close().await.ok();
        let mut conn = self.connect().await?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&mut conn)
            .await
            .context("pg_stat_statements must be in shared_preload_libraries (scripts/bench starts such a server)")?;
        Ok(())
    }

    pub async fn connect(&self) -> anyhow::Result<PgConnection> {
        PgConnection::connect(&self.url)
            .await
            .with_context(|| format!("connecting to {}", self.database))
    }

    pub async fn pool(&self, size: u32) -> anyhow::Result<PgPool> {
        Ok(PgPoolOptions::new()
            .max_connections(size)
            .connect(&self.url)
            .await?)
    }
}

/// Refuses a server whose autovacuum does not run. Dead tuples, table sizes and
/// everything that depends on them (the drain soak) would then show a server
/// nobody runs: the embedded default and any production server vacuum, and the
/// migrations tune it per table. The shared PostgreSQL of a development machine
/// often has it off; `scripts/bench` starts a private cluster with it on.
async fn require_autovacuum(conn: &mut PgConnection) -> anyhow::Result<()> {
    let (autovacuum, track_counts): (String, String) =
        sqlx::query_as("SELECT current_setting('autovacuum'), current_setting('track_counts')")
            .fetch_one(conn)
            .await?;
    anyhow::ensure!(
        autovacuum == "on" && track_counts == "on",
        "the bench PostgreSQL runs with autovacuum = {autovacuum}, track_counts = {track_counts}: \
         its figures would show no vacuum at all, unlike the embedded default or any production \
         server. Run `scripts/bench` (its private cluster sets autovacuum=on), or turn both on."
    );
    Ok(())
}

#[derive(Debug, Clone, Serialize)]
pub struct PgFacts {
    pub version: String,
    pub server_version_num: i64,
    pub settings: BTreeMap<String, String>,
    /// Per-table storage parameters after the migrations (`reloptions`, e.g. the
    /// autovacuum thresholds migration 0008 sets on `deliveries`), by table.
    pub table_options: BTreeMap<String, Vec<String>>,
}

pub async fn facts(pool: &PgPool) -> anyhow::Result<PgFacts> {
    let version: String = sqlx::query_scalar("SELECT version()")
        .fetch_one(pool)
        .await?;
    let num: String = sqlx::query_scalar("SELECT current_setting('server_version_num')")
        .fetch_one(pool)
        .await?;
    // current_setting() shows units as people write them ("2GB", "30min").
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY($1)")
            .bind(REPORTED_SETTINGS)
            .fetch_all(pool)
            .await?;
    let settings = rows.into_iter().collect();
    let tables: Vec<(String, Vec<String>)> = sqlx::query_as(
        "SELECT c.relname::text, c.reloptions FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
           AND c.reloptions IS NOT NULL
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await?;
    Ok(PgFacts {
        version,
        server_version_num: num.parse().unwrap_or(0),
        settings,
        table_options: tables.into_iter().collect(),
    })
}

/// Current WAL insert position in bytes.
pub async fn wal_lsn(conn: &mut PgConnection) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
            .fetch_one(conn)
            .await?,
    )
}

pub async fn reset_statements(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(pool)
        .await?;
    Ok(())
}

/// One statement's counters since the last reset.
#[derive(Debug, Clone, Serialize)]
pub struct StatementStat {
    pub query: String,
    pub calls: i64,
    pub mean_ms: f64,
    pub rows: i64,
}

/// Statements the server ran (database = the bench database), excluding the
/// harness's own probes, busiest first.
pub async fn statements(pool: &PgPool) -> anyhow::Result<Vec<StatementStat>> {
    let rows: Vec<(String, i64, f64, i64)> = sqlx::query_as(
        "SELECT query, calls, mean_exec_time, rows
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = current_database()
           AND query NOT ILIKE '%pg_stat_statements%'
           AND query NOT ILIKE '%pg_current_wal%'
           AND query NOT IN ('BEGIN', 'COMMIT', 'ROLLBACK')
         ORDER BY calls DESC",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(query, calls, mean_ms, rows)| StatementStat {
            query,
            calls,
            mean_ms,
            rows,
        })
        .collect())
}

/// Statements the server sent per HTTP request, counting BEGIN/COMMIT as round
/// trips too (they are).
pub async fn round_trips(
    pool: &PgPool,
    requests: f64,
) -> anyhow::Result<(f64, Vec<StatementStat>)> {
    let all: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(calls), 0)::bigint
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = current_database()
           AND query NOT ILIKE '%pg_stat_statements%'
           AND query NOT ILIKE '%pg_current_wal%'",
    )
    .fetch_one(pool)
    .await?;
    let stmts = statements(pool).await?;
    Ok((all as f64 / requests.max(1.0), stmts))
}

pub async fn dead_tuples(pool: &PgPool, table: &str) -> anyhow::Result<(i64, i64)> {
    let row: Option<(i64, i64)> =
        sqlx::query_as("SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = $1")
            .bind(table)
            .fetch_optional(pool)
            .await?;
    Ok(row.unwrap_or((0, 0)))
}

/// How often autovacuum has processed `table` (to tell a sawtooth from growth).
pub async fn autovacuum_count(pool: &PgPool, table: &str) -> anyhow::Result<i64> {
    let n: Option<i64> =
        sqlx::query_scalar("SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = $1")
            .bind(table)
            .fetch_optional(pool)
            .await?;
    Ok(n.unwrap_or(0))
}

pub async fn table_exists(pool: &PgPool, table: &str) -> anyhow::Result<bool> {
    Ok(sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .fetch_one(pool)
        .await?)
}
