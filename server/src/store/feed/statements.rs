//! The feed's statements, composed from named CTEs, and each of them whole in
//! `snapshots/`.
//!
//! **Why composed, and why snapshots.** Twelve statements run: five page kinds
//! ([`PageKind`]), the three first pages handed a counts base, the counts
//! walked and carried over, the head, and the lookup of one item. They share
//! most of their text: the prelude is in all twelve, the base's check
//! (`reads`, `checked`) and `badges` in ten, `tops` in eight. Written out as
//! twelve `.sql` files, a change to one of those CTEs would be the same edit
//! in up to ten copies, and the page kinds that the feed tests hold to the
//! same answer would drift apart one missed copy at a time. So each CTE is
//! written once, here, and composed; and every statement, as the server runs
//! it, is also committed whole as `snapshots/<name>.sql`, where a test
//! (`every_statement_equals_its_snapshot`, below) renders each one and fails
//! when a file differs by a byte. A reader (or `EXPLAIN`) takes any statement
//! as one file, and a change to a CTE shows in review as the diff of every
//! whole statement it changes. After changing one, rewrite the snapshots:
//!
//! ```text
//! TIDINGS_BLESS=1 cargo test -p tidings-server --lib store::feed
//! ```
//!
//! and commit them with the change (the bench's feed files in `bench/sql`
//! point at these files rather than copying them). The test is a plain
//! comparison of files, with no snapshot crate: the files stay plain SQL that
//! an editor highlights and `psql` runs once given its parameters.
//!
//! Parameters shared by every statement: $1 tenant, $2 user, $3/$4/$5 the
//! user's teams as parallel arrays (team_id, joined_tx, joined_id).

use std::sync::LazyLock;

/// The tenant's horizon, the user's teams and their watermarks (one row even
/// when the user has none stored yet). `horizon` is the statement's last
/// parameter, `$n`: rows are served only below it. It is read on the primary;
/// on a hot standby the caller hands only a horizon the standby has replayed
/// (`db::replicas`, `HorizonReading`).
fn prelude(horizon: &str) -> String {
    format!(
        "
horizon AS MATERIALIZED (
    SELECT {horizon}::bigint AS tx
),
teams AS MATERIALIZED (
    SELECT * FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS t (team_id, joined_tx, joined_id)
),
marks AS MATERIALIZED (
    SELECT coalesce(s.seen_tx, 0) AS seen_tx, coalesce(s.seen_id, 0) AS seen_id,
           coalesce(s.read_tx, 0) AS read_tx, coalesce(s.read_id, 0) AS read_id
    FROM (SELECT 1) AS one
    LEFT JOIN feed_state s ON s.tenant_id = $1 AND s.user_id = $2
)"
    )
}

/// The newest visible position of each source of the feed (each team, after
/// the join, and the user's alerts), one index-only probe each, and the feed's
/// head: the newest of them. A newest-first first page reuses `tops` to prune
/// its scans (see [`page_ctes`]).
const TOPS: &str = "
tops AS MATERIALIZED (
    (SELECT t.team_id, e.tx, e.id FROM teams t CROSS JOIN LATERAL (
        SELECT e.tx, e.id FROM events e
        WHERE e.tenant_id = $1 AND e.team_id = t.team_id
          AND (e.tx, e.id) > (t.joined_tx, t.joined_id)
          AND (e.tx, e.id) < ((SELECT tx FROM horizon), 0::bigint)
        ORDER BY e.tx DESC, e.id DESC
        LIMIT 1
    ) e)
    UNION ALL
    (SELECT NULL::text, i.tx, i.id FROM inbox_items i
     WHERE i.tenant_id = $1 AND i.recipient_id = $2
       AND (i.tx, i.id) < ((SELECT tx FROM horizon), 0::bigint)
     ORDER BY i.tx DESC, i.id DESC
     LIMIT 1)
),
head AS (
    SELECT tx, id FROM tops ORDER BY tx DESC, id DESC LIMIT 1
)";

/// Badge counts. Reading implies seeing, so unseen counts from the later of the
/// two watermarks; individually read items are neither unread nor unseen. Each
/// team's lower bound is the later of its join position and the watermark, so
/// every scan starts where counting starts. `$6` is the cap + 1. Teams are
/// visited newest top first, and a team whose top (from `tops`) is not above
/// its floor is skipped without a probe: a reader of many quiet teams pays
/// for the busy ones.
///
/// Index-only walks, oldest first from each floor up to the horizon (the
/// direction in which both row-value bounds position the scan: a backward walk
/// would step through every entry sharing the floor's `tx`): `unseen_scan`
/// from the unseen floor, `unread_scan` from the read floor (skipped when the
/// two floors are equal, as for a reader who never marked anything), each
/// stopping after `budget` entries. No entry is probed against `item_reads`:
/// the user's individually read items still in the feed (`reads`, at most
/// `MAX_INDIVIDUAL_READS`) are subtracted instead. The budget is the cap + 1
/// plus their number, so a walk that stops at the budget has passed at least
/// cap + 1 items that are not read one by one, and its count is capped; a walk
/// that ends earlier saw every item and the subtraction is exact.
///
/// **Carried over (the base, `$base`).** The walks' entry counts of an earlier
/// statement, with what they depended on ([`CountsBase`](super::CountsBase)).
/// Its items lie below its horizon (`asof`), where nothing can appear any more (invariant 2), so
/// when this statement's snapshot shows the same watermarks, the same number
/// of items read one by one (hence the same budget), the same purge counter
/// (retention is the only thing that deletes feed items) and a horizon not
/// below `asof` — and the caller passes it only for the same teams — the
/// entries below `asof` are the ones it counted. The walks then start at
/// `asof`, add to its counts and stop once the sum reaches the budget (a
/// capped base walks nothing). Any mismatch (a mark or item read on any
/// instance, a purge, a standby behind the base) makes it walk from the
/// floors, as without a base: checked in this snapshot, never trusted.
fn counts_ctes(base: &str) -> String {
    format!(
        "{check},{walks},{badges}",
        check = counts_check_ctes(base),
        walks = WALKS,
        badges = BADGES
    )
}

