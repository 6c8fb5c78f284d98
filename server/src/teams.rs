//! The teams service: memberships. A member sees the team's events positioned
//! after the membership's own write; a change reaches every instance's
//! membership cache through NOTIFY when it commits, and this instance's at
//! once.

use tidings_core::{TeamId, UserId};
use uuid::Uuid;

pub use crate::store::teams::MemberRow;
use crate::{
    paging::{Page, PageRequest},
    replicas::Lsn,
    state::AppState,
    store::teams as store,
};

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 100;

/// A membership change's answer: its consistency token when reads may go to
/// hot standbys. The token is also remembered for the member's own next reads
/// on this instance, which thus see their new (or lost) team at once.
#[derive(Debug, Clone)]
pub struct MemberChange<T> {
    pub outcome: T,
    pub token: Option<Lsn>,
}

/// Adds `user` to `team`. Returns the membership and whether it is new; an
/// existing membership is returned unchanged (its join position does not move).
pub async fn add_member(
    state: &AppState,
    tenant_id: Uuid,
    team: &TeamId,
    user: &UserId,
) -> sqlx::Result<MemberChange<(MemberRow, bool)>> {
    let mut tx = state.pool.begin().await?;
    let result = match store::insert_member(&mut *tx, tenant_id, team, user).await? {
        Some(row) => {
            store::notify_memberships_changed(&mut *tx, tenant_id, user).await?;
            (row, true)
        }
        // ON CONFLICT waited for any concurrent insert to commit, so the row is
        // visible to this (new) statement.
        None => {
            let row = store::get_member(&mut *tx, tenant_id, team, user)
                .await?
                .ok_or_else(|| sqlx::Error::RowNotFound)?;
            (row, false)
        }
    };
    tx.commit().await?;
    forget_cached_teams(state, tenant_id, user).await;
    let token = state.replicas.written_by(tenant_id, user).await?;
    Ok(MemberChange {
        outcome: result,
        token,
    })
}

/// Removes a membership; false when there was none.
pub async fn remove_member(
    state: &AppState,
    tenant_id: Uuid,
    team: &TeamId,
    user: &UserId,
) -> sqlx::Result<MemberChange<bool>> {
    let mut tx = state.pool.begin().await?;
    let removed = store::delete_member(&mut *tx, tenant_id, team, user).await?;
    if removed {
        store::notify_memberships_changed(&mut *tx, tenant_id, user).await?;
    }
    tx.commit().await?;
    forget_cached_teams(state, tenant_id, user).await;
    let token = if removed {
        state.replicas.written_by(tenant_id, user).await?
    } else {
        None
    };
    Ok(MemberChange {
        outcome: removed,
        token,
    })
}

/// This instance hears its own NOTIFY too; dropping the entry now makes the
/// change visible here without waiting for that round trip.
async fn forget_cached_teams(state: &AppState, tenant_id: Uuid, user: &UserId) {
    state.caches.memberships.invalidate(tenant_id, user).await;
}

/// One page of a team's members, ordered by user id.
pub async fn list_members(
    state: &AppState,
    tenant_id: Uuid,
    team: &TeamId,
    page: &PageRequest<UserId>,
) -> sqlx::Result<Page<MemberRow>> {
    let rows = store::list_members(
        &state.pool,
        tenant_id,
        team,
        page.after.as_deref(),
        page.fetch_limit(),
    )
    .await?;
    Ok(page.page(rows, |row| &row.user_id))
}
