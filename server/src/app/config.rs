//! Every setting: the command line and its environment variables (every flag
//! has one, so the same binary runs from a shell, a container or a test
//! harness), the defaults — each written once, as a constant below — and the
//! validated settings the rest of the server reads ([`Settings`]).
//!
//! **Architecture invariant:** this module imports nothing of the server above
//! it; what its value types need (e.g. [`AllowPrivate`]) is defined here.

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use clap::{Args, Parser, Subcommand, ValueEnum};
use tidings_core::{FanoutThresholds, RetrySchedule};

/// Defaults, each written once. The outbox's are explained on [`OutboxConfig`].
pub mod defaults {
    use std::time::Duration;

    pub const DATA_DIR: &str = ".tidings";
    pub const DB_MAX_CONNECTIONS: u32 = 16;
    /// How long a request waits for a pooled connection (and for its
    /// tenant's share of the pool) before it is answered 503.
    pub const DB_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DB_STATEMENT_TIMEOUT_MS: u64 = 10_000;
    pub const DB_LOCK_TIMEOUT_MS: u64 = 2_000;
    /// Above the statement timeout plus the acquire timeout, so a transaction
    /// waiting on either is never ended first; far below what an open
    /// transaction may cost: it holds its locks and, while it holds an xid,
    /// every tenant's feed horizon.
    pub const DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: u64 = 15_000;
    pub const DB_TENANT_SHARE_PERCENT: u32 = 50;

    pub const RATE_LIMITS: bool = true;
    pub const RATE_WRITES_PER_SEC: f64 = 200.0;
    pub const RATE_WRITES_BURST: u32 = 400;
    pub const RATE_READS_PER_SEC: f64 = 1_000.0;
    pub const RATE_READS_BURST: u32 = 2_000;
    pub const RATE_USER_READS_PER_SEC: f64 = 20.0;
    pub const RATE_USER_READS_BURST: u32 = 60;
    pub const RATE_STREAMS_PER_SEC: f64 = 50.0;
    pub const RATE_STREAMS_BURST: u32 = 200;
    pub const RATE_USER_STREAMS_PER_SEC: f64 = 1.0;
    pub const RATE_USER_STREAMS_BURST: u32 = 10;
    pub const RATE_KEY_READS_PER_SEC: f64 = 500.0;
    pub const RATE_KEY_READS_BURST: u32 = 1_000;
    pub const RATE_REFUSAL_HOLD_MS: u64 = 1_000;
    pub const RATE_REFUSAL_HOLD_MAX_MS: u64 = 60_000;
    pub const RATE_REFUSALS_HELD_PER_TENANT: usize = 100;
    pub const LISTEN: &str = "127.0.0.1:8080";
    pub const MAX_BODY_BYTES: usize = 64 * 1024;
    pub const SHUTDOWN_GRACE_SECS: u64 = 10;
    pub const INBOX_PAGE: bool = true;

    pub const REPLICA_WAIT_MS: u64 = 50;
    pub const REPLICA_MAX_LAG_MS: u64 = 2_000;
    pub const REPLICA_CHECK_MS: u64 = 250;
    /// The default lag bound plus a second: a feed read on a standby is then
    /// at most about a second further behind than its replay lag.
    pub const REPLICA_MAX_HORIZON_AGE_MS: u64 = 3_000;

    pub const OUTBOX_WORKERS: usize = 1;
    pub const OUTBOX_BATCH: u32 = 100;
    pub const WORKER_CONCURRENCY: usize = 50;
    pub const OUTBOX_LEASE_SECS: f64 = 60.0;
    pub const OUTBOX_POLL_MS: u64 = 1000;
    pub const DELIVERY_TIMEOUT_MS: u64 = 10_000;
    pub const EMAIL_FROM: &str = "Tidings <notifications@localhost>";

    pub const WEBHOOK_ROTATION_GRACE_SECS: u64 = 24 * 3600;
    pub const USER_TOKEN_MAX_LIFETIME_SECS: u64 = 24 * 3600;
    pub const SIGNING_ROTATION_OVERLAP_SECS: u64 = 24 * 3600;
    pub const IDEMPOTENCY_RETENTION_SECS: u64 = 24 * 3600;
    pub const IDEMPOTENCY_PURGE_INTERVAL_SECS: u64 = 3600;
    pub const IDEMPOTENCY_LEASE_SECS: u64 = 60;

    pub const NATS_STREAM: &str = "TIDINGS_ALERTS";
    pub const NATS_SUBJECT: &str = "tidings.*.alerts";
    pub const NATS_DURABLE: &str = "tidings-alerts";
    pub const NATS_ACK_WAIT_SECS: u64 = 30;

    pub const RETENTION_DELIVERED_SECS: u64 = 30 * 24 * 3600;
    pub const RETENTION_DEAD_SECS: u64 = 90 * 24 * 3600;
    pub const RETENTION_INBOX_MESSAGES_SECS: u64 = 7 * 24 * 3600;
    pub const RETENTION_INTERVAL_SECS: u64 = 300;
    pub const RETENTION_BATCH: i64 = 500;
    pub const RETENTION_PAUSE_MS: u64 = 20;

    pub const METRICS_SAMPLE_SECS: u64 = 15;
    pub const READY_LISTEN_DOWN_SECS: u64 = 15;
    /// Shortest admin token `serve` accepts, in bytes: 256 bits, as much as a
    /// generated one carries, so the token cannot be guessed.
    pub const MIN_ADMIN_TOKEN_BYTES: usize = 32;

    /// Shortest poll interval accepted, whatever is configured.
    pub const MIN_OUTBOX_POLL: Duration = Duration::from_millis(10);

    pub const STREAM_TICK_MS: u64 = 50;
    pub const STREAM_MAX_PER_USER: usize = 10;
    pub const STREAM_MAX_CONNECTIONS: usize = 10_000;
    pub const STREAM_TENANT_SHARE_PERCENT: u32 = 50;
    pub const STREAM_BUFFER: usize = 256;
    pub const STREAM_MAX_REPLAY: usize = 1000;
    pub const STREAM_TICKET_TTL_SECS: u64 = 60;
    /// How long a preflight's answer may be cached by the browser.
    pub const CORS_MAX_AGE_SECS: u64 = 600;

    /// The HTTP listener's limits; the reasons are on [`super::HttpConfig`].
    pub const HTTP_HEADER_READ_TIMEOUT_SECS: u64 = 10;
    pub const HTTP_IDLE_TIMEOUT_SECS: u64 = 75;
    pub const HTTP_BODY_TIMEOUT_SECS: u64 = 30;
    pub const HTTP_MAX_CONNECTIONS: usize = STREAM_MAX_CONNECTIONS + 1_000;
    pub const HTTP_WRITE_TIMEOUT_SECS: u64 = 30;

    /// Bounds on stored work; the reasons are on [`super::BoundsConfig`].
    pub const MAX_WEBHOOK_ENDPOINTS: u32 = 50;
    pub const MAX_MEMBERSHIPS_PER_USER: u32 = 1_000;
    pub const ALERT_BATCH_DELIVERIES: u64 = 1_000;
    pub const ALERT_MAX_DELIVERIES: u64 = 100_000;
}

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
    // URLs carry passwords: `--help` never shows their environment values.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
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
    #[arg(long, env = "TIDINGS_DB_MAX_CONNECTIONS", default_value_t = defaults::DB_MAX_CONNECTIONS)]
    pub db_max_connections: u32,
    /// `statement_timeout` of every pooled session, in ms (0: none): a
    /// statement running longer is cancelled and its request answered 503
    /// `database_timeout`. Migrations run without it.
    #[arg(long, env = "TIDINGS_DB_STATEMENT_TIMEOUT_MS", default_value_t = defaults::DB_STATEMENT_TIMEOUT_MS)]
    pub db_statement_timeout_ms: u64,
    /// `lock_timeout` of every pooled session, in ms (0: none): the longest a
    /// statement waits for a lock. It also bounds an alert's wait for its
    /// entity (another alert of the same event type and entity in flight):
    /// past it the alert is refused with 409 `entity_busy` and Retry-After.
    #[arg(long, env = "TIDINGS_DB_LOCK_TIMEOUT_MS", default_value_t = defaults::DB_LOCK_TIMEOUT_MS)]
    pub db_lock_timeout_ms: u64,
    /// Key for secrets at rest (tenants' signing secrets, webhook secrets):
    /// `<key id>:<base64 of 32 bytes>` (`openssl rand -base64 32`), or several
    /// separated by commas: the first seals, all open, and start-up re-seals
    /// what an older key sealed (rotation). Unset: a key generated on first
    /// start and kept in <data dir>/secret-key (one box; replicas on several
    /// machines must share one TIDINGS_SECRET_KEY).
    #[arg(
        long,
        env = "TIDINGS_SECRET_KEY",
        hide_env_values = true,
        value_name = "KEYS"
    )]
    pub secret_key: Option<String>,
    /// A direct PostgreSQL URL (the primary, not a pooler) for what needs a
    /// session: LISTEN (cache invalidation, worker wake-ups) and migrations
    /// (their session lock). Required with TIDINGS_DATABASE_POOLER=transaction,
    /// which cannot keep a session. Default: DATABASE_URL.
    #[arg(long, env = "TIDINGS_DATABASE_LISTEN_URL", hide_env_values = true)]
    pub database_listen_url: Option<String>,
    /// What DATABASE_URL reaches: `none` (the primary itself, or a pooler in
    /// session mode) or `transaction` (PgBouncer in transaction pooling mode:
    /// every statement then runs inside a transaction of its own, without
    /// named prepared statements; ARCHITECTURE.md, "PgBouncer").
    #[arg(long, env = "TIDINGS_DATABASE_POOLER", value_enum, default_value_t = Pooler::None)]
    pub database_pooler: Pooler,
    /// `idle_in_transaction_session_timeout` of every pooled session, in ms
    /// (0: none): a session left inside a transaction with no statement for
    /// this long (a task stalled or lost mid-transaction) is ended by
    /// PostgreSQL, releasing its locks and the feed horizon it holds back.
    #[arg(long, env = "TIDINGS_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", default_value_t = defaults::DB_IDLE_IN_TRANSACTION_TIMEOUT_MS)]
    pub db_idle_in_transaction_timeout_ms: u64,
}

