//! Workload failover (docs/design/failover.md): how long writes stop when
//! the primary is lost. The HA topology of `scripts/cluster up --ha` (three
//! PostgreSQL nodes under Patroni, etcd, HAProxy; synchronous replication) on
//! ports of the checkout's own, one `tidings serve` on it, writers posting
//! events as fast as they go. Each round kills the primary's Patroni, its
//! postmaster and its backends with SIGKILL (the node, as a lost machine);
//! its unavailability is the time from the first failed write after the kill
//! to the first acknowledgement of a write sent after that failure (a write
//! sent before it may still be answered late by the old primary).
//! Between rounds `scripts/cluster up --ha` brings the killed node back as a
//! standby. Reported: each round, p50 and max, against the aim that writes
//! resume within 30 s. What synchronous commits cost is measured apart, by
//! bench/tools/ha-commit-cost (bench/findings/failover.md).

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::Ctx;
use crate::{
    report::{Aim, Table, WorkloadResult},
    server::{self, Launch, Tidings, ADMIN_TOKEN},
    stats::percentile,
    tier::TierName,
};

const CLUSTER: &str = "bench-failover";
const WRITERS: usize = 4;
/// The bound: writes resume within 30 s of the kill.
const RESUME_AIM_SECS: f64 = 30.0;
/// Repetitions and window of the synchronous vs asynchronous arms.
fn sync_arms(ctx: &Ctx) -> (usize, Duration) {
    match ctx.tier.name {
        TierName::S => (1, Duration::from_secs(2)),
        TierName::M => (3, Duration::from_secs(6)),
    }
}

