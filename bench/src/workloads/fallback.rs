//! Workload fallback: "email me only if I have not read it" (ARCHITECTURE.md,
//! "Delayed channels"), in two parts.
//!
//! **End to end, at a fixed alert rate.** Alerts to distinct users of one
//! tenant (one alert per user, so a user's read covers exactly one item), in
//! the bell at once and by email after [`DELAY_SECS`] unless read, posted
//! open loop through the server; one `tidings worker` decides and sends into
//! the no-op SMTP sink. A fixed share of the users ([`READ_PERCENT`]) marks
//! all read one second after their alert. Checked exactly: the emails avoided
//! (deliveries skipped `read`, counted in the database) equal the reads the
//! harness saw acknowledged before their delivery fell due, the emails sent
//! equal the rest, and the sink received each once. Reported: the decisions'
//! lag behind their due time and their rate.
//!
//! **The claim's cost.** A backlog of due email deliveries, one alert each,
//! claimed in
//! batches of [`BATCH`] in this process with the worker's own functions:
//! delayed ones (`deliveries::fallback::claim_and_decide`: the claim, then
//! the users' share locks, watermarks, one-by-one reads, preferences and the
//! recorded decision) against plain ones (`store::outbox::claim_deliveries`),
//! interleaved per repetition. Aim: the delayed claim costs at most 1.5× the
//! plain one per delivery.

use std::{
    collections::HashSet,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde_json::json;
use tidings_core::Channel;
use tidings_server::{db::PrimaryPool, deliveries::fallback, store::outbox};
use tokio::sync::Mutex;

use super::{user_token, Ctx};
use crate::{
    report::{Ratio, Table, WorkloadResult},
    seed::{api_key, tenant_uuid},
    server::{Launch, SmtpSink, Tidings},
    stats::{percentile, Spread},
    tier::TierName,
};

/// The fallback tenant (seeded by every tier, used by no other workload).
const TENANT: i64 = 3;
const DELAY_SECS: u64 = 3;
/// When a reading user marks all read, after its alert was accepted: well
/// before the delay ends, so the read commits before the decision.
const READ_AFTER: Duration = Duration::from_secs(1);
const READ_PERCENT: u64 = 30;
const BATCH: u32 = 100;
const LEASE_MS: u64 = 60_000;

struct Sizes {
    users: i64,
    alerts_per_second: u64,
    alerts: u64,
    backlog: i64,
}

fn sizes(tier: TierName) -> Sizes {
    match tier {
        TierName::S => Sizes {
            users: 1_000,
            alerts_per_second: 50,
            alerts: 300,
            backlog: 2_000,
        },
        TierName::M => Sizes {
            users: 10_000,
            alerts_per_second: 250,
            alerts: 5_000,
            backlog: 20_000,
        },
    }
}

fn user(i: u64) -> String {
    format!("fb-{i}")
}

/// The tenant's users, each with an email address.
async fn set_up(ctx: &Ctx, users: i64) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO users (tenant_id, user_id, email)
         SELECT $1, 'fb-' || i, 'fb-' || i || '@example.com' FROM generate_series(0, $2 - 1) i
         ON CONFLICT (tenant_id, user_id) DO NOTHING",
    )
    .bind(tenant_uuid(TENANT))
    .bind(users)
    .execute(&ctx.pool)
    .await
    .context("creating the fallback tenant's users")?;
    Ok(())
}

/// What the harness saw of the reading users.
#[derive(Default)]
struct Reads {
    /// Users whose mark-all-read was answered before their delivery fell due.
    before_due: HashSet<String>,
    /// Users whose mark was answered only after (none on a sound machine).
    late: HashSet<String>,
    failures: Vec<String>,
}

