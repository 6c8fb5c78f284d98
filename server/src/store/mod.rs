//! The store layer: every SQL statement of the server lives here, in functions
//! named verb_noun that take an executor (pool or transaction) and the tenant.

pub mod paging;

pub mod alerts;
pub mod deliveries;
pub mod delivery_rules;
pub mod digests;
pub mod events;
pub mod feed;
pub mod gauges;
pub mod horizon;
pub mod idempotency;
pub mod inbox;
pub mod notify;
pub mod outbox;
pub mod preferences;
pub mod rate_limits;
pub mod replication;
pub mod retention;
pub mod secrets;
pub mod stream;
pub mod teams;
pub mod templates;
pub mod tenants;
pub mod users;
pub mod webhook_endpoints;

/// SQLSTATE of a lock not granted within the session's `lock_timeout`
/// (`lock_not_available`).
pub const LOCK_NOT_AVAILABLE: &str = "55P03";
/// SQLSTATE of a statement cancelled, here by the session's
/// `statement_timeout` (`query_canceled`).
pub const QUERY_CANCELED: &str = "57014";

/// Takes a transaction-level advisory lock (released at commit or rollback),
/// waiting at most the session's `lock_timeout`. Serialises the check and the
/// insert of a cap (`tidings_core::stable_lock_key` makes the key): under READ
/// COMMITTED a count in the same transaction, after the lock, sees every
/// earlier holder's committed rows.
pub async fn lock_xact(db: impl sqlx::PgExecutor<'_>, key: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(key)
        .execute(db)
        .await?;
    Ok(())
}

/// Whether a statement failed because it waited for a lock past `lock_timeout`.
pub fn is_lock_timeout(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some(LOCK_NOT_AVAILABLE))
}

/// Whether an error means the primary is gone or not there yet, as while a
/// failover runs: the connection broke or was refused, the server is
/// shutting down or starting (`57P01`–`57P03`), has too many connections
/// (`53300`), is a standby that refuses writes (`25006`, a demoted primary
/// still connected), or any connection exception (class `08`). Nothing was
/// committed by a statement that failed so, and the client may retry.
pub fn is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || matches!(
                    code.as_ref(),
                    ADMIN_SHUTDOWN
                        | CRASH_SHUTDOWN
                        | CANNOT_CONNECT_NOW
                        | TOO_MANY_CONNECTIONS
                        | READ_ONLY_SQL_TRANSACTION
                )
        }),
        _ => false,
    }
}

/// SQLSTATEs of a server that is going away or not taking this session.
pub const ADMIN_SHUTDOWN: &str = "57P01";
pub const CRASH_SHUTDOWN: &str = "57P02";
pub const CANNOT_CONNECT_NOW: &str = "57P03";
pub const TOO_MANY_CONNECTIONS: &str = "53300";
/// A write on a standby: a primary demoted under a session that stayed.
pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";

/// Whether a statement ended by a session timeout (statement or lock).
pub fn is_timeout(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if matches!(db.code().as_deref(), Some(LOCK_NOT_AVAILABLE | QUERY_CANCELED)))
}
