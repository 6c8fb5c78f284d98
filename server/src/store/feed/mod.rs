//! A user's feed, computed at read time: the events of their teams after each
//! join position, plus their in-app alerts (`inbox_items`), in (tx, id) order.
//!
//! **Visibility (ARCHITECTURE.md, invariants 2 and 11).** Every statement here
//! serves only rows with `tx` below the tenant's *horizon*, its last parameter:
//! a bound read by an earlier statement (`store::horizon`) below which every
//! feed write of the tenant has ended, so once a position has been served
//! nothing can appear below it: a client that pages or polls from positions it
//! was given never skips an item. The price is that a long-running feed write
//! of the tenant holds back its newer items (they are late, never lost); other
//! tenants' transactions do not.
//!
//! **Bounded work.** The user's teams come in as arrays (from the membership
//! cache). Every scan is an index-only range on `events (tenant_id, team_id,
//! tx, id)` or `inbox_items (tenant_id, recipient_id, tx, id)` with a LIMIT;
//! rows (payloads) are read for the page's items alone. A page costs one probe
//! per source plus at most (limit + 1)² index entries (see
//! `statements::page_ctes`), whatever the history and however many teams; a
//! first page of teams enough to fill it from 4 entries each first scans the
//! tenant's newest entries (`events (tenant_id, tx, id)`), at most 4 per team,
//! and probes or scans each source only when that scan cannot tell
//! (`statements::TENANT_SCAN`); badge counts stop after
//! [`tidings_core::BADGE_CAP`] + 1 entries (plus the user's individually read
//! items) in all, and walk only what is newer than the user's previous
//! statement when its counts are handed back and still hold ([`CountsBase`]); a
//! first page handed them counts from its own positions instead, when they tell
//! ([`read_first_page_carried`]), and the counts from the positions since the
//! base alone ([`read_status_carried`]).
//!
//! **Where the SQL is.** The statements are composed from named CTEs in
//! `statements.rs`, and each one is committed whole, exactly as it runs, in
//! `snapshots/` next to it (`page_first.sql`, `counts_carried.sql`, …; a test
//! fails when one differs, and `statements.rs` says why they are composed and
//! how to rewrite them). This file runs them and reads their rows. The
//! writes of the user's watermarks are in [`marks`], of their items read one
//! by one in [`item_reads`].

pub mod item_reads;
pub mod marks;
mod statements;
pub mod stored_base;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use tidings_core::{Position, Watermarks, BADGE_CAP};
use uuid::Uuid;

use super::teams::Membership;

pub use statements::{
    counts_carried_sql, counts_sql, feed_page_carried_sql, feed_page_sql, first_page_kind, PageKind,
};

/// Where a feed item comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An activity event of one of the user's teams (`events`).
    Event,
    /// A transactional in-app alert addressed to the user (`inbox_items`).
    Alert,
}

#[derive(Debug, Clone)]
pub struct FeedItem {
    pub position: Position,
    pub source: Source,
    pub team_id: Option<String>,
    pub item_type: String,
    pub actor_id: Option<String>,
    pub object_id: Option<String>,
    pub subject: Option<String>,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
    /// Read one by one (in `item_reads`), above the read watermark.
    pub individually_read: bool,
}

/// Which way a page goes from its cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageFrom {
    /// The newest items strictly below the position (`Position::MAX`-like: the top).
    Before(Option<Position>),
    /// The oldest items strictly above the position (polling).
    After(Position),
}

/// Badge counts, exact up to `BADGE_CAP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Badges {
    pub unread: u32,
    pub unseen: u32,
    /// True when either count passed the cap (and reads as the cap).
    pub capped: bool,
}

impl Badges {
    fn from_counts(unread: i64, unseen: i64) -> Self {
        let cap = i64::from(BADGE_CAP);
        let clamp = |n: i64| n.clamp(0, cap) as u32;
        Badges {
            unread: clamp(unread),
            unseen: clamp(unseen),
            capped: unread > cap || unseen > cap,
        }
    }
}

/// What a statement's badge walks counted, for a later statement of the same
/// user and teams to carry over instead of walking it again (the base; see
/// [`counts_ctes`]): the index entries from each floor up to `counted_below`
/// (the statement's horizon), each count stopped at `budget`, under these
/// watermarks and this purge counter. The statement checks every field in
/// its own snapshot, so a stale base costs a full walk, never a wrong count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountsBase {
    pub counted_below: i64,
    pub marks: Watermarks,
    pub purges: i64,
    pub budget: i64,
    pub unseen_entries: i64,
    pub unread_entries: i64,
}

