//! Workload mixed: 90% feed reads / 10% event writes at a fixed total rate
//! (half the feed's closed-loop maximum), open loop. Reads alone at the same read
//! rate are interleaved with the mixed runs; the report states how much the
//! read p99 degrades when the writes join (a ratio, median and range).
//!
//! Reads: the feed workload's reader, first page, limit 20. Writes: POST
//! /v1/events to team-0 (one of the reader's teams, so the feed moves while it is
//! read), one new event per request.

use std::time::Instant;

use serde_json::json;

use super::{feed::pick_reader, fmt_ms, rps, user_token, Ctx};
use crate::{
    loadgen::{HttpRequest, Measure},
    report::{Ratio, Table, WorkloadResult},
    seed::api_key,
    stats::Spread,
};

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    if !ctx.seeded.has_feed_tables
        || !ctx
            .route_exists(reqwest::Method::POST, "/v1/events")
            .await?
    {
        return Ok(WorkloadResult::skipped(
            "mixed",
            "GET /v1/feed and POST /v1/events are not on this branch yet",
        ));
    }
    let mut w = WorkloadResult::new("mixed");
    let reader = pick_reader(ctx).await?;
    let token = user_token(0, &reader.user_id)?;
    let read = HttpRequest::get(format!("{}?limit=20", ctx.server.url("/v1/feed"))).bearer(&token);
    let body_file = ctx.work_dir.join("mixed-event.jsonl");
    std::fs::write(
        &body_file,
        json!({"team_id": "team-0", "type": "comment.created", "actor_id": "user-1",
               "object_id": "doc-1", "payload": {"text": "mixed workload"}})
        .to_string()
            + "\n",
    )?;
    let mut write = HttpRequest::get(ctx.server.url("/v1/events")).bearer(&api_key(0));
    write.method = "POST";
    write.body_lines = Some(body_file);

    let max = ctx.max(&read).await?.requests_per_sec;
    let total = max / 2.0;
    let (read_rate, write_rate) = (total * 0.9, total * 0.1);
    let (mut alone, mut mixed_reads, mut mixed_writes): (Vec<Measure>, Vec<Measure>, Vec<Measure>) =
        (vec![], vec![], vec![]);
    for rep in 0..ctx.tier.reps {
        eprintln!("  mixed rep {}/{}", rep + 1, ctx.tier.reps);
        alone.push(ctx.at_rate(&read, read_rate).await?);
        let (r, wr) = tokio::join!(
            ctx.at_rate(&read, read_rate),
            ctx.at_rate(&write, write_rate)
        );
        mixed_reads.push(r?);
        mixed_writes.push(wr?);
    }
    let p99 =
        |ms: &[Measure]| -> Vec<f64> { ms.iter().map(|m| m.p99_ms.unwrap_or(f64::NAN)).collect() };
    w.ratios.push(Ratio::new(
        "mixed read p99 degradation",
        "read p99 with 10% writes",
        "read p99 alone",
        None,
        &p99(&mixed_reads),
        &p99(&alone),
    ));
    let mut t = Table::new(
        &format!(
            "Mixed at {total:.0} req/s (reads {read_rate:.0}/s, writes {write_rate:.0}/s), open loop; \
             feed maximum {max:.0} req/s"
        ),
        &["run", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "errors"],
    );
    let med = |ms: &[Measure], f: fn(&Measure) -> Option<f64>| {
        fmt_ms(Some(
            Spread::of(&ms.iter().filter_map(f).collect::<Vec<_>>()).median,
        ))
    };
    for (name, ms) in [
        ("reads alone", &alone),
        ("reads with writes", &mixed_reads),
        ("writes (POST /v1/events)", &mixed_writes),
    ] {
        t.row(vec![
            name.into(),
            Spread::of(&rps(ms)).show(0),
            med(ms, |m| m.p50_ms),
            med(ms, |m| m.p99_ms),
            med(ms, |m| m.p999_ms),
            format!("{:.0}", ms.iter().map(|m| m.errors).sum::<f64>()),
        ]);
    }
    w.tables.push(t);
    w.figure("feed_max", max);
    w.figure("read_rate", read_rate);
    w.figure("write_rate", write_rate);
    w.figure("reads_alone", &alone);
    w.figure("reads_mixed", &mixed_reads);
    w.figure("writes_mixed", &mixed_writes);
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}
