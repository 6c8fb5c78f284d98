-- Alerts, part two: background team expansion, idempotency leases, inbox outcomes.

-- A team alert whose audience is larger than the inline limit is expanded by a
-- background worker in batches (tidings_core::fanout::Strategy::WriteInBatches).
-- Each batch runs in its own transaction that also advances `after_user_id`, so a
-- crash loses at most the batch in flight, which is then redone; the unique key of
-- `notifications` keeps exactly one delivery per key whatever is redone.
CREATE TABLE alert_expansions (
    tenant_id     uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    alert_id      uuid NOT NULL,
    team_id       text NOT NULL,
    -- Keyset cursor over memberships.user_id: the last member already expanded.
    after_user_id text,
    done          boolean NOT NULL DEFAULT false,
    expanded      bigint NOT NULL DEFAULT 0,   -- members processed so far
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, alert_id),
    FOREIGN KEY (tenant_id, alert_id) REFERENCES alerts (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX alert_expansions_open ON alert_expansions (created_at) WHERE NOT done;

-- Idempotency-Key: the first request takes a lease in its own short, committed
-- transaction, so a concurrent duplicate sees it at once and gets 409 instead of
-- blocking on the unique index. The alert's writes and the saved response commit
-- together, guarded by `owner`; a crashed first request's lease expires and a retry
-- takes over.
ALTER TABLE idempotency_keys
    ADD COLUMN owner        uuid,
    ADD COLUMN locked_until timestamptz;

-- Poison messages are recorded too (outcome 'rejected' with the reason), so that an
-- operator can find them and a redelivery is recognised without re-parsing.
ALTER TABLE inbox_messages
    ADD COLUMN outcome text NOT NULL DEFAULT 'created' CHECK (outcome IN ('created', 'duplicate', 'rejected')),
    ADD COLUMN error   text;

-- Operators page through deliveries of any status.
CREATE INDEX deliveries_by_status ON deliveries (tenant_id, status, id);
