//! The drain workload's email phase: what a template costs at send.
//!
//! One `tidings worker` drains a backlog of email deliveries of the drain
//! tenant into the no-op SMTP sink ([`SmtpSink`]), once as plain emails (no
//! template: the subject and payload as text) and once with the ingest
//! workload's overdue-invoice template recorded on every row, alternated
//! every repetition. Both arms carry a non-critical category and a public
//! URL, so both sign an unsubscribe link. Reported: emails/s and the worker's
//! CPU per email (utime + stime from /proc over the drain); their difference
//! is what rendering costs per email in the worker. Beside it, the render
//! function alone (`alerts::templates::render_email`, this build, in the
//! harness's process) on the same template and variables.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use tidings_server::alerts::templates::{
    email::BodyFormat, render_email, EmailContent, Recipient, Variables,
};

use super::{outstanding, wait_drained, Ctx, TENANT};
use crate::{
    report::{Ratio, Table, WorkloadResult},
    seed::{api_key, tenant_uuid},
    server::{Launch, SmtpSink, Tidings},
    stats::Spread,
    workloads::{
        ingest::{EMAIL_HTML, EMAIL_PAYLOAD},
        stream::{cpu_ticks, CLK_TCK},
    },
};

const EVENT_TYPE: &str = "invoice.templated";
const SUBJECT: &str = "Invoice {{ payload.invoice }} is overdue";
/// Recipients the emails cycle through (each with contact data).
const USERS: i64 = 100;

/// The tenant's users, category and published template, through the API;
/// returns the template's version id.
async fn set_up(ctx: &Ctx) -> anyhow::Result<i64> {
    let send = |method: reqwest::Method, path: String, body: serde_json::Value| {
        let req = ctx
            .http
            .request(method, ctx.server.url(&path))
            .bearer_auth(api_key(TENANT))
            .json(&body);
        async move {
            let resp = req.send().await?;
            anyhow::ensure!(
                resp.status().is_success(),
                "{path} answered {}: {}",
                resp.status(),
                resp.text().await.unwrap_or_default()
            );
            anyhow::Ok(())
        }
    };
    for i in 0..USERS {
        send(
            reqwest::Method::PUT,
            format!("/v1/users/user-{i}"),
            json!({"email": format!("user-{i}@example.com"), "display_name": format!("User {i}"),
                   "locale": "en-GB", "timezone": "Europe/Berlin"}),
        )
        .await?;
    }
    send(
        reqwest::Method::PUT,
        "/v1/categories/billing".into(),
        json!({"label": "Billing", "event_types": [EVENT_TYPE]}),
    )
    .await?;
    send(
        reqwest::Method::PUT,
        format!("/v1/templates/{EVENT_TYPE}/email?locale=en"),
        json!({"subject": SUBJECT, "html": EMAIL_HTML, "sample": EMAIL_PAYLOAD.clone()}),
    )
    .await?;
    sqlx::query_scalar(
        "SELECT published_version_id FROM templates
         WHERE tenant_id = $1 AND event_type = $2 AND channel = 'email'",
    )
    .bind(tenant_uuid(TENANT))
    .bind(EVENT_TYPE)
    .fetch_one(&ctx.pool)
    .await
    .context("reading the published template's version")
}

