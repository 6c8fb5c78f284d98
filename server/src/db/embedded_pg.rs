//! The embedded default: with no DATABASE_URL, `tidings serve` runs a private
//! PostgreSQL from the binaries installed on this machine.
//!
//! Why our own module: the crates that embed PostgreSQL download a server build at
//! first use, which machines without internet access cannot do. Here we only find
//! `initdb` and `postgres` on PATH or under the usual install prefixes, initialise a
//! data directory once, start the server as a child process on a free loopback port,
//! and stop it with a fast shutdown (SIGINT) when Tidings exits.
//!
//! When the data directory already has a running server (another `tidings serve`,
//! or `tidings tenant create` while `serve` runs), we attach to it instead and
//! leave stopping it to whoever started it.
//!
//! PostgreSQL refuses to run as root, so when we are root the data directory is
//! handed to an unprivileged account (`postgres` if it exists, else `nobody`) and
//! the server runs as that account. That account must be able to reach the data
//! directory, which a checkout under a 0700 home (`/root/tidings`) or a `mktemp -d`
//! directory does not allow. What happens then depends on who chose the directory:
//! - an explicit `--data-dir`/`TIDINGS_DATA_DIR` is used as given, or refused with
//!   the directory that blocks the way: the operator asked for that place;
//! - the default (`./.tidings`) falls back to a per-checkout directory under
//!   `/var/lib/tidings` (or the system temp dir), named after a hash of the default's
//!   canonical path, so the next start finds the same instance and two checkouts
//!   never share one. See [`fallback_bases`] and docs/design/operations.md,
//!   "The embedded default PostgreSQL".
//!
//! The server runs with autovacuum on, set on its command line rather than left to
//! whatever `postgresql.conf` says: the migrations tune per-table autovacuum (0008,
//! `deliveries`), which only does anything when the daemon runs.

use std::{
    fs,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context};
use nix::{
    sys::signal::{kill, Signal},
    unistd::{Pid, Uid, User},
};

const INSTALL_HINT: &str = "PostgreSQL's server binaries (initdb, postgres) were not found. \
Install them (Debian/Ubuntu: `apt-get install postgresql`; macOS: `brew install postgresql`) \
or point Tidings at an existing server with DATABASE_URL=postgres://user@host:5432/db.";

/// Where `tidings serve` keeps its data when no `--data-dir`/`TIDINGS_DATA_DIR` is
/// given: relative to the working directory, i.e. next to the checkout for
/// `scripts/run`.
const DEFAULT_DATA_DIR: &str = ".tidings";

/// Where the default data directory moves when the account PostgreSQL runs as
/// cannot reach it, tried in order. `/var/lib/tidings` survives reboots; the temp
/// dir is the last resort for machines where `/var/lib` is read-only.
fn fallback_bases() -> Vec<PathBuf> {
    vec![
        PathBuf::from("/var/lib/tidings"),
        std::env::temp_dir().join("tidings"),
    ]
}

/// The server settings the embedded default always runs with, on its command line
/// (so they win over `postgresql.conf` and `ALTER SYSTEM`). Autovacuum needs both
/// the daemon and the statistics it decides from; the per-table settings of the
/// migrations (0008 for `deliveries`) rely on them.
const SERVER_SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "127.0.0.1"),
    ("unix_socket_directories", ""),
    ("max_connections", "200"),
    ("autovacuum", "on"),
    ("track_counts", "on"),
];

/// Name of the note left in an unreachable default data directory, saying where
/// the data went instead.
const FALLBACK_NOTE: &str = "where-is-the-data.txt";

/// A running private PostgreSQL. Dropping it stops the server.
pub struct EmbeddedPostgres {
    child: Option<Child>,
    data_dir: PathBuf,
    port: u16,
}

impl EmbeddedPostgres {
    /// Initialises `root/pg` when needed, starts PostgreSQL and waits until it accepts
    /// connections. The returned URL points at database `postgres` as superuser `postgres`.
    ///
    /// `root` was chosen explicitly: when PostgreSQL's account cannot reach it, this
    /// refuses (naming the directory in the way) rather than putting data elsewhere.
    pub fn start(root: &Path) -> anyhow::Result<Self> {
        Self::start_on_port(root, free_port()?)
    }

    /// Like [`EmbeddedPostgres::start`], on a given port: a server stopped and
    /// started again on the same port keeps its URL (tests restart it under load).
    pub fn start_on_port(root: &Path, port: u16) -> anyhow::Result<Self> {
        Self::launch(root, Choice::Explicit, port)
    }

