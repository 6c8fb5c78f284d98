//! Workload feed: GET /v1/feed (first page with limit 20 and 50, a page
//! 100 deep) and GET /v1/feed/counts, each against `pgbench -M prepared` of the
//! statement the server runs for it (bench/sql/feed_page.sql, feed_counts.sql,
//! kept identical to the server's by a test) with the same parameters, and the
//! first page against GET /healthz (the framework's ceiling). Interleaved
//! A B C per repetition; then open-loop latency at half of each maximum, and
//! round trips per request from pg_stat_statements.
//!
//! The reader is one user, the same for the service and pgbench: in tenant 0, a
//! member of the hottest team (team-0, the big one) with the most memberships
//! (ties: the smallest id) — the most expensive kind of feed in the data set.
//! A second reader, [`WIDE_READER`], is in `wide_reader_teams` teams
//! (1,000 at tier M) and reads its first page the same way.
//!
//! Reference statements, pgbench only, in the same repetitions: the
//! lower bound of the first page and counts (bench/sql/feed_lower_bound.sql,
//! handed the page's ids from the service's answer), and the feed and counts
//! statements as they were before the feed rewrite (feed_page_v0.sql,
//! feed_counts_v0.sql), before incremental counts (feed_page_v1.sql,
//! feed_counts_v1.sql) and before a reader whose sources fit the page had
//! each source scanned once (feed_page_v2.sql), so every run carries its own
//! before/after of the SQL; and before a first page handed a counts base
//! counted from its own page (feed_page_v3.sql, feed_page_many_v1.sql),
//! before the counts handed a base counted from the entries since it
//! (feed_counts_v2.sql), before the wide reader's first page scanned the
//! tenant's newest events instead of probing every team
//! (feed_page_many_v2.sql; ratio "wide reader's first page SQL ÷ before the
//! tenant scan"), and before a first page whose sources fit it scanned the
//! tenant first and the counts' small CTEs were folded into one row
//! (feed_page_v4.sql). The 20-team reader's first page runs feed_page.sql
//! (sources fit the page), the wide reader's feed_page_many.sql, the counts
//! feed_counts.sql; all with the counts carried over, as every request here
//! but the first. feed_page_walk.sql and feed_counts_walk.sql are the
//! statements a first page and the counts without a usable base run (they
//! walk).
//!
//! **What pgbench runs is what a request runs.** The server carries each
//! user's badge walk over from the user's last statement on the instance
//! (`store::feed::CountsBase`, kept in its memory). Here nothing writes and
//! the same user reads again and again, so after the first request every
//! request passes the base its predecessor left: pgbench passes that same
//! base (read once through the server's own store function). The statement
//! a request runs when it has no usable base (the first read on an
//! instance, or after a mark, an item read, a membership change or a purge)
//! is measured too, as a reference ("counts not carried over").
//!
//! With `--tidings-before-bin` (scripts/bench: `BENCH_BEFORE_BIN`), another
//! build of `tidings` serves beside the measured one on the same database,
//! and after the repetitions above the first page (limit 20) and the counts
//! are measured on both, [`super::BEFORE_AFTER_REPS`] times, alternating which
//! server goes first: the run carries its own before/after of the service
//! path (the statements are the same when only the service changed).

use std::time::Instant;

use anyhow::Context;
use serde_json::json;
use tidings_core::Position;
use uuid::Uuid;

use tidings_server::store::{
    feed::{self as feed_store, CountsBase},
    teams::Membership,
};

use super::{before_and_after, fmt_ms, pg_array, rps, user_token, Ctx};
use crate::{
    loadgen::{HttpRequest, Measure},
    pg,
    report::{Aim, Ratio, Table, WorkloadResult},
    seed::{tenant_uuid, WIDE_READER},
    stats::Spread,
};

struct Variant {
    name: String,
    path: String,
    token: String,
    script: &'static str,
    vars: Vec<(String, String)>,
}

/// A statement measured by pgbench alone, against the variant it is compared with.
struct Reference {
    name: &'static str,
    script: &'static str,
    vars: Vec<(String, String)>,
    /// Index of the variant whose pgbench figure it is compared with.
    against: usize,
}

pub struct Reader {
    pub tenant: Uuid,
    pub user_id: String,
    pub teams: Vec<String>,
    pub joined_tx: Vec<i64>,
    pub joined_id: Vec<i64>,
    /// The tenant's horizon (the statements' horizon parameter): the
    /// snapshot's xmax when the reader was picked, after seeding; nothing
    /// writes after.
    pub horizon: i64,
    /// The counts the server carries over between this reader's requests:
    /// what a statement with no base leaves (nothing changes in between).
    pub counts_base: Vec<i64>,
}

