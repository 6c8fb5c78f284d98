//! `tidings-bench`: the benchmark harness behind `scripts/bench`. See bench/README.md.

// The test clusters' derivation of a checkout's port (tests/src/cluster.rs).
#[path = "../../tests/src/checkout_port.rs"]
mod checkout_port;
mod loadgen;
mod pg;
mod plots;
mod report;
mod seed;
mod server;
mod sqlfile;
mod stats;
mod tier;
mod workloads;

use std::{path::PathBuf, time::Instant};

use anyhow::Context;
use clap::Parser;

use crate::{
    loadgen::Tools,
    report::{Machine, Report, Status, WorkloadResult},
    server::{Launch, Tidings},
    tier::{Tier, TierName},
    workloads::Ctx,
};

/// Every workload, in the order they run.
const WORKLOADS: &[&str] = &[
    "health",
    "feed",
    "feed-cold",
    "fanout",
    "ingest",
    "drain",
    "drain-peer",
    "webhooks-peer",
    "fallback",
    "mixed",
    "isolation",
    "stream",
    "notify",
    "replicas",
    "failover",
    "soak",
];

/// The README's overview chart: every ratio of the latest results ÷ its target.
const OVERVIEW_PLOT: &str = "latest-ratios.png";

#[derive(Debug, Parser)]
#[command(
    name = "tidings-bench",
    about = "Tidings benchmark harness (run it through scripts/bench)"
)]
struct Args {
    #[arg(long, value_enum, default_value = "S")]
    tier: TierName,
    /// Run only these workloads (repeatable): health, feed, feed-cold, fanout, ingest, drain,
    /// drain-peer, webhooks-peer (needs SVIX_BIN), fallback, mixed, isolation, stream, notify, replicas, failover,
    /// soak.
    #[arg(long)]
    only: Vec<String>,
    /// Admin URL of the bench PostgreSQL (any database; the bench creates its
    /// own). Default: 127.0.0.1 on this checkout's port (`--checkout-pg-port`).
    #[arg(long, env = "BENCH_DATABASE_URL")]
    pg_url: Option<String>,
    /// The `tidings` binary to benchmark.
    #[arg(long, default_value = "target/release/tidings")]
    tidings_bin: PathBuf,
    /// A `tidings` binary built from an earlier commit: the drain workload
    /// runs its workers beside `--tidings-bin`'s, interleaved, as the same-run
    /// "before" of a change to the worker, and the health and feed workloads
    /// serve with it beside the main server (scripts/bench: BENCH_BEFORE_BIN).
    #[arg(long)]
    tidings_before_bin: Option<PathBuf>,
    /// Repository root (bench/sql, server sources for the SQL sync check).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// Where results go (tier M: bench/results; tier S: target/bench).
    #[arg(long, default_value = "target/bench")]
    out_dir: PathBuf,
    /// Also rewrite the summary section of this README (tier M).
    #[arg(long)]
    readme: Option<PathBuf>,
    #[arg(long, default_value = "unknown")]
    git_sha: String,
    /// The command line to print in the summary.
    #[arg(long, default_value = "scripts/bench")]
    command: String,
    #[arg(long, default_value = "oha")]
    oha: PathBuf,
    #[arg(long, default_value = "wrk")]
    wrk: PathBuf,
    #[arg(long, default_value = "pgbench")]
    pgbench: PathBuf,
    #[arg(long, default_value = "pg_waldump")]
    pg_waldump: PathBuf,
    /// Redraw the plots of every results JSON in --out-dir (and the README
    /// section with --readme) from the figures stored in it, then exit.
    #[arg(long)]
    replot: bool,
    /// Rewrite the bench/sql files built by server functions (`-- source-fn:`)
    /// from the current server code, then exit.
    #[arg(long)]
    sync_sql: bool,
    /// Print this checkout's port for the bench PostgreSQL, then exit
    /// (scripts/bench starts it there unless BENCH_PG_PORT says otherwise).
    #[arg(long)]
    checkout_pg_port: bool,
    /// Print the environment of the main bench server (`KEY=VALUE` lines,
    /// without its database and listener), then exit: for tools that start
    /// one by hand (bench/tools/cold-reads-lab).
    #[arg(long)]
    print_server_env: bool,
    /// Read `<tenant index>\t<user id>` lines on stdin and print each user's
    /// token as the workloads mint it, then exit.
    #[arg(long)]
    mint_user_tokens: bool,
}

