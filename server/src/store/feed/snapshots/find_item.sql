-- The position of one item of the user's feed (find_item).
-- Parameters: $1 tenant, $2 user, $3-$5 the user's teams (team_id, joined_tx,
-- joined_id), $6 the item id, $7 the tenant's horizon.
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
)
SELECT e.tx FROM events e JOIN teams t ON t.team_id = e.team_id
WHERE e.tenant_id = $1 AND e.id = $6
  AND (e.tx, e.id) > (t.joined_tx, t.joined_id)
  AND e.tx < (SELECT tx FROM horizon)
UNION ALL
SELECT i.tx FROM inbox_items i
WHERE i.tenant_id = $1 AND i.id = $6 AND i.recipient_id = $2
  AND i.tx < (SELECT tx FROM horizon);
