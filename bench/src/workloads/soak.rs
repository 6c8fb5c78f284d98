//! Workload soak: does Tidings stay flat over time when its
//! retention purge runs throughout?
//!
//! A database of its own (`tidings_bench_soak`, nothing seeded), a `tidings
//! serve` with retention cut to `retention` (deliveries, dead deliveries,
//! idempotency keys, and the soak tenant's feed), two outbox workers
//! delivering to the no-op sink, and mixed open-loop load for `duration`:
//! events, alerts (in-app + webhook, with an Idempotency-Key), feed reads,
//! watermark marks and one-by-one reads. Every `sample_every` it records
//! table + index sizes and dead tuples of the tables the load writes, the
//! outbox depth and the server's RSS; every second it scrapes `/metrics` for
//! the purge's deleted rows, which marks each second as "purging" or not.
//!
//! Aims: sizes and dead tuples of the last quarter within ±10 % of
//! the second quarter (the first is warm-up: retention has not cut in yet),
//! RSS likewise, and feed p99 in seconds with purge activity at most 1.5× the
//! p99 of seconds without.

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::{counter_sum, fmt_ms, Ctx};
use crate::{
    pg::Target,
    plots,
    report::{Aim, Table, WorkloadResult},
    server::{self, Launch, Tidings, ADMIN_TOKEN, METRICS_TOKEN},
    stats::percentile,
    tier::TierName,
};

/// The tables the load writes and the purge must keep flat.
const TABLES: &[&str] = &[
    "events",
    "inbox_items",
    "alerts",
    "notifications",
    "deliveries",
    // Sent deliveries moved out by the outbox's completion (migration 0022).
    "deliveries_sent",
    "idempotency_keys",
    "item_reads",
];

#[derive(Debug, Clone, serde::Serialize)]
struct Plan {
    duration_secs: u64,
    retention_secs: u64,
    purge_interval_secs: u64,
    sample_every_secs: u64,
    events_per_sec: f64,
    alerts_per_sec: f64,
    reads_per_sec: f64,
    marks_per_sec: f64,
    users: usize,
    teams: usize,
    recipients_per_alert: usize,
}

