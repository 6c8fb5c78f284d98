//! Connecting to PostgreSQL and applying the schema.

pub mod embedded_pg;
pub mod listen;
pub mod replicas;

use std::{borrow::Cow, time::Duration};

use anyhow::Context;
use futures::{future::BoxFuture, stream::BoxStream, StreamExt, TryStreamExt};
use sqlx::{
    migrate::{Migration, Migrator},
    pool::PoolConnection,
    postgres::{PgConnectOptions, PgPoolOptions, PgQueryResult, PgRow, PgStatement, PgTypeInfo},
    Connection, Describe, Either, Execute, Executor, PgConnection, PgPool, Postgres, Transaction,
};

use crate::app::config::{DatabaseArgs, Pooler, SessionTimeouts};

/// The schema, embedded at compile time from `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// A pooled connection used this recently is taken to be alive and is handed
/// out without a ping. sqlx's default pings every connection on every acquire:
/// one extra round trip per statement, as much as the statement itself for
/// one-statement endpoints. A connection idle for longer
/// (a firewall or a server restart may have dropped it meanwhile) is still
/// pinged first. The trade: a server that dies under load fails the statements
/// already on their way (as it would anyway) plus, at most, the next statement
/// of each busy connection, which the pool then replaces.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// Sets `statement_timeout`, `lock_timeout` and
/// `idle_in_transaction_session_timeout` on every session of a pool,
/// once, when it connects: no round trip on the request path (rather than
/// `SET LOCAL` in every transaction). Behind a transaction pooler a session
/// setting would stay on a server connection that other clients get next, so
/// there the timeouts go with each transaction instead ([`PrimaryPool`]).
pub fn with_session_timeouts(options: PgPoolOptions, timeouts: SessionTimeouts) -> PgPoolOptions {
    options.after_connect(move |conn, _meta| {
        Box::pin(async move {
            // A string without arguments goes as one simple-query message.
            let set = timeouts.set_statements(false);
            conn.execute(set.as_str()).await?;
            Ok(())
        })
    })
}

/// The statement that opens every transaction behind a transaction pooler:
/// the session timeouts as `SET LOCAL`, in the same round trip as `BEGIN`
/// (one simple-query message).
fn begin_with_timeouts(timeouts: SessionTimeouts) -> String {
    format!("BEGIN; {}", timeouts.set_statements(true))
}

/// The pool of the primary, as every service and worker uses it: an executor
/// for single statements (`&PrimaryPool` is a sqlx `Executor`), [`begin`] for
/// transactions and [`acquire_for_reads`] for several reads on one connection.
///
/// Directly on the primary (or through a pooler in session mode) it is the
/// sqlx pool as it is. Behind a transaction pooler (PgBouncer 1.18,
/// `pool_mode = transaction`, `TIDINGS_DATABASE_POOLER=transaction`) a
/// statement outside a transaction is not safe with sqlx: it runs each
/// statement with parameters in two round trips (Parse/Describe/Sync, then
/// Bind/Execute/Sync) and the pooler may hand the second to another server
/// connection, where the statement does not exist. So there:
/// - every single statement runs in a transaction of its own (the pooler keeps
///   one server connection from BEGIN to COMMIT), committed before its result
///   is handed back: a caller that saw `Ok` may rely on the commit;
/// - sqlx's statement cache is off: a statement prepared in one transaction
///   is dropped by the pooler's reset query (`DEALLOCATE ALL`) when it ends;
/// - the session timeouts are `SET LOCAL` in each transaction's BEGIN.
///
/// The price there: each single statement costs BEGIN and COMMIT round trips
/// and a Parse round trip more (ARCHITECTURE.md, "PgBouncer").
///
/// [`begin`]: PrimaryPool::begin
/// [`acquire_for_reads`]: PrimaryPool::acquire_for_reads
#[derive(Clone, Debug)]
pub struct PrimaryPool {
    pool: PgPool,
    /// Sessions for what a transaction pooler cannot carry: LISTEN and
    /// migrations. `TIDINGS_DATABASE_LISTEN_URL`, else `pool` itself.
    sessions: PgPool,
    /// Behind a transaction pooler: the statement that opens every transaction.
    begin: Option<String>,
}

