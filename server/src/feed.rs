//! The feed service: a user's feed computed at read time, their watermarks
//! and badges. The rules (ARCHITECTURE.md, "Feed rules"; invariants 2 and 3)
//! live here and in the core; the statements in `store::feed`.

use std::sync::Arc;

use tidings_core::{classify, ItemState, Position, ReadSet, UserId, WatermarkError};
use uuid::Uuid;

pub use crate::store::feed::{Badges, FeedItem, FeedStatus, Mark, PageFrom, Source};
use crate::{
    replicas::Lsn,
    state::AppState,
    store::{feed as store, teams::Membership},
};

pub const DEFAULT_LIMIT: u32 = 20;
pub const MAX_LIMIT: u32 = 100;

// A page's individually read items always fit one read set.
const _: () = assert!((MAX_LIMIT as usize) < tidings_core::MAX_INDIVIDUAL_READS);

/// A page as the client sees it.
#[derive(Debug, Clone)]
pub struct FeedPage {
    /// Newest first, each with whether it is seen and read.
    pub items: Vec<(FeedItem, ItemState)>,
    /// Where the next older page starts; only on `before` pages with more.
    pub next_before: Option<Position>,
    /// Without `after`: the newest item visible in the whole feed. With
    /// `after`: the newest item of this page, or, when it is empty, the
    /// newest of the feed or the cursor, whichever is later — so polling with
    /// `after=head` visits every new item once, however large the backlog,
    /// and whichever server (primary or standby) answers each poll.
    pub head: Option<Position>,
    pub badges: Badges,
}

#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("no item {0} in this feed")]
    ItemNotFound(i64),
    /// The user's set of items read one by one is full: mark all read.
    #[error(transparent)]
    TooManyIndividualReads(#[from] WatermarkError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The user's teams with their join positions, from the membership cache.
async fn teams_of(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
) -> sqlx::Result<Arc<[Membership]>> {
    state
        .caches
        .memberships
        .get(&state.pool, tenant_id, user)
        .await
}

/// One page (`limit` is 1..=100, checked by the caller), its head and badges,
/// from one statement and so one snapshot — on a standby when one is in
/// rotation and has replayed `token` and the user's own last write.
pub async fn read_page(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
    from: PageFrom,
    limit: u32,
    token: Option<Lsn>,
) -> Result<FeedPage, FeedError> {
    let teams = teams_of(state, tenant_id, user).await?;
    let teams = &teams;
    let page = state
        .replicas
        .read(Some((tenant_id, user)), token, |mut conn| async move {
            store::read_feed(&mut *conn, tenant_id, user, teams, from, limit).await
        })
        .await?;
    // Cannot be full: a page holds fewer items than a read set may.
    let individually_read = ReadSet::try_from(
        page.items
            .iter()
            .filter(|i| i.individually_read)
            .map(|i| i.position)
            .collect::<Vec<_>>(),
    )?;
    let head = match from {
        // Never below the cursor: a standby behind the server that gave it must
        // not send the client back (it would get items twice).
        PageFrom::After(after) => page
            .items
            .first()
            .map(|i| i.position)
            .or(Some(page.head.map_or(after, |h| h.max(after)))),
        PageFrom::Before(_) => page.head,
    };
    let next_before = match from {
        PageFrom::Before(_) if page.more => page.items.last().map(|i| i.position),
        _ => None,
    };
    let marks = page.marks;
    Ok(FeedPage {
        items: page
            .items
            .into_iter()
            .map(|item| {
                let seen_read = classify(item.position, &marks, &individually_read);
                (item, seen_read)
            })
            .collect(),
        next_before,
        head,
        badges: page.badges,
    })
}

/// The user's watermarks and badge counts, from a standby as [`read_page`].
pub async fn status(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
    token: Option<Lsn>,
) -> Result<FeedStatus, FeedError> {
    let teams = teams_of(state, tenant_id, user).await?;
    let teams = &teams;
    Ok(state
        .replicas
        .read(Some((tenant_id, user)), token, |mut conn| async move {
            store::read_status(&mut *conn, tenant_id, user, teams).await
        })
        .await?)
}

/// The answer to a mark: the fresh status (read on the primary) and the
/// consistency token of the change, when reads may go to standbys.
#[derive(Debug, Clone, Copy)]
pub struct Marked {
    pub status: FeedStatus,
    pub token: Option<Lsn>,
}

/// Moves `mark` to `proposed` (or the head), clamped to the head, never back
/// (the core's `advance`, shared with the browser), and answers the fresh
/// status. The upsert compares row values, so of concurrent or replayed calls
/// the highest wins whatever the order they commit in.
pub async fn mark_up_to(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
    mark: Mark,
    proposed: Option<Position>,
) -> Result<Marked, FeedError> {
    let teams = teams_of(state, tenant_id, user).await?;
    let (marks, head) = store::read_head(&state.pool, tenant_id, user, &teams).await?;
    let head = head.unwrap_or(Position::ORIGIN);
    let current = match mark {
        Mark::Seen => marks.seen,
        Mark::Read => marks.read,
    };
    let target = tidings_core::advance(current, proposed.unwrap_or(head), head);
    if target > current {
        store::advance_mark(&state.pool, tenant_id, user, mark, target).await?;
    }
    marked(state, tenant_id, user, &teams).await
}

/// The status after a mark, from the primary, and the mark's token (taken
/// after its commit, so at or past it; remembered for the user's next reads
/// on this instance).
async fn marked(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
    teams: &[Membership],
) -> Result<Marked, FeedError> {
    let token = state.replicas.written_by(tenant_id, user).await?;
    let status = store::read_status(&state.pool, tenant_id, user, teams).await?;
    Ok(Marked { status, token })
}

/// Marks one item of the user's feed read. Items at or below the read
/// watermark already are; above it the item joins the user's bounded set of
/// individually read items, which refuses (rather than forgets) past
/// `MAX_INDIVIDUAL_READS`. The user's `feed_state` row is locked so
/// concurrent calls cannot overfill the set.
pub async fn mark_item_read(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
    item_id: i64,
) -> Result<Marked, FeedError> {
    let teams = teams_of(state, tenant_id, user).await?;
    let item = store::find_item(&state.pool, tenant_id, user, &teams, item_id)
        .await?
        .ok_or(FeedError::ItemNotFound(item_id))?;
    let mut tx = state.pool.begin().await?;
    store::ensure_feed_state(&mut *tx, tenant_id, user).await?;
    let read_mark = store::lock_read_mark(&mut *tx, tenant_id, user).await?;
    if item > read_mark {
        let mut set = ReadSet::new();
        for read in store::list_item_reads(&mut *tx, tenant_id, user).await? {
            set.insert(read)?;
        }
        if set.insert(item)? {
            store::insert_item_read(&mut *tx, tenant_id, user, item).await?;
        }
    }
    tx.commit().await?;
    marked(state, tenant_id, user, &teams).await
}
