//! Workload drain: a backlog of pending webhook deliveries drained by
//! 1, 2 and 4 `tidings worker` processes into the no-op sink (a loopback HTTP
//! receiver inside the harness that answers 204 at once; the server has no
//! in-process no-op channel), against a store-only baseline: the worker's own
//! claim and complete statements (bench/sql/outbox_claim.sql,
//! outbox_complete.sql, kept identical to server/src/store/outbox.rs by a test),
//! run by the same number of loops with the same batch and lease, completing
//! every claimed row as sent without sending anything. Interleaved per
//! repetition. pgbench cannot carry a claim's rows into the completion's
//! arrays, so this baseline runs on sqlx (the server's driver) instead.
//!
//! Then an open-loop soak: deliveries enqueued at half the 2-worker maximum for
//! `tier.soak`, with enqueue-to-delivery lag p50/p99 and the dead tuples of
//! `deliveries` sampled over time (they must stay flat).
//!
//! Between the two, an email phase ([`email`]): plain and templated emails
//! drained into a no-op SMTP sink, for what rendering costs per email.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde_json::json;
use sqlx::PgConnection;
use tidings_server::store::outbox::ClaimedDelivery;
use tokio::sync::Mutex;
use uuid::Uuid;

use super::Ctx;

mod email;
use crate::{
    plots,
    report::{Aim, Ratio, Table, WorkloadResult},
    seed::tenant_uuid,
    server::{Launch, Tidings},
    sqlfile::SqlFile,
    stats::{percentile, Spread},
};

/// The drain tenant.
const TENANT: i64 = 2;
const BATCH: i64 = 100;
const LEASE_MS: i64 = 60_000;
const WORKERS: [usize; 3] = [1, 2, 4];

/// `n` pending webhook deliveries (one alert per 100), committed at once.
async fn enqueue(ctx: &Ctx, endpoint: Uuid, n: i64, tag: &str) -> anyhow::Result<()> {
    sqlx::query(
        "WITH a AS (
            INSERT INTO alerts (tenant_id, id, event_type, entity_id, payload, channels)
            SELECT $1, gen_random_uuid(), 'invoice.overdue', $3 || '-' || g, '{\"amount\": 42}', '{webhook}'
            FROM generate_series(0, ($2 - 1) / 100) g
            RETURNING id, entity_id
         ),
         numbered AS (SELECT id, row_number() OVER (ORDER BY entity_id) - 1 AS k FROM a)
         INSERT INTO deliveries (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id, status)
         SELECT $1, md5($3 || '/' || i), n.id, 'user-' || i, 'webhook', $4, 'pending'
         FROM generate_series(0, $2 - 1) i JOIN numbered n ON n.k = i / 100",
    )
    .bind(tenant_uuid(TENANT))
    .bind(n)
    .bind(tag)
    .bind(endpoint)
    .execute(&ctx.pool)
    .await
    .context("enqueueing deliveries")?;
    sqlx::query("SELECT pg_notify('tidings_outbox', $1)")
        .bind(tenant_uuid(TENANT).to_string())
        .execute(&ctx.pool)
        .await?;
    Ok(())
}

async fn outstanding(ctx: &Ctx) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM deliveries
         WHERE tenant_id = $1 AND status IN ('pending', 'sending', 'retrying')",
    )
    .bind(tenant_uuid(TENANT))
    .fetch_one(&ctx.pool)
    .await?)
}

async fn wait_drained(ctx: &Ctx, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if outstanding(ctx).await? == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "deliveries not drained within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start_workers(ctx: &Ctx, n: usize, bin: &std::path::Path) -> anyhow::Result<Vec<Tidings>> {
    let mut workers = vec![];
    for i in 0..n {
        workers.push(
            Tidings::worker(Launch {
                bin,
                database_url: &ctx.target.url,
                log_dir: &ctx.work_dir,
                name: &format!("worker-{i}"),
                env: vec![
                    ("TIDINGS_OUTBOX_WORKERS".into(), "1".into()),
                    ("TIDINGS_WEBHOOK_ALLOW_PRIVATE".into(), "loopback".into()),
                    ("TIDINGS_DB_MAX_CONNECTIONS".into(), "4".into()),
                ],
            })
            .await?,
        );
    }
    // Let them connect and LISTEN before the backlog appears.
    tokio::time::sleep(Duration::from_millis(400)).await;
    Ok(workers)
}

