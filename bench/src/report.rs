//! What a run produces: the results JSON (raw figures and machine facts), the
//! markdown summary, and the well-formedness check of tier S.

use std::{fmt::Write as _, path::Path};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stats::Spread;

pub const SCHEMA_VERSION: u32 = 1;

/// A headline ratio: numerator and denominator measured in the same run,
/// interleaved, one ratio per repetition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratio {
    pub name: String,
    pub numerator: String,
    pub denominator: String,
    /// `None`: recorded, no target.
    pub target: Option<f64>,
    pub ratio: Spread,
    pub numerator_values: Spread,
    pub denominator_values: Spread,
    pub met: Option<bool>,
}

impl Ratio {
    pub fn new(
        name: &str,
        numerator: &str,
        denominator: &str,
        target: Option<f64>,
        num: &[f64],
        den: &[f64],
    ) -> Ratio {
        let per_rep: Vec<f64> = num.iter().zip(den).map(|(a, b)| a / b).collect();
        let ratio = Spread::of(&per_rep);
        Ratio {
            name: name.into(),
            numerator: numerator.into(),
            denominator: denominator.into(),
            target,
            met: target.map(|t| ratio.median >= t),
            ratio,
            numerator_values: Spread::of(num),
            denominator_values: Spread::of(den),
        }
    }
}

/// An absolute aim ("feed first page p99 < 10 ms").
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Aim {
    pub name: String,
    pub value: f64,
    pub unit: String,
    /// "<" or ">=".
    pub comparison: String,
    pub target: f64,
    pub met: bool,
}

impl Aim {
    pub fn at_least(name: &str, value: f64, unit: &str, target: f64) -> Aim {
        Aim {
            name: name.into(),
            value,
            unit: unit.into(),
            comparison: ">=".into(),
            target,
            met: value >= target,
        }
    }
    pub fn below(name: &str, value: f64, unit: &str, target: f64) -> Aim {
        Aim {
            name: name.into(),
            value,
            unit: unit.into(),
            comparison: "<".into(),
            target,
            met: value < target,
        }
    }
}

