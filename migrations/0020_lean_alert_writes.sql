-- Fewer checks and index entries per alert row (ARCHITECTURE.md,
-- "The write path's per-row cost"; bench/findings/ingest.md).
--
-- An alert of 1,000 rows writes 1,000 notifications, 1,000 deliveries and
-- (half of them in-app) 500 inbox items in one transaction. Until now each
-- of those rows also paid:
--
-- * A foreign-key check against `tenants`: a trigger per row that runs a
--   `SELECT … FOR KEY SHARE` on the tenant's row (2.5 per delivery row; a
--   concurrent alert of the same tenant shares that row lock through a
--   multixact). The tenant id is the authenticated credential's, which
--   exists; no code deletes tenants, so ON DELETE CASCADE never ran. These
--   three tables keep `tenant_id` as their first key column, without the
--   constraint; deleting a tenant's rows is an explicit DELETE per table.
-- * An entry in `notifications_by_alert (tenant_id, alert_id)`, read only by
--   the retention purge's "does the alert keep a notification". The purge
--   now finds an alert's notifications through the primary key, whose
--   prefix (tenant_id, event_type, entity_id) is the alert's own
--   (store::retention::purge_deliveries).
--
-- Every index the outbox's claim and completion read is kept (deliveries is
-- not re-indexed here). Expand-only for the code before it: it writes and
-- reads the same columns; its purge's by-alert probe scans notifications
-- without this index, so keep a rollout shorter than
-- TIDINGS_RETENTION_INTERVAL_SECS ("Rolling upgrades").

ALTER TABLE notifications DROP CONSTRAINT IF EXISTS notifications_tenant_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_tenant_id_fkey;
ALTER TABLE inbox_items DROP CONSTRAINT IF EXISTS inbox_items_tenant_id_fkey;
DROP INDEX IF EXISTS notifications_by_alert;