/// What sits between Tidings and the primary (`TIDINGS_DATABASE_POOLER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Pooler {
    /// The primary itself, or a pooler that keeps a session per client.
    #[default]
    None,
    /// A pooler that hands the server connection back after each transaction.
    Transaction,
}

/// The timeouts set on every pooled session (`db::connect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionTimeouts {
    /// `statement_timeout`; zero: none.
    pub statement: Duration,
    /// `lock_timeout`; zero: none.
    pub lock: Duration,
    /// `idle_in_transaction_session_timeout`; zero: none.
    pub idle_in_transaction: Duration,
}

impl SessionTimeouts {
    /// The timeouts as statements for one simple-query message: for the
    /// session, or (`local`) for the current transaction only. The one place
    /// their text is written: the pool's sessions and the transactions behind a
    /// transaction pooler both run it.
    pub fn set_statements(&self, local: bool) -> String {
        let scope = if local { "LOCAL " } else { "" };
        format!(
            "SET {scope}statement_timeout = {}; SET {scope}lock_timeout = {}; \
             SET {scope}idle_in_transaction_session_timeout = {}",
            self.statement.as_millis(),
            self.lock.as_millis(),
            self.idle_in_transaction.as_millis()
        )
    }
}

impl DatabaseArgs {
    pub fn session_timeouts(&self) -> SessionTimeouts {
        SessionTimeouts {
            statement: Duration::from_millis(self.db_statement_timeout_ms),
            lock: Duration::from_millis(self.db_lock_timeout_ms),
            idle_in_transaction: Duration::from_millis(self.db_idle_in_transaction_timeout_ms),
        }
    }
}

/// Connections of the primary's pool that `serve`'s own tasks hold, as
/// [`ServeArgs::pool_needs`] counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolNeeds {
    /// LISTEN sessions, held for good: the membership cache, the stream's
    /// memberships and marks, expansion wake-ups, outbox wake-ups (with
    /// outbox workers). None when TIDINGS_DATABASE_LISTEN_URL gives them a
    /// pool of their own.
    pub listen: u32,
    /// One per outbox claim loop, for its claims and completions.
    pub outbox: u32,
    /// Team expansion, the stream's tail read, the NATS consumer (when
    /// configured), and one for the periodic tasks (gauges, retention,
    /// idempotency purge) taking turns.
    pub background: u32,
    /// Left for requests at the least.
    pub requests: u32,
}

impl PoolNeeds {
    pub fn total(&self) -> u32 {
        self.listen + self.outbox + self.background + self.requests
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Address to listen on. Port 0 picks a free port; the bound address is printed.
    #[arg(long, env = "TIDINGS_LISTEN", default_value = defaults::LISTEN)]
    pub listen: SocketAddr,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "TIDINGS_MAX_BODY_BYTES", default_value_t = defaults::MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Operator token for /v1/admin endpoints, at least 32 bytes (`serve` refuses a
    /// shorter one). When unset, one is generated at start-up and printed once to the log.
    #[arg(long, env = "TIDINGS_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    #[command(flatten)]
    pub alerts: AlertsConfig,
    #[command(flatten)]
    pub auth: AuthConfig,
    #[command(flatten)]
    pub stream: StreamConfig,
    #[command(flatten)]
    pub limits: LimitsConfig,
    #[command(flatten)]
    pub http: HttpConfig,
    #[command(flatten)]
    pub bounds: BoundsConfig,
    /// Origins allowed to call the API from a browser (CORS), comma-separated,
    /// e.g. `https://app.example.com,http://localhost:5173`. Default: none, so
    /// browsers on other origins are refused.
    #[arg(long, env = "TIDINGS_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// Seconds to wait for in-flight requests on shutdown.
    #[arg(long, env = "TIDINGS_SHUTDOWN_GRACE_SECS", default_value_t = defaults::SHUTDOWN_GRACE_SECS)]
    pub shutdown_grace_secs: u64,
    /// Serve the inbox page (bell, feed, marks, live updates) at /inbox/. It is
    /// static code that calls the API with a user token; `false` removes the route.
    #[arg(long, env = "TIDINGS_INBOX_PAGE", default_value_t = defaults::INBOX_PAGE, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub inbox_page: bool,
    #[command(flatten)]
    pub worker: WorkerArgs,
    #[command(flatten)]
    pub ops: OpsConfig,
    #[command(flatten)]
    pub retention: RetentionConfig,
    #[command(flatten)]
    pub replicas: ReplicaArgs,
}

impl ServeArgs {
    /// What the pool must hold for `serve`'s background tasks to run beside
    /// requests. Below it they wait on each other: with a pool of 4 the
    /// LISTEN sessions alone take every connection, and the outbox and team
    /// expansion time out acquiring one, with nothing to say why.
    pub fn pool_needs(&self) -> PoolNeeds {
        let own_listen_pool = self
            .database
            .database_listen_url
            .as_deref()
            .is_some_and(|u| !u.is_empty());
        let outbox = self.worker.outbox_workers as u32;
        PoolNeeds {
            listen: if own_listen_pool {
                0
            } else {
                4 + u32::from(outbox > 0)
            },
            outbox,
            background: 3 + u32::from(self.alerts.nats_url.is_some()),
            requests: 2,
        }
    }

    /// Refuses a pool smaller than [`ServeArgs::pool_needs`].
    pub fn check_pool_size(&self) -> anyhow::Result<()> {
        let needs = self.pool_needs();
        anyhow::ensure!(
            self.database.db_max_connections >= needs.total(),
            "TIDINGS_DB_MAX_CONNECTIONS is {}; with these settings at least {} are needed: \
             {} LISTEN sessions, {} for the outbox workers, {} for background tasks and {} \
             for requests (TIDINGS_DATABASE_LISTEN_URL moves the LISTEN sessions to a pool \
             of their own)",
            self.database.db_max_connections,
            needs.total(),
            needs.listen,
            needs.outbox,
            needs.background,
            needs.requests
        );
        Ok(())
    }
}

/// How long what is done is kept, and how the purge runs. The purge deletes
/// in batches of `retention_batch` rows, each its own short statement, with a
/// pause between batches: it never holds a lock or a transaction long enough
/// to show in feed latency or hold back the feed horizon.
#[derive(Debug, Clone, Args)]
pub struct RetentionConfig {
    /// Seconds sent and skipped deliveries are kept (by creation time); with the
    /// last of them go their notification and, once it has none left, the alert.
    /// A notification key is unique while its notification is kept: the same
    /// alert sent again after this is delivered again.
    #[arg(long, env = "TIDINGS_RETENTION_DELIVERED_SECS", default_value_t = defaults::RETENTION_DELIVERED_SECS)]
    pub retention_delivered_secs: u64,
    /// Seconds dead deliveries are kept (by creation time); operators can re-queue
    /// one (`POST /v1/deliveries/{id}/retry`) only until then.
    #[arg(long, env = "TIDINGS_RETENTION_DEAD_SECS", default_value_t = defaults::RETENTION_DEAD_SECS)]
    pub retention_dead_secs: u64,
    /// Seconds events and in-app feed items are kept, for tenants without their
    /// own setting (`PUT /v1/admin/tenants/{id}/retention`). Unset: kept forever.
    /// A feed cursor older than this pages to the end of the feed.
    #[arg(long, env = "TIDINGS_RETENTION_FEED_SECS")]
    pub retention_feed_secs: Option<u64>,
    /// Seconds the NATS inbox remembers a message id (the duplicate check). Keep it
    /// longer than the longest a message can be redelivered: the stream's max age.
    #[arg(long, env = "TIDINGS_RETENTION_INBOX_MESSAGES_SECS", default_value_t = defaults::RETENTION_INBOX_MESSAGES_SECS)]
    pub retention_inbox_messages_secs: u64,
    /// Seconds between purge rounds. 0 turns the purge off in this process (run
    /// it in some instances only, if you like: several purge safely at once).
    #[arg(long, env = "TIDINGS_RETENTION_INTERVAL_SECS", default_value_t = defaults::RETENTION_INTERVAL_SECS)]
    pub retention_interval_secs: u64,
    /// Rows deleted per statement.
    #[arg(long, env = "TIDINGS_RETENTION_BATCH", default_value_t = defaults::RETENTION_BATCH)]
    pub retention_batch: i64,
    /// Milliseconds to pause between two batches.
    #[arg(long, env = "TIDINGS_RETENTION_PAUSE_MS", default_value_t = defaults::RETENTION_PAUSE_MS)]
    pub retention_pause_ms: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            retention_delivered_secs: defaults::RETENTION_DELIVERED_SECS,
            retention_dead_secs: defaults::RETENTION_DEAD_SECS,
            retention_feed_secs: None,
            retention_inbox_messages_secs: defaults::RETENTION_INBOX_MESSAGES_SECS,
            retention_interval_secs: defaults::RETENTION_INTERVAL_SECS,
            retention_batch: defaults::RETENTION_BATCH,
            retention_pause_ms: defaults::RETENTION_PAUSE_MS,
        }
    }
}