impl PrimaryPool {
    /// A pool that reaches the primary directly: sessions from the same pool.
    pub fn direct(pool: PgPool) -> Self {
        PrimaryPool {
            sessions: pool.clone(),
            pool,
            begin: None,
        }
    }

    /// The sqlx pool underneath: for its size and for closing it.
    pub fn inner(&self) -> &PgPool {
        &self.pool
    }

    /// Where LISTEN sessions and migrations connect.
    pub fn sessions(&self) -> &PgPool {
        &self.sessions
    }

    /// A transaction on the primary (with the session timeouts behind a
    /// transaction pooler).
    ///
    /// The BEGIN runs on a task of its own, so that a caller dropped while it
    /// is under way (a client gone, a timeout) cannot leave the connection in
    /// a transaction nobody knows of. sqlx 0.8's begin is not cancel-safe:
    /// dropped after sending BEGIN and before its answer, it counts no
    /// transaction to roll back, and the pool hands the connection out again
    /// inside the open transaction. Every statement run on it afterwards is
    /// then uncommitted and keeps its locks: a bench run found two such
    /// sessions, idle in transaction for 15 minutes, blocking a DROP SCHEMA.
    /// On its own task the BEGIN completes, and a transaction whose caller is
    /// gone is dropped there, which rolls it back.
    pub async fn begin(&self) -> sqlx::Result<Transaction<'static, Postgres>> {
        let pool = self.pool.clone();
        let begin = self.begin.clone();
        let task = tokio::spawn(async move {
            match begin {
                None => pool.begin().await,
                Some(begin) => pool.begin_with(begin).await,
            }
        });
        match task.await {
            Ok(begun) => begun,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            // Cancelled: the runtime is shutting down.
            Err(_) => Err(sqlx::Error::WorkerCrashed),
        }
    }

    /// One connection for a run of reads. Behind a transaction pooler it is a
    /// transaction, rolled back when dropped: writes made through it are lost,
    /// so use [`begin`](PrimaryPool::begin) and commit for those.
    pub async fn acquire_for_reads(&self) -> sqlx::Result<ReadConnection> {
        match &self.begin {
            None => Ok(ReadConnection::Session(self.pool.acquire().await?)),
            Some(_) => Ok(ReadConnection::Transaction(self.begin().await?)),
        }
    }

    pub async fn close(&self) {
        self.pool.close().await;
        self.sessions.close().await;
    }
}

/// A connection for a run of reads: a pooled session, or behind a
/// transaction pooler a transaction (rolled back when dropped).
pub enum ReadConnection {
    Session(PoolConnection<Postgres>),
    Transaction(Transaction<'static, Postgres>),
}

impl From<PoolConnection<Postgres>> for ReadConnection {
    fn from(conn: PoolConnection<Postgres>) -> Self {
        ReadConnection::Session(conn)
    }
}

impl std::ops::Deref for ReadConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            ReadConnection::Session(conn) => conn,
            ReadConnection::Transaction(tx) => tx,
        }
    }
}

impl std::ops::DerefMut for ReadConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            ReadConnection::Session(conn) => conn,
            ReadConnection::Transaction(tx) => tx,
        }
    }
}

