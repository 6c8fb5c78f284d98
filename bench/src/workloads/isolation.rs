//! Workload isolation (ARCHITECTURE.md, invariant 11 and "Limits
//! per tenant"): tenant A (bench tenant 0) floods the API at its maximum —
//! alerts, events and feed reads, each from `tier.connections` closed-loop
//! clients — while tenant B (bench tenant 1) reads its feed at a steady rate,
//! open loop. What is measured is B: its feed p99 quiet and under A's flood
//! (aim: under the flood at most twice quiet) and its errors under the flood
//! (aim: none).
//!
//! The flood runs against a server of its own with the production defaults
//! (rate limits on), first from clients that answer a 429 with their next
//! request at once (oha), then from clients that wait as long as its
//! `Retry-After` says, as well-behaved SDKs do; on the same server with tenant A held to its own limits
//! of 50 writes and 50 reads per second (set through the admin API, as an
//! operator would for a tenant on a small plan); and against the bench's main
//! server, which runs with rate limits off, so only the pool share and the
//! session timeouts stand between A and B there. B's reader is one user; tenant B is given its own
//! per-user read rate through the admin API (B's rate is far above one
//! person's), which is also how an operator would do it.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde_json::{json, Value};

use super::{feed::pick_reader, fmt_ms, user_token, Ctx};
use crate::{
    loadgen::{HttpRequest, Load, Measure},
    plots,
    report::{Aim, Ratio, Table, WorkloadResult},
    seed::{api_key, tenant_uuid},
    server::{Launch, Tidings, ADMIN_TOKEN},
    stats::Spread,
};

/// B's steady feed reads per second.
const B_RATE: f64 = 100.0;
/// The shortest measurement of B: a p99 needs some hundreds of samples, more
/// than tier S's one-second latency runs give.
const B_WINDOW: Duration = Duration::from_secs(4);
/// Tenant A's own limits in the third run: a tenant held to a plan well below
/// what the machine serves (writes and reads per second, burst one second).
const A_CAPPED: f64 = 50.0;
/// Entities A's alerts are spread over: a few, so that some of them meet on
/// an entity's lock as a burst of one customer's alerts would.
const A_ENTITIES: usize = 8;

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    if !ctx.seeded.has_feed_tables
        || !ctx
            .route_exists(
                reqwest::Method::GET,
                &format!("/v1/admin/tenants/{}/rate-limits", tenant_uuid(1)),
            )
            .await?
    {
        return Ok(WorkloadResult::skipped(
            "isolation",
            "rate limits per tenant are not on this branch yet",
        ));
    }
    let mut w = WorkloadResult::new("isolation");
    let limited = Tidings::serve(Launch {
        bin: &ctx.bin,
        database_url: &ctx.target.url,
        log_dir: &ctx.work_dir,
        name: "serve-isolation",
        env: vec![("TIDINGS_OUTBOX_WORKERS".into(), "0".into())],
    })
    .await?;
    let outcome = measure(ctx, &limited, &mut w).await;
    limited.stop().await;
    outcome?;
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

/// A's three floods and B's reader, against one server.
struct Requests {
    a_alerts: HttpRequest,
    a_events: HttpRequest,
    a_feed: HttpRequest,
    b_feed: HttpRequest,
}

async fn requests(ctx: &Ctx, server: &Tidings) -> anyhow::Result<Requests> {
    let a_reader = pick_reader(ctx).await?;
    let a_token = user_token(0, &a_reader.user_id)?;
    let b_user: String = sqlx::query_scalar(
        "SELECT user_id FROM memberships WHERE tenant_id = $1
         GROUP BY user_id ORDER BY count(*) DESC, user_id LIMIT 1",
    )
    .bind(tenant_uuid(1))
    .fetch_one(&ctx.pool)
    .await
    .context("picking tenant B's reader")?;
    let b_token = user_token(1, &b_user)?;

    let alerts = ctx.work_dir.join("isolation-alerts.jsonl");
    let lines: Vec<String> = (0..A_ENTITIES * 8)
        .map(|i| {
            json!({"event_type": "invoice.overdue", "entity_id": format!("inv-{}", i % A_ENTITIES),
                   "recipients": [format!("user-{i}"), "user-1"], "channels": ["in_app"],
                   "payload": {"n": i}})
            .to_string()
        })
        .collect();
    std::fs::write(&alerts, lines.join("\n") + "\n")?;
    let events = ctx.work_dir.join("isolation-events.jsonl");
    std::fs::write(
        &events,
        json!({"team_id": "team-0", "type": "comment.created", "payload": {"text": "flood"}})
            .to_string()
            + "\n",
    )?;
    let post = |path: &str, body: &Path| {
        let mut req = HttpRequest::get(server.url(path)).bearer(&api_key(0));
        req.method = "POST";
        req.body_lines = Some(body.to_path_buf());
        req
    };
    Ok(Requests {
        a_alerts: post("/v1/alerts", &alerts),
        a_events: post("/v1/events", &events),
        a_feed: HttpRequest::get(format!("{}?limit=20", server.url("/v1/feed"))).bearer(&a_token),
        b_feed: HttpRequest::get(format!("{}?limit=20", server.url("/v1/feed"))).bearer(&b_token),
    })
}