/// Hot standbys that serve reads (ARCHITECTURE.md, "Reads from hot standbys").
#[derive(Debug, Clone, Args)]
pub struct ReplicaArgs {
    /// Comma-separated URLs of hot standbys of DATABASE_URL's primary (streaming
    /// replication). Feed pages and badge counts are read from them; writes,
    /// marks and everything that must be current stay on the primary. Unset:
    /// every statement goes to DATABASE_URL.
    #[arg(long, env = "TIDINGS_DATABASE_REPLICA_URLS", value_delimiter = ',')]
    pub database_replica_urls: Vec<String>,
    /// Read-your-writes: how long a read that carries a consistency token waits
    /// for a standby to replay up to it before going to the primary, in ms.
    #[arg(long, env = "TIDINGS_REPLICA_WAIT_MS", default_value_t = defaults::REPLICA_WAIT_MS)]
    pub replica_wait_ms: u64,
    /// A standby further behind the primary than this (ms) is taken out of
    /// rotation until it catches up.
    #[arg(long, env = "TIDINGS_REPLICA_MAX_LAG_MS", default_value_t = defaults::REPLICA_MAX_LAG_MS)]
    pub replica_max_lag_ms: u64,
    /// How often each standby's health and replay position are checked, in ms.
    #[arg(long, env = "TIDINGS_REPLICA_CHECK_MS", default_value_t = defaults::REPLICA_CHECK_MS)]
    pub replica_check_ms: u64,
    /// A standby serves feeds below the per-tenant horizons read on the
    /// primary that it has replayed. When the newest of those is older than
    /// this (ms) — replay lag plus the time between horizon readings, at most
    /// TIDINGS_REPLICA_CHECK_MS — the standby is taken out of rotation until
    /// it catches up, and a read that finds none recent enough goes to the
    /// primary. Keep it above TIDINGS_REPLICA_MAX_LAG_MS plus the check
    /// interval, or the horizon bound takes standbys out first.
    #[arg(long, env = "TIDINGS_REPLICA_MAX_HORIZON_AGE_MS", default_value_t = defaults::REPLICA_MAX_HORIZON_AGE_MS)]
    pub replica_max_horizon_age_ms: u64,
}

impl Default for ReplicaArgs {
    fn default() -> Self {
        ReplicaArgs {
            database_replica_urls: Vec::new(),
            replica_wait_ms: defaults::REPLICA_WAIT_MS,
            replica_max_lag_ms: defaults::REPLICA_MAX_LAG_MS,
            replica_check_ms: defaults::REPLICA_CHECK_MS,
            replica_max_horizon_age_ms: defaults::REPLICA_MAX_HORIZON_AGE_MS,
        }
    }
}

impl RetentionConfig {
    /// Checks the settings against each other and the NATS inbox's.
    pub fn validate(&self, alerts: &AlertsConfig) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.retention_batch >= 1,
            "TIDINGS_RETENTION_BATCH must be at least 1"
        );
        anyhow::ensure!(
            self.retention_inbox_messages_secs >= 2 * alerts.nats_ack_wait_secs,
            "TIDINGS_RETENTION_INBOX_MESSAGES_SECS must be at least twice TIDINGS_NATS_ACK_WAIT_SECS: \
             a redelivered message must still find its id"
        );
        anyhow::ensure!(
            self.retention_feed_secs != Some(0),
            "TIDINGS_RETENTION_FEED_SECS must be positive (unset keeps the feed forever)"
        );
        Ok(())
    }

    /// `None`: the purge is off in this process.
    pub fn interval(&self) -> Option<Duration> {
        (self.retention_interval_secs > 0)
            .then(|| Duration::from_secs(self.retention_interval_secs))
    }

    pub fn pause(&self) -> Duration {
        Duration::from_millis(self.retention_pause_ms)
    }
}

/// What operators watch: metrics and readiness.
#[derive(Debug, Clone, Args)]
pub struct OpsConfig {
    /// Serve `GET /metrics` (Prometheus text) on this address, apart from the
    /// API, e.g. 127.0.0.1:9090. Unset: `/metrics` is served on the main
    /// listener only when TIDINGS_METRICS_TOKEN is set, and otherwise not at
    /// all (the API's listener is public; metrics are not for everyone).
    #[arg(long, env = "TIDINGS_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Seconds between samples of the gauges that need a query (outbox backlog
    /// and oldest age, dead deliveries, feed horizon lag); scrapes read the
    /// last sample.
    #[arg(long, env = "TIDINGS_METRICS_SAMPLE_SECS", default_value_t = defaults::METRICS_SAMPLE_SECS)]
    pub metrics_sample_secs: u64,
    /// `/readyz` fails once one of this instance's LISTEN connections (cache
    /// invalidation, outbox and expansion wake-ups) has been down this many
    /// seconds: the instance still answers correctly, but bypasses its cache
    /// and only polls for work.
    #[arg(long, env = "TIDINGS_READY_LISTEN_DOWN_SECS", default_value_t = defaults::READY_LISTEN_DOWN_SECS)]
    pub ready_listen_down_secs: u64,
    /// Bearer token a scrape of `/metrics` must carry (`Authorization: Bearer
    /// …`), at least 32 bytes. Set, `/metrics` is also served on the main
    /// listener when TIDINGS_METRICS_LISTEN is unset; on its own address too
    /// it then needs the token. Unset or empty: no token.
    #[arg(long, env = "TIDINGS_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
}

impl Default for OpsConfig {
    fn default() -> Self {
        OpsConfig {
            metrics_listen: None,
            metrics_sample_secs: defaults::METRICS_SAMPLE_SECS,
            ready_listen_down_secs: defaults::READY_LISTEN_DOWN_SECS,
            metrics_token: None,
        }
    }
}

impl OpsConfig {
    pub fn metrics_sample_interval(&self) -> Duration {
        Duration::from_secs(self.metrics_sample_secs.max(1))
    }

    pub fn ready_listen_down(&self) -> Duration {
        Duration::from_secs(self.ready_listen_down_secs)
    }

    /// The scrape token, if one is set (an empty value is none).
    pub fn metrics_token(&self) -> Option<&str> {
        self.metrics_token.as_deref().filter(|t| !t.is_empty())
    }

    /// Whether the main listener serves `/metrics`: only behind a token, and
    /// only when it has no address of its own.
    pub fn metrics_on_api_listener(&self) -> bool {
        self.metrics_listen.is_none() && self.metrics_token().is_some()
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(token) = self.metrics_token() {
            check_token_length("TIDINGS_METRICS_TOKEN", token)?;
        }
        Ok(())
    }
}

impl ReplicaArgs {
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.replica_wait_ms)
    }

    pub fn max_lag(&self) -> Duration {
        Duration::from_millis(self.replica_max_lag_ms.max(1))
    }

    pub fn check_interval(&self) -> Duration {
        Duration::from_millis(self.replica_check_ms.max(10))
    }

    pub fn max_horizon_age(&self) -> Duration {
        Duration::from_millis(self.replica_max_horizon_age_ms.max(1))
    }
}

#[derive(Debug, Clone, Args)]
pub struct WorkerCommandArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    #[command(flatten)]
    pub worker: WorkerArgs,
}

/// The outbox workers: how they claim, deliver and retry. The defaults and why
/// they are what they are: [`OutboxConfig`].
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Claim loops per process (each claims a batch, delivers it, records the
    /// results). 0 runs no outbox worker in this process.
    #[arg(long, env = "TIDINGS_OUTBOX_WORKERS", default_value_t = defaults::OUTBOX_WORKERS)]
    pub outbox_workers: usize,
    /// Deliveries claimed per batch.
    #[arg(long, env = "TIDINGS_OUTBOX_BATCH", default_value_t = defaults::OUTBOX_BATCH)]
    pub outbox_batch: u32,
    /// Deliveries of one batch in flight at once.
    #[arg(long, env = "TIDINGS_WORKER_CONCURRENCY", default_value_t = defaults::WORKER_CONCURRENCY)]
    pub worker_concurrency: usize,
    /// Seconds a claim is held; after that a crashed worker's deliveries are claimed again.
    #[arg(long, env = "TIDINGS_OUTBOX_LEASE_SECS", default_value_t = defaults::OUTBOX_LEASE_SECS)]
    pub outbox_lease_secs: f64,
    /// Milliseconds between polls when no NOTIFY arrives.
    #[arg(long, env = "TIDINGS_OUTBOX_POLL_MS", default_value_t = defaults::OUTBOX_POLL_MS)]
    pub outbox_poll_ms: u64,
    /// Milliseconds one webhook request or SMTP send may take.
    #[arg(long, env = "TIDINGS_DELIVERY_TIMEOUT_MS", default_value_t = defaults::DELIVERY_TIMEOUT_MS)]
    pub delivery_timeout_ms: u64,
    /// Webhook targets allowed besides public addresses: `none`, `loopback`,
    /// `private` (loopback, RFC 1918, CGNAT, unique-local IPv6) or `all`.
    #[arg(long, env = "TIDINGS_WEBHOOK_ALLOW_PRIVATE", value_enum, default_value_t = AllowPrivate::default())]
    pub webhook_allow_private: AllowPrivate,
    /// SMTP server for email, e.g. smtp://127.0.0.1:2525 or smtps://user:pass@host.
    /// Without it, email deliveries wait for a worker that has one.
    #[arg(long, env = "TIDINGS_SMTP_URL", hide_env_values = true)]
    pub smtp_url: Option<String>,
    /// From header of emails.
    #[arg(long, env = "TIDINGS_EMAIL_FROM", default_value = defaults::EMAIL_FROM)]
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
    /// The public base URL of this service, e.g. https://notify.example.com:
    /// emails of a non-critical category carry a one-click unsubscribe link
    /// to `<url>/u/<token>` (RFC 8058: List-Unsubscribe and
    /// List-Unsubscribe-Post) and a List-Id. Unset: emails carry none of
    /// these, and start-up says so.
    #[arg(long, env = "TIDINGS_PUBLIC_URL")]
    pub public_url: Option<String>,
}

