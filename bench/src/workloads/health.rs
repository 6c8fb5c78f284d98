//! The floor: GET /healthz (no database: the framework's ceiling) and GET /readyz
//! (one trivial query) against pgbench of the same query. Runs on every branch.
//!
//! With `--tidings-before-bin` (scripts/bench: `BENCH_BEFORE_BIN`), another
//! build of `tidings` (say, main's release binary before a change) serves too, beside the
//! measured one on the same database with the same environment, and both
//! endpoints are measured on it in the same repetitions, alternating which
//! server goes first: the run carries its own before/after of the server.

use std::time::Instant;

use serde_json::json;

use super::{fmt_ms, rps, serve_before, Ctx};
use crate::{
    loadgen::HttpRequest,
    pg,
    report::{Ratio, Table, WorkloadResult},
    server::Tidings,
    stats::Spread,
};

/// Repetitions when a before binary runs too: the before/after ratio is the
/// point of such a run, and the machine is shared.
const BEFORE_AFTER_REPS: usize = 5;

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let before = match &ctx.before_bin {
        Some(bin) => Some(serve_before(ctx, bin, "health").await?),
        None => None,
    };
    let outcome = measure(ctx, before.as_ref()).await;
    if let Some(server) = before {
        server.stop().await;
    }
    outcome
}

/// `before`: the before build's server, when `ctx.before_bin` is given.
async fn measure(ctx: &Ctx, before: Option<&Tidings>) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    let mut w = WorkloadResult::new("health");
    let healthz = HttpRequest::get(ctx.server.url("/healthz"));
    let readyz = HttpRequest::get(ctx.server.url("/readyz"));
    let script = ctx.pgbench_script("readyz", &[], &[])?;

    // Round trips per /readyz, from pg_stat_statements.
    pg::reset_statements(&ctx.pool).await?;
    let probe = ctx.max(&readyz).await?;
    let (round_trips, _) = pg::round_trips(&ctx.pool, probe.requests).await?;

    let before_requests = before.map(|server| {
        (
            HttpRequest::get(server.url("/readyz")),
            HttpRequest::get(server.url("/healthz")),
        )
    });
    let reps = match before {
        Some(_) => ctx.tier.reps.max(BEFORE_AFTER_REPS),
        None => ctx.tier.reps,
    };
    let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
    // The before server's /readyz and /healthz.
    let (mut d, mut e) = (vec![], vec![]);
    for rep in 0..reps {
        eprintln!("  health rep {}/{}", rep + 1, reps);
        match &before_requests {
            None => {
                a.push(ctx.max(&readyz).await?);
                b.push(ctx.pgbench(&script, &[]).await?);
                c.push(ctx.max(&healthz).await?);
            }
            // Before and after alternate which goes first, so neither
            // always follows pgbench or the other's load.
            Some((readyz_before, healthz_before)) if rep % 2 == 0 => {
                d.push(ctx.max(readyz_before).await?);
                a.push(ctx.max(&readyz).await?);
                b.push(ctx.pgbench(&script, &[]).await?);
                e.push(ctx.max(healthz_before).await?);
                c.push(ctx.max(&healthz).await?);
            }
            Some((readyz_before, healthz_before)) => {
                a.push(ctx.max(&readyz).await?);
                d.push(ctx.max(readyz_before).await?);
                b.push(ctx.pgbench(&script, &[]).await?);
                c.push(ctx.max(&healthz).await?);
                e.push(ctx.max(healthz_before).await?);
            }
        }
    }
    let healthz_max = Spread::of(&rps(&c)).median;
    let readyz_max = Spread::of(&rps(&a)).median;
    let healthz_lat = ctx.at_rate(&healthz, healthz_max / 2.0).await?;
    let readyz_lat = ctx.at_rate(&readyz, readyz_max / 2.0).await?;

    w.ratios.push(Ratio::new(
        "readyz service overhead",
        "GET /readyz req/s",
        "pgbench of its query",
        // Recorded, no target: the request's HTTP path alone costs about
        // pgbench's whole transaction (bench/findings/health-and-http.md).
        None,
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
    if let (Some(_), Some(bin)) = (before, &ctx.before_bin) {
        w.ratios.push(Ratio::new(
            "readyz after ÷ before (same run)",
            "GET /readyz req/s, this build",
            "GET /readyz req/s, the before build",
            None,
            &rps(&a),
            &rps(&d),
        ));
        w.ratios.push(Ratio::new(
            "healthz after ÷ before (same run)",
            "GET /healthz req/s, this build",
            "GET /healthz req/s, the before build",
            None,
            &rps(&c),
            &rps(&e),
        ));
        w.ratios.push(Ratio::new(
            "readyz service overhead, the before build",
            "GET /readyz req/s, the before build",
            "pgbench of its query",
            None,
            &rps(&d),
            &rps(&b),
        ));
        w.figure("before_bin", bin.display().to_string());
        w.figure("healthz_max_before", &e);
        w.figure("readyz_max_before", &d);
    }
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
    if before.is_some() {
        for (endpoint, m) in [
            ("GET /healthz, before build", &e),
            ("GET /readyz, before build", &d),
        ] {
            t.row(vec![
                endpoint.into(),
                Spread::of(&rps(m)).show(0),
                "—".into(),
                "—".into(),
                "—".into(),
                "—".into(),
                "—".into(),
            ]);
        }
    }
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
