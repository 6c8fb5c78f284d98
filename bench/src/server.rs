//! Processes the bench starts: `tidings serve` / `tidings worker` (the real release
//! binary) and the no-op webhook sink.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use nix::{sys::signal, unistd::Pid};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

pub const ADMIN_TOKEN: &str = "bench-admin-token-of-at-least-32-bytes";
/// `TIDINGS_METRICS_TOKEN` of every bench server: `/metrics` is served on the
/// API's listener only behind a token.
pub const METRICS_TOKEN: &str = "bench-metrics-token-of-at-least-32-bytes";

/// `TIDINGS_SECRET_KEY` of every `tidings` process the bench starts, and the
/// key the seed seals the tenants' signing secrets with: a secret written in
/// clear after a start has bound every stored secret is refused
/// (`tidings_server::tenants::secrets`), and `tidings migrate` is such a start.
pub const SECRET_KEY: &str = "bench:YmVuY2gtc2VjcmV0LWtleS1vZi0zMi1ieXRlcy0hISE=";

/// The environment of the main bench server (and of a "before" binary run
/// beside it, so the two differ in their code alone).
pub fn main_server_env() -> Vec<(String, String)> {
    vec![
        // The HTTP workloads measure the API alone; the drain workload runs
        // `tidings worker` processes of its own.
        ("TIDINGS_OUTBOX_WORKERS".into(), "0".into()),
        ("TIDINGS_WEBHOOK_ALLOW_PRIVATE".into(), "loopback".into()),
        // Throughput workloads push one tenant (often one user) to its
        // maximum; the isolation workload starts a server of its own with
        // the limits on.
        ("TIDINGS_RATE_LIMITS".into(), "false".into()),
    ]
}

/// The environment every `tidings` process the bench starts has, whatever
/// else its launch adds (its database, listener and [`Launch::env`]).
pub fn common_env() -> [(&'static str, &'static str); 5] {
    [
        ("TIDINGS_ADMIN_TOKEN", ADMIN_TOKEN),
        ("TIDINGS_METRICS_TOKEN", METRICS_TOKEN),
        ("TIDINGS_SECRET_KEY", SECRET_KEY),
        // Per-request logs would measure the terminal, not the service.
        ("RUST_LOG", "warn"),
        ("TIDINGS_LOG_FORMAT", "json"),
    ]
}

/// A running `tidings` process; SIGTERM then SIGKILL when dropped.
pub struct Tidings {
    child: Child,
    pub base_url: String,
}

pub struct Launch<'a> {
    pub bin: &'a Path,
    pub database_url: &'a str,
    pub log_dir: &'a Path,
    pub name: &'a str,
    pub env: Vec<(String, String)>,
}

