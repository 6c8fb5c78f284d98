-- The outbox (ARCHITECTURE.md, invariant 6): one delivery per notification and target,
-- written in the alert's transaction, drained by workers that claim with
-- FOR UPDATE SKIP LOCKED and deliver outside any transaction.
--
-- States:  pending --claim--> sending --ok--> sent
--                               |  \--fail--> retrying --(due)--> sending ...
--                               |                \--max attempts--> dead
--                               \--lease expired (worker crashed)--> claimable again
--          skipped: nothing to deliver (e.g. no email address); in_app is `sent` at once.
CREATE TABLE deliveries (
    tenant_id        uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id               bigint GENERATED ALWAYS AS IDENTITY,
    notification_key text NOT NULL,
    alert_id         uuid NOT NULL,
    recipient_id     text NOT NULL,
    channel          text NOT NULL CHECK (channel IN ('in_app', 'email', 'webhook')),
    endpoint_id      uuid,                 -- webhook deliveries: the target endpoint
    status           text NOT NULL CHECK (status IN ('pending', 'sending', 'sent', 'retrying', 'dead', 'skipped')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    claimed_until    timestamptz,          -- the lease of the worker holding it
    last_error       text,
    sent_at          timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE NULLS NOT DISTINCT (tenant_id, notification_key, endpoint_id)
);
CREATE INDEX deliveries_by_alert ON deliveries (tenant_id, alert_id);
-- What workers scan: work that is due, and leases that may have expired.
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status IN ('pending', 'retrying');
CREATE INDEX deliveries_leased ON deliveries (claimed_until) WHERE status = 'sending';
CREATE INDEX deliveries_dead ON deliveries (tenant_id, id) WHERE status = 'dead';