/// What the base is checked against, shared by every way of counting: the
/// user's individually read items in the feed (`reads`), and one row,
/// `checked`, with the floors, the purge counter, the budget, the base's
/// counts and whether it holds (`valid`). One CTE rather than one per value:
/// each CTE and each join of them is plan nodes that every execution starts
/// up, whether or not anything walks. The floors' subquery ends in `OFFSET
/// 0` so that it is not pulled up: pulled up, every reference to the purge
/// counter or the budget would run its subquery again.
fn counts_check_ctes(base: &str) -> String {
    format!(
        "
reads AS MATERIALIZED (
    SELECT r.tx, r.item_id AS id FROM item_reads r
    WHERE r.tenant_id = $1 AND r.user_id = $2
      AND (r.tx, r.item_id) < ((SELECT tx FROM horizon), 0::bigint)
      AND (EXISTS (SELECT 1 FROM events e JOIN teams t ON t.team_id = e.team_id
                   WHERE e.tenant_id = $1 AND e.id = r.item_id
                     AND (e.tx, e.id) > (t.joined_tx, t.joined_id))
           OR EXISTS (SELECT 1 FROM inbox_items i
                      WHERE i.tenant_id = $1 AND i.id = r.item_id AND i.recipient_id = $2))
),
checked AS MATERIALIZED (
    SELECT f.read_tx, f.read_id, f.unseen_tx, f.unseen_id, f.purges, f.budget,
           coalesce(b.asof <= h.tx
                    AND (b.seen_tx, b.seen_id, b.read_tx, b.read_id)
                        = (f.seen_tx, f.seen_id, f.read_tx, f.read_id)
                    AND b.purges = f.purges AND b.budget = f.budget, false) AS valid,
           b.asof, b.unseen_n, b.unread_n
    FROM (SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id,
                 CASE WHEN (m.seen_tx, m.seen_id) > (m.read_tx, m.read_id) THEN m.seen_tx ELSE m.read_tx END AS unseen_tx,
                 CASE WHEN (m.seen_tx, m.seen_id) > (m.read_tx, m.read_id) THEN m.seen_id ELSE m.read_id END AS unseen_id,
                 coalesce((SELECT feed_purges FROM tenants WHERE id = $1), 0) AS purges,
                 $6 + (SELECT count(*) FROM reads) AS budget
          FROM marks m
          OFFSET 0) AS f
    CROSS JOIN (SELECT a[1] AS asof, a[2] AS seen_tx, a[3] AS seen_id, a[4] AS read_tx, a[5] AS read_id,
                       a[6] AS purges, a[7] AS budget, a[8] AS unseen_n, a[9] AS unread_n
                FROM (SELECT {base}::bigint[] AS a) AS given) AS b
    CROSS JOIN horizon h
)"
    )
}

/// The walks from the floors (or from a valid base's horizon) up to this
/// statement's horizon.
const WALKS: &str = "
walk_floors AS MATERIALIZED (
    SELECT CASE WHEN c.valid THEN c.unseen_n ELSE 0 END AS unseen_base,
           CASE WHEN c.valid THEN c.unread_n ELSE 0 END AS unread_base,
           CASE WHEN c.valid AND (c.asof, 0::bigint) > (c.read_tx, c.read_id) THEN c.asof ELSE c.read_tx END AS read_tx,
           CASE WHEN c.valid AND (c.asof, 0::bigint) > (c.read_tx, c.read_id) THEN 0 ELSE c.read_id END AS read_id,
           CASE WHEN c.valid AND (c.asof, 0::bigint) > (c.unseen_tx, c.unseen_id) THEN c.asof ELSE c.unseen_tx END AS unseen_tx,
           CASE WHEN c.valid AND (c.asof, 0::bigint) > (c.unseen_tx, c.unseen_id) THEN 0 ELSE c.unseen_id END AS unseen_id
    FROM checked c
),
team_floors AS MATERIALIZED (
    SELECT t.team_id,
           CASE WHEN (t.joined_tx, t.joined_id) > (f.read_tx, f.read_id) THEN t.joined_tx ELSE f.read_tx END AS read_tx,
           CASE WHEN (t.joined_tx, t.joined_id) > (f.read_tx, f.read_id) THEN t.joined_id ELSE f.read_id END AS read_id,
           CASE WHEN (t.joined_tx, t.joined_id) > (f.unseen_tx, f.unseen_id) THEN t.joined_tx ELSE f.unseen_tx END AS unseen_tx,
           CASE WHEN (t.joined_tx, t.joined_id) > (f.unseen_tx, f.unseen_id) THEN t.joined_id ELSE f.unseen_id END AS unseen_id,
           top.tx AS top_tx, top.id AS top_id
    FROM teams t JOIN tops top ON top.team_id = t.team_id CROSS JOIN walk_floors f
    ORDER BY top.tx DESC, top.id DESC
),
walk_limits AS MATERIALIZED (
    -- The unread walk stands in for both when the floors are equal, so the
    -- unseen walk goes as far as either needs.
    SELECT greatest(0, c.budget - least(w.unseen_base, w.unread_base)) AS unseen,
           CASE WHEN (w.unseen_tx, w.unseen_id) = (w.read_tx, w.read_id) THEN 0
                ELSE greatest(0, c.budget - w.unread_base) END AS unread
    FROM walk_floors w CROSS JOIN checked c
),
unseen_scan AS MATERIALIZED (
    SELECT count(*) AS n FROM (
        (SELECT 1 FROM team_floors tf CROSS JOIN LATERAL (
            SELECT 1 FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = tf.team_id
              AND (e.tx, e.id) > (tf.unseen_tx, tf.unseen_id)
              AND (e.tx, e.id) < ((SELECT tx FROM horizon), 0::bigint)
            ORDER BY e.tx, e.id
            LIMIT (SELECT unseen FROM walk_limits)
        ) e
         WHERE (tf.top_tx, tf.top_id) > (tf.unseen_tx, tf.unseen_id))
        UNION ALL
        (SELECT 1 FROM walk_floors f CROSS JOIN LATERAL (
            SELECT 1 FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > (f.unseen_tx, f.unseen_id)
              AND (i.tx, i.id) < ((SELECT tx FROM horizon), 0::bigint)
            ORDER BY i.tx, i.id
            LIMIT (SELECT unseen FROM walk_limits)
        ) i)
        LIMIT (SELECT unseen FROM walk_limits)
    ) c
),
unread_scan AS MATERIALIZED (
    SELECT count(*) AS n FROM (
        (SELECT 1 FROM team_floors tf CROSS JOIN LATERAL (
            SELECT 1 FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = tf.team_id
              AND (e.tx, e.id) > (tf.read_tx, tf.read_id)
              AND (e.tx, e.id) < ((SELECT tx FROM horizon), 0::bigint)
            ORDER BY e.tx, e.id
            LIMIT (SELECT unread FROM walk_limits)
        ) e
         WHERE (tf.top_tx, tf.top_id) > (tf.read_tx, tf.read_id))
        UNION ALL
        (SELECT 1 FROM walk_floors f CROSS JOIN LATERAL (
            SELECT 1 FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > (f.read_tx, f.read_id)
              AND (i.tx, i.id) < ((SELECT tx FROM horizon), 0::bigint)
            ORDER BY i.tx, i.id
            LIMIT (SELECT unread FROM walk_limits)
        ) i)
        LIMIT (SELECT unread FROM walk_limits)
    ) c
),
walked AS MATERIALIZED (
    -- Entries from each floor up to the horizon, capped at the budget: what
    -- the next statement may carry over.
    SELECT least(w.unseen_base + u.n, c.budget) AS unseen_n,
           least(w.unread_base + CASE WHEN (w.unseen_tx, w.unseen_id) = (w.read_tx, w.read_id)
                                      THEN u.n ELSE s.n END, c.budget) AS unread_n,
           c.budget, c.purges, c.valid AS carried_over,
           c.read_tx, c.read_id, c.unseen_tx, c.unseen_id
    FROM walk_floors w CROSS JOIN checked c CROSS JOIN unseen_scan u CROSS JOIN unread_scan s
)";

