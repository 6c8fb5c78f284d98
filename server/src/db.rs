//! Connecting to PostgreSQL and applying the schema.

use std::{borrow::Cow, time::Duration};

use anyhow::Context;
use sqlx::{
    migrate::{Migration, Migrator},
    postgres::PgPoolOptions,
    Connection, PgPool,
};

use crate::config::SessionTimeouts;

/// The schema, embedded at compile time from `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// A pooled connection used this recently is taken to be alive and is handed
/// out without a ping. sqlx's default pings every connection on every acquire:
/// one extra round trip per statement, as much as the statement itself for
/// one-statement endpoints (issue 12: `/readyz` at 0.22 of pgbench of its
/// statement). A connection idle for longer
/// (a firewall or a server restart may have dropped it meanwhile) is still
/// pinged first. The trade: a server that dies under load fails the statements
/// already on their way (as it would anyway) plus, at most, the next statement
/// of each busy connection, which the pool then replaces.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// Sets `statement_timeout` and `lock_timeout` on every session of a pool,
/// once, when it connects: no round trip on the request path (rather than
/// `SET LOCAL` in every transaction). Behind a transaction pooler a session
/// setting does not follow the client: set them on the database role there
/// (ARCHITECTURE.md, "Limits per tenant").
pub fn with_session_timeouts(options: PgPoolOptions, timeouts: SessionTimeouts) -> PgPoolOptions {
    options.after_connect(move |conn, _meta| {
        Box::pin(async move {
            sqlx::query(
                "SELECT set_config('statement_timeout', $1, false),
                        set_config('lock_timeout', $2, false)",
            )
            .bind(timeouts.statement.as_millis().to_string())
            .bind(timeouts.lock.as_millis().to_string())
            .execute(conn)
            .await?;
            Ok(())
        })
    })
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
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let attempt = with_session_timeouts(PgPoolOptions::new(), timeouts)
            .max_connections(max_connections)
            .acquire_timeout(crate::config::defaults::DB_ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IF_IDLE_FOR {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect(url)
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

/// The migrations this binary applies. A database may already hold later
/// ones: during a rolling upgrade the next version migrates first (expand)
/// while this one still runs, and an instance of this version restarting then
/// must start, not refuse (ARCHITECTURE.md, "Rolling upgrades").
fn migrator() -> Migrator {
    let known: Vec<Migration> = MIGRATOR.iter().cloned().collect();
    #[cfg(feature = "test-hooks")]
    let known = if crate::test_hooks::armed(crate::test_hooks::WITHOUT_LAST_MIGRATION) {
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
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    let migrator = migrator();
    accept_comment_rewrites(pool, &migrator).await?;
    let mut conn = pool.acquire().await?;
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    sqlx::query("SET lock_timeout = 0")
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
/// design document outside the repository; they cite ARCHITECTURE.md now),
/// with the SHA-384 checksum sqlx recorded for the shipped text. Their SQL is
/// unchanged, so a database that applied the old text takes the new checksum
/// instead of refusing to start.
const COMMENT_REWRITES: &[(i64, &str)] = &[
    (1, "37207d564f2a12cc66b7e2a93bade9a33cc4d80fca7d563f8d5e6643b2ece370c83bf8bab1402456494bd129605e8663"),
    (3, "541056d311bb1838cdd5d96ec89c54b265c8c6ca78270f1c50b4939d5e961014a0903d5ee17bb644c39ecd6bd3bd33df"),
    (4, "ddec23235ac7661551ce012a75579d9df0f5ee4c119624f970b67cfc5d8f65e8d23fae6d57b9fca6c1ba7c079ab62713"),
    (7, "45b3470d2840b66db3cc5943a6e87368dd98e3ebc59a64d1c6980b12795beb0cfea951163c6760fac93b9f5ea4b8ce01"),
    (2, "dc0fd734a392e07f891171cd7a244214e71c6e2492ecf97dcab52bf4aabe5a811a24bb2d5db985d622a942b26ac01c15"),
    (5, "7cab53e64e6d2934504226914256285ee69b29666115627485df038d7d9694035db1c86428b1de8e2bf8e4b5cc8a945d"),
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

/// True when every migration this binary knows is applied, successfully.
pub async fn migrations_applied(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let expected = migrator()
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .count() as i64;
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
            .fetch_optional(pool)
            .await
            .or_else(|err| match &err {
                // No migrations table yet: nothing applied.
                sqlx::Error::Database(db) if db.code().as_deref() == Some("42P01") => Ok(Some(0)),
                _ => Err(err),
            })?;
    Ok(applied.unwrap_or(0) >= expected)
}

/// The pool LISTEN sessions come from: `TIDINGS_DATABASE_LISTEN_URL` when
/// set (a direct URL beside a transaction pooler, which cannot keep a session),
/// else the main pool. One connection per listener (the cache, the outbox
/// waker, team expansion), connected when first needed.
pub fn listen_pool(args: &crate::config::DatabaseArgs, pool: &PgPool) -> anyhow::Result<PgPool> {
    match args
        .database_listen_url
        .as_deref()
        .filter(|u| !u.is_empty())
    {
        Some(url) => Ok(PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy(url)
            .context("TIDINGS_DATABASE_LISTEN_URL")?),
        None => Ok(pool.clone()),
    }
}

/// Opens the configured database, or starts the embedded one when no URL is set.
/// The returned guard (if any) stops the embedded PostgreSQL when dropped.
pub async fn open(
    args: &crate::config::DatabaseArgs,
) -> anyhow::Result<(PgPool, Option<crate::embedded_pg::EmbeddedPostgres>)> {
    if let Some(url) = &args.database_url {
        let pool = connect(
            url,
            args.db_max_connections,
            Duration::from_secs(30),
            args.session_timeouts(),
        )
        .await?;
        return Ok((pool, None));
    }
    // An explicit data directory is used or refused; the default may fall back.
    let data_dir = args.data_dir.clone();
    let embedded = tokio::task::spawn_blocking(move || match data_dir {
        Some(dir) => crate::embedded_pg::EmbeddedPostgres::start(&dir),
        None => crate::embedded_pg::EmbeddedPostgres::start_default(),
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
    Ok((pool, Some(embedded)))
}
