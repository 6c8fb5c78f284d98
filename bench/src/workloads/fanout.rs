//! Workload fanout: fan-out on read versus on write. For audiences of 1 to 10,000
//! (teams `fanout-N` of tenant 0, members: its first N users), each design writes
//! the same events and the same reader (user-0, a member of every such team and
//! of its ordinary teams) reads the first page:
//!
//! - **store once** (ours): one `events` row per event; the reader's page is the
//!   server's feed statement (bench/sql/feed_page_walk.sql) over their teams.
//! - **materialised**: the event row plus one row per recipient in a bench-only
//!   table `bench.feed_materialised` keyed (tenant, user, tx, id), written in the
//!   event's transaction; the page is one index range scan, with the same
//!   capped unread/unseen counts the feed statement computes. The reader's
//!   newest 1,000 items per team are materialised beforehand.
//!
//! Per design and audience: write latency (one transaction per event, commit
//! included), rows and WAL bytes per event (`pg_current_wal_insert_lsn`
//! difference), read latency. From those, the break-even read/write ratio
//! (consumer reads per producer event above which materialising costs less
//! database time) is compared with where the core's policy
//! (`tidings_core::decide`, default thresholds) switches to fan-out on write.

use std::time::Instant;

use serde_json::json;
use sqlx::{Connection, PgConnection};
use tidings_core::{decide, FanoutThresholds, Rates, SendKind};

use super::Ctx;
use crate::{
    pg, plots,
    report::{Table, WorkloadResult},
    seed::tenant_uuid,
    sqlfile::SqlFile,
    stats::{median, percentile},
};

const READER: &str = "user-0";
const READS: usize = 50;

const SETUP: &str = "
CREATE TABLE IF NOT EXISTS bench.feed_materialised (
    tenant_id  uuid NOT NULL,
    user_id    text NOT NULL,
    tx         bigint NOT NULL,
    id         bigint NOT NULL,
    team_id    text NOT NULL,
    type       text NOT NULL,
    actor_id   text,
    object_id  text,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, user_id, tx, id)
)";

const WRITE_ONCE: &str =
    "INSERT INTO events (tenant_id, team_id, type, actor_id, object_id, payload)
     VALUES ($1, $2, 'comment', 'user-1', 'doc-1', '{\"text\": \"commented on the design doc\"}')
     RETURNING id";

const WRITE_MATERIALISED: &str = "WITH e AS (
        INSERT INTO events (tenant_id, team_id, type, actor_id, object_id, payload)
        VALUES ($1, $2, 'comment', 'user-1', 'doc-1', '{\"text\": \"commented on the design doc\"}')
        RETURNING *
     )
     INSERT INTO bench.feed_materialised
     SELECT e.tenant_id, m.user_id, e.tx, e.id, e.team_id, e.type, e.actor_id, e.object_id, e.payload, e.created_at
     FROM e JOIN memberships m ON m.tenant_id = e.tenant_id AND m.team_id = e.team_id";

/// The same answer as the feed statement's first page with zero watermarks:
/// 21 newest rows, head, unread and unseen capped at 1,001.
const READ_MATERIALISED: &str = "WITH page AS (
        SELECT id, tx, team_id, type, actor_id, object_id, payload, created_at
        FROM bench.feed_materialised
        WHERE tenant_id = $1 AND user_id = $2
        ORDER BY tx DESC, id DESC LIMIT 21
     ),
     unread AS (SELECT count(*) AS n FROM (SELECT 1 FROM bench.feed_materialised
                 WHERE tenant_id = $1 AND user_id = $2 AND (tx, id) > (0, 0) LIMIT 1001) c),
     unseen AS (SELECT count(*) AS n FROM (SELECT 1 FROM bench.feed_materialised
                 WHERE tenant_id = $1 AND user_id = $2 AND (tx, id) > (0, 0) LIMIT 1001) c)
     SELECT p.*, (SELECT n FROM unread), (SELECT n FROM unseen),
            (SELECT max(tx) FROM page) AS head_tx
     FROM page p ORDER BY tx DESC, id DESC";

struct Point {
    audience: i64,
    write_once_ms: f64,
    write_mat_ms: f64,
    wal_once: f64,
    wal_mat: f64,
    read_once_ms: f64,
    read_mat_ms: f64,
    read_once_p99_ms: f64,
    read_mat_p99_ms: f64,
}

