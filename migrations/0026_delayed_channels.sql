-- Delayed channels with a condition: an email or webhook sent after a delay
-- only if the in-app item is still unread (or unseen), decided by the
-- outbox's claim against the user's watermarks (ARCHITECTURE.md, "Delayed
-- channels"; server/src/deliveries/fallback.rs).
--
-- Expand-only: new nullable columns and a new table, which an older binary
-- ignores. An older worker would send a delayed delivery when due without
-- deciding it; a rollout finishes before the first delay ends.

-- A delayed delivery: what it waits on (`unless_mark`) and the position of
-- the in-app item it follows (`item_tx`, `item_id`; NULL when the recipient
-- got no in-app item, so there is nothing to read and it is sent). Its delay
-- is its `next_attempt_at`. The decision records the watermark the claim saw
-- (`decided_mark_*`: the read watermark, or for `seen` the later of the two)
-- and when, so the alert's listing says why no email went out. Each claim
-- decides again and overwrites them.
ALTER TABLE deliveries
    ADD COLUMN unless_mark     text CHECK (unless_mark IN ('read', 'seen')),
    ADD COLUMN item_tx         bigint,
    ADD COLUMN item_id         bigint,
    ADD COLUMN decided_mark_tx bigint,
    ADD COLUMN decided_mark_id bigint,
    ADD COLUMN decided_at      timestamptz;

-- The same columns in the same order: a sent delivery moves here whole.
ALTER TABLE deliveries_sent
    ADD COLUMN unless_mark     text,
    ADD COLUMN item_tx         bigint,
    ADD COLUMN item_id         bigint,
    ADD COLUMN decided_mark_tx bigint,
    ADD COLUMN decided_mark_id bigint,
    ADD COLUMN decided_at      timestamptz;

-- The delivery rules an alert was accepted with (its own `delivery` field,
-- as parsed), so a background expansion batch applies them too. NULL: none.
ALTER TABLE alerts ADD COLUMN IF NOT EXISTS delivery jsonb;

-- An event type's default delivery rules (PUT /v1/event-types/{event_type}/
-- delivery), per channel; an alert's own rule for a channel wins.
CREATE TABLE IF NOT EXISTS event_type_delivery (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    event_type text NOT NULL,
    rules      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, event_type)
);
