//! The workloads. Each returns a `WorkloadResult`; a failure of one is recorded
//! and the others still run.

pub mod drain;
pub mod drain_peer;
pub mod failover;
pub mod fallback;
pub mod fanout;
pub mod feed;
pub mod feed_cold;
pub mod health;
pub mod ingest;
pub mod isolation;
pub mod mixed;
pub mod notify;
pub mod replicas;
pub mod soak;
pub mod stream;
pub mod webhooks_peer;

use std::path::{Path, PathBuf};

use anyhow::Context;
use sqlx::PgPool;

use crate::{
    loadgen::{HttpRequest, Load, Measure, Tools},
    pg::Target,
    seed::Seeded,
    server::{self, Launch, Tidings},
    sqlfile::SqlFile,
    tier::Tier,
};

/// Repetitions of a before/after comparison (`--tidings-before-bin`): its
/// ratio is the point of such a run, and the machine is shared.
pub const BEFORE_AFTER_REPS: usize = 5;

/// One request measured on this build's server and on the before build's.
pub struct Pair {
    pub name: String,
    pub after: Vec<Measure>,
    pub before: Vec<Measure>,
}

/// Serves `bin` (the before build) beside the main server, same database and
/// environment, and measures each of `names` on both, [`BEFORE_AFTER_REPS`]
/// times, alternating which server goes first so that neither always follows
/// the other's load. `measure(i, base_url)` measures request `i` against the
/// server at `base_url`.
pub async fn before_and_after<F, Fut>(
    ctx: &Ctx,
    bin: &Path,
    workload: &str,
    names: &[String],
    measure: F,
) -> anyhow::Result<Vec<Pair>>
where
    F: FnMut(usize, String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Measure>>,
{
    let before = serve_before(ctx, bin, workload).await?;
    let outcome = measure_pairs(ctx, &before, workload, names, measure).await;
    before.stop().await;
    outcome
}

/// Serves `bin`, the before build, beside the main server: same database,
/// same environment.
pub async fn serve_before(ctx: &Ctx, bin: &Path, workload: &str) -> anyhow::Result<Tidings> {
    eprintln!("  {workload}: {} serves as the before", bin.display());
    Tidings::serve(Launch {
        bin,
        database_url: &ctx.target.url,
        log_dir: &ctx.work_dir,
        name: &format!("serve-before-{workload}"),
        env: server::main_server_env(),
    })
    .await
}

async fn measure_pairs<F, Fut>(
    ctx: &Ctx,
    before: &Tidings,
    workload: &str,
    names: &[String],
    mut measure: F,
) -> anyhow::Result<Vec<Pair>>
where
    F: FnMut(usize, String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Measure>>,
{
    let mut pairs: Vec<Pair> = names
        .iter()
        .map(|name| Pair {
            name: name.clone(),
            after: vec![],
            before: vec![],
        })
        .collect();
    let (this, earlier) = (&ctx.server.base_url, &before.base_url);
    for rep in 0..BEFORE_AFTER_REPS {
        eprintln!(
            "  {workload} before/after rep {}/{BEFORE_AFTER_REPS}",
            rep + 1
        );
        for (i, pair) in pairs.iter_mut().enumerate() {
            if rep % 2 == 0 {
                pair.before.push(measure(i, earlier.clone()).await?);
                pair.after.push(measure(i, this.clone()).await?);
            } else {
                pair.after.push(measure(i, this.clone()).await?);
                pair.before.push(measure(i, earlier.clone()).await?);
            }
        }
    }
    Ok(pairs)
}

pub struct Ctx {
    pub tier: Tier,
    pub target: Target,
    pub pool: PgPool,
    pub tools: Tools,
    pub server: Tidings,
    pub bin: PathBuf,
    /// An earlier commit's `tidings`, for the drain's same-run before.
    pub before_bin: Option<PathBuf>,
    pub repo: PathBuf,
    /// Scratch: generated pgbench/wrk scripts, body files, logs.
    pub work_dir: PathBuf,
    /// Where PNGs go, and the stem their names start with.
    pub plot_dir: PathBuf,
    pub plot_stem: String,
    pub seeded: Seeded,
    pub http: reqwest::Client,
    /// The no-op webhook sink (answers 204 at once).
    pub sink_url: String,
    pub sink_count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Ctx {
    pub fn sink_received(&self) -> u64 {
        self.sink_count.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A webhook endpoint of bench tenant `tenant` pointing at the no-op sink.
    pub async fn sink_endpoint(&self, tenant: i64) -> anyhow::Result<uuid::Uuid> {
        create_sink_endpoint(
            &self.http,
            &self.server.base_url,
            &crate::seed::api_key(tenant),
            &self.sink_url,
        )
        .await
    }

    pub fn plot_path(&self, name: &str) -> (PathBuf, String) {
        let file = format!("{}-{name}.png", self.plot_stem);
        (self.plot_dir.join(&file), file)
    }

    /// Writes a pgbench script rendered from bench/sql/<name>.sql.
    pub fn pgbench_script(
        &self,
        name: &str,
        prefix: &[&str],
        suffix: &[&str],
    ) -> anyhow::Result<PathBuf> {
        let file = SqlFile::load(&self.repo.join("bench/sql").join(format!("{name}.sql")))?;
        let path = self.work_dir.join(format!("{name}.pgbench.sql"));
        std::fs::write(&path, file.pgbench_script(prefix, suffix))?;
        Ok(path)
    }

    pub async fn max(&self, req: &HttpRequest) -> anyhow::Result<Measure> {
        self.tools
            .oha(
                req,
                Load::Max {
                    connections: self.tier.connections,
                },
                self.tier.measure,
            )
            .await
    }

    /// wrk, closed loop, with a generated Lua script.
    pub async fn wrk(&self, script: &Path) -> anyhow::Result<Measure> {
        self.tools
            .wrk(
                &self.server.base_url,
                script,
                self.tier.connections,
                self.tier.measure,
            )
            .await
    }

    /// Open loop at `per_sec` (corrected for coordinated omission).
    pub async fn at_rate(&self, req: &HttpRequest, per_sec: f64) -> anyhow::Result<Measure> {
        self.tools
            .oha(
                req,
                Load::Rate {
                    // Enough connections that the rate, not the pool, sets the pace.
                    connections: (self.tier.connections * 4).max(16),
                    per_sec,
                },
                self.tier.latency_measure,
            )
            .await
    }

    pub async fn pgbench(
        &self,
        script: &Path,
        vars: &[(String, String)],
    ) -> anyhow::Result<Measure> {
        self.tools
            .pgbench(
                &self.target,
                script,
                self.tier.connections,
                self.tier.measure,
                vars,
            )
            .await
    }

    /// `pgbench` whose sessions find `schema`'s tables first (then public's).
    pub async fn pgbench_in_schema(
        &self,
        script: &Path,
        vars: &[(String, String)],
        schema: &str,
    ) -> anyhow::Result<Measure> {
        self.tools
            .pgbench_with_options(
                &self.target,
                script,
                self.tier.connections,
                self.tier.measure,
                vars,
                Some(&format!("-c search_path={schema},public")),
            )
            .await
    }

    /// Does the running server answer this path (anything but 404/405)?
    pub async fn route_exists(&self, method: reqwest::Method, path: &str) -> anyhow::Result<bool> {
        let status = self
            .http
            .request(method, self.server.url(path))
            .send()
            .await
            .with_context(|| format!("probing {path}"))?
            .status();
        Ok(status != reqwest::StatusCode::NOT_FOUND
            && status != reqwest::StatusCode::METHOD_NOT_ALLOWED)
    }
}

/// Where `needle` first occurs in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The `bench_seq` number a workload put in a payload, found in whatever
/// carries it (a stream's `item` event, a webhook's body).
pub fn bench_seq(bytes: &[u8]) -> Option<u32> {
    const KEY: &[u8] = b"\"bench_seq\":";
    let at = find(bytes, KEY)? + KEY.len();
    let digits: Vec<u8> = bytes[at..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

pub fn rps(ms: &[Measure]) -> Vec<f64> {
    ms.iter().map(|m| m.requests_per_sec).collect()
}

pub fn vars(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

pub fn fmt_ms(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.2}"),
        _ => "—".into(),
    }
}

/// A user token for bench tenant `tenant`, minted the way a tenant's backend
/// would (HS256 with the tenant's signing secret).
pub fn user_token(tenant: i64, user_id: &str) -> anyhow::Result<String> {
    #[derive(serde::Serialize)]
    struct Claims<'a> {
        sub: &'a str,
        tid: String,
        iat: i64,
        exp: i64,
    }
    // The server caps a token's lifetime (exp - iat) at 24 h by default.
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        sub: user_id,
        tid: crate::seed::tenant_uuid(tenant).to_string(),
        iat: now,
        exp: now + 24 * 3600,
    };
    Ok(jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(crate::seed::signing_secret(tenant).as_bytes()),
    )?)
}

/// A Prometheus counter from `/metrics` text: the sum of its series whose
/// labels contain `label` ("" for all of them).
pub fn counter_sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| l[name.len()..].starts_with(['{', ' ']) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A PostgreSQL array literal for pgbench's `-D` (`{a,b}`; quoted elements).
pub fn pg_array<T: std::fmt::Display>(items: &[T]) -> String {
    let inner: Vec<String> = items
        .iter()
        .map(|i| {
            format!(
                "\"{}\"",
                i.to_string().replace('\\', "\\\\").replace('"', "\\\"")
            )
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// Creates a webhook endpoint at `sink_url` through the API (bench servers
/// allow loopback targets), so that its secret is sealed and bound to its row
/// as the server's own are: a secret inserted in clear is refused once a
/// start has bound every stored secret.
pub async fn create_sink_endpoint(
    http: &reqwest::Client,
    base_url: &str,
    api_key: &str,
    sink_url: &str,
) -> anyhow::Result<uuid::Uuid> {
    create_endpoint(http, base_url, api_key, sink_url)
        .await?
        .0
        .parse()
        .context("the endpoint's id is a UUID")
}

/// Creates a webhook endpoint at `url` through the API: its id and its
/// signing secret (shown once, at creation).
pub async fn create_endpoint(
    http: &reqwest::Client,
    base_url: &str,
    api_key: &str,
    url: &str,
) -> anyhow::Result<(String, String)> {
    let created: serde_json::Value = http
        .post(format!("{base_url}/v1/webhook-endpoints"))
        .bearer_auth(api_key)
        .json(&serde_json::json!({ "url": url }))
        .send()
        .await?
        .error_for_status()
        .context("creating a webhook endpoint")?
        .json()
        .await?;
    let field = |name: &str| {
        created[name]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("the endpoint's {name}"))
    };
    Ok((field("id")?, field("secret")?))
}