impl<'p> Executor<'p> for &'_ PrimaryPool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.begin.is_none() {
            return self.pool.fetch_many(query);
        }
        // Whole results, committed before the first is handed back.
        let pool = self.clone();
        futures::stream::once(async move {
            let mut tx = pool.begin().await?;
            let results: Vec<_> = (&mut *tx).fetch_many(query).try_collect().await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(futures::stream::iter(results.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, sqlx::Result<Option<PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.begin.is_none() {
            return self.pool.fetch_optional(query);
        }
        let pool = self.clone();
        Box::pin(async move {
            let mut tx = pool.begin().await?;
            let row = (&mut *tx).fetch_optional(query).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, sqlx::Result<PgStatement<'q>>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, sqlx::Result<Describe<Postgres>>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}

/// Connects with a bounded wait: a database that is still starting (or restarting)
/// is retried for `patience` before giving up. Every session gets `timeouts`
/// (`statement_timeout`, `lock_timeout`), set once when it connects.
pub async fn connect(
    url: &str,
    max_connections: u32,
    patience: Duration,
    timeouts: SessionTimeouts,
) -> anyhow::Result<PgPool> {
    let options: PgConnectOptions = url.parse().context("DATABASE_URL")?;
    connect_with(
        with_session_timeouts(PgPoolOptions::new(), timeouts),
        options,
        max_connections,
        patience,
    )
    .await
}

async fn connect_with(
    pool_options: PgPoolOptions,
    options: PgConnectOptions,
    max_connections: u32,
    patience: Duration,
) -> anyhow::Result<PgPool> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let attempt = pool_options
            .clone()
            .max_connections(max_connections)
            .acquire_timeout(crate::app::config::defaults::DB_ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IF_IDLE_FOR {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(options.clone())
            .await;
        match attempt {
            Ok(pool) => return Ok(pool),
            Err(err) if tokio::time::Instant::now() < deadline => {
                tracing::info!(error = %err, "database not reachable yet; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(err) => return Err(err).context("connecting to PostgreSQL"),
        }
    }
}

/// The primary's pool for `url` as `args` describe it: directly, or behind
/// a transaction pooler ([`PrimaryPool`]), with sessions from
/// `TIDINGS_DATABASE_LISTEN_URL` when set.
pub async fn connect_primary(
    url: &str,
    args: &DatabaseArgs,
    patience: Duration,
) -> anyhow::Result<PrimaryPool> {
    let timeouts = args.session_timeouts();
    let listen_url = args
        .database_listen_url
        .as_deref()
        .filter(|u| !u.is_empty());
    let (pool, begin) = match args.database_pooler {
        Pooler::None => (
            connect(url, args.db_max_connections, patience, timeouts).await?,
            None,
        ),
        Pooler::Transaction => {
            anyhow::ensure!(
                listen_url.is_some(),
                "TIDINGS_DATABASE_POOLER=transaction needs TIDINGS_DATABASE_LISTEN_URL, a direct \
                 URL of the primary: LISTEN and migrations need a session the pooler cannot keep"
            );
            let options: PgConnectOptions = url.parse().context("DATABASE_URL")?;
            let pool = connect_with(
                PgPoolOptions::new(),
                options.statement_cache_capacity(0),
                args.db_max_connections,
                patience,
            )
            .await?;
            (pool, Some(begin_with_timeouts(timeouts)))
        }
    };
    let sessions = match listen_url {
        Some(url) => PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy(url)
            .context("TIDINGS_DATABASE_LISTEN_URL")?,
        None => pool.clone(),
    };
    Ok(PrimaryPool {
        pool,
        sessions,
        begin,
    })
}

/// True only in a test build standing in for the version before the newest
/// migration (`test_hooks::WITHOUT_LAST_MIGRATION`, the rolling upgrade
/// test): it does not apply that migration, and the features of the
/// migrations that version lacked (each module's `in_schema`) stay off.
pub fn stands_in_for_previous_version() -> bool {
    #[cfg(feature = "test-hooks")]
    if crate::app::test_hooks::armed(crate::app::test_hooks::WITHOUT_LAST_MIGRATION) {
        return true;
    }
    false
}

/// The migrations this binary applies. A database may already hold later
/// ones: during a rolling upgrade the next version migrates first (expand)
/// while this one still runs, and an instance of this version restarting then
/// must start, not refuse (ARCHITECTURE.md, "Rolling upgrades").
fn migrator() -> Migrator {
    let known: Vec<Migration> = MIGRATOR.iter().cloned().collect();
    let known = if stands_in_for_previous_version() {
        known[..known.len().saturating_sub(1)].to_vec()
    } else {
        known
    };
    // The fields are sqlx's (doc-hidden, for `migrate!`); the version is locked.
    let mut migrator = Migrator {
        migrations: Cow::Owned(known),
        ..Migrator::DEFAULT
    };
    migrator.set_ignore_missing(true);
    migrator
}

/// Applies the migrations on a session of its own without the pool's
/// statement and lock timeouts: building an index on a large table may take
/// minutes, and waiting for a lock is what a migration must do. The session
/// is closed afterwards, so the pool never hands it to a request.
/// Runs on a session (`TIDINGS_DATABASE_LISTEN_URL` behind a transaction
/// pooler): the migrator holds a session lock while it works.
pub async fn migrate(primary: &PrimaryPool) -> anyhow::Result<()> {
    let pool = primary.sessions();
    let migrator = migrator();
    accept_comment_rewrites(pool, &migrator).await?;
    let mut conn = pool.acquire().await?;
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    sqlx::query("SET lock_timeout = 0")
        .execute(&mut *conn)
        .await?;
    sqlx::query("SET idle_in_transaction_session_timeout = 0")
        .execute(&mut *conn)
        .await?;
    let applied = migrator
        .run(&mut *conn)
        .await
        .context("applying migrations");
    conn.detach().close().await.ok();
    applied?;
    Ok(())
}

/// Migrations whose comments were reworded after they shipped (they cited a
/// design document or numbered issues outside the repository; they cite
/// ARCHITECTURE.md and the design notes now),
/// with the SHA-384 checksum sqlx recorded for the shipped text. Their SQL is
/// unchanged, so a database that applied the old text takes the new checksum
/// instead of refusing to start.
pub const COMMENT_REWRITES: &[(i64, &str)] = &[
    (1, "37207d564f2a12cc66b7e2a93bade9a33cc4d80fca7d563f8d5e6643b2ece370c83bf8bab1402456494bd129605e8663"),
    (3, "541056d311bb1838cdd5d96ec89c54b265c8c6ca78270f1c50b4939d5e961014a0903d5ee17bb644c39ecd6bd3bd33df"),
    (4, "ddec23235ac7661551ce012a75579d9df0f5ee4c119624f970b67cfc5d8f65e8d23fae6d57b9fca6c1ba7c079ab62713"),
    (7, "45b3470d2840b66db3cc5943a6e87368dd98e3ebc59a64d1c6980b12795beb0cfea951163c6760fac93b9f5ea4b8ce01"),
    (2, "dc0fd734a392e07f891171cd7a244214e71c6e2492ecf97dcab52bf4aabe5a811a24bb2d5db985d622a942b26ac01c15"),
    (5, "7cab53e64e6d2934504226914256285ee69b29666115627485df038d7d9694035db1c86428b1de8e2bf8e4b5cc8a945d"),
    (8, "28d09428d2907c9377a53cbe3f8405596cfdc8312ea47c9bfe033d47fc9c0cc58b6c9419427ea4c26ada199a8a84493d"),
    (10, "4637c71ad343fe7f2ec07f0484ba06fe1cf9082bdd90822b2906f278bf3aa062b66ced9dcb40c6cfaf8743737c977331"),
    (13, "d2b8e3a39c319c4614dcb52452c7105325879f452d9ab195cd7ebba84629747f3344c147191628e9562cf05ed9c90723"),
    (14, "763a7d359e0888b105ef280e4252326077bd376505d8ff6b0b0d57dd3e9c076f93a8eb5e96fd64ec20fb563334a96d1f"),
    (15, "06e86af1b8a712d395c45898dc32e06657f6956a6d3628dd01cd9217771b91c9b95cac74f9cd6b15daee68750c0965f1"),
    (16, "8c37857254ef48c71f1bbd61897249d53699036b3c6cb91cdb7a34f95091439b38e2583ea901d5ef9b0c1dd3fa4f5311"),
    (17, "d4f467ca62b3efea3a08d86e44db84a7813d31bf3f78c9357a96838a6722226a455c2770176925a7a44b8df64afc61ad"),
    (19, "2c9e1d62f1580a8643737cf5dc31f6b0882feb870b4046234063df99282dd918a98ae448abd4b6115373dc045702b342"),
    (20, "93a70bfcb426b0becbfaf960b3ea58e71f7ac82f6f00ee9cfbfe3b52b560cda6969580b5cde8d2cf48fe2fdc6558a4d1"),
    (21, "4160e51c97d15e8937d1a6a10d978f188d328a9859ed024e4035be7f78bb6596da9ad89636f3a0bcc5934cf0c780b047"),
    (22, "906a09f538f820f30f2bc1981f086ac028e60eee33ff26528fb582163731f24a4b2485ed22e86bea39db7a0726b84a64"),
];

async fn accept_comment_rewrites(pool: &PgPool, migrator: &Migrator) -> anyhow::Result<()> {
    for (version, shipped) in COMMENT_REWRITES {
        let Some(current) = migrator.iter().find(|m| m.version == *version) else {
            continue;
        };
        let updated = sqlx::query(
            "UPDATE _sqlx_migrations SET checksum = $2
              WHERE version = $1 AND encode(checksum, 'hex') = $3",
        )
        .bind(version)
        .bind(current.checksum.as_ref())
        .bind(shipped)
        .execute(pool)
        .await;
        match updated {
            Ok(_) => {}
            // No migrations table yet: nothing was applied.
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P01") => {
                return Ok(())
            }
            Err(err) => return Err(err).context("recording reworded migration comments"),
        }
    }
    Ok(())
}

/// The readiness probe's statement: how many migrations are applied, and
/// whether the server the pool reached is a standby (after a failover, a
/// node that was demoted under a route that still points at it).
/// bench/sql/readyz.sql is its pgbench twin.
const READINESS_SQL: &str =
    "SELECT count(*) FILTER (WHERE success), pg_is_in_recovery() FROM _sqlx_migrations";

/// What the readiness probe found on the primary's route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// A primary that has every migration this binary knows.
    Ready,
    MigrationsPending,
    /// The route to the primary reached a standby: writes would fail.
    NoPrimary,
}

/// Runs the readiness statement on the primary's pool.
pub async fn readiness(pool: &PrimaryPool) -> Result<Readiness, sqlx::Error> {
    let expected = migrator()
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .count() as i64;
    let (applied, in_recovery): (i64, bool) =
        match sqlx::query_as(READINESS_SQL).fetch_one(pool).await {
            Ok(row) => row,
            // No migrations table yet: nothing applied.
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P01") => {
                return Ok(Readiness::MigrationsPending)
            }
            Err(err) => return Err(err),
        };
    Ok(if in_recovery {
        Readiness::NoPrimary
    } else if applied >= expected {
        Readiness::Ready
    } else {
        Readiness::MigrationsPending
    })
}

/// Opens the configured database, or starts the embedded one when no URL is set.
/// The returned guard (if any) stops the embedded PostgreSQL when dropped.
pub async fn open(
    args: &DatabaseArgs,
) -> anyhow::Result<(
    PrimaryPool,
    Option<crate::db::embedded_pg::EmbeddedPostgres>,
)> {
    if let Some(url) = &args.database_url {
        let pool = connect_primary(url, args, Duration::from_secs(30)).await?;
        return Ok((pool, None));
    }
    // An explicit data directory is used or refused; the default may fall back.
    let data_dir = args.data_dir.clone();
    let embedded = tokio::task::spawn_blocking(move || match data_dir {
        Some(dir) => crate::db::embedded_pg::EmbeddedPostgres::start(&dir),
        None => crate::db::embedded_pg::EmbeddedPostgres::start_default(),
    })
    .await
    .context("embedded PostgreSQL start-up panicked")??;
    let admin = connect(
        &embedded.url("postgres"),
        1,
        Duration::from_secs(30),
        SessionTimeouts::default(),
    )
    .await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'tidings')")
            .fetch_one(&admin)
            .await?;
    if !exists {
        sqlx::query("CREATE DATABASE tidings")
            .execute(&admin)
            .await?;
    }
    admin.close().await;
    let pool = connect(
        &embedded.url("tidings"),
        args.db_max_connections,
        Duration::from_secs(30),
        args.session_timeouts(),
    )
    .await?;
    Ok((PrimaryPool::direct(pool), Some(embedded)))
}