/// What besides public unicast addresses a webhook may target
/// (`crate::workers::channels::ssrf` enforces it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Default)]
pub enum AllowPrivate {
    /// Public addresses only (production default).
    #[default]
    None,
    /// Also this machine (127.0.0.0/8, ::1): tests and single-host setups.
    Loopback,
    /// Also private networks: RFC 1918, CGNAT 100.64/10, unique-local fc00::/7.
    Private,
    /// Anything, link-local and metadata addresses included.
    All,
}

/// The CORS origins, checked: each must be exactly an origin
/// (`scheme://host[:port]`, no path), as browsers send it in `Origin`.
pub fn cors_origins(raw: &[String]) -> anyhow::Result<Vec<String>> {
    raw.iter()
        .map(|o| o.trim())
        .filter(|o| !o.is_empty())
        .map(|o| {
            let origin = url::Url::parse(o)
                .map(|u| u.origin().ascii_serialization())
                .unwrap_or_default();
            anyhow::ensure!(
                origin == o.trim_end_matches('/') && origin != "null",
                "TIDINGS_CORS_ORIGINS: {o:?} is not an origin such as https://app.example.com"
            );
            Ok(origin)
        })
        .collect()
}

/// Bounds on the work one request may store or ask for (ARCHITECTURE.md,
/// "Bounded work per request"). Defaults and why:
/// - 50 webhook endpoints per tenant: every webhook alert writes a delivery
///   per recipient and endpoint, so endpoints multiply an alert's rows; 50
///   covers an integration per environment and team.
/// - 1,000 memberships per user: a feed read costs a probe per team (300
///   teams measured 176 ms), and 1,000 is the largest the feed's limits
///   section reasons about.
#[derive(Debug, Clone, Args)]
pub struct BoundsConfig {
    /// Webhook endpoints one tenant may have; creating one more is refused
    /// with 422 `webhook_endpoint_limit`.
    #[arg(long, env = "TIDINGS_MAX_WEBHOOK_ENDPOINTS", default_value_t = defaults::MAX_WEBHOOK_ENDPOINTS)]
    pub max_webhook_endpoints: u32,
    /// Teams one user may belong to; joining one more is refused with 422
    /// `membership_limit`.
    #[arg(long, env = "TIDINGS_MAX_MEMBERSHIPS_PER_USER", default_value_t = defaults::MAX_MEMBERSHIPS_PER_USER)]
    pub max_memberships_per_user: u32,
}

impl Default for BoundsConfig {
    fn default() -> Self {
        BoundsConfig {
            max_webhook_endpoints: defaults::MAX_WEBHOOK_ENDPOINTS,
            max_memberships_per_user: defaults::MAX_MEMBERSHIPS_PER_USER,
        }
    }
}

/// The HTTP listener's limits (`http_server`). Defaults and why:
/// - header read 10 s: a head is a few hundred bytes, sent at once by every
///   real client; a slow mobile link still sends it in well under a second.
/// - idle 75 s: above the 60 s idle timeout of common load balancers, so the
///   balancer, not Tidings, closes an idle kept-alive connection (closing
///   first races the balancer's next request on it).
/// - body 30 s: the largest body (TIDINGS_MAX_BODY_BYTES, 64 KiB) at 2 KB/s.
/// - connections: the stream cap plus 1,000 for requests, since each live
///   stream holds one. The process needs a file-descriptor limit above it
///   plus the database pools.
/// - write 30 s with no byte taken: far longer than any reading client
///   pauses (a stream's heartbeat is sent every 15 s), and it bounds how
///   long a client that stopped reading holds a connection and its response
///   (bench/findings/health-and-http.md, "Clients that stop reading").
#[derive(Debug, Clone, Args)]
pub struct HttpConfig {
    /// Seconds from a request's first byte to the end of its head (request
    /// line and headers); slower, the connection is closed.
    #[arg(long, env = "TIDINGS_HTTP_HEADER_READ_TIMEOUT_SECS", default_value_t = defaults::HTTP_HEADER_READ_TIMEOUT_SECS)]
    pub http_header_read_timeout_secs: u64,
    /// Seconds a connection may wait for a request (new, or kept alive after a
    /// response) without receiving a byte; then it is closed.
    #[arg(long, env = "TIDINGS_HTTP_IDLE_TIMEOUT_SECS", default_value_t = defaults::HTTP_IDLE_TIMEOUT_SECS)]
    pub http_idle_timeout_secs: u64,
    /// Seconds from the end of a request's head to the end of its body; slower,
    /// 408 and the connection is closed.
    #[arg(long, env = "TIDINGS_HTTP_BODY_TIMEOUT_SECS", default_value_t = defaults::HTTP_BODY_TIMEOUT_SECS)]
    pub http_body_timeout_secs: u64,
    /// Connections served at once (live streams included); one more is closed
    /// as soon as it is accepted.
    #[arg(long, env = "TIDINGS_HTTP_MAX_CONNECTIONS", default_value_t = defaults::HTTP_MAX_CONNECTIONS)]
    pub http_max_connections: usize,
    /// Seconds a response may wait for the client to take any of it (the
    /// socket's send buffer full, no byte written); then the connection is
    /// closed. A client that reads slowly but steadily is not cut off; one
    /// that stopped reading no longer holds its response and connection.
    #[arg(long, env = "TIDINGS_HTTP_WRITE_TIMEOUT_SECS", default_value_t = defaults::HTTP_WRITE_TIMEOUT_SECS)]
    pub http_write_timeout_secs: u64,
    /// Proxies whose `X-Forwarded-For` and `X-Real-IP` the request log
    /// believes, as comma-separated addresses or CIDRs (`10.0.0.0/8,::1`).
    /// Those headers are anyone's to write: from any other peer they are
    /// ignored and the log names the peer's address. Default: none.
    #[arg(long, env = "TIDINGS_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            http_header_read_timeout_secs: defaults::HTTP_HEADER_READ_TIMEOUT_SECS,
            http_idle_timeout_secs: defaults::HTTP_IDLE_TIMEOUT_SECS,
            http_body_timeout_secs: defaults::HTTP_BODY_TIMEOUT_SECS,
            http_max_connections: defaults::HTTP_MAX_CONNECTIONS,
            http_write_timeout_secs: defaults::HTTP_WRITE_TIMEOUT_SECS,
            trusted_proxies: Vec::new(),
        }
    }
}

impl HttpConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.http_header_read_timeout_secs >= 1
                && self.http_idle_timeout_secs >= 1
                && self.http_body_timeout_secs >= 1
                && self.http_write_timeout_secs >= 1,
            "TIDINGS_HTTP_*_TIMEOUT_SECS must be at least 1"
        );
        anyhow::ensure!(
            self.http_max_connections >= 1,
            "TIDINGS_HTTP_MAX_CONNECTIONS must be at least 1"
        );
        TrustedProxies::parse(&self.trusted_proxies)?;
        Ok(())
    }

    pub fn write_timeout(&self) -> Duration {
        Duration::from_secs(self.http_write_timeout_secs)
    }

    pub fn trusted_proxies(&self) -> anyhow::Result<TrustedProxies> {
        TrustedProxies::parse(&self.trusted_proxies)
    }

    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_secs(self.http_header_read_timeout_secs)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.http_idle_timeout_secs)
    }

    pub fn body_timeout(&self) -> Duration {
        Duration::from_secs(self.http_body_timeout_secs)
    }
}

/// The networks whose forwarding headers are believed
/// (`TIDINGS_TRUSTED_PROXIES`): (network address, prefix length) pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<(IpAddr, u8)>);