/// Counts taken from positions instead of walked, by a statement handed a
/// base: `positions` holds, newest or not, the entries a walk from the base
/// would count, when fewer than `k` of them lie above the read walk floor
/// (the later of the base's horizon and the read watermark; the unseen floor
/// is at or above it). Counting those above each floor is then the walk,
/// exactly; else the counts stand on the base only when it is capped
/// (nothing to add). The walk floors are those of `walk_floors` with a valid
/// base; the positions are already after each team's join and below the
/// horizon. `carried_over` is false when the base does not hold or the
/// positions cannot tell: the caller then runs the statement that walks.
///
/// Two statements count so. A first page (`feed_page_carried_sql`) counts
/// its own page: its positions are the feed's k = limit + 1 newest, so when
/// fewer than k lie above the floor, they are all of them. The counts
/// (`counts_carried_sql`) have no page, and scan from the floor instead
/// ([`NEW_POSITIONS`]).
fn positions_walk(positions: &str, k: &str) -> String {
    format!(
        "
walked AS (
    SELECT least(c.unseen_n + w.unseen, c.budget) AS unseen_n,
           least(c.unread_n + w.unread, c.budget) AS unread_n,
           c.budget, c.purges,
           c.valid AND ((c.unseen_n >= c.budget AND c.unread_n >= c.budget) OR w.unread < {k}) AS carried_over,
           c.read_tx, c.read_id, c.unseen_tx, c.unseen_id
    FROM checked c CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE (p.tx, p.id) > (c.unseen_tx, c.unseen_id)) AS unseen,
               count(*) FILTER (WHERE (p.tx, p.id) > (c.read_tx, c.read_id)) AS unread
        FROM {positions} p
        WHERE (p.tx, p.id) > (c.asof, 0::bigint)
    ) w
)"
    )
}

/// The positions the counts handed a base count from (`counts_carried_sql`,
/// with [`positions_walk`]): the entries above the read walk floor (each
/// team's, above the later of its join and that floor), index-only, oldest
/// first from the floor as the walks scan, up to k of them in all. Nothing
/// new since the base costs one empty descent per source.
///
/// k is the budget (cap + 1 + the user's individually read items), the
/// number the walk stops at. The counts have no page whose positions come
/// for free, so k buys nothing by being small: with the scan starting at
/// the floor, a smaller k would only send a user with between k and the
/// budget new items since the base to a second statement, the walk, which
/// then scans them again. Fewer than the budget above the floor: both counts
/// are exact from them. The budget or more: the read count is capped but the
/// unseen one may not be (the unseen floor may be higher), so the walk
/// answers. A base that does not hold, or is capped, scans nothing (k = 0).
const NEW_POSITIONS: &str = "
new_floor AS MATERIALIZED (
    SELECT CASE WHEN (c.asof, 0::bigint) > (c.read_tx, c.read_id) THEN c.asof ELSE c.read_tx END AS tx,
           CASE WHEN (c.asof, 0::bigint) > (c.read_tx, c.read_id) THEN 0::bigint ELSE c.read_id END AS id,
           CASE WHEN c.valid AND NOT (c.unseen_n >= c.budget AND c.unread_n >= c.budget) THEN c.budget ELSE 0 END AS k
    FROM checked c
),
new_positions AS MATERIALIZED (
    SELECT * FROM (
        (SELECT e.tx, e.id FROM teams t CROSS JOIN new_floor nf CROSS JOIN LATERAL (
            SELECT e.tx, e.id FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = t.team_id
              AND (e.tx, e.id) > (CASE WHEN (t.joined_tx, t.joined_id) > (nf.tx, nf.id) THEN t.joined_tx ELSE nf.tx END,
                                  CASE WHEN (t.joined_tx, t.joined_id) > (nf.tx, nf.id) THEN t.joined_id ELSE nf.id END)
              AND e.tx < (SELECT tx FROM horizon)
            ORDER BY e.tx, e.id
            LIMIT nf.k
        ) e)
        UNION ALL
        (SELECT i.tx, i.id FROM new_floor nf CROSS JOIN LATERAL (
            SELECT i.tx, i.id FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > (nf.tx, nf.id)
              AND i.tx < (SELECT tx FROM horizon)
            ORDER BY i.tx, i.id
            LIMIT nf.k
        ) i)
    ) merged
    LIMIT (SELECT k FROM new_floor)
)";