/// A table for the markdown summary (its figures are also in `figures`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, columns: &[&str]) -> Table {
        Table {
            title: title.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: vec![],
        }
    }
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// The feature is not on this branch yet, or the tier leaves it out.
    Skipped {
        reason: String,
    },
    Failed {
        error: String,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkloadResult {
    pub name: String,
    #[serde(flatten)]
    pub status: Status,
    pub seconds: f64,
    pub figures: Value,
    pub ratios: Vec<Ratio>,
    pub aims: Vec<Aim>,
    pub tables: Vec<Table>,
    pub plots: Vec<String>,
    pub notes: Vec<String>,
}

impl WorkloadResult {
    pub fn new(name: &str) -> WorkloadResult {
        WorkloadResult {
            name: name.into(),
            status: Status::Ok,
            seconds: 0.0,
            figures: Value::Object(Default::default()),
            ratios: vec![],
            aims: vec![],
            tables: vec![],
            plots: vec![],
            notes: vec![],
        }
    }
    pub fn skipped(name: &str, reason: impl Into<String>) -> WorkloadResult {
        let mut w = WorkloadResult::new(name);
        w.status = Status::Skipped {
            reason: reason.into(),
        };
        w
    }
    pub fn figure(&mut self, key: &str, value: impl Serialize) {
        if let Value::Object(map) = &mut self.figures {
            map.insert(
                key.to_string(),
                serde_json::to_value(value).unwrap_or(Value::Null),
            );
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub mem_total_bytes: u64,
    pub cpu_model: String,
    pub kernel: String,
    pub postgres: crate::pg::PgFacts,
    pub load_generators: Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub tier: String,
    pub git_sha: String,
    pub started_at: String,
    pub wall_seconds: f64,
    pub command: String,
    pub machine: Machine,
    pub tier_config: Value,
    pub seed: Value,
    pub workloads: Vec<WorkloadResult>,
}

impl Report {
    pub fn ratios(&self) -> impl Iterator<Item = &Ratio> {
        self.workloads.iter().flat_map(|w| w.ratios.iter())
    }
    pub fn aims(&self) -> impl Iterator<Item = &Aim> {
        self.workloads.iter().flat_map(|w| w.aims.iter())
    }
}

/// Tier S's check: every key present, every figure a finite positive number (or
/// zero where counting errors, dead tuples and the like), every ratio computed.
/// Never a time threshold.
pub fn validate(report: &Value) -> anyhow::Result<()> {
    for key in [
        "schema_version",
        "tier",
        "git_sha",
        "started_at",
        "wall_seconds",
        "machine",
        "seed",
        "workloads",
    ] {
        if report.get(key).is_none() {
            bail!("results JSON lacks `{key}`");
        }
    }
    for key in ["nproc", "mem_total_bytes", "postgres"] {
        if report["machine"].get(key).is_none() {
            bail!("results JSON lacks machine.{key}");
        }
    }
    if report["machine"]["postgres"]["settings"]
        .get("shared_buffers")
        .is_none()
    {
        bail!("results JSON lacks the PostgreSQL settings");
    }
    let workloads = report["workloads"]
        .as_array()
        .context("workloads is not an array")?;
    if workloads.is_empty() {
        bail!("no workload ran");
    }
    let mut problems = vec![];
    for w in workloads {
        let name = w["name"].as_str().unwrap_or("?");
        match w["status"].as_str() {
            Some("ok") => {}
            Some("skipped") => continue,
            other => {
                problems.push(format!("{name}: status {other:?}: {}", w["error"]));
                continue;
            }
        }
        check_numbers(&w["figures"], &format!("{name}.figures"), &mut problems);
        for r in w["ratios"].as_array().into_iter().flatten() {
            let median = r["ratio"]["median"].as_f64();
            if !matches!(median, Some(m) if m.is_finite() && m > 0.0) {
                problems.push(format!("{name}: ratio {} is {:?}", r["name"], median));
            }
        }
        for a in w["aims"].as_array().into_iter().flatten() {
            if !matches!(a["value"].as_f64(), Some(v) if v.is_finite() && v >= 0.0) {
                problems.push(format!("{name}: aim {} has no value", a["name"]));
            }
        }
    }
    if !problems.is_empty() {
        bail!("malformed figures:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// Keys whose values may legitimately be zero.
fn may_be_zero(path: &str) -> bool {
    let last = path.rsplit('.').next().unwrap_or(path);
    [
        "errors",
        "dead",
        "failed",
        "replay",
        "duplicate",
        "skipped",
        "lag",
        "autovacuum",
        "index",
        "loads",
        "n_dead",
        "pct",
        "bytes",
        "rows",
        "level",
        "records",
        "stat_",
        // Where reads went (replicas workload): none may have needed the primary.
        "waited",
        "primary_",
        // Reads answered only after their delivery fell due (fallback): none
        // on a sound machine.
        "late_reads",
        // CPU read from /proc in clock ticks (10 ms): a tier S drain of 2,000
        // messages can take less than a tick per backend (drain-peer).
        "cpu_us",
    ]
    .iter()
    .any(|k| last.contains(k))
}

/// Keys whose values are differences of two readings that may legitimately
/// come out below zero: a stream's server RSS per connection is (RSS with
/// the streams open − RSS before) ÷ connections, and the allocator returns
/// freed pages to the OS on its own schedule. With mimalloc, tier S's 200
/// streams once came out at −5.7 KiB each: the process's resident memory
/// fell by more than the streams added. Tier M's thousands of streams are
/// where the figure means something.
fn may_be_negative(path: &str) -> bool {
    let last = path.rsplit('.').next().unwrap_or(path);
    last.starts_with("rss_per_connection")
}

fn check_numbers(v: &Value, path: &str, problems: &mut Vec<String>) {
    match v {
        Value::Null => problems.push(format!("{path} is null (NaN or missing)")),
        Value::Number(n) => match n.as_f64() {
            Some(x)
                if x.is_finite()
                    && (x > 0.0
                        || (x == 0.0 && may_be_zero(path))
                        || (x < 0.0 && may_be_negative(path))) => {}
            other => problems.push(format!("{path} = {other:?}")),
        },
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_numbers(item, &format!("{path}[{i}]"), problems);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                // Optional latency fields (pgbench reports only a mean), and
                // diagnostics that are not figures.
                if (item.is_null() && k.ends_with("_ms")) || k.starts_with("notes") {
                    continue;
                }
                check_numbers(item, &format!("{path}.{k}"), problems);
            }
        }
        Value::String(_) | Value::Bool(_) => {}
    }
}

/// `deliveries: autovacuum_vacuum_scale_factor=0.01, …` for the report header
/// (from the results JSON's `machine.postgres.table_options`; older files
/// have none).
fn table_options_line(tables: &Value) -> String {
    let Some(tables) = tables.as_object() else {
        return "per-table settings not recorded".into();
    };
    if tables.is_empty() {
        return "no per-table settings".into();
    }
    tables
        .iter()
        .map(|(table, options)| {
            let options: Vec<&str> = options
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o.as_str())
                .collect();
            format!("{table}: {}", options.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn markdown(report: &Report, plot_dir_rel: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Tidings benchmark — tier {} — {}\n",
        report.tier, report.started_at
    );
    let _ = writeln!(
        md,
        "{}\n",
        run_header(&serde_json::to_value(report).unwrap_or_default())
    );
    let _ = writeln!(
        md,
        "## Ratios (same run, interleaved, median and range over the repetitions)\n"
    );
    let ratios: Vec<&Ratio> = report.ratios().collect();
    md.push_str(&ratio_table(&ratios, None));
    let aims: Vec<&Aim> = report.aims().collect();
    if !aims.is_empty() {
        let _ = writeln!(md, "\n## Absolute aims\n");
        md.push_str(&aim_table(&aims, None));
    }
    for w in &report.workloads {
        md.push_str(&workload_section(w, plot_dir_rel));
    }
    md
}

/// Commit, command, machine, PostgreSQL, load generators and seed of one run
/// (from its results JSON).
pub fn run_header(report: &Value) -> String {
    let m = &report["machine"];
    let pg = &m["postgres"];
    let s = |k: &str| pg["settings"][k].as_str().unwrap_or("?").to_string();
    let version = pg["version"].as_str().unwrap_or("?");
    format!(
        "Commit `{}`, command `{}`, wall time {:.0} s.  \nMachine: {} cores ({}), {:.1} GiB memory, {}.  \n\
         PostgreSQL: {} — shared_buffers {}, synchronous_commit {}, fsync {}, max_wal_size {}, jit {}, autovacuum {} ({}).  \n\
         Load generators: {}.\n\nSeed: {}",
        report["git_sha"].as_str().unwrap_or("?"),
        report["command"].as_str().unwrap_or("?"),
        report["wall_seconds"].as_f64().unwrap_or(f64::NAN),
        m["nproc"],
        m["cpu_model"].as_str().unwrap_or("?"),
        m["mem_total_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 30) as f64,
        m["kernel"].as_str().unwrap_or("?"),
        version.split(" on ").next().unwrap_or(version),
        s("shared_buffers"),
        s("synchronous_commit"),
        s("fsync"),
        s("max_wal_size"),
        s("jit"),
        s("autovacuum"),
        table_options_line(&pg["table_options"]),
        m["load_generators"],
        seed_line(&report["seed"]),
    )
}

/// The ratios table; `run` adds a column naming the run each ratio is from.
fn ratio_table(ratios: &[&Ratio], run: Option<&[String]>) -> String {
    let mut md = String::new();
    let extra = if run.is_some() { " run |" } else { "" };
    let _ = writeln!(
        md,
        "| ratio | median (min–max) | target | met | numerator | denominator |{extra}\n|---|---|---|---|---|---|{}",
        if run.is_some() { "---|" } else { "" }
    );
    for (i, r) in ratios.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {} | **{}** | {} | {} | {} = {} | {} = {} |{}",
            r.name,
            r.ratio.show(2),
            r.target
                .map(|t| format!("≥ {t}"))
                .unwrap_or("record".into()),
            match r.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "—",
            },
            r.numerator,
            r.numerator_values.show(0),
            r.denominator,
            r.denominator_values.show(0),
            run.map(|runs| format!(" {} |", runs[i]))
                .unwrap_or_default()
        );
    }
    md
}

fn aim_table(aims: &[&Aim], run: Option<&[String]>) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| aim | measured | target | met |{}\n|---|---|---|---|{}",
        if run.is_some() { " run |" } else { "" },
        if run.is_some() { "---|" } else { "" }
    );
    for (i, a) in aims.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {} | {:.2} {} | {} {} {} | {} |{}",
            a.name,
            a.value,
            a.unit,
            a.comparison,
            a.target,
            a.unit,
            if a.met { "yes" } else { "**no**" },
            run.map(|runs| format!(" {} |", runs[i]))
                .unwrap_or_default()
        );
    }
    md
}

