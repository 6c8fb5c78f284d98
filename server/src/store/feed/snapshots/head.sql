-- The watermarks and the feed's head (read_head).
-- Parameters: $1 tenant, $2 user, $3-$5 the user's teams (team_id, joined_tx,
-- joined_id), $6 the tenant's horizon.
-- Rendered from server/src/store/feed/statements.rs, whose test fails when this
-- file differs; do not edit it: change the statement there and run
-- `TIDINGS_BLESS=1 cargo test -p tidings-server --lib store::feed`.
WITH 
horizon AS MATERIALIZED (
    SELECT $6::bigint AS tx
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
)
SELECT m.seen_tx, m.seen_id, m.read_tx, m.read_id, h.tx AS head_tx, h.id AS head_id
FROM marks m LEFT JOIN head h ON true;