impl TrustedProxies {
    /// Addresses (`10.0.0.1`, a network of one) or CIDRs (`10.0.0.0/8`).
    pub fn parse(raw: &[String]) -> anyhow::Result<Self> {
        let mut networks = Vec::new();
        for entry in raw.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let bad = || {
                anyhow::anyhow!(
                    "TIDINGS_TRUSTED_PROXIES: {entry:?} is not an address or a CIDR such as 10.0.0.0/8"
                )
            };
            let (addr, prefix) = match entry.split_once('/') {
                Some((addr, prefix)) => (addr, Some(prefix)),
                None => (entry, None),
            };
            let addr: IpAddr = addr.parse().map_err(|_| bad())?;
            let addr = addr.to_canonical();
            let bits = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                Some(p) => p.parse::<u8>().map_err(|_| bad())?,
                None => bits,
            };
            anyhow::ensure!(prefix <= bits, bad());
            networks.push((addr, prefix));
        }
        Ok(TrustedProxies(networks))
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.0.iter().any(|&(net, prefix)| match (net, addr) {
            (IpAddr::V4(net), IpAddr::V4(addr)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(addr) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(addr)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(addr) & mask
            }
            _ => false,
        })
    }
}

/// The live stream (`GET /v1/feed/stream`).
///
/// Defaults and why: a 50 ms tick keeps commit-to-client latency well under
/// 100 ms for two statements per tick per instance (only while streams are
/// open); ten streams per user covers tabs and devices while one client
/// cannot hold an unbounded number; 256 buffered events per stream absorb a
/// burst while bounding memory (a client slower than that is dropped with
/// `reset` and refetches); a replay of up to 1,000 items covers a reconnect
/// after minutes away, beyond which refetching a page is cheaper. Half of an
/// instance's streams per tenant leaves the other half to everybody else
/// however many tokens one tenant mints, as the pool share does.
#[derive(Debug, Clone, clap::Args)]
pub struct StreamConfig {
    /// How often each instance reads new feed items for its streams, in ms.
    #[arg(long, env = "TIDINGS_STREAM_TICK_MS", default_value_t = defaults::STREAM_TICK_MS)]
    pub stream_tick_ms: u64,
    /// Open streams per user; the next one closes the user's oldest.
    #[arg(long, env = "TIDINGS_STREAM_MAX_PER_USER", default_value_t = defaults::STREAM_MAX_PER_USER)]
    pub stream_max_per_user: usize,
    /// Open streams per instance; beyond, 503 with Retry-After.
    #[arg(long, env = "TIDINGS_STREAM_MAX_CONNECTIONS", default_value_t = defaults::STREAM_MAX_CONNECTIONS)]
    pub stream_max_connections: usize,
    /// Events buffered per stream; a client that falls further behind is
    /// sent `reset` and dropped.
    #[arg(long, env = "TIDINGS_STREAM_BUFFER", default_value_t = defaults::STREAM_BUFFER)]
    pub stream_buffer: usize,
    /// Most items replayed on resume; further behind, the stream sends `reset`.
    #[arg(long, env = "TIDINGS_STREAM_MAX_REPLAY", default_value_t = defaults::STREAM_MAX_REPLAY)]
    pub stream_max_replay: usize,
    /// How long a stream ticket is valid, in seconds.
    #[arg(long, env = "TIDINGS_STREAM_TICKET_TTL_SECS", default_value_t = defaults::STREAM_TICKET_TTL_SECS)]
    pub stream_ticket_ttl_secs: u64,
    /// Percentage of this instance's streams (`TIDINGS_STREAM_MAX_CONNECTIONS`)
    /// one tenant may hold open (1–100); beyond, its next stream gets 503
    /// with Retry-After. An operator sets a tenant's own cap with
    /// `PUT /v1/admin/tenants/{id}/rate-limits` (`open_streams`).
    #[arg(long, env = "TIDINGS_STREAM_TENANT_SHARE_PERCENT", default_value_t = defaults::STREAM_TENANT_SHARE_PERCENT)]
    pub stream_tenant_share_percent: u32,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            stream_tick_ms: defaults::STREAM_TICK_MS,
            stream_max_per_user: defaults::STREAM_MAX_PER_USER,
            stream_max_connections: defaults::STREAM_MAX_CONNECTIONS,
            stream_buffer: defaults::STREAM_BUFFER,
            stream_max_replay: defaults::STREAM_MAX_REPLAY,
            stream_ticket_ttl_secs: defaults::STREAM_TICKET_TTL_SECS,
            stream_tenant_share_percent: defaults::STREAM_TENANT_SHARE_PERCENT,
        }
    }
}

/// A token bucket: `per_second` tokens added per second, at most `burst`
/// held. A request takes one token; `per_second` 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

impl Rate {
    pub fn unlimited(&self) -> bool {
        self.per_second <= 0.0
    }

    /// The slowest limited rate: one token every 1,000 s. The token bucket
    /// counts time in `u64` nanoseconds, and a period times a burst beyond
    /// them (about 584 years) panics it; slower rates are refused, and one
    /// stored before the range was checked is held to this.
    pub const MIN_PER_SECOND: f64 = 0.001;
    /// The fastest rate and the largest burst: 1,000,000.
    pub const MAX: f64 = 1_000_000.0;

    /// Whether the values can make a bucket: finite, not negative, a burst of
    /// at least one.
    pub fn valid(&self) -> bool {
        self.per_second.is_finite() && self.per_second >= 0.0 && self.burst >= 1
    }

    /// Whether an operator may set this rate: 0 (unlimited) or
    /// [`Rate::MIN_PER_SECOND`] to [`Rate::MAX`] per second, a burst of 1 to
    /// [`Rate::MAX`].
    pub fn in_range(&self) -> bool {
        self.valid()
            && (self.per_second == 0.0
                || (Rate::MIN_PER_SECOND..=Rate::MAX).contains(&self.per_second))
            && f64::from(self.burst) <= Rate::MAX
    }

    /// The nearest rate in range (a limited rate stays limited).
    pub fn clamped(self) -> Rate {
        Rate {
            per_second: if self.unlimited() {
                self.per_second
            } else {
                self.per_second.clamp(Rate::MIN_PER_SECOND, Rate::MAX)
            },
            burst: self.burst.min(Rate::MAX as u32),
        }
    }
}