/// The badges from what was walked (`walked`, which also carries the floors,
/// the purge counter and whether the statement's counts stand on the base it
/// was handed), less the user's individually read items above each floor.
const BADGES: &str = "
badges AS MATERIALIZED (
    SELECT CASE WHEN k.unseen_n >= k.budget THEN $6 ELSE least($6, k.unseen_n - r.unseen) END AS unseen,
           CASE WHEN k.unread_n >= k.budget THEN $6 ELSE least($6, k.unread_n - r.unread) END AS unread,
           k.unseen_n, k.unread_n, k.budget, k.purges, k.carried_over
    FROM walked k CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE (r.tx, r.id) > (k.unseen_tx, k.unseen_id)) AS unseen,
               count(*) FILTER (WHERE (r.tx, r.id) > (k.read_tx, k.read_id)) AS unread
        FROM reads r
    ) r
)";

/// Which feed statement a page runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Newest first from the top, for a reader with more sources than k:
    /// one scan of the tenant's newest events first ([`TENANT_SCAN`]), the
    /// per-source page (the tops are the feed's) only when it cannot tell.
    First,
    /// The same page for a reader with no more sources (teams and the
    /// alerts) than the page's k = limit + 1: each source is scanned once,
    /// without a probe for its top first ([`first_page_kind`]).
    FirstFew,
    /// The same page for a reader whose sources fit the page but whose teams
    /// are enough for the tenant scan to find k entries in its budget
    /// ([`first_page_kind`]): the tenant scan first ([`TENANT_SCAN`]), each
    /// source scanned once ([`PageKind::FirstFew`]) only when it cannot tell.
    FirstFewScanned,
    /// Newest first below a cursor.
    Before,
    /// Oldest first above a cursor (polling).
    After,
}

/// One page, late materialised. `$7/$8` exclusive lower bound (after),
/// `$9/$10` exclusive upper bound (before), `$11` limit + 1 (= k). Each team's
/// lower bound is the later of its join position and the page's, and the upper
/// bound the earlier of the cursor and the horizon.
///
/// 1. `page_tops`: each source's first position in the page's direction, one
///    index-only probe per source (on the first page, `tops` itself).
/// 2. `threshold`: the k-th of those. At least k positions (those k tops) lie
///    at or before it in page order, so the whole page does, and a source whose
///    first position lies beyond it cannot contribute: only the sources at or
///    before it (at most k, ties aside) are scanned, each by one index-only
///    range with a LIMIT. The threshold prunes sources, not scans: as a scan
///    bound it would not stop a backward walk through entries sharing its `tx`.
///    A reader of T teams costs T probes plus at most k × k index entries,
///    not T × k.
/// 3. `page`: payloads for the k positions alone, by primary key.
///
/// A first page ([`PageKind::First`]) runs 1 and 2 only when the scan of the
/// tenant's newest entries cannot tell ([`TENANT_SCAN`]); its head is the
/// first of its positions.
fn page_ctes(kind: PageKind) -> String {
    if kind == PageKind::FirstFew {
        return format!(
            "{page}{PAGE_HEAD}\n{PAGE_ROWS}",
            page = first_few_page("", "")
        );
    }
    if kind == PageKind::FirstFewScanned {
        return format!(
            "{scan}{page}{PAGE_HEAD}\n{PAGE_ROWS}",
            scan = TENANT_SCAN.as_str(),
            page = first_few_page(SCANNED_POSITIONS, UNLESS_SCAN_HOLDS)
        );
    }
    let (dir, cmp, absent) = match kind {
        PageKind::First | PageKind::FirstFew | PageKind::FirstFewScanned | PageKind::Before => {
            ("DESC", ">=", "0::bigint")
        }
        PageKind::After => ("ASC", "<=", "9223372036854775807::bigint"),
    };
    let page_tops = match kind {
        PageKind::First | PageKind::FirstFew | PageKind::FirstFewScanned => {
            "page_tops AS (SELECT * FROM tops)".to_string()
        }
        PageKind::Before | PageKind::After => format!(
            "
page_tops AS MATERIALIZED (
    (SELECT pt.team_id, e.tx, e.id FROM page_teams pt CROSS JOIN bounds b CROSS JOIN LATERAL (
        SELECT e.tx, e.id FROM events e
        WHERE e.tenant_id = $1 AND e.team_id = pt.team_id
          AND (e.tx, e.id) > (pt.lo_tx, pt.lo_id)
          AND (e.tx, e.id) < (b.hi_tx, b.hi_id)
        ORDER BY e.tx {dir}, e.id {dir}
        LIMIT 1
    ) e)
    UNION ALL
    (SELECT NULL::text, i.tx, i.id FROM bounds b CROSS JOIN LATERAL (
        SELECT i.tx, i.id FROM inbox_items i
        WHERE i.tenant_id = $1 AND i.recipient_id = $2
          AND (i.tx, i.id) > ($7::bigint, $8::bigint)
          AND (i.tx, i.id) < (b.hi_tx, b.hi_id)
        ORDER BY i.tx {dir}, i.id {dir}
        LIMIT 1
    ) i)
)"
        ),
    };
    // The first page scans the tenant's newest entries first and probes the
    // sources only when that scan cannot tell (TENANT_SCAN).
    let (scan, scanned, probed, head) = if kind == PageKind::First {
        (
            TENANT_SCAN.to_string(),
            SCANNED_POSITIONS,
            UNLESS_SCAN_HOLDS,
            format!("{PAGE_HEAD}\n"),
        )
    } else {
        (String::new(), "", "", String::new())
    };
    format!(
        "
bounds AS MATERIALIZED (
    SELECT CASE WHEN (h.tx, 0::bigint) < ($9::bigint, $10::bigint) THEN h.tx ELSE $9 END AS hi_tx,
           CASE WHEN (h.tx, 0::bigint) < ($9::bigint, $10::bigint) THEN 0::bigint ELSE $10 END AS hi_id
    FROM horizon h
),
page_teams AS MATERIALIZED (
    SELECT t.team_id,
           CASE WHEN (t.joined_tx, t.joined_id) > ($7::bigint, $8::bigint) THEN t.joined_tx ELSE $7 END AS lo_tx,
           CASE WHEN (t.joined_tx, t.joined_id) > ($7::bigint, $8::bigint) THEN t.joined_id ELSE $8 END AS lo_id
    FROM teams t
),
{page_tops},
threshold AS MATERIALIZED (
    SELECT coalesce(k.tx, {absent}) AS tx, coalesce(k.id, {absent}) AS id
    FROM (SELECT 1) AS one LEFT JOIN (
        SELECT tx, id FROM page_tops ORDER BY tx {dir}, id {dir} OFFSET $11 - 1 LIMIT 1
    ) k ON true
),
{scan}page_positions AS MATERIALIZED (
    SELECT * FROM (
        {scanned}(SELECT e.* FROM page_tops top
         JOIN page_teams pt ON pt.team_id = top.team_id
         CROSS JOIN bounds b CROSS JOIN threshold th
         CROSS JOIN LATERAL (
            SELECT e.tx, e.id, false AS alert FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = pt.team_id
              AND (e.tx, e.id) > (pt.lo_tx, pt.lo_id)
              AND (e.tx, e.id) < (b.hi_tx, b.hi_id)
            ORDER BY e.tx {dir}, e.id {dir}
            LIMIT $11
         ) e
         WHERE (top.tx, top.id) {cmp} (th.tx, th.id){probed})
        UNION ALL
        -- LATERAL, so the bounds are index conditions rather than filters.
        (SELECT i.* FROM bounds b CROSS JOIN LATERAL (
            SELECT i.tx, i.id, true AS alert FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > ($7::bigint, $8::bigint)
              AND (i.tx, i.id) < (b.hi_tx, b.hi_id)
            ORDER BY i.tx {dir}, i.id {dir}
            LIMIT $11
        ) i)
    ) merged
    ORDER BY tx {dir}, id {dir}
    LIMIT $11
),
{head}{PAGE_ROWS}"
    )
}

