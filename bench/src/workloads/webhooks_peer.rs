//! Workload `webhooks-peer`: Tidings against the Svix server, end to end,
//! in one run: messages posted to each service's API, signed webhooks
//! received by one receiver that verifies every signature.
//!
//! Each side has 10 endpoints at the receiver (one path each, its own
//! secret): Tidings one tenant whose alerts go to one recipient on the
//! webhook channel (one delivery per endpoint), Svix one application. A
//! **pair** posts [`Sizes::messages`] messages to one side, then to the other
//! (the order alternates), each by [`POSTERS`] concurrent posters, and waits
//! until every delivery arrived. Per side: accepted messages/s (first POST to
//! the last answer) and delivered webhooks/s end to end (first POST to the last
//! arrival). Checked: every delivery arrived once, every signature verifies.
//!
//! **Dead rows.** Autovacuum is off for both services' tables during the run
//! (each `ALTER TABLE … SET (autovacuum_enabled = off)`, reset after), as
//! when it is held back by a long transaction or busy elsewhere. The first
//! [`Sizes::vacuumed`] pairs VACUUM ANALYZE both databases before they run;
//! the rest run on what the earlier pairs left, Tidings' `deliveries` gaining
//! about a dead row per delivery. The aim is Tidings ≥ 2× Svix end to end in
//! every pair, vacuumed or not.
//!
//! The Svix server (a build of svix-webhooks' `svix-server`, made by
//! `bench/tools/svix-build`, named by `SVIX_BIN`) runs as Svix deploys it:
//! its API and worker in one process, the Redis queue (a private
//! `redis-server` without persistence), its own database on the bench
//! PostgreSQL, Standard Webhooks headers (`whitelabel_headers`), loopback
//! allowed. Without `SVIX_BIN` the workload is skipped.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    process::Stdio,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use base64::{engine::general_purpose::STANDARD, Engine};
use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{json, Value};
use sha2::Sha256;
use sqlx::PgPool;
use tokio::process::{Child, Command};

use super::{
    create_endpoint,
    stream::{cluster_ticks, cpu_ticks, postmaster_pid, CLK_TCK},
    Ctx,
};
use crate::{
    pg::{dead_tuples, reset_statements, Target},
    report::{Aim, Ratio, Table, WorkloadResult},
    seed::{api_key, ensure_tenant},
    server::{serve_on_loopback, Launch, Tidings},
    tier::TierName,
};

/// The workload's tenant (the seed never creates it).
const TENANT: i64 = 902;
const ENDPOINTS: usize = 10;
const POSTERS: usize = 16;
/// The aim: Tidings delivers at least twice Svix's rate end to end, in every pair.
const AIM: f64 = 2.0;
/// Svix's database, beside the bench's on the bench PostgreSQL.
const SVIX_DATABASE: &str = "svix_peer";

struct Sizes {
    messages: usize,
    /// Pairs run after a VACUUM ANALYZE of both databases.
    vacuumed: usize,
    /// Pairs run on the dead rows the earlier pairs left.
    unvacuumed: usize,
}

fn sizes(tier: TierName) -> Sizes {
    match tier {
        TierName::S => Sizes {
            messages: 100,
            vacuumed: 1,
            unvacuumed: 2,
        },
        TierName::M => Sizes {
            messages: 500,
            vacuumed: 5,
            unvacuumed: 10,
        },
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Side {
    Tidings,
    Svix,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Tidings => "tidings",
            Side::Svix => "svix",
        }
    }
}

/// What the receiver saw, per side.
#[derive(Default)]
struct Received {
    verified: HashMap<Side, u64>,
    bad_signatures: u64,
    duplicates: u64,
    unknown_path: u64,
    seen: HashSet<(String, String)>,
}

/// The receiver: `/{side}/{i}` is endpoint `i` of a side, with its secret.
struct Receiver {
    url: String,
    state: ReceiverState,
    _task: tokio::task::JoinHandle<()>,
}

#[derive(Clone, Default)]
struct ReceiverState {
    secrets: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    received: Arc<Mutex<Received>>,
}

/// Whether `header` (space-separated `v1,<base64>` signatures) holds the
/// Standard Webhooks signature of `id.timestamp.body` under `key`. Written
/// apart from the server's signer on purpose: a receiver that shared it
/// could not catch its faults.
fn verifies(key: &[u8], id: &str, timestamp: &str, body: &[u8], header: &str) -> bool {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected = STANDARD.encode(mac.finalize().into_bytes());
    header
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == expected)
}

