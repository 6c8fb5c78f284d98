//! The idempotent consumer's inbox (table `inbox_messages`, ARCHITECTURE.md,
//! invariant 8).

use uuid::Uuid;

/// What became of a message (column `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxOutcome {
    /// It created an alert (some keys new).
    Created,
    /// Every notification it asked for existed already.
    Duplicate,
    /// It can never become an alert; `error` says why.
    Rejected,
}

impl InboxOutcome {
    pub const fn as_str(self) -> &'static str {
        match self {
            InboxOutcome::Created => "created",
            InboxOutcome::Duplicate => "duplicate",
            InboxOutcome::Rejected => "rejected",
        }
    }
}

/// Records (tenant, message id) in the caller's transaction. False when it
/// was already recorded: a redelivery or replay, which must change nothing. A
/// concurrent consumer of the same id blocks here until the first one commits
/// or rolls back.
pub async fn insert_message(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    message_id: &str,
    outcome: InboxOutcome,
    error: Option<&str>,
) -> sqlx::Result<bool> {
    let inserted: Option<i32> = sqlx::query_scalar(
        "INSERT INTO inbox_messages (tenant_id, message_id, outcome, error) VALUES ($1, $2, $3, $4)
         ON CONFLICT (tenant_id, message_id) DO NOTHING RETURNING 1",
    )
    .bind(tenant)
    .bind(message_id)
    .bind(outcome.as_str())
    .bind(error)
    .fetch_optional(db)
    .await?;
    Ok(inserted.is_some())
}

pub async fn set_message_alert(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    message_id: &str,
    alert_id: Uuid,
    outcome: InboxOutcome,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE inbox_messages SET alert_id = $3, outcome = $4
         WHERE tenant_id = $1 AND message_id = $2",
    )
    .bind(tenant)
    .bind(message_id)
    .bind(alert_id)
    .bind(outcome.as_str())
    .execute(db)
    .await?;
    Ok(())
}