/// Marks all read for `user`, once its item is in its feed.
async fn read_all(ctx: &Ctx, user: &str) -> anyhow::Result<()> {
    let token = user_token(TENANT, user)?;
    for _ in 0..50 {
        let page: serde_json::Value = ctx
            .http
            .get(ctx.server.url("/v1/feed?limit=1"))
            .bearer_auth(&token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if let Some(head) = page["head"].as_str() {
            ctx.http
                .post(ctx.server.url("/v1/feed/read"))
                .bearer_auth(&token)
                .json(&json!({ "up_to": head }))
                .send()
                .await?
                .error_for_status()?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("{user}'s item never reached the feed")
}

struct Outcome {
    sent: i64,
    avoided: i64,
    other: i64,
    /// Due → decided, ms.
    lags: Vec<f64>,
    decided_seconds: f64,
}

/// The delayed email deliveries of entities `tag-*`, once all are decided.
async fn outcome(ctx: &Ctx, tag: &str, expected: u64) -> anyhow::Result<Outcome> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rows: Vec<(String, Option<String>, f64, f64)> = sqlx::query_as(
            "SELECT d.status::text, d.last_error,
                    extract(epoch FROM d.decided_at)::float8,
                    1000 * extract(epoch FROM d.decided_at - (d.created_at + $3 * interval '1 second'))::float8
               FROM (SELECT alert_id, status, last_error, decided_at, created_at
                       FROM deliveries WHERE tenant_id = $1 AND channel = 'email'
                     UNION ALL
                     SELECT alert_id, status, last_error, decided_at, created_at
                       FROM deliveries_sent WHERE tenant_id = $1 AND channel = 'email') d
               JOIN alerts a ON a.tenant_id = $1 AND a.id = d.alert_id
              WHERE a.entity_id LIKE $2 || '-%' AND d.decided_at IS NOT NULL
                AND d.status IN ('sent', 'skipped')",
        )
        .bind(tenant_uuid(TENANT))
        .bind(tag)
        .bind(DELAY_SECS as f64)
        .fetch_all(&ctx.pool)
        .await
        .context("reading the decisions")?;
        if rows.len() as u64 >= expected {
            let sent = rows.iter().filter(|r| r.0 == "sent").count() as i64;
            let avoided = rows
                .iter()
                .filter(|r| r.0 == "skipped" && r.1.as_deref() == Some(fallback::SKIPPED_READ))
                .count() as i64;
            let first = rows.iter().map(|r| r.2).fold(f64::INFINITY, f64::min);
            let last = rows.iter().map(|r| r.2).fold(f64::NEG_INFINITY, f64::max);
            return Ok(Outcome {
                sent,
                avoided,
                other: rows.len() as i64 - sent - avoided,
                lags: rows.iter().map(|r| r.3).collect(),
                decided_seconds: last - first,
            });
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {expected} delayed emails were decided within 120 s",
            rows.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn end_to_end(ctx: &Ctx, s: &Sizes, w: &mut WorkloadResult) -> anyhow::Result<()> {
    let sink = SmtpSink::start().await?;
    let worker = Tidings::worker(Launch {
        bin: &ctx.bin,
        database_url: &ctx.target.url,
        log_dir: &ctx.work_dir,
        name: "fallback-worker",
        env: vec![
            ("TIDINGS_OUTBOX_WORKERS".into(), "1".into()),
            ("TIDINGS_OUTBOX_POLL_MS".into(), "100".into()),
            ("TIDINGS_SMTP_URL".into(), sink.url.clone()),
        ],
    })
    .await?;
    let tag = format!("fb{}", std::process::id());
    let reads = Mutex::new(Reads::default());
    let interval = Duration::from_secs_f64(1.0 / s.alerts_per_second as f64);
    let delay = Duration::from_secs(DELAY_SECS);
    eprintln!(
        "  fallback: {} alerts at {}/s, {READ_PERCENT} % read after {READ_AFTER:?}, delay {DELAY_SECS} s",
        s.alerts, s.alerts_per_second
    );
    let start = Instant::now();
    let one = |k: u64| {
        let (tag, reads) = (&tag, &reads);
        async move {
            tokio::time::sleep_until((start + interval * k as u32).into()).await;
            let body = json!({
                "event_type": "comment.mentioned",
                "entity_id": format!("{tag}-{k}"),
                "recipients": [user(k)],
                "channels": ["in_app", "email"],
                "subject": "You were mentioned",
                "payload": {"comment": k},
                "delivery": {"email": {"delay": format!("{DELAY_SECS}s"), "unless": "read"}},
            });
            // Sent before the alert's transaction began: its delivery falls
            // due no earlier than `sent + delay`.
            let sent = Instant::now();
            let answer = ctx
                .http
                .post(ctx.server.url("/v1/alerts"))
                .bearer_auth(api_key(TENANT))
                .json(&body)
                .send()
                .await
                .and_then(|r| r.error_for_status());
            if let Err(err) = answer {
                reads
                    .lock()
                    .await
                    .failures
                    .push(format!("alert {k}: {err}"));
                return;
            }
            if k % 100 >= READ_PERCENT {
                return;
            }
            tokio::time::sleep_until((sent + READ_AFTER).into()).await;
            let read = read_all(ctx, &user(k)).await;
            let mut reads = reads.lock().await;
            match read {
                Err(err) => reads.failures.push(format!("read {k}: {err:#}")),
                Ok(()) if sent.elapsed() < delay => {
                    reads.before_due.insert(user(k));
                }
                Ok(()) => {
                    reads.late.insert(user(k));
                }
            }
        }
    };
    futures::future::join_all((0..s.alerts).map(one)).await;
    let posting = start.elapsed().as_secs_f64();
    let reads = reads.into_inner();
    let result = outcome(ctx, &tag, s.alerts).await;
    let received = sink.received.load(Ordering::Relaxed);
    worker.stop().await;
    anyhow::ensure!(
        reads.failures.is_empty(),
        "{} requests failed, first: {}",
        reads.failures.len(),
        reads.failures[0]
    );
    let o = result?;
    let before_due = reads.before_due.len() as i64;
    let late = reads.late.len() as i64;
    // Exact where it can be: every read answered before its delivery fell due
    // avoided an email; a late read (its answer after the due time) may have
    // come before or after the decision.
    anyhow::ensure!(
        o.other == 0,
        "{} delayed emails ended neither sent nor skipped `read`",
        o.other
    );
    anyhow::ensure!(
        (before_due..=before_due + late).contains(&o.avoided),
        "emails avoided {} but reads acknowledged before due {before_due} (+{late} late)",
        o.avoided
    );
    anyhow::ensure!(
        o.sent + o.avoided == s.alerts as i64,
        "sent {} + avoided {} is not the {} alerts",
        o.sent,
        o.avoided,
        s.alerts
    );
    anyhow::ensure!(
        received == o.sent as u64,
        "the SMTP sink received {received} emails, the database says {} were sent",
        o.sent
    );
    let lag_p50 = percentile(&o.lags, 50.0);
    let lag_p99 = percentile(&o.lags, 99.0);
    let decisions_per_second = s.alerts as f64 / o.decided_seconds.max(1e-3);
    let mut table = Table::new(
        "Delayed email unless read, end to end (one worker, no-op SMTP sink)",
        &[
            "alerts",
            "offered /s",
            "read before due",
            "late reads",
            "emails avoided",
            "emails sent",
            "decisions /s",
            "decision lag p50 / p99 (ms)",
        ],
    );
    table.row(vec![
        s.alerts.to_string(),
        format!("{:.0}", s.alerts as f64 / posting),
        before_due.to_string(),
        late.to_string(),
        o.avoided.to_string(),
        o.sent.to_string(),
        format!("{decisions_per_second:.0}"),
        format!("{lag_p50:.0} / {lag_p99:.0}"),
    ]);
    w.tables.push(table);
    w.figure(
        "end_to_end",
        json!({
            "alerts": s.alerts,
            "offered_per_second": s.alerts as f64 / posting,
            "reads_before_due": before_due,
            "late_reads": late,
            "emails_avoided": o.avoided,
            "emails_sent": o.sent,
            "smtp_received": received,
            "decisions_per_second": decisions_per_second,
            "decision_lag_ms": {"p50": lag_p50, "p99": lag_p99},
        }),
    );
    w.notes.push(format!(
        "Emails avoided {} = reads acknowledged before their delivery fell due {before_due} \
         (late reads {late}); sent {} = the SMTP sink's {received}. The decision lag is \
         decided_at − (created_at + delay): the worker's wait for the due time, and the claim.",
        o.avoided, o.sent
    ));
    Ok(())
}

/// `n` due email deliveries, one alert each (as "email me if unread" is: one
/// alert, one recipient), to the tenant's users; `delayed`: each waits on
/// `read` of an item no watermark reaches (so each is decided `send`, as
/// many as the plain arm sends).
async fn enqueue(ctx: &Ctx, s: &Sizes, n: i64, tag: &str, delayed: bool) -> anyhow::Result<()> {
    sqlx::query(
        "WITH a AS (
            INSERT INTO alerts (tenant_id, id, event_type, entity_id, payload, channels)
            SELECT $1, gen_random_uuid(), 'comment.mentioned', $3 || '-' || g, '{}', '{email}'
            FROM generate_series(0, $2 - 1) g
            RETURNING id, entity_id
         ),
         numbered AS (SELECT id, row_number() OVER (ORDER BY entity_id) - 1 AS k FROM a)
         INSERT INTO deliveries (tenant_id, notification_key, alert_id, recipient_id, channel,
                                 status, unless_mark, item_tx, item_id)
         SELECT $1, md5($3 || '/' || i), n.id, 'fb-' || (i % $5), 'email', 'pending',
                CASE WHEN $4 THEN 'read' END, CASE WHEN $4 THEN 4611686018427387904 END,
                CASE WHEN $4 THEN i END
         FROM generate_series(0, $2 - 1) i JOIN numbered n ON n.k = i",
    )
    .bind(tenant_uuid(TENANT))
    .bind(n)
    .bind(tag)
    .bind(delayed)
    .bind(s.users)
    .execute(&ctx.pool)
    .await
    .context("enqueueing the claim backlog")?;
    Ok(())
}

/// Claims the tenant's due emails in batches until none is left; the time
/// spent in the claims (each batch's rows are then deleted, untimed, alike
/// in both arms), and how many were claimed.
async fn drain_claims(
    ctx: &Ctx,
    pool: &PrimaryPool,
    delayed: bool,
) -> anyhow::Result<(f64, usize)> {
    let (mut in_claims, mut claimed) = (Duration::ZERO, 0);
    loop {
        let t0 = Instant::now();
        let batch = if delayed {
            fallback::claim_and_decide(pool, BATCH, LEASE_MS, &[Channel::Email]).await?
        } else {
            outbox::claim_deliveries(pool.inner(), BATCH, LEASE_MS, &[Channel::Email]).await?
        };
        in_claims += t0.elapsed();
        if batch.is_empty() {
            return Ok((in_claims.as_secs_f64(), claimed));
        }
        claimed += batch.len();
        let ids: Vec<i64> = batch.iter().map(|d| d.id).collect();
        sqlx::query("DELETE FROM deliveries WHERE tenant_id = $1 AND id = ANY($2)")
            .bind(tenant_uuid(TENANT))
            .bind(&ids)
            .execute(&ctx.pool)
            .await?;
    }
}

async fn claim_cost(ctx: &Ctx, s: &Sizes, w: &mut WorkloadResult) -> anyhow::Result<()> {
    let pool = PrimaryPool::direct(ctx.pool.clone());
    let (mut plain, mut delayed) = (Vec::new(), Vec::new());
    for rep in 0..ctx.tier.reps {
        eprintln!("  fallback (claim cost) rep {}/{}", rep + 1, ctx.tier.reps);
        let mut arms = [false, true];
        if rep % 2 == 1 {
            arms.reverse();
        }
        for arm in arms {
            let tag = format!("fbclaim{}-{rep}-{arm}", std::process::id());
            enqueue(ctx, s, s.backlog, &tag, arm).await?;
            sqlx::query("VACUUM ANALYZE deliveries")
                .execute(&ctx.pool)
                .await?;
            let (secs, claimed) = drain_claims(ctx, &pool, arm).await?;
            anyhow::ensure!(
                claimed as i64 == s.backlog,
                "claimed {claimed} of {} ({tag})",
                s.backlog
            );
            let us_per_delivery = secs * 1e6 / claimed as f64;
            if arm { &mut delayed } else { &mut plain }.push(us_per_delivery);
        }
    }
    // Lower is better: the ratio is plain ÷ delayed, so the aim (the delayed
    // claim at most 1.5× the plain one) reads as ≥ 1/1.5.
    w.ratios.push(Ratio::new(
        "fallback claim: plain ÷ delayed µs per delivery (≥ 0.67: the delayed claim costs ≤ 1.5×)",
        "plain claim µs/delivery",
        "delayed claim + decision µs/delivery",
        Some(0.67),
        &plain,
        &delayed,
    ));
    let mut table = Table::new(
        "The claim, per delivery (this process, batches of 100, the worker's functions)",
        &["arm", "µs per delivery", "deliveries /s (one loop)"],
    );
    for (name, values) in [("plain", &plain), ("delayed, decided", &delayed)] {
        let spread = Spread::of(values);
        table.row(vec![
            name.into(),
            spread.show(0),
            format!("{:.0}", 1e6 / spread.median),
        ]);
    }
    w.tables.push(table);
    w.figure(
        "claim_us_per_delivery",
        json!({"plain": Spread::of(&plain), "delayed": Spread::of(&delayed), "backlog": s.backlog}),
    );
    Ok(())
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let mut w = WorkloadResult::new("fallback");
    let s = sizes(ctx.tier.name);
    set_up(ctx, s.users).await?;
    end_to_end(ctx, &s, &mut w).await?;
    claim_cost(ctx, &s, &mut w).await?;
    Ok(w)
}
