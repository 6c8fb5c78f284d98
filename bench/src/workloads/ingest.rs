//! Workload ingest: POST /v1/alerts with 10 and 1,000 deliveries per
//! alert (5 or 500 recipients × in_app + webhook), through wrk with a Lua script
//! so every request carries its own entity (fresh keys) or replays an earlier
//! one (same body, same Idempotency-Key).
//!
//! - Efficiency: fresh alerts without Idempotency-Key against pgbench of the same
//!   statements in one transaction (bench/sql/alert_ingest.sql), interleaved.
//! - Replays: with Idempotency-Key, 0%, 10% and 100% of requests replaying an
//!   alert created before the measurement; the replay speed-up is 100% vs 0%.
//!
//! Delivery rows/s = successful requests/s × deliveries per alert (the rows each
//! answer reports); the rows actually written are counted in the database too.
//!
//! With `--tidings-before-bin` (scripts/bench: `BENCH_BEFORE_BIN`), the write
//! routes also run on that build beside this one, alternated
//! (`super::before_and_after`): `POST /v1/events` (oha, one team of the ingest
//! tenant) and fresh `POST /v1/alerts` of the smaller size (wrk, no
//! Idempotency-Key): the run carries its own before/after of the write path.

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::Context;
use serde_json::json;

use super::{before_and_after, drain_peer, fmt_ms, rps, Ctx};
use crate::{
    loadgen::{HttpRequest, Measure, WRK_DONE_LUA},
    report::{Aim, Ratio, Table, WorkloadResult},
    seed::{api_key, tenant_uuid},
    stats::Spread,
};

/// The ingest tenant (tenant 1: tenant 0's feed stays untouched).
const TENANT: i64 = 1;
const CHANNELS: [&str; 2] = ["in_app", "webhook"];
const EVENT_TYPE: &str = "invoice.overdue";