fn plan(tier: TierName) -> Plan {
    match tier {
        TierName::S => Plan {
            duration_secs: 40,
            retention_secs: 8,
            purge_interval_secs: 4,
            sample_every_secs: 2,
            events_per_sec: 20.0,
            alerts_per_sec: 10.0,
            reads_per_sec: 40.0,
            marks_per_sec: 4.0,
            users: 20,
            teams: 4,
            recipients_per_alert: 3,
        },
        TierName::M => Plan {
            duration_secs: 600,
            retention_secs: 60,
            purge_interval_secs: 20,
            sample_every_secs: 10,
            events_per_sec: 50.0,
            alerts_per_sec: 20.0,
            reads_per_sec: 100.0,
            marks_per_sec: 10.0,
            users: 60,
            teams: 6,
            recipients_per_alert: 3,
        },
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    if !ctx.route_exists(reqwest::Method::GET, "/metrics").await? {
        return Ok(WorkloadResult::skipped(
            "soak",
            "GET /metrics and the retention purge are not on this branch yet",
        ));
    }
    let plan = plan(ctx.tier.name);
    let target = Target::new(&ctx.target.admin_url, "tidings_bench_soak")?;
    eprintln!("  soak: database {} (fresh, not seeded)", target.database);
    target.recreate().await?;
    server::migrate(&ctx.bin, &target.url).await?;
    let pool = target.pool(4).await?;
    let (retention, interval) = (
        plan.retention_secs.to_string(),
        plan.purge_interval_secs.to_string(),
    );
    let env: Vec<(String, String)> = [
        ("TIDINGS_RETENTION_DELIVERED_SECS", retention.as_str()),
        ("TIDINGS_RETENTION_DEAD_SECS", retention.as_str()),
        ("TIDINGS_IDEMPOTENCY_RETENTION_SECS", retention.as_str()),
        ("TIDINGS_RETENTION_INTERVAL_SECS", interval.as_str()),
        ("TIDINGS_IDEMPOTENCY_PURGE_INTERVAL_SECS", interval.as_str()),
        ("TIDINGS_OUTBOX_WORKERS", "2"),
        ("TIDINGS_WEBHOOK_ALLOW_PRIVATE", "loopback"),
        ("TIDINGS_METRICS_SAMPLE_SECS", "5"),
        // The soak paces its own load and measures sizes, not limits.
        ("TIDINGS_RATE_LIMITS", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let serve = Tidings::serve(Launch {
        bin: &ctx.bin,
        database_url: &target.url,
        log_dir: &ctx.work_dir,
        name: "soak-serve",
        env,
    })
    .await?;
    let outcome = soak(ctx, &plan, &pool, &serve).await;
    serve.stop().await;
    pool.close().await;
    outcome
}

/// What the soak tenant's load needs: its API key and a token per user.
struct Actors {
    base: String,
    api_key: String,
    tokens: Vec<String>,
    teams: usize,
}

async fn set_up(ctx: &Ctx, plan: &Plan, base: &str) -> anyhow::Result<Actors> {
    let http = &ctx.http;
    let tenant: Value = http
        .post(format!("{base}/v1/admin/tenants"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "soak"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let tenant_id: uuid::Uuid = tenant["tenant_id"].as_str().context("tenant_id")?.parse()?;
    let api_key = tenant["api_key"].as_str().context("api_key")?.to_string();
    http.put(format!("{base}/v1/admin/tenants/{tenant_id}/retention"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"feed_retention_secs": plan.retention_secs}))
        .send()
        .await?
        .error_for_status()
        .context("setting the soak tenant's feed retention")?;
    super::create_sink_endpoint(http, base, &api_key, &ctx.sink_url).await?;
    let mut tokens = Vec::with_capacity(plan.users);
    for u in 0..plan.users {
        let user = format!("user-{u}");
        let team = format!("team-{}", u % plan.teams);
        http.put(format!("{base}/v1/teams/{team}/members/{user}"))
            .bearer_auth(&api_key)
            .send()
            .await?
            .error_for_status()?;
        let minted: Value = http
            .post(format!("{base}/v1/user-tokens"))
            .bearer_auth(&api_key)
            .json(&json!({"user_id": user, "ttl_seconds": 7200}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        tokens.push(minted["token"].as_str().context("token")?.to_string());
    }
    Ok(Actors {
        base: base.to_string(),
        api_key,
        tokens,
        teams: plan.teams,
    })
}

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    failed: AtomicU64,
    /// Requests not sent because too many were in flight (open loop overload).
    overload: AtomicU64,
}

/// Runs `make(n)` at `per_sec` until `until`, open loop, at most `limit` in flight.
async fn paced<F, Fut>(
    per_sec: f64,
    until: Instant,
    limit: Arc<Semaphore>,
    tally: Arc<Tally>,
    mut make: F,
) where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = bool> + Send + 'static,
{
    let tick = Duration::from_millis(20);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut owed, mut n) = (0.0, 0u64);
    while Instant::now() < until {
        interval.tick().await;
        owed += per_sec * tick.as_secs_f64();
        while owed >= 1.0 {
            owed -= 1.0;
            n += 1;
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                tally.overload.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let (fut, tally) = (make(n), tally.clone());
            tokio::spawn(async move {
                let ok = fut.await;
                let counter = if ok { &tally.sent } else { &tally.failed };
                counter.fetch_add(1, Ordering::Relaxed);
                drop(permit);
            });
        }
    }
}

/// Cheap, deterministic spread of `n` over `0..m`.
fn pick(n: u64, salt: u64, m: usize) -> usize {
    (n.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(salt) >> 17) as usize % m.max(1)
}

async fn ok(answer: reqwest::Result<reqwest::Response>) -> bool {
    matches!(answer, Ok(r) if r.status().is_success())
}

/// The sum of every sample of a counter in Prometheus text.
fn rss_bytes(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb * 1024.0)
}

/// One sample of the database and the process.
#[derive(Debug, Clone, Default)]
struct Sample {
    t: f64,
    bytes: HashMap<String, f64>,
    dead: HashMap<String, f64>,
    outbox: f64,
    rss: f64,
}

async fn sample(pool: &sqlx::PgPool, pid: u32, t: f64) -> anyhow::Result<Sample> {
    let tables: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
    let rows: Vec<(String, f64, f64)> = sqlx::query_as(
        "SELECT relname::text, pg_total_relation_size(relid)::float8, n_dead_tup::float8
           FROM pg_stat_user_tables WHERE relname = ANY($1)",
    )
    .bind(&tables)
    .fetch_all(pool)
    .await?;
    let outbox: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deliveries WHERE status IN ('pending', 'retrying', 'sending')",
    )
    .fetch_one(pool)
    .await?;
    let mut s = Sample {
        t,
        outbox: outbox as f64,
        rss: rss_bytes(pid),
        ..Default::default()
    };
    for (name, bytes, dead) in rows {
        s.bytes.insert(name.clone(), bytes);
        s.dead.insert(name, dead);
    }
    Ok(s)
}

async fn soak(
    ctx: &Ctx,
    plan: &Plan,
    pool: &sqlx::PgPool,
    serve: &Tidings,
) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    let actors = Arc::new(set_up(ctx, plan, &serve.base_url).await?);
    let pid = serve.pid().context("the soak's server has no pid")?;
    let duration = Duration::from_secs(plan.duration_secs);
    let t0 = Instant::now();
    let until = t0 + duration;
    let limit = Arc::new(Semaphore::new(256));
    let http = ctx.http.clone();
    // (seconds since t0, latency ms) of every feed read.
    let reads: Arc<Mutex<Vec<(f64, f64)>>> = Arc::default();
    let tallies: Vec<(&str, Arc<Tally>)> = ["events", "alerts", "reads", "marks"]
        .into_iter()
        .map(|k| (k, Arc::new(Tally::default())))
        .collect();
    let tally = |k: &str| {
        tallies
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, t)| t.clone())
            .unwrap()
    };

    let events = {
        let (a, h) = (actors.clone(), http.clone());
        paced(
            plan.events_per_sec,
            until,
            limit.clone(),
            tally("events"),
            move |n| {
                let (a, h) = (a.clone(), h.clone());
                async move {
                    let team = format!("team-{}", pick(n, 1, a.teams));
                    let body = json!({"team_id": team, "type": "soak.event", "actor_id": "user-0",
                                  "payload": {"n": n}, "idempotency_key": format!("ev-{n}")});
                    ok(h.post(format!("{}/v1/events", a.base))
                        .bearer_auth(&a.api_key)
                        .json(&body)
                        .send()
                        .await)
                    .await
                }
            },
        )
    };
    let alerts = {
        let (a, h, per) = (actors.clone(), http.clone(), plan.recipients_per_alert);
        paced(
            plan.alerts_per_sec,
            until,
            limit.clone(),
            tally("alerts"),
            move |n| {
                let (a, h) = (a.clone(), h.clone());
                async move {
                    let recipients: Vec<String> = (0..per as u64)
                        .map(|i| format!("user-{}", pick(n, 7 + i, a.tokens.len())))
                        .collect();
                    let body = json!({"event_type": "soak.alert", "entity_id": format!("e-{n}"),
                                  "recipients": recipients, "channels": ["in_app", "webhook"],
                                  "subject": "soak", "payload": {"n": n}});
                    ok(h.post(format!("{}/v1/alerts", a.base))
                        .bearer_auth(&a.api_key)
                        .header("Idempotency-Key", format!("al-{n}"))
                        .json(&body)
                        .send()
                        .await)
                    .await
                }
            },
        )
    };
    let feed = {
        let (a, h, reads) = (actors.clone(), http.clone(), reads.clone());
        paced(
            plan.reads_per_sec,
            until,
            limit.clone(),
            tally("reads"),
            move |n| {
                let (a, h, reads) = (a.clone(), h.clone(), reads.clone());
                async move {
                    let user = pick(n, 3, a.tokens.len());
                    let sent = Instant::now();
                    let answer = h
                        .get(format!("{}/v1/feed?limit=20", a.base))
                        .bearer_auth(&a.tokens[user])
                        .send()
                        .await;
                    let Ok(reply) = answer else { return false };
                    if !reply.status().is_success() {
                        return false;
                    }
                    let page: Value = reply.json().await.unwrap_or_default();
                    let ms = sent.elapsed().as_secs_f64() * 1000.0;
                    reads
                        .lock()
                        .expect("reads")
                        .push((sent.duration_since(t0).as_secs_f64(), ms));
                    // One read in ten also reads its third item one by one.
                    if n % 10 == 0 {
                        if let Some(id) = page["items"][2]["id"].as_i64() {
                            let _ = h
                                .post(format!("{}/v1/feed/items/{id}/read", a.base))
                                .bearer_auth(&a.tokens[user])
                                .send()
                                .await;
                        }
                    }
                    true
                }
            },
        )
    };
    let marks = {
        let (a, h) = (actors.clone(), http.clone());
        paced(
            plan.marks_per_sec,
            until,
            limit.clone(),
            tally("marks"),
            move |n| {
                let (a, h) = (a.clone(), h.clone());
                async move {
                    let user = pick(n, 5, a.tokens.len());
                    ok(h.post(format!("{}/v1/feed/read", a.base))
                        .bearer_auth(&a.tokens[user])
                        .json(&json!({}))
                        .send()
                        .await)
                    .await
                }
            },
        )
    };
    // Every second: the purge's cumulative deleted rows, from /metrics.
    let purge_seconds = {
        let (h, url) = (http.clone(), serve.url("/metrics"));
        async move {
            let mut out: Vec<(f64, f64)> = vec![];
            let mut interval = tokio::time::interval(Duration::from_secs(1));
            while Instant::now() < until {
                interval.tick().await;
                if let Ok(reply) = h.get(&url).bearer_auth(METRICS_TOKEN).send().await {
                    if let Ok(text) = reply.text().await {
                        let rows = counter_sum(&text, "tidings_retention_purged_rows_total", "");
                        out.push((t0.elapsed().as_secs_f64(), rows));
                    }
                }
            }
            out
        }
    };
    let samples = {
        let every = Duration::from_secs(plan.sample_every_secs);
        async move {
            let mut out = vec![];
            let mut next = t0 + every;
            while next <= until {
                tokio::time::sleep_until(next.into()).await;
                out.push(sample(pool, pid, t0.elapsed().as_secs_f64()).await?);
                next += every;
            }
            anyhow::Ok(out)
        }
    };
    let ((), (), (), (), purged, samples) =
        tokio::join!(events, alerts, feed, marks, purge_seconds, samples);
    let samples = samples?;
    // Let requests in flight finish.
    let _ = limit.acquire_many(256).await;

    let reads = reads.lock().expect("reads").clone();
    let mut w = WorkloadResult::new("soak");
    summarise(&mut w, plan, &samples, &purged, &reads, &tallies);
    let (path, file) = ctx.plot_path("soak");
    plot(&path, &w.figures)?;
    w.plots.push(file);
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

