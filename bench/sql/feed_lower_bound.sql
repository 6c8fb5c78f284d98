-- The least work any statement must do to answer the feed reader's first page
-- (limit 20) and badges, when handed the answer: the page's rows by primary key
-- ($4: their ids, taken from the service's own answer, so nothing has to find
-- them) and one count of cap + 1 index entries of the reader's teams (the
-- reader has no watermarks, so unread = unseen and one count serves both; the
-- head is the page's first item). No snapshot bound, join positions, alerts or
-- individually read items. The statement the server runs should cost at most
-- twice this (bench/findings/feed.md). Parameters: $1 tenant, $2 the reader's teams,
-- $3 badge cap + 1, $4 the page's item ids.
-- reference: a lower bound, not a statement the server runs
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM events e
            WHERE e.tenant_id = $1 AND e.team_id = ANY ($2::text[])
            LIMIT $3) c) AS n,
       p.id, p.tx, p.team_id, p.type, p.actor_id, p.object_id, p.payload, p.created_at
FROM events p
WHERE p.tenant_id = $1 AND p.id = ANY ($4::bigint[]);
