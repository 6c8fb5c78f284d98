//! Categories and preference settings (migration 0024). The rules that read
//! them are `tidings_core::preferences`; the transactions are the service's
//! (`alerts::preferences`).

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// A category as stored: `defaults` is `{"<channel>": "<setting>"}`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CategoryRow {
    pub key: String,
    pub label: String,
    pub critical: bool,
    pub defaults: sqlx::types::Json<serde_json::Map<String, serde_json::Value>>,
    pub event_types: Vec<String>,
}

const CATEGORY_COLUMNS: &str = "c.key, c.label, c.critical, c.defaults,
     ARRAY(SELECT e.event_type FROM category_event_types e
           WHERE e.tenant_id = c.tenant_id AND e.category_key = c.key
           ORDER BY e.event_type) AS event_types";

/// Creates or replaces a category's own fields; true when it was created.
pub async fn upsert_category(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    key: &str,
    label: &str,
    critical: bool,
    defaults: &serde_json::Value,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "INSERT INTO notification_categories (tenant_id, key, label, critical, defaults)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (tenant_id, key) DO UPDATE
             SET label = EXCLUDED.label, critical = EXCLUDED.critical,
                 defaults = EXCLUDED.defaults, updated_at = now()
         RETURNING xmax = 0",
    )
    .bind(tenant)
    .bind(key)
    .bind(label)
    .bind(critical)
    .bind(defaults)
    .fetch_one(db)
    .await
}

/// Makes `event_types` exactly the event types of category `key`. Answers
/// those that belong to another category, which are left where they are
/// (the caller rolls back): an event type is in one category at most, and
/// the insert's conflict clause claims only what is free or already ours.
pub async fn replace_category_event_types(
    conn: &mut PgConnection,
    tenant: Uuid,
    key: &str,
    event_types: &[String],
) -> sqlx::Result<Vec<(String, String)>> {
    sqlx::query(
        "DELETE FROM category_event_types
         WHERE tenant_id = $1 AND category_key = $2 AND event_type <> ALL($3)",
    )
    .bind(tenant)
    .bind(key)
    .bind(event_types)
    .execute(&mut *conn)
    .await?;
    sqlx::query_as(
        "WITH wanted AS (SELECT DISTINCT unnest($3::text[]) AS event_type),
         claimed AS (
             INSERT INTO category_event_types (tenant_id, event_type, category_key)
             SELECT $1, event_type, $2 FROM wanted ORDER BY event_type
             ON CONFLICT (tenant_id, event_type) DO UPDATE SET category_key = EXCLUDED.category_key
                 WHERE category_event_types.category_key = EXCLUDED.category_key
             RETURNING event_type
         )
         SELECT w.event_type, e.category_key
         FROM wanted w
         JOIN category_event_types e ON e.tenant_id = $1 AND e.event_type = w.event_type
         WHERE w.event_type NOT IN (SELECT event_type FROM claimed)
         ORDER BY w.event_type",
    )
    .bind(tenant)
    .bind(key)
    .bind(event_types)
    .fetch_all(&mut *conn)
    .await
}

pub async fn get_category(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    key: &str,
) -> sqlx::Result<Option<CategoryRow>> {
    sqlx::query_as(&format!(
        "SELECT {CATEGORY_COLUMNS} FROM notification_categories c
         WHERE c.tenant_id = $1 AND c.key = $2"
    ))
    .bind(tenant)
    .bind(key)
    .fetch_optional(db)
    .await
}

/// Every category of the tenant, by key. Tenants have tens of categories,
/// not thousands: no paging.
pub async fn list_categories(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
) -> sqlx::Result<Vec<CategoryRow>> {
    sqlx::query_as(&format!(
        "SELECT {CATEGORY_COLUMNS} FROM notification_categories c
         WHERE c.tenant_id = $1 ORDER BY c.key"
    ))
    .bind(tenant)
    .fetch_all(db)
    .await
}

/// The category of an alert: the one it names, else its event type's.
/// `None` when it names none and its event type has none; when it names a
/// category that does not exist, also `None` (the caller refuses the alert).
pub async fn find_alert_category(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    named: Option<&str>,
    event_type: &str,
) -> sqlx::Result<Option<CategoryRow>> {
    sqlx::query_as(&format!(
        "SELECT {CATEGORY_COLUMNS} FROM notification_categories c
         WHERE c.tenant_id = $1
           AND c.key = COALESCE($2, (SELECT e.category_key FROM category_event_types e
                                     WHERE e.tenant_id = $1 AND e.event_type = $3))"
    ))
    .bind(tenant)
    .bind(named)
    .bind(event_type)
    .fetch_optional(db)
    .await
}

/// The category an alert was stored with, if it still exists: what a
/// background expansion batch applies.
pub async fn find_stored_alert_category(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
) -> sqlx::Result<Option<CategoryRow>> {
    sqlx::query_as(&format!(
        "SELECT {CATEGORY_COLUMNS} FROM alerts a
         JOIN notification_categories c ON c.tenant_id = a.tenant_id AND c.key = a.category
         WHERE a.tenant_id = $1 AND a.id = $2"
    ))
    .bind(tenant)
    .bind(alert_id)
    .fetch_optional(db)
    .await
}

/// A stored alert's category, by alert.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AlertCategoryRow {
    pub tenant_id: Uuid,
    pub alert_id: Uuid,
    #[sqlx(flatten)]
    pub category: CategoryRow,
}