/// Limits per tenant and per user (ARCHITECTURE.md, "Limits per tenant").
///
/// Defaults and why: buckets are per instance, so a tenant's budget across
/// the cluster is these times the number of instances. Writes (events,
/// alerts; 200/s, burst 400) are a backend's traffic and each costs a
/// transaction; a tenant's reads (1,000/s, burst 2,000) are many users'
/// feeds and badges together, and one user (20/s, burst 60) is a page or an
/// app polling, so no single user can use up the tenant's reads. Stream
/// connects (50/s per tenant, 1/s and burst 10 per user) each run a catch-up
/// read; a reconnect storm after a deploy is what the burst absorbs. Half of
/// the pool per tenant leaves the other half to everybody else however busy
/// one tenant is, while one tenant alone still gets half the database.
/// A refusal is held up to a second (what `Retry-After` says at the least),
/// so a client that retries at once sends one request per connection per
/// second, not thousands; at most 100 per tenant at once (1 % of the
/// connection cap, `HttpConfig`), so held refusals of one tenant cannot fill
/// the connections others need. A backend's reads with its API key (500/s,
/// burst 1,000) are status checks and lists, each one query: more than its
/// writes, since a backend reads back what it wrote, yet bounded, so a loop
/// on `GET /v1/alerts/{id}` cannot take the database time others need.
#[derive(Debug, Clone, clap::Args)]
pub struct LimitsConfig {
    /// Enforce the rate limits below (`false`: none, e.g. for a benchmark of
    /// one tenant's throughput). The pool share is always enforced.
    #[arg(long, env = "TIDINGS_RATE_LIMITS", default_value_t = defaults::RATE_LIMITS, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub rate_limits: bool,
    /// Writes (POST /v1/events, /v1/events/batch, /v1/alerts) per second per
    /// tenant, per instance; 0: unlimited. A tenant's own setting
    /// (`PUT /v1/admin/tenants/{id}/rate-limits`) wins over every default here.
    #[arg(long, env = "TIDINGS_RATE_WRITES_PER_SEC", default_value_t = defaults::RATE_WRITES_PER_SEC)]
    pub rate_writes_per_sec: f64,
    /// Writes a tenant may send at once above its rate (the bucket's size).
    #[arg(long, env = "TIDINGS_RATE_WRITES_BURST", default_value_t = defaults::RATE_WRITES_BURST)]
    pub rate_writes_burst: u32,
    /// Requests with a user token (feed, counts, marks, stream tickets) per
    /// second per tenant, all its users together; 0: unlimited.
    #[arg(long, env = "TIDINGS_RATE_READS_PER_SEC", default_value_t = defaults::RATE_READS_PER_SEC)]
    pub rate_reads_per_sec: f64,
    /// Requests of the tenant's reads allowed at once above the rate (the bucket's size).
    #[arg(long, env = "TIDINGS_RATE_READS_BURST", default_value_t = defaults::RATE_READS_BURST)]
    pub rate_reads_burst: u32,
    /// Requests with a user token per second per user; 0: unlimited.
    #[arg(long, env = "TIDINGS_RATE_USER_READS_PER_SEC", default_value_t = defaults::RATE_USER_READS_PER_SEC)]
    pub rate_user_reads_per_sec: f64,
    /// Requests of the user's reads allowed at once above the rate (the bucket's size).
    #[arg(long, env = "TIDINGS_RATE_USER_READS_BURST", default_value_t = defaults::RATE_USER_READS_BURST)]
    pub rate_user_reads_burst: u32,
    /// Stream connects (GET /v1/feed/stream, POST /v1/feed/stream-tickets)
    /// per second per tenant; 0: unlimited.
    #[arg(long, env = "TIDINGS_RATE_STREAMS_PER_SEC", default_value_t = defaults::RATE_STREAMS_PER_SEC)]
    pub rate_streams_per_sec: f64,
    /// Requests of the tenant's stream connects allowed at once above the rate (the bucket's size).
    #[arg(long, env = "TIDINGS_RATE_STREAMS_BURST", default_value_t = defaults::RATE_STREAMS_BURST)]
    pub rate_streams_burst: u32,
    /// Stream connects per second per user; 0: unlimited.
    #[arg(long, env = "TIDINGS_RATE_USER_STREAMS_PER_SEC", default_value_t = defaults::RATE_USER_STREAMS_PER_SEC)]
    pub rate_user_streams_per_sec: f64,
    /// Requests of the user's stream connects allowed at once above the rate (the bucket's size).
    #[arg(long, env = "TIDINGS_RATE_USER_STREAMS_BURST", default_value_t = defaults::RATE_USER_STREAMS_BURST)]
    pub rate_user_streams_burst: u32,
    /// Percentage of the pool's connections one tenant's requests may hold at
    /// once (1–100); its further requests queue behind its own, for up to the
    /// pool's acquire timeout (5 s), then get 503.
    #[arg(long, env = "TIDINGS_DB_TENANT_SHARE_PERCENT", default_value_t = defaults::DB_TENANT_SHARE_PERCENT)]
    pub db_tenant_share_percent: u32,
    /// Longest pause, in milliseconds, before a request over a rate limit is
    /// answered 429 (the pause is its `Retry-After`, capped by this; 0: answer
    /// at once). A client that retries at once is slowed to one request per
    /// connection per pause. At most 60,000.
    #[arg(long, env = "TIDINGS_RATE_REFUSAL_HOLD_MS", default_value_t = defaults::RATE_REFUSAL_HOLD_MS)]
    pub rate_refusal_hold_ms: u64,
    /// Refusals of one tenant held at once (each holds its connection); more
    /// are answered at once.
    #[arg(long, env = "TIDINGS_RATE_REFUSALS_HELD_PER_TENANT", default_value_t = defaults::RATE_REFUSALS_HELD_PER_TENANT)]
    pub rate_refusals_held_per_tenant: usize,
    /// Reads with an API key (GET and HEAD: alerts, deliveries, members,
    /// users, endpoints) per second per tenant; 0: unlimited. A backend that
    /// loops on a read takes database time like a write does.
    #[arg(long, env = "TIDINGS_RATE_KEY_READS_PER_SEC", default_value_t = defaults::RATE_KEY_READS_PER_SEC)]
    pub rate_key_reads_per_sec: f64,
    /// Reads with an API key a tenant may send at once above its rate (the bucket's size).
    #[arg(long, env = "TIDINGS_RATE_KEY_READS_BURST", default_value_t = defaults::RATE_KEY_READS_BURST)]
    pub rate_key_reads_burst: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            rate_limits: defaults::RATE_LIMITS,
            rate_writes_per_sec: defaults::RATE_WRITES_PER_SEC,
            rate_writes_burst: defaults::RATE_WRITES_BURST,
            rate_reads_per_sec: defaults::RATE_READS_PER_SEC,
            rate_reads_burst: defaults::RATE_READS_BURST,
            rate_user_reads_per_sec: defaults::RATE_USER_READS_PER_SEC,
            rate_user_reads_burst: defaults::RATE_USER_READS_BURST,
            rate_streams_per_sec: defaults::RATE_STREAMS_PER_SEC,
            rate_streams_burst: defaults::RATE_STREAMS_BURST,
            rate_user_streams_per_sec: defaults::RATE_USER_STREAMS_PER_SEC,
            rate_user_streams_burst: defaults::RATE_USER_STREAMS_BURST,
            db_tenant_share_percent: defaults::DB_TENANT_SHARE_PERCENT,
            rate_refusal_hold_ms: defaults::RATE_REFUSAL_HOLD_MS,
            rate_refusals_held_per_tenant: defaults::RATE_REFUSALS_HELD_PER_TENANT,
            rate_key_reads_per_sec: defaults::RATE_KEY_READS_PER_SEC,
            rate_key_reads_burst: defaults::RATE_KEY_READS_BURST,
        }
    }
}

/// The server's default rates, one per bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateDefaults {
    pub writes: Rate,
    pub reads: Rate,
    pub user_reads: Rate,
    pub streams: Rate,
    pub user_streams: Rate,
    pub key_reads: Rate,
}

impl LimitsConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=100).contains(&self.db_tenant_share_percent),
            "TIDINGS_DB_TENANT_SHARE_PERCENT must be within 1..=100"
        );
        anyhow::ensure!(
            self.rate_refusal_hold_ms <= defaults::RATE_REFUSAL_HOLD_MAX_MS,
            "TIDINGS_RATE_REFUSAL_HOLD_MS must be at most {}",
            defaults::RATE_REFUSAL_HOLD_MAX_MS
        );
        anyhow::ensure!(
            self.rate_refusals_held_per_tenant >= 1,
            "TIDINGS_RATE_REFUSALS_HELD_PER_TENANT must be at least 1"
        );
        let rates = self.rates();
        for (name, rate) in [
            ("WRITES", rates.writes),
            ("READS", rates.reads),
            ("USER_READS", rates.user_reads),
            ("STREAMS", rates.streams),
            ("USER_STREAMS", rates.user_streams),
            ("KEY_READS", rates.key_reads),
        ] {
            anyhow::ensure!(
                rate.in_range(),
                "TIDINGS_RATE_{name}_PER_SEC must be 0 (unlimited) or {} to {}, and TIDINGS_RATE_{name}_BURST 1 to {}",
                Rate::MIN_PER_SECOND,
                Rate::MAX,
                Rate::MAX
            );
        }
        Ok(())
    }

    pub fn rates(&self) -> RateDefaults {
        let rate = |per_second, burst| Rate { per_second, burst };
        RateDefaults {
            writes: rate(self.rate_writes_per_sec, self.rate_writes_burst),
            reads: rate(self.rate_reads_per_sec, self.rate_reads_burst),
            user_reads: rate(self.rate_user_reads_per_sec, self.rate_user_reads_burst),
            streams: rate(self.rate_streams_per_sec, self.rate_streams_burst),
            user_streams: rate(self.rate_user_streams_per_sec, self.rate_user_streams_burst),
            key_reads: rate(self.rate_key_reads_per_sec, self.rate_key_reads_burst),
        }
    }

    /// The longest pause before a refusal is answered.
    pub fn refusal_hold(&self) -> Duration {
        Duration::from_millis(self.rate_refusal_hold_ms)
    }

    /// Connections one tenant may hold at once, of a pool of `pool_size`:
    /// the share rounded up, at least one.
    pub fn tenant_share(&self, pool_size: u32) -> usize {
        let share = (u64::from(pool_size) * u64::from(self.db_tenant_share_percent)).div_ceil(100);
        share.max(1) as usize
    }
}

/// How user tokens are checked (flags and environment of `serve`).
///
/// Defaults and why: a day's lifetime bounds how long a leaked token works
/// (a front end refreshes through its backend); it is also the longest
/// `POST /v1/user-tokens` mints. A rotated-out signing secret verifies for as
/// long again, so a rotation never cuts short a token already handed out;
/// for an emergency (a leaked secret), revoke users' tokens as well.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthConfig {
    /// Longest lifetime (`exp - iat`) of a user token, in seconds; longer-lived
    /// tokens are refused, however they were signed.
    #[arg(long, env = "TIDINGS_USER_TOKEN_MAX_LIFETIME_SECS", default_value_t = defaults::USER_TOKEN_MAX_LIFETIME_SECS)]
    pub user_token_max_lifetime_secs: u64,
    /// How long a rotated-out signing secret keeps verifying user tokens, in
    /// seconds. At least the token lifetime, so no token handed out before a
    /// rotation stops working early.
    #[arg(long, env = "TIDINGS_SIGNING_ROTATION_OVERLAP_SECS", default_value_t = defaults::SIGNING_ROTATION_OVERLAP_SECS)]
    pub signing_rotation_overlap_secs: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            user_token_max_lifetime_secs: defaults::USER_TOKEN_MAX_LIFETIME_SECS,
            signing_rotation_overlap_secs: defaults::SIGNING_ROTATION_OVERLAP_SECS,
        }
    }
}

impl StreamConfig {
    /// Streams one tenant may hold open on this instance, unless it has its
    /// own cap: its share of the instance's, at least one.
    pub fn tenant_share(&self) -> usize {
        let percent = self.stream_tenant_share_percent.clamp(1, 100) as usize;
        (self.stream_max_connections.saturating_mul(percent) / 100).max(1)
    }

    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.stream_tick_ms.max(1))
    }

    pub fn buffer(&self) -> usize {
        self.stream_buffer.max(1)
    }

    pub fn max_per_user(&self) -> usize {
        self.stream_max_per_user.max(1)
    }
}

