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
//! the server runs as that account.

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

/// A running private PostgreSQL. Dropping it stops the server.
pub struct EmbeddedPostgres {
    child: Option<Child>,
    data_dir: PathBuf,
    port: u16,
}

impl EmbeddedPostgres {
    /// Initialises `root/pg` when needed, starts PostgreSQL and waits until it accepts
    /// connections. The returned URL points at database `postgres` as superuser `postgres`.
    pub fn start(root: &Path) -> anyhow::Result<Self> {
        Self::start_on_port(root, free_port()?)
    }

    /// Like [`EmbeddedPostgres::start`], on a given port: a server stopped and
    /// started again on the same port keeps its URL (tests restart it under load).
    pub fn start_on_port(root: &Path, port: u16) -> anyhow::Result<Self> {
        let bin_dir = find_bin_dir().ok_or_else(|| anyhow!(INSTALL_HINT))?;
        fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        let root = root.canonicalize()?;
        let data_dir = root.join("pg");
        let run_as = unprivileged_user()?;

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
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
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
    }
}

fn init_data_dir(bin_dir: &Path, data_dir: &Path, run_as: Option<&User>) -> anyhow::Result<()> {
    fs::create_dir_all(data_dir)?;
    if let Some(user) = run_as {
        chown_tree(data_dir, user)?;
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

fn chown_tree(dir: &Path, user: &User) -> anyhow::Result<()> {
    nix::unistd::chown(dir, Some(user.uid), Some(user.gid))
        .with_context(|| format!("handing {} to {}", dir.display(), user.name))?;
    // The account must be able to reach the directory: every ancestor needs o+x,
    // which is the case for ordinary project checkouts. Say so clearly if not.
    let mut ancestor = dir.parent();
    while let Some(a) = ancestor {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = fs::metadata(a) {
            if meta.permissions().mode() & 0o001 == 0 {
                bail!(
                    "{} is not searchable by other users, so PostgreSQL (running as {}) cannot reach its data; \
                     choose another --data-dir or set DATABASE_URL",
                    a.display(),
                    user.name
                );
            }
        }
        ancestor = a.parent();
    }
    Ok(())
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
