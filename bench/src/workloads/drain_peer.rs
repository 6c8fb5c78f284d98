//! Workload `drain-peer`: the outbox's database work against pgmq,
//! the best-known PostgreSQL queue, in one run.
//!
//! Systems, interleaved (their order rotates every round) at 1, 2 and 4 loops:
//! - **pgmq read + archive** and **pgmq read + delete**: pgmq's SQL as the
//!   `pgmq` crate embeds it, installed into the bench database without the C
//!   extension, driven by the crate's own client (`read_batch`,
//!   `archive_batch`, `delete_batch`) with a 60 s visibility timeout;
//! - **Tidings claim + complete**: the worker's own statements
//!   (bench/sql/outbox_claim.sql and outbox_complete.sql, kept equal to
//!   server/src/store/outbox.rs by a test), lease, attempt guard and per-tenant
//!   fairness included, rows decoded into the server's `ClaimedDelivery`; the
//!   completion moves a `sent` delivery to `deliveries_sent` (migration 0022);
//! - **Tidings, sent rows updated in place (before the move)**: today's claim
//!   with the completion before migration 0022 (bench/sql/outbox_complete_v2.sql),
//!   on a copy of the migrated `deliveries` alone: the same-run "before" of
//!   the move. Until the move landed this place held **Tidings, sent rows
//!   moved out (experiment)** (the move, then not what the server ran), runs
//!   up to be87dcc540 **Tidings, claim planned per call** (the claim of
//!   commit 85dc95a, bench/sql/outbox_claim_v2.sql, with the completion of
//!   then), and the run of commit 3956017 **Tidings, pages filled to half**;
//!   their plots and tables still draw them.
//! - **Tidings before the lean outbox**: the same-run "before": the claim and
//!   completion as the server ran them before migration 0015
//!   (bench/sql/outbox_claim_v0.sql, outbox_complete_v0.sql) on a
//!   `deliveries` with the indexes and storage settings of then
//!   (`BEFORE_SCHEMA`).
//!
//! The Tidings tables of a run live in their own schema (`peer_tidings`
//! (with `deliveries_sent`), `peer_in_place`:
//! `deliveries` and `alerts` copied from `public` with their indexes,
//! constraints and storage settings; `peer_before`: the table as migrations
//! 0005–0013 left it) and the drain's connections put it first on their
//! `search_path`, so the statement text is exactly the server's while every
//! run starts from fresh tables, like pgmq's fresh queue.
//!
//! Every run: fresh tables, `tier.peer_backlog` messages with the same ~300-byte
//! JSON payload (for Tidings: one alert per delivery, so each message carries its
//! own payload as in pgmq), VACUUM ANALYZE, CHECKPOINT (so every system pays the
//! full-page images of its first touch alike), then `n` loops, each on its own
//! connection, read/claim a batch of 100 and archive/delete/complete it until
//! nothing is left. Measured per run: messages/s; database execution time of the
//! statements that take and finish work (pg_stat_statements); WAL bytes (flush
//! LSN before and after); WAL records by type over that range (`pg_waldump
//! --stats=record`): B-tree insertions, heap inserts, updates, HOT updates,
//! deletes; dead tuples right after the run; table and index sizes.
//!
//! Driver: sqlx for every system (extended protocol with prepared statements,
//! as `pgbench -M prepared`), since pgbench cannot carry a claim's rows into the
//! completion's arrays without an extra statement that changes what is measured.

use std::{collections::BTreeMap, path::Path, str::FromStr, sync::Arc, time::Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use sqlx::{postgres::PgConnectOptions, ConnectOptions, Connection, PgConnection, PgPool};
use uuid::Uuid;

use super::{drain::OutboxStatements, Ctx};
use crate::{
    plots,
    report::{Ratio, Table, WorkloadResult},
    seed::tenant_uuid,
    stats::Spread,
};

/// The tenant whose deliveries are drained (every tenant still costs the
/// claim its fairness probe).
const TENANT: i64 = 1;
/// The worker's defaults (server/src/app/config.rs): batch 100, lease 60 s.
const BATCH: i32 = 100;
const LEASE_MS: i64 = 60_000;
const WORKERS: [usize; 3] = [1, 2, 4];
const QUEUE: &str = "peer";
const LOAD_CHUNK: i64 = 20_000;
/// `deliveries` as migrations 0005–0013 left it (before the lean outbox's 0015):
/// its indexes and its storage settings (0008), applied to a copy of the
/// migrated table's columns. `{s}` is the schema.
pub const BEFORE_SCHEMA: &[&str] = &[
    "ALTER TABLE {s}.deliveries ADD PRIMARY KEY (tenant_id, id)",
    "ALTER TABLE {s}.deliveries ADD UNIQUE NULLS NOT DISTINCT (tenant_id, notification_key, endpoint_id)",
    "CREATE INDEX deliveries_by_alert ON {s}.deliveries (tenant_id, alert_id)",
    "CREATE INDEX deliveries_dead ON {s}.deliveries (tenant_id, id) WHERE status = 'dead'",
    "CREATE INDEX deliveries_claimable ON {s}.deliveries (tenant_id, next_attempt_at)
         WHERE status IN ('pending', 'retrying', 'sending')",
    "CREATE INDEX deliveries_by_status ON {s}.deliveries (tenant_id, status, id)",
    "ALTER TABLE {s}.deliveries SET (autovacuum_vacuum_scale_factor = 0.01,
         autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0,
         autovacuum_analyze_scale_factor = 0.02)",
];
/// `{schema}.deliveries` as migrated: columns, indexes and the migrations'
/// storage settings (0008's autovacuum trigger, 0015's fillfactor), which
/// `LIKE` does not copy.
pub async fn create_deliveries_as_migrated(
    conn: &mut PgConnection,
    schema: &str,
) -> anyhow::Result<()> {
    sqlx::query(&format!(
        "CREATE TABLE {schema}.deliveries (LIKE public.deliveries INCLUDING ALL)"
    ))
    .execute(&mut *conn)
    .await?;
    let reloptions: Option<String> = sqlx::query_scalar(
        "SELECT array_to_string(reloptions, ', ') FROM pg_class
         WHERE oid = 'public.deliveries'::regclass",
    )
    .fetch_one(&mut *conn)
    .await?;
    if let Some(opts) = reloptions.filter(|o| !o.is_empty()) {
        sqlx::query(&format!("ALTER TABLE {schema}.deliveries SET ({opts})"))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// `{schema}.deliveries` as before 0015: the migrated columns (0015 added
/// none) with [`BEFORE_SCHEMA`]'s indexes and settings.
pub async fn create_deliveries_before_0015(
    conn: &mut PgConnection,
    schema: &str,
) -> anyhow::Result<()> {
    sqlx::query(&format!(
        "CREATE TABLE {schema}.deliveries (LIKE public.deliveries
           INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY
           INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION)"
    ))
    .execute(&mut *conn)
    .await?;
    for stmt in BEFORE_SCHEMA {
        sqlx::query(&stmt.replace("{s}", schema))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Set on the drain's connections, to wait for them to be gone (their
/// statistics flushed) before reading pg_stat_user_tables.
const APP_NAME: &str = "tidings-bench-peer";

/// One message's payload, a pure function of `g`: an overdue-invoice webhook
/// of about 300 bytes as JSON text.
const PAYLOAD_SQL: &str = "jsonb_build_object(
    'invoice', 'INV-' || lpad(g::text, 9, '0'),
    'customer', jsonb_build_object('id', 'cus_' || substr(md5(g::text), 1, 16),
                                   'name', 'Customer ' || (g % 9973),
                                   'email', 'billing+' || (g % 9973) || '@example.com'),
    'amount_due', round(((g * 7919) % 1000000) / 100.0, 2),
    'currency', 'EUR',
    'due_date', '2026-11-30',
    'lines', 1 + g % 7,
    'url', 'https://billing.example.com/invoices/INV-' || lpad(g::text, 9, '0') || '?pay=1')";

/// Alert `g`'s id as the server makes them (`Uuid::now_v7`): time-ordered,
/// here one millisecond apart from a fixed start, the rest random, so the
/// alerts' keys and `deliveries_by_alert_recipient` grow at their right edge
/// as the server's do (random ids put each message on its own leaf).
pub const ALERT_ID_SQL: &str = "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        placing substring(int8send(1764547200000 + g) from 3) from 1 for 6), 52, 1), 53, 1),
        'hex')::uuid";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    PgmqArchive,
    PgmqDelete,
    Tidings,
    /// The statements of migration 0015, two per batch (no longer run; kept
    /// so that the plots of earlier runs can be redrawn).
    Previous,
    /// The claim of 85dc95a (batch bound as `$1`: planned at every call),
    /// the same-run before of the claim with its batch in its text.
    PlannedPerCall,
    /// Today's statements on `deliveries` filled to half while `deliveries`
    /// was filled to a third (commit 3956017, reverted): run only by
    /// 3956017's tier M run, kept so that its plots can be redrawn.
    HalfFull,
    Before,
    /// Today's claim with a completion that moves `sent` rows out of the hot
    /// table, the experiment before it landed as today's (migration 0022;
    /// its statement is bench/sql/outbox_complete.sql's). No longer run; kept
    /// so that its runs' plots can be redrawn.
    MovedOut,
    /// Today's claim with the completion before the move (sent rows updated
    /// in place, bench/sql/outbox_complete_v2.sql): the move's same-run before.
    InPlace,
}

