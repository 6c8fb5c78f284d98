//! bench/sql/*.sql hold the exact statements the server runs (copied from its
//! store modules, with `$n` parameters), or point at the server's own rendering
//! of a statement (`-- snapshot:`, the feed's snapshots) instead of copying it.
//! `pgbench_script` turns one into a pgbench script with `:pn` variables; the
//! tests below fail when a file drifts from the server source it names on its
//! `-- source:` lines.

use std::path::{Path, PathBuf};

use anyhow::Context;

pub struct SqlFile {
    pub path: PathBuf,
    /// `-- source: server/src/…` lines: files whose text holds the statements.
    pub sources: Vec<String>,
    /// `-- source-fn: NAME`: a statement built at run time by the server
    /// function NAME (see `server_sql`), equal to its result. A file may name
    /// both: each statement is found in the sources' text or is a function's.
    pub source_fns: Vec<String>,
    /// `-- reference: WHY`: a statement the server does not run, kept to
    /// measure against (a past version, a lower bound); never checked for drift.
    pub references: Vec<String>,
    /// `-- snapshot: PATH` (relative to the file): the statements are that
    /// file's, a rendering the server's own tests keep equal to the statement
    /// (server/src/store/feed/snapshots), so this file holds no copy.
    pub snapshot: Option<PathBuf>,
    /// Statements without comments, each ending with `;`.
    pub statements: Vec<String>,
}

pub fn sql_dir(repo: &Path) -> PathBuf {
    repo.join("bench").join("sql")
}

impl SqlFile {
    pub fn load(path: &Path) -> anyhow::Result<SqlFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut sources = vec![];
        let mut source_fns = vec![];
        let mut references = vec![];
        let mut snapshot = None;
        let mut body = String::new();
        let mut in_header = true;
        for line in text.lines() {
            let trimmed = line.trim_start();
            if let Some(src) = trimmed.strip_prefix("-- source:") {
                sources.push(src.trim().to_string());
            } else if let Some(f) = trimmed.strip_prefix("-- source-fn:") {
                source_fns.push(f.trim().to_string());
            } else if let Some(why) = trimmed.strip_prefix("-- reference:") {
                references.push(why.trim().to_string());
            } else if let Some(rel) = trimmed.strip_prefix("-- snapshot:") {
                let dir = path.parent().unwrap_or(Path::new("."));
                snapshot = Some(dir.join(rel.trim()));
            } else if in_header && trimmed.starts_with("--") {
                continue;
            } else {
                in_header = false;
                body.push_str(&strip_comment(line));
                body.push('\n');
            }
        }
        let statements = match &snapshot {
            Some(rendered) => {
                anyhow::ensure!(
                    body.trim().is_empty(),
                    "{} names a snapshot and holds statements of its own",
                    path.display()
                );
                SqlFile::load(rendered)?.statements
            }
            None => body
                .split(";\n")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| format!("{};", s.trim_end_matches(';')))
                .collect(),
        };
        Ok(SqlFile {
            path: path.to_path_buf(),
            sources,
            source_fns,
            references,
            snapshot,
            statements,
        })
    }

    /// A pgbench script: `$n` becomes `:pn` (one statement) or `:sipn` (statement
    /// i of several, 1-based, since each numbers its parameters from 1), one
    /// statement per line (pgbench ends a SQL command at a newline-terminated
    /// `;`), and `prefix`/`suffix` lines (e.g. BEGIN/COMMIT or `\gset`) around them.
    pub fn pgbench_script(&self, prefix: &[&str], suffix: &[&str]) -> String {
        let mut out = String::new();
        for p in prefix {
            out.push_str(p);
            out.push('\n');
        }
        let several = self.statements.len() > 1;
        for (i, s) in self.statements.iter().enumerate() {
            let var = if several {
                format!("s{}p", i + 1)
            } else {
                "p".to_string()
            };
            out.push_str(&to_pgbench_vars(&collapse(s), &var));
            out.push('\n');
        }
        for s in suffix {
            out.push_str(s);
            out.push('\n');
        }
        out
    }

    /// Statements missing from their sources (whitespace-insensitive).
    pub fn drift(&self, repo: &Path) -> anyhow::Result<Vec<String>> {
        if !self.references.is_empty() {
            return Ok(vec![]);
        }
        let built: Vec<String> = self
            .source_fns
            .iter()
            .map(|f| {
                server_sql(f).map(|s| {
                    let lines: Vec<String> = s.lines().map(strip_comment).collect();
                    collapse(lines.join("\n").trim_end_matches(';'))
                })
            })
            .collect::<anyhow::Result<_>>()?;
        let mut haystack = String::new();
        for src in &self.sources {
            let text = std::fs::read_to_string(repo.join(src))
                .with_context(|| format!("reading {src} named by {}", self.path.display()))?;
            let text = unescape_rust_literals(&text);
            let lines: Vec<String> = text.lines().map(strip_comment).collect();
            haystack.push_str(&collapse(&lines.join("\n")));
            haystack.push('\n');
        }
        Ok(self
            .statements
            .iter()
            .filter(|s| {
                let statement = collapse(s.trim_end_matches(';'));
                !built.contains(&statement) && !haystack.contains(statement.as_str())
            })
            .cloned()
            .collect())
    }
}

