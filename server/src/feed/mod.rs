//! The feed service: a user's feed computed at read time, their watermarks
//! and badges. The rules (ARCHITECTURE.md, "Feed rules"; invariants 2 and 3)
//! live here and in the core; the statements in `store::feed`.

pub mod cache;
pub mod events;
pub mod horizon;
pub mod teams;

use std::sync::Arc;

use tidings_core::{classify, ItemState, Position, ReadSet, UserId, WatermarkError};
use uuid::Uuid;

pub use crate::store::feed::{marks::Mark, Badges, FeedItem, FeedStatus, PageFrom, Source};
use crate::{
    app::instruments::{self, CacheLookup},
    app::state::AppState,
    db::replicas::Lsn,
    store::{
        feed::{self as store, BadgeWalk, CountsBase},
        notify::{self, MarksChanged, NotifyChannel},
        teams::Membership,
    },
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

/// Tells every instance's streams that the user's marks changed, when the
/// caller's transaction commits.
async fn notify_marks(
    db: impl sqlx::PgExecutor<'_>,
    tenant_id: Uuid,
    user: &UserId,
) -> sqlx::Result<()> {
    let changed = MarksChanged {
        tenant_id,
        user_id: user.to_string(),
    };
    notify::notify(db, NotifyChannel::Marks, &changed.payload()).await
}

/// The tenant's horizon, read after the request began (`crate::feed::horizon`).
async fn horizon_of(state: &AppState, tenant_id: Uuid) -> sqlx::Result<i64> {
    Ok(state.horizons.fresh(&state.replicas).await?.of(tenant_id))
}

/// Walks at least this long (entries, the longer of the two walks) leave
/// their base stored in the database for other instances' first reads. A
/// walk of the whole budget costs several times a page; a short one costs
/// less than the write.
const STORE_AFTER_WALKING: i64 = 256;

/// A user's teams (from the membership cache) and the counts base the next
/// statement is handed.
struct Reader {
    teams: Arc<[Membership]>,
    base: Option<CountsBase>,
    /// The base is the one stored in the database, loaded with the teams.
    base_stored: bool,
}

/// The user's teams with their join positions, and the base: what the user's
/// last statement on this instance counted, if it ran with these teams, else
/// what a read stored in the database for them, loaded with the teams when
/// they are not cached. The next statement walks only what is newer (and
/// checks the base first; `store::feed`, the counts' base).
async fn reader_of(state: &AppState, tenant_id: Uuid, user: &UserId) -> sqlx::Result<Reader> {
    let (teams, stored) = state
        .caches
        .memberships
        .get(&state.pool, tenant_id, user)
        .await?;
    let kept = state.caches.counts.get(tenant_id, user, &teams).await;
    let base_stored = kept.is_none() && stored.is_some();
    Ok(Reader {
        teams,
        base: kept.or(stored),
        base_stored,
    })
}

/// Entries the statement walked, by the longer of its two walks: from the
/// base it carried over, else from the floors. Zero for a base counted from
/// a page's own positions beyond the few the page holds.
fn walked(base: Option<&CountsBase>, walk: &BadgeWalk) -> i64 {
    let next = &walk.next;
    match base {
        Some(base) if walk.carried_over => (next.unseen_entries - base.unseen_entries)
            .max(next.unread_entries - base.unread_entries),
        _ => next.unseen_entries.max(next.unread_entries),
    }
}

/// Keeps what a statement counted for the user's next one on this instance,
/// and stores it for other instances when it walked far, or when the stored
/// base it was handed no longer held (so that the next first read is not
/// handed it again).
async fn keep_counts_base(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
    reader: Reader,
    walk: BadgeWalk,
) {
    let lookup = if walk.carried_over {
        CacheLookup::Hit
    } else {
        CacheLookup::Miss
    };
    instruments::cache_lookup("counts", lookup);
    let stale_stored = reader.base_stored && !walk.carried_over;
    if stale_stored || walked(reader.base.as_ref(), &walk) >= STORE_AFTER_WALKING {
        state
            .caches
            .counts
            .store(&state.pool, tenant_id, user, &reader.teams, walk.next);
    }
    state
        .caches
        .counts
        .put(tenant_id, user, reader.teams, walk.next)
        .await;
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
    let reader = reader_of(state, tenant_id, user).await?;
    let fresh = state.horizons.fresh(&state.replicas).await?;
    let (counted_with, base) = (&reader.teams, reader.base.as_ref());
    let page = state
        .replicas
        .read(
            (tenant_id, user),
            token,
            &fresh,
            |mut conn, horizon| async move {
                // A first page handed a base counts from its own positions; when
                // that statement cannot (the base does not hold in its snapshot,
                // or more than a page came since), the one that walks answers
                // instead, whole: each answer is one statement's snapshot.
                if let (PageFrom::Before(None), Some(base)) = (from, base) {
                    let carried = store::read_first_page_carried(
                        &mut *conn,
                        tenant_id,
                        user,
                        counted_with,
                        limit,
                        horizon,
                        base,
                    )
                    .await?;
                    if let Some(page) = carried {
                        return Ok(page);
                    }
                }
                store::read_feed(
                    &mut *conn,
                    tenant_id,
                    user,
                    counted_with,
                    from,
                    limit,
                    horizon,
                    base,
                )
                .await
            },
        )
        .await?;
    keep_counts_base(state, tenant_id, user, reader, page.walk).await;
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
    let reader = reader_of(state, tenant_id, user).await?;
    let fresh = state.horizons.fresh(&state.replicas).await?;
    let (counted_with, base) = (&reader.teams, reader.base.as_ref());
    let (status, walk) = state
        .replicas
        .read(
            (tenant_id, user),
            token,
            &fresh,
            |mut conn, horizon| async move {
                // Handed a base, the counts come from the entries since it; when
                // that statement cannot tell (the base does not hold in its
                // snapshot, or a budget's worth came since), the one that walks
                // answers instead, whole, as for a first page.
                if let Some(base) = base {
                    let carried = store::read_status_carried(
                        &mut *conn,
                        tenant_id,
                        user,
                        counted_with,
                        horizon,
                        base,
                    )
                    .await?;
                    if let Some(answer) = carried {
                        return Ok(answer);
                    }
                }
                store::read_status(&mut *conn, tenant_id, user, counted_with, horizon, base).await
            },
        )
        .await?;
    keep_counts_base(state, tenant_id, user, reader, walk).await;
    Ok(status)
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
    let reader = reader_of(state, tenant_id, user).await?;
    let horizon = horizon_of(state, tenant_id).await?;
    let (marks, head) =
        store::read_head(&state.pool, tenant_id, user, &reader.teams, horizon).await?;
    let head = head.unwrap_or(Position::ORIGIN);
    let current = match mark {
        Mark::Seen => marks.seen,
        Mark::Read => marks.read,
    };
    let target = tidings_core::advance(current, proposed.unwrap_or(head), head);
    if target > current {
        let mut tx = state.pool.begin().await?;
        store::marks::advance_mark(&mut *tx, tenant_id, user, mark, target).await?;
        notify_marks(&mut *tx, tenant_id, user).await?;
        tx.commit().await?;
    }
    marked(state, tenant_id, user, reader, horizon).await
}

/// The status after a mark, from the primary, and the mark's token (taken
/// after its commit, so at or past it; remembered for the user's next reads
/// on this instance). A mark that moved changes what the base depended on, so
/// this walks from the new floors: it resets the counts the next reads carry.
async fn marked(
    state: &AppState,
    tenant_id: Uuid,
    user: &UserId,
    reader: Reader,
    horizon: i64,
) -> Result<Marked, FeedError> {
    let token = state.replicas.written_by(tenant_id, user).await?;
    let (status, walk) = store::read_status(
        &state.pool,
        tenant_id,
        user,
        &reader.teams,
        horizon,
        reader.base.as_ref(),
    )
    .await?;
    keep_counts_base(state, tenant_id, user, reader, walk).await;
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
    let reader = reader_of(state, tenant_id, user).await?;
    let horizon = horizon_of(state, tenant_id).await?;
    let item = store::find_item(
        &state.pool,
        tenant_id,
        user,
        &reader.teams,
        item_id,
        horizon,
    )
    .await?
    .ok_or(FeedError::ItemNotFound(item_id))?;
    let mut tx = state.pool.begin().await?;
    store::marks::ensure_feed_state(&mut *tx, tenant_id, user).await?;
    let read_mark = store::marks::lock_read_mark(&mut *tx, tenant_id, user).await?;
    if item > read_mark {
        let mut set = ReadSet::new();
        for read in store::item_reads::list_item_reads(&mut *tx, tenant_id, user).await? {
            set.insert(read)?;
        }
        if set.insert(item)? {
            store::item_reads::insert_item_read(&mut *tx, tenant_id, user, item).await?;
            notify_marks(&mut *tx, tenant_id, user).await?;
        }
    }
    tx.commit().await?;
    marked(state, tenant_id, user, reader, horizon).await
}

#[cfg(test)]
mod tests {
    use tidings_core::Watermarks;

    use super::*;

    fn walk(unseen: i64, unread: i64, carried_over: bool) -> BadgeWalk {
        BadgeWalk {
            next: CountsBase {
                counted_below: 100,
                marks: Watermarks::default(),
                purges: 0,
                budget: 1001,
                unseen_entries: unseen,
                unread_entries: unread,
            },
            carried_over,
        }
    }

    #[test]
    fn a_walk_is_measured_from_the_base_it_carried_over_else_from_the_floors() {
        let base = walk(40, 300, true).next;
        assert_eq!(walked(Some(&base), &walk(50, 700, true)), 400);
        assert_eq!(walked(Some(&base), &walk(50, 700, false)), 700);
        assert_eq!(walked(None, &walk(260, 10, false)), 260);
        assert_eq!(walked(Some(&base), &walk(40, 300, true)), 0);
    }
}