impl System {
    /// Ours first, then the peer baselines (legend and bar order).
    pub const ALL: [System; 9] = [
        System::Tidings,
        System::MovedOut,
        System::InPlace,
        System::HalfFull,
        System::PlannedPerCall,
        System::Previous,
        System::Before,
        System::PgmqArchive,
        System::PgmqDelete,
    ];
    /// The systems a run measures.
    pub const RUN: [System; 5] = [
        System::Tidings,
        System::InPlace,
        System::Before,
        System::PgmqArchive,
        System::PgmqDelete,
    ];

    pub fn key(self) -> &'static str {
        match self {
            System::PgmqArchive => "pgmq_archive",
            System::PgmqDelete => "pgmq_delete",
            System::Tidings => "tidings",
            System::Previous => "tidings_0015",
            System::PlannedPerCall => "tidings_v2",
            System::HalfFull => "tidings_fillfactor_50",
            System::Before => "tidings_before",
            System::MovedOut => "tidings_sent_moved",
            System::InPlace => "tidings_in_place",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            System::PgmqArchive => "pgmq read + archive",
            System::PgmqDelete => "pgmq read + delete",
            System::Tidings => "Tidings claim + complete",
            System::Previous => "Tidings 0015 statements",
            System::PlannedPerCall => "Tidings, claim planned per call",
            System::HalfFull => "Tidings, pages filled to half",
            System::Before => "Tidings before the lean outbox",
            System::MovedOut => "Tidings, sent rows moved out (experiment)",
            System::InPlace => "Tidings, sent rows updated in place (before the move)",
        }
    }

    fn schema(self) -> &'static str {
        match self {
            System::PgmqArchive | System::PgmqDelete => "pgmq",
            System::Tidings => "peer_tidings",
            System::Previous => "peer_0015",
            System::PlannedPerCall => "peer_v2",
            System::HalfFull => "peer_half_full",
            System::Before => "peer_before",
            System::MovedOut => "peer_moved",
            System::InPlace => "peer_in_place",
        }
    }

    /// The table the loops read and update.
    fn hot_table(self) -> String {
        match self {
            System::PgmqArchive | System::PgmqDelete => format!("pgmq.q_{QUEUE}"),
            System::Tidings
            | System::Previous
            | System::PlannedPerCall
            | System::HalfFull
            | System::Before
            | System::MovedOut
            | System::InPlace => {
                format!("{}.deliveries", self.schema())
            }
        }
    }

    /// Every table holding this system's messages (pgmq's archive; Tidings'
    /// alerts, where the payload lives; `deliveries_sent` where sent rows move).
    fn tables(self) -> Vec<String> {
        match self {
            System::PgmqArchive | System::PgmqDelete => {
                vec![self.hot_table(), format!("pgmq.a_{QUEUE}")]
            }
            System::Tidings | System::MovedOut => vec![
                self.hot_table(),
                format!("{}.deliveries_sent", self.schema()),
                format!("{}.alerts", self.schema()),
            ],
            System::Previous
            | System::PlannedPerCall
            | System::HalfFull
            | System::Before
            | System::InPlace => vec![self.hot_table(), format!("{}.alerts", self.schema())],
        }
    }

    /// Whether its completion moves sent rows to `deliveries_sent`.
    fn moves_sent(self) -> bool {
        matches!(self, System::Tidings | System::MovedOut)
    }
}

/// Installs pgmq's SQL (the crate's embedded scripts; no C extension needed).
async fn install_pgmq(pool: &PgPool) -> anyhow::Result<String> {
    let queue = pgmq::PGMQueueExt::new_with_pool(pool.clone()).await;
    queue
        .install_sql_from_embedded()
        .await
        .context("installing pgmq's SQL from the pgmq crate")?;
    let version = pgmq::install::installed_version(pool)
        .await
        .context("reading pgmq's installed version")?;
    Ok(version.map(|v| v.to_string()).unwrap_or_else(|| "?".into()))
}