/// One workload's tables, plots and notes.
fn workload_section(w: &WorkloadResult, plot_dir_rel: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "\n## Workload: {} ({:.0} s)\n", w.name, w.seconds);
    match &w.status {
        Status::Ok => {}
        Status::Skipped { reason } => {
            let _ = writeln!(md, "Not measured: {reason}");
            return md;
        }
        Status::Failed { error } => {
            let _ = writeln!(md, "FAILED: `{error}`");
            return md;
        }
    }
    for t in &w.tables {
        let _ = writeln!(md, "**{}**\n", t.title);
        let _ = writeln!(md, "| {} |", t.columns.join(" | "));
        let _ = writeln!(md, "|{}", "---|".repeat(t.columns.len()));
        for row in &t.rows {
            let _ = writeln!(md, "| {} |", row.join(" | "));
        }
        md.push('\n');
    }
    for p in &w.plots {
        let _ = writeln!(md, "![{}]({}/{})\n", w.name, plot_dir_rel, p);
    }
    for n in &w.notes {
        let _ = writeln!(md, "- {n}");
    }
    md
}

/// A run's own chart of its ratios (`<stem>-ratios.png`).
pub fn is_run_ratio_chart(file: &str) -> bool {
    file.ends_with("-ratios.png")
}

/// A results file read back: its name stem and contents.
pub struct StoredRun {
    pub stem: String,
    pub json: Value,
    pub workloads: Vec<WorkloadResult>,
}

