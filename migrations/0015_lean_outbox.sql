-- A lean outbox (ARCHITECTURE.md, "The deliveries table").
--
-- Every delivery is written once (the alert's transaction) and updated twice
-- (claim, result). Before this migration each update wrote a new entry into
-- every index of the table (about 9 B-tree insertions per delivery, no update
-- HOT), one of them over random 64-hex digests. From now on:
--
-- * The claim touches no indexed column: it sets attempts and claimed_until
--   only (status and next_attempt_at stay as they are; a live lease is what
--   makes a row "sending", store::deliveries::STATUS_SQL). With room left on
--   the page (fillfactor) it is a HOT update: no index entry at all.
-- * The result leaves the partial indexes (claimable, unsent) when it is
--   final, so a sent delivery costs the primary key and deliveries_by_alert_recipient.
-- * The unique (tenant, notification key, endpoint) goes: uniqueness is the
--   primary key of `notifications` (invariant 4); a delivery is written only
--   for a key that insert created, in the same transaction. The writers'
--   ON CONFLICT DO NOTHING names no constraint, so versions before this one
--   write as before.
-- * deliveries_by_status (every row, re-keyed by every status change) becomes
--   deliveries_unsent, the same key over rows that are not `sent`: the bulk of
--   the table, sent rows, is found through the primary key in id order.
--
-- Expand-only for the code before it: it reads the same columns, its claim
-- and completion still work (ARCHITECTURE.md, "Rolling upgrades"; the limit
-- of a mixed rollout is written there).

ALTER TABLE deliveries
    DROP CONSTRAINT IF EXISTS deliveries_tenant_id_notification_key_endpoint_id_key;

-- IF NOT EXISTS: on a large table an operator may build it beforehand with
-- CREATE INDEX CONCURRENTLY under this name, and this migration then only
-- records it.
CREATE INDEX IF NOT EXISTS deliveries_unsent ON deliveries (tenant_id, status, id)
    WHERE status <> 'sent';
DROP INDEX IF EXISTS deliveries_by_status;

-- Half of each page is left free when rows are inserted: a claim takes a
-- whole batch of neighbouring rows at once, so each page must hold a second
-- version of every row on it for the claims to be HOT. The completion prunes
-- the first versions (dead once the claim commits) before it writes its own.
-- Applies to pages written from now on; existing pages keep their fill.
ALTER TABLE deliveries SET (fillfactor = 50);

-- An alert's deliveries, by the notification's natural key within the alert
-- (recipient, channel): the alert's listing, and the retention purge's "does
-- this notification keep a delivery" (which used the unique above). One
-- alert's rows are neighbours in it, as they are written together.
CREATE INDEX IF NOT EXISTS deliveries_by_alert_recipient
    ON deliveries (tenant_id, alert_id, recipient_id, channel);
DROP INDEX IF EXISTS deliveries_by_alert;
