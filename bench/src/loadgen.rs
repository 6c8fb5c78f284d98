//! The load generators: `oha` (HTTP, closed loop for maxima and open loop at a fixed
//! rate with latency correction for percentiles), `wrk` with a Lua script (HTTP
//! requests whose bodies and headers vary per request: unique alerts, replays with
//! Idempotency-Key) and `pgbench -M prepared` (the database baselines).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::Value;
use tokio::process::Command;

use crate::pg::Target;

/// One measurement: throughput and latency percentiles (milliseconds).
#[derive(Debug, Clone, Serialize)]
pub struct Measure {
    pub tool: &'static str,
    pub requests_per_sec: f64,
    pub requests: f64,
    pub errors: f64,
    /// Latency percentiles; pgbench reports only a mean (`mean_ms`).
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    pub seconds: f64,
}

#[derive(Debug, Clone)]
pub struct Tools {
    pub oha: PathBuf,
    pub wrk: PathBuf,
    pub pgbench: PathBuf,
    /// Reads the bench cluster's WAL: record counts by type (drain-peer).
    pub pg_waldump: PathBuf,
}

#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub url: String,
    pub method: &'static str,
    pub headers: Vec<(String, String)>,
    /// A file whose lines are request bodies (oha picks one at random per request).
    pub body_lines: Option<PathBuf>,
}

impl HttpRequest {
    pub fn get(url: impl Into<String>) -> Self {
        HttpRequest {
            url: url.into(),
            method: "GET",
            headers: vec![],
            body_lines: None,
        }
    }

    pub fn bearer(mut self, token: &str) -> Self {
        self.headers
            .push(("Authorization".into(), format!("Bearer {token}")));
        self
    }
}

#[derive(Clone, Copy)]
pub enum Load {
    /// As fast as `connections` closed-loop clients go.
    Max { connections: u32 },
    /// Open loop at a fixed rate, latencies corrected for coordinated omission.
    Rate { connections: u32, per_sec: f64 },
}

impl Tools {
    pub async fn versions(&self) -> serde_json::Value {
        async fn first_line(bin: &Path, arg: &str) -> String {
            match Command::new(bin).arg(arg).output().await {
                Ok(out) => {
                    let text = if out.stdout.is_empty() {
                        out.stderr
                    } else {
                        out.stdout
                    };
                    String::from_utf8_lossy(&text)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_string()
                }
                Err(err) => format!("unavailable: {err}"),
            }
        }
        serde_json::json!({
            "oha": first_line(&self.oha, "--version").await,
            "wrk": first_line(&self.wrk, "--version").await,
            "pgbench": first_line(&self.pgbench, "--version").await,
            "pg_waldump": first_line(&self.pg_waldump, "--version").await,
        })
    }

    pub async fn oha(
        &self,
        req: &HttpRequest,
        load: Load,
        duration: Duration,
    ) -> anyhow::Result<Measure> {
        let mut cmd = Command::new(&self.oha);
        cmd.arg("--no-tui")
            .args(["--output-format", "json"])
            .arg("-z")
            .arg(format!("{}ms", duration.as_millis()))
            .args(["-m", req.method])
            // Requests still running at the deadline are waited for, not counted as errors.
            .arg("-w");
        for (k, v) in &req.headers {
            cmd.arg("-H").arg(format!("{k}: {v}"));
        }
        if let Some(lines) = &req.body_lines {
            cmd.arg("-Z").arg(lines).args(["-T", "application/json"]);
        }
        match load {
            Load::Max { connections } => {
                cmd.arg("-c").arg(connections.to_string());
            }
            Load::Rate {
                connections,
                per_sec,
            } => {
                cmd.arg("-c")
                    .arg(connections.to_string())
                    .arg("-q")
                    .arg(format!("{per_sec:.1}"))
                    .arg("--latency-correction");
            }
        }
        cmd.arg(&req.url);
        let out = run(cmd, "oha").await?;
        parse_oha(&out).with_context(|| format!("parsing oha output for {}", req.url))
    }

    /// wrk with a Lua script that defines `request()` and loads `bench_done.lua`
    /// (prints one JSON line).
    pub async fn wrk(
        &self,
        base_url: &str,
        script: &Path,
        connections: u32,
        duration: Duration,
    ) -> anyhow::Result<Measure> {
        let mut cmd = Command::new(&self.wrk);
        cmd.arg("-t")
            .arg(connections.clamp(1, 2).to_string())
            .arg("-c")
            .arg(connections.to_string())
            .arg("-d")
            .arg(format!("{}s", duration.as_secs().max(1)))
            .arg("--timeout")
            .arg("10s")
            .arg("-s")
            .arg(script)
            .arg(base_url);
        let out = run(cmd, "wrk").await?;
        parse_wrk(&out)
    }

    /// `pgbench -M prepared` of a script against the bench database.
    pub async fn pgbench(
        &self,
        target: &Target,
        script: &Path,
        clients: u32,
        duration: Duration,
        vars: &[(String, String)],
    ) -> anyhow::Result<Measure> {
        self.pgbench_with_options(target, script, clients, duration, vars, None)
            .await
    }