impl StoredRun {
    pub fn load(path: &Path) -> anyhow::Result<StoredRun> {
        let json: Value = serde_json::from_str(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))?;
        let workloads = serde_json::from_value(json["workloads"].clone())
            .with_context(|| format!("reading the workloads of {}", path.display()))?;
        Ok(StoredRun {
            stem: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            json,
            workloads,
        })
    }

    /// Every results JSON in `dir`, oldest first.
    pub fn all_in(dir: &Path) -> anyhow::Result<Vec<StoredRun>> {
        let mut runs = vec![];
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("json") {
                runs.push(StoredRun::load(&path)?);
            }
        }
        runs.sort_by(|a, b| {
            let key = |r: &StoredRun| r.json["started_at"].as_str().unwrap_or("").to_string();
            key(a).cmp(&key(b))
        });
        Ok(runs)
    }

    fn label(&self, plot_dir_rel: &str) -> String {
        format!(
            "[`{}`]({plot_dir_rel}/{}.md)",
            self.json["git_sha"].as_str().unwrap_or(&self.stem),
            self.stem
        )
    }
}

/// The latest successful result of every workload among `runs` (oldest
/// first), each with the run it comes from.
pub fn latest_by_workload(runs: &[StoredRun]) -> Vec<(&StoredRun, &WorkloadResult)> {
    let mut latest: Vec<(&StoredRun, &WorkloadResult)> = vec![];
    for run in runs {
        for w in &run.workloads {
            if !matches!(w.status, Status::Ok) {
                continue;
            }
            match latest.iter_mut().find(|(_, l)| l.name == w.name) {
                Some(slot) => *slot = (run, w),
                None => latest.push((run, w)),
            }
        }
    }
    latest
}

/// The README's results section: where Tidings stands against every anchor,
/// from the latest run of each workload, its plots, and the runs it comes
/// from. Each run's own summary (`<stem>.md`, linked) holds its tables,
/// machine and seed.
pub fn readme_block(
    latest: &[(&StoredRun, &WorkloadResult)],
    plot_dir_rel: &str,
    overview_plot: Option<&str>,
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Where Tidings stands (latest tier M result of each workload)\n"
    );
    let _ = writeln!(
        md,
        "Generated by `scripts/bench --tier M` (and `--replot`) from the latest tier M \
         result of each workload in `bench/results/`. Every ratio is measured within one \
         run, interleaved, against its anchor (pgbench of the server's own SQL, pgmq, \
         the framework's ceiling…); the chart divides each by its target, so 1 is the \
         line to beat. Each run's summary, linked, has its tables, machine and seed.\n"
    );
    if let Some(p) = overview_plot {
        let _ = writeln!(
            md,
            "![each ratio divided by its target]({plot_dir_rel}/{p})\n"
        );
    }
    let mut ratios = vec![];
    let mut ratio_runs = vec![];
    let mut aims = vec![];
    let mut aim_runs = vec![];
    for (run, w) in latest {
        for r in &w.ratios {
            ratios.push(r);
            ratio_runs.push(run.label(plot_dir_rel));
        }
        for a in &w.aims {
            aims.push(a);
            aim_runs.push(run.label(plot_dir_rel));
        }
    }
    md.push_str(&ratio_table(&ratios, Some(&ratio_runs)));
    if !aims.is_empty() {
        let _ = writeln!(md, "\n**Absolute aims**\n");
        md.push_str(&aim_table(&aims, Some(&aim_runs)));
    }
    let _ = writeln!(md, "\n**Plots**\n");
    for (run, w) in latest {
        for p in w.plots.iter().filter(|p| !is_run_ratio_chart(p)) {
            let _ = writeln!(
                md,
                "- {}: [{p}]({plot_dir_rel}/{p}) (run {})",
                w.name,
                run.label(plot_dir_rel)
            );
        }
    }
    let _ = writeln!(md, "\n**Runs**\n");
    let mut seen: Vec<&str> = vec![];
    for (run, _) in latest {
        if seen.contains(&run.stem.as_str()) {
            continue;
        }
        seen.push(&run.stem);
        let workloads: Vec<&str> = latest
            .iter()
            .filter(|(r, _)| r.stem == run.stem)
            .map(|(_, w)| w.name.as_str())
            .collect();
        let _ = writeln!(
            md,
            "- {} ({}): {}; `{}`",
            run.label(plot_dir_rel),
            run.json["started_at"].as_str().unwrap_or("?"),
            workloads.join(", "),
            run.json["command"].as_str().unwrap_or("?"),
        );
    }
    md
}