fn b_window(ctx: &Ctx) -> Duration {
    ctx.tier.latency_measure.max(B_WINDOW)
}

/// B's reads at its steady rate, open loop, as `Ctx::at_rate` but for at
/// least [`B_WINDOW`].
async fn b_reads(ctx: &Ctx, req: &HttpRequest) -> anyhow::Result<Measure> {
    let load = Load::Rate {
        connections: (ctx.tier.connections * 4).max(16),
        per_sec: B_RATE,
    };
    ctx.tools.oha(req, load, b_window(ctx)).await
}

/// How A's clients answer a refusal.
#[derive(Clone, Copy, PartialEq)]
enum Retries {
    /// With the next request at once (oha's closed loop).
    AtOnce,
    /// After the `Retry-After` the refusal carries.
    HonourRetryAfter,
}

/// B's steady reads while A floods: the floods start first and end after B's
/// measurement, so all of it runs under the flood. Returns (B, A's three).
async fn under_flood(
    ctx: &Ctx,
    r: &Requests,
    retries: Retries,
) -> anyhow::Result<(Measure, Vec<Measure>)> {
    let flood_for = b_window(ctx) + Duration::from_secs(2);
    let connections = ctx.tier.connections;
    let flood = |req| async move {
        match retries {
            Retries::AtOnce => {
                ctx.tools
                    .oha(req, Load::Max { connections }, flood_for)
                    .await
            }
            Retries::HonourRetryAfter => {
                flood_honouring_retry_after(&ctx.http, req, connections, flood_for).await
            }
        }
    };
    let b = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        b_reads(ctx, &r.b_feed).await
    };
    let (alerts, events, feed, b) =
        tokio::join!(flood(&r.a_alerts), flood(&r.a_events), flood(&r.a_feed), b);
    Ok((b?, vec![alerts?, events?, feed?]))
}

/// A closed loop of `connections` clients that each wait out a refusal's
/// `Retry-After` (429, 503, 409) before their next request, for `duration`.
/// Bodies are taken from the request's lines in turn. Latencies are not
/// measured: only A's answered and refused rates are of interest.
async fn flood_honouring_retry_after(
    http: &reqwest::Client,
    req: &HttpRequest,
    connections: u32,
    duration: Duration,
) -> anyhow::Result<Measure> {
    let bodies: Vec<String> = match &req.body_lines {
        Some(path) => std::fs::read_to_string(path)?
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        None => vec![],
    };
    let bodies = std::sync::Arc::new(bodies);
    let method = reqwest::Method::from_bytes(req.method.as_bytes())?;
    let started = Instant::now();
    let deadline = started + duration;
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..connections as usize {
        let (http, method, bodies, req) =
            (http.clone(), method.clone(), bodies.clone(), req.clone());
        clients.spawn(async move {
            let (mut ok, mut refused) = (0u64, 0u64);
            let mut n = i;
            while Instant::now() < deadline {
                let mut call = http.request(method.clone(), &req.url);
                for (k, v) in &req.headers {
                    call = call.header(k, v);
                }
                if !bodies.is_empty() {
                    call = call
                        .header("content-type", "application/json")
                        .body(bodies[n % bodies.len()].clone());
                    n += connections as usize;
                }
                let wait = match call.send().await {
                    Ok(resp) => {
                        let retry_after = resp
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse::<u64>().ok())
                            .map(Duration::from_secs);
                        let success = resp.status().is_success();
                        let _ = resp.bytes().await;
                        if success {
                            ok += 1;
                            None
                        } else {
                            refused += 1;
                            retry_after
                        }
                    }
                    Err(_) => {
                        refused += 1;
                        Some(Duration::from_millis(100))
                    }
                };
                if let Some(wait) = wait {
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(wait.min(left)).await;
                }
            }
            (ok, refused)
        });
    }
    let runs = clients.join_all().await;
    let seconds = started.elapsed().as_secs_f64();
    let ok: u64 = runs.iter().map(|(ok, _)| ok).sum();
    let refused: u64 = runs.iter().map(|(_, refused)| refused).sum();
    Ok(Measure {
        tool: "reqwest, honouring Retry-After",
        requests_per_sec: ok as f64 / seconds,
        requests: ok as f64,
        errors: refused as f64,
        mean_ms: None,
        p50_ms: None,
        p99_ms: None,
        p999_ms: None,
        seconds,
    })
}

