-- Hardening: the NATS inbox keyed by tenant, per-user token
-- revocation, and signing-secret rotation.

-- The NATS inbox: the tenant comes from the message's subject and message ids
-- are per tenant, so one publisher cannot pre-claim another tenant's ids.
-- Rows without a tenant were poison messages naming no existing tenant; such
-- messages are now only logged (there is no tenant to file them under).
DELETE FROM inbox_messages WHERE tenant_id IS NULL;
ALTER TABLE inbox_messages DROP CONSTRAINT inbox_messages_pkey;
ALTER TABLE inbox_messages ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE inbox_messages ADD PRIMARY KEY (tenant_id, message_id);

-- Per-user revocation: user tokens of (tenant, user) issued before
-- `not_before` (their `iat`) are refused. Set through
-- POST /v1/users/{user_id}/revoke-tokens; only ever moves forward.
CREATE TABLE user_token_cutoffs (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    user_id    text NOT NULL,
    not_before timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);

-- Signing-secret rotation: each secret has a key id (`kid` in a token's
-- header). A rotation keeps the previous secret verifying until
-- `previous_signing_expires_at`, so tokens already handed out stay valid
-- through the overlap. Secrets are stored encrypted by the server
-- (`tdenc:` envelopes, see server/src/secrets.rs); rows written before that
-- are encrypted at start-up.
ALTER TABLE tenants
    ADD COLUMN signing_key_id              text NOT NULL DEFAULT 'k0',
    ADD COLUMN previous_signing_secret     text,
    ADD COLUMN previous_signing_key_id     text,
    ADD COLUMN previous_signing_expires_at timestamptz;