    /// Starts the embedded default in `./.tidings`, or in its per-checkout fallback
    /// when the account PostgreSQL runs as cannot reach `./.tidings` (see the module
    /// documentation); logs where the data went.
    pub fn start_default() -> anyhow::Result<Self> {
        Self::launch(Path::new(DEFAULT_DATA_DIR), Choice::Default, free_port()?)
    }

    fn launch(requested: &Path, choice: Choice, port: u16) -> anyhow::Result<Self> {
        let bin_dir = find_bin_dir().ok_or_else(|| anyhow!(INSTALL_HINT))?;
        // Absolute: the server may start in another working directory (apply_user).
        let bin_dir = bin_dir.canonicalize().unwrap_or(bin_dir);
        let run_as = unprivileged_user()?;
        let root = resolve_root(requested, choice, run_as.as_ref())?;
        let data_dir = root.join("pg");

        if let Some(port) = running_postmaster_port(&data_dir) {
            tracing::info!(data_dir = %data_dir.display(), port, "attaching to the PostgreSQL already running in the data directory");
            return Ok(EmbeddedPostgres {
                child: None,
                data_dir,
                port,
            });
        }
        if !data_dir.join("PG_VERSION").exists() {
            init_data_dir(&bin_dir, &data_dir, run_as.as_ref())?;
        }

        let log_path = root.join("postgres.log");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        if let Some(user) = &run_as {
            nix::unistd::chown(&log_path, Some(user.uid), Some(user.gid))?;
        }
        let mut cmd = Command::new(bin_dir.join("postgres"));
        cmd.arg("-D")
            .arg(&data_dir)
            .args(["-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        for (name, value) in SERVER_SETTINGS {
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        apply_user(&mut cmd, run_as.as_ref());
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin_dir.join("postgres").display()))?;
        tracing::info!(data_dir = %data_dir.display(), port, log = %log_path.display(), "embedded PostgreSQL starting");

        let mut pg = EmbeddedPostgres {
            child: Some(child),
            data_dir,
            port,
        };
        pg.wait_until_accepting(Duration::from_secs(60), &log_path)?;
        Ok(pg)
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn wait_until_accepting(&mut self, patience: Duration, log_path: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    let tail = fs::read_to_string(log_path).unwrap_or_default();
                    let tail: Vec<&str> = tail.lines().rev().take(15).collect();
                    bail!(
                        "embedded PostgreSQL exited during start-up ({status}); last log lines:\n{}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    );
                }
            }
            // The server accepts TCP before it is ready for queries; the caller's
            // connect retries cover the remaining start-up window.
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && self.data_dir.join("postmaster.pid").exists()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("embedded PostgreSQL did not accept connections within {patience:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Fast shutdown: disconnect clients, checkpoint, exit. Waits up to 30 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = Pid::from_raw(child.id() as i32);
        if kill(pid, Signal::SIGINT).is_err() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                tracing::info!("embedded PostgreSQL stopped");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::warn!("embedded PostgreSQL did not stop in time; killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Finds a directory holding both `initdb` and `postgres`: PATH first, then the
/// usual prefixes, newest major version first.
fn find_bin_dir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
                return Some(dir);
            }
        }
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    for prefix in [
        "/usr/lib/postgresql",
        "/usr/local/pgsql",
        "/opt/homebrew/opt",
        "/usr/pgsql",
    ] {
        if let Ok(entries) = fs::read_dir(prefix) {
            for entry in entries.flatten() {
                candidates.push(entry.path().join("bin"));
            }
        }
        candidates.push(Path::new(prefix).join("bin"));
    }
    // Highest version directory first ("17" > "15"), compared numerically.
    candidates.sort_by_key(|p| {
        std::cmp::Reverse(
            p.parent()
                .and_then(|d| d.file_name())
                .and_then(|n| n.to_str())
                .and_then(|n| n.trim_start_matches("postgresql@").parse::<u32>().ok())
                .unwrap_or(0),
        )
    });
    candidates.into_iter().find(|d| has_both(d))
}

/// The account PostgreSQL runs as when we are root; `None` when we are not root.
fn unprivileged_user() -> anyhow::Result<Option<User>> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        if let Some(user) = User::from_name(name)? {
            return Ok(Some(user));
        }
    }
    bail!(
        "running as root and no unprivileged account (postgres, nobody) exists to run PostgreSQL"
    );
}

fn apply_user(cmd: &mut Command, user: Option<&User>) {
    use std::os::unix::process::CommandExt;
    if let Some(user) = user {
        cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        cmd.env("HOME", &user.dir).env("USER", &user.name);
        // Our working directory may be closed to that account (a 0700 checkout);
        // every path we pass is absolute.
        cmd.current_dir("/");
    }
}