/// Fresh tables holding `backlog` pending messages, vacuumed, analysed and
/// checkpointed.
async fn prepare(
    pool: &PgPool,
    system: System,
    backlog: i64,
    endpoint: Uuid,
) -> anyhow::Result<()> {
    match system {
        System::PgmqArchive | System::PgmqDelete => {
            let exists: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pgmq.meta WHERE queue_name = $1)")
                    .bind(QUEUE)
                    .fetch_one(pool)
                    .await?;
            if exists {
                sqlx::query("SELECT pgmq.drop_queue($1)")
                    .bind(QUEUE)
                    .execute(pool)
                    .await?;
            }
            sqlx::query("SELECT pgmq.create($1)")
                .bind(QUEUE)
                .execute(pool)
                .await?;
            let mut lo = 0;
            while lo < backlog {
                let hi = (lo + LOAD_CHUNK).min(backlog) - 1;
                sqlx::query(&format!(
                    "SELECT count(*) FROM pgmq.send_batch($1,
                        ARRAY(SELECT {PAYLOAD_SQL} FROM generate_series($2::bigint, $3::bigint) g))"
                ))
                .bind(QUEUE)
                .bind(lo)
                .bind(hi)
                .execute(pool)
                .await
                .context("loading the pgmq queue")?;
                lo = hi + 1;
            }
        }
        System::Tidings
        | System::Previous
        | System::PlannedPerCall
        | System::HalfFull
        | System::Before
        | System::MovedOut
        | System::InPlace => {
            let s = system.schema();
            let mut tx = pool.begin().await?;
            for stmt in [
                format!("DROP SCHEMA IF EXISTS {s} CASCADE"),
                format!("CREATE SCHEMA {s}"),
                format!("CREATE TABLE {s}.alerts (LIKE public.alerts INCLUDING ALL)"),
                format!(
                    "ALTER TABLE {s}.alerts ADD FOREIGN KEY (tenant_id)
                     REFERENCES public.tenants (id) ON DELETE CASCADE"
                ),
            ] {
                sqlx::query(&stmt).execute(&mut *tx).await?;
            }
            if system != System::Before {
                create_deliveries_as_migrated(&mut tx, s).await?;
            } else {
                create_deliveries_before_0015(&mut tx, s).await?;
            }
            if system.moves_sent() {
                // As migrated: columns, keys, indexes (migration 0022).
                sqlx::query(&format!(
                    "CREATE TABLE {s}.deliveries_sent (LIKE public.deliveries_sent INCLUDING ALL)"
                ))
                .execute(&mut *tx)
                .await?;
            }
            // Deliveries referenced tenants until migration 0020 dropped the
            // key; only the arm of before 0015 keeps it, as its schema had it.
            if system == System::Before {
                sqlx::query(&format!(
                    "ALTER TABLE {s}.deliveries ADD FOREIGN KEY (tenant_id)
                     REFERENCES public.tenants (id) ON DELETE CASCADE"
                ))
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            let mut lo = 0;
            while lo < backlog {
                let hi = (lo + LOAD_CHUNK).min(backlog) - 1;
                sqlx::query(&format!(
                    "WITH a AS (
                        INSERT INTO {s}.alerts (tenant_id, id, event_type, entity_id, payload, channels)
                        SELECT $1, {ALERT_ID_SQL}, 'invoice.overdue',
                               'INV-' || lpad(g::text, 9, '0'), {PAYLOAD_SQL}, '{{webhook}}'
                        FROM generate_series($2::bigint, $3::bigint) g
                        RETURNING id, entity_id
                     )
                     INSERT INTO {s}.deliveries
                         (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id, status)
                     SELECT $1, encode(sha256(convert_to($1::text || '/' || a.entity_id, 'UTF8')), 'hex'),
                            a.id, 'user-' || (right(a.entity_id, 9)::bigint % 20000), 'webhook', $4, 'pending'
                     FROM a ORDER BY a.entity_id"
                ))
                .bind(tenant_uuid(TENANT))
                .bind(lo)
                .bind(hi)
                .bind(endpoint)
                .execute(pool)
                .await
                .context("loading the deliveries")?;
                lo = hi + 1;
            }
        }
    }
    sqlx::query(&format!("VACUUM ANALYZE {}", system.tables().join(", ")))
        .execute(pool)
        .await?;
    sqlx::query("CHECKPOINT").execute(pool).await?;
    Ok(())
}

/// Counters and sizes of a system's tables (summed).
#[derive(Debug, Clone, Copy, Default)]
struct TableStats {
    inserted: i64,
    updated: i64,
    hot_updated: i64,
    deleted: i64,
    dead: i64,
    autovacuums: i64,
    hot_heap_bytes: i64,
    hot_index_bytes: i64,
    heap_bytes: i64,
    index_bytes: i64,
}

async fn table_stats(pool: &PgPool, system: System) -> anyhow::Result<TableStats> {
    let tables: Vec<String> = system.tables();
    let row: (i64, i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(n_tup_ins), 0)::int8, coalesce(sum(n_tup_upd), 0)::int8,
                coalesce(sum(n_tup_hot_upd), 0)::int8, coalesce(sum(n_tup_del), 0)::int8,
                coalesce(sum(n_dead_tup), 0)::int8, coalesce(sum(autovacuum_count), 0)::int8,
                coalesce(sum(pg_table_size(relid)), 0)::int8, coalesce(sum(pg_indexes_size(relid)), 0)::int8
         FROM pg_stat_user_tables WHERE relid = ANY($1::text[]::regclass[])",
    )
    .bind(&tables)
    .fetch_one(pool)
    .await?;
    let hot: (i64, i64) = sqlx::query_as(
        "SELECT pg_table_size($1::text::regclass), pg_indexes_size($1::text::regclass)",
    )
    .bind(system.hot_table())
    .fetch_one(pool)
    .await?;
    Ok(TableStats {
        inserted: row.0,
        updated: row.1,
        hot_updated: row.2,
        deleted: row.3,
        dead: row.4,
        autovacuums: row.5,
        heap_bytes: row.6,
        index_bytes: row.7,
        hot_heap_bytes: hot.0,
        hot_index_bytes: hot.1,
    })
}

async fn flush_lsn(pool: &PgPool) -> anyhow::Result<(String, i64)> {
    Ok(sqlx::query_as(
        "SELECT pg_current_wal_flush_lsn()::text, (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::int8",
    )
    .fetch_one(pool)
    .await?)
}

/// CPU time spent while a drain ran, in seconds: the loops' own database
/// backends (NaN when they are not on this machine), and this process (the client: the drivers, decoding, the
/// runtime). On 2 cores with 2 or more loops the drain is CPU-bound, so these
/// say where a message's time goes once latency no longer does.
#[derive(Debug, Clone, Copy, Default)]
struct CpuSeconds {
    backends: f64,
    client: f64,
}

/// User + system CPU seconds so far of a PostgreSQL backend on this machine,
/// from `/proc/<pid>/stat` (fields 14 and 15, in USER_HZ ticks, which Linux
/// fixes at 100 for /proc). An error when no `postgres` process has that pid
/// here (a bench cluster on another machine).
fn backend_cpu_seconds(pid: i32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let (head, rest) = stat
        .rsplit_once(')')
        .context("malformed /proc/<pid>/stat")?;
    anyhow::ensure!(
        head.ends_with("(postgres"),
        "process {pid} here is not a PostgreSQL backend"
    );
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i - 3)
            .context("short /proc/<pid>/stat")?
            .parse::<u64>()? as f64)
    };
    Ok((ticks(14)? + ticks(15)?) / 100.0)
}

fn own_cpu_seconds() -> anyhow::Result<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF)?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Ok(secs(u.user_time()) + secs(u.system_time()))
}

