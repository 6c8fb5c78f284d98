//! Whether every stored secret has been bound to its row once
//! (`secrets_bound`, migration 0025; `crate::tenants::secrets`, "Unbound
//! values").

use sqlx::PgExecutor;

/// `None`: the table does not exist yet, as on the schema before migration
/// 0025 (the rolling-upgrade test runs this binary on it as the previous
/// version: `app::test_hooks::WITHOUT_LAST_MIGRATION`).
pub async fn every_secret_bound(db: impl PgExecutor<'_>) -> sqlx::Result<Option<bool>> {
    let found = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM secrets_bound)")
        .fetch_one(db)
        .await;
    match found {
        Ok(bound) => Ok(Some(bound)),
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(UNDEFINED_TABLE) => Ok(None),
        Err(err) => Err(err),
    }
}

/// SQLSTATE `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";

/// Records it, once: the first start that bound every secret.
pub async fn record_every_secret_bound(db: impl PgExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO secrets_bound DEFAULT VALUES ON CONFLICT DO NOTHING")
        .execute(db)
        .await?;
    Ok(())
}