fn init_data_dir(bin_dir: &Path, data_dir: &Path, run_as: Option<&User>) -> anyhow::Result<()> {
    fs::create_dir_all(data_dir)?;
    if let Some(user) = run_as {
        nix::unistd::chown(data_dir, Some(user.uid), Some(user.gid))
            .with_context(|| format!("handing {} to {}", data_dir.display(), user.name))?;
    }
    let mut cmd = Command::new(bin_dir.join("initdb"));
    cmd.arg("-D")
        .arg(data_dir)
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .stdin(Stdio::null());
    apply_user(&mut cmd, run_as);
    tracing::info!(data_dir = %data_dir.display(), "initialising embedded PostgreSQL");
    let out = cmd.output().context("running initdb")?;
    if !out.status.success() {
        // A half-made directory would make the next start fail the same way; remove it.
        let _ = fs::remove_dir_all(data_dir);
        bail!(
            "initdb failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// How the data directory was chosen, which decides what an unreachable one does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// `--data-dir` or `TIDINGS_DATA_DIR` (or a caller of the library): use or refuse.
    Explicit,
    /// Nobody asked for a place: fall back to a reachable one.
    Default,
}

/// The directory the embedded PostgreSQL keeps its files in (`pg/`, `postgres.log`):
/// `requested` when the account PostgreSQL runs as can reach it, else (for the
/// default only) the per-checkout fallback.
fn resolve_root(
    requested: &Path,
    choice: Choice,
    run_as: Option<&User>,
) -> anyhow::Result<PathBuf> {
    fs::create_dir_all(requested).with_context(|| format!("creating {}", requested.display()))?;
    let requested = requested.canonicalize()?;
    // Not root: PostgreSQL runs as we do, and we can reach what we created.
    let Some(user) = run_as else {
        return Ok(requested);
    };
    let blocker = first_unsearchable(&requested, user)?;
    let has_data = requested.join("pg/PG_VERSION").exists();
    let Some(blocker) = blocker else {
        // Reachable. Still prefer a fallback that already holds this checkout's data
        // (the directory was made searchable after a first start fell back).
        if !has_data && choice == Choice::Default {
            if let Some(previous) = fallback_candidates(&requested)
                .into_iter()
                .find(|dir| owned_by_us(dir) && dir.join("pg/PG_VERSION").exists())
            {
                tracing::info!(
                    "the embedded PostgreSQL keeps its data in {} (chosen on an earlier start; see {})",
                    previous.display(),
                    requested.join(FALLBACK_NOTE).display()
                );
                return Ok(previous);
            }
        }
        return Ok(requested);
    };
    let why = format!(
        "{} is not searchable by other users, so PostgreSQL (running as {}) cannot reach its data",
        blocker.display(),
        user.name
    );
    if choice == Choice::Explicit {
        bail!(
            "{why}; choose another --data-dir or set DATABASE_URL \
             (without --data-dir and TIDINGS_DATA_DIR, Tidings picks a reachable directory itself)"
        );
    }
    if has_data {
        // Starting an empty database elsewhere would look like data loss.
        bail!(
            "{why}, and {} already holds a database; make {} searchable (chmod o+x), \
             or set DATABASE_URL",
            requested.join("pg").display(),
            blocker.display()
        );
    }
    let mut problems = vec![];
    for dir in fallback_candidates(&requested) {
        match prepare_fallback(&dir, &requested, user) {
            Ok(()) => {
                tracing::warn!(
                    "{why}; the embedded PostgreSQL keeps its data in {} instead \
                     (the same place on every start from {}; --data-dir or DATABASE_URL choose otherwise)",
                    dir.display(),
                    requested.display()
                );
                let note = format!(
                    "The embedded PostgreSQL of this directory keeps its data in\n  {}\n\
                     because {why}.\nTidings finds it there again on every start.\n",
                    dir.display()
                );
                let note_path = requested.join(FALLBACK_NOTE);
                if fs::read_to_string(&note_path).ok().as_deref() != Some(note.as_str()) {
                    if let Err(err) = fs::write(&note_path, note) {
                        tracing::warn!(error = %err, path = %note_path.display(), "could not write the note");
                    }
                }
                return Ok(dir);
            }
            Err(err) => problems.push(format!("{}: {err:#}", dir.display())),
        }
    }
    bail!(
        "{why}, and no fallback directory could be used ({}); set --data-dir to a directory \
         {} can reach, or set DATABASE_URL",
        problems.join("; "),
        user.name
    )
}

/// The fallback directories for `requested` (canonical), in the order they are tried.
fn fallback_candidates(requested: &Path) -> Vec<PathBuf> {
    let name = fallback_name(requested);
    fallback_bases()
        .into_iter()
        .map(|base| base.join(&name))
        .collect()
}

/// `<checkout>-<16 hex digits of SHA-256 of the canonical path>`: the checkout's
/// name for people listing the directory, the hash so that two checkouts of the
/// same name never share a database while one checkout always finds its own.
fn fallback_name(requested: &Path) -> String {
    use sha2::{Digest, Sha256};
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(requested.as_os_str().as_bytes());
    let label: String = requested
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let label = if label.is_empty() {
        "tidings".to_string()
    } else {
        label
    };
    format!("{label}-{}", &hex::encode(digest)[..16])
}

/// Makes `dir` (and its base) as root-owned, world-searchable directories and checks
/// that `user` can reach it. In a shared temp dir anyone may have created the path
/// first: a symlink or a directory owned by someone else is refused, not used.
fn prepare_fallback(dir: &Path, requested: &Path, user: &User) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for d in [dir.parent().context("fallback has no parent")?, dir] {
        if let Err(err) = fs::create_dir(d) {
            if err.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(err).with_context(|| format!("creating {}", d.display()));
            }
        }
        if !owned_by_us(d) {
            bail!("{} exists but is not a directory owned by us", d.display());
        }
        if fs::metadata(d)?.permissions().mode() & 0o7777 != 0o755 {
            fs::set_permissions(d, fs::Permissions::from_mode(0o755))?;
        }
    }
    if let Some(blocker) = first_unsearchable(dir, user)? {
        bail!("{} is not searchable by {}", blocker.display(), user.name);
    }
    // Say whose data this is, for people looking at /var/lib/tidings.
    let origin = dir.join("origin");
    if !origin.exists() {
        fs::write(&origin, format!("{}\n", requested.display()))?;
    }
    Ok(())
}