/// The bench PostgreSQL's port when none is given: this checkout's own, as
/// the test clusters take theirs (from the bench crate's path, so a slot of
/// eight ports apart from the tests'), so that two checkouts on one machine
/// never share one. The bench PostgreSQL takes the first; the replicas
/// workload's cluster the last four (`workloads::replicas`).
pub fn checkout_pg_port() -> u16 {
    checkout_port::checkout_port(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(err) => {
            eprintln!("tidings-bench: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    if args.checkout_pg_port {
        println!("{}", checkout_pg_port());
        return Ok(true);
    }
    if args.print_server_env {
        for (key, value) in server::common_env() {
            println!("{key}={value}");
        }
        for (key, value) in server::main_server_env() {
            println!("{key}={value}");
        }
        return Ok(true);
    }
    if args.mint_user_tokens {
        for line in std::io::stdin().lines() {
            let line = line?;
            let (tenant, user) = line
                .split_once('\t')
                .with_context(|| format!("not <tenant index>\\t<user id>: {line:?}"))?;
            println!("{}", workloads::user_token(tenant.parse()?, user)?);
        }
        return Ok(true);
    }
    let started = Instant::now();
    let started_at = chrono::Utc::now();
    let mut tier = Tier::get(args.tier);
    // The outbox and alert workloads read no events: tier M's 10M (minutes of
    // seeding, GBs of a shared disk) would only slow them down. Their tenants,
    // users and teams are seeded as usual; the JSON records the count used.
    const READ_NO_EVENTS: [&str; 6] = [
        "drain-peer",
        "webhooks-peer",
        "ingest",
        "drain",
        "fallback",
        "notify",
    ];
    if !args.only.is_empty()
        && args
            .only
            .iter()
            .all(|o| READ_NO_EVENTS.contains(&o.as_str()))
    {
        tier.events = tier.events.min(100_000);
    }
    for name in &args.only {
        anyhow::ensure!(
            WORKLOADS.contains(&name.as_str()),
            "unknown workload {name}; known: {}",
            WORKLOADS.join(", ")
        );
    }
    let repo = std::fs::canonicalize(&args.repo)?;
    if args.sync_sql {
        for entry in std::fs::read_dir(sqlfile::sql_dir(&repo))? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("sql")
                && sqlfile::rewrite_from_server(&path)?
            {
                eprintln!("rewrote {}", path.display());
            }
        }
        return Ok(true);
    }
    let out_dir = repo.join(&args.out_dir);
    if args.replot {
        plots::init_fonts()?;
        for run in report::StoredRun::all_in(&out_dir)? {
            replot(&run, &out_dir)?;
            eprintln!("redrew the plots of {}", run.stem);
        }
        if let Some(readme) = &args.readme {
            write_readme(&repo, readme, &out_dir)?;
        }
        return Ok(true);
    }
    let work_dir = repo.join("target/bench/work");
    std::fs::create_dir_all(&out_dir)?;
    std::fs::create_dir_all(&work_dir)?;
    plots::init_fonts()?;

    // The baselines must run the server's own SQL: refuse to measure otherwise.
    let mut drifted = vec![];
    for entry in std::fs::read_dir(sqlfile::sql_dir(&repo))? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("sql") {
            let file = sqlfile::SqlFile::load(&path)?;
            if !file.drift(&repo)?.is_empty() {
                drifted.push(format!("{} (from {:?})", path.display(), file.sources));
            }
        }
    }
    anyhow::ensure!(
        drifted.is_empty(),
        "bench/sql differs from the server's statements; copy them again: {}",
        drifted.join(", ")
    );

    let db_name = format!("tidings_bench_{}", tier.label().to_lowercase());
    let pg_url = args.pg_url.clone().unwrap_or_else(|| {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            checkout_pg_port()
        )
    });
    let target = pg::Target::new(&pg_url, &db_name)?;
    eprintln!("==> database {db_name}: recreate and migrate");
    target.recreate().await?;
    server::migrate(&args.tidings_bin, &target.url).await?;
    let pool = target.pool(8).await?;
    let pg_facts = pg::facts(&pool).await?;

    // The soak runs on a database of its own, the stream and webhooks-peer
    // workloads on tenants of their own, and health reads no seeded row:
    // alone, they need no seed (tier M's takes long and most of the disk).
    let seeded = if !args.only.is_empty()
        && args.only.iter().all(|o| {
            ["soak", "stream", "replicas", "health", "webhooks-peer"].contains(&o.as_str())
        }) {
        eprintln!("==> not seeding: only workloads with data of their own run");
        seed::Seeded {
            figures: serde_json::json!({"skipped": "only workloads with data of their own ran"}),
            has_feed_tables: true,
        }
    } else {
        eprintln!("==> seeding (tier {})", tier.label());
        seed::seed(&pool, &tier).await?
    };

    eprintln!("==> starting tidings serve");
    let sink = server::Sink::start().await?;
    let server = Tidings::serve(Launch {
        bin: &args.tidings_bin,
        database_url: &target.url,
        log_dir: &work_dir,
        name: "serve",
        env: server::main_server_env(),
    })
    .await?;
    let tools = Tools {
        oha: args.oha.clone(),
        wrk: args.wrk.clone(),
        pgbench: args.pgbench.clone(),
        pg_waldump: args.pg_waldump.clone(),
    };
    let load_generators = tools.versions().await;
    let stem = report::run_stem(
        &out_dir,
        &started_at.format("%Y-%m-%d").to_string(),
        &args.git_sha,
        tier.name == TierName::M,
    );
    let ctx = Ctx {
        tier: tier.clone(),
        target: target.clone(),
        pool: pool.clone(),
        tools,
        server,
        bin: args.tidings_bin.clone(),
        before_bin: args.tidings_before_bin.clone(),
        repo: repo.clone(),
        work_dir: work_dir.clone(),
        plot_dir: out_dir.clone(),
        plot_stem: stem.clone(),
        seeded,
        http: reqwest::Client::new(),
        sink_url: sink.url.clone(),
        sink_count: sink.received.clone(),
    };

    let mut results = vec![];
    for &name in WORKLOADS {
        if !args.only.is_empty() && !args.only.iter().any(|o| o == name) {
            continue;
        }
        eprintln!("==> workload {name}");
        let t0 = Instant::now();
        let outcome = match name {
            "health" => workloads::health::run(&ctx).await,
            "feed" => workloads::feed::run(&ctx).await,
            "feed-cold" => workloads::feed_cold::run(&ctx).await,
            "fanout" => workloads::fanout::run(&ctx).await,
            "ingest" => workloads::ingest::run(&ctx).await,
            "drain" => workloads::drain::run(&ctx).await,
            "drain-peer" => workloads::drain_peer::run(&ctx).await,
            "webhooks-peer" => workloads::webhooks_peer::run(&ctx).await,
            "fallback" => workloads::fallback::run(&ctx).await,
            "mixed" => workloads::mixed::run(&ctx).await,
            "isolation" => workloads::isolation::run(&ctx).await,
            "stream" => workloads::stream::run(&ctx).await,
            "notify" => workloads::notify::run(&ctx).await,
            "replicas" => workloads::replicas::run(&ctx).await,
            "failover" => workloads::failover::run(&ctx).await,
            "soak" => workloads::soak::run(&ctx).await,
            other => Ok(WorkloadResult::skipped(
                other,
                "not implemented in the harness yet",
            )),
        };
        let mut result = outcome.unwrap_or_else(|err| {
            eprintln!("    {name} FAILED: {err:#}");
            let mut w = WorkloadResult::new(name);
            w.status = Status::Failed {
                error: format!("{err:#}"),
            };
            w
        });
        result.seconds = t0.elapsed().as_secs_f64();
        if let Status::Skipped { reason } = &result.status {
            eprintln!("    skipped: {reason}");
        }
        results.push(result);
    }
    let Ctx { server, seeded, .. } = ctx;
    server.stop().await;

    let mut report = Report {
        schema_version: report::SCHEMA_VERSION,
        tier: tier.label().into(),
        git_sha: args.git_sha.clone(),
        started_at: started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        wall_seconds: 0.0,
        command: args.command.clone(),
        machine: machine_facts(pg_facts, load_generators),
        tier_config: serde_json::to_value(&tier)?,
        seed: seeded.figures,
        workloads: results,
    };
    // The ratio overview plot, when there is anything to show.
    if report.ratios().any(|r| r.target.is_some()) {
        let file = format!("{stem}-ratios.png");
        let ratios: Vec<_> = report.ratios().cloned().collect();
        plots::target_chart(
            &out_dir.join(&file),
            &ratio_title(&report.tier, &args.git_sha),
            &ratios,
        )?;
        if let Some(first) = report.workloads.first_mut() {
            first.plots.insert(0, file);
        }
    }
    report.wall_seconds = started.elapsed().as_secs_f64();
    let (json_path, md_path) = report::write_all(&report, &out_dir, &stem, ".")?;
    if let Some(readme) = &args.readme {
        write_readme(&repo, readme, &out_dir)?;
    }
    eprintln!(
        "==> wrote {} and {}",
        json_path.display(),
        md_path.display()
    );

    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_path)?)?;
    let valid = report::validate(&written);
    let failed: Vec<_> = report
        .workloads
        .iter()
        .filter(|w| matches!(w.status, Status::Failed { .. }))
        .map(|w| w.name.clone())
        .collect();
    match (&valid, failed.is_empty()) {
        (Ok(()), true) => {
            eprintln!(
                "==> results well-formed ({} ratios); wall time {:.0} s",
                report.ratios().count(),
                report.wall_seconds
            );
            Ok(true)
        }
        _ => {
            if let Err(err) = valid {
                eprintln!("==> results malformed: {err:#}");
            }
            if !failed.is_empty() {
                eprintln!("==> failed workloads: {}", failed.join(", "));
            }
            Ok(false)
        }
    }
}

