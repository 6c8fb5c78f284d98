//! The user's two watermarks over feed positions, seen and read (one
//! `feed_state` row per user; ARCHITECTURE.md, "Feed rules"): each only moves
//! forward. The feed statements read them (`marks` in every statement of
//! [`super`]); here they are written, and locked while an item is read one by
//! one ([`super::item_reads`]).

use sqlx::PgExecutor;
use tidings_core::Position;
use uuid::Uuid;

/// Which of the two watermarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Seen,
    Read,
}

/// Moves one watermark forward to `target`, never back: the upsert's WHERE
/// compares row values, so of concurrent or replayed calls the highest wins
/// whatever the order they commit in. Advancing `read` also drops the
/// individually read items it now covers. Either drops the user's stored
/// counts base ([`super::stored_base`]), which counted from the old floors:
/// no first read is handed a base that cannot hold.
pub async fn advance_mark(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
    mark: Mark,
    target: Position,
) -> Result<(), sqlx::Error> {
    let sql = match mark {
        Mark::Seen => {
            "INSERT INTO feed_state AS s (tenant_id, user_id, seen_tx, seen_id) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant_id, user_id) DO UPDATE
                SET seen_tx = EXCLUDED.seen_tx, seen_id = EXCLUDED.seen_id, updated_at = now(),
                    counts_base = NULL
                WHERE (s.seen_tx, s.seen_id) < (EXCLUDED.seen_tx, EXCLUDED.seen_id)"
        }
        Mark::Read => {
            "WITH moved AS (
                INSERT INTO feed_state AS s (tenant_id, user_id, read_tx, read_id) VALUES ($1, $2, $3, $4)
                ON CONFLICT (tenant_id, user_id) DO UPDATE
                   SET read_tx = EXCLUDED.read_tx, read_id = EXCLUDED.read_id, updated_at = now(),
                       counts_base = NULL
                   WHERE (s.read_tx, s.read_id) < (EXCLUDED.read_tx, EXCLUDED.read_id)
                RETURNING s.read_tx, s.read_id
             )
             DELETE FROM item_reads r USING moved m
             WHERE r.tenant_id = $1 AND r.user_id = $2 AND (r.tx, r.item_id) <= (m.read_tx, m.read_id)"
        }
    };
    sqlx::query(sql)
        .bind(tenant_id)
        .bind(user_id)
        .bind(target.tx)
        .bind(target.id)
        .execute(db)
        .await?;
    Ok(())
}

/// Makes sure the user has a `feed_state` row (watermarks at the origin), so
/// [`lock_read_mark`] has a row to lock.
pub async fn ensure_feed_state(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO feed_state (tenant_id, user_id) VALUES ($1, $2)
         ON CONFLICT (tenant_id, user_id) DO NOTHING",
    )
    .bind(tenant_id)
    .bind(user_id)
    .execute(db)
    .await?;
    Ok(())
}

/// The read watermark, with the user's `feed_state` row locked for the rest
/// of the caller's transaction, so concurrent changes to the user's
/// individually read items are serialised.
pub async fn lock_read_mark(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> Result<Position, sqlx::Error> {
    let (read_tx, read_id): (i64, i64) = sqlx::query_as(
        "SELECT read_tx, read_id FROM feed_state WHERE tenant_id = $1 AND user_id = $2 FOR UPDATE",
    )
    .bind(tenant_id)
    .bind(user_id)
    .fetch_one(db)
    .await?;
    Ok(Position::new(read_tx, read_id))
}

/// One user's watermarks, as the outbox's claim reads them under the lock.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LockedMarks {
    pub tenant_id: Uuid,
    pub user_id: String,
    pub seen_tx: i64,
    pub seen_id: i64,
    pub read_tx: i64,
    pub read_id: i64,
}

/// Locks the `feed_state` rows of `users` (pairs of `tenants` and `users`)
/// in share mode for the rest of the caller's transaction and answers their
/// watermarks, each as committed when its lock was granted. Every path that
/// changes what a user has read or seen ([`advance_mark`], the lock of
/// [`lock_read_mark`] around an item read) takes the same row in an
/// exclusive mode, so a mark in flight is waited for, and one that starts
/// later waits for the caller's commit.
///
/// A user without a row gets one first (watermarks at the origin: nothing
/// read), for the same reason [`ensure_feed_state`] exists: a mark inserting
/// the first row is only waited for through the unique index. Rows are
/// inserted and locked in (tenant, user) order, the one order every claim
/// takes, so two claims sharing users cannot deadlock on each other's new
/// rows, and a mark locks a single row, so it closes no cycle.
pub async fn lock_marks_shared(
    conn: &mut sqlx::PgConnection,
    tenants: &[Uuid],
    users: &[String],
) -> Result<Vec<LockedMarks>, sqlx::Error> {
    sqlx::query(
        "INSERT INTO feed_state (tenant_id, user_id)
         SELECT t, u FROM unnest($1::uuid[], $2::text[]) AS x(t, u)
         GROUP BY t, u ORDER BY t, u
         ON CONFLICT (tenant_id, user_id) DO NOTHING",
    )
    .bind(tenants)
    .bind(users)
    .execute(&mut *conn)
    .await?;
    // A new statement: its snapshot is taken after the insert waited for any
    // mark that was inserting a row, and FOR SHARE returns the newest
    // version of a row it had to wait for.
    sqlx::query_as(
        "SELECT s.tenant_id, s.user_id, s.seen_tx, s.seen_id, s.read_tx, s.read_id
         FROM feed_state s
         WHERE (s.tenant_id, s.user_id) IN (SELECT t, u FROM unnest($1::uuid[], $2::text[]) AS x(t, u))
         ORDER BY s.tenant_id, s.user_id
         FOR SHARE OF s",
    )
    .bind(tenants)
    .bind(users)
    .fetch_all(&mut *conn)
    .await
}
