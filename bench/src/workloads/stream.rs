//! Workload stream (ARCHITECTURE.md "The live stream"): N
//! concurrent `GET /v1/feed/stream` connections on one `tidings serve`, users
//! in teams of 100 members (all connected), and events posted open loop at a
//! fixed rate into those teams, round robin (tier M: 100 events/s, i.e. 10,000
//! pushes/s whatever N). Measured per N: commit-to-client latency, server RSS
//! per connection, server and database CPU, database statements per second.
//! The baseline, on the same server right after: the same users polling
//! `GET /v1/feed?limit=20` every 10 s under the same event rate. A first
//! window with events and no readers at all shows what the writes alone cost.
//!
//! - Commit time is when `POST /v1/events` returned (the write committed
//!   before it answered, so this slightly understates the latency); the
//!   latency from when the POST was sent (an overstatement by the write's
//!   own latency) is reported beside it. The event's payload carries its
//!   sequence number; the client matches on it.
//! - Server RSS per connection: (VmRSS with N streams − VmRSS before any
//!   stream) ÷ N, from /proc/<pid>/status, idle (all open, no events yet)
//!   and at the end of the event window.
//! - CPU: utime + stime from /proc/<pid>/stat over the window, in % of one
//!   core; the database's is the sum over the bench cluster's postmaster and
//!   its children (backends, autovacuum, walwriter …).
//! - Statements: calls in pg_stat_statements (the bench cluster preloads
//!   it) over the window, for the bench database, BEGIN/COMMIT included.
//!
//! - Larger levels: streams beyond 20,000 are opened from further loopback
//!   source addresses (127.0.0.2, …), since one address reaches the server's
//!   port through ~28,000 ephemeral ports at most; each process needs an open
//!   files limit above N (scripts/bench raises it to 65,536). The polling
//!   baseline runs up to 10,000 users: beyond, it only measures saturation.
//!
//! The users live in a tenant of their own ([`TENANT`]), so that the stream's
//! per-tenant horizon and tail see only this workload's writes, and every
//! level runs on a fresh server (its RSS before the streams is its own
//! baseline). That server runs with rate limits off (`TIDINGS_RATE_LIMITS`,
//! documented for one tenant's benchmark), `TIDINGS_STREAM_MAX_CONNECTIONS`
//! and `TIDINGS_HTTP_MAX_CONNECTIONS` above N, and the tenant's share of
//! streams at 100 % (`TIDINGS_STREAM_TENANT_SHARE_PERCENT`). The harness and the server
//! share the machine's cores: the client's own CPU is reported too.

use std::{
    collections::HashMap,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, Semaphore};

use super::{fmt_ms, user_token, Ctx};
use crate::{
    plots,
    report::{Aim, Table, WorkloadResult},
    seed::{api_key, tenant_uuid},
    server::{Launch, Tidings},
    stats::Latency,
};

/// The bench tenant of this workload (its id, API key and signing secret
/// follow the seed's scheme; the seed itself never creates it).
const TENANT: i64 = 900;
/// Connected members per team (every one of them holds a stream).
const TEAM_SIZE: usize = 100;
/// The polling baseline: each user reads its feed this often.
const POLL_EVERY: Duration = Duration::from_secs(10);
/// Open files each process keeps beside its streams' sockets (database
/// connections, the poster's, logs).
const FD_HEADROOM: u64 = 1_000;
/// Streams being opened at once (each costs the server a few statements).
const OPEN_CONCURRENCY: usize = 64;
/// Streams per client source address: one address reaches one server port
/// through at most ~28,000 ephemeral ports (32768–60999), so the harness
/// opens larger levels from 127.0.0.1, 127.0.0.2, … (all loopback).
const STREAMS_PER_SOURCE: usize = 20_000;
/// Polling this many users every 10 s or more saturates the machine's two
/// cores (118 % of a core of PostgreSQL at 10,000): larger levels skip the
/// baseline, which would measure only the saturation.
const POLL_AT_MOST: usize = 10_000;

struct Plan {
    levels: Vec<usize>,
    events_per_sec: f64,
    /// Events window of the writes-only and the stream phase.
    window: Duration,
    /// The polling window (at least one period, so every user polls).
    poll_window: Duration,
    /// Run the polling baseline at every level up to [`POLL_AT_MOST`]
    /// (tier S: only the largest).
    poll_every_level: bool,
}