const README_START: &str = "<!-- bench:results:start -->";
const README_END: &str = "<!-- bench:results:end -->";

fn ratio_title(tier: &str, sha: &str) -> String {
    format!("Tier {tier}, run {sha}: each ratio ÷ its target (1 = target; right of it = met)")
}

/// Redraws one stored run's plots from its figures (the file names it lists).
fn replot(run: &report::StoredRun, out_dir: &std::path::Path) -> anyhow::Result<()> {
    for w in &run.workloads {
        for file in &w.plots {
            let path = out_dir.join(file);
            if report::is_run_ratio_chart(file) {
                let ratios: Vec<_> = run
                    .workloads
                    .iter()
                    .flat_map(|w| w.ratios.iter().cloned())
                    .collect();
                let title = ratio_title(
                    run.json["tier"].as_str().unwrap_or("?"),
                    run.json["git_sha"].as_str().unwrap_or("?"),
                );
                plots::target_chart(&path, &title, &ratios)?;
            } else {
                match w.name.as_str() {
                    "fanout" => workloads::fanout::plot(&path, &w.figures)?,
                    "drain" => workloads::drain::plot_soak(&path, &w.figures)?,
                    "drain-peer" => workloads::drain_peer::plot(&path, &w.figures)?,
                    "soak" => workloads::soak::plot(&path, &w.figures)?,
                    "isolation" => workloads::isolation::plot(&path, &w.figures)?,
                    "stream" => workloads::stream::plot(&path, &w.figures)?,
                    "replicas" => workloads::replicas::plot(&path, &w.figures)?,
                    other => anyhow::bail!("no plot known for {file} of workload {other}"),
                }
            }
        }
    }
    Ok(())
}

