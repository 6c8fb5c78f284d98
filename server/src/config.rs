//! Command line and environment. Every flag has an environment variable so the
//! same binary runs from a shell, a container or a test harness.

use std::{net::SocketAddr, path::PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "tidings",
    version,
    about = "Tidings: activity feeds and transactional alerts that are never sent twice.",
    long_about = "Tidings serves an activity-feed API (events stored once, feeds computed at \
read time, race-free seen/read watermarks) and transactional alerts (fan-out on write, \
notification keys, an outbox drained by workers).\n\nWithout DATABASE_URL, `serve` starts a \
private PostgreSQL from the binaries installed on this machine, in --data-dir."
)]
pub struct Cli {
    /// Log format: `pretty` for people, `json` for log collectors.
    #[arg(long, env = "TIDINGS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API and the background workers.
    Serve(Box<ServeArgs>),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
    /// Run only the outbox workers (no HTTP API). Any number may run at once,
    /// beside or instead of the workers inside `tidings serve`.
    Worker(WorkerCommandArgs),
    /// Print the OpenAPI document (JSON) to standard output.
    Openapi,
    /// Manage tenants.
    #[command(subcommand)]
    Tenant(TenantCommand),
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant and print its API key and signing secret (shown once).
    Create {
        /// Display name of the tenant.
        #[arg(long)]
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Where the database is. With no URL, a private PostgreSQL is started in `data_dir`.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/tidings. When unset, an
    /// embedded PostgreSQL is started from the machine's installed binaries.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Directory for the embedded PostgreSQL's data (kept between runs). Default:
    /// ./.tidings. Run as root, PostgreSQL runs as the `postgres` (or `nobody`) account;
    /// when that account cannot reach ./.tidings (a checkout under a 0700 home, or in a
    /// `mktemp -d` directory), the default moves by itself to
    /// /var/lib/tidings/<checkout>-<hash of the path> (or the same under the temp dir),
    /// the same place on every start, and the log says where. A directory given here
    /// (flag or environment) is used as given, or refused when unreachable.
    // `None` means clap took no value from the command line or the environment:
    // the value source "default" as a type, so every subcommand gets it for free.
    #[arg(long, env = "TIDINGS_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Maximum connections in the pool.
    #[arg(long, env = "TIDINGS_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Address to listen on. Port 0 picks a free port; the bound address is printed.
    #[arg(long, env = "TIDINGS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "TIDINGS_MAX_BODY_BYTES", default_value_t = 64 * 1024)]
    pub max_body_bytes: usize,
    /// Operator token for /v1/admin endpoints. When unset, one is generated at start-up
    /// and printed once to the log.
    #[arg(long, env = "TIDINGS_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    #[command(flatten)]
    pub alerts: crate::alerts::AlertsConfig,
    /// Seconds to wait for in-flight requests on shutdown.
    #[arg(long, env = "TIDINGS_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
    #[command(flatten)]
    pub worker: WorkerArgs,
}

#[derive(Debug, Clone, Args)]
pub struct WorkerCommandArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    #[command(flatten)]
    pub worker: WorkerArgs,
}

/// The outbox workers: how they claim, deliver and retry. The defaults and why
/// they are what they are: `crate::outbox::OutboxConfig`.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Claim loops per process (each claims a batch, delivers it, records the
    /// results). 0 runs no outbox worker in this process.
    #[arg(long, env = "TIDINGS_OUTBOX_WORKERS", default_value_t = 1)]
    pub outbox_workers: usize,
    /// Deliveries claimed per batch.
    #[arg(long, env = "TIDINGS_OUTBOX_BATCH", default_value_t = 100)]
    pub outbox_batch: u32,
    /// Deliveries of one batch in flight at once.
    #[arg(long, env = "TIDINGS_WORKER_CONCURRENCY", default_value_t = 50)]
    pub worker_concurrency: usize,
    /// Seconds a claim is held; after that a crashed worker's deliveries are claimed again.
    #[arg(long, env = "TIDINGS_OUTBOX_LEASE_SECS", default_value_t = 60.0)]
    pub outbox_lease_secs: f64,
    /// Milliseconds between polls when no NOTIFY arrives.
    #[arg(long, env = "TIDINGS_OUTBOX_POLL_MS", default_value_t = 1000)]
    pub outbox_poll_ms: u64,
    /// Milliseconds one webhook request or SMTP send may take.
    #[arg(long, env = "TIDINGS_DELIVERY_TIMEOUT_MS", default_value_t = 10_000)]
    pub delivery_timeout_ms: u64,
    /// Webhook targets allowed besides public addresses: `none`, `loopback`,
    /// `private` (loopback, RFC 1918, CGNAT, unique-local IPv6) or `all`.
    #[arg(long, env = "TIDINGS_WEBHOOK_ALLOW_PRIVATE", value_enum, default_value_t = crate::channels::ssrf::AllowPrivate::None)]
    pub webhook_allow_private: crate::channels::ssrf::AllowPrivate,
    /// SMTP server for email, e.g. smtp://127.0.0.1:2525 or smtps://user:pass@host.
    /// Without it, email deliveries wait for a worker that has one.
    #[arg(long, env = "TIDINGS_SMTP_URL")]
    pub smtp_url: Option<String>,
    /// From header of emails.
    #[arg(
        long,
        env = "TIDINGS_EMAIL_FROM",
        default_value = "Tidings <notifications@localhost>"
    )]
    pub email_from: String,
    /// Retry schedule: delay after the first failure (default: the core's, 5000).
    #[arg(long, env = "TIDINGS_RETRY_BASE_MS")]
    pub retry_base_ms: Option<u64>,
    /// Retry schedule: growth factor of the delay (default: the core's, 4).
    #[arg(long, env = "TIDINGS_RETRY_FACTOR")]
    pub retry_factor: Option<u32>,
    /// Retry schedule: longest delay (default: the core's, 3600000).
    #[arg(long, env = "TIDINGS_RETRY_MAX_DELAY_MS")]
    pub retry_max_delay_ms: Option<u64>,
    /// Retry schedule: attempts before a delivery is dead (default: the core's, 10).
    #[arg(long, env = "TIDINGS_RETRY_MAX_ATTEMPTS")]
    pub retry_max_attempts: Option<u32>,
    /// Retry schedule: jitter fraction in [0, 1] (default: the core's, 0.2).
    #[arg(long, env = "TIDINGS_RETRY_JITTER")]
    pub retry_jitter: Option<f64>,
}
