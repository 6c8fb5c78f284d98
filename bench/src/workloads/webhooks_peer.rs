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
use serde_json::{json, Value};
use sha2::Sha256;
use sqlx::PgPool;
use tokio::process::{Child, Command};

use super::Ctx;
use crate::{
    pg::Target,
    report::{Aim, Ratio, Table, WorkloadResult},
    seed::{api_key, ensure_tenant},
    server::{Launch, Tidings},
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
    secrets: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    received: Arc<Mutex<Received>>,
    _task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct ReceiverState {
    secrets: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    received: Arc<Mutex<Received>>,
}

/// Whether `header` (space-separated `v1,<base64>` signatures) holds the
/// Standard Webhooks signature of `id.timestamp.body` under `key`.
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
            listener::{Acceptor, Listener, TcpListener},
            web::{Data, Path},
            EndpointExt, Route, Server,
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
        let state = ReceiverState {
            secrets: Arc::default(),
            received: Arc::default(),
        };
        let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await?;
        let addr = acceptor
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().copied())
            .context("the receiver has no address")?;
        let app = Route::new()
            .at("/:side/:i", poem::post(receive))
            .data(state.clone());
        let task = tokio::spawn(async move {
            let _ = Server::new_with_acceptor(acceptor).run(app).await;
        });
        Ok(Receiver {
            url: format!("http://{addr}"),
            secrets: state.secrets,
            received: state.received,
            _task: task,
        })
    }

    fn endpoint_url(&self, side: Side, i: usize) -> String {
        format!("{}/{}/{i}", self.url, side.name())
    }

    fn add_secret(&self, side: Side, i: usize, secret: &str) -> anyhow::Result<()> {
        let key = secret_key(secret)?;
        self.secrets
            .lock()
            .unwrap()
            .insert(format!("{}/{i}", side.name()), key);
        Ok(())
    }

    fn verified(&self, side: Side) -> u64 {
        let received = self.received.lock().unwrap();
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
    _redis: Child,
    _server: Child,
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
        let http = reqwest::Client::new();
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
            _redis: redis,
            _server: server,
            base_url,
            token,
            http,
        })
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let response = self
            .http
            .post(format!("{}{path}", self.base_url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("Svix POST {path}: {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(format!("{}{path}", self.base_url))
            .bearer_auth(&self.token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }
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
    ctx: &Ctx,
    svix: &Svix,
    app: &str,
    side: Side,
    pair: usize,
    messages: usize,
) -> anyhow::Result<f64> {
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
}

async fn leg(
    ctx: &Ctx,
    svix: &Svix,
    app: &str,
    receiver: &Receiver,
    side: Side,
    pair: usize,
    messages: usize,
) -> anyhow::Result<Leg> {
    let before = receiver.verified(side);
    let expected = before + (messages * ENDPOINTS) as u64;
    let started = Instant::now();
    let accept_secs = post_all(ctx, svix, app, side, pair, messages).await?;
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
    Ok(Leg {
        accept_per_sec: messages as f64 / accept_secs,
        delivered_per_sec: (messages * ENDPOINTS) as f64 / total,
        trail_secs: total - accept_secs,
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

async fn dead_rows(pool: &PgPool, table: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(sum(n_dead_tup), 0)::int8 FROM pg_stat_user_tables WHERE relname = $1",
    )
    .bind(table)
    .fetch_one(pool)
    .await?)
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
        let created: Value = ctx
            .http
            .post(ctx.server.url("/v1/webhook-endpoints"))
            .bearer_auth(api_key(TENANT))
            .json(&json!({ "url": receiver.endpoint_url(Side::Tidings, i) }))
            .send()
            .await?
            .error_for_status()
            .context("creating a Tidings endpoint")?
            .json()
            .await?;
        let secret = created["secret"]
            .as_str()
            .context("the endpoint's secret")?;
        receiver.add_secret(Side::Tidings, i, secret)?;
    }
    // Svix: the application and its endpoints.
    let app = svix
        .post("/api/v1/app/", json!({"name": "webhooks-peer"}))
        .await?["id"]
        .as_str()
        .context("the Svix application's id")?
        .to_string();
    for i in 0..ENDPOINTS {
        let endpoint = svix
            .post(
                &format!("/api/v1/app/{app}/endpoint/"),
                json!({"url": receiver.endpoint_url(Side::Svix, i), "version": 1}),
            )
            .await?;
        let id = endpoint["id"].as_str().context("the Svix endpoint's id")?;
        let secret = svix
            .get(&format!("/api/v1/app/{app}/endpoint/{id}/secret/"))
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

    let outcome = pairs(ctx, &s, &svix, &app, &receiver, &svix_pool).await;
    worker.stop().await;
    set_autovacuum(&ctx.pool, TIDINGS_TABLES, true).await?;
    set_autovacuum(&svix_pool, &[], true).await?;
    let rows = outcome?;

    let received = receiver.received.lock().unwrap();
    w.figure("bad_signatures", received.bad_signatures);
    w.figure("duplicates", received.duplicates);
    w.figure("unknown_paths", received.unknown_path);
    w.figure(
        "verified",
        json!({
            "tidings": received.verified.get(&Side::Tidings),
            "svix": received.verified.get(&Side::Svix),
        }),
    );
    if received.bad_signatures + received.duplicates + received.unknown_path > 0 {
        bail!(
            "the receiver saw {} bad signatures, {} duplicates, {} requests to unknown paths",
            received.bad_signatures,
            received.duplicates,
            received.unknown_path
        );
    }
    drop(received);

    let mut table = Table::new(
        "Pairs, in order (autovacuum off; the first pairs after a VACUUM ANALYZE)",
        &[
            "pair",
            "vacuumed",
            "Tidings dead delivery rows before",
            "Tidings accepted msgs/s",
            "Svix accepted msgs/s",
            "Tidings delivered/s",
            "Svix delivered/s",
            "Tidings trail s",
            "Svix trail s",
            "÷ end to end",
        ],
    );
    for r in &rows {
        table.row(vec![
            (r.pair + 1).to_string(),
            if r.vacuumed { "yes" } else { "no" }.into(),
            r.dead_before.to_string(),
            format!("{:.0}", r.tidings.accept_per_sec),
            format!("{:.0}", r.svix.accept_per_sec),
            format!("{:.0}", r.tidings.delivered_per_sec),
            format!("{:.0}", r.svix.delivered_per_sec),
            format!(
                "{:.2}",
                r.tidings.delivered_per_sec / r.svix.delivered_per_sec
            ),
        ]);
    }
    w.tables.push(table);
    w.figure(
        "pairs",
        rows.iter()
            .map(|r| {
                json!({
                    "vacuumed": r.vacuumed, "dead_before": r.dead_before,
                    "tidings_accept": r.tidings.accept_per_sec, "svix_accept": r.svix.accept_per_sec,
                    "tidings_delivered": r.tidings.delivered_per_sec,
                    "svix_delivered": r.svix.delivered_per_sec,
                    "tidings_trail_secs": r.tidings.trail_secs,
                    "svix_trail_secs": r.svix.trail_secs,
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

async fn pairs(
    ctx: &Ctx,
    s: &Sizes,
    svix: &Svix,
    app: &str,
    receiver: &Receiver,
    svix_pool: &PgPool,
) -> anyhow::Result<Vec<PairRow>> {
    set_autovacuum(&ctx.pool, TIDINGS_TABLES, false).await?;
    set_autovacuum(svix_pool, &[], false).await?;
    let mut rows = Vec::new();
    let total = s.vacuumed + s.unvacuumed;
    for pair in 0..total {
        let vacuumed = pair < s.vacuumed;
        if vacuumed {
            sqlx::query("VACUUM ANALYZE deliveries, deliveries_sent, alerts")
                .execute(&ctx.pool)
                .await?;
            sqlx::query("VACUUM ANALYZE").execute(svix_pool).await?;
        }
        let dead_before = dead_rows(&ctx.pool, "deliveries").await?;
        let order = if pair % 2 == 0 {
            [Side::Tidings, Side::Svix]
        } else {
            [Side::Svix, Side::Tidings]
        };
        let mut legs = HashMap::new();
        for side in order {
            legs.insert(
                side,
                leg(ctx, svix, app, receiver, side, pair, s.messages).await?,
            );
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