pub async fn pick_reader(ctx: &Ctx) -> anyhow::Result<Reader> {
    let tenant = tenant_uuid(0);
    let user_id: String = sqlx::query_scalar(
        "SELECT m.user_id FROM memberships m
         WHERE m.tenant_id = $1 AND m.user_id <> $2
           AND EXISTS (SELECT 1 FROM memberships b
                       WHERE b.tenant_id = $1 AND b.team_id = 'team-0' AND b.user_id = m.user_id)
         GROUP BY m.user_id ORDER BY count(*) DESC, m.user_id LIMIT 1",
    )
    .bind(tenant)
    .bind(WIDE_READER)
    .fetch_one(&ctx.pool)
    .await
    .context("picking the feed reader")?;
    reader_of(ctx, &user_id).await
}

async fn reader_of(ctx: &Ctx, user_id: &str) -> anyhow::Result<Reader> {
    let tenant = tenant_uuid(0);
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT team_id, joined_tx, joined_id FROM memberships
         WHERE tenant_id = $1 AND user_id = $2 ORDER BY team_id",
    )
    .bind(tenant)
    .bind(user_id)
    .fetch_all(&ctx.pool)
    .await?;
    let horizon: i64 =
        sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
            .fetch_one(&ctx.pool)
            .await?;
    anyhow::ensure!(!rows.is_empty(), "{user_id} is in no team");
    let memberships: Vec<Membership> = rows
        .iter()
        .map(|(team_id, tx, id)| Membership {
            team_id: team_id.clone(),
            joined: Position::new(*tx, *id),
        })
        .collect();
    let (_, walk) =
        feed_store::read_status(&ctx.pool, tenant, user_id, &memberships, horizon, None).await?;
    Ok(Reader {
        tenant,
        user_id: user_id.to_string(),
        teams: rows.iter().map(|r| r.0.clone()).collect(),
        joined_tx: rows.iter().map(|r| r.1).collect(),
        joined_id: rows.iter().map(|r| r.2).collect(),
        horizon,
        counts_base: CountsBase::param(Some(&walk.next)),
    })
}

/// Whether a statement gets the counts the server would carry over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carry {
    /// As every request but the first in this workload: the last statement's base.
    Over,
    /// No base: the walks start at the floors (first read, after a mark…).
    Nothing,
    /// A statement from before incremental counts, which has no such parameter.
    Unknown,
}

impl Reader {
    /// pgbench variables of the feed statements (see server/src/store/feed.rs:
    /// $1 tenant, $2 user, $3–$5 teams, $6 badge cap + 1, $7/$8 after, $9/$10
    /// before, $11 limit + 1; then the horizon and the carried-over counts:
    /// $12/$13 of a page, $7/$8 of counts).
    fn vars(
        &self,
        before: Option<Position>,
        limit: Option<u32>,
        carry: Carry,
    ) -> Vec<(String, String)> {
        let before = before.unwrap_or(Position::new(i64::MAX, i64::MAX));
        let mut v = vec![
            ("p1".to_string(), self.tenant.to_string()),
            ("p2".to_string(), self.user_id.clone()),
            ("p3".to_string(), pg_array(&self.teams)),
            ("p4".to_string(), pg_array(&self.joined_tx)),
            ("p5".to_string(), pg_array(&self.joined_id)),
            (
                "p6".to_string(),
                (i64::from(tidings_core::BADGE_CAP) + 1).to_string(),
            ),
        ];
        if let Some(limit) = limit {
            v.extend([
                ("p7".to_string(), "0".to_string()),
                ("p8".to_string(), "0".to_string()),
                ("p9".to_string(), before.tx.to_string()),
                ("p10".to_string(), before.id.to_string()),
                ("p11".to_string(), (i64::from(limit) + 1).to_string()),
                ("p12".to_string(), self.horizon.to_string()),
            ]);
        } else {
            v.push(("p7".to_string(), self.horizon.to_string()));
        }
        let base = match carry {
            Carry::Over => pg_array(&self.counts_base),
            Carry::Nothing => "{}".to_string(),
            Carry::Unknown => return v,
        };
        let at = if limit.is_some() { "p13" } else { "p8" };
        v.push((at.to_string(), base));
        v
    }

