//! Event types' default delivery rules (`event_type_delivery`, migration
//! 0026), stored as the JSON of `alerts::delivery::DeliveryRules`.

use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

pub async fn find_event_type_rules(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    event_type: &str,
) -> sqlx::Result<Option<Value>> {
    sqlx::query_scalar(
        "SELECT rules FROM event_type_delivery WHERE tenant_id = $1 AND event_type = $2",
    )
    .bind(tenant)
    .bind(event_type)
    .fetch_optional(db)
    .await
}

pub async fn upsert_event_type_rules(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    event_type: &str,
    rules: &Value,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO event_type_delivery (tenant_id, event_type, rules) VALUES ($1, $2, $3)
         ON CONFLICT (tenant_id, event_type) DO UPDATE
            SET rules = EXCLUDED.rules, updated_at = now()",
    )
    .bind(tenant)
    .bind(event_type)
    .bind(rules)
    .execute(db)
    .await?;
    Ok(())
}

/// The rules an alert was accepted with (`alerts.delivery`), for its
/// background expansion batches.
pub async fn find_alert_rules(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    alert_id: Uuid,
) -> sqlx::Result<Option<Value>> {
    sqlx::query_scalar::<_, Option<Value>>(
        "SELECT delivery FROM alerts WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant)
    .bind(alert_id)
    .fetch_optional(db)
    .await
    .map(Option::flatten)
}
