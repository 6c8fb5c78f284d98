-- GET /v1/feed first page (newest first, no cursor) as the server ran it before
-- incremental badge counts (main at a6782b3): the page late materialised, and
-- both badge walks from the floors on every request (up to cap + 1 entries).
-- Kept to measure the carried-over counts against in the same run; parameters
-- $1-$12 as feed_page.sql (it has no $13).
-- reference: the first page statement before incremental counts (a6782b3)
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
team_floors AS MATERIALIZED (
    SELECT t.team_id,
           CASE WHEN (t.joined_tx, t.joined_id) > (f.read_tx, f.read_id) THEN t.joined_tx ELSE f.read_tx END AS read_tx,
           CASE WHEN (t.joined_tx, t.joined_id) > (f.read_tx, f.read_id) THEN t.joined_id ELSE f.read_id END AS read_id,
           CASE WHEN (t.joined_tx, t.joined_id) > (f.unseen_tx, f.unseen_id) THEN t.joined_tx ELSE f.unseen_tx END AS unseen_tx,
           CASE WHEN (t.joined_tx, t.joined_id) > (f.unseen_tx, f.unseen_id) THEN t.joined_id ELSE f.unseen_id END AS unseen_id,
           top.tx AS top_tx, top.id AS top_id
    FROM teams t JOIN tops top ON top.team_id = t.team_id CROSS JOIN floors f
    ORDER BY top.tx DESC, top.id DESC
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
unseen_scan AS MATERIALIZED (
    SELECT count(*) AS n FROM (
        (SELECT 1 FROM team_floors tf CROSS JOIN LATERAL (
            SELECT 1 FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = tf.team_id
              AND (e.tx, e.id) > (tf.unseen_tx, tf.unseen_id)
              AND (e.tx, e.id) < ((SELECT tx FROM horizon), 0::bigint)
            ORDER BY e.tx, e.id
            LIMIT (SELECT n FROM budget)
        ) e
         WHERE (tf.top_tx, tf.top_id) > (tf.unseen_tx, tf.unseen_id))
        UNION ALL
        (SELECT 1 FROM floors f CROSS JOIN LATERAL (
            SELECT 1 FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > (f.unseen_tx, f.unseen_id)
              AND (i.tx, i.id) < ((SELECT tx FROM horizon), 0::bigint)
            ORDER BY i.tx, i.id
            LIMIT (SELECT n FROM budget)
        ) i)
        LIMIT (SELECT n FROM budget)
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
            LIMIT (SELECT n FROM budget)
        ) e
         WHERE (tf.top_tx, tf.top_id) > (tf.read_tx, tf.read_id))
        UNION ALL
        (SELECT 1 FROM floors f CROSS JOIN LATERAL (
            SELECT 1 FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > (f.read_tx, f.read_id)
              AND (i.tx, i.id) < ((SELECT tx FROM horizon), 0::bigint)
            ORDER BY i.tx, i.id
            LIMIT (SELECT n FROM budget)
        ) i)
        LIMIT (SELECT CASE WHEN (f.unseen_tx, f.unseen_id) = (f.read_tx, f.read_id) THEN 0 ELSE b.n END
               FROM floors f CROSS JOIN budget b)
    ) c
),
badges AS MATERIALIZED (
    SELECT CASE WHEN u.n >= b.n THEN $6
                ELSE least($6, u.n - (SELECT count(*) FROM reads r CROSS JOIN floors f
                                      WHERE (r.tx, r.id) > (f.unseen_tx, f.unseen_id))) END AS unseen,
           CASE WHEN ur.n >= b.n THEN $6
                ELSE least($6, ur.n - (SELECT count(*) FROM reads r CROSS JOIN floors f
                                       WHERE (r.tx, r.id) > (f.read_tx, f.read_id))) END AS unread
    FROM budget b CROSS JOIN unseen_scan u CROSS JOIN floors fl
    CROSS JOIN LATERAL (
        SELECT CASE WHEN (fl.unseen_tx, fl.unseen_id) = (fl.read_tx, fl.read_id) THEN u.n
                    ELSE s.n END AS n
        FROM unread_scan s
    ) ur
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
page_positions AS MATERIALIZED (
    SELECT * FROM (
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
         WHERE (top.tx, top.id) >= (th.tx, th.id))
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
)
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id,
       h.tx AS head_tx, h.id AS head_id,
       c.unread, c.unseen,
       p.id, p.tx, p.team_id, p.type, p.actor_id, p.object_id, p.subject, p.payload,
       p.created_at, p.source,
       EXISTS (SELECT 1 FROM reads r WHERE r.id = p.id) AS individually_read
FROM marks m
CROSS JOIN badges c
LEFT JOIN head h ON true
LEFT JOIN page p ON true
ORDER BY p.tx DESC, p.id DESC;