/// The page's rows: payloads for the k positions alone, by primary key.
const PAGE_ROWS: &str = "page AS (
    SELECT p.id, p.tx, e.team_id, e.type, e.actor_id, e.object_id, NULL::text AS subject,
           e.payload, e.created_at, 'event'::text AS source
    FROM page_positions p JOIN events e ON e.tenant_id = $1 AND e.id = p.id
    WHERE NOT p.alert
    UNION ALL
    SELECT p.id, p.tx, NULL::text, i.type, NULL::text, i.entity_id, i.subject,
           i.payload, i.created_at, 'alert'::text
    FROM page_positions p JOIN inbox_items i ON i.tenant_id = $1 AND i.id = p.id
    WHERE p.alert
)";

/// The first page when the reader has no more sources than k (= limit + 1;
/// [`first_page_kind`]): the threshold of [`page_ctes`] would prune nothing,
/// so nothing probes the tops first. Each source is scanned once, newest
/// first with `LIMIT k`, and the page is the k newest of those positions;
/// the head is the page's first position. `tops` is still defined for the
/// badge walks, which probe it only when they walk (not when the counts are
/// carried over).
///
/// Both bounds are cheap for the index: the horizon is a scalar bound on
/// `tx` (`(tx, id) < (horizon, 0)` is `tx < horizon`, ids being positive),
/// and the join position filters the `LIMIT k` scan's rows from outside the
/// LIMIT, so it is not checked against every entry of the leaf pages read.
/// Filtering outside the LIMIT is exact: a team's positions after the join
/// are its newest, so they are among its k newest whenever there are any. A
/// scan costs one descent and at most k index entries, whatever the join.
/// `$7`..`$10` (the cursor bounds) are not used: a first page has none.
///
/// [`PageKind::FirstFewScanned`] runs the tenant scan first: `scanned` is
/// its branch of the positions and `unless_scan_holds` gates the sources'
/// scans on it not holding (empty strings for [`PageKind::FirstFew`]).
fn first_few_page(scanned: &str, unless_scan_holds: &str) -> String {
    format!(
        "
page_positions AS MATERIALIZED (
    SELECT * FROM (
        {scanned}(SELECT e.tx, e.id, false AS alert FROM teams t CROSS JOIN LATERAL (
            SELECT e.tx, e.id FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = t.team_id
              AND e.tx < (SELECT tx FROM horizon)
            ORDER BY e.tx DESC, e.id DESC
            LIMIT $11
         ) e
         WHERE (e.tx, e.id) > (t.joined_tx, t.joined_id){unless_scan_holds})
        UNION ALL
        (SELECT i.tx, i.id, true FROM inbox_items i
         WHERE i.tenant_id = $1 AND i.recipient_id = $2
           AND i.tx < (SELECT tx FROM horizon)
         ORDER BY i.tx DESC, i.id DESC
         LIMIT $11)
    ) merged
    ORDER BY tx DESC, id DESC
    LIMIT $11
),
"
    )
}

/// The tenant scan's positions ([`TENANT_SCAN`]) as a branch of a page's
/// positions, when it holds; and the gate of the branches that run only when
/// it does not (a one-time filter: their scans or probes do not run at all).
const SCANNED_POSITIONS: &str =
    "(SELECT s.tx, s.id, false AS alert FROM scanned s WHERE (SELECT holds FROM scan_holds))
        UNION ALL
        ";
const UNLESS_SCAN_HOLDS: &str = "\n           AND NOT (SELECT holds FROM scan_holds)";

/// The head of a first page that holds the feed's k newest positions: the
/// first of them.
const PAGE_HEAD: &str = "page_head AS (
    SELECT tx, id FROM page_positions ORDER BY tx DESC, id DESC LIMIT 1
),";