impl CountsBase {
    /// The length of a [`CountsBase::param`] array.
    pub const PARAM_LEN: usize = 9;

    /// The base a [`CountsBase::param`] array holds; `None` for any other shape.
    pub fn from_param(a: &[i64]) -> Option<CountsBase> {
        let &[counted_below, seen_tx, seen_id, read_tx, read_id, purges, budget, unseen, unread] =
            a
        else {
            return None;
        };
        Some(CountsBase {
            counted_below,
            marks: marks_of(seen_tx, seen_id, read_tx, read_id),
            purges,
            budget,
            unseen_entries: unseen,
            unread_entries: unread,
        })
    }

    /// The statement's `$base` parameter; empty for none.
    pub fn param(base: Option<&CountsBase>) -> Vec<i64> {
        base.map_or_else(Vec::new, |b| {
            vec![
                b.counted_below,
                b.marks.seen.tx,
                b.marks.seen.id,
                b.marks.read.tx,
                b.marks.read.id,
                b.purges,
                b.budget,
                b.unseen_entries,
                b.unread_entries,
            ]
        })
    }
}

/// How a statement counted: the base it leaves for the next one, and whether
/// it carried the given base over (false: it walked from the floors).
#[derive(Debug, Clone, Copy)]
pub struct BadgeWalk {
    pub next: CountsBase,
    pub carried_over: bool,
}

#[derive(Debug, Clone)]
pub struct FeedPage {
    /// Newest first, at most the requested limit.
    pub items: Vec<FeedItem>,
    /// More items exist beyond this page in its direction.
    pub more: bool,
    /// The newest position visible in the whole feed, if any.
    pub head: Option<Position>,
    pub marks: Watermarks,
    pub badges: Badges,
    pub walk: BadgeWalk,
}

/// The watermarks and badges after a change, as answered to the client.
#[derive(Debug, Clone, Copy)]
pub struct FeedStatus {
    pub marks: Watermarks,
    pub badges: Badges,
}

type TeamArrays = (Vec<String>, Vec<i64>, Vec<i64>);

fn team_arrays(teams: &[Membership]) -> TeamArrays {
    (
        teams.iter().map(|m| m.team_id.clone()).collect(),
        teams.iter().map(|m| m.joined.tx).collect(),
        teams.iter().map(|m| m.joined.id).collect(),
    )
}

#[derive(sqlx::FromRow)]
struct PageRow {
    seen_tx: i64,
    seen_id: i64,
    read_tx: i64,
    read_id: i64,
    head_tx: Option<i64>,
    head_id: Option<i64>,
    unread: i64,
    unseen: i64,
    #[sqlx(flatten)]
    walk: WalkRow,
    id: Option<i64>,
    tx: Option<i64>,
    team_id: Option<String>,
    #[sqlx(rename = "type")]
    item_type: Option<String>,
    actor_id: Option<String>,
    object_id: Option<String>,
    subject: Option<String>,
    payload: Option<serde_json::Value>,
    created_at: Option<DateTime<Utc>>,
    source: Option<String>,
    individually_read: bool,
}

fn marks_of(seen_tx: i64, seen_id: i64, read_tx: i64, read_id: i64) -> Watermarks {
    Watermarks {
        seen: Position::new(seen_tx, seen_id),
        read: Position::new(read_tx, read_id),
    }
}

fn head_of(tx: Option<i64>, id: Option<i64>) -> Option<Position> {
    Some(Position::new(tx?, id?))
}

/// The badge columns every counting statement answers.
#[derive(sqlx::FromRow)]
struct WalkRow {
    counted_below: i64,
    purges: i64,
    budget: i64,
    unseen_n: i64,
    unread_n: i64,
    carried_over: bool,
}

impl WalkRow {
    fn walk(&self, marks: Watermarks) -> BadgeWalk {
        BadgeWalk {
            next: CountsBase {
                counted_below: self.counted_below,
                marks,
                purges: self.purges,
                budget: self.budget,
                unseen_entries: self.unseen_n,
                unread_entries: self.unread_n,
            },
            carried_over: self.carried_over,
        }
    }
}