/// Patroni's `synchronous_mode` through its REST API (any node forwards the
/// change to the cluster's configuration in etcd), then waits until the
/// primary's `synchronous_standby_names` says so.
async fn set_synchronous_mode(
    http: &reqwest::Client,
    topology: &Value,
    admin: &str,
    on: bool,
) -> anyhow::Result<()> {
    let nodes = topology["nodes"].as_array().context("nodes")?;
    let mut patched = false;
    for node in nodes {
        let Some(api) = node["api_port"].as_u64() else {
            continue;
        };
        let answer = http
            .patch(format!("http://127.0.0.1:{api}/config"))
            .json(&json!({"synchronous_mode": on}))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if answer.is_ok_and(|a| a.status().is_success()) {
            patched = true;
            break;
        }
    }
    if !patched {
        bail!("no Patroni took synchronous_mode = {on}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(admin).await?;
        let names: String = sqlx::query_scalar("SHOW synchronous_standby_names")
            .fetch_one(&mut conn)
            .await?;
        if names.is_empty() != on {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("synchronous_standby_names did not follow synchronous_mode = {on}: {names:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Failovers: tier M five, tier S one; `BENCH_FAILOVER_ROUNDS` overrides.
fn rounds(ctx: &Ctx) -> usize {
    if let Some(n) = std::env::var("BENCH_FAILOVER_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        return n;
    }
    match ctx.tier.name {
        TierName::S => 1,
        TierName::M => 5,
    }
}

/// What `scripts/cluster up|status --ha` prints on its last line.
async fn cluster(repo: &Path, port: u16, command: &str) -> anyhow::Result<Value> {
    let out = tokio::process::Command::new(repo.join("scripts/cluster"))
        .args([
            command,
            "--ha",
            "--name",
            CLUSTER,
            "--port",
            &port.to_string(),
        ])
        .current_dir(repo)
        .output()
        .await
        .context("running scripts/cluster --ha")?;
    if !out.status.success() {
        bail!(
            "scripts/cluster {command} --ha failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    if command == "down" {
        return Ok(Value::Null);
    }
    serde_json::from_str(last).with_context(|| format!("the topology line: {last:?}"))
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<WorkloadResult> {
    let repo = std::fs::canonicalize(&ctx.repo)?;
    // Nine ports (scripts/ha) of this checkout's own, apart from the bench
    // PostgreSQL's slot and the replicas workload's.
    let port = crate::checkout_port::checkout_port(&format!("{}/bench/failover", repo.display()));
    let topology = cluster(&repo, port, "up").await?;
    let result = measure(ctx, &repo, port, topology).await;
    let down = cluster(&repo, port, "down").await;
    let w = result?;
    down?;
    Ok(w)
}

/// One write: when it was sent, when its answer came, and whether it was
/// acknowledged.
#[derive(Clone, Copy)]
struct Outcome {
    sent: Instant,
    answered: Instant,
    ok: bool,
}
type Outcomes = Arc<Mutex<Vec<Outcome>>>;

async fn measure(
    ctx: &Ctx,
    repo: &Path,
    port: u16,
    mut topology: Value,
) -> anyhow::Result<WorkloadResult> {
    let started = Instant::now();
    let mut w = WorkloadResult::new("failover");
    let proxy = topology["database_url"]
        .as_str()
        .context("database_url")?
        .to_owned();
    let admin = format!("{}/postgres", proxy.rsplit_once('/').context("a URL")?.0);
    let database = "tidings_bench_failover";
    let url = format!("{}/{database}", proxy.rsplit_once('/').context("a URL")?.0);
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await?;
    sqlx::Executor::execute(
        &mut conn,
        format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)").as_str(),
    )
    .await?;
    sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE {database}").as_str()).await?;
    drop(conn);
    server::migrate(&ctx.bin, &url).await?;
    let serve = Tidings::serve(Launch {
        bin: &ctx.bin,
        database_url: &url,
        log_dir: &ctx.work_dir,
        name: "serve-failover",
        env: server::main_server_env(),
    })
    .await?;
    let http = ctx.http.clone();
    let tenant: Value = http
        .post(serve.url("/v1/admin/tenants"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "failover"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let key = tenant["api_key"].as_str().context("api_key")?.to_owned();
    http.put(serve.url("/v1/teams/team/members/reader"))
        .bearer_auth(&key)
        .send()
        .await?
        .error_for_status()?;

    let outcomes: Outcomes = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for _ in 0..WRITERS {
        let (http, url, key) = (http.clone(), serve.url("/v1/events"), key.clone());
        let (outcomes, stop) = (outcomes.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                let answer = http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&json!({"team_id": "team", "type": "failover", "payload": {}}))
                    .timeout(Duration::from_secs(30))
                    .send()
                    .await;
                let ok = answer.is_ok_and(|a| a.status().is_success());
                outcomes.lock().unwrap().push(Outcome {
                    sent,
                    answered: Instant::now(),
                    ok,
                });
                if !ok {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }));
    }

    let mut t = Table::new(
        "Writes unavailable per failover (SIGKILL of the primary's Patroni, postmaster and backends)",
        &[
            "round",
            "killed",
            "promoted",
            "first failure after the kill",
            "unavailable",
        ],
    );
    let mut unavailable = Vec::new();
    let mut sync_ratios = Vec::new();
    let mut sync_table = None;
    let measured = async {
        for round in 0..rounds(ctx) {
            if round > 0 {
                // The killed node back, as a standby; writes flowing again.
                topology = cluster(repo, port, "up").await?;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            let primary = topology["nodes"]
                .as_array()
                .context("nodes")?
                .iter()
                .find(|n| n["role"] == "primary")
                .context("no primary")?
                .clone();
            // The whole node, as when its machine is lost: Patroni, the
            // postmaster and its backends. A backend outlives a killed
            // postmaster for a while, and a pooled connection to it could
            // answer a write after the kill, a "resumption" on the dead node.
            let postmaster = primary["pid"].as_u64().context("a pid")?;
            let mut victims = vec![primary["patroni_pid"].as_u64().context("a pid")?];
            victims.extend(children_of(postmaster));
            victims.push(postmaster);
            let killed_at = Instant::now();
            // A backend may end between the listing and the kill: `kill`
            // then says so and goes on with the others.
            let _ = std::process::Command::new("kill")
                .arg("-9")
                .args(victims.iter().map(u64::to_string))
                .stderr(std::process::Stdio::null())
                .status();
            let deadline = killed_at + Duration::from_secs(120);
            let (failed_at, resumed_at) = loop {
                if Instant::now() > deadline {
                    bail!("writes did not resume within 120 s of round {round}'s kill");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                let seen = outcomes.lock().unwrap();
                let Some(failed) = seen
                    .iter()
                    .filter(|o| !o.ok && o.answered >= killed_at)
                    .map(|o| o.answered)
                    .min()
                else {
                    continue;
                };
                // Only a write sent after the failure shows that writes work
                // again: one sent before the kill, committed and answered late
                // by the old primary, is not a resumption.
                if let Some(resumed) = seen
                    .iter()
                    .filter(|o| o.ok && o.sent >= failed)
                    .map(|o| o.answered)
                    .min()
                {
                    break (failed, resumed);
                }
            };
            let seconds = (resumed_at - failed_at).as_secs_f64();
            let promoted = cluster(repo, port, "status").await?;
            let promoted = promoted["nodes"]
                .as_array()
                .and_then(|n| n.iter().find(|n| n["role"] == "primary"))
                .map_or("?".to_owned(), |n| {
                    n["name"].as_str().unwrap_or("?").to_owned()
                });
            // A round measures a failover only if another node took over:
            // writes that "resume" on the killed node (its postmaster not
            // killed, say) would time nothing but a restart.
            anyhow::ensure!(
                promoted != "?" && primary["name"].as_str() != Some(promoted.as_str()),
                "round {round}: the primary after the kill is {promoted:?}, not another node: no failover happened"
            );
            eprintln!("  failover {}: {seconds:.1} s unavailable", round + 1);
            t.row(vec![
                (round + 1).to_string(),
                primary["name"].as_str().unwrap_or("?").to_owned(),
                promoted,
                format!("{:.1} s", (failed_at - killed_at).as_secs_f64()),
                format!("{seconds:.1} s"),
            ]);
            unavailable.push(seconds);
        }
        // Then what synchronous commits cost these writers: acknowledged
        // writes per second with Patroni's synchronous mode on and off,
        // alternated, the arm that goes first alternating too.
        let topology = cluster(repo, port, "up").await?;
        let mut t = Table::new(
            "Acknowledged event posts per second, synchronous vs asynchronous replication (same run, alternated)",
            &["rep", "sync req/s", "async req/s", "sync ÷ async"],
        );
        let (reps, window) = sync_arms(ctx);
        for rep in 0..reps {
            let mut arms = [(true, 0.0), (false, 0.0)];
            if rep % 2 == 1 {
                arms.reverse();
            }
            for (sync, rate) in arms.iter_mut() {
                set_synchronous_mode(&http, &topology, &admin, *sync).await?;
                let from = Instant::now();
                tokio::time::sleep(window).await;
                let acked = outcomes
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|o| o.ok && o.answered >= from)
                    .count();
                *rate = acked as f64 / window.as_secs_f64();
            }
            let rate = |sync: bool| arms.iter().find(|(s, _)| *s == sync).map_or(0.0, |a| a.1);
            let (on, off) = (rate(true), rate(false));
            t.row(vec![
                (rep + 1).to_string(),
                format!("{on:.0}"),
                format!("{off:.0}"),
                format!("{:.2}", on / off),
            ]);
            sync_ratios.push(on / off);
        }
        set_synchronous_mode(&http, &topology, &admin, true).await?;
        sync_table = Some(t);
        anyhow::Ok(())
    }
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        let _ = writer.await;
    }
    serve.stop().await;
    measured?;

    let writes = outcomes.lock().unwrap().iter().filter(|o| o.ok).count();
    let p50 = percentile(&unavailable, 50.0);
    let max = unavailable.iter().copied().fold(0.0, f64::max);
    w.tables.push(t);
    w.tables.extend(sync_table);
    w.figure("sync_over_async", json!(sync_ratios));
    w.figure("unavailable_secs", json!(unavailable));
    w.figure("unavailable_p50_secs", json!(p50));
    w.figure("unavailable_max_secs", json!(max));
    w.figure("writes_acknowledged", json!(writes));
    w.aims.push(Aim::below(
        "writes resume after the primary's loss (max over the failovers)",
        max,
        "s",
        RESUME_AIM_SECS,
    ));
    w.notes.push(format!(
        "{} failovers of the HA topology (scripts/cluster up --ha: Patroni ttl 10 s, loop_wait 1 s, \
         HAProxy checks every 500 ms), {WRITERS} writers posting events through one tidings serve; \
         unavailable = first failed write after the kill to the first acknowledged one after it. \
         p50 {p50:.1} s, max {max:.1} s. Then the same writers with Patroni's synchronous mode on \
         and off, {} alternated pairs of {} s (bench/tools/ha-commit-cost measures alert \
         ingest too).",
        unavailable.len(),
        sync_arms(ctx).0,
        sync_arms(ctx).1.as_secs()
    ));
    w.seconds = started.elapsed().as_secs_f64();
    Ok(w)
}

/// The processes whose parent is `pid` (from /proc: the field after the
/// command's closing parenthesis is the state, then the parent's pid).
fn children_of(pid: u64) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<u64>().ok()
                })
                == Some(pid)
        })
        .collect()
}