/// The first page of a reader with more sources than k ([`PageKind::First`]),
/// or with teams enough for 4 entries each to make k
/// ([`PageKind::FirstFewScanned`]), before any source is probed or
/// scanned: one index-only scan of the tenant's newest
/// entries (`events (tenant_id, tx, id) INCLUDE (team_id)`, migration 0021),
/// keeping those of the reader's teams (a hash of the team ids, built once
/// per statement), up to k of them, and at most 4 entries per team of the
/// reader in all. The join positions filter those k outside the LIMIT (as in
/// [`first_few_page`]: exact, since a team's positions after the join are its
/// newest). What is kept is a prefix of the reader's feed of events, newest
/// first: every entry above the last one read was looked at. So when all k
/// are kept (`scan_holds`), they are the feed's k newest events, the page
/// merges them with the alerts' k newest, and no source is probed: a reader
/// of 1,000 teams pays one descent and about k entries, not 1,000 probes.
///
/// Otherwise — the reader's teams wrote fewer than k of the tenant's last
/// 4 × teams entries, the tenant has fewer entries than that, or one of the
/// k was written before the reader joined its team — the scan cannot tell,
/// and the page is the per-source one of [`page_ctes`] (tops probed, the
/// k-th prunes; [`first_few_page`]'s single scans when the sources fit the
/// page), gated on `scan_holds` so that its probes run only then: at most 4
/// entries per team more than without this scan. Both branches read one
/// snapshot.
static TENANT_SCAN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "scan_page AS MATERIALIZED (
    SELECT s.tx, s.id, s.team_id FROM (
        SELECT e.tx, e.id, e.team_id, e.team_id IN (SELECT t.team_id FROM teams t) AS mine
        FROM events e
        WHERE e.tenant_id = $1 AND e.tx < (SELECT tx FROM horizon)
        ORDER BY e.tx DESC, e.id DESC
        LIMIT {TENANT_SCAN_ENTRIES_PER_TEAM} * cardinality($3::text[])
    ) s
    WHERE s.mine
    LIMIT $11
),
scanned AS MATERIALIZED (
    SELECT s.tx, s.id FROM scan_page s JOIN teams t ON t.team_id = s.team_id
    WHERE (s.tx, s.id) > (t.joined_tx, t.joined_id)
),
scan_holds AS MATERIALIZED (
    SELECT count(*) >= $11 AS holds FROM scanned
),
"
    )
});

/// The tenant scan reads at most this many of the tenant's newest entries
/// per team of the reader ([`TENANT_SCAN`]).
const TENANT_SCAN_ENTRIES_PER_TEAM: usize = 4;

/// Which statement a first page runs: [`PageKind::First`] when the reader's
/// sources (`teams` and the alerts) are more than the page's k = `limit` + 1;
/// else [`PageKind::FirstFewScanned`] when the tenant scan's budget (4 entries
/// per team) can hold k entries, and [`PageKind::FirstFew`] when it cannot:
/// a reader of few teams would pay the scan's start-up for nothing.
pub fn first_page_kind(teams: usize, limit: u32) -> PageKind {
    let k = limit as usize + 1;
    if teams >= k {
        PageKind::First
    } else if TENANT_SCAN_ENTRIES_PER_TEAM * teams >= k {
        PageKind::FirstFewScanned
    } else {
        PageKind::FirstFew
    }
}

fn feed_sql(kind: PageKind) -> String {
    feed_sql_with(kind, false)
}

/// `carried`: a first page's statement handed a base, which counts from its
/// own page ([`positions_walk`]) instead of walking: none of the walks' CTEs are
/// in it (they cost executor start-up even when they walk nothing).
fn feed_sql_with(kind: PageKind, carried: bool) -> String {
    let dir = match kind {
        PageKind::First | PageKind::FirstFew | PageKind::FirstFewScanned | PageKind::Before => {
            "DESC"
        }
        PageKind::After => "ASC",
    };
    let ctes = if carried {
        // The page before the counts, which read its positions.
        let tops = if matches!(kind, PageKind::FirstFew | PageKind::FirstFewScanned) {
            String::new()
        } else {
            format!("{TOPS}, ")
        };
        format!(
            "{tops}{page},{check},{walk},{badges}",
            page = page_ctes(kind),
            walk = positions_walk("page_positions", "$11"),
            check = counts_check_ctes("$13"),
            badges = BADGES
        )
    } else {
        format!(
            "{TOPS}, {counts}, {page}",
            counts = counts_ctes("$13"),
            page = page_ctes(kind)
        )
    };
    format!(
        "WITH {prelude}, {ctes}
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id,
       h.tx AS head_tx, h.id AS head_id,
       c.unread, c.unseen,
       (SELECT tx FROM horizon) AS counted_below, c.purges, c.budget, c.unseen_n, c.unread_n,
       c.carried_over,
       p.id, p.tx, p.team_id, p.type, p.actor_id, p.object_id, p.subject, p.payload,
       p.created_at, p.source,
       EXISTS (SELECT 1 FROM reads r WHERE r.id = p.id) AS individually_read
FROM marks m
CROSS JOIN badges c
LEFT JOIN {head} h ON true
LEFT JOIN page p ON true
ORDER BY p.tx {dir}, p.id {dir}",
        head = if matches!(
            kind,
            PageKind::First | PageKind::FirstFew | PageKind::FirstFewScanned
        ) {
            "page_head"
        } else {
            "head"
        },
        prelude = prelude("$12"),
    )
}

static FEED_FIRST: LazyLock<String> = LazyLock::new(|| feed_sql(PageKind::First));
static FEED_FIRST_FEW: LazyLock<String> = LazyLock::new(|| feed_sql(PageKind::FirstFew));
static FEED_FIRST_FEW_SCANNED: LazyLock<String> =
    LazyLock::new(|| feed_sql(PageKind::FirstFewScanned));