/// `n` pending email deliveries (one alert per 100) of the category, with
/// `version` recorded on each or none, committed at once.
async fn enqueue(ctx: &Ctx, n: i64, tag: &str, version: Option<i64>) -> anyhow::Result<()> {
    sqlx::query(
        "WITH a AS (
            INSERT INTO alerts (tenant_id, id, event_type, entity_id, subject, payload, channels, category)
            SELECT $1, gen_random_uuid(), $5, $3 || '-' || g, 'Invoice overdue', $6, '{email}', 'billing'
            FROM generate_series(0, ($2 - 1) / 100) g
            RETURNING id, entity_id
         ),
         numbered AS (SELECT id, row_number() OVER (ORDER BY entity_id) - 1 AS k FROM a)
         INSERT INTO deliveries (tenant_id, notification_key, alert_id, recipient_id, channel, status,
                                 template_version_id)
         SELECT $1, md5($3 || '/' || i), n.id, 'user-' || (i % $7), 'email', 'pending', $4
         FROM generate_series(0, $2 - 1) i JOIN numbered n ON n.k = i / 100",
    )
    .bind(tenant_uuid(TENANT))
    .bind(n)
    .bind(tag)
    .bind(version)
    .bind(EVENT_TYPE)
    .bind(&*EMAIL_PAYLOAD)
    .bind(USERS)
    .execute(&ctx.pool)
    .await
    .context("enqueueing emails")?;
    sqlx::query("SELECT pg_notify('tidings_outbox', $1)")
        .bind(tenant_uuid(TENANT).to_string())
        .execute(&ctx.pool)
        .await?;
    Ok(())
}

/// utime + stime of a process in seconds (the stream workload's reading of
/// /proc).
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let ticks = cpu_ticks(pid).with_context(|| format!("reading /proc/{pid}/stat"))?;
    Ok(ticks as f64 / CLK_TCK)
}

struct Drained {
    per_second: f64,
    cpu_us_per_email: f64,
}

/// One worker drains `n` emails (templated when `version` is given).
async fn drain(
    ctx: &Ctx,
    sink: &SmtpSink,
    n: i64,
    tag: &str,
    version: Option<i64>,
) -> anyhow::Result<Drained> {
    let worker = Tidings::worker(Launch {
        bin: &ctx.bin,
        database_url: &ctx.target.url,
        log_dir: &ctx.work_dir,
        name: &format!("email-worker-{tag}"),
        env: vec![
            ("TIDINGS_OUTBOX_WORKERS".into(), "1".into()),
            ("TIDINGS_DB_MAX_CONNECTIONS".into(), "4".into()),
            ("TIDINGS_SMTP_URL".into(), sink.url.clone()),
            // Unsubscribe links on: both arms sign one per email.
            (
                "TIDINGS_PUBLIC_URL".into(),
                "https://notify.example.com".into(),
            ),
        ],
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let pid = worker.pid().context("worker pid")?;
    let received_before = sink.received.load(std::sync::atomic::Ordering::Relaxed);
    let cpu_before = cpu_seconds(pid)?;
    let t0 = Instant::now();
    enqueue(ctx, n, tag, version).await?;
    let drained = wait_drained(ctx, Duration::from_secs(300)).await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid).map(|after| after - cpu_before);
    worker.stop().await;
    drained?;
    let received = sink.received.load(std::sync::atomic::Ordering::Relaxed) - received_before;
    anyhow::ensure!(
        received >= n as u64,
        "the SMTP sink received {received} of {n} emails ({tag})"
    );
    let dead: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND status = 'dead'",
    )
    .bind(tenant_uuid(TENANT))
    .fetch_one(&ctx.pool)
    .await?;
    anyhow::ensure!(
        dead == 0,
        "{dead} emails ended dead ({tag}): see the worker's log"
    );
    Ok(Drained {
        per_second: n as f64 / secs,
        cpu_us_per_email: cpu? * 1e6 / n as f64,
    })
}

/// The render alone, in this process: µs per email (mean of `n` renders).
fn render_alone(n: usize) -> anyhow::Result<f64> {
    let content = EmailContent {
        subject: SUBJECT.into(),
        html: EMAIL_HTML.into(),
        text: None,
        format: BodyFormat::Html,
    };
    let vars = Variables {
        payload: EMAIL_PAYLOAD.clone(),
        recipient: Recipient {
            id: "user-7".into(),
            display_name: Some("User 7".into()),
            locale: Some("en-GB".into()),
            timezone: Some("Europe/Berlin".into()),
        },
        event_type: EVENT_TYPE.into(),
        entity_id: "INV-000042".into(),
        subject: Some("Invoice overdue".into()),
        category: Some("billing".into()),
        unsubscribe_url: Some("https://notify.example.com/u/token".into()),
    };
    let t0 = Instant::now();
    for _ in 0..n {
        let email = render_email(&content, "en", &vars).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::hint::black_box(email);
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / n as f64)
}