/// The categories of the stored alerts `(tenants[i], alert_ids[i])` that
/// have one, in one statement: what the outbox's decision of a batch of
/// delayed deliveries, one alert each, applies.
pub async fn find_stored_alert_categories(
    db: impl PgExecutor<'_>,
    tenants: &[Uuid],
    alert_ids: &[Uuid],
) -> sqlx::Result<Vec<AlertCategoryRow>> {
    sqlx::query_as(&format!(
        "SELECT a.tenant_id, a.id AS alert_id, {CATEGORY_COLUMNS}
           FROM unnest($1::uuid[], $2::uuid[]) AS k(tenant_id, id)
           JOIN alerts a ON a.tenant_id = k.tenant_id AND a.id = k.id
           JOIN notification_categories c ON c.tenant_id = a.tenant_id AND c.key = a.category"
    ))
    .bind(tenants)
    .bind(alert_ids)
    .fetch_all(db)
    .await
}

/// One settings row; `user_id` `None` is a tenant default.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SettingRow {
    pub user_id: Option<String>,
    pub scope: String,
    pub scope_key: String,
    pub channel: String,
    pub setting: String,
    pub locked: bool,
}

/// The tenant's default rows and the rows of `users`, in one statement.
pub async fn list_settings(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    users: &[&str],
) -> sqlx::Result<Vec<SettingRow>> {
    sqlx::query_as(
        "SELECT user_id, scope, scope_key, channel, setting, locked FROM preference_settings
         WHERE tenant_id = $1 AND (user_id IS NULL OR user_id = ANY($2))
         ORDER BY user_id NULLS FIRST, scope, scope_key, channel",
    )
    .bind(tenant)
    .bind(users)
    .fetch_all(db)
    .await
}

/// Whether the tenant has any category or setting: a fan-out in a tenant
/// that uses neither reads nothing more.
pub async fn tenant_uses_preferences(db: impl PgExecutor<'_>, tenant: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM notification_categories WHERE tenant_id = $1)
             OR EXISTS (SELECT 1 FROM preference_settings WHERE tenant_id = $1)",
    )
    .bind(tenant)
    .fetch_one(db)
    .await
}

/// Column-wise rows for [`upsert_settings`] and [`delete_settings`].
#[derive(Debug, Default)]
pub struct SettingColumns {
    pub scopes: Vec<&'static str>,
    pub keys: Vec<String>,
    pub channels: Vec<&'static str>,
    pub settings: Vec<&'static str>,
    pub locked: Vec<bool>,
}

/// Writes rows of one user (`None`: the tenant defaults), replacing the
/// setting of rows that exist; `source` says who wrote them.
pub async fn upsert_settings(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    user: Option<&str>,
    rows: &SettingColumns,
    source: &str,
) -> sqlx::Result<()> {
    if rows.scopes.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO preference_settings
             (tenant_id, user_id, scope, scope_key, channel, setting, locked, source)
         SELECT $1, $2, s, k, c, v, l, $8
           FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bool[]) AS t(s, k, c, v, l)
         ON CONFLICT (tenant_id, user_id, scope, scope_key, channel) DO UPDATE
             SET setting = EXCLUDED.setting, locked = EXCLUDED.locked,
                 source = EXCLUDED.source, updated_at = now()",
    )
    .bind(tenant)
    .bind(user)
    .bind(&rows.scopes)
    .bind(&rows.keys)
    .bind(&rows.channels)
    .bind(&rows.settings)
    .bind(&rows.locked)
    .bind(source)
    .execute(db)
    .await?;
    Ok(())
}

/// Removes the rows named by (scope, key, channel) of one user (`None`: the
/// tenant defaults).
pub async fn delete_settings(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    user: Option<&str>,
    rows: &SettingColumns,
) -> sqlx::Result<()> {
    if rows.scopes.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "DELETE FROM preference_settings p
         USING unnest($3::text[], $4::text[], $5::text[]) AS t(s, k, c)
         WHERE p.tenant_id = $1 AND p.user_id IS NOT DISTINCT FROM $2
           AND p.scope = t.s AND p.scope_key = t.k AND p.channel = t.c",
    )
    .bind(tenant)
    .bind(user)
    .bind(&rows.scopes)
    .bind(&rows.keys)
    .bind(&rows.channels)
    .execute(db)
    .await?;
    Ok(())
}

/// Removes every row of one user (`None`: every tenant default).
pub async fn delete_all_settings(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    user: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query(
        "DELETE FROM preference_settings WHERE tenant_id = $1 AND user_id IS NOT DISTINCT FROM $2",
    )
    .bind(tenant)
    .bind(user)
    .execute(db)
    .await?;
    Ok(())
}

/// The category of each of `alerts` (tenant, alert id) that has one, and
/// whether it is critical: what an email's List-Unsubscribe needs. A
/// category deleted since counts as none.
pub async fn list_alert_categories(
    db: impl PgExecutor<'_>,
    tenants: &[Uuid],
    alerts: &[Uuid],
) -> sqlx::Result<Vec<(Uuid, Uuid, String, bool)>> {
    sqlx::query_as(
        "SELECT a.tenant_id, a.id, c.key, c.critical
         FROM unnest($1::uuid[], $2::uuid[]) AS t(tenant_id, alert_id)
         JOIN alerts a ON a.tenant_id = t.tenant_id AND a.id = t.alert_id
         JOIN notification_categories c ON c.tenant_id = a.tenant_id AND c.key = a.category",
    )
    .bind(tenants)
    .bind(alerts)
    .fetch_all(db)
    .await
}