/// One page of the feed with its head, watermarks and badges, all from one
/// statement and so one snapshot. `limit` is 1..=100 (checked by the caller).
/// `base`: what an earlier statement of this user with these `teams` counted
/// ([`CountsBase`]; checked, not trusted).
#[allow(clippy::too_many_arguments)]
pub async fn read_feed(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    from: PageFrom,
    limit: u32,
    horizon: i64,
    base: Option<&CountsBase>,
) -> Result<FeedPage, sqlx::Error> {
    let kind = match from {
        PageFrom::Before(None) => first_page_kind(teams.len(), limit),
        PageFrom::Before(Some(_)) => PageKind::Before,
        PageFrom::After(_) => PageKind::After,
    };
    read_feed_as(
        db, kind, tenant_id, user_id, teams, from, limit, horizon, base,
    )
    .await
}

/// [`read_feed`] with the statement chosen by the caller, so tests can
/// compare the ways of computing one page on the same data. A first page
/// (`PageFrom::Before(None)`) is the same page from [`PageKind::First`],
/// [`PageKind::FirstFew`] (each source scanned) and [`PageKind::Before`]
/// (each source probed, no cursor); `read_feed` picks the cheapest.
#[allow(clippy::too_many_arguments)]
pub async fn read_feed_as(
    db: impl PgExecutor<'_>,
    kind: PageKind,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    from: PageFrom,
    limit: u32,
    horizon: i64,
    base: Option<&CountsBase>,
) -> Result<FeedPage, sqlx::Error> {
    let rows = fetch_page(
        db,
        feed_page_sql(kind),
        tenant_id,
        user_id,
        teams,
        from,
        limit,
        horizon,
        base,
    )
    .await?;
    page_of(rows, from, limit)
}

/// The first page (newest first, no cursor) as [`read_feed`] answers it,
/// with the counts carried over from `base` and the page's own positions
/// instead of walked ([`feed_page_carried_sql`]): one snapshot, as there.
/// `None` when this statement cannot count so — the base does not hold in
/// its snapshot, or more than the page's worth of items above a floor came
/// since the base while it was not capped — and the caller runs
/// [`read_feed`], which walks.
#[allow(clippy::too_many_arguments)]
pub async fn read_first_page_carried(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    limit: u32,
    horizon: i64,
    base: &CountsBase,
) -> Result<Option<FeedPage>, sqlx::Error> {
    let from = PageFrom::Before(None);
    let sql = feed_page_carried_sql(first_page_kind(teams.len(), limit));
    let rows = fetch_page(
        db,
        sql,
        tenant_id,
        user_id,
        teams,
        from,
        limit,
        horizon,
        Some(base),
    )
    .await?;
    let page = page_of(rows, from, limit)?;
    Ok(page.walk.carried_over.then_some(page))
}

#[allow(clippy::too_many_arguments)]
async fn fetch_page(
    db: impl PgExecutor<'_>,
    sql: &'static str,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    from: PageFrom,
    limit: u32,
    horizon: i64,
    base: Option<&CountsBase>,
) -> Result<Vec<PageRow>, sqlx::Error> {
    let top = Position::new(i64::MAX, i64::MAX);
    let (after, before) = match from {
        PageFrom::Before(before) => (Position::ORIGIN, before.unwrap_or(top)),
        PageFrom::After(after) => (after, top),
    };
    let (team_ids, joined_tx, joined_id) = team_arrays(teams);
    sqlx::query_as(sql)
        .bind(tenant_id)
        .bind(user_id)
        .bind(&team_ids)
        .bind(&joined_tx)
        .bind(&joined_id)
        .bind(i64::from(BADGE_CAP) + 1)
        .bind(after.tx)
        .bind(after.id)
        .bind(before.tx)
        .bind(before.id)
        .bind(i64::from(limit) + 1)
        .bind(horizon)
        .bind(CountsBase::param(base))
        .fetch_all(db)
        .await
}

fn page_of(rows: Vec<PageRow>, from: PageFrom, limit: u32) -> Result<FeedPage, sqlx::Error> {
    let first = rows
        .first()
        .ok_or_else(|| sqlx::Error::Protocol("feed query returned no row".into()))?;
    let marks = marks_of(first.seen_tx, first.seen_id, first.read_tx, first.read_id);
    let head = head_of(first.head_tx, first.head_id);
    let badges = Badges::from_counts(first.unread, first.unseen);
    let walk = first.walk.walk(marks);

    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let (Some(id), Some(tx), Some(item_type), Some(payload), Some(created_at), Some(source)) = (
            row.id,
            row.tx,
            row.item_type,
            row.payload,
            row.created_at,
            row.source,
        ) else {
            continue; // the one all-NULL row of an empty page
        };
        items.push(FeedItem {
            position: Position::new(tx, id),
            source: if source == "alert" {
                Source::Alert
            } else {
                Source::Event
            },
            team_id: row.team_id,
            item_type,
            actor_id: row.actor_id,
            object_id: row.object_id,
            subject: row.subject,
            payload,
            created_at,
            individually_read: row.individually_read,
        });
    }
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    if matches!(from, PageFrom::After(_)) {
        items.reverse();
    }
    Ok(FeedPage {
        items,
        more,
        head,
        marks,
        badges,
        walk,
    })
}