pub async fn run(ctx: &Ctx, w: &mut WorkloadResult) -> anyhow::Result<()> {
    anyhow::ensure!(
        outstanding(ctx).await? == 0,
        "the drain tenant has deliveries outstanding before the email phase"
    );
    let sink = SmtpSink::start().await?;
    let version = set_up(ctx).await?;
    let n = (ctx.tier.drain_backlog / 4).max(100);
    // Warm-up, not measured: a fresh worker's first claims and the template
    // cache's first read.
    drain(ctx, &sink, n / 10, "email-warm", Some(version)).await?;
    let (mut plain, mut templated, mut alone) = (vec![], vec![], vec![]);
    for rep in 0..ctx.tier.reps {
        eprintln!("  drain (email) rep {}/{}", rep + 1, ctx.tier.reps);
        let mut arms = [None, Some(version)];
        if rep % 2 == 1 {
            arms.reverse();
        }
        for arm in arms {
            let tag = format!(
                "email-{}-{rep}",
                if arm.is_some() { "tpl" } else { "plain" }
            );
            let d = drain(ctx, &sink, n, &tag, arm).await?;
            if arm.is_some() {
                &mut templated
            } else {
                &mut plain
            }
            .push(d);
        }
        alone.push(tokio::task::spawn_blocking(|| render_alone(2_000)).await??);
    }
    let rate = |ds: &[Drained]| ds.iter().map(|d| d.per_second).collect::<Vec<_>>();
    let cpu = |ds: &[Drained]| ds.iter().map(|d| d.cpu_us_per_email).collect::<Vec<_>>();
    let render_cost: Vec<f64> = templated
        .iter()
        .zip(&plain)
        .map(|(t, p)| t.cpu_us_per_email - p.cpu_us_per_email)
        .collect();
    w.ratios.push(Ratio::new(
        "templated ÷ plain emails/s (1 worker)",
        "emails/s with the overdue-invoice template",
        "plain emails (no template), same run",
        None,
        &rate(&templated),
        &rate(&plain),
    ));
    let mut t = Table::new(
        &format!(
            "Email at send: 1 worker, {n} emails per drain into the no-op SMTP sink (same run)"
        ),
        &["emails", "emails/s", "worker CPU µs/email"],
    );
    t.row(vec![
        "plain (no template)".into(),
        Spread::of(&rate(&plain)).show(0),
        Spread::of(&cpu(&plain)).show(0),
    ]);
    t.row(vec![
        "templated".into(),
        Spread::of(&rate(&templated)).show(0),
        Spread::of(&cpu(&templated)).show(0),
    ]);
    t.row(vec![
        "render cost in the worker (templated − plain CPU)".into(),
        "—".into(),
        Spread::of(&render_cost).show(0),
    ]);
    t.row(vec![
        "render alone (render_email, in process)".into(),
        "—".into(),
        Spread::of(&alone).show(1),
    ]);
    w.tables.push(t);
    w.notes.push(
        "Email phase: both arms are emails of a non-critical category with unsubscribe links on \
         (TIDINGS_PUBLIC_URL), so each signs a token; the templated arm renders the ingest \
         workload's overdue-invoice template (subject, HTML with a loop and number formatting, \
         CSS inlined, text derived from the HTML). The worker's CPU is utime + stime of its \
         process over the drain (USER_HZ ticks), per email; the render-alone figure is the mean \
         of 2,000 renders in the harness's process."
            .into(),
    );
    w.figure(
        "email",
        json!({
            "emails_per_drain": n,
            "plain_per_s": rate(&plain), "templated_per_s": rate(&templated),
            "plain_cpu_us": cpu(&plain), "templated_cpu_us": cpu(&templated),
            "render_alone_us": alone,
        }),
    );
    Ok(())
}
