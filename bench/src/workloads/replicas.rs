//! Workload replicas (ARCHITECTURE.md "Reads from hot standbys"): the
//! production shape of `scripts/cluster` — a primary and two streaming hot
//! standbys of its own (`--name bench-replicas`, on the bench PostgreSQL's
//! port plus 4 to 7, the rest of its checkout's slot) — with two `tidings
//! serve` on it: one reading from the standbys
//! (`TIDINGS_DATABASE_REPLICA_URLS`), one on the primary alone. On one
//! 2-core machine the standbys add no CPU (all three servers share the same
//! cores), so this measures what can be measured honestly:
//!
//! - **Router overhead**: `GET /v1/feed?limit=20` req/s (closed loop)
//!   through the standby-reading server vs the primary-only one, interleaved.
//! - **PgBouncer's price**: the same reads through a third server whose
//!   DATABASE_URL is the cluster's PgBouncer in transaction pooling mode
//!   (`TIDINGS_DATABASE_POOLER=transaction`: every statement in a transaction
//!   of its own, no statement cache; ARCHITECTURE.md, "PgBouncer") vs the
//!   primary-only one, interleaved with the above.
//! - **Replay lag under write load**: writers post batches of 10 events
//!   through the standby-reading server as fast as they go; every 100 ms the
//!   primary's `pg_stat_replication` gives each standby's replay lag (time and
//!   bytes). After each post the writer reads its counts with the post's
//!   consistency token: the `/readyz` `reads` counters say how often such a
//!   read was served by a standby at once, after waiting for replay, or by
//!   the primary.
//! - **A standby stopped under reads**: readers loop over the feed and the
//!   counts; a third of the way in, `scripts/cluster stop-standby 1`. Every
//!   failed request is counted (aim: 0); then `scripts/cluster up` repairs it
//!   and the time until `/readyz` shows it back in rotation is reported.
//!
//! The data is made through the API (a tenant of its own, one reader in a
//! few teams, events in batches), on the cluster's own `tidings` database.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use sqlx::{postgres::PgPoolOptions, PgPool};

use super::{fmt_ms, rps, Ctx};
use crate::{
    loadgen::{HttpRequest, Load, Measure},
    plots,
    report::{Aim, Ratio, Table, WorkloadResult},
    server::{self, Launch, Tidings, ADMIN_TOKEN},
    stats::{percentile, Spread},
    tier::TierName,
};

const CLUSTER: &str = "bench-replicas";
const TOKEN_HEADER: &str = "Tidings-Consistency-Token";
const TEAMS: usize = 5;
const WRITERS: usize = 4;
const READERS: usize = 4;

struct Plan {
    events: usize,
    write_window: Duration,
    stop_window: Duration,
}

fn plan(ctx: &Ctx) -> Plan {
    match ctx.tier.name {
        TierName::S => Plan {
            events: 2_000,
            write_window: Duration::from_secs(3),
            stop_window: Duration::from_secs(4),
        },
        TierName::M => Plan {
            events: 100_000,
            write_window: Duration::from_secs(30),
            stop_window: Duration::from_secs(20),
        },
    }
}

