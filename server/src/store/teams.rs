//! Team memberships. A membership carries the feed position of its own write: the
//! member sees the team's events positioned after it (migrations/0003_feed.sql).
//!
//! Every change notifies `NotifyChannel::Cache` in its own transaction, so every
//! instance drops its cached copy of that user's teams once the change commits.

use chrono::{DateTime, Utc};
use sqlx::{Acquire, PgExecutor, Postgres};
use tidings_core::Position;
use uuid::Uuid;

use super::notify::{notify, MembershipsChanged, NotifyChannel};

/// One of a user's teams, as the feed query needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub team_id: String,
    /// The member sees the team's events strictly after this position.
    pub joined: Position,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MemberRow {
    pub team_id: String,
    pub user_id: String,
    pub joined_tx: i64,
    pub joined_id: i64,
    pub created_at: DateTime<Utc>,
}

impl MemberRow {
    pub fn joined(&self) -> Position {
        Position::new(self.joined_tx, self.joined_id)
    }
}

/// Adds `user_id` to `team_id`. Returns the membership and whether it is new; an
/// existing membership is returned unchanged (its join position does not move).
pub async fn add_member<'c>(
    db: impl Acquire<'c, Database = Postgres>,
    tenant_id: Uuid,
    team_id: &str,
    user_id: &str,
) -> Result<(MemberRow, bool), sqlx::Error> {
    let mut tx = db.begin().await?;
    let inserted: Option<MemberRow> = sqlx::query_as(
        "INSERT INTO memberships (tenant_id, team_id, user_id) VALUES ($1, $2, $3)
         ON CONFLICT (tenant_id, team_id, user_id) DO NOTHING
         RETURNING team_id, user_id, joined_tx, joined_id, created_at",
    )
    .bind(tenant_id)
    .bind(team_id)
    .bind(user_id)
    .fetch_optional(&mut *tx)
    .await?;
    let result = match inserted {
        Some(row) => {
            notify_memberships_changed(&mut *tx, tenant_id, user_id).await?;
            (row, true)
        }
        // ON CONFLICT waited for any concurrent insert to commit, so the row is
        // visible to this (new) statement.
        None => (
            sqlx::query_as(
                "SELECT team_id, user_id, joined_tx, joined_id, created_at FROM memberships
                 WHERE tenant_id = $1 AND team_id = $2 AND user_id = $3",
            )
            .bind(tenant_id)
            .bind(team_id)
            .bind(user_id)
            .fetch_one(&mut *tx)
            .await?,
            false,
        ),
    };
    tx.commit().await?;
    Ok(result)
}

/// Removes a membership; false when there was none.
pub async fn remove_member<'c>(
    db: impl Acquire<'c, Database = Postgres>,
    tenant_id: Uuid,
    team_id: &str,
    user_id: &str,
) -> Result<bool, sqlx::Error> {
    let mut tx = db.begin().await?;
    let removed = sqlx::query(
        "DELETE FROM memberships WHERE tenant_id = $1 AND team_id = $2 AND user_id = $3",
    )
    .bind(tenant_id)
    .bind(team_id)
    .bind(user_id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        > 0;
    if removed {
        notify_memberships_changed(&mut *tx, tenant_id, user_id).await?;
    }
    tx.commit().await?;
    Ok(removed)
}

/// A team's members ordered by user id, after `after_user` (keyset paging).
pub async fn list_members(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    team_id: &str,
    after_user: Option<&str>,
    limit: i64,
) -> Result<Vec<MemberRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT team_id, user_id, joined_tx, joined_id, created_at FROM memberships
         WHERE tenant_id = $1 AND team_id = $2 AND ($3::text IS NULL OR user_id > $3)
         ORDER BY user_id
         LIMIT $4",
    )
    .bind(tenant_id)
    .bind(team_id)
    .bind(after_user)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Every team of a user: the input of each feed query (cached per user).
pub async fn list_memberships_of_user(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> Result<Vec<Membership>, sqlx::Error> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT team_id, joined_tx, joined_id FROM memberships
         WHERE tenant_id = $1 AND user_id = $2
         ORDER BY team_id",
    )
    .bind(tenant_id)
    .bind(user_id)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(team_id, tx, id)| Membership {
            team_id,
            joined: Position::new(tx, id),
        })
        .collect())
}

/// NOTIFY is delivered at commit and not at all on rollback, so listeners hear of
/// exactly the changes that happened.
async fn notify_memberships_changed(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> Result<(), sqlx::Error> {
    let changed = MembershipsChanged {
        tenant_id,
        user_id: user_id.to_owned(),
    };
    notify(db, NotifyChannel::Cache, &changed.payload()).await
}
