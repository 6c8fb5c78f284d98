//! Team memberships. A membership carries the feed position of its own write: the
//! member sees the team's events positioned after it (migrations/0003_feed.sql).
//!
//! Every change must notify `NotifyChannel::Cache` in its own transaction
//! ([`notify_memberships_changed`]), so every instance drops its cached copy of
//! that user's teams once the change commits.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use tidings_core::{Position, TeamId, UserId};
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
    #[sqlx(try_from = "String")]
    pub team_id: TeamId,
    #[sqlx(try_from = "String")]
    pub user_id: UserId,
    pub joined_tx: i64,
    pub joined_id: i64,
    pub created_at: DateTime<Utc>,
}

impl MemberRow {
    pub fn joined(&self) -> Position {
        Position::new(self.joined_tx, self.joined_id)
    }
}

const MEMBER_COLUMNS: &str = "team_id, user_id, joined_tx, joined_id, created_at";

/// Inserts a membership; `None` when it exists already (ON CONFLICT waited
/// for any concurrent insert of it to commit).
pub async fn insert_member(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    team_id: &str,
    user_id: &str,
) -> sqlx::Result<Option<MemberRow>> {
    sqlx::query_as(&format!(
        "INSERT INTO memberships (tenant_id, team_id, user_id) VALUES ($1, $2, $3)
         ON CONFLICT (tenant_id, team_id, user_id) DO NOTHING
         RETURNING {MEMBER_COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(team_id)
    .bind(user_id)
    .fetch_optional(db)
    .await
}

pub async fn get_member(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    team_id: &str,
    user_id: &str,
) -> sqlx::Result<Option<MemberRow>> {
    sqlx::query_as(&format!(
        "SELECT {MEMBER_COLUMNS} FROM memberships
         WHERE tenant_id = $1 AND team_id = $2 AND user_id = $3"
    ))
    .bind(tenant_id)
    .bind(team_id)
    .bind(user_id)
    .fetch_optional(db)
    .await
}

/// Deletes a membership; false when there was none.
pub async fn delete_member(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    team_id: &str,
    user_id: &str,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "DELETE FROM memberships WHERE tenant_id = $1 AND team_id = $2 AND user_id = $3",
    )
    .bind(tenant_id)
    .bind(team_id)
    .bind(user_id)
    .execute(db)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub async fn count_members(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    team_id: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM memberships WHERE tenant_id = $1 AND team_id = $2")
        .bind(tenant_id)
        .bind(team_id)
        .fetch_one(db)
        .await
}

/// A team's members ordered by user id, after `after_user` (keyset paging),
/// at most `limit`: the member list and the alert fan-out both read this.
pub async fn list_members(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    team_id: &str,
    after_user: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<MemberRow>> {
    sqlx::query_as(&format!(
        "SELECT {MEMBER_COLUMNS} FROM memberships
         WHERE tenant_id = $1 AND team_id = $2 AND ($3::text IS NULL OR user_id > $3)
         ORDER BY user_id
         LIMIT $4"
    ))
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
) -> sqlx::Result<Vec<Membership>> {
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

/// How many teams `user_id` belongs to (index `memberships_by_user`).
pub async fn count_memberships_of_user(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM memberships WHERE tenant_id = $1 AND user_id = $2")
        .bind(tenant_id)
        .bind(user_id)
        .fetch_one(db)
        .await
}

/// Tells every instance that `user_id`'s teams changed, when the caller's
/// transaction commits (and not at all if it rolls back).
pub async fn notify_memberships_changed(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> sqlx::Result<()> {
    let changed = MembershipsChanged {
        tenant_id,
        user_id: user_id.to_owned(),
    };
    notify(db, NotifyChannel::Cache, &changed.payload()).await
}
