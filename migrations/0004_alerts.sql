-- Transactional alerts: fan-out on write (ARCHITECTURE.md, invariants 4-8).

-- Contact data for recipients.
CREATE TABLE users (
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    user_id      text NOT NULL,
    email        text,
    display_name text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);

-- Standard Webhooks endpoints. During a rotation the previous secret keeps signing
-- (a second signature) until previous_secret_expires_at.
CREATE TABLE webhook_endpoints (
    tenant_id                  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id                         uuid NOT NULL,
    url                        text NOT NULL,
    description                text,
    event_types                text[],          -- NULL: every event type
    secret                     text NOT NULL,   -- whsec_<base64>
    previous_secret            text,
    previous_secret_expires_at timestamptz,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE alerts (
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id          uuid NOT NULL,
    event_type  text NOT NULL,
    entity_id   text NOT NULL,
    subject     text,
    payload     jsonb NOT NULL,
    channels    text[] NOT NULL,
    team_id     text,                            -- set when the audience is a team
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- Invariant 4: one notification per (tenant, event type, entity, recipient, channel).
-- `key` is the core's SHA-256 digest (hex) of exactly that tuple; the unique
-- constraint, not any lock, is what guarantees it.
CREATE TABLE notifications (
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key          text NOT NULL,
    readable_key text NOT NULL,
    alert_id     uuid NOT NULL,
    event_type   text NOT NULL,
    entity_id    text NOT NULL,
    recipient_id text NOT NULL,
    channel      text NOT NULL CHECK (channel IN ('in_app', 'email', 'webhook')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX notifications_by_alert ON notifications (tenant_id, alert_id);

-- In-app alerts as feed items: same position scheme as activity events
-- (invariant 2), so the feed serves both with one cursor.
CREATE TABLE inbox_items (
    tenant_id        uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id               bigint NOT NULL DEFAULT nextval('feed_item_id_seq'),
    tx               bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
    recipient_id     text NOT NULL,
    notification_key text NOT NULL,
    alert_id         uuid NOT NULL,
    type             text NOT NULL,
    entity_id        text NOT NULL,
    subject          text,
    payload          jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, notification_key)
);
CREATE INDEX inbox_items_feed ON inbox_items (tenant_id, recipient_id, tx, id);

-- Idempotency-Key header: the first response is stored with a fingerprint of the
-- request; status_code NULL means the first request is still in flight.
CREATE TABLE idempotency_keys (
    tenant_id     uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    path          text NOT NULL,
    key           text NOT NULL,
    fingerprint   bytea NOT NULL,
    status_code   smallint,
    response_body bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    PRIMARY KEY (tenant_id, path, key)
);
CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);

-- The inbox of the idempotent consumer (invariant 8): a broker message id is
-- recorded in the same transaction as the alert it creates.
CREATE TABLE inbox_messages (
    message_id  text PRIMARY KEY,
    tenant_id   uuid REFERENCES tenants (id) ON DELETE CASCADE,
    alert_id    uuid,
    received_at timestamptz NOT NULL DEFAULT now()
);
