-- Retention: how long a tenant's feed keeps its events and in-app
-- items, and the one index the purge needs that no query had yet.
--
-- Expand-only: a column with no default to rewrite and an index; an older
-- binary ignores both (ARCHITECTURE.md, "Rolling upgrades").

-- Seconds a tenant's events and in-app feed items are kept. NULL: the
-- server's TIDINGS_RETENTION_FEED_SECS, and when that is unset, forever.
ALTER TABLE tenants
    ADD COLUMN feed_retention_secs bigint
        CHECK (feed_retention_secs IS NULL OR feed_retention_secs > 0);

-- inbox_messages is keyed by message id only; the purge walks it by age.
-- IF NOT EXISTS: on a large table an operator may build it beforehand with
-- CREATE INDEX CONCURRENTLY under this name, and this migration then only
-- records it.
CREATE INDEX IF NOT EXISTS inbox_messages_age ON inbox_messages (received_at);
