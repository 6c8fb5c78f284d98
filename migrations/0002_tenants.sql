-- Tenants and their credentials (ARCHITECTURE.md, invariant 9: tenant and user come from
-- the credential, never from a request body).

CREATE TABLE tenants (
    id             uuid PRIMARY KEY,
    name           text NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
    -- HS256 secret the tenant's backend signs user tokens with. Stored as is: the
    -- server must be able to verify signatures with it.
    signing_secret text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- API keys are shown once and stored only as SHA-256 hashes. A key is valid until
-- revoked, so a rotation can overlap old and new keys.
CREATE TABLE api_keys (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id         uuid NOT NULL,
    key_hash   bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