    /// pgbench variables of bench/sql/feed_lower_bound.sql: $1 tenant, $2 teams,
    /// $3 badge cap + 1, $4 the page's item ids.
    fn lower_bound_vars(&self, page_ids: &[i64]) -> Vec<(String, String)> {
        vec![
            ("p1".to_string(), self.tenant.to_string()),
            ("p2".to_string(), pg_array(&self.teams)),
            (
                "p3".to_string(),
                (i64::from(tidings_core::BADGE_CAP) + 1).to_string(),
            ),
            ("p4".to_string(), pg_array(page_ids)),
        ]
    }
}

/// The item ids of the reader's first page, as the service answers them.
async fn first_page_ids(ctx: &Ctx, token: &str, limit: u32) -> anyhow::Result<Vec<i64>> {
    let page: serde_json::Value = ctx
        .http
        .get(format!("{}?limit={limit}", ctx.server.url("/v1/feed")))
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    page["items"]
        .as_array()
        .context("a feed page has items")?
        .iter()
        .map(|i| i["id"].as_i64().context("a feed item has an id"))
        .collect()
}

async fn walk_pages(
    ctx: &Ctx,
    token: &str,
    limit: u32,
    pages: usize,
) -> anyhow::Result<Option<Position>> {
    let mut before: Option<String> = None;
    for _ in 0..pages {
        let mut url = format!("{}?limit={limit}", ctx.server.url("/v1/feed"));
        if let Some(b) = &before {
            url.push_str(&format!("&before={b}"));
        }
        let page: serde_json::Value = ctx
            .http
            .get(&url)
            .bearer_auth(token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        match page["next_before"].as_str() {
            Some(next) => before = Some(next.to_string()),
            None => return Ok(None),
        }
    }
    Ok(before.map(|b| Position::from_cursor(&b)).transpose()?)
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    if !ctx.seeded.has_feed_tables
        || !ctx
            .route_exists(reqwest::Method::GET, "/v1/feed/counts")
            .await?
    {
        return Ok(WorkloadResult::skipped(
            "feed",
            "GET /v1/feed is not on this branch yet",
        ));
    }
    let mut w = WorkloadResult::new("feed");
    let reader = pick_reader(ctx).await?;
    let token = user_token(0, &reader.user_id)?;
    let wide = reader_of(ctx, WIDE_READER).await?;
    let wide_token = user_token(0, WIDE_READER)?;
    let page_ids = first_page_ids(ctx, &token, 20).await?;
    let deep_pages = if ctx.tier.events >= 1_000_000 { 99 } else { 20 };
    let deep = walk_pages(ctx, &token, 20, deep_pages)
        .await?
        .context("the reader's feed is shorter than the deep page")?;
    let feed_url = ctx.server.url("/v1/feed");
    let variants = [
        Variant {
            name: "first page, limit 20".into(),
            path: format!("{feed_url}?limit=20"),
            token: token.clone(),
            script: "feed_page",
            vars: reader.vars(None, Some(20), Carry::Over),
        },
        Variant {
            name: "first page, limit 50".into(),
            path: format!("{feed_url}?limit=50"),
            token: token.clone(),
            script: "feed_page",
            vars: reader.vars(None, Some(50), Carry::Over),
        },
        Variant {
            name: format_deep(deep_pages).into(),
            path: format!("{feed_url}?limit=20&before={}", deep.to_cursor()),
            token: token.clone(),
            script: "feed_page_before",
            vars: reader.vars(Some(deep), Some(20), Carry::Over),
        },
        Variant {
            name: "counts".into(),
            path: ctx.server.url("/v1/feed/counts"),
            token: token.clone(),
            script: "feed_counts",
            vars: reader.vars(None, None, Carry::Over),
        },
        Variant {
            name: format!("{} teams: first page, limit 20", wide.teams.len()),
            path: format!("{feed_url}?limit=20"),
            token: wide_token.clone(),
            script: "feed_page_many",
            vars: wide.vars(None, Some(20), Carry::Over),
        },
    ];
    const FIRST: usize = 0;
    const COUNTS: usize = 3;
    const WIDE: usize = 4;
    let references = [
        Reference {
            name: "lower bound of the first page and counts",
            script: "feed_lower_bound",
            vars: reader.lower_bound_vars(&page_ids),
            against: FIRST,
        },
        Reference {
            name: "first page SQL, counts not carried over",
            script: "feed_page_walk",
            vars: reader.vars(None, Some(20), Carry::Nothing),
            against: FIRST,
        },
        Reference {
            name: "first page SQL before the tenant scan on pages whose sources fit them and the counts' check in one row",
            script: "feed_page_v4",
            vars: reader.vars(None, Some(20), Carry::Over),
            against: FIRST,
        },
        Reference {
            name: "first page SQL before counting from the page (badge walks in every statement)",
            script: "feed_page_v3",
            vars: reader.vars(None, Some(20), Carry::Over),
            against: FIRST,
        },
        Reference {
            name: "wide reader's first page SQL before counting from the page",
            script: "feed_page_many_v1",
            vars: wide.vars(None, Some(20), Carry::Over),
            against: WIDE,
        },
        Reference {
            name: "wide reader's first page SQL before the tenant scan (every team probed)",
            script: "feed_page_many_v2",
            vars: wide.vars(None, Some(20), Carry::Over),
            against: WIDE,
        },
        Reference {
            name: "counts SQL, counts not carried over",
            script: "feed_counts_walk",
            vars: reader.vars(None, None, Carry::Nothing),
            against: COUNTS,
        },
        Reference {
            name: "counts SQL before counting from the entries since the base (badge walks in every statement)",
            script: "feed_counts_v2",
            vars: reader.vars(None, None, Carry::Over),
            against: COUNTS,
        },
        Reference {
            name: "first page SQL before single scans (tops probed, then scanned)",
            script: "feed_page_v2",
            vars: reader.vars(None, Some(20), Carry::Over),
            against: FIRST,
        },
        Reference {
            name: "first page SQL before incremental counts",
            script: "feed_page_v1",
            vars: reader.vars(None, Some(20), Carry::Unknown),
            against: FIRST,
        },
        Reference {
            name: "counts SQL before incremental counts",
            script: "feed_counts_v1",
            vars: reader.vars(None, None, Carry::Unknown),
            against: COUNTS,
        },
        Reference {
            name: "first page SQL before the feed rewrite",
            script: "feed_page_v0",
            vars: reader.vars(None, Some(20), Carry::Unknown),
            against: FIRST,
        },
        Reference {
            name: "counts SQL before the feed rewrite",
            script: "feed_counts_v0",
            vars: reader.vars(None, None, Carry::Unknown),
            against: COUNTS,
        },
        Reference {
            name: "wide reader's first page SQL before the feed rewrite",
            script: "feed_page_v0",
            vars: wide.vars(None, Some(20), Carry::Unknown),
            against: WIDE,
        },
    ];
    const LOWER_BOUND: usize = 0;
    const FIRST_NOT_CARRIED: usize = 1;
    let wide_before_scan = references
        .iter()
        .position(|r| r.script == "feed_page_many_v2")
        .expect("the wide reader's before arm");
    let healthz = HttpRequest::get(ctx.server.url("/healthz"));

    let mut service: Vec<Vec<Measure>> = vec![vec![]; variants.len()];
    let mut baseline: Vec<Vec<Measure>> = vec![vec![]; variants.len()];
    let mut statics = vec![];
    let mut round_trips = vec![0.0; variants.len()];
    let mut membership_loads = vec![0.0; variants.len()];
    let mut statements = vec![];
    let mut referenced: Vec<Vec<Measure>> = vec![vec![]; references.len()];
    for rep in 0..ctx.tier.reps {
        eprintln!("  feed rep {}/{}", rep + 1, ctx.tier.reps);
        for (i, v) in variants.iter().enumerate() {
            let req = HttpRequest::get(&v.path).bearer(&v.token);
            let script = ctx.pgbench_script(v.script, &[], &[])?;
            if rep == 0 {
                pg::reset_statements(&ctx.pool).await?;
            }
            let m = ctx.max(&req).await?;
            if rep == 0 {
                let (trips, stmts) = pg::round_trips(&ctx.pool, m.requests).await?;
                round_trips[i] = trips;
                // `+ 0.0`: an empty f64 sum is -0.0, which would print as "-0.000".
                membership_loads[i] = stmts
                    .iter()
                    .filter(|s| s.query.contains("FROM memberships"))
                    .map(|s| s.calls as f64)
                    .sum::<f64>()
                    / m.requests.max(1.0)
                    + 0.0;
                statements.push(json!({"variant": v.name, "statements": stmts}));
            }
            service[i].push(m);
            baseline[i].push(ctx.pgbench(&script, &v.vars).await?);
        }
        for (i, r) in references.iter().enumerate() {
            let script = ctx.pgbench_script(r.script, &[], &[])?;
            referenced[i].push(ctx.pgbench(&script, &r.vars).await?);
        }
        statics.push(ctx.max(&healthz).await?);
    }

    // The before build's first page and counts beside this build's.
    let before_after = match &ctx.before_bin {
        Some(bin) => {
            let pairs = [&variants[FIRST], &variants[COUNTS]];
            let names: Vec<String> = pairs.iter().map(|v| v.name.clone()).collect();
            let main_base = ctx.server.url("");
            let measured = before_and_after(ctx, bin, "feed", &names, |i, base_url| {
                let v = pairs[i];
                let request = v
                    .path
                    .strip_prefix(&main_base)
                    .context("a variant's URL is on the main server")
                    .map(|path| HttpRequest::get(format!("{base_url}{path}")).bearer(&v.token));
                async move { ctx.max(&request?).await }
            })
            .await?;
            Some((bin, measured))
        }
        None => None,
    };

    let mut latency = vec![];
    for (i, v) in variants.iter().enumerate() {
        let req = HttpRequest::get(&v.path).bearer(&v.token);
        let half = Spread::of(&rps(&service[i])).median / 2.0;
        latency.push((half, ctx.at_rate(&req, half).await?));
    }

    w.ratios.push(Ratio::new(
        "feed service overhead",
        "GET /v1/feed?limit=20 req/s",
        "pgbench of the feed SQL",
        Some(0.5),
        &rps(&service[0]),
        &rps(&baseline[0]),
    ));
    w.ratios.push(Ratio::new(
        "framework ceiling",
        "GET /v1/feed?limit=20 req/s",
        "GET /healthz req/s",
        None,
        &rps(&service[0]),
        &rps(&statics),
    ));
    w.ratios.push(Ratio::new(
        "feed SQL ÷ its lower bound",
        "pgbench of the first page SQL",
        "pgbench of the lower bound (feed_lower_bound.sql)",
        Some(0.5),
        &rps(&baseline[FIRST]),
        &rps(&referenced[LOWER_BOUND]),
    ));
    w.ratios.push(Ratio::new(
        "feed SQL with counts not carried over ÷ its lower bound",
        "pgbench of the first page SQL without a counts base (a request's first read, or after a mark)",
        "pgbench of the lower bound (feed_lower_bound.sql)",
        None,
        &rps(&referenced[FIRST_NOT_CARRIED]),
        &rps(&referenced[LOWER_BOUND]),
    ));
    w.ratios.push(Ratio::new(
        "wide reader's first page SQL ÷ before the tenant scan",
        "pgbench of the wide reader's first page SQL (feed_page_many.sql)",
        "pgbench of the same page before the tenant scan (feed_page_many_v2.sql)",
        None,
        &rps(&baseline[WIDE]),
        &rps(&referenced[wide_before_scan]),
    ));
    w.ratios.push(Ratio::new(
        "counts service overhead",
        "GET /v1/feed/counts req/s",
        "pgbench of the counts SQL",
        None,
        &rps(&service[COUNTS]),
        &rps(&baseline[COUNTS]),
    ));
    if let Some((bin, pairs)) = &before_after {
        let mut t = Table::new(
            "This build beside the before build (BENCH_BEFORE_BIN), same database, alternated",
            &[
                "request",
                "this build req/s",
                "before build req/s",
                "this build ÷ before",
            ],
        );
        for (name, pair) in [("feed first page", &pairs[0]), ("counts", &pairs[1])] {
            let ratio = Ratio::new(
                &format!("{name}: this build ÷ BENCH_BEFORE_BIN"),
                &format!("{name} req/s, this build"),
                &format!("{name} req/s, the before build (same run)"),
                None,
                &rps(&pair.after),
                &rps(&pair.before),
            );
            t.row(vec![
                name.to_string(),
                Spread::of(&rps(&pair.after)).show(0),
                Spread::of(&rps(&pair.before)).show(0),
                ratio.ratio.show(2),
            ]);
            w.ratios.push(ratio);
        }
        w.tables.push(t);
        w.figure("before_bin", bin.display().to_string());
        w.figure(
            "before_after",
            pairs
                .iter()
                .map(|p| json!({"name": p.name, "after": p.after, "before": p.before}))
                .collect::<Vec<_>>(),
        );
    }
    w.aims.push(Aim::at_least(
        "feed first page (limit 20) req/s",
        Spread::of(&rps(&service[FIRST])).median,
        "req/s",
        1500.0,
    ));
    if let Some(p99) = latency[FIRST].1.p99_ms {
        w.aims.push(Aim::below(
            "feed first page p99 at half the maximum rate",
            p99,
            "ms",
            10.0,
        ));
    }
    w.aims.push(Aim::at_least(
        "counts req/s",
        Spread::of(&rps(&service[COUNTS])).median,
        "req/s",
        2500.0,
    ));
    if let Some(p99) = latency[WIDE].1.p99_ms {
        w.aims.push(Aim::below(
            &format!(
                "first page p99 of a reader in {} teams at half its maximum rate",
                wide.teams.len()
            ),
            p99,
            "ms",
            20.0,
        ));
    }

    let mut t = Table::new(
        "Feed read: maximum (closed loop), pgbench of the same SQL, latency at 50% of the maximum (open loop)",
        &[
            "request",
            "service req/s",
            "pgbench tps",
            "ratio",
            "rate",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "DB round trips/req",
            "membership loads/req",
        ],
    );
    for (i, v) in variants.iter().enumerate() {
        let ratio: Vec<f64> = rps(&service[i])
            .iter()
            .zip(rps(&baseline[i]))
            .map(|(a, b)| a / b)
            .collect();
        t.row(vec![
            v.name.to_string(),
            Spread::of(&rps(&service[i])).show(0),
            Spread::of(&rps(&baseline[i])).show(0),
            Spread::of(&ratio).show(2),
            format!("{:.0}", latency[i].0),
            fmt_ms(latency[i].1.p50_ms),
            fmt_ms(latency[i].1.p99_ms),
            fmt_ms(latency[i].1.p999_ms),
            format!("{:.2}", round_trips[i]),
            format!("{:.3}", membership_loads[i]),
        ]);
    }
    w.tables.push(t);

    let mut t = Table::new(
        "Reference statements (pgbench, same repetitions): the lower bound, the statements without carried-over counts, and the SQL before incremental counts and before the feed rewrite",
        &[
            "statement",
            "pgbench tps",
            "compared with",
            "its pgbench tps",
            "ratio (it ÷ reference)",
        ],
    );
    for (i, r) in references.iter().enumerate() {
        let against = &baseline[r.against];
        let ratio: Vec<f64> = rps(against)
            .iter()
            .zip(rps(&referenced[i]))
            .map(|(a, b)| a / b)
            .collect();
        t.row(vec![
            r.name.to_string(),
            Spread::of(&rps(&referenced[i])).show(0),
            variants[r.against].name.clone(),
            Spread::of(&rps(against)).show(0),
            Spread::of(&ratio).show(2),
        ]);
    }
    w.tables.push(t);
    w.notes.push(format!(
        "Reader: {} in tenant 0, member of {} teams including team-0; the deep page starts {} items down.",
        reader.user_id,
        reader.teams.len(),
        deep_pages * 20
    ));
    w.notes.push(format!(
        "Wide reader: {WIDE_READER}, in {} teams (every team of tenant 0 and quiet teams without events).",
        wide.teams.len()
    ));
    w.notes.push(
        "pgbench of the feed and counts SQL passes the counts base the server carries over \
         between a user's requests (every request here but the first has one: nothing writes); \
         \"counts not carried over\" is the same statement without it (a user's first read on \
         an instance, or the read after a mark, an item read, a membership change or a purge)."
            .into(),
    );
    w.notes.push(
        "Cache on/off: N/A — the server has no switch to disable its membership cache (moka, \
         invalidated by LISTEN/NOTIFY); the hit ratio is 1 − membership loads/req above."
            .into(),
    );
    w.figure(
        "variants",
        variants
            .iter()
            .enumerate()
            .map(|(i, v)| {
                json!({
                    "name": v.name,
                    "service_max": service[i],
                    "pgbench": baseline[i],
                    "rate_at_half_max": latency[i].0,
                    "latency_at_half_max": latency[i].1,
                    "round_trips_per_request": round_trips[i],
                    "membership_loads_per_request": membership_loads[i],
                })
            })
            .collect::<Vec<_>>(),
    );
    w.figure(
        "references",
        references
            .iter()
            .enumerate()
            .map(|(i, r)| {
                json!({
                    "name": r.name,
                    "script": r.script,
                    "pgbench": referenced[i],
                    "against": variants[r.against].name,
                })
            })
            .collect::<Vec<_>>(),
    );
    w.figure("healthz_max", &statics);
    w.figure("reader_teams", reader.teams.len());
    w.figure("notes_statements", statements);
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

fn format_deep(pages: usize) -> &'static str {
    if pages >= 99 {
        "page 100, limit 20"
    } else {
        "page 21, limit 20"
    }
}