/// A `whsec_` secret's key bytes.
fn secret_key(secret: &str) -> anyhow::Result<Vec<u8>> {
    let b64 = secret
        .strip_prefix("whsec_")
        .with_context(|| format!("not a whsec_ secret: {secret}"))?;
    Ok(STANDARD.decode(b64)?)
}

impl Receiver {
    async fn start() -> anyhow::Result<Receiver> {
        use poem::{
            handler,
            http::{HeaderMap, StatusCode},
            web::{Data, Path},
            EndpointExt, Route,
        };
        #[handler]
        async fn receive(
            state: Data<&ReceiverState>,
            Path((side, i)): Path<(String, String)>,
            headers: &HeaderMap,
            body: poem::Body,
        ) -> StatusCode {
            let body = body.into_bytes().await.unwrap_or_default();
            let header = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            let (id, timestamp, signature) = (
                header("webhook-id"),
                header("webhook-timestamp"),
                header("webhook-signature"),
            );
            let path = format!("{side}/{i}");
            let key = state.secrets.lock().unwrap().get(&path).cloned();
            let mut received = state.received.lock().unwrap();
            let side = match side.as_str() {
                "tidings" => Side::Tidings,
                "svix" => Side::Svix,
                _ => {
                    received.unknown_path += 1;
                    return StatusCode::NOT_FOUND;
                }
            };
            match key {
                Some(key) if verifies(&key, &id, &timestamp, &body, &signature) => {
                    if received.seen.insert((path, id)) {
                        *received.verified.entry(side).or_default() += 1;
                    } else {
                        received.duplicates += 1;
                    }
                }
                Some(_) => received.bad_signatures += 1,
                None => received.unknown_path += 1,
            }
            StatusCode::NO_CONTENT
        }
        let state = ReceiverState::default();
        let app = Route::new()
            .at("/:side/:i", poem::post(receive))
            .data(state.clone());
        let (addr, task) = serve_on_loopback(app).await?;
        Ok(Receiver {
            url: format!("http://{addr}"),
            state,
            _task: task,
        })
    }

    fn endpoint_url(&self, side: Side, i: usize) -> String {
        format!("{}/{}/{i}", self.url, side.name())
    }

    fn add_secret(&self, side: Side, i: usize, secret: &str) -> anyhow::Result<()> {
        let key = secret_key(secret)?;
        self.state
            .secrets
            .lock()
            .unwrap()
            .insert(format!("{}/{i}", side.name()), key);
        Ok(())
    }

    fn verified(&self, side: Side) -> u64 {
        let received = self.state.received.lock().unwrap();
        received.verified.get(&side).copied().unwrap_or(0)
    }
}