/// The worker's claim and completion statements, as the drift-checked copies
/// bench/sql/outbox_claim.sql and outbox_complete.sql hold them.
pub struct OutboxStatements {
    claim: Arc<str>,
    complete: Arc<str>,
    /// The claim binds the batch as `$1` (every version before `_v2`'s
    /// successor); today's has it in its text and binds lease, channels.
    claim_binds_batch: bool,
    /// The completion answers one row, the count of deliveries it wrote (a
    /// statement of data-modifying CTEs), instead of a command tag's count.
    complete_counts: bool,
}

impl OutboxStatements {
    pub fn load(repo: &std::path::Path) -> anyhow::Result<OutboxStatements> {
        Self::with_completion(repo, "outbox_complete.sql", true)
    }

    /// Another pair of files: the statements of an earlier version
    /// (`outbox_claim_v0.sql` and `outbox_complete_v0.sql`, before migration
    /// 0015; `_v1`, 0015's; `_v2`, the claim planned at every call),
    /// drain-peer's same-run "before" arms. Their claims bind the batch.
    pub fn load_files(
        repo: &std::path::Path,
        claim: &str,
        complete: &str,
    ) -> anyhow::Result<OutboxStatements> {
        let first = |name: &str| -> anyhow::Result<Arc<str>> {
            let file = SqlFile::load(&repo.join("bench/sql").join(name))?;
            Ok(file
                .statements
                .first()
                .with_context(|| format!("bench/sql/{name} is empty"))?
                .trim_end_matches(';')
                .into())
        };
        Ok(OutboxStatements {
            claim: first(claim)?,
            complete: first(complete)?,
            claim_binds_batch: true,
            complete_counts: false,
        })
    }

    /// Today's claim with a completion of file `complete`; `counts`: it
    /// answers the count of rows it wrote (today's, which moves sent rows to
    /// `deliveries_sent`), else its command tag does (`outbox_complete_v2.sql`,
    /// the in-place completion before it, drain-peer's same-run before).
    pub fn with_completion(
        repo: &std::path::Path,
        complete: &str,
        counts: bool,
    ) -> anyhow::Result<OutboxStatements> {
        Ok(OutboxStatements {
            claim_binds_batch: false,
            complete_counts: counts,
            ..Self::load_files(repo, "outbox_claim.sql", complete)?
        })
    }

    /// Drains everything due as a worker whose sends all succeed at once, one
    /// claim and one completion per batch; returns the deliveries drained.
    pub async fn drain(&self, conn: &mut PgConnection) -> anyhow::Result<u64> {
        let mut drained = 0;
        loop {
            let n = self.claim_and_complete(conn).await?;
            if n == 0 {
                return Ok(drained);
            }
            drained += n as u64;
        }
    }

    /// Claims one batch with the worker's defaults (batch 100, lease 60 s,
    /// webhooks), decodes it as the worker does, and records every row as
    /// sent, as a worker whose sends all succeeded. Returns the rows (0:
    /// nothing due).
    async fn claim_and_complete(&self, conn: &mut PgConnection) -> anyhow::Result<usize> {
        let mut claim = sqlx::query_as(&self.claim);
        if self.claim_binds_batch {
            claim = claim.bind(BATCH);
        }
        let rows: Vec<ClaimedDelivery> = claim
            .bind(LEASE_MS)
            .bind(vec!["webhook".to_string()])
            .fetch_all(&mut *conn)
            .await?;
        let n = rows.len();
        if n == 0 {
            return Ok(0);
        }
        let tenants: Vec<Uuid> = rows.iter().map(|r| r.tenant_id).collect();
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let attempts: Vec<i32> = rows.iter().map(|r| r.attempts).collect();
        let mut complete = sqlx::query(&self.complete)
            .bind(&tenants)
            .bind(&ids)
            .bind(&attempts)
            .bind(vec!["sent"; n])
            .bind(vec![None::<i64>; n])
            .bind(vec![None::<String>; n]);
        // Today's completion also takes the row versions the claim wrote.
        if self.complete.contains("$7") {
            let versions: Vec<Option<String>> = rows.iter().map(|r| r.version.clone()).collect();
            complete = complete.bind(versions);
        }
        let written = if self.complete_counts {
            let count: i64 = sqlx::Row::try_get(&complete.fetch_one(&mut *conn).await?, 0)?;
            count as u64
        } else {
            complete.execute(&mut *conn).await?.rows_affected()
        };
        anyhow::ensure!(written == n as u64, "completed {written} of {n} claimed");
        Ok(n)
    }
}

