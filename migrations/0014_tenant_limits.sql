-- Limits per tenant: a tenant's own token-bucket rates, where they
-- differ from the server's defaults (TIDINGS_RATE_*). One row per bucket the
-- operator set (PUT /v1/admin/tenants/{id}/rate-limits); a bucket without a
-- row takes the default. Every instance reads the rows (cached for seconds)
-- and keeps its buckets in memory (ARCHITECTURE.md, "Limits per tenant").
--
-- Expand-only: a new table, which an older binary ignores (ARCHITECTURE.md,
-- "Rolling upgrades").
CREATE TABLE tenant_rate_limits (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    bucket     text NOT NULL CHECK (bucket IN ('writes', 'reads', 'user_reads',
                                               'stream_connects', 'user_stream_connects')),
    -- Tokens added per second; 0: unlimited.
    per_second double precision NOT NULL CHECK (per_second >= 0 AND per_second < 'Infinity'),
    burst      integer NOT NULL CHECK (burst >= 1),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, bucket)
);
