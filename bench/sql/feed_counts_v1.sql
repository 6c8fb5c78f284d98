-- GET /v1/feed/counts as the server ran it before incremental badge counts
-- (main at a6782b3): both walks from the floors on every request. Kept to
-- measure against in the same run; parameters $1-$7 as feed_counts.sql (it
-- has no $8).
-- reference: the counts statement before incremental counts (a6782b3)
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
)
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id, c.unread, c.unseen
FROM marks m CROSS JOIN badges c;
