-- GET /v1/feed/counts handed the counts carried over from the user's last
-- statement (store::feed::CountsBase), as every request but a user's first
-- is: the statement it runs, as server/src/store/feed.rs composes it
-- (read_status_carried; no badge walks: the counts from the base and the
-- entries since it, index-only from the read walk floor, up to the budget).
-- When it cannot count so (the base does not hold, or a budget's worth or
-- more came since), feed_counts_walk.sql runs instead. Parameters: $1
-- tenant, $2 user, $3-$5 the user's teams, $6 cap + 1, $7 the tenant's
-- horizon, $8 the counts base ('{}' for none).
-- Regenerate with `target/debug/tidings-bench --sync-sql` when the server changes.
-- source-fn: tidings_server::store::feed::counts_carried_sql()
WITH 
horizon AS MATERIALIZED (
    SELECT CASE WHEN pg_is_in_recovery()
                THEN least($7::bigint, pg_snapshot_xmin(pg_current_snapshot())::text::bigint)
                ELSE $7::bigint END AS tx
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
          FROM (SELECT $8::bigint[] AS a) AS given) AS b
    CROSS JOIN horizon h CROSS JOIN marks m CROSS JOIN purges p CROSS JOIN budget bu
), 
new_floor AS MATERIALIZED (
    SELECT CASE WHEN (b.asof, 0::bigint) > (f.read_tx, f.read_id) THEN b.asof ELSE f.read_tx END AS tx,
           CASE WHEN (b.asof, 0::bigint) > (f.read_tx, f.read_id) THEN 0::bigint ELSE f.read_id END AS id,
           CASE WHEN b.valid AND NOT (b.unseen_n >= bu.n AND b.unread_n >= bu.n) THEN bu.n ELSE 0 END AS k
    FROM base b CROSS JOIN floors f CROSS JOIN budget bu
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
walked AS MATERIALIZED (
    SELECT least(b.unseen_n + w.unseen, bu.n) AS unseen_n,
           least(b.unread_n + w.unread, bu.n) AS unread_n,
           bu.n AS budget,
           b.valid AND ((b.unseen_n >= bu.n AND b.unread_n >= bu.n) OR w.unread < bu.n) AS carried_over
    FROM base b CROSS JOIN budget bu CROSS JOIN (
        SELECT count(*) FILTER (WHERE (p.tx, p.id) > (f.unseen_tx, f.unseen_id)) AS unseen,
               count(*) FILTER (WHERE (p.tx, p.id) > (f.read_tx, f.read_id)) AS unread
        FROM new_positions p CROSS JOIN floors f CROSS JOIN base b
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
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id, c.unread, c.unseen,
       (SELECT tx FROM horizon) AS counted_below, c.purges, c.budget, c.unseen_n, c.unread_n,
       c.carried_over
FROM marks m CROSS JOIN badges c;
