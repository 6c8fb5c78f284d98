//! The floor: GET /healthz (no database: the framework's ceiling) and GET /readyz
//! (one trivial query) against pgbench of the same query. Runs on every branch.

use std::time::Instant;

use serde_json::json;

use super::{fmt_ms, rps, Ctx};
use crate::{
    loadgen::HttpRequest,
    pg,
    report::{Ratio, Table, WorkloadResult},
    stats::Spread,
};

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    let mut w = WorkloadResult::new("health");
    let healthz = HttpRequest::get(ctx.server.url("/healthz"));
    let readyz = HttpRequest::get(ctx.server.url("/readyz"));
    let script = ctx.pgbench_script("readyz", &[], &[])?;

    // Round trips per /readyz, from pg_stat_statements.
    pg::reset_statements(&ctx.pool).await?;
    let probe = ctx.max(&readyz).await?;
    let (round_trips, _) = pg::round_trips(&ctx.pool, probe.requests).await?;

    let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
    for rep in 0..ctx.tier.reps {
        eprintln!("  health rep {}/{}", rep + 1, ctx.tier.reps);
        a.push(ctx.max(&readyz).await?);
        b.push(ctx.pgbench(&script, &[]).await?);
        c.push(ctx.max(&healthz).await?);
    }
    let healthz_max = Spread::of(&rps(&c)).median;
    let readyz_max = Spread::of(&rps(&a)).median;
    let healthz_lat = ctx.at_rate(&healthz, healthz_max / 2.0).await?;
    let readyz_lat = ctx.at_rate(&readyz, readyz_max / 2.0).await?;

    w.ratios.push(Ratio::new(
        "readyz service overhead",
        "GET /readyz req/s",
        "pgbench of its query",
        // Issue 12: a one-statement endpoint reaches at least half of pgbench.
        Some(0.5),
        &rps(&a),
        &rps(&b),
    ));
    w.ratios.push(Ratio::new(
        "readyz framework ceiling",
        "GET /readyz req/s",
        "GET /healthz req/s",
        None,
        &rps(&a),
        &rps(&c),
    ));
    let mut t = Table::new(
        "Maximum (closed loop) and latency at 50% of it (open loop)",
        &[
            "endpoint",
            "max req/s",
            "rate",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "DB round trips/req",
        ],
    );
    t.row(vec![
        "GET /healthz".into(),
        Spread::of(&rps(&c)).show(0),
        format!("{:.0}", healthz_max / 2.0),
        fmt_ms(healthz_lat.p50_ms),
        fmt_ms(healthz_lat.p99_ms),
        fmt_ms(healthz_lat.p999_ms),
        "0".into(),
    ]);
    t.row(vec![
        "GET /readyz".into(),
        Spread::of(&rps(&a)).show(0),
        format!("{:.0}", readyz_max / 2.0),
        fmt_ms(readyz_lat.p50_ms),
        fmt_ms(readyz_lat.p99_ms),
        fmt_ms(readyz_lat.p999_ms),
        format!("{round_trips:.2}"),
    ]);
    t.row(vec![
        "pgbench readyz.sql".into(),
        Spread::of(&rps(&b)).show(0),
        "—".into(),
        "—".into(),
        "—".into(),
        "—".into(),
        "1".into(),
    ]);
    w.tables.push(t);
    w.figure("healthz_max", &c);
    w.figure("readyz_max", &a);
    w.figure("readyz_pgbench", &b);
    w.figure("healthz_at_half_max", &healthz_lat);
    w.figure("readyz_at_half_max", &readyz_lat);
    w.figure("readyz_round_trips_per_request", json!(round_trips));
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}