static FEED_BEFORE: LazyLock<String> = LazyLock::new(|| feed_sql(PageKind::Before));
static FEED_AFTER: LazyLock<String> = LazyLock::new(|| feed_sql(PageKind::After));
static FEED_FIRST_CARRIED: LazyLock<String> =
    LazyLock::new(|| feed_sql_with(PageKind::First, true));
static FEED_FIRST_FEW_CARRIED: LazyLock<String> =
    LazyLock::new(|| feed_sql_with(PageKind::FirstFew, true));
static FEED_FIRST_FEW_SCANNED_CARRIED: LazyLock<String> =
    LazyLock::new(|| feed_sql_with(PageKind::FirstFewScanned, true));

/// The counts statement's answer, whichever way it counted.
const STATUS_SELECT: &str = "
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id, c.unread, c.unseen,
       (SELECT tx FROM horizon) AS counted_below, c.purges, c.budget, c.unseen_n, c.unread_n,
       c.carried_over
FROM marks m CROSS JOIN badges c";

/// The counts, walked (from the base when it holds, else from the floors).
/// `$7` the horizon, `$8` the base.
static STATUS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {prelude}, {TOPS}, {counts}{STATUS_SELECT}",
        prelude = prelude("$7"),
        counts = counts_ctes("$8")
    )
});

/// The counts handed a base, from the positions since it
/// ([`NEW_POSITIONS`], [`positions_walk`]) instead of walked: none of the
/// walks' CTEs (nor `tops`) are in it. Parameters as [`STATUS_SQL`].
static STATUS_CARRIED_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {prelude}, {check}, {NEW_POSITIONS}, {walk}, {badges}{STATUS_SELECT}",
        prelude = prelude("$7"),
        check = counts_check_ctes("$8"),
        walk = positions_walk("new_positions", "c.budget"),
        badges = BADGES
    )
});

static HEAD_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {prelude}, {TOPS}
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id, h.tx AS head_tx, h.id AS head_id
FROM marks m LEFT JOIN head h ON true",
        prelude = prelude("$6")
    )
});

/// `$6` the item id: an event of one of the user's teams after the join, or an
/// alert addressed to the user, below the horizon.
static FIND_ITEM_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {prelude}
SELECT e.tx FROM events e JOIN teams t ON t.team_id = e.team_id
WHERE e.tenant_id = $1 AND e.id = $6
  AND (e.tx, e.id) > (t.joined_tx, t.joined_id)
  AND e.tx < (SELECT tx FROM horizon)
UNION ALL
SELECT i.tx FROM inbox_items i
WHERE i.tenant_id = $1 AND i.id = $6 AND i.recipient_id = $2
  AND i.tx < (SELECT tx FROM horizon)",
        prelude = prelude("$7")
    )
});

/// The SQL of a feed page ([`read_feed_as`](super::read_feed_as)), also for
/// EXPLAIN in measurements and tests.
pub fn feed_page_sql(kind: PageKind) -> &'static str {
    match kind {
        PageKind::First => &FEED_FIRST,
        PageKind::FirstFew => &FEED_FIRST_FEW,
        PageKind::FirstFewScanned => &FEED_FIRST_FEW_SCANNED,
        PageKind::Before => &FEED_BEFORE,
        PageKind::After => &FEED_AFTER,
    }
}

/// The SQL of a first page handed a counts base
/// ([`read_first_page_carried`](super::read_first_page_carried)), for EXPLAIN
/// in measurements and tests: `First`, `FirstFew` or `FirstFewScanned`.
pub fn feed_page_carried_sql(kind: PageKind) -> &'static str {
    match kind {
        PageKind::FirstFew => &FEED_FIRST_FEW_CARRIED,
        PageKind::FirstFewScanned => &FEED_FIRST_FEW_SCANNED_CARRIED,
        _ => &FEED_FIRST_CARRIED,
    }
}

/// The SQL of the badge counts, walked ([`read_status`](super::read_status)),
/// for EXPLAIN.
pub fn counts_sql() -> &'static str {
    &STATUS_SQL
}

/// The SQL of the badge counts handed a base
/// ([`read_status_carried`](super::read_status_carried)), for EXPLAIN in
/// measurements and tests.
pub fn counts_carried_sql() -> &'static str {
    &STATUS_CARRIED_SQL
}

/// The SQL of the watermarks and the head ([`read_head`](super::read_head)).
pub(super) fn head_sql() -> &'static str {
    &HEAD_SQL
}