/// Alert and alert-adjacent settings (flags and environment of `serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct AlertsConfig {
    /// Largest team expanded inside the alert's own transaction; larger teams are
    /// expanded by a background worker.
    #[arg(long, env = "TIDINGS_FANOUT_INLINE_MAX", default_value_t = FanoutThresholds::default().inline_max)]
    pub fanout_inline_max: u64,
    /// Members per background expansion batch (one transaction each); fewer
    /// when TIDINGS_ALERT_BATCH_DELIVERIES would be exceeded.
    #[arg(long, env = "TIDINGS_FANOUT_BATCH_SIZE", default_value_t = FanoutThresholds::default().batch_size)]
    pub fanout_batch_size: u64,
    /// Most delivery rows one transaction writes (inline in the request, or
    /// one background batch). An alert whose plan may write more — recipients
    /// or members × channels, one row per endpoint on the webhook channel —
    /// is written by background batches. 1,000 rows take about 40 ms
    /// (100,000 took 3.8 s): neither the entity lock nor the tenant's feed
    /// horizon is held back noticeably.
    #[arg(long, env = "TIDINGS_ALERT_BATCH_DELIVERIES", default_value_t = defaults::ALERT_BATCH_DELIVERIES)]
    pub alert_batch_deliveries: u64,
    /// Most delivery rows one alert may write (counted as above); a larger
    /// alert is refused with 422 `alert_too_large` and nothing is stored. The
    /// default is the audit's worst alert (1,000 recipients × 100 endpoints).
    #[arg(long, env = "TIDINGS_ALERT_MAX_DELIVERIES", default_value_t = defaults::ALERT_MAX_DELIVERIES)]
    pub alert_max_deliveries: u64,
    /// How long a rotated-out webhook secret keeps signing, in seconds.
    #[arg(long, env = "TIDINGS_WEBHOOK_ROTATION_GRACE_SECS", default_value_t = defaults::WEBHOOK_ROTATION_GRACE_SECS)]
    pub webhook_rotation_grace_secs: u64,
    /// How long Idempotency-Key responses are kept, in seconds (at least a day in
    /// production; tests shorten it).
    #[arg(long, env = "TIDINGS_IDEMPOTENCY_RETENTION_SECS", default_value_t = defaults::IDEMPOTENCY_RETENTION_SECS)]
    pub idempotency_retention_secs: u64,
    /// How often expired Idempotency-Keys are purged, in seconds.
    #[arg(long, env = "TIDINGS_IDEMPOTENCY_PURGE_INTERVAL_SECS", default_value_t = defaults::IDEMPOTENCY_PURGE_INTERVAL_SECS)]
    pub idempotency_purge_interval_secs: u64,
    /// How long an in-flight Idempotency-Key blocks duplicates if its request dies.
    #[arg(long, env = "TIDINGS_IDEMPOTENCY_LEASE_SECS", default_value_t = defaults::IDEMPOTENCY_LEASE_SECS)]
    pub idempotency_lease_secs: u64,
    /// NATS server to consume alert requests from (JetStream). Unset: no consumer.
    #[arg(long, env = "TIDINGS_NATS_URL", hide_env_values = true)]
    pub nats_url: Option<String>,
    #[arg(long, env = "TIDINGS_NATS_STREAM", default_value = defaults::NATS_STREAM)]
    pub nats_stream: String,
    /// Subject pattern of the alert stream, with exactly one `*` token: the
    /// tenant id. A message on `tidings.<tenant id>.alerts` is that tenant's, so
    /// NATS permissions that let a publisher write only its own subject make it
    /// unable to act as any other tenant (deploy/nats/).
    #[arg(long, env = "TIDINGS_NATS_SUBJECT", default_value = defaults::NATS_SUBJECT)]
    pub nats_subject: String,
    /// Durable consumer name; every `serve` process shares it (work is split).
    #[arg(long, env = "TIDINGS_NATS_DURABLE", default_value = defaults::NATS_DURABLE)]
    pub nats_durable: String,
    /// Seconds before an unacknowledged message is redelivered.
    #[arg(long, env = "TIDINGS_NATS_ACK_WAIT_SECS", default_value_t = defaults::NATS_ACK_WAIT_SECS)]
    pub nats_ack_wait_secs: u64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        let t = FanoutThresholds::default();
        AlertsConfig {
            fanout_inline_max: t.inline_max,
            fanout_batch_size: t.batch_size,
            alert_batch_deliveries: defaults::ALERT_BATCH_DELIVERIES,
            alert_max_deliveries: defaults::ALERT_MAX_DELIVERIES,
            webhook_rotation_grace_secs: defaults::WEBHOOK_ROTATION_GRACE_SECS,
            idempotency_retention_secs: defaults::IDEMPOTENCY_RETENTION_SECS,
            idempotency_purge_interval_secs: defaults::IDEMPOTENCY_PURGE_INTERVAL_SECS,
            idempotency_lease_secs: defaults::IDEMPOTENCY_LEASE_SECS,
            nats_url: None,
            nats_stream: defaults::NATS_STREAM.into(),
            nats_subject: defaults::NATS_SUBJECT.into(),
            nats_durable: defaults::NATS_DURABLE.into(),
            nats_ack_wait_secs: defaults::NATS_ACK_WAIT_SECS,
        }
    }
}

impl AlertsConfig {
    pub fn thresholds(&self) -> FanoutThresholds {
        FanoutThresholds {
            inline_max: self.fanout_inline_max,
            batch_size: self.fanout_batch_size.max(1),
            ..FanoutThresholds::default()
        }
    }

    pub fn idempotency_lease(&self) -> Duration {
        Duration::from_secs(self.idempotency_lease_secs.max(1))
    }

    pub fn idempotency_retention(&self) -> Duration {
        Duration::from_secs(self.idempotency_retention_secs)
    }

    pub fn idempotency_purge_interval(&self) -> Duration {
        Duration::from_secs(self.idempotency_purge_interval_secs.max(1))
    }

    pub fn webhook_rotation_grace(&self) -> Duration {
        Duration::from_secs(self.webhook_rotation_grace_secs)
    }

    /// Where the tenant id is in a subject of `nats_subject`: the index of its
    /// one `*` token.
    pub fn nats_tenant_token(&self) -> anyhow::Result<usize> {
        nats_tenant_token(&self.nats_subject)
    }
}

/// The index of the one `*` token of a subject pattern (`tidings.*.alerts`: 1).
pub fn nats_tenant_token(pattern: &str) -> anyhow::Result<usize> {
    let tokens: Vec<&str> = pattern.split('.').collect();
    let wildcards: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == "*")
        .map(|(i, _)| i)
        .collect();
    anyhow::ensure!(
        wildcards.len() == 1 && !tokens.iter().any(|t| t.is_empty() || *t == ">"),
        "TIDINGS_NATS_SUBJECT {pattern:?} must have exactly one `*` token (the tenant id) \
         and no `>`, e.g. {:?}",
        defaults::NATS_SUBJECT
    );
    Ok(wildcards[0])
}

/// Validated worker settings.
///
/// Defaults and why:
/// - **batch 100**: one claim and one completion statement per 100 deliveries
///   keeps database round trips far below the network time of the sends,
///   while a crashed worker strands at most 100 deliveries for one lease.
/// - **concurrency 50**: a batch goes out in two waves, so even when every
///   receiver hangs until the timeout a batch takes about 2 × 10 s.
/// - **delivery timeout 10 s**: receivers are expected to acknowledge and work
///   asynchronously (Standard Webhooks' advice); a slower one is retried.
/// - **lease 60 s**: must exceed the time a batch can take (2 × 10 s) with a
///   wide margin, or live deliveries would be claimed twice; and a crash
///   delays its batch by only a minute. A delivery whose batch has used so
///   much of the lease that it could not finish in time is not started but
///   released (see `OutboxConfig::start_deadline` in `crate::workers::outbox`), so a
///   slow batch never turns into duplicates.
/// - **retry schedule**: the core's default — 10 attempts, 5 s × 4ⁿ capped at
///   1 h, 20 % jitter: dead about 4.5 h after the first failure (see
///   `tidings_core::retry`).
#[derive(Debug, Clone)]
pub struct OutboxConfig {
    pub loops: usize,
    pub batch: u32,
    pub concurrency: usize,
    pub lease: Duration,
    pub poll: Duration,
    pub delivery_timeout: Duration,
    pub allow_private: AllowPrivate,
    pub smtp_url: Option<String>,
    pub email_from: String,
    pub retry: RetrySchedule,
    /// `TIDINGS_PUBLIC_URL`, without a trailing slash.
    pub public_url: Option<String>,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            loops: defaults::OUTBOX_WORKERS,
            batch: defaults::OUTBOX_BATCH,
            concurrency: defaults::WORKER_CONCURRENCY,
            lease: Duration::from_secs_f64(defaults::OUTBOX_LEASE_SECS),
            poll: Duration::from_millis(defaults::OUTBOX_POLL_MS),
            delivery_timeout: Duration::from_millis(defaults::DELIVERY_TIMEOUT_MS),
            allow_private: AllowPrivate::default(),
            smtp_url: None,
            email_from: defaults::EMAIL_FROM.into(),
            retry: RetrySchedule::default(),
            public_url: None,
        }
    }
}