fn seed_line(seed: &Value) -> String {
    match seed.as_object() {
        Some(map) => map
            .iter()
            .map(|(k, v)| match v.as_f64() {
                Some(x) if v.is_f64() => format!("{k} {x:.1}"),
                _ => format!("{k} {v}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => seed.to_string(),
    }
}

/// The stem of a run's files: `<date>-<sha>`. A run that keeps its results
/// (`keep_earlier`: tier M, whose files are committed) never writes over an
/// earlier run's: a second run of one commit on one day is `<date>-<sha>-2`,
/// then `-3`, and so on.
pub fn run_stem(dir: &Path, date: &str, sha: &str, keep_earlier: bool) -> String {
    let stem = format!("{date}-{sha}");
    if !keep_earlier {
        return stem;
    }
    let taken = |stem: &str| dir.join(format!("{stem}.json")).exists();
    if !taken(&stem) {
        return stem;
    }
    (2..)
        .map(|n| format!("{stem}-{n}"))
        .find(|s| !taken(s))
        .expect("some suffix is free")
}

pub fn write_all(
    report: &Report,
    dir: &Path,
    stem: &str,
    plot_dir_rel: &str,
) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let json_path = dir.join(format!("{stem}.json"));
    let md_path = dir.join(format!("{stem}.md"));
    let json = serde_json::to_value(report)?;
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)? + "\n")?;
    std::fs::write(&md_path, markdown(report, plot_dir_rel))?;
    Ok((json_path, md_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_run_never_takes_an_earlier_runs_stem() {
        let dir = std::env::temp_dir().join(format!("tidings-bench-stem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stem = |keep| run_stem(&dir, "2026-12-06", "abc", keep);
        assert_eq!(stem(true), "2026-12-06-abc");
        std::fs::write(dir.join("2026-12-06-abc.json"), "{}").unwrap();
        assert_eq!(stem(true), "2026-12-06-abc-2");
        std::fs::write(dir.join("2026-12-06-abc-2.json"), "{}").unwrap();
        assert_eq!(stem(true), "2026-12-06-abc-3");
        // Tier S's smoke results are scratch: the next run replaces them.
        assert_eq!(stem(false), "2026-12-06-abc");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nan_and_negative_figures_are_rejected() {
        let mut problems = vec![];
        check_numbers(
            &serde_json::json!({"rps": null, "p99_ms": -1.0, "errors": 0, "ok": 3.5}),
            "w",
            &mut problems,
        );
        // `rps: null` and `p99_ms: -1` are wrong; `errors: 0` is fine.
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("p99_ms")));
        let mut problems = vec![];
        check_numbers(&serde_json::json!({"rps": 0}), "w", &mut problems);
        assert_eq!(problems.len(), 1);
    }

    #[test]
    fn only_a_difference_of_rss_readings_may_be_negative() {
        let mut problems = vec![];
        check_numbers(
            &serde_json::json!({"stream": {
                "rss_per_connection_bytes": -5672.9,
                "rss_per_connection_idle_bytes": -10.0,
                "rss_before_bytes": -1.0,
                "rss_per_connection_bytes_nan": null,
            }}),
            "w",
            &mut problems,
        );
        // The RSS reading itself may not be negative, nor may a null pass.
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("rss_before_bytes")));
        assert!(problems.iter().any(|p| p.contains("_nan")));
    }
}