fn plan(ctx: &Ctx) -> anyhow::Result<Plan> {
    let mut p = match ctx.tier.name {
        crate::tier::TierName::S => Plan {
            levels: vec![200, 500],
            events_per_sec: 20.0,
            window: Duration::from_secs(4),
            poll_window: POLL_EVERY,
            poll_every_level: false,
        },
        crate::tier::TierName::M => Plan {
            levels: vec![1_000, 10_000, 50_000],
            events_per_sec: 100.0,
            window: Duration::from_secs(20),
            poll_window: Duration::from_secs(20),
            poll_every_level: true,
        },
    };
    // A reduced run (e.g. `1000,5000` when the machine is busy or short of
    // file descriptors): BENCH_STREAM_CONNECTIONS overrides the levels.
    if let Ok(levels) = std::env::var("BENCH_STREAM_CONNECTIONS") {
        p.levels = levels
            .split(',')
            .map(|l| l.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .context("BENCH_STREAM_CONNECTIONS is a comma-separated list of counts")?;
    }
    for &n in &p.levels {
        anyhow::ensure!(
            n >= TEAM_SIZE && n % TEAM_SIZE == 0,
            "stream connection counts are multiples of {TEAM_SIZE}, not {n}"
        );
    }
    Ok(p)
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    if !ctx
        .route_exists(reqwest::Method::GET, "/v1/feed/stream")
        .await?
    {
        return Ok(WorkloadResult::skipped(
            "stream",
            "GET /v1/feed/stream is not on this branch yet",
        ));
    }
    let mut plan = plan(ctx)?;
    // The harness holds one socket per stream, the server another: both
    // inherit this process's limit (scripts/bench raises it; so does this,
    // as far as the hard limit allows). A level above it runs at the most
    // that fits, and the results say so.
    let nofile = raise_open_files_limit().unwrap_or(0);
    let fits = (nofile.saturating_sub(FD_HEADROOM) as usize / TEAM_SIZE) * TEAM_SIZE;
    anyhow::ensure!(
        fits >= TEAM_SIZE,
        "the open files limit ({nofile}) is too low for any stream level: raise `ulimit -n`"
    );
    let asked = plan.levels.clone();
    plan.levels = asked.iter().map(|&n| n.min(fits)).collect();
    plan.levels.dedup();
    let max = plan.levels.iter().copied().max().unwrap_or(0);
    seed_tenant(ctx, max).await?;
    let tokens: Vec<String> = (0..max)
        .map(|u| user_token(TENANT, &user_id(u)))
        .collect::<anyhow::Result<_>>()?;
    let postmaster = postmaster_pid(ctx).await.ok();

    let mut w = WorkloadResult::new("stream");
    if plan.levels != asked {
        w.notes.push(format!(
            "Levels asked: {asked:?}; run: {:?}. The open files limit here is {nofile} per \
             process (the harness and the server each hold one socket per stream), and this \
             process could not raise it (raising the hard limit needs CAP_SYS_RESOURCE).",
            plan.levels
        ));
    }
    let mut levels = vec![];
    let mut seq = 0u32;
    for (i, &n) in plan.levels.iter().enumerate() {
        eprintln!("  stream: {n} connections");
        let poll = (plan.poll_every_level || i + 1 == plan.levels.len()) && n <= POLL_AT_MOST;
        let level = run_level(ctx, &plan, n, poll, &tokens, postmaster, &mut seq).await?;
        levels.push(level);
    }

    let last = levels.last().context("no stream level ran")?;
    if let Some(p99) = last.stream.latency_from_return.p99_ms {
        w.aims.push(Aim::below(
            &format!(
                "stream: commit-to-client p99 at {} connections",
                last.connections
            ),
            p99,
            "ms",
            100.0,
        ));
    }
    w.aims.push(Aim::below(
        &format!(
            "stream: server RSS per connection at {} connections",
            last.connections
        ),
        (last.stream.rss_per_connection_bytes.max(0.0)) / 1024.0,
        "KiB",
        12.0,
    ));

    let mut t = Table::new(
        &format!(
            "Live stream: N connections on one server, teams of {TEAM_SIZE} connected members, \
             {:.0} events/s ({:.0} pushes/s); latency from the POST's return (from its send)",
            plan.events_per_sec,
            plan.events_per_sec * TEAM_SIZE as f64
        ),
        &[
            "connections",
            "pushes/s received",
            "delivered",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "RSS/conn idle KiB",
            "RSS/conn loaded KiB",
            "server CPU %",
            "server CPU µs/push",
            "DB CPU %",
            "statements/s",
            "client CPU %",
        ],
    );
    for l in &levels {
        let s = &l.stream;
        let both = |a: Option<f64>, b: Option<f64>| format!("{} ({})", fmt_ms(a), fmt_ms(b));
        t.row(vec![
            format!("{} ({} opened)", l.connections, s.opened),
            format!("{:.0}", s.pushes_per_sec),
            format!(
                "{:.2}%",
                100.0 * s.pushes_received as f64 / (s.pushes_expected.max(1)) as f64
            ),
            both(s.latency_from_return.p50_ms, s.latency_from_send.p50_ms),
            both(s.latency_from_return.p99_ms, s.latency_from_send.p99_ms),
            both(s.latency_from_return.p999_ms, s.latency_from_send.p999_ms),
            format!("{:.1}", s.rss_per_connection_idle_bytes / 1024.0),
            format!("{:.1}", s.rss_per_connection_bytes / 1024.0),
            format!("{:.0}", s.cost.server_cpu_pct),
            format!("{:.1}", s.server_cpu_us_per_push),
            format!("{:.0}", s.cost.db_cpu_pct),
            format!("{:.0}", s.cost.statements_per_sec),
            format!("{:.0}", s.cost.client_cpu_pct),
        ]);
    }
    w.tables.push(t);

    let mut t = Table::new(
        &format!(
            "The same users streaming vs polling GET /v1/feed every {} s, same event rate \
             (writes only: the events and nobody reading)",
            POLL_EVERY.as_secs()
        ),
        &[
            "connections",
            "readers",
            "statements/s",
            "DB exec ms/s",
            "DB CPU %",
            "server CPU %",
            "reads/s",
            "read p99 ms",
        ],
    );
    for l in &levels {
        let mut row = |name: &str, c: &Cost, reads: String, p99: Option<f64>| {
            t.row(vec![
                l.connections.to_string(),
                name.into(),
                format!("{:.0}", c.statements_per_sec),
                format!("{:.1}", c.db_exec_ms_per_sec),
                format!("{:.0}", c.db_cpu_pct),
                format!("{:.0}", c.server_cpu_pct),
                reads,
                fmt_ms(p99),
            ]);
        };
        row("writes only", &l.writes_only, "—".into(), None);
        row(
            "streams",
            &l.stream.cost,
            format!("{:.0} pushes", l.stream.pushes_per_sec),
            l.stream.latency_from_return.p99_ms,
        );
        if let Some(p) = &l.poll {
            row(
                "polling",
                &p.cost,
                format!("{:.0} polls", p.polls_per_sec),
                p.p99_ms,
            );
        }
    }
    w.tables.push(t);

    w.notes.push(
        "Commit time = when POST /v1/events returned (it answers after its commit); the \
         figure in brackets is from when the POST was sent. Statements: pg_stat_statements \
         calls in the bench database (BEGIN/COMMIT included). CPU: utime+stime from \
         /proc/<pid>/stat, % of one core; DB = the bench cluster's postmaster and children. \
         RSS: VmRSS from /proc/<pid>/status, (with streams − before) ÷ connections."
            .into(),
    );
    w.notes.push(format!(
        "Tenant {} of its own, users in teams of {TEAM_SIZE}, every member connected; a fresh \
         server per level with TIDINGS_RATE_LIMITS=false and the stream cap above N. The \
         polling users' feeds are short (this workload's events only), so a poll here is \
         cheaper than tier M's heavy reader. The machine's cores are shared by the server, \
         PostgreSQL, the client and other people's work: CPU and latency figures are noisy.",
        tenant_uuid(TENANT)
    ));
    w.figure("events_per_sec", plan.events_per_sec);
    w.figure("team_size", TEAM_SIZE);
    w.figure("window_seconds", plan.window.as_secs_f64());
    w.figure("poll_every_seconds", POLL_EVERY.as_secs_f64());
    w.figure("levels", &levels);
    let (path, file) = ctx.plot_path("stream");
    plot(&path, &w.figures)?;
    w.plots.push(file);
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

fn user_id(u: usize) -> String {
    format!("stream-user-{u}")
}

fn team_id(t: usize) -> String {
    format!("stream-team-{t}")
}

/// The workload's tenant, its API key and `max` users in teams of
/// [`TEAM_SIZE`] (user u in team u / 100), inserted directly; idempotent.
async fn seed_tenant(ctx: &Ctx, max: usize) -> anyhow::Result<()> {
    let tenant = tenant_uuid(TENANT);
    crate::seed::ensure_tenant(&ctx.pool, TENANT, "bench-stream").await?;
    sqlx::query(
        "INSERT INTO memberships (tenant_id, team_id, user_id)
         SELECT $1, 'stream-team-' || (u / $3), 'stream-user-' || u
         FROM generate_series(0, $2 - 1) u
         ON CONFLICT DO NOTHING",
    )
    .bind(tenant)
    .bind(max as i64)
    .bind(TEAM_SIZE as i64)
    .execute(&ctx.pool)
    .await
    .context("inserting the stream users' memberships")?;
    Ok(())
}

/// What one window cost the server and the database.
#[derive(Debug, Clone, Default, Serialize)]
struct Cost {
    seconds: f64,
    statements_per_sec: f64,
    /// pg_stat_statements' total execution time per second: the database's
    /// work for this database alone.
    db_exec_ms_per_sec: f64,
    db_cpu_pct: f64,
    server_cpu_pct: f64,
    client_cpu_pct: f64,
    /// The busiest statements of the window (diagnostics).
    notes_statements: Vec<Value>,
}

#[derive(Debug, Clone, Serialize)]
struct StreamPhase {
    opened: usize,
    open_errors: usize,
    open_seconds: f64,
    events_posted: usize,
    event_errors: usize,
    pushes_expected: usize,
    pushes_received: usize,
    pushes_per_sec: f64,
    /// Expected pushes that never arrived, and pushes seen twice.
    lost_errors: usize,
    duplicate: usize,
    /// Streams ended by `reset` (slow consumer, superseded, …).
    reset_errors: usize,
    /// Pushes received before their POST had returned (latency 0 there).
    before_return_errors: usize,
    latency_from_return: Latency,
    latency_from_send: Latency,
    rss_before_bytes: f64,
    rss_idle_bytes: f64,
    rss_loaded_bytes: f64,
    rss_per_connection_idle_bytes: f64,
    rss_per_connection_bytes: f64,
    /// The server's CPU time over the event window ÷ the pushes received.
    server_cpu_us_per_push: f64,
    cost: Cost,
}

#[derive(Debug, Clone, Serialize)]
struct PollPhase {
    users: usize,
    polls: usize,
    poll_errors: usize,
    polls_per_sec: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    p999_ms: Option<f64>,
    cost: Cost,
}

#[derive(Debug, Clone, Serialize)]
struct Level {
    connections: usize,
    teams: usize,
    writes_only: Cost,
    stream: StreamPhase,
    /// Only at the levels that ran the polling baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    poll: Option<PollPhase>,
}

async fn run_level(
    ctx: &Ctx,
    plan: &Plan,
    n: usize,
    poll: bool,
    tokens: &[String],
    postmaster: Option<u32>,
    seq: &mut u32,
) -> anyhow::Result<Level> {
    let server = Tidings::serve(Launch {
        bin: &ctx.bin,
        database_url: &ctx.target.url,
        log_dir: &ctx.work_dir,
        name: "serve-stream",
        env: vec![
            ("TIDINGS_OUTBOX_WORKERS".into(), "0".into()),
            ("TIDINGS_RATE_LIMITS".into(), "false".into()),
            (
                "TIDINGS_STREAM_MAX_CONNECTIONS".into(),
                (n + 100).to_string(),
            ),
            (
                "TIDINGS_HTTP_MAX_CONNECTIONS".into(),
                (n + 1_100).to_string(),
            ),
            // One tenant holds every stream here: its share is the whole.
            ("TIDINGS_STREAM_TENANT_SHARE_PERCENT".into(), "100".into()),
        ],
    })
    .await?;
    let outcome = measure_level(ctx, plan, &server, n, poll, tokens, postmaster, seq).await;
    server.stop().await;
    outcome
}

#[allow(clippy::too_many_arguments)]
async fn measure_level(
    ctx: &Ctx,
    plan: &Plan,
    server: &Tidings,
    n: usize,
    poll: bool,
    tokens: &[String],
    postmaster: Option<u32>,
    seq: &mut u32,
) -> anyhow::Result<Level> {
    let pid = server.pid().context("the stream server has no pid")?;
    let teams = n / TEAM_SIZE;
    let poster = Poster::new(server, teams, plan.events_per_sec)?;

    // Writes alone: what the events cost with nobody reading (and the
    // server's warm-up before its RSS baseline).
    let probe = Probe::start(ctx, pid, postmaster).await?;
    let (posted, _) = poster.run(plan.window, seq).await;
    let writes_only = probe.finish(ctx).await?;
    anyhow::ensure!(
        posted.iter().any(|p| p.returned.is_some()),
        "no event was accepted: see {}",
        ctx.work_dir.join("serve-stream.log").display()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before = rss_bytes(pid)?;

    // Open N streams, from as many loopback source addresses as they need.
    let clients = (0..n.div_ceil(STREAMS_PER_SOURCE))
        .map(|k| {
            let source = std::net::Ipv4Addr::new(127, 0, 0, 1 + k as u8);
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .pool_max_idle_per_host(0)
                .local_address(std::net::IpAddr::V4(source))
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let (open_tx, mut open_rx) = mpsc::unbounded_channel::<Result<(), String>>();
    let gate = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let url = server.url("/v1/feed/stream");
    let open_started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for (i, token) in tokens[..n].iter().enumerate() {
        tasks.push(tokio::spawn(hold_stream(
            clients[i / STREAMS_PER_SOURCE].clone(),
            url.clone(),
            token.clone(),
            gate.clone(),
            open_tx.clone(),
            stop_rx.clone(),
        )));
    }
    drop(open_tx);
    let (mut opened, mut open_errors, mut first_error) = (0, 0, None);
    let deadline = Instant::now() + Duration::from_secs(180);
    while opened + open_errors < n {
        match tokio::time::timeout_at(deadline.into(), open_rx.recv()).await {
            Ok(Some(Ok(()))) => opened += 1,
            Ok(Some(Err(e))) => {
                open_errors += 1;
                first_error.get_or_insert(e);
            }
            Ok(None) | Err(_) => break,
        }
    }
    let open_seconds = open_started.elapsed().as_secs_f64();
    if let Some(e) = &first_error {
        eprintln!("    {open_errors} streams failed to open; first: {e}");
    }
    anyhow::ensure!(opened > 0, "no stream opened: {first_error:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = rss_bytes(pid)?;

    // Events into the connected teams, at the fixed rate.
    let probe = Probe::start(ctx, pid, postmaster).await?;
    let (posted, first_seq) = poster.run(plan.window, seq).await;
    let rss_loaded = rss_bytes(pid)?;
    let cost = probe.finish(ctx).await?;
    // Pushes still in flight: a tick and a bit.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_tx.send(true);
    let mut received: Vec<Received> = Vec::with_capacity(n);
    for task in tasks {
        received.push(task.await?);
    }
    drop(clients);

    // Match pushes with their events.
    let (mut from_return, mut from_send) = (vec![], vec![]);
    let (mut before_return, mut duplicate, mut resets, mut pushes) = (0, 0, 0, 0);
    for r in &received {
        resets += r.resets;
        let mut seen = std::collections::HashSet::with_capacity(r.pushes.len());
        for &(s, at) in &r.pushes {
            let Some(p) = s
                .checked_sub(first_seq)
                .and_then(|i| posted.get(i as usize))
            else {
                continue;
            };
            if !seen.insert(s) {
                duplicate += 1;
                continue;
            }
            pushes += 1;
            from_send.push(ms(at.saturating_duration_since(p.sent)));
            if let Some(ret) = p.returned {
                if at < ret {
                    before_return += 1;
                }
                from_return.push(ms(at.saturating_duration_since(ret)));
            }
        }
    }
    let accepted = posted.iter().filter(|p| p.returned.is_some()).count();
    let expected = accepted * TEAM_SIZE;
    let per_conn = |rss: f64| (rss - rss_before) / opened as f64;
    let stream = StreamPhase {
        opened,
        open_errors,
        open_seconds,
        events_posted: posted.len(),
        event_errors: posted.len() - accepted,
        pushes_expected: expected,
        pushes_received: pushes,
        pushes_per_sec: pushes as f64 / cost.seconds,
        lost_errors: expected.saturating_sub(pushes),
        duplicate,
        reset_errors: resets,
        before_return_errors: before_return,
        latency_from_return: Latency::of(&from_return),
        latency_from_send: Latency::of(&from_send),
        rss_before_bytes: rss_before,
        rss_idle_bytes: rss_idle,
        rss_loaded_bytes: rss_loaded,
        rss_per_connection_idle_bytes: per_conn(rss_idle),
        rss_per_connection_bytes: per_conn(rss_loaded),
        server_cpu_us_per_push: cost.server_cpu_pct / 100.0 * cost.seconds * 1e6
            / pushes.max(1) as f64,
        cost,
    };
    eprintln!(
        "    {opened} streams, {pushes}/{expected} pushes, p99 {} ms, {:.1} KiB/conn, {:.0} statements/s",
        fmt_ms(stream.latency_from_return.p99_ms),
        stream.rss_per_connection_bytes / 1024.0,
        stream.cost.statements_per_sec
    );

    let poll = if poll {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Some(
            polling(
                ctx,
                plan,
                server,
                &poster,
                &tokens[..n],
                pid,
                postmaster,
                seq,
            )
            .await?,
        )
    } else {
        None
    };
    Ok(Level {
        connections: n,
        teams,
        writes_only,
        stream,
        poll,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The polling baseline: each of `tokens`' users reads its first page every
/// [`POLL_EVERY`] (spread evenly over the period, open loop), while the
/// same events are posted.
#[allow(clippy::too_many_arguments)]
async fn polling(
    ctx: &Ctx,
    plan: &Plan,
    server: &Tidings,
    poster: &Poster,
    tokens: &[String],
    pid: u32,
    postmaster: Option<u32>,
    seq: &mut u32,
) -> anyhow::Result<PollPhase> {
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let url = format!("{}?limit=20", server.url("/v1/feed"));
    let every = POLL_EVERY.as_secs_f64() / tokens.len() as f64;
    let window = plan.poll_window;
    let probe = Probe::start(ctx, pid, postmaster).await?;
    let reads = async {
        let start = tokio::time::Instant::now();
        let mut handles = vec![];
        let mut i = 0usize;
        loop {
            let at = start + Duration::from_secs_f64(every * i as f64);
            if at.duration_since(start) >= window {
                break;
            }
            tokio::time::sleep_until(at).await;
            let (client, url, token) = (
                client.clone(),
                url.clone(),
                tokens[i % tokens.len()].clone(),
            );
            handles.push(tokio::spawn(async move {
                let t0 = Instant::now();
                let ok = match client.get(&url).bearer_auth(token).send().await {
                    Ok(resp) => resp.status().is_success() && resp.bytes().await.is_ok(),
                    Err(_) => false,
                };
                (ok, ms(t0.elapsed()))
            }));
            i += 1;
        }
        let mut out = vec![];
        for h in handles {
            out.push(h.await.unwrap_or((false, f64::NAN)));
        }
        out
    };
    let (polls, _) = tokio::join!(reads, poster.run(window, seq));
    let cost = probe.finish(ctx).await?;
    let ok: Vec<f64> = polls.iter().filter(|p| p.0).map(|p| p.1).collect();
    let lat = Latency::of(&ok);
    Ok(PollPhase {
        users: tokens.len(),
        polls: polls.len(),
        poll_errors: polls.len() - ok.len(),
        polls_per_sec: ok.len() as f64 / cost.seconds,
        p50_ms: lat.p50_ms,
        p99_ms: lat.p99_ms,
        p999_ms: lat.p999_ms,
        cost,
    })
}

/// What one stream received: (sequence number, when) per item, and resets.
pub(super) struct Received {
    pub pushes: Vec<(u32, Instant)>,
    pub resets: usize,
}

/// Opens one stream (at most [`OPEN_CONCURRENCY`] opening at once), says
/// whether it opened, then reads it until told to stop.
pub(super) async fn hold_stream(
    client: reqwest::Client,
    url: String,
    token: String,
    gate: Arc<Semaphore>,
    opened: mpsc::UnboundedSender<Result<(), String>>,
    mut stop: watch::Receiver<bool>,
) -> Received {
    let mut out = Received {
        pushes: vec![],
        resets: 0,
    };
    let response = {
        let _permit = gate.acquire_owned().await;
        client.get(&url).bearer_auth(&token).send().await
    };
    let mut response = match response {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            let _ = opened.send(Err(format!("{status}: {body}")));
            return out;
        }
        Err(e) => {
            let _ = opened.send(Err(e.to_string()));
            return out;
        }
    };
    let _ = opened.send(Ok(()));
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            chunk = response.chunk() => match chunk {
                Ok(Some(bytes)) => {
                    let at = Instant::now();
                    buf.extend_from_slice(&bytes);
                    while let Some(end) = super::find(&buf, b"\n\n") {
                        let block = &buf[..end];
                        if super::find(block, b"event: reset").is_some() || super::find(block, b"event:reset").is_some() {
                            out.resets += 1;
                        } else if let Some(s) = super::bench_seq(block) {
                            out.pushes.push((s, at));
                        }
                        buf.drain(..end + 2);
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
    out
}

/// One posted event: when its POST was sent and when it returned 2xx.
#[derive(Clone, Copy)]
struct Posted {
    sent: Instant,
    returned: Option<Instant>,
}

/// Posts events at a fixed rate, open loop (one task per event, so a slow
/// answer never delays the next), round robin over the level's teams.
struct Poster {
    client: reqwest::Client,
    url: String,
    key: String,
    teams: usize,
    per_sec: f64,
}

impl Poster {
    fn new(server: &Tidings, teams: usize, per_sec: f64) -> anyhow::Result<Poster> {
        Ok(Poster {
            client: reqwest::Client::builder().tcp_nodelay(true).build()?,
            url: server.url("/v1/events"),
            key: api_key(TENANT),
            teams,
            per_sec,
        })
    }

    /// Posts for `window`; returns the events (index = seq − the first seq
    /// returned) once every POST has answered.
    async fn run(&self, window: Duration, seq: &mut u32) -> (Vec<Posted>, u32) {
        let first = *seq;
        let count = (window.as_secs_f64() * self.per_sec).round() as u32;
        *seq += count;
        let start = tokio::time::Instant::now();
        let mut handles = Vec::with_capacity(count as usize);
        for i in 0..count {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / self.per_sec))
                .await;
            let s = first + i;
            let body = json!({
                "team_id": team_id(s as usize % self.teams),
                "type": "comment.created",
                "payload": {"bench_seq": s},
            });
            let req = self
                .client
                .post(&self.url)
                .bearer_auth(&self.key)
                .json(&body);
            handles.push(tokio::spawn(async move {
                let sent = Instant::now();
                let ok = matches!(req.send().await, Ok(r) if r.status().is_success());
                Posted {
                    sent,
                    returned: ok.then(Instant::now),
                }
            }));
        }
        let mut posted = Vec::with_capacity(handles.len());
        for h in handles {
            posted.push(h.await.unwrap_or(Posted {
                sent: Instant::now(),
                returned: None,
            }));
        }
        (posted, first)
    }
}

/// CPU and statement counters at the start of a window.
struct Probe {
    started: Instant,
    server_pid: u32,
    server_ticks: u64,
    client_ticks: u64,
    postmaster: Option<u32>,
    db_ticks: HashMap<u32, u64>,
}

impl Probe {
    async fn start(ctx: &Ctx, server_pid: u32, postmaster: Option<u32>) -> anyhow::Result<Probe> {
        crate::pg::reset_statements(&ctx.pool).await?;
        Ok(Probe {
            started: Instant::now(),
            server_pid,
            server_ticks: cpu_ticks(server_pid).unwrap_or(0),
            client_ticks: cpu_ticks(std::process::id()).unwrap_or(0),
            postmaster,
            db_ticks: postmaster.map(cluster_ticks).unwrap_or_default(),
        })
    }

    async fn finish(self, ctx: &Ctx) -> anyhow::Result<Cost> {
        let seconds = self.started.elapsed().as_secs_f64();
        let server = cpu_ticks(self.server_pid).unwrap_or(self.server_ticks);
        let client = cpu_ticks(std::process::id()).unwrap_or(self.client_ticks);
        let db: u64 = self
            .postmaster
            .map(cluster_ticks)
            .unwrap_or_default()
            .iter()
            .map(|(pid, t)| t.saturating_sub(self.db_ticks.get(pid).copied().unwrap_or(0)))
            .sum();
        let (calls, exec_ms): (i64, f64) = sqlx::query_as(
            "SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0)::float8
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = current_database()
               AND query NOT ILIKE '%pg_stat_statements%'",
        )
        .fetch_one(&ctx.pool)
        .await?;
        let top: Vec<Value> = crate::pg::statements(&ctx.pool)
            .await?
            .into_iter()
            .take(8)
            .map(|s| json!({"query": s.query, "calls": s.calls, "mean_ms": s.mean_ms}))
            .collect();
        let pct = |ticks: u64| 100.0 * ticks as f64 / CLK_TCK / seconds;
        Ok(Cost {
            seconds,
            statements_per_sec: calls as f64 / seconds,
            db_exec_ms_per_sec: exec_ms / seconds,
            db_cpu_pct: pct(db),
            server_cpu_pct: pct(server.saturating_sub(self.server_ticks)),
            client_cpu_pct: pct(client.saturating_sub(self.client_ticks)),
            notes_statements: top,
        })
    }
}

/// /proc reports CPU times in USER_HZ, which Linux fixes at 100 for user
/// space on every architecture it runs on.
pub(crate) const CLK_TCK: f64 = 100.0;

/// utime + stime of a process (all its threads), in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields = stat_fields(&stat)?;
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The fields after `(comm)`: state, ppid, …, utime (index 11), stime (12).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// CPU ticks of the postmaster and each of its children, by pid.
pub(crate) fn cluster_ticks(postmaster: u32) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(f) = stat_fields(&stat) else {
            continue;
        };
        let parent = f.get(1).and_then(|p| p.parse::<u32>().ok());
        if pid == postmaster || parent == Some(postmaster) {
            if let (Some(u), Some(s)) = (
                f.get(11).and_then(|x| x.parse::<u64>().ok()),
                f.get(12).and_then(|x| x.parse::<u64>().ok()),
            ) {
                out.insert(pid, u + s);
            }
        }
    }
    out
}

/// The bench cluster's postmaster: the parent of one of its backends (the
/// cluster runs on this machine).
pub(crate) async fn postmaster_pid(ctx: &Ctx) -> anyhow::Result<u32> {
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&ctx.pool)
        .await?;
    let status = std::fs::read_to_string(format!("/proc/{backend}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|p| p.trim().parse().ok())
        .context("no PPid in the backend's status")
}

fn rss_bytes(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context("no VmRSS in /proc/<pid>/status")?;
    Ok(kb * 1024.0)
}

/// Raises this process's soft limit of open files to its hard limit (the
/// servers it starts inherit it); returns the soft limit now in force.
fn raise_open_files_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Some(hard);
    }
    Some(soft)
}

/// Latency and RSS per connection against the number of connections, and
/// the statements per second of streaming, polling and the writes alone.
pub fn plot(path: &Path, figures: &Value) -> anyhow::Result<()> {
    let levels: Vec<&Value> = figures["levels"].as_array().into_iter().flatten().collect();
    let xs = |f: &dyn Fn(&Value) -> Option<f64>| -> Vec<(f64, f64)> {
        levels
            .iter()
            .filter_map(|l| Some((l["connections"].as_f64()?, f(l)?)))
            .collect()
    };
    let ticks: Vec<f64> = levels
        .iter()
        .filter_map(|l| l["connections"].as_f64())
        .collect();
    let lat = |k: &'static str| move |l: &Value| l["stream"]["latency_from_return"][k].as_f64();
    let kib = |k: &'static str| move |l: &Value| Some(l["stream"][k].as_f64()? / 1024.0);
    let stmts = |phase: &'static str| {
        move |l: &Value| {
            let c = if phase == "stream" {
                &l["stream"]["cost"]
            } else if phase == "poll" {
                &l["poll"]["cost"]
            } else {
                &l["writes_only"]
            };
            c["statements_per_sec"].as_f64()
        }
    };
    let rate = figures["events_per_sec"].as_f64().unwrap_or(0.0);
    let team = figures["team_size"].as_f64().unwrap_or(TEAM_SIZE as f64);
    let latency_title = format!(
        "Commit-to-client latency, {:.0} events/s × {team:.0} members",
        rate
    );
    plots::line_charts(
        path,
        vec![
            plots::Chart {
                axes: plots::Axes {
                    title: &latency_title,
                    x_label: "stream connections",
                    y_label: "ms from the POST's return to the client",
                    log_x: true,
                    log_y: true,
                },
                series: vec![
                    plots::Series::line("p50", xs(&lat("p50_ms"))),
                    plots::Series::line("p99", xs(&lat("p99_ms"))),
                    plots::Series::line("p99.9", xs(&lat("p999_ms"))),
                ],
                markers: vec![],
                x_ticks: Some(ticks.clone()),
                legend: Some(plots::SeriesLabelPosition::UpperLeft),
            },
            plots::Chart {
                axes: plots::Axes {
                    title: "Server RSS per stream connection",
                    x_label: "stream connections",
                    y_label: "KiB per connection",
                    log_x: true,
                    log_y: false,
                },
                series: vec![
                    plots::Series::line("idle", xs(&kib("rss_per_connection_idle_bytes"))),
                    plots::Series::line(
                        "under the event load",
                        xs(&kib("rss_per_connection_bytes")),
                    ),
                ],
                markers: vec![],
                x_ticks: Some(ticks.clone()),
                legend: Some(plots::SeriesLabelPosition::UpperRight),
            },
            plots::Chart {
                axes: plots::Axes {
                    title: "Database statements per second",
                    x_label: "users (streaming or polling every 10 s)",
                    y_label: "statements/s (pg_stat_statements)",
                    log_x: true,
                    log_y: true,
                },
                series: vec![
                    plots::Series::line("streams", xs(&stmts("stream"))),
                    plots::Series::points("polling every 10 s", xs(&stmts("poll"))),
                    plots::Series::line("writes only", xs(&stmts("writes"))),
                ],
                markers: vec![],
                x_ticks: Some(ticks),
                legend: Some(plots::SeriesLabelPosition::UpperLeft),
            },
        ],
    )
}