/// Sets a bench tenant's own rate limits through the admin API.
async fn set_rates(ctx: &Ctx, server: &Tidings, tenant: i64, rates: Value) -> anyhow::Result<()> {
    ctx.http
        .put(server.url(&format!(
            "/v1/admin/tenants/{}/rate-limits",
            tenant_uuid(tenant)
        )))
        .bearer_auth(ADMIN_TOKEN)
        .json(&rates)
        .send()
        .await?
        .error_for_status()
        .with_context(|| format!("setting tenant {tenant}'s rate limits"))?;
    Ok(())
}

async fn measure(ctx: &Ctx, limited: &Tidings, w: &mut WorkloadResult) -> anyhow::Result<()> {
    // Tenant B's own per-user read rate (its reader is far busier than a person).
    let b_user = B_RATE * 10.0;
    set_rates(
        ctx,
        limited,
        1,
        json!({"user_reads": {"per_second": b_user, "burst": b_user as u32}}),
    )
    .await?;
    let capped = json!({"per_second": A_CAPPED, "burst": A_CAPPED as u32});
    let on_limited = requests(ctx, limited).await?;
    let on_main = requests(ctx, &ctx.server).await?;

    let (mut quiet, mut flood, mut flood_polite, mut flood_capped, mut flood_unlimited) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut a_limited, mut a_polite, mut a_capped, mut a_unlimited) =
        (vec![], vec![], vec![], vec![]);
    for rep in 0..ctx.tier.reps {
        eprintln!("  isolation rep {}/{}", rep + 1, ctx.tier.reps);
        quiet.push(b_reads(ctx, &on_limited.b_feed).await?);
        let (b, a) = under_flood(ctx, &on_limited, Retries::AtOnce).await?;
        flood.push(b);
        a_limited.push(a);
        let (b, a) = under_flood(ctx, &on_limited, Retries::HonourRetryAfter).await?;
        flood_polite.push(b);
        a_polite.push(a);
        set_rates(
            ctx,
            limited,
            0,
            json!({"writes": capped, "reads": capped, "user_reads": capped}),
        )
        .await?;
        let (b, a) = under_flood(ctx, &on_limited, Retries::AtOnce).await?;
        flood_capped.push(b);
        a_capped.push(a);
        set_rates(ctx, limited, 0, json!({})).await?;
        let (b, a) = under_flood(ctx, &on_main, Retries::AtOnce).await?;
        flood_unlimited.push(b);
        a_unlimited.push(a);
    }

    let p99 =
        |ms: &[Measure]| -> Vec<f64> { ms.iter().map(|m| m.p99_ms.unwrap_or(f64::NAN)).collect() };
    let errors = |ms: &[Measure]| ms.iter().map(|m| m.errors).sum::<f64>();
    w.ratios.push(Ratio::new(
        "isolation: B's feed p99 quiet ÷ under A's flood",
        "B p99 quiet",
        "B p99 while A floods (limits on)",
        // B's p99 under the flood at most twice its quiet p99.
        Some(0.5),
        &p99(&quiet),
        &p99(&flood),
    ));
    w.ratios.push(Ratio::new(
        "isolation: B's feed p99 quiet ÷ under A's flood honouring Retry-After",
        "B p99 quiet",
        "B p99 while A floods honouring Retry-After (limits on)",
        Some(0.5),
        &p99(&quiet),
        &p99(&flood_polite),
    ));
    w.ratios.push(Ratio::new(
        "isolation: B's feed p99 quiet ÷ under A's flood, A held to 50/s",
        "B p99 quiet",
        "B p99 while A floods (A's own limits 50/s)",
        Some(0.5),
        &p99(&quiet),
        &p99(&flood_capped),
    ));
    w.aims.push(Aim::below(
        "B's errors while A floods (limits on)",
        errors(&flood),
        "requests",
        1.0,
    ));

    let mut t = Table::new(
        &format!(
            "Tenant B reads its feed at {B_RATE:.0}/s (open loop) while tenant A floods alerts, \
             events and feed reads ({} closed-loop connections each)",
            ctx.tier.connections
        ),
        &["B's reads", "p50 ms", "p99 ms", "p99.9 ms", "errors"],
    );
    let med = |ms: &[Measure], f: fn(&Measure) -> Option<f64>| {
        fmt_ms(Some(
            Spread::of(&ms.iter().filter_map(f).collect::<Vec<_>>()).median,
        ))
    };
    for (name, ms) in [
        ("quiet", &quiet),
        ("A floods, rate limits on (defaults)", &flood),
        (
            "A floods honouring Retry-After, rate limits on (defaults)",
            &flood_polite,
        ),
        ("A floods, A held to its own 50/s", &flood_capped),
        (
            "A floods, rate limits off (pool share and timeouts only)",
            &flood_unlimited,
        ),
    ] {
        t.row(vec![
            name.into(),
            med(ms, |m| m.p50_ms),
            med(ms, |m| m.p99_ms),
            med(ms, |m| m.p999_ms),
            format!("{:.0}", errors(ms)),
        ]);
    }
    w.tables.push(t);
    let mut a = Table::new(
        "Tenant A's flood: answered 2xx per second, and refused (429, 503, 409) per second",
        &[
            "A's requests",
            "defaults: 2xx/s",
            "refused/s",
            "honouring Retry-After: 2xx/s",
            "refused/s",
            "A at 50/s: 2xx/s",
            "refused/s",
            "limits off: 2xx/s",
            "refused/s",
        ],
    );
    for (i, name) in ["POST /v1/alerts", "POST /v1/events", "GET /v1/feed"]
        .iter()
        .enumerate()
    {
        let rate = |runs: &[Vec<Measure>], f: fn(&Measure) -> f64| {
            Spread::of(&runs.iter().map(|r| f(&r[i])).collect::<Vec<_>>()).show(0)
        };
        a.row(vec![
            name.to_string(),
            rate(&a_limited, |m| m.requests_per_sec),
            rate(&a_limited, |m| m.errors / m.seconds),
            rate(&a_polite, |m| m.requests_per_sec),
            rate(&a_polite, |m| m.errors / m.seconds),
            rate(&a_capped, |m| m.requests_per_sec),
            rate(&a_capped, |m| m.errors / m.seconds),
            rate(&a_unlimited, |m| m.requests_per_sec),
            rate(&a_unlimited, |m| m.errors / m.seconds),
        ]);
    }
    w.tables.push(a);

    w.figure("b_rate", B_RATE);
    w.figure("b_quiet", &quiet);
    w.figure("b_flood", &flood);
    w.figure("b_flood_polite", &flood_polite);
    w.figure("b_flood_capped", &flood_capped);
    w.figure("b_flood_unlimited", &flood_unlimited);
    w.figure("a_flood", &a_limited);
    w.figure("a_flood_polite", &a_polite);
    w.figure("a_flood_capped", &a_capped);
    w.figure("a_flood_unlimited", &a_unlimited);
    let (path, file) = ctx.plot_path("isolation");
    plot(&path, &w.figures)?;
    w.plots.push(file);
    Ok(())
}

