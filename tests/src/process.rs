//! The one wrapper around a `tidings` child process, for `serve` and `worker`
//! alike.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context};

/// The `tidings` binary of this build: `TIDINGS_BIN`, or `target/<profile>/tidings`
/// next to the test executable (`target/<profile>/deps/…`).
pub fn tidings_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("TIDINGS_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let bin = profile_dir.join("tidings");
    assert!(
        bin.exists(),
        "{} is missing: build it first with `cargo build -p tidings-server` (scripts/test does)",
        bin.display()
    );
    bin
}

/// A running `tidings` process (`serve` inside a [`crate::TestApp`], or a
/// `worker` from [`TidingsProcess::worker`]) with its stderr in a log file.
/// Killed (SIGKILL) on drop unless stopped first.
pub struct TidingsProcess {
    child: Option<Child>,
    stderr_log: PathBuf,
}

impl TidingsProcess {
    /// Starts `tidings worker` (the outbox workers alone) on `database_url` with
    /// extra environment, and waits until it announces itself (migrations
    /// applied, loops running).
    pub async fn worker(
        database_url: &str,
        env: &[(String, String)],
    ) -> anyhow::Result<TidingsProcess> {
        let mut cmd = Command::new(tidings_bin());
        cmd.arg("worker").env("DATABASE_URL", database_url);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let (process, _) = TidingsProcess::start(cmd, "tidings worker running").await?;
        Ok(process)
    }

    /// Starts `cmd` and waits (up to 60 s) for the stdout line that begins with
    /// `announcement`; returns the rest of that line.
    pub(crate) async fn start(
        mut cmd: Command,
        announcement: &'static str,
    ) -> anyhow::Result<(Self, String)> {
        let stderr_log = std::env::temp_dir().join(format!(
            "tidings-test-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_log)?);
        let mut child = cmd.spawn().context("spawning tidings")?;
        let stdout = child.stdout.take().context("stdout")?;
        // Read the announcement on a blocking thread with a deadline.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(rest) = line.strip_prefix(announcement) {
                    let _ = tx.send(rest.to_string());
                    break;
                }
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let waited =
            tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60))).await?;
        let mut process = TidingsProcess {
            child: Some(child),
            stderr_log,
        };
        match waited {
            Ok(rest) => Ok((process, rest)),
            Err(_) => {
                process.kill();
                bail!(
                    "tidings did not print {announcement:?} within 60 s; its log:\n{}",
                    process.log()
                );
            }
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the process logged so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    /// SIGTERM, then wait for a clean exit; returns the exit status.
    pub async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        tokio::task::spawn_blocking(move || child.wait())
            .await?
            .context("waiting for tidings")
    }

    /// SIGTERM without waiting: the caller watches what the process does.
    pub fn send_terminate(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
    }

    /// SIGKILL: a crash, with no chance to clean up or record anything.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TidingsProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.stderr_log);
    }
}