/// The SQL of one item's position ([`find_item`](super::find_item)).
pub(super) fn find_item_sql() -> &'static str {
    &FIND_ITEM_SQL
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    /// One statement as committed in `snapshots/`: its file name (without
    /// `.sql`), what runs it, its parameters and its text.
    struct Snapshot {
        name: String,
        what: String,
        parameters: &'static str,
        sql: &'static str,
    }

    const PAGE_PARAMETERS: &str = "$1 tenant, $2 user, $3-$5 the user's teams (team_id, \
        joined_tx, joined_id), $6 badge cap + 1, $7/$8 the exclusive lower bound (after), \
        $9/$10 the exclusive upper bound (before), $11 limit + 1, $12 the tenant's horizon, \
        $13 the counts base (empty for none).";
    const COUNTS_PARAMETERS: &str = "$1 tenant, $2 user, $3-$5 the user's teams (team_id, \
        joined_tx, joined_id), $6 badge cap + 1, $7 the tenant's horizon, $8 the counts base \
        (empty for none).";

    /// Every page kind; `page_kind_name` names each (an exhaustive match, so
    /// a new kind does not compile until it has a snapshot name).
    const PAGE_KINDS: [PageKind; 5] = [
        PageKind::First,
        PageKind::FirstFew,
        PageKind::FirstFewScanned,
        PageKind::Before,
        PageKind::After,
    ];
    /// The kinds a first page handed a counts base runs.
    const FIRST_PAGE_KINDS: [PageKind; 3] = [
        PageKind::First,
        PageKind::FirstFew,
        PageKind::FirstFewScanned,
    ];

    fn page_kind_name(kind: PageKind) -> &'static str {
        match kind {
            PageKind::First => "first",
            PageKind::FirstFew => "first_few",
            PageKind::FirstFewScanned => "first_few_scanned",
            PageKind::Before => "before",
            PageKind::After => "after",
        }
    }

    /// Every statement this module composes, each under the name of its file.
    fn every_statement() -> Vec<Snapshot> {
        let mut all = vec![];
        for kind in PAGE_KINDS {
            all.push(Snapshot {
                name: format!("page_{}", page_kind_name(kind)),
                what: format!(
                    "A feed page, PageKind::{kind:?} (read_feed, read_feed_as; \
                     feed_page_sql): the page, its head, the watermarks and the badges \
                     walked (from the base when it holds, else from the floors)."
                ),
                parameters: PAGE_PARAMETERS,
                sql: feed_page_sql(kind),
            });
        }
        for kind in FIRST_PAGE_KINDS {
            all.push(Snapshot {
                name: format!("page_{}_carried", page_kind_name(kind)),
                what: format!(
                    "A first page handed a counts base, PageKind::{kind:?} \
                     (read_first_page_carried; feed_page_carried_sql): the badges from \
                     the base and the page's own positions, no walks."
                ),
                parameters: PAGE_PARAMETERS,
                sql: feed_page_carried_sql(kind),
            });
        }
        all.push(Snapshot {
            name: "counts".into(),
            what: "The watermarks and badges, walked (read_status; counts_sql).".into(),
            parameters: COUNTS_PARAMETERS,
            sql: counts_sql(),
        });
        all.push(Snapshot {
            name: "counts_carried".into(),
            what: "The watermarks and badges handed a counts base, from the positions \
                   since it (read_status_carried; counts_carried_sql)."
                .into(),
            parameters: COUNTS_PARAMETERS,
            sql: counts_carried_sql(),
        });
        all.push(Snapshot {
            name: "head".into(),
            what: "The watermarks and the feed's head (read_head).".into(),
            parameters: "$1 tenant, $2 user, $3-$5 the user's teams (team_id, joined_tx, \
                         joined_id), $6 the tenant's horizon.",
            sql: head_sql(),
        });
        all.push(Snapshot {
            name: "find_item".into(),
            what: "The position of one item of the user's feed (find_item).".into(),
            parameters: "$1 tenant, $2 user, $3-$5 the user's teams (team_id, joined_tx, \
                         joined_id), $6 the item id, $7 the tenant's horizon.",
            sql: find_item_sql(),
        });
        all
    }

    fn snapshot_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/feed/snapshots")
    }

    /// `text` as `--` comment lines of at most 80 columns.
    fn comment(text: &str) -> String {
        let mut out = String::new();
        let mut line = String::from("--");
        for word in text.split_whitespace() {
            if line.len() + 1 + word.len() > 80 && line != "--" {
                out.push_str(&line);
                out.push('\n');
                line = String::from("--");
            }
            line.push(' ');
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
        out
    }

    /// The committed file of a statement: what it is, its parameters, and the
    /// statement exactly as it runs, ended by `;`.
    fn render(s: &Snapshot) -> String {
        format!(
            "{what}{parameters}{origin}{sql};\n",
            what = comment(&s.what),
            parameters = comment(&format!("Parameters: {}", s.parameters)),
            origin = comment(
                "Rendered from server/src/store/feed/statements.rs, whose test fails when \
                 this file differs; do not edit it: change the statement there and run \
                 `TIDINGS_BLESS=1 cargo test -p tidings-server --lib store::feed`."
            ),
            sql = s.sql,
        )
    }

    /// Where two texts first differ, for the failure message.
    fn first_difference(committed: &str, rendered: &str) -> String {
        let (mut committed_lines, mut rendered_lines) = (committed.lines(), rendered.lines());
        for n in 1.. {
            match (committed_lines.next(), rendered_lines.next()) {
                (None, None) => break,
                (c, r) if c == r => continue,
                (c, r) => {
                    return format!(
                        "line {n}:\n  committed: {}\n  rendered:  {}",
                        c.unwrap_or("<end of file>"),
                        r.unwrap_or("<end of statement>")
                    )
                }
            }
        }
        "only in line endings".into()
    }

    /// Every statement the feed runs is committed whole, byte for byte, in
    /// `snapshots/`; no file there is left from a statement that no longer
    /// runs. With `TIDINGS_BLESS=1` the test rewrites the files instead.
    #[test]
    fn every_statement_equals_its_snapshot() {
        let dir = snapshot_dir();
        let bless = std::env::var_os("TIDINGS_BLESS").is_some_and(|v| v == "1");
        let statements = every_statement();
        let mut failures = vec![];
        for statement in &statements {
            let path = dir.join(format!("{}.sql", statement.name));
            let rendered = render(statement);
            let committed = std::fs::read_to_string(&path).ok();
            if committed.as_deref() == Some(rendered.as_str()) {
                continue;
            }
            if bless {
                std::fs::create_dir_all(&dir).expect("creates the snapshot directory");
                std::fs::write(&path, &rendered).expect("writes the snapshot");
                continue;
            }
            failures.push(match committed {
                None => format!("{} is missing", path.display()),
                Some(committed) => format!(
                    "{} differs from the statement, {}",
                    path.display(),
                    first_difference(&committed, &rendered)
                ),
            });
        }
        let names: Vec<String> = statements
            .iter()
            .map(|s| format!("{}.sql", s.name))
            .collect();
        for entry in std::fs::read_dir(&dir).expect("the snapshot directory exists") {
            let path = entry.expect("a directory entry").path();
            let file = path
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or_default();
            if names.iter().any(|n| n == file) {
                continue;
            }
            if bless {
                std::fs::remove_file(&path).expect("removes a stale snapshot");
            } else {
                failures.push(format!("{} is no statement's snapshot", path.display()));
            }
        }
        assert!(
            failures.is_empty(),
            "the feed's statements and their snapshots disagree; after a deliberate change, \
             rewrite them with `TIDINGS_BLESS=1 cargo test -p tidings-server --lib store::feed` \
             and review the diff:\n{}",
            failures.join("\n")
        );
    }
}
