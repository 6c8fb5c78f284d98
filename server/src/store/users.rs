//! Contact data of recipients (table `users`).

use chrono::{DateTime, NaiveTime, Utc};
use tidings_core::UserId;
use uuid::Uuid;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserRow {
    pub user_id: String,
    pub email: Option<String>,
    pub display_name: Option<String>,
    /// BCP 47 tag, canonical case (`templates::locale`).
    pub locale: Option<String>,
    /// IANA time zone name.
    pub timezone: Option<String>,
    /// Quiet hours, local time in `timezone`: both or neither.
    pub quiet_start: Option<NaiveTime>,
    pub quiet_end: Option<NaiveTime>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A user's contact data as written by `PUT /v1/users/{user_id}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContactData<'a> {
    pub email: Option<&'a str>,
    pub display_name: Option<&'a str>,
    pub locale: Option<&'a str>,
    pub timezone: Option<&'a str>,
    /// Quiet hours `(start, end)`, local time; `start > end` crosses midnight.
    pub quiet_hours: Option<(NaiveTime, NaiveTime)>,
}

/// PUT semantics: the stored contact data becomes exactly what was sent.
pub async fn upsert_user(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    user_id: &str,
    contact: ContactData<'_>,
) -> sqlx::Result<UserRow> {
    sqlx::query_as(
        "INSERT INTO users (tenant_id, user_id, email, display_name, locale, timezone,
                            quiet_start, quiet_end)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (tenant_id, user_id) DO UPDATE
             SET email = EXCLUDED.email, display_name = EXCLUDED.display_name,
                 locale = EXCLUDED.locale, timezone = EXCLUDED.timezone,
                 quiet_start = EXCLUDED.quiet_start, quiet_end = EXCLUDED.quiet_end,
                 updated_at = now()
         RETURNING user_id, email, display_name, locale, timezone, quiet_start, quiet_end,
                   created_at, updated_at",
    )
    .bind(tenant)
    .bind(user_id)
    .bind(contact.email)
    .bind(contact.display_name)
    .bind(contact.locale)
    .bind(contact.timezone)
    .bind(contact.quiet_hours.map(|(start, _)| start))
    .bind(contact.quiet_hours.map(|(_, end)| end))
    .fetch_one(db)
    .await
}

pub async fn get_user(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    user_id: &str,
) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(
        "SELECT user_id, email, display_name, locale, timezone, quiet_start, quiet_end,
                created_at, updated_at
           FROM users
          WHERE tenant_id = $1 AND user_id = $2",
    )
    .bind(tenant)
    .bind(user_id)
    .fetch_optional(db)
    .await
}

/// True when a row was deleted.
pub async fn delete_user(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    user_id: &str,
) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM users WHERE tenant_id = $1 AND user_id = $2")
        .bind(tenant)
        .bind(user_id)
        .execute(db)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Those of `user_ids` that have an email address.
pub async fn list_users_with_email(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    user_ids: &[UserId],
) -> sqlx::Result<Vec<UserId>> {
    let ids: Vec<&str> = user_ids.iter().map(UserId::as_str).collect();
    let found: Vec<String> = sqlx::query_scalar(
        "SELECT user_id FROM users
         WHERE tenant_id = $1 AND user_id = ANY($2) AND email IS NOT NULL",
    )
    .bind(tenant)
    .bind(&ids)
    .fetch_all(db)
    .await?;
    // Each is one of `user_ids`, so it parses.
    Ok(found
        .into_iter()
        .filter_map(|id| UserId::parse(id).ok())
        .collect())
}

/// The time zones of those of `user_ids` that have a profile (a zone may be
/// unset).
pub async fn list_user_timezones(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    user_ids: &[String],
) -> sqlx::Result<Vec<(String, Option<String>)>> {
    sqlx::query_as("SELECT user_id, timezone FROM users WHERE tenant_id = $1 AND user_id = ANY($2)")
        .bind(tenant)
        .bind(user_ids)
        .fetch_all(db)
        .await
}