fn spawn_logged(
    bin: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
    log: &std::path::Path,
) -> anyhow::Result<Child> {
    // kill_on_drop: the process ends with the workload, whatever its outcome.
    let log = std::fs::File::create(log)?;
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

/// The Svix server with its Redis, and an API token.
struct Svix {
    redis: Child,
    server: Child,
    base_url: String,
    token: String,
    http: reqwest::Client,
}

impl Svix {
    async fn start(ctx: &Ctx, bin: &std::path::Path) -> anyhow::Result<Svix> {
        // Ports of this checkout's slot (the bench PostgreSQL's port + 1, + 2;
        // the replicas workload takes + 4 to + 7).
        let redis_port = ctx.target.port + 1;
        let svix_port = ctx.target.port + 2;
        let redis = spawn_logged(
            std::path::Path::new("redis-server"),
            &[
                "--port",
                &redis_port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            &[],
            &ctx.work_dir.join("webhooks-peer-redis.log"),
        )
        .context("redis-server (Debian package redis-server) is needed by the Svix server")?;
        let svix_db = Target::new(&ctx.target.admin_url, SVIX_DATABASE)?;
        svix_db.recreate().await?;
        let env = vec![
            ("SVIX_JWT_SECRET", "webhooks-peer-not-a-secret".to_string()),
            ("SVIX_DB_DSN", svix_db.url.clone()),
            ("SVIX_REDIS_DSN", format!("redis://127.0.0.1:{redis_port}")),
            ("SVIX_QUEUE_TYPE", "redis".into()),
            ("SVIX_CACHE_TYPE", "redis".into()),
            ("SVIX_LISTEN_ADDRESS", format!("127.0.0.1:{svix_port}")),
            ("SVIX_WHITELIST_SUBNETS", "[\"127.0.0.0/8\"]".into()),
            ("SVIX_WHITELABEL_HEADERS", "true".into()),
            // Per-request logs would measure the terminal (Tidings runs at
            // warn too); Svix's own setting goes no lower than info.
            ("RUST_LOG", "warn".into()),
        ];
        let migrate = Command::new(bin)
            .arg("migrate")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .await?;
        if !migrate.status.success() {
            bail!(
                "svix-server migrate failed: {}",
                String::from_utf8_lossy(&migrate.stderr)
            );
        }
        let jwt = Command::new(bin)
            .args(["jwt", "generate"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .await?;
        let jwt_out = String::from_utf8_lossy(&jwt.stdout);
        let token = jwt_out
            .split_whitespace()
            .find(|w| w.matches('.').count() == 2)
            .with_context(|| format!("no token in svix-server jwt generate's output: {jwt_out}"))?
            .to_string();
        let server = spawn_logged(bin, &[], &env, &ctx.work_dir.join("webhooks-peer-svix.log"))?;
        let base_url = format!("http://127.0.0.1:{svix_port}");
        let http = ctx.http.clone();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = http
                .get(format!("{base_url}/api/v1/health/"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                break;
            }
            if Instant::now() > deadline {
                bail!("the Svix server did not answer its health check within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(Svix {
            redis,
            server,
            base_url,
            token,
            http,
        })
    }

    /// One call of Svix's API; its JSON answer.
    async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base_url))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        anyhow::ensure!(
            status.is_success(),
            "Svix {method} {path}: {status}: {text}"
        );
        Ok(serde_json::from_str(&text)?)
    }
}

/// What every leg of the run uses: both services, the receiver, and the
/// processes whose CPU is counted.
struct Peers<'a> {
    ctx: &'a Ctx,
    svix: &'a Svix,
    /// The Svix application the messages go to.
    app: &'a str,
    receiver: &'a Receiver,
    processes: &'a Processes,
}

/// The payload both sides carry (a few hundred bytes, as an invoice event).
fn payload(seq: usize) -> Value {
    json!({
        "bench_seq": seq,
        "invoice": {"id": format!("in_{seq:08}"), "amount_due": 4200, "currency": "eur",
                    "customer": "cus_webhooks_peer", "status": "paid",
                    "lines": [{"description": "Pro plan", "amount": 4200, "quantity": 1}]},
    })
}

/// Posts `messages` to one side with [`POSTERS`] posters; the seconds until
/// the last answer.
async fn post_all(
    peers: &Peers<'_>,
    side: Side,
    pair: usize,
    messages: usize,
) -> anyhow::Result<f64> {
    let (ctx, svix, app) = (peers.ctx, peers.svix, peers.app);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut posters = Vec::new();
    for _ in 0..POSTERS {
        let next = next.clone();
        let http = ctx.http.clone();
        let tidings_url = ctx.server.url("/v1/alerts");
        let svix_url = format!("{}/api/v1/app/{app}/msg/", svix.base_url);
        let svix_token = svix.token.clone();
        posters.push(tokio::spawn(async move {
            loop {
                let seq = next.fetch_add(1, Ordering::Relaxed) as usize;
                if seq >= messages {
                    return anyhow::Ok(());
                }
                let request = match side {
                    Side::Tidings => {
                        http.post(&tidings_url)
                            .bearer_auth(api_key(TENANT))
                            .json(&json!({
                                "event_type": "invoice.paid",
                                "entity_id": format!("peer-{pair}-{seq}"),
                                "recipients": ["webhooks-peer"],
                                "channels": ["webhook"],
                                "payload": payload(seq),
                            }))
                    }
                    Side::Svix => http.post(&svix_url).bearer_auth(&svix_token).json(&json!({
                        "eventType": "invoice.paid",
                        "payload": payload(seq),
                    })),
                };
                let response = request.send().await?;
                let status = response.status();
                if !status.is_success() {
                    bail!(
                        "{} refused a message: {status}: {}",
                        side.name(),
                        response.text().await?
                    );
                }
            }
        }));
    }
    for poster in posters {
        poster.await??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// One side's part of a pair.
struct Leg {
    accept_per_sec: f64,
    delivered_per_sec: f64,
    /// From the last message accepted to the last delivery's arrival.
    trail_secs: f64,
    /// From the last arrival until the side's processes and the database
    /// were idle (recording attempts, queue upkeep).
    after_secs: f64,
    /// CPU of the side's own processes, and of the database, per delivery,
    /// from the first POST until idle again.
    cpu_us: f64,
    db_cpu_us: f64,
    /// Tidings' legs: the worker's claim and completion as
    /// pg_stat_statements saw them in the leg.
    statements: Option<Statements>,
}

/// A statement's counters over one leg.
#[derive(Default, Clone, Copy)]
struct StatementLeg {
    calls: i64,
    total_ms: f64,
    blocks: i64,
}

impl StatementLeg {
    fn mean_ms(&self) -> f64 {
        self.total_ms / self.calls.max(1) as f64
    }
    fn blocks_per_call(&self) -> f64 {
        self.blocks as f64 / self.calls.max(1) as f64
    }
}

#[derive(Default, Clone, Copy)]
struct Statements {
    claim: StatementLeg,
    completion: StatementLeg,
    /// Every other statement of the bench database.
    other_ms: f64,
}

/// The bench database's statements since the last reset, by role.
async fn tidings_statements(pool: &PgPool) -> anyhow::Result<Statements> {
    let rows: Vec<(String, i64, f64, i64)> = sqlx::query_as(
        "SELECT query, calls, total_exec_time, shared_blks_hit + shared_blks_read
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = current_database() AND query NOT ILIKE '%pg_stat_statements%'",
    )
    .fetch_all(pool)
    .await?;
    let mut out = Statements::default();
    for (query, calls, total_ms, blocks) in rows {
        let slot = if query.contains("open_tenants") {
            &mut out.claim
        } else if query.contains("INSERT INTO deliveries_sent") {
            &mut out.completion
        } else {
            out.other_ms += total_ms;
            continue;
        };
        slot.calls += calls;
        slot.total_ms += total_ms;
        slot.blocks += blocks;
    }
    Ok(out)
}

/// The processes whose CPU is counted: each side's own, and the database's.
struct Processes {
    tidings: Vec<u32>,
    svix: Vec<u32>,
    postmaster: Option<u32>,
}

impl Processes {
    fn side(&self, side: Side) -> &[u32] {
        match side {
            Side::Tidings => &self.tidings,
            Side::Svix => &self.svix,
        }
    }

    fn ticks(pids: &[u32]) -> u64 {
        pids.iter().filter_map(|&pid| cpu_ticks(pid)).sum()
    }

    fn db_ticks(&self) -> u64 {
        self.postmaster
            .map(|p| cluster_ticks(p).values().sum())
            .unwrap_or(0)
    }

    fn all_ticks(&self) -> u64 {
        Self::ticks(&self.tidings) + Self::ticks(&self.svix) + self.db_ticks()
    }

    /// Waits until neither side nor the database works: at most one tick
    /// (10 ms) of CPU in each of two windows of 300 ms in a row, for at most
    /// 10 s. What a side does after its last delivery arrived (recording
    /// attempts, queue upkeep) is its own cost, not the next leg's.
    /// Returns when the quiet began (to a window, 300 ms).
    async fn settle(&self) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut quiet_since = None;
        let mut quiet = 0;
        let mut last = self.all_ticks();
        while quiet < 2 && Instant::now() < deadline {
            let window = Instant::now();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = self.all_ticks();
            if now.saturating_sub(last) <= 1 {
                quiet += 1;
                quiet_since.get_or_insert(window);
            } else {
                quiet = 0;
                quiet_since = None;
            }
            last = now;
        }
        quiet_since.unwrap_or_else(Instant::now)
    }
}

async fn leg(peers: &Peers<'_>, side: Side, pair: usize, messages: usize) -> anyhow::Result<Leg> {
    let (ctx, receiver, processes) = (peers.ctx, peers.receiver, peers.processes);
    let deliveries = (messages * ENDPOINTS) as f64;
    let before = receiver.verified(side);
    let expected = before + (messages * ENDPOINTS) as u64;
    if side == Side::Tidings {
        reset_statements(&ctx.pool).await?;
    }
    let (own_before, db_before) = (Processes::ticks(processes.side(side)), processes.db_ticks());
    let started = Instant::now();
    let accept_secs = post_all(peers, side, pair, messages).await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while receiver.verified(side) < expected {
        if Instant::now() > deadline {
            bail!(
                "{}: {} of {} deliveries verified within 300 s",
                side.name(),
                receiver.verified(side) - before,
                messages * ENDPOINTS
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let total = started.elapsed().as_secs_f64();
    let after_secs = (processes.settle().await - started)
        .as_secs_f64()
        .max(total)
        - total;
    let per_delivery = |ticks: u64| ticks as f64 / CLK_TCK * 1e6 / deliveries;
    Ok(Leg {
        accept_per_sec: messages as f64 / accept_secs,
        delivered_per_sec: deliveries / total,
        trail_secs: total - accept_secs,
        after_secs,
        cpu_us: per_delivery(Processes::ticks(processes.side(side)).saturating_sub(own_before)),
        db_cpu_us: per_delivery(processes.db_ticks().saturating_sub(db_before)),
        statements: match side {
            Side::Tidings => Some(tidings_statements(&ctx.pool).await?),
            Side::Svix => None,
        },
    })
}

/// Tidings' outbox tables, the ones a drain leaves dead rows in.
const TIDINGS_TABLES: &[&str] = &["deliveries", "deliveries_sent", "alerts"];

/// Autovacuum on or off for `tables` (every table of the database when none).
async fn set_autovacuum(pool: &PgPool, tables: &[&str], on: bool) -> anyhow::Result<()> {
    let tables: Vec<String> = if tables.is_empty() {
        sqlx::query_scalar(
            "SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables
             WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
        )
        .fetch_all(pool)
        .await?
    } else {
        tables.iter().map(|t| t.to_string()).collect()
    };
    for table in tables {
        let sql = if on {
            format!("ALTER TABLE {table} RESET (autovacuum_enabled)")
        } else {
            format!("ALTER TABLE {table} SET (autovacuum_enabled = off)")
        };
        sqlx::query(&sql).execute(pool).await?;
    }
    Ok(())
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let Some(svix_bin) = std::env::var_os("SVIX_BIN").map(PathBuf::from) else {
        return Ok(WorkloadResult::skipped(
            "webhooks-peer",
            "SVIX_BIN is not set (bench/tools/svix-build builds the Svix server and names it)",
        ));
    };
    let mut w = WorkloadResult::new("webhooks-peer");
    let s = sizes(ctx.tier.name);
    let receiver = Receiver::start().await?;
    let svix = Svix::start(ctx, &svix_bin).await?;
    let svix_pool = Target::new(&ctx.target.admin_url, SVIX_DATABASE)?
        .pool(2)
        .await?;

    // Tidings: the tenant, its endpoints, one worker as deployed.
    ensure_tenant(&ctx.pool, TENANT, "bench-webhooks-peer").await?;
    for i in 0..ENDPOINTS {
        let (_, secret) = create_endpoint(
            &ctx.http,
            &ctx.server.base_url,
            &api_key(TENANT),
            &receiver.endpoint_url(Side::Tidings, i),
        )
        .await?;
        receiver.add_secret(Side::Tidings, i, &secret)?;
    }
    // Svix: the application and its endpoints.
    let app = svix
        .api(
            Method::POST,
            "/api/v1/app/",
            Some(json!({"name": "webhooks-peer"})),
        )
        .await?["id"]
        .as_str()
        .context("the Svix application's id")?
        .to_string();
    for i in 0..ENDPOINTS {
        let endpoint = svix
            .api(
                Method::POST,
                &format!("/api/v1/app/{app}/endpoint/"),
                Some(json!({"url": receiver.endpoint_url(Side::Svix, i), "version": 1})),
            )
            .await?;
        let id = endpoint["id"].as_str().context("the Svix endpoint's id")?;
        let secret = svix
            .api(
                Method::GET,
                &format!("/api/v1/app/{app}/endpoint/{id}/secret/"),
                None,
            )
            .await?;
        let key = secret["key"].as_str().context("the Svix endpoint's key")?;
        receiver.add_secret(Side::Svix, i, key)?;
    }
    let worker = Tidings::worker(Launch {
        bin: &ctx.bin,
        database_url: &ctx.target.url,
        log_dir: &ctx.work_dir,
        name: "webhooks-peer-worker",
        env: vec![("TIDINGS_WEBHOOK_ALLOW_PRIVATE".into(), "loopback".into())],
    })
    .await?;

    let processes = Processes {
        tidings: [ctx.server.pid(), worker.pid()]
            .into_iter()
            .flatten()
            .collect(),
        svix: [svix.server.id(), svix.redis.id()]
            .into_iter()
            .flatten()
            .collect(),
        postmaster: postmaster_pid(ctx).await.ok(),
    };
    let peers = Peers {
        ctx,
        svix: &svix,
        app: &app,
        receiver: &receiver,
        processes: &processes,
    };
    let outcome = pairs(&peers, &s, &svix_pool).await;
    worker.stop().await;
    set_autovacuum(&ctx.pool, TIDINGS_TABLES, true).await?;
    set_autovacuum(&svix_pool, &[], true).await?;
    let rows = outcome?;

    let received = receiver.state.received.lock().unwrap();
    if received.bad_signatures + received.duplicates + received.unknown_path > 0 {
        bail!(
            "the receiver saw {} bad signatures, {} duplicates, {} requests to unknown paths",
            received.bad_signatures,
            received.duplicates,
            received.unknown_path
        );
    }
    let verified = |side| received.verified.get(&side).copied().unwrap_or(0);
    w.figure("verified_tidings", verified(Side::Tidings));
    w.figure("verified_svix", verified(Side::Svix));
    w.notes.push(format!(
        "Checked: {} Tidings and {} Svix deliveries arrived, each once, each signature verified.",
        verified(Side::Tidings),
        verified(Side::Svix)
    ));
    drop(received);

    let mut rates = Table::new(
        "Pairs, in order (autovacuum off; the first pairs after a VACUUM ANALYZE): rates",
        &[
            "pair",
            "vacuumed",
            "Tidings dead delivery rows before",
            "accepted msgs/s: Tidings",
            "Svix",
            "delivered/s: Tidings",
            "Svix",
            "÷ end to end",
        ],
    );
    let mut costs = Table::new(
        "The same pairs: last accept to last arrival (trail), last arrival to idle (after), CPU per delivery from the first POST to idle",
        &[
            "pair",
            "trail s: Tidings",
            "Svix",
            "after s: Tidings",
            "Svix",
            "own CPU µs: Tidings (server + worker)",
            "Svix (server + Redis)",
            "database CPU µs: Tidings",
            "Svix",
        ],
    );
    for r in &rows {
        let (t, x) = (&r.tidings, &r.svix);
        rates.row(vec![
            (r.pair + 1).to_string(),
            if r.vacuumed { "yes" } else { "no" }.into(),
            r.dead_before.to_string(),
            format!("{:.0}", t.accept_per_sec),
            format!("{:.0}", x.accept_per_sec),
            format!("{:.0}", t.delivered_per_sec),
            format!("{:.0}", x.delivered_per_sec),
            format!("{:.2}", t.delivered_per_sec / x.delivered_per_sec),
        ]);
        costs.row(vec![
            (r.pair + 1).to_string(),
            format!("{:.2}", t.trail_secs),
            format!("{:.2}", x.trail_secs),
            format!("{:.2}", t.after_secs),
            format!("{:.2}", x.after_secs),
            format!("{:.0}", t.cpu_us),
            format!("{:.0}", x.cpu_us),
            format!("{:.0}", t.db_cpu_us),
            format!("{:.0}", x.db_cpu_us),
        ]);
    }
    let mut statements = Table::new(
        "Tidings' legs: the worker's claim and completion (pg_stat_statements, reset before each leg)",
        &[
            "pair",
            "claims",
            "ms per claim",
            "buffers per claim",
            "completions",
            "ms per completion",
            "buffers per completion",
            "other statements, ms in all",
        ],
    );
    for r in &rows {
        let st = r.tidings.statements.unwrap_or_default();
        statements.row(vec![
            (r.pair + 1).to_string(),
            st.claim.calls.to_string(),
            format!("{:.2}", st.claim.mean_ms()),
            format!("{:.0}", st.claim.blocks_per_call()),
            st.completion.calls.to_string(),
            format!("{:.2}", st.completion.mean_ms()),
            format!("{:.0}", st.completion.blocks_per_call()),
            format!("{:.0}", st.other_ms),
        ]);
    }
    w.tables.push(rates);
    w.tables.push(costs);
    w.tables.push(statements);
    let leg_json = |l: &Leg| {
        let mut leg = json!({
            "accept_per_sec": l.accept_per_sec, "delivered_per_sec": l.delivered_per_sec,
            "trail_secs": l.trail_secs, "after_secs": l.after_secs,
            "cpu_us": l.cpu_us, "db_cpu_us": l.db_cpu_us,
        });
        if let Some(st) = l.statements {
            leg["claims"] = json!(st.claim.calls);
            leg["claim_mean_ms"] = json!(st.claim.mean_ms());
            leg["completions"] = json!(st.completion.calls);
            leg["completion_mean_ms"] = json!(st.completion.mean_ms());
        }
        leg
    };
    w.figure(
        "pairs",
        rows.iter()
            .map(|r| {
                json!({
                    "vacuumed": r.vacuumed, "dead_before": r.dead_before,
                    "tidings": leg_json(&r.tidings), "svix": leg_json(&r.svix),
                })
            })
            .collect::<Vec<_>>(),
    );
    for (vacuumed, label) in [(true, "vacuumed"), (false, "dead rows left")] {
        let chosen: Vec<&PairRow> = rows.iter().filter(|r| r.vacuumed == vacuumed).collect();
        let max_dead = chosen.iter().map(|r| r.dead_before).max().unwrap_or(0);
        let label = if vacuumed {
            label.to_string()
        } else {
            format!("{label} (up to {max_dead})")
        };
        let of = |f: fn(&PairRow) -> f64| chosen.iter().map(|r| f(r)).collect::<Vec<f64>>();
        w.ratios.push(Ratio::new(
            &format!("Tidings ÷ Svix webhooks end to end, {label}"),
            "Tidings deliveries/s, first POST to last verified arrival",
            "Svix deliveries/s, same messages and endpoints, same pair",
            Some(AIM),
            &of(|r| r.tidings.delivered_per_sec),
            &of(|r| r.svix.delivered_per_sec),
        ));
        w.ratios.push(Ratio::new(
            &format!("Tidings ÷ Svix messages accepted, {label}"),
            "Tidings alerts accepted/s",
            "Svix messages accepted/s",
            None,
            &of(|r| r.tidings.accept_per_sec),
            &of(|r| r.svix.accept_per_sec),
        ));
    }
    let worst = rows
        .iter()
        .map(|r| r.tidings.delivered_per_sec / r.svix.delivered_per_sec)
        .fold(f64::INFINITY, f64::min);
    w.aims.push(Aim::at_least(
        "Tidings ÷ Svix end to end, the worst pair",
        worst,
        "×",
        AIM,
    ));
    Ok(w)
}

struct PairRow {
    pair: usize,
    vacuumed: bool,
    dead_before: i64,
    tidings: Leg,
    svix: Leg,
}

async fn pairs(peers: &Peers<'_>, s: &Sizes, svix_pool: &PgPool) -> anyhow::Result<Vec<PairRow>> {
    let (ctx, processes) = (peers.ctx, peers.processes);
    set_autovacuum(&ctx.pool, TIDINGS_TABLES, false).await?;
    set_autovacuum(svix_pool, &[], false).await?;
    let mut rows = Vec::new();
    let total = s.vacuumed + s.unvacuumed;
    for pair in 0..total {
        let vacuumed = pair < s.vacuumed;
        if vacuumed {
            sqlx::query(&format!("VACUUM ANALYZE {}", TIDINGS_TABLES.join(", ")))
                .execute(&ctx.pool)
                .await?;
            sqlx::query("VACUUM ANALYZE").execute(svix_pool).await?;
        }
        processes.settle().await;
        let (_, dead_before) = dead_tuples(&ctx.pool, "deliveries").await?;
        let order = if pair % 2 == 0 {
            [Side::Tidings, Side::Svix]
        } else {
            [Side::Svix, Side::Tidings]
        };
        let mut legs = HashMap::new();
        for side in order {
            legs.insert(side, leg(peers, side, pair, s.messages).await?);
        }
        let row = PairRow {
            pair,
            vacuumed,
            dead_before,
            tidings: legs.remove(&Side::Tidings).expect("ran"),
            svix: legs.remove(&Side::Svix).expect("ran"),
        };
        eprintln!(
            "  webhooks-peer pair {}/{total}: dead rows {}, delivered/s Tidings {:.0}, Svix {:.0}",
            pair + 1,
            row.dead_before,
            row.tidings.delivered_per_sec,
            row.svix.delivered_per_sec
        );
        rows.push(row);
    }
    Ok(rows)
}
