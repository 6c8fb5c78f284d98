-- A first page handed a counts base, PageKind::First (read_first_page_carried;
-- feed_page_carried_sql): the badges from the base and the page's own
-- positions, no walks.
-- Parameters: $1 tenant, $2 user, $3-$5 the user's teams (team_id, joined_tx,
-- joined_id), $6 badge cap + 1, $7/$8 the exclusive lower bound (after), $9/$10
-- the exclusive upper bound (before), $11 limit + 1, $12 the tenant's horizon,
-- $13 the counts base (empty for none).
-- Rendered from server/src/store/feed/statements.rs, whose test fails when this
-- file differs; do not edit it: change the statement there and run
-- `TIDINGS_BLESS=1 cargo test -p tidings-server --lib store::feed`.
WITH 
horizon AS MATERIALIZED (
    SELECT $12::bigint AS tx
),
teams AS MATERIALIZED (
    SELECT * FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS t (team_id, joined_tx, joined_id)
),
marks AS MATERIALIZED (
    SELECT coalesce(s.seen_tx, 0) AS seen_tx, coalesce(s.seen_id, 0) AS seen_id,
           coalesce(s.read_tx, 0) AS read_tx, coalesce(s.read_id, 0) AS read_id
    FROM (SELECT 1) AS one
    LEFT JOIN feed_state s ON s.tenant_id = $1 AND s.user_id = $2
), 
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
), 
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
page_tops AS (SELECT * FROM tops),
threshold AS MATERIALIZED (
    SELECT coalesce(k.tx, 0::bigint) AS tx, coalesce(k.id, 0::bigint) AS id
    FROM (SELECT 1) AS one LEFT JOIN (
        SELECT tx, id FROM page_tops ORDER BY tx DESC, id DESC OFFSET $11 - 1 LIMIT 1
    ) k ON true
),
scan_page AS MATERIALIZED (
    SELECT s.tx, s.id, s.team_id FROM (
        SELECT e.tx, e.id, e.team_id, e.team_id IN (SELECT t.team_id FROM teams t) AS mine
        FROM events e
        WHERE e.tenant_id = $1 AND e.tx < (SELECT tx FROM horizon)
        ORDER BY e.tx DESC, e.id DESC
        LIMIT 4 * cardinality($3::text[])
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
page_positions AS MATERIALIZED (
    SELECT * FROM (
        (SELECT s.tx, s.id, false AS alert FROM scanned s WHERE (SELECT holds FROM scan_holds))
        UNION ALL
        (SELECT e.* FROM page_tops top
         JOIN page_teams pt ON pt.team_id = top.team_id
         CROSS JOIN bounds b CROSS JOIN threshold th
         CROSS JOIN LATERAL (
            SELECT e.tx, e.id, false AS alert FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = pt.team_id
              AND (e.tx, e.id) > (pt.lo_tx, pt.lo_id)
              AND (e.tx, e.id) < (b.hi_tx, b.hi_id)
            ORDER BY e.tx DESC, e.id DESC
            LIMIT $11
         ) e
         WHERE (top.tx, top.id) >= (th.tx, th.id)
           AND NOT (SELECT holds FROM scan_holds))
        UNION ALL
        -- LATERAL, so the bounds are index conditions rather than filters.
        (SELECT i.* FROM bounds b CROSS JOIN LATERAL (
            SELECT i.tx, i.id, true AS alert FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > ($7::bigint, $8::bigint)
              AND (i.tx, i.id) < (b.hi_tx, b.hi_id)
            ORDER BY i.tx DESC, i.id DESC
            LIMIT $11
        ) i)
    ) merged
    ORDER BY tx DESC, id DESC
    LIMIT $11
),
page_head AS (
    SELECT tx, id FROM page_positions ORDER BY tx DESC, id DESC LIMIT 1
),
page AS (
    SELECT p.id, p.tx, e.team_id, e.type, e.actor_id, e.object_id, NULL::text AS subject,
           e.payload, e.created_at, 'event'::text AS source
    FROM page_positions p JOIN events e ON e.tenant_id = $1 AND e.id = p.id
    WHERE NOT p.alert
    UNION ALL
    SELECT p.id, p.tx, NULL::text, i.type, NULL::text, i.entity_id, i.subject,
           i.payload, i.created_at, 'alert'::text
    FROM page_positions p JOIN inbox_items i ON i.tenant_id = $1 AND i.id = p.id
    WHERE p.alert
),
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
                FROM (SELECT $13::bigint[] AS a) AS given) AS b
    CROSS JOIN horizon h
),
walked AS (
    SELECT least(c.unseen_n + w.unseen, c.budget) AS unseen_n,
           least(c.unread_n + w.unread, c.budget) AS unread_n,
           c.budget, c.purges,
           c.valid AND ((c.unseen_n >= c.budget AND c.unread_n >= c.budget) OR w.unread < $11) AS carried_over,
           c.read_tx, c.read_id, c.unseen_tx, c.unseen_id
    FROM checked c CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE (p.tx, p.id) > (c.unseen_tx, c.unseen_id)) AS unseen,
               count(*) FILTER (WHERE (p.tx, p.id) > (c.read_tx, c.read_id)) AS unread
        FROM page_positions p
        WHERE (p.tx, p.id) > (c.asof, 0::bigint)
    ) w
),
badges AS MATERIALIZED (
    SELECT CASE WHEN k.unseen_n >= k.budget THEN $6 ELSE least($6, k.unseen_n - r.unseen) END AS unseen,
           CASE WHEN k.unread_n >= k.budget THEN $6 ELSE least($6, k.unread_n - r.unread) END AS unread,
           k.unseen_n, k.unread_n, k.budget, k.purges, k.carried_over
    FROM walked k CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE (r.tx, r.id) > (k.unseen_tx, k.unseen_id)) AS unseen,
               count(*) FILTER (WHERE (r.tx, r.id) > (k.read_tx, k.read_id)) AS unread
        FROM reads r
    ) r
)
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
LEFT JOIN page_head h ON true
LEFT JOIN page p ON true
ORDER BY p.tx DESC, p.id DESC;