/// Statements the server composes at run time, by the name bench/sql files
/// use on their `-- source-fn:` line.
pub fn server_sql(name: &str) -> anyhow::Result<String> {
    use tidings_server::store::{deliveries, feed, outbox};
    Ok(match name {
        "tidings_server::store::feed::feed_page_sql(PageKind::First)" => {
            feed::feed_page_sql(feed::PageKind::First).into()
        }
        "tidings_server::store::feed::feed_page_sql(PageKind::FirstFew)" => {
            feed::feed_page_sql(feed::PageKind::FirstFew).into()
        }
        "tidings_server::store::feed::feed_page_carried_sql(PageKind::First)" => {
            feed::feed_page_carried_sql(feed::PageKind::First).into()
        }
        "tidings_server::store::feed::feed_page_carried_sql(PageKind::FirstFew)" => {
            feed::feed_page_carried_sql(feed::PageKind::FirstFew).into()
        }
        "tidings_server::store::feed::feed_page_sql(PageKind::FirstFewScanned)" => {
            feed::feed_page_sql(feed::PageKind::FirstFewScanned).into()
        }
        "tidings_server::store::feed::feed_page_carried_sql(PageKind::FirstFewScanned)" => {
            feed::feed_page_carried_sql(feed::PageKind::FirstFewScanned).into()
        }
        "tidings_server::store::feed::feed_page_sql(PageKind::Before)" => {
            feed::feed_page_sql(feed::PageKind::Before).into()
        }
        "tidings_server::store::feed::counts_sql()" => feed::counts_sql().into(),
        "tidings_server::store::feed::counts_carried_sql()" => feed::counts_carried_sql().into(),
        // The worker's default batch, as the harness runs it.
        "tidings_server::store::outbox::claim_sql(100)" => outbox::claim_sql(100),
        "tidings_server::store::outbox::complete_sql()" => outbox::complete_sql().into(),
        "tidings_server::store::deliveries::insert_deliveries_sql()" => {
            deliveries::insert_deliveries_sql().into()
        }
        other => anyhow::bail!("unknown source-fn {other}"),
    })
}

/// Rewrites a bench/sql file whose statement comes from a server function,
/// keeping its comments: `tidings-bench --sync-sql` after a server change.
pub fn rewrite_from_server(path: &Path) -> anyhow::Result<bool> {
    let file = SqlFile::load(path)?;
    // A file that also names source files holds statements of its own; one
    // that names a snapshot holds none.
    let ([name], [], None) = (
        file.source_fns.as_slice(),
        file.sources.as_slice(),
        &file.snapshot,
    ) else {
        return Ok(false);
    };
    let text = std::fs::read_to_string(path)?;
    let comments: String = text
        .lines()
        .take_while(|l| l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(
        path,
        format!(
            "{comments}{};\n",
            server_sql(name)?.trim().trim_end_matches(';')
        ),
    )?;
    Ok(true)
}

/// A line without its `-- comment` (the statements hold no `--` in literals).
fn strip_comment(line: &str) -> String {
    match line.find("--") {
        Some(at) => line[..at].to_string(),
        None => line.to_string(),
    }
}

/// Whitespace runs become one space.
pub fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Rust string literals may continue lines with `\` + newline; treat as a space.
fn unescape_rust_literals(s: &str) -> String {
    s.replace("\\\n", " ")
}

pub fn to_pgbench_vars(sql: &str, var: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let bytes = sql.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() && bytes[i + 1].is_ascii_digit() {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j].is_ascii_digit() {
                j += 1;
            }
            out.push(':');
            out.push_str(var);
            out.push_str(&sql[i + 1..j]);
            i = j;
        } else {
            out.push(bytes[i] as char);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn parameters_become_pgbench_variables() {
        assert_eq!(
            to_pgbench_vars("WHERE a = $1 AND (b, c) < ($2, $12::bigint)", "p"),
            "WHERE a = :p1 AND (b, c) < (:p2, :p12::bigint)"
        );
        assert_eq!(to_pgbench_vars("VALUES ($1)", "s3p"), "VALUES (:s3p1)");
    }

    /// Every bench/sql file names its source and matches it: the baseline pgbench
    /// runs exactly what the server runs.
    #[test]
    fn bench_sql_files_match_the_server_source() {
        let dir = sql_dir(&repo());
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).expect("bench/sql exists") {
            let path = entry.expect("dir entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("sql") {
                continue;
            }
            let file = SqlFile::load(&path).expect("loads");
            assert!(
                !file.sources.is_empty()
                    || !file.source_fns.is_empty()
                    || !file.references.is_empty(),
                "{} has no `-- source:`, `-- source-fn:` or `-- reference:` line",
                path.display()
            );
            assert!(!file.statements.is_empty(), "{} is empty", path.display());
            let drift = file.drift(&repo()).expect("sources readable");
            assert!(
                drift.is_empty(),
                "{} drifted from {:?} {:?}; copy the statements again:\n{}",
                path.display(),
                file.sources,
                file.source_fns,
                drift.join("\n")
            );
            checked += 1;
        }
        assert!(checked > 0);
    }
}