/// B's p99 and errors, quiet and under both floods (from the stored figures).
pub fn plot(path: &Path, figures: &Value) -> anyhow::Result<()> {
    let runs = |key: &str, field: &str| -> Vec<f64> {
        figures[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m[field].as_f64())
            .collect()
    };
    let series = [
        ("quiet", "b_quiet", plots::BLUE),
        ("A floods (defaults)", "b_flood", plots::ORANGE),
        ("A honours Retry-After", "b_flood_polite", plots::PURPLE),
        ("A held to 50/s", "b_flood_capped", plots::GREEN),
        ("rate limits off", "b_flood_unlimited", plots::RED),
    ];
    let bars = |field: &str, sum: bool| -> Vec<plots::Bar> {
        series
            .iter()
            // Runs from before a series existed have no figure for it.
            .filter(|(_, key, _)| figures.get(*key).is_some())
            .map(|(label, key, color)| {
                let values = runs(key, field);
                let v = Spread::of(&values);
                plots::Bar {
                    label: label.to_string(),
                    color: *color,
                    value: if sum { values.iter().sum() } else { v.median },
                    range: (!sum).then_some((v.min, v.max)),
                    stacked: None,
                }
            })
            .collect()
    };
    let rate = figures["b_rate"].as_f64().unwrap_or(B_RATE);
    plots::panels(
        path,
        (1, 2),
        &[
            plots::Panel::Bars(plots::BarChart {
                title: &format!("Tenant B's feed p99 at {rate:.0} reads/s"),
                y_label: "p99 ms (median, min–max of reps)",
                bars: bars("p99_ms", false),
                stack_names: None,
            }),
            plots::Panel::Bars(plots::BarChart {
                title: "Tenant B's failed reads (all reps)",
                y_label: "requests not answered 2xx",
                bars: bars("errors", true),
                stack_names: None,
            }),
        ],
    )
}