/// What the alerts of one arm of the API measurements look like: whose they
/// are, their event type and their channels.
#[derive(Clone, Copy)]
struct Shape {
    tenant: i64,
    event_type: &'static str,
    channels: [&'static str; 2],
}

/// Today's alerts: in_app + webhook, no category, no template, no
/// preference rows (the shape every earlier run measured).
const TODAY: Shape = Shape {
    tenant: TENANT,
    event_type: EVENT_TYPE,
    channels: CHANNELS,
};

/// Alerts with content and consent on: in_app + email of an event type in a
/// category, with a published email template (its version recorded on every
/// email row) and preference rows for every recipient, resolved at fan-out.
/// Its own tenant, so that today's arm keeps reading no preference rows.
const CONSENT: Shape = Shape {
    tenant: 3,
    event_type: "invoice.templated",
    channels: ["in_app", "email"],
};

/// The same channels as [`CONSENT`] with neither template nor category nor
/// preference rows: what the email channel itself costs (its contact lookup).
const PLAIN_EMAIL: Shape = Shape {
    tenant: 4,
    event_type: EVENT_TYPE,
    channels: ["in_app", "email"],
};

fn body(shape: Shape, entity: &str, recipients: usize) -> String {
    let recipients: Vec<String> = (1..=recipients).map(|i| format!("user-{i}")).collect();
    json!({
        "event_type": shape.event_type,
        "entity_id": entity,
        "recipients": recipients,
        "channels": shape.channels,
        "subject": "Invoice overdue",
        "payload": if shape.channels.contains(&"email") { EMAIL_PAYLOAD.clone() } else { json!({"amount": 42}) },
    })
    .to_string()
}

/// A wrk script: `replay_pct` of requests (deterministically every k-th) replay
/// one of the primed alerts; the rest are new entities unique to this run.
fn wrk_script(
    ctx: &Ctx,
    shape: Shape,
    name: &str,
    recipients: usize,
    replay_pct: u32,
    idempotency: bool,
    run_id: &str,
) -> anyhow::Result<PathBuf> {
    let template = body(shape, "@ENTITY@", recipients);
    let (prefix, suffix) = template
        .split_once("@ENTITY@")
        .context("entity placeholder")?;
    let lua = format!(
        r#"
local counter = 0
local threads = {{}}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
local prefix = {prefix:?}
local suffix = {suffix:?}
function request()
  counter = counter + 1
  local entity
  if (counter % 100) < {replay_pct} then
    entity = "primed-{recipients}-" .. ((counter * 7919 + (tid or 0)) % {primed})
  else
    entity = "{run_id}-" .. (tid or 0) .. "-" .. counter
  end
  local headers = {{}}
  headers["Authorization"] = "Bearer {key}"
  headers["Content-Type"] = "application/json"
  if {idempotency} then headers["Idempotency-Key"] = "idem-" .. entity end
  return wrk.format("POST", "/v1/alerts", headers, prefix .. entity .. suffix)
end
{WRK_DONE_LUA}
"#,
        key = api_key(shape.tenant),
        primed = ctx.tier.primed_alerts,
        idempotency = if idempotency { "true" } else { "false" },
    );
    let path = ctx.work_dir.join(format!("{name}.lua"));
    std::fs::write(&path, lua)?;
    Ok(path)
}

/// The pgbench script: a generator SELECT (\gset) making this transaction's
/// unique ids and arrays, in the server's row order (`alerts::plan::key_order`:
/// recipient, channel), then the server's statements in one transaction. The
/// alert id is time-ordered like the server's (`Uuid::now_v7`: a millisecond
/// timestamp, then random bits), so that indexes keyed by alert grow at their
/// right edge as the server's do.
fn pgbench_script(ctx: &Ctx, sql_file: &str) -> anyhow::Result<PathBuf> {
    let generator = "WITH g AS (SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') \
                             || '7' || substr(md5(random()::text), 1, 19))::uuid AS aid, \
                            'pgb-' || md5(random()::text) AS ent), \
        r AS (SELECT 'user-' || i AS rec, c AS ch, \
                     encode(sha256(convert_to(g.ent || '/' || i || '/' || c, 'UTF8')), 'hex') AS k, \
                     g.ent || '|' || i || '|' || c AS rk \
              FROM g, generate_series(1, :nrec) i, unnest(ARRAY['in_app', 'webhook']) c) \
        SELECT hashtext(g.ent)::bigint AS s1p1, \
               :tenant AS s2p1, g.aid AS s2p2, :etype AS s2p3, g.ent AS s2p4, \
               (SELECT array_agg(k ORDER BY rec, ch) FROM r) AS s2p5, (SELECT array_agg(rk ORDER BY rec, ch) FROM r) AS s2p6, \
               (SELECT array_agg(rec ORDER BY rec, ch) FROM r) AS s2p7, (SELECT array_agg(ch ORDER BY rec, ch) FROM r) AS s2p8, \
               :tenant AS s3p1, :etype AS s3p2, \
               :tenant AS s4p1, g.aid AS s4p2, \
               (SELECT array_agg(k ORDER BY rec, ch) FROM r) AS s4p3, (SELECT array_agg(rec ORDER BY rec, ch) FROM r) AS s4p4, \
               (SELECT array_agg(ch ORDER BY rec, ch) FROM r) AS s4p5, \
               (SELECT array_agg(CASE WHEN ch = 'webhook' THEN :ep::uuid END ORDER BY rec, ch) FROM r) AS s4p6, \
               (SELECT array_agg(CASE WHEN ch = 'in_app' THEN 'sent' ELSE 'pending' END ORDER BY rec, ch) FROM r) AS s4p7, \
               (SELECT array_agg(NULL::text) FROM r) AS s4p8, \
               :tenant AS s5p1, g.aid AS s5p2, :etype AS s5p3, g.ent AS s5p4, 'Invoice overdue' AS s5p5, '{\"amount\": 42}' AS s5p6, \
               (SELECT array_agg(rec ORDER BY rec, ch) FROM r WHERE ch = 'in_app') AS s5p7, \
               (SELECT array_agg(k ORDER BY rec, ch) FROM r WHERE ch = 'in_app') AS s5p8, \
               'tidings_outbox' AS s6p1, :tenant AS s6p2, \
               :tenant AS s7p1, g.aid AS s7p2, :etype AS s7p3, g.ent AS s7p4, 'Invoice overdue' AS s7p5, \
               '{\"amount\": 42}' AS s7p6, '{in_app,webhook}' AS s7p7, '' AS s7p8 \
        FROM g \\gset";
    let file = crate::sqlfile::SqlFile::load(&ctx.repo.join("bench/sql").join(sql_file))?;
    let script = file.pgbench_script(&[generator, "BEGIN;"], &["COMMIT;"]);
    let path = ctx.work_dir.join(format!("{sql_file}.pgbench"));
    std::fs::write(&path, script)?;
    Ok(path)
}

/// The same-run before/after of the write path's SQL (the lean outbox's
/// migration 0015, then the natural keys' migration 0019): fresh `deliveries`, `notifications` and `inbox_items`
/// in schema `ingest_after` (the migrated tables: indexes and storage
/// settings) and in `ingest_before` (deliveries with the indexes and settings
/// of migrations 0005–0013; notifications keyed by the digest and inbox_items
/// unique on it, as before 0019), each written by its statements
/// (alert_ingest.sql, alert_ingest_v0.sql) through `search_path`; and in
/// `ingest_digest_keys` today's deliveries with notifications and inbox items
/// keyed by the digest, written by the statements of just before 0019
/// (alert_ingest_v1.sql): that migration's own before; and in `ingest_0019`
/// the tables as migration 0019 left them (foreign keys to `tenants` on all
/// three, `notifications_by_alert`), written by today's statements:
/// migration 0020's before. Every arm's tables are pre-filled alike
/// ([`prefill`]) before any is measured.
const SCHEMA_AFTER: &str = "ingest_after";
const SCHEMA_BEFORE: &str = "ingest_before";
const SCHEMA_DIGEST_KEYS: &str = "ingest_digest_keys";
const SCHEMA_0019: &str = "ingest_0019";
const SCHEMAS: [&str; 4] = [SCHEMA_AFTER, SCHEMA_BEFORE, SCHEMA_DIGEST_KEYS, SCHEMA_0019];

async fn fresh_deliveries(ctx: &Ctx) -> anyhow::Result<()> {
    let mut tx = ctx.pool.begin().await?;
    for s in SCHEMAS {
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"))
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!("CREATE SCHEMA {s}"))
            .execute(&mut *tx)
            .await?;
    }
    drain_peer::create_deliveries_as_migrated(&mut tx, SCHEMA_AFTER).await?;
    drain_peer::create_deliveries_before_0015(&mut tx, SCHEMA_BEFORE).await?;
    drain_peer::create_deliveries_as_migrated(&mut tx, SCHEMA_DIGEST_KEYS).await?;
    drain_peer::create_deliveries_as_migrated(&mut tx, SCHEMA_0019).await?;
    for s in [SCHEMA_AFTER, SCHEMA_0019] {
        for stmt in [
            "CREATE TABLE {s}.notifications (LIKE public.notifications INCLUDING ALL)",
            "CREATE TABLE {s}.inbox_items (LIKE public.inbox_items INCLUDING ALL)",
        ] {
            sqlx::query(&stmt.replace("{s}", s))
                .execute(&mut *tx)
                .await?;
        }
    }
    // As migration 0019 left them (0020 dropped these): a foreign key to
    // tenants on the three tables, notifications indexed by alert.
    for stmt in [
        "ALTER TABLE {s}.notifications ADD FOREIGN KEY (tenant_id)
           REFERENCES public.tenants (id) ON DELETE CASCADE",
        "ALTER TABLE {s}.deliveries ADD FOREIGN KEY (tenant_id)
           REFERENCES public.tenants (id) ON DELETE CASCADE",
        "ALTER TABLE {s}.inbox_items ADD FOREIGN KEY (tenant_id)
           REFERENCES public.tenants (id) ON DELETE CASCADE",
        "CREATE INDEX IF NOT EXISTS notifications_by_alert_0019
           ON {s}.notifications (tenant_id, alert_id)",
    ] {
        sqlx::query(&stmt.replace("{s}", SCHEMA_0019))
            .execute(&mut *tx)
            .await?;
    }
    // Before 0019, the digest as the key of both: for the statements before
    // 0015 and for those of just before 0019.
    for s in [SCHEMA_BEFORE, SCHEMA_DIGEST_KEYS] {
        for stmt in [
            "CREATE TABLE {s}.notifications (LIKE public.notifications
               INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
            "ALTER TABLE {s}.notifications ADD PRIMARY KEY (tenant_id, key)",
            "CREATE INDEX ON {s}.notifications (tenant_id, alert_id)",
            "CREATE TABLE {s}.inbox_items (LIKE public.inbox_items INCLUDING ALL)",
            "ALTER TABLE {s}.inbox_items ADD UNIQUE (tenant_id, notification_key)",
        ] {
            sqlx::query(&stmt.replace("{s}", s))
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// The same history in every arm's tables: `alerts` alerts of 500 recipients
/// on in_app + webhook for the ingest tenant, all delivered (`sent`), with
/// time-ordered ids older than any the measurement makes, generated in SQL
/// (1,000 notifications, 1,000 deliveries and 500 inbox items per alert).
/// Then VACUUM ANALYZE and a CHECKPOINT, so that each arm starts with its
/// indexes big, its statistics current and no full-page images owed.
async fn prefill(ctx: &Ctx, alerts: i64, endpoint: uuid::Uuid) -> anyhow::Result<()> {
    let started = Instant::now();
    let tenant = tenant_uuid(TENANT);
    let alert_id =
        "(lpad(to_hex(1764547200000 + a), 12, '0') || '7' || substr(md5(a::text), 1, 19))::uuid";
    let key = "encode(sha256(convert_to('pre-' || a || '/' || i || '/' || c, 'UTF8')), 'hex')";
    let rows = "FROM generate_series(1, $3::bigint) a, generate_series(1, 500) i,
                     unnest(ARRAY['in_app', 'webhook']) c";
    for s in SCHEMAS {
        for stmt in [
            format!(
                "INSERT INTO {s}.notifications
                     (tenant_id, key, readable_key, alert_id, event_type, entity_id, recipient_id, channel)
                 SELECT $1, {key}, 'pre-' || a || '|' || i || '|' || c, {alert_id}, '{EVENT_TYPE}',
                        'pre-' || a, 'user-' || i, c
                 {rows}"
            ),
            format!(
                "INSERT INTO {s}.deliveries
                     (tenant_id, notification_key, alert_id, recipient_id, channel, endpoint_id,
                      status, sent_at)
                 SELECT $1, {key}, {alert_id}, 'user-' || i, c,
                        CASE WHEN c = 'webhook' THEN $2::uuid END, 'sent', now()
                 {rows}"
            ),
            format!(
                "INSERT INTO {s}.inbox_items
                     (tenant_id, recipient_id, notification_key, alert_id, type, entity_id, subject, payload)
                 SELECT $1, 'user-' || i, {key}, {alert_id}, '{EVENT_TYPE}', 'pre-' || a,
                        'Invoice overdue', '{{\"amount\": 42}}'
                 {rows} WHERE c = 'in_app'"
            ),
        ] {
            sqlx::query(&stmt)
                .bind(tenant)
                .bind(endpoint)
                .bind(alerts)
                .execute(&ctx.pool)
                .await
                .with_context(|| format!("pre-filling {s}"))?;
        }
        for table in ["notifications", "deliveries", "inbox_items"] {
            sqlx::query(&format!("VACUUM ANALYZE {s}.{table}"))
                .execute(&ctx.pool)
                .await?;
        }
    }
    sqlx::query("CHECKPOINT").execute(&ctx.pool).await?;
    eprintln!(
        "  ingest: {} arms pre-filled with {} delivery rows each in {:.0} s",
        SCHEMAS.len(),
        alerts * 1_000,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The consent arm's tenant set up through the API as a billing team would:
/// a category holding the event type, a published email template, a tenant
/// default, and for each of the `recipients` users contact data and two
/// preference rows of their own that leave both channels on (so every arm
/// writes the same rows per alert, and the consent arm pays for reading and
/// resolving the rows). The plain-email arm's users get contact data only.
async fn set_up_consent(ctx: &Ctx, recipients: usize) -> anyhow::Result<()> {
    async fn put(
        ctx: &Ctx,
        tenant: i64,
        method: reqwest::Method,
        path: &str,
        body: serde_json::Value,
    ) -> anyhow::Result<()> {
        let resp = ctx
            .http
            .request(method, ctx.server.url(path))
            .bearer_auth(api_key(tenant))
            .json(&body)
            .send()
            .await?;
        anyhow::ensure!(
            resp.status().is_success(),
            "{path} answered {}: {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
        Ok(())
    }
    let t = CONSENT.tenant;
    put(
        ctx,
        t,
        reqwest::Method::PUT,
        "/v1/categories/billing",
        json!({"label": "Billing", "defaults": {"email": "on", "in_app": "on"},
               "event_types": [CONSENT.event_type]}),
    )
    .await?;
    put(
        ctx,
        t,
        reqwest::Method::PUT,
        "/v1/preference-defaults",
        json!({"settings": [{"scope": "category", "key": "billing", "channel": "email", "setting": "on"}]}),
    )
    .await?;
    put(
        ctx,
        t,
        reqwest::Method::PUT,
        &format!("/v1/templates/{}/email?locale=en", CONSENT.event_type),
        json!({
            "subject": "Invoice {{ payload.invoice }} is overdue",
            "sample": EMAIL_PAYLOAD.clone(),
            "html": EMAIL_HTML,
        }),
    )
    .await?;
    for i in 1..=recipients {
        let user = format!("user-{i}");
        for tenant in [CONSENT.tenant, PLAIN_EMAIL.tenant] {
            put(
                ctx,
                tenant,
                reqwest::Method::PUT,
                &format!("/v1/users/{user}"),
                json!({"email": format!("{user}@example.com"), "display_name": format!("User {i}"),
                       "locale": "en-GB", "timezone": "Europe/Berlin"}),
            )
            .await?;
        }
        put(
            ctx,
            t,
            reqwest::Method::PATCH,
            &format!("/v1/users/{user}/preferences"),
            json!({"settings": [
                {"scope": "global", "channel": "webhook", "setting": "off"},
                {"scope": "category", "key": "billing", "channel": "in_app", "setting": "on"},
            ]}),
        )
        .await?;
    }
    Ok(())
}

/// The consent arm's email template: what a billing team's overdue-invoice
/// email holds (variables, a loop, number formatting, the unsubscribe link),
/// rendered per recipient by the drain workload's email phase.
pub const EMAIL_HTML: &str = r#"<html><head><style>p { color: #333; } .amount { font-weight: bold; }</style></head>
<body><p>Hello {{ recipient.display_name }},</p>
<p>Invoice {{ payload.invoice }} of <span class="amount">{{ payload.amount | number }} {{ payload.currency }}</span> is overdue.</p>
<table>{% for line in payload.lines %}<tr><td>{{ line.item }}</td><td>{{ line.amount | number }}</td></tr>{% endfor %}</table>
<p><a href="{{ payload.url }}">Pay now</a></p>
<p><a href="{{ unsubscribe_url }}">Unsubscribe from billing emails</a></p></body></html>"#;

/// The payload the consent arm's alerts (and the template's sample) carry.
pub static EMAIL_PAYLOAD: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(|| {
    json!({
        "invoice": "INV-000042", "amount": 1234.5, "currency": "EUR",
        "url": "https://billing.example.com/invoices/INV-000042",
        "lines": [{"item": "Seats", "amount": 1000}, {"item": "Storage", "amount": 234.5}],
    })
});

/// Pending email rows of the API arms, removed at the end so that a later
/// workload's workers do not find them (no SMTP server in this server's run).
async fn remove_pending_emails(ctx: &Ctx) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM deliveries WHERE tenant_id = ANY($1) AND channel = 'email'")
        .bind(vec![
            tenant_uuid(CONSENT.tenant),
            tenant_uuid(PLAIN_EMAIL.tenant),
        ])
        .execute(&ctx.pool)
        .await?;
    Ok(())
}

async fn count_deliveries(ctx: &Ctx, tenant: i64) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE tenant_id = $1")
            .bind(tenant_uuid(tenant))
            .fetch_one(&ctx.pool)
            .await?,
    )
}

async fn prime(ctx: &Ctx, recipients: usize) -> anyhow::Result<()> {
    for k in 0..ctx.tier.primed_alerts {
        let entity = format!("primed-{recipients}-{k}");
        let resp = ctx
            .http
            .post(ctx.server.url("/v1/alerts"))
            .bearer_auth(api_key(TENANT))
            .header("Idempotency-Key", format!("idem-{entity}"))
            .header("Content-Type", "application/json")
            .body(body(TODAY, &entity, recipients))
            .send()
            .await?;
        anyhow::ensure!(
            resp.status().is_success(),
            "priming alert answered {}: {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    if !ctx
        .route_exists(reqwest::Method::POST, "/v1/alerts")
        .await?
    {
        return Ok(WorkloadResult::skipped(
            "ingest",
            "POST /v1/alerts is not on this branch yet",
        ));
    }
    let mut w = WorkloadResult::new("ingest");
    // One webhook endpoint, the no-op sink's. Outbox workers are off in this
    // server, so ingest is measured alone.
    let endpoint = ctx.sink_endpoint(TENANT).await?;
    let sizes = ctx.tier.ingest_recipients;
    let pgbench = pgbench_script(ctx, "alert_ingest.sql")?;
    let pgbench_before = pgbench_script(ctx, "alert_ingest_v0.sql")?;
    let pgbench_digest_keys = pgbench_script(ctx, "alert_ingest_v1.sql")?;
    fresh_deliveries(ctx).await?;
    prefill(ctx, ctx.tier.ingest_prefill_alerts, endpoint).await?;
    let tenant = tenant_uuid(TENANT).to_string();

    let mut fresh: Vec<Vec<Measure>> = vec![vec![]; sizes.len()];
    let mut baseline: Vec<Vec<Measure>> = vec![vec![]; sizes.len()];
    let mut sql_after: Vec<Vec<Measure>> = vec![vec![]; sizes.len()];
    let mut sql_before: Vec<Vec<Measure>> = vec![vec![]; sizes.len()];
    let mut sql_digest_keys: Vec<Vec<Measure>> = vec![vec![]; sizes.len()];
    let mut sql_0019: Vec<Vec<Measure>> = vec![vec![]; sizes.len()];
    let mut keyed: Vec<Vec<Vec<Measure>>> = vec![vec![vec![]; 3]; sizes.len()];
    let mut consent: Vec<Vec<Measure>> = vec![vec![]; sizes.len()];
    let mut plain_email: Vec<Vec<Measure>> = vec![vec![]; sizes.len()];
    let mut consent_written = vec![0i64; sizes.len()];
    let replay_levels = [0u32, 10, 100];
    let mut written = vec![0i64; sizes.len()];
    for &n in &sizes {
        prime(ctx, n).await?;
    }
    set_up_consent(ctx, sizes.iter().copied().max().unwrap_or(0)).await?;
    for rep in 0..ctx.tier.reps {
        eprintln!("  ingest rep {}/{}", rep + 1, ctx.tier.reps);
        for (si, &n) in sizes.iter().enumerate() {
            // Today's alerts, the same with templates and preferences on,
            // and the same channels without them, in an order that rotates
            // every repetition.
            for arm in 0..3 {
                match (arm + rep) % 3 {
                    0 => {
                        let run_id = format!("fresh-{n}-{rep}");
                        let script = wrk_script(ctx, TODAY, &run_id, n, 0, false, &run_id)?;
                        let before = count_deliveries(ctx, TENANT).await?;
                        fresh[si].push(ctx.wrk(&script).await?);
                        written[si] += count_deliveries(ctx, TENANT).await? - before;
                    }
                    1 => {
                        let run_id = format!("consent-{n}-{rep}");
                        let script = wrk_script(ctx, CONSENT, &run_id, n, 0, false, &run_id)?;
                        let before = count_deliveries(ctx, CONSENT.tenant).await?;
                        consent[si].push(ctx.wrk(&script).await?);
                        consent_written[si] +=
                            count_deliveries(ctx, CONSENT.tenant).await? - before;
                    }
                    _ => {
                        let run_id = format!("email-{n}-{rep}");
                        let script = wrk_script(ctx, PLAIN_EMAIL, &run_id, n, 0, false, &run_id)?;
                        plain_email[si].push(ctx.wrk(&script).await?);
                    }
                }
            }
            let vars = super::vars(&[
                ("nrec", n.to_string()),
                ("tenant", tenant.clone()),
                ("etype", EVENT_TYPE.to_string()),
                ("ep", endpoint.to_string()),
            ]);
            baseline[si].push(ctx.pgbench(&pgbench, &vars).await?);
            // The four arms in an order that rotates every repetition,
            // each on its own tables.
            for arm in 0..4 {
                match (arm + rep) % 4 {
                    0 => sql_before[si].push(
                        ctx.pgbench_in_schema(&pgbench_before, &vars, SCHEMA_BEFORE)
                            .await?,
                    ),
                    1 => sql_digest_keys[si].push(
                        ctx.pgbench_in_schema(&pgbench_digest_keys, &vars, SCHEMA_DIGEST_KEYS)
                            .await?,
                    ),
                    2 => sql_0019[si]
                        .push(ctx.pgbench_in_schema(&pgbench, &vars, SCHEMA_0019).await?),
                    _ => sql_after[si]
                        .push(ctx.pgbench_in_schema(&pgbench, &vars, SCHEMA_AFTER).await?),
                }
            }
            for (li, &pct) in replay_levels.iter().enumerate() {
                let run_id = format!("keyed-{n}-{pct}-{rep}");
                let script = wrk_script(ctx, TODAY, &run_id, n, pct, true, &run_id)?;
                keyed[si][li].push(ctx.wrk(&script).await?);
            }
        }
    }

    let rows_per_alert = |si: usize| (sizes[si] * CHANNELS.len()) as f64;
    let rows = |ms: &[Measure], si: usize| -> Vec<f64> {
        rps(ms).iter().map(|r| r * rows_per_alert(si)).collect()
    };
    let big = sizes.len() - 1;
    let templated: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM deliveries
         WHERE tenant_id = $1 AND channel = 'email' AND template_version_id IS NOT NULL",
    )
    .bind(tenant_uuid(CONSENT.tenant))
    .fetch_one(&ctx.pool)
    .await?;
    anyhow::ensure!(
        templated > 0,
        "the consent arm wrote no email rows with a template version: it measured nothing of templates"
    );
    for (si, &n) in sizes.iter().enumerate() {
        w.ratios.push(Ratio::new(
            &format!("ingest with templates and preferences ÷ today's, {}/alert", n * 2),
            &format!(
                "POST /v1/alerts delivery rows/s, in_app + email, category, template, preference rows ({}/alert)",
                n * 2
            ),
            "today's alerts (in_app + webhook, no category, template or preference rows), same run",
            (si == big).then_some(0.8),
            &rows(&consent[si], si),
            &rows(&fresh[si], si),
        ));
        w.ratios.push(Ratio::new(
            &format!("templates and preferences ÷ the same channels without, {}/alert", n * 2),
            &format!(
                "POST /v1/alerts delivery rows/s, in_app + email with template and preferences ({}/alert)",
                n * 2
            ),
            "in_app + email alerts with no category, template or preference rows, same run",
            // Content and consent may cost the ingest at most 20 %.
            Some(0.8),
            &rows(&consent[si], si),
            &rows(&plain_email[si], si),
        ));
    }
    w.ratios.push(Ratio::new(
        "alert ingest efficiency",
        &format!("POST /v1/alerts delivery rows/s ({}/alert)", sizes[1] * 2),
        "pgbench of the same statements",
        Some(0.6),
        &rows(&fresh[big], big),
        &rows(&baseline[big], big),
    ));
    w.ratios.push(Ratio::new(
        "replay speed-up",
        &format!("100%-replay rows/s ({}/alert)", sizes[1] * 2),
        "0%-replay rows/s",
        Some(1.5),
        &rows(&keyed[big][2], big),
        &rows(&keyed[big][0], big),
    ));
    for (si, &n) in sizes.iter().enumerate() {
        w.ratios.push(Ratio::new(
            &format!("ingest SQL after ÷ before the lean outbox, {}/alert", n * 2),
            &format!(
                "pgbench rows/s of alert_ingest.sql, lean deliveries, natural keys ({}/alert)",
                n * 2
            ),
            "alert_ingest_v0.sql on the deliveries of before 0015 and the keys of before 0019, same run",
            None,
            &rows(&sql_after[si], si),
            &rows(&sql_before[si], si),
        ));
    }
    for (si, &n) in sizes.iter().enumerate() {
        w.ratios.push(Ratio::new(
            &format!("ingest SQL natural keys ÷ digest keys (migration 0019), {}/alert", n * 2),
            &format!(
                "pgbench rows/s of alert_ingest.sql, natural keys ({}/alert)",
                n * 2
            ),
            "alert_ingest_v1.sql on notifications and inbox items keyed by the digest (before 0019), same run",
            None,
            &rows(&sql_after[si], si),
            &rows(&sql_digest_keys[si], si),
        ));
    }
    for (si, &n) in sizes.iter().enumerate() {
        w.ratios.push(Ratio::new(
            &format!("ingest SQL after ÷ before migration 0020, {}/alert", n * 2),
            &format!(
                "pgbench rows/s of alert_ingest.sql, tables as migrated ({}/alert)",
                n * 2
            ),
            "alert_ingest.sql on the tables of migration 0019 (foreign keys to tenants, notifications by alert), same run",
            None,
            &rows(&sql_after[si], si),
            &rows(&sql_0019[si], si),
        ));
    }
    w.aims.push(Aim::at_least(
        &format!(
            "alert delivery rows/s through the API (fresh, {}/alert)",
            sizes[1] * 2
        ),
        Spread::of(&rows(&fresh[big], big)).median,
        "rows/s",
        50_000.0,
    ));

    let mut t = Table::new(
        "Alert ingest (closed loop, wrk): delivery rows/s = alerts/s × deliveries per alert",
        &[
            "deliveries/alert",
            "Idempotency-Key",
            "replays",
            "alerts/s",
            "delivery rows/s",
            "p50 ms",
            "p99 ms",
            "pgbench rows/s",
            "ratio",
        ],
    );
    for (si, &n) in sizes.iter().enumerate() {
        let ratio: Vec<f64> = rps(&fresh[si])
            .iter()
            .zip(rps(&baseline[si]))
            .map(|(a, b)| a / b)
            .collect();
        let p = |ms: &[Measure], f: fn(&Measure) -> Option<f64>| {
            fmt_ms(Some(
                Spread::of(&ms.iter().filter_map(f).collect::<Vec<_>>()).median,
            ))
        };
        t.row(vec![
            format!("{}", n * 2),
            "no".into(),
            "0%".into(),
            Spread::of(&rps(&fresh[si])).show(0),
            Spread::of(&rows(&fresh[si], si)).show(0),
            p(&fresh[si], |m| m.p50_ms),
            p(&fresh[si], |m| m.p99_ms),
            Spread::of(&rows(&baseline[si], si)).show(0),
            Spread::of(&ratio).show(2),
        ]);
        for (li, &pct) in replay_levels.iter().enumerate() {
            t.row(vec![
                format!("{}", n * 2),
                "yes".into(),
                format!("{pct}%"),
                Spread::of(&rps(&keyed[si][li])).show(0),
                Spread::of(&rows(&keyed[si][li], si)).show(0),
                p(&keyed[si][li], |m| m.p50_ms),
                p(&keyed[si][li], |m| m.p99_ms),
                "—".into(),
                "—".into(),
            ]);
        }
    }
    w.tables.push(t);
    let mut t = Table::new(
        "The write path's SQL before the lean outbox (0015), before migrations 0019 and 0020 and now (pgbench, pre-filled tables, same run): delivery rows/s",
        &[
            "deliveries/alert",
            "before 15 (alert_ingest_v0.sql)",
            "before 0019 (alert_ingest_v1.sql)",
            "before 0020 (alert_ingest.sql)",
            "now (alert_ingest.sql)",
            "now ÷ before 15",
            "now ÷ before 0019",
            "now ÷ before 0020",
        ],
    );
    for (si, &n) in sizes.iter().enumerate() {
        let ratio = |before: &[Measure]| -> Vec<f64> {
            rps(&sql_after[si])
                .iter()
                .zip(rps(before))
                .map(|(a, b)| a / b)
                .collect()
        };
        t.row(vec![
            format!("{}", n * 2),
            Spread::of(&rows(&sql_before[si], si)).show(0),
            Spread::of(&rows(&sql_digest_keys[si], si)).show(0),
            Spread::of(&rows(&sql_0019[si], si)).show(0),
            Spread::of(&rows(&sql_after[si], si)).show(0),
            Spread::of(&ratio(&sql_before[si])).show(2),
            Spread::of(&ratio(&sql_digest_keys[si])).show(2),
            Spread::of(&ratio(&sql_0019[si])).show(2),
        ]);
    }
    w.tables.push(t);
    w.notes.push(
        "Before/after of the SQL: pgbench of alert_ingest_v0.sql (the statements before the lean outbox) \
         on a `deliveries` with the indexes of migrations 0005–0013 and notifications and \
         inbox items keyed by the digest (before migration 0019), and of alert_ingest.sql on \
         copies of the migrated tables (schemas ingest_before, ingest_after, reached through \
         search_path); alerts are the shared public table. Migration 0019's own before: \
         alert_ingest_v1.sql (main at ec3865b) on today's deliveries with notifications and inbox \
         items keyed by the digest (schema ingest_digest_keys); the arms rotate their order \
         every repetition. Runs before 0019 shared notifications and \
         inbox items between the arms. The service itself runs only the new statements, so its \
         rows/s has no same-run before."
            .into(),
    );
    w.notes.push(format!(
        "Migration 0020's before: alert_ingest.sql on the tables as 0019 left them (schema \
         ingest_0019: foreign keys to public.tenants on notifications, deliveries and inbox items, \
         and notifications_by_alert); the other arms' copies never had foreign keys. Every arm's \
         tables were pre-filled alike before the first measurement: {} alerts of 500 recipients × \
         in_app + webhook ({} notifications, {} deliveries, {} inbox items per arm, all sent), \
         then VACUUM ANALYZE and a CHECKPOINT. Runs before this one started from empty tables.",
        ctx.tier.ingest_prefill_alerts,
        ctx.tier.ingest_prefill_alerts * 1_000,
        ctx.tier.ingest_prefill_alerts * 1_000,
        ctx.tier.ingest_prefill_alerts * 500,
    ));
    w.notes.push(
        "Baseline: pgbench runs the server's statements (bench/sql/alert_ingest.sql) in one \
         transaction, plus one generator SELECT per transaction that makes unique keys and the \
         column arrays (the service derives keys in Rust instead)."
            .into(),
    );
    w.notes.push(format!(
        "Rows written by the fresh runs (counted in the database): {} for {}/alert, {} for {}/alert.",
        written[0],
        sizes[0] * 2,
        written[big],
        sizes[big] * 2
    ));
    w.figure(
        "sizes",
        sizes
            .iter()
            .enumerate()
            .map(|(si, &n)| {
                json!({
                    "deliveries_per_alert": n * 2,
                    "fresh_no_key": fresh[si],
                    "pgbench": baseline[si],
                    "pgbench_sql_after_fresh": sql_after[si],
                    "pgbench_sql_before_fresh": sql_before[si],
                    "pgbench_sql_digest_keys_fresh": sql_digest_keys[si],
                    "pgbench_sql_0019_prefilled": sql_0019[si],
                    "keyed_replay_0": keyed[si][0],
                    "keyed_replay_10": keyed[si][1],
                    "keyed_replay_100": keyed[si][2],
                    "deliveries_written_fresh": written[si],
                    "consent_fresh": consent[si],
                    "plain_email_fresh": plain_email[si],
                    "deliveries_written_consent": consent_written[si],
                })
            })
            .collect::<Vec<_>>(),
    );
    w.notes.push(format!(
        "Content and consent: the consent arm's alerts are in_app + email of an event type in \
         a category with a published email template (tenant 3); each of its users has contact \
         data and two preference rows of their own, and the tenant has one default row, all \
         resolving to on, so every arm writes the same rows per alert. The plain-email arm \
         (tenant 4) sends the same channels and payload with no category, template or \
         preference rows. Rows the consent arm wrote: {} for {}/alert, {} for {}/alert; \
         email rows recording a template version: {templated}. Rendering happens at send: \
         its cost is in the drain workload.",
        consent_written[0],
        sizes[0] * 2,
        consent_written[big],
        sizes[big] * 2
    ));
    let mut t = Table::new(
        "Ingest with content and consent on (closed loop, wrk, same run): delivery rows/s",
        &[
            "deliveries/alert",
            "today's (in_app + webhook)",
            "in_app + email, plain",
            "in_app + email, template + preferences",
            "consent ÷ today's",
            "consent ÷ plain email",
        ],
    );
    for (si, &n) in sizes.iter().enumerate() {
        let per_rep = |a: &[Measure], b: &[Measure]| -> Vec<f64> {
            rps(a).iter().zip(rps(b)).map(|(x, y)| x / y).collect()
        };
        t.row(vec![
            format!("{}", n * 2),
            Spread::of(&rows(&fresh[si], si)).show(0),
            Spread::of(&rows(&plain_email[si], si)).show(0),
            Spread::of(&rows(&consent[si], si)).show(0),
            Spread::of(&per_rep(&consent[si], &fresh[si])).show(2),
            Spread::of(&per_rep(&consent[si], &plain_email[si])).show(2),
        ]);
    }
    w.tables.push(t);
    remove_pending_emails(ctx).await?;
    sqlx::query(&format!(
        "DROP SCHEMA IF EXISTS {} CASCADE",
        SCHEMAS.join(", ")
    ))
    .execute(&ctx.pool)
    .await?;
    if let Some(bin) = &ctx.before_bin {
        writes_before_and_after(ctx, bin, &mut w).await?;
    }
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

/// `POST /v1/events` and fresh `POST /v1/alerts` (the smaller size, no
/// Idempotency-Key) on this build's server and on the before build's `bin`,
/// alternated: ratios "… : this build ÷ BENCH_BEFORE_BIN".
async fn writes_before_and_after(
    ctx: &Ctx,
    bin: &Path,
    w: &mut WorkloadResult,
) -> anyhow::Result<()> {
    let team: String = sqlx::query_scalar(
        "SELECT team_id FROM memberships WHERE tenant_id = $1
         GROUP BY team_id ORDER BY count(*) DESC, team_id LIMIT 1",
    )
    .bind(tenant_uuid(TENANT))
    .fetch_one(&ctx.pool)
    .await
    .context("picking a team of the ingest tenant")?;
    let events = ctx.work_dir.join("ingest-events.jsonl");
    std::fs::write(
        &events,
        json!({"team_id": team, "type": "comment.created", "actor_id": "user-1",
               "object_id": "doc-1", "payload": {"text": "before/after"}})
        .to_string()
            + "\n",
    )?;
    let recipients = ctx.tier.ingest_recipients[0];
    let names = [
        "POST /v1/events".to_string(),
        format!("POST /v1/alerts, {}/alert", recipients * CHANNELS.len()),
    ];
    let mut runs = 0;
    let pairs = before_and_after(ctx, bin, "ingest", &names, |i, base_url| {
        runs += 1;
        // Every alert run posts entities of its own: all of them fresh.
        let run_id = format!("before-after-{runs}");
        let events = events.clone();
        async move {
            if i == 0 {
                let mut req =
                    HttpRequest::get(format!("{base_url}/v1/events")).bearer(&api_key(TENANT));
                req.method = "POST";
                req.body_lines = Some(events);
                ctx.max(&req).await
            } else {
                let script = wrk_script(ctx, TODAY, &run_id, recipients, 0, false, &run_id)?;
                ctx.tools
                    .wrk(&base_url, &script, ctx.tier.connections, ctx.tier.measure)
                    .await
            }
        }
    })
    .await?;
    let mut t = Table::new(
        "The write routes on this build beside the before build (BENCH_BEFORE_BIN), same database, alternated",
        &[
            "request",
            "this build req/s",
            "before build req/s",
            "this build ÷ before",
            "errors (this, before)",
        ],
    );
    for pair in &pairs {
        let ratio = Ratio::new(
            &format!("{}: this build ÷ BENCH_BEFORE_BIN", pair.name),
            &format!("{} req/s, this build", pair.name),
            &format!("{} req/s, the before build (same run)", pair.name),
            None,
            &rps(&pair.after),
            &rps(&pair.before),
        );
        let errors = |ms: &[Measure]| ms.iter().map(|m| m.errors).sum::<f64>();
        t.row(vec![
            pair.name.clone(),
            Spread::of(&rps(&pair.after)).show(0),
            Spread::of(&rps(&pair.before)).show(0),
            ratio.ratio.show(2),
            format!("{}, {}", errors(&pair.after), errors(&pair.before)),
        ]);
        w.ratios.push(ratio);
    }
    w.tables.push(t);
    w.notes.push(format!(
        "Write routes before/after: POST /v1/events to {team} of the ingest tenant (oha, one \
         body), then fresh POST /v1/alerts with {} deliveries each (wrk, unique entities, no \
         Idempotency-Key), on each server in turn, alternating which goes first.",
        recipients * CHANNELS.len()
    ));
    w.figure("before_bin", bin.display().to_string());
    w.figure(
        "before_after",
        pairs
            .iter()
            .map(|p| json!({"name": p.name, "after": p.after, "before": p.before}))
            .collect::<Vec<_>>(),
    );
    Ok(())
}
