//! The items a user read one by one, above their read watermark (`item_reads`):
//! a small bounded set (`tidings_core::ReadSet`, at most `MAX_INDIVIDUAL_READS`)
//! that the caller changes with the user's `feed_state` row locked
//! ([`super::marks::lock_read_mark`]). Advancing the read watermark drops the
//! ones it covers ([`super::marks::advance_mark`]); the feed statements read
//! them (`reads` in [`super`]).

use sqlx::PgExecutor;
use tidings_core::Position;
use uuid::Uuid;

/// The items the user read one by one (above the read watermark).
pub async fn list_item_reads(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> Result<Vec<Position>, sqlx::Error> {
    let reads: Vec<(i64, i64)> =
        sqlx::query_as("SELECT tx, item_id FROM item_reads WHERE tenant_id = $1 AND user_id = $2")
            .bind(tenant_id)
            .bind(user_id)
            .fetch_all(db)
            .await?;
    Ok(reads
        .into_iter()
        .map(|(tx, id)| Position::new(tx, id))
        .collect())
}

/// Adds one item to the set; the caller has checked, under the lock, that it
/// is above the read watermark and that the set has room.
pub async fn insert_item_read(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
    item: Position,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO item_reads (tenant_id, user_id, item_id, tx) VALUES ($1, $2, $3, $4)")
        .bind(tenant_id)
        .bind(user_id)
        .bind(item.id)
        .bind(item.tx)
        .execute(db)
        .await?;
    Ok(())
}

/// Which of the items (`tenants`, `users`, `item_ids`, one triple per index)
/// their user read one by one. The outbox's claim calls it with the users'
/// `feed_state` rows locked ([`super::marks::lock_marks_shared`]), in a
/// statement after the lock, so it sees every read committed before it.
pub async fn find_item_reads(
    db: impl PgExecutor<'_>,
    tenants: &[Uuid],
    users: &[String],
    item_ids: &[i64],
) -> Result<Vec<(Uuid, String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT r.tenant_id, r.user_id, r.item_id
         FROM unnest($1::uuid[], $2::text[], $3::int8[]) AS x(t, u, i)
         JOIN item_reads r ON r.tenant_id = x.t AND r.user_id = x.u AND r.item_id = x.i",
    )
    .bind(tenants)
    .bind(users)
    .bind(item_ids)
    .fetch_all(db)
    .await
}