/// Mean of the samples whose time falls in quarter `q` (1-based) of `total`.
fn quarter_mean(points: &[(f64, f64)], total: f64, q: usize) -> f64 {
    let (lo, hi) = (total * (q - 1) as f64 / 4.0, total * q as f64 / 4.0);
    let vs: Vec<f64> = points
        .iter()
        .filter(|(t, v)| *t > lo && *t <= hi && v.is_finite())
        .map(|p| p.1)
        .collect();
    if vs.is_empty() {
        f64::NAN
    } else {
        vs.iter().sum::<f64>() / vs.len() as f64
    }
}

/// |last quarter ÷ second quarter − 1| in percent (against at least `floor`,
/// so that a near-empty second quarter does not make noise look like growth).
fn drift_pct(points: &[(f64, f64)], total: f64, floor: f64) -> (f64, f64, f64) {
    let (q2, q4) = (
        quarter_mean(points, total, 2),
        quarter_mean(points, total, 4),
    );
    ((q4 - q2).abs() / q2.max(floor) * 100.0, q2, q4)
}

fn summarise(
    w: &mut WorkloadResult,
    plan: &Plan,
    samples: &[Sample],
    purged: &[(f64, f64)],
    reads: &[(f64, f64)],
    tallies: &[(&str, Arc<Tally>)],
) {
    let total = plan.duration_secs as f64;
    let ts: Vec<f64> = samples.iter().map(|s| s.t).collect();
    let series_of = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples.iter().map(|s| (s.t, f(s))).collect()
    };
    let total_bytes = series_of(&|s| s.bytes.values().sum());
    let total_dead = series_of(&|s| s.dead.values().sum());
    let rss = series_of(&|s| s.rss);
    let outbox = series_of(&|s| s.outbox);

    // Seconds with purge activity: the deleted-rows counter moved.
    let purging: Vec<(f64, f64)> = purged
        .windows(2)
        .map(|p| (p[1].0, (p[1].1 - p[0].1).max(0.0)))
        .collect();
    let warm = total / 4.0;
    let is_purging = |t: f64| {
        purging
            .iter()
            .any(|(end, rows)| *rows > 0.0 && t > end - 1.0 && t <= *end)
    };
    let (mut during, mut quiet) = (vec![], vec![]);
    for &(t, ms) in reads.iter().filter(|(t, _)| *t > warm) {
        if is_purging(t) {
            during.push(ms);
        } else {
            quiet.push(ms);
        }
    }
    let (p99_during, p99_quiet) = (percentile(&during, 99.0), percentile(&quiet, 99.0));
    // Feed p99 per sample window, for the plot.
    let mut feed_p99 = vec![];
    let mut prev = 0.0;
    for &t in &ts {
        let window: Vec<f64> = reads
            .iter()
            .filter(|(rt, _)| *rt > prev && *rt <= t)
            .map(|r| r.1)
            .collect();
        if !window.is_empty() {
            feed_p99.push((t, percentile(&window, 99.0)));
        }
        prev = t;
    }
    let purged_per_window: Vec<(f64, f64)> = {
        let mut out = vec![];
        let mut prev = 0.0;
        for &t in &ts {
            let rows: f64 = purging
                .iter()
                .filter(|(e, _)| *e > prev && *e <= t)
                .map(|p| p.1)
                .sum();
            out.push((t, rows));
            prev = t;
        }
        out
    };

    let (size_drift, size_q2, size_q4) = drift_pct(&total_bytes, total, 1.0);
    let (dead_drift, dead_q2, dead_q4) = drift_pct(&total_dead, total, 1000.0);
    let (rss_drift, rss_q2, rss_q4) = drift_pct(&rss, total, 1.0);
    w.aims.push(Aim::below(
        "soak table + index size, last quarter vs second (±)",
        size_drift,
        "%",
        10.0,
    ));
    w.aims.push(Aim::below(
        "soak dead tuples, last quarter vs second (±; against at least 1,000)",
        dead_drift,
        "%",
        10.0,
    ));
    w.aims.push(Aim::below(
        "soak RSS of tidings serve, last quarter vs second (±)",
        rss_drift,
        "%",
        10.0,
    ));
    let purge_ratio = p99_during / p99_quiet;
    if purge_ratio.is_finite() {
        w.aims.push(Aim::below(
            "soak feed p99 in seconds with purging ÷ without",
            purge_ratio,
            "×",
            1.5,
        ));
    }

    let mut t = Table::new(
        &format!(
            "Soak: {} s of mixed load, retention {} s, purge every {} s; means of the second and last quarter",
            plan.duration_secs, plan.retention_secs, plan.purge_interval_secs
        ),
        &["table", "size q2 MB", "size q4 MB", "size Δ %", "dead q2", "dead q4"],
    );
    let mb = |v: f64| format!("{:.2}", v / 1e6);
    for &table in TABLES {
        let bytes = series_of(&|s| s.bytes.get(table).copied().unwrap_or(0.0));
        let dead = series_of(&|s| s.dead.get(table).copied().unwrap_or(0.0));
        let (d, q2, q4) = drift_pct(&bytes, total, 1.0);
        let (_, dq2, dq4) = drift_pct(&dead, total, 1.0);
        t.row(vec![
            table.into(),
            mb(q2),
            mb(q4),
            format!("{:+.1}", if q4 >= q2 { d } else { -d }),
            format!("{dq2:.0}"),
            format!("{dq4:.0}"),
        ]);
    }
    t.row(vec![
        "all".into(),
        mb(size_q2),
        mb(size_q4),
        format!(
            "{:+.1}",
            if size_q4 >= size_q2 {
                size_drift
            } else {
                -size_drift
            }
        ),
        format!("{dead_q2:.0}"),
        format!("{dead_q4:.0}"),
    ]);
    w.tables.push(t);
    let mut t2 = Table::new(
        "Soak: feed reads after warm-up, by whether the purge deleted rows in that second",
        &["seconds", "reads", "p50 ms", "p99 ms"],
    );
    for (name, ms) in [("purging", &during), ("not purging", &quiet)] {
        t2.row(vec![
            name.into(),
            ms.len().to_string(),
            fmt_ms(Some(percentile(ms, 50.0))),
            fmt_ms(Some(percentile(ms, 99.0))),
        ]);
    }
    w.tables.push(t2);
    let mut t3 = Table::new(
        "Soak: requests",
        &["kind", "answered 2xx", "failed", "not sent (overload)"],
    );
    for (kind, tally) in tallies {
        t3.row(vec![
            (*kind).into(),
            tally.sent.load(Ordering::Relaxed).to_string(),
            tally.failed.load(Ordering::Relaxed).to_string(),
            tally.overload.load(Ordering::Relaxed).to_string(),
        ]);
    }
    w.tables.push(t3);
    w.notes.push(format!(
        "RSS of tidings serve: {:.1} MB (second quarter) → {:.1} MB (last quarter).",
        rss_q2 / 1e6,
        rss_q4 / 1e6
    ));

    let pairs = |v: &[(f64, f64)]| -> Vec<Value> { v.iter().map(|p| json!([p.0, p.1])).collect() };
    let mut series = serde_json::Map::new();
    for &table in TABLES {
        let bytes = series_of(&|s| s.bytes.get(table).copied().unwrap_or(0.0));
        let dead = series_of(&|s| s.dead.get(table).copied().unwrap_or(0.0));
        series.insert(format!("bytes_{table}"), json!(pairs(&bytes)));
        series.insert(format!("n_dead_{table}"), json!(pairs(&dead)));
    }
    series.insert("outbox_rows".into(), json!(pairs(&outbox)));
    series.insert("rss_bytes".into(), json!(pairs(&rss)));
    series.insert("feed_p99_ms".into(), json!(pairs(&feed_p99)));
    series.insert("purged_rows".into(), json!(pairs(&purged_per_window)));
    w.figure("plan", plan);
    w.figure("series", Value::Object(series));
    w.figure("feed_p99_purging_ms", p99_during);
    w.figure("feed_p99_quiet_ms", p99_quiet);
    w.figure("size_drift_pct", size_drift);
    w.figure("dead_drift_pct", dead_drift);
    w.figure("rss_drift_pct", rss_drift);
    let mut requests = serde_json::Map::new();
    for (kind, tally) in tallies {
        requests.insert(
            format!("{kind}_answered"),
            json!(tally.sent.load(Ordering::Relaxed)),
        );
        requests.insert(
            format!("{kind}_errors"),
            json!(tally.failed.load(Ordering::Relaxed) + tally.overload.load(Ordering::Relaxed)),
        );
    }
    w.figure("requests", Value::Object(requests));
}

