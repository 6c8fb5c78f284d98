//! Workload feed-cold: first pages read by many distinct users, each read
//! the user's first on the instance that answers it, as when users open the
//! app, open a new tab or land on another instance behind a load balancer.
//! The `feed` workload's one reader, read again and again, is the best case
//! (its counts carried over in memory, its teams cached); this is the case
//! most reads are.
//!
//! The readers are the seeded users in a Zipf-weighted order (s = 1 over a
//! fixed shuffle: a few users are drawn early, most late). Each pass reads
//! the first [`PER_PASS`] of them (all at tier S) in that order, each once,
//! through the harness's own HTTP client ([`read_each`]), so every request is
//! its user's first on the instance and every pass reads the same users.
//! Every fresh server is first warmed up by the hot reader's reads (its
//! pool filled, its horizon read) and by [`WARM_USERS`] users who are not
//! in the passes, each read twice (so that every connection has prepared
//! and planned each statement a first read runs, in each of the first-page
//! statement's shapes): what is cold is the users, not the process. Each
//! repetition, interleaved:
//!
//! 1. **first read ever**: every stored counts base dropped
//!    (`feed_state.counts_base`), a fresh `tidings serve`: each read loads
//!    the user's teams and walks the badge counts from the watermarks, as
//!    every first read on an instance did before bases were stored;
//! 2. **stored base**: a fresh `tidings serve`, the same users: the bases
//!    the first pass stored stand in for the walk;
//! 3. **second pass**: the same server again, the same users (teams cached,
//!    counts carried over in memory);
//! 4. **hot**: the `feed` workload's reader, as many reads, on the same
//!    server and client: the denominator of every ratio here.
//!
//! With a before build (`BENCH_BEFORE_BIN`), each repetition also runs step
//! 2 on a fresh server of that build, before or after this build's in
//! alternate repetitions.
//!
//! Then the open-loop check at half the stored-base maximum, on a fresh
//! server warmed up as above, over as many of the same users as that rate
//! reads in the tier's latency measurement (the aim), and the same on a
//! just-started server warmed up by the hot reader alone (a record: its
//! connections plan as they go, a few ms per plan of the feed statement,
//! which is what an instance pays in its first seconds, not what a user's
//! first read costs on an instance that has served others). Figures: what
//! became of the bases to be stored (the server's metrics).

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context;

use super::{counter_sum, user_token, Ctx};
use crate::{
    loadgen::Measure,
    report::{Aim, Ratio, Table, WorkloadResult},
    seed::tenant_uuid,
    server::{main_server_env, Launch, Tidings, METRICS_TOKEN},
    stats::{Latency, Spread},
};

/// Users each pass reads (at most): ~6 s at tier M's cold rate.
const PER_PASS: usize = 6_000;
/// Users after the passes' in the order who warm up each fresh server
/// (fewer when the seed has fewer; none at tier S, whose passes read all).
const WARM_USERS: usize = 2_000;

/// The seeded users in a Zipf-weighted order (s = 1), each once: draws with
/// weight 1/rank over a fixed shuffle, first occurrences kept, the users never
/// drawn appended in rank order. Deterministic (splitmix64), so every
/// repetition and run reads in the same order.
fn zipf_order<T: Clone>(users: &[T]) -> Vec<T> {
    let n = users.len();
    let mut state: u64 = 0x5eed_f00d;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    // The fixed shuffle: rank → user (Fisher-Yates).
    let mut ranked: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        ranked.swap(i, j);
    }
    let mut cumulative = Vec::with_capacity(n);
    let mut total = 0.0;
    for rank in 1..=n {
        total += 1.0 / rank as f64;
        cumulative.push(total);
    }
    let mut taken = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for _ in 0..n * 4 {
        let u = (next() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let rank = cumulative.partition_point(|&c| c < u).min(n - 1);
        if !std::mem::replace(&mut taken[rank], true) {
            order.push(users[ranked[rank]].clone());
        }
    }
    for (rank, taken) in taken.iter().enumerate() {
        if !taken {
            order.push(users[ranked[rank]].clone());
        }
    }
    order
}

