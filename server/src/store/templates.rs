//! Templates (migration 0023): immutable `template_versions`, the published
//! pointer `templates`, and what the outbox reads to render with them.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::paging::TemplateKey;

/// One immutable version; `variants` is the JSON map locale → content.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TemplateVersionRow {
    pub id: i64,
    pub event_type: String,
    pub channel: String,
    pub version: i32,
    pub variants: sqlx::types::Json<serde_json::Value>,
    pub created_at: DateTime<Utc>,
}

const VERSION_COLUMNS: &str = "v.id, v.event_type, v.channel, v.version, v.variants, v.created_at";

/// The published version of a template, locked until the caller's
/// transaction ends, so that two saves of one template write consecutive
/// versions, each built on the other. Creates the pointer row if missing.
pub async fn lock_published_version(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &str,
    channel: &str,
) -> sqlx::Result<Option<TemplateVersionRow>> {
    sqlx::query(
        "INSERT INTO templates (tenant_id, event_type, channel) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(tenant)
    .bind(event_type)
    .bind(channel)
    .execute(&mut *conn)
    .await?;
    sqlx::query("SELECT 1 FROM templates WHERE tenant_id = $1 AND event_type = $2 AND channel = $3 FOR UPDATE")
        .bind(tenant)
        .bind(event_type)
        .bind(channel)
        .execute(&mut *conn)
        .await?;
    get_published_version(&mut *conn, tenant, event_type, channel).await
}

/// Writes the next version of a template and publishes it.
pub async fn insert_published_version(
    conn: &mut PgConnection,
    tenant: Uuid,
    event_type: &str,
    channel: &str,
    variants: &serde_json::Value,
) -> sqlx::Result<TemplateVersionRow> {
    let row: TemplateVersionRow = sqlx::query_as(&format!(
        "INSERT INTO template_versions AS v (tenant_id, event_type, channel, version, variants)
         SELECT $1, $2, $3, COALESCE(max(version), 0) + 1, $4 FROM template_versions
          WHERE tenant_id = $1 AND event_type = $2 AND channel = $3
         RETURNING {VERSION_COLUMNS}"
    ))
    .bind(tenant)
    .bind(event_type)
    .bind(channel)
    .bind(sqlx::types::Json(variants))
    .fetch_one(&mut *conn)
    .await?;
    set_published_version(&mut *conn, tenant, event_type, channel, Some(row.id)).await?;
    Ok(row)
}

/// Moves the published pointer (`None`: no template, the plain rendering).
pub async fn set_published_version(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    event_type: &str,
    channel: &str,
    version_id: Option<i64>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE templates SET published_version_id = $4, updated_at = now()
         WHERE tenant_id = $1 AND event_type = $2 AND channel = $3",
    )
    .bind(tenant)
    .bind(event_type)
    .bind(channel)
    .bind(version_id)
    .execute(db)
    .await?;
    Ok(())
}

pub async fn get_published_version(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    event_type: &str,
    channel: &str,
) -> sqlx::Result<Option<TemplateVersionRow>> {
    sqlx::query_as(&format!(
        "SELECT {VERSION_COLUMNS} FROM templates t
         JOIN template_versions v ON v.tenant_id = t.tenant_id AND v.id = t.published_version_id
         WHERE t.tenant_id = $1 AND t.event_type = $2 AND t.channel = $3"
    ))
    .bind(tenant)
    .bind(event_type)
    .bind(channel)
    .fetch_optional(db)
    .await
}

/// The id of the published version only: what a delivery records at fan-out.
pub async fn get_published_version_id(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    event_type: &str,
    channel: &str,
) -> sqlx::Result<Option<i64>> {
    let id: Option<Option<i64>> = sqlx::query_scalar(
        "SELECT published_version_id FROM templates
         WHERE tenant_id = $1 AND event_type = $2 AND channel = $3",
    )
    .bind(tenant)
    .bind(event_type)
    .bind(channel)
    .fetch_optional(db)
    .await?;
    Ok(id.flatten())
}