#[derive(sqlx::FromRow)]
struct StatusRow {
    seen_tx: i64,
    seen_id: i64,
    read_tx: i64,
    read_id: i64,
    unread: i64,
    unseen: i64,
    #[sqlx(flatten)]
    walk: WalkRow,
}

/// The user's watermarks and badge counts, carrying `base` over as
/// [`read_feed`] does.
pub async fn read_status(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    horizon: i64,
    base: Option<&CountsBase>,
) -> Result<(FeedStatus, BadgeWalk), sqlx::Error> {
    fetch_status(db, counts_sql(), tenant_id, user_id, teams, horizon, base).await
}

/// The user's watermarks and badge counts as [`read_status`] answers them,
/// counted from `base` and the entries since it instead of walked
/// ([`counts_carried_sql`]): one snapshot, as there. `None` when this
/// statement cannot count so — the base does not hold in its snapshot, or a
/// budget's worth of items or more above a floor came since the base while it
/// was not capped — and the caller runs [`read_status`], which walks.
pub async fn read_status_carried(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    horizon: i64,
    base: &CountsBase,
) -> Result<Option<(FeedStatus, BadgeWalk)>, sqlx::Error> {
    let (status, walk) = fetch_status(
        db,
        counts_carried_sql(),
        tenant_id,
        user_id,
        teams,
        horizon,
        Some(base),
    )
    .await?;
    Ok(walk.carried_over.then_some((status, walk)))
}

async fn fetch_status(
    db: impl PgExecutor<'_>,
    sql: &'static str,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    horizon: i64,
    base: Option<&CountsBase>,
) -> Result<(FeedStatus, BadgeWalk), sqlx::Error> {
    let (team_ids, joined_tx, joined_id) = team_arrays(teams);
    let row: StatusRow = sqlx::query_as(sql)
        .bind(tenant_id)
        .bind(user_id)
        .bind(&team_ids)
        .bind(&joined_tx)
        .bind(&joined_id)
        .bind(i64::from(BADGE_CAP) + 1)
        .bind(horizon)
        .bind(CountsBase::param(base))
        .fetch_one(db)
        .await?;
    let marks = marks_of(row.seen_tx, row.seen_id, row.read_tx, row.read_id);
    Ok((
        FeedStatus {
            marks,
            badges: Badges::from_counts(row.unread, row.unseen),
        },
        row.walk.walk(marks),
    ))
}

/// The user's watermarks and the feed's current head.
pub async fn read_head(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    horizon: i64,
) -> Result<(Watermarks, Option<Position>), sqlx::Error> {
    let (team_ids, joined_tx, joined_id) = team_arrays(teams);
    let (seen_tx, seen_id, read_tx, read_id, head_tx, head_id): (
        i64,
        i64,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
    ) = sqlx::query_as(statements::head_sql())
        .bind(tenant_id)
        .bind(user_id)
        .bind(&team_ids)
        .bind(&joined_tx)
        .bind(&joined_id)
        .bind(horizon)
        .fetch_one(db)
        .await?;
    Ok((
        marks_of(seen_tx, seen_id, read_tx, read_id),
        head_of(head_tx, head_id),
    ))
}

/// The position of item `item_id` if it is in the user's feed (and visible).
pub async fn find_item(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
    teams: &[Membership],
    item_id: i64,
    horizon: i64,
) -> Result<Option<Position>, sqlx::Error> {
    let (team_ids, joined_tx, joined_id) = team_arrays(teams);
    let tx: Option<i64> = sqlx::query_scalar(statements::find_item_sql())
        .bind(tenant_id)
        .bind(user_id)
        .bind(&team_ids)
        .bind(&joined_tx)
        .bind(&joined_id)
        .bind(item_id)
        .bind(horizon)
        .fetch_optional(db)
        .await?;
    Ok(tx.map(|tx| Position::new(tx, item_id)))
}