impl Tidings {
    /// `tidings serve` on a free port; returns once it printed its address.
    pub async fn serve(launch: Launch<'_>) -> anyhow::Result<Tidings> {
        let (mut child, log_path) = spawn(&launch, &["serve"])?;
        let stdout = child.stdout.take().context("serve stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .context("tidings serve did not print its address within 60 s")??
            .with_context(|| {
                format!(
                    "tidings serve exited before listening; see {}",
                    log_path.display()
                )
            })?;
        let base_url = line
            .strip_prefix("tidings listening on ")
            .with_context(|| format!("unexpected first line from tidings serve: {line}"))?
            .trim()
            .to_string();
        Ok(Tidings { child, base_url })
    }

    /// `tidings worker` (no HTTP).
    pub async fn worker(launch: Launch<'_>) -> anyhow::Result<Tidings> {
        let (child, _) = spawn(&launch, &["worker"])?;
        Ok(Tidings {
            child,
            base_url: String::new(),
        })
    }

    /// The process id (for its RSS).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = signal::kill(Pid::from_raw(pid as i32), signal::Signal::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

fn spawn(launch: &Launch<'_>, args: &[&str]) -> anyhow::Result<(Child, PathBuf)> {
    std::fs::create_dir_all(launch.log_dir)?;
    let log_path = launch.log_dir.join(format!("{}.log", launch.name));
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = Command::new(launch.bin);
    cmd.args(args)
        .env("DATABASE_URL", launch.database_url)
        .env("TIDINGS_LISTEN", "127.0.0.1:0")
        .envs(common_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    for (k, v) in &launch.env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", launch.bin.display()))?;
    Ok((child, log_path))
}

/// `tidings migrate` against the bench database.
pub async fn migrate(bin: &Path, database_url: &str) -> anyhow::Result<()> {
    let out = Command::new(bin)
        .arg("migrate")
        .env("DATABASE_URL", database_url)
        .env("TIDINGS_SECRET_KEY", SECRET_KEY)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .context("running tidings migrate")?;
    if !out.status.success() {
        bail!(
            "tidings migrate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The no-op sink: a local webhook receiver that answers 204 at once and counts
/// what it got. It runs on the harness's own runtime, on loopback.
pub struct Sink {
    pub url: String,
    pub received: Arc<AtomicU64>,
    /// With [`Sink::start_timing`]: when each request carrying a `bench_seq`
    /// arrived, by that number.
    pub arrivals: Arrivals,
    _task: tokio::task::JoinHandle<()>,
}

/// (`bench_seq`, arrival) per request, in the order they came.
pub type Arrivals = Arc<std::sync::Mutex<Vec<(u32, Instant)>>>;

#[derive(Clone)]
struct SinkState {
    received: Arc<AtomicU64>,
    arrivals: Option<Arrivals>,
}

impl Sink {
    /// Counts only: the body is not read, so the drain measures the worker.
    pub async fn start() -> anyhow::Result<Sink> {
        Sink::listen(false).await
    }

    /// Also stamps each request's arrival under the `bench_seq` of its body.
    pub async fn start_timing() -> anyhow::Result<Sink> {
        Sink::listen(true).await
    }

    async fn listen(timing: bool) -> anyhow::Result<Sink> {
        use poem::{handler, web::Data, EndpointExt, Route};
        #[handler]
        async fn receive(state: Data<&SinkState>, body: poem::Body) -> poem::http::StatusCode {
            let at = Instant::now();
            if let Some(arrivals) = &state.arrivals {
                let bytes = body.into_bytes().await.unwrap_or_default();
                if let Some(seq) = crate::workloads::bench_seq(&bytes) {
                    arrivals.lock().unwrap().push((seq, at));
                }
            }
            state.received.fetch_add(1, Ordering::Relaxed);
            poem::http::StatusCode::NO_CONTENT
        }
        let received = Arc::new(AtomicU64::new(0));
        let arrivals = Arc::new(std::sync::Mutex::new(Vec::new()));
        let app = Route::new().at("/*", poem::post(receive)).data(SinkState {
            received: received.clone(),
            arrivals: timing.then(|| arrivals.clone()),
        });
        let (addr, task) = serve_on_loopback(app).await?;
        Ok(Sink {
            url: format!("http://{addr}/hook"),
            received,
            arrivals,
            _task: task,
        })
    }
}

/// Serves `app` on a free loopback port, on the harness's own runtime, until
/// the task is dropped with its owner: the address and the task.
pub async fn serve_on_loopback(
    app: impl poem::Endpoint + 'static,
) -> anyhow::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    use poem::{
        listener::{Acceptor, Listener, TcpListener},
        Server,
    };
    let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await?;
    let addr = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().copied())
        .context("the loopback listener has no address")?;
    let task = tokio::spawn(async move {
        let _ = Server::new_with_acceptor(acceptor).run(app).await;
    });
    Ok((addr, task))
}

/// The no-op SMTP sink: a loopback mail server that accepts every message at
/// once and counts them (the email channel's counterpart of [`Sink`]). It
/// speaks the plain-text subset a client without TLS uses: greeting, EHLO,
/// MAIL, RCPT, DATA (until the lone dot), RSET, NOOP, QUIT.
pub struct SmtpSink {
    pub url: String,
    pub received: Arc<AtomicU64>,
    _task: tokio::task::JoinHandle<()>,
}

impl SmtpSink {
    pub async fn start() -> anyhow::Result<SmtpSink> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let received = Arc::new(AtomicU64::new(0));
        let counter = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let _ = smtp_session(socket, &counter).await;
                });
            }
        });
        Ok(SmtpSink {
            url: format!("smtp://{addr}"),
            received,
            _task: task,
        })
    }
}

async fn smtp_session(socket: tokio::net::TcpStream, counter: &AtomicU64) -> std::io::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read);
    write.write_all(b"220 bench-sink ESMTP\r\n").await?;
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
        let answer: &[u8] = match verb.as_str() {
            "EHLO" => b"250-bench-sink\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n",
            "HELO" | "MAIL" | "RCPT" | "RSET" | "NOOP" => b"250 OK\r\n",
            "DATA" => {
                write
                    .write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                    .await?;
                loop {
                    line.clear();
                    if lines.read_line(&mut line).await? == 0 {
                        return Ok(());
                    }
                    if line == ".\r\n" || line == ".\n" {
                        break;
                    }
                }
                counter.fetch_add(1, Ordering::Relaxed);
                b"250 OK queued\r\n"
            }
            "QUIT" => {
                write.write_all(b"221 Bye\r\n").await?;
                return Ok(());
            }
            _ => b"502 Command not implemented\r\n",
        };
        write.write_all(answer).await?;
    }
}
