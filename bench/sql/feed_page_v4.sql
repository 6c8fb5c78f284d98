-- GET /v1/feed first page (no cursor, sources fit the page, counts carried
-- over) as the server ran it before such a page scanned the tenant's newest
-- entries first (PageKind::FirstFewScanned) and before the counts' small CTEs
-- were folded into one row (main at 2724476): each source scanned once, its
-- positions sorted to keep k; floors, budget, purges and base each a CTE, the
-- counts from the page and the badges two more, each joined to the others
-- (about 75 plan nodes started at every execution). Kept to measure against
-- in the same run; parameters as feed_page.sql.
-- reference: the first page statement before the tenant scan and the folded counts (2724476)
WITH 
horizon AS MATERIALIZED (
    SELECT CASE WHEN pg_is_in_recovery()
                THEN least($12::bigint, pg_snapshot_xmin(pg_current_snapshot())::text::bigint)
                ELSE $12::bigint END AS tx
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
page_positions AS MATERIALIZED (
    SELECT * FROM (
        (SELECT e.tx, e.id, false AS alert FROM teams t CROSS JOIN LATERAL (
            SELECT e.tx, e.id FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = t.team_id
              AND e.tx < (SELECT tx FROM horizon)
            ORDER BY e.tx DESC, e.id DESC
            LIMIT $11
         ) e
         WHERE (e.tx, e.id) > (t.joined_tx, t.joined_id))
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
floors AS MATERIALIZED (
    SELECT read_tx, read_id,
           CASE WHEN (seen_tx, seen_id) > (read_tx, read_id) THEN seen_tx ELSE read_tx END AS unseen_tx,
           CASE WHEN (seen_tx, seen_id) > (read_tx, read_id) THEN seen_id ELSE read_id END AS unseen_id
    FROM marks
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
budget AS MATERIALIZED (
    SELECT $6 + count(*) AS n FROM reads
),
purges AS MATERIALIZED (
    SELECT coalesce((SELECT feed_purges FROM tenants WHERE id = $1), 0) AS n
),
base AS MATERIALIZED (
    SELECT coalesce(b.asof <= h.tx
                    AND (b.seen_tx, b.seen_id, b.read_tx, b.read_id)
                        = (m.seen_tx, m.seen_id, m.read_tx, m.read_id)
                    AND b.purges = p.n AND b.budget = bu.n, false) AS valid,
           b.asof, b.unseen_n, b.unread_n
    FROM (SELECT a[1] AS asof, a[2] AS seen_tx, a[3] AS seen_id, a[4] AS read_tx, a[5] AS read_id,
                 a[6] AS purges, a[7] AS budget, a[8] AS unseen_n, a[9] AS unread_n
          FROM (SELECT $13::bigint[] AS a) AS given) AS b
    CROSS JOIN horizon h CROSS JOIN marks m CROSS JOIN purges p CROSS JOIN budget bu
),
walked AS MATERIALIZED (
    SELECT least(b.unseen_n + w.unseen, bu.n) AS unseen_n,
           least(b.unread_n + w.unread, bu.n) AS unread_n,
           bu.n AS budget,
           b.valid AND ((b.unseen_n >= bu.n AND b.unread_n >= bu.n) OR w.unread < $11) AS carried_over
    FROM base b CROSS JOIN budget bu CROSS JOIN (
        SELECT count(*) FILTER (WHERE (p.tx, p.id) > (f.unseen_tx, f.unseen_id)) AS unseen,
               count(*) FILTER (WHERE (p.tx, p.id) > (f.read_tx, f.read_id)) AS unread
        FROM page_positions p CROSS JOIN floors f CROSS JOIN base b
        WHERE (p.tx, p.id) > (b.asof, 0::bigint)
    ) w
),
badges AS MATERIALIZED (
    SELECT CASE WHEN k.unseen_n >= k.budget THEN $6
                ELSE least($6, k.unseen_n - (SELECT count(*) FROM reads r CROSS JOIN floors f
                                             WHERE (r.tx, r.id) > (f.unseen_tx, f.unseen_id))) END AS unseen,
           CASE WHEN k.unread_n >= k.budget THEN $6
                ELSE least($6, k.unread_n - (SELECT count(*) FROM reads r CROSS JOIN floors f
                                             WHERE (r.tx, r.id) > (f.read_tx, f.read_id))) END AS unread,
           k.unseen_n, k.unread_n, k.budget, p.n AS purges, k.carried_over AS carried_over
    FROM walked k CROSS JOIN purges p CROSS JOIN base b
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
