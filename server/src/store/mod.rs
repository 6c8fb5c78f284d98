//! The store layer: every SQL statement of the server lives here, in functions
//! named verb_noun that take an executor (pool or transaction) and the tenant.

pub mod alerts;
pub mod deliveries;
pub mod events;
pub mod feed;
pub mod gauges;
pub mod horizon;
pub mod idempotency;
pub mod inbox;
pub mod notify;
pub mod outbox;
pub mod rate_limits;
pub mod replication;
pub mod retention;
pub mod stream;
pub mod teams;
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

/// Whether a statement ended by a session timeout (statement or lock).
pub fn is_timeout(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if matches!(db.code().as_deref(), Some(LOCK_NOT_AVAILABLE | QUERY_CANCELED)))
}