    /// `pgbench` with server options for its sessions (`PGOPTIONS`, e.g.
    /// `-c search_path=…`): the same statement text against other tables.
    pub async fn pgbench_with_options(
        &self,
        target: &Target,
        script: &Path,
        clients: u32,
        duration: Duration,
        vars: &[(String, String)],
        options: Option<&str>,
    ) -> anyhow::Result<Measure> {
        let mut cmd = Command::new(&self.pgbench);
        if let Some(options) = options {
            cmd.env("PGOPTIONS", options);
        }
        cmd.args(["-n", "-M", "prepared"])
            .arg("-f")
            .arg(script)
            .arg("-c")
            .arg(clients.to_string())
            .arg("-j")
            .arg(clients.clamp(1, 2).to_string())
            .arg("-T")
            .arg(duration.as_secs().max(1).to_string())
            .args(["-h", &target.host])
            .args(["-p", &target.port.to_string()])
            .args(["-U", &target.user]);
        for (k, v) in vars {
            cmd.arg("-D").arg(format!("{k}={v}"));
        }
        cmd.arg(&target.database);
        let out = run(cmd, "pgbench").await?;
        parse_pgbench(&out)
    }
}

async fn run(mut cmd: Command, what: &str) -> anyhow::Result<String> {
    cmd.stdin(Stdio::null());
    let out = cmd
        .output()
        .await
        .with_context(|| format!("running {what}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}\n{}",
            out.status,
            stdout.chars().take(2000).collect::<String>(),
            String::from_utf8_lossy(&out.stderr)
                .chars()
                .take(2000)
                .collect::<String>()
        );
    }
    Ok(stdout)
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64().unwrap_or(f64::NAN)
}

pub fn parse_oha(out: &str) -> anyhow::Result<Measure> {
    let v: Value = serde_json::from_str(out.trim())?;
    let ok: f64 = v["statusCodeDistribution"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(code, _)| code.starts_with('2'))
                .map(|(_, n)| n.as_f64().unwrap_or(0.0))
                .sum()
        })
        .unwrap_or(0.0);
    let all_status: f64 = v["statusCodeDistribution"]
        .as_object()
        .map(|m| m.values().map(|n| n.as_f64().unwrap_or(0.0)).sum())
        .unwrap_or(0.0);
    let transport_errors: f64 = v["errorDistribution"]
        .as_object()
        .map(|m| m.values().map(|n| n.as_f64().unwrap_or(0.0)).sum())
        .unwrap_or(0.0);
    let seconds = num(&v, &["summary", "total"]);
    // Percentiles are in seconds in oha's JSON.
    let pct = |key: &str| num(&v, &["latencyPercentiles", key]) * 1000.0;
    Ok(Measure {
        tool: "oha",
        requests_per_sec: ok / seconds,
        requests: ok,
        errors: (all_status - ok) + transport_errors,
        mean_ms: Some(num(&v, &["summary", "average"]) * 1000.0),
        p50_ms: Some(pct("p50")),
        p99_ms: Some(pct("p99")),
        p999_ms: Some(pct("p99.9")),
        seconds,
    })
}

pub fn parse_wrk(out: &str) -> anyhow::Result<Measure> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("BENCH_JSON "))
        .context("wrk printed no BENCH_JSON line (the Lua done() hook)")?;
    let v: Value = serde_json::from_str(line)?;
    let seconds = num(&v, &["duration_us"]) / 1e6;
    let requests = num(&v, &["requests"]);
    let errors = num(&v, &["errors"]);
    let ok = requests - errors;
    Ok(Measure {
        tool: "wrk",
        requests_per_sec: ok / seconds,
        requests: ok,
        errors,
        mean_ms: Some(num(&v, &["mean_us"]) / 1000.0),
        p50_ms: Some(num(&v, &["p50_us"]) / 1000.0),
        p99_ms: Some(num(&v, &["p99_us"]) / 1000.0),
        p999_ms: Some(num(&v, &["p999_us"]) / 1000.0),
        seconds,
    })
}

/// The `done` hook every wrk script ends with: one JSON line the harness parses.
pub const WRK_DONE_LUA: &str = r#"
function done(summary, latency, requests)
  local e = summary.errors
  local errors = e.connect + e.read + e.write + e.status + e.timeout
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"errors":%d,"duration_us":%d,"mean_us":%f,"p50_us":%f,"p99_us":%f,"p999_us":%f}\n',
    summary.requests, errors, summary.duration, latency.mean,
    latency:percentile(50.0), latency:percentile(99.0), latency:percentile(99.9)))
end
"#;

pub fn parse_pgbench(out: &str) -> anyhow::Result<Measure> {
    let after = |prefix: &str| -> Option<f64> {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    let tps = after("tps = ").context("pgbench printed no tps line")?;
    let processed = after("number of transactions actually processed: ").unwrap_or(f64::NAN);
    let failed = after("number of failed transactions: ").unwrap_or(0.0);
    let latency = after("latency average = ").unwrap_or(f64::NAN);
    Ok(Measure {
        tool: "pgbench",
        requests_per_sec: tps,
        requests: processed,
        errors: failed,
        mean_ms: Some(latency),
        p50_ms: None,
        p99_ms: None,
        p999_ms: None,
        seconds: processed / tps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_summary_is_parsed() {
        let out = "transaction type: x.sql\nnumber of transactions actually processed: 1200\n\
                   number of failed transactions: 0 (0.000%)\nlatency average = 0.812 ms\n\
                   initial connection time = 3.2 ms\ntps = 600.5 (without initial connection time)\n";
        let m = parse_pgbench(out).unwrap();
        assert_eq!(m.requests_per_sec, 600.5);
        assert_eq!(m.requests, 1200.0);
        assert_eq!(m.mean_ms, Some(0.812));
    }

    #[test]
    fn wrk_json_line_is_parsed() {
        let out = "Running 1s test\nBENCH_JSON {\"requests\":110,\"errors\":10,\"duration_us\":2000000,\"mean_us\":1600.0,\"p50_us\":1500.0,\"p99_us\":9000.0,\"p999_us\":9500.0}\n";
        let m = parse_wrk(out).unwrap();
        assert_eq!(m.requests_per_sec, 50.0);
        assert_eq!(m.p99_ms, Some(9.0));
    }
}