impl Point {
    /// Consumer reads per producer event above which materialising saves
    /// database time; infinite when a materialised read is not cheaper.
    fn break_even(&self) -> f64 {
        let extra_write = self.write_mat_ms - self.write_once_ms;
        let saved_per_read = self.read_once_ms - self.read_mat_ms;
        if saved_per_read <= 0.0 {
            f64::INFINITY
        } else {
            // No measurable extra write time (within noise): pays at any read rate.
            (extra_write / (self.audience as f64 * saved_per_read)).max(0.0)
        }
    }
}

/// Where the policy switches: the reads-per-event ratio above which `decide`
/// materialises (searched on a log grid, then bisected), or infinity if it
/// never does for this audience.
fn policy_break_even(audience: i64) -> f64 {
    let t = FanoutThresholds::default();
    let materialises = |ratio: f64| {
        decide(
            SendKind::ActivityEvent,
            audience as u64,
            Some(Rates {
                producer_events_per_sec: 1.0,
                consumer_reads_per_sec: ratio,
            }),
            &t,
        )
        .strategy
            != tidings_core::Strategy::StoreOnceReadTime
    };
    let grid = |step: i32| 10f64.powf(-3.0 + f64::from(step) * 0.05);
    let Some(first) = (0..=120).find(|&step| materialises(grid(step))) else {
        return f64::INFINITY;
    };
    if first == 0 {
        return grid(0);
    }
    let (mut lo, mut hi) = (grid(first - 1), grid(first));
    for _ in 0..40 {
        let mid = (lo + hi) / 2.0;
        if materialises(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

async fn time_writes(
    conn: &mut PgConnection,
    sql: &str,
    team: &str,
    n: i64,
) -> anyhow::Result<(f64, f64)> {
    let tenant = tenant_uuid(0);
    let wal0 = pg::wal_lsn(conn).await?;
    let mut lat = vec![];
    for _ in 0..n {
        let t0 = Instant::now();
        sqlx::query(sql)
            .bind(tenant)
            .bind(team)
            .execute(&mut *conn)
            .await?;
        lat.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let wal = (pg::wal_lsn(conn).await? - wal0) as f64 / n as f64;
    Ok((median(&lat), wal))
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    if !ctx.seeded.has_feed_tables {
        return Ok(WorkloadResult::skipped(
            "fanout",
            "the feed tables (memberships, events) are not on this branch yet",
        ));
    }
    let feed_sql_path = ctx.repo.join("bench/sql/feed_page_walk.sql");
    if !feed_sql_path.exists() {
        return Ok(WorkloadResult::skipped(
            "fanout",
            "bench/sql/feed_page_walk.sql is missing",
        ));
    }
    let feed_sql = SqlFile::load(&feed_sql_path)?.statements[0]
        .trim_end_matches(';')
        .to_string();
    let mut w = WorkloadResult::new("fanout");
    let tenant = tenant_uuid(0);
    let mut conn = ctx.target.connect().await?;
    sqlx::query(SETUP).execute(&mut conn).await?;
    for &n in &ctx.tier.fanout_audiences {
        sqlx::query(
            "INSERT INTO memberships (tenant_id, team_id, user_id)
             SELECT $1, 'fanout-' || $2, user_id FROM bench.users WHERE tenant = 0 ORDER BY u LIMIT $2
             ON CONFLICT DO NOTHING",
        )
        .bind(tenant)
        .bind(n)
        .execute(&mut conn)
        .await?;
    }
    sqlx::query(
        "INSERT INTO bench.feed_materialised
         SELECT m.tenant_id, m.user_id, e.tx, e.id, e.team_id, e.type, e.actor_id, e.object_id, e.payload, e.created_at
         FROM memberships m CROSS JOIN LATERAL (
             SELECT * FROM events e
             WHERE e.tenant_id = m.tenant_id AND e.team_id = m.team_id
               AND (e.tx, e.id) > (m.joined_tx, m.joined_id)
             ORDER BY e.tx DESC, e.id DESC LIMIT 1000) e
         WHERE m.tenant_id = $1 AND m.user_id = $2
         ON CONFLICT DO NOTHING",
    )
    .bind(tenant)
    .bind(READER)
    .execute(&mut conn)
    .await?;
    sqlx::raw_sql("ANALYZE bench.feed_materialised; ANALYZE memberships")
        .execute(&mut conn)
        .await?;

    let mut points = vec![];
    for &n in &ctx.tier.fanout_audiences {
        eprintln!("  fan-out audience {n}");
        let team = format!("fanout-{n}");
        let writes = ctx.tier.fanout_writes;
        // Interleaved by design: once, materialised, once, materialised…
        let (mut once, mut mat, mut wal_once, mut wal_mat) = (vec![], vec![], vec![], vec![]);
        for _ in 0..ctx.tier.reps {
            let (l, wl) = time_writes(&mut conn, WRITE_ONCE, &team, writes).await?;
            once.push(l);
            wal_once.push(wl);
            let (l, wl) = time_writes(&mut conn, WRITE_MATERIALISED, &team, writes).await?;
            mat.push(l);
            wal_mat.push(wl);
        }
        // The reader's teams, as the membership cache would hand them over.
        let teams: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT team_id, joined_tx, joined_id FROM memberships
             WHERE tenant_id = $1 AND user_id = $2 ORDER BY team_id",
        )
        .bind(tenant)
        .bind(READER)
        .fetch_all(&mut conn)
        .await?;
        let team_ids: Vec<String> = teams.iter().map(|t| t.0.clone()).collect();
        let joined_tx: Vec<i64> = teams.iter().map(|t| t.1).collect();
        let joined_id: Vec<i64> = teams.iter().map(|t| t.2).collect();
        // Nothing writes while reading: the snapshot's xmax is the horizon.
        let horizon: i64 =
            sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
                .fetch_one(&mut conn)
                .await?;
        let (mut r_once, mut r_mat) = (vec![], vec![]);
        for _ in 0..READS {
            let t0 = Instant::now();
            sqlx::query(&feed_sql)
                .bind(tenant)
                .bind(READER)
                .bind(&team_ids)
                .bind(&joined_tx)
                .bind(&joined_id)
                .bind(i64::from(tidings_core::BADGE_CAP) + 1)
                .bind(0i64)
                .bind(0i64)
                .bind(i64::MAX)
                .bind(i64::MAX)
                .bind(21i64)
                .bind(horizon)
                // No counts carried over: every read walks its badges in full,
                // as before incremental counts (the conservative side).
                .bind(Vec::<i64>::new())
                .fetch_all(&mut conn)
                .await?;
            r_once.push(t0.elapsed().as_secs_f64() * 1000.0);
            let t0 = Instant::now();
            sqlx::query(READ_MATERIALISED)
                .bind(tenant)
                .bind(READER)
                .fetch_all(&mut conn)
                .await?;
            r_mat.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        points.push(Point {
            audience: n,
            write_once_ms: median(&once),
            write_mat_ms: median(&mat),
            wal_once: median(&wal_once),
            wal_mat: median(&wal_mat),
            read_once_ms: median(&r_once),
            read_mat_ms: median(&r_mat),
            read_once_p99_ms: percentile(&r_once, 99.0),
            read_mat_p99_ms: percentile(&r_mat, 99.0),
        });
    }
    conn.close().await.ok();

    let mut t = Table::new(
        "Fan-out on read (store once) vs on write (materialised): medians over the repetitions",
        &[
            "audience",
            "write ms once / mat.",
            "rows/event once / mat.",
            "WAL bytes/event once / mat.",
            "read ms once / mat. (p99)",
            "break-even reads/event measured",
            "policy materialises above",
            "policy decision at 0.5 reads/event per pair",
        ],
    );
    let mut figures = vec![];
    for p in &points {
        let policy = policy_break_even(p.audience);
        let example = decide(
            SendKind::ActivityEvent,
            p.audience as u64,
            Some(Rates {
                producer_events_per_sec: 0.01,
                consumer_reads_per_sec: 0.005,
            }),
            &FanoutThresholds::default(),
        );
        let show = |x: f64| {
            if !x.is_finite() {
                "never".into()
            } else if x == 0.0 {
                "any (no measurable extra write)".into()
            } else {
                format!("{x:.4}")
            }
        };
        t.row(vec![
            p.audience.to_string(),
            format!("{:.2} / {:.2}", p.write_once_ms, p.write_mat_ms),
            format!("1 / {}", 1 + p.audience),
            format!("{:.0} / {:.0}", p.wal_once, p.wal_mat),
            format!(
                "{:.2} / {:.2} ({:.2} / {:.2})",
                p.read_once_ms, p.read_mat_ms, p.read_once_p99_ms, p.read_mat_p99_ms
            ),
            show(p.break_even()),
            show(policy),
            example.strategy.as_str().to_string(),
        ]);
        figures.push(json!({
            "audience": p.audience,
            "write_once_ms": p.write_once_ms,
            "write_materialised_ms": p.write_mat_ms,
            "rows_once": 1,
            "rows_materialised": 1 + p.audience,
            "wal_bytes_once": p.wal_once,
            "wal_bytes_materialised": p.wal_mat,
            "read_once_ms": p.read_once_ms,
            "read_materialised_ms": p.read_mat_ms,
            "read_once_p99_ms": p.read_once_p99_ms,
            "read_materialised_p99_ms": p.read_mat_p99_ms,
            "notes_break_even_measured": if p.break_even().is_finite() { json!(p.break_even()) } else { json!("never") },
            "notes_break_even_policy": if policy.is_finite() { json!(policy) } else { json!("never") },
        }));
    }
    w.tables.push(t);
    w.figure("audiences", figures);

    let (path, file) = ctx.plot_path("fanout");
    plot(&path, &w.figures)?;
    w.plots.push(file);
    let verdict: Vec<String> = points
        .iter()
        .map(|p| {
            let (m, pol) = (p.break_even(), policy_break_even(p.audience));
            let agree = match (m.is_finite(), pol.is_finite()) {
                (false, false) => "agree (never materialise)".to_string(),
                (true, false) => format!("policy never materialises; measured pays above {m:.3} reads/event"),
                (false, true) => format!("policy materialises above {pol:.2} reads/event; measured never pays"),
                (true, true) if m == 0.0 => format!(
                    "policy switches at {pol:.2} reads/event; materialising cost no measurable \
                     extra write time here, so it pays at any read rate"
                ),
                (true, true) => format!(
                    "policy switches at {pol:.2}, measured break-even {m:.4} reads/event ({:.0}× {})",
                    (pol / m).max(m / pol),
                    if pol > m { "more conservative" } else { "too eager" }
                ),
            };
            format!("audience {}: {agree}", p.audience)
        })
        .collect();
    w.notes.push(format!("Crossover: {}.", verdict.join("; ")));
    w.notes.push(format!(
        "The policy is tidings_core::decide with its default thresholds: it materialises when \
         reads per event exceed push_above_reads_per_event = {:?} (Feeding Frenzy's rule). A \
         deployment that weighs database time alone may set that cost ratio to the measured \
         break-even; the write side's rows, WAL and purges are not in it.",
        FanoutThresholds::default().push_above_reads_per_event
    ));
    w.notes.push(
        "Write latency is one transaction per event with synchronous_commit on, so small writes \
         are dominated by the WAL flush; reads are the reader's first page (limit 20) with counts."
            .into(),
    );
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

/// The workload's figure from its results JSON: write latency and WAL per
/// event for both designs, and where materialising pays against where the
/// policy switches.
pub fn plot(path: &std::path::Path, figures: &serde_json::Value) -> anyhow::Result<()> {
    let audiences: Vec<&serde_json::Value> = figures["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let xs = |key: &str| -> Vec<(f64, f64)> {
        audiences
            .iter()
            .filter_map(|a| Some((a["audience"].as_f64()?, a[key].as_f64()?)))
            .collect()
    };
    let t_default = FanoutThresholds::default();
    plots::line_charts(
        path,
        vec![
            plots::Chart {
                axes: plots::Axes {
                    title: "Write latency per event",
                    x_label: "audience (recipients)",
                    y_label: "ms per event (commit included)",
                    log_x: true,
                    log_y: true,
                },
                series: vec![
                    plots::Series::line("store once", xs("write_once_ms")),
                    plots::Series::line("materialised", xs("write_materialised_ms")),
                ],
                markers: vec![],
                x_ticks: None,
                legend: Some(plots::SeriesLabelPosition::UpperLeft),
            },
            plots::Chart {
                axes: plots::Axes {
                    title: "WAL bytes per event",
                    x_label: "audience (recipients)",
                    y_label: "bytes per event",
                    log_x: true,
                    log_y: true,
                },
                series: vec![
                    plots::Series::line("store once", xs("wal_bytes_once")),
                    plots::Series::line("materialised", xs("wal_bytes_materialised")),
                ],
                markers: vec![],
                x_ticks: None,
                legend: Some(plots::SeriesLabelPosition::UpperLeft),
            },
            plots::Chart {
                axes: plots::Axes {
                    title: "Materialising pays above … reads per event",
                    x_label: "audience (recipients)",
                    y_label: "consumer reads / producer event",
                    log_x: true,
                    log_y: true,
                },
                series: vec![
                    // Non-numbers ("never") and 0 (no measurable extra write)
                    // have no place on a log axis; the table lists them.
                    plots::Series::line("measured break-even", xs("notes_break_even_measured")),
                    plots::Series::points(
                        "tidings_core::decide switches",
                        xs("notes_break_even_policy"),
                    ),
                ],
                markers: vec![(
                    t_default.write_max_for_events as f64,
                    format!(
                        "write_max_for_events = {}: never above",
                        t_default.write_max_for_events
                    ),
                )],
                x_ticks: None,
                legend: Some(plots::SeriesLabelPosition::LowerRight),
            },
        ],
    )
}