/// The soak's figure from its results JSON: six panels over time.
pub fn plot(path: &std::path::Path, figures: &Value) -> anyhow::Result<()> {
    let series = &figures["series"];
    let points = |key: &str, scale: f64| -> Vec<(f64, f64)> {
        series[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()? * scale)))
            .collect()
    };
    // Ticks every sixth of the soak: the axis ends where the soak does (the
    // automatic ticks would run a round step past it).
    let duration = figures["plan"]["duration_secs"].as_f64().unwrap_or(600.0);
    let x_ticks: Vec<f64> = (0..=6).map(|i| duration * f64::from(i) / 6.0).collect();
    let chart = |title: &'static str, y: &'static str, lines: Vec<plots::Series>, legend: bool| {
        let legend = legend.then_some(plots::SeriesLabelPosition::UpperLeft);
        plots::Panel::Lines(plots::Chart {
            axes: plots::Axes {
                title,
                x_label: "seconds into the soak",
                y_label: y,
                log_x: false,
                log_y: false,
            },
            series: lines,
            markers: vec![],
            x_ticks: Some(x_ticks.clone()),
            legend,
        })
    };
    // The purge runs every few samples: its running total reads better than
    // a comb of per-window counts (a straight line: a steady purge).
    let purged_total: Vec<(f64, f64)> = points("purged_rows", 1.0)
        .into_iter()
        .scan(0.0, |sum, (t, rows)| {
            *sum += rows;
            Some((t, *sum))
        })
        .collect();
    let per_table = |prefix: &str, scale: f64| -> Vec<plots::Series> {
        TABLES
            .iter()
            .map(|t| plots::Series::line(t, points(&format!("{prefix}{t}"), scale)))
            .collect()
    };
    plots::panels(
        path,
        (2, 3),
        &[
            chart(
                "Table + index size (flat after warm-up?)",
                "MB",
                per_table("bytes_", 1e-6),
                true,
            ),
            chart(
                "Dead tuples (tables coloured as on the left)",
                "n_dead_tup",
                per_table("n_dead_", 1.0),
                false,
            ),
            chart(
                "Feed p99 per sample window",
                "ms",
                vec![plots::Series::line(
                    "GET /v1/feed p99",
                    points("feed_p99_ms", 1.0),
                )],
                false,
            ),
            chart(
                "Outbox depth (pending, retrying, sending)",
                "deliveries",
                vec![plots::Series::line("outbox", points("outbox_rows", 1.0))],
                false,
            ),
            chart(
                "RSS of tidings serve",
                "MB",
                vec![plots::Series::line("RSS", points("rss_bytes", 1e-6))],
                false,
            ),
            chart(
                "Rows purged, running total",
                "rows",
                vec![plots::Series::line("purged", purged_total)],
                false,
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_over_their_labels_only() {
        let text = "# TYPE tidings_retention_purged_rows_total counter\n\
                    tidings_retention_purged_rows_total{table=\"events\"} 10\n\
                    tidings_retention_purged_rows_total{table=\"alerts\"} 2.5\n\
                    tidings_retention_purged_rows_total_other 99\n";
        assert_eq!(
            counter_sum(text, "tidings_retention_purged_rows_total", ""),
            12.5
        );
    }

    #[test]
    fn quarters_compare_the_last_with_the_second() {
        let points: Vec<(f64, f64)> = (1..=8)
            .map(|i| (i as f64 * 10.0, if i > 6 { 110.0 } else { 100.0 }))
            .collect();
        let (drift, q2, q4) = drift_pct(&points, 80.0, 1.0);
        assert_eq!((q2, q4), (100.0, 110.0));
        assert!((drift - 10.0).abs() < 1e-9);
    }
}
