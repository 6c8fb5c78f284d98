-- Credentials that end streams, a tenant's share of stream slots, reads with
-- an API key under a bucket, and secrets at rest bound to their row
-- (docs/design/stream.md, "Credentials"; docs/design/limits.md; the
-- secrets module's doc, server/src/tenants/secrets.rs).
--
-- Expand-only (ARCHITECTURE.md, "Rolling upgrades"): new nullable columns, a
-- new table and a wider CHECK, all of which an older binary ignores.

-- A stream ticket carries the credential it was bought with, so the stream it
-- opens ends when that credential does (its expiry; a revocation of the
-- user's tokens after `credential_issued_at`; its signing key's retirement).
-- NULL on tickets minted by an older binary: their stream ends at the
-- ticket's own expiry plus the longest token lifetime, as a token's would.
ALTER TABLE stream_tickets
    ADD COLUMN credential_issued_at  timestamptz,
    ADD COLUMN credential_expires_at timestamptz,
    ADD COLUMN signing_key_id        text;

-- A tenant's own cap on open streams per instance; NULL: the server's share
-- (TIDINGS_STREAM_TENANT_SHARE_PERCENT of TIDINGS_STREAM_MAX_CONNECTIONS).
ALTER TABLE tenants
    ADD COLUMN max_open_streams integer CHECK (max_open_streams >= 1);

-- Reads with an API key have a bucket of their own.
ALTER TABLE tenant_rate_limits DROP CONSTRAINT tenant_rate_limits_bucket_check;
ALTER TABLE tenant_rate_limits ADD CONSTRAINT tenant_rate_limits_bucket_check
    CHECK (bucket IN ('writes', 'reads', 'user_reads', 'stream_connects',
                      'user_stream_connects', 'key_reads'));

-- Set by the first start that sealed every stored secret bound to its row
-- (envelope v2). From then on an unbound value (legacy plaintext, or an
-- envelope v1, bound to its purpose only) is refused rather than sealed:
-- nothing legitimate writes one any more, so one that appears was put there.
CREATE TABLE secrets_bound (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    bound_at timestamptz NOT NULL DEFAULT now()
);