/// `n` loops, each on its own connection, until nothing is left; returns the
/// seconds from the first read to the last completion and the CPU spent.
async fn drain(
    ctx: &Ctx,
    system: System,
    loops: usize,
    statements: &Arc<OutboxStatements>,
) -> anyhow::Result<(f64, CpuSeconds)> {
    // (Before: the statements of then; pgmq: unused.)
    let options = PgConnectOptions::from_str(&ctx.target.url)?
        .application_name(APP_NAME)
        .options([("search_path", format!("{},public", system.schema()))])
        .disable_statement_logging();
    let mut conns = vec![];
    let mut backends = vec![];
    for _ in 0..loops {
        let mut conn = PgConnection::connect_with(&options).await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut conn)
            .await?;
        backends.push(pid);
        conns.push(conn);
    }
    let client0 = own_cpu_seconds()?;
    // The pgmq client needs a pool to exist; every call below names its
    // connection (`*_with_cxn`).
    let client = Arc::new(pgmq::PGMQueueExt::new_with_pool(ctx.pool.clone()).await);
    let t0 = Instant::now();
    let mut tasks = vec![];
    for (mut conn, pid) in conns.into_iter().zip(backends) {
        let (client, statements) = (client.clone(), statements.clone());
        tasks.push(tokio::spawn(async move {
            // Its backend's CPU, read while it lives (it exits with the
            // connection). The bench cluster runs on this machine; a remote
            // one (BENCH_DATABASE_URL) has no /proc here: None.
            let backend0 = backend_cpu_seconds(pid).ok();
            let result = match system {
                System::PgmqArchive | System::PgmqDelete => {
                    pgmq_drain(&client, system, &mut conn).await
                }
                System::Tidings
                | System::Previous
                | System::PlannedPerCall
                | System::HalfFull
                | System::Before
                | System::MovedOut
                | System::InPlace => statements.drain(&mut conn).await,
            };
            let backend_cpu = backend0
                .zip(backend_cpu_seconds(pid).ok())
                .map(|(b0, b1)| b1 - b0);
            // Statistics reach pg_stat_user_tables when the backend goes idle
            // or exits; ask for it and leave.
            let _ = sqlx::query("SELECT pg_stat_force_next_flush()")
                .execute(&mut conn)
                .await;
            let _ = conn.close().await;
            result.map(|n| (n, backend_cpu))
        }));
    }
    let mut done = 0;
    let mut backends_cpu = Some(0.0);
    let mut first_error = None;
    for t in tasks {
        match t.await? {
            Ok((n, cpu)) => {
                done += n;
                backends_cpu = backends_cpu.zip(cpu).map(|(sum, c)| sum + c);
            }
            Err(err) => first_error = first_error.or(Some(err)),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = CpuSeconds {
        backends: backends_cpu.unwrap_or(f64::NAN),
        client: own_cpu_seconds()? - client0,
    };
    if let Some(err) = first_error {
        return Err(err.context(format!("{} drain", system.label())));
    }
    // Wait for the loops' backends to be gone, their statistics flushed.
    for _ in 0..100 {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind(APP_NAME)
                .fetch_one(&ctx.pool)
                .await?;
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    anyhow::ensure!(done > 0, "{}: nothing drained", system.label());
    Ok((secs, cpu))
}

/// One loop of pgmq: read a batch, archive or delete it, until nothing is
/// left; returns the messages finished.
async fn pgmq_drain(
    client: &pgmq::PGMQueueExt,
    system: System,
    conn: &mut PgConnection,
) -> anyhow::Result<u64> {
    let mut done = 0u64;
    loop {
        let msgs: Vec<pgmq::Message<Value>> = client
            .read_batch_with_cxn(QUEUE, LEASE_MS / 1000, BATCH, &mut *conn)
            .await?;
        if msgs.is_empty() {
            return Ok(done);
        }
        let ids: Vec<i64> = msgs.iter().map(|m| m.msg_id).collect();
        let n = if system == System::PgmqArchive {
            client
                .archive_batch_with_cxn(QUEUE, &ids, &mut *conn)
                .await?
        } else {
            client
                .delete_batch_with_cxn(QUEUE, &ids, &mut *conn)
                .await?
        };
        anyhow::ensure!(n == ids.len(), "pgmq finished {n} of {}", ids.len());
        done += n as u64;
    }
}

/// Everything left as it should be: pgmq's queue empty (and the archive full),
/// every delivery `sent` after exactly one attempt.
async fn verify(pool: &PgPool, system: System, backlog: i64) -> anyhow::Result<()> {
    match system {
        System::PgmqArchive | System::PgmqDelete => {
            let (left, archived): (i64, i64) = sqlx::query_as(&format!(
                "SELECT (SELECT count(*) FROM pgmq.q_{QUEUE}), (SELECT count(*) FROM pgmq.a_{QUEUE})"
            ))
            .fetch_one(pool)
            .await?;
            let want = if system == System::PgmqArchive {
                backlog
            } else {
                0
            };
            anyhow::ensure!(
                left == 0 && archived == want,
                "{}: {left} left in the queue, {archived} archived",
                system.label()
            );
        }
        System::Tidings
        | System::Previous
        | System::PlannedPerCall
        | System::HalfFull
        | System::Before
        | System::MovedOut
        | System::InPlace => {
            // Moved sent rows are in deliveries_sent.
            let all_rows = if system.moves_sent() {
                format!(
                    "(SELECT status, attempts FROM {} UNION ALL
                      SELECT status, attempts FROM {}.deliveries_sent) d",
                    system.hot_table(),
                    system.schema()
                )
            } else {
                system.hot_table()
            };
            let (sent, all): (i64, i64) = sqlx::query_as(&format!(
                "SELECT count(*) FILTER (WHERE status = 'sent' AND attempts = 1), count(*)
                 FROM {all_rows}"
            ))
            .fetch_one(pool)
            .await?;
            anyhow::ensure!(
                sent == backlog && all == backlog,
                "{}: {sent} of {all} deliveries sent once (backlog {backlog})",
                system.label()
            );
        }
    }
    Ok(())
}

/// WAL record counts by type between two LSNs (`pg_waldump --stats=record`).
#[derive(Debug, Default, Clone)]
pub struct WalRecords {
    /// "Rmgr/RECORD" (without `+INIT`) → (count, record bytes, full-page-image bytes).
    pub by_type: BTreeMap<String, (i64, i64, i64)>,
}

impl WalRecords {
    fn count(&self, names: &[&str]) -> i64 {
        names
            .iter()
            .map(|n| self.by_type.get(*n).map(|r| r.0).unwrap_or(0))
            .sum()
    }
    /// Index tuples written into B-trees: leaf inserts, posting-list splits and
    /// page splits (each carries the new tuple; upper-level splits, about one
    /// in a few hundred, are counted too).
    pub fn btree_insertions(&self) -> i64 {
        self.count(&[
            "Btree/INSERT_LEAF",
            "Btree/INSERT_POST",
            "Btree/SPLIT_L",
            "Btree/SPLIT_R",
        ])
    }
    pub fn fpi_bytes(&self) -> i64 {
        self.by_type.values().map(|r| r.2).sum()
    }
}

/// Parses `pg_waldump --stats=record` output.
pub fn parse_waldump_stats(out: &str) -> WalRecords {
    let mut records = WalRecords::default();
    for line in out.lines() {
        // Drop the "(12.34)" percentage columns, then: name, count, record
        // bytes, FPI bytes, combined bytes.
        let mut plain = String::with_capacity(line.len());
        let mut depth = 0;
        for c in line.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ if depth == 0 => plain.push(c),
                _ => {}
            }
        }
        let cols: Vec<&str> = plain.split_whitespace().collect();
        if cols.len() < 5 || !cols[0].contains('/') {
            continue;
        }
        let nums: Vec<i64> = cols[1..5].iter().filter_map(|c| c.parse().ok()).collect();
        if nums.len() != 4 {
            continue;
        }
        let name = cols[0].trim_end_matches("+INIT").to_string();
        let e = records.by_type.entry(name).or_default();
        e.0 += nums[0];
        e.1 += nums[1];
        e.2 += nums[2];
    }
    records
}

