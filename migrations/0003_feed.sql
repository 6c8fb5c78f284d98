-- The activity feed: events stored once per team, feeds computed at read time by
-- joining memberships (ARCHITECTURE.md, invariants 1-3).
--
-- Positions: every feed item has (tx, id) where tx is the id of the transaction
-- that wrote it (xid8 as bigint; 64 bits, never wraps) and id comes from the one
-- sequence shared by all feed sources. A feed serves only rows whose tx is below
-- the reading statement's snapshot xmin: every transaction below xmin has ended,
-- so no row can appear below a position a client has already been given.

-- A member sees the team's events whose position is greater than the position of
-- the membership's own write (joined_tx, joined_id): events of transactions that
-- started writing after the join. Re-adding an existing member keeps the original
-- join position.
CREATE TABLE memberships (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    team_id    text NOT NULL,
    user_id    text NOT NULL,
    joined_tx  bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
    joined_id  bigint NOT NULL DEFAULT nextval('feed_item_id_seq'),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, team_id, user_id)
);
-- A user's teams: what the feed query starts from (and what the cache holds).
CREATE INDEX memberships_by_user ON memberships (tenant_id, user_id);

-- Invariant 1: one row per event whatever the size of its team.
CREATE TABLE events (
    tenant_id           uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id                  bigint NOT NULL DEFAULT nextval('feed_item_id_seq'),
    tx                  bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
    team_id             text NOT NULL,
    type                text NOT NULL,
    actor_id            text,
    object_id           text,
    payload             jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    created_at          timestamptz NOT NULL DEFAULT now(),
    -- Producer-chosen key: a retry with the same body answers with the original
    -- event; the fingerprint (SHA-256 of the request's canonical form) tells a
    -- retry from a different request that reuses the key.
    idempotency_key     text,
    request_fingerprint bytea,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, idempotency_key),
    CHECK ((idempotency_key IS NULL) = (request_fingerprint IS NULL))
);
-- The feed reads each team backwards from a position: one bounded index range scan
-- per membership, merged in (tx, id) order.
CREATE INDEX events_team_position ON events (tenant_id, team_id, tx, id);

-- Seen and read watermarks (invariant 3). Only ever moved forward, by an upsert
-- whose WHERE compares row values, so a late or replayed request cannot move one back.
CREATE TABLE feed_state (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    user_id    text NOT NULL,
    seen_tx    bigint NOT NULL DEFAULT 0,
    seen_id    bigint NOT NULL DEFAULT 0,
    read_tx    bigint NOT NULL DEFAULT 0,
    read_id    bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);

-- Items read one by one above the read watermark. Bounded per user by the core's
-- MAX_INDIVIDUAL_READS; entries at or below the read watermark are pruned when it
-- advances. item_id is an events.id or inbox_items.id (one sequence, so unique).
CREATE TABLE item_reads (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    user_id    text NOT NULL,
    item_id    bigint NOT NULL,
    tx         bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, item_id)
);