/// The store-only baseline: `loops` tasks, each on its own connection, claim
/// and complete with the server's statements until nothing is due.
async fn store_only_drain(ctx: &Ctx, loops: usize) -> anyhow::Result<()> {
    let statements = Arc::new(OutboxStatements::load(&ctx.repo)?);
    let errors = Arc::new(Mutex::new(None));
    let mut tasks = vec![];
    for _ in 0..loops {
        let (pool, statements, errors) = (ctx.pool.clone(), statements.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let result: anyhow::Result<()> = async {
                let mut conn = pool.acquire().await?;
                statements.drain(&mut conn).await?;
                Ok(())
            }
            .await;
            if let Err(err) = result {
                *errors.lock().await = Some(format!("{err:#}"));
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    if let Some(err) = errors.lock().await.take() {
        anyhow::bail!("store-only drain: {err}");
    }
    Ok(())
}

pub async fn available(ctx: &Ctx) -> anyhow::Result<Option<String>> {
    let help = tokio::process::Command::new(&ctx.bin)
        .args(["worker", "--help"])
        .output()
        .await?;
    if !help.status.success() {
        return Ok(Some("`tidings worker` is not on this branch yet".into()));
    }
    for f in ["outbox_claim.sql", "outbox_complete.sql"] {
        if !ctx.repo.join("bench/sql").join(f).exists() {
            return Ok(Some(format!("bench/sql/{f} is missing")));
        }
    }
    Ok(None)
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    if let Some(reason) = available(ctx).await? {
        return Ok(WorkloadResult::skipped("drain", reason));
    }
    let mut w = WorkloadResult::new("drain");
    let endpoint = ctx.sink_endpoint(TENANT).await?;
    let backlog = ctx.tier.drain_backlog;
    let limit = Duration::from_secs(300);

    // Warm-up, not measured: the first claims of a fresh process (plans,
    // connections, caches) are slower than the rest.
    {
        let workers = start_workers(ctx, 1, &ctx.bin).await?;
        enqueue(ctx, endpoint, backlog / 10, "warm-svc").await?;
        let drained = wait_drained(ctx, limit).await;
        for worker in workers {
            worker.stop().await;
        }
        drained?;
        enqueue(ctx, endpoint, backlog / 10, "warm-base").await?;
        store_only_drain(ctx, 1).await?;
    }

    let mut service = vec![vec![]; WORKERS.len()];
    let mut service_before = vec![vec![]; WORKERS.len()];
    let mut baseline = vec![vec![]; WORKERS.len()];
    let mut run_no = 0;
    for rep in 0..ctx.tier.reps {
        eprintln!("  drain rep {}/{}", rep + 1, ctx.tier.reps);
        for (wi, &n) in WORKERS.iter().enumerate() {
            // This build's workers and, when given, the earlier build's,
            // in alternating order.
            let mut arms = vec![(ctx.bin.as_path(), false)];
            if let Some(before) = &ctx.before_bin {
                arms.push((before.as_path(), true));
                if (rep + wi) % 2 == 1 {
                    arms.reverse();
                }
            }
            for (bin, is_before) in arms {
                run_no += 1;
                let rate = service_drain(ctx, endpoint, n, bin, run_no, limit).await?;
                if is_before {
                    service_before[wi].push(rate);
                } else {
                    service[wi].push(rate);
                }
            }

            run_no += 1;
            enqueue(ctx, endpoint, backlog, &format!("base-{run_no}")).await?;
            let t0 = Instant::now();
            store_only_drain(ctx, n).await?;
            baseline[wi].push(backlog as f64 / t0.elapsed().as_secs_f64());
            anyhow::ensure!(outstanding(ctx).await? == 0, "baseline left work behind");
        }
    }

    // The headline compares at 2 loops (one per core).
    let at = 1;
    w.ratios.push(Ratio::new(
        "drain efficiency",
        "no-op sink deliveries/s (2 workers)",
        "claim + complete statements alone",
        Some(0.7),
        &service[at],
        &baseline[at],
    ));
    let best = service
        .iter()
        .map(|s| Spread::of(s).median)
        .fold(0.0, f64::max);
    w.aims.push(Aim::at_least(
        "deliveries/s to the no-op sink (best worker count)",
        best,
        "deliveries/s",
        25_000.0,
    ));
    let mut t = Table::new(
        &format!("Outbox drain: {backlog} pending webhook deliveries per run"),
        &[
            "workers",
            "no-op sink deliveries/s",
            "store-only deliveries/s",
            "ratio",
        ],
    );
    for (wi, &n) in WORKERS.iter().enumerate() {
        let ratio: Vec<f64> = service[wi]
            .iter()
            .zip(&baseline[wi])
            .map(|(a, b)| a / b)
            .collect();
        t.row(vec![
            n.to_string(),
            Spread::of(&service[wi]).show(0),
            Spread::of(&baseline[wi]).show(0),
            Spread::of(&ratio).show(2),
        ]);
    }
    w.tables.push(t);
    if ctx.before_bin.is_some() {
        let mut t = Table::new(
            "Worker: this build ÷ an earlier build (BENCH_BEFORE_BIN), same run: deliveries/s to the no-op sink",
            &[
                "workers",
                "this build",
                "earlier build (BENCH_BEFORE_BIN)",
                "this ÷ earlier",
            ],
        );
        for (wi, &n) in WORKERS.iter().enumerate() {
            let workers = format!("{n} worker{}", if n == 1 { "" } else { "s" });
            w.ratios.push(Ratio::new(
                &format!("drain this build ÷ earlier build, {workers}"),
                &format!("no-op sink deliveries/s ({workers})"),
                "the same with the earlier build's workers, same run",
                None,
                &service[wi],
                &service_before[wi],
            ));
            let ratio: Vec<f64> = service[wi]
                .iter()
                .zip(&service_before[wi])
                .map(|(a, b)| a / b)
                .collect();
            t.row(vec![
                n.to_string(),
                Spread::of(&service[wi]).show(0),
                Spread::of(&service_before[wi]).show(0),
                Spread::of(&ratio).show(2),
            ]);
        }
        w.tables.push(t);
    }

    // What a template costs at send.
    email::run(ctx, &mut w).await?;

    // Soak at half the 2-worker maximum.
    let rate = Spread::of(&service[at]).median / 2.0;
    let soak = soak(ctx, endpoint, rate).await?;
    let mut t = Table::new(
        &format!(
            "Soak: {:.0} deliveries/s for {:.0} s with 2 workers",
            rate,
            ctx.tier.soak.as_secs_f64()
        ),
        &[
            "lag p50 ms",
            "lag p99 ms",
            "dead tuples min",
            "dead tuples max",
            "dead tuples last",
            "autovacuum runs",
            "live rows at start",
        ],
    );
    let dead: Vec<f64> = soak.samples.iter().map(|s| s.1).collect();
    t.row(vec![
        format!("{:.1}", soak.lag_p50_ms),
        format!("{:.1}", soak.lag_p99_ms),
        format!("{:.0}", dead.iter().copied().fold(f64::INFINITY, f64::min)),
        format!("{:.0}", dead.iter().copied().fold(0.0, f64::max)),
        format!("{:.0}", dead.last().copied().unwrap_or(0.0)),
        soak.autovacuums.to_string(),
        soak.live_before.to_string(),
    ]);
    w.tables.push(t);
    let (path, file) = ctx.plot_path("drain-soak");
    w.plots.push(file);
    w.notes.push(
        "The no-op sink is a loopback HTTP receiver in the harness answering 204 at once; the \
         server has no in-process no-op channel, so the in-process variant is N/A."
            .into(),
    );
    w.notes.push(
        "Lag is enqueue-to-delivery (created_at to sent_at); the claim time is not stored.".into(),
    );
    w.figure(
        "workers",
        WORKERS
            .iter()
            .enumerate()
            .map(|(wi, &n)| json!({"workers": n, "deliveries_per_sec": service[wi], "store_only_per_sec": baseline[wi], "before_build_per_sec": service_before[wi]}))
            .collect::<Vec<_>>(),
    );
    w.figure(
        "soak",
        json!({
            "rate": rate,
            "seconds": ctx.tier.soak.as_secs_f64(),
            "lag_p50_ms": soak.lag_p50_ms,
            "lag_p99_ms": soak.lag_p99_ms,
            "dead_tuples": soak.samples.iter().map(|s| json!([s.0, s.1])).collect::<Vec<_>>(),
            "delivered": soak.delivered,
            "autovacuum_runs": soak.autovacuums,
            "live_rows_at_start": soak.live_before,
        }),
    );
    plot_soak(&path, &w.figures)?;
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

/// The soak's figure from its results JSON: do dead tuples stay bounded?
pub fn plot_soak(path: &std::path::Path, figures: &serde_json::Value) -> anyhow::Result<()> {
    let soak = &figures["soak"];
    let points: Vec<(f64, f64)> = soak["dead_tuples"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
        .collect();
    let title = format!(
        "Do dead tuples stay bounded? deliveries, soak at {}/s",
        plots::tick(soak["rate"].as_f64().unwrap_or(f64::NAN))
    );
    plots::line_charts(
        path,
        vec![plots::Chart {
            axes: plots::Axes {
                title: &title,
                x_label: "seconds into the soak",
                y_label: "dead tuples (n_dead_tup)",
                log_x: false,
                log_y: false,
            },
            series: vec![plots::Series::line("dead tuples in deliveries", points)],
            markers: vec![],
            x_ticks: None,
            legend: None,
        }],
    )
}

struct Soak {
    lag_p50_ms: f64,
    lag_p99_ms: f64,
    /// (seconds, dead tuples)
    samples: Vec<(f64, f64)>,
    delivered: i64,
    /// Autovacuum runs on `deliveries` during the soak.
    autovacuums: i64,
    /// Live rows in `deliveries` when the soak began (autovacuum's threshold
    /// is 50 + 20% of them by default).
    live_before: i64,
}

/// One drain of `backlog` deliveries by `n` workers of `bin` into the sink;
/// returns deliveries/s.
async fn service_drain(
    ctx: &Ctx,
    endpoint: Uuid,
    n: usize,
    bin: &std::path::Path,
    run_no: usize,
    limit: Duration,
) -> anyhow::Result<f64> {
    let backlog = ctx.tier.drain_backlog;
    let workers = start_workers(ctx, n, bin).await?;
    let received_before = ctx.sink_received();
    let t0 = Instant::now();
    enqueue(ctx, endpoint, backlog, &format!("svc-{run_no}")).await?;
    let drained = wait_drained(ctx, limit).await;
    let secs = t0.elapsed().as_secs_f64();
    for worker in workers {
        worker.stop().await;
    }
    drained?;
    let received = ctx.sink_received() - received_before;
    anyhow::ensure!(
        received >= backlog as u64,
        "the sink received {received} of {backlog} deliveries"
    );
    Ok(backlog as f64 / secs)
}

async fn soak(ctx: &Ctx, endpoint: Uuid, rate: f64) -> anyhow::Result<Soak> {
    let workers = start_workers(ctx, 2, &ctx.bin).await?;
    let vacuums_before = crate::pg::autovacuum_count(&ctx.pool, "deliveries").await?;
    let (live_before, _) = crate::pg::dead_tuples(&ctx.pool, "deliveries").await?;
    let started_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&ctx.pool)
        .await?;
    let t0 = Instant::now();
    let tick = Duration::from_millis(100);
    let per_tick = (rate * tick.as_secs_f64()).max(1.0);
    let mut owed = 0.0;
    let mut samples = vec![];
    let mut next_sample = Duration::ZERO;
    let mut i = 0u64;
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    while t0.elapsed() < ctx.tier.soak {
        interval.tick().await;
        owed += per_tick;
        let n = owed.floor() as i64;
        owed -= n as f64;
        if n > 0 {
            i += 1;
            enqueue(ctx, endpoint, n, &format!("soak-{i}")).await?;
        }
        if t0.elapsed() >= next_sample {
            let (_, dead) = crate::pg::dead_tuples(&ctx.pool, "deliveries").await?;
            samples.push((t0.elapsed().as_secs_f64(), dead as f64));
            next_sample += ctx.tier.soak / 30;
        }
    }
    wait_drained(ctx, Duration::from_secs(120)).await?;
    let autovacuums = crate::pg::autovacuum_count(&ctx.pool, "deliveries").await? - vacuums_before;
    for worker in workers {
        worker.stop().await;
    }
    // Sent rows are moved to deliveries_sent (migration 0022); an earlier
    // build (BENCH_BEFORE_BIN) leaves them in deliveries.
    let lags: Vec<f64> = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM sent_at - created_at)::float8 * 1000
         FROM deliveries WHERE tenant_id = $1 AND created_at >= $2 AND status = 'sent'
         UNION ALL
         SELECT EXTRACT(EPOCH FROM sent_at - created_at)::float8 * 1000
         FROM deliveries_sent WHERE tenant_id = $1 AND created_at >= $2",
    )
    .bind(tenant_uuid(TENANT))
    .bind(started_at)
    .fetch_all(&ctx.pool)
    .await?;
    Ok(Soak {
        lag_p50_ms: percentile(&lags, 50.0),
        lag_p99_ms: percentile(&lags, 99.0),
        samples,
        delivered: lags.len() as i64,
        autovacuums,
        live_before,
    })
}
