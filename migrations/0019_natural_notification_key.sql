-- Notifications keyed by their natural key (ARCHITECTURE.md,
-- invariant 4 and "The deliveries table").
--
-- Number 0018 is skipped: a migration of that number (deliveries filled to a
-- third) was reverted before any release, and a database that applied it
-- keeps it recorded; reusing the number would fail its checksum check.
--
-- Invariant 4 is one notification per (tenant, event type, entity, recipient,
-- channel). Until now the unique key was the SHA-256 digest of that tuple
-- (hex, `key`): random, so the 1,000 rows of one alert went to 1,000 leaves
-- of `notifications_pkey` and, for in-app rows, of inbox_items'
-- UNIQUE (tenant_id, notification_key), most of them a full-page image in the
-- WAL after each checkpoint. The tuple itself is the key now: one alert's rows
-- share (tenant, event type, entity), so they are neighbours in the index.
-- The digest stays a column (webhook-id, Message-ID, deliveries' copy); the
-- core's encoding is injective (invariant 5), so the two keys accept and
-- refuse exactly the same rows.
--
-- inbox_items loses its unique key without a replacement: an item is written
-- only for a notification that insert created in the same transaction, so
-- the notification's key is the guarantee (as for deliveries since 0015).
-- Nothing reads inbox_items by notification key.
--
-- Cost on a large table: the unique index is built under a SHARE lock (alert
-- writes wait for the build); IF NOT EXISTS lets an operator build it
-- beforehand with CREATE UNIQUE INDEX CONCURRENTLY under this name, and this
-- migration then only adopts it. The key swap and the drop take an ACCESS
-- EXCLUSIVE lock on each table for a moment (no scan: the columns are NOT
-- NULL already). Instances before this migration name the dropped keys in
-- their ON CONFLICT and fail alert writes once it is applied (ARCHITECTURE.md,
-- "Rolling upgrades").

CREATE UNIQUE INDEX IF NOT EXISTS notifications_natural_key
    ON notifications (tenant_id, event_type, entity_id, recipient_id, channel);
ALTER TABLE notifications DROP CONSTRAINT notifications_pkey;
ALTER TABLE notifications
    ADD CONSTRAINT notifications_pkey PRIMARY KEY USING INDEX notifications_natural_key;

ALTER TABLE inbox_items DROP CONSTRAINT IF EXISTS inbox_items_tenant_id_notification_key_key;
