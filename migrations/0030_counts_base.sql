-- Each user's badge counts base kept in the database, so that a user's first
-- read on an instance starts from what an earlier read counted instead of
-- walking up to the badge cap from the watermarks (store::feed, the counts'
-- base; ARCHITECTURE.md, "The feed statement").
--
-- `counts_base` is `CountsBase::param`'s array (the horizon it counted below,
-- the watermarks, the purge counter, the budget and the two entry counts);
-- `counts_base_teams` the key of the teams it was counted with
-- (`store::feed::teams_key`). Written in the background after a read that
-- walked far, never in a request's transaction, and never trusted: every
-- statement handed it checks it in its own snapshot, as it checks a base kept
-- in memory, so a stale or racing write costs a walk, not a wrong count.
--
-- Expand-only: nullable columns an older binary neither reads nor writes.
ALTER TABLE feed_state
    ADD COLUMN IF NOT EXISTS counts_base       bigint[],
    ADD COLUMN IF NOT EXISTS counts_base_teams bigint;
