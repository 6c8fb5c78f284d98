-- Digests: a user's emails of one event type collected over a window into
-- one email, whose content is decided at the flush against the user's read
-- watermark (ARCHITECTURE.md, "Digests"; server/src/deliveries/digests.rs).
--
-- Expand-only: two new tables, which an older binary ignores. An older
-- instance writes an alert with a digest rule as a plain email (it reads no
-- digest rule); a rollout finishes before that matters.

-- One row per digest. `open` collects items until `flush_at` (the window's
-- end); the flush locks the row, decides its content under the user's
-- `feed_state` lock, and leaves it `decided` (to send), `empty` (every item
-- was read or seen before the flush: no email, `reason` says which) or
-- `skipped` (the recipient turned email off or has no address). A decided
-- digest is sent with a lease, like a delivery of the outbox, and ends
-- `sent` or `dead`. `attempts`, `claimed_until` and `next_attempt_at` are
-- that lease and its retries.
CREATE TABLE IF NOT EXISTS digests (
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id              bigint GENERATED ALWAYS AS IDENTITY,
    recipient_id    text NOT NULL,
    channel         text NOT NULL CHECK (channel IN ('email')),
    -- The event type, then `/` and the rule's key rendered over the payload
    -- when it has one: what one digest collects.
    digest_key      text NOT NULL,
    event_type      text NOT NULL,
    window_start    timestamptz NOT NULL DEFAULT now(),
    flush_at        timestamptz NOT NULL,
    max_items       integer NOT NULL CHECK (max_items > 0),
    unless_mark     text CHECK (unless_mark IN ('read', 'seen')),
    item_count      integer NOT NULL DEFAULT 0,
    status          text NOT NULL DEFAULT 'open'
                    CHECK (status IN ('open', 'decided', 'sent', 'empty', 'skipped', 'dead')),
    next_attempt_at timestamptz NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    claimed_until   timestamptz,
    -- The decision: when, against which watermark, how many items it kept.
    decided_at      timestamptz,
    decided_mark_tx bigint,
    decided_mark_id bigint,
    sent_count      integer,
    reason          text,
    sent_at         timestamptz,
    PRIMARY KEY (tenant_id, id)
);
-- One open digest per (tenant, recipient, channel, key): where a new item
-- goes. A flush that closes it lets the next item open another.
CREATE UNIQUE INDEX IF NOT EXISTS digests_open
    ON digests (tenant_id, recipient_id, channel, digest_key) WHERE status = 'open';
-- What the flush scans: per tenant, the digests due.
CREATE INDEX IF NOT EXISTS digests_due
    ON digests (tenant_id, next_attempt_at) WHERE status IN ('open', 'decided');
CREATE INDEX IF NOT EXISTS digests_by_recipient ON digests (tenant_id, recipient_id, id);

-- A digest's items, by reference: the in-app item's feed position and its
-- alert (for the content). `included` is the flush's decision: in the email,
-- or read (seen) before it; NULL until then.
CREATE TABLE IF NOT EXISTS digest_items (
    tenant_id uuid NOT NULL,
    digest_id bigint NOT NULL,
    item_tx   bigint NOT NULL,
    item_id   bigint NOT NULL,
    alert_id  uuid NOT NULL,
    included  boolean,
    PRIMARY KEY (tenant_id, digest_id, item_tx, item_id),
    FOREIGN KEY (tenant_id, digest_id) REFERENCES digests (tenant_id, id) ON DELETE CASCADE
);