/// Reads the first page of each token's user, in order, each once, through
/// one HTTP client of the harness: `connections` clients in a closed loop,
/// or with `per_sec` one request every 1/`per_sec` seconds whatever came
/// back (open loop; each latency from the request's scheduled time, so a
/// stall counts for every request it delays). Not wrk or oha: wrk's Lua can
/// rotate tokens but not stop a pass at a count with a true duration, and
/// oha sends one fixed header; the hot reader is read through this same
/// client, so the ratios compare like with like.
async fn read_each(
    base_url: &str,
    tokens: &[String],
    connections: u32,
    per_sec: Option<f64>,
) -> anyhow::Result<Measure> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(connections as usize * 2)
        .build()?;
    let url = format!("{base_url}/v1/feed?limit=20");
    let tokens: Arc<[String]> = tokens.into();
    let read = |client: reqwest::Client, url: String, token: String| async move {
        let reply = client.get(&url).bearer_auth(&token).send().await;
        match reply {
            Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
            _ => false,
        }
    };
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    match per_sec {
        None => {
            let next = Arc::new(AtomicUsize::new(0));
            for _ in 0..connections {
                let (client, url, tokens, next) =
                    (client.clone(), url.clone(), tokens.clone(), next.clone());
                tasks.spawn(async move {
                    let mut out = vec![];
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(token) = tokens.get(i) else { break };
                        let t = Instant::now();
                        let ok = read(client.clone(), url.clone(), token.clone()).await;
                        out.push((ok, t.elapsed().as_secs_f64() * 1000.0));
                    }
                    out
                });
            }
        }
        Some(rate) => {
            for (i, token) in tokens.iter().enumerate() {
                let due = started + Duration::from_secs_f64(i as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                let (client, url, token) = (client.clone(), url.clone(), token.clone());
                tasks.spawn(async move {
                    let ok = read(client, url, token).await;
                    vec![(ok, due.elapsed().as_secs_f64() * 1000.0)]
                });
            }
        }
    }
    let mut latencies = vec![];
    let mut errors = 0.0;
    while let Some(done) = tasks.join_next().await {
        for (ok, ms) in done? {
            if ok {
                latencies.push(ms);
            } else {
                errors += 1.0;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(errors == 0.0, "{errors} first pages failed");
    let latency = Latency::of(&latencies);
    Ok(Measure {
        tool: "reqwest",
        requests_per_sec: latencies.len() as f64 / seconds,
        requests: latencies.len() as f64,
        errors,
        mean_ms: Some(latencies.iter().sum::<f64>() / latencies.len().max(1) as f64),
        p50_ms: latency.p50_ms,
        p99_ms: latency.p99_ms,
        p999_ms: latency.p999_ms,
        seconds,
    })
}

/// The server's `/metrics` text.
async fn scrape(ctx: &Ctx, server: &Tidings) -> anyhow::Result<String> {
    Ok(ctx
        .http
        .get(server.url("/metrics"))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?)
}

/// A fresh `tidings serve`, warmed up by `warm_up` reads: its database pool
/// filled, its horizon read and, with other users among them, every
/// statement a first read runs planned on each connection, so that the
/// passes measure users the instance has not seen, not a process starting
/// (whose first requests wait for connections to open and for plans).
async fn fresh_server(
    ctx: &Ctx,
    bin: &std::path::Path,
    name: &str,
    warm_up: &[String],
) -> anyhow::Result<Tidings> {
    let server = Tidings::serve(Launch {
        bin,
        database_url: &ctx.target.url,
        log_dir: &ctx.work_dir,
        name,
        env: main_server_env(),
    })
    .await?;
    read_each(&server.base_url, warm_up, ctx.tier.connections, None).await?;
    // Let the warm-up's background writes (other users' bases) land.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(server)
}

/// On a fresh server of this build warmed up by `warm_up`: each of `users`
/// read once, open loop at `rate` requests per second.
async fn paced_reads(
    ctx: &Ctx,
    name: &str,
    warm_up: &[String],
    users: &[String],
    rate: f64,
) -> anyhow::Result<Measure> {
    let server = fresh_server(ctx, &ctx.bin, name, warm_up).await?;
    let m = read_each(&server.base_url, users, ctx.tier.connections, Some(rate)).await;
    server.stop().await;
    m.with_context(|| format!("the paced cold reads ({name})"))
}

/// On a fresh server of `bin`: the users' first reads there (their stored
/// bases), the same users again, and the hot reader.
async fn stored_base_passes(
    ctx: &Ctx,
    bin: &std::path::Path,
    name: &str,
    warm_up: &[String],
    pass: &[String],
    hot_tokens: &[String],
) -> anyhow::Result<(Measure, Measure, Measure)> {
    let connections = ctx.tier.connections;
    let server = fresh_server(ctx, bin, name, warm_up).await?;
    let outcome = async {
        let cold = read_each(&server.base_url, pass, connections, None).await?;
        let again = read_each(&server.base_url, pass, connections, None).await?;
        let hot = read_each(&server.base_url, hot_tokens, connections, None).await?;
        anyhow::Ok((cold, again, hot))
    }
    .await;
    server.stop().await;
    outcome
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    if !ctx.seeded.has_feed_tables {
        return Ok(WorkloadResult::skipped(
            "feed-cold",
            "GET /v1/feed is not on this branch yet",
        ));
    }
    let stored_bases: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns
                        WHERE table_name = 'feed_state' AND column_name = 'counts_base')",
    )
    .fetch_one(&ctx.pool)
    .await?;
    let mut w = WorkloadResult::new("feed-cold");

    // Every seeded user with a team, by tenant index.
    let tenant_of: std::collections::HashMap<uuid::Uuid, i64> =
        (0..ctx.tier.tenants).map(|t| (tenant_uuid(t), t)).collect();
    let rows: Vec<(uuid::Uuid, String)> = sqlx::query_as(
        "SELECT DISTINCT tenant_id, user_id FROM memberships ORDER BY tenant_id, user_id",
    )
    .fetch_all(&ctx.pool)
    .await?;
    let users: Vec<(i64, String)> = rows
        .into_iter()
        .filter_map(|(tenant, user)| Some((*tenant_of.get(&tenant)?, user)))
        .collect();
    anyhow::ensure!(users.len() >= 100, "only {} seeded readers", users.len());
    let order = zipf_order(&users);
    let tokens: Vec<String> = order
        .iter()
        .map(|(t, u)| user_token(*t, u))
        .collect::<anyhow::Result<_>>()?;
    // Each pass reads the same first users of the order, each once: as many
    // as a pass of the tier's length reads at a few thousand per second.
    let per_pass = tokens.len().min(PER_PASS);
    let pass = &tokens[..per_pass];
    let hot_reader = super::feed::pick_reader(ctx).await?;
    let hot_tokens = vec![user_token(0, &hot_reader.user_id)?; per_pass];
    let hot_warm_up = &hot_tokens[..(ctx.tier.connections as usize * 8).min(per_pass)];
    // Each other user twice: a first read's statements, then a second read's.
    let others = &tokens[per_pass..(per_pass + WARM_USERS).min(tokens.len())];
    let warm_up: &[String] = &hot_warm_up
        .iter()
        .chain(others)
        .chain(others)
        .cloned()
        .collect::<Vec<_>>();
    let connections = ctx.tier.connections;

    let (mut first_ever, mut stored, mut second, mut hot) = (vec![], vec![], vec![], vec![]);
    let (mut before_stored, mut before_hot) = (vec![], vec![]);
    let (mut bases_stored, mut bases_dropped) = (0.0, 0.0);
    for rep in 0..ctx.tier.reps {
        if stored_bases {
            sqlx::query(
                "UPDATE feed_state SET counts_base = NULL, counts_base_teams = NULL
                 WHERE counts_base IS NOT NULL",
            )
            .execute(&ctx.pool)
            .await?;
        }
        let server =
            fresh_server(ctx, &ctx.bin, &format!("serve-feed-cold-{rep}a"), warm_up).await?;
        let m = read_each(&server.base_url, pass, connections, None).await;
        let metrics = scrape(ctx, &server).await?;
        let name = "tidings_counts_bases_stored_total";
        bases_stored += counter_sum(&metrics, name, "result=\"stored\"");
        bases_dropped += counter_sum(&metrics, name, "result=\"dropped\"");
        server.stop().await;
        let m = m?;
        first_ever.push(m);
        // Let the last background writes land.
        tokio::time::sleep(Duration::from_millis(500)).await;

        // This build's stored-base pass and, when given, the before build's,
        // in alternating order from one repetition to the next.
        let mut builds = vec![(&ctx.bin, "b")];
        if let Some(before) = &ctx.before_bin {
            builds.insert(rep % 2, (before, "before"));
        }
        for (bin, label) in builds {
            let name = format!("serve-feed-cold-{rep}{label}");
            let (cold, again, h) =
                stored_base_passes(ctx, bin, &name, warm_up, pass, &hot_tokens).await?;
            if label == "before" {
                before_stored.push(cold);
                before_hot.push(h);
            } else {
                stored.push(cold);
                second.push(again);
                hot.push(h);
            }
        }
    }

    // Open loop at half the stored-base maximum, on a fresh server.
    let rps = |ms: &[Measure]| ms.iter().map(|m| m.requests_per_sec).collect::<Vec<_>>();
    let half = Spread::of(&rps(&stored)).median / 2.0;
    // Users the first passes read (their bases stored), as many as the
    // latency measurement's length reads at that rate.
    let paced_users =
        &tokens[..((half * ctx.tier.latency_measure.as_secs_f64()) as usize).clamp(2, per_pass)];
    let at_half = paced_reads(ctx, "serve-feed-cold-paced", warm_up, paced_users, half).await?;
    let just_started = paced_reads(
        ctx,
        "serve-feed-cold-paced-started",
        hot_warm_up,
        paced_users,
        half,
    )
    .await?;

    let mut table = Table::new(
        "First pages (limit 20) by distinct users, each read its user's first on the instance \
         (16 clients, closed loop; median (min–max) over the repetitions)",
        &["readers", "req/s", "p99 ms", "÷ hot"],
    );
    let hot_rps = rps(&hot);
    // A row: req/s, p99 and ÷ the hot reader `hot` (req/s by repetition).
    let show_against = |name: &str, ms: &[Measure], hot: &[f64], table: &mut Table| {
        let r = rps(ms);
        let ratios: Vec<f64> = r.iter().zip(hot).map(|(a, b)| a / b).collect();
        let p99: Vec<f64> = ms.iter().filter_map(|m| m.p99_ms).collect();
        table.row(vec![
            name.to_string(),
            Spread::of(&r).show(0),
            Spread::of(&p99).show(1),
            Spread::of(&ratios).show(2),
        ]);
    };
    let show =
        |name: &str, ms: &[Measure], table: &mut Table| show_against(name, ms, &hot_rps, table);
    show(
        "first read ever (no stored base: teams loaded, counts walked)",
        &first_ever,
        &mut table,
    );
    show(
        "first read on the instance, stored base",
        &stored,
        &mut table,
    );
    show(
        "second pass (teams cached, counts carried over in memory)",
        &second,
        &mut table,
    );
    show(
        "the feed workload's one hot reader (best case)",
        &hot,
        &mut table,
    );
    if let Some(bin) = &ctx.before_bin {
        show_against(
            "before build: first read on the instance, stored base (÷ its own hot reader)",
            &before_stored,
            &rps(&before_hot),
            &mut table,
        );
        w.ratios.push(Ratio::new(
            "cold readers, this build ÷ the before build (same run)",
            "first pages/s, first reads on the instance with stored bases",
            "the same reads through the before build",
            None,
            &rps(&stored),
            &rps(&before_stored),
        ));
        w.figure("before_bin", bin.display().to_string());
    }
    w.tables.push(table);

    let (first_rps, stored_rps, second_rps) = (rps(&first_ever), rps(&stored), rps(&second));
    w.ratios.push(Ratio::new(
        "cold readers ÷ the hot reader (first reads on the instance, stored bases)",
        "first pages/s, distinct users, each their first read on a fresh instance",
        "first pages/s of the feed workload's one hot reader, same server",
        Some(0.8),
        &stored_rps,
        &hot_rps,
    ));
    w.ratios.push(Ratio::new(
        "first reads ever ÷ the hot reader",
        "first pages/s, distinct users, no stored counts base (counts walked)",
        "first pages/s of the feed workload's one hot reader, same run",
        None,
        &first_rps,
        &hot_rps,
    ));
    w.ratios.push(Ratio::new(
        "cold readers: stored counts base ÷ none (same run)",
        "first pages/s, first reads on the instance with stored bases",
        "the same reads with no stored base (first reads ever)",
        None,
        &stored_rps,
        &first_rps,
    ));
    w.ratios.push(Ratio::new(
        "second pass ÷ the hot reader",
        "first pages/s, the same users again on the same instance",
        "first pages/s of the feed workload's one hot reader",
        None,
        &second_rps,
        &hot_rps,
    ));
    w.aims.push(Aim::at_least(
        "cold readers' first pages/s (first reads on the instance, stored bases)",
        Spread::of(&stored_rps).median,
        "req/s",
        3000.0,
    ));
    w.aims.push(Aim::below(
        "cold readers' p99 at half their maximum (open loop)",
        at_half.p99_ms.unwrap_or(f64::NAN),
        "ms",
        10.0,
    ));
    w.figure("readers", tokens.len());
    w.figure("readers_per_pass", per_pass);
    // Positive, or storing is broken (the dropped ones, often none, are in the note).
    w.figure("bases_stored", bases_stored);
    w.figure("stored_bases_supported", stored_bases);
    w.figure("at_half_rate_per_sec", at_half.requests_per_sec);
    w.figure("at_half_p50_ms", at_half.p50_ms);
    w.figure("at_half_p99_ms", at_half.p99_ms);
    w.figure("at_half_p999_ms", at_half.p999_ms);
    w.figure("just_started_at_half_p99_ms", just_started.p99_ms);
    w.notes.push(format!(
        "{} readers in a Zipf-weighted order (s = 1); each pass reads the first {} of them, \
         each once (every request its user's first on the instance). Bases stored in the \
         first-read passes: {} ({} dropped while the queue was full). At half the maximum \
         ({:.0} req/s aimed, {:.0} measured, open loop): p50 {:.2} ms, p99 {:.2} ms, \
         p99.9 {:.2} ms. Every fresh server was warmed up by {} other users' reads (each \
         twice) and the hot reader's; on a just-started server warmed up by the hot reader \
         alone, whose connections plan as they go, the same paced reads had p50 {:.2} ms, \
         p99 {:.2} ms.",
        tokens.len(),
        per_pass,
        bases_stored,
        bases_dropped,
        half,
        at_half.requests_per_sec,
        at_half.p50_ms.unwrap_or(f64::NAN),
        at_half.p99_ms.unwrap_or(f64::NAN),
        at_half.p999_ms.unwrap_or(f64::NAN),
        others.len(),
        just_started.p50_ms.unwrap_or(f64::NAN),
        just_started.p99_ms.unwrap_or(f64::NAN),
    ));
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::zipf_order;

    #[test]
    fn the_zipf_order_holds_every_user_once_with_few_drawn_early() {
        let users: Vec<u32> = (0..5_000).collect();
        let order = zipf_order(&users);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, users);
        assert_eq!(order, zipf_order(&users), "deterministic");
        assert_ne!(order[..100], users[..100], "shuffled");
    }
}