async fn wal_records(
    ctx: &Ctx,
    wal_dir: &Path,
    from: &str,
    to: &str,
) -> anyhow::Result<WalRecords> {
    let out = tokio::process::Command::new(&ctx.tools.pg_waldump)
        .arg("--stats=record")
        .arg("--start")
        .arg(from)
        .arg("--end")
        .arg(to)
        .arg("--path")
        .arg(wal_dir)
        .output()
        .await
        .with_context(|| format!("running {}", ctx.tools.pg_waldump.display()))?;
    if !out.status.success() {
        bail!(
            "pg_waldump failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let records = parse_waldump_stats(&String::from_utf8_lossy(&out.stdout));
    anyhow::ensure!(
        !records.by_type.is_empty(),
        "pg_waldump printed no record statistics"
    );
    Ok(records)
}

/// One measured run.
/// Database execution time of the drain's statements (pg_stat_statements),
/// split into taking work (pgmq read, the claim) and finishing it (archive,
/// delete, the completion), in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
struct StatementTime {
    take_ms: f64,
    finish_ms: f64,
    take_calls: i64,
    finish_calls: i64,
}

async fn statement_time(pool: &PgPool) -> anyhow::Result<StatementTime> {
    let rows: Vec<(String, i64, f64)> = sqlx::query_as(
        "SELECT query, calls, total_exec_time
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = current_database()",
    )
    .fetch_all(pool)
    .await?;
    let mut t = StatementTime::default();
    for (query, calls, ms) in rows {
        if query.contains("pgmq.read(") || query.contains("active AS MATERIALIZED") {
            t.take_ms += ms;
            t.take_calls += calls;
        } else if query.contains("pgmq.archive(")
            || query.contains("pgmq.delete(")
            || (query.contains("UPDATE deliveries") && query.contains("UNNEST("))
        {
            t.finish_ms += ms;
            t.finish_calls += calls;
        }
    }
    Ok(t)
}

struct Run {
    system: System,
    workers: usize,
    rep: usize,
    seconds: f64,
    cpu: CpuSeconds,
    wal_bytes: i64,
    wal: WalRecords,
    before: TableStats,
    after: TableStats,
    statements: StatementTime,
}

impl Run {
    fn figure(&self, backlog: i64) -> Value {
        let per = |x: i64| x as f64 / backlog as f64;
        let mut figure = json!({
            "system": self.system.key(),
            "workers": self.workers,
            "rep": self.rep,
            "seconds": self.seconds,
            "per_sec": backlog as f64 / self.seconds,
            "wal_bytes_per_msg": per(self.wal_bytes),
            "fpi_bytes_per_msg": per(self.wal.fpi_bytes()),
            "btree_insert_records_per_msg": per(self.wal.btree_insertions()),
            "heap_insert_records_per_msg": per(self.wal.count(&["Heap/INSERT"])),
            "heap_update_records_per_msg": per(self.wal.count(&["Heap/UPDATE"])),
            "heap_hot_update_records_per_msg": per(self.wal.count(&["Heap/HOT_UPDATE"])),
            "heap_delete_records_per_msg": per(self.wal.count(&["Heap/DELETE"])),
            "stat_updates_per_msg": per(self.after.updated - self.before.updated),
            "stat_hot_updates_per_msg": per(self.after.hot_updated - self.before.hot_updated),
            "stat_deletes_per_msg": per(self.after.deleted - self.before.deleted),
            "stat_inserts_per_msg": per(self.after.inserted - self.before.inserted),
            // Server-side execution time per message, microseconds.
            "take_exec_us_per_msg": self.statements.take_ms * 1000.0 / backlog as f64,
            "finish_exec_us_per_msg": self.statements.finish_ms * 1000.0 / backlog as f64,
            // CPU per message, microseconds: the client (and the loops'
            // backends, below, when they run on this machine).
            "client_cpu_us_per_msg": self.cpu.client * 1e6 / backlog as f64,
            "take_calls": self.statements.take_calls,
            "finish_calls": self.statements.finish_calls,
            // Every record type that is not noise, for the curious.
            "wal_records_per_msg": self
                .wal
                .by_type
                .iter()
                .filter(|(_, r)| r.0 as f64 >= 0.01 * backlog as f64)
                .map(|(k, r)| (k.clone(), json!(per(r.0))))
                .collect::<serde_json::Map<String, Value>>(),
            "dead_tuples_after": self.after.dead,
            "autovacuum_runs": self.after.autovacuums - self.before.autovacuums,
            "hot_table_bytes_after": self.after.hot_heap_bytes,
            "hot_index_bytes_after": self.after.hot_index_bytes,
            "table_bytes_after": self.after.heap_bytes,
            "index_bytes_after": self.after.index_bytes,
            "table_bytes_before": self.before.heap_bytes,
            "index_bytes_before": self.before.index_bytes,
        });
        if self.cpu.backends.is_finite() {
            figure["backend_cpu_us_per_msg"] = json!(self.cpu.backends * 1e6 / backlog as f64);
        }
        figure
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    let mut w = WorkloadResult::new("drain-peer");
    let backlog = ctx.tier.peer_backlog;
    let statements = Arc::new(OutboxStatements::load(&ctx.repo)?);
    let statements_before = Arc::new(OutboxStatements::load_files(
        &ctx.repo,
        "outbox_claim_v0.sql",
        "outbox_complete_v0.sql",
    )?);
    // Not run any more (System::RUN); with the completion of its time.
    let statements_v2 = Arc::new(OutboxStatements::load_files(
        &ctx.repo,
        "outbox_claim_v2.sql",
        "outbox_complete_v2.sql",
    )?);
    let statements_in_place = Arc::new(OutboxStatements::with_completion(
        &ctx.repo,
        "outbox_complete_v2.sql",
        false,
    )?);
    let pgmq_version = install_pgmq(&ctx.pool).await?;
    let endpoint = ctx.sink_endpoint(TENANT).await?;
    let data_dir: String = sqlx::query_scalar("SELECT current_setting('data_directory')")
        .fetch_one(&ctx.pool)
        .await?;
    let wal_dir = Path::new(&data_dir).join("pg_wal");
    let payload_bytes: f64 = sqlx::query_scalar(&format!(
        "SELECT avg(octet_length(({PAYLOAD_SQL})::text))::float8 FROM generate_series(0, 999) g"
    ))
    .fetch_one(&ctx.pool)
    .await?;

    let mut runs: Vec<Run> = vec![];
    let rounds = ctx.tier.reps * WORKERS.len();
    let mut round = 0;
    for rep in 1..=ctx.tier.reps {
        for &workers in &WORKERS {
            round += 1;
            eprintln!(
                "  drain-peer round {round}/{rounds}: {workers} worker(s), {backlog} messages"
            );
            let n = System::RUN.len();
            for k in 0..n {
                // Rotate the order so that no system always goes first.
                let system = System::RUN[(k + round) % n];
                prepare(&ctx.pool, system, backlog, endpoint)
                    .await
                    .with_context(|| format!("preparing {}", system.label()))?;
                let before = table_stats(&ctx.pool, system).await?;
                crate::pg::reset_statements(&ctx.pool).await?;
                let (from, from_bytes) = flush_lsn(&ctx.pool).await?;
                let run_statements = match system {
                    System::Before => &statements_before,
                    System::PlannedPerCall => &statements_v2,
                    System::InPlace => &statements_in_place,
                    _ => &statements,
                };
                let (seconds, cpu) = drain(ctx, system, workers, run_statements).await?;
                let (to, to_bytes) = flush_lsn(&ctx.pool).await?;
                let statement_time = statement_time(&ctx.pool).await?;
                verify(&ctx.pool, system, backlog).await?;
                let after = table_stats(&ctx.pool, system).await?;
                let wal = wal_records(ctx, &wal_dir, &from, &to).await?;
                eprintln!(
                    "    {:<30} {:>8.0} msg/s  {:>6.0} WAL B/msg  {:>4.1} B-tree ins/msg  CPU µs/msg {:>5.1} db + {:>5.1} client",
                    system.label(),
                    backlog as f64 / seconds,
                    (to_bytes - from_bytes) as f64 / backlog as f64,
                    wal.btree_insertions() as f64 / backlog as f64,
                    cpu.backends * 1e6 / backlog as f64,
                    cpu.client * 1e6 / backlog as f64
                );
                runs.push(Run {
                    system,
                    workers,
                    rep,
                    seconds,
                    cpu,
                    wal_bytes: to_bytes - from_bytes,
                    wal,
                    before,
                    after,
                    statements: statement_time,
                });
            }
        }
    }
    // Leave nothing behind for the workloads after this one.
    sqlx::query("DROP SCHEMA IF EXISTS peer_tidings CASCADE")
        .execute(&ctx.pool)
        .await?;
    for schema in ["peer_before", "peer_v2", "peer_moved", "peer_in_place"] {
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&ctx.pool)
            .await?;
    }
    sqlx::query("SELECT pgmq.drop_queue($1)")
        .bind(QUEUE)
        .execute(&ctx.pool)
        .await?;

    let figures: Vec<Value> = runs.iter().map(|r| r.figure(backlog)).collect();
    w.figure("backlog", backlog);
    w.figure("batch", BATCH);
    w.figure("lease_ms", LEASE_MS);
    w.figure("payload_bytes", payload_bytes);
    w.figure("notes_pgmq_version", &pgmq_version);
    w.figure("runs", &figures);
    summarise(&mut w, &Value::Array(figures), backlog, &pgmq_version)?;
    let (path, file) = ctx.plot_path("drain-peer");
    plot(&path, &w.figures)?;
    w.plots.push(file);
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

/// Per-run figures of one system at one worker count (all counts when `None`).
fn samples(runs: &Value, system: System, workers: Option<usize>, key: &str) -> Vec<f64> {
    runs.as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["system"] == system.key())
        .filter(|r| workers.is_none_or(|n| r["workers"].as_u64() == Some(n as u64)))
        .filter_map(|r| r[key].as_f64())
        .collect()
}

/// Ratios, tables and notes from the runs' figures.
fn summarise(
    w: &mut WorkloadResult,
    runs: &Value,
    backlog: i64,
    pgmq_version: &str,
) -> anyhow::Result<()> {
    let rate = |s: System, n: usize| samples(runs, s, Some(n), "per_sec");
    for &n in &WORKERS {
        let workers = format!("{n} worker{}", if n == 1 { "" } else { "s" });
        w.ratios.push(Ratio::new(
            &format!("outbox ÷ pgmq archive, {workers}"),
            &format!("Tidings claim + complete msgs/s ({workers})"),
            "pgmq read + archive msgs/s",
            Some(1.0),
            &rate(System::Tidings, n),
            &rate(System::PgmqArchive, n),
        ));
    }
    // The same-run arms beside today's statements; a run has those it
    // measured (earlier runs had other sets).
    let present = |s: System| !samples(runs, s, None, "per_sec").is_empty();
    for (arm, key, what) in [
        (
            System::MovedOut,
            "sent rows moved out ÷ outbox",
            "the experiment's msgs/s: today's claim with a completion that moves sent rows to deliveries_sent (the statement that became outbox_complete.sql), same run",
        ),
        (
            System::InPlace,
            "outbox after ÷ sent rows updated in place",
            "today's claim with the completion before the move (bench/sql/outbox_complete_v2.sql: sent rows updated in place), same run",
        ),
        (
            System::PlannedPerCall,
            "outbox ÷ claim planned per call",
            "the claim of 85dc95a (planned at every call) + the same completion, same run",
        ),
        (
            System::Before,
            "outbox after ÷ before the lean outbox",
            "the statements and indexes before migration 0015, same run",
        ),
    ] {
        if !present(arm) {
            continue;
        }
        let ours = "Tidings claim + complete msgs/s";
        for &n in &WORKERS {
            let workers = format!("{n} worker{}", if n == 1 { "" } else { "s" });
            // The experiment over today's (> 1: it pays); today's over a before.
            let ((num, num_label), (den, den_label)) = if arm == System::MovedOut {
                ((arm, format!("{what} ({workers})")), (System::Tidings, ours.to_string()))
            } else {
                ((System::Tidings, format!("{ours} ({workers})")), (arm, what.to_string()))
            };
            w.ratios.push(Ratio::new(
                &format!("{key}, {workers}"),
                &num_label,
                &den_label,
                None,
                &rate(num, n),
                &rate(den, n),
            ));
        }
    }
    let arms: Vec<System> = [
        System::MovedOut,
        System::InPlace,
        System::PlannedPerCall,
        System::Before,
    ]
    .into_iter()
    .filter(|&s| present(s))
    .collect();
    let mut header: Vec<String> = [
        "workers",
        "pgmq read + archive",
        "pgmq read + delete",
        "Tidings claim + complete",
        "Tidings ÷ pgmq archive",
    ]
    .map(String::from)
    .to_vec();
    for &s in &arms {
        header.push(s.label().to_string());
        header.push(format!("{} ÷ pgmq archive", short_label(s)));
        header.push(if s == System::MovedOut {
            format!("{} ÷ Tidings", short_label(s))
        } else {
            format!("Tidings ÷ {}", short_label(s))
        });
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new(
        &format!(
            "Throughput, messages/s: {backlog} pending messages drained per run, batch {BATCH}"
        ),
        &header,
    );
    let per_rep = |a: &[f64], b: &[f64]| -> String {
        let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
        Spread::of(&r).show(2)
    };
    for &n in &WORKERS {
        let (pa, pd, ti) = (
            rate(System::PgmqArchive, n),
            rate(System::PgmqDelete, n),
            rate(System::Tidings, n),
        );
        let mut row = vec![
            n.to_string(),
            Spread::of(&pa).show(0),
            Spread::of(&pd).show(0),
            Spread::of(&ti).show(0),
            per_rep(&ti, &pa),
        ];
        for &s in &arms {
            let other = rate(s, n);
            row.push(Spread::of(&other).show(0));
            row.push(per_rep(&other, &pa));
            row.push(if s == System::MovedOut {
                per_rep(&other, &ti)
            } else {
                per_rep(&ti, &other)
            });
        }
        t.row(row);
    }
    w.tables.push(t);

    let mut t = Table::new(
        "Cost per message (median over every run of the system, min–max)",
        &[
            "system",
            "database time, µs (take + finish)",
            "WAL bytes",
            "of which full-page images",
            "B-tree insertions",
            "heap updates (HOT)",
            "heap inserts / deletes",
            "dead tuples after the run",
            "hot table + its indexes after, MB",
            "all its tables + indexes after, MB",
        ],
    );
    for s in System::ALL.into_iter().filter(|&s| present(s)) {
        let m = |key: &str| Spread::of(&samples(runs, s, None, key));
        let mb = |key: &str| Spread::of(&samples(runs, s, None, key)).median / 1e6;
        t.row(vec![
            s.label().to_string(),
            format!(
                "{:.1} + {:.1}",
                m("take_exec_us_per_msg").median,
                m("finish_exec_us_per_msg").median
            ),
            m("wal_bytes_per_msg").show(0),
            m("fpi_bytes_per_msg").show(0),
            m("btree_insert_records_per_msg").show(2),
            format!(
                "{:.2} ({:.2})",
                m("heap_update_records_per_msg").median
                    + m("heap_hot_update_records_per_msg").median,
                m("heap_hot_update_records_per_msg").median
            ),
            format!(
                "{:.2} / {:.2}",
                m("heap_insert_records_per_msg").median,
                m("heap_delete_records_per_msg").median
            ),
            m("dead_tuples_after").show(0),
            format!(
                "{:.1} + {:.1}",
                mb("hot_table_bytes_after"),
                mb("hot_index_bytes_after")
            ),
            format!(
                "{:.1} + {:.1}",
                mb("table_bytes_after"),
                mb("index_bytes_after")
            ),
        ]);
    }
    w.tables.push(t);

    // Runs before this figure existed have none: no table for them.
    if !samples(runs, System::Tidings, None, "client_cpu_us_per_msg").is_empty() {
        let mut t = Table::new(
            "CPU per message, µs: the loops' database backends + the client (median, same runs)",
            &["system", "1 worker", "2 workers", "4 workers"],
        );
        for s in System::ALL.into_iter().filter(|&s| present(s)) {
            let mut row = vec![s.label().to_string()];
            for &n in &WORKERS {
                let m = |key: &str| Spread::of(&samples(runs, s, Some(n), key)).median;
                row.push(format!(
                    "{:.1} + {:.1}",
                    m("backend_cpu_us_per_msg"),
                    m("client_cpu_us_per_msg")
                ));
            }
            t.row(row);
        }
        w.tables.push(t);
    }
    w.notes.push(format!(
        "pgmq {pgmq_version} installed as plain SQL from the `pgmq` crate; its client's \
         read_batch (visibility timeout 60 s) then archive_batch or delete_batch. Tidings: \
         the worker's statements (bench/sql/outbox_claim.sql, outbox_complete.sql) on fresh \
         copies of the migrated `deliveries`, `deliveries_sent` and `alerts` (one alert per \
         delivery, so each message carries its own payload), lease 60 s, attempt guard and the \
         per-tenant \
         fairness probe over the tenants with open work. All on sqlx, one connection per \
         loop."
    ));
    if present(System::MovedOut) {
        w.notes.push(
            "Tidings, sent rows moved out (experiment): today's claim with a completion that \
             deletes a sent delivery from `deliveries` and inserts it into `deliveries_sent` \
             (primary key and the alert's listing index, filled full), as pgmq's archive does; \
             other outcomes update in place (the statement that became \
             bench/sql/outbox_complete.sql with migration 0022), on a copy of the migrated \
             table."
                .into(),
        );
    }
    if present(System::InPlace) {
        w.notes.push(
            "Tidings, sent rows updated in place (before the move): today's claim with the \
             completion before migration 0022 (bench/sql/outbox_complete_v2.sql: every outcome, \
             sent included, updates the row in place), on a copy of the migrated `deliveries` \
             without `deliveries_sent`: the same-run before of today's completion, which moves a \
             sent delivery to `deliveries_sent`."
                .into(),
        );
    }
    if present(System::PlannedPerCall) {
        w.notes.push(
            "Tidings, claim planned per call: the claim of 85dc95a (bench/sql/outbox_claim_v2.sql: \
             the batch bound as a parameter, so PostgreSQL plans it at every call, and the picked \
             rows found again by primary key) with today's completion, on the same table: the \
             same-run before of the claim with the batch in its text and the ctid join."
                .into(),
        );
    }
    w.notes.push(
        "Tidings before the lean outbox: the claim and completion of then \
         (bench/sql/outbox_claim_v0.sql, outbox_complete_v0.sql) on `deliveries` with the \
         indexes and storage settings of migrations 0005–0013 (unique (tenant, notification \
         key, endpoint), deliveries_by_alert, deliveries_by_status, deliveries_claimable, \
         deliveries_dead, no fillfactor): the same-run before of the lean outbox."
            .into(),
    );
    w.notes.push(
        "Every run starts from fresh tables, VACUUM ANALYZE and a CHECKPOINT; WAL bytes are \
         the flush-LSN delta over the drain (autovacuum's WAL included when it ran), record \
         counts from pg_waldump --stats=record over the same range. B-tree insertions count \
         INSERT_LEAF, INSERT_POST and SPLIT_L/R records. Dead tuples are pg_stat_user_tables' \
         n_dead_tup right after the run (autovacuum on, so it may have run)."
            .into(),
    );
    Ok(())
}

fn color(s: System) -> plots::RGBColor {
    match s {
        System::Tidings => plots::BLUE,
        System::Previous => plots::BROWN,
        System::PlannedPerCall => plots::BROWN,
        System::HalfFull => plots::BROWN,
        System::PgmqArchive => plots::ORANGE,
        System::PgmqDelete => plots::GREEN,
        System::Before => plots::PURPLE,
        System::MovedOut => plots::RED,
        System::InPlace => plots::RED,
    }
}

fn short_label(s: System) -> &'static str {
    match s {
        System::PgmqArchive => "pgmq archive",
        System::PgmqDelete => "pgmq delete",
        System::Tidings => "Tidings",
        System::Previous => "0015",
        System::PlannedPerCall => "per-call plan",
        System::HalfFull => "half-full pages",
        System::Before => "before",
        System::MovedOut => "sent moved out",
        System::InPlace => "in place",
    }
}

/// The workload's figure from its results JSON: throughput by workers beside
/// pgmq, and what each message costs.
pub fn plot(path: &Path, figures: &Value) -> anyhow::Result<()> {
    let runs = &figures["runs"];
    let backlog = figures["backlog"].as_f64().unwrap_or(0.0);
    let systems: Vec<System> = System::ALL
        .into_iter()
        .filter(|s| !samples(runs, *s, None, "per_sec").is_empty())
        .collect();
    let mut series = vec![];
    for &s in &systems {
        let mut points = vec![];
        let mut ranges = vec![];
        for &n in &WORKERS {
            let v = Spread::of(&samples(runs, s, Some(n), "per_sec"));
            if v.median.is_finite() {
                points.push((n as f64, v.median));
                ranges.push((v.min, v.max));
            }
        }
        series.push(plots::Series {
            name: s.label().into(),
            points,
            ranges,
            color: Some(color(s)),
            style: if matches!(s, System::Before | System::InPlace) {
                plots::Style::Dashed
            } else {
                plots::Style::Line
            },
        });
    }
    let bars = |key: &str, second: Option<&str>| -> Vec<plots::Bar> {
        systems
            .iter()
            .map(|&s| {
                let v = Spread::of(&samples(runs, s, None, key));
                plots::Bar {
                    label: short_label(s).into(),
                    color: color(s),
                    value: v.median,
                    range: second.is_none().then_some((v.min, v.max)),
                    stacked: second.map(|k| Spread::of(&samples(runs, s, None, k)).median),
                }
            })
            .collect()
    };
    let mb = |mut b: Vec<plots::Bar>| {
        for bar in &mut b {
            bar.value /= 1e6;
            bar.stacked = bar.stacked.map(|v| v / 1e6);
        }
        b
    };
    // Each system's messages/s ÷ pgmq read + archive's, per repetition
    // (runs of one repetition are neighbours in time), around the line 1.
    let ratio_series = |s: System| -> plots::Series {
        let mut points = vec![];
        let mut ranges = vec![];
        for &n in &WORKERS {
            let ours = samples(runs, s, Some(n), "per_sec");
            let theirs = samples(runs, System::PgmqArchive, Some(n), "per_sec");
            let r: Vec<f64> = ours.iter().zip(&theirs).map(|(a, b)| a / b).collect();
            let v = Spread::of(&r);
            if v.median.is_finite() {
                points.push((n as f64, v.median));
                ranges.push((v.min, v.max));
            }
        }
        plots::Series {
            name: format!("{} ÷ pgmq read + archive", short_label(s)),
            points,
            ranges,
            color: Some(color(s)),
            style: if matches!(s, System::Before | System::InPlace) {
                plots::Style::Dashed
            } else {
                plots::Style::Line
            },
        }
    };
    let mut ratio_lines: Vec<plots::Series> = [
        System::Tidings,
        System::MovedOut,
        System::InPlace,
        System::HalfFull,
        System::PlannedPerCall,
        System::Previous,
        System::Before,
    ]
    .into_iter()
    .filter(|s| systems.contains(s))
    .map(ratio_series)
    .collect();
    ratio_lines.push(plots::Series {
        name: "target: 1 = as fast as pgmq read + archive".into(),
        points: WORKERS.iter().map(|&n| (n as f64, 1.0)).collect(),
        ranges: vec![],
        color: Some(plots::ORANGE),
        style: plots::Style::Dashed,
    });
    plots::panels(
        path,
        (2, 4),
        &[
            plots::Panel::Lines(plots::Chart {
                axes: plots::Axes {
                    title: "Messages/s: Tidings' outbox beside pgmq",
                    x_label: "workers (one connection each)",
                    y_label: "messages/s (median, min–max)",
                    log_x: true,
                    log_y: false,
                },
                series,
                markers: vec![],
                x_ticks: Some(WORKERS.iter().map(|&n| n as f64).collect()),
                legend: Some(plots::SeriesLabelPosition::LowerRight),
            }),
            plots::Panel::Lines(plots::Chart {
                axes: plots::Axes {
                    title: "Messages/s ÷ pgmq read + archive (1 = the line to beat)",
                    x_label: "workers (one connection each)",
                    y_label: "ratio (median, min–max over repetitions)",
                    log_x: true,
                    log_y: false,
                },
                series: ratio_lines,
                markers: vec![],
                x_ticks: Some(WORKERS.iter().map(|&n| n as f64).collect()),
                legend: Some(plots::SeriesLabelPosition::LowerRight),
            }),
            plots::Panel::Bars(plots::BarChart {
                title: "Database time per message",
                y_label: "µs of statement execution",
                bars: bars("take_exec_us_per_msg", Some("finish_exec_us_per_msg")),
                stack_names: Some(("read / claim", "archive, delete / complete")),
            }),
            plots::Panel::Bars(plots::BarChart {
                title: "WAL bytes per message",
                y_label: "bytes",
                bars: bars("wal_bytes_per_msg", None),
                stack_names: None,
            }),
            plots::Panel::Bars(plots::BarChart {
                title: "B-tree insertions per message",
                y_label: "index tuples written",
                bars: bars("btree_insert_records_per_msg", None),
                stack_names: None,
            }),
            plots::Panel::Bars(plots::BarChart {
                title: &format!("Size after draining {} messages", plots::tick(backlog)),
                y_label: "MB (tables + indexes)",
                bars: mb(bars("table_bytes_after", Some("index_bytes_after"))),
                stack_names: Some(("tables", "indexes")),
            }),
            plots::Panel::Bars(plots::BarChart {
                title: "Heap row versions written per message",
                y_label: "updates (lighter: HOT, no index entry)",
                bars: bars(
                    "heap_update_records_per_msg",
                    Some("heap_hot_update_records_per_msg"),
                ),
                stack_names: Some(("non-HOT", "HOT")),
            }),
            plots::Panel::Bars(plots::BarChart {
                title: "Dead tuples right after the drain",
                y_label: "n_dead_tup (autovacuum on)",
                bars: bars("dead_tuples_after", None),
                stack_names: None,
            }),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waldump_statistics_are_parsed() {
        let out = "\
Type                                           N      (%)          Record size      (%)             FPI size      (%)        Combined size      (%)
----                                           -      ---          -----------      ---             --------      ---        -------------      ---
Heap/UPDATE                                 2000 ( 40.00)               180000 ( 50.00)                 8192 ( 10.00)               188192 ( 45.00)
Heap/HOT_UPDATE+INIT                           3 (  0.06)                  300 (  0.08)                    0 (  0.00)                  300 (  0.07)
Btree/INSERT_LEAF                           3000 ( 59.94)               180000 ( 49.92)                73728 ( 90.00)               253728 ( 54.93)
Btree/SPLIT_R                                 10 (  0.20)                 9000 (  2.00)                    0 (  0.00)                 9000 (  2.00)
                                        --------                      --------                      --------                      --------
Total                                       5013                        369300 [80.00%]                81920 [20.00%]               451220 [100%]
";
        let r = parse_waldump_stats(out);
        assert_eq!(r.count(&["Heap/UPDATE"]), 2000);
        assert_eq!(r.count(&["Heap/HOT_UPDATE"]), 3);
        assert_eq!(r.btree_insertions(), 3010);
        assert_eq!(r.fpi_bytes(), 8192 + 73728);
        assert!(!r.by_type.contains_key("Total"));
    }
}