pub async fn get_version(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: i64,
) -> sqlx::Result<Option<TemplateVersionRow>> {
    sqlx::query_as(&format!(
        "SELECT {VERSION_COLUMNS} FROM template_versions v WHERE v.tenant_id = $1 AND v.id = $2"
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Published templates after `after`, in (channel, event type) order.
pub async fn list_published_versions(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    after: Option<&TemplateKey>,
    limit: i64,
) -> sqlx::Result<Vec<TemplateVersionRow>> {
    sqlx::query_as(&format!(
        "SELECT {VERSION_COLUMNS} FROM templates t
         JOIN template_versions v ON v.tenant_id = t.tenant_id AND v.id = t.published_version_id
         WHERE t.tenant_id = $1
           AND ($2::text IS NULL OR (t.channel, t.event_type) > ($2, $3))
         ORDER BY t.channel, t.event_type
         LIMIT $4"
    ))
    .bind(tenant)
    .bind(after.map(|k| k.channel.as_str()))
    .bind(after.map(|k| k.event_type.as_str()).unwrap_or_default())
    .bind(limit)
    .fetch_all(db)
    .await
}

pub async fn get_default_locale(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
) -> sqlx::Result<Option<String>> {
    let locale: Option<Option<String>> =
        sqlx::query_scalar("SELECT default_locale FROM template_settings WHERE tenant_id = $1")
            .bind(tenant)
            .fetch_optional(db)
            .await?;
    Ok(locale.flatten())
}

pub async fn set_default_locale(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    locale: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO template_settings (tenant_id, default_locale) VALUES ($1, $2)
         ON CONFLICT (tenant_id) DO UPDATE SET default_locale = EXCLUDED.default_locale",
    )
    .bind(tenant)
    .bind(locale)
    .execute(db)
    .await?;
    Ok(())
}

/// What rendering a delivery with its recorded template needs besides the
/// claim's columns: the version, the recipient's profile, the tenant's
/// default locale.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeliveryTemplate {
    pub tenant_id: Uuid,
    pub id: i64,
    pub template_version_id: i64,
    pub display_name: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
    pub default_locale: Option<String>,
}

/// Of the deliveries `(tenants[i], ids[i])`, those recorded with a template.
/// The worker asks only for email deliveries, so a batch without email
/// costs no statement (and the claim stays as it was).
pub async fn list_delivery_templates(
    db: impl PgExecutor<'_>,
    tenants: &[Uuid],
    ids: &[i64],
) -> sqlx::Result<Vec<DeliveryTemplate>> {
    sqlx::query_as(
        "SELECT d.tenant_id, d.id, d.template_version_id, u.display_name, u.locale, u.timezone,
                t.default_locale
         FROM UNNEST($1::uuid[], $2::int8[]) AS k(tenant_id, id)
         JOIN deliveries d ON d.tenant_id = k.tenant_id AND d.id = k.id
         LEFT JOIN users u ON u.tenant_id = d.tenant_id AND u.user_id = d.recipient_id
         LEFT JOIN template_settings t ON t.tenant_id = d.tenant_id
         WHERE d.template_version_id IS NOT NULL",
    )
    .bind(tenants)
    .bind(ids)
    .fetch_all(db)
    .await
}

/// The profile of recipients for in-app rendering at fan-out.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RecipientProfile {
    pub user_id: String,
    pub display_name: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
}

pub async fn list_recipient_profiles(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    user_ids: &[String],
) -> sqlx::Result<Vec<RecipientProfile>> {
    sqlx::query_as(
        "SELECT user_id, display_name, locale, timezone FROM users
         WHERE tenant_id = $1 AND user_id = ANY($2)",
    )
    .bind(tenant)
    .bind(user_ids)
    .fetch_all(db)
    .await
}