impl OutboxConfig {
    /// Checks the flags against each other. Whether the SMTP URL and the From
    /// address parse is checked when the senders are built, also at start-up
    /// (`OutboxConfig::channels`, in `crate::workers::outbox`).
    pub fn from_args(args: &WorkerArgs) -> anyhow::Result<Self> {
        let core = RetrySchedule::default();
        let retry = RetrySchedule {
            base_ms: args.retry_base_ms.unwrap_or(core.base_ms),
            factor: args.retry_factor.unwrap_or(core.factor),
            max_delay_ms: args.retry_max_delay_ms.unwrap_or(core.max_delay_ms),
            max_attempts: args.retry_max_attempts.unwrap_or(core.max_attempts),
            jitter: args.retry_jitter.unwrap_or(core.jitter),
        };
        anyhow::ensure!(
            args.outbox_batch >= 1,
            "TIDINGS_OUTBOX_BATCH must be at least 1"
        );
        anyhow::ensure!(
            args.worker_concurrency >= 1,
            "TIDINGS_WORKER_CONCURRENCY must be at least 1"
        );
        anyhow::ensure!(
            retry.max_attempts >= 1,
            "TIDINGS_RETRY_MAX_ATTEMPTS must be at least 1"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&retry.jitter),
            "TIDINGS_RETRY_JITTER must be within [0, 1]"
        );
        anyhow::ensure!(
            args.outbox_lease_secs.is_finite() && args.outbox_lease_secs > 0.0,
            "TIDINGS_OUTBOX_LEASE_SECS must be positive"
        );
        let lease = Duration::from_secs_f64(args.outbox_lease_secs);
        let delivery_timeout = Duration::from_millis(args.delivery_timeout_ms.max(1));
        // A lease shorter than two timeouts leaves no room to send and record.
        anyhow::ensure!(
            lease >= delivery_timeout * 2,
            "TIDINGS_OUTBOX_LEASE_SECS ({lease:?}) must be at least twice TIDINGS_DELIVERY_TIMEOUT_MS ({delivery_timeout:?})"
        );
        Ok(OutboxConfig {
            loops: args.outbox_workers,
            batch: args.outbox_batch,
            concurrency: args.worker_concurrency,
            lease,
            poll: Duration::from_millis(args.outbox_poll_ms).max(defaults::MIN_OUTBOX_POLL),
            delivery_timeout,
            allow_private: args.webhook_allow_private,
            smtp_url: args.smtp_url.clone().filter(|u| !u.is_empty()),
            email_from: args.email_from.clone(),
            retry,
            public_url: public_url(args.public_url.as_deref())?,
        })
    }
}

/// `TIDINGS_PUBLIC_URL`, checked: an http(s) URL with a host and no query,
/// returned without its trailing slash. Empty counts as unset.
pub fn public_url(raw: Option<&str>) -> anyhow::Result<Option<String>> {
    let Some(raw) = raw.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let parsed = url::Url::parse(raw).ok();
    anyhow::ensure!(
        parsed.as_ref().is_some_and(|u| {
            matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some()
                && u.query().is_none()
                && u.fragment().is_none()
        }),
        "TIDINGS_PUBLIC_URL {raw:?} is not a base URL such as https://notify.example.com"
    );
    Ok(Some(raw.trim_end_matches('/').to_owned()))
}

/// Refuses an admin token shorter than [`defaults::MIN_ADMIN_TOKEN_BYTES`].
/// The message never contains the token.
pub fn check_admin_token(token: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        token.len() >= defaults::MIN_ADMIN_TOKEN_BYTES,
        "TIDINGS_ADMIN_TOKEN is {} bytes; it must be at least {} (e.g. `openssl rand -base64 32`), \
         or unset to have one generated",
        token.len(),
        defaults::MIN_ADMIN_TOKEN_BYTES
    );
    Ok(())
}

/// Refuses an operator token (`name`) shorter than
/// [`defaults::MIN_ADMIN_TOKEN_BYTES`], without showing it.
fn check_token_length(name: &str, token: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        token.len() >= defaults::MIN_ADMIN_TOKEN_BYTES,
        "{name} is {} bytes; it must be at least {} (e.g. `openssl rand -base64 32`)",
        token.len(),
        defaults::MIN_ADMIN_TOKEN_BYTES
    );
    Ok(())
}

/// A URL as it may be shown in a log line or an error: without its userinfo
/// (user name and password). Text that does not parse as a URL is cut to its
/// scheme, since where a password would be in it cannot be known.
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut url) => {
            if url.password().is_some() || !url.username().is_empty() {
                // Only "cannot-be-a-base" URLs refuse these, and they have no userinfo.
                let _ = url.set_password(None);
                let _ = url.set_username("");
            }
            url.to_string()
        }
        Err(_) => match raw.split_once("://") {
            Some((scheme, _))
                if scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
            {
                format!("{scheme}://…")
            }
            _ => "(not a URL)".to_string(),
        },
    }
}

/// Runtime settings, shared by every handler and worker through the state.
#[derive(Debug, Clone)]
pub struct Settings {
    pub max_body_bytes: usize,
    /// From the end of a request's head to the end of its body.
    pub body_timeout: Duration,
    pub outbox: OutboxConfig,
    /// The operator's bearer token for /v1/admin.
    pub admin_token: String,
    /// Alerts, idempotency, webhook endpoints and the NATS inbox.
    pub alerts: AlertsConfig,
    /// Metrics and readiness.
    pub ops: OpsConfig,
    pub retention: RetentionConfig,
    /// Whether `/inbox/` serves the inbox page.
    pub inbox_page: bool,
    /// User-token checks.
    pub auth: AuthConfig,
    pub stream: StreamConfig,
    /// Rate limits and the pool share per tenant.
    pub limits: LimitsConfig,
    /// Caps on stored work per tenant, user and alert.
    pub bounds: BoundsConfig,
    /// Connections of the primary's pool (the pool share is a part of it).
    pub db_max_connections: u32,
    /// Origins allowed by CORS; empty: none.
    pub cors_origins: Vec<String>,
    /// Peers whose forwarding headers the request log believes.
    pub trusted_proxies: TrustedProxies,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_body_bytes: defaults::MAX_BODY_BYTES,
            body_timeout: Duration::from_secs(defaults::HTTP_BODY_TIMEOUT_SECS),
            outbox: OutboxConfig::default(),
            admin_token: String::new(),
            alerts: AlertsConfig::default(),
            ops: OpsConfig::default(),
            retention: RetentionConfig::default(),
            inbox_page: defaults::INBOX_PAGE,
            auth: AuthConfig::default(),
            stream: StreamConfig::default(),
            limits: LimitsConfig::default(),
            bounds: BoundsConfig::default(),
            db_max_connections: defaults::DB_MAX_CONNECTIONS,
            cors_origins: Vec::new(),
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nats_subject_names_the_tenant_by_its_one_wildcard() {
        assert_eq!(nats_tenant_token("tidings.*.alerts").ok(), Some(1));
        assert_eq!(nats_tenant_token("a.b.*").ok(), Some(2));
        for bad in ["tidings.alerts", "tidings.*.*", "tidings.>", "a..*", "*.>"] {
            assert!(nats_tenant_token(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn redacted_urls_keep_no_password() {
        assert_eq!(
            redact_url("smtps://ann:s3cret@mail.example:465/?tls=required"),
            "smtps://mail.example:465/?tls=required"
        );
        assert_eq!(
            redact_url("postgres://postgres@127.0.0.1:5432/tidings"),
            "postgres://127.0.0.1:5432/tidings"
        );
        assert_eq!(redact_url("smtp://127.0.0.1:2525"), "smtp://127.0.0.1:2525");
        for unparsable in ["smtps://ann:s3cret@[bad", "smtps://ann:s3cret@host:99999"] {
            let shown = redact_url(unparsable);
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        assert_eq!(redact_url("s3cret"), "(not a URL)");
    }

    #[test]
    fn admin_tokens_shorter_than_32_bytes_are_refused_without_being_shown() {
        let err = check_admin_token("x").expect_err("too short");
        assert!(!err.to_string().contains("\"x\""), "{err}");
        assert!(check_admin_token(&"t".repeat(31)).is_err());
        assert!(check_admin_token(&"t".repeat(32)).is_ok());
    }

    #[test]
    fn trusted_proxies_match_their_networks_only() {
        let proxies = TrustedProxies::parse(&[
            "10.0.0.0/8".into(),
            " 192.168.1.7".into(),
            "fd00::/8".into(),
        ])
        .unwrap();
        for inside in ["10.1.2.3", "192.168.1.7", "fd12::1", "::ffff:10.9.9.9"] {
            assert!(proxies.contains(inside.parse().unwrap()), "{inside}");
        }
        for outside in ["11.0.0.1", "192.168.1.8", "fe80::1", "127.0.0.1"] {
            assert!(!proxies.contains(outside.parse().unwrap()), "{outside}");
        }
        let everything = TrustedProxies::parse(&["0.0.0.0/0".into()]).unwrap();
        assert!(everything.contains("203.0.113.9".parse().unwrap()));
        assert!(!TrustedProxies::default().contains("127.0.0.1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "fd00::/129", "example.com", "10.0.0.0/x"] {
            assert!(TrustedProxies::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_tenants_pool_share_is_rounded_up_and_never_zero() {
        let mut limits = LimitsConfig::default();
        assert_eq!(limits.tenant_share(16), 8);
        limits.db_tenant_share_percent = 30;
        assert_eq!(limits.tenant_share(16), 5);
        limits.db_tenant_share_percent = 1;
        assert_eq!(limits.tenant_share(4), 1);
        limits.db_tenant_share_percent = 100;
        assert_eq!(limits.tenant_share(4), 4);
        limits.db_tenant_share_percent = 0;
        assert!(limits.validate().is_err());
    }
}