/// `scripts/cluster ARGS --name bench-replicas --port PORT`.
async fn cluster(repo: &Path, port: u16, args: &[&str]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(repo.join("scripts/cluster"))
        .args(args)
        .args(["--name", CLUSTER, "--port", &port.to_string()])
        .current_dir(repo)
        .output()
        .await
        .context("running scripts/cluster")?;
    if !out.status.success() {
        bail!(
            "scripts/cluster {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/tidings")
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    // The bench PostgreSQL's checkout slot is eight ports (main.rs,
    // `checkout_pg_port`): it takes the first, this cluster the last four.
    let port = ctx.target.port + 4;
    cluster(
        &ctx.repo,
        port,
        &["up", "--instances", "0", "--workers", "0"],
    )
    .await?;
    let result = measure(ctx, port).await;
    // The cluster is stopped whatever happened (its data is kept for the next run).
    let down = cluster(&ctx.repo, port, &["down"]).await;
    let w = result?;
    down?;
    Ok(w)
}

async fn measure(ctx: &Ctx, port: u16) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    let plan = plan(ctx);
    let mut w = WorkloadResult::new("replicas");
    let primary = url(port);
    let replicas = format!("{},{}", url(port + 1), url(port + 2));
    server::migrate(&ctx.bin, &primary).await?;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&primary)
        .await
        .context("the cluster's primary")?;

    let common = vec![
        ("TIDINGS_OUTBOX_WORKERS".to_string(), "0".to_string()),
        ("TIDINGS_RATE_LIMITS".to_string(), "false".to_string()),
    ];
    let mut with_standbys = common.clone();
    with_standbys.push(("TIDINGS_DATABASE_REPLICA_URLS".into(), replicas.clone()));
    let routed = Tidings::serve(Launch {
        bin: &ctx.bin,
        database_url: &primary,
        log_dir: &ctx.work_dir,
        name: "serve-replicas-routed",
        env: with_standbys,
    })
    .await?;
    let direct = Tidings::serve(Launch {
        bin: &ctx.bin,
        database_url: &primary,
        log_dir: &ctx.work_dir,
        name: "serve-replicas-direct",
        env: common.clone(),
    })
    .await?;
    let mut behind_pooler = common;
    behind_pooler.extend([
        (
            "TIDINGS_DATABASE_POOLER".to_string(),
            "transaction".to_string(),
        ),
        ("TIDINGS_DATABASE_LISTEN_URL".to_string(), primary.clone()),
    ]);
    let pooled = Tidings::serve(Launch {
        bin: &ctx.bin,
        database_url: &url(port + 3),
        log_dir: &ctx.work_dir,
        name: "serve-replicas-pooled",
        env: behind_pooler,
    })
    .await?;
    let http = &ctx.http;
    until_standbys(http, &routed, &["up", "up"], Duration::from_secs(60)).await?;

    // The data, through the API.
    let tenant: Value = http
        .post(routed.url("/v1/admin/tenants"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "bench-replicas"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let key = tenant["api_key"].as_str().context("api_key")?.to_string();
    for t in 0..TEAMS {
        http.put(routed.url(&format!("/v1/teams/team-{t}/members/reader")))
            .bearer_auth(&key)
            .send()
            .await?
            .error_for_status()?;
    }
    let minted: Value = http
        .post(routed.url("/v1/user-tokens"))
        .bearer_auth(&key)
        .json(&json!({"user_id": "reader", "ttl_seconds": 12 * 3600}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let token = minted["token"].as_str().context("token")?.to_string();
    let mut posted = 0;
    while posted < plan.events {
        let n = 1000.min(plan.events - posted);
        let events: Vec<Value> = (0..n)
            .map(|i| {
                json!({"team_id": format!("team-{}", (posted + i) % TEAMS),
                       "type": "bench.seed", "payload": {"i": posted + i}})
            })
            .collect();
        http.post(routed.url("/v1/events/batch"))
            .bearer_auth(&key)
            .json(&json!({ "events": events }))
            .send()
            .await?
            .error_for_status()?;
        posted += n;
    }
    until_replayed(&pool).await?;

    // 1. Router overhead.
    let feed = |s: &Tidings| HttpRequest::get(s.url("/v1/feed?limit=20")).bearer(&token);
    let before = reads(http, &routed).await?;
    let (mut through, mut on_primary, mut via_pooler): (Vec<Measure>, Vec<Measure>, Vec<Measure>) =
        (vec![], vec![], vec![]);
    for rep in 0..ctx.tier.reps {
        eprintln!("  replicas feed rep {}/{}", rep + 1, ctx.tier.reps);
        through.push(max(ctx, &feed(&routed)).await?);
        on_primary.push(max(ctx, &feed(&direct)).await?);
        via_pooler.push(max(ctx, &feed(&pooled)).await?);
    }
    let after = reads(http, &routed).await?;
    let served_by_standby =
        after["standby"].as_u64().unwrap_or(0) - before["standby"].as_u64().unwrap_or(0);
    let feed_requests: f64 = through.iter().map(|m| m.requests).sum();
    w.ratios.push(Ratio::new(
        "feed through a standby vs the primary",
        "GET /v1/feed req/s, reads on standbys",
        "GET /v1/feed req/s, primary only",
        None,
        &rps(&through),
        &rps(&on_primary),
    ));
    w.ratios.push(Ratio::new(
        "feed through PgBouncer (transaction mode) vs directly",
        "GET /v1/feed req/s, primary through PgBouncer",
        "GET /v1/feed req/s, primary directly",
        None,
        &rps(&via_pooler),
        &rps(&on_primary),
    ));
    let mut t = Table::new(
        "Feed page (limit 20), closed loop, same machine",
        &["server", "req/s", "p50 ms", "p99 ms", "errors"],
    );
    for (name, ms) in [
        ("reads on the standbys", &through),
        ("primary only", &on_primary),
        (
            "primary only, through PgBouncer (transaction mode)",
            &via_pooler,
        ),
    ] {
        let last = ms.last().context("a measurement")?;
        t.row(vec![
            name.into(),
            Spread::of(&rps(ms)).show(0),
            fmt_ms(last.p50_ms),
            fmt_ms(last.p99_ms),
            format!("{:.0}", ms.iter().map(|m| m.errors).sum::<f64>()),
        ]);
    }
    w.tables.push(t);
    w.figure("feed_through_standby", &through);
    w.figure("feed_on_primary", &on_primary);
    w.figure("feed_through_pooler", &via_pooler);
    w.figure(
        "feed_share_served_by_standby",
        json!(served_by_standby as f64 / feed_requests.max(1.0)),
    );

    // 2. Replay lag under write load, and read-your-writes.
    let before = reads(http, &routed).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move { sample_lag(&pool, &stop).await })
    };
    let written = Arc::new(AtomicU64::new(0));
    let ryw_reads = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + plan.write_window;
    let mut writers = Vec::new();
    for wr in 0..WRITERS {
        let (http, key, token) = (http.clone(), key.clone(), token.clone());
        let (written, ryw_reads, failures) = (written.clone(), ryw_reads.clone(), failures.clone());
        let (events_url, counts_url) = (
            routed.url("/v1/events/batch"),
            routed.url("/v1/feed/counts"),
        );
        writers.push(tokio::spawn(async move {
            let mut n = 0usize;
            while Instant::now() < deadline {
                let events: Vec<Value> = (0..10)
                    .map(|i| {
                        json!({"team_id": format!("team-{}", (wr + n + i) % TEAMS),
                               "type": "bench.write", "payload": {"w": wr, "n": n + i}})
                    })
                    .collect();
                n += 10;
                let posted = http
                    .post(&events_url)
                    .bearer_auth(&key)
                    .json(&json!({ "events": events }))
                    .send()
                    .await;
                let consistency = match posted {
                    Ok(r) if r.status().is_success() => r
                        .headers()
                        .get(TOKEN_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string),
                    _ => None,
                };
                let Some(consistency) = consistency else {
                    failures.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                written.fetch_add(10, Ordering::Relaxed);
                let read = http
                    .get(&counts_url)
                    .bearer_auth(&token)
                    .header(TOKEN_HEADER, consistency)
                    .send()
                    .await;
                match read {
                    Ok(r) if r.status().is_success() => {
                        ryw_reads.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for writer in writers {
        writer.await?;
    }
    stop.store(true, Ordering::Relaxed);
    let lag = sampler.await??;
    let (lag_ms, lag_bytes) = (&lag.ms, &lag.bytes);
    let after = reads(http, &routed).await?;
    let delta = |k: &str| after[k].as_u64().unwrap_or(0) - before[k].as_u64().unwrap_or(0);
    let ryw = ryw_reads.load(Ordering::Relaxed);
    let (waited, behind, no_standby) = (
        delta("waited"),
        delta("primary_standby_behind"),
        delta("primary_no_standby"),
    );
    let at_once = ryw.saturating_sub(waited + behind + no_standby);
    let events_per_sec = written.load(Ordering::Relaxed) as f64 / plan.write_window.as_secs_f64();
    let mut t = Table::new(
        "Replay lag under write load (pg_stat_replication every 100 ms, both standbys)",
        &[
            "events/s written",
            "lag p50 ms",
            "lag p99 ms",
            "lag max ms",
            "bytes behind p99",
            "samples",
        ],
    );
    t.row(vec![
        format!("{events_per_sec:.0}"),
        fmt_ms(Some(percentile(lag_ms, 50.0))),
        fmt_ms(Some(percentile(lag_ms, 99.0))),
        fmt_ms(lag_ms.iter().copied().reduce(f64::max)),
        format!("{:.0}", percentile(lag_bytes, 99.0)),
        lag_ms.len().to_string(),
    ]);
    w.tables.push(t);
    let share = |n: u64| format!("{n} ({:.1}%)", 100.0 * n as f64 / (ryw.max(1) as f64));
    let mut t = Table::new(
        "Reads with the post's consistency token, right after the post",
        &[
            "reads",
            "standby at once",
            "standby after waiting",
            "primary (standby behind after the wait)",
            "primary (no standby)",
        ],
    );
    t.row(vec![
        ryw.to_string(),
        share(at_once),
        share(waited),
        share(behind),
        share(no_standby),
    ]);
    w.tables.push(t);
    w.figure("write_events_per_sec", json!(events_per_sec));
    w.figure(
        "replay_lag_ms",
        json!({
            "p50": percentile(lag_ms, 50.0), "p99": percentile(lag_ms, 99.0),
            "samples": lag_ms.len(),
        }),
    );
    w.figure("replay_lag_bytes_p99", json!(percentile(lag_bytes, 99.0)));
    let mut series = serde_json::Map::new();
    for (i, points) in lag.series.iter().enumerate() {
        let t: Vec<f64> = points.iter().map(|p| p.0).collect();
        let ms: Vec<f64> = points.iter().map(|p| p.1).collect();
        series.insert(format!("lag_at_secs_{}", i + 1), json!(t));
        series.insert(format!("lag_ms_{}", i + 1), json!(ms));
    }
    w.figure("replay_lag_series", Value::Object(series));
    let (path, file) = ctx.plot_path("replicas");
    plot(&path, &w.figures)?;
    w.plots.push(file);
    w.figure(
        "token_reads",
        json!({
            "reads": ryw, "standby_at_once": at_once, "waited": waited,
            "primary_standby_behind": behind, "primary_no_standby": no_standby,
            "failed": failures.load(Ordering::Relaxed),
        }),
    );

    // 3. A standby stopped under reads.
    let before = reads(http, &routed).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let (http, token, stop, done, failed) = (
            http.clone(),
            token.clone(),
            stop.clone(),
            done.clone(),
            failed.clone(),
        );
        let urls = [
            routed.url("/v1/feed?limit=20"),
            routed.url("/v1/feed/counts"),
        ];
        readers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for u in &urls {
                    match http.get(u).bearer_auth(&token).send().await {
                        Ok(r) if r.status().is_success() => {
                            // The whole body: a failure mid-answer counts too.
                            if r.bytes().await.is_err() {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(plan.stop_window / 3).await;
    cluster(&ctx.repo, port, &["stop-standby", "1"]).await?;
    tokio::time::sleep(plan.stop_window * 2 / 3).await;
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await?;
    }
    let after = reads(http, &routed).await?;
    let after_error = after["primary_after_error"].as_u64().unwrap_or(0)
        - before["primary_after_error"].as_u64().unwrap_or(0);
    let repair = Instant::now();
    cluster(
        &ctx.repo,
        port,
        &["up", "--instances", "0", "--workers", "0"],
    )
    .await?;
    until_standbys(http, &routed, &["up", "up"], Duration::from_secs(120)).await?;
    let back_in = repair.elapsed().as_secs_f64();
    let (requests, failed) = (done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let mut t = Table::new(
        "Standby 1 stopped a third of the way through the reads",
        &[
            "requests",
            "failed",
            "retried on the primary after a standby error",
            "back in rotation after `up` (s)",
        ],
    );
    t.row(vec![
        requests.to_string(),
        failed.to_string(),
        after_error.to_string(),
        format!("{back_in:.1}"),
    ]);
    w.tables.push(t);
    w.aims.push(Aim::below(
        "requests failed during a standby stop",
        failed as f64,
        "requests",
        1.0,
    ));
    w.figure(
        "standby_stop",
        json!({
            "requests": requests, "failed": failed,
            "primary_after_error": after_error, "back_in_rotation_secs": back_in,
        }),
    );

    routed.stop().await;
    direct.stop().await;
    pooled.stop().await;
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

async fn max(ctx: &Ctx, req: &HttpRequest) -> anyhow::Result<Measure> {
    ctx.tools
        .oha(
            req,
            Load::Max {
                connections: ctx.tier.connections,
            },
            ctx.tier.measure,
        )
        .await
}

/// The `reads` counters of the server's `/readyz`.
async fn reads(http: &reqwest::Client, s: &Tidings) -> anyhow::Result<Value> {
    let ready: Value = http.get(s.url("/readyz")).send().await?.json().await?;
    Ok(ready["reads"].clone())
}

/// Waits until `/readyz` shows the standbys in these states.
async fn until_standbys(
    http: &reqwest::Client,
    s: &Tidings,
    states: &[&str],
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let ready: Value = http.get(s.url("/readyz")).send().await?.json().await?;
        let now: Vec<&str> = ready["standbys"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| s["state"].as_str().unwrap_or(""))
                    .collect()
            })
            .unwrap_or_default();
        if now == states {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("standbys never reached {states:?}: {ready}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until both standbys have replayed what the primary wrote so far.
async fn until_replayed(pool: &PgPool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let caught_up: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_replication
             WHERE replay_lsn >= pg_current_wal_lsn()",
        )
        .fetch_one(pool)
        .await?;
        if caught_up >= 2 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the standbys did not catch up within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Replay lag every 100 ms until `stop`, from the primary's
/// `pg_stat_replication`: per standby (by `application_name`), milliseconds
/// (`replay_lag`, 0 when idle) and bytes behind the primary's write position.
struct LagSamples {
    ms: Vec<f64>,
    bytes: Vec<f64>,
    /// (seconds since the start, lag ms) per standby, for the plot.
    series: Vec<Vec<(f64, f64)>>,
}

async fn sample_lag(pool: &PgPool, stop: &AtomicBool) -> anyhow::Result<LagSamples> {
    let start = Instant::now();
    let mut out = LagSamples {
        ms: vec![],
        bytes: vec![],
        series: vec![vec![], vec![]],
    };
    while !stop.load(Ordering::Relaxed) {
        let rows: Vec<(f64, f64)> = sqlx::query_as(
            "SELECT coalesce(extract(epoch FROM replay_lag) * 1000, 0)::float8,
                    pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::float8
             FROM pg_stat_replication ORDER BY application_name, client_port",
        )
        .fetch_all(pool)
        .await?;
        let t = start.elapsed().as_secs_f64();
        for (i, (m, b)) in rows.into_iter().enumerate() {
            out.ms.push(m);
            out.bytes.push(b);
            if let Some(series) = out.series.get_mut(i) {
                series.push((t, m));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(out)
}

/// Replay lag over the write window, per standby.
pub fn plot(path: &Path, figures: &Value) -> anyhow::Result<()> {
    let series = &figures["replay_lag_series"];
    let lines: Vec<plots::Series> = ["standby 1", "standby 2"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let t = series[format!("lag_at_secs_{}", i + 1)].as_array();
            let ms = series[format!("lag_ms_{}", i + 1)].as_array();
            let points = t
                .into_iter()
                .flatten()
                .zip(ms.into_iter().flatten())
                .filter_map(|(t, m)| Some((t.as_f64()?, m.as_f64()?)))
                .collect();
            plots::Series::line(name, points)
        })
        .collect();
    let title = format!(
        "Replay lag while writing {:.0} events/s",
        figures["write_events_per_sec"].as_f64().unwrap_or(f64::NAN)
    );
    plots::line_charts(
        path,
        vec![plots::Chart {
            axes: plots::Axes {
                title: &title,
                x_label: "seconds into the write window",
                y_label: "replay_lag ms (pg_stat_replication)",
                log_x: false,
                log_y: false,
            },
            series: lines,
            markers: vec![],
            x_ticks: None,
            legend: Some(plotters::prelude::SeriesLabelPosition::UpperLeft),
        }],
    )
}