/// True when `dir` is a directory (not a symlink) owned by our effective user.
fn owned_by_us(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(dir)
        .map(|m| m.is_dir() && m.uid() == Uid::effective().as_raw())
        .unwrap_or(false)
}

/// The first directory on the way to `dir` (`dir` included) that `user` cannot
/// search, or `None` when `user` reaches `dir`. Asked of the kernel by running
/// `test -x` as that account, with the same credentials the server gets
/// (`apply_user`: no supplementary groups), so ACLs and group bits count exactly
/// as they will for PostgreSQL.
fn first_unsearchable(dir: &Path, user: &User) -> anyhow::Result<Option<PathBuf>> {
    let searchable = |d: &Path| -> anyhow::Result<bool> {
        let mut cmd = Command::new("test");
        cmd.arg("-x").arg(d).stdin(Stdio::null());
        apply_user(&mut cmd, Some(user));
        Ok(cmd
            .status()
            .with_context(|| format!("checking whether {} can reach {}", user.name, d.display()))?
            .success())
    };
    if searchable(dir)? {
        return Ok(None);
    }
    // Name the culprit: the first ancestor, from `/` down, that stops the search.
    for ancestor in dir.ancestors().collect::<Vec<_>>().into_iter().rev() {
        if !searchable(ancestor)? {
            return Ok(Some(ancestor.to_path_buf()));
        }
    }
    Ok(Some(dir.to_path_buf()))
}

/// The port of a live postmaster in `data_dir`, read from `postmaster.pid`
/// (line 1 is the pid, line 4 the port). A stale file (process gone) is ignored;
/// PostgreSQL removes it itself on the next start.
fn running_postmaster_port(data_dir: &Path) -> Option<u16> {
    let pid_file = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let mut lines = pid_file.lines();
    let pid = lines.next()?.trim().parse::<i32>().ok()?;
    let port = lines.nth(2)?.trim().parse::<u16>().ok()?;
    kill(Pid::from_raw(pid), None).ok()?;
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    Some(port)
}

/// A port nothing listens on right now (the OS picks it).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_names_are_stable_per_path_and_distinct_between_checkouts() {
        let a = fallback_name(Path::new("/root/tidings/.tidings"));
        assert_eq!(a, fallback_name(Path::new("/root/tidings/.tidings")));
        assert!(a.starts_with("tidings-"), "{a}");
        assert_eq!(a.len(), "tidings-".len() + 16, "{a}");
        // Same checkout name elsewhere, and a different directory in the same checkout.
        assert_ne!(a, fallback_name(Path::new("/home/ann/tidings/.tidings")));
        assert_ne!(a, fallback_name(Path::new("/root/tidings/other")));
    }

    #[test]
    fn fallback_names_stay_one_plain_path_component() {
        let name = fallback_name(Path::new("/tmp/a b/../c\u{e9}\\x/.tidings"));
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "{name}"
        );
        assert!(!name.contains('/'));
        assert_eq!(
            fallback_name(Path::new("/.tidings")).split('-').next(),
            Some("tidings")
        );
    }
}
