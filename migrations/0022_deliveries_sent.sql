-- Sent deliveries leave the hot table (ARCHITECTURE.md, "The
-- deliveries table"; bench/findings/outbox.md).
--
-- The outbox's completion of a `sent` delivery deletes it from `deliveries`
-- and inserts it here, in one statement (store::outbox, as pgmq's archive
-- does), instead of updating it in place: the delete writes no index entry
-- and needs no room on the row's page, and `deliveries` keeps open work and
-- the failures operators act on. Retries, dead, skipped and releases still
-- update `deliveries` in place; in-app deliveries, written `sent` by the
-- alert's transaction, stay in `deliveries` (moving them would cost the write
-- path a second table for nothing). Readers of a sent delivery read both
-- tables (store::deliveries, store::retention).
--
-- The columns of `deliveries` in its order, its primary key (the ids are
-- `deliveries`' own: a row is in one table or the other) and the alert's
-- listing index; no foreign key (migration 0020), no fillfactor (rows are
-- only appended, then deleted by retention), no identity.
--
-- Not expand-only for the code before it: it reads `deliveries` alone and
-- does not see the rows this version moves (ARCHITECTURE.md, "Rolling
-- upgrades": the limit of a mixed rollout is written there).
CREATE TABLE IF NOT EXISTS deliveries_sent (
    tenant_id        uuid NOT NULL,
    id               bigint NOT NULL,
    notification_key text NOT NULL,
    alert_id         uuid NOT NULL,
    recipient_id     text NOT NULL,
    channel          text NOT NULL CHECK (channel IN ('in_app', 'email', 'webhook')),
    endpoint_id      uuid,
    status           text NOT NULL CHECK (status = 'sent'),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    claimed_until    timestamptz,
    last_error       text,
    sent_at          timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX IF NOT EXISTS deliveries_sent_by_alert_recipient
    ON deliveries_sent (tenant_id, alert_id, recipient_id, channel);
