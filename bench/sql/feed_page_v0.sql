-- GET /v1/feed first page (newest first, no cursor) as the server ran it before the feed rewrite
-- (main at fc5e7de): every team's 21 full rows, then the page; two badge passes
-- with an `item_reads` probe per entry. Kept to measure the rewrite against in
-- the same run; same parameters as feed_page.sql.
-- reference: the statement before the feed rewrite (fc5e7de)
WITH 
snap AS MATERIALIZED (
    SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin
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
head AS (
    SELECT tx, id FROM (
        (SELECT e.tx, e.id FROM teams t CROSS JOIN LATERAL (
            SELECT e.tx, e.id FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = t.team_id
              AND (e.tx, e.id) > (t.joined_tx, t.joined_id)
              AND (e.tx, e.id) < ((SELECT xmin FROM snap), 0::bigint)
            ORDER BY e.tx DESC, e.id DESC
            LIMIT 1
        ) e)
        UNION ALL
        (SELECT i.tx, i.id FROM inbox_items i
         WHERE i.tenant_id = $1 AND i.recipient_id = $2
           AND (i.tx, i.id) < ((SELECT xmin FROM snap), 0::bigint)
         ORDER BY i.tx DESC, i.id DESC
         LIMIT 1)
    ) tops
    ORDER BY tx DESC, id DESC
    LIMIT 1
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
           CASE WHEN (t.joined_tx, t.joined_id) > (f.unseen_tx, f.unseen_id) THEN t.joined_id ELSE f.unseen_id END AS unseen_id
    FROM teams t CROSS JOIN floors f
),
unread AS (
    SELECT count(*) AS n FROM (
        (SELECT 1 FROM team_floors tf CROSS JOIN LATERAL (
            SELECT 1 FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = tf.team_id
              AND (e.tx, e.id) > (tf.read_tx, tf.read_id)
              AND (e.tx, e.id) < ((SELECT xmin FROM snap), 0::bigint)
              AND NOT EXISTS (SELECT 1 FROM item_reads r
                              WHERE r.tenant_id = $1 AND r.user_id = $2 AND r.item_id = e.id)
            LIMIT $6
        ) e)
        UNION ALL
        (SELECT 1 FROM floors f CROSS JOIN LATERAL (
            SELECT 1 FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > (f.read_tx, f.read_id)
              AND (i.tx, i.id) < ((SELECT xmin FROM snap), 0::bigint)
              AND NOT EXISTS (SELECT 1 FROM item_reads r
                              WHERE r.tenant_id = $1 AND r.user_id = $2 AND r.item_id = i.id)
            LIMIT $6
        ) i)
        LIMIT $6
    ) c
),
unseen AS (
    SELECT count(*) AS n FROM (
        (SELECT 1 FROM team_floors tf CROSS JOIN LATERAL (
            SELECT 1 FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = tf.team_id
              AND (e.tx, e.id) > (tf.unseen_tx, tf.unseen_id)
              AND (e.tx, e.id) < ((SELECT xmin FROM snap), 0::bigint)
              AND NOT EXISTS (SELECT 1 FROM item_reads r
                              WHERE r.tenant_id = $1 AND r.user_id = $2 AND r.item_id = e.id)
            LIMIT $6
        ) e)
        UNION ALL
        (SELECT 1 FROM floors f CROSS JOIN LATERAL (
            SELECT 1 FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > (f.unseen_tx, f.unseen_id)
              AND (i.tx, i.id) < ((SELECT xmin FROM snap), 0::bigint)
              AND NOT EXISTS (SELECT 1 FROM item_reads r
                              WHERE r.tenant_id = $1 AND r.user_id = $2 AND r.item_id = i.id)
            LIMIT $6
        ) i)
        LIMIT $6
    ) c
), 
bounds AS MATERIALIZED (
    SELECT CASE WHEN (s.xmin, 0::bigint) < ($9::bigint, $10::bigint) THEN s.xmin ELSE $9 END AS hi_tx,
           CASE WHEN (s.xmin, 0::bigint) < ($9::bigint, $10::bigint) THEN 0::bigint ELSE $10 END AS hi_id
    FROM snap s
),
page_teams AS MATERIALIZED (
    SELECT t.team_id,
           CASE WHEN (t.joined_tx, t.joined_id) > ($7::bigint, $8::bigint) THEN t.joined_tx ELSE $7 END AS lo_tx,
           CASE WHEN (t.joined_tx, t.joined_id) > ($7::bigint, $8::bigint) THEN t.joined_id ELSE $8 END AS lo_id
    FROM teams t
),
page AS (
    SELECT * FROM (
        (SELECT e.* FROM page_teams pt CROSS JOIN bounds b CROSS JOIN LATERAL (
            SELECT e.id, e.tx, e.team_id, e.type, e.actor_id, e.object_id, NULL::text AS subject,
                   e.payload, e.created_at, 'event'::text AS source
            FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = pt.team_id
              AND (e.tx, e.id) > (pt.lo_tx, pt.lo_id)
              AND (e.tx, e.id) < (b.hi_tx, b.hi_id)
            ORDER BY e.tx DESC, e.id DESC
            LIMIT $11
        ) e)
        UNION ALL
        -- LATERAL, so the bound is an index condition rather than a filter.
        (SELECT i.* FROM bounds b CROSS JOIN LATERAL (
            SELECT i.id, i.tx, NULL::text, i.type, NULL::text, i.entity_id, i.subject,
                   i.payload, i.created_at, 'alert'::text
            FROM inbox_items i
            WHERE i.tenant_id = $1 AND i.recipient_id = $2
              AND (i.tx, i.id) > ($7::bigint, $8::bigint)
              AND (i.tx, i.id) < (b.hi_tx, b.hi_id)
            ORDER BY i.tx DESC, i.id DESC
            LIMIT $11
        ) i)
    ) merged
    ORDER BY tx DESC, id DESC
    LIMIT $11
)
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id,
       h.tx AS head_tx, h.id AS head_id,
       (SELECT n FROM unread) AS unread, (SELECT n FROM unseen) AS unseen,
       p.id, p.tx, p.team_id, p.type, p.actor_id, p.object_id, p.subject, p.payload,
       p.created_at, p.source,
       EXISTS (SELECT 1 FROM item_reads r
               WHERE r.tenant_id = $1 AND r.user_id = $2 AND r.item_id = p.id) AS individually_read
FROM marks m
LEFT JOIN head h ON true
LEFT JOIN page p ON true
ORDER BY p.tx DESC, p.id DESC;
