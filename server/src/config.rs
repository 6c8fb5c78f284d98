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
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
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
    /// Directory for the embedded PostgreSQL's data (kept between runs).
    #[arg(long, env = "TIDINGS_DATA_DIR", default_value = ".tidings")]
    pub data_dir: PathBuf,
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
}
