-- GET /v1/feed/counts as the server ran it before the counts handed a base
-- counted from the entries since it (main at d19e89f): every statement held
-- the badge walks' CTEs and `tops` (about 100 plan nodes started even when the
-- walks walk nothing) and counted by walking from the base's horizon. Kept to
-- measure against in the same run; parameters as feed_counts.sql. Also what
-- the counts without a usable base run still (feed_counts_walk.sql).
-- reference: the counts statement before counting from the entries since the base (d19e89f)
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
walk_floors AS MATERIALIZED (
    SELECT CASE WHEN b.valid THEN b.unseen_n ELSE 0 END AS unseen_base,
           CASE WHEN b.valid THEN b.unread_n ELSE 0 END AS unread_base,
           CASE WHEN b.valid AND (b.asof, 0::bigint) > (f.read_tx, f.read_id) THEN b.asof ELSE f.read_tx END AS read_tx,
           CASE WHEN b.valid AND (b.asof, 0::bigint) > (f.read_tx, f.read_id) THEN 0 ELSE f.read_id END AS read_id,
           CASE WHEN b.valid AND (b.asof, 0::bigint) > (f.unseen_tx, f.unseen_id) THEN b.asof ELSE f.unseen_tx END AS unseen_tx,
           CASE WHEN b.valid AND (b.asof, 0::bigint) > (f.unseen_tx, f.unseen_id) THEN 0 ELSE f.unseen_id END AS unseen_id
    FROM floors f CROSS JOIN base b
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
    SELECT greatest(0, b.n - least(w.unseen_base, w.unread_base)) AS unseen,
           CASE WHEN (w.unseen_tx, w.unseen_id) = (w.read_tx, w.read_id) THEN 0
                ELSE greatest(0, b.n - w.unread_base) END AS unread
    FROM walk_floors w CROSS JOIN budget b
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
    SELECT least(w.unseen_base + u.n, b.n) AS unseen_n,
           least(w.unread_base + CASE WHEN (w.unseen_tx, w.unseen_id) = (w.read_tx, w.read_id)
                                      THEN u.n ELSE s.n END, b.n) AS unread_n,
           b.n AS budget
    FROM walk_floors w CROSS JOIN budget b CROSS JOIN unseen_scan u CROSS JOIN unread_scan s
),
badges AS MATERIALIZED (
    SELECT CASE WHEN k.unseen_n >= k.budget THEN $6
                ELSE least($6, k.unseen_n - (SELECT count(*) FROM reads r CROSS JOIN floors f
                                             WHERE (r.tx, r.id) > (f.unseen_tx, f.unseen_id))) END AS unseen,
           CASE WHEN k.unread_n >= k.budget THEN $6
                ELSE least($6, k.unread_n - (SELECT count(*) FROM reads r CROSS JOIN floors f
                                             WHERE (r.tx, r.id) > (f.read_tx, f.read_id))) END AS unread,
           k.unseen_n, k.unread_n, k.budget, p.n AS purges, b.valid AS carried_over
    FROM walked k CROSS JOIN purges p CROSS JOIN base b
)
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id, c.unread, c.unseen,
       (SELECT tx FROM horizon) AS counted_below, c.purges, c.budget, c.unseen_n, c.unread_n,
       c.carried_over
FROM marks m CROSS JOIN badges c;
