//! The teams service: memberships. A member sees the team's events positioned
//! after the membership's own write; a change reaches every instance's
//! membership cache through NOTIFY when it commits, and this instance's at
//! once.

use tidings_core::{stable_lock_key, TeamId, UserId};
use uuid::Uuid;

pub use crate::store::teams::MemberRow;
use crate::{
    app::state::AppState,
    db::replicas::Lsn,
    store::paging::{Page, PageRequest},
    store::teams as store,
};

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 100;

#[derive(Debug, thiserror::Error)]
pub enum AddMemberError {
    #[error(
        "the user belongs to {max} teams, the most TIDINGS_MAX_MEMBERSHIPS_PER_USER allows; \
         remove a membership first"
    )]
    TooMany { max: u32 },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

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
/// A user in `settings.bounds.max_memberships_per_user` teams joins no more
/// (each team costs every feed read of the user an index probe). Joins of one
/// user take turns on an advisory lock, so two at once cannot both pass the
/// count.
pub async fn add_member(
    state: &AppState,
    tenant_id: Uuid,
    team: &TeamId,
    user: &UserId,
) -> Result<MemberChange<(MemberRow, bool)>, AddMemberError> {
    let max = state.settings.bounds.max_memberships_per_user;
    let mut tx = state.pool.begin().await?;
    crate::store::lock_xact(
        &mut *tx,
        stable_lock_key(&["memberships", &tenant_id.to_string(), user]),
    )
    .await?;
    let result = match store::insert_member(&mut *tx, tenant_id, team, user).await? {
        Some(row) => {
            // Counted after the insert: the new membership is one of them.
            if store::count_memberships_of_user(&mut *tx, tenant_id, user).await? > i64::from(max) {
                return Err(AddMemberError::TooMany { max });
            }
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
