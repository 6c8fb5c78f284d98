-- The watermarks and badges handed a counts base, from the positions since it
-- (read_status_carried; counts_carried_sql).
-- Parameters: $1 tenant, $2 user, $3-$5 the user's teams (team_id, joined_tx,
-- joined_id), $6 badge cap + 1, $7 the tenant's horizon, $8 the counts base
-- (empty for none).
-- Rendered from server/src/store/feed/statements.rs, whose test fails when this
-- file differs; do not edit it: change the statement there and run
-- `TIDINGS_BLESS=1 cargo test -p tidings-server --lib store::feed`.
WITH 
horizon AS MATERIALIZED (
    SELECT $7::bigint AS tx
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
                FROM (SELECT $8::bigint[] AS a) AS given) AS b
    CROSS JOIN horizon h
), 
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
), 
walked AS (
    SELECT least(c.unseen_n + w.unseen, c.budget) AS unseen_n,
           least(c.unread_n + w.unread, c.budget) AS unread_n,
           c.budget, c.purges,
           c.valid AND ((c.unseen_n >= c.budget AND c.unread_n >= c.budget) OR w.unread < c.budget) AS carried_over,
           c.read_tx, c.read_id, c.unseen_tx, c.unseen_id
    FROM checked c CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE (p.tx, p.id) > (c.unseen_tx, c.unseen_id)) AS unseen,
               count(*) FILTER (WHERE (p.tx, p.id) > (c.read_tx, c.read_id)) AS unread
        FROM new_positions p
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
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id, c.unread, c.unseen,
       (SELECT tx FROM horizon) AS counted_below, c.purges, c.budget, c.unseen_n, c.unread_n,
       c.carried_over
FROM marks m CROSS JOIN badges c;