/// Rewrites the README's results section from the latest tier M result of
/// each workload in `out_dir`, with the overview chart of their ratios.
fn write_readme(
    repo: &std::path::Path,
    readme: &std::path::Path,
    out_dir: &std::path::Path,
) -> anyhow::Result<()> {
    let runs: Vec<report::StoredRun> = report::StoredRun::all_in(out_dir)?
        .into_iter()
        .filter(|r| r.json["tier"] == "M")
        .collect();
    let latest = report::latest_by_workload(&runs);
    let ratios: Vec<_> = latest
        .iter()
        .flat_map(|(_, w)| w.ratios.iter().cloned())
        .collect();
    plots::target_chart(
        &out_dir.join(OVERVIEW_PLOT),
        "Where Tidings stands: each ratio ÷ its target (1 = target; right of it = met)",
        &ratios,
    )?;
    let readme_path = repo.join(readme);
    let rel = out_dir
        .strip_prefix(readme_path.parent().unwrap_or(repo))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| out_dir.display().to_string());
    let block = report::readme_block(&latest, &rel, Some(OVERVIEW_PLOT));
    let text = std::fs::read_to_string(&readme_path).unwrap_or_default();
    let (head, tail) = match (text.find(README_START), text.find(README_END)) {
        (Some(a), Some(b)) if a < b => (&text[..a], &text[b + README_END.len()..]),
        _ => (text.as_str(), "\n"),
    };
    std::fs::write(
        &readme_path,
        format!("{head}{README_START}\n{block}\n{README_END}{tail}"),
    )
    .with_context(|| format!("writing {}", readme_path.display()))
}

fn machine_facts(postgres: pg::PgFacts, load_generators: serde_json::Value) -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let mem_kb: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let cpu_model = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    Machine {
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        mem_total_bytes: mem_kb * 1024,
        cpu_model,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        postgres,
        load_generators,
    }
}
